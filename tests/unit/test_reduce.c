/* Unit tests for the CPU reduction kernels (runtime/core/reduce.c) and dtype names
 * (runtime/core/types.c).
 * Every kernel is checked against a plain scalar reference written here, with its own f16/bf16
 * conversions (ldexp/nearbyint, not bit tricks). Seeded: the seed is printed first; SEED=n
 * replays a run. */
/* cmocka.h needs these four first, in this order. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "keel/types.h"
#include "reduce_int.h"

/* ---- Seeded randomness (splitmix64) ---- */

static uint64_t seed;
static uint64_t rng_state;

static uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static uint32_t rng_below(uint32_t n)
{
	return (uint32_t)(rng_next() % n);
}

/* ---- Bits and reference conversions ---- */

static uint32_t bits_f32(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float f32_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static double f64_of(uint64_t u)
{
	double f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static float ref_f16_decode(uint16_t h)
{
	int e = (h >> 10) & 0x1f;
	int m = h & 0x3ff;
	float mag;

	if (e == 31)
		mag = m ? NAN : INFINITY;
	else if (e == 0)
		mag = ldexpf((float)m, -24);
	else
		mag = ldexpf((float)(1024 + m), e - 25);
	return (h & 0x8000) ? -mag : mag;
}

/* Generic IEEE encoder for a narrow format with `mant_bits` stored mantissa bits, exponent
 * bias `bias` and all-ones exponent `exp_max`; round to nearest even through nearbyint. */
static uint16_t ref_encode(float f, int mant_bits, int bias, int exp_max, uint16_t qnan)
{
	uint16_t sign = signbit(f) ? 0x8000 : 0; /* both formats are 16 bits wide */
	double x = fabs((double)f);
	int emin = 1 - bias;
	double q;
	int e;

	if (isnan(f))
		return (uint16_t)(sign | qnan);
	if (x < ldexp(1.0, emin)) {
		/* Subnormal range: count steps of 2^(emin - mant_bits); may round up to the min
		 * normal. */
		q = nearbyint(ldexp(x, mant_bits - emin));
		return (uint16_t)(sign | (uint16_t)q);
	}
	if (isinf(f))
		return (uint16_t)(sign | (exp_max << mant_bits));
	(void)frexp(x, &e);
	e -= 1; /* x = 1.m * 2^e */
	q = nearbyint(ldexp(x, mant_bits - e));
	if (q >= ldexp(1.0, mant_bits + 1)) {
		q /= 2;
		e += 1;
	}
	if (e + bias >= exp_max)
		return (uint16_t)(sign | (exp_max << mant_bits));
	return (uint16_t)(sign | ((e + bias) << mant_bits) | ((uint32_t)q - (1u << mant_bits)));
}

static uint16_t ref_f16_encode(float f)
{
	return ref_encode(f, 10, 15, 31, 0x7e00);
}

static float ref_bf16_decode(uint16_t h)
{
	return f32_of((uint32_t)h << 16);
}

static uint16_t ref_bf16_encode(float f)
{
	return ref_encode(f, 7, 127, 255, 0x7fc0);
}

static bool f16_is_nan(uint16_t h)
{
	return (h & 0x7fff) > 0x7c00;
}

static bool bf16_is_nan(uint16_t h)
{
	return (h & 0x7fff) > 0x7f80;
}

/* ---- Reference reduction of one element ---- */

static double ref_minmax(double x, double y, bool want_max)
{
	if (isnan(x) || isnan(y))
		return NAN;
	if (x == y && x == 0) {
		/* -0 < +0 */
		if (want_max)
			return signbit(x) ? y : x;
		return signbit(x) ? x : y;
	}
	if (want_max)
		return x > y ? x : y;
	return x < y ? x : y;
}

static float ref_float_op(float x, float y, enum keel_redop op)
{
	switch (op) {
	case KEEL_SUM:
	case KEEL_AVG:
		return x + y;
	case KEEL_PROD:
		return x * y;
	case KEEL_MIN:
		return (float)ref_minmax(x, y, false);
	case KEEL_MAX:
		return (float)ref_minmax(x, y, true);
	default:
		fail_msg("bad op %d", (int)op);
	}
	return 0;
}

static double ref_double_op(double x, double y, enum keel_redop op)
{
	switch (op) {
	case KEEL_SUM:
	case KEEL_AVG:
		return x + y;
	case KEEL_PROD:
		return x * y;
	case KEEL_MIN:
		return ref_minmax(x, y, false);
	case KEEL_MAX:
		return ref_minmax(x, y, true);
	default:
		fail_msg("bad op %d", (int)op);
	}
	return 0;
}

static uint64_t ref_uint_op(uint64_t x, uint64_t y, enum keel_redop op, uint64_t mask)
{
	switch (op) {
	case KEEL_SUM:
	case KEEL_AVG:
		return (x + y) & mask;
	case KEEL_PROD:
		return (x * y) & mask;
	default:
		fail_msg("bad op %d", (int)op);
	}
	return 0;
}

static int64_t ref_int_minmax(int64_t x, int64_t y, enum keel_redop op)
{
	if (op == KEEL_MIN)
		return x < y ? x : y;
	return x > y ? x : y;
}

/* want = a op b for one element of dtype t, as bytes. */
static void ref_elem(void *want, const void *pa, const void *pb, enum keel_dtype t,
		     enum keel_redop op)
{
	float fa, fb, fr;
	double da, db, dr;
	uint16_t ha, hb, hr;
	int32_t ia, ib, ir;
	int64_t la, lb, lr;
	uint8_t ua, ub, ur;
	bool minmax = op == KEEL_MIN || op == KEEL_MAX;

	switch (t) {
	case KEEL_F32:
		memcpy(&fa, pa, 4);
		memcpy(&fb, pb, 4);
		fr = ref_float_op(fa, fb, op);
		memcpy(want, &fr, 4);
		break;
	case KEEL_F64:
		memcpy(&da, pa, 8);
		memcpy(&db, pb, 8);
		dr = ref_double_op(da, db, op);
		memcpy(want, &dr, 8);
		break;
	case KEEL_F16:
	case KEEL_BF16:
		memcpy(&ha, pa, 2);
		memcpy(&hb, pb, 2);
		if (t == KEEL_F16) {
			fr = ref_float_op(ref_f16_decode(ha), ref_f16_decode(hb), op);
			hr = ref_f16_encode(fr);
		} else {
			fr = ref_float_op(ref_bf16_decode(ha), ref_bf16_decode(hb), op);
			hr = ref_bf16_encode(fr);
		}
		memcpy(want, &hr, 2);
		break;
	case KEEL_I32:
		memcpy(&ia, pa, 4);
		memcpy(&ib, pb, 4);
		if (minmax)
			ir = (int32_t)ref_int_minmax(ia, ib, op);
		else
			ir = (int32_t)(uint32_t)ref_uint_op((uint32_t)ia, (uint32_t)ib, op,
							    0xffffffffu);
		memcpy(want, &ir, 4);
		break;
	case KEEL_I64:
		memcpy(&la, pa, 8);
		memcpy(&lb, pb, 8);
		if (minmax)
			lr = ref_int_minmax(la, lb, op);
		else
			lr = (int64_t)ref_uint_op((uint64_t)la, (uint64_t)lb, op, UINT64_MAX);
		memcpy(want, &lr, 8);
		break;
	case KEEL_U8:
		memcpy(&ua, pa, 1);
		memcpy(&ub, pb, 1);
		if (minmax)
			ur = (uint8_t)ref_int_minmax(ua, ub, op);
		else
			ur = (uint8_t)ref_uint_op(ua, ub, op, 0xff);
		memcpy(want, &ur, 1);
		break;
	default:
		fail_msg("bad dtype %d", (int)t);
	}
}

/* Equal bit for bit, except that any NaN matches any NaN; a NaN the kernel returns must be
 * quiet. */
static bool elem_matches(const void *got, const void *want, enum keel_dtype t)
{
	uint16_t hg, hw;
	uint32_t ug, uw;
	uint64_t lg, lw;
	size_t es = keel_dtype_size(t);

	switch (t) {
	case KEEL_F32:
		memcpy(&ug, got, 4);
		memcpy(&uw, want, 4);
		if (isnan(f32_of(uw)))
			return isnan(f32_of(ug)) && (ug & 0x00400000u);
		return ug == uw;
	case KEEL_F64:
		memcpy(&lg, got, 8);
		memcpy(&lw, want, 8);
		if (isnan(f64_of(lw)))
			return isnan(f64_of(lg)) && (lg & 0x0008000000000000u);
		return lg == lw;
	case KEEL_F16:
		memcpy(&hg, got, 2);
		memcpy(&hw, want, 2);
		if (f16_is_nan(hw))
			return f16_is_nan(hg) && (hg & 0x0200);
		return hg == hw;
	case KEEL_BF16:
		memcpy(&hg, got, 2);
		memcpy(&hw, want, 2);
		if (bf16_is_nan(hw))
			return bf16_is_nan(hg) && (hg & 0x0040);
		return hg == hw;
	default:
		return memcmp(got, want, es) == 0;
	}
}

/* ---- Random elements: raw bit patterns, specials, and ordinary values ---- */

static const uint32_t f32_specials[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
    0xffc00123u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x00800000u, 0x3f800000u,
};
static const uint64_t f64_specials[] = {
    0x0000000000000000u, 0x8000000000000000u, 0x7ff0000000000000u,
    0xfff0000000000000u, 0x7ff8000000000000u, 0x7ff0000000000001u,
    0x0000000000000001u, 0x7fefffffffffffffu, 0x3ff0000000000000u,
};
static const uint16_t f16_specials[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
					0x0001, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x3c00};
static const uint16_t bf16_specials[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81,
					 0x0001, 0x807f, 0x0080, 0x7f7f, 0xff7f, 0x3f80};
static const int64_t int_specials[] = {0,	  1,	     -1,  INT64_MAX, INT64_MIN,
				       INT32_MAX, INT32_MIN, 255, 128,	     127};

#define COUNT_OF(x) (sizeof(x) / sizeof((x)[0]))

static void random_elem(void *out, enum keel_dtype t)
{
	uint32_t kind = rng_below(8);
	uint64_t r = rng_next();
	/* Ordinary values: small integers over powers of two, so sums and products stay finite. */
	double nice = (double)((int32_t)rng_below(2001) - 1000) / (double)(1u << rng_below(12));
	int64_t iv = kind == 0 ? int_specials[rng_below(COUNT_OF(int_specials))] : (int64_t)r;
	float f;
	double d;
	uint16_t h;

	switch (t) {
	case KEEL_F32:
		f = kind == 0  ? f32_of(f32_specials[rng_below(COUNT_OF(f32_specials))])
		    : kind < 4 ? f32_of((uint32_t)r)
			       : (float)nice;
		memcpy(out, &f, 4);
		break;
	case KEEL_F64:
		d = kind == 0  ? f64_of(f64_specials[rng_below(COUNT_OF(f64_specials))])
		    : kind < 4 ? f64_of(r)
			       : nice;
		memcpy(out, &d, 8);
		break;
	case KEEL_F16:
		h = kind == 0  ? f16_specials[rng_below(COUNT_OF(f16_specials))]
		    : kind < 4 ? (uint16_t)r
			       : ref_f16_encode((float)nice);
		memcpy(out, &h, 2);
		break;
	case KEEL_BF16:
		h = kind == 0  ? bf16_specials[rng_below(COUNT_OF(bf16_specials))]
		    : kind < 4 ? (uint16_t)r
			       : ref_bf16_encode((float)nice);
		memcpy(out, &h, 2);
		break;
	case KEEL_I32:
	case KEEL_I64:
	case KEEL_U8:
		/* Little-endian: the low bytes of the 64-bit value. */
		memcpy(out, &iv, keel_dtype_size(t));
		break;
	default:
		fail_msg("bad dtype %d", (int)t);
	}
}

/* ---- Harness ---- */

enum alias_mode { OUT_OF_PLACE, DST_IS_A, DST_IS_B };

#define LEN_MAX	  1025u
#define GUARD	  64u
#define BUF_BYTES (LEN_MAX * 8u + 2u * GUARD + 8u)
#define CANARY	  0xa5u

static uint8_t buf_a[BUF_BYTES] __attribute__((aligned(64)));
static uint8_t buf_b[BUF_BYTES] __attribute__((aligned(64)));
static uint8_t buf_d[BUF_BYTES] __attribute__((aligned(64)));
static uint8_t copy_a[BUF_BYTES];
static uint8_t copy_b[BUF_BYTES];

static const size_t lengths[] = {0, 1, 3, 7, 15, 17, 31, 33, 63, 65, 1000, 1023, 1025};

static const char *mode_name(enum alias_mode mode)
{
	return mode == OUT_OF_PLACE ? "out-of-place" : mode == DST_IS_A ? "dst==a" : "dst==b";
}

/* Every byte of buf outside [start, start + len) still holds the canary. */
static void assert_guards(const uint8_t *buf, size_t start, size_t len, const char *what)
{
	for (size_t i = 0; i < BUF_BYTES; i++) {
		if (i >= start && i < start + len)
			continue;
		if (buf[i] != CANARY)
			fail_msg("seed %" PRIu64 ": %s byte %zu outside the elements was written",
				 seed, what, i);
	}
}

static void run_case(enum keel_dtype t, enum keel_redop op, size_t n, size_t off_a, size_t off_b,
		     size_t off_d, enum alias_mode mode)
{
	size_t es = keel_dtype_size(t);
	size_t start_a = GUARD + off_a, start_b = GUARD + off_b, start_d = GUARD + off_d;
	uint8_t *a = buf_a + start_a, *b = buf_b + start_b, *d = buf_d + start_d;
	uint8_t *dst = mode == OUT_OF_PLACE ? d : mode == DST_IS_A ? a : b;
	uint8_t want[8];

	assert_true(n <= LEN_MAX && es > 0);
	memset(buf_a, CANARY, BUF_BYTES);
	memset(buf_b, CANARY, BUF_BYTES);
	memset(buf_d, CANARY, BUF_BYTES);
	for (size_t i = 0; i < n; i++) {
		random_elem(a + i * es, t);
		random_elem(b + i * es, t);
	}
	memcpy(copy_a, buf_a, BUF_BYTES);
	memcpy(copy_b, buf_b, BUF_BYTES);

	reduce_apply(dst, a, b, n, t, op);

	for (size_t i = 0; i < n; i++) {
		ref_elem(want, copy_a + start_a + i * es, copy_b + start_b + i * es, t, op);
		if (!elem_matches(dst + i * es, want, t)) {
			uint64_t g = 0, w = 0, x = 0, y = 0;

			memcpy(&g, dst + i * es, es);
			memcpy(&w, want, es);
			memcpy(&x, copy_a + start_a + i * es, es);
			memcpy(&y, copy_b + start_b + i * es, es);
			fail_msg("seed %" PRIu64
				 ": %s %s n=%zu offsets a%zu b%zu d%zu %s: element %zu: "
				 "%#" PRIx64 " op %#" PRIx64 " gave %#" PRIx64 ", want %#" PRIx64,
				 seed, keel_dtype_name(t), keel_redop_name(op), n, off_a, off_b,
				 off_d, mode_name(mode), i, x, y, g, w);
		}
	}
	/* Inputs that are not the destination are untouched, and nothing outside is written. */
	if (mode != DST_IS_A)
		assert_memory_equal(buf_a, copy_a, BUF_BYTES);
	if (mode != DST_IS_B)
		assert_memory_equal(buf_b, copy_b, BUF_BYTES);
	assert_guards(buf_a, start_a, n * es, "a");
	assert_guards(buf_b, start_b, n * es, "b");
	assert_guards(buf_d, start_d, mode == OUT_OF_PLACE ? n * es : 0, "dst");
}

/* ---- Tests ---- */

static void test_reduce_every_dtype_op_and_length(void **state)
{
	(void)state;
	for (int t = 0; t < KEEL_DTYPE_COUNT; t++)
		for (int op = 0; op < KEEL_REDOP_COUNT; op++)
			for (size_t l = 0; l < COUNT_OF(lengths); l++)
				run_case((enum keel_dtype)t, (enum keel_redop)op, lengths[l], 0, 0,
					 0, OUT_OF_PLACE);
}

static void test_reduce_in_place(void **state)
{
	(void)state;
	for (int t = 0; t < KEEL_DTYPE_COUNT; t++)
		for (int op = 0; op < KEEL_REDOP_COUNT; op++)
			for (size_t l = 0; l < COUNT_OF(lengths); l++) {
				run_case((enum keel_dtype)t, (enum keel_redop)op, lengths[l], l % 8,
					 0, 0, DST_IS_A);
				run_case((enum keel_dtype)t, (enum keel_redop)op, lengths[l], 0,
					 l % 8, 0, DST_IS_B);
			}
}

static void test_reduce_unaligned_buffers(void **state)
{
	static const size_t lens[] = {31, 257};

	(void)state;
	for (int t = 0; t < KEEL_DTYPE_COUNT; t++)
		for (int op = 0; op < KEEL_REDOP_COUNT; op++)
			for (size_t l = 0; l < COUNT_OF(lens); l++)
				for (size_t o = 1; o < 8; o++) {
					size_t oa = o, ob = (o * 3) % 8, od = (o * 5 + 1) % 8;

					run_case((enum keel_dtype)t, (enum keel_redop)op, lens[l],
						 oa, ob, od, OUT_OF_PLACE);
					run_case((enum keel_dtype)t, (enum keel_redop)op, lens[l],
						 oa, ob, 0, DST_IS_A);
					run_case((enum keel_dtype)t, (enum keel_redop)op, lens[l],
						 oa, ob, 0, DST_IS_B);
				}
}

/* Every offset triple, on the dtypes whose kernels have the widest elements and the most
 * arithmetic. */
static void test_reduce_every_offset_combination(void **state)
{
	static const enum keel_dtype types[] = {KEEL_F32, KEEL_F64, KEEL_F16, KEEL_I64};

	(void)state;
	for (size_t t = 0; t < COUNT_OF(types); t++)
		for (size_t oa = 0; oa < 8; oa++)
			for (size_t ob = 0; ob < 8; ob++)
				for (size_t od = 0; od < 8; od++)
					run_case(types[t], KEEL_SUM, 65, oa, ob, od, OUT_OF_PLACE);
}

/* One element through reduce_apply; returns dst's bits. */
static uint64_t apply1(enum keel_dtype t, enum keel_redop op, uint64_t a, uint64_t b)
{
	uint64_t d = 0;

	reduce_apply(&d, &a, &b, 1, t, op);
	return d;
}

static void test_reduce_minmax_nan_inf_signed_zero(void **state)
{
	const uint64_t pz = 0x00000000u, nz = 0x80000000u, one = 0x3f800000u;
	const uint64_t inf = 0x7f800000u, ninf = 0xff800000u, snan = 0x7f800001u;

	(void)state;
	/* -0 < +0, in both argument orders. */
	assert_int_equal(apply1(KEEL_F32, KEEL_MAX, nz, pz), pz);
	assert_int_equal(apply1(KEEL_F32, KEEL_MAX, pz, nz), pz);
	assert_int_equal(apply1(KEEL_F32, KEEL_MIN, nz, pz), nz);
	assert_int_equal(apply1(KEEL_F32, KEEL_MIN, pz, nz), nz);
	assert_int_equal(apply1(KEEL_F64, KEEL_MAX, 0x8000000000000000u, 0), 0);
	assert_int_equal(apply1(KEEL_F64, KEEL_MIN, 0, 0x8000000000000000u), 0x8000000000000000u);
	assert_int_equal(apply1(KEEL_F16, KEEL_MAX, 0x8000, 0x0000), 0x0000);
	assert_int_equal(apply1(KEEL_F16, KEEL_MIN, 0x0000, 0x8000), 0x8000);
	assert_int_equal(apply1(KEEL_BF16, KEEL_MAX, 0x8000, 0x0000), 0x0000);
	assert_int_equal(apply1(KEEL_BF16, KEEL_MIN, 0x0000, 0x8000), 0x8000);
	/* Infinities order like numbers. */
	assert_int_equal(apply1(KEEL_F32, KEEL_MAX, ninf, one), one);
	assert_int_equal(apply1(KEEL_F32, KEEL_MIN, ninf, one), ninf);
	assert_int_equal(apply1(KEEL_F32, KEEL_MAX, inf, one), inf);
	assert_int_equal(apply1(KEEL_F16, KEEL_MIN, 0xfc00, 0xfbff), 0xfc00);
	/* NaN on either side wins, and comes out quiet (a signaling NaN is quieted). */
	for (int op = KEEL_MIN; op <= KEEL_MAX; op++) {
		uint64_t r1 = apply1(KEEL_F32, (enum keel_redop)op, snan, one);
		uint64_t r2 = apply1(KEEL_F32, (enum keel_redop)op, ninf, snan);
		uint64_t r3 =
		    apply1(KEEL_F64, (enum keel_redop)op, 0x7ff0000000000001u, 0x3ff0000000000000u);
		uint64_t r4 = apply1(KEEL_F16, (enum keel_redop)op, 0x3c00, 0x7c01);
		uint64_t r5 = apply1(KEEL_BF16, (enum keel_redop)op, 0xff81, 0x3f80);

		assert_true(isnan(f32_of((uint32_t)r1)) && (r1 & 0x00400000u));
		assert_true(isnan(f32_of((uint32_t)r2)) && (r2 & 0x00400000u));
		assert_true(isnan(f64_of(r3)) && (r3 & 0x0008000000000000u));
		assert_true(f16_is_nan((uint16_t)r4) && (r4 & 0x0200));
		assert_true(bf16_is_nan((uint16_t)r5) && (r5 & 0x0040));
	}
}

static void test_reduce_sum_nan_inf_signed_zero(void **state)
{
	(void)state;
	assert_int_equal(apply1(KEEL_F32, KEEL_SUM, 0x80000000u, 0x80000000u), 0x80000000u);
	assert_int_equal(apply1(KEEL_F32, KEEL_SUM, 0x80000000u, 0x00000000u), 0x00000000u);
	assert_true(isnan(f32_of((uint32_t)apply1(KEEL_F32, KEEL_SUM, 0x7f800000u, 0xff800000u))));
	assert_true(isnan(f32_of((uint32_t)apply1(KEEL_F32, KEEL_SUM, 0x7fc00000u, 0x3f800000u))));
	assert_int_equal(apply1(KEEL_F32, KEEL_SUM, 0x7f800000u, 0x3f800000u), 0x7f800000u);
	assert_true(
	    isnan(f64_of(apply1(KEEL_F64, KEEL_SUM, 0x7ff0000000000000u, 0xfff0000000000000u))));
	/* f16: the largest finite doubled overflows to inf; -0 + -0 stays -0; inf - inf is NaN. */
	assert_int_equal(apply1(KEEL_F16, KEEL_SUM, 0x7bff, 0x7bff), 0x7c00);
	assert_int_equal(apply1(KEEL_F16, KEEL_SUM, 0xfbff, 0xfbff), 0xfc00);
	assert_int_equal(apply1(KEEL_F16, KEEL_SUM, 0x8000, 0x8000), 0x8000);
	assert_int_equal(apply1(KEEL_F16, KEEL_SUM, 0x8000, 0x0000), 0x0000);
	assert_true(f16_is_nan((uint16_t)apply1(KEEL_F16, KEEL_SUM, 0x7c00, 0xfc00)));
	assert_int_equal(apply1(KEEL_BF16, KEEL_SUM, 0x7f7f, 0x7f7f), 0x7f80);
	assert_true(bf16_is_nan((uint16_t)apply1(KEEL_BF16, KEEL_SUM, 0x7f80, 0xff80)));
	/* f16 subnormals add exactly: 1 + 2 steps of 2^-24; and up into the normal range. */
	assert_int_equal(apply1(KEEL_F16, KEEL_SUM, 0x0001, 0x0002), 0x0003);
	assert_int_equal(apply1(KEEL_F16, KEEL_SUM, 0x03ff, 0x0001), 0x0400);
	/* Rounded once in f32, not per step: 2048 + 1 in f16 is a tie, goes to even (2048). */
	assert_int_equal(apply1(KEEL_F16, KEEL_SUM, 0x6800, 0x3c00), 0x6800);
	assert_int_equal(apply1(KEEL_F16, KEEL_SUM, 0x6801, 0x3c00), 0x6802);
}

static void test_reduce_f16_round_trip_every_value(void **state)
{
	(void)state;
	for (uint32_t i = 0; i < 0x10000u; i++) {
		uint16_t h = (uint16_t)i;
		float f = reduce_f16_to_f32(h);
		float r = ref_f16_decode(h);

		if (f16_is_nan(h)) {
			/* Quiet, sign and payload kept (a signaling NaN gains the quiet bit). */
			assert_true(isnan(f) && (bits_f32(f) & 0x00400000u));
			assert_int_equal(reduce_f32_to_f16(f), h | 0x0200);
			continue;
		}
		assert_int_equal(bits_f32(f), bits_f32(r));
		assert_int_equal(reduce_f32_to_f16(f), h);
#ifdef __FLT16_MAX__
		{
			_Float16 x;

			memcpy(&x, &h, 2);
			assert_int_equal(bits_f32(f), bits_f32((float)x));
		}
#endif
	}
}

static void test_reduce_bf16_round_trip_every_value(void **state)
{
	(void)state;
	for (uint32_t i = 0; i < 0x10000u; i++) {
		uint16_t h = (uint16_t)i;
		float f = reduce_bf16_to_f32(h);

		if (bf16_is_nan(h)) {
			assert_true(isnan(f) && (bits_f32(f) & 0x00400000u));
			assert_int_equal(reduce_f32_to_bf16(f), h | 0x0040);
			continue;
		}
		assert_int_equal(bits_f32(f), (uint32_t)h << 16);
		assert_int_equal(reduce_f32_to_bf16(f), h);
	}
}

static void test_reduce_f16_rounding(void **state)
{
	(void)state;
	/* Ties to even between 1 and 1 + 2^-10, and between 1 + 2^-10 and 1 + 2^-9. */
	assert_int_equal(reduce_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
	assert_int_equal(reduce_f32_to_f16(1.0f + 0x3p-11f), 0x3c02);
	assert_int_equal(reduce_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
	assert_int_equal(reduce_f32_to_f16(-(1.0f + 0x1p-11f)), 0xbc00);
	/* Subnormals: steps of 2^-24, ties to even, rounding up into the smallest normal. */
	assert_int_equal(reduce_f32_to_f16(0x1p-24f), 0x0001);
	assert_int_equal(reduce_f32_to_f16(0x1p-25f), 0x0000);
	assert_int_equal(reduce_f32_to_f16(0x1p-25f + 0x1p-40f), 0x0001);
	assert_int_equal(reduce_f32_to_f16(0x3p-25f), 0x0002);
	assert_int_equal(reduce_f32_to_f16(-0x3p-25f), 0x8002);
	assert_int_equal(reduce_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);
	assert_int_equal(reduce_f32_to_f16(1022.5f * 0x1p-24f), 0x03fe);
	assert_int_equal(reduce_f32_to_f16(0x1p-14f), 0x0400);
	assert_int_equal(reduce_f32_to_f16(f32_of(0x00000001u)), 0x0000); /* f32 denormal */
	assert_int_equal(reduce_f32_to_f16(f32_of(0x80400000u)), 0x8000);
	/* Overflow: 65504 is the largest finite; 65520 is the tie that goes to inf. */
	assert_int_equal(reduce_f32_to_f16(65504.0f), 0x7bff);
	assert_int_equal(reduce_f32_to_f16(65519.996f), 0x7bff);
	assert_int_equal(reduce_f32_to_f16(65520.0f), 0x7c00);
	assert_int_equal(reduce_f32_to_f16(1e10f), 0x7c00);
	assert_int_equal(reduce_f32_to_f16(-1e10f), 0xfc00);
	assert_int_equal(reduce_f32_to_f16(INFINITY), 0x7c00);
	assert_int_equal(reduce_f32_to_f16(-INFINITY), 0xfc00);
	assert_int_equal(reduce_f32_to_f16(f32_of(0x7f7fffffu)), 0x7c00);
	/* NaN stays NaN, quiet, sign kept. */
	assert_true(f16_is_nan(reduce_f32_to_f16(NAN)));
	assert_true(reduce_f32_to_f16(f32_of(0x7f800001u)) & 0x0200);
	assert_true(f16_is_nan(reduce_f32_to_f16(f32_of(0x7f800001u))));
	assert_int_equal(reduce_f32_to_f16(f32_of(0xffc00000u)) & 0x8000, 0x8000);
}

static void test_reduce_bf16_rounding(void **state)
{
	(void)state;
	assert_int_equal(reduce_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
	assert_int_equal(reduce_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);
	assert_int_equal(reduce_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
	assert_int_equal(reduce_f32_to_bf16(f32_of(0x00008000u)), 0x0000); /* subnormal tie */
	assert_int_equal(reduce_f32_to_bf16(f32_of(0x00018000u)), 0x0002);
	assert_int_equal(reduce_f32_to_bf16(f32_of(0x007fffffu)), 0x0080); /* up to min normal */
	assert_int_equal(reduce_f32_to_bf16(f32_of(0x7f7fffffu)), 0x7f80); /* overflow */
	assert_int_equal(reduce_f32_to_bf16(f32_of(0x7f7f7fffu)), 0x7f7f);
	assert_int_equal(reduce_f32_to_bf16(f32_of(0xff7f8000u)), 0xff80); /* tie, odd: up */
	assert_int_equal(reduce_f32_to_bf16(-INFINITY), 0xff80);
	assert_true(bf16_is_nan(reduce_f32_to_bf16(f32_of(0x7f800001u)))); /* low-bit payload */
	assert_true(reduce_f32_to_bf16(f32_of(0x7f800001u)) & 0x0040);
	assert_true(bf16_is_nan(reduce_f32_to_bf16(f32_of(0xffffffffu))));
}

/* Narrowing against the reference encoder on random f32 bit patterns and values near the
 * f16 range (where the rounding cases live). */
static void test_reduce_narrowing_matches_reference(void **state)
{
	(void)state;
	for (int i = 0; i < 1000000; i++) {
		uint32_t u = (uint32_t)rng_next();
		float f;

		if (i & 1) /* exponent in [-30, 17]: f16 subnormals through overflow */
			u = (u & 0x807fffffu) | (uint32_t)(97 + rng_below(48)) << 23;
		f = f32_of(u);
		if (isnan(f)) {
			assert_true(f16_is_nan(reduce_f32_to_f16(f)));
			assert_true(bf16_is_nan(reduce_f32_to_bf16(f)));
			continue;
		}
		if (reduce_f32_to_f16(f) != ref_f16_encode(f) ||
		    reduce_f32_to_bf16(f) != ref_bf16_encode(f))
			fail_msg("seed %" PRIu64 ": f32 %#x gave f16 %#x bf16 %#x, want %#x %#x",
				 seed, u, reduce_f32_to_f16(f), reduce_f32_to_bf16(f),
				 ref_f16_encode(f), ref_bf16_encode(f));
#ifdef __FLT16_MAX__
		{
			_Float16 x = (_Float16)f;
			uint16_t h;

			memcpy(&h, &x, 2);
			assert_int_equal(reduce_f32_to_f16(f), h);
		}
#endif
	}
}

static void test_reduce_avg_divides(void **state)
{
	static const uint32_t contributors[] = {1, 2, 3, 7, 1000, 0x80000001u, UINT32_MAX};
	int32_t i32[] = {7, -7, 6, -6, INT32_MAX, INT32_MIN, 0, -1};
	int64_t i64[] = {7, -7, INT64_MAX, INT64_MIN, -1, 0};
	uint8_t u8[] = {255, 7, 6, 1, 0, 200, 3};
	float f32[] = {1.0f, -3.0f, 1e-40f, INFINITY, 10.0f, -0.0f};
	double f64[] = {1.0, -3.0, 1e300, -INFINITY, 10.0};
	uint16_t f16[] = {0x3c00, 0x7bff, 0x0001, 0xbc00, 0x4900, 0x7c00};
	uint16_t bf16[] = {0x3f80, 0x7f7f, 0x0001, 0xbf80, 0x4120};

	(void)state;
	for (size_t c = 0; c < COUNT_OF(contributors); c++) {
		uint32_t n = contributors[c];
		int32_t w32[COUNT_OF(i32)];
		int64_t w64[COUNT_OF(i64)];
		uint8_t w8[COUNT_OF(u8)];
		float wf[COUNT_OF(f32)];
		double wd[COUNT_OF(f64)];
		uint16_t wh[COUNT_OF(f16)], wb[COUNT_OF(bf16)];

		for (size_t i = 0; i < COUNT_OF(i32); i++)
			w32[i] = (int32_t)((int64_t)i32[i] / (int64_t)n);
		for (size_t i = 0; i < COUNT_OF(i64); i++)
			w64[i] = i64[i] / (int64_t)n;
		for (size_t i = 0; i < COUNT_OF(u8); i++)
			w8[i] = (uint8_t)(u8[i] / n);
		for (size_t i = 0; i < COUNT_OF(f32); i++)
			wf[i] = f32[i] / (float)n;
		for (size_t i = 0; i < COUNT_OF(f64); i++)
			wd[i] = f64[i] / (double)n;
		for (size_t i = 0; i < COUNT_OF(f16); i++)
			wh[i] = ref_f16_encode(ref_f16_decode(f16[i]) / (float)n);
		for (size_t i = 0; i < COUNT_OF(bf16); i++)
			wb[i] = ref_bf16_encode(ref_bf16_decode(bf16[i]) / (float)n);
		reduce_finish_avg(i32, COUNT_OF(i32), KEEL_I32, n);
		reduce_finish_avg(i64, COUNT_OF(i64), KEEL_I64, n);
		reduce_finish_avg(u8, COUNT_OF(u8), KEEL_U8, n);
		reduce_finish_avg(f32, COUNT_OF(f32), KEEL_F32, n);
		reduce_finish_avg(f64, COUNT_OF(f64), KEEL_F64, n);
		reduce_finish_avg(f16, COUNT_OF(f16), KEEL_F16, n);
		reduce_finish_avg(bf16, COUNT_OF(bf16), KEEL_BF16, n);
		assert_memory_equal(i32, w32, sizeof(w32));
		assert_memory_equal(i64, w64, sizeof(w64));
		assert_memory_equal(u8, w8, sizeof(w8));
		assert_memory_equal(f32, wf, sizeof(wf));
		assert_memory_equal(f64, wd, sizeof(wd));
		assert_memory_equal(f16, wh, sizeof(wh));
		assert_memory_equal(bf16, wb, sizeof(wb));
	}
	/* Truncation toward zero, spelled out. */
	{
		int32_t v[] = {-7, 7, -1};

		reduce_finish_avg(v, 3, KEEL_I32, 2);
		assert_int_equal(v[0], -3);
		assert_int_equal(v[1], 3);
		assert_int_equal(v[2], 0);
	}
}

/* Long unaligned buffers against the reference: the block loop, its tail and every dtype. */
static void test_reduce_avg_long_unaligned(void **state)
{
	(void)state;
	for (int t = 0; t < KEEL_DTYPE_COUNT; t++) {
		size_t es = keel_dtype_size((enum keel_dtype)t);
		uint8_t *p = buf_a + 3;
		uint32_t n = 1 + rng_below(9);

		memset(buf_a, CANARY, BUF_BYTES);
		for (size_t i = 0; i < LEN_MAX; i++)
			random_elem(p + i * es, (enum keel_dtype)t);
		memcpy(copy_a, buf_a, BUF_BYTES);
		reduce_finish_avg(p, LEN_MAX, (enum keel_dtype)t, n);
		for (size_t i = 0; i < LEN_MAX; i++) {
			const uint8_t *x = copy_a + 3 + i * es;
			uint8_t want[8];
			float f;
			double d;
			int32_t i32;
			int64_t i64;
			uint16_t h;

			switch ((enum keel_dtype)t) {
			case KEEL_F32:
				memcpy(&f, x, 4);
				f /= (float)n;
				memcpy(want, &f, 4);
				break;
			case KEEL_F64:
				memcpy(&d, x, 8);
				d /= (double)n;
				memcpy(want, &d, 8);
				break;
			case KEEL_F16:
				memcpy(&h, x, 2);
				h = ref_f16_encode(ref_f16_decode(h) / (float)n);
				memcpy(want, &h, 2);
				break;
			case KEEL_BF16:
				memcpy(&h, x, 2);
				h = ref_bf16_encode(ref_bf16_decode(h) / (float)n);
				memcpy(want, &h, 2);
				break;
			case KEEL_I32:
				memcpy(&i32, x, 4);
				i32 /= (int32_t)n;
				memcpy(want, &i32, 4);
				break;
			case KEEL_I64:
				memcpy(&i64, x, 8);
				i64 /= (int64_t)n;
				memcpy(want, &i64, 8);
				break;
			default:
				want[0] = (uint8_t)(x[0] / n);
				break;
			}
			if (n > 1 && !elem_matches(p + i * es, want, (enum keel_dtype)t))
				fail_msg("seed %" PRIu64 ": avg %s /%u element %zu", seed,
					 keel_dtype_name((enum keel_dtype)t), n, i);
		}
		assert_guards(buf_a, 3, LEN_MAX * es, "avg");
	}
}

static void test_reduce_integer_wrap(void **state)
{
	(void)state;
	assert_int_equal((int32_t)apply1(KEEL_I32, KEEL_SUM, (uint32_t)INT32_MAX, 1), INT32_MIN);
	assert_int_equal(
	    (int32_t)apply1(KEEL_I32, KEEL_SUM, (uint32_t)INT32_MIN, (uint32_t)INT32_MIN), 0);
	assert_int_equal((int32_t)apply1(KEEL_I32, KEEL_PROD, 65536, 65536), 0);
	assert_int_equal((int32_t)apply1(KEEL_I32, KEEL_PROD, (uint32_t)-3, 5), -15);
	assert_int_equal((int64_t)apply1(KEEL_I64, KEEL_SUM, (uint64_t)INT64_MAX, 1), INT64_MIN);
	assert_int_equal((int64_t)apply1(KEEL_I64, KEEL_PROD, (uint64_t)INT64_MIN, (uint64_t)-1),
			 INT64_MIN);
	assert_int_equal(apply1(KEEL_U8, KEEL_SUM, 200, 100) & 0xff, 44);
	assert_int_equal(apply1(KEEL_U8, KEEL_PROD, 16, 16) & 0xff, 0);
	assert_int_equal(apply1(KEEL_U8, KEEL_PROD, 255, 255) & 0xff, 1);
	/* min/max compare signed for i32/i64, unsigned for u8. */
	assert_int_equal((int32_t)apply1(KEEL_I32, KEEL_MIN, (uint32_t)-1, 1), -1);
	assert_int_equal((int64_t)apply1(KEEL_I64, KEEL_MAX, (uint64_t)INT64_MIN, 0), 0);
	assert_int_equal(apply1(KEEL_U8, KEEL_MAX, 0x80, 0x7f) & 0xff, 0x80);
}

static void test_reduce_dtype_sizes_and_names(void **state)
{
	static const size_t sizes[] = {4, 8, 2, 2, 4, 8, 1};
	static const char *const names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8"};
	static const char *const ops[] = {"sum", "prod", "min", "max", "avg"};

	(void)state;
	for (int t = 0; t < KEEL_DTYPE_COUNT; t++) {
		assert_int_equal(keel_dtype_size((enum keel_dtype)t), sizes[t]);
		assert_string_equal(keel_dtype_name((enum keel_dtype)t), names[t]);
	}
	for (int op = 0; op < KEEL_REDOP_COUNT; op++)
		assert_string_equal(keel_redop_name((enum keel_redop)op), ops[op]);
	assert_int_equal(keel_dtype_size(KEEL_DTYPE_COUNT), 0);
	assert_int_equal(keel_dtype_size((enum keel_dtype) - 1), 0);
	assert_null(keel_dtype_name(KEEL_DTYPE_COUNT));
	assert_null(keel_dtype_name((enum keel_dtype) - 1));
	assert_null(keel_redop_name(KEEL_REDOP_COUNT));
	assert_null(keel_redop_name((enum keel_redop)99));
}

int main(void)
{
	const char *env = getenv("SEED");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reduce_every_dtype_op_and_length),
	    cmocka_unit_test(test_reduce_in_place),
	    cmocka_unit_test(test_reduce_unaligned_buffers),
	    cmocka_unit_test(test_reduce_every_offset_combination),
	    cmocka_unit_test(test_reduce_minmax_nan_inf_signed_zero),
	    cmocka_unit_test(test_reduce_sum_nan_inf_signed_zero),
	    cmocka_unit_test(test_reduce_f16_round_trip_every_value),
	    cmocka_unit_test(test_reduce_bf16_round_trip_every_value),
	    cmocka_unit_test(test_reduce_f16_rounding),
	    cmocka_unit_test(test_reduce_bf16_rounding),
	    cmocka_unit_test(test_reduce_narrowing_matches_reference),
	    cmocka_unit_test(test_reduce_avg_divides),
	    cmocka_unit_test(test_reduce_avg_long_unaligned),
	    cmocka_unit_test(test_reduce_integer_wrap),
	    cmocka_unit_test(test_reduce_dtype_sizes_and_names),
	};

	seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	rng_state = seed;
	printf("test_reduce: SEED=%" PRIu64 " (set SEED=n to replay)\n", seed);
	fflush(stdout);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
