/* The straggler controller on a 64-shard plan of 4 workers, fed the step times their shards
 * would take at given speeds: a worker 4x slower from step 50 is repaired within 5 steps to
 * about its share of the capacity, and then left alone (no oscillation); noise, a short
 * slowdown and an alternating one repair nothing; an overloaded worker is drained; a 20x
 * slowdown is closed in bounded steps (rate_step_max) after the hold; two controllers given the
 * same inputs make the same plans; a job's cold first step does not lift the short steps
 * after it over the time floor; bad configs are refused. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/straggler.h"

#define W      4u
#define SHARDS 64u

static uint64_t g_seed;

struct rig {
	struct keel_plan *plan;
	_Alignas(16) uint8_t plan_mem[1 << 16];
	struct keel_straggler s;
	double mem[3 * W];
};

static void rig_init(struct rig *r, const struct keel_straggler_config *cfg)
{
	struct keel_plan_config pc = {.workers_max = W, .items_max = SHARDS};
	assert_int_equal(keel_plan_init(&r->plan, r->plan_mem, sizeof(r->plan_mem), &pc), 0);
	struct keel_worker wk[W];
	memset(wk, 0, sizeof(wk));
	for (uint32_t i = 0; i < W; i++) {
		wk[i].id = i;
		wk[i].rate = 1.0;
	}
	assert_int_equal(keel_plan_set_workers(r->plan, wk, W), 0);
	struct keel_item items[SHARDS];
	memset(items, 0, sizeof(items));
	for (uint32_t i = 0; i < SHARDS; i++)
		items[i] = (struct keel_item){.work = 1.0, .key = i};
	assert_int_equal(keel_plan_set_items(r->plan, items, SHARDS), 0);
	struct keel_plan_result res;
	assert_int_equal(keel_plan_items_lpt(r->plan, &res), 0);
	struct keel_straggler_config c;
	keel_straggler_config_default(&c);
	assert_int_equal(keel_straggler_init(&r->s, r->mem, 3 * W, W, cfg != NULL ? cfg : &c), 0);
}

static double work_of(struct rig *r, uint32_t w)
{
	struct keel_plan_load pl;
	assert_int_equal(keel_plan_worker_load(r->plan, w, &pl), 0);
	return pl.work;
}

/* time = work / speed, times (1 + noise * u), u uniform in [-1, 1]; a unit of work takes
 * 80 us at speed 1 (the plan's nominal rates are 1.0: other units, as in a real job) */
static void times_for(struct rig *r, const double *speed, double noise, double *t)
{
	for (uint32_t w = 0; w < W; w++) {
		double u = noise > 0 ? 2.0 * rand() / RAND_MAX - 1.0 : 0.0;
		t[w] = 80e-6 * work_of(r, w) / speed[w] * (1 + noise * u);
	}
}

static void test_slow_worker_repaired_and_left_alone(void **state)
{
	(void)state;
	struct rig r;
	rig_init(&r, NULL);
	double speed[W] = {1, 1, 1, 1}, t[W];
	struct keel_straggler_decision d;
	uint64_t repaired_at = 0;
	uint32_t repairs = 0;
	for (uint64_t step = 0; step < 300; step++) {
		if (step == 50)
			speed[2] = 0.25;
		times_for(&r, speed, 0, t);
		assert_int_equal(keel_straggler_step(&r.s, r.plan, t, NULL, &d), 0);
		if (d.repaired) {
			repairs++;
			repaired_at = step;
			assert_true(d.after_s < d.before_s / 2);
			assert_true(d.moved > 0);
		}
	}
	assert_int_equal(repairs, 1);
	assert_true(repaired_at >= 50 && repaired_at <= 55);
	/* worker 2 holds about its share of the capacity: 0.25 / 3.25 of 64 shards = 4.9 */
	double w2 = work_of(&r, 2);
	assert_true(w2 >= 2 && w2 <= 8);
	/* the step (slowest worker) within 25 % of the capacity-weighted ideal 64 / 3.25 */
	double step_s = 0;
	for (uint32_t w = 0; w < W; w++)
		step_s = fmax(step_s, work_of(&r, w) / speed[w]);
	assert_true(step_s <= 1.25 * SHARDS / 3.25);
	assert_true(d.skew < 1.5); /* and the times stay balanced */
}

static void test_noise_and_short_slowdowns_repair_nothing(void **state)
{
	(void)state;
	struct rig r;
	rig_init(&r, NULL);
	srand((unsigned)g_seed);
	double speed[W] = {1, 1, 1, 1}, t[W];
	struct keel_straggler_decision d;
	for (uint64_t step = 0; step < 2000; step++) {
		/* 30 % noise; a 2-step 4x slowdown every 100 steps; one worker alternating 3x
		 * slow and fast for a while */
		speed[1] = step % 100 < 2 ? 0.25 : 1.0;
		speed[3] = step >= 1010 && step < 1090 && step % 2 == 0 ? 1.0 / 3 : 1.0;
		times_for(&r, speed, 0.3, t);
		assert_int_equal(keel_straggler_step(&r.s, r.plan, t, NULL, &d), 0);
		if (d.repaired)
			print_error("repaired at step %" PRIu64 ", skew %.2f\n", step, d.skew);
		assert_false(d.repaired);
	}
}

