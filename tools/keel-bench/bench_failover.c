/* keel-bench failover: N ranks on this host (forked here, each a keel node on loopback UDP),
 * one of them SIGKILLed (or, with --pause, SIGSTOPped and later resumed) at a random moment,
 * again and again. Each rank writes the moments it
 * suspected a peer and installed a view into shared memory (from keel's callbacks, in
 * CLOCK_MONOTONIC, the clock its polls use); this process reads them against the moment it
 * sent the kill, then restarts the victim as a new incarnation (a paused victim: resumes it,
 * and it rejoins in the same life) and waits for the world to be whole again before the next
 * trial. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_failover.h"
#include "keel/boot.h"
#include "keel/transport_shm.h"

#define RANKS_MAX 64u

/* What one rank reports, written only by that rank. */
struct rank_report {
	volatile uint64_t suspect_ns[RANKS_MAX]; /* first suspicion of each peer (0: none) */
	volatile uint64_t view_ns;		 /* last view installed */
	volatile uint64_t view_mask;		 /* its members */
	volatile uint32_t view_epoch;
	volatile uint32_t member;
	volatile uint64_t suspicions, false_suspicions;
};

struct fo_opts {
	uint32_t ranks, trials;
	uint64_t interval_ns;
	uint64_t pause_ns; /* 0: kill */
	uint64_t seed;
	double gap_s_min, gap_s_max;
};

static struct rank_report *g_reports;

static void on_peer(void *ctx, uint32_t peer, enum keel_peer_state st, uint64_t now_ns)
{
	struct rank_report *r = ctx;
	if (st == KEEL_PEER_SUSPECTED && peer < RANKS_MAX && r->suspect_ns[peer] == 0)
		r->suspect_ns[peer] = now_ns;
}

static void on_view(void *ctx, const struct keel_view *v, const uint32_t *members, uint64_t now_ns)
{
	struct rank_report *r = ctx;
	uint64_t mask = 0;
	for (uint32_t i = 0; i < v->member_count; i++)
		mask |= 1ull << members[i];
	r->view_mask = mask;
	r->view_epoch = v->epoch;
	r->member = v->self_member;
	r->view_ns = now_ns;
}

static void tweak(struct keel_config *cfg, void *ctx)
{
	cfg->on_peer = on_peer;
	cfg->on_peer_ctx = ctx;
	cfg->on_view = on_view;
	cfg->on_view_ctx = ctx;
}

/* A rank: a keel node that polls until killed. */
static _Noreturn void rank_main(uint32_t rank, uint32_t incarnation)
{
	char v[32];
	snprintf(v, sizeof(v), "%u", rank);
	setenv("RANK", v, 1);
	snprintf(v, sizeof(v), "%u", incarnation);
	setenv("KEEL_INCARNATION", v, 1);
	if (incarnation > 1)
		setenv("KEEL_REJOIN", "1", 1);
	struct rank_report *rep = &g_reports[rank];
	memset((void *)rep, 0, sizeof(*rep));
	struct keel_boot b;
	char err[512] = "";
	if (keel_boot_start(&b, tweak, rep, err, sizeof(err)) != 0) {
		fprintf(stderr, "keel-bench failover: rank %u: %s\n", rank, err);
		_exit(1);
	}
	struct keel_view kv;
	uint32_t members[RANKS_MAX];
	int n = keel_view_get(b.node, &kv, members, RANKS_MAX);
	if (n > 0)
		on_view(rep, &kv, members, keel_posix_now_ns());
	for (;;) {
		uint64_t now = keel_posix_now_ns(), next;
		int rc = keel_poll(b.node, now, &next);
		if (rc != 0 && rc != KEEL_ENOQUORUM)
			_exit(2);
		struct keel_counters k;
		keel_counters_get(b.node, &k);
		rep->suspicions = k.suspicions;
		rep->false_suspicions = k.false_suspicions;
		b.cfg.waiter.wait(b.cfg.waiter.ctx, next);
	}
}

static pid_t spawn(uint32_t rank, uint32_t incarnation)
{
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0UL, 0UL, 0UL);
		if (getppid() != parent)
			_exit(1);
		rank_main(rank, incarnation);
	}
	return pid;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
			      .tv_nsec = (long)(ns % 1000000000ull)};
	nanosleep(&ts, NULL);
}

