/* Exact-valued AllReduce inputs and their reference results (see refcheck.h). An oracle must
 * not share code with what it checks: the f16 and bf16 roundings here are written from the
 * formats' definitions with libm, not with the kernels' bit tricks (runtime/core/reduce.c). */
#include <math.h>
#include <string.h>

#include "keel/limits.h"
#include "refcheck.h"

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits. Round to nearest, ties to
 * even (nearbyint in the default rounding mode); beyond the largest finite value (65504) the
 * halfway point 65520 and above round to infinity. */
static uint16_t ref_f16(float f)
{
	uint16_t sign = signbit(f) ? 0x8000u : 0;
	double a = fabs((double)f);
	if (isnan(f))
		return (uint16_t)(sign | 0x7e00u);
	if (a >= 65520.0)
		return (uint16_t)(sign | 0x7c00u);
	if (a < ldexp(1.0, -14)) /* subnormal: a whole number of 2^-24 (1024 of them: 2^-14) */
		return (uint16_t)(sign | (uint16_t)nearbyint(ldexp(a, 24)));
	int e = 0;
	double q = nearbyint(ldexp(frexp(a, &e), 11)); /* 1024..2048: 11 significant bits */
	if (q == 2048.0) {
		q = 1024.0;
		e++;
	}
	return (uint16_t)(sign | (uint16_t)((e + 14) << 10) | (uint16_t)(q - 1024.0));
}

/* bfloat16: the top half of an IEEE binary32 — 8 exponent, 7 fraction bits — rounded to
 * nearest, ties to even, on 8 significant bits. Exact for the normal range the checks use. */
static uint16_t ref_bf16(float f)
{
	if (isnan(f))
		return (uint16_t)(signbit(f) ? 0xffc0u : 0x7fc0u);
	if (f == 0.0f || isinf(f))
		return (uint16_t)(signbit(f) ? (isinf(f) ? 0xff80u : 0x8000u)
					     : (isinf(f) ? 0x7f80u : 0));
	int e = 0;
	double m = frexp((double)f, &e); /* before e is read: argument order is unspecified */
	double r = ldexp(nearbyint(ldexp(m, 8)), e - 8);
	float rf = fabs(r) > 3.3895313892515355e38 ? copysignf(INFINITY, f) : (float)r;
	uint32_t u;
	memcpy(&u, &rf, sizeof(u));
	return (uint16_t)(u >> 16);
}

double keel_check_value(uint32_t rank, size_t i, enum keel_dtype dt, enum keel_redop op)
{
	uint64_t h = (rank + 1) * 0x9E3779B97F4A7C15ull ^ (i + 7) * 0xBF58476D1CE4E5B9ull;
	h ^= h >> 29;
	switch (op) {
	case KEEL_PROD: {
		/* products of up to a few thousand ranks stay exact as powers of two and +-1 */
		static const double f[] = {1, 2, -1, -2, 0.5, 1};
		static const double s[] = {1, 2, -1, 3, -2, 1};
		static const double u[] = {1, 2, 3, 1, 2, 1};
		if (dt == KEEL_U8)
			return u[h % 6];
		return dt == KEEL_I32 || dt == KEEL_I64 ? s[h % 6] : f[h % 6];
	}
	case KEEL_MIN:
	case KEEL_MAX:
		return dt == KEEL_U8 ? (double)(h % 101) : (double)(h % 101) - 50.0;
	default:
		return dt == KEEL_U8 ? (double)(h % 17) : (double)(h % 17) - 8.0;
	}
}

void keel_check_store(void *buf, size_t i, enum keel_dtype dt, double v)
{
	switch (dt) {
	case KEEL_F32:
		((float *)buf)[i] = (float)v;
		break;
	case KEEL_F64:
		((double *)buf)[i] = v;
		break;
	case KEEL_F16:
		((uint16_t *)buf)[i] = ref_f16((float)v);
		break;
	case KEEL_BF16:
		((uint16_t *)buf)[i] = ref_bf16((float)v);
		break;
	case KEEL_I32:
		((int32_t *)buf)[i] = (int32_t)v;
		break;
	case KEEL_I64:
		((int64_t *)buf)[i] = (int64_t)v;
		break;
	default:
		((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; /* u8 wraps, as the kernels do */
		break;
	}
}

void keel_check_fill(void *buf, size_t begin, size_t end, uint32_t rank, enum keel_dtype dt,
		     enum keel_redop op)
{
	for (size_t i = begin; i < end; i++)
		keel_check_store(buf, i, dt, keel_check_value(rank, i, dt, op));
}

static double combine(double acc, double v, enum keel_redop op)
{
	if (op == KEEL_PROD)
		return acc * v;
	if (op == KEEL_MIN)
		return v < acc ? v : acc;
	if (op == KEEL_MAX)
		return v > acc ? v : acc;
	return acc + v;
}

/* avg: divide the (exact) sum as the kernels do: in f32 for f32/f16/bf16, f64 for f64,
 * integer division truncating toward zero, u8 after wrapping the sum. */
static void store_avg(void *buf, size_t i, enum keel_dtype dt, double sum, uint32_t world)
{
	switch (dt) {
	case KEEL_F32:
	case KEEL_F16:
	case KEEL_BF16:
		keel_check_store(buf, i, dt, (double)((float)sum / (float)world));
		break;
	case KEEL_F64:
		keel_check_store(buf, i, dt, sum / world);
		break;
	case KEEL_U8:
		keel_check_store(buf, i, dt, (double)((uint8_t)(int64_t)sum / world));
		break;
	default:
		keel_check_store(buf, i, dt, (double)((int64_t)sum / (int64_t)world));
		break;
	}
}

void keel_check_reference_members(void *buf, size_t begin, size_t end, const uint32_t *members,
				  uint32_t count, enum keel_dtype dt, enum keel_redop op)
{
	for (size_t i = begin; i < end; i++) {
		double acc = keel_check_value(members[0], i, dt, op);
		for (uint32_t k = 1; k < count; k++)
			acc = combine(acc, keel_check_value(members[k], i, dt, op), op);
		if (op == KEEL_AVG)
			store_avg(buf, i, dt, acc, count);
		else
			keel_check_store(buf, i, dt, acc);
	}
}

void keel_check_reference(void *buf, size_t begin, size_t end, uint32_t world, enum keel_dtype dt,
			  enum keel_redop op)
{
	uint32_t ranks[KEEL_WORLD_MAX];
	for (uint32_t r = 0; r < world; r++)
		ranks[r] = r;
	keel_check_reference_members(buf, begin, end, ranks, world, dt, op);
}

size_t keel_check_wrong(const void *got, const void *ref, size_t begin, size_t end,
			enum keel_dtype dt)
{
	size_t es = keel_dtype_size(dt), wrong = 0;
	const uint8_t *a = got, *b = ref;
	for (size_t i = begin; i < end; i++)
		wrong += memcmp(a + i * es, b + i * es, es) != 0;
	return wrong;
}

void keel_check_sizes(size_t out[KEEL_CHECK_SIZES], uint32_t world, size_t frag, size_t large)
{
	const size_t sizes[KEEL_CHECK_SIZES] = {
	    0,
	    1,
	    world - 1,
	    frag - 1,
	    frag,
	    frag + 1,
	    world * frag - 1,
	    world * frag,
	    world * frag + 1,
	    large,
	};
	memcpy(out, sizes, sizeof(sizes));
}