static void test_overloaded_worker_drained(void **state)
{
	(void)state;
	struct rig r;
	rig_init(&r, NULL);
	double speed[W] = {1, 1, 1, 1}, t[W], load[W] = {0.1, 0.95, 0.1, 0.1};
	struct keel_straggler_decision d;
	uint32_t step = 0;
	do {
		times_for(&r, speed, 0, t);
		assert_int_equal(keel_straggler_step(&r.s, r.plan, t, load, &d), 0);
		step++;
	} while (!d.repaired && step < 10);
	assert_true(d.repaired);
	assert_int_equal(d.drained, 1);
	assert_true(work_of(&r, 1) == 0);
}

static void test_rate_step_bounds_each_repair(void **state)
{
	(void)state;
	struct keel_straggler_config c;
	keel_straggler_config_default(&c);
	c.hold_steps = 10;
	struct rig r;
	rig_init(&r, &c);
	double speed[W] = {1, 1, 0.05, 1}, t[W];
	struct keel_straggler_decision d;
	uint64_t first = UINT64_MAX, last = 0;
	uint32_t repairs = 0;
	for (uint64_t step = 0; step < 200; step++) {
		times_for(&r, speed, 0, t);
		assert_int_equal(keel_straggler_step(&r.s, r.plan, t, NULL, &d), 0);
		if (!d.repaired)
			continue;
		repairs++;
		first = first == UINT64_MAX ? step : first;
		last = step;
		/* its share of the rate fell by about 4x at most (to ~0.06 of the total), not to
		 * the 0.05 / 3.05 = 0.016 its speed says */
		if (repairs == 1) {
			double sum = 0;
			for (uint32_t w = 0; w < W; w++)
				sum += keel_worker_rate(keel_plan_worker(r.plan, w));
			assert_true(keel_worker_rate(keel_plan_worker(r.plan, 2)) / sum >= 0.05);
		}
		if (repairs > 1)
			assert_true(step - first >= c.hold_steps);
	}
	assert_true(repairs >= 2 && repairs <= 3);
	(void)last;
	double w2 = work_of(&r, 2); /* its share: 0.05 / 3.05 of 64 = 1.05 */
	assert_true(w2 <= 3);
}

/* Under the time floor a 4x slower worker is left alone (the fastest takes 16 x 80 us =
 * 1.3 ms, the floor 2 ms); lower the floor and it is repaired. */
static void test_time_floor(void **state)
{
	(void)state;
	for (int low = 0; low < 2; low++) {
		struct keel_straggler_config c;
		keel_straggler_config_default(&c);
		c.time_floor_s = low ? 1e-3 : 2e-3;
		struct rig r;
		rig_init(&r, &c);
		double speed[W] = {1, 1, 0.25, 1}, t[W];
		struct keel_straggler_decision d;
		uint32_t repairs = 0;
		for (uint64_t step = 0; step < 50; step++) {
			times_for(&r, speed, 0, t);
			assert_int_equal(keel_straggler_step(&r.s, r.plan, t, NULL, &d), 0);
			repairs += d.repaired;
		}
		assert_int_equal(repairs, low ? 1 : 0);
	}
}

/* A job's first step is slow on every member, unevenly (cold caches, first reads): 10-50x.
 * The smoothed times keep it for a few steps, but the steps after it are below the floor (the
 * fastest 1.3 ms, the floor 2 ms), so their skew (a member 4x slower for three steps, then
 * none) repairs nothing. Judged on the smoothed times alone, steps 0-2 counted and the plan
 * was repaired at step 2. */
static void test_cold_first_step(void **state)
{
	(void)state;
	struct keel_straggler_config c;
	keel_straggler_config_default(&c);
	c.time_floor_s = 2e-3;
	struct rig r;
	rig_init(&r, &c);
	double cold[W] = {0.1, 0.02, 0.05, 0.03}, skewed[W] = {1, 1, 0.25, 1},
	       even[W] = {1, 1, 1, 1};
	double t[W];
	struct keel_straggler_decision d;
	uint32_t repairs = 0, over = 0;
	for (uint64_t step = 0; step < 40; step++) {
		times_for(&r, step == 0 ? cold : step <= 3 ? skewed : even, 0, t);
		assert_int_equal(keel_straggler_step(&r.s, r.plan, t, NULL, &d), 0);
		repairs += d.repaired;
		over += d.over;
		if (step == 0)
			assert_true(d.over); /* the cold step itself is above the floor */
	}
	assert_int_equal(over, 1);
	assert_int_equal(repairs, 0);
}

