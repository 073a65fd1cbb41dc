/* keel-sim's multi-fidelity arithmetic (sim/fidelity.c), without SimGrid: a leap is the most
 * whole steps (with their checkpoints) that fit its room, checked against a brute-force count
 * over seeded random cases; steady means the newest run of periods whose halves agree, so a
 * transient after an event is left out, a job still settling is not steady, a window shorter
 * than the heartbeats' span waits, and the spread of the periods is reported. Seeded: the seed
 * is printed first; SEED=n replays a run. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "sim_int.h"

static uint64_t g_seed;

static uint64_t next_rand(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double uniform(uint64_t *x, double lo, double hi)
{
	return lo + (hi - lo) * (double)(next_rand(x) >> 11) / 9007199254740992.0;
}

/* The span of k steps counted one by one, as keel-sim's full run would spend it. */
static double span_slow(uint64_t k, double period, uint64_t done, uint32_t every, double write)
{
	double t = 0;
	for (uint64_t i = 1; i <= k; i++) {
		t += period;
		if (every != 0 && (done + i) % every == 0)
			t += write;
	}
	return t;
}

static void test_sim_fidelity_plan_is_the_most_that_fits(void **state)
{
	(void)state;
	uint64_t rs = g_seed;
	for (int c = 0; c < 2000; c++) {
		double period = uniform(&rs, 0.001, 0.5), room = uniform(&rs, 0, 300 * period);
		uint32_t every = (uint32_t)(next_rand(&rs) % 4 == 0 ? 0 : 1 + next_rand(&rs) % 50);
		double write = uniform(&rs, 0, 20 * period);
		uint64_t done = next_rand(&rs) % 1000, k_best = 0;
		while (span_slow(k_best + 1, period, done, every, write) <= room)
			k_best++;
		struct sim_ff_skip sk;
		sim_ff_plan(&sk, room, period, done, every, write, 1);
		assert_int_equal(sk.steps, k_best);
		if (k_best == 0)
			continue;
		assert_true(fabs(sk.dur_s - span_slow(k_best, period, done, every, write)) <
			    1e-9 * room + 1e-12);
		assert_true(sk.dur_s <= room);
		assert_true(sk.period_s == period);
		uint32_t ckpts = 0;
		for (uint64_t i = 1; i <= k_best; i++)
			ckpts += every != 0 && (done + i) % every == 0;
		assert_int_equal(sk.ckpts, ckpts);
	}
}

static void test_sim_fidelity_plan_refuses_short_leaps(void **state)
{
	(void)state;
	struct sim_ff_skip sk;
	sim_ff_plan(&sk, 0.9, 0.1, 0, 0, 0, 10); /* 9 steps fit, 10 asked */
	assert_int_equal(sk.steps, 0);
	assert_true(sk.dur_s == 0);
	sim_ff_plan(&sk, 1.0, 0.1, 0, 0, 0, 10);
	assert_int_equal(sk.steps, 10);
	sim_ff_plan(&sk, -1, 0.1, 0, 0, 0, 1); /* the next event is already too close */
	assert_int_equal(sk.steps, 0);
	sim_ff_plan(&sk, 5, 0, 0, 0, 0, 1); /* no period measured */
	assert_int_equal(sk.steps, 0);
}

static void test_sim_fidelity_steady_leaves_the_transient_out(void **state)
{
	(void)state;
	struct sim_ff ff;
	struct sim_ff_stats st;
	sim_ff_reset(&ff);
	for (int i = 0; i < 5; i++) /* a recovery's first steps: slow */
		sim_ff_add(&ff, 0.300);
	for (int i = 0; i < 15; i++)
		sim_ff_add(&ff, 0.100);
	assert_false(sim_ff_steady(&ff, 16, 0, 0.002, &st)); /* 15 steady ones: too few */
	sim_ff_add(&ff, 0.100);
	assert_true(sim_ff_steady(&ff, 16, 0, 0.002, &st));
	assert_true(st.n >= 16 && st.n < 21);
	assert_true(fabs(st.mean_s - 0.100) < 0.100 * 0.002);
	for (int i = 0; i < 40; i++)
		sim_ff_add(&ff, 0.100);
	assert_true(sim_ff_steady(&ff, 16, 0, 0.002, &st));
	assert_true(st.n >= 40);
	assert_true(fabs(st.mean_s - 0.100) < 1e-3 * 0.100);
}

static void test_sim_fidelity_settling_is_not_steady(void **state)
{
	(void)state;
	struct sim_ff ff;
	struct sim_ff_stats st;
	sim_ff_reset(&ff);
	double p = 0.2;
	for (int i = 0; i < 200; i++, p *= 0.99) /* steps still getting faster */
		sim_ff_add(&ff, p);
	assert_false(sim_ff_steady(&ff, 16, 0, 0.002, &st));
}

static void test_sim_fidelity_window_spans_the_heartbeats(void **state)
{
	(void)state;
	struct sim_ff ff;
	struct sim_ff_stats st;
	sim_ff_reset(&ff);
	for (int i = 0; i < 100; i++) /* 100 ms of 1 ms steps, 400 ms asked for */
		sim_ff_add(&ff, 0.001);
	assert_false(sim_ff_steady(&ff, 16, 0.4, 0.002, &st));
	for (uint32_t i = 100; i < SIM_FF_WINDOW_MAX; i++) /* a full window judges anyway */
		sim_ff_add(&ff, 0.001);
	assert_true(sim_ff_steady(&ff, 16, 0.4, 0.002, &st));
	assert_int_equal(st.n, SIM_FF_WINDOW_MAX);
}

/* A step slowed by a timer now and then: the mean counts it, the range says how much a mean of
 * n such steps can be off. */
static void test_sim_fidelity_mean_and_range_of_a_pattern(void **state)
{
	(void)state;
	struct sim_ff ff;
	struct sim_ff_stats st;
	uint64_t rs = g_seed ^ 7;
	sim_ff_reset(&ff);
	double sum = 0;
	for (int i = 0; i < 100; i++) {
		double p = i % 8 == 5 ? 0.0245 : 0.0244 + uniform(&rs, 0, 1e-7);
		sim_ff_add(&ff, p);
		sum += p;
	}
	assert_true(sim_ff_steady(&ff, 16, 0, 0.002, &st));
	assert_int_equal(st.n, 100);
	assert_true(fabs(st.mean_s - sum / 100) < 1e-12);
	assert_true(st.range_s > 0.0001 - 1e-7 && st.range_s < 0.0001 + 2e-7);
}

int main(void)
{
	const char *env = getenv("SEED");
	g_seed = env != NULL ? strtoull(env, NULL, 0) : 0x51f1;
	printf("test_sim_fidelity: SEED=%" PRIu64 " (set SEED=n to replay)\n", g_seed);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sim_fidelity_plan_is_the_most_that_fits),
	    cmocka_unit_test(test_sim_fidelity_plan_refuses_short_leaps),
	    cmocka_unit_test(test_sim_fidelity_steady_leaves_the_transient_out),
	    cmocka_unit_test(test_sim_fidelity_settling_is_not_steady),
	    cmocka_unit_test(test_sim_fidelity_window_spans_the_heartbeats),
	    cmocka_unit_test(test_sim_fidelity_mean_and_range_of_a_pattern),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
