/* keel-train's model and data: the digits load, the gradient matches finite differences, the
 * epoch order is a seeded permutation, a short training run learns the digits, and the
 * tensor-parallel split (--tp) computes the same gradient as one process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_model.h"

static struct train_data g_d;
static uint64_t g_seed;

static int load(void **state)
{
	(void)state;
	char err[256];
	if (train_data_load(&g_d, TRAIN_DIGITS_PATH, err, sizeof(err)) != 0) {
		printf("skipped: %s\n", err);
		exit(77);
	}
	return 0;
}

static void test_train_data_loads(void **state)
{
	(void)state;
	assert_int_equal(g_d.count, 1797);
	assert_int_equal(g_d.train_count + g_d.test_count, 1797);
	assert_int_equal(g_d.test_count, 359);
	uint32_t per_class[TRAIN_OUT] = {0};
	for (uint32_t i = 0; i < g_d.count; i++) {
		per_class[g_d.y[i]]++;
		for (uint32_t j = 0; j < TRAIN_IN; j++)
			assert_true(g_d.x[i][j] >= 0 && g_d.x[i][j] <= 1);
	}
	for (uint32_t k = 0; k < TRAIN_OUT; k++)
		assert_true(per_class[k] > 150);
	char err[256];
	static struct train_data bad;
	assert_int_equal(train_data_load(&bad, "/nonexistent.csv.gz", err, sizeof(err)), -ENOENT);
}

static void test_train_gradient_matches_finite_differences(void **state)
{
	(void)state;
	static float w[TRAIN_PARAMS];
	static double g[TRAIN_PARAMS], g2[TRAIN_PARAMS];
	train_model_init(w, g_seed);
	bool ok;
	(void)train_model_grad(w, g_d.x[3], g_d.y[3], g, &ok);
	uint64_t s = g_seed;
	for (int t = 0; t < 40; t++) {
		uint32_t i = (uint32_t)(train_rng_next(&s) % TRAIN_PARAMS);
		float keep = w[i], h = 1e-2f;
		w[i] = keep + h;
		memset(g2, 0, sizeof(g2));
		double lp = train_model_grad(w, g_d.x[3], g_d.y[3], g2, &ok);
		w[i] = keep - h;
		double lm = train_model_grad(w, g_d.x[3], g_d.y[3], g2, &ok);
		w[i] = keep;
		double num = (lp - lm) / (2.0 * ((double)(keep + h) - keep));
		assert_true(fabs(num - g[i]) <= 1e-3 + 1e-2 * fabs(g[i]));
	}
}

static void test_train_epoch_order_is_permutation(void **state)
{
	(void)state;
	static uint32_t a[TRAIN_SAMPLES_MAX], b[TRAIN_SAMPLES_MAX];
	static uint8_t seen[TRAIN_SAMPLES_MAX];
	train_epoch_order(a, g_d.train_count, g_seed, 3);
	train_epoch_order(b, g_d.train_count, g_seed, 3);
	assert_memory_equal(a, b, g_d.train_count * sizeof(uint32_t));
	memset(seen, 0, sizeof(seen));
	for (uint32_t i = 0; i < g_d.train_count; i++) {
		assert_true(a[i] < g_d.train_count);
		assert_int_equal(seen[a[i]]++, 0);
	}
	train_epoch_order(b, g_d.train_count, g_seed, 4);
	assert_true(memcmp(a, b, g_d.train_count * sizeof(uint32_t)) != 0);
}

static void test_train_learns_digits(void **state)
{
	(void)state;
	static float w[TRAIN_PARAMS];
	static double g[TRAIN_PARAMS];
	static uint32_t order[TRAIN_SAMPLES_MAX];
	train_model_init(w, g_seed);
	const uint32_t batch = 16;
	for (uint64_t e = 0; e < 10; e++) {
		train_epoch_order(order, g_d.train_count, g_seed, e);
		for (uint32_t s = 0; s + batch <= g_d.train_count; s += batch) {
			memset(g, 0, sizeof(g));
			for (uint32_t i = 0; i < batch; i++) {
				bool ok;
				uint32_t x = g_d.train[order[s + i]];
				(void)train_model_grad(w, g_d.x[x], g_d.y[x], g, &ok);
			}
			train_model_sgd(w, g, 0.2f, batch);
		}
	}
	double acc = train_model_accuracy(w, &g_d, g_d.test, g_d.test_count);
	printf("test accuracy after 10 epochs: %.2f %%\n", 100 * acc);
	assert_true(acc > 0.9);
}

/* One replica of `tp` members, the collectives done by hand (AllGather: the blocks side by side;
 * ReduceScatter: block i summed over the members): each member's shard gradient must be the
 * one-process gradient of the parameters it holds, and the step the same step. */
