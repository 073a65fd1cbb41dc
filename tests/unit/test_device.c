/* AllReduce on device buffers, over the CPU stand-in device (keel/device_cpu.h): 2..5 nodes
 * on loopback UDP and a manual clock, every dtype x op x boundary size, ring, recursive
 * doubling and the hierarchy, in place and out of place, with device work finishing late and
 * out of order; under chaos; a rank killed, or paused and resumed, mid-pipeline; a device that
 * fails; the stand-in's
 * own contract. Results bit for bit against the reference. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_int.h"
#include "guarded_mem.h"
#include "keel/device.h"
#include "keel/device_cpu.h"
#include "node_int.h"
#include "refcheck.h"

static uint64_t g_seed;
static uint32_t g_mtu = KEEL_MTU_DEFAULT;
static enum keel_algo g_algo;
static uint32_t g_chunk;
static const uint32_t *g_host_of;
static struct keel_device_cpu_config g_devcfg;
static bool g_in_order; /* every device finishes work in queue order, as a CUDA stream */
static struct keel_device g_dev[CLUSTER_MAX];
static void *g_dev_mem[CLUSTER_MAX];

static void devices_init(uint32_t world)
{
	for (uint32_t r = 0; r < world; r++) {
		struct keel_device_cpu_config dc = g_devcfg;
		dc.seed = g_seed * 131 + r + 1;
		dc.in_order = g_in_order;
		if (g_devcfg.fail_at != 0 && r != 0)
			dc.fail_at = 0; /* only rank 0's device fails */
		size_t sz = keel_device_cpu_storage_size(&dc);
		assert_true(sz > 0);
		g_dev_mem[r] = calloc(1, sz);
		assert_int_equal(keel_device_cpu_init(&g_dev[r], g_dev_mem[r], sz, &dc), 0);
	}
}

static void devices_fini(uint32_t world)
{
	for (uint32_t r = 0; r < world; r++) {
		g_dev[r].ops->fini(g_dev[r].state);
		free(g_dev_mem[r]);
		g_dev_mem[r] = NULL;
	}
}

static void tweak(struct keel_config *cfg)
{
	cfg->mtu = g_mtu;
	cfg->algo = g_algo;
	cfg->op_timeout_ns = 5000000000ull;
	cfg->host_of = g_host_of;
	cfg->device = &g_dev[cfg->rank];
	cfg->device_chunk_bytes = g_chunk;
}

static int cluster_with_devices(struct cluster *c, uint32_t world, const char *chaos)
{
	devices_init(world);
	return cluster_init(c, world, chaos, g_seed, tweak);
}

static void cluster_with_devices_fini(struct cluster *c)
{
	uint32_t world = c->world;
	cluster_fini(c);
	devices_fini(world);
}

/* One rank's buffers: "device" input and output, and its registered stage. The device
 * buffers fault when the CPU touches them, as a GPU's would (guarded_mem.h): the test fills
 * and reads them through their working mapping, d_in_w and d_out_w. */
struct rank_bufs {
	struct guarded_mem mem;
	uint8_t *d_in, *d_out, *stage;
	uint8_t *d_in_w, *d_out_w;
	size_t stage_bytes;
};

static void bufs_init(struct rank_bufs *b, uint32_t r, size_t count, enum keel_dtype dt,
		      enum keel_redop op, bool in_place)
{
	size_t bytes = count * keel_dtype_size(dt) + 64; /* out starts aligned to 64 */
	bytes -= bytes % 64;
	assert_int_equal(guarded_mem_map(&b->mem, &g_dev[r], in_place ? bytes : 2 * bytes), 0);
	b->d_in = b->mem.view;
	b->d_in_w = b->mem.work;
	b->d_out = in_place ? b->d_in : b->d_in + bytes;
	b->d_out_w = in_place ? b->d_in_w : b->d_in_w + bytes;
	b->stage_bytes = keel_allreduce_device_stage_bytes(count, dt) + 1;
	b->stage = malloc(b->stage_bytes);
	keel_check_fill(b->d_in_w, 0, count, r, dt, op);
	assert_int_equal(g_dev[r].ops->host_register(g_dev[r].state, b->stage, b->stage_bytes), 0);
}

static void bufs_fini(struct rank_bufs *b, uint32_t r)
{
	assert_int_equal(g_dev[r].ops->host_unregister(g_dev[r].state, b->stage), 0);
	assert_int_equal(guarded_mem_unmap(&b->mem), 0);
	free(b->stage);
}

/* A killed rank's buffers: its device keeps the work it had queued (nobody polls it), so
 * they go without unguarding or unregistering; its device is dropped whole right after. */
