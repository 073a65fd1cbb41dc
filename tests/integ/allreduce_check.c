/* Multi-process AllReduce check, run under keel-run: every dtype and op, sizes at the
 * fragment and ring-chunk boundaries, both algorithms, in place and out of place; every
 * element compared bit for bit with the reference. Prints one line per failure, a summary
 * from rank 0, and exits non-zero on any wrong element or error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot.h"
#include "refcheck.h"

static void algo_tweak(struct keel_config *cfg, void *ctx)
{
	cfg->algo = *(enum keel_algo *)ctx;
}

/* Check work in pieces, polling between them so peers keep hearing from this rank. */
#define PIECE 16384u

static int run(struct keel_boot *b, size_t count, enum keel_dtype dt, enum keel_redop op,
	       bool in_place, uint8_t *in, uint8_t *out, uint8_t *ref, uint64_t *checked)
{
	uint32_t world = b->launch.world_size;
	for (size_t i = 0; i < count; i += PIECE) {
		keel_check_fill(in, i, i + PIECE < count ? i + PIECE : count, b->launch.rank, dt,
				op);
		if (keel_boot_poll(b) != 0)
			return 1;
	}
	struct keel_op *h;
	struct keel_op_info info;
	uint32_t members[KEEL_WORLD_MAX];
	int rc = keel_allreduce_start(b->node, in, in_place ? in : out, count, dt, op, &h);
	if (rc == 0)
		rc = keel_boot_wait(b, h, &info, members, KEEL_WORLD_MAX);
	if (rc == 0 && info.member_count != world)
		fprintf(stderr, "rank %u: a view change during the check: %u members, epoch %u\n",
			b->launch.rank, info.member_count, info.epoch);
	if (rc != 0) {
		struct keel_counters k;
		keel_counters_get(b->node, &k);
		fprintf(stderr,
			"rank %u: allreduce %zu %s %s: %s (suspicions %llu, late polls %llu, "
			"retransmits %llu, tx refused %llu)\n",
			b->launch.rank, count, keel_dtype_name(dt), keel_redop_name(op),
			keel_strerror(rc), (unsigned long long)k.suspicions,
			(unsigned long long)k.local_pauses, (unsigned long long)k.retransmits,
			(unsigned long long)k.tx_blocked);
		return 1;
	}
	size_t wrong = 0;
	for (size_t i = 0; i < count; i += PIECE) {
		size_t end = i + PIECE < count ? i + PIECE : count;
		keel_check_reference_members(ref, i, end, members, info.member_count, dt, op);
		wrong += keel_check_wrong(in_place ? in : out, ref, i, end, dt);
		if (keel_boot_poll(b) != 0)
			return 1;
	}
	*checked += count;
	if (wrong != 0) {
		fprintf(stderr, "rank %u: %zu of %zu wrong: %s %s %s\n", b->launch.rank, wrong,
			count, keel_dtype_name(dt), keel_redop_name(op),
			in_place ? "in place" : "out of place");
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	enum keel_algo algo = KEEL_ALGO_AUTO;
	if (argc > 1)
		algo = strcmp(argv[1], "ring") == 0 ? KEEL_ALGO_RING
		       : strcmp(argv[1], "rd") == 0 ? KEEL_ALGO_RD
						    : KEEL_ALGO_AUTO;
	struct keel_boot b;
	char err[512] = "";
	int rc = keel_boot_start(&b, algo_tweak, &algo, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "allreduce_check: %s\n", err);
		return 1;
	}
	size_t cap = 1u << 21;
	uint8_t *in = malloc(cap * 8), *out = malloc(cap * 8), *ref = malloc(cap * 8);
	uint32_t world = b.launch.world_size;
	uint64_t checked = 0;
	int failures = 0, ops = 0;
	for (int dt = 0; dt < KEEL_DTYPE_COUNT; dt++) {
		size_t frag = (b.cfg.mtu - 56) / keel_dtype_size(dt);
		size_t sizes[KEEL_CHECK_SIZES];
		keel_check_sizes(sizes, world, frag, 100003);
		for (int op = 0; op < KEEL_REDOP_COUNT; op++)
			for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++, ops++)
				failures += run(&b, sizes[s], dt, op, (s + op) % 2 == 0, in, out,
						ref, &checked);
	}
	/* one large ring-sized message */
	failures += run(&b, cap, KEEL_F32, KEEL_SUM, false, in, out, ref, &checked);
	ops++;
	double total = failures;
	rc = keel_allreduce(b.node, &total, &total, 1, KEEL_F64, KEEL_SUM);
	if (rc != 0 || total != 0)
		failures = failures ? failures : 1;
	if (b.launch.rank == 0) {
		struct keel_counters k;
		keel_counters_get(b.node, &k);
		printf(
		    "allreduce_check: %u ranks, algo %s: %d ops, %llu elements checked per rank, "
		    "%s; retransmits %llu, dup drops %llu\n",
		    world, argc > 1 ? argv[1] : "auto", ops, (unsigned long long)checked,
		    failures ? "FAILED" : "all exact", (unsigned long long)k.retransmits,
		    (unsigned long long)k.drop_duplicate);
	}
	keel_boot_stop(&b, 500000000ull);
	free(in);
	free(out);
	free(ref);
	return failures ? 1 : 0;
}
