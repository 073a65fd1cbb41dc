/* gpu-pipeline: the device AllReduce's pipeline on a real GPU, with the guarantees the unit
 * tests check over the CPU stand-in (tests/unit/test_device.c). 3 keel nodes in this process
 * on loopback UDP and a manual clock, each with its own CUDA device (its own stream) on GPU 0:
 * one process, one context, so no MPS is needed. Ring and recursive doubling, in and out of
 * place, several dtypes and ops, every element checked; then rank 2 stops mid-pipeline (a
 * killed process: never polled again, its queued device work left behind), and the survivors
 * must restart from the staged input and end with the exact reduction over the two of them.
 * Exits 77 when no GPU is visible; 1 on any failure. tools/gpu-check.sh runs it. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_int.h"
#include "keel/device_cuda.h"
#include "refcheck.h"

#define WORLD 3u

static struct keel_device g_dev[WORLD];
static void *g_dev_mem[WORLD];
static enum keel_algo g_algo;

/* Fresh devices for each run: a killed rank's device keeps the tickets of the work it had
 * queued (nobody tests them again); fini waits for that work. */
static int devices_init(void)
{
	struct keel_device_cuda_config cfg = {.ordinal = 0, .inflight_max = 64};
	size_t sz = keel_device_cuda_storage_size(&cfg);
	int rc = 0;
	for (uint32_t r = 0; r < WORLD && rc == 0; r++) {
		g_dev_mem[r] = calloc(1, sz);
		rc = g_dev_mem[r] == NULL
			 ? -ENOMEM
			 : keel_device_cuda_init(&g_dev[r], g_dev_mem[r], sz, &cfg);
	}
	return rc;
}

static void devices_fini(void)
{
	for (uint32_t r = 0; r < WORLD; r++) {
		if (g_dev[r].ops != NULL)
			g_dev[r].ops->fini(g_dev[r].state);
		free(g_dev_mem[r]);
		g_dev_mem[r] = NULL;
		g_dev[r] = (struct keel_device){0};
	}
}

static void tweak(struct keel_config *cfg)
{
	cfg->algo = g_algo;
	cfg->op_timeout_ns = 5000000000ull;
	cfg->device = &g_dev[cfg->rank];
	cfg->device_chunk_bytes = 64u << 10; /* many chunks in flight at these sizes */
}

/* One rank's device buffers (input, output: the same in place) and its registered stage. */
struct bufs {
	uint8_t *d_in, *d_out, *stage, *host;
	size_t bytes, stage_bytes;
};

static int bufs_init(struct bufs *b, uint32_t r, size_t count, enum keel_dtype dt,
		     enum keel_redop op, bool in_place)
{
	memset(b, 0, sizeof(*b));
	b->bytes = count * keel_dtype_size(dt);
	b->stage_bytes = keel_allreduce_device_stage_bytes(count, dt);
	b->stage = aligned_alloc(4096, (b->stage_bytes + 4095) & ~(size_t)4095);
	b->host = malloc(b->bytes);
	void *in = NULL, *out = NULL;
	int rc = b->stage == NULL || b->host == NULL ? -ENOMEM : 0;
	if (rc == 0)
		rc = g_dev[r].ops->host_register(g_dev[r].state, b->stage, b->stage_bytes);
	if (rc == 0)
		rc = keel_device_cuda_alloc(&g_dev[r], &in, b->bytes);
	if (rc == 0 && !in_place)
		rc = keel_device_cuda_alloc(&g_dev[r], &out, b->bytes);
	b->d_in = in;
	b->d_out = in_place ? b->d_in : out;
	if (rc == 0) {
		keel_check_fill(b->host, 0, count, r, dt, op);
		rc = keel_device_cuda_copy_sync(&g_dev[r], b->d_in, b->host, b->bytes,
						KEEL_COPY_H2D);
	}
	return rc;
}

static void bufs_fini(struct bufs *b, uint32_t r)
{
	if (b->stage != NULL)
		(void)g_dev[r].ops->host_unregister(g_dev[r].state, b->stage);
	keel_device_cuda_free(&g_dev[r], b->d_in);
	if (b->d_out != b->d_in)
		keel_device_cuda_free(&g_dev[r], b->d_out);
	free(b->stage);
	free(b->host);
}

/* Elements of rank r's output that differ from the reduction over `members` ranks. */
static size_t wrong_of(struct bufs *b, uint32_t r, size_t count, enum keel_dtype dt,
		       enum keel_redop op, uint32_t members)
{
	uint8_t *ref = malloc(b->bytes + 8);
	size_t wrong = count;
	if (ref != NULL && keel_device_cuda_copy_sync(&g_dev[r], b->host, b->d_out, b->bytes,
						      KEEL_COPY_D2H) == 0) {
		keel_check_reference(ref, 0, count, members, dt, op);
		wrong = keel_check_wrong(b->host, ref, 0, count, dt);
	}
	free(ref);
	return wrong;
}

