/* keel-sim: runs keel nodes as SimGrid actors on a modelled cluster, injects failures and
 * prints what they cost. Each run (one per --sweep value) is a child process, because a
 * SimGrid engine runs once per process; the parent prints the rows in order. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <simgrid/engine.h>

#include "keel/limits.h"

#include "cli.h"
#include "platform_load.h"
#include "plot.h"
#include "sim_int.h"

/* SimGrid options keel-sim always sets (a user --cfg after them wins):
 * CM02 is latency + size/bandwidth with max-min sharing (the default LV08 multiplies
 * latencies by ~13.01 to fit TCP's slow start); cross-traffic off (no modelled TCP acks). */
static const char *const sg_defaults[] = {
    "--cfg=network/model:CM02",
    "--cfg=network/crosstraffic:0",
    "--cfg=contexts/stack-size:256",
    "--log=root.thres:critical",
};

#define ARGS_MAX 64
#define TOOL	 "keel-sim"

/* What the straggler controller did, in one line (mode train). */
static void straggler_line(const struct sim_scenario *s, const struct sim_result *r)
{
	if (strcmp(s->mode, "train") != 0)
		return;
	if (!r->repair_on) {
		if (s->repair)
			fprintf(stderr,
				"keel-sim: straggler repair off above %u ranks (each rank plans "
				"alone, O(shards x ranks) a plan)\n",
				SIM_STRAGGLER_RANKS_MAX);
		return;
	}
	if (r->repairs == 0) {
		fprintf(stderr, "keel-sim: straggler repair: none needed; plans agreed%s\n",
			r->plans_disagree ? " NOT on every step" : " on every step");
		return;
	}
	fprintf(stderr,
		"keel-sim: straggler repair: %u, the first at %.3f s (step %llu); predicted "
		"compute %.4f -> %.4f s; steps after the last %.4f s (split by speed: compute "
		"%.4f s); plans %s\n",
		r->repairs, r->repair_first_at_s, (unsigned long long)r->repair_first_step,
		r->repair_before_s, r->repair_after_s, r->step_s_after_repair, r->compute_s_ideal,
		r->plans_disagree ? "DIFFERED" : "agreed on every step");
}

/* One line per repaired GPU (the first SIM_REJOINS_MAX): when the job took it back. */
static void rejoin_lines(const struct sim_result *r)
{
	for (uint32_t i = 0; i < r->rejoin_count && i < SIM_REJOINS_MAX; i++) {
		const struct sim_rejoin *j = &r->rejoins[i];
		if (j->admitted_s > 0)
			fprintf(
			    stderr,
			    "keel-sim: repair %u at %.6f s: host %u back in the job %.6f s later "
			    "(weights from a live member in %.6f s more)\n",
			    i + 1, j->at_s, j->host, j->admitted_s, j->synced_s);
		else
			fprintf(stderr,
				"keel-sim: repair %u at %.6f s: host %u not back before the end "
				"(restart "
				"modes take it at the next relaunch)\n",
				i + 1, j->at_s, j->host);
	}
}

/* Which spans ran in full, and what was leapt over (every run says so). */
static void fidelity_line(const struct sim_result *r)
{
	if (r->fidelity != SIM_FIDELITY_AUTO) {
		fprintf(stderr, "keel-sim: fidelity full: every step simulated\n");
		return;
	}
	fprintf(stderr,
		"keel-sim: fidelity auto: %.3f of %.3f simulated s leapt (%llu steps at the "
		"measured period, %u leaps); in full: ",
		r->leapt_s, r->sim_s, (unsigned long long)r->leapt_steps, r->leap_count);
	sim_full_spans_print(stderr, r, 't');
	fputc('\n', stderr);
}

/* One line per failure (the first SIM_FAILURES_MAX): where, why, and what it cost (the
 * report's columns are their sums). */
static void failure_lines(const struct sim_result *r)
{
	for (uint32_t i = 0; i < r->failure_count && i < SIM_FAILURES_MAX; i++) {
		const struct sim_failure_cost *c = &r->failures[i];
		double lost = c->detect_s + c->view_s + c->repartition_s + c->restart_s +
			      c->rollback_s + c->redo_s;
		char within[64] = "";
		if (c->within != UINT32_MAX)
			snprintf(within, sizeof(within), " (during failure %u's recovery)",
				 c->within + 1);
		fprintf(stderr,
			"keel-sim: failure %u at %.6f s: host %u (server %u), %s: %.6f s lost%s "
			"(detection %.6f, view change %.6f)\n",
			i + 1, c->at_s, c->host, c->server, sim_cause_name(c->cause), lost, within,
			c->detect_s, c->view_s);
	}
}

