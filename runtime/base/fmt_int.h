/* Decimal formatting without the C library's printf: the metrics text (core) and the trace
 * file (start-up library) write many numbers, and snprintf costs thousands of instructions
 * each (callgrind). */
#ifndef KEEL_FMT_INT_H
#define KEEL_FMT_INT_H

#include <stdint.h>

#define FMT_U64_MAX 20u /* digits of UINT64_MAX */

/* The decimal digits of v into out, most significant first, no NUL; returns how many. */
static inline unsigned fmt_u64(char out[FMT_U64_MAX], uint64_t v)
{
	char rev[FMT_U64_MAX];
	unsigned n = 0;
	do {
		rev[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	for (unsigned i = 0; i < n; i++)
		out[i] = rev[n - 1 - i];
	return n;
}

#endif