static void bufs_drop(struct rank_bufs *b)
{
	b->mem.dev = NULL;
	assert_int_equal(guarded_mem_unmap(&b->mem), 0);
	free(b->stage);
}

/* Every device's queue is empty: nothing left running after an operation ended. */
static void devices_drained(const struct cluster *c)
{
	for (uint32_t r = 0; r < c->world; r++) {
		struct keel_device_cpu_stats st;
		keel_device_cpu_stats(&g_dev[r], &st);
		if (!c->paused[r])
			assert_int_equal(st.used, 0);
	}
}

/* One device AllReduce on every rank, checked against the reference over `members`. */
static void run_one(struct cluster *c, size_t count, enum keel_dtype dt, enum keel_redop op,
		    bool in_place)
{
	size_t es = keel_dtype_size(dt);
	struct rank_bufs b[CLUSTER_MAX];
	struct keel_op *ops[CLUSTER_MAX];
	int rc[CLUSTER_MAX];
	uint8_t *ref = malloc(count * es + 1), *in_copy = malloc(count * es + 1);
	keel_check_reference(ref, 0, count, c->world, dt, op);
	for (uint32_t r = 0; r < c->world; r++) {
		bufs_init(&b[r], r, count, dt, op, in_place);
		assert_int_equal(keel_allreduce_device_start(c->node[r], b[r].d_in, b[r].d_out,
							     count, dt, op, b[r].stage,
							     b[r].stage_bytes, &ops[r]),
				 0);
	}
	memcpy(in_copy, b[0].d_in_w, count * es);
	assert_int_equal(cluster_wait_ops(c, ops, rc, 2000000), 0);
	for (uint32_t r = 0; r < c->world; r++) {
		if (rc[r] != 0 || memcmp(b[r].d_out_w, ref, count * es) != 0) {
			print_error("world %u rank %u count %zu %s %s %s: rc %d (%s), %zu wrong\n",
				    c->world, r, count, keel_dtype_name(dt), keel_redop_name(op),
				    in_place ? "in-place" : "out-of-place", rc[r],
				    keel_strerror(rc[r]),
				    keel_check_wrong(b[r].d_out_w, ref, 0, count, dt));
			fail();
		}
	}
	if (!in_place) /* the device input is never written */
		assert_memory_equal(b[0].d_in_w, in_copy, count * es);
	devices_drained(c);
	for (uint32_t r = 0; r < c->world; r++)
		bufs_fini(&b[r], r);
	free(ref);
	free(in_copy);
}

static void every_dtype_op_size(struct cluster *c, uint32_t world)
{
	for (int dt = 0; dt < KEEL_DTYPE_COUNT; dt++) {
		size_t frag = (g_mtu - 56) / keel_dtype_size(dt);
		size_t sizes[KEEL_CHECK_SIZES];
		keel_check_sizes(sizes, world, frag, 20000);
		for (int op = 0; op < KEEL_REDOP_COUNT; op++)
			for (size_t s = 0; s < KEEL_CHECK_SIZES; s++)
				run_one(c, sizes[s], dt, op, (s + op) % 2 == 0);
	}
}

static void all_combinations(enum keel_algo algo, const uint32_t *worlds, size_t nworlds)
{
	g_algo = algo;
	g_chunk = KEEL_DEVICE_CHUNK_MIN; /* many chunks per operation: the pipeline is exercised */
	keel_device_cpu_config_default(&g_devcfg);
	for (size_t i = 0; i < nworlds; i++) {
		struct cluster c;
		assert_int_equal(cluster_with_devices(&c, worlds[i], NULL), 0);
		every_dtype_op_size(&c, worlds[i]);
		struct keel_device_cpu_stats st;
		keel_device_cpu_stats(&g_dev[0], &st);
		/* The stand-in finished work late and out of order (a view of one only copies). */
		assert_true(st.finished_out_of_order > 0 || worlds[i] == 1);
		assert_true(st.copies > 0 && (st.reductions > 0 || worlds[i] == 1));
		cluster_with_devices_fini(&c);
	}
	g_algo = KEEL_ALGO_AUTO;
	g_chunk = 0;
}

static void test_device_ring_every_dtype_op_size(void **state)
{
	(void)state;
	static const uint32_t worlds[] = {2, 3, 5};
	all_combinations(KEEL_ALGO_RING, worlds, 3);
}

static void test_device_rd_every_dtype_op_size(void **state)
{
	(void)state;
	static const uint32_t worlds[] = {1, 2, 3, 4};
	all_combinations(KEEL_ALGO_RD, worlds, 4);
}