static int run_child(const struct sim_scenario *s, int fd, char **sg_args, int sg_count)
{
	char *argv[ARGS_MAX + 8];
	int argc = 0;
	struct sim_result r;
	char err[512] = "";

	argv[argc++] = "keel-sim";
	for (size_t i = 0; i < sizeof(sg_defaults) / sizeof(sg_defaults[0]); i++)
		argv[argc++] = (char *)sg_defaults[i];
	for (int i = 0; i < sg_count; i++)
		argv[argc++] = sg_args[i];
	argv[argc] = NULL;
	memset(&r, 0, sizeof(r));
	int rc = sim_run(s, &r, &argc, argv, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "keel-sim: %s\n", err);
		return 2;
	}
	fprintf(stderr,
		"keel-sim: %u ranks, %.1f simulated s in %.2f s wall, %llu messages "
		"(%.0f per wall s) in %llu SimGrid messages, peak RSS %ld MiB\n",
		r.ranks, r.sim_s, r.wall_s, (unsigned long long)r.messages,
		r.wall_s > 0 ? (double)r.messages / r.wall_s : 0, (unsigned long long)r.comms,
		r.rss_kb / 1024);
	fidelity_line(&r);
	straggler_line(s, &r);
	failure_lines(&r);
	rejoin_lines(&r);
	sim_progress_warn(stderr, s, &r);
	if (s->grad)
		fprintf(stderr,
			"keel-sim: compression (--compress %s): %llu fragments compressed, %.3f GB "
			"saved of %.3f GB sent\n",
			s->compress == KEEL_COMPRESS_AUTO   ? "auto"
			: s->compress == KEEL_COMPRESS_BF16 ? "bf16"
			: s->compress == KEEL_COMPRESS_F16  ? "f16"
							    : "off",
			(unsigned long long)r.compress_frags, (double)r.compress_bytes_saved / 1e9,
			(double)r.bytes / 1e9);
	return write(fd, &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 3;
}

