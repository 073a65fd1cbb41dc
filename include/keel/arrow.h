/* Batches described through the Arrow C Data Interface (start-up library, libkeel_boot.a):
 * keel_arrow_export lays caller columns out as an Arrow record batch (a struct array, one
 * child per column) without copying them; keel_arrow_column_find checks a batch from any Arrow
 * producer and hands back a column's values in place. The structs are the interface's stable
 * ABI (arrow.apache.org/docs/format/CDataInterface.html): no Arrow library is needed, and one
 * that defines them first (ARROW_C_DATA_INTERFACE) is used as is. Nothing here allocates. */
#ifndef KEEL_ARROW_H
#define KEEL_ARROW_H

#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE	      2
#define ARROW_FLAG_MAP_KEYS_SORTED    4

struct ArrowSchema {
	const char *format;
	const char *name;
	const char *metadata;
	int64_t flags;
	int64_t n_children;
	struct ArrowSchema **children;
	struct ArrowSchema *dictionary;
	void (*release)(struct ArrowSchema *);
	void *private_data;
};

struct ArrowArray {
	int64_t length;
	int64_t null_count;
	int64_t offset;
	int64_t n_buffers;
	int64_t n_children;
	const void **buffers;
	struct ArrowArray **children;
	struct ArrowArray *dictionary;
	void (*release)(struct ArrowArray *);
	void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#define KEEL_ARROW_COLUMNS_MAX 16u	  /* columns in one exported batch */
#define KEEL_ARROW_NAME_MAX    32u	  /* bytes of a column name, NUL included */
#define KEEL_ARROW_ALIGN       8u	  /* the interface asks buffers to be 8-byte aligned */
#define KEEL_ARROW_WIDTH_MAX   (1u << 20) /* values per row of a fixed-size-list column */

/* One column: `width` values of `dtype` per row, rows after rows. width 1 is a plain column
 * (Arrow "f", "C"...), more a fixed-size list ("+w:64" over "f"). bf16 has no Arrow type. */
struct keel_arrow_column {
	const char *name;
	enum keel_dtype dtype;
	uint32_t width;
	const void *data; /* KEEL_ARROW_ALIGN-aligned; rows * width values; stays the caller's */
};

/* An exported batch: hand &schema and &array to the consumer. Everything the two structs point
 * to lives here, so the batch must stay where it is (and its columns' memory valid) until both
 * are released. The consumer may move the two structs out (the interface's move semantics);
 * their release callbacks only mark them released: the memory is the caller's. */
struct keel_arrow_batch {
	struct ArrowSchema schema;
	struct ArrowArray array;
	/* private: the children and their buffers */
	struct ArrowSchema col_schema[KEEL_ARROW_COLUMNS_MAX], list_schema[KEEL_ARROW_COLUMNS_MAX];
	struct ArrowArray col_array[KEEL_ARROW_COLUMNS_MAX], list_array[KEEL_ARROW_COLUMNS_MAX];
	struct ArrowSchema *schema_children[KEEL_ARROW_COLUMNS_MAX],
	    *list_schema_child[KEEL_ARROW_COLUMNS_MAX];
	struct ArrowArray *array_children[KEEL_ARROW_COLUMNS_MAX],
	    *list_array_child[KEEL_ARROW_COLUMNS_MAX];
	const void *buffers[KEEL_ARROW_COLUMNS_MAX][2], *list_buffers[KEEL_ARROW_COLUMNS_MAX][2];
	const void *struct_buffers[1];
	char names[KEEL_ARROW_COLUMNS_MAX][KEEL_ARROW_NAME_MAX];
	char formats[KEEL_ARROW_COLUMNS_MAX][16];
};

/* Describe `rows` rows of `count` columns as a record batch (format "+s", no nulls) in *b.
 * Errors: -EINVAL (NULL, count 0 or over KEEL_ARROW_COLUMNS_MAX, rows < 0, a width of 0 or
 * over KEEL_ARROW_WIDTH_MAX, a name empty, too long or repeated, data NULL with rows > 0),
 * -ENOTSUP (a dtype Arrow has no type for: bf16), -EFAULT (data not 8-byte aligned). err, when
 * not NULL, names the column and the problem. */
KEEL_MUST_USE int keel_arrow_export(struct keel_arrow_batch *b,
				    const struct keel_arrow_column *cols, uint32_t count,
				    int64_t rows, char *err, size_t err_len);

/* Find column `name` of a record batch from any producer and check that it holds `width`
 * values of `dtype` per row (width 1: a plain column; more: a fixed-size list of that width),
 * without nulls. *data gets the values of the batch's first row (offsets applied), *rows the
 * batch's length. Nothing is copied or released: the batch stays the producer's.
 * Errors: -EINVAL (NULL, width 0, a released schema or array), -EBADMSG (not a struct array,
 * or one that breaks the interface: schema and array disagree on children, buffers or lengths),
 * -ENOENT (no such column), -EPROTO (the column has another type or width), -ENOTSUP (bf16
 * asked, a dictionary, or null values in the rows), -EFAULT (values missing or misaligned for
 * dtype). err, when not NULL, says which column and what was found. */
KEEL_MUST_USE int keel_arrow_column_find(const struct ArrowSchema *schema,
					 const struct ArrowArray *array, const char *name,
					 enum keel_dtype dtype, uint32_t width, const void **data,
					 int64_t *rows, char *err, size_t err_len);

/* The Arrow format string of a dtype ("f" for f32...), NULL for bf16 or out of range. */
const char *keel_arrow_format(enum keel_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif
