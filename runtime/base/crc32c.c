/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78) for the wire format.
 * Carry-less multiplies on 512-bit registers (VPCLMULQDQ, AVX-512) for inputs of 256 bytes and
 * up where the CPU has them, SSE4.2 crc32 instructions when the build targets them, a
 * table-driven loop otherwise. Pure function of its arguments: no allocation, no mutable
 * state, thread-safe. */
#include <stdint.h>
#include <string.h>

#include "assert_int.h"
#include "crc32c_int.h"

/*
 * Notation. A CRC register value r is "reflected": bit k holds the coefficient of x^(31-k).
 * Feeding one byte d computes r' = (r ^ d) * x^8 mod P, and feeding n zero bytes multiplies r
 * by x^(8n) mod P. Because the register update is linear, the register after A||B started
 * from r equals (register after A from r) * x^(8|B|) mod P ^ (register after B from 0).
 * That is what lets the hardware path run three independent streams and join them.
 */
#define CRC32C_POLY 0x82F63B78u

#ifdef __SSE4_2__
#include <nmmintrin.h>

/*
 * Three streams of `len` bytes each, joined by multiplying by x^(8*len) mod P. The constants
 * are that power in reflected form, made by this generator (python3):
 *
 *	P = 0x82F63B78
 *	def times_x(c): return (c >> 1) ^ (P if c & 1 else 0)
 *	c = 0x80000000                # the polynomial 1
 *	for _ in range(8 * len): c = times_x(c)
 *
 * Bigger blocks amortise the join (two multiplies, ~30 cycles) better; smaller ones let a
 * 9000-byte jumbo datagram still run mostly three-wide. Every block length is a multiple of 8.
 *
 * Carry-less multiply of the register by a fixed k, four bits of the register at a time:
 * nib[i] = i (as a 4-bit polynomial) times k, built at compile time from k alone.
 */
#define CLMUL4(i, k)                                                                               \
	((((i)&1u) ? (uint64_t)(k) : 0) ^ (((i)&2u) ? (uint64_t)(k) << 1 : 0) ^                    \
	 (((i)&4u) ? (uint64_t)(k) << 2 : 0) ^ (((i)&8u) ? (uint64_t)(k) << 3 : 0))
#define NIBBLES(k)                                                                                 \
	{                                                                                          \
		CLMUL4(0u, k), CLMUL4(1u, k), CLMUL4(2u, k), CLMUL4(3u, k), CLMUL4(4u, k),         \
		    CLMUL4(5u, k), CLMUL4(6u, k), CLMUL4(7u, k), CLMUL4(8u, k), CLMUL4(9u, k),     \
		    CLMUL4(10u, k), CLMUL4(11u, k), CLMUL4(12u, k), CLMUL4(13u, k),                \
		    CLMUL4(14u, k), CLMUL4(15u, k)                                                 \
	}

struct shift_op {
	size_t len;	  /* bytes per stream */
	uint64_t nib[16]; /* nib[i] = clmul(i, x^(8*len) mod P) */
};

/* Largest first: the loop takes as many big rounds as fit, then smaller ones. 448 is for
 * the 1 472-byte datagrams of a 1500-byte link (1 408 bytes of payload: 3 x 448 and 64 left,
 * where 256 alone left 640 to one stream), 128 for what is left of others. */
static const struct shift_op shift_ops[] = {
    {.len = 4096, .nib = NIBBLES(0x35D73A62u)}, {.len = 1024, .nib = NIBBLES(0xE4172B16u)},
    {.len = 448, .nib = NIBBLES(0xE744DCB2u)},	{.len = 256, .nib = NIBBLES(0x88E56F72u)},
    {.len = 128, .nib = NIBBLES(0xB8FDB1E7u)},
};
#define SHIFT_OP_COUNT (sizeof(shift_ops) / sizeof(shift_ops[0]))

_Static_assert(sizeof(uint64_t) == 8, "8-byte steps");

/* r * x^(8*op->len) mod P. The 63-bit carry-less product, shifted up by one, is a 64-bit
 * reflected value; its low word times x^32 is folded in by one crc32 instruction. */
