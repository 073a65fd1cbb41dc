/* The job tests/integ/attacks.sh attacks: under keel-run, every rank runs AllReduces (a
 * 256 KiB one, many datagrams, and a small one that also carries rank 0's "go on") until rank
 * 0 has run ATTACK_SECONDS, checking every element. Then each rank prints one line with what
 * it saw (ops, wrong elements, views, suspicions, every drop counter, resident memory at the
 * start and the end) and exits non-zero if a result was wrong, an operation failed, the view
 * changed or a peer was suspected. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel/boot.h"

#define BIG   65536u
#define SMALL 8u

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	if (f != NULL)
		fclose(f);
	return kb;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int reduce(struct keel_boot *b, float *buf, size_t count, enum keel_redop op)
{
	struct keel_op *h;
	struct keel_op_info info;
	uint32_t members[KEEL_WORLD_MAX];
	int rc = keel_allreduce_start(b->node, buf, buf, count, KEEL_F32, op, &h);
	if (rc == 0)
		rc = keel_boot_wait(b, h, &info, members, KEEL_WORLD_MAX);
	if (rc == 0 && info.member_count != b->launch.world_size)
		rc = KEEL_EVIEWCHANGED;
	return rc;
}

/* One round: the big sum, checked, then the small one (element 0: min of "go on"). */
static int round_trip(struct keel_boot *b, float *big, float *small, bool go_on, uint64_t *wrong,
		      bool *more)
{
	uint32_t r = b->launch.rank, world = b->launch.world_size;
	for (size_t i = 0; i < BIG; i++)
		big[i] = (float)(r + 1) * (float)(i % 13);
	int rc = reduce(b, big, BIG, KEEL_SUM);
	float ranks = (float)(world * (world + 1) / 2);
	for (size_t i = 0; rc == 0 && i < BIG; i++)
		*wrong += big[i] != ranks * (float)(i % 13);
	for (size_t i = 0; i < SMALL; i++)
		small[i] = i == 0 ? (go_on ? 1.0f : 0.0f) : (float)(r + i);
	if (rc == 0)
		rc = reduce(b, small, SMALL, KEEL_MIN);
	for (size_t i = 1; rc == 0 && i < SMALL; i++)
		*wrong += small[i] != (float)i;
	*more = rc == 0 && small[0] == 1.0f;
	return rc;
}

int main(void)
{
	const char *s = getenv("ATTACK_SECONDS");
	double seconds = s != NULL ? atof(s) : 5.0;
	struct keel_boot b;
	char err[512] = "";
	if (keel_boot_start(&b, NULL, NULL, err, sizeof(err)) != 0) {
		fprintf(stderr, "attack_target: %s\n", err);
		return 1;
	}
	static float big[BIG], small[SMALL];
	long rss_start = rss_kb();
	double t0 = now_s();
	uint64_t ops = 0, wrong = 0;
	bool more = true;
	int rc = 0;
	while (more && rc == 0) {
		bool go_on = b.launch.rank != 0 || now_s() - t0 < seconds;
		rc = round_trip(&b, big, small, go_on, &wrong, &more);
		ops += 2;
	}
	struct keel_counters k;
	keel_counters_get(b.node, &k);
	uint64_t other = k.drop_truncated + k.drop_magic + k.drop_version + k.drop_type +
			 k.drop_length + k.drop_job + k.drop_source + k.drop_destination;
	printf("rank %u: ops %llu wrong %llu %s views %llu suspicions %llu auth %s drop_auth %llu "
	       "drop_replay %llu drop_crc %llu drop_epoch %llu drop_view %llu drop_other %llu "
	       "rx %llu rss_kb %ld %ld\n",
	       b.launch.rank, (unsigned long long)ops, (unsigned long long)wrong,
	       rc == 0 ? "ok" : keel_strerror(rc), (unsigned long long)k.view_changes,
	       (unsigned long long)k.suspicions, b.cfg.auth ? "on" : "off",
	       (unsigned long long)k.drop_auth, (unsigned long long)k.drop_replay,
	       (unsigned long long)k.drop_crc, (unsigned long long)k.drop_epoch,
	       (unsigned long long)k.drop_view, (unsigned long long)other,
	       (unsigned long long)k.rx_datagrams, rss_start, rss_kb());
	fflush(stdout);
	keel_boot_stop(&b, 1000000000ull);
	return rc != 0 || wrong != 0 || k.view_changes != 0 || k.suspicions != 0;
}