/* Every live rank is a member of one view with all `want` ranks. */
static bool whole(const struct fo_opts *o, uint64_t want)
{
	uint32_t epoch = 0;
	for (uint32_t r = 0; r < o->ranks; r++) {
		const struct rank_report *p = &g_reports[r];
		if (!p->member || p->view_mask != want || (epoch != 0 && p->view_epoch != epoch))
			return false;
		epoch = p->view_epoch;
	}
	return true;
}

static bool wait_until_whole(const struct fo_opts *o, uint64_t timeout_ns)
{
	uint64_t want = (o->ranks == 64 ? ~0ull : (1ull << o->ranks) - 1);
	uint64_t end = keel_posix_now_ns() + timeout_ns;
	while (keel_posix_now_ns() < end) {
		if (whole(o, want))
			return true;
		sleep_ns(1000000);
	}
	return false;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void summary(const char *what, uint64_t *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	printf("# %-40s p50 %8.3f ms   p99 %8.3f ms   max %8.3f ms   (%u trials)\n", what,
	       v[n / 2] / 1e6, v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1e6, v[n - 1] / 1e6,
	       n);
}

struct trial {
	uint64_t kill_ns, first_suspect, all_suspect, all_installed;
};

/* Kill (or stop) `victim`, wait for every survivor to suspect it and install a view without
 * it. */
static int one_trial(const struct fo_opts *o, pid_t *pids, uint32_t victim, struct trial *t)
{
	uint64_t survivors = ((1ull << o->ranks) - 1) & ~(1ull << victim);
	for (uint32_t r = 0; r < o->ranks; r++)
		for (uint32_t p = 0; p < RANKS_MAX; p++)
			g_reports[r].suspect_ns[p] = 0;
	uint64_t kill_ns = keel_posix_now_ns();
	*t = (struct trial){kill_ns, UINT64_MAX, 0, 0};
	if (o->pause_ns != 0) {
		kill(pids[victim], SIGSTOP);
	} else {
		kill(pids[victim], SIGKILL);
		waitpid(pids[victim], NULL, 0);
	}
	uint64_t end = kill_ns + 10000000000ull;
	for (;;) {
		bool done = true;
		for (uint32_t r = 0; r < o->ranks; r++) {
			const struct rank_report *p = &g_reports[r];
			if (r == victim)
				continue;
			bool installed =
			    p->view_mask == survivors && p->member && p->view_ns > kill_ns;
			/* a survivor that had not suspected it yet learns from the coordinator's
			 * view */
			uint64_t s = p->suspect_ns[victim] != 0 ? p->suspect_ns[victim]
				     : installed		? p->view_ns
								: 0;
			if (s == 0 || !installed) {
				done = false;
				continue;
			}
			t->first_suspect =
			    s - kill_ns < t->first_suspect ? s - kill_ns : t->first_suspect;
			t->all_suspect =
			    s - kill_ns > t->all_suspect ? s - kill_ns : t->all_suspect;
			uint64_t inst = p->view_ns - kill_ns;
			t->all_installed = inst > t->all_installed ? inst : t->all_installed;
		}
		if (done)
			return 0;
		if (keel_posix_now_ns() > end) {
			for (uint32_t r = 0; r < o->ranks; r++)
				fprintf(stderr,
					"keel-bench failover: rank %u: suspected victim %s, view "
					"epoch %u "
					"members %#llx%s\n",
					r, g_reports[r].suspect_ns[victim] ? "yes" : "no",
					g_reports[r].view_epoch,
					(unsigned long long)g_reports[r].view_mask,
					g_reports[r].member ? "" : " (not a member)");
			return -ETIMEDOUT;
		}
		sleep_ns(200000);
	}
}

static int parse(int argc, char **argv, struct fo_opts *o)
{
	static const struct option longs[] = {{"ranks", required_argument, 0, 'r'},
					      {"trials", required_argument, 0, 't'},
					      {"interval-us", required_argument, 0, 'i'},
					      {"pause-ms", required_argument, 0, 'p'},
					      {"seed", required_argument, 0, 's'},
					      {"help", no_argument, 0, 'h'},
					      {0, 0, 0, 0}};
	*o = (struct fo_opts){.ranks = 4,
			      .trials = 50,
			      .interval_ns = 250000,
			      .seed = 0,
			      .gap_s_min = 0.2,
			      .gap_s_max = 0.6};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "r:t:i:p:s:h", longs, NULL)) != -1) {
		unsigned long long v = optarg ? strtoull(optarg, NULL, 10) : 0;
		switch (c) {
		case 'r':
			if (v < 3 || v > RANKS_MAX)
				return fprintf(stderr, "--ranks: 3..%u\n", RANKS_MAX), -EINVAL;
			o->ranks = (uint32_t)v;
			break;
		case 't':
			if (v < 1 || v > 100000)
				return fprintf(stderr, "--trials: 1..100000\n"), -EINVAL;
			o->trials = (uint32_t)v;
			break;
		case 'i':
			if (v < 50 || v > 10000000)
				return fprintf(stderr, "--interval-us: 50..10000000\n"), -EINVAL;
			o->interval_ns = v * 1000;
			break;
		case 'p':
			if (v < 1 || v > 600000)
				return fprintf(stderr, "--pause-ms: 1..600000\n"), -EINVAL;
			o->pause_ns = v * 1000000;
			break;
		case 's':
			o->seed = v;
			break;
		case 'h':
			printf(
			    "usage: keel-bench failover [--ranks N] [--trials T] [--interval-us "
			    "US] [--pause-ms MS] [--seed S]\n"
			    "N ranks on loopback (default 4), heartbeat US (default 250), one rank "
			    "SIGKILLed per trial at a random moment and restarted; prints kill to "
			    "suspicion and kill to new view at every survivor. --pause-ms: SIGSTOP "
			    "the rank instead, SIGCONT it MS later, and time its readmission.\n");
			exit(0);
		default:
			return -EINVAL;
		}
	}
	return optind == argc ? 0 : -EINVAL;
}

