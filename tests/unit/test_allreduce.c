/* AllReduce in one process: 2..6 nodes on loopback UDP (and behind the chaos transport), a
 * manual clock, every dtype x op, sizes at the fragment and chunk boundaries, every algorithm
 * (ring, recursive doubling, hierarchical over host maps), in place and out of place; results
 * checked bit for bit against a reference. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster_int.h"
#include "node_int.h"

#define HB 1000000ull /* the cluster's heartbeat interval: 1 ms */
#include "refcheck.h"

static uint64_t g_seed;
static uint32_t g_mtu;
static enum keel_algo g_algo;
static uint32_t g_miss_limit = KEEL_MISS_LIMIT_DEFAULT;
static uint32_t g_streams;
static const uint32_t *g_host_of; /* the cluster's hosts (NULL: a host per rank) */
/* The algorithm each AllReduce of run_one must report (keel_op_info.algo); AUTO: any. */
static enum keel_algo g_expect = KEEL_ALGO_AUTO;

static void tweak(struct keel_config *cfg)
{
	cfg->mtu = g_mtu;
	cfg->algo = g_algo;
	cfg->miss_limit = g_miss_limit;
	cfg->op_timeout_ns = 5000000000ull;
	cfg->streams = g_streams;
	cfg->host_of = g_host_of;
}

/* One AllReduce on every rank of the cluster, checked. */
static void run_one(struct cluster *c, size_t count, enum keel_dtype dt, enum keel_redop op,
		    bool in_place)
{
	size_t es = keel_dtype_size(dt), bytes = count * es + 1;
	uint8_t *in[CLUSTER_MAX], *out[CLUSTER_MAX], *ref = malloc(bytes), *in_copy = malloc(bytes);
	struct keel_op *ops[CLUSTER_MAX];
	struct keel_op_info info[CLUSTER_MAX];
	int rc[CLUSTER_MAX];
	keel_check_reference(ref, 0, count, c->world, dt, op);
	for (uint32_t r = 0; r < c->world; r++) {
		in[r] = malloc(bytes);
		out[r] = in_place ? in[r] : malloc(bytes);
		keel_check_fill(in[r], 0, count, r, dt, op);
		assert_int_equal(
		    keel_allreduce_start(c->node[r], in[r], out[r], count, dt, op, &ops[r]), 0);
	}
	memcpy(in_copy, in[0], count * es);
	assert_int_equal(cluster_wait_ops_info(c, ops, rc, info, 2000000), 0);
	for (uint32_t r = 0; r < c->world; r++) {
		if (rc[r] == 0 && g_expect != KEEL_ALGO_AUTO && info[r].algo != g_expect) {
			print_error("world %u rank %u count %zu: ran algo %d, expected %d\n",
				    c->world, r, count, info[r].algo, g_expect);
			fail();
		}
		if (rc[r] != 0 || memcmp(out[r], ref, count * es) != 0) {
			print_error("world %u rank %u count %zu %s %s %s: rc %d (%s)\n", c->world,
				    r, count, keel_dtype_name(dt), keel_redop_name(op),
				    in_place ? "in-place" : "out-of-place", rc[r],
				    keel_strerror(rc[r]));
			fail();
		}
	}
	if (!in_place) /* the caller's input is never written */
		assert_memory_equal(in[0], in_copy, count * es);
	for (uint32_t r = 0; r < c->world; r++) {
		if (!in_place)
			free(out[r]);
		free(in[r]);
	}
	free(ref);
	free(in_copy);
}

static void check_clean(struct cluster *c)
{
	for (uint32_t r = 0; r < c->world; r++) {
		struct keel_counters k;
		keel_counters_get(c->node[r], &k);
		assert_int_equal(k.drop_protocol, 0);
		assert_int_equal(k.drop_crc, 0);
		assert_int_equal(k.suspicions, 0);
	}
}

/* Every dtype and op at the fragment and chunk boundary sizes, in place and out of place. */
static void every_dtype_op_size(struct cluster *c, uint32_t world)
{
	for (int dt = 0; dt < KEEL_DTYPE_COUNT; dt++) {
		size_t frag = (g_mtu - 56) / keel_dtype_size(dt);
		size_t sizes[KEEL_CHECK_SIZES];
		keel_check_sizes(sizes, world, frag, 5000);
		for (int op = 0; op < KEEL_REDOP_COUNT; op++)
			for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
				run_one(c, sizes[s], dt, op, (s + op) % 2 == 0);
	}
}

static void all_combinations(enum keel_algo algo)
{
	for (uint32_t world = 2; world <= 5; world++) {
		struct cluster c;
		g_mtu = 1024;
		g_algo = algo;
		assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak), 0);
		every_dtype_op_size(&c, world);
		check_clean(&c);
		cluster_fini(&c);
	}
}

/* Over the shared-memory transport (reliable and ordered): every dtype, op and boundary size,
 * and the core never resends (it skips retransmission for such a transport). */
static void shm_combinations(enum keel_algo algo)
{
	for (uint32_t world = 2; world <= 4; world++) {
		struct cluster c;
		g_mtu = 1024;
		g_algo = algo;
		assert_int_equal(cluster_init_shm(&c, world, g_mtu, tweak), 0);
		every_dtype_op_size(&c, world);
		check_clean(&c);
		for (uint32_t r = 0; r < world; r++) {
			struct keel_counters k;
			keel_counters_get(c.node[r], &k);
			assert_int_equal(k.retransmits, 0);
		}
		cluster_fini(&c);
	}
}

static void test_allreduce_shm_every_dtype_op_size(void **state)
{
	(void)state;
	shm_combinations(KEEL_ALGO_RING);
	shm_combinations(KEEL_ALGO_RD);
}

static void test_allreduce_ring_every_dtype_op_size(void **state)
{
	(void)state;
	all_combinations(KEEL_ALGO_RING);
}

static void test_allreduce_rd_every_dtype_op_size(void **state)
{
	(void)state;
	all_combinations(KEEL_ALGO_RD);
}

static void test_allreduce_auto_large(void **state)
{
	(void)state;
	struct cluster c;
	g_mtu = KEEL_MTU_DEFAULT;
	g_algo = KEEL_ALGO_AUTO;
	assert_int_equal(cluster_init(&c, 4, NULL, g_seed, tweak), 0);
	run_one(&c, 1 << 20, KEEL_F32, KEEL_SUM, false);
	run_one(&c, (1 << 18) + 3, KEEL_BF16, KEEL_AVG, true);
	run_one(&c, 3, KEEL_F64, KEEL_MAX, true);
	check_clean(&c);
	cluster_fini(&c);
}

/* Loss, duplication, reordering and delay underneath: results stay exact. */
static void chaos_run(const char *spec, enum keel_algo algo)
{
	struct cluster c;
	g_mtu = 2048;
	g_algo = algo;
	/* At 10 % loss three heartbeats in a row are lost once in a thousand intervals: the
	 * detector needs a longer limit there (what a user would set on such a network). */
	g_miss_limit = 12;
	assert_int_equal(cluster_init(&c, 4, spec, g_seed, tweak), 0);
	g_miss_limit = KEEL_MISS_LIMIT_DEFAULT;
	run_one(&c, 1, KEEL_F32, KEEL_SUM, false);
	run_one(&c, 1000, KEEL_I32, KEEL_SUM, true);
	run_one(&c, 100000, KEEL_F32, KEEL_SUM, false);
	run_one(&c, 77777, KEEL_F16, KEEL_AVG, true);
	for (uint32_t r = 0; r < c.world; r++) {
		struct keel_counters k;
		keel_counters_get(c.node[r], &k);
		assert_int_equal(k.drop_protocol, 0);
		assert_int_equal(k.ops_completed, 4);
	}
	cluster_fini(&c);
}