static void test_device_hier_every_dtype_op_size(void **state)
{
	(void)state;
	static const uint32_t hosts[4] = {0, 0, 2, 2};
	static const uint32_t worlds[] = {4};
	g_host_of = hosts;
	all_combinations(KEEL_ALGO_HIER, worlds, 1);
	g_host_of = NULL;
}

/* A device with room for one piece of work at a time: every queue call but one is refused
 * (-EAGAIN) and retried; results stay exact. */
static void test_device_backpressure_one_in_flight(void **state)
{
	(void)state;
	keel_device_cpu_config_default(&g_devcfg);
	g_devcfg.inflight_max = 1;
	g_devcfg.jitter_tests = 0;
	g_chunk = KEEL_DEVICE_CHUNK_MIN;
	struct cluster c;
	assert_int_equal(cluster_with_devices(&c, 3, NULL), 0);
	run_one(&c, 50000, KEEL_F32, KEEL_SUM, false);
	run_one(&c, 50000, KEEL_BF16, KEEL_AVG, true);
	struct keel_device_cpu_stats st;
	keel_device_cpu_stats(&g_dev[1], &st);
	assert_true(st.refused_full > 0);
	assert_int_equal(st.used_max, 1);
	cluster_with_devices_fini(&c);
	g_chunk = 0;
}

/* Loss, duplication, reordering and delay on the network while the device finishes late. */
static void test_device_chaos(void **state)
{
	(void)state;
	static const char *specs[] = {"loss=0.01,dup=0.01,reorder=0.02,delay_us=30",
				      "loss=0.1,dup=0.02,reorder=0.05,delay_us=50"};
	keel_device_cpu_config_default(&g_devcfg);
	g_devcfg.jitter_tests = 16;
	g_chunk = 8192;
	for (size_t i = 0; i < 2; i++) {
		for (int a = 0; a < 2; a++) {
			g_algo = a == 0 ? KEEL_ALGO_RING : KEEL_ALGO_RD;
			struct cluster c;
			assert_int_equal(cluster_with_devices(&c, 4, specs[i]), 0);
			run_one(&c, 30011, KEEL_F32, KEEL_SUM, false);
			run_one(&c, 7001, KEEL_I64, KEEL_MAX, true);
			run_one(&c, 12345, KEEL_F16, KEEL_AVG, false);
			cluster_with_devices_fini(&c);
		}
	}
	g_algo = KEEL_ALGO_AUTO;
	g_chunk = 0;
}

/* Rank 2 dies in the middle of the pipeline: the survivors restart on the new view from
 * the staged input (in place too: the device buffer was overwritten, the stage was not);
 * the result is exact over exactly ranks 0 and 1. */
static void kill_run(bool in_place, enum keel_algo algo)
{
	enum { N = 300000 };
	keel_device_cpu_config_default(&g_devcfg);
	g_devcfg.jitter_tests = 8;
	g_chunk = 16384;
	g_algo = algo;
	struct cluster c;
	assert_int_equal(cluster_with_devices(&c, 3, NULL), 0);
	for (int i = 0; i < 5; i++)
		cluster_round(&c);
	struct rank_bufs b[3];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	struct keel_op_info info[CLUSTER_MAX];
	int rc[CLUSTER_MAX] = {0};
	for (uint32_t r = 0; r < 3; r++) {
		bufs_init(&b[r], r, N, KEEL_F32, KEEL_SUM, in_place);
		assert_int_equal(keel_allreduce_device_start(c.node[r], b[r].d_in, b[r].d_out, N,
							     KEEL_F32, KEEL_SUM, b[r].stage,
							     b[r].stage_bytes, &ops[r]),
				 0);
	}
	/* Until rank 0's device reduces received data: the pipeline is full. */
	for (int i = 0; i < 50 && ops[0]->dev.ap_head == ops[0]->dev.ap_tail; i++)
		cluster_round(&c);
	assert_true(ops[0]->dev.ap_head != ops[0]->dev.ap_tail);
	assert_int_equal(keel_op_test(c.node[0], ops[0]), -EINPROGRESS);
	c.paused[2] = true;
	ops[2] = NULL;
	assert_int_equal(cluster_wait_ops_info(&c, ops, rc, info, 400000), 0);
	static float ref[N];
	keel_check_reference(ref, 0, N, 2, KEEL_F32, KEEL_SUM);
	for (uint32_t r = 0; r < 2; r++) {
		assert_int_equal(rc[r], 0);
		assert_int_equal(info[r].member_count, 2);
		assert_true(info[r].restarts >= 1);
		assert_int_equal(keel_check_wrong(b[r].d_out_w, ref, 0, N, KEEL_F32), 0);
	}
	devices_drained(&c);
	for (uint32_t r = 0; r < 2; r++)
		bufs_fini(&b[r], r);
	bufs_drop(&b[2]);
	cluster_with_devices_fini(&c);
	g_algo = KEEL_ALGO_AUTO;
	g_chunk = 0;
}

