/* Arrow C Data Interface batches: an exported batch checked field by field against the
 * interface (formats, buffers, children, release and move semantics, no copy); a batch built
 * the way other producers build theirs (validity bitmaps, null_count -1, offsets on the struct
 * and on the columns) read in place; and every refusal of keel_arrow_export and
 * keel_arrow_column_find. No Arrow library is packaged here, so the foreign batches are built
 * by hand, to the letter of the specification. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "keel/arrow.h"

#define ROWS  37
#define WIDTH 64

static float g_x[ROWS * WIDTH] __attribute__((aligned(64)));
static uint8_t g_y[ROWS + 7] __attribute__((aligned(64)));

static void fill(void)
{
	for (uint32_t i = 0; i < ROWS * WIDTH; i++)
		g_x[i] = (float)i * 0.25f;
	for (uint32_t i = 0; i < ROWS; i++)
		g_y[i] = (uint8_t)(i % 10);
}

static int export_xy(struct keel_arrow_batch *b, int64_t rows, char *err)
{
	struct keel_arrow_column cols[2] = {
	    {.name = "x", .dtype = KEEL_F32, .width = WIDTH, .data = g_x},
	    {.name = "y", .dtype = KEEL_U8, .width = 1, .data = g_y}};
	return keel_arrow_export(b, cols, 2, rows, err, 128);
}

static void test_arrow_export_follows_the_interface(void **state)
{
	(void)state;
	fill();
	static struct keel_arrow_batch b;
	char err[128] = "";
	assert_int_equal(export_xy(&b, ROWS, err), 0);
	struct ArrowSchema *s = &b.schema;
	struct ArrowArray *a = &b.array;
	assert_string_equal(s->format, "+s");
	assert_int_equal(s->n_children, 2);
	assert_null(s->dictionary);
	assert_non_null(s->release);
	assert_int_equal(a->length, ROWS);
	assert_int_equal(a->null_count, 0);
	assert_int_equal(a->offset, 0);
	assert_int_equal(a->n_buffers, 1); /* a struct: its validity bitmap only */
	assert_null(a->buffers[0]);
	assert_int_equal(a->n_children, 2);
	/* x: a fixed-size list of 64 floats, over one child of ROWS * 64 values, in place */
	assert_string_equal(s->children[0]->name, "x");
	assert_string_equal(s->children[0]->format, "+w:64");
	assert_int_equal(s->children[0]->n_children, 1);
	assert_string_equal(s->children[0]->children[0]->format, "f");
	assert_int_equal(a->children[0]->n_buffers, 1);
	assert_int_equal(a->children[0]->length, ROWS);
	assert_int_equal(a->children[0]->children[0]->length, ROWS * WIDTH);
	assert_int_equal(a->children[0]->children[0]->n_buffers, 2);
	assert_ptr_equal(a->children[0]->children[0]->buffers[1], g_x);
	/* y: a plain uint8 column */
	assert_string_equal(s->children[1]->name, "y");
	assert_string_equal(s->children[1]->format, "C");
	assert_int_equal(s->children[1]->n_children, 0);
	assert_int_equal(a->children[1]->n_buffers, 2);
	assert_ptr_equal(a->children[1]->buffers[1], g_y);
	/* Every format keel maps, and bf16 has none. */
	assert_string_equal(keel_arrow_format(KEEL_F64), "g");
	assert_string_equal(keel_arrow_format(KEEL_F16), "e");
	assert_string_equal(keel_arrow_format(KEEL_I32), "i");
	assert_string_equal(keel_arrow_format(KEEL_I64), "l");
	assert_null(keel_arrow_format(KEEL_BF16));
	assert_null(keel_arrow_format(KEEL_DTYPE_COUNT));
}

static void test_arrow_round_trip_reads_in_place(void **state)
{
	(void)state;
	fill();
	static struct keel_arrow_batch b;
	char err[128] = "";
	assert_int_equal(export_xy(&b, ROWS, err), 0);
	const void *x, *y;
	int64_t rows = -1;
	assert_int_equal(keel_arrow_column_find(&b.schema, &b.array, "x", KEEL_F32, WIDTH, &x,
						&rows, err, sizeof(err)),
			 0);
	assert_int_equal(rows, ROWS);
	assert_ptr_equal(x, g_x);
	assert_int_equal(keel_arrow_column_find(&b.schema, &b.array, "y", KEEL_U8, 1, &y, &rows,
						err, sizeof(err)),
			 0);
	assert_ptr_equal(y, g_y);
	/* An empty batch is a batch. */
	assert_int_equal(export_xy(&b, 0, err), 0);
	assert_int_equal(keel_arrow_column_find(&b.schema, &b.array, "x", KEEL_F32, WIDTH, &x,
						&rows, err, sizeof(err)),
			 0);
	assert_int_equal(rows, 0);
}