static void test_allreduce_chaos_no_loss(void **state)
{
	(void)state;
	chaos_run("loss=0,dup=0.01,reorder=0.01", KEEL_ALGO_RING);
	chaos_run("loss=0,dup=0.01,reorder=0.01", KEEL_ALGO_RD);
}

static void test_allreduce_chaos_1pct_loss(void **state)
{
	(void)state;
	chaos_run("loss=0.01,dup=0.01,reorder=0.01,delay_us=30", KEEL_ALGO_RING);
	chaos_run("loss=0.01,dup=0.01,reorder=0.01,delay_us=30", KEEL_ALGO_RD);
}

static void test_allreduce_chaos_10pct_loss(void **state)
{
	(void)state;
	chaos_run("loss=0.1,dup=0.02,reorder=0.05,delay_us=50", KEEL_ALGO_RING);
	chaos_run("loss=0.1,dup=0.02,reorder=0.05,delay_us=50", KEEL_ALGO_RD);
}

/* Window buffers lent on demand (config streams): as many as a collective talks to at once
 * (ring: 2 peers; recursive doubling over 8 ranks: 3 in turn), under loss and reordering, so
 * out-of-order datagrams need buffers while others are still held; and a ring with a single
 * one, where an out-of-order datagram often finds none and is dropped unacknowledged (the
 * sender resends it). Results stay exact, and a node's storage shrinks from every peer's
 * windows to the pool's. */
static void test_allreduce_pooled_streams(void **state)
{
	(void)state;
	const enum keel_algo algos[] = {KEEL_ALGO_RING, KEEL_ALGO_RD, KEEL_ALGO_RING};
	const uint32_t streams[] = {2, 3, 1};
	for (int a = 0; a < 3; a++) {
		struct cluster c;
		g_mtu = 2048;
		g_algo = algos[a];
		g_miss_limit = 12;
		g_streams = streams[a];
		assert_int_equal(cluster_init(&c, 8, "loss=0.01,dup=0.01,reorder=0.05,delay_us=30",
					      g_seed, tweak),
				 0);
		struct keel_config pooled = c.cfg[0], every = c.cfg[0];
		every.streams = 0;
		assert_true(keel_storage_size(&pooled) * 2 < keel_storage_size(&every));
		run_one(&c, 1, KEEL_F32, KEEL_SUM, false);
		run_one(&c, 100000, KEEL_F32, KEEL_SUM, false);
		run_one(&c, 77777, KEEL_I64, KEEL_MAX, true);
		run_one(&c, 30001, KEEL_F16, KEEL_AVG, false);
		uint64_t no_stream = 0;
		for (uint32_t r = 0; r < c.world; r++) {
			struct keel_counters k;
			keel_counters_get(c.node[r], &k);
			assert_int_equal(k.drop_protocol, 0);
			assert_int_equal(k.ops_completed, 4);
			no_stream += k.drop_no_stream;
		}
		printf("pooled streams: %s, %u per node: %llu datagrams waited for one\n",
		       algos[a] == KEEL_ALGO_RING ? "ring" : "rd", streams[a],
		       (unsigned long long)no_stream);
		if (streams[a] == 1)
			assert_true(no_stream > 0); /* the path was taken */
		cluster_fini(&c);
	}
	g_streams = 0;
	g_miss_limit = KEEL_MISS_LIMIT_DEFAULT;
}

static void test_allreduce_bad_arguments(void **state)
{
	(void)state;
	struct cluster c;
	g_mtu = KEEL_MTU_DEFAULT;
	g_algo = KEEL_ALGO_AUTO;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, tweak), 0);
	float buf[64] = {0};
	struct keel_op *op;
	struct keel_node *n = c.node[0];
	assert_int_equal(keel_allreduce_start(n, NULL, buf, 4, KEEL_F32, KEEL_SUM, &op), -EINVAL);
	assert_int_equal(keel_allreduce_start(n, buf, NULL, 4, KEEL_F32, KEEL_SUM, &op), -EINVAL);
	assert_int_equal(keel_allreduce_start(n, buf, buf, 4, KEEL_DTYPE_COUNT, KEEL_SUM, &op),
			 -EINVAL);
	assert_int_equal(keel_allreduce_start(n, buf, buf, 4, KEEL_F32, KEEL_REDOP_COUNT, &op),
			 -EINVAL);
	assert_int_equal(keel_allreduce_start(n, buf, buf + 1, 4, KEEL_F32, KEEL_SUM, &op),
			 -EINVAL);
	assert_int_equal(keel_allreduce_start(n, buf, buf, 4, KEEL_F32, KEEL_SUM, NULL), -EINVAL);
	assert_int_equal(keel_allreduce_start(n, buf, buf, SIZE_MAX / 2, KEEL_F32, KEEL_SUM, &op),
			 -EINVAL);
	/* no waiter configured: the blocking call refuses rather than spinning without a clock */
	assert_int_equal(keel_allreduce(n, buf, buf, 4, KEEL_F32, KEEL_SUM), -EINVAL);
	assert_int_equal(keel_op_test(n, (struct keel_op *)buf), -EINVAL);
	/* count 0 moves no data, but is still a collective: done once every member called it;
	 * a released handle is invalid */
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(
		    keel_allreduce_start(c.node[r], NULL, NULL, 0, KEEL_F32, KEEL_SUM, &ops[r]), 0);
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 1000), 0);
	assert_int_equal(rc[0], 0);
	assert_int_equal(keel_op_test(n, ops[0]), -EINVAL);
	cluster_fini(&c);
}

/* A ring step's message travels with 32-bit offsets: more than 4 GiB per step is refused
 * before anything is sent (the buffers are never touched: start only checks them). */
static void test_allreduce_message_too_large(void **state)
{
	(void)state;
	struct cluster c;
	g_mtu = KEEL_MTU_DEFAULT;
	g_algo = KEEL_ALGO_RING;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, tweak), 0);
	size_t count = (size_t)3 << 30; /* 12 GiB of f32: 6 GiB per ring step at 2 ranks */
	uint8_t *a = (uint8_t *)(uintptr_t)0x100000, *b = a + count * 4;
	struct keel_op *op;
	assert_int_equal(keel_allreduce_start(c.node[0], a, b, count, KEEL_F32, KEEL_SUM, &op),
			 -EMSGSIZE);
	cluster_fini(&c);
}

/* The transport failing for good (its socket closed under it) is reported by keel_poll and
 * fails the running operation with KEEL_ETRANSPORT; the node does not hang or crash. */
