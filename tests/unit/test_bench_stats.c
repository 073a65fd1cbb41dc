/* keel-bench's median: linear-time selection (a long run's sort kept its rank from polling)
 * gives what sorting gives, for odd and even counts, ties, sorted, reversed and random
 * inputs. */
#include <stdlib.h>
#include <string.h>

/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bench_stats.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double sorted_median(const double *v, uint32_t n)
{
	double *s = malloc(n * sizeof(double));
	assert_non_null(s);
	memcpy(s, v, n * sizeof(double));
	qsort(s, n, sizeof(double), cmp_double);
	double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	free(s);
	return m;
}

static void check(const double *v, uint32_t n)
{
	double *w = malloc(n * sizeof(double));
	assert_non_null(w);
	memcpy(w, v, n * sizeof(double));
	double want = sorted_median(v, n), got = bench_median(w, n);
	free(w);
	assert_true(got == want);
}

static void test_bench_median_small(void **state)
{
	(void)state;
	const double one[] = {3.5};
	const double two[] = {9, 1};
	const double even[] = {4, 1, 3, 2};	    /* 2.5: the mean of the middle two */
	const double ties[] = {2, 2, 2, 5, 2, 2};   /* 2 */
	const double gap[] = {1, 1, 1, 10, 10, 10}; /* 5.5: the middle two differ */
	check(one, 1);
	check(two, 2);
	check(even, 4);
	check(ties, 6);
	check(gap, 6);
	double e[] = {4, 1, 3, 2};
	assert_true(bench_median(e, 4) == 2.5);
	double g[] = {1, 10, 1, 10, 1, 10};
	assert_true(bench_median(g, 6) == 5.5);
}

static void test_bench_median_orders(void **state)
{
	(void)state;
	enum { N = 1001 };
	static double v[N];
	for (uint32_t n = 1; n <= N; n += n < 40 ? 1 : 97) {
		for (uint32_t i = 0; i < n; i++)
			v[i] = i; /* sorted */
		check(v, n);
		for (uint32_t i = 0; i < n; i++)
			v[i] = n - i; /* reversed */
		check(v, n);
		for (uint32_t i = 0; i < n; i++)
			v[i] = i % 3; /* few values, many ties */
		check(v, n);
	}
}

static void test_bench_median_random(void **state)
{
	(void)state;
	const char *seed_env = getenv("SEED");
	unsigned seed = seed_env != NULL ? (unsigned)strtoul(seed_env, NULL, 10) : 20261204u;
	print_message("test_bench_median_random: SEED=%u\n", seed);
	srand(seed);
	static double v[4096];
	for (int t = 0; t < 2000; t++) {
		uint32_t n = 1 + (uint32_t)rand() % 4096;
		int spread = t % 3 == 0 ? 4 : 1000000; /* every third: heavy ties */
		for (uint32_t i = 0; i < n; i++)
			v[i] = (double)(rand() % spread) / 7.0;
		check(v, n);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bench_median_small),
	    cmocka_unit_test(test_bench_median_orders),
	    cmocka_unit_test(test_bench_median_random),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
