/* Multi-process AllReduce check, run under keel-run: every dtype and op, sizes at the
 * fragment and ring-chunk boundaries, both algorithms, in place and out of place; every
 * element compared bit for bit with the reference. Prints one line per failure, a summary
 * from rank 0, and exits non-zero on any wrong element or error.
 *   integ-allreduce_check [auto|ring|rd] [--large N]
 * By default each dtype and op also runs 100003 elements, and one f32 sum runs 2^21 elements
 * (a ring-sized message). --large N (1..2^21) puts N in place of both: the boundary sizes stay,
 * only the volume shrinks (the Soft-RoCE VM under TCG moves a few MB/s). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/boot.h"
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

#define LARGE_MAX (1u << 21)

static int usage(const char *why, const char *arg)
{
	fprintf(stderr,
		"allreduce_check: %s '%s'\n"
		"usage: integ-allreduce_check [auto|ring|rd] [--large N]  (N: 1..%u elements)\n",
		why, arg, LARGE_MAX);
	return 2;
}

int main(int argc, char **argv)
{
	enum keel_algo algo = KEEL_ALGO_AUTO;
	const char *algo_name = "auto";
	size_t large = 100003, cap = LARGE_MAX;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--large") == 0) {
			if (i + 1 == argc)
				return usage("a value must follow", "--large");
			char *end;
			errno = 0;
			unsigned long long n = strtoull(argv[++i], &end, 10);
			if (errno != 0 || end == argv[i] || *end != '\0' || argv[i][0] == '-' ||
			    n < 1 || n > LARGE_MAX)
				return usage("bad --large", argv[i]);
			large = cap = (size_t)n;
		} else if (strcmp(argv[i], "ring") == 0 || strcmp(argv[i], "rd") == 0 ||
			   strcmp(argv[i], "auto") == 0) {
			algo_name = argv[i];
			algo = argv[i][0] == 'r' ? argv[i][1] == 'i' ? KEEL_ALGO_RING : KEEL_ALGO_RD
						 : KEEL_ALGO_AUTO;
		} else {
			return usage("unknown argument", argv[i]);
		}
	}
	struct keel_boot b;
	char err[512] = "";
	int rc = keel_boot_start(&b, algo_tweak, &algo, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "allreduce_check: %s\n", err);
		return 1;
	}
	uint32_t world = b.launch.world_size;
	/* room for the large message and for world x fragment + 1 of any dtype */
	size_t bytes = cap * 8, frags = (size_t)world * b.cfg.mtu + 8;
	bytes = bytes > frags ? bytes : frags;
	uint8_t *in = malloc(bytes), *out = malloc(bytes), *ref = malloc(bytes);
	if (in == NULL || out == NULL || ref == NULL) {
		fprintf(stderr, "allreduce_check: out of memory for %zu-byte buffers\n", bytes);
		keel_boot_stop(&b, 0);
		return 1;
	}
	uint64_t checked = 0;
	int failures = 0, ops = 0;
	for (int dt = 0; dt < KEEL_DTYPE_COUNT; dt++) {
		/* a fragment: the datagram less keel's header (56 bytes) and MAC trailer */
		size_t overhead = 56 + (b.cfg.auth ? KEEL_AUTH_TRAILER_BYTES : 0);
		size_t frag = (b.cfg.mtu - overhead) / keel_dtype_size(dt);
		size_t sizes[KEEL_CHECK_SIZES];
		keel_check_sizes(sizes, world, frag, large);
		for (int op = 0; op < KEEL_REDOP_COUNT; op++)
			for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++, ops++)
				failures += run(&b, sizes[s], dt, op, (s + op) % 2 == 0, in, out,
						ref, &checked);
	}
	/* one large ring-sized message (--large: the same capped size) */
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
		    world, algo_name, ops, (unsigned long long)checked,
		    failures ? "FAILED" : "all exact", (unsigned long long)k.retransmits,
		    (unsigned long long)k.drop_duplicate);
	}
	keel_boot_stop(&b, 500000000ull);
	free(in);
	free(out);
	free(ref);
	return failures ? 1 : 0;
}
