/* keel-plan: the partition planner and DAG scheduler without writing C. Reads a cluster (text
 * format or SimGrid platform) and a workload, prints the capacity-aware plan next to an even
 * split; --bench times the planner. Formats: tools/keel-plan/plan_parse.c and docs/keel-plan.md. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "keel/partition.h"
#include "keel/sched.h"
#include "plan_parse.h"

#define TOOL	 "keel-plan"
#define RUNS_MAX 64 /* --runs: the timings kept for the median */

enum item_mode { MODE_LPT, MODE_RDV, MODE_HASH, MODE_RANGE };

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: keel-plan (--cluster FILE | --cluster-xml PLATFORM.xml) [--define DEF ...]\n"
	    "                 [--workload FILE] [--dag FILE] [--mode lpt|rendezvous|hash|range]\n"
	    "                 [--show]\n"
	    "       keel-plan --list-presets [--define DEF ...]\n"
	    "       keel-plan --bench [--runs N]\n"
	    "--define 'gpu NAME rate=FLOP/s [mem=BYTES] [link=LINK]' or 'link NAME bw=BYTES/s\n"
	    "lat=TIME' describes a part the presets lack; --show prints the cluster and stops.\n"
	    "Prints the capacity-aware plan and an even split side by side: per worker its\n"
	    "share or items and predicted time, the predicted step time of both and the lower\n"
	    "bound; for a DAG (task/edge lines) the HEFT schedule and a round-robin baseline.\n"
	    "  -c, --cluster FILE         the cluster, in keel-plan's text format\n"
	    "  -x, --cluster-xml FILE     the cluster, from a SimGrid platform file\n"
	    "  -D, --define DEF           a GPU or link the presets lack (repeatable)\n"
	    "  -w, --workload FILE        shares or items to place\n"
	    "  -d, --dag FILE             a task graph to schedule (HEFT)\n"
	    "  -m, --mode M               how items are placed: lpt (default), rendezvous,\n"
	    "                             hash or range\n"
	    "  -s, --show                 print the cluster and stop\n"
	    "  -l, --list-presets         the GPU and link presets (and --define's)\n"
	    "  -b, --bench                time the planner\n"
	    "  -r, --runs N               --bench: runs per timing, 1..%d (default 7)\n"
	    "  -h, --help                 this text\n"
	    "      --version              keel's version and git hash\n"
	    "File formats: keel-plan(1).\n",
	    RUNS_MAX);
	cli_exit_codes(f, "  (2 also for an input file keel-plan cannot parse; never 75)\n");
}

static void *plan_mem(size_t n)
{
	void *p = malloc(n > 0 ? n : 1); /* malloc's alignment covers the planner's 8 bytes */
	if (p == NULL) {
		fprintf(stderr, "keel-plan: out of memory\n");
		exit(1);
	}
	return p;
}

static const char *fmt_time(double s, char *buf, size_t len)
{
	if (s >= 1 || s == 0)
		snprintf(buf, len, "%.3f s", s);
	else if (s >= 1e-3)
		snprintf(buf, len, "%.3f ms", s * 1e3);
	else
		snprintf(buf, len, "%.3f us", s * 1e6);
	return buf;
}

static struct keel_plan *plan_new(const struct plan_cluster *c, uint32_t items)
{
	struct keel_plan_config cfg = {c->worker_count, items > 0 ? items : 1};
	size_t need = keel_plan_storage_size(&cfg);
	struct keel_plan *p;
	if (need == 0 || keel_plan_init(&p, plan_mem(need), need, &cfg) != 0 ||
	    keel_plan_set_workers(p, c->worker, c->worker_count) != 0) {
		fprintf(stderr, "keel-plan: cannot build a planner for %u workers\n",
			c->worker_count);
		exit(2);
	}
	return p;
}

