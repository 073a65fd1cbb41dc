/* CPU reduction kernels for AllReduce: dst[i] = a[i] (op) b[i], one specialised loop per
 * (dtype, op), dispatched once per call. Never allocates, never branches per element on the
 * dtype or op, never reads or writes outside the caller's count elements. */
#include "reduce_int.h"

#include "keel/reduce.h"

#include <stdbool.h>
#include <string.h>

#include "assert_int.h"
#include "half_int.h"

/* Every kernel works on blocks of BLOCK_BYTES: the inner loop has a constant trip count, so
 * gcc 12 vectorizes it even under -O2's "very cheap" cost model (which refuses loops that
 * need a scalar epilogue). The last partial block goes through the same code on a stack
 * copy, so every element takes the same vector path and rounds the same way. */
#define BLOCK_BYTES 128u

/* Element types with alignment 1: the caller's buffers need not be aligned, and the
 * vectorizer then emits unaligned loads and stores instead of assuming alignment. */
typedef float f32_u __attribute__((aligned(1)));
typedef double f64_u __attribute__((aligned(1)));
typedef uint16_t u16_u __attribute__((aligned(1)));
typedef uint32_t u32_u __attribute__((aligned(1)));
typedef uint64_t u64_u __attribute__((aligned(1)));
typedef int32_t i32_u __attribute__((aligned(1)));
typedef int64_t i64_u __attribute__((aligned(1)));
typedef uint8_t u8_u;

/* dst may equal a or b, but never partially overlaps them: element i reads a[i] and b[i]
 * before writing dst[i], so no dependence is carried between iterations. ivdep says exactly
 * that (restrict would be wrong when dst == a). */
#if defined(__clang__)
#define NO_CARRIED_DEPS _Pragma("clang loop vectorize(assume_safety)")
#else
#define NO_CARRIED_DEPS _Pragma("GCC ivdep")
#endif

/* AVX2 doubles the vector width where the CPU has it; the clones are picked once at load time
 * (an ifunc, which also works in static binaries). -DKEEL_NO_TARGET_CLONES builds only the
 * baseline, e.g. to test that path on an AVX2 machine. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(KEEL_NO_TARGET_CLONES)
#define HOT __attribute__((target_clones("avx2", "default")))
#else
#define HOT
#endif

/* The per-element helpers below run inside the vectorized loops: a branch there (a release
 * assertion) would keep the loop scalar, so their preconditions are KEEL_ASSERT_DEBUG, and the
 * release checks sit at each kernel's entry, once per call. */
_Static_assert(BLOCK_BYTES % sizeof(uint64_t) == 0, "a block holds whole elements of any dtype");

/* The scalar conversions check the header's promises on every value they convert: widening
 * is exact (narrowing gives the same bits back, a NaN comes back quiet), the sign is kept, and
 * NaN stays NaN and inf stays inf. */
float reduce_f16_to_f32(uint16_t h)
{
	float f = f16_widen(h);
	bool nan = (h & 0x7fffu) > 0x7c00u;
	KEEL_ASSERT(f16_narrow(f) == (nan ? (h | 0x0200u) : h));
	KEEL_ASSERT((f32_to_bits(f) >> 31) == (uint32_t)(h >> 15));
	KEEL_ASSERT((f != f) == nan);
	return f;
}

uint16_t reduce_f32_to_f16(float f)
{
	uint16_t h = f16_narrow(f);
	uint32_t mag = f32_to_bits(f) & 0x7fffffffu;
	KEEL_ASSERT((uint32_t)(h >> 15) == (f32_to_bits(f) >> 31));
	KEEL_ASSERT((mag > 0x7f800000u) == ((h & 0x7fffu) > 0x7c00u));
	KEEL_ASSERT(mag != 0x7f800000u || (h & 0x7fffu) == 0x7c00u);
	return h;
}

float reduce_bf16_to_f32(uint16_t h)
{
	float f = bf16_widen(h);
	bool nan = (h & 0x7fffu) > 0x7f80u;
	KEEL_ASSERT(bf16_narrow(f) == (nan ? (h | 0x0040u) : h));
	KEEL_ASSERT((f32_to_bits(f) >> 31) == (uint32_t)(h >> 15));
	KEEL_ASSERT((f != f) == nan);
	return f;
}

