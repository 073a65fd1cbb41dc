/* The checkpoint interval a --sweep ckpt-every=... found best, beside the first-order optimum of
 * Young and Daly, sqrt(2 x delta x M): delta the time to write one checkpoint, M the job's mean
 * time between failures. Pure arithmetic on the runs' results; no SimGrid here. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sim_int.h"

void sim_ckpt_track(struct sim_ckpt_advice *a, const char *val, const struct sim_result *r)
{
	double every;
	if (sim_value_number(val, &every) != 0 || !(every > 0))
		return;
	if (!a->have || r->goodput > a->best_goodput) {
		a->have = true;
		a->best_every = every;
		a->best_goodput = r->goodput;
		a->step_s = r->step_s;
		a->ranks = r->ranks;
		a->servers = r->servers;
		a->failures = r->failure_count;
		a->sim_s = r->sim_s;
	}
}

/* The job's MTBF from the lifetimes asked for (every GPU's and every server's failure rate
 * add up), else from the failures the best run saw. 0: no failure at all. */
static double job_mtbf_s(const struct sim_scenario *s, const struct sim_ckpt_advice *a,
			 const char **from)
{
	double rate = 0;
	if (s->mtbf_s > 0)
		rate += a->ranks / s->mtbf_s;
	if (s->mtbf_server_s > 0)
		rate += a->servers / s->mtbf_server_s;
	*from = "--mtbf/--mtbf-server";
	if (rate > 0)
		return 1.0 / rate;
	*from = "the failures of the best run";
	return a->failures > 0 ? a->sim_s / a->failures : 0;
}

void sim_ckpt_young_daly(struct sim_ckpt_advice *a, const struct sim_scenario *s)
{
	if (!a->have || a->ranks == 0)
		return;
	/* what node_train charges for one write: 16 bytes per parameter, sharded over the ranks */
	a->delta_s = s->model_params * 16.0 / a->ranks / s->ckpt_Bps;
	const char *from;
	a->mtbf_job_s = job_mtbf_s(s, a, &from);
	a->yd_s = a->mtbf_job_s > 0 ? sqrt(2.0 * a->delta_s * a->mtbf_job_s) : 0;
	a->yd_steps = a->step_s > 0 ? a->yd_s / a->step_s : 0;
	fprintf(stderr, "keel-sim: ckpt-every: the best of the sweep is %g steps (goodput %.2f %%)",
		a->best_every, 100 * a->best_goodput);
	if (a->yd_s <= 0) {
		fprintf(stderr, "; no failure, so no Young/Daly optimum\n");
		return;
	}
	fprintf(
	    stderr,
	    "; Young/Daly sqrt(2 x %.3f s x %.1f s) = %.2f s = %.1f steps of %.4f s (checkpoint "
	    "write x job MTBF, from %s)%s\n",
	    a->delta_s, a->mtbf_job_s, a->yd_s, a->yd_steps, a->step_s, from,
	    s->recovery == SIM_RECOVER_KEEL
		? "; with --recovery keel a failure rolls nothing back, so checkpoints only "
		  "cost time: the first-order optimum is for the restart modes"
		: "");
}