/* The consumer moves the structs out (a bitwise copy, the old ones marked released), reads the
 * moved ones, then releases: the callback marks every child released too. */
static void test_arrow_move_then_release(void **state)
{
	(void)state;
	fill();
	static struct keel_arrow_batch b;
	char err[128] = "";
	assert_int_equal(export_xy(&b, ROWS, err), 0);
	struct ArrowSchema s = b.schema;
	struct ArrowArray a = b.array;
	b.schema.release = NULL;
	b.array.release = NULL;
	const void *x;
	int64_t rows;
	assert_int_equal(
	    keel_arrow_column_find(&b.schema, &b.array, "x", KEEL_F32, WIDTH, &x, &rows, err, 128),
	    -EINVAL); /* the moved-from structs are released */
	assert_non_null(strstr(err, "released"));
	assert_int_equal(keel_arrow_column_find(&s, &a, "x", KEEL_F32, WIDTH, &x, &rows, err, 128),
			 0);
	s.release(&s);
	a.release(&a);
	assert_null(s.release);
	assert_null(a.release);
	for (int i = 0; i < 2; i++) {
		assert_null(b.col_schema[i].release);
		assert_null(b.col_array[i].release);
	}
	assert_null(b.list_schema[0].release);
	assert_null(b.list_array[0].release);
	/* A child moved out and released on its own, then the parent: each once. */
	assert_int_equal(export_xy(&b, ROWS, err), 0);
	struct ArrowArray child = *b.array.children[1];
	b.array.children[1]->release = NULL;
	child.release(&child);
	assert_null(child.release);
	b.array.release(&b.array);
	assert_null(b.col_array[0].release);
}

/* A foreign batch as producers with nulls support make one: every validity bitmap present
 * (all valid), null_count -1 (not computed), and offsets on the struct and its columns. */
struct foreign {
	struct ArrowSchema s, sx, sxi, sy, *sc[2], *sxc[1];
	struct ArrowArray a, ax, axi, ay, *ac[2], *axc[1];
	const void *ab[1], *axb[1], *axib[2], *ayb[2];
	uint8_t valid[(ROWS * WIDTH + 7) / 8 + 8];
};

static void noop_schema(struct ArrowSchema *s)
{
	s->release = NULL;
}

static void noop_array(struct ArrowArray *a)
{
	a->release = NULL;
}

static void foreign_make(struct foreign *f, int64_t off_struct, int64_t off_col)
{
	memset(f, 0, sizeof(*f));
	memset(f->valid, 0xff, sizeof(f->valid));
	int64_t len = ROWS - off_struct - off_col;
	f->sxi = (struct ArrowSchema){
	    .format = "f", .name = "item", .flags = ARROW_FLAG_NULLABLE, .release = noop_schema};
	f->sxc[0] = &f->sxi;
	f->sx = (struct ArrowSchema){.format = "+w:64",
				     .name = "x",
				     .flags = ARROW_FLAG_NULLABLE,
				     .n_children = 1,
				     .children = f->sxc,
				     .release = noop_schema};
	f->sy = (struct ArrowSchema){
	    .format = "C", .name = "y", .flags = ARROW_FLAG_NULLABLE, .release = noop_schema};
	f->sc[0] = &f->sy; /* columns in another order than keel exports them */
	f->sc[1] = &f->sx;
	f->s = (struct ArrowSchema){
	    .format = "+s", .name = "", .n_children = 2, .children = f->sc, .release = noop_schema};
	f->axib[0] = f->valid;
	f->axib[1] = g_x;
	f->axi = (struct ArrowArray){.length = ROWS * WIDTH,
				     .null_count = -1,
				     .n_buffers = 2,
				     .buffers = f->axib,
				     .release = noop_array};
	f->axc[0] = &f->axi;
	f->axb[0] = f->valid;
	f->ax = (struct ArrowArray){.length = ROWS - off_col,
				    .null_count = -1,
				    .offset = off_col,
				    .n_buffers = 1,
				    .buffers = f->axb,
				    .n_children = 1,
				    .children = f->axc,
				    .release = noop_array};
	f->ayb[0] = f->valid;
	f->ayb[1] = g_y;
	f->ay = (struct ArrowArray){.length = ROWS - off_col,
				    .null_count = -1,
				    .offset = off_col,
				    .n_buffers = 2,
				    .buffers = f->ayb,
				    .release = noop_array};
	f->ac[0] = &f->ay;
	f->ac[1] = &f->ax;
	f->ab[0] = NULL;
	f->a = (struct ArrowArray){.length = len,
				   .offset = off_struct,
				   .n_buffers = 1,
				   .buffers = f->ab,
				   .n_children = 2,
				   .children = f->ac,
				   .release = noop_array};
}

