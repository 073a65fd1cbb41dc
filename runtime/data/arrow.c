/* Arrow C Data Interface batches (keel/arrow.h): export caller columns as a struct array
 * without a copy, and find a column in any producer's batch. Never allocates, never copies
 * values, never trusts a foreign batch's shape without checking it. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "assert_int.h"
#include "keel/arrow.h"

_Static_assert(KEEL_ARROW_WIDTH_MAX < 1000000000u, "+w:N fits the format buffer");

const char *keel_arrow_format(enum keel_dtype dtype)
{
	switch (dtype) {
	case KEEL_F32:
		return "f";
	case KEEL_F64:
		return "g";
	case KEEL_F16:
		return "e";
	case KEEL_I32:
		return "i";
	case KEEL_I64:
		return "l";
	case KEEL_U8:
		return "C";
	default:
		return NULL; /* bf16: Arrow has no such type */
	}
}

static void say(char *err, size_t err_len, const char *what, const char *name, const char *why)
{
	if (err != NULL && err_len > 0)
		snprintf(err, err_len, "%s%s%s%s", what, name != NULL ? " '" : "",
			 name != NULL ? name : "", name != NULL ? "': " : ": ");
	size_t used = err != NULL ? strnlen(err, err_len) : 0;
	if (err != NULL && used < err_len)
		snprintf(err + used, err_len - used, "%s", why);
}

/* ---- export ---------------------------------------------------------------------------- */

/* Our structs only point into the batch: releasing one marks it (and what it owns) done. */
static void leaf_schema_release(struct ArrowSchema *s)
{
	s->release = NULL;
}

static void leaf_array_release(struct ArrowArray *a)
{
	a->release = NULL;
}

static void col_schema_release(struct ArrowSchema *s)
{
	for (int64_t i = 0; i < s->n_children; i++)
		if (s->children[i]->release != NULL)
			leaf_schema_release(s->children[i]);
	s->release = NULL;
}

static void col_array_release(struct ArrowArray *a)
{
	for (int64_t i = 0; i < a->n_children; i++)
		if (a->children[i]->release != NULL)
			leaf_array_release(a->children[i]);
	a->release = NULL;
}

static void top_schema_release(struct ArrowSchema *s)
{
	for (int64_t i = 0; i < s->n_children; i++)
		if (s->children[i]->release != NULL)
			col_schema_release(s->children[i]);
	s->release = NULL;
}

static void top_array_release(struct ArrowArray *a)
{
	for (int64_t i = 0; i < a->n_children; i++)
		if (a->children[i]->release != NULL)
			col_array_release(a->children[i]);
	a->release = NULL;
}

static int column_ok(const struct keel_arrow_batch *b, const struct keel_arrow_column *c,
		     uint32_t i, int64_t rows, char *err, size_t err_len)
{
	size_t name_len = c->name != NULL ? strlen(c->name) : 0;
	if (name_len == 0 || name_len >= KEEL_ARROW_NAME_MAX) {
		say(err, err_len, "column", c->name, "a name of 1..31 bytes is needed");
		return -EINVAL;
	}
	for (uint32_t j = 0; j < i; j++)
		if (strcmp(b->names[j], c->name) == 0) {
			say(err, err_len, "column", c->name, "named twice");
			return -EINVAL;
		}
	if (c->width == 0 || c->width > KEEL_ARROW_WIDTH_MAX) {
		say(err, err_len, "column", c->name, "width must be 1..KEEL_ARROW_WIDTH_MAX");
		return -EINVAL;
	}
	if ((unsigned)c->dtype >= KEEL_DTYPE_COUNT || keel_arrow_format(c->dtype) == NULL) {
		say(err, err_len, "column", c->name, "its dtype has no Arrow type (bf16)");
		return (unsigned)c->dtype >= KEEL_DTYPE_COUNT ? -EINVAL : -ENOTSUP;
	}
	if (c->data == NULL && rows > 0) {
		say(err, err_len, "column", c->name, "no data");
		return -EINVAL;
	}
	if ((uintptr_t)c->data % KEEL_ARROW_ALIGN != 0) {
		say(err, err_len, "column", c->name, "data is not 8-byte aligned");
		return -EFAULT;
	}
	return 0;
}