static void test_allreduce_transport_failure(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, NULL), 0);
	float buf[64] = {0};
	struct keel_op *op;
	assert_int_equal(keel_allreduce_start(c.node[0], buf, buf, 64, KEEL_F32, KEEL_SUM, &op), 0);
	c.udp[0]->ops->fini(c.udp[0]);
	uint64_t dl;
	assert_int_equal(keel_poll(c.node[0], c.now_ns, &dl), KEEL_ETRANSPORT);
	assert_int_equal(keel_poll(c.node[0], c.now_ns + 1, &dl), KEEL_ETRANSPORT); /* sticky */
	assert_int_equal(keel_op_test(c.node[0], op), KEEL_ETRANSPORT);
	assert_int_equal(keel_leave(c.node[0], c.now_ns + 2), KEEL_ETRANSPORT);
	cluster_fini(&c);
}

static void small_ops(struct keel_config *cfg)
{
	cfg->ops_max = 2;
}

static void test_allreduce_busy_when_ops_max_pending(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, small_ops), 0);
	float buf[3][8] = {{0}};
	struct keel_op *op[3];
	assert_int_equal(
	    keel_allreduce_start(c.node[0], buf[0], buf[0], 8, KEEL_F32, KEEL_SUM, &op[0]), 0);
	assert_int_equal(
	    keel_allreduce_start(c.node[0], buf[1], buf[1], 8, KEEL_F32, KEEL_SUM, &op[1]), 0);
	assert_int_equal(
	    keel_allreduce_start(c.node[0], buf[2], buf[2], 8, KEEL_F32, KEEL_SUM, &op[2]), -EBUSY);
	assert_int_equal(keel_op_test(c.node[0], op[0]), -EINPROGRESS);
	cluster_fini(&c);
}

static void three_ops(struct keel_config *cfg)
{
	cfg->ops_max = 3; /* not a power of two: 2^32 is no multiple of it */
}

/* Operation ids are 32 bits and wrap in a long job (2^32 collectives: about an hour at a
 * microsecond each). Three collectives in flight across the wrap, with ops_max 3, each get a
 * slot of their own, start, and end exact; the ids map to wire ids as before. (White box: the
 * nodes' ids are set just below the wrap, as 2^32 collectives would leave them.) */
static void test_allreduce_ids_wrap_with_ops_in_flight(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, three_ops), 0);
	for (uint32_t r = 0; r < 2; r++) {
		struct keel_node *n = c.node[r];
		n->op_next_id = n->op_run_id = n->op_base = UINT32_MAX - 1;
	}
	float in[2][3][8], out[2][3][8];
	struct keel_op *op[3][CLUSTER_MAX];
	for (uint32_t k = 0; k < 3; k++)
		for (uint32_t r = 0; r < 2; r++) {
			for (uint32_t i = 0; i < 8; i++)
				in[r][k][i] = (float)(r * 100 + k * 10 + i);
			assert_int_equal(keel_allreduce_start(c.node[r], in[r][k], out[r][k], 8,
							      KEEL_F32, KEEL_SUM, &op[k][r]),
					 0);
		}
	for (uint32_t k = 0; k < 3; k++) {
		int rc[CLUSTER_MAX];
		assert_int_equal(cluster_wait_ops(&c, op[k], rc, 200000), 0);
		for (uint32_t r = 0; r < 2; r++) {
			assert_int_equal(rc[r], 0);
			for (uint32_t i = 0; i < 8; i++)
				assert_true(out[r][k][i] == (float)(100 + 2 * (k * 10 + i)));
		}
	}
	assert_int_equal(c.node[0]->op_run_id, 1u); /* past the wrap */
	cluster_fini(&c);
}

static void slow_timeout(struct keel_config *cfg)
{
	cfg->op_timeout_ns = 10000000ull;    /* 10 ms */
	cfg->entry_timeout_ns = 50000000ull; /* 50 ms */
	cfg->miss_limit = 1000000;	     /* the detector stays quiet: only the timeouts fire */
}

/* A member that never starts the collective (alive to the detector, its program elsewhere)
 * is not a soft fault — restarting cannot help — and is waited for entry_timeout_ns. */
static void test_allreduce_waits_entry_timeout_for_a_member_that_never_starts(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, slow_timeout), 0);
	c.paused[1] = true;
	float buf[16] = {0};
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX] = {0};
	uint64_t t0 = c.now_ns;
	assert_int_equal(keel_allreduce_start(c.node[0], buf, buf, 16, KEEL_F32, KEEL_SUM, &ops[0]),
			 0);
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 100000), 0);
	assert_int_equal(rc[0], -ETIMEDOUT);
	assert_true(c.now_ns - t0 >= 50000000ull && c.now_ns - t0 < 51000000ull);
	struct keel_counters k;
	keel_counters_get(c.node[0], &k);
	assert_int_equal(k.view_proposals, 0); /* no soft fault asked for a new epoch */
	cluster_fini(&c);
}

/* Every member is in the collective and nothing moves (the link is cut, the detector is
 * quiet): each op_timeout_ns of stall is a soft fault; after soft_retries more, -ETIMEDOUT —
 * long before entry_timeout_ns. */
static void test_allreduce_stall_with_every_member_in_is_a_soft_fault(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, "loss=0", g_seed, slow_timeout), 0);
	c.step_ns = HB / 2;
	enum { N = 1 << 20 }; /* 4 MiB: several polls of 1 MiB, heartbeats in between */
	static float in[2][N], out[2][N];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX] = {0};
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(
		    keel_allreduce_start(c.node[r], in[r], out[r], N, KEEL_F32, KEEL_SUM, &ops[r]),
		    0);
	for (int i = 0; i < 3; i++) /* both beat, saying they started it */
		cluster_round(&c);
	for (uint32_t r = 0; r < 2; r++) {
		assert_int_equal(keel_op_test(c.node[r], ops[r]), -EINPROGRESS);
		assert_int_equal(keel_chaos_cut(c.chaos[r], 1 - r, true), 0);
	}
	uint64_t t0 = c.now_ns;
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 100000), 0);
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(rc[r], -ETIMEDOUT);
	/* (soft_retries + 1) stalls of 10 ms, give or take a round */
	assert_true(c.now_ns - t0 >= 39000000ull && c.now_ns - t0 < 42000000ull);
	cluster_fini(&c);
}

static void tweak_rd(struct keel_config *cfg)
{
	cfg->algo = KEEL_ALGO_RD;
}

/* Two ranks start different collectives at the same place of their sequence (a bug in the
 * caller's program, or one that lost track after a failure): not a wait, an error, at once. */
static void test_allreduce_mismatched_calls_fail_at_once(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, tweak_rd), 0);
	float in[2][16] = {{0}}, out[2][16];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX] = {0};
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(keel_allreduce_start(c.node[r], in[r], out[r], r == 0 ? 16 : 8,
						      KEEL_F32, KEEL_SUM, &ops[r]),
				 0);
	uint64_t t0 = c.now_ns;
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 100000), 0);
	assert_int_equal(rc[0], KEEL_EMISMATCH);
	assert_int_equal(rc[1], KEEL_EMISMATCH);
	assert_true(c.now_ns - t0 < HB); /* a round trip, not a timeout */
	cluster_fini(&c);
}

static void copy_small(struct keel_config *cfg)
{
	cfg->restart_copy_bytes = 4 << 20;
}

/* Rank 2 dies in the middle of an AllReduce: the survivors install a view without it and
 * restart the call there from their untouched inputs; the result is the reduction over
 * exactly the new view, which the call reports. In place, the input is restored from the
 * restart copy; without one, the call says KEEL_EVIEWCHANGED. */
