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

void train_model_hidden(const float *w, const float *x, uint32_t lo, uint32_t n, double *h)
{
	for (uint32_t j = 0; j < n; j++) {
		double a = w[OFF_B1 + lo + j];
		for (uint32_t i = 0; i < TRAIN_IN; i++)
			a += (double)w[OFF_W1 + (lo + j) * TRAIN_IN + i] * x[i];
		h[j] = tanh(a);
	}
}

/* The output probabilities from the hidden activations (all TRAIN_HIDDEN of them). */
static void output_prob(const float *w, const double *h, double *prob)
{
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

/* Hidden activations and output probabilities. */
static void forward(const float *w, const float *x, double *h, double *prob)
{
	train_model_hidden(w, x, 0, TRAIN_HIDDEN, h);
	output_prob(w, h, prob);
}

static uint32_t argmax(const double *v, uint32_t n)
{
	uint32_t best = 0;
	for (uint32_t i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

double train_model_output(const float *w, const double *h, uint8_t y, double *grad, double *dh,
			  bool *correct)
{
	double prob[TRAIN_OUT];
	output_prob(w, h, prob);
	*correct = argmax(prob, TRAIN_OUT) == y;
	double loss = -log(prob[y] > 1e-300 ? prob[y] : 1e-300);
	memset(dh, 0, TRAIN_HIDDEN * sizeof(double));
	for (uint32_t k = 0; k < TRAIN_OUT; k++) {
		double dz = prob[k] - (k == y ? 1.0 : 0.0); /* softmax + cross-entropy */
		grad[OFF_B2 + k] += dz;
		for (uint32_t j = 0; j < TRAIN_HIDDEN; j++) {
			grad[OFF_W2 + k * TRAIN_HIDDEN + j] += dz * h[j];
			dh[j] += dz * w[OFF_W2 + k * TRAIN_HIDDEN + j];
		}
	}
	return loss;
}

void train_model_hidden_grad(const float *x, const double *h, const double *dh, uint32_t lo,
			     uint32_t n, double *grad)
{
	for (uint32_t j = 0; j < n; j++) {
		double da = dh[j] * (1 - h[j] * h[j]);
		grad[OFF_B1 + lo + j] += da;
		for (uint32_t i = 0; i < TRAIN_IN; i++)
			grad[OFF_W1 + (lo + j) * TRAIN_IN + i] += da * x[i];
	}
}

double train_model_grad(const float *w, const float *x, uint8_t y, double *grad, bool *correct)
{
	double h[TRAIN_HIDDEN], dh[TRAIN_HIDDEN];
	train_model_hidden(w, x, 0, TRAIN_HIDDEN, h);
	double loss = train_model_output(w, h, y, grad, dh, correct);
	train_model_hidden_grad(x, h, dh, 0, TRAIN_HIDDEN, grad);
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

/* ---- The tensor-parallel split (train_model.h says the math) ---- */

void train_tp_spans(uint32_t tp, uint32_t index, struct train_span span[3])
{
	uint32_t hs = TRAIN_HIDDEN / tp, lo = index * hs;
	span[0] = (struct train_span){OFF_W1 + lo * TRAIN_IN, hs * TRAIN_IN};
	span[1] = (struct train_span){OFF_B1 + lo, hs};
	span[2] = (struct train_span){OFF_W2, TRAIN_TP_WHOLE};
	_Static_assert(OFF_B2 == OFF_W2 + TRAIN_HIDDEN * TRAIN_OUT, "W2 then b2: one span");
}

uint32_t train_tp_grad_len(uint32_t tp)
{
	return TRAIN_HIDDEN / tp * (TRAIN_IN + 1) + TRAIN_TP_TAIL;
}

uint32_t train_tp_gather_len(uint32_t tp, uint32_t cap)
{
	return TRAIN_HIDDEN / tp * cap + 1;
}

uint32_t train_tp_scatter_len(uint32_t tp, uint32_t cap)
{
	return TRAIN_HIDDEN / tp * cap + TRAIN_TP_TAIL;
}

void train_tp_hidden(const float *w, const struct train_tp_batch *b, double *block)
{
	uint32_t hs = TRAIN_HIDDEN / b->tp;
	memset(block, 0, (size_t)hs * b->cap * sizeof(double));
	for (uint32_t s = 0; s < b->n; s++)
		train_model_hidden(w, b->x[s], b->index * hs, hs, block + (size_t)s * hs);
}

void train_tp_output(const float *w, const struct train_tp_batch *b, const double *gathered,
		     double *scatter)
{
	uint32_t hs = TRAIN_HIDDEN / b->tp, glen = train_tp_gather_len(b->tp, b->cap),
		 slen = train_tp_scatter_len(b->tp, b->cap);
	double g[TRAIN_PARAMS], tail[TRAIN_TP_TAIL] = {0};
	memset(g + OFF_W2, 0, TRAIN_TP_WHOLE * sizeof(double));
	memset(scatter, 0, (size_t)b->tp * slen * sizeof(double));
	for (uint32_t s = b->index; s < b->n; s += b->tp) {
		double h[TRAIN_HIDDEN], dh[TRAIN_HIDDEN];
		for (uint32_t m = 0; m < b->tp; m++)
			memcpy(h + m * hs, gathered + (size_t)m * glen + (size_t)s * hs,
			       hs * sizeof(double));
		bool ok;
		tail[TRAIN_TP_LOSS] += train_model_output(w, h, b->y[s], g, dh, &ok);
		tail[TRAIN_TP_HITS] += ok;
		tail[TRAIN_TP_SAMPLES] += 1;
		for (uint32_t m = 0; m < b->tp; m++)
			memcpy(scatter + (size_t)m * slen + (size_t)s * hs, dh + m * hs,
			       hs * sizeof(double));
	}
	memcpy(tail, g + OFF_W2, TRAIN_TP_WHOLE * sizeof(double));
	/* every block carries this member's partial W2/b2 sums: each member gets the totals */
	for (uint32_t m = 0; m < b->tp; m++)
		memcpy(scatter + (size_t)m * slen + (size_t)hs * b->cap, tail, sizeof(tail));
}

void train_tp_backward(const struct train_tp_batch *b, const double *block, const double *mine,
		       double *grad)
{
	uint32_t hs = TRAIN_HIDDEN / b->tp, lo = b->index * hs;
	double g[TRAIN_PARAMS];
	memset(g + OFF_W1 + lo * TRAIN_IN, 0, (size_t)hs * TRAIN_IN * sizeof(double));
	memset(g + OFF_B1 + lo, 0, hs * sizeof(double));
	for (uint32_t s = 0; s < b->n; s++)
		train_model_hidden_grad(b->x[s], block + (size_t)s * hs, mine + (size_t)s * hs, lo,
					hs, g);
	memcpy(grad, g + OFF_W1 + lo * TRAIN_IN, (size_t)hs * TRAIN_IN * sizeof(double));
	memcpy(grad + hs * TRAIN_IN, g + OFF_B1 + lo, hs * sizeof(double));
	memcpy(grad + hs * (TRAIN_IN + 1), mine + (size_t)hs * b->cap,
	       TRAIN_TP_TAIL * sizeof(double));
}

void train_tp_sgd(float *w, uint32_t tp, uint32_t index, const double *grad, float lr,
		  uint32_t batch)
{
	struct train_span sp[3];
	train_tp_spans(tp, index, sp);
	double scale = (double)lr / (double)batch;
	uint32_t k = 0;
	for (uint32_t i = 0; i < 3; i++)
		for (uint32_t j = 0; j < sp[i].len; j++, k++)
			w[sp[i].off + j] = (float)((double)w[sp[i].off + j] - scale * grad[k]);
}
