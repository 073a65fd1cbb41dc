/* Exact-valued AllReduce inputs and their reference results (see refcheck.h). */
#include <string.h>

#include "keel/limits.h"
#include "reduce_int.h"
#include "refcheck.h"

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
		((uint16_t *)buf)[i] = reduce_f32_to_f16((float)v);
		break;
	case KEEL_BF16:
		((uint16_t *)buf)[i] = reduce_f32_to_bf16((float)v);
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
