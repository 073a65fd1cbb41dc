/* Gradient AllReduce (keel_allreduce_grad_start): 2..5 nodes on loopback UDP and a manual clock.
 * Compressed rings give the same bits on every rank (also when ranks decide differently), stay
 * within the encoding's error bound, and with error feedback the sum over many calls tracks the
 * exact one where without it the error grows; off, the result is that of a plain AllReduce and
 * the residuals are untouched; under chaos; with a rank lost mid-call; AUTO follows the link's
 * measured utilisation; argument errors and a program mismatch. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "cluster_int.h"
#include "node_int.h"

static uint64_t g_seed;
static enum keel_algo g_algo = KEEL_ALGO_RING;
/* per rank: how it compresses (a test may mix them) */
static enum keel_compress g_compress[CLUSTER_MAX];
static uint32_t g_mtu = KEEL_MTU_DEFAULT;
static const uint32_t *g_host_of; /* NULL: a host per rank */

static void tweak(struct keel_config *cfg)
{
	cfg->algo = g_algo;
	cfg->mtu = g_mtu;
	cfg->compress = g_compress[cfg->rank];
	cfg->op_timeout_ns = 5000000000ull;
	cfg->miss_limit = 12;
	cfg->restart_copy_bytes = 4u << 20;
	cfg->host_of = g_host_of;
}

static void compress_all(enum keel_compress mode)
{
	for (uint32_t r = 0; r < CLUSTER_MAX; r++)
		g_compress[r] = mode;
}

static uint64_t rng_next(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 11;
}

/* Gradients of mixed sign and magnitude (1e-3 .. 1e3), seeded by rank. */
static void fill(float *x, size_t n, uint32_t rank, uint64_t seed)
{
	uint64_t s = seed * 7919u + rank + 1;
	for (size_t i = 0; i < n; i++) {
		double u = (double)(rng_next(&s) % 1000000) / 1000000.0 - 0.5;
		int e = (int)(rng_next(&s) % 7) - 3;
		x[i] = (float)(u * pow(10.0, e));
	}
}

struct grad_run {
	uint32_t world;
	size_t count;
	enum keel_redop op;
	float *in[CLUSTER_MAX], *out[CLUSTER_MAX], *fb[CLUSTER_MAX];
	struct keel_op_info info[CLUSTER_MAX];
	int rc[CLUSTER_MAX];
};

static void run_alloc(struct grad_run *g, uint32_t world, size_t count, enum keel_redop op)
{
	memset(g, 0, sizeof(*g));
	g->world = world;
	g->count = count;
	g->op = op;
	for (uint32_t r = 0; r < world; r++) {
		g->in[r] = calloc(count + 1, sizeof(float));
		g->out[r] = calloc(count + 1, sizeof(float));
		g->fb[r] = calloc(keel_grad_feedback_len(count) + 1, sizeof(float));
		fill(g->in[r], count, r, g_seed);
	}
}

static void run_free(struct grad_run *g)
{
	for (uint32_t r = 0; r < g->world; r++) {
		free(g->in[r]);
		free(g->out[r]);
		free(g->fb[r]);
	}
}

/* One gradient AllReduce on every rank not paused; statuses and infos in g. */
static void run_once(struct cluster *c, struct grad_run *g)
{
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	for (uint32_t r = 0; r < g->world; r++) {
		if (c->paused[r])
			continue;
		assert_int_equal(keel_allreduce_grad_start(c->node[r], g->in[r], g->out[r],
							   g->count, g->op, g->fb[r], &ops[r]),
				 0);
	}
	assert_int_equal(cluster_wait_ops_info(c, ops, g->rc, g->info, 2000000), 0);
}

