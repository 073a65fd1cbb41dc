/* The straggler controller (keel/straggler.h): smoothed per-unit times, a trigger that must
 * persist, a hold after each repair, and bounded rate changes; the repair itself is
 * keel_plan_repair. Deterministic: the same inputs give the same decision on every member. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "assert_int.h"
#include "keel/straggler.h"

void keel_straggler_config_default(struct keel_straggler_config *cfg)
{
	*cfg = (struct keel_straggler_config){
	    .skew_max = KEEL_PLAN_SKEW_MAX_DEFAULT,
	    .load_max = KEEL_PLAN_LOAD_MAX_DEFAULT,
	    .persist_steps = 3,
	    .hold_steps = 20,
	    .smoothing = 0.5,
	    .rate_step_max = 4.0,
	};
}

size_t keel_straggler_storage_doubles(uint32_t workers_max)
{
	return 3 * (size_t)workers_max;
}

static bool config_ok(const struct keel_straggler_config *c)
{
	return c->skew_max > 1 && isfinite(c->skew_max) && c->load_max > 0 && c->load_max <= 1 &&
	       c->smoothing > 0 && c->smoothing <= 1 && c->rate_step_max >= 1 &&
	       isfinite(c->rate_step_max) && c->persist_steps > 0 && c->time_floor_s >= 0 &&
	       isfinite(c->time_floor_s);
}

int keel_straggler_init(struct keel_straggler *s, double *mem, size_t mem_doubles,
			uint32_t workers_max, const struct keel_straggler_config *cfg)
{
	if (s == NULL || mem == NULL || cfg == NULL || workers_max == 0 || !config_ok(cfg))
		return -EINVAL;
	if (mem_doubles < keel_straggler_storage_doubles(workers_max))
		return -ENOSPC;
	memset(s, 0, sizeof(*s));
	s->cfg = *cfg;
	s->cap = workers_max;
	s->spu = mem;
	s->load = mem + workers_max;
	s->scratch = mem + 2 * (size_t)workers_max;
	keel_straggler_reset(s);
	return 0;
}

void keel_straggler_reset(struct keel_straggler *s)
{
	KEEL_ASSERT(s != NULL && s->cap != 0);
	memset(s->spu, 0, s->cap * sizeof(double));
	memset(s->load, 0, s->cap * sizeof(double));
	s->above = 0;
	s->workers = 0;
	s->steps = s->last_repair = 0;
	s->repaired = false;
	s->promised_s = 0;
}

int keel_straggler_plan_view(struct keel_straggler *s, struct keel_plan *p, const uint32_t *members,
			     uint32_t count, struct keel_worker *wk)
{
	KEEL_ASSERT(s != NULL && p != NULL && (members != NULL || count == 0));
	KEEL_ASSERT(wk != NULL || count == 0);
	for (uint32_t i = 0; i < count; i++)
		wk[i] = (struct keel_worker){.id = members[i], .rate = 1.0};
	struct keel_plan_result res;
	int rc = keel_plan_set_workers(p, wk, count);
	if (rc == 0)
		rc = keel_plan_items_lpt(p, &res);
	keel_straggler_reset(s);
	return rc;
}

static double smooth(double old, double x, double a)
{
	return old == 0 ? x : (1 - a) * old + a * x;
}

/* Fold this step's measurements in; returns the skew of this step's own times (a trigger on the
 * smoothed ones would outlast a short slowdown by a few steps), the fastest of them, and
 * whether a member's smoothed load is over the limit (or it is suspected) while it still has
 * work. */
static double observe(struct keel_straggler *s, const struct keel_plan *p, const double *time_s,
		      const double *load, double *step_fastest, bool *overloaded)
{
	double lo = INFINITY, hi = 0;
	*overloaded = false;
	for (uint32_t w = 0; w < s->workers; w++) {
		struct keel_plan_load pl;
		int rc = keel_plan_worker_load(p, w, &pl);
		KEEL_ASSERT(rc == 0); /* w < the plan's worker count */
		if (load != NULL && load[w] >= 0 && isfinite(load[w]))
			s->load[w] = smooth(s->load[w], load[w], s->cfg.smoothing);
		if (pl.work > 0 && time_s[w] > 0 && isfinite(time_s[w]))
			s->spu[w] = smooth(s->spu[w], time_s[w] / pl.work, s->cfg.smoothing);
		const struct keel_worker *wk = keel_plan_worker(p, w);
		if (pl.work > 0 && (s->load[w] > s->cfg.load_max || wk->suspected))
			*overloaded = true;
		if (pl.work > 0 && time_s[w] > 0 && isfinite(time_s[w])) {
			lo = fmin(lo, time_s[w]);
			hi = fmax(hi, time_s[w]);
		}
	}
	*step_fastest = lo < INFINITY ? lo : 0;
	return hi > 0 && lo < INFINITY && lo > 0 ? hi / lo : 1.0;
}