static void test_device_rank_killed_mid_pipeline(void **state)
{
	(void)state;
	kill_run(false, KEEL_ALGO_RING);
	kill_run(true, KEEL_ALGO_RING);
	kill_run(true, KEEL_ALGO_RD);
}

/* A device that finishes work in queue order (ops->ordered, as CUDA's one stream): the engine
 * stops testing each queue at its first unfinished piece. Ring, recursive doubling and the
 * hierarchy on 3 and 4 ranks, in and out of place, several dtypes, with work due late and at
 * random (it still finishes in order); then a rank killed mid-pipeline. Results exact. */
static void test_device_in_order(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 1, 1};
	static const enum keel_algo algos[] = {KEEL_ALGO_RING, KEEL_ALGO_RD, KEEL_ALGO_HIER};
	g_in_order = true;
	keel_device_cpu_config_default(&g_devcfg);
	g_devcfg.jitter_tests = 8;
	g_chunk = 8192;
	for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
		g_algo = algos[a];
		uint32_t world = algos[a] == KEEL_ALGO_HIER ? 4 : 3;
		g_host_of = algos[a] == KEEL_ALGO_HIER ? hosts : NULL;
		struct cluster c;
		assert_int_equal(cluster_with_devices(&c, world, NULL), 0);
		run_one(&c, 50001, KEEL_F32, KEEL_SUM, false);
		run_one(&c, 30000, KEEL_BF16, KEEL_AVG, true);
		run_one(&c, 20011, KEEL_I64, KEEL_MAX, true);
		struct keel_device_cpu_stats st;
		keel_device_cpu_stats(&g_dev[0], &st);
		assert_int_equal(st.finished_out_of_order, 0); /* in order, as promised */
		assert_true(st.copies > 0 && st.reductions > 0);
		cluster_with_devices_fini(&c);
	}
	g_host_of = NULL;
	kill_run(true, KEEL_ALGO_RING);
	kill_run(false, KEEL_ALGO_RD);
	g_in_order = false;
	g_algo = KEEL_ALGO_AUTO;
	g_chunk = 0;
}

/* Rank 2 stops (SIGSTOP: not polled) with device work in flight, then goes on (SIGCONT).
 * Shorter than the detector: nothing is suspected, all three finish exact over all three.
 * Longer: the other two install a view without it and finish exact over themselves; rank 2
 * hears KEEL_EEXCLUDED, and its device queue drains before the call reports it. */
static void pause_run(uint32_t pause_rounds, bool excluded)
{
	enum { N = 200000 };
	keel_device_cpu_config_default(&g_devcfg);
	g_chunk = 16384;
	g_algo = KEEL_ALGO_RING;
	struct cluster c;
	assert_int_equal(cluster_with_devices(&c, 3, NULL), 0);
	for (int i = 0; i < 5; i++)
		cluster_round(&c);
	struct rank_bufs b[3];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	struct keel_op_info info[CLUSTER_MAX];
	int rc[CLUSTER_MAX] = {0};
	for (uint32_t r = 0; r < 3; r++) {
		bufs_init(&b[r], r, N, KEEL_F32, KEEL_SUM, false);
		assert_int_equal(keel_allreduce_device_start(c.node[r], b[r].d_in, b[r].d_out, N,
							     KEEL_F32, KEEL_SUM, b[r].stage,
							     b[r].stage_bytes, &ops[r]),
				 0);
	}
	for (int i = 0; i < 50 && ops[2]->dev.ap_head == ops[2]->dev.ap_tail; i++)
		cluster_round(&c);
	assert_true(ops[2]->dev.ap_head != ops[2]->dev.ap_tail); /* its device is busy */
	c.paused[2] = true;
	for (uint32_t i = 0; i < pause_rounds; i++)
		cluster_round(&c);
	c.paused[2] = false;
	assert_int_equal(cluster_wait_ops_info(&c, ops, rc, info, 400000), 0);
	uint32_t members = excluded ? 2 : 3;
	static float ref[N];
	keel_check_reference(ref, 0, N, members, KEEL_F32, KEEL_SUM);
	for (uint32_t r = 0; r < members; r++) {
		assert_int_equal(rc[r], 0);
		assert_int_equal(info[r].member_count, members);
		assert_int_equal(keel_check_wrong(b[r].d_out_w, ref, 0, N, KEEL_F32), 0);
	}
	if (excluded)
		assert_int_equal(rc[2], KEEL_EEXCLUDED);
	devices_drained(&c);
	for (uint32_t r = 0; r < 3; r++)
		bufs_fini(&b[r], r);
	cluster_with_devices_fini(&c);
	g_algo = KEEL_ALGO_AUTO;
	g_chunk = 0;
}

