/* keel-sim's multi-fidelity arithmetic: between events a training job repeats one step, so once
 * the job's recent step periods are steady the run may leap whole steps at that period, up to a
 * guard before the next event. No SimGrid here: run.c measures, sleeps and accounts. */
#include <math.h>
#include <string.h>

#include "sim_int.h"

void sim_ff_reset(struct sim_ff *ff)
{
	memset(ff, 0, sizeof(*ff));
}

void sim_ff_add(struct sim_ff *ff, double period_s)
{
	ff->period_s[ff->head++ % SIM_FF_WINDOW_MAX] = period_s;
	if (ff->count < SIM_FF_WINDOW_MAX)
		ff->count++;
}

/* The i-th oldest period still held (0 <= i < count). */
static double period_at(const struct sim_ff *ff, uint32_t i)
{
	return ff->period_s[(ff->head - ff->count + i) % SIM_FF_WINDOW_MAX];
}

/* Is the job steady over its newest m periods: older and newer halves agree within tol? */
static bool halves_agree(const struct sim_ff *ff, uint32_t m, double tol, struct sim_ff_stats *st)
{
	double old_sum = 0, new_sum = 0, lo = INFINITY, hi = 0;
	for (uint32_t i = 0; i < m; i++) {
		double p = period_at(ff, ff->count - m + i);
		if (i < m / 2)
			old_sum += p;
		else
			new_sum += p;
		lo = fmin(lo, p);
		hi = fmax(hi, p);
	}
	double old_mean = old_sum / (m / 2), new_mean = new_sum / (m - m / 2);
	if (!(new_mean > 0) || fabs(old_mean - new_mean) > tol * new_mean)
		return false;
	st->n = m;
	st->mean_s = (old_sum + new_sum) / m;
	st->range_s = hi - lo;
	return true;
}

/* Steady: the longest run of newest periods (all held, or fewer when the oldest are a start's
 * or a recovery's transient) that is at least steps_min long, covers span_min_s (so the
 * heartbeats' and other timers' share of a step is in the mean) unless the window is full, and
 * whose older and newer halves agree within tol. A longer run makes a better mean: a step
 * slowed now and then by a timer weighs 1/n in it. O(count^2) at most, once a step. */
bool sim_ff_steady(const struct sim_ff *ff, uint32_t steps_min, double span_min_s, double tol,
		   struct sim_ff_stats *st)
{
	double span = 0;
	for (uint32_t i = 0; i < ff->count; i++)
		span += period_at(ff, i);
	for (uint32_t m = ff->count; m >= steps_min && m >= 2; m--) {
		if (span < span_min_s && ff->count < SIM_FF_WINDOW_MAX)
			return false; /* shorter runs span less still */
		if (halves_agree(ff, m, tol, st))
			return true;
		span -= period_at(ff, ff->count - m);
	}
	return false;
}

/* Checkpoints taken after steps done+1 .. done+k: multiples of every in that range. */
static uint64_t ckpts_in(uint64_t done, uint64_t k, uint32_t every)
{
	return every == 0 ? 0 : (done + k) / every - done / every;
}

/* Time k whole steps take, with the checkpoints among them. */
static double span_of(uint64_t k, double period_s, uint64_t done, uint32_t every, double write_s)
{
	return (double)k * period_s + (double)ckpts_in(done, k, every) * write_s;
}

void sim_ff_plan(struct sim_ff_skip *out, double room_s, double period_s, uint64_t steps_done,
		 uint32_t ckpt_every, double ckpt_write_s, uint64_t steps_min)
{
	memset(out, 0, sizeof(*out));
	if (!(period_s > 0) || !(room_s > 0))
		return;
	/* the span grows with k: the most that fits, by bisection (at most 64 rounds) */
	uint64_t lo = 0, hi = (uint64_t)floor(room_s / period_s);
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo + 1) / 2;
		if (span_of(mid, period_s, steps_done, ckpt_every, ckpt_write_s) <= room_s)
			lo = mid;
		else
			hi = mid - 1;
	}
	if (lo < steps_min || lo == 0)
		return;
	out->steps = lo;
	out->period_s = period_s;
	out->ckpts = (uint32_t)ckpts_in(steps_done, lo, ckpt_every);
	out->dur_s = span_of(lo, period_s, steps_done, ckpt_every, ckpt_write_s);
}