static void test_arrow_foreign_batch_with_offsets(void **state)
{
	(void)state;
	fill();
	static struct foreign f;
	char err[128] = "";
	const void *x, *y;
	int64_t rows;
	foreign_make(&f, 3, 2);
	assert_int_equal(
	    keel_arrow_column_find(&f.s, &f.a, "x", KEEL_F32, WIDTH, &x, &rows, err, 128), 0);
	assert_int_equal(rows, ROWS - 5);
	assert_ptr_equal(x, g_x + 5 * WIDTH); /* both offsets applied, no copy */
	assert_true(((const float *)x)[0] == g_x[5 * WIDTH]);
	assert_int_equal(keel_arrow_column_find(&f.s, &f.a, "y", KEEL_U8, 1, &y, &rows, err, 128),
			 0);
	assert_ptr_equal(y, g_y + 5);
	/* A null inside the rows read is refused and named; one before them is not read. */
	f.valid[0] &= (uint8_t) ~(1u << 6); /* y's physical row 6 = logical 1 + offsets 5 */
	assert_int_equal(keel_arrow_column_find(&f.s, &f.a, "y", KEEL_U8, 1, &y, &rows, err, 128),
			 -ENOTSUP);
	assert_non_null(strstr(err, "'y'"));
	assert_non_null(strstr(err, "null"));
	foreign_make(&f, 3, 2);
	f.valid[0] &= (uint8_t) ~(1u << 4); /* before the rows: fine */
	assert_int_equal(keel_arrow_column_find(&f.s, &f.a, "y", KEEL_U8, 1, &y, &rows, err, 128),
			 0);
}

static void test_arrow_find_refusals(void **state)
{
	(void)state;
	fill();
	static struct foreign f;
	char err[128];
	const void *x;
	int64_t rows;
#define FIND(name, dt, w) keel_arrow_column_find(&f.s, &f.a, name, dt, w, &x, &rows, err, 128)
	foreign_make(&f, 0, 0);
	assert_int_equal(FIND("z", KEEL_F32, 1), -ENOENT);
	assert_non_null(strstr(err, "'z'"));
	assert_int_equal(FIND("x", KEEL_F64, WIDTH), -EPROTO); /* f32 values, f64 asked */
	assert_non_null(strstr(err, "'f'"));
	assert_int_equal(FIND("x", KEEL_F32, 32), -EPROTO); /* width 64, 32 asked */
	assert_non_null(strstr(err, "+w:64"));
	assert_int_equal(FIND("x", KEEL_F32, 1), -EPROTO); /* a list, a plain column asked */
	assert_int_equal(FIND("y", KEEL_I32, 1), -EPROTO);
	assert_int_equal(FIND("y", KEEL_BF16, 1), -ENOTSUP);
	assert_int_equal(FIND("y", KEEL_U8, 0), -EINVAL);
	assert_int_equal(keel_arrow_column_find(NULL, &f.a, "y", KEEL_U8, 1, &x, &rows, err, 128),
			 -EINVAL);
	f.s.format = "+l"; /* a list array, not a batch */
	assert_int_equal(FIND("y", KEEL_U8, 1), -EBADMSG);
	foreign_make(&f, 0, 0);
	f.a.n_children = 1; /* disagrees with the schema */
	assert_int_equal(FIND("y", KEEL_U8, 1), -EBADMSG);
	foreign_make(&f, 0, 0);
	f.ay.length = ROWS - 1; /* a column shorter than the batch */
	assert_int_equal(FIND("y", KEEL_U8, 1), -EBADMSG);
	foreign_make(&f, 0, 0);
	f.axi.length = ROWS * WIDTH - 1; /* list values short of the last row */
	assert_int_equal(FIND("x", KEEL_F32, WIDTH), -EBADMSG);
	foreign_make(&f, 0, 0);
	f.ayb[0] = NULL;
	f.ay.null_count = 2; /* nulls counted and no bitmap */
	assert_int_equal(FIND("y", KEEL_U8, 1), -EBADMSG);
	foreign_make(&f, 0, 0);
	f.sy.dictionary = &f.sxi;
	assert_int_equal(FIND("y", KEEL_U8, 1), -ENOTSUP);
	assert_non_null(strstr(err, "dictionary"));
	foreign_make(&f, 0, 0);
	f.axib[1] = (const uint8_t *)g_x + 2; /* floats not 4-byte aligned */
	assert_int_equal(FIND("x", KEEL_F32, WIDTH), -EFAULT);
	foreign_make(&f, 0, 0);
	f.ayb[1] = NULL;
	assert_int_equal(FIND("y", KEEL_U8, 1), -EFAULT);
	foreign_make(&f, 0, 0);
	f.ay.release = NULL; /* released inside a live batch */
	assert_int_equal(FIND("y", KEEL_U8, 1), -EBADMSG);
	foreign_make(&f, 0, 0);
	f.valid[1] = 0xfe; /* a null row of the struct itself (row 8) */
	f.ab[0] = f.valid;
	f.a.null_count = 1;
	assert_int_equal(FIND("y", KEEL_U8, 1), -ENOTSUP);
#undef FIND
}