static void test_device_rank_paused_mid_pipeline(void **state)
{
	(void)state;
	pause_run(100, false);	/* 1 ms at 1 ms heartbeats: below miss_limit x heartbeat */
	pause_run(20000, true); /* 200 ms: past the detector and the view change */
}

/* Rank 0's device fails one piece of work: rank 0's call says KEEL_EDEVICE (and its queue
 * drains); rank 1 ends too, with an error, within the operation's bound. */
static void short_timeouts(struct keel_config *cfg)
{
	tweak(cfg);
	cfg->op_timeout_ns = 20000000;
	cfg->entry_timeout_ns = 20000000;
	cfg->soft_retries = 1;
}

static void test_device_failure_is_reported(void **state)
{
	(void)state;
	keel_device_cpu_config_default(&g_devcfg);
	g_devcfg.fail_at = 3;
	g_chunk = KEEL_DEVICE_CHUNK_MIN;
	devices_init(2);
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, short_timeouts), 0);
	struct rank_bufs b[2];
	struct keel_op *ops[CLUSTER_MAX];
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < 2; r++) {
		bufs_init(&b[r], r, 40000, KEEL_F32, KEEL_SUM, false);
		assert_int_equal(keel_allreduce_device_start(c.node[r], b[r].d_in, b[r].d_out,
							     40000, KEEL_F32, KEEL_SUM, b[r].stage,
							     b[r].stage_bytes, &ops[r]),
				 0);
	}
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 2000000), 0);
	assert_int_equal(rc[0], KEEL_EDEVICE);
	assert_true(rc[1] != 0);
	struct keel_device_cpu_stats st;
	keel_device_cpu_stats(&g_dev[0], &st);
	assert_int_equal(st.failed, 1);
	for (uint32_t r = 0; r < 2; r++)
		bufs_fini(&b[r], r);
	cluster_fini(&c);
	devices_fini(2);
	g_chunk = 0;
}

/* Every documented argument error; a stage the device does not know fails as a device
 * error; a node without a device refuses device buffers. */