uint16_t reduce_f32_to_bf16(float f)
{
	uint16_t h = bf16_narrow(f);
	uint32_t mag = f32_to_bits(f) & 0x7fffffffu;
	KEEL_ASSERT((uint32_t)(h >> 15) == (f32_to_bits(f) >> 31));
	KEEL_ASSERT((mag > 0x7f800000u) == ((h & 0x7fffu) > 0x7f80u));
	KEEL_ASSERT(mag != 0x7f800000u || (h & 0x7fffu) == 0x7f80u);
	return h;
}

/* ---- Element combiners ---- */

/* IEEE 754-2019 minimum/maximum on the bit patterns of a sign-magnitude float: flipping the
 * magnitude bits of negatives gives a signed integer key in the same order as the values,
 * with -0 < +0. A NaN in either input wins (a's first) and comes out quiet. The result is
 * always one of the inputs, so f16/bf16 need no widening here. */
#define DEFINE_FLOAT_MINMAX(name, UT, ST, MAG, INF, QUIET)                                         \
	static inline UT name##_key_gt(UT x, UT y)                                                 \
	{                                                                                          \
		ST kx = (ST)(x ^ ((ST)x < 0 ? (UT)(MAG) : (UT)0));                                 \
		ST ky = (ST)(y ^ ((ST)y < 0 ? (UT)(MAG) : (UT)0));                                 \
		return kx > ky ? (UT)1 : (UT)0;                                                    \
	}                                                                                          \
	static inline UT name##_nan_pick(UT x, UT y, UT r)                                         \
	{                                                                                          \
		r = (UT)(y & (MAG)) > (UT)(INF) ? (UT)(y | (QUIET)) : r;                           \
		return (UT)(x & (MAG)) > (UT)(INF) ? (UT)(x | (QUIET)) : r;                        \
	}                                                                                          \
	static inline UT name##_max(UT x, UT y)                                                    \
	{                                                                                          \
		return name##_nan_pick(x, y, name##_key_gt(x, y) ? x : y);                         \
	}                                                                                          \
	static inline UT name##_min(UT x, UT y)                                                    \
	{                                                                                          \
		return name##_nan_pick(x, y, name##_key_gt(x, y) ? y : x);                         \
	}

DEFINE_FLOAT_MINMAX(f32b, uint32_t, int32_t, 0x7fffffffu, 0x7f800000u, 0x00400000u)
DEFINE_FLOAT_MINMAX(f64b, uint64_t, int64_t, 0x7fffffffffffffffu, 0x7ff0000000000000u,
		    0x0008000000000000u)
DEFINE_FLOAT_MINMAX(f16b, uint16_t, int16_t, 0x7fffu, 0x7c00u, 0x0200u)
DEFINE_FLOAT_MINMAX(bf16b, uint16_t, int16_t, 0x7fffu, 0x7f80u, 0x0040u)

#define OP_ADD(x, y) ((x) + (y))
#define OP_MUL(x, y) ((x) * (y))
#define OP_MIN(x, y) ((y) < (x) ? (y) : (x))
#define OP_MAX(x, y) ((y) > (x) ? (y) : (x))
/* u8 arithmetic promotes to int; the cast back wraps as the header promises. */
#define OP_ADD_U8(x, y) ((uint8_t)((x) + (y)))
#define OP_MUL_U8(x, y) ((uint8_t)((unsigned)(x) * (unsigned)(y)))
/* f16/bf16: x and y hold one element in their low 16 bits (uint32_t), and so does the result. */
#define OP_F16_ADD(x, y)  f16_narrow32(f16_widen32(x) + f16_widen32(y))
#define OP_F16_MUL(x, y)  f16_narrow32(f16_widen32(x) * f16_widen32(y))
#define OP_BF16_ADD(x, y) bf16_narrow32(bf16_widen32(x) + bf16_widen32(y))
#define OP_BF16_MUL(x, y) bf16_narrow32(bf16_widen32(x) * bf16_widen32(y))

/* ---- Kernels ---- */

typedef void kernel_fn(void *dst, const void *a, const void *b, size_t count);

/* One kernel: a vectorized block of BLOCK_BYTES / sizeof(T) elements, whole blocks straight
 * from the caller's buffers, and the remainder through a zero-padded stack block. */