static void restart_run(bool in_place, bool with_copy)
{
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, with_copy ? copy_small : NULL), 0);
	for (int i = 0; i < 5; i++) /* everyone has heard everyone */
		cluster_round(&c);
	enum { N = 400000 };
	static float in[3][N], out[3][N], ref[N];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX] = {0};
	for (uint32_t r = 0; r < 3; r++) {
		keel_check_fill(in[r], 0, N, r, KEEL_F32, KEEL_SUM);
		assert_int_equal(keel_allreduce_start(c.node[r], in[r], in_place ? in[r] : out[r],
						      N, KEEL_F32, KEEL_SUM, &ops[r]),
				 0);
	}
	for (int i = 0; i < 1; i++) /* some data moves, then rank 2 dies */
		cluster_round(&c);
	c.paused[2] = true;
	ops[2] = NULL;
	bool done[2] = {false, false};
	for (int round = 0; round < 100000 && !(done[0] && done[1]); round++) {
		for (uint32_t r = 0; r < 2; r++) {
			if (done[r])
				continue;
			struct keel_op_info info;
			uint32_t members[3];
			rc[r] = keel_op_test_info(c.node[r], ops[r], &info, members, 3);
			if (rc[r] == -EINPROGRESS)
				continue;
			done[r] = true;
			if (rc[r] != 0)
				continue;
			assert_int_equal(info.epoch, 2);
			assert_int_equal(info.member_count, 2);
			assert_int_equal(info.restarts, 1);
			assert_int_equal(members[0], 0);
			assert_int_equal(members[1], 1);
		}
		cluster_round(&c);
	}
	assert_true(done[0] && done[1]);
	if (in_place && !with_copy) {
		assert_int_equal(rc[0], KEEL_EVIEWCHANGED);
		assert_int_equal(rc[1], KEEL_EVIEWCHANGED);
		cluster_fini(&c);
		return;
	}
	assert_int_equal(rc[0], 0);
	assert_int_equal(rc[1], 0);
	keel_check_reference(ref, 0, N, 2, KEEL_F32, KEEL_SUM); /* ranks 0 and 1 only */
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(keel_check_wrong(in_place ? in[r] : out[r], ref, 0, N, KEEL_F32),
				 0);
	struct keel_counters k;
	keel_counters_get(c.node[0], &k);
	assert_int_equal(k.ops_restarted, 1);
	assert_int_equal(k.view_changes, 1);
	cluster_fini(&c);
}

static void test_allreduce_restarts_on_new_view(void **state)
{
	(void)state;
	restart_run(false, false);
}

static void test_allreduce_in_place_restarts_from_its_copy(void **state)
{
	(void)state;
	restart_run(true, true);
}

static void test_allreduce_in_place_without_copy_reports_view_change(void **state)
{
	(void)state;
	restart_run(true, false);
}

static uint32_t g_eager = KEEL_EAGER_RESULT_BYTES_DEFAULT;
static uint32_t g_eager_off_rank = UINT32_MAX; /* a rank that reports nothing early */

static void tweak_eager(struct keel_config *cfg)
{
	tweak(cfg);
	cfg->algo = KEEL_ALGO_RD; /* where one cut leaves every other member with the result */
	cfg->eager_result_bytes = cfg->rank == g_eager_off_rank ? 0 : g_eager;
}

/* A result some members reported early, and others never got: what rank 0 sends `laggard` is
 * cut (recursive doubling: its fold-out at 3 and 5 ranks, its last exchange at
 * 4), so every other rank has the result and the laggard lacks rank 0's part; then rank 0
 * dies. With eager results (the default) the others reported it at once, and the view that
 * drops rank 0 brings it to the laggard, which reports the same bytes over the same old view;
 * the next collective runs over the survivors at every one of them. With eager_result_bytes 0
 * nobody reported it, and everyone restarts it over the survivors. */
static void early_result_run(uint32_t world, uint32_t laggard, size_t count, enum keel_dtype dt,
			     enum keel_redop redop, bool in_place, uint32_t eager)
{
	struct cluster c;
	g_eager = eager;
	assert_int_equal(cluster_init(&c, world, "loss=0", g_seed, tweak_eager), 0);
	g_eager = KEEL_EAGER_RESULT_BYTES_DEFAULT;
	for (int i = 0; i < 5; i++) /* everyone has heard everyone */
		cluster_round(&c);
	size_t es = keel_dtype_size(dt);
	bool early = eager != 0 && count * es <= eager; /* reported at once */
	uint8_t *in[CLUSTER_MAX], *out[CLUSTER_MAX], *ref = malloc(count * es);
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX] = {0};
	assert_int_equal(keel_chaos_cut_send(c.chaos[0], laggard, true), 0);
	for (uint32_t r = 0; r < world; r++) {
		in[r] = malloc(count * es);
		out[r] = in_place ? in[r] : malloc(count * es);
		keel_check_fill(in[r], 0, count, r, dt, redop);
		assert_int_equal(
		    keel_allreduce_start(c.node[r], in[r], out[r], count, dt, redop, &ops[r]), 0);
	}
	/* The others finish (eager) or wait for the laggard's ack (not eager); well before
	 * the laggard could suspect rank 0 (a heartbeat interval is 100 rounds). */
	bool done[CLUSTER_MAX] = {false};
	for (int round = 0; round < 60; round++) {
		for (uint32_t r = 1; r < world; r++) {
			if (done[r] || r == laggard)
				continue;
			struct keel_op_info info;
			rc[r] = keel_op_test_info(c.node[r], ops[r], &info, NULL, 0);
			if (rc[r] == -EINPROGRESS)
				continue;
			done[r] = true;
			assert_int_equal(rc[r], 0);
			assert_int_equal(info.epoch, 1);
			assert_int_equal(info.member_count, world);
		}
		cluster_round(&c);
	}
	for (uint32_t r = 1; r < world; r++)
		assert_int_equal(done[r], early && r != laggard);
	/* rank 0 dies */
	c.paused[0] = true;
	keel_check_reference(ref, 0, count, world, dt, redop);
	uint32_t survivors[CLUSTER_MAX];
	for (uint32_t r = 1; r < world; r++)
		survivors[r - 1] = r;
	if (!early)
		keel_check_reference_members(ref, 0, count, survivors, world - 1, dt, redop);
	for (int round = 0; round < 200000; round++) {
		bool all = true;
		for (uint32_t r = 1; r < world; r++) {
			if (done[r])
				continue;
			struct keel_op_info info;
			rc[r] = keel_op_test_info(c.node[r], ops[r], &info, NULL, 0);
			if (rc[r] == -EINPROGRESS) {
				all = false;
				continue;
			}
			done[r] = true;
			assert_int_equal(rc[r], 0);
			/* what the others reported: the old view; or a restart over the new one */
			assert_int_equal(info.epoch, early ? 1 : 2);
			assert_int_equal(info.member_count, early ? world : world - 1);
		}
		if (all)
			break;
		cluster_round(&c);
	}
	for (uint32_t r = 1; r < world; r++) {
		assert_true(done[r]);
		assert_int_equal(keel_check_wrong(out[r], ref, 0, count, dt), 0);
		struct keel_counters k;
		keel_counters_get(c.node[r], &k);
		assert_int_equal(k.ops_adopted, early && r == laggard ? 1 : 0);
		assert_int_equal(k.ops_restarted, early ? 0 : 1);
	}
	/* The survivors go on together: the next collective is the same one everywhere. */
	int32_t next_in[CLUSTER_MAX][3], next_out[CLUSTER_MAX][3];
	for (uint32_t r = 1; r < world; r++) {
		for (int i = 0; i < 3; i++)
			next_in[r][i] = (int32_t)(r + 1) << i;
		assert_int_equal(keel_allreduce_start(c.node[r], next_in[r], next_out[r], 3,
						      KEEL_I32, KEEL_SUM, &ops[r]),
				 0);
	}
	ops[0] = NULL;
	struct keel_op_info info[CLUSTER_MAX];
	assert_int_equal(cluster_wait_ops_info(&c, ops, rc, info, 200000), 0);
	int32_t want = 0;
	for (uint32_t r = 1; r < world; r++)
		want += (int32_t)r + 1;
	for (uint32_t r = 1; r < world; r++) {
		assert_int_equal(rc[r], 0);
		assert_int_equal(info[r].epoch, 2);
		assert_int_equal(info[r].member_count, world - 1);
		for (int i = 0; i < 3; i++)
			assert_int_equal(next_out[r][i], want << i);
	}
	for (uint32_t r = 0; r < world; r++) {
		if (!in_place)
			free(out[r]);
		free(in[r]);
	}
	free(ref);
	cluster_fini(&c);
}

