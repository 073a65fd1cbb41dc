/* Benchmark size arguments (size_arg.h). */
#include "size_arg.h"

#include <errno.h>
#include <stdlib.h>

int keel_size_arg(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || s[0] == '-')
		return -EINVAL;
	uint64_t mul = 1;
	if (*end == 'K' || *end == 'k')
		mul = 1ull << 10;
	else if (*end == 'M' || *end == 'm')
		mul = 1ull << 20;
	else if (*end == 'G' || *end == 'g')
		mul = 1ull << 30;
	else if (*end != '\0')
		return -EINVAL;
	if (mul != 1 && end[1] != '\0')
		return -EINVAL;
	if (v > UINT64_MAX / mul)
		return -EINVAL;
	*out = v * mul;
	return 0;
}
