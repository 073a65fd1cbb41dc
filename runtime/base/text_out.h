/* A bounded text writer: appends what fits in the caller's buffer and counts all of it, so
 * that a caller learns how much a too-small buffer needed (the metrics text of the core and of
 * the start-up library). Numbers are written with integer arithmetic: exact, and without the
 * C library's printf or locale. */
#ifndef KEEL_TEXT_OUT_H
#define KEEL_TEXT_OUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fmt_int.h"

struct text_out {
	char *buf;
	size_t cap, len; /* len: what the whole text needs, past cap too */
};

static inline void text_put(struct text_out *o, const char *s, size_t n)
{
	if (o->len < o->cap) {
		size_t room = o->cap - o->len;
		memcpy(o->buf + o->len, s, n < room ? n : room);
	}
	o->len += n;
}

static inline void text_puts(struct text_out *o, const char *s)
{
	text_put(o, s, strlen(s));
}

static inline void text_u64(struct text_out *o, uint64_t v)
{
	char d[FMT_U64_MAX];
	text_put(o, d, fmt_u64(d, v));
}

/* num / den (den a power of ten up to 1e9) as a decimal, trailing zeros dropped: 1500000 /
 * 1e9 is "0.0015". */
static inline void text_frac(struct text_out *o, uint64_t num, uint64_t den)
{
	text_u64(o, num / den);
	uint64_t rem = num % den;
	char d[10] = {'.'};
	unsigned k = 1;
	for (; k < 10 && rem != 0; k++) {
		rem *= 10; /* rem < den <= 1e9: no overflow */
		d[k] = (char)('0' + rem / den);
		rem %= den;
	}
	if (k > 1)
		text_put(o, d, k);
}

/* ns as seconds, exactly: 1500 is "0.0000015". */
static inline void text_seconds(struct text_out *o, uint64_t ns)
{
	text_frac(o, ns, 1000000000ull);
}

#endif