static void test_device_bad_arguments(void **state)
{
	(void)state;
	keel_device_cpu_config_default(&g_devcfg);
	struct cluster c;
	assert_int_equal(cluster_with_devices(&c, 2, NULL), 0);
	struct keel_node *n = c.node[0];
	struct keel_op *op;
	static float d_in[64], d_out[64], stage[128], unregistered[128];
	size_t need = keel_allreduce_device_stage_bytes(64, KEEL_F32);
	assert_int_equal(need, 2 * 64 * sizeof(float));
	assert_int_equal(keel_allreduce_device_stage_bytes(0, KEEL_F32), 0);
	assert_int_equal(keel_allreduce_device_stage_bytes(SIZE_MAX / 2, KEEL_F32), 0);
	assert_int_equal(keel_allreduce_device_stage_bytes(4, KEEL_DTYPE_COUNT), 0);
	assert_int_equal(g_dev[0].ops->host_register(g_dev[0].state, stage, sizeof(stage)), 0);
	assert_int_equal(g_dev[0].ops->host_register(g_dev[0].state, stage, sizeof(stage)),
			 -EINVAL); /* twice */
	assert_int_equal(
	    keel_allreduce_device_start(n, d_in, d_out, 64, KEEL_F32, KEEL_SUM, NULL, need, &op),
	    -EINVAL);
	assert_int_equal(keel_allreduce_device_start(n, d_in, d_out, 64, KEEL_F32, KEEL_SUM, stage,
						     need - 1, &op),
			 -EINVAL);
	assert_int_equal(
	    keel_allreduce_device_start(n, d_in, d_out, 64, KEEL_F32, KEEL_SUM, d_out, need, &op),
	    -EINVAL); /* stage overlaps recv */
	assert_int_equal(keel_allreduce_device_start(n, d_in, d_in + 1, 64, KEEL_F32, KEEL_SUM,
						     stage, need, &op),
			 -EINVAL); /* send and recv overlap */
	assert_int_equal(keel_allreduce_device_start(n, d_in, d_out, 64, KEEL_F32, KEEL_SUM,
						     (uint8_t *)stage + 2, need, &op),
			 -EINVAL); /* a stage not aligned to the element */
	assert_int_equal(keel_allreduce_device_start(n, (uint8_t *)d_in + 1, d_out, 63, KEEL_F32,
						     KEEL_SUM, stage, need, &op),
			 -EINVAL); /* misaligned device input */
	assert_int_equal(keel_allreduce_device_start(n, d_in, d_out, 64, KEEL_F32, KEEL_REDOP_COUNT,
						     stage, need, &op),
			 -EINVAL);
	assert_int_equal(keel_allreduce_device(n, d_in, d_out, 64, KEEL_F32, KEEL_SUM, stage,
					       need), /* no waiter configured */
			 -EINVAL);
	/* A stage never registered: the device refuses the first copy; the call says so. */
	assert_int_equal(keel_allreduce_device_start(n, d_in, d_out, 64, KEEL_F32, KEEL_SUM,
						     unregistered, need, &op),
			 0);
	int rc = -EINPROGRESS;
	for (int i = 0; i < 100 && rc == -EINPROGRESS; i++) {
		cluster_round(&c);
		rc = keel_op_test(n, op);
	}
	assert_int_equal(rc, KEEL_EDEVICE);
	assert_int_equal(g_dev[0].ops->host_unregister(g_dev[0].state, stage), 0);
	assert_int_equal(g_dev[0].ops->host_unregister(g_dev[0].state, stage), -EINVAL);
	cluster_with_devices_fini(&c);
	/* No device in the config. */
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, NULL), 0);
	assert_int_equal(keel_allreduce_device_start(c.node[0], d_in, d_out, 64, KEEL_F32, KEEL_SUM,
						     stage, need, &op),
			 -EINVAL);
	struct keel_config bad = c.cfg[0];
	bad.device_chunk_bytes = KEEL_DEVICE_CHUNK_MIN - 8;
	assert_int_equal(keel_storage_size(&bad), 0);
	bad.device_chunk_bytes = KEEL_DEVICE_CHUNK_MIN + 4;
	assert_int_equal(keel_storage_size(&bad), 0);
	cluster_fini(&c);
}

/* The stand-in itself: work takes effect only when test() says it finished; late and out of
 * order; a full queue refuses; stale tickets and wrong sides are refused. */
static void test_device_stand_in_contract(void **state)
{
	(void)state;
	struct keel_device_cpu_config dc;
	keel_device_cpu_config_default(&dc);
	dc.inflight_max = 2;
	dc.delay_tests = 3;
	dc.jitter_tests = 0;
	assert_int_equal(keel_device_cpu_storage_size(NULL), 0);
	struct keel_device_cpu_config bad = dc;
	bad.inflight_max = 0;
	assert_int_equal(keel_device_cpu_storage_size(&bad), 0);
	size_t sz = keel_device_cpu_storage_size(&dc);
	void *mem = calloc(1, sz);
	struct keel_device dev;
	assert_int_equal(keel_device_cpu_init(&dev, mem, sz - 1, &dc), -ENOSPC);
	assert_int_equal(keel_device_cpu_init(&dev, mem, sz, &bad), -EINVAL);
	assert_int_equal(keel_device_cpu_init(&dev, mem, sz, &dc), 0);
	static int32_t dmem[16], host[32], other[16];
	assert_int_equal(dev.ops->host_register(dev.state, host, sizeof(host)), 0);
	for (int i = 0; i < 16; i++)
		dmem[i] = i + 1;
	uint32_t t1, t2, t3;
	/* D2H must write the stage and read device memory */
	assert_int_equal(dev.ops->copy(dev.state, other, dmem, 64, KEEL_COPY_D2H, &t1), -EINVAL);
	assert_int_equal(dev.ops->copy(dev.state, host, host + 16, 64, KEEL_COPY_D2H, &t1),
			 -EINVAL);
	assert_int_equal(dev.ops->copy(dev.state, host, dmem, 64, KEEL_COPY_D2H, &t1), 0);
	struct keel_device_reduce r = {.dst = dmem,
				       .a = dmem,
				       .b = host + 16,
				       .mirror = host + 16,
				       .count = 16,
				       .dtype = KEEL_I32,
				       .op = KEEL_SUM};
	for (int i = 0; i < 16; i++)
		host[16 + i] = 100;
	assert_int_equal(dev.ops->reduce(dev.state, &r, &t2), 0);
	assert_int_equal(dev.ops->reduce(dev.state, &r, &t3), -EAGAIN); /* 2 queued */
	assert_int_equal(host[0], 0);					/* not finished */
	assert_int_equal(dev.ops->test(dev.state, t2), -EINPROGRESS);
	assert_int_equal(dev.ops->test(dev.state, t2), -EINPROGRESS);
	assert_int_equal(dmem[0], 1);
	assert_int_equal(dev.ops->test(dev.state, t2), 0); /* before the older copy */
	assert_int_equal(dmem[0], 101);
	assert_int_equal(host[16], 101);			 /* mirrored */
	assert_int_equal(dev.ops->test(dev.state, t2), -EINVAL); /* released */
	assert_int_equal(dev.ops->test(dev.state, t1), 0);
	assert_int_equal(host[0],
			 101); /* copies what the device held when it ran: the stream
				  order is the caller's business (keel never queues both) */
	struct keel_device_cpu_stats st;
	keel_device_cpu_stats(&dev, &st);
	assert_int_equal(st.finished_out_of_order, 1);
	assert_int_equal(st.refused_full, 1);
	assert_int_equal(st.used, 0);
	dev.ops->fini(dev.state);
	free(mem);
}