/* Per-worker loads of the plan p (aware) and q (even), then the summary. */
static void print_side_by_side(const struct plan_cluster *c, const struct keel_plan *p,
			       const struct keel_plan *q, const struct keel_plan_result *ra,
			       const struct keel_plan_result *re, const char *what)
{
	char name[96], t1[32], t2[32], t3[32];
	printf("%-12s %-8s %8s %7s | %9s %12s | %9s %12s\n", "worker", "gpu", "TFLOPS", "mem_GB",
	       what, "aware time", what, "even time");
	for (uint32_t w = 0; w < c->worker_count; w++) {
		struct keel_plan_load a, e;
		if (keel_plan_worker_load(p, w, &a) != 0 || keel_plan_worker_load(q, w, &e) != 0)
			continue;
		plan_worker_name(c, w, name, sizeof(name));
		printf("%-12s %-8s %8.1f %7.1f | %9u %12s | %9u %12s\n", name,
		       c->group[c->worker[w].type].gpu, c->worker[w].rate / 1e12,
		       c->worker[w].mem_bytes / 1e9, a.count, fmt_time(a.time_s, t1, sizeof(t1)),
		       e.count, fmt_time(e.time_s, t2, sizeof(t2)));
	}
	printf("predicted step time: capacity-aware %s, even split %s (%.2fx), lower bound %s "
	       "(aware/bound %.3f)\n",
	       fmt_time(ra->makespan_s, t1, sizeof(t1)), fmt_time(re->makespan_s, t2, sizeof(t2)),
	       re->makespan_s / ra->makespan_s, fmt_time(ra->lower_bound_s, t3, sizeof(t3)),
	       ra->makespan_s / ra->lower_bound_s);
}

static int run_shares(const struct plan_cluster *c, const struct plan_workload *wl)
{
	const struct keel_shares_spec *s = &wl->shares;
	uint32_t units = s->blocks * s->split;
	struct keel_plan *p = plan_new(c, units), *q = plan_new(c, units);
	struct keel_plan_result ra, re;
	int err = keel_plan_shares(p, s, &ra);
	if (err == 0)
		err = keel_plan_shares(q, s, &re);
	if (err == 0)
		err = keel_plan_even(q, &re);
	if (err != 0) {
		fprintf(stderr, "keel-plan: shares: %s\n",
			err == -ENOSPC ? "the units do not fit in the workers' memory"
				       : "invalid shares (blocks, split 8..16, block_work)");
		return 1;
	}
	printf("shares: %u blocks x %u units (1/%u of a block each), %.4g FLOP per block\n",
	       s->blocks, s->split, s->split, s->block_work);
	print_side_by_side(c, p, q, &ra, &re, "units");
	free(p);
	free(q);
	return 0;
}

static int plan_items(struct keel_plan *p, enum item_mode mode, struct keel_plan_result *r)
{
	switch (mode) {
	case MODE_RDV:
		return keel_plan_items_rendezvous(p, r);
	case MODE_HASH:
		return keel_plan_items_hash(p, r);
	case MODE_RANGE:
		return keel_plan_items_range(p, r);
	case MODE_LPT:
		break;
	}
	return keel_plan_items_lpt(p, r);
}

static int run_items(const struct plan_cluster *c, const struct plan_workload *wl,
		     enum item_mode mode)
{
	static const char *names[] = {"LPT", "weighted rendezvous", "hash", "range"};
	struct keel_plan *p = plan_new(c, wl->item_count), *q = plan_new(c, wl->item_count);
	struct keel_plan_result ra, re;
	int err = keel_plan_set_items(p, wl->item, wl->item_count);
	if (err == 0)
		err = keel_plan_set_items(q, wl->item, wl->item_count);
	if (err == 0)
		err = plan_items(p, mode, &ra);
	if (err == -ENOSPC && ra.failed_item < wl->item_count) {
		fprintf(stderr,
			"keel-plan: item '%s' (%.4g GB) fits on no worker's remaining memory\n",
			wl->item_name[ra.failed_item], wl->item[ra.failed_item].mem_bytes / 1e9);
		return 1;
	}
	if (err == 0)
		err = keel_plan_even(q, &re);
	if (err != 0) {
		fprintf(stderr, "keel-plan: items: error %d\n", err);
		return 1;
	}
	printf("items: %u, placed by %s (even split: round robin)\n", wl->item_count, names[mode]);
	print_side_by_side(c, p, q, &ra, &re, "items");
	free(p);
	free(q);
	return 0;
}

static struct keel_sched *sched_new(const struct plan_cluster *c, uint32_t tasks, uint32_t edges)
{
	struct keel_sched_config cfg = {tasks, edges, c->worker_count, c->group_count};
	size_t need = keel_sched_storage_size(&cfg);
	struct keel_sched *s;
	struct keel_sched_worker *w = plan_mem(c->worker_count * sizeof(*w));
	for (uint32_t k = 0; k < c->worker_count; k++)
		w[k] = (struct keel_sched_worker){c->worker[k].type, c->worker[k].bw_Bps,
						  c->worker[k].lat_s};
	if (need == 0 || keel_sched_init(&s, plan_mem(need), need, &cfg) != 0 ||
	    keel_sched_set_workers(s, w, c->worker_count, c->group_count) != 0) {
		fprintf(stderr, "keel-plan: cannot build a scheduler\n");
		exit(2);
	}
	free(w);
	return s;
}