/* Every running rank ended with 0 and the same bits. */
static void same_bits(const struct cluster *c, const struct grad_run *g)
{
	uint32_t first = UINT32_MAX;
	for (uint32_t r = 0; r < g->world; r++) {
		if (c->paused[r])
			continue;
		assert_int_equal(g->rc[r], 0);
		if (first == UINT32_MAX)
			first = r;
		else if (memcmp(g->out[r], g->out[first], g->count * sizeof(float)) != 0) {
			print_error("world %u count %zu: rank %u's result differs from rank %u's\n",
				    g->world, g->count, r, first);
			fail();
		}
	}
}

/* |out - exact| within `rounds` roundings of unit `u` of the sum of magnitudes, elementwise,
 * over the running ranks (exact in double). Returns the largest error relative to that scale. */
static double check_bound(const struct cluster *c, const struct grad_run *g, uint32_t r, double u,
			  double rounds)
{
	double worst = 0;
	uint32_t members = 0;
	for (uint32_t q = 0; q < g->world; q++)
		members += !c->paused[q];
	for (size_t i = 0; i < g->count; i++) {
		double exact = 0, mag = 0;
		for (uint32_t q = 0; q < g->world; q++) {
			if (c->paused[q])
				continue;
			exact += g->in[q][i];
			mag += fabs(g->in[q][i]);
		}
		if (g->op == KEEL_AVG) {
			exact /= members;
			mag /= members;
		}
		double err = fabs((double)g->out[r][i] - exact), scale = mag > 0 ? mag : 1e-30;
		if (err > rounds * u * scale + 1e-6 * scale) {
			print_error("element %zu: %.9g, exact %.9g, bound %.3g\n", i,
				    (double)g->out[r][i], exact, rounds * u * scale);
			fail();
		}
		if (err / scale > worst)
			worst = err / scale;
	}
	return worst;
}

/* The last call's results against a plain f32 AllReduce of the same inputs: bit for bit,
 * nothing saved. */
static void same_as_plain(struct cluster *c, const struct grad_run *g)
{
	float *plain[CLUSTER_MAX];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < g->world; r++) {
		plain[r] = calloc(g->count, sizeof(float));
		assert_int_equal(keel_allreduce_start(c->node[r], g->in[r], plain[r], g->count,
						      KEEL_F32, g->op, &ops[r]),
				 0);
	}
	assert_int_equal(cluster_wait_ops(c, ops, rc, 2000000), 0);
	for (uint32_t r = 0; r < g->world; r++) {
		assert_int_equal(rc[r], 0);
		assert_memory_equal(plain[r], g->out[r], g->count * sizeof(float));
		assert_int_equal(g->info[r].bytes_saved, 0);
		free(plain[r]);
	}
}

static void compressed_case(uint32_t world, size_t count, enum keel_redop op,
			    enum keel_compress mode)
{
	struct cluster c;
	compress_all(mode);
	assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak), 0);
	struct grad_run g;
	run_alloc(&g, world, count, op);
	run_once(&c, &g);
	same_bits(&c, &g);
	double u = mode == KEEL_COMPRESS_F16 ? 0x1p-11 : 0x1p-8;
	(void)check_bound(&c, &g, 0, u, world + 1.0);
	bool ring = count >= world;
	for (uint32_t r = 0; r < world; r++) {
		struct keel_counters k;
		keel_counters_get(c.node[r], &k);
		assert_int_equal(k.drop_protocol, 0);
		if (ring && count >= 4u * world) { /* every rank sent some partial sums */
			assert_true(g.info[r].bytes_saved > 0);
			assert_true(k.compress_frags > 0);
			assert_int_equal(k.compress_bytes_saved, g.info[r].bytes_saved);
		}
		if (ring && count >= 1000u * world) {
			/* both halves compressed: 2(w-1) chunks of count/w elements, 2 bytes saved
			 * on each (the owner's rounding is what lets the all-gather go as bf16) */
			double want = 2.0 * (world - 1) * ((double)count / world) * 2.0;
			assert_true((double)g.info[r].bytes_saved >= 0.95 * want);
		}
	}
	run_free(&g);
	cluster_fini(&c);
}

