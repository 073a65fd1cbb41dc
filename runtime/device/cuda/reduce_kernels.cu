/* CUDA reduction kernels for every dtype and op keel supports, written to give the CPU
 * kernels' bits (runtime/core/reduce.c): IEEE round-to-nearest intrinsics (no contraction
 * into FMA, no fast-math division), the same f16/bf16 widening and rounding, the same
 * NaN-propagating min/max on bit patterns, integers wrapping. One difference, allowed: a float
 * sum or product with a NaN input gives the GPU's canonical NaN (its f32 units' choice; the
 * CPU keeps the input's payload), seen on an H200. 16-byte vector loads when every pointer is
 * aligned; a grid-stride loop bounded by count. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "reduce_kernels_int.h"

namespace
{

__device__ __forceinline__ uint32_t f2u(float f)
{
	return __float_as_uint(f);
}
__device__ __forceinline__ float u2f(uint32_t u)
{
	return __uint_as_float(u);
}

/* f16 in the low 16 bits -> f32, exact; NaN comes out quiet. */
__device__ __forceinline__ float f16_widen(uint32_t h)
{
	uint32_t sign = (h & 0x8000u) << 16, mag = h & 0x7fffu;
	uint32_t out;
	if (mag >= 0x7c00u)
		out = 0x7f800000u | (mag & 0x3ffu) << 13 | (mag > 0x7c00u ? 0x00400000u : 0u);
	else if (mag < 0x0400u)
		out = f2u(__fmul_rn((float)(int32_t)mag, 0x1p-24f));
	else
		out = (mag << 13) + (112u << 23);
	return u2f(out | sign);
}

/* f32 -> f16 bits, round to nearest even; NaN keeps its top payload bits, quiet. */
__device__ __forceinline__ uint32_t f16_narrow(float f)
{
	uint32_t u = f2u(f), sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
	uint32_t out;
	if (mag > 0x7f800000u) {
		out = 0x7e00u | ((mag >> 13) & 0x1ffu);
	} else if (mag < (113u << 23)) {
		out = f2u(__fadd_rn(u2f(mag), 0.5f)) - 0x3f000000u;
	} else {
		out = (mag - (112u << 23) + 0xfffu + ((mag >> 13) & 1u)) >> 13;
		out = out > 0x7c00u ? 0x7c00u : out;
	}
	return out | sign;
}

__device__ __forceinline__ float bf16_widen(uint32_t h)
{
	uint32_t u = h << 16;
	if ((u & 0x7fffffffu) > 0x7f800000u)
		u |= 0x00400000u;
	return u2f(u);
}

