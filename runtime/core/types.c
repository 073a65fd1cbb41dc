/* Element type sizes and the names of dtypes and reduction ops, for logs and tools.
 * Pure table lookups: out-of-range values answer 0 or NULL, never trap; only a hole in one of
 * the tables below (a dtype or op added without its entry) does. */
#include "keel/types.h"

#include "assert_int.h"

static const size_t dtype_sizes[KEEL_DTYPE_COUNT] = {
    [KEEL_F32] = 4, [KEEL_F64] = 8, [KEEL_F16] = 2, [KEEL_BF16] = 2,
    [KEEL_I32] = 4, [KEEL_I64] = 8, [KEEL_U8] = 1,
};

static const char *const dtype_names[KEEL_DTYPE_COUNT] = {
    [KEEL_F32] = "f32", [KEEL_F64] = "f64", [KEEL_F16] = "f16", [KEEL_BF16] = "bf16",
    [KEEL_I32] = "i32", [KEEL_I64] = "i64", [KEEL_U8] = "u8",
};

static const char *const redop_names[KEEL_REDOP_COUNT] = {
    [KEEL_SUM] = "sum", [KEEL_PROD] = "prod", [KEEL_MIN] = "min",
    [KEEL_MAX] = "max", [KEEL_AVG] = "avg",
};

_Static_assert(KEEL_DTYPE_COUNT == 7, "a new dtype needs a size and a name here");
_Static_assert(KEEL_REDOP_COUNT == 5, "a new op needs a name here");

/* The enums' underlying type may be unsigned, so compare through unsigned: a negative value
 * cast in by a caller becomes huge and fails the same test. */
size_t keel_dtype_size(enum keel_dtype dtype)
{
	if ((unsigned)dtype >= KEEL_DTYPE_COUNT)
		return 0;
	size_t size = dtype_sizes[dtype];
	KEEL_ASSERT(size != 0); /* every valid dtype has a size: 0 means "invalid" to callers */
	/* frag_bytes and the reduce kernels' blocks hold whole elements of 1, 2, 4 or 8 bytes */
	KEEL_ASSERT(size <= 8 && (size & (size - 1)) == 0);
	return size;
}

const char *keel_dtype_name(enum keel_dtype dtype)
{
	if ((unsigned)dtype >= KEEL_DTYPE_COUNT)
		return NULL;
	KEEL_ASSERT(dtype_names[dtype] != NULL);
	KEEL_ASSERT(dtype_sizes[dtype] != 0); /* a dtype with a name is one keel can reduce */
	return dtype_names[dtype];
}

const char *keel_redop_name(enum keel_redop op)
{
	if ((unsigned)op >= KEEL_REDOP_COUNT)
		return NULL;
	KEEL_ASSERT(redop_names[op] != NULL);
	return redop_names[op];
}