/* Guarded device memory: the CPU faults on it, the stand-in works through the second
 * mapping; every documented error of keel_device_cpu_guard and _unguard. */
static void test_device_stand_in_guards(void **state)
{
	(void)state;
	struct keel_device_cpu_config dc;
	keel_device_cpu_config_default(&dc);
	dc.jitter_tests = 0;
	size_t sz = keel_device_cpu_storage_size(&dc);
	void *mem = calloc(1, sz);
	struct keel_device dev;
	assert_int_equal(keel_device_cpu_init(&dev, mem, sz, &dc), 0);
	struct guarded_mem g;
	assert_int_equal(guarded_mem_map(&g, &dev, 100), 0);
	assert_true(g.bytes >= 100);
	/* the host faults on the view, as on cudaMalloc memory */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL); /* not cmocka's handler: the child must die of it */
		volatile uint8_t x = ((volatile const uint8_t *)g.view)[0];
		(void)x;
		_exit(0);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
	/* the device's copies reach it: D2H copies what the working mapping holds */
	static int32_t host[64], other[64];
	assert_int_equal(dev.ops->host_register(dev.state, host, sizeof(host)), 0);
	for (int i = 0; i < 16; i++)
		((int32_t *)(void *)g.work)[i] = 7 * i;
	uint32_t t;
	assert_int_equal(dev.ops->copy(dev.state, host, g.view, 64, KEEL_COPY_D2H, &t), 0);
	assert_int_equal(keel_device_cpu_unguard(&dev, g.view), -EBUSY); /* queued work reads it */
	while (dev.ops->test(dev.state, t) == -EINPROGRESS)
		;
	for (int i = 0; i < 16; i++)
		assert_int_equal(host[i], 7 * i);
	/* a device range that leaves the view, a stage over it */
	assert_int_equal(
	    dev.ops->copy(dev.state, host, g.view + g.bytes - 8, 16, KEEL_COPY_D2H, &t), -EINVAL);
	assert_int_equal(dev.ops->host_register(dev.state, g.view, 64), -EINVAL);
	/* guard's own errors */
	assert_int_equal(keel_device_cpu_guard(NULL, other, host, 64), -EINVAL);
	static const struct keel_device_ops not_cpu_ops = {.name = "not-cpu"};
	struct keel_device not_cpu = {.ops = &not_cpu_ops, .state = dev.state};
	assert_int_equal(keel_device_cpu_guard(&not_cpu, other, host, 64), -EINVAL);
	assert_int_equal(keel_device_cpu_unguard(&not_cpu, g.view), -EINVAL);
	assert_int_equal(keel_device_cpu_guard(&dev, NULL, host, 64), -EINVAL);
	assert_int_equal(keel_device_cpu_guard(&dev, other, NULL, 64), -EINVAL);
	assert_int_equal(keel_device_cpu_guard(&dev, other, other, 64), -EINVAL);
	assert_int_equal(keel_device_cpu_guard(&dev, other, host, 0), -EINVAL);
	assert_int_equal(keel_device_cpu_guard(&dev, g.view + 8, other, 64), -EINVAL);
	assert_int_equal(keel_device_cpu_guard(&dev, host + 8, other, 64), -EINVAL); /* a stage */
	uint8_t *views = calloc(KEEL_DEVICE_CPU_GUARDS_MAX, 64);
	for (uint32_t i = 1; i < KEEL_DEVICE_CPU_GUARDS_MAX; i++)
		assert_int_equal(keel_device_cpu_guard(&dev, views + 64 * i, other, 64), 0);
	assert_int_equal(keel_device_cpu_guard(&dev, views, other, 64), -ENOSPC);
	for (uint32_t i = 1; i < KEEL_DEVICE_CPU_GUARDS_MAX; i++)
		assert_int_equal(keel_device_cpu_unguard(&dev, views + 64 * i), 0);
	assert_int_equal(keel_device_cpu_unguard(&dev, views + 64), -ENOENT);
	assert_int_equal(keel_device_cpu_unguard(&dev, NULL), -EINVAL);
	assert_int_equal(guarded_mem_unmap(&g), 0);
	assert_int_equal(dev.ops->host_unregister(dev.state, host), 0);
	free(views);
	dev.ops->fini(dev.state);
	free(mem);
}

