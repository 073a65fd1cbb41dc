/* keel-sim output: one row per run as a table, CSV or JSON. Only simulated quantities are
 * printed (wall time and memory go to stderr), so the same seed prints the same bytes. */
#include <stdio.h>
#include <string.h>

#include "sim_int.h"

/* JSON: each failure on its own (the lost_s columns are their sums). */
static void failures_json(FILE *f, const struct sim_result *r)
{
	for (uint32_t i = 0; i < r->failure_count && i < SIM_FAILURES_MAX; i++) {
		const struct sim_failure_cost *c = &r->failures[i];
		fprintf(f,
			"%s{\"at_s\": %.9f, \"host\": %u, \"server\": %u, \"cause\": \"%s\", "
			"\"detect_s\": %.9f, \"view_change_s\": %.9f, \"restart_s\": %.6f, "
			"\"rollback_s\": %.6f, \"redo_s\": %.6f, \"during_failure\": ",
			i > 0 ? ", " : "", c->at_s, c->host, c->server, sim_cause_name(c->cause),
			c->detect_s, c->view_s, c->restart_s, c->rollback_s, c->redo_s);
		if (c->within == UINT32_MAX)
			fprintf(f, "null}");
		else
			fprintf(f, "%u}", c->within + 1);
	}
}

const char *sim_fidelity_name(enum sim_fidelity f)
{
	return f == SIM_FIDELITY_AUTO ? "auto" : "full";
}

/* The spans that ran in full: around the leaps, from 0 to the end of the run. `style` 'c' (CSV:
 * "a-b;c-d"), 'j' (JSON: [[a, b], [c, d]]) or 't' (text: "a-b s, c-d s"). Leaps past the
 * SIM_LEAPS_MAX listed leave the last span open-ended in the text ("..."). */
void sim_full_spans_print(FILE *f, const struct sim_result *r, char style)
{
	uint32_t listed = r->leap_count < SIM_LEAPS_MAX ? r->leap_count : SIM_LEAPS_MAX;
	double from = 0;
	bool first = true;
	if (style == 'j')
		fputc('[', f);
	for (uint32_t i = 0; i <= listed; i++) {
		double to = i < listed ? r->leap_from_s[i] : r->sim_s;
		if (i == listed && listed < r->leap_count)
			break; /* not every leap is listed: the rest is not known here */
		if (to <= from && i < listed) {
			from = r->leap_to_s[i];
			continue;
		}
		const char *sep = first ? "" : style == 'c' ? ";" : ", ";
		if (style == 'j')
			fprintf(f, "%s[%.6f, %.6f]", sep, from, to);
		else
			fprintf(f, "%s%.3f-%.3f%s", sep, from, to, style == 't' ? " s" : "");
		first = false;
		if (i < listed)
			from = r->leap_to_s[i];
	}
	if (listed < r->leap_count && style == 't')
		fprintf(f, ", ... (%u leaps, %u listed)", r->leap_count, listed);
	if (style == 'j')
		fputc(']', f);
}

/* JSON: each repaired GPU's return. */
static void rejoins_json(FILE *f, const struct sim_result *r)
{
	for (uint32_t i = 0; i < r->rejoin_count && i < SIM_REJOINS_MAX; i++) {
		const struct sim_rejoin *j = &r->rejoins[i];
		fprintf(
		    f, "%s{\"at_s\": %.9f, \"host\": %u, \"admitted_s\": %.9f, \"synced_s\": %.9f}",
		    i > 0 ? ", " : "", j->at_s, j->host, j->admitted_s, j->synced_s);
	}
}

/* The mean time from a repair to the job taking the GPU back (those that got back). */
static double rejoin_mean_s(const struct sim_result *r)
{
	double sum = 0;
	uint32_t n = 0;
	for (uint32_t i = 0; i < r->rejoin_count && i < SIM_REJOINS_MAX; i++)
		if (r->rejoins[i].admitted_s > 0) {
			sum += r->rejoins[i].admitted_s + r->rejoins[i].synced_s;
			n++;
		}
	return n > 0 ? sum / n : 0;
}

static void costs(const struct sim_result *r, double c[6])
{
	memset(c, 0, 6 * sizeof(double));
	for (uint32_t i = 0; i < r->failure_count; i++) {
		c[0] += r->failures[i].detect_s;
		c[1] += r->failures[i].view_s;
		c[2] += r->failures[i].repartition_s;
		c[3] += r->failures[i].restart_s;
		c[4] += r->failures[i].rollback_s;
		c[5] += r->failures[i].redo_s;
	}
}

const char *sim_cause_name(enum sim_cause cause)
{
	switch (cause) {
	case SIM_CAUSE_GPU:
		return "gpu";
	case SIM_CAUSE_SERVER:
		return "server";
	case SIM_CAUSE_PAUSE:
		return "pause";
	case SIM_CAUSE_FAULT:
	default:
		return "fault";
	}
}