static uint32_t shift(const struct shift_op *op, uint32_t r)
{
	uint64_t prod = 0;

	KEEL_ASSERT_DEBUG(op >= shift_ops && op < shift_ops + SHIFT_OP_COUNT);
	for (unsigned i = 0; i < 8; i++)
		prod ^= op->nib[(r >> (4 * i)) & 0xfu] << (4 * i);
	prod <<= 1;
	return (uint32_t)_mm_crc32_u32(0, (uint32_t)prod) ^ (uint32_t)(prod >> 32);
}

static uint64_t load64(const unsigned char *p)
{
	uint64_t v;

	KEEL_ASSERT_DEBUG(p != NULL);
	memcpy(&v, p, sizeof(v)); /* one unaligned mov; avoids alignment and aliasing UB */
	return v;
}

static uint32_t crc_words(uint32_t r, const unsigned char *p, size_t word_count)
{
	uint64_t r64 = r;

	KEEL_ASSERT_DEBUG(p != NULL || word_count == 0);
	/* crc_raw aligned p first and advanced it by multiples of 8 since */
	KEEL_ASSERT_DEBUG(((uintptr_t)p & 7u) == 0 || word_count == 0);
	for (size_t i = 0; i < word_count; i++)
		r64 = _mm_crc32_u64(r64, load64(p + 8 * i));
	return (uint32_t)r64;
}