static void test_compress_same_bits_within_bound(void **state)
{
	(void)state;
	static const size_t counts[] = {1, 3, 5, 64, 1000, 2047, 2048, 2049, 30011, 250000};
	for (uint32_t world = 2; world <= 5; world++)
		for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
			compressed_case(world, counts[i], i % 2 ? KEEL_AVG : KEEL_SUM,
					KEEL_COMPRESS_BF16);
	compressed_case(3, 30011, KEEL_SUM, KEEL_COMPRESS_F16);
	compressed_case(4, 250000, KEEL_AVG, KEEL_COMPRESS_F16);
}

/* Ranks that decide differently (bf16, f16, off) still end with the same bits. */
static void test_compress_mixed_decisions_same_bits(void **state)
{
	(void)state;
	static const enum keel_compress modes[] = {KEEL_COMPRESS_BF16, KEEL_COMPRESS_OFF,
						   KEEL_COMPRESS_F16, KEEL_COMPRESS_BF16,
						   KEEL_COMPRESS_OFF};
	for (uint32_t world = 2; world <= 5; world++) {
		for (uint32_t r = 0; r < world; r++)
			g_compress[r] = modes[(r + world) % 5];
		struct cluster c;
		assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak), 0);
		struct grad_run g;
		run_alloc(&g, world, 100003, KEEL_SUM);
		run_once(&c, &g);
		same_bits(&c, &g);
		(void)check_bound(&c, &g, 0, 0x1p-8, world + 1.0);
		run_free(&g);
		cluster_fini(&c);
	}
}

/* Off: bit for bit a plain AllReduce, nothing saved, the residuals untouched. */
static void test_compress_off_is_a_plain_allreduce(void **state)
{
	(void)state;
	compress_all(KEEL_COMPRESS_OFF);
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak), 0);
	struct grad_run g;
	run_alloc(&g, 3, 70001, KEEL_SUM);
	for (uint32_t r = 0; r < 3; r++)
		for (size_t i = 0; i < keel_grad_feedback_len(g.count); i++)
			g.fb[r][i] = 0.25f; /* residuals from an earlier compressed call */
	run_once(&c, &g);
	same_bits(&c, &g);
	same_as_plain(&c, &g);
	for (uint32_t r = 0; r < 3; r++)
		for (size_t i = 0; i < g.count; i++)
			assert_true(g.fb[r][i] == 0.25f);
	run_free(&g);
	cluster_fini(&c);
}

/* Members without feedback memory send f32 beside members that compress: the same bits
 * everywhere, within the bound, nothing compressed by them; and when no member has feedback
 * memory, compression forced on or not, the result is a plain AllReduce's bit for bit. */
static void test_compress_members_without_feedback(void **state)
{
	(void)state;
	compress_all(KEEL_COMPRESS_BF16);
	for (uint32_t world = 2; world <= 4; world++) {
		struct cluster c;
		assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak), 0);
		struct grad_run g;
		run_alloc(&g, world, 50021, KEEL_SUM);
		uint32_t plain_rank = world - 1;
		free(g.fb[plain_rank]);
		g.fb[plain_rank] = NULL;
		run_once(&c, &g);
		same_bits(&c, &g);
		(void)check_bound(&c, &g, 0, 0x1p-8, world + 1.0);
		struct keel_counters k;
		keel_counters_get(c.node[plain_rank], &k);
		assert_int_equal(k.compress_frags, 0);
		assert_int_equal(g.info[plain_rank].bytes_saved, 0);
		keel_counters_get(c.node[0], &k);
		assert_true(k.compress_frags > 0); /* the others did compress */
		for (uint32_t r = 0; r < world; r++) {
			free(g.fb[r]);
			g.fb[r] = NULL;
		}
		run_once(&c, &g);
		same_bits(&c, &g);
		same_as_plain(&c, &g);
		run_free(&g);
		cluster_fini(&c);
	}
}