static int run_one(const struct sim_scenario *s, struct sim_result *r, char **sg_args, int sg_count)
{
	int p[2], status = 0;
	if (pipe(p) != 0)
		return -errno;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(p[0]);
		_exit(run_child(s, p[1], sg_args, sg_count));
	}
	close(p[1]);
	/* The result is larger than PIPE_BUF: it may arrive in pieces. */
	size_t got = 0;
	while (got < sizeof(*r)) {
		ssize_t n = read(p[0], (char *)r + got, sizeof(*r) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(p[0]);
	waitpid(pid, &status, 0);
	if (got != sizeof(*r) || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -EIO;
	return 0;
}

static void allreduce_row(const struct sim_scenario *s, const struct sim_result *r, const char *fmt)
{
	double err = r->allreduce_model_s > 0 ? r->allreduce_s / r->allreduce_model_s - 1 : 0;
	if (strcmp(fmt, "table") == 0)
		printf(
		    "allreduce: %u ranks, %llu bytes: keel %.9f s, ring model %.9f s (%+.1f %%); "
		    "alpha %.3e s, beta %.4e B/s; %llu ops, %llu wrong, %llu failed, %llu hier\n",
		    r->ranks, (unsigned long long)s->allreduce_bytes, r->allreduce_s,
		    r->allreduce_model_s, err * 100, r->alpha_s, r->beta_Bps,
		    (unsigned long long)r->allreduce_ops, (unsigned long long)r->allreduce_wrong,
		    (unsigned long long)r->allreduce_failed, (unsigned long long)r->allreduce_hier);
}

/* --list-hosts: load the platform with SimGrid and print what its engine holds. */
static int list_platform(const struct sim_scenario *s, char *prog, char **sg_args, int sg_count)
{
	char err[512], *av[ARGS_MAX + 8];
	int ac = 0;
	av[ac++] = prog;
	for (size_t i = 0; i < sizeof(sg_defaults) / sizeof(sg_defaults[0]); i++)
		av[ac++] = (char *)sg_defaults[i];
	for (int i = 0; i < sg_count; i++)
		av[ac++] = sg_args[i];
	av[ac] = NULL;
	if (s->platform_file[0] == '\0') {
		fprintf(stderr, "keel-sim: --list-hosts needs --platform FILE.xml\n");
		return 2;
	}
	simgrid_init(&ac, av);
	if (sim_platform_describe(s->platform_file, stdout, err, sizeof(err)) != 0) {
		fprintf(stderr, "keel-sim: %s\n", err);
		return 2;
	}
	return 0;
}

/* --plot, once every run is done: drawn only when all of them succeeded. */
static int plot_finish(struct sim_plot *sp, const char *path, bool failed)
{
	char err[512] = "";

	if (sp == NULL)
		return 0;
	if (failed) {
		sim_plot_discard(sp);
		fprintf(stderr, "keel-sim: no plot written to %s: a run failed\n", path);
		return 0;
	}
	if (sim_plot_render(sp, err, sizeof(err)) != 0) {
		fprintf(stderr, "keel-sim: %s\n", err);
		return 1;
	}
	fprintf(stderr, "keel-sim: plot written to %s\n", path);
	return 0;
}

/* The scenario knobs that take a number, with the range this command line accepts (scenario.c
 * sets them; a value with a unit suffix is read by sim_value_number). */
struct sim_number {
	const char *key;
	double min, max;
	bool whole;
	const char *unit; /* NULL: a plain number */
};

#define UNIT_S	   "seconds; ns, us, ms, s, min, h suffixes"
#define UNIT_BYTES "bytes; K, M, G suffixes"
static const struct sim_number numbers[] = {
    {"heartbeat", 1e-6, 10, false, UNIT_S},
    {"miss-limit", 1, 1000, true, NULL},
    {"window", 0, KEEL_WINDOW_MAX, true, NULL},
    {"mtu", KEEL_MTU_MIN, KEEL_MTU_MAX, true, UNIT_BYTES},
    {"op-timeout", 1e-6, 1e6, false, UNIT_S},
    {"ranks", 0, SIM_HOSTS_MAX, true, NULL},
    {"horizon", 1e-3, 1e8, false, UNIT_S},
    {"model", 1, 1e13, false, "parameters; K, M, G, B suffixes"},
    {"flops-per-sample", 1, 1e20, false, NULL},
    {"batch", 1, 1e8, true, NULL},
    {"mfu", 1e-3, 1, false, NULL},
    {"grad-scale", 0, 1e6, true, NULL},
    {"trains", 1, SIM_TRAIN_MAX, true, NULL},
    {"ckpt-every", 0, 1e9, true, NULL},
    {"ckpt-bw", 1, 1e13, false, "bytes/s"},
    {"restart", 0, 1e6, false, UNIT_S},
    {"bytes", 0, 1e12, true, UNIT_BYTES},
    {"repeat", 1, 1e6, true, NULL},
    {"mtbf", 0, 1e10, false, UNIT_S},
    {"mtbf-server", 0, 1e10, false, UNIT_S},
    {"weibull", 0.01, 20, false, NULL},
    {"mttr", 0, 1e10, false, UNIT_S},
    {"seed", 0, 1e15, true, NULL}, /* below 2^53: kept exactly */
};
#define NUMBER_COUNT (sizeof(numbers) / sizeof(numbers[0]))

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: keel-sim [--cluster 48xH100:ib,16xA100:eth | --platform FILE.xml]\n"
	    "  [--mode train|heartbeat|allreduce] [--horizon 10s] [--ranks N] [--seed N]\n"
	    "  [--heartbeat 1ms] [--miss-limit 3] [--window 16] [--mtu 8972]\n"
	    "  [--algo auto|ring|rd|hier]\n"
	    "  [--model 25e6] [--flops-per-sample N] [--batch 512] [--mfu 0.4] [--ckpt-every "
	    "100]\n  [--ckpt-bw 2e9]\n"
	    "  [--recovery keel|restart|timeout[=600s]] [--restart 60s] [--grad-scale N]\n"
	    "  [--fail T:HOST] [--recover T:HOST] [--slow T:HOST:FACTOR] [--link-off T:LINK]\n"
	    "  [--link-on T:LINK] [--cut T:A:B] [--pause T:HOST:SECONDS]\n"
	    "  [--mtbf 1h] [--mtbf-server 8h] [--weibull SHAPE] [--mttr 10min]\n"
	    "  [--chaos loss=0.01,seed=3] [--repair on|off] [--compress none|off|auto|bf16|f16]\n"
	    "  [--bytes 4M --repeat 5] [--check 1] [--scenario FILE]\n"
	    "  [--sweep KEY=V1,V2,...] [--format table|csv|json] [--progress]\n"
	    "  [--fidelity full|auto] [--trains N]\n"
	    "  [--plot FILE.svg|FILE.png]\n"
	    "  [--write-platform FILE] [--list-models] [--cfg=simgrid/option:value ...]\n"
	    "  [--define 'gpu NAME rate=FLOP/s [mem=BYTES] [link=LINK]' | 'link NAME bw=B/s "
	    "lat=T']\n"
	    "       keel-sim --platform FILE.xml --list-hosts   (what SimGrid made of the file)\n"
	    "Cluster items: COUNTxGPU[:FABRIC][/GPUS_PER_NODE] (8 per node by default); GPU and\n"
	    "FABRIC are presets (--list-models) or names defined before the --cluster.\n"
	    "--plot draws, with gnuplot (gnuplot-nox), the step time over simulated time with\n"
	    "failures and new views marked, the CDF of detection times (several failures or a\n"
	    "sweep) and a sweep's curve (goodput; detection or AllReduce time by --mode).\n"
	    "--repair (mode train, on by default up to 128 ranks): every rank measures its "
	    "compute\n"
	    "time, sends it with the step's gradient, and keel's straggler controller "
	    "re-partitions\n"
	    "the batch's shards when the skew stays above 2 (off: an even split throughout).\n"
	    "--compress (mode train): gradients through keel's gradient AllReduce with error\n"
	    "feedback; auto sends a link's share as bf16 when its traffic passes half the\n"
	    "bandwidth keel measured on it, bf16/f16 force it, off never; none (the default)\n"
	    "runs plain AllReduces. The codec's CPU time is not simulated.\n"
	    "--mtbf draws one lifetime per GPU, --mtbf-server one per server (all its GPUs\n"
	    "fail at once), with that mean: exponential, or Weibull with --weibull SHAPE (<1\n"
	    "infant mortality, >1 wear-out); seeded by --seed. --mttr repairs each failure\n"
	    "after an exponential time of that mean (--recover T:HOST one at T): the GPU's\n"
	    "process rejoins the running job (keel) or the next relaunch (restart, timeout).\n"
	    "--fidelity (mode train; auto by default for horizons over 300 s, else full): auto\n"
	    "runs every datagram of every node only until the steps are steady (start-up, and\n"
	    "after each failure, pause, slow-down or link change), then leaps whole steps at\n"
	    "the period it measured, with their checkpoints, up to a guard before the next\n"
	    "event; every run says which spans ran in full.\n"
	    "--list-models: the GPU and link presets, and what --model takes.\n"
	    "--version: keel's version and git hash.\n"
	    "Numbers and their ranges (a value outside is refused):\n");
	for (size_t i = 0; i < NUMBER_COUNT; i++)
		fprintf(f, "  --%-17s %s %.15g..%.15g%s%s%s\n", numbers[i].key,
			numbers[i].whole ? "whole" : "     ", numbers[i].min, numbers[i].max,
			numbers[i].unit != NULL ? " (" : "",
			numbers[i].unit != NULL ? numbers[i].unit : "",
			numbers[i].unit != NULL ? ")" : "");
	fprintf(f, "Environment: KEEL_* settings of the simulated nodes (keel-run --help-env,\n"
		   "docs/reference/env.md).\n");
	cli_exit_codes(f,
		       "  (1 also when a run deadlocked or its nodes could not start; never 75)\n");
}

