/* Straggler repair in a running job: each step, every member gives the same controller the
 * same measured compute times (they travel with the step's own collective), and the controller
 * decides, identically everywhere, when the plan of keel/partition.h must be re-partitioned:
 * when the slowest member's time is above skew_max times the fastest's in persist_steps steps
 * in a row, or a member's load stays above load_max (or it is suspected: drained). The new
 * rates come from times smoothed per unit of work, so a re-partitioned plan (equal times,
 * unequal shares) stays put;
 * after a repair the next waits hold_steps steps, and comes only if the step has become a
 * quarter slower than the repair predicted (a plan that cannot balance better — few items, a
 * coarse hash — is not redone over and over); and one repair changes a member's rate by
 * at most rate_step_max, which bounds how much work one repair moves. Caller memory only; no
 * clock (times are the caller's measurements). */
#ifndef KEEL_STRAGGLER_H
#define KEEL_STRAGGLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/partition.h"

#ifdef __cplusplus
extern "C" {
#endif

struct keel_straggler_config {
	double skew_max;	/* max/min smoothed step time above this counts (default 2) */
	double load_max;	/* a member's smoothed load above this drains it (default 0.8) */
	uint32_t persist_steps; /* steps in a row over the limit before a repair (default 3) */
	uint32_t hold_steps;	/* steps after a repair before the next may come (default 20) */
	double smoothing;	/* weight of the newest step in the averages, (0, 1] (0.5) */
	double rate_step_max;	/* a repair changes a member's rate by at most this factor (4) */
	/* While the fastest member's step time is below this, smoothed or in the step itself,
	 * no step counts as over (0: all count): compute that short is lost in the step's
	 * communication and in scheduling noise (one descheduled member looks 100x slower), and
	 * not worth moving work for. Both count, so that one slow step of every member (a job's
	 * cold first step) does not lift short steps after it over the floor. */
	double time_floor_s;
};

void keel_straggler_config_default(struct keel_straggler_config *cfg);

struct keel_straggler {
	struct keel_straggler_config cfg;
	uint32_t cap, workers;
	double *spu;	 /* smoothed seconds per unit of work, per plan worker; 0: not yet */
	double *load;	 /* smoothed load */
	double *scratch; /* task times handed to keel_plan_repair */
	uint32_t above;	 /* steps in a row over a limit */
	uint64_t steps, last_repair;
	bool repaired;
	double promised_s; /* the last repair's predicted step time */
};

/* Doubles of storage for up to `workers_max` members. */
size_t keel_straggler_storage_doubles(uint32_t workers_max);

/* mem: keel_straggler_storage_doubles(workers_max) doubles. -EINVAL: a config value out of
 * range (skew_max <= 1, load_max not in (0, 1], smoothing not in (0, 1], rate_step_max < 1,
 * persist_steps 0) or workers_max 0; -ENOSPC: mem too small. */
KEEL_MUST_USE int keel_straggler_init(struct keel_straggler *s, double *mem, size_t mem_doubles,
				      uint32_t workers_max,
				      const struct keel_straggler_config *cfg);

/* Forget what was measured, and the repairs: after a view change (the plan's workers
 * changed). */
void keel_straggler_reset(struct keel_straggler *s);

/* A plan for a new view: workers `members` (their ranks become the workers' ids), equal
 * nominal rates (keel measures speeds, it is not told them), the plan's items placed by LPT,
 * and what the controller measured forgotten (keel_straggler_reset). Every member calling it
 * with the same list gets the same plan. wk: scratch for `count` workers, the caller's.
 * Returns 0, -EINVAL (count 0, a duplicate rank), -ENOSPC (count above the plan's workers_max),
 * or the planner's error. */
KEEL_MUST_USE int keel_straggler_plan_view(struct keel_straggler *s, struct keel_plan *p,
					   const uint32_t *members, uint32_t count,
					   struct keel_worker *wk);

struct keel_straggler_decision {
	double skew;	   /* max/min of this step's times (members with work) */
	bool over;	   /* over a limit this step */
	bool repaired;	   /* the plan was re-partitioned now */
	double before_s;   /* repair: predicted step time of the old plan at the measured rates */
	double after_s;	   /* repair: the new plan's predicted step time */
	uint32_t moved;	   /* repair: items that changed worker */
	double moved_work; /* repair: their work */
	uint32_t drained;  /* repair: members given nothing (overloaded or suspected) */
};

/* One step's measurements, indexed like the plan's workers: time_s[w] the compute time of
 * worker w for its current work (<= 0 or not finite: not measured this step), load[w] its
 * load 0..1 (NULL: none). A change in the plan's worker count resets the controller.
 * Returns 0 (d says what happened), -EINVAL (no plan, NULL times), -ENOSPC (more workers
 * than workers_max), or keel_plan_repair's error. */
KEEL_MUST_USE int keel_straggler_step(struct keel_straggler *s, struct keel_plan *p,
				      const double *time_s, const double *load,
				      struct keel_straggler_decision *d);

#ifdef __cplusplus
}
#endif

#endif