#define DEFINE_KERNEL(name, T, OP)                                                                 \
	static inline                                                                              \
	    __attribute__((always_inline)) void name##_block(T *d, const T *x, const T *y)         \
	{                                                                                          \
		NO_CARRIED_DEPS                                                                    \
		for (size_t j = 0; j < BLOCK_BYTES / sizeof(T); j++)                               \
			d[j] = OP(x[j], y[j]);                                                     \
	}                                                                                          \
	HOT static void name(void *dst, const void *a, const void *b, size_t count)                \
	{                                                                                          \
		const size_t per_block = BLOCK_BYTES / sizeof(T);                                  \
		size_t whole = count / per_block;                                                  \
		size_t rest_len = (count % per_block) * sizeof(T);                                 \
		T *d = dst;                                                                        \
		const T *x = a;                                                                    \
		const T *y = b;                                                                    \
		KEEL_ASSERT(count == 0 || (d != NULL && x != NULL && y != NULL));                  \
		for (size_t k = 0; k < whole; k++)                                                 \
			name##_block(d + k * per_block, x + k * per_block, y + k * per_block);     \
		if (rest_len != 0) {                                                               \
			T tx[BLOCK_BYTES / sizeof(T)] = {0};                                       \
			T ty[BLOCK_BYTES / sizeof(T)] = {0};                                       \
			memcpy(tx, x + whole * per_block, rest_len);                               \
			memcpy(ty, y + whole * per_block, rest_len);                               \
			name##_block(tx, tx, ty);                                                  \
			memcpy(d + whole * per_block, tx, rest_len);                               \
		}                                                                                  \
	}

DEFINE_KERNEL(f32_sum, f32_u, OP_ADD)
DEFINE_KERNEL(f32_prod, f32_u, OP_MUL)
DEFINE_KERNEL(f32_min, u32_u, f32b_min)
DEFINE_KERNEL(f32_max, u32_u, f32b_max)
DEFINE_KERNEL(f64_sum, f64_u, OP_ADD)
DEFINE_KERNEL(f64_prod, f64_u, OP_MUL)
DEFINE_KERNEL(f64_min, u64_u, f64b_min)
DEFINE_KERNEL(f64_max, u64_u, f64b_max)
DEFINE_KERNEL(f16_min, u16_u, f16b_min)
DEFINE_KERNEL(f16_max, u16_u, f16b_max)
DEFINE_KERNEL(bf16_min, u16_u, bf16b_min)
DEFINE_KERNEL(bf16_max, u16_u, bf16b_max)
/* Signed sums and products run in unsigned: same bits, no undefined overflow. */
DEFINE_KERNEL(i32_sum, u32_u, OP_ADD)
DEFINE_KERNEL(i32_prod, u32_u, OP_MUL)
DEFINE_KERNEL(i32_min, i32_u, OP_MIN)
DEFINE_KERNEL(i32_max, i32_u, OP_MAX)
DEFINE_KERNEL(i64_sum, u64_u, OP_ADD)
DEFINE_KERNEL(i64_prod, u64_u, OP_MUL)
DEFINE_KERNEL(i64_min, i64_u, OP_MIN)
DEFINE_KERNEL(i64_max, i64_u, OP_MAX)
DEFINE_KERNEL(u8_sum, u8_u, OP_ADD_U8)
DEFINE_KERNEL(u8_prod, u8_u, OP_MUL_U8)
DEFINE_KERNEL(u8_min, u8_u, OP_MIN)
DEFINE_KERNEL(u8_max, u8_u, OP_MAX)

/* f16/bf16 sum and prod run on 32-bit words holding two elements, each half widened, combined
 * and narrowed on its own. Every vector op then stays in 32-bit lanes; widening 16-bit lanes
 * instead costs cross-lane shuffles that made these kernels about twice as slow. Both halves
 * get the same treatment, so byte order does not matter. An odd last element goes alone. */