static uint32_t crc_narrow(uint32_t r, const unsigned char *p, size_t len)
{
	KEEL_ASSERT_DEBUG(p != NULL || len == 0);
	/* Bytes up to an 8-byte boundary, so the word loads never straddle two cache lines. */
	while (len > 0 && ((uintptr_t)p & 7u) != 0) {
		r = _mm_crc32_u8(r, *p++);
		len--;
	}
	KEEL_ASSERT_DEBUG(len == 0 || ((uintptr_t)p & 7u) == 0);
	/* A header (most calls) is too short for any block: straight to one stream. */
	for (size_t k = len >= 3 * shift_ops[SHIFT_OP_COUNT - 1].len ? 0 : SHIFT_OP_COUNT;
	     k < SHIFT_OP_COUNT; k++) {
		const struct shift_op *op = &shift_ops[k];
		size_t blk = op->len;

		/* whole words per stream, so p stays aligned; largest first */
		KEEL_ASSERT_DEBUG(blk != 0 && blk % 8 == 0);
		KEEL_ASSERT_DEBUG(k == 0 || blk < shift_ops[k - 1].len);
		while (len >= 3 * blk) {
			uint64_t a = r, b = 0, c = 0;

			for (size_t off = 0; off < blk; off += 8) {
				a = _mm_crc32_u64(a, load64(p + off));
				b = _mm_crc32_u64(b, load64(p + blk + off));
				c = _mm_crc32_u64(c, load64(p + 2 * blk + off));
			}
			/* O(n): the joined streams equal one stream over the same bytes. */
			KEEL_ASSERT_DEBUG((shift(op, shift(op, (uint32_t)a) ^ (uint32_t)b) ^
					   (uint32_t)c) == crc_words(r, p, 3 * blk / 8));
			r = shift(op, shift(op, (uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
			p += 3 * blk;
			len -= 3 * blk;
		}
	}
	r = crc_words(r, p, len / 8);
	p += len & ~(size_t)7;
	len &= 7;
	while (len > 0) {
		r = _mm_crc32_u8(r, *p++);
		len--;
	}
	return r;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_WIDE 1

/*
 * Folding (after Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"):
 * 128-bit lanes of the input are multiplied forward onto later ones, 16 lanes in flight in
 * four 512-bit registers, so the carry-less multiplier, not a chain of crc32 steps, sets the
 * pace (2.9x the three crc32 streams above on 1 408 bytes, 2.1x on 64 KiB, docs/perf-history.md).
 *
 * In the notation above, a lane loaded from memory is a reflected 128-bit value a: bit t holds
 * the coefficient of x^(127-t). Its low quadword is the high part aH (times x^64), its high
 * quadword the low part aL. Moving the lane D bits on replaces a * x^D by
 *	aH * (x^(D+64) mod P) + aL * (x^D mod P),
 * both below degree 96, so the result is a lane again. A carry-less multiply of two reflected
 * 64-bit values read as a reflected 128-bit value is the product times x, so the constants are
 * x^(D+63) and x^(D-1) mod P, each a 32-bit reflected value in the top half of its quadword
 * (made with the generator above). The last lane l leaves the register l * x^32 mod P: the
 * crc32 of its 16 bytes from 0.
 */
#define FOLD_K(lo32, hi32)                                                                         \
	{                                                                                          \
		(long long)((uint64_t)(lo32) << 32), (long long)((uint64_t)(hi32) << 32)           \
	}
static const long long fold_2048[2] = FOLD_K(0xE9A5D8BEu, 0x1426A815u); /* 256 bytes on */
static const long long fold_512[2] = FOLD_K(0x1C19243Bu, 0x75BBA45Bu);	/* 64 bytes on */
/* the four lanes of one register onto its last: 48, 32 and 16 bytes on, and a lane unused */
static const long long fold_lanes[8] = {(long long)((uint64_t)0xA46EF4AAu << 32),
					(long long)((uint64_t)0x6051243Fu << 32),
					(long long)((uint64_t)0x33CCBBBCu << 32),
					(long long)((uint64_t)0xA2158B34u << 32),
					(long long)((uint64_t)0x3743F7BDu << 32),
					(long long)((uint64_t)0x3171D430u << 32),
					0,
					0};
#define WIDE_MIN 256u /* four registers' worth: the first load */

#define WIDE_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))

WIDE_TARGET static __m512i fold(__m512i a, __m512i k)
{
	return _mm512_xor_si512(_mm512_clmulepi64_epi128(a, k, 0x00),
				_mm512_clmulepi64_epi128(a, k, 0x11));
}

WIDE_TARGET static __m512i fold_in(__m512i a, __m512i k, const unsigned char *p)
{
	return _mm512_xor_si512(fold(a, k), _mm512_loadu_si512((const void *)p));
}

/* len >= WIDE_MIN. Folds whole 64-byte blocks; the rest (under 64 bytes) goes to crc_narrow. */
WIDE_TARGET static uint32_t crc_wide(uint32_t r, const unsigned char *p, size_t len)
{
	const __m512i k2048 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)fold_2048));
	const __m512i k512 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)fold_512));
	__m512i a0, a1, a2, a3;

	KEEL_ASSERT_DEBUG(p != NULL && len >= WIDE_MIN);
	/* the register so far joins the first 32 bits of the input */
	a0 = _mm512_xor_si512(_mm512_loadu_si512((const void *)p),
			      _mm512_maskz_set1_epi32(1, (int)r));
	a1 = _mm512_loadu_si512((const void *)(p + 64));
	a2 = _mm512_loadu_si512((const void *)(p + 128));
	a3 = _mm512_loadu_si512((const void *)(p + 192));
	p += 256;
	len -= 256;
	while (len >= 256) {
		a0 = fold_in(a0, k2048, p);
		a1 = fold_in(a1, k2048, p + 64);
		a2 = fold_in(a2, k2048, p + 128);
		a3 = fold_in(a3, k2048, p + 192);
		p += 256;
		len -= 256;
	}
	a0 = _mm512_xor_si512(fold(a0, k512), a1);
	a0 = _mm512_xor_si512(fold(a0, k512), a2);
	a0 = _mm512_xor_si512(fold(a0, k512), a3);
	while (len >= 64) {
		a0 = fold_in(a0, k512, p);
		p += 64;
		len -= 64;
	}
	__m512i lanes = fold(a0, _mm512_loadu_si512((const void *)fold_lanes));
	__m128i l =
	    _mm_xor_si128(_mm512_castsi512_si128(lanes), _mm512_extracti32x4_epi32(lanes, 1));
	l = _mm_xor_si128(l, _mm512_extracti32x4_epi32(lanes, 2));
	l = _mm_xor_si128(l, _mm512_extracti32x4_epi32(a0, 3));
	r = (uint32_t)_mm_crc32_u64(_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(l)),
				    (uint64_t)_mm_extract_epi64(l, 1));
	return crc_narrow(r, p, len);
}

static bool wide_available(void)
{
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
}
#endif /* x86-64 with GCC or Clang */

static uint32_t crc_raw(uint32_t r, const unsigned char *p, size_t len)
{
#ifdef HAVE_WIDE
	if (len >= WIDE_MIN && wide_available())
		return crc_wide(r, p, len);
#endif
	return crc_narrow(r, p, len);
}

