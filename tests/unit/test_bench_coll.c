/* keel-bench's operations over groups, the arithmetic (tools/keel-bench/bench_coll_plan.c):
 * nccl-tests' counts and bus bandwidth factors, and the check. Each operation is carried out
 * here by its textbook definition on the buffers bench_coll_layout names, for members in an
 * order other than their job ranks' (as a group split makes them): the check then finds no
 * wrong element, and finds every one where a result is shifted by one member, as a silently
 * re-indexed AllGather or AllToAll would be, or left unwritten. */
#include <stdlib.h>
#include <string.h>

/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bench_coll.h"
#include "refcheck.h"

#define MEMBERS_MAX 5u
#define COUNT	    7u /* elements each member contributes: not a multiple of anything */
#define CAP	    (MEMBERS_MAX * COUNT)

static void test_bench_coll_names(void **state)
{
	(void)state;
	const char *names[BENCH_COLL_COUNT] = {"allreduce", "all_gather", "reduce_scatter",
					       "alltoall",  "sendrecv",	  "reduce",
					       "broadcast", "barrier"};
	for (int c = 0; c < BENCH_COLL_COUNT; c++) {
		assert_int_equal(bench_coll_parse(names[c]), c);
		assert_string_equal(bench_coll_desc((enum bench_coll)c)->name, names[c]);
	}
	assert_int_equal(bench_coll_parse("allgather"), -1); /* nccl-tests' spelling only */
	assert_int_equal(bench_coll_parse(""), -1);
	assert_null(bench_coll_desc(BENCH_COLL_COUNT));
	assert_null(bench_coll_desc(BENCH_ALLTOALL)->half[1]);		   /* never in place */
	assert_null(bench_coll_desc(BENCH_BROADCAST)->half[0]);		   /* one buffer */
	assert_int_equal(bench_coll_desc(BENCH_SENDRECV)->time_div[0], 2); /* half a round trip */
}

/* nccl-tests' doc/PERFORMANCE.md, at 4 and 2 members. */
static void test_bench_coll_busbw(void **state)
{
	(void)state;
	const double at4[BENCH_COLL_COUNT] = {1.5, 0.75, 0.75, 0.75, 1, 1, 1, 0};
	const double at2[BENCH_COLL_COUNT] = {1.0, 0.5, 0.5, 0.5, 1, 1, 1, 0};
	for (int c = 0; c < BENCH_COLL_COUNT; c++) {
		assert_true(bench_coll_busbw_factor((enum bench_coll)c, 4) == at4[c]);
		assert_true(bench_coll_busbw_factor((enum bench_coll)c, 2) == at2[c]);
	}
}

/* A split operation's count is all members' together, rounded down to a multiple of them. */
static void test_bench_coll_count(void **state)
{
	(void)state;
	assert_int_equal(bench_coll_count(BENCH_ALLREDUCE, 100, 4, 4), 25);
	assert_int_equal(bench_coll_count(BENCH_ALL_GATHER, 100, 4, 4), 24);
	assert_int_equal(bench_coll_count(BENCH_REDUCE_SCATTER, 100, 4, 3), 24);
	assert_int_equal(bench_coll_count(BENCH_ALLTOALL, 8, 4, 4), 0);
	assert_int_equal(bench_coll_count(BENCH_SENDRECV, 8, 2, 4), 4);
	assert_int_equal(bench_coll_count(BENCH_BROADCAST, 64, 8, 4), 8);
	assert_int_equal(bench_coll_count(BENCH_BARRIER, 1 << 20, 4, 4), 0);
}

/* Every member's buffers, f32. */
struct world {
	float in[MEMBERS_MAX][CAP], out[MEMBERS_MAX][CAP];
	struct bench_coll_ctx x[MEMBERS_MAX];
	struct bench_coll_bufs l[MEMBERS_MAX];
};

static void set_up(struct world *w, enum bench_coll c, int half, uint32_t n, uint32_t root,
		   const uint32_t *ranks)
{
	memset(w, BENCH_POISON, sizeof(*w));
	for (uint32_t p = 0; p < n; p++) {
		w->x[p] = (struct bench_coll_ctx){c, KEEL_F32, KEEL_SUM, COUNT, n, p, root};
		bench_coll_layout(&w->x[p], half, w->in[p], w->out[p], &w->l[p]);
		bench_coll_fill_input(&w->x[p], &w->l[p], 0, CAP, ranks[p]);
	}
}

static float in_of(const struct world *w, uint32_t k, size_t i)
{
	return ((const float *)w->l[k].send)[i];
}

/* Member p's result by the operation's definition (from copies: in place, a send buffer is
 * another member's receive buffer only in our heads). */
static void define(const struct world *w, enum bench_coll c, uint32_t n, uint32_t p, float *res)
{
	const size_t k_c = COUNT;
	for (size_t j = 0; j < w->l[p].result; j++) {
		size_t k = j / k_c, i = j % k_c;
		float v = 0;
		if (c == BENCH_ALLREDUCE || c == BENCH_REDUCE || c == BENCH_REDUCE_SCATTER)
			for (uint32_t m = 0; m < n; m++)
				v += in_of(w, m, (c == BENCH_REDUCE_SCATTER ? p * k_c : 0) + j);
		else if (c == BENCH_ALL_GATHER)
			v = in_of(w, (uint32_t)k, i);
		else if (c == BENCH_ALLTOALL)
			v = in_of(w, (uint32_t)k, p * k_c + i);
		else if (c == BENCH_BROADCAST)
			v = in_of(w, w->x[p].root, j);
		else /* sendrecv */
			v = in_of(w, 1 - p, j);
		res[j] = v;
	}
}