/* Ranks that called alike but for the buffers: ranks 0 and 1 on host buffers report a small
 * result early (eager_result_bytes), rank 2 runs the same call on device buffers and never
 * gets rank 0's last datagram (a one-way cut); rank 0 dies. The view that drops it carries the
 * result, which a device call cannot take: rank 2's call fails with KEEL_EVIEWCHANGED, as a
 * restart that lost its input would, rank 1 keeps the result it reported, and the two go on
 * together with the next collective. */
static void test_device_call_cannot_take_a_result_the_view_brings(void **state)
{
	(void)state;
	struct cluster c;
	enum { N = 7 };
	g_algo = KEEL_ALGO_RD;
	assert_int_equal(cluster_with_devices(&c, 3, "loss=0"), 0);
	g_algo = KEEL_ALGO_AUTO;
	for (int i = 0; i < 5; i++)
		cluster_round(&c);
	assert_int_equal(keel_chaos_cut_send(c.chaos[0], 2, true), 0);
	float in[2][N], out[2][N];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX] = {0};
	for (uint32_t r = 0; r < 2; r++) {
		keel_check_fill(in[r], 0, N, r, KEEL_F32, KEEL_SUM);
		assert_int_equal(
		    keel_allreduce_start(c.node[r], in[r], out[r], N, KEEL_F32, KEEL_SUM, &ops[r]),
		    0);
	}
	struct rank_bufs b;
	bufs_init(&b, 2, N, KEEL_F32, KEEL_SUM, false);
	assert_int_equal(keel_allreduce_device_start(c.node[2], b.d_in, b.d_out, N, KEEL_F32,
						     KEEL_SUM, b.stage, b.stage_bytes, &ops[2]),
			 0);
	for (int round = 0; round < 60; round++)
		cluster_round(&c);
	assert_int_equal(keel_op_test(c.node[1], ops[1]), 0); /* reported early */
	assert_int_equal(keel_op_test(c.node[2], ops[2]), -EINPROGRESS);
	c.paused[0] = true;
	ops[0] = ops[1] = NULL;
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 200000), 0);
	assert_int_equal(rc[2], KEEL_EVIEWCHANGED);
	struct keel_counters k;
	keel_counters_get(c.node[2], &k);
	assert_int_equal(k.ops_adopted, 0);
	/* the survivors' next collective is the same one at both */
	int32_t next_in[CLUSTER_MAX] = {0, 10, 20}, next_out[CLUSTER_MAX] = {0};
	for (uint32_t r = 1; r < 3; r++)
		assert_int_equal(keel_allreduce_start(c.node[r], &next_in[r], &next_out[r], 1,
						      KEEL_I32, KEEL_SUM, &ops[r]),
				 0);
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 200000), 0);
	for (uint32_t r = 1; r < 3; r++) {
		assert_int_equal(rc[r], 0);
		assert_int_equal(next_out[r], 30);
	}
	bufs_fini(&b, 2);
	cluster_with_devices_fini(&c);
}

int main(void)
{
	g_seed = cluster_seed(7);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_device_stand_in_contract),
	    cmocka_unit_test(test_device_stand_in_guards),
	    cmocka_unit_test(test_device_bad_arguments),
	    cmocka_unit_test(test_device_ring_every_dtype_op_size),
	    cmocka_unit_test(test_device_rd_every_dtype_op_size),
	    cmocka_unit_test(test_device_hier_every_dtype_op_size),
	    cmocka_unit_test(test_device_backpressure_one_in_flight),
	    cmocka_unit_test(test_device_chaos),
	    cmocka_unit_test(test_device_rank_killed_mid_pipeline),
	    cmocka_unit_test(test_device_in_order),
	    cmocka_unit_test(test_device_rank_paused_mid_pipeline),
	    cmocka_unit_test(test_device_failure_is_reported),
	    cmocka_unit_test(test_device_call_cannot_take_a_result_the_view_brings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