static void test_allreduce_early_result_brought_by_the_view(void **state)
{
	(void)state;
	early_result_run(3, 2, 7, KEEL_F32, KEEL_SUM, false, KEEL_EAGER_RESULT_BYTES_DEFAULT);
	early_result_run(4, 2, 256, KEEL_I32, KEEL_MAX, true, KEEL_EAGER_RESULT_BYTES_DEFAULT);
	early_result_run(5, 4, 1, KEEL_F64, KEEL_AVG, false, KEEL_EAGER_RESULT_BYTES_DEFAULT);
	early_result_run(4, 2, 33, KEEL_U8, KEEL_PROD, false, 64);
	/* ranks may differ: one that keeps nothing itself still takes a result from the view */
	g_eager_off_rank = 2;
	early_result_run(4, 2, 5, KEEL_I64, KEEL_MIN, false, KEEL_EAGER_RESULT_BYTES_DEFAULT);
	g_eager_off_rank = UINT32_MAX;
}

static void test_allreduce_without_eager_results_restarts_on_the_view(void **state)
{
	(void)state;
	early_result_run(3, 2, 7, KEEL_F32, KEEL_SUM, false, 0);
	early_result_run(4, 2, 256, KEEL_I32, KEEL_MAX, false, 0);
	/* above the size kept: the result waits for every member, as without eager results */
	early_result_run(4, 2, 17, KEEL_F64, KEEL_SUM, false, 128);
}

/* A member that leaves cleanly says how many of the epoch's collectives it knows every member
 * has; one it only reported early is not one of them. Four ranks: rank 1 reports nothing early
 * and waits for the others' acks; rank 2 never gets rank 0's last datagram; ranks 0 and 3
 * report at once. Rank 3 leaves, rank 0 dies. Had rank 1 taken rank 3's count as "every
 * member has it", it would report over the old view while rank 2, which nobody can bring the
 * result to (the only kept copies left with ranks 0 and 3), restarts it: the two would part.
 * Both restart it over the two of them instead, and go on together. */
static void test_allreduce_clean_leave_counts_only_results_everyone_has(void **state)
{
	(void)state;
	struct cluster c;
	enum { N = 7 };
	g_eager_off_rank = 1;
	assert_int_equal(cluster_init(&c, 4, "loss=0", g_seed, tweak_eager), 0);
	g_eager_off_rank = UINT32_MAX;
	for (int i = 0; i < 5; i++) /* everyone has heard everyone */
		cluster_round(&c);
	float in[4][N], out[4][N], ref[N];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX] = {0};
	assert_int_equal(keel_chaos_cut_send(c.chaos[0], 2, true), 0);
	for (uint32_t r = 0; r < 4; r++) {
		keel_check_fill(in[r], 0, N, r, KEEL_F32, KEEL_SUM);
		assert_int_equal(
		    keel_allreduce_start(c.node[r], in[r], out[r], N, KEEL_F32, KEEL_SUM, &ops[r]),
		    0);
	}
	for (int round = 0; round < 60; round++)
		cluster_round(&c);
	for (uint32_t r = 0; r < 4; r++) /* 0 and 3 reported early; 1 waits for 2's ack */
		assert_int_equal(keel_op_test(c.node[r], ops[r]),
				 r == 0 || r == 3 ? 0 : -EINPROGRESS);
	/* not idle: rank 2 has not said it finished (keel_boot_stop waits for that, within
	 * its linger, and then leaves anyway) */
	assert_false(keel_is_idle(c.node[3]));
	assert_int_equal(keel_leave(c.node[3], c.now_ns), 0);
	c.paused[3] = true;
	c.paused[0] = true;
	ops[0] = ops[3] = NULL;
	struct keel_op_info info[CLUSTER_MAX];
	assert_int_equal(cluster_wait_ops_info(&c, ops, rc, info, 200000), 0);
	keel_check_reference_members(ref, 0, N, (const uint32_t[]){1, 2}, 2, KEEL_F32, KEEL_SUM);
	for (uint32_t r = 1; r < 3; r++) {
		assert_int_equal(rc[r], 0);
		assert_int_equal(info[r].epoch, 2); /* restarted over the two left */
		assert_int_equal(info[r].member_count, 2);
		assert_int_equal(keel_check_wrong(out[r], ref, 0, N, KEEL_F32), 0);
	}
	/* the next collective is the same one at both */
	int32_t next_in[CLUSTER_MAX], next_out[CLUSTER_MAX];
	for (uint32_t r = 1; r < 3; r++) {
		next_in[r] = (int32_t)r;
		assert_int_equal(keel_allreduce_start(c.node[r], &next_in[r], &next_out[r], 1,
						      KEEL_I32, KEEL_SUM, &ops[r]),
				 0);
	}
	assert_int_equal(cluster_wait_ops_info(&c, ops, rc, info, 200000), 0);
	for (uint32_t r = 1; r < 3; r++) {
		assert_int_equal(rc[r], 0);
		assert_int_equal(next_out[r], 3);
	}
	cluster_fini(&c);
}

/* ---- hierarchical AllReduce (KEEL_ALGO_HIER): host maps, world <= CLUSTER_MAX ---- */

/* Shapes: 2 hosts x 2 (blocked), 2 x 3 (interleaved: hosts need not be contiguous ranks),
 * 3 x 2 (host numbers neither dense nor ordered), and uneven 3 + 1 (runs flat). */
static const uint32_t hosts_2x2[] = {0, 0, 1, 1};
static const uint32_t hosts_2x3_mixed[] = {0, 1, 0, 1, 0, 1};
static const uint32_t hosts_3x2[] = {5, 5, 2, 2, 0, 0};
static const uint32_t hosts_3p1[] = {1, 1, 1, 3};

