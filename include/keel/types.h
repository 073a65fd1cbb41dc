/* Element types and reduction operations shared by every collective and kernel. */
#ifndef KEEL_TYPES_H
#define KEEL_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum keel_dtype {
	KEEL_F32 = 0,
	KEEL_F64,
	KEEL_F16,  /* IEEE 754 binary16, stored as uint16_t */
	KEEL_BF16, /* bfloat16 (upper half of an f32), stored as uint16_t */
	KEEL_I32,
	KEEL_I64,
	KEEL_U8,
	KEEL_DTYPE_COUNT
};

enum keel_redop {
	KEEL_SUM = 0,
	KEEL_PROD,
	KEEL_MIN,
	KEEL_MAX,
	KEEL_AVG, /* sum, then divided by the number of contributors (integers truncate) */
	KEEL_REDOP_COUNT
};

/* Size in bytes of one element of `dtype`; 0 for an invalid dtype. */
size_t keel_dtype_size(enum keel_dtype dtype);
/* Short names ("f32", "sum"), NULL when out of range. */
const char *keel_dtype_name(enum keel_dtype dtype);
const char *keel_redop_name(enum keel_redop op);

#ifdef __cplusplus
}
#endif

#endif