void sim_report_header(FILE *f, const char *format, const char *sweep_key)
{
	const char *k = sweep_key != NULL ? sweep_key : "run";
	if (strcmp(format, "csv") == 0)
		fprintf(f,
			"%s,ranks,sim_s,steps,samples_per_s,step_s,goodput,failures,"
			"lost_detect_s,lost_view_s,lost_repartition_s,lost_restart_s,"
			"lost_rollback_s,lost_redo_s,detect_n,detect_p50_s,detect_p99_s,"
			"detect_max_s,detect_bound_s,detect_late,undetected,false_suspicions,"
			"views_agree,view_epochs,allreduce_ops,allreduce_wrong,allreduce_failed,"
			"allreduce_s,allreduce_model_s,messages,bytes,rx_drops,live_excluded,"
			"allreduce_hier,repairs,repair_first_step,step_s_after_repair,"
			"compute_s_ideal,compute_s_max,plans_disagree,compress_frags,"
			"compress_bytes_saved,fidelity,leapt_s,leapt_steps,leaps,rejoins,"
			"rejoin_mean_s,full_spans\n",
			k);
	else if (strcmp(format, "json") == 0)
		fprintf(f, "[\n");
	else
		fprintf(f,
			"%-10s %5s %7s %6s %9s %8s %7s %4s %9s %9s %9s %9s %9s %8s %8s %5s %5s "
			"%5s %10s\n",
			k, "ranks", "sim_s", "steps", "samples/s", "step_s", "goodput", "fail",
			"detect_s", "view_s", "restart_s", "rollbk_s", "det_p50", "det_p99",
			"det_max", "views", "fsusp", "excl", "messages");
}

static void row_csv(FILE *f, const char *v, const struct sim_result *r, const double c[6])
{
	fprintf(f,
		"%s,%u,%.6f,%llu,%.3f,%.6f,%.4f,%u,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%u,%.9f,"
		"%.9f,%.9f,%.9f,%llu,%llu,%llu,%s,%u,%llu,%llu,%llu,%.9f,%.9f,%llu,%llu,"
		"%llu,%llu,%llu,%u,%llu,%.6f,%.6f,%.6f,%llu,%llu,%llu,%s,%.6f,%llu,%u,%u,%.6f,",
		v, r->ranks, r->sim_s, (unsigned long long)r->steps, r->samples_per_s, r->step_s,
		r->goodput, r->failure_count, c[0], c[1], c[2], c[3], c[4], c[5], r->detect_count,
		r->detect_p50_s, r->detect_p99_s, r->detect_max_s, r->detect_bound_s,
		(unsigned long long)r->detect_late, (unsigned long long)r->undetected,
		(unsigned long long)r->false_suspicions, r->views_agree ? "yes" : "no",
		r->view_epochs, (unsigned long long)r->allreduce_ops,
		(unsigned long long)r->allreduce_wrong, (unsigned long long)r->allreduce_failed,
		r->allreduce_s, r->allreduce_model_s, (unsigned long long)r->messages,
		(unsigned long long)r->bytes, (unsigned long long)r->rx_queue_drops,
		(unsigned long long)r->live_excluded, (unsigned long long)r->allreduce_hier,
		r->repairs, (unsigned long long)r->repair_first_step, r->step_s_after_repair,
		r->compute_s_ideal, r->compute_s_max, (unsigned long long)r->plans_disagree,
		(unsigned long long)r->compress_frags, (unsigned long long)r->compress_bytes_saved,
		sim_fidelity_name(r->fidelity), r->leapt_s, (unsigned long long)r->leapt_steps,
		r->leap_count, r->rejoin_count, rejoin_mean_s(r));
	sim_full_spans_print(f, r, 'c');
	fputc('\n', f);
}