/* The same gradients K times: the sum of the results, against K times the exact sum. */
static double drift(struct cluster *c, struct grad_run *g, uint32_t calls, bool feedback)
{
	double *acc = calloc(g->count, sizeof(double)), worst = 0;
	for (uint32_t k = 0; k < calls; k++) {
		if (!feedback)
			for (uint32_t r = 0; r < g->world; r++)
				memset(g->fb[r], 0,
				       keel_grad_feedback_len(g->count) * sizeof(float));
		run_once(c, g);
		same_bits(c, g);
		for (size_t i = 0; i < g->count; i++)
			acc[i] += g->out[0][i];
	}
	for (size_t i = 0; i < g->count; i++) {
		double exact = 0, mag = 0;
		for (uint32_t q = 0; q < g->world; q++) {
			exact += g->in[q][i];
			mag += fabs(g->in[q][i]);
		}
		double e = fabs(acc[i] - calls * exact) / mag;
		if (e > worst)
			worst = e;
	}
	free(acc);
	return worst;
}

/* With error feedback the accumulated error stays within a call's rounding; without, it grows
 * with the number of calls. */
static void test_compress_error_feedback_converges(void **state)
{
	(void)state;
	compress_all(KEEL_COMPRESS_BF16);
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak), 0);
	struct grad_run g;
	run_alloc(&g, 3, 6007, KEEL_SUM);
	enum { CALLS = 200 };
	double with = drift(&c, &g, CALLS, true);
	double without = drift(&c, &g, CALLS, false);
	printf("after %d calls, worst |sum - exact| / sum|x|: %.3g with feedback, %.3g without\n",
	       CALLS, with, without);
	assert_true(with <= 4.0 * 0x1p-8);  /* a few roundings, not 200 */
	assert_true(without > 10.0 * with); /* and feedback is what keeps it there */
	run_free(&g);
	cluster_fini(&c);
}

static void test_compress_under_chaos(void **state)
{
	(void)state;
	compress_all(KEEL_COMPRESS_BF16);
	g_mtu = 2048;
	struct cluster c;
	assert_int_equal(
	    cluster_init(&c, 4, "loss=0.1,dup=0.02,reorder=0.05,delay_us=50", g_seed, tweak), 0);
	static const size_t counts[] = {5, 4099, 100000};
	for (size_t i = 0; i < 3; i++) {
		struct grad_run g;
		run_alloc(&g, 4, counts[i], i == 1 ? KEEL_AVG : KEEL_SUM);
		run_once(&c, &g);
		same_bits(&c, &g);
		(void)check_bound(&c, &g, 3, 0x1p-8, 5.0);
		run_free(&g);
	}
	for (uint32_t r = 0; r < 4; r++) {
		struct keel_counters k;
		keel_counters_get(c.node[r], &k);
		assert_int_equal(k.drop_protocol, 0);
		assert_true(k.retransmits > 0);
	}
	g_mtu = KEEL_MTU_DEFAULT;
	cluster_fini(&c);
}

/* 3 ranks forcing bf16, settled, and a 1.6 MB gradient each: a call long enough to stop a rank
 * in the middle of it. */
static void three_ranks_bf16(struct cluster *c, struct grad_run *g)
{
	compress_all(KEEL_COMPRESS_BF16);
	assert_int_equal(cluster_init(c, 3, NULL, g_seed, tweak), 0);
	for (int i = 0; i < 5; i++)
		cluster_round(c);
	run_alloc(g, 3, 400000, KEEL_SUM);
}

/* Rank 2 stops mid-call: the survivors restart on the view without it from the untouched input
 * and residuals, and agree; in place from the restart copy too. */