/* Column i: a primitive array over its data, or a fixed-size list over a primitive child. */
static void column_fill(struct keel_arrow_batch *b, const struct keel_arrow_column *c, uint32_t i,
			int64_t rows)
{
	struct ArrowSchema *s = &b->col_schema[i];
	struct ArrowArray *a = &b->col_array[i];
	memcpy(b->names[i], c->name, strlen(c->name) + 1);
	*s = (struct ArrowSchema){.format = keel_arrow_format(c->dtype),
				  .name = b->names[i],
				  .release = col_schema_release,
				  .private_data = b};
	b->buffers[i][0] = NULL; /* no validity bitmap: no nulls */
	b->buffers[i][1] = c->data;
	*a = (struct ArrowArray){.length = rows,
				 .n_buffers = 2,
				 .buffers = b->buffers[i],
				 .release = col_array_release,
				 .private_data = b};
	if (c->width == 1)
		return;
	snprintf(b->formats[i], sizeof(b->formats[i]), "+w:%" PRIu32, c->width);
	b->list_schema[i] = *s;
	b->list_schema[i].name = "item";
	b->list_schema[i].release = leaf_schema_release;
	b->list_schema_child[i] = &b->list_schema[i];
	s->format = b->formats[i];
	s->n_children = 1;
	s->children = &b->list_schema_child[i];
	b->list_array[i] = *a;
	b->list_array[i].length = rows * (int64_t)c->width;
	b->list_array[i].release = leaf_array_release;
	b->list_array_child[i] = &b->list_array[i];
	b->list_buffers[i][0] = NULL;
	a->n_buffers = 1;
	a->buffers = b->list_buffers[i];
	a->n_children = 1;
	a->children = &b->list_array_child[i];
}

int keel_arrow_export(struct keel_arrow_batch *b, const struct keel_arrow_column *cols,
		      uint32_t count, int64_t rows, char *err, size_t err_len)
{
	if (b == NULL || cols == NULL || count == 0 || count > KEEL_ARROW_COLUMNS_MAX || rows < 0) {
		say(err, err_len, "batch", NULL,
		    "needs 1..KEEL_ARROW_COLUMNS_MAX columns, rows >= 0");
		return -EINVAL;
	}
	memset(b, 0, sizeof(*b));
	for (uint32_t i = 0; i < count; i++) {
		if (cols[i].width > 1 && rows > INT64_MAX / (int64_t)cols[i].width) {
			say(err, err_len, "column", cols[i].name, "rows * width overflows");
			return -EINVAL;
		}
		int rc = column_ok(b, &cols[i], i, rows, err, err_len);
		if (rc != 0)
			return rc;
		column_fill(b, &cols[i], i, rows);
		b->schema_children[i] = &b->col_schema[i];
		b->array_children[i] = &b->col_array[i];
	}
	b->schema = (struct ArrowSchema){.format = "+s",
					 .name = "",
					 .n_children = count,
					 .children = b->schema_children,
					 .release = top_schema_release,
					 .private_data = b};
	b->struct_buffers[0] = NULL;
	b->array = (struct ArrowArray){.length = rows,
				       .n_buffers = 1,
				       .buffers = b->struct_buffers,
				       .n_children = count,
				       .children = b->array_children,
				       .release = top_array_release,
				       .private_data = b};
	KEEL_ASSERT(b->schema.n_children == b->array.n_children);
	return 0;
}

/* ---- import ---------------------------------------------------------------------------- */

/* Whether rows [from, from + n) of an array hold a null. -EBADMSG: a null count without a
 * bitmap to say which. */
static int nulls_in(const struct ArrowArray *a, int64_t from, int64_t n, bool *any)
{
	const uint8_t *bits = a->n_buffers > 0 ? a->buffers[0] : NULL;
	*any = false;
	if (a->null_count == 0)
		return 0;
	if (bits == NULL)
		return a->null_count > 0 ? -EBADMSG : 0; /* -1 (unknown) and no bitmap: none */
	for (int64_t i = from; i < from + n; i++)
		if (!(bits[i >> 3] & (1u << (i & 7)))) {
			*any = true;
			return 0;
		}
	return 0;
}

/* The shape every array must have to be read at all. */
static bool array_sane(const struct ArrowArray *a, int64_t buffers, int64_t children)
{
	return a != NULL && a->release != NULL && a->length >= 0 && a->offset >= 0 &&
	       a->n_buffers == buffers && a->buffers != NULL && a->n_children == children &&
	       (children == 0 || a->children != NULL);
}

/* Values [first, first + n) of a primitive array `a` of `dtype`, checked. */
static int values_get(const struct ArrowSchema *s, const struct ArrowArray *a,
		      enum keel_dtype dtype, int64_t first, int64_t n, const void **data,
		      const char *name, char *err, size_t err_len)
{
	const char *want = keel_arrow_format(dtype);
	if (s->dictionary != NULL || a->dictionary != NULL) {
		say(err, err_len, "column", name, "dictionary-encoded values are not supported");
		return -ENOTSUP;
	}
	if (s->format == NULL || strcmp(s->format, want) != 0) {
		char why[96];
		snprintf(why, sizeof(why), "holds Arrow format '%s' where '%s' (%s) was asked",
			 s->format != NULL ? s->format : "(none)", want, keel_dtype_name(dtype));
		say(err, err_len, "column", name, why);
		return -EPROTO;
	}
	if (!array_sane(a, 2, 0) || a->offset + first + n > a->offset + a->length) {
		say(err, err_len, "column", name, "its values array is malformed or too short");
		return -EBADMSG;
	}
	bool any;
	if (nulls_in(a, a->offset + first, n, &any) != 0 || any) {
		say(err, err_len, "column", name,
		    any ? "has null values" : "null count, no bitmap");
		return any ? -ENOTSUP : -EBADMSG;
	}
	size_t size = keel_dtype_size(dtype);
	const uint8_t *base = a->buffers[1];
	if ((base == NULL && n > 0) || (uintptr_t)base % size != 0) {
		say(err, err_len, "column", name, "values missing or misaligned");
		return -EFAULT;
	}
	*data = base != NULL ? base + (size_t)(a->offset + first) * size : NULL;
	return 0;
}