/* One AllReduce on 3 ranks; with `kill`, rank 2 stops once rank 0 has received data.
 * Returns the number of failures (printed). */
static int run(enum keel_algo algo, bool in_place, size_t count, enum keel_dtype dt,
	       enum keel_redop op, bool kill)
{
	g_algo = algo;
	struct cluster c;
	struct bufs b[WORLD];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	struct keel_op_info info[CLUSTER_MAX];
	int rc[CLUSTER_MAX] = {0};
	memset(b, 0, sizeof(b));
	int err = devices_init();
	if (err == 0)
		err = cluster_init(&c, WORLD, NULL, 1, tweak);
	for (int i = 0; err == 0 && i < 5; i++)
		cluster_round(&c);
	for (uint32_t r = 0; err == 0 && r < WORLD; r++) {
		err = bufs_init(&b[r], r, count, dt, op, in_place);
		if (err == 0)
			err =
			    keel_allreduce_device_start(c.node[r], b[r].d_in, b[r].d_out, count, dt,
							op, b[r].stage, b[r].stage_bytes, &ops[r]);
	}
	uint32_t members = WORLD;
	if (err == 0 && kill) {
		struct keel_counters ctr = {0};
		for (int i = 0; i < 400000 && ctr.data_delivered == 0; i++) {
			cluster_round(&c);
			keel_counters_get(c.node[0], &ctr);
		}
		if (keel_op_test(c.node[0], ops[0]) != -EINPROGRESS)
			err = -EALREADY; /* finished before the kill: nothing tested */
		c.paused[2] = true;
		ops[2] = NULL;
		members = WORLD - 1;
	}
	if (err == 0)
		err = cluster_wait_ops_info(&c, ops, rc, info, 2000000);
	int failed = err != 0;
	for (uint32_t r = 0; err == 0 && r < members; r++) {
		size_t wrong = wrong_of(&b[r], r, count, dt, op, members);
		bool ok = rc[r] == 0 && wrong == 0 && info[r].member_count == members &&
			  (!kill || info[r].restarts >= 1);
		failed += !ok;
		if (!ok)
			printf("FAIL pipeline rank %u: status %d, %zu wrong, %u members, %u "
			       "restarts\n",
			       r, rc[r], wrong, info[r].member_count, info[r].restarts);
	}
	printf("pipeline %s %s, %zu x %s %s%s: %s%s%s\n", algo == KEEL_ALGO_RING ? "ring" : "rd",
	       in_place ? "in place" : "out of place", count, keel_dtype_name(dt),
	       keel_redop_name(op), kill ? ", rank 2 killed mid-pipeline" : "",
	       failed ? "FAILED" : "exact", err != 0 ? ": " : "",
	       err != 0 ? keel_strerror(err) : "");
	for (uint32_t r = 0; r < WORLD; r++)
		if (!kill || r != 2) /* a killed rank's work is left queued: its buffers stay */
			bufs_fini(&b[r], r);
	cluster_fini(&c);
	devices_fini();
	return failed;
}

int main(void)
{
	int rc = devices_init();
	devices_fini();
	if (rc == -ENODEV) {
		printf("gpu-pipeline: no GPU visible (%s): skipped\n", keel_strerror(rc));
		return 77;
	}
	if (rc != 0) {
		printf("gpu-pipeline: CUDA device: %s\n", keel_strerror(rc));
		return 1;
	}
	int failed = 0;
	failed += run(KEEL_ALGO_RING, false, 300000, KEEL_F32, KEEL_SUM, false);
	failed += run(KEEL_ALGO_RING, true, 100001, KEEL_BF16, KEEL_AVG, false);
	failed += run(KEEL_ALGO_RD, false, 70001, KEEL_I64, KEEL_MAX, false);
	failed += run(KEEL_ALGO_RD, true, 300000, KEEL_F64, KEEL_SUM, false);
	failed += run(KEEL_ALGO_RING, false, 300000, KEEL_F32, KEEL_SUM, true);
	failed += run(KEEL_ALGO_RING, true, 300000, KEEL_F32, KEEL_SUM, true);
	failed += run(KEEL_ALGO_RD, true, 300000, KEEL_F32, KEEL_SUM, true);
	printf("gpu-pipeline: %s\n", failed ? "FAILED" : "PASSED");
	return failed ? 1 : 0;
}