/* Rank 0's UDP port; the others follow it. */
static uint16_t first_port(void)
{
	return (uint16_t)(20000 + ((uint32_t)getpid() * 131u) % 20000);
}

/* Fixed ports through KEEL_PEERS, so a restarted rank binds its old one again. */
static int setup_env(const struct fo_opts *o)
{
	char peers[RANKS_MAX * 24] = "", v[32];
	size_t off = 0;
	uint16_t base = first_port();
	for (uint32_t r = 0; r < o->ranks; r++)
		off += (size_t)snprintf(peers + off, sizeof(peers) - off, "%s127.0.0.1:%u",
					r ? "," : "", base + r);
	setenv("KEEL_PEERS", peers, 1);
	snprintf(v, sizeof(v), "%u", o->ranks);
	setenv("WORLD_SIZE", v, 1);
	setenv("LOCAL_WORLD_SIZE", v, 1);
	snprintf(v, sizeof(v), "%" PRIu64, o->interval_ns / 1000);
	setenv("KEEL_HEARTBEAT_US", v, 0);
	snprintf(v, sizeof(v), "%u", (unsigned)getpid());
	setenv("KEEL_JOB_ID", v, 1);
	return 0;
}

int keel_bench_failover(int argc, char **argv)
{
	struct fo_opts o;
	if (parse(argc, argv, &o) != 0) {
		fprintf(stderr, "keel-bench failover: bad arguments (see --help)\n");
		return 2;
	}
	if (o.seed == 0)
		o.seed = (uint64_t)time(NULL);
	uint64_t miss_limit = KEEL_MISS_LIMIT_DEFAULT;
	char err[256];
	if (keel_env_uint("KEEL_MISS_LIMIT", &miss_limit, err, sizeof(err)) < 0) {
		fprintf(stderr, "keel-bench failover: %s\n", err);
		return 2;
	}
	printf("# keel-bench failover: %u ranks, heartbeat %" PRIu64 " us, miss limit %" PRIu64
	       ", %u trials, %s, SEED=%" PRIu64 "\n",
	       o.ranks, o.interval_ns / 1000, miss_limit, o.trials,
	       o.pause_ns != 0 ? "victims paused (SIGSTOP) and resumed" : "victims killed", o.seed);
	setup_env(&o);
	g_reports = mmap(NULL, RANKS_MAX * sizeof(struct rank_report), PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (g_reports == MAP_FAILED)
		return 1;
	pid_t pids[RANKS_MAX];
	uint32_t inc[RANKS_MAX];
	for (uint32_t r = 0; r < o.ranks; r++) {
		inc[r] = 1;
		pids[r] = spawn(r, 1);
	}
	uint64_t *detect = calloc(o.trials, sizeof(uint64_t)), *first = calloc(o.trials, 8);
	uint64_t *install = calloc(o.trials, sizeof(uint64_t)), *back = calloc(o.trials, 8);
	uint64_t x = o.seed * 0x9E3779B97F4A7C15ull + 1;
	int status = 0;
	uint32_t done = 0;
	/* the first view forms after the start-up grace (join_timeout_ns) */
	if (!wait_until_whole(&o, 20000000000ull)) {
		fprintf(stderr, "keel-bench failover: the ranks did not form a view\n");
		status = 1;
	}
	/* steady state: past the start-up grace, in which nobody is suspected */
	sleep_ns(KEEL_JOIN_TIMEOUT_NS_DEFAULT + 200000000ull);
	printf("# %5s %6s %16s %16s %20s\n", "trial", "victim", "first suspicion", "all suspected",
	       "new view everywhere");
	for (uint32_t t = 0; t < o.trials && status == 0; t++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint32_t victim = (uint32_t)(x % o.ranks);
		double gap = o.gap_s_min +
			     (double)(x >> 40) / (double)(1ull << 24) * (o.gap_s_max - o.gap_s_min);
		sleep_ns((uint64_t)(gap * 1e9)); /* a random moment */
		struct trial tr;
		if (one_trial(&o, pids, victim, &tr) != 0) {
			fprintf(stderr,
				"keel-bench failover: trial %u: survivors did not converge\n", t);
			status = 1;
			break;
		}
		printf("  %5u %6u %13.3f ms %13.3f ms %17.3f ms\n", t, victim,
		       tr.first_suspect / 1e6, tr.all_suspect / 1e6, tr.all_installed / 1e6);
		fflush(stdout);
		first[done] = tr.first_suspect;
		detect[done] = tr.all_suspect;
		install[done] = tr.all_installed;
		uint64_t cont_ns = tr.kill_ns + o.pause_ns;
		if (o.pause_ns == 0) {
			pids[victim] = spawn(victim, ++inc[victim]);
		} else { /* it comes back in the same life, is told it was left out, rejoins */
			if (keel_posix_now_ns() < cont_ns)
				sleep_ns(cont_ns - keel_posix_now_ns());
			cont_ns = keel_posix_now_ns();
			kill(pids[victim], SIGCONT);
		}
		done++;
		bool whole_again = wait_until_whole(&o, 20000000000ull);
		back[done - 1] = keel_posix_now_ns() - cont_ns;
		if (!whole_again) {
			fprintf(stderr, "keel-bench failover: rank %u was not admitted again\n",
				victim);
			status = 1;
		}
	}
	if (done > 0) {
		bool p = o.pause_ns != 0;
		summary(p ? "stop -> first survivor suspects" : "kill -> first survivor suspects",
			first, done);
		summary(p ? "stop -> every survivor suspects" : "kill -> every survivor suspects",
			detect, done);
		summary(p ? "stop -> new view at every survivor"
			  : "kill -> new view at every survivor",
			install, done);
		if (o.pause_ns != 0)
			summary("resume -> readmitted, one view everywhere", back, done);
	}
	uint64_t fs = 0;
	for (uint32_t r = 0; r < o.ranks; r++)
		fs += g_reports[r].false_suspicions;
	printf("# false suspicions (among live ranks, current lives): %" PRIu64 " (by rank:", fs);
	for (uint32_t r = 0; r < o.ranks; r++)
		printf(" %" PRIu64, g_reports[r].false_suspicions);
	printf(")\n");
	for (uint32_t r = 0; r < o.ranks; r++) {
		kill(pids[r], SIGKILL);
		waitpid(pids[r], NULL, 0);
	}
	/* With KEEL_PEERS the ranks leave their host's shared-memory region for restarted lives
	 * (keel/boot.h): the job is over, remove it. */
	char name[KEEL_SHM_NAME_MAX];
	keel_boot_shm_name((uint32_t)getpid(), first_port(), 0, name, sizeof(name));
	int rc = keel_shm_unlink(name);
	(void)rc; /* -ENOENT with KEEL_TRANSPORT=udp */
	free(detect);
	free(first);
	free(install);
	free(back);
	return status;
}