/* keel-sim's own options first, then the scenario's text knobs; the numbers follow them. */
enum {
	O_FORMAT,
	O_SWEEP,
	O_PLOT,
	O_WRITE_PLATFORM,
	O_SCENARIO,
	O_LIST_MODELS,
	O_LIST_HOSTS,
	O_PROGRESS,
	OWN_COUNT, /* the scenario's knobs from here */
};
static const struct cli_opt own_options[] = {
    [O_FORMAT] = {.name = "format", .kind = CLI_TEXT},
    [O_SWEEP] = {.name = "sweep", .kind = CLI_TEXT},
    [O_PLOT] = {.name = "plot", .kind = CLI_TEXT},
    [O_WRITE_PLATFORM] = {.name = "write-platform", .kind = CLI_TEXT},
    [O_SCENARIO] = {.name = "scenario", .kind = CLI_FILE},
    [O_LIST_MODELS] = {.name = "list-models", .kind = CLI_FLAG},
    [O_LIST_HOSTS] = {.name = "list-hosts", .kind = CLI_FLAG},
    [O_PROGRESS] = {.name = "progress", .kind = CLI_FLAG},
    {.name = "platform", .kind = CLI_FILE},
    {.name = "cluster", .kind = CLI_TEXT},
    {.name = "define", .kind = CLI_TEXT},
    {.name = "mode", .kind = CLI_TEXT},
    {.name = "recovery", .kind = CLI_TEXT},
    {.name = "chaos", .kind = CLI_TEXT},
    {.name = "fail", .kind = CLI_TEXT},
    {.name = "recover", .kind = CLI_TEXT},
    {.name = "link-off", .kind = CLI_TEXT},
    {.name = "link-on", .kind = CLI_TEXT},
    {.name = "slow", .kind = CLI_TEXT},
    {.name = "cut", .kind = CLI_TEXT},
    {.name = "pause", .kind = CLI_TEXT},
    {.name = "algo", .kind = CLI_TEXT},
    {.name = "compress", .kind = CLI_TEXT},
    {.name = "check", .kind = CLI_TEXT},
    {.name = "fidelity", .kind = CLI_TEXT},
    {.name = "repair", .kind = CLI_TEXT},
};
#define TEXT_COUNT (sizeof(own_options) / sizeof(own_options[0]))
#define OPT_COUNT  (TEXT_COUNT + NUMBER_COUNT)

