/* The reduction keel's collectives compute, element by element: the CPU reference that every
 * device implementation (keel/device.h) is checked against. */
#ifndef KEEL_REDUCE_H
#define KEEL_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = a[i] op b[i] for i < count; dst may equal a or b, otherwise no overlap; no
 * alignment needed. KEEL_AVG reduces as KEEL_SUM (keel_reduce_finish_avg divides). f16/bf16
 * widen to f32, combine and round to nearest even once; min/max give NaN when either input is
 * NaN and order -0 below +0; integers wrap. */
void keel_reduce(void *dst, const void *a, const void *b, size_t count, enum keel_dtype dtype,
		 enum keel_redop op);

/* buf[i] /= contributors (contributors >= 1), once a KEEL_AVG sum is complete: floats in
 * their accumulation precision (f16/bf16 through f32), rounded once; integers truncate. */
void keel_reduce_finish_avg(void *buf, size_t count, enum keel_dtype dtype, uint32_t contributors);

#ifdef __cplusplus
}
#endif

#endif
