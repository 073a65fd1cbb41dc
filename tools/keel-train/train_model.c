/* The 64-32-10 MLP and the digits data set for keel-train (see train_model.h). Never
 * allocates; the only I/O is reading the data set with zlib. */
#include "train_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Parameter layout: W1[HIDDEN][IN], b1[HIDDEN], W2[OUT][HIDDEN], b2[OUT]. */
#define OFF_W1 0u
#define OFF_B1 (OFF_W1 + TRAIN_IN * TRAIN_HIDDEN)
#define OFF_W2 (OFF_B1 + TRAIN_HIDDEN)
#define OFF_B2 (OFF_W2 + TRAIN_HIDDEN * TRAIN_OUT)
_Static_assert(OFF_B2 + TRAIN_OUT == TRAIN_PARAMS, "layout covers every parameter");

#define LINE_MAX_BYTES 1024

static int parse_line(struct train_data *d, char *line, uint32_t row)
{
	char *p = line;
	for (uint32_t c = 0; c <= TRAIN_IN; c++) {
		char *end;
		double v = strtod(p, &end);
		if (end == p || v < 0 || v > 16 || (c < TRAIN_IN && *end != ','))
			return -EINVAL;
		if (c == TRAIN_IN) {
			if (v > 9 || v != floor(v))
				return -EINVAL;
			d->y[row] = (uint8_t)v;
		} else {
			d->x[row][c] = (float)(v / 16.0);
		}
		p = end + 1;
	}
	return 0;
}

int train_data_load(struct train_data *d, const char *path, char *err, size_t err_len)
{
	gzFile f = gzopen(path, "rb");
	if (f == NULL) {
		snprintf(err, err_len, "cannot open %s (install python3-sklearn)", path);
		return -ENOENT;
	}
	char line[LINE_MAX_BYTES];
	int rc = 0;
	d->count = 0;
	while (gzgets(f, line, sizeof(line)) != NULL) {
		if (line[0] == '\n' || line[0] == '\0')
			continue;
		if (d->count == TRAIN_SAMPLES_MAX) {
			snprintf(err, err_len, "%s: more than %u rows", path, TRAIN_SAMPLES_MAX);
			rc = -ENOSPC;
			break;
		}
		if (parse_line(d, line, d->count) != 0) {
			snprintf(err, err_len, "%s: line %u is not 64 pixels and a label", path,
				 d->count + 1);
			rc = -EINVAL;
			break;
		}
		d->count++;
	}
	gzclose(f);
	if (rc == 0 && d->count == 0) {
		snprintf(err, err_len, "%s: no samples", path);
		rc = -EINVAL;
	}
	train_data_split(d);
	return rc;
}

void train_data_split(struct train_data *d)
{
	d->train_count = d->test_count = 0;
	for (uint32_t i = 0; i < d->count; i++) {
		if (i % 5 == 4)
			d->test[d->test_count++] = i;
		else
			d->train[d->train_count++] = i;
	}
}

uint64_t train_rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) /* [0, 1) */
{
	return (double)(train_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

void train_model_init(float *w, uint64_t seed)
{
	uint64_t s = seed;
	memset(w, 0, TRAIN_PARAMS * sizeof(float));
	double a1 = sqrt(6.0 / (TRAIN_IN + TRAIN_HIDDEN)),
	       a2 = sqrt(6.0 / (TRAIN_HIDDEN + TRAIN_OUT));
	for (uint32_t i = 0; i < TRAIN_IN * TRAIN_HIDDEN; i++)
		w[OFF_W1 + i] = (float)((2 * rng_unit(&s) - 1) * a1);
	for (uint32_t i = 0; i < TRAIN_HIDDEN * TRAIN_OUT; i++)
		w[OFF_W2 + i] = (float)((2 * rng_unit(&s) - 1) * a2);
}

/* Hidden activations and output probabilities. */
static void forward(const float *w, const float *x, double *h, double *prob)
{
	for (uint32_t j = 0; j < TRAIN_HIDDEN; j++) {
		double a = w[OFF_B1 + j];
		for (uint32_t i = 0; i < TRAIN_IN; i++)
			a += (double)w[OFF_W1 + j * TRAIN_IN + i] * x[i];
		h[j] = tanh(a);
	}
	double zmax = -INFINITY;
	for (uint32_t k = 0; k < TRAIN_OUT; k++) {
		double z = w[OFF_B2 + k];
		for (uint32_t j = 0; j < TRAIN_HIDDEN; j++)
			z += (double)w[OFF_W2 + k * TRAIN_HIDDEN + j] * h[j];
		prob[k] = z;
		zmax = z > zmax ? z : zmax;
	}
	double sum = 0;
	for (uint32_t k = 0; k < TRAIN_OUT; k++) {
		prob[k] = exp(prob[k] - zmax);
		sum += prob[k];
	}
	for (uint32_t k = 0; k < TRAIN_OUT; k++)
		prob[k] /= sum;
}

static uint32_t argmax(const double *v, uint32_t n)
{
	uint32_t best = 0;
	for (uint32_t i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

double train_model_grad(const float *w, const float *x, uint8_t y, double *grad, bool *correct)
{
	double h[TRAIN_HIDDEN], prob[TRAIN_OUT], dh[TRAIN_HIDDEN] = {0};
	forward(w, x, h, prob);
	*correct = argmax(prob, TRAIN_OUT) == y;
	double loss = -log(prob[y] > 1e-300 ? prob[y] : 1e-300);
	for (uint32_t k = 0; k < TRAIN_OUT; k++) {
		double dz = prob[k] - (k == y ? 1.0 : 0.0); /* softmax + cross-entropy */
		grad[OFF_B2 + k] += dz;
		for (uint32_t j = 0; j < TRAIN_HIDDEN; j++) {
			grad[OFF_W2 + k * TRAIN_HIDDEN + j] += dz * h[j];
			dh[j] += dz * w[OFF_W2 + k * TRAIN_HIDDEN + j];
		}
	}
	for (uint32_t j = 0; j < TRAIN_HIDDEN; j++) {
		double da = dh[j] * (1 - h[j] * h[j]);
		grad[OFF_B1 + j] += da;
		for (uint32_t i = 0; i < TRAIN_IN; i++)
			grad[OFF_W1 + j * TRAIN_IN + i] += da * x[i];
	}
	return loss;
}

uint32_t train_model_predict(const float *w, const float *x)
{
	double h[TRAIN_HIDDEN], prob[TRAIN_OUT];
	forward(w, x, h, prob);
	return argmax(prob, TRAIN_OUT);
}

void train_model_sgd(float *w, const double *grad_sum, float lr, uint32_t batch)
{
	double scale = (double)lr / (double)batch;
	for (uint32_t i = 0; i < TRAIN_PARAMS; i++)
		w[i] = (float)((double)w[i] - scale * grad_sum[i]);
}

double train_model_accuracy(const float *w, const struct train_data *d, const uint32_t *idx,
			    uint32_t n)
{
	uint32_t right = 0;
	for (uint32_t i = 0; i < n; i++)
		right += train_model_predict(w, d->x[idx[i]]) == d->y[idx[i]];
	return n == 0 ? 0 : (double)right / n;
}

void train_epoch_order(uint32_t *order, uint32_t n, uint64_t seed, uint64_t epoch)
{
	uint64_t s = seed ^ (0x5851f42d4c957f2dull * (epoch + 1));
	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(train_rng_next(&s) % i);
		uint32_t t = order[i - 1];
		order[i - 1] = order[j];
		order[j] = t;
	}
}