/* What the command line asks for, beyond the scenario. */
struct sim_args {
	struct sim_scenario s;
	char *sg_args[ARGS_MAX]; /* --cfg= and --log=, for SimGrid */
	int sg_count;
	const char *fmt, *write_platform, *plot_path, *sweep;
	bool list_models, list_hosts;
};

/* The number knob `key`, or NULL. */
static const struct sim_number *number_of(const char *key)
{
	for (size_t i = 0; i < NUMBER_COUNT; i++)
		if (strcmp(numbers[i].key, key) == 0)
			return &numbers[i];
	return NULL;
}

/* A number knob's value in its range, or exit 2 naming the option (`opt`: how to name it). */
static void check_number(const char *opt, const struct sim_number *n, const char *value)
{
	double d;
	if (sim_value_number(value, &d) == 0 && d >= n->min && d <= n->max &&
	    (!n->whole || d == (double)(uint64_t)d))
		return;
	cli_usage_error(TOOL, "%s: '%s' is not a %s in %.15g..%.15g%s%s%s", opt, value,
			n->whole ? "whole number" : "number", n->min, n->max,
			n->unit != NULL ? " (" : "", n->unit != NULL ? n->unit : "",
			n->unit != NULL ? ")" : "");
}

/* --list-models: the hardware presets (GPUs, links), then what --model takes. */
static void list_models(void)
{
	struct sim_scenario d;
	sim_scenario_default(&d);
	sim_models_print(stdout);
	printf("Training model (--model PARAMS): a parameter count, not a preset, e.g. 20M, 125M,\n"
	       "1.3B, 70B (K, M, G: powers of 1024; B: 10^9); its gradient is 4 bytes a\n"
	       "parameter, a sample costs --flops-per-sample FLOP. Defaults: --model %.4g,\n"
	       "--flops-per-sample %.4g, --batch %u, --mfu %.2f.\n",
	       d.model_params, d.flops_per_sample, d.batch, d.mfu);
}

/* A scenario knob (scenario.c sets it); a number is checked against its range first. */
static void set_knob(struct sim_args *a, uint32_t id, const struct cli *c)
{
	char err[512] = "";
	if (id >= TEXT_COUNT)
		check_number(c->opt_text, &numbers[id - TEXT_COUNT], c->value);
	if (sim_scenario_set(&a->s, c->opt_text + 2, c->value, err, sizeof(err)) != 0)
		cli_usage_error(TOOL, "%s: %s", c->opt_text, err);
}