/* A fixed-size list column of `width`: its own rows, then its child's values. */
static int list_get(const struct ArrowSchema *s, const struct ArrowArray *a, enum keel_dtype dtype,
		    uint32_t width, int64_t first, int64_t n, const void **data, const char *name,
		    char *err, size_t err_len)
{
	char want[16];
	snprintf(want, sizeof(want), "+w:%" PRIu32, width);
	if (s->format == NULL || strcmp(s->format, want) != 0) {
		char why[96];
		snprintf(why, sizeof(why), "holds Arrow format '%s' where '%s' (%u x %s) was asked",
			 s->format != NULL ? s->format : "(none)", want, width,
			 keel_dtype_name(dtype));
		say(err, err_len, "column", name, why);
		return -EPROTO;
	}
	if (!array_sane(a, 1, 1) || s->n_children != 1 || s->children == NULL ||
	    s->children[0] == NULL || a->children[0] == NULL || s->children[0]->release == NULL) {
		say(err, err_len, "column", name, "a fixed-size list without its one child");
		return -EBADMSG;
	}
	bool any;
	if (nulls_in(a, a->offset + first, n, &any) != 0 || any) {
		say(err, err_len, "column", name, any ? "has null rows" : "null count, no bitmap");
		return any ? -ENOTSUP : -EBADMSG;
	}
	if (a->offset + first + n > a->offset + a->length) {
		say(err, err_len, "column", name, "shorter than the batch");
		return -EBADMSG;
	}
	int64_t w = width;
	return values_get(s->children[0], a->children[0], dtype, (a->offset + first) * w, n * w,
			  data, name, err, err_len);
}

int keel_arrow_column_find(const struct ArrowSchema *schema, const struct ArrowArray *array,
			   const char *name, enum keel_dtype dtype, uint32_t width,
			   const void **data, int64_t *rows, char *err, size_t err_len)
{
	if (schema == NULL || array == NULL || name == NULL || data == NULL || rows == NULL ||
	    width == 0 || (unsigned)dtype >= KEEL_DTYPE_COUNT) {
		say(err, err_len, "arguments", NULL, "NULL, width 0 or dtype out of range");
		return -EINVAL;
	}
	if (schema->release == NULL || array->release == NULL) {
		say(err, err_len, "batch", NULL, "already released");
		return -EINVAL;
	}
	if (keel_arrow_format(dtype) == NULL) {
		say(err, err_len, "column", name, "bf16 has no Arrow type");
		return -ENOTSUP;
	}
	if (schema->format == NULL || strcmp(schema->format, "+s") != 0 ||
	    !array_sane(array, 1, schema->n_children) ||
	    (schema->n_children > 0 && schema->children == NULL)) {
		say(err, err_len, "batch", NULL,
		    "not a struct array (format \"+s\") matching its schema");
		return -EBADMSG;
	}
	bool any;
	if (nulls_in(array, array->offset, array->length, &any) != 0 || any) {
		say(err, err_len, "batch", NULL, any ? "has null rows" : "null count, no bitmap");
		return any ? -ENOTSUP : -EBADMSG;
	}
	for (int64_t i = 0; i < schema->n_children; i++) {
		const struct ArrowSchema *cs = schema->children[i];
		const struct ArrowArray *ca = array->children[i];
		if (cs == NULL || cs->name == NULL || strcmp(cs->name, name) != 0)
			continue;
		if (ca == NULL || cs->release == NULL || ca->release == NULL) {
			say(err, err_len, "column", name, "missing or released inside the batch");
			return -EBADMSG;
		}
		/* A child's row j is the struct's row offset + j (both offsets apply). */
		int rc = width == 1 ? values_get(cs, ca, dtype, array->offset, array->length, data,
						 name, err, err_len)
				    : list_get(cs, ca, dtype, width, array->offset, array->length,
					       data, name, err, err_len);
		if (rc == 0)
			*rows = array->length;
		return rc;
	}
	say(err, err_len, "column", name, "not in the batch");
	return -ENOENT;
}