static int run_dag(const struct plan_cluster *c, const struct plan_workload *wl)
{
	struct keel_sched *s = sched_new(c, wl->task_count, wl->edge_count);
	for (uint32_t t = 0; t < wl->task_count; t++) {
		uint32_t id;
		if (keel_sched_add_task(s, &wl->cost[(size_t)t * c->group_count], wl->hint[t],
					wl->hint_worker[t], &id) != 0)
			return fprintf(stderr, "keel-plan: task '%s' rejected\n", wl->task_name[t]),
			       1;
	}
	for (uint32_t e = 0; e < wl->edge_count; e++)
		if (keel_sched_add_edge(s, wl->edge[e][0], wl->edge[e][1], wl->edge_bytes[e]) != 0)
			return fprintf(stderr, "keel-plan: edge %u rejected\n", e), 1;
	double heft, rr;
	struct keel_sched_slot *slot = plan_mem(wl->task_count * sizeof(*slot));
	int err = keel_sched_run(s, KEEL_SCHED_ROUND_ROBIN, &rr);
	for (uint32_t t = 0; err == 0 && t < wl->task_count; t++)
		err = keel_sched_slot_get(s, t, &slot[t]);
	if (err == 0)
		err = keel_sched_run(s, KEEL_SCHED_HEFT, &heft);
	if (err != 0) {
		uint32_t f = keel_sched_failed_task(s);
		if (err == -ENOENT && f < wl->task_count)
			fprintf(stderr, "keel-plan: task '%s' can run on no allowed worker\n",
				wl->task_name[f]);
		else
			fprintf(stderr, "keel-plan: the task graph has a cycle\n");
		return 1;
	}
	printf("DAG: %u tasks, %u edges on %u workers\n", wl->task_count, wl->edge_count,
	       c->worker_count);
	printf("%-16s %10s %9s %9s %9s | %10s %9s %9s\n", "task", "worker", "rank", "start",
	       "finish", "rr worker", "start", "finish");
	char w1[96], w2[96], t1[32], t2[32];
	for (uint32_t t = 0; t < wl->task_count; t++) {
		struct keel_sched_slot sl;
		if (keel_sched_slot_get(s, t, &sl) != 0)
			continue;
		plan_worker_name(c, sl.worker, w1, sizeof(w1));
		plan_worker_name(c, slot[t].worker, w2, sizeof(w2));
		printf("%-16s %10s %9.4g %9.4g %9.4g | %10s %9.4g %9.4g\n", wl->task_name[t], w1,
		       keel_sched_rank(s, t), sl.start_s, sl.finish_s, w2, slot[t].start_s,
		       slot[t].finish_s);
	}
	printf("makespan: HEFT %s, round-robin %s (%.2fx)\n", fmt_time(heft, t1, sizeof(t1)),
	       fmt_time(rr, t2, sizeof(t2)), rr / heft);
	free(slot);
	free(s);
	return 0;
}