__device__ __forceinline__ uint32_t bf16_narrow(float f)
{
	uint32_t u = f2u(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (u >> 16) | 0x0040u;
	return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* IEEE 754-2019 minimum/maximum on sign-magnitude bits: -0 < +0, NaN (a's first) wins. */
template <typename U, typename S, U MAG, U INF, U QUIET>
__device__ __forceinline__ U fminmax(U x, U y, bool want_max)
{
	S kx = (S)(x ^ ((S)x < 0 ? MAG : (U)0));
	S ky = (S)(y ^ ((S)y < 0 ? MAG : (U)0));
	bool gt = kx > ky;
	U r = want_max ? (gt ? x : y) : (gt ? y : x);
	if ((U)(y & MAG) > INF)
		r = (U)(y | QUIET);
	if ((U)(x & MAG) > INF)
		r = (U)(x | QUIET);
	return r;
}

enum { SUM = KEEL_SUM, PROD = KEEL_PROD, MIN = KEEL_MIN, MAX = KEEL_MAX, AVG = KEEL_AVG };

/* One element of each dtype: combine, and divide (avg's last step). */
template <int OP> struct F32 {
	typedef uint32_t T;
	static __device__ __forceinline__ T comb(T x, T y)
	{
		if (OP == MIN || OP == MAX)
			return fminmax<uint32_t, int32_t, 0x7fffffffu, 0x7f800000u, 0x00400000u>(
			    x, y, OP == MAX);
		float a = u2f(x), b = u2f(y);
		return f2u(OP == PROD ? __fmul_rn(a, b) : __fadd_rn(a, b));
	}
	static __device__ __forceinline__ T div(T x, uint32_t n)
	{
		return f2u(__fdiv_rn(u2f(x), (float)n));
	}
};

template <int OP> struct F64 {
	typedef uint64_t T;
	static __device__ __forceinline__ T comb(T x, T y)
	{
		if (OP == MIN || OP == MAX)
			return fminmax<uint64_t, int64_t, 0x7fffffffffffffffull,
				       0x7ff0000000000000ull, 0x0008000000000000ull>(x, y,
										     OP == MAX);
		double a = __longlong_as_double((long long)x),
		       b = __longlong_as_double((long long)y);
		return (T)__double_as_longlong(OP == PROD ? __dmul_rn(a, b) : __dadd_rn(a, b));
	}
	static __device__ __forceinline__ T div(T x, uint32_t n)
	{
		double a = __longlong_as_double((long long)x);
		return (T)__double_as_longlong(__ddiv_rn(a, (double)n));
	}
};

template <int OP, bool BF> struct Half {
	typedef uint16_t T;
	static __device__ __forceinline__ float widen(uint32_t h)
	{
		return BF ? bf16_widen(h) : f16_widen(h);
	}
	static __device__ __forceinline__ uint32_t narrow(float f)
	{
		return BF ? bf16_narrow(f) : f16_narrow(f);
	}
	static __device__ __forceinline__ T comb(T x, T y)
	{
		if (OP == MIN || OP == MAX) {
			if (BF)
				return fminmax<uint16_t, int16_t, 0x7fffu, 0x7f80u, 0x0040u>(
				    x, y, OP == MAX);
			return fminmax<uint16_t, int16_t, 0x7fffu, 0x7c00u, 0x0200u>(x, y,
										     OP == MAX);
		}
		float a = widen(x), b = widen(y);
		return (T)narrow(OP == PROD ? __fmul_rn(a, b) : __fadd_rn(a, b));
	}
	static __device__ __forceinline__ T div(T x, uint32_t n)
	{
		return (T)narrow(__fdiv_rn(widen(x), (float)n));
	}
};

/* Integers: sums and products in unsigned (same bits, no undefined overflow), wrapping. */
template <typename S, typename U, int OP> struct Int {
	typedef S T;
	static __device__ __forceinline__ T comb(T x, T y)
	{
		if (OP == MIN)
			return y < x ? y : x;
		if (OP == MAX)
			return y > x ? y : x;
		return (T)(OP == PROD ? (U)x * (U)y : (U)x + (U)y);
	}
};

template <int OP> struct I32 : Int<int32_t, uint32_t, OP> {
	/* through double, as the CPU: truncating the rounded quotient is C's division */
	static __device__ __forceinline__ int32_t div(int32_t x, uint32_t n)
	{
		return (int32_t)__ddiv_rn((double)x, (double)n);
	}
};

template <int OP> struct I64 : Int<int64_t, uint64_t, OP> {
	static __device__ __forceinline__ int64_t div(int64_t x, uint32_t n)
	{
		return x / (int64_t)n;
	}
};

/* u8 wraps through unsigned as the CPU's does; avg through float. */
template <int OP> struct U8 : Int<uint8_t, unsigned, OP> {
	static __device__ __forceinline__ uint8_t div(uint8_t x, uint32_t n)
	{
		return (uint8_t)(int32_t)__fdiv_rn((float)(int32_t)x, (float)n);
	}
};

template <typename E>
__device__ __forceinline__ typename E::T one(typename E::T x, typename E::T y, uint32_t divisor)
{
	typename E::T r = E::comb(x, y);
	return divisor > 1 ? E::div(r, divisor) : r;
}

/* 16-byte vectors while every pointer is aligned (`vec`), then element by element. */
template <typename E>
__global__ void reduce_kernel(typename E::T *dst, const typename E::T *a, const typename E::T *b,
			      typename E::T *mirror, size_t count, uint32_t divisor, bool vec)
{
	typedef typename E::T T;
	const unsigned V = 16 / sizeof(T);
	size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t nvec = vec ? count / V : 0;
	for (size_t i = tid; i < nvec; i += stride) {
		union {
			uint4 v;
			T e[16 / sizeof(T)];
		} x, y, r;
		x.v = reinterpret_cast<const uint4 *>(a)[i];
		y.v = reinterpret_cast<const uint4 *>(b)[i];
#pragma unroll
		for (unsigned j = 0; j < V; j++)
			r.e[j] = one<E>(x.e[j], y.e[j], divisor);
		reinterpret_cast<uint4 *>(dst)[i] = r.v;
		if (mirror != nullptr)
			reinterpret_cast<uint4 *>(mirror)[i] = r.v;
	}
	for (size_t i = nvec * V + tid; i < count; i += stride) {
		T r = one<E>(a[i], b[i], divisor);
		dst[i] = r;
		if (mirror != nullptr)
			mirror[i] = r;
	}
}

template <typename E>
int launch(void *dst, const void *a, const void *b, void *mirror, size_t count, uint32_t divisor,
	   cudaStream_t stream)
{
	typedef typename E::T T;
	uintptr_t bits = (uintptr_t)dst | (uintptr_t)a | (uintptr_t)b | (uintptr_t)mirror;
	bool vec = (bits & 15u) == 0;
	const unsigned threads = 256;
	size_t per_block = (size_t)threads * (16 / sizeof(T));
	size_t blocks = (count + per_block - 1) / per_block;
	if (blocks > 65535)
		blocks = 65535; /* the grid-stride loop covers the rest */
	if (blocks == 0)
		blocks = 1;
	reduce_kernel<E><<<(unsigned)blocks, threads, 0, stream>>>(
	    (T *)dst, (const T *)a, (const T *)b, (T *)mirror, count, divisor, vec);
	return (int)cudaGetLastError();
}

template <int OP>
int launch_op(void *dst, const void *a, const void *b, void *mirror, size_t count,
	      enum keel_dtype dtype, uint32_t divisor, cudaStream_t s)
{
	switch (dtype) {
	case KEEL_F32:
		return launch<F32<OP>>(dst, a, b, mirror, count, divisor, s);
	case KEEL_F64:
		return launch<F64<OP>>(dst, a, b, mirror, count, divisor, s);
	case KEEL_F16:
		return launch<Half<OP, false>>(dst, a, b, mirror, count, divisor, s);
	case KEEL_BF16:
		return launch<Half<OP, true>>(dst, a, b, mirror, count, divisor, s);
	case KEEL_I32:
		return launch<I32<OP>>(dst, a, b, mirror, count, divisor, s);
	case KEEL_I64:
		return launch<I64<OP>>(dst, a, b, mirror, count, divisor, s);
	case KEEL_U8:
		return launch<U8<OP>>(dst, a, b, mirror, count, divisor, s);
	default:
		return (int)cudaErrorInvalidValue;
	}
}

} // namespace

extern "C" int cuda_reduce_launch(void *dst, const void *a, const void *b, void *mirror,
				  size_t count, enum keel_dtype dtype, enum keel_redop op,
				  uint32_t divisor, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (count == 0)
		return 0;
	switch (op) {
	case KEEL_SUM:
	case KEEL_AVG: /* sums; the divisor finishes the last step */
		return launch_op<SUM>(dst, a, b, mirror, count, dtype, divisor, s);
	case KEEL_PROD:
		return launch_op<PROD>(dst, a, b, mirror, count, dtype, 0, s);
	case KEEL_MIN:
		return launch_op<MIN>(dst, a, b, mirror, count, dtype, 0, s);
	case KEEL_MAX:
		return launch_op<MAX>(dst, a, b, mirror, count, dtype, 0, s);
	default:
		return (int)cudaErrorInvalidValue;
	}
}
