/* A rank of the membership chaos test, run under keel-run --kill/--pause ... --restart:
 * AllReduce calls back to back while ranks die and come back, or stop and resume (then they
 * are excluded, told KEEL_EEXCLUDED, and rejoin). Every completed call is checked against
 * the reduction over the view it reports; every call's time is checked against
 * keel_op_bound_ns. The last element of each call is a vote to stop (1 once this rank is past
 * KEEL_TEST_END, a wall-clock second): all members see the same sum, so they stop after the
 * same call and report the same final view. Prints one summary line; exit 0 when clean. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel/boot.h"
#include "refcheck.h"

/* Elements per call: KEEL_TEST_COUNT, else 20 000 (the ring, above the 64 KiB switch); a small
 * count runs recursive doubling with results reported early (eager_result_bytes). The vote to
 * stop rides after them. */
static uint32_t g_count = 20000u;
#define COUNT g_count

struct stats {
	uint64_t calls, wrong, errors, over_bound, restarts, noquorum, excluded;
	uint64_t worst_ns;
};

static bool past_end(void)
{
	/* KEEL_TEST_END: a test-only harness variable, outside keel's env table
	 * (tests/integ/env_table.sh checks runtime/ dpdk/ verbs/ sim/ tools/ only) */
	const char *s = getenv("KEEL_TEST_END");
	return s != NULL && (uint64_t)time(NULL) >= strtoull(s, NULL, 10);
}

/* A restarted (or excluded) rank waits to be admitted (bounded); -ESHUTDOWN when the job
 * ended meanwhile (every other rank left, or nobody ever answered this process). */
static int wait_member(struct keel_boot *b, uint64_t limit_ns)
{
	int rc = keel_boot_wait_member(b, limit_ns);
	if (rc == KEEL_EENDED) {
		fprintf(stderr, "rank %u: %s\n", b->launch.rank, keel_strerror(rc));
		return -ESHUTDOWN;
	}
	return rc;
}

/* One call; returns 1 when the members voted to stop, 0 to go on, <0 on a hard error. */
static int one_call(struct keel_boot *b, float *in, float *out, float *ref, struct stats *st)
{
	uint32_t rank = b->launch.rank, members[KEEL_WORLD_MAX];
	in[COUNT] = past_end() ? 1.0f : 0.0f;
	struct keel_op *op;
	uint64_t t0 = keel_posix_now_ns();
	struct keel_op_info info;
	int rc = keel_allreduce_start(b->node, in, out, COUNT + 1, KEEL_F32, KEEL_SUM, &op);
	if (rc == 0)
		rc = keel_boot_wait(b, op, &info, members, KEEL_WORLD_MAX);
	else if (rc != KEEL_EEXCLUDED) /* left out between calls: said by the next start */
		return rc;
	uint64_t took = keel_posix_now_ns() - t0;
	st->calls++;
	st->worst_ns = took > st->worst_ns ? took : st->worst_ns;
	if (took > keel_op_bound_ns(&b->cfg))
		st->over_bound++;
	if (rc == KEEL_ENOQUORUM) {
		st->noquorum++;
		return wait_member(b, keel_op_bound_ns(&b->cfg)) == 0 ? 0 : -ETIMEDOUT;
	}
	if (rc == KEEL_EEXCLUDED) {
		/* Paused past the detector: the others went on. Every call here is the same, so
		 * rejoining needs no state: wait to be admitted, then carry on. */
		st->excluded++;
		return wait_member(b, keel_op_bound_ns(&b->cfg)) == 0 ? 0 : -ETIMEDOUT;
	}
	if (rc != 0) {
		st->errors++;
		fprintf(stderr, "rank %u: call %" PRIu64 ": %s\n", rank, st->calls,
			keel_strerror(rc));
		return 0;
	}
	st->restarts += info.restarts;
	keel_check_reference_members(ref, 0, COUNT, members, info.member_count, KEEL_F32, KEEL_SUM);
	size_t wrong = keel_check_wrong(out, ref, 0, COUNT, KEEL_F32);
	float vote = out[COUNT];
	if (wrong != 0 || vote < 0 || vote > (float)info.member_count) {
		st->wrong++;
		fprintf(stderr, "rank %u: epoch %u, %u members: %zu of %u wrong\n", rank,
			info.epoch, info.member_count, wrong, COUNT);
	}
	return vote > 0 ? 1 : 0;
}

int main(void)
{
	struct keel_boot b;
	char err[512] = "";
	int rc = keel_boot_start(&b, NULL, NULL, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "membership_check: %s\n", err);
		return 1;
	}
	uint32_t rank = b.launch.rank;
	const char *count_env = getenv("KEEL_TEST_COUNT"); /* test-only, as KEEL_TEST_END */
	if (count_env != NULL && strtoul(count_env, NULL, 10) > 0)
		g_count = (uint32_t)strtoul(count_env, NULL, 10);
	float *in = malloc((COUNT + 1) * sizeof(float)), *out = malloc((COUNT + 1) * sizeof(float));
	float *ref = malloc(COUNT * sizeof(float));
	keel_check_fill(in, 0, COUNT, rank, KEEL_F32, KEEL_SUM);
	struct stats st = {0};
	if (b.cfg.rejoin && wait_member(&b, 30000000000ull) != 0) {
		fprintf(stderr, "rank %u: never admitted\n", rank);
		return 1;
	}
	for (int i = 0; i < 100000; i++) {
		rc = one_call(&b, in, out, ref, &st);
		if (rc != 0)
			break;
	}
	struct keel_view v;
	uint32_t members[KEEL_WORLD_MAX];
	int count = keel_view_get(b.node, &v, members, KEEL_WORLD_MAX);
	struct keel_counters k;
	keel_counters_get(b.node, &k);
	char list[4096] = "";
	for (int m = 0, off = 0; m < count && off < (int)sizeof(list) - 8; m++)
		off += snprintf(list + off, sizeof(list) - (size_t)off, "%s%u", m ? "," : "",
				members[m]);
	printf("rank %u life %u: final view epoch %u members %s | calls %" PRIu64 " wrong %" PRIu64
	       " errors %" PRIu64 " over-bound %" PRIu64 " restarted %" PRIu64 " noquorum %" PRIu64
	       " excluded %" PRIu64 " worst %.1f ms (recovery bound %.1f ms) | views %" PRIu64
	       " suspicions %" PRIu64 " false %" PRIu64 " probes refuted %" PRIu64
	       " adopted %" PRIu64 "\n",
	       rank, b.cfg.incarnation, v.epoch, list, st.calls, st.wrong, st.errors, st.over_bound,
	       st.restarts, st.noquorum, st.excluded, st.worst_ns / 1e6,
	       keel_recovery_bound_ns(&b.cfg) / 1e6, k.view_changes, k.suspicions,
	       k.false_suspicions, k.probes_refuted, k.ops_adopted);
	fflush(stdout);
	keel_boot_stop(&b, 500000000ull);
	free(in);
	free(out);
	free(ref);
	bool clean = rc >= 0 && st.wrong == 0 && st.over_bound == 0;
	return clean ? 0 : 1;
}