static void test_same_inputs_same_plans(void **state)
{
	(void)state;
	static struct rig a, b;
	rig_init(&a, NULL);
	rig_init(&b, NULL);
	srand((unsigned)g_seed);
	double speed[W] = {1, 0.5, 1, 0.2}, t[W];
	struct keel_straggler_decision da, db;
	for (uint64_t step = 0; step < 300; step++) {
		times_for(&a, speed, 0.2, t); /* both get the same (reduced) times */
		assert_int_equal(keel_straggler_step(&a.s, a.plan, t, NULL, &da), 0);
		assert_int_equal(keel_straggler_step(&b.s, b.plan, t, NULL, &db), 0);
		assert_int_equal(da.repaired, db.repaired);
		for (uint32_t i = 0; i < SHARDS; i++)
			assert_int_equal(keel_plan_owner(a.plan, i), keel_plan_owner(b.plan, i));
	}
}

/* keel_straggler_plan_view: two members given the same view make the same equal plan; a repair
 * is forgotten (the controller measures afresh), a lost worker's shards move to the others;
 * an empty or too large view is refused. */
static void test_plan_view(void **state)
{
	(void)state;
	static struct rig a, b;
	rig_init(&a, NULL);
	rig_init(&b, NULL);
	struct keel_worker wk[W + 1];
	static const uint32_t view[] = {0, 1, 3}, big[] = {0, 1, 2, 3, 4};
	double speed[W] = {1, 1, 0.25, 1}, t[W];
	struct keel_straggler_decision d = {0};
	for (uint64_t step = 0; step < 10 && !d.repaired; step++) {
		times_for(&a, speed, 0, t);
		assert_int_equal(keel_straggler_step(&a.s, a.plan, t, NULL, &d), 0);
	}
	assert_true(d.repaired); /* a holds a repaired plan, b the first one */
	assert_int_equal(keel_straggler_plan_view(&a.s, a.plan, view, 3, wk), 0);
	assert_int_equal(keel_straggler_plan_view(&b.s, b.plan, view, 3, wk), 0);
	for (uint32_t i = 0; i < SHARDS; i++) {
		assert_int_equal(keel_plan_owner(a.plan, i), keel_plan_owner(b.plan, i));
		assert_true(keel_plan_owner(a.plan, i) < 3);
	}
	for (uint32_t w = 0; w < 3; w++) /* equal rates: 64 shards as 22/21/21 */
		assert_true(work_of(&a, w) >= 21 && work_of(&a, w) <= 22);
	assert_int_equal(a.s.workers, 0); /* measurements forgotten */
	assert_int_equal(keel_straggler_plan_view(&a.s, a.plan, view, 0, wk), -EINVAL);
	assert_int_equal(keel_straggler_plan_view(&a.s, a.plan, big, 5, wk), -ENOSPC);
}

static void test_bad_config_refused(void **state)
{
	(void)state;
	struct keel_straggler s;
	double mem[3 * W];
	struct keel_straggler_config c, bad;
	keel_straggler_config_default(&c);
	assert_int_equal(keel_straggler_init(&s, mem, 3 * W - 1, W, &c), -ENOSPC);
	assert_int_equal(keel_straggler_init(&s, mem, 3 * W, 0, &c), -EINVAL);
	bad = c;
	bad.skew_max = 1.0;
	assert_int_equal(keel_straggler_init(&s, mem, 3 * W, W, &bad), -EINVAL);
	bad = c;
	bad.load_max = 1.5;
	assert_int_equal(keel_straggler_init(&s, mem, 3 * W, W, &bad), -EINVAL);
	bad = c;
	bad.smoothing = 0;
	assert_int_equal(keel_straggler_init(&s, mem, 3 * W, W, &bad), -EINVAL);
	bad = c;
	bad.rate_step_max = 0.5;
	assert_int_equal(keel_straggler_init(&s, mem, 3 * W, W, &bad), -EINVAL);
	bad = c;
	bad.time_floor_s = -1;
	assert_int_equal(keel_straggler_init(&s, mem, 3 * W, W, &bad), -EINVAL);
	bad = c;
	bad.persist_steps = 0;
	assert_int_equal(keel_straggler_init(&s, mem, 3 * W, W, &bad), -EINVAL);
	assert_int_equal(keel_straggler_init(&s, mem, 3 * W, W, &c), 0);
	struct keel_straggler_decision d;
	double t[W] = {1, 1, 1, 1};
	assert_int_equal(keel_straggler_step(&s, NULL, t, NULL, &d), -EINVAL);
}

int main(void)
{
	const char *e = getenv("SEED");
	g_seed = e != NULL ? strtoull(e, NULL, 0) : 1;
	printf("SEED=%" PRIu64 "\n", g_seed);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_slow_worker_repaired_and_left_alone),
	    cmocka_unit_test(test_noise_and_short_slowdowns_repair_nothing),
	    cmocka_unit_test(test_overloaded_worker_drained),
	    cmocka_unit_test(test_rate_step_bounds_each_repair),
	    cmocka_unit_test(test_time_floor),
	    cmocka_unit_test(test_cold_first_step),
	    cmocka_unit_test(test_same_inputs_same_plans),
	    cmocka_unit_test(test_plan_view),
	    cmocka_unit_test(test_bad_config_refused),
	};
	return cmocka_run_group_tests_name("straggler", tests, NULL, NULL);
}