static void check_split(uint32_t tp, uint32_t n, uint32_t cap, uint32_t first)
{
	static float w[TRAIN_PARAMS], wt[TRAIN_PARAMS];
	static double full[TRAIN_PARAMS];
	const float *x[TRAIN_SAMPLES_MAX];
	uint8_t y[TRAIN_SAMPLES_MAX];
	train_model_init(w, g_seed + tp);
	memset(full, 0, sizeof(full));
	double loss = 0, hits = 0;
	for (uint32_t s = 0; s < n; s++) {
		x[s] = g_d.x[first + s];
		y[s] = g_d.y[first + s];
		bool ok;
		loss += train_model_grad(w, x[s], y[s], full, &ok);
		hits += ok;
	}
	uint32_t glen = train_tp_gather_len(tp, cap), slen = train_tp_scatter_len(tp, cap),
		 glen_grad = train_tp_grad_len(tp);
	double *gathered = calloc((size_t)tp * glen, sizeof(double));
	double *scatter = calloc((size_t)tp * tp * slen, sizeof(double));
	double *mine = calloc(slen, sizeof(double)), *grad = calloc(glen_grad, sizeof(double));
	assert_non_null(gathered);
	assert_non_null(scatter);
	assert_non_null(mine);
	assert_non_null(grad);
	struct train_tp_batch b = {.tp = tp, .n = n, .cap = cap, .x = x, .y = y};
	for (b.index = 0; b.index < tp; b.index++)
		train_tp_hidden(w, &b, gathered + (size_t)b.index * glen);
	for (b.index = 0; b.index < tp; b.index++)
		train_tp_output(w, &b, gathered, scatter + (size_t)b.index * tp * slen);
	memcpy(wt, w, sizeof(w));
	for (b.index = 0; b.index < tp; b.index++) {
		memset(mine, 0, slen * sizeof(double));
		for (uint32_t m = 0; m < tp; m++)
			for (uint32_t k = 0; k < slen; k++)
				mine[k] += scatter[((size_t)m * tp + b.index) * slen + k];
		train_tp_backward(&b, gathered + (size_t)b.index * glen, mine, grad);
		struct train_span sp[3];
		train_tp_spans(tp, b.index, sp);
		uint32_t k = 0;
		for (uint32_t i = 0; i < 3; i++)
			for (uint32_t j = 0; j < sp[i].len; j++, k++)
				assert_true(fabs(grad[k] - full[sp[i].off + j]) <=
					    1e-12 * (1 + fabs(full[sp[i].off + j])));
		assert_int_equal(k, glen_grad - 3);
		assert_true(fabs(grad[k] - loss) <= 1e-9 * loss);
		assert_true(grad[k + 1] == hits && grad[k + 2] == n);
		/* each member steps its own copy; W2 and b2 come out the same at every one */
		static float wm[TRAIN_PARAMS];
		memcpy(wm, w, sizeof(w));
		train_tp_sgd(wm, tp, b.index, grad, 0.1f, n > 0 ? n : 1);
		for (uint32_t i = 0; i < 3; i++)
			for (uint32_t j = 0; j < sp[i].len; j++) {
				uint32_t o = sp[i].off + j;
				if (i == 2 && b.index > 0)
					assert_true(wm[o] == wt[o]); /* as member 0 stepped it */
				else
					wt[o] = wm[o];
			}
	}
	train_model_sgd(w, full, 0.1f, n > 0 ? n : 1);
	for (uint32_t i = 0; i < TRAIN_PARAMS; i++)
		assert_true(fabsf(w[i] - wt[i]) <= 1e-6f);
	free(gathered);
	free(scatter);
	free(mine);
	free(grad);
}

static void test_train_tensor_parallel_split_is_exact(void **state)
{
	(void)state;
	check_split(2, 13, 16, 5);   /* an odd count: member 0 computes 7 losses, member 1 six */
	check_split(2, 16, 16, 100); /* a full buffer */
	check_split(4, 3, 8, 40);    /* fewer samples than members: member 3 computes none */
	check_split(TRAIN_TP_MAX, 40, 64, 200); /* one unit per member */
	check_split(2, 0, 8, 0);		/* a replica with no sample this step */
}

int main(void)
{
	const char *s = getenv("SEED");
	g_seed = s != NULL ? strtoull(s, NULL, 0) : 1;
	printf("SEED=%" PRIu64 "\n", g_seed);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_train_data_loads),
	    cmocka_unit_test(test_train_gradient_matches_finite_differences),
	    cmocka_unit_test(test_train_epoch_order_is_permutation),
	    cmocka_unit_test(test_train_learns_digits),
	    cmocka_unit_test(test_train_tensor_parallel_split_is_exact),
	};
	return cmocka_run_group_tests(tests, load, NULL);
}
