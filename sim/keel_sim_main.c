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

#include "platform_load.h"
#include "plot.h"
#include "sim_int.h"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: keel-sim [--cluster 48xH100:ib,16xA100:eth | --platform FILE.xml]\n"
	    "  [--mode train|heartbeat|allreduce] [--horizon 60s] [--ranks N] [--seed N]\n"
	    "  [--heartbeat 1ms] [--miss-limit 3] [--window 16] [--mtu 8972]\n"
	    "  [--algo auto|ring|rd|hier]\n"
	    "  [--model 25M] [--batch 512] [--mfu 0.4] [--ckpt-every 100] [--ckpt-bw 2e9]\n"
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
	    "event; every run says which spans ran in full.\n");
}

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

int main(int argc, char **argv)
{
	struct sim_scenario s;
	char err[512] = "", *sg_args[ARGS_MAX], *sweep = NULL;
	const char *fmt = "table", *write_platform = NULL, *plot_path = NULL;
	struct sim_plot *plot = NULL;
	int sg_count = 0;
	bool list_models = false, list_hosts = false;

	sim_scenario_default(&s);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		char key[64];
		const char *val;
		if (strncmp(a, "--cfg=", 6) == 0 || strncmp(a, "--log=", 6) == 0) {
			if (sg_count == ARGS_MAX)
				return 2;
			sg_args[sg_count++] = argv[i];
			continue;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout);
			return 0;
		}
		if (strcmp(a, "--list-models") == 0) {
			list_models = true;
			continue;
		}
		if (strcmp(a, "--list-hosts") == 0) {
			list_hosts = true;
			continue;
		}
		if (strcmp(a, "--progress") == 0) {
			s.progress = true;
			continue;
		}
		if (strncmp(a, "--", 2) != 0) {
			fprintf(stderr, "keel-sim: unexpected argument '%s'\n", a);
			usage(stderr);
			return 2;
		}
		const char *eq = strchr(a, '=');
		size_t klen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		if (klen >= sizeof(key))
			klen = sizeof(key) - 1;
		memcpy(key, a + 2, klen);
		key[klen] = '\0';
		if (eq != NULL)
			val = eq + 1;
		else if (i + 1 < argc)
			val = argv[++i];
		else {
			fprintf(stderr, "keel-sim: --%s needs a value\n", key);
			return 2;
		}
		int rc = 0;
		if (strcmp(key, "format") == 0) {
			fmt = val;
			rc = strcmp(val, "table") && strcmp(val, "csv") && strcmp(val, "json");
			snprintf(err, sizeof(err), "format '%s': table, csv or json", val);
		} else if (strcmp(key, "sweep") == 0) {
			sweep = strdup(val);
		} else if (strcmp(key, "plot") == 0) {
			enum plot_kind kind;
			plot_path = val;
			rc = plot_kind_of(val, &kind, err, sizeof(err));
		} else if (strcmp(key, "write-platform") == 0) {
			write_platform = val;
		} else if (strcmp(key, "scenario") == 0) {
			rc = sim_scenario_load(&s, val, err, sizeof(err));
		} else {
			rc = sim_scenario_set(&s, key, val, err, sizeof(err));
		}
		if (rc != 0) {
			fprintf(stderr, "keel-sim: %s\n", err);
			return 2;
		}
	}
	if (list_models) {
		sim_models_print(stdout);
		return 0;
	}
	if (list_hosts)
		return list_platform(&s, argv[0], sg_args, sg_count);
	if (s.cluster_spec[0] == '\0' && s.platform_file[0] == '\0')
		snprintf(s.cluster_spec, sizeof(s.cluster_spec), "8xH100:ib");
	if (write_platform != NULL) {
		struct sim_cluster c;
		FILE *f = fopen(write_platform, "w");
		if (s.cluster_spec[0] == '\0' || f == NULL ||
		    sim_cluster_parse(s.cluster_spec, &c, err, sizeof(err)) != 0 ||
		    sim_cluster_write_xml(&c, f) != 0) {
			fprintf(stderr, "keel-sim: cannot write platform '%s' %s\n", write_platform,
				err);
			return 2;
		}
		fclose(f);
		return 0;
	}

	/* --sweep key=v1,v2: one run per value, every other knob as given. */
	char *key = NULL, *vals = NULL;
	if (sweep != NULL) {
		char *eq = strchr(sweep, '=');
		if (eq == NULL) {
			fprintf(stderr, "keel-sim: --sweep KEY=V1,V2,...\n");
			return 2;
		}
		*eq = '\0';
		key = sweep;
		vals = eq + 1;
	}
	/* Before any run: a missing gnuplot or folder is said now, not after the simulation. */
	if (plot_path != NULL &&
	    sim_plot_open(&plot, plot_path, s.mode, key, err, sizeof(err)) != 0) {
		fprintf(stderr, "keel-sim: %s\n", err);
		return 2;
	}
	char *save = NULL;
	char *v = vals != NULL ? strtok_r(vals, ",", &save) : NULL;
	char *next = v != NULL ? strtok_r(NULL, ",", &save) : NULL;
	bool first = true;
	int failed = 0;
	struct sim_ckpt_advice ckpt = {0};
	bool ckpt_sweep =
	    key != NULL && strcmp(key, "ckpt-every") == 0 && strcmp(s.mode, "train") == 0;
	if (strcmp(s.mode, "allreduce") != 0)
		sim_report_header(stdout, fmt, key);
	do {
		struct sim_scenario run = s;
		struct sim_result r;
		if (v != NULL && sim_scenario_set(&run, key, v, err, sizeof(err)) != 0) {
			fprintf(stderr, "keel-sim: --sweep: %s\n", err);
			sim_plot_discard(plot);
			return 2;
		}
		if (run_one(&run, &r, sg_args, sg_count) != 0) {
			failed = 1;
			break;
		}
		if (r.deadlock)
			fprintf(stderr,
				"keel-sim: the simulation deadlocked (a node never ended)\n");
		failed |= r.deadlock || r.setup_failed;
		if (strcmp(run.mode, "allreduce") == 0)
			allreduce_row(&run, &r, fmt);
		else
			sim_report_row(stdout, fmt, key, v, &r, first, next == NULL);
		fflush(stdout);
		if (ckpt_sweep)
			sim_ckpt_track(&ckpt, v, &r);
		if (plot != NULL && sim_plot_add(plot, v, &r) != 0) {
			fprintf(stderr, "keel-sim: cannot write the plot's data\n");
			failed = 1;
			break;
		}
		first = false;
		v = next;
		next = v != NULL ? strtok_r(NULL, ",", &save) : NULL;
	} while (v != NULL);
	if (ckpt_sweep && !failed) {
		sim_ckpt_young_daly(&ckpt, &s);
		if (plot != NULL)
			sim_plot_optimum(plot, ckpt.best_every, ckpt.yd_steps);
	}
	failed |= plot_finish(plot, plot_path, failed);
	free(sweep);
	return failed ? 1 : 0;
}
