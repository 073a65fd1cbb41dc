/* The reduction kernels' launcher (reduce_kernels.cu), called by device_cuda.c. Not exported:
 * libkeel_cuda.a keeps only keel_ symbols global. */
#ifndef KEEL_REDUCE_KERNELS_INT_H
#define KEEL_REDUCE_KERNELS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = a[i] op b[i] (then / divisor when divisor > 1), mirror[i] = dst[i] when mirror is
 * not NULL, for i < count, queued on `stream` (a cudaStream_t). Every pointer is one the
 * kernel may dereference (device memory, or the device alias of registered host memory).
 * Returns the cudaError_t of the launch (0: queued). */
int cuda_reduce_launch(void *dst, const void *a, const void *b, void *mirror, size_t count,
		       enum keel_dtype dtype, enum keel_redop op, uint32_t divisor, void *stream);

#ifdef __cplusplus
}
#endif

#endif