/* Carry the operation out, member by member, then write every result. */
static void carry_out(struct world *w, enum bench_coll c, uint32_t n)
{
	static float res[MEMBERS_MAX][CAP];
	for (uint32_t p = 0; p < n; p++)
		define(w, c, n, p, res[p]);
	for (uint32_t p = 0; p < n; p++)
		if (w->l[p].result != 0) /* a member without a result may have no buffer */
			memcpy(w->l[p].recv, res[p], w->l[p].result * sizeof(float));
}

static size_t wrong_at(struct world *w, uint32_t p, const uint32_t *ranks)
{
	static float ref[CAP];
	memset(ref, 0, sizeof(ref));
	uint32_t peer = w->x[p].pos < 2 ? ranks[1 - w->x[p].pos] : UINT32_MAX;
	const void *want = bench_coll_expect(&w->x[p], ref, 0, w->l[p].result, ranks, peer);
	return keel_check_wrong(w->l[p].recv, want, 0, w->l[p].result, KEEL_F32);
}

static void check_op(enum bench_coll c, int half, uint32_t n, uint32_t root)
{
	static struct world w;
	const uint32_t ranks[MEMBERS_MAX] = {6, 2, 9, 4, 0}; /* job ranks, in group order */
	set_up(&w, c, half, n, root, ranks);
	carry_out(&w, c, n);
	size_t results = 0;
	for (uint32_t p = 0; p < n; p++) {
		assert_int_equal(wrong_at(&w, p, ranks), 0);
		results += w.l[p].result;
	}
	if (c == BENCH_BARRIER) {
		assert_int_equal(results, 0);
		return;
	}
	assert_true(results > 0);
	/* the members' order shifted by one (a re-indexed result): most elements differ (an
	 * input takes one of 17 values, so a few agree by chance); a reduction's contributors
	 * are the same whatever their order */
	uint32_t shifted[MEMBERS_MAX];
	for (uint32_t p = 0; p < n; p++)
		shifted[p] = ranks[(p + 1) % n];
	set_up(&w, c, half, n, root, shifted);
	carry_out(&w, c, n);
	bool ordered = c != BENCH_ALLREDUCE && c != BENCH_REDUCE && c != BENCH_REDUCE_SCATTER;
	for (uint32_t p = 0; p < n && ordered; p++)
		if (w.l[p].result > 0)
			assert_true(wrong_at(&w, p, ranks) * 4 >= w.l[p].result * 3);
	/* left unwritten: the poison never passes (in place, the input is there instead) */
	set_up(&w, c, half, n, root, ranks);
	for (uint32_t p = 0; p < n; p++)
		if (half == 0 || c == BENCH_BROADCAST || c == BENCH_SENDRECV)
			assert_int_equal(wrong_at(&w, p, ranks),
					 c == BENCH_BROADCAST && p == root ? 0 : w.l[p].result);
}

static void test_bench_coll_check(void **state)
{
	(void)state;
	for (int c = 0; c < BENCH_COLL_COUNT; c++) {
		const struct bench_coll_desc *d = bench_coll_desc((enum bench_coll)c);
		for (int half = 0; half < 2; half++) {
			if (d->half[half] == NULL)
				continue;
			for (uint32_t n = 2; n <= MEMBERS_MAX; n++)
				for (uint32_t root = 0; root < (d->rooted ? n : 1); root++)
					check_op((enum bench_coll)c, half, n, root);
		}
	}
}

/* Where the buffers lie: in place as keel/group.h defines it. */
static void test_bench_coll_layout(void **state)
{
	(void)state;
	static float in[CAP], out[CAP];
	struct bench_coll_bufs l;
	struct bench_coll_ctx x = {BENCH_ALL_GATHER, KEEL_F32, KEEL_SUM, COUNT, 4, 2, 0};
	bench_coll_layout(&x, 1, in, out, &l);
	assert_ptr_equal(l.recv, in);
	assert_ptr_equal(l.send, in + 2 * COUNT); /* send == recv + rank x count */
	assert_int_equal(l.result, 4 * COUNT);
	x.coll = BENCH_REDUCE_SCATTER;
	bench_coll_layout(&x, 1, in, out, &l);
	assert_ptr_equal(l.send, in);
	assert_ptr_equal(l.recv, in + 2 * COUNT); /* recv == send + rank x count */
	assert_int_equal(l.fill, 4 * COUNT);
	x.coll = BENCH_REDUCE; /* not the root: nothing to compare */
	bench_coll_layout(&x, 0, in, out, &l);
	assert_int_equal(l.result, 0);
	x.coll = BENCH_SENDRECV; /* group rank 2 takes no part */
	bench_coll_layout(&x, 0, in, out, &l);
	assert_int_equal(l.result, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bench_coll_names),  cmocka_unit_test(test_bench_coll_busbw),
	    cmocka_unit_test(test_bench_coll_count),  cmocka_unit_test(test_bench_coll_check),
	    cmocka_unit_test(test_bench_coll_layout),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