#define DEFINE_HALF_KERNEL(name, OP16)                                                             \
	static inline uint32_t name##_pair(uint32_t x, uint32_t y)                                 \
	{                                                                                          \
		uint32_t lo = OP16(x & 0xffffu, y & 0xffffu);                                      \
		uint32_t hi = OP16(x >> 16, y >> 16);                                              \
		return lo | hi << 16;                                                              \
	}                                                                                          \
	DEFINE_KERNEL(name##_words, u32_u, name##_pair)                                            \
	static void name(void *dst, const void *a, const void *b, size_t count)                    \
	{                                                                                          \
		KEEL_ASSERT(count > 0); /* reduce_apply returns first: count - 1 below */          \
		size_t last = (count - 1) * sizeof(uint16_t);                                      \
		uint16_t x, y, r;                                                                  \
		name##_words(dst, a, b, count / 2);                                                \
		if (count % 2 == 0)                                                                \
			return;                                                                    \
		memcpy(&x, (const uint8_t *)a + last, sizeof(x));                                  \
		memcpy(&y, (const uint8_t *)b + last, sizeof(y));                                  \
		r = (uint16_t)OP16((uint32_t)x, (uint32_t)y);                                      \
		memcpy((uint8_t *)dst + last, &r, sizeof(r));                                      \
	}

DEFINE_HALF_KERNEL(f16_sum, OP_F16_ADD)
DEFINE_HALF_KERNEL(f16_prod, OP_F16_MUL)
DEFINE_HALF_KERNEL(bf16_sum, OP_BF16_ADD)
DEFINE_HALF_KERNEL(bf16_prod, OP_BF16_MUL)

/* Indexed by dtype, then op. KEEL_AVG sums; reduce_finish_avg divides afterwards. */
#define KERNEL_ROW(t)                                                                              \
	{                                                                                          \
		t##_sum, t##_prod, t##_min, t##_max, t##_sum                                       \
	}
static kernel_fn *const kernels[KEEL_DTYPE_COUNT][KEEL_REDOP_COUNT] = {
    [KEEL_F32] = KERNEL_ROW(f32),   [KEEL_F64] = KERNEL_ROW(f64), [KEEL_F16] = KERNEL_ROW(f16),
    [KEEL_BF16] = KERNEL_ROW(bf16), [KEEL_I32] = KERNEL_ROW(i32), [KEEL_I64] = KERNEL_ROW(i64),
    [KEEL_U8] = KERNEL_ROW(u8),
};
_Static_assert(KEEL_REDOP_COUNT == 5 && KEEL_AVG == 4, "KERNEL_ROW lists the ops in enum order");
_Static_assert(KEEL_DTYPE_COUNT == 7, "every dtype needs a row in kernels[]");

void reduce_apply(void *dst, const void *a, const void *b, size_t count, enum keel_dtype dtype,
		  enum keel_redop op)
{
	KEEL_ASSERT((unsigned)dtype < KEEL_DTYPE_COUNT && (unsigned)op < KEEL_REDOP_COUNT);
	KEEL_ASSERT(count == 0 || (dst != NULL && a != NULL && b != NULL));
	if (count == 0)
		return;
	size_t size = keel_dtype_size(dtype);
	KEEL_ASSERT(count <= SIZE_MAX / size); /* the byte length below does not wrap */
	/* dst may be a or b, but must not overlap either partly (the header's rule): the kernels
	 * read element i of both before writing it, nothing more. */
	uintptr_t d = (uintptr_t)dst, x = (uintptr_t)a, y = (uintptr_t)b, len = count * size;
	KEEL_ASSERT(d == x || d + len <= x || x + len <= d);
	KEEL_ASSERT(d == y || d + len <= y || y + len <= d);
	KEEL_ASSERT(kernels[dtype][op] != NULL);
	kernels[dtype][op](dst, a, b, count);
}

/* ---- Averaging ---- */

/* buf[i] = OP(buf[i], div) in blocks, as DEFINE_KERNEL does, for the same reason. */
#define DEFINE_DIV_KERNEL(name, T, DT, OP)                                                         \
	static inline __attribute__((always_inline)) void name##_block(T *d, DT div)               \
	{                                                                                          \
		for (size_t j = 0; j < BLOCK_BYTES / sizeof(T); j++)                               \
			d[j] = OP(d[j], div);                                                      \
	}                                                                                          \
	HOT static void name(void *buf, size_t count, DT div)                                      \
	{                                                                                          \
		KEEL_ASSERT(buf != NULL && count > 0);                                             \
		KEEL_ASSERT(div > 1); /* reduce_finish_avg leaves one contributor alone */         \
		const size_t per_block = BLOCK_BYTES / sizeof(T);                                  \
		size_t whole = count / per_block;                                                  \
		size_t rest_len = (count % per_block) * sizeof(T);                                 \
		T *d = buf;                                                                        \
		for (size_t k = 0; k < whole; k++)                                                 \
			name##_block(d + k * per_block, div);                                      \
		if (rest_len != 0) {                                                               \
			T t[BLOCK_BYTES / sizeof(T)] = {0};                                        \
			memcpy(t, d + whole * per_block, rest_len);                                \
			name##_block(t, div);                                                      \
			memcpy(d + whole * per_block, t, rest_len);                                \
		}                                                                                  \
	}

#define DIV_FLOAT(x, div) ((x) / (div))
#define DIV_F16(x, div)	  f16_narrow(f16_widen(x) / (div))
#define DIV_BF16(x, div)  bf16_narrow(bf16_widen(x) / (div))
/* i32 through double: x and n are exact there, and a non-integral x/n lies at least 1/n from
 * the nearest integer while the quotient's rounding error is below 2^-21/n, so truncating the
 * rounded quotient gives C's truncating division. u8 through float, likewise (when n > 2^24
 * both quotients are below 1). */
#define DIV_I32(x, div) ((int32_t)((double)(x) / (div)))
#define DIV_U8(x, div)	((uint8_t)(int32_t)((float)(int32_t)(x) / (div)))

DEFINE_DIV_KERNEL(f32_div, f32_u, float, DIV_FLOAT)
DEFINE_DIV_KERNEL(f64_div, f64_u, double, DIV_FLOAT)
DEFINE_DIV_KERNEL(f16_div, u16_u, float, DIV_F16)
DEFINE_DIV_KERNEL(bf16_div, u16_u, float, DIV_BF16)
DEFINE_DIV_KERNEL(i32_div, i32_u, double, DIV_I32)
DEFINE_DIV_KERNEL(u8_div, u8_u, float, DIV_U8)

/* No SIMD 64-bit division, and double cannot hold every i64. */
static void i64_div(void *buf, size_t count, int64_t div)
{
	i64_u *d = buf;

	KEEL_ASSERT(buf != NULL && count > 0);
	KEEL_ASSERT(div > 1); /* reduce_finish_avg leaves one contributor alone */
	for (size_t i = 0; i < count; i++)
		d[i] = d[i] / div;
}

void reduce_finish_avg(void *buf, size_t count, enum keel_dtype dtype, uint32_t contributors)
{
	KEEL_ASSERT((unsigned)dtype < KEEL_DTYPE_COUNT);
	KEEL_ASSERT(contributors > 0);
	KEEL_ASSERT(count == 0 || buf != NULL);
	KEEL_ASSERT(count <= SIZE_MAX / keel_dtype_size(dtype));
	if (count == 0 || contributors == 1)
		return;
	switch (dtype) {
	case KEEL_F32:
		f32_div(buf, count, (float)contributors);
		break;
	case KEEL_F64:
		f64_div(buf, count, (double)contributors);
		break;
	case KEEL_F16:
		f16_div(buf, count, (float)contributors);
		break;
	case KEEL_BF16:
		bf16_div(buf, count, (float)contributors);
		break;
	case KEEL_I32:
		i32_div(buf, count, (double)contributors);
		break;
	case KEEL_I64:
		i64_div(buf, count, (int64_t)contributors);
		break;
	case KEEL_U8:
		u8_div(buf, count, (float)contributors);
		break;
	case KEEL_DTYPE_COUNT:
		KEEL_ASSERT(false);
		break;
	}
}

/* ---- The public reference (keel/reduce.h): what device kernels are checked against ---- */

void keel_reduce(void *dst, const void *a, const void *b, size_t count, enum keel_dtype dtype,
		 enum keel_redop op)
{
	reduce_apply(dst, a, b, count, dtype, op);
}

void keel_reduce_finish_avg(void *buf, size_t count, enum keel_dtype dtype, uint32_t contributors)
{
	reduce_finish_avg(buf, count, dtype, contributors);
}