static void hier_combinations(const uint32_t *host_of, uint32_t world, enum keel_algo expect)
{
	struct cluster c;
	g_mtu = 1024;
	g_algo = KEEL_ALGO_HIER;
	g_host_of = host_of;
	g_expect = expect;
	assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak), 0);
	every_dtype_op_size(&c, world);
	check_clean(&c);
	cluster_fini(&c);
	g_host_of = NULL;
	g_expect = KEEL_ALGO_AUTO;
}

/* Every dtype, op and boundary size, exact, on every shape; the even ones report HIER. */
static void test_allreduce_hier_every_dtype_op_size(void **state)
{
	(void)state;
	hier_combinations(hosts_2x2, 4, KEEL_ALGO_HIER);
	hier_combinations(hosts_2x3_mixed, 6, KEEL_ALGO_HIER);
	hier_combinations(hosts_3x2, 6, KEEL_ALGO_HIER);
	hier_combinations(hosts_3p1, 4, KEEL_ALGO_AUTO); /* uneven: flat, whichever fits */
}

/* The same over the shared-memory transport (reliable, ordered: no retransmission). */
static void test_allreduce_hier_shm(void **state)
{
	(void)state;
	struct cluster c;
	g_mtu = 1024;
	g_algo = KEEL_ALGO_HIER;
	g_host_of = hosts_2x2;
	g_expect = KEEL_ALGO_HIER;
	assert_int_equal(cluster_init_shm(&c, 4, g_mtu, tweak), 0);
	every_dtype_op_size(&c, 4);
	check_clean(&c);
	cluster_fini(&c);
	g_host_of = NULL;
	g_expect = KEEL_ALGO_AUTO;
}

/* One AllReduce of inputs no reference predicts (seeded noise), results kept in out[]. */
static void run_noise(enum keel_algo algo, const uint32_t *host_of, uint32_t world, size_t count,
		      enum keel_dtype dt, enum keel_redop op, uint8_t **out)
{
	struct cluster c;
	size_t es = keel_dtype_size(dt);
	uint8_t *in[CLUSTER_MAX];
	struct keel_op *ops[CLUSTER_MAX];
	struct keel_op_info info[CLUSTER_MAX];
	int rc[CLUSTER_MAX];
	g_mtu = 1024;
	g_algo = algo;
	g_host_of = host_of;
	assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak), 0);
	uint64_t x = g_seed * 0x9E3779B97F4A7C15ull + 1;
	for (uint32_t r = 0; r < world; r++) {
		in[r] = malloc(count * es);
		for (size_t i = 0; i < count * es; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			in[r][i] = (uint8_t)(x >> 24);
		}
		/* floats finite (no NaN, whose min/max is order-dependent): clear an exponent bit
		 */
		for (size_t i = 0; dt != KEEL_I32 && dt != KEEL_I64 && dt != KEEL_U8 && i < count;
		     i++)
			in[r][i * es + es - 1] &= 0xBF;
		assert_int_equal(
		    keel_allreduce_start(c.node[r], in[r], out[r], count, dt, op, &ops[r]), 0);
	}
	assert_int_equal(cluster_wait_ops_info(&c, ops, rc, info, 2000000), 0);
	for (uint32_t r = 0; r < world; r++) {
		assert_int_equal(rc[r], 0);
		assert_int_equal(info[r].algo, algo);
		free(in[r]);
	}
	cluster_fini(&c);
	g_host_of = NULL;
}

/* Where the order of reduction cannot change the result (integers wrap alike in any order;
 * min and max pick an input), the hierarchy gives the flat ring's bits exactly, on any input. */
static void test_allreduce_hier_same_bits_as_ring(void **state)
{
	(void)state;
	enum { WORLD = 6, COUNT = 3001 };
	const enum keel_dtype types[] = {KEEL_I32, KEEL_I64, KEEL_U8,  KEEL_F32,
					 KEEL_F64, KEEL_F16, KEEL_BF16};
	uint8_t *hier[CLUSTER_MAX], *ring[CLUSTER_MAX];
	for (uint32_t r = 0; r < WORLD; r++) {
		hier[r] = malloc(COUNT * 8);
		ring[r] = malloc(COUNT * 8);
	}
	for (int k = 0; k < 7; k++) {
		enum keel_dtype dt = types[k];
		for (int op = 0; op < KEEL_REDOP_COUNT; op++) {
			if (k >= 3 && op != KEEL_MIN && op != KEEL_MAX)
				continue; /* a float sum's bits depend on the order */
			run_noise(KEEL_ALGO_HIER, hosts_2x3_mixed, WORLD, COUNT, dt, op, hier);
			run_noise(KEEL_ALGO_RING, hosts_2x3_mixed, WORLD, COUNT, dt, op, ring);
			for (uint32_t r = 0; r < WORLD; r++)
				assert_memory_equal(hier[r], ring[0], COUNT * keel_dtype_size(dt));
		}
	}
	for (uint32_t r = 0; r < WORLD; r++) {
		free(hier[r]);
		free(ring[r]);
	}
}

/* AUTO: recursive doubling for small messages; above rd_max_bytes the hierarchy when every
 * host has the same member count >= 2, else the ring. HIER on a view that does not suit it
 * runs as AUTO would. */
static void auto_case(enum keel_algo algo, const uint32_t *host_of, uint32_t world, size_t count,
		      enum keel_algo expect)
{
	struct cluster c;
	g_mtu = KEEL_MTU_DEFAULT;
	g_algo = algo;
	g_host_of = host_of;
	g_expect = expect;
	assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak), 0);
	run_one(&c, count, KEEL_F32, KEEL_SUM, false);
	cluster_fini(&c);
	g_host_of = NULL;
	g_expect = KEEL_ALGO_AUTO;
}

static void test_allreduce_hier_auto_choice(void **state)
{
	(void)state;
	size_t large = KEEL_RD_MAX_BYTES_DEFAULT / 4 + 1, small = 3;
	auto_case(KEEL_ALGO_AUTO, hosts_2x2, 4, large, KEEL_ALGO_HIER);
	auto_case(KEEL_ALGO_AUTO, hosts_2x2, 4, small, KEEL_ALGO_RD);
	auto_case(KEEL_ALGO_AUTO, hosts_3p1, 4, large, KEEL_ALGO_RING);
	auto_case(KEEL_ALGO_AUTO, NULL, 4, large, KEEL_ALGO_RING);
	auto_case(KEEL_ALGO_HIER, hosts_3p1, 4, large, KEEL_ALGO_RING);
	auto_case(KEEL_ALGO_HIER, hosts_3p1, 4, small, KEEL_ALGO_RD);
	auto_case(KEEL_ALGO_HIER, NULL, 4, large, KEEL_ALGO_RING);
	auto_case(KEEL_ALGO_HIER, hosts_2x2, 4, small, KEEL_ALGO_HIER); /* asked for: it runs */
	auto_case(KEEL_ALGO_RING, hosts_2x2, 4, large, KEEL_ALGO_RING); /* explicit stays flat */
	auto_case(KEEL_ALGO_RD, hosts_2x2, 4, large, KEEL_ALGO_RD);
}

/* host_of is checked (a host number must be below world_size) and copied: the caller's array
 * may change or go once keel_init returned. */