static void set_option(struct sim_args *a, uint32_t id, const struct cli *c)
{
	char err[512] = "";
	enum plot_kind kind;
	const char *v = c->value;
	switch (id) {
	case O_FORMAT:
		if (strcmp(v, "table") != 0 && strcmp(v, "csv") != 0 && strcmp(v, "json") != 0)
			cli_usage_error(TOOL, "--format: '%s' is not table, csv or json", v);
		a->fmt = v;
		break;
	case O_SWEEP:
		a->sweep = v;
		break;
	case O_PLOT:
		if (plot_kind_of(v, &kind, err, sizeof(err)) != 0)
			cli_usage_error(TOOL, "--plot: %s", err);
		a->plot_path = v;
		break;
	case O_WRITE_PLATFORM:
		a->write_platform = v;
		break;
	case O_SCENARIO:
		if (sim_scenario_load(&a->s, v, err, sizeof(err)) != 0)
			cli_usage_error(TOOL, "--scenario: %s", err);
		break;
	case O_LIST_MODELS:
		a->list_models = true;
		break;
	case O_LIST_HOSTS:
		a->list_hosts = true;
		break;
	case O_PROGRESS:
		a->s.progress = true;
		break;
	default:
		set_knob(a, id, c);
	}
}

static void parse_args(int argc, char **argv, struct sim_args *a)
{
	static struct cli_opt opts[OPT_COUNT];
	for (uint32_t i = 0; i < OPT_COUNT; i++)
		opts[i] = i < TEXT_COUNT ? own_options[i]
					 : (struct cli_opt){.name = numbers[i - TEXT_COUNT].key,
							    .kind = CLI_TEXT};
	struct cli c = {.tool = TOOL,
			.opts = opts,
			.opt_count = OPT_COUNT,
			.usage = usage,
			.argc = argc,
			.argv = argv};
	sim_scenario_default(&a->s);
	a->fmt = "table";
	for (;;) {
		c.next = c.next < 1 ? 1 : c.next;
		const char *arg = c.next < argc ? argv[c.next] : "";
		if (strncmp(arg, "--cfg=", 6) == 0 || strncmp(arg, "--log=", 6) == 0) {
			if (a->sg_count == ARGS_MAX)
				cli_usage_error(TOOL, "at most %d --cfg and --log", ARGS_MAX);
			a->sg_args[a->sg_count++] = argv[c.next++];
			continue;
		}
		int id = cli_next(&c);
		if (id < 0)
			break;
		set_option(a, (uint32_t)id, &c);
	}
	if (c.next < argc)
		cli_usage_error(TOOL, "unexpected argument '%s' (see '%s --help')", argv[c.next],
				TOOL);
}

/* --write-platform FILE: the --cluster as a SimGrid platform file. */
static int write_platform(const struct sim_args *a)
{
	struct sim_cluster c;
	char err[512] = "";
	FILE *f = fopen(a->write_platform, "w");
	if (a->s.cluster_spec[0] == '\0' || f == NULL ||
	    sim_cluster_parse(a->s.cluster_spec, &c, err, sizeof(err)) != 0 ||
	    sim_cluster_write_xml(&c, f) != 0) {
		fprintf(stderr, "keel-sim: cannot write platform '%s' %s\n", a->write_platform,
			f == NULL ? strerror(errno) : err);
		if (f != NULL)
			fclose(f);
		return CLI_EXIT_FAILURE;
	}
	return fclose(f) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
}

/* One sweep: the key and its values, each checked before any run. */
struct sweep {
	char buf[SIM_SCENARIO_LINE_MAX + 1];
	const char *key;
	char *vals[256];
	uint32_t count;
};

static void sweep_parse(const char *spec, struct sweep *w)
{
	char *eq, *save = NULL;
	if (strlen(spec) >= sizeof(w->buf) || (eq = strchr(strcpy(w->buf, spec), '=')) == NULL)
		cli_usage_error(TOOL, "--sweep: '%s' is not KEY=V1,V2,...", spec);
	*eq = '\0';
	w->key = w->buf;
	const struct sim_number *n = number_of(w->key);
	bool known = n != NULL;
	char opt[96];
	snprintf(opt, sizeof(opt), "--sweep %s", w->key);
	for (uint32_t i = OWN_COUNT; i < TEXT_COUNT; i++)
		known |= strcmp(own_options[i].name, w->key) == 0;
	if (!known)
		cli_usage_error(TOOL, "--sweep: unknown key '%s' (see '%s --help')", w->key, TOOL);
	for (char *v = strtok_r(eq + 1, ",", &save); v != NULL; v = strtok_r(NULL, ",", &save)) {
		if (w->count == sizeof(w->vals) / sizeof(w->vals[0]))
			cli_usage_error(TOOL, "--sweep: at most %zu values",
					sizeof(w->vals) / sizeof(w->vals[0]));
		if (n != NULL)
			check_number(opt, n, v);
		w->vals[w->count++] = v;
	}
	if (w->count == 0)
		cli_usage_error(TOOL, "--sweep: '%s' has no values", spec);
}