static void test_arrow_export_refusals(void **state)
{
	(void)state;
	fill();
	static struct keel_arrow_batch b;
	char err[128];
	struct keel_arrow_column c[2] = {{.name = "x", .dtype = KEEL_F32, .width = 4, .data = g_x},
					 {.name = "y", .dtype = KEEL_U8, .width = 1, .data = g_y}};
	assert_int_equal(keel_arrow_export(NULL, c, 2, 1, err, 128), -EINVAL);
	assert_int_equal(keel_arrow_export(&b, c, 0, 1, err, 128), -EINVAL);
	assert_int_equal(keel_arrow_export(&b, c, KEEL_ARROW_COLUMNS_MAX + 1, 1, err, 128),
			 -EINVAL);
	assert_int_equal(keel_arrow_export(&b, c, 2, -1, err, 128), -EINVAL);
	c[1].name = "x";
	assert_int_equal(keel_arrow_export(&b, c, 2, 1, err, 128), -EINVAL);
	assert_non_null(strstr(err, "named twice"));
	c[1].name = "";
	assert_int_equal(keel_arrow_export(&b, c, 2, 1, err, 128), -EINVAL);
	c[1].name = "a-name-that-is-longer-than-31-bytes";
	assert_int_equal(keel_arrow_export(&b, c, 2, 1, err, 128), -EINVAL);
	c[1].name = "y";
	c[1].width = 0;
	assert_int_equal(keel_arrow_export(&b, c, 2, 1, err, 128), -EINVAL);
	c[1].width = 1;
	c[1].dtype = KEEL_BF16;
	assert_int_equal(keel_arrow_export(&b, c, 2, 1, err, 128), -ENOTSUP);
	assert_non_null(strstr(err, "'y'"));
	c[1].dtype = KEEL_DTYPE_COUNT;
	assert_int_equal(keel_arrow_export(&b, c, 2, 1, err, 128), -EINVAL);
	c[1].dtype = KEEL_U8;
	c[1].data = g_y + 1;
	assert_int_equal(keel_arrow_export(&b, c, 2, 1, err, 128), -EFAULT);
	c[1].data = NULL;
	assert_int_equal(keel_arrow_export(&b, c, 2, 1, err, 128), -EINVAL);
	assert_int_equal(keel_arrow_export(&b, c, 2, 0, err, 128), 0); /* no rows: no data needed */
	c[0].width = KEEL_ARROW_WIDTH_MAX;
	assert_int_equal(keel_arrow_export(&b, c, 1, INT64_MAX / 2, err, 128), -EINVAL);
	assert_non_null(strstr(err, "overflow"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_arrow_export_follows_the_interface),
	    cmocka_unit_test(test_arrow_round_trip_reads_in_place),
	    cmocka_unit_test(test_arrow_move_then_release),
	    cmocka_unit_test(test_arrow_foreign_batch_with_offsets),
	    cmocka_unit_test(test_arrow_find_refusals),
	    cmocka_unit_test(test_arrow_export_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