static void test_allreduce_hier_host_of_checked_and_copied(void **state)
{
	(void)state;
	struct cluster c;
	uint32_t hosts[4] = {0, 0, 1, 1};
	g_mtu = KEEL_MTU_DEFAULT;
	g_algo = KEEL_ALGO_HIER;
	g_host_of = hosts;
	assert_int_equal(cluster_init(&c, 4, NULL, g_seed, tweak), 0);
	struct keel_config bad = c.cfg[0];
	uint32_t out_of_range[4] = {0, 0, 4, 4};
	bad.host_of = out_of_range;
	assert_int_equal(keel_storage_size(&bad), 0);
	size_t sz = keel_storage_size(&c.cfg[0]);
	void *mem = calloc(1, sz);
	struct keel_node *n;
	assert_int_equal(keel_init(&n, mem, sz, &bad, c.now_ns), -EINVAL);
	free(mem);
	memset(hosts, 0, sizeof(hosts)); /* one host now, for the caller; the nodes kept theirs */
	g_expect = KEEL_ALGO_HIER;
	run_one(&c, 5000, KEEL_I32, KEEL_SUM, false);
	cluster_fini(&c);
	g_host_of = NULL;
	g_expect = KEEL_ALGO_AUTO;
}

/* Under loss, duplication, reordering and delay: exact, and still hierarchical. */
static void test_allreduce_hier_chaos(void **state)
{
	(void)state;
	g_host_of = hosts_2x2;
	g_expect = KEEL_ALGO_HIER;
	chaos_run("loss=0,dup=0.01,reorder=0.01", KEEL_ALGO_HIER);
	chaos_run("loss=0.01,dup=0.01,reorder=0.01,delay_us=30", KEEL_ALGO_HIER);
	chaos_run("loss=0.1,dup=0.02,reorder=0.05,delay_us=50", KEEL_ALGO_HIER);
	g_host_of = NULL;
	g_expect = KEEL_ALGO_AUTO;
}

/* 3 hosts x 2 ranks; `dead` ranks stop in the middle of a hierarchical AllReduce. The
 * survivors restart it on the new view from their untouched inputs: exact over exactly that
 * view's members, by the algorithm that view allows (`expect`). */
static void hier_restart_run(const uint32_t *dead, uint32_t dead_count, enum keel_algo expect)
{
	enum { WORLD = 6, N = 400000 };
	static float in[WORLD][N], out[WORLD][N], ref[N];
	struct cluster c;
	g_mtu = KEEL_MTU_DEFAULT;
	g_algo = KEEL_ALGO_HIER;
	g_host_of = hosts_3x2;
	assert_int_equal(cluster_init(&c, WORLD, NULL, g_seed, tweak), 0);
	g_host_of = NULL;
	for (int i = 0; i < 5; i++) /* everyone has heard everyone */
		cluster_round(&c);
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	struct keel_op_info info[CLUSTER_MAX];
	int rc[CLUSTER_MAX] = {0};
	for (uint32_t r = 0; r < WORLD; r++) {
		keel_check_fill(in[r], 0, N, r, KEEL_F32, KEEL_SUM);
		assert_int_equal(
		    keel_allreduce_start(c.node[r], in[r], out[r], N, KEEL_F32, KEEL_SUM, &ops[r]),
		    0);
	}
	for (int i = 0; i < 1; i++) /* some data moves, then they die */
		cluster_round(&c);
	for (uint32_t k = 0; k < dead_count; k++) {
		c.paused[dead[k]] = true;
		ops[dead[k]] = NULL;
	}
	uint32_t live = c.paused[0] ? 5 : 0;
	assert_int_equal(keel_op_test(c.node[live], ops[live]), -EINPROGRESS); /* mid-operation */
	assert_int_equal(cluster_wait_ops_info(&c, ops, rc, info, 200000), 0);
	uint32_t members[WORLD], count = 0;
	for (uint32_t r = 0; r < WORLD; r++)
		if (!c.paused[r])
			members[count++] = r;
	keel_check_reference_members(ref, 0, N, members, count, KEEL_F32, KEEL_SUM);
	for (uint32_t r = 0; r < WORLD; r++) {
		if (c.paused[r])
			continue;
		assert_int_equal(rc[r], 0);
		assert_int_equal(info[r].member_count, count);
		assert_true(info[r].restarts >= 1);
		assert_int_equal(info[r].algo, expect);
		assert_int_equal(keel_check_wrong(out[r], ref, 0, N, KEEL_F32), 0);
	}
	cluster_fini(&c);
}

/* One rank of three hosts dies: 2 + 2 + 1 is uneven, the restart runs flat (the ring). The
 * whole of a host dies: 2 x 2 is even, the restart is hierarchical again. */
static void test_allreduce_hier_restarts_on_new_view(void **state)
{
	(void)state;
	const uint32_t one[] = {5}, host[] = {0, 1};
	hier_restart_run(one, 1, KEEL_ALGO_RING);
	hier_restart_run(host, 2, KEEL_ALGO_HIER);
}

/* The blocking call: rank 0 blocks in keel_allreduce while its waiter drives the others. */
struct drive {
	struct cluster *c;
};
static uint64_t drive_now(void *ctx)
{
	return ((struct drive *)ctx)->c->now_ns;
}
static void drive_wait(void *ctx, uint64_t deadline_ns)
{
	struct cluster *c = ((struct drive *)ctx)->c;
	(void)deadline_ns;
	for (uint32_t r = 1; r < c->world; r++) {
		uint64_t dl;
		int rc = keel_poll(c->node[r], c->now_ns, &dl);
		(void)rc;
	}
	c->now_ns += c->step_ns;
}

static void test_allreduce_blocking_call(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, NULL), 0);
	struct drive d = {&c};
	/* keel_init copied the config: rebuild rank 0 with a waiter */
	struct keel_config cfg = c.cfg[0];
	cfg.waiter.now_ns = drive_now;
	cfg.waiter.wait = drive_wait;
	cfg.waiter.ctx = &d;
	assert_int_equal(
	    keel_init(&c.node[0], c.mem_node[0], keel_storage_size(&cfg), &cfg, c.now_ns), 0);
	int32_t buf[3][10];
	struct keel_op *ops[3];
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < 10; i++)
			buf[r][i] = r * 100 + i;
	for (int r = 1; r < 3; r++)
		assert_int_equal(keel_allreduce_start(c.node[r], buf[r], buf[r], 10, KEEL_I32,
						      KEEL_SUM, &ops[r]),
				 0);
	assert_int_equal(keel_allreduce(c.node[0], buf[0], buf[0], 10, KEEL_I32, KEEL_SUM), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(buf[0][i], 300 + 3 * i);
	cluster_fini(&c);
}

/* acks_ride: 4 ranks over shared memory run back-to-back small AllReduces, each starting its
 * next as soon as its last is done, as a training loop does. Recursive doubling sends to two
 * partners; without acks_ride each rank acks its second partner on its own at every
 * collective, with it that ack rides on the next collective's data. Results stay exact. */
static bool g_ride;

static void ride_tweak(struct keel_config *cfg)
{
	cfg->acks_ride = g_ride;
	cfg->algo = KEEL_ALGO_RD;
}

