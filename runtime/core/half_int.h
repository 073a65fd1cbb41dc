/* f16 and bf16 conversions to and from f32, inline for the loops that convert whole buffers:
 * the reduction kernels (reduce.c) and the wire encodings of compressed AllReduce traffic
 * (compress.c). Round to nearest even; NaN stays NaN (quiet), inf stays inf. Preconditions
 * are debug assertions: a release branch inside a vectorized loop would keep it scalar. */
#ifndef KEEL_HALF_INT_H
#define KEEL_HALF_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "assert_int.h"

_Static_assert(sizeof(float) == sizeof(uint32_t), "f32 bits travel through a uint32_t");

static inline uint32_t f32_to_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float f32_from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* ---- f16 and bf16 conversions ----
 * Without branches: explicit bit masks rather than ?: so that gcc cannot turn the selects back
 * into branches: once a float operation sits on one side of a branch, if-conversion may not
 * hoist it (it could trap) and the whole loop stays scalar. */

static inline uint32_t mask_if(bool cond)
{
	return (uint32_t)0 - (uint32_t)cond;
}

static inline uint32_t blend(uint32_t mask, uint32_t yes, uint32_t no)
{
	KEEL_ASSERT_DEBUG(mask == 0 || mask == UINT32_MAX); /* from mask_if: all or nothing */
	return (yes & mask) | (no & ~mask);
}

/* h holds the f16 in its low 16 bits, the rest zero. Working in uint32_t throughout keeps the
 * vector code in 32-bit lanes. */
static inline float f16_widen32(uint32_t h)
{
	KEEL_ASSERT_DEBUG(h <= 0xffffu);
	uint32_t sign = (h & 0x8000u) << 16;
	uint32_t mag = h & 0x7fffu;
	/* Normal: move the fields into place and rebias the exponent from 15 to 127. */
	uint32_t normal = (mag << 13) + (112u << 23);
	/* Inf and NaN keep their mantissa; a NaN comes out quiet. */
	uint32_t special =
	    0x7f800000u | (mag & 0x3ffu) << 13 | (mask_if(mag > 0x7c00u) & 0x00400000u);
	/* Subnormal (and zero): the mantissa is an integer times 2^-24; both steps are exact and
	 * the result is a normal f32, so flush-to-zero or denormals-are-zero modes cannot touch it.
	 * The int32_t conversion is a single instruction; uint32_t to float is not, before AVX-512.
	 */
	uint32_t subnormal = f32_to_bits((float)(int32_t)mag * 0x1p-24f);
	uint32_t out = blend(mask_if(mag >= 0x7c00u), special, normal);

	out = blend(mask_if(mag < 0x0400u), subnormal, out);
	return f32_from_bits(out | sign);
}

static inline float f16_widen(uint16_t h)
{
	return f16_widen32(h);
}

/* The f16 bits in the low 16 bits of the result, the rest zero. */
static inline uint32_t f16_narrow32(float f)
{
	uint32_t u = f32_to_bits(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t mag = u & 0x7fffffffu;
	/* Normal result: rebias, then round the 13 dropped bits to nearest even; a carry out of
	 * the mantissa bumps the exponent, and anything at or past 0x7c00 has overflowed to inf. */
	uint32_t normal = (mag - (112u << 23) + 0xfffu + ((mag >> 13) & 1u)) >> 13;
	/* Subnormal result: adding 0.5 puts the f16 subnormal step (2^-24) at the f32 ulp of 0.5,
	 * so the FPU's own round-to-nearest-even does the rounding. A result of 0x400 is the
	 * smallest normal, which is right. Inputs that are f32 denormals round to 0 either way. */
	uint32_t subnormal = f32_to_bits(f32_from_bits(mag) + 0.5f) - 0x3f000000u;
	uint32_t nan = 0x7e00u | ((mag >> 13) & 0x1ffu);
	uint32_t out = normal > 0x7c00u ? 0x7c00u : normal;

	out = blend(mask_if(mag < (113u << 23)), subnormal, out);
	out = blend(mask_if(mag > 0x7f800000u), nan, out);
	KEEL_ASSERT_DEBUG((out | sign) <= 0xffffu);
	return out | sign;
}

static inline uint16_t f16_narrow(float f)
{
	return (uint16_t)f16_narrow32(f);
}

/* bf16 in the low 16 bits of h, the rest zero. */
static inline float bf16_widen32(uint32_t h)
{
	KEEL_ASSERT_DEBUG(h <= 0xffffu);
	uint32_t u = h << 16;

	u |= mask_if((u & 0x7fffffffu) > 0x7f800000u) & 0x00400000u;
	return f32_from_bits(u);
}

static inline float bf16_widen(uint16_t h)
{
	return bf16_widen32(h);
}

/* The bf16 bits in the low 16 bits of the result, the rest zero. */
static inline uint32_t bf16_narrow32(float f)
{
	uint32_t u = f32_to_bits(f);
	/* Round to nearest even on the low 16 bits; the largest finite values carry into inf. */
	uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	uint32_t nan = (u >> 16) | 0x0040u;

	return blend(mask_if((u & 0x7fffffffu) > 0x7f800000u), nan, rounded);
}

static inline uint16_t bf16_narrow(float f)
{
	return (uint16_t)bf16_narrow32(f);
}

#endif