/* ---- --bench: planner timings (median of runs) and the mixed-cluster comparison. */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static uint64_t bench_rnd(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A cluster of n workers cycling through the GPU presets. */
static void bench_cluster(struct plan_cluster *c, uint32_t n, const enum keel_gpu *gpus,
			  uint32_t kinds)
{
	memset(c, 0, sizeof(*c));
	c->worker = plan_mem(n * sizeof(*c->worker));
	c->worker_count = n;
	c->group_count = kinds;
	for (uint32_t g = 0; g < kinds; g++) {
		const struct keel_gpu_preset *gp = keel_gpu_preset_get(gpus[g]);
		snprintf(c->group[g].name, PLAN_NAME_MAX, "%s", gp->name);
		snprintf(c->group[g].gpu, PLAN_NAME_MAX, "%s", gp->name);
		c->group[g].count = n / kinds;
		c->group[g].first = g * (n / kinds);
	}
	for (uint32_t k = 0; k < n; k++) {
		keel_worker_from_preset(&c->worker[k], k, gpus[k / (n / kinds)], KEEL_LINK_IB_NDR);
		c->worker[k].type = k / (n / kinds);
	}
}

typedef int (*item_fn)(struct keel_plan *, struct keel_plan_result *);

static double time_items(const struct plan_cluster *c, const struct keel_item *it, uint32_t n,
			 item_fn fn, int runs, struct keel_plan_result *r)
{
	double t[64];
	struct keel_plan *p = plan_new(c, n);
	for (int i = 0; i < runs; i++) {
		double t0 = now_s();
		int err = keel_plan_set_workers(p, c->worker, c->worker_count);
		err = err != 0 ? err : keel_plan_set_items(p, it, n);
		err = err != 0 ? err : fn(p, r);
		t[i] = now_s() - t0;
		if (err != 0)
			fprintf(stderr, "keel-plan: bench plan failed: %d\n", err);
	}
	free(p);
	qsort(t, (size_t)runs, sizeof(double), cmp_double);
	return t[runs / 2];
}

static int shares_10k(struct keel_plan *p, struct keel_plan_result *r)
{
	struct keel_shares_spec s = {625, 16, 1e13, 0}; /* 10 000 units */
	return keel_plan_shares(p, &s, r);
}

static void bench_items(int runs)
{
	static const enum keel_gpu mix[4] = {KEEL_GPU_V100_32, KEEL_GPU_A100_80, KEEL_GPU_H100,
					     KEEL_GPU_H200};
	struct plan_cluster c;
	bench_cluster(&c, 1024, mix, 4);
	uint32_t n = 10000;
	struct keel_item *it = plan_mem(n * sizeof(*it));
	uint64_t rs = 42;
	for (uint32_t i = 0; i < n; i++)
		it[i] = (struct keel_item){1e12 * (double)(1 + bench_rnd(&rs) % 1000),
					   (1 + bench_rnd(&rs) % 1000) * 1000000ull, i};
	struct keel_plan_result r;
	static const struct {
		const char *name;
		item_fn fn;
	} algos[] = {{"shares (10 000 units)", shares_10k},
		     {"LPT", keel_plan_items_lpt},
		     {"weighted rendezvous", keel_plan_items_rendezvous},
		     {"range", keel_plan_items_range},
		     {"hash", keel_plan_items_hash}};
	printf("plan 10 000 items over 1 024 workers (256 each V100-32/A100-80/H100/H200), median "
	       "of %d:\n",
	       runs);
	for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
		double t = time_items(&c, it, n, algos[a].fn, runs, &r);
		printf("  %-22s %9.3f ms   makespan/bound %.3f\n", algos[a].name, t * 1e3,
		       r.makespan_s / r.lower_bound_s);
	}
	free(it);
	plan_cluster_free(&c);
}

/* A layered random DAG: each task depends on up to 3 tasks among the previous 50. */
static void bench_dag(int runs)
{
	static const enum keel_gpu mix[4] = {KEEL_GPU_V100_32, KEEL_GPU_A100_80, KEEL_GPU_H100,
					     KEEL_GPU_MI300X};
	struct plan_cluster c;
	bench_cluster(&c, 64, mix, 4);
	uint32_t n = 1000;
	struct keel_sched *s = sched_new(&c, n, 3 * n);
	uint64_t rs = 7;
	for (uint32_t t = 0; t < n; t++) {
		double work = 1e12 * (double)(1 + bench_rnd(&rs) % 100), cost[4];
		for (uint32_t g = 0; g < 4; g++)
			cost[g] = work / keel_gpu_preset_get(mix[g])->rate_flops;
		uint32_t id;
		if (keel_sched_add_task(s, cost, KEEL_SCHED_ANY, 0, &id) != 0)
			exit(1);
		for (uint32_t k = 0; k < 3 && t > 0; k++) {
			uint32_t from = t - 1 - (uint32_t)(bench_rnd(&rs) % (t < 50 ? t : 50));
			double bytes = 1e6 * (double)(bench_rnd(&rs) % 1000);
			if (keel_sched_add_edge(s, from, t, bytes) != 0)
				exit(1);
		}
	}
	double t[64], heft = 0, rr = 0;
	for (int i = 0; i < runs; i++) {
		double t0 = now_s();
		if (keel_sched_run(s, KEEL_SCHED_HEFT, &heft) != 0)
			exit(1);
		t[i] = now_s() - t0;
	}
	if (keel_sched_run(s, KEEL_SCHED_ROUND_ROBIN, &rr) != 0)
		exit(1);
	qsort(t, (size_t)runs, sizeof(double), cmp_double);
	printf("HEFT, 1 000-task DAG (3 000 edges) over 64 workers (V100/A100/H100/MI300X), median "
	       "of %d: %.3f ms; makespan HEFT %.3f s, round-robin %.3f s (%.2fx)\n",
	       runs, t[runs / 2] * 1e3, heft, rr, rr / heft);
	free(s);
	plan_cluster_free(&c);
}