static uint64_t back_to_back_acks(bool ride, uint32_t calls)
{
	enum { W = 4, N = 8 };
	struct cluster c;
	g_ride = ride;
	assert_int_equal(cluster_init_shm(&c, W, g_mtu, ride_tweak), 0);
	c.step_ns = 1000; /* 1 us a round: the ack delay (50 us) is many rounds */
	int32_t in[W][N], out[W][N];
	struct keel_op *ops[W] = {NULL};
	uint32_t done[W] = {0};
	for (uint32_t round = 0; round < 200000; round++) {
		bool all = true;
		for (uint32_t r = 0; r < W; r++) {
			if (ops[r] != NULL) {
				int st = keel_op_test(c.node[r], ops[r]);
				if (st == -EINPROGRESS) {
					all = false;
					continue;
				}
				assert_int_equal(st, 0);
				for (int i = 0; i < N;
				     i++) /* sum over ranks of (call*10 + r + i) */
					assert_int_equal(out[r][i],
							 (int32_t)(W * (done[r] * 10 + i) + 6));
				ops[r] = NULL;
				done[r]++;
			}
			if (done[r] == calls)
				continue;
			all = false;
			for (int i = 0; i < N; i++)
				in[r][i] = (int32_t)(done[r] * 10 + r + i);
			assert_int_equal(keel_allreduce_start(c.node[r], in[r], out[r], N, KEEL_I32,
							      KEEL_SUM, &ops[r]),
					 0);
		}
		if (all)
			break;
		cluster_round(&c);
	}
	uint64_t acks = 0;
	for (uint32_t r = 0; r < W; r++) {
		assert_int_equal(done[r], calls);
		struct keel_counters k;
		keel_counters_get(c.node[r], &k);
		acks += k.acks_sent;
	}
	cluster_fini(&c);
	return acks;
}

static void test_allreduce_acks_ride_on_the_next_collective(void **state)
{
	(void)state;
	const uint32_t calls = 200;
	uint64_t alone = back_to_back_acks(false, calls);
	uint64_t riding = back_to_back_acks(true, calls);
	print_message("acks sent by 4 ranks over %u collectives: %" PRIu64 " on their own, %" PRIu64
		      " with acks_ride\n",
		      calls, alone, riding);
	assert_true(alone >= 4 * calls * 9 / 10); /* one per rank and collective */
	assert_true(riding <= alone / 10);
}

/* Recursive doubling: a step's data can come before this rank sent that step (it receives
 * into the bytes it sends). A rank polled last finds, in one burst, every partner's data:
 * the first step's, and each later one's, which it must hold until it has sent its own step
 * of that number, in that same poll. All of it must be taken in that poll: left for the next
 * one, it waited for some other datagram to wake the rank (a quarter of a small AllReduce's
 * time on 4 ranks). Each rank of 4 and of 8 polled last. */
static void held_data_taken_in_one_poll(uint32_t world)
{
	enum { W = 8, N = 4 };
	for (uint32_t last = 0; last < world; last++) {
		struct cluster c;
		assert_int_equal(cluster_init_shm(&c, world, g_mtu, tweak_rd), 0);
		int32_t in[W][N], out[W][N];
		struct keel_op *ops[W];
		for (uint32_t r = 0; r < world; r++) {
			for (int i = 0; i < N; i++)
				in[r][i] = (int32_t)(r * 100 + (uint32_t)i);
			assert_int_equal(keel_allreduce_start(c.node[r], in[r], out[r], N, KEEL_I32,
							      KEEL_SUM, &ops[r]),
					 0);
		}
		/* the others go as far as they can without `last` */
		for (uint32_t round = 0; round < 8; round++) {
			for (uint32_t r = 0; r < world; r++) {
				uint64_t dl;
				if (r != last)
					assert_int_equal(keel_poll(c.node[r], c.now_ns, &dl), 0);
			}
			c.now_ns += 1000;
		}
		assert_int_equal(keel_op_test(c.node[last ^ 1u], ops[last ^ 1u]), -EINPROGRESS);
		uint64_t dl;
		assert_int_equal(keel_poll(c.node[last], c.now_ns, &dl), 0);
		struct keel_counters k;
		keel_counters_get(c.node[last], &k);
		print_message("%u ranks, rank %u: %" PRIu64
			      " data datagrams delivered in its one poll\n",
			      world, last, k.data_delivered);
		assert_int_equal(keel_op_test(c.node[last], ops[last]), 0);
		for (int i = 0; i < N; i++) /* sum of r * 100 + i over the ranks */
			assert_int_equal(out[last][i],
					 (int32_t)(50 * world * (world - 1) + world * (uint32_t)i));
		cluster_fini(&c);
	}
}

static void test_allreduce_data_held_for_a_send_taken_in_the_same_poll(void **state)
{
	(void)state;
	held_data_taken_in_one_poll(4);
	held_data_taken_in_one_poll(8);
}

int main(void)
{
	g_seed = cluster_seed(1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_allreduce_ring_every_dtype_op_size),
	    cmocka_unit_test(test_allreduce_rd_every_dtype_op_size),
	    cmocka_unit_test(test_allreduce_shm_every_dtype_op_size),
	    cmocka_unit_test(test_allreduce_auto_large),
	    cmocka_unit_test(test_allreduce_chaos_no_loss),
	    cmocka_unit_test(test_allreduce_chaos_1pct_loss),
	    cmocka_unit_test(test_allreduce_chaos_10pct_loss),
	    cmocka_unit_test(test_allreduce_pooled_streams),
	    cmocka_unit_test(test_allreduce_bad_arguments),
	    cmocka_unit_test(test_allreduce_busy_when_ops_max_pending),
	    cmocka_unit_test(test_allreduce_ids_wrap_with_ops_in_flight),
	    cmocka_unit_test(test_allreduce_message_too_large),
	    cmocka_unit_test(test_allreduce_transport_failure),
	    cmocka_unit_test(test_allreduce_waits_entry_timeout_for_a_member_that_never_starts),
	    cmocka_unit_test(test_allreduce_stall_with_every_member_in_is_a_soft_fault),
	    cmocka_unit_test(test_allreduce_mismatched_calls_fail_at_once),
	    cmocka_unit_test(test_allreduce_restarts_on_new_view),
	    cmocka_unit_test(test_allreduce_in_place_restarts_from_its_copy),
	    cmocka_unit_test(test_allreduce_in_place_without_copy_reports_view_change),
	    cmocka_unit_test(test_allreduce_early_result_brought_by_the_view),
	    cmocka_unit_test(test_allreduce_clean_leave_counts_only_results_everyone_has),
	    cmocka_unit_test(test_allreduce_without_eager_results_restarts_on_the_view),
	    cmocka_unit_test(test_allreduce_blocking_call),
	    cmocka_unit_test(test_allreduce_acks_ride_on_the_next_collective),
	    cmocka_unit_test(test_allreduce_data_held_for_a_send_taken_in_the_same_poll),
	    cmocka_unit_test(test_allreduce_hier_every_dtype_op_size),
	    cmocka_unit_test(test_allreduce_hier_shm),
	    cmocka_unit_test(test_allreduce_hier_same_bits_as_ring),
	    cmocka_unit_test(test_allreduce_hier_auto_choice),
	    cmocka_unit_test(test_allreduce_hier_host_of_checked_and_copied),
	    cmocka_unit_test(test_allreduce_hier_chaos),
	    cmocka_unit_test(test_allreduce_hier_restarts_on_new_view),
	};
	return cmocka_run_group_tests_name("allreduce", tests, NULL, NULL);
}