#else /* !__SSE4_2__ */

/*
 * Byte-at-a-time table. The table is linear in its index, so entry i is the XOR of the
 * entries for i's set bits; those eight come from the polynomial by repeated times_x
 * steps, and the static asserts check each against its neighbour.
 */
#define TIMES_X(c) (((c) >> 1) ^ (((c)&1u) ? CRC32C_POLY : 0u))
#define T7	   CRC32C_POLY
#define T6	   0x417B1DBCu
#define T5	   0x20BD8EDEu
#define T4	   0x105EC76Fu
#define T3	   0x8AD958CFu
#define T2	   0xC79A971Fu
#define T1	   0xE13B70F7u
#define T0	   0xF26B8303u
_Static_assert(T6 == TIMES_X(T7), "table base");
_Static_assert(T5 == TIMES_X(T6), "table base");
_Static_assert(T4 == TIMES_X(T5), "table base");
_Static_assert(T3 == TIMES_X(T4), "table base");
_Static_assert(T2 == TIMES_X(T3), "table base");
_Static_assert(T1 == TIMES_X(T2), "table base");
_Static_assert(T0 == TIMES_X(T1), "table base");

#define E(i)                                                                                       \
	((((i)&1u) ? T0 : 0u) ^ (((i)&2u) ? T1 : 0u) ^ (((i)&4u) ? T2 : 0u) ^                      \
	 (((i)&8u) ? T3 : 0u) ^ (((i)&16u) ? T4 : 0u) ^ (((i)&32u) ? T5 : 0u) ^                    \
	 (((i)&64u) ? T6 : 0u) ^ (((i)&128u) ? T7 : 0u))
#define E4(i)  E(i), E((i) + 1u), E((i) + 2u), E((i) + 3u)
#define E16(i) E4(i), E4((i) + 4u), E4((i) + 8u), E4((i) + 12u)
#define E64(i) E16(i), E16((i) + 16u), E16((i) + 32u), E16((i) + 48u)

static const uint32_t crc_table[256] = {E64(0u), E64(64u), E64(128u), E64(192u)};
_Static_assert(E(0u) == 0u && E(128u) == CRC32C_POLY, "the table is linear in its index");

static uint32_t crc_raw(uint32_t r, const unsigned char *p, size_t len)
{
	KEEL_ASSERT_DEBUG(p != NULL || len == 0);
	for (size_t i = 0; i < len; i++)
		r = (r >> 8) ^ crc_table[(r ^ p[i]) & 0xffu];
	return r;
}

#endif /* __SSE4_2__ */

uint32_t crc32c(uint32_t crc, const void *data, size_t len)
{
	if (len == 0)
		return crc;
	KEEL_ASSERT(data != NULL);
	return ~crc_raw(~crc, data, len);
}

uint32_t crc32c_then_zeros(uint32_t crc, const void *data, size_t len, size_t zeros)
{
	KEEL_ASSERT(data != NULL || len == 0);
#ifdef __SSE4_2__
	/* one call for a header whose CRC field counts as zero: no pass through a zero buffer */
	uint64_t r = len == 0 ? ~crc : crc_narrow(~crc, data, len);
	for (; zeros >= 8; zeros -= 8)
		r = _mm_crc32_u64(r, 0);
	for (; zeros > 0; zeros--)
		r = _mm_crc32_u8((uint32_t)r, 0);
	return ~(uint32_t)r;
#else
	static const unsigned char zero[8];
	crc = crc32c(crc, data, len);
	for (; zeros > 0; zeros -= zeros < 8 ? zeros : 8)
		crc = crc32c(crc, zero, zeros < 8 ? zeros : 8);
	return crc;
#endif
}

uint32_t crc32c_narrow(uint32_t crc, const void *data, size_t len)
{
	if (len == 0)
		return crc;
	KEEL_ASSERT(data != NULL);
#ifdef __SSE4_2__
	return ~crc_narrow(~crc, data, len);
#else
	return ~crc_raw(~crc, data, len);
#endif
}

bool crc32c_wide_available(void)
{
#ifdef HAVE_WIDE
	return wide_available();
#else
	return false;
#endif
}
