/* keel-bench failover: N ranks on this host (forked here, each a keel node on loopback UDP),
 * one of them SIGKILLed (or, with --pause, SIGSTOPped and later resumed) at a random moment,
 * again and again. Each rank writes the moments it
 * suspected a peer and installed a view into shared memory (from keel's callbacks, in
 * CLOCK_MONOTONIC, the clock its polls use); this process reads them against the moment it
 * sent the kill, then restarts the victim as a new incarnation (a paused victim: resumes it,
 * and it rejoins in the same life) and waits for the world to be whole again before the next
 * trial. */
#include <errno.h>
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
#include "cli.h"
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

static void fo_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: keel-bench failover [--ranks N] [--trials T] [--interval-us US]\n"
	    "                           [--pause-ms MS] [--seed S]\n"
	    "N ranks on loopback, one rank SIGKILLed per trial at a random moment and\n"
	    "restarted; prints kill to suspicion and kill to new view at every survivor.\n"
	    "  -r, --ranks N          ranks, 3..%u (default 4)\n"
	    "  -t, --trials T         trials, 1..100000 (default 50)\n"
	    "  -i, --interval-us US   heartbeat interval, 50..10000000 us (default 250)\n"
	    "  -p, --pause-ms MS      SIGSTOP the rank instead, SIGCONT it MS later and time\n"
	    "                         its readmission, 1..600000\n"
	    "  -s, --seed S           the victims and moments, 0..2^64-1 (default 0: the time)\n",
	    RANKS_MAX);
	cli_exit_codes(f, NULL);
}

enum { FO_RANKS, FO_TRIALS, FO_INTERVAL_US, FO_PAUSE_MS, FO_SEED, FO_COUNT };

static const struct cli_opt fo_options[FO_COUNT] = {
    [FO_RANKS] = {"ranks", 'r', CLI_UINT, .min_u = 3, .max_u = RANKS_MAX},
    [FO_TRIALS] = {"trials", 't', CLI_UINT, .min_u = 1, .max_u = 100000},
    [FO_INTERVAL_US] = {"interval-us", 'i', CLI_UINT, .min_u = 50, .max_u = 10000000},
    [FO_PAUSE_MS] = {"pause-ms", 'p', CLI_UINT, .min_u = 1, .max_u = 600000},
    [FO_SEED] = {"seed", 's', CLI_UINT, .min_u = 0, .max_u = UINT64_MAX},
};

