/* keel-train's model and data: a 64-32-10 MLP (tanh, softmax) on the 8x8 handwritten digits
 * that python3-sklearn ships, read with zlib. Plain C, deterministic, no threads; the data set
 * lives in a caller's struct (no allocation here either). */
#ifndef KEEL_TRAIN_MODEL_H
#define KEEL_TRAIN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"

#define TRAIN_IN	  64u
#define TRAIN_HIDDEN	  32u
#define TRAIN_OUT	  10u
#define TRAIN_PARAMS	  (TRAIN_IN * TRAIN_HIDDEN + TRAIN_HIDDEN + TRAIN_HIDDEN * TRAIN_OUT + TRAIN_OUT)
#define TRAIN_SAMPLES_MAX 1797u /* the digits set */
#define TRAIN_DIGITS_PATH "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"

struct train_data {
	uint32_t count;
	float x[TRAIN_SAMPLES_MAX][TRAIN_IN]; /* pixels scaled to 0..1 */
	uint8_t y[TRAIN_SAMPLES_MAX];
	/* The split: every 5th sample is a test sample, the others train. */
	uint32_t train[TRAIN_SAMPLES_MAX], test[TRAIN_SAMPLES_MAX];
	uint32_t train_count, test_count;
};

/* Read `path` (gzip'd CSV: 64 pixel values 0..16, then the label), then split.
 * Errors: -ENOENT (cannot open), -EINVAL (a malformed line; err says which), -ENOSPC (more
 * than TRAIN_SAMPLES_MAX rows). */
KEEL_MUST_USE int train_data_load(struct train_data *d, const char *path, char *err,
				  size_t err_len);

/* The split of d->count samples (train[], test[] and their counts): every 5th is a test
 * sample. train_data_load calls it; a loader that fills x and y another way calls it too. */
void train_data_split(struct train_data *d);

/* splitmix64: the seeded generator used for init and shuffling. */
uint64_t train_rng_next(uint64_t *state);

/* Weights: Xavier-uniform from `seed`, biases 0. w has TRAIN_PARAMS floats. */
void train_model_init(float *w, uint64_t seed);

/* Forward and backward on one sample: adds d(loss)/d(w) to grad (doubles, TRAIN_PARAMS),
 * returns the cross-entropy loss; *correct says whether the argmax was the label. */
double train_model_grad(const float *w, const float *x, uint8_t y, double *grad, bool *correct);

/* The predicted class. */
uint32_t train_model_predict(const float *w, const float *x);

/* w -= lr * grad_sum / batch. */
void train_model_sgd(float *w, const double *grad_sum, float lr, uint32_t batch);

/* Fraction of idx[0..n) predicted right. */
double train_model_accuracy(const float *w, const struct train_data *d, const uint32_t *idx,
			    uint32_t n);

/* The order of the training set in `epoch`: a seeded Fisher-Yates permutation of 0..n. */
void train_epoch_order(uint32_t *order, uint32_t n, uint64_t seed, uint64_t epoch);

#endif