/* The mixed cluster of the issue: 8 H100 + 8 A100 + 8 V100, one step of 512 blocks. */
static void bench_mixed(void)
{
	static const enum keel_gpu mix[3] = {KEEL_GPU_H100, KEEL_GPU_A100_80, KEEL_GPU_V100_32};
	struct plan_cluster c;
	bench_cluster(&c, 24, mix, 3);
	struct keel_shares_spec sp = {512, 16, 6e12, 0};
	struct keel_plan *p = plan_new(&c, 512 * 16);
	struct keel_plan_result a, e;
	if (keel_plan_shares(p, &sp, &a) != 0 || keel_plan_even(p, &e) != 0)
		exit(1);
	printf("mixed 8 H100 + 8 A100-80 + 8 V100-32, 512 blocks x 6 TFLOP (split 16): predicted "
	       "step capacity-aware %.3f ms, even split %.3f ms (%.2fx), lower bound %.3f ms\n",
	       a.makespan_s * 1e3, e.makespan_s * 1e3, e.makespan_s / a.makespan_s,
	       a.lower_bound_s * 1e3);
	free(p);
	plan_cluster_free(&c);
}

/* --show: one line per group. */
static void show_cluster(const struct plan_cluster *c)
{
	printf("%-16s %6s %-10s %10s %8s %10s %9s\n", "group", "count", "gpu", "TFLOPS", "mem_GB",
	       "bw_GB/s", "lat_us");
	for (uint32_t g = 0; g < c->group_count; g++) {
		const struct plan_group *pg = &c->group[g];
		printf("%-16s %6u %-10s %10.3f %8.1f %10.3f %9.3f\n", pg->name, pg->count, pg->gpu,
		       pg->proto.rate / 1e12, (double)pg->proto.mem_bytes / 1e9,
		       pg->proto.bw_Bps / 1e9, pg->proto.lat_s * 1e6);
	}
}

/* What the command line asks for. */
struct plan_args {
	const char *cluster, *xml, *workload, *dag;
	enum item_mode mode;
	bool bench, show, list;
	uint32_t runs;
	struct plan_presets defs; /* --define */
};

enum {
	OPT_CLUSTER,
	OPT_CLUSTER_XML,
	OPT_WORKLOAD,
	OPT_DAG,
	OPT_MODE,
	OPT_BENCH,
	OPT_RUNS,
	OPT_DEFINE,
	OPT_SHOW,
	OPT_LIST_PRESETS,
	OPT_COUNT
};

static const struct cli_opt options[OPT_COUNT] = {
    [OPT_CLUSTER] = {"cluster", 'c', CLI_FILE},
    [OPT_CLUSTER_XML] = {"cluster-xml", 'x', CLI_FILE},
    [OPT_WORKLOAD] = {"workload", 'w', CLI_FILE},
    [OPT_DAG] = {"dag", 'd', CLI_FILE},
    [OPT_MODE] = {"mode", 'm', CLI_TEXT},
    [OPT_BENCH] = {"bench", 'b', CLI_FLAG},
    [OPT_RUNS] = {"runs", 'r', CLI_UINT, .min_u = 1, .max_u = RUNS_MAX},
    [OPT_DEFINE] = {"define", 'D', CLI_TEXT},
    [OPT_SHOW] = {"show", 's', CLI_FLAG},
    [OPT_LIST_PRESETS] = {"list-presets", 'l', CLI_FLAG},
};

static enum item_mode parse_mode(const char *v)
{
	static const char *const names[] = {[MODE_LPT] = "lpt",
					    [MODE_RDV] = "rendezvous",
					    [MODE_HASH] = "hash",
					    [MODE_RANGE] = "range"};
	for (int m = 0; m < 4; m++)
		if (strcmp(v, names[m]) == 0)
			return (enum item_mode)m;
	cli_usage_error(TOOL, "--mode %s: expected lpt, rendezvous, hash or range", v);
}