/* argv[0] is "failover"; a mistake exits 2 (cli.h). */
static void parse(int argc, char **argv, struct fo_opts *o)
{
	*o = (struct fo_opts){.ranks = 4,
			      .trials = 50,
			      .interval_ns = 250000,
			      .seed = 0,
			      .gap_s_min = 0.2,
			      .gap_s_max = 0.6};
	struct cli c = {.tool = "keel-bench",
			.opts = fo_options,
			.opt_count = FO_COUNT,
			.usage = fo_usage,
			.argc = argc,
			.argv = argv};
	int id;
	while ((id = cli_next(&c)) >= 0) {
		if (id == FO_RANKS)
			o->ranks = (uint32_t)c.u;
		else if (id == FO_TRIALS)
			o->trials = (uint32_t)c.u;
		else if (id == FO_INTERVAL_US)
			o->interval_ns = c.u * 1000;
		else if (id == FO_PAUSE_MS)
			o->pause_ns = c.u * 1000000;
		else
			o->seed = c.u;
	}
	if (c.next < argc)
		cli_usage_error("keel-bench",
				"failover: unexpected argument '%s' (see "
				"'keel-bench failover --help')",
				argv[c.next]);
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

/* The ranks and what the trials measured (ns from the kill or the resume, per trial). */
struct fo_run {
	pid_t pids[RANKS_MAX];
	uint32_t inc[RANKS_MAX];
	uint64_t *detect, *first, *install, *back;
	uint32_t done;
	uint64_t x; /* xorshift state: victims and gaps */
};

/* After trial t's victim went: restart it (a kill) or resume it (a pause) and wait until the
 * world is whole again. 0, or 1 when it was not admitted. */
static int bring_back(const struct fo_opts *o, struct fo_run *r, uint32_t victim, uint64_t kill_ns)
{
	uint64_t cont_ns = kill_ns + o->pause_ns;
	if (o->pause_ns == 0) {
		r->pids[victim] = spawn(victim, ++r->inc[victim]);
	} else { /* it comes back in the same life, is told it was left out, rejoins */
		if (keel_posix_now_ns() < cont_ns)
			sleep_ns(cont_ns - keel_posix_now_ns());
		cont_ns = keel_posix_now_ns();
		kill(r->pids[victim], SIGCONT);
	}
	r->done++;
	bool whole_again = wait_until_whole(o, 20000000000ull);
	r->back[r->done - 1] = keel_posix_now_ns() - cont_ns;
	if (whole_again)
		return 0;
	fprintf(stderr, "keel-bench failover: rank %u was not admitted again\n", victim);
	return 1;
}

static int run_trials(const struct fo_opts *o, struct fo_run *r)
{
	printf("# %5s %6s %16s %16s %20s\n", "trial", "victim", "first suspicion", "all suspected",
	       "new view everywhere");
	int status = 0;
	for (uint32_t t = 0; t < o->trials && status == 0; t++) {
		r->x ^= r->x << 13, r->x ^= r->x >> 7, r->x ^= r->x << 17;
		uint32_t victim = (uint32_t)(r->x % o->ranks);
		double gap = o->gap_s_min + (double)(r->x >> 40) / (double)(1ull << 24) *
						(o->gap_s_max - o->gap_s_min);
		sleep_ns((uint64_t)(gap * 1e9)); /* a random moment */
		struct trial tr;
		if (one_trial(o, r->pids, victim, &tr) != 0) {
			fprintf(stderr,
				"keel-bench failover: trial %u: survivors did not converge\n", t);
			return 1;
		}
		printf("  %5u %6u %13.3f ms %13.3f ms %17.3f ms\n", t, victim,
		       tr.first_suspect / 1e6, tr.all_suspect / 1e6, tr.all_installed / 1e6);
		fflush(stdout);
		r->first[r->done] = tr.first_suspect;
		r->detect[r->done] = tr.all_suspect;
		r->install[r->done] = tr.all_installed;
		status = bring_back(o, r, victim, tr.kill_ns);
	}
	return status;
}

static void fo_report(const struct fo_opts *o, struct fo_run *r)
{
	bool p = o->pause_ns != 0;
	if (r->done > 0) {
		summary(p ? "stop -> first survivor suspects" : "kill -> first survivor suspects",
			r->first, r->done);
		summary(p ? "stop -> every survivor suspects" : "kill -> every survivor suspects",
			r->detect, r->done);
		summary(p ? "stop -> new view at every survivor"
			  : "kill -> new view at every survivor",
			r->install, r->done);
		if (p)
			summary("resume -> readmitted, one view everywhere", r->back, r->done);
	}
	uint64_t fs = 0;
	for (uint32_t k = 0; k < o->ranks; k++)
		fs += g_reports[k].false_suspicions;
	printf("# false suspicions (among live ranks, current lives): %" PRIu64 " (by rank:", fs);
	for (uint32_t k = 0; k < o->ranks; k++)
		printf(" %" PRIu64, g_reports[k].false_suspicions);
	printf(")\n");
}

static void fo_cleanup(const struct fo_opts *o, struct fo_run *r)
{
	for (uint32_t k = 0; k < o->ranks; k++) {
		kill(r->pids[k], SIGKILL);
		waitpid(r->pids[k], NULL, 0);
	}
	/* With KEEL_PEERS the ranks leave their host's shared-memory region for restarted lives
	 * (keel/boot.h): the job is over, remove it. */
	char name[KEEL_SHM_NAME_MAX];
	keel_boot_shm_name((uint32_t)getpid(), first_port(), 0, name, sizeof(name));
	int rc = keel_shm_unlink(name);
	(void)rc; /* -ENOENT with KEEL_TRANSPORT=udp */
	free(r->detect);
	free(r->first);
	free(r->install);
	free(r->back);
}

int keel_bench_failover(int argc, char **argv)
{
	struct fo_opts o;
	static struct fo_run r;
	parse(argc, argv, &o);
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
	r.detect = calloc(o.trials, sizeof(uint64_t));
	r.first = calloc(o.trials, sizeof(uint64_t));
	r.install = calloc(o.trials, sizeof(uint64_t));
	r.back = calloc(o.trials, sizeof(uint64_t));
	if (g_reports == MAP_FAILED || !r.detect || !r.first || !r.install || !r.back)
		return CLI_EXIT_FAILURE;
	for (uint32_t k = 0; k < o.ranks; k++) {
		r.inc[k] = 1;
		r.pids[k] = spawn(k, 1);
	}
	r.x = o.seed * 0x9E3779B97F4A7C15ull + 1;
	int status = 0;
	/* the first view forms after the start-up grace (join_timeout_ns) */
	if (!wait_until_whole(&o, 20000000000ull)) {
		fprintf(stderr, "keel-bench failover: the ranks did not form a view\n");
		status = 1;
	}
	/* steady state: past the start-up grace, in which nobody is suspected */
	sleep_ns(KEEL_JOIN_TIMEOUT_NS_DEFAULT + 200000000ull);
	if (status == 0)
		status = run_trials(&o, &r);
	fo_report(&o, &r);
	fo_cleanup(&o, &r);
	return status;
}