static void row_json(FILE *f, const char *sweep_key, const char *v, const struct sim_result *r,
		     const double c[6], bool last)
{
	fprintf(f,
		"  {\"%s\": \"%s\", \"ranks\": %u, \"sim_s\": %.6f, \"steps\": %llu, "
		"\"samples_per_s\": %.3f, \"step_s\": %.6f, \"goodput\": %.4f, "
		"\"failures\": %u, \"lost_s\": {\"detect\": %.6f, \"view_change\": %.6f, "
		"\"repartition\": %.6f, \"restart\": %.6f, \"rollback\": %.6f, \"redo\": "
		"%.6f}, \"detect\": {\"n\": %u, \"p50_s\": %.9f, \"p99_s\": %.9f, "
		"\"max_s\": %.9f, \"bound_s\": %.9f, \"late\": %llu, \"undetected\": %llu}, "
		"\"false_suspicions\": %llu, \"views_agree\": %s, \"view_epochs\": %u, "
		"\"allreduce\": {\"ops\": %llu, \"wrong\": %llu, \"failed\": %llu, \"hier\": "
		"%llu, \"mean_s\": %.9f, \"model_s\": %.9f}, \"messages\": %llu, \"bytes\": "
		"%llu, "
		"\"rx_drops\": %llu, \"live_excluded\": %llu, \"repair\": {\"on\": %s, "
		"\"count\": %u, \"first_at_s\": %.6f, \"first_step\": %llu, "
		"\"predicted_before_s\": %.6f, \"predicted_after_s\": %.6f, "
		"\"step_s_after\": %.6f, \"compute_s_ideal\": %.6f, \"compute_s_max\": %.6f, "
		"\"plans_disagree\": %llu}, \"compress\": {\"fragments\": %llu, "
		"\"bytes_saved\": %llu}, \"fidelity\": {\"mode\": \"%s\", \"leapt_s\": %.6f, "
		"\"leapt_steps\": %llu, \"leaps\": %u, \"full_spans\": ",
		sweep_key != NULL ? sweep_key : "run", v, r->ranks, r->sim_s,
		(unsigned long long)r->steps, r->samples_per_s, r->step_s, r->goodput,
		r->failure_count, c[0], c[1], c[2], c[3], c[4], c[5], r->detect_count,
		r->detect_p50_s, r->detect_p99_s, r->detect_max_s, r->detect_bound_s,
		(unsigned long long)r->detect_late, (unsigned long long)r->undetected,
		(unsigned long long)r->false_suspicions, r->views_agree ? "true" : "false",
		r->view_epochs, (unsigned long long)r->allreduce_ops,
		(unsigned long long)r->allreduce_wrong, (unsigned long long)r->allreduce_failed,
		(unsigned long long)r->allreduce_hier, r->allreduce_s, r->allreduce_model_s,
		(unsigned long long)r->messages, (unsigned long long)r->bytes,
		(unsigned long long)r->rx_queue_drops, (unsigned long long)r->live_excluded,
		r->repair_on ? "true" : "false", r->repairs, r->repair_first_at_s,
		(unsigned long long)r->repair_first_step, r->repair_before_s, r->repair_after_s,
		r->step_s_after_repair, r->compute_s_ideal, r->compute_s_max,
		(unsigned long long)r->plans_disagree, (unsigned long long)r->compress_frags,
		(unsigned long long)r->compress_bytes_saved, sim_fidelity_name(r->fidelity),
		r->leapt_s, (unsigned long long)r->leapt_steps, r->leap_count);
	sim_full_spans_print(f, r, 'j');
	fprintf(f, "}, \"failure_list\": [");
	failures_json(f, r);
	fprintf(f, "], \"rejoin_list\": [");
	rejoins_json(f, r);
	fprintf(f, "]}%s\n", last ? "" : ",");
	if (last)
		fprintf(f, "]\n");
}

static void row_table(FILE *f, const char *v, const struct sim_result *r, const double c[6])
{
	fprintf(f,
		"%-10s %5u %7.2f %6llu %9.1f %8.4f %7.4f %4u %9.6f %9.6f %9.1f %9.1f "
		"%9.6f %8.6f %8.6f %5s %5llu %5llu %10llu\n",
		v, r->ranks, r->sim_s, (unsigned long long)r->steps, r->samples_per_s, r->step_s,
		r->goodput, r->failure_count, c[0], c[1], c[3], c[4], r->detect_p50_s,
		r->detect_p99_s, r->detect_max_s, r->views_agree ? "agree" : "DIFF",
		(unsigned long long)r->false_suspicions, (unsigned long long)r->live_excluded,
		(unsigned long long)r->messages);
}

void sim_report_row(FILE *f, const char *format, const char *sweep_key, const char *sweep_val,
		    const struct sim_result *r, bool first, bool last)
{
	double c[6];
	const char *v = sweep_val != NULL ? sweep_val : "1";
	(void)first;
	costs(r, c);
	if (strcmp(format, "csv") == 0)
		row_csv(f, v, r, c);
	else if (strcmp(format, "json") == 0)
		row_json(f, sweep_key, v, r, c, last);
	else
		row_table(f, v, r, c);
}

void sim_progress_warn(FILE *f, const struct sim_scenario *s, const struct sim_result *r)
{
	if (strcmp(s->mode, "train") != 0 || r->steps > 0)
		return;
	/* The first step splits the batch evenly (repair comes after it): the slowest GPU's
	 * compute, then the gradient's AllReduce; start-up (the nodes join) comes before it. */
	double step = r->compute_s_max + r->grad_allreduce_s;
	if (r->failure_count == 0 || step >= s->horizon_s / 2) {
		fprintf(
		    f,
		    "keel-sim: warning: no training step fits in the %g s horizon: one takes "
		    "about %.3g s here (compute %.3g s on the slowest GPU, gradient AllReduce "
		    "%.3g s) after start-up; give --horizon %.2g or more (about ten steps), or a "
		    "smaller --model, --batch or --flops-per-sample\n",
		    s->horizon_s, step, r->compute_s_max, r->grad_allreduce_s, 10 * step);
		return;
	}
	char recovery[96] = "";
	if (s->recovery != SIM_RECOVER_KEEL)
		snprintf(recovery, sizeof(recovery),
			 ", each relaunch taking --restart %g s and going back to the last "
			 "checkpoint",
			 s->restart_s);
	fprintf(f,
		"keel-sim: warning: no training step kept in the %g s horizon, though one takes "
		"about %.3g s here: the faults (%u) and their recovery left no time for one%s; "
		"give a longer --horizon\n",
		s->horizon_s, step, r->failure_count, recovery);
}