/* One run of the sweep (or the only run): its row, the plot's data. 0; 1 when it failed (the
 * sweep stops); 2 when it deadlocked or a node could not start (the sweep goes on). */
static int run_value(struct sim_args *a, const struct sweep *w, uint32_t i, struct sim_plot *plot,
		     struct sim_ckpt_advice *ckpt)
{
	struct sim_scenario run = a->s;
	struct sim_result r;
	char err[512] = "";
	const char *v = w->count > 0 ? w->vals[i] : NULL;
	if (v != NULL && sim_scenario_set(&run, w->key, v, err, sizeof(err)) != 0)
		cli_usage_error(TOOL, "--sweep: %s", err);
	if (run_one(&run, &r, a->sg_args, a->sg_count) != 0)
		return 1;
	if (r.deadlock)
		fprintf(stderr, "keel-sim: the simulation deadlocked (a node never ended)\n");
	if (strcmp(run.mode, "allreduce") == 0)
		allreduce_row(&run, &r, a->fmt);
	else
		sim_report_row(stdout, a->fmt, w->count > 0 ? w->key : NULL, v, &r, i == 0,
			       i + 1 >= w->count);
	fflush(stdout);
	if (ckpt != NULL)
		sim_ckpt_track(ckpt, v, &r);
	if (plot != NULL && sim_plot_add(plot, v, &r) != 0) {
		fprintf(stderr, "keel-sim: cannot write the plot's data\n");
		return 1;
	}
	return r.deadlock || r.setup_failed ? 2 : 0;
}

/* Every run of the sweep, in order; the plot once all are done. The exit code. */
static int run_all(struct sim_args *a)
{
	static struct sweep w;
	struct sim_plot *plot = NULL;
	struct sim_ckpt_advice ckpt = {0};
	char err[512] = "";
	if (a->sweep != NULL)
		sweep_parse(a->sweep, &w);
	const char *key = w.count > 0 ? w.key : NULL;
	/* Before any run: a missing gnuplot or folder is said now, not after the simulation. */
	if (a->plot_path != NULL &&
	    sim_plot_open(&plot, a->plot_path, a->s.mode, key, err, sizeof(err)) != 0)
		cli_usage_error(TOOL, "--plot: %s", err);
	bool ckpt_sweep =
	    key != NULL && strcmp(key, "ckpt-every") == 0 && strcmp(a->s.mode, "train") == 0;
	if (strcmp(a->s.mode, "allreduce") != 0)
		sim_report_header(stdout, a->fmt, key);
	int failed = 0;
	for (uint32_t i = 0; i < (w.count > 0 ? w.count : 1) && (failed & 1) == 0; i++)
		failed |= run_value(a, &w, i, plot, ckpt_sweep ? &ckpt : NULL);
	if (ckpt_sweep && !failed) {
		sim_ckpt_young_daly(&ckpt, &a->s);
		if (plot != NULL)
			sim_plot_optimum(plot, ckpt.best_every, ckpt.yd_steps);
	}
	failed |= plot_finish(plot, a->plot_path, failed);
	return failed ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
	static struct sim_args a;
	parse_args(argc, argv, &a);
	if (a.list_models) {
		list_models();
		return CLI_EXIT_OK;
	}
	if (a.list_hosts)
		return list_platform(&a.s, argv[0], a.sg_args, a.sg_count);
	if (a.s.cluster_spec[0] == '\0' && a.s.platform_file[0] == '\0')
		snprintf(a.s.cluster_spec, sizeof(a.s.cluster_spec), "8xH100:ib");
	if (a.write_platform != NULL)
		return write_platform(&a);
	return run_all(&a);
}