static void set_option(struct plan_args *a, int id, const struct cli *c)
{
	char err[PLAN_ERR_MAX];
	switch (id) {
	case OPT_CLUSTER:
		a->cluster = c->value;
		break;
	case OPT_CLUSTER_XML:
		a->xml = c->value;
		break;
	case OPT_WORKLOAD:
		a->workload = c->value;
		break;
	case OPT_DAG:
		a->dag = c->value;
		break;
	case OPT_MODE:
		a->mode = parse_mode(c->value);
		break;
	case OPT_RUNS:
		a->runs = (uint32_t)c->u;
		break;
	case OPT_DEFINE:
		if (plan_presets_define(&a->defs, c->value, err, sizeof(err)) != 0)
			cli_usage_error(TOOL, "--define '%s': %s", c->value, err);
		break;
	case OPT_BENCH:
		a->bench = true;
		break;
	case OPT_SHOW:
		a->show = true;
		break;
	case OPT_LIST_PRESETS:
		a->list = true;
		break;
	}
}

static void parse_args(int argc, char **argv, struct plan_args *a)
{
	struct cli c = {.tool = TOOL,
			.opts = options,
			.opt_count = OPT_COUNT,
			.usage = usage,
			.argc = argc,
			.argv = argv};
	int id;
	a->runs = 7;
	while ((id = cli_next(&c)) >= 0)
		set_option(a, id, &c);
	if (c.next < argc)
		cli_usage_error(TOOL, "unexpected argument '%s' (see '%s --help')", argv[c.next],
				TOOL);
	if (a->bench || a->list)
		return;
	if ((a->cluster == NULL) == (a->xml == NULL))
		cli_usage_error(TOOL, "give one cluster: --cluster FILE or --cluster-xml "
				      "PLATFORM.xml (keel-plan --help)");
	if (a->workload == NULL && a->dag == NULL && !a->show)
		cli_usage_error(TOOL, "nothing to place: give --workload FILE and/or --dag FILE "
				      "(keel-plan --help)");
}

/* --workload and --dag, one after the other: 0, or the exit code. */
static int place(const struct plan_args *a, const struct plan_cluster *c)
{
	const char *files[2] = {a->workload, a->dag};
	char err[PLAN_ERR_MAX];
	int rc = 0;
	for (int f = 0; f < 2 && rc == 0; f++) {
		struct plan_workload wl;
		if (files[f] == NULL)
			continue;
		if (plan_workload_load(files[f], c, &wl, err, sizeof(err)) != 0) {
			fprintf(stderr, "keel-plan: %s\n", err);
			return CLI_EXIT_USAGE;
		}
		if (wl.has_shares)
			rc = run_shares(c, &wl);
		if (rc == 0 && wl.item_count > 0)
			rc = run_items(c, &wl, a->mode);
		if (rc == 0 && wl.task_count > 0)
			rc = run_dag(c, &wl);
		plan_workload_free(&wl);
	}
	return rc;
}

int main(int argc, char **argv)
{
	static struct plan_args a;
	static struct plan_cluster c;
	char err[PLAN_ERR_MAX];
	parse_args(argc, argv, &a);
	if (a.bench) {
		bench_items((int)a.runs);
		bench_dag((int)a.runs);
		bench_mixed();
		return CLI_EXIT_OK;
	}
	if (a.list) {
		plan_presets_print(&a.defs, stdout);
		return CLI_EXIT_OK;
	}
	int rc = a.cluster != NULL ? plan_cluster_load(a.cluster, &a.defs, &c, err, sizeof(err))
				   : plan_cluster_load_xml(a.xml, &a.defs, &c, err, sizeof(err));
	if (rc != 0)
		return fprintf(stderr, "keel-plan: %s\n", err), CLI_EXIT_USAGE;
	for (uint32_t i = 0; i < c.note_count; i++)
		fprintf(stderr, "keel-plan: note: %s\n", c.note[i]);
	if (c.notes_dropped > 0)
		fprintf(stderr, "keel-plan: note: %u more elements not mapped\n", c.notes_dropped);
	printf("cluster %s: %u workers in %u groups\n", a.cluster != NULL ? a.cluster : a.xml,
	       c.worker_count, c.group_count);
	if (a.show)
		show_cluster(&c);
	else
		rc = place(&a, &c);
	plan_cluster_free(&c);
	return rc;
}