static void lost_rank(bool in_place)
{
	struct cluster c;
	struct grad_run g;
	three_ranks_bf16(&c, &g);
	float *input[3];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	for (uint32_t r = 0; r < 3; r++) {
		input[r] = malloc(g.count * sizeof(float));
		memcpy(input[r], g.in[r], g.count * sizeof(float));
		if (in_place)
			memcpy(g.out[r], g.in[r], g.count * sizeof(float));
		float *src = in_place ? g.out[r] : g.in[r];
		assert_int_equal(keel_allreduce_grad_start(c.node[r], src, g.out[r], g.count,
							   KEEL_SUM, g.fb[r], &ops[r]),
				 0);
	}
	cluster_round(&c);
	c.paused[2] = true;
	ops[2] = NULL;
	assert_int_equal(cluster_wait_ops_info(&c, ops, g.rc, g.info, 2000000), 0);
	same_bits(&c, &g);
	for (uint32_t r = 0; r < 2; r++) {
		assert_int_equal(g.info[r].member_count, 2);
		assert_true(g.info[r].restarts >= 1);
		if (!in_place) /* the input is never written */
			assert_memory_equal(g.in[r], input[r], g.count * sizeof(float));
	}
	(void)check_bound(&c, &g, 1, 0x1p-8, 3.0);
	for (uint32_t r = 0; r < 3; r++)
		free(input[r]);
	run_free(&g);
	cluster_fini(&c);
}

static void test_compress_rank_lost_mid_call(void **state)
{
	(void)state;
	lost_rank(false);
	lost_rank(true);
}

/* Rank 2 stopped (SIGSTOP) mid-call for `pause_rounds` polls of the others, then resumed. A
 * short pause: the call completes on all three, same bits. A pause past the detector: ranks
 * 0 and 1 finish on a view without it, and rank 2's call ends KEEL_EEXCLUDED with its
 * residuals as they were (a call that did not complete leaves them alone). */
static void paused_case(uint32_t pause_rounds, bool excluded)
{
	struct cluster c;
	struct grad_run g;
	three_ranks_bf16(&c, &g);
	size_t fb_bytes = g.count * sizeof(float);
	for (size_t i = 0; i < g.count; i++)
		g.fb[2][i] = 1e-3f; /* residuals from an earlier call */
	float *before = malloc(fb_bytes);
	memcpy(before, g.fb[2], fb_bytes);
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	for (uint32_t r = 0; r < 3; r++)
		assert_int_equal(keel_allreduce_grad_start(c.node[r], g.in[r], g.out[r], g.count,
							   KEEL_SUM, g.fb[r], &ops[r]),
				 0);
	cluster_round(&c); /* under way: one round does not finish 1.6 MB */
	assert_int_equal(ops[2]->state, OP_RUNNING);
	c.paused[2] = true;
	for (uint32_t i = 0; i < pause_rounds; i++)
		cluster_round(&c);
	c.paused[2] = false;
	assert_int_equal(cluster_wait_ops_info(&c, ops, g.rc, g.info, 2000000), 0);
	if (excluded) {
		assert_int_equal(g.rc[2], KEEL_EEXCLUDED);
		assert_memory_equal(g.fb[2], before, fb_bytes);
		c.paused[2] = true; /* leave it out of the comparisons */
	}
	same_bits(&c, &g);
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(g.info[r].member_count, excluded ? 2 : 3);
	free(before);
	run_free(&g);
	cluster_fini(&c);
}

static void test_compress_rank_paused_and_resumed(void **state)
{
	(void)state;
	paused_case(100, false);  /* 1 ms: below the detector */
	paused_case(20000, true); /* 200 ms: past the detector and the view change */
}

/* Fragments that say they are encoded are checked before use: an encoding keel does not
 * know, or an odd payload (half an element), is refused (-EPROTO: dropped and counted, never
 * widened); plain and known encodings give the f32 bytes they stand for. */