/* The step time the current plan takes at the smoothed rates: its slowest worker's. */
static double predicted(const struct keel_straggler *s, const struct keel_plan *p)
{
	double step = 0;
	for (uint32_t w = 0; w < s->workers; w++) {
		struct keel_plan_load pl;
		int rc = keel_plan_worker_load(p, w, &pl);
		KEEL_ASSERT(rc == 0);
		if (s->spu[w] > 0)
			step = fmax(step, pl.work * s->spu[w]);
	}
	return step;
}

/* The fastest member's smoothed step time: a scheduling spike on one member moves only its
 * own, so this says whether the compute is long enough to be worth balancing. */
static double fastest(const struct keel_straggler *s, const struct keel_plan *p)
{
	double step = INFINITY;
	for (uint32_t w = 0; w < s->workers; w++) {
		struct keel_plan_load pl;
		int rc = keel_plan_worker_load(p, w, &pl);
		KEEL_ASSERT(rc == 0);
		if (pl.work > 0 && s->spu[w] > 0)
			step = fmin(step, pl.work * s->spu[w]);
	}
	return step < INFINITY ? step : 0;
}

/* Rates from the smoothed times, and the task times that give them to keel_plan_repair;
 * returns the old plan's predicted step time. The plan's rates and the measured ones may be
 * in different units (a nominal 1.0 against shards per second): each member's share of the
 * total rate changes by at most rate_step_max per repair. A member not measured keeps its
 * share. */
static double set_rates(struct keel_straggler *s, struct keel_plan *p)
{
	double before = predicted(s, p), old_sum = 0, new_sum = 0;
	for (uint32_t w = 0; w < s->workers; w++)
		if (s->spu[w] > 0) {
			old_sum += keel_worker_rate(keel_plan_worker(p, w));
			new_sum += 1.0 / s->spu[w];
		}
	double scale = old_sum > 0 ? new_sum / old_sum : 1.0; /* plan units to measured ones */
	for (uint32_t w = 0; w < s->workers; w++) {
		struct keel_plan_load pl;
		int rc = keel_plan_worker_load(p, w, &pl);
		KEEL_ASSERT(rc == 0);
		const struct keel_worker *wk = keel_plan_worker(p, w);
		double old = keel_worker_rate(wk) * scale, rate = old;
		if (s->spu[w] > 0) {
			rate = 1.0 / s->spu[w];
			rate = fmin(fmax(rate, old / s->cfg.rate_step_max),
				    old * s->cfg.rate_step_max);
		}
		rc = keel_plan_set_measured(p, w, rate, s->load[w], wk->suspected);
		KEEL_ASSERT(rc == 0); /* a positive finite rate, a load in range */
		s->scratch[w] = pl.work > 0 ? pl.work / rate : 0;
	}
	return before;
}

int keel_straggler_step(struct keel_straggler *s, struct keel_plan *p, const double *time_s,
			const double *load, struct keel_straggler_decision *d)
{
	if (s == NULL || p == NULL || time_s == NULL || d == NULL)
		return -EINVAL;
	memset(d, 0, sizeof(*d));
	uint32_t n = keel_plan_worker_count(p);
	if (n == 0)
		return -EINVAL;
	if (n > s->cap)
		return -ENOSPC;
	if (n != s->workers) {
		keel_straggler_reset(s);
		s->workers = n;
	}
	bool overloaded;
	double step_fastest;
	d->skew = observe(s, p, time_s, load, &step_fastest, &overloaded);
	/* The floor holds for this step's own times too: the smoothed ones keep a slow step for a
	 * few steps (a job's cold first step, or a pause of every member), and the skew of short
	 * times after it is noise, not a straggler. */
	bool long_enough =
	    fastest(s, p) >= s->cfg.time_floor_s && step_fastest >= s->cfg.time_floor_s;
	d->over = (d->skew > s->cfg.skew_max && long_enough) || overloaded;
	s->above = d->over ? s->above + 1 : 0;
	uint64_t step = s->steps++;
	bool held = s->repaired && step - s->last_repair < s->cfg.hold_steps;
	/* After a repair, only a step worse than it promised (by a quarter) calls for another:
	 * a plan that cannot do better (few items, a coarse hash) is not redone every hold. */
	bool kept = s->repaired && predicted(s, p) <= 1.25 * s->promised_s;
	if (s->above < s->cfg.persist_steps || held || kept)
		return 0;
	d->before_s = set_rates(s, p);
	/* decided here: the repair re-partitions on any skew, and drains as the policy says */
	struct keel_plan_policy pol = {.skew_max = 1.0, .load_max = s->cfg.load_max};
	struct keel_plan_result res;
	int rc = keel_plan_repair(p, &pol, s->scratch, &res);
	if (rc != 0)
		return rc;
	d->repaired = res.repartitioned;
	d->after_s = res.makespan_s;
	d->moved = res.moved;
	d->moved_work = res.moved_work;
	d->drained = res.drained;
	s->promised_s = res.makespan_s;
	s->repaired = true;
	s->last_repair = step;
	s->above = 0;
	return 0;
}
