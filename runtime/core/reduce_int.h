/* CPU reduction kernels: dst[i] = a[i] (op) b[i] for every dtype and op.
 * Written so the compiler vectorizes them; no allocation, no branches per element on op/dtype. */
#ifndef KEEL_REDUCE_INT_H
#define KEEL_REDUCE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "keel/types.h"

/* dst[i] = a[i] op b[i] for i < count. dst may equal a or b; otherwise no overlap.
 * No alignment is required. KEEL_AVG reduces as KEEL_SUM (divide with reduce_finish_avg).
 * f16/bf16: each element is widened to f32, combined, and rounded to nearest-even once.
 * min/max: NaN in either input gives NaN (IEEE 754-2019 minimum/maximum); -0 < +0.
 * Integers wrap (two's complement) on overflow. */
void reduce_apply(void *dst, const void *a, const void *b, size_t count, enum keel_dtype dtype,
		  enum keel_redop op);

/* buf[i] /= contributors, for KEEL_AVG once the sum is complete. Floats divide in their
 * accumulation precision (f16/bf16 through f32) and round once; integers truncate toward zero. */
void reduce_finish_avg(void *buf, size_t count, enum keel_dtype dtype, uint32_t contributors);

/* Conversions, round to nearest even; NaN stays NaN (quiet), inf stays inf. */
float reduce_f16_to_f32(uint16_t h);
uint16_t reduce_f32_to_f16(float f);
float reduce_bf16_to_f32(uint16_t h);
uint16_t reduce_f32_to_bf16(float f);

#endif