static void test_compress_forged_encodings_refused(void **state)
{
	(void)state;
	struct wire_header h = {.payload_len = 1000};
	uint32_t len = 0;
	assert_int_equal(cmp_logical_len(&h, &len), 0);
	assert_int_equal(len, 1000);
	h.flags = (uint16_t)(WIRE_ENC_BF16 << WIRE_FLAG_ENC_SHIFT);
	assert_int_equal(cmp_logical_len(&h, &len), 1);
	assert_int_equal(len, 2000);
	h.flags = (uint16_t)(WIRE_ENC_F16 << WIRE_FLAG_ENC_SHIFT);
	assert_int_equal(cmp_logical_len(&h, &len), 1);
	assert_int_equal(len, 2000);
	h.payload_len = 999; /* half an element */
	assert_int_equal(cmp_logical_len(&h, &len), -EPROTO);
	h.payload_len = 1000;
	h.flags = (uint16_t)(WIRE_FLAG_ENC_MASK); /* encoding 3: none such */
	_Static_assert(WIRE_ENC_COUNT == 3, "encoding 3 is unknown");
	assert_int_equal(cmp_logical_len(&h, &len), -EPROTO);
}

/* AUTO: back-to-back calls load the link past the threshold and are compressed (once a first
 * one measured the link); the same calls with idle time between them are not. */
static uint64_t auto_run(uint64_t idle_ns, uint32_t calls)
{
	compress_all(KEEL_COMPRESS_AUTO);
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak), 0);
	struct grad_run g;
	run_alloc(&g, 3, 1u << 20, KEEL_SUM);
	uint64_t saved = 0;
	for (uint32_t k = 0; k < calls; k++) {
		run_once(&c, &g);
		same_bits(&c, &g);
		if (k == 0)
			assert_int_equal(g.info[0].bytes_saved, 0); /* nothing measured yet */
		for (uint32_t r = 0; r < 3; r++)
			saved += g.info[r].bytes_saved;
		c.now_ns += idle_ns; /* the program computes; the link is idle */
		for (int i = 0; i < 3; i++)
			cluster_round(&c);
	}
	run_free(&g);
	cluster_fini(&c);
	return saved;
}

static void test_compress_auto_follows_utilisation(void **state)
{
	(void)state;
	uint64_t busy = auto_run(0, 6), idle = auto_run(2 * KEEL_COMPRESS_WINDOW_NS, 6);
	static const uint32_t one_host[3] = {0, 0, 0};
	g_host_of = one_host; /* peers at memory speed: never worth encoding */
	uint64_t local = auto_run(0, 6);
	g_host_of = NULL;
	printf(
	    "auto: %llu bytes saved back to back, %llu with two windows idle between calls, %llu "
	    "on one host\n",
	    (unsigned long long)busy, (unsigned long long)idle, (unsigned long long)local);
	assert_true(busy > 0);
	assert_int_equal(idle, 0);
	assert_int_equal(local, 0);
}

/* A member that runs a plain AllReduce where the others run a compressed one. */
static void test_compress_mismatch_with_plain(void **state)
{
	(void)state;
	compress_all(KEEL_COMPRESS_BF16);
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, tweak), 0);
	struct grad_run g;
	run_alloc(&g, 2, 10000, KEEL_SUM);
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX] = {0};
	assert_int_equal(keel_allreduce_grad_start(c.node[0], g.in[0], g.out[0], g.count, KEEL_SUM,
						   g.fb[0], &ops[0]),
			 0);
	assert_int_equal(keel_allreduce_start(c.node[1], g.in[1], g.out[1], g.count, KEEL_F32,
					      KEEL_SUM, &ops[1]),
			 0);
	struct keel_op *only1[CLUSTER_MAX] = {NULL, ops[1]};
	assert_int_equal(cluster_wait_ops(&c, only1, rc, 100000), 0);
	assert_int_equal(rc[1], KEEL_EMISMATCH);
	for (size_t i = 0; i < g.count; i++)
		assert_true(g.fb[0][i] == 0.0f); /* rank 0's call has not completed */
	run_free(&g);
	cluster_fini(&c);
}

