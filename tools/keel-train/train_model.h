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
 * returns the cross-entropy loss; *correct says whether the argmax was the label. It is the
 * three pieces below, in this order (the tensor-parallel split runs them on different ranks). */
double train_model_grad(const float *w, const float *x, uint8_t y, double *grad, bool *correct);

/* The hidden units lo..lo+n-1 of sample x: h[j] = tanh(b1[lo+j] + W1[lo+j] . x). */
void train_model_hidden(const float *w, const float *x, uint32_t lo, uint32_t n, double *h);
/* The output layer on all TRAIN_HIDDEN activations h: adds the W2 and b2 gradients to grad,
 * sets dh (TRAIN_HIDDEN) to d(loss)/dh, returns the loss. */
double train_model_output(const float *w, const double *h, uint8_t y, double *grad, double *dh,
			  bool *correct);
/* Back through units lo..lo+n-1 (their h and d(loss)/dh): adds the W1 rows' and b1 gradients. */
void train_model_hidden_grad(const float *x, const double *h, const double *dh, uint32_t lo,
			     uint32_t n, double *grad);

/* The predicted class. */
uint32_t train_model_predict(const float *w, const float *x);

/* w -= lr * grad_sum / batch. */
void train_model_sgd(float *w, const double *grad_sum, float lr, uint32_t batch);

/* Fraction of idx[0..n) predicted right. */
double train_model_accuracy(const float *w, const struct train_data *d, const uint32_t *idx,
			    uint32_t n);

/* The order of the training set in `epoch`: a seeded Fisher-Yates permutation of 0..n. */
void train_epoch_order(uint32_t *order, uint32_t n, uint64_t seed, uint64_t epoch);

/* ---- The tensor-parallel split (keel-train --tp T), its arithmetic without the network ----
 *
 * The T members of a replica (a tensor-parallel group) split the hidden layer by unit, as
 * Megatron-LM's column-parallel linear layer does: member i holds the W1 rows and b1 entries
 * of units H_i = [i hs, (i+1) hs), hs = TRAIN_HIDDEN / T, and W2 and b2 whole (330 values,
 * the same at every member). For each sample s of the replica's part of the batch:
 *
 *   forward   h_i(s) = tanh(W1_i x_s + b1_i): member i's units need only x and its own rows.
 *             AllGather within the replica: every member then has h(s) = [h_0 | ... | h_T-1].
 *   output    z = W2 h + b2, softmax, cross-entropy: split by sample, not by unit: member i
 *             computes it for the samples s = i, i + T, i + 2T... of the replica's list, so
 *             each sample's loss is computed once. It gives dz_s, the partial sums
 *             dW2 = sum dz_s h(s)^T and db2 = sum dz_s over its samples, and
 *             dL/dh(s) = W2^T dz_s for all 32 units, at that member only.
 *   backward  member i needs dL/dh_i(s) for every s: the sum over members of what each
 *             computed for block H_i (zero where it did not own s). That is the
 *             ReduceScatter (sum) of the blocks [dL/dh_j(s) for all s]_j, the adjoint of the
 *             forward AllGather. Then da = dL/dh_i * (1 - h_i^2), dW1_i = sum da x^T and
 *             db1_i = sum da: the gradient of member i's shard, complete.
 *             The partial dW2, db2 (and loss, hits, samples) ride at the end of every block of
 *             that ReduceScatter, so each member receives the replica's totals.
 *
 * Member i's result is thus the gradient of exactly the parameters it holds over all of its
 * replica's samples, the same numbers (to the order of a sum) as train_model_grad's. The
 * data-parallel AllReduce among the members holding shard i sums them over the replicas;
 * SGD divides by the global batch, as with T = 1. */
#define TRAIN_TP_MAX   TRAIN_HIDDEN
#define TRAIN_TP_WHOLE (TRAIN_HIDDEN * TRAIN_OUT + TRAIN_OUT) /* W2 then b2: held whole */
/* The end of every ReduceScatter block and of the data-parallel vector: the W2 and b2
 * gradients, then these. */
enum {
	TRAIN_TP_LOSS = TRAIN_TP_WHOLE, /* summed loss */
	TRAIN_TP_HITS,			/* samples predicted right */
	TRAIN_TP_SAMPLES,		/* samples whose loss was computed */
	TRAIN_TP_TAIL			/* elements of that end */
};

struct train_span {
	uint32_t off, len; /* parameters off..off+len-1 */
};
/* What member `index` of `tp` holds: [0] its W1 rows, [1] its b1 entries, [2] W2 and b2. */
void train_tp_spans(uint32_t tp, uint32_t index, struct train_span span[3]);
/* Elements of member gradient vectors: its spans' gradients in order, then the tail's 3. */
uint32_t train_tp_grad_len(uint32_t tp);

/* One step's work of one member: the n samples of its replica (x[s], y[s], the same list at
 * every member), in buffers of `cap` rows (the global batch: they keep one size every step).
 * Collective buffers: the AllGather block is train_tp_gather_len (hs x cap activations, then
 * one element the caller uses), the ReduceScatter block train_tp_scatter_len. */
struct train_tp_batch {
	uint32_t tp, index;
	uint32_t n, cap;
	const float *const *x;
	const uint8_t *y;
};
uint32_t train_tp_gather_len(uint32_t tp, uint32_t cap);
uint32_t train_tp_scatter_len(uint32_t tp, uint32_t cap);

/* Forward: this member's units for each sample, block[s * hs + j] (the rest zero but the
 * caller's last element). */
void train_tp_hidden(const float *w, const struct train_tp_batch *b, double *block);
/* After the AllGather (tp blocks): the output layer for this member's samples; fills the
 * ReduceScatter's input, tp blocks of train_tp_scatter_len. */
void train_tp_output(const float *w, const struct train_tp_batch *b, const double *gathered,
		     double *scatter);
/* After the ReduceScatter (`mine`, this member's block): its shard's gradient, in grad
 * (train_tp_grad_len elements, overwritten). `block` is what train_tp_hidden gave. */
void train_tp_backward(const struct train_tp_batch *b, const double *block, const double *mine,
		       double *grad);
/* w[spans] -= lr x grad / batch: the step of the parameters this member holds. */
void train_tp_sgd(float *w, uint32_t tp, uint32_t index, const double *grad, float lr,
		  uint32_t batch);

#endif
