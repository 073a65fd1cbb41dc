/* The one place an assertion failure goes: write a line to stderr and abort.
 * Uses write(2) only: no stdio buffers, no allocation. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "assert_int.h"

static void put(const char *s)
{
	ssize_t r = write(2, s, strlen(s));
	(void)r;
}

_Noreturn void keel_assert_fail(const char *expr, const char *file, int line)
{
	char num[16];
	int i = (int)sizeof(num) - 1;
	unsigned v = line > 0 ? (unsigned)line : 0u;
	num[i] = '\0';
	do {
		num[--i] = (char)('0' + v % 10u);
		v /= 10u;
	} while (v != 0u && i > 0);
	put("keel: assertion failed: ");
	put(expr);
	put(" at ");
	put(file);
	put(":");
	put(num + i);
	put("\n");
	abort();
}