static void test_compress_bad_arguments(void **state)
{
	(void)state;
	compress_all(KEEL_COMPRESS_BF16);
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, tweak), 0);
	float in[16], out[16], fb[40];
	struct keel_op *op;
	struct keel_node *n = c.node[0];
	assert_int_equal(keel_allreduce_grad_start(n, in, out, 16, KEEL_MAX, fb, &op), -EINVAL);
	assert_int_equal(keel_allreduce_grad_start(n, in, out, 16, KEEL_PROD, fb, &op), -EINVAL);
	assert_int_equal(keel_allreduce_grad_start(n, in, out, 16, KEEL_SUM, in, &op), -EINVAL);
	assert_int_equal(keel_allreduce_grad_start(n, in, out, 16, KEEL_SUM, out, &op), -EINVAL);
	assert_int_equal(keel_allreduce_grad_start(n, in, out, 16, KEEL_SUM, fb + 8, NULL),
			 -EINVAL);
	assert_int_equal(keel_allreduce_grad_start(NULL, in, out, 16, KEEL_SUM, fb, &op), -EINVAL);
	assert_int_equal(keel_allreduce_grad_start(n, NULL, out, 16, KEEL_SUM, fb, &op), -EINVAL);
	assert_int_equal(keel_allreduce_grad_start(n, in, in + 1, 8, KEEL_SUM, fb, &op), -EINVAL);
	/* the second half of the feedback counts too: fb of 16 floats ends where out would start */
	float block[48];
	assert_int_equal(keel_allreduce_grad_start(n, in, block + 24, 16, KEEL_SUM, block, &op),
			 -EINVAL);
	assert_int_equal(keel_grad_feedback_len(16), 32);
	assert_int_equal(keel_grad_feedback_len(SIZE_MAX), 0);
	/* no waiter configured: the blocking call says so */
	assert_int_equal(keel_allreduce_grad(n, in, out, 16, KEEL_SUM, fb), -EINVAL);
	/* count 0 needs no feedback and completes */
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(
		    keel_allreduce_grad_start(c.node[r], NULL, NULL, 0, KEEL_AVG, NULL, &ops[r]),
		    0);
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 100000), 0);
	assert_int_equal(rc[0], 0);
	assert_int_equal(rc[1], 0);
	cluster_fini(&c);
}

/* keel_init refuses a compression mode or threshold out of range. */
static void test_compress_config_checked(void **state)
{
	(void)state;
	struct cluster c;
	cluster_clock_init(&c, 1);
	assert_int_equal(cluster_udp_init(&c, 0), 0);
	struct keel_config cfg;
	keel_config_default(&cfg);
	cfg.transport = c.udp[0];
	assert_int_equal(cfg.compress, KEEL_COMPRESS_AUTO);
	assert_int_equal(cfg.compress_util_pct, KEEL_COMPRESS_UTIL_PCT_DEFAULT);
	assert_true(keel_storage_size(&cfg) > 0);
	cfg.compress_util_pct = 101;
	assert_int_equal(keel_storage_size(&cfg), 0);
	cfg.compress_util_pct = 0; /* the default */
	assert_true(keel_storage_size(&cfg) > 0);
	cfg.compress = (enum keel_compress)4;
	assert_int_equal(keel_storage_size(&cfg), 0);
	cluster_fini(&c);
}

int main(void)
{
	g_seed = cluster_seed(1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_compress_same_bits_within_bound),
	    cmocka_unit_test(test_compress_mixed_decisions_same_bits),
	    cmocka_unit_test(test_compress_off_is_a_plain_allreduce),
	    cmocka_unit_test(test_compress_members_without_feedback),
	    cmocka_unit_test(test_compress_error_feedback_converges),
	    cmocka_unit_test(test_compress_under_chaos),
	    cmocka_unit_test(test_compress_rank_lost_mid_call),
	    cmocka_unit_test(test_compress_rank_paused_and_resumed),
	    cmocka_unit_test(test_compress_forged_encodings_refused),
	    cmocka_unit_test(test_compress_auto_follows_utilisation),
	    cmocka_unit_test(test_compress_mismatch_with_plain),
	    cmocka_unit_test(test_compress_bad_arguments),
	    cmocka_unit_test(test_compress_config_checked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
