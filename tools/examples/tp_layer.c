/* A tensor-parallel layer on keel, to copy: a column-parallel linear layer split over a
 * tensor-parallel (TP) group, inside data-parallel (DP) replicas: 2-D parallelism with groups
 * (keel/group.h). Every rank checks its part of the result against the whole layer computed
 * alone, and says how far apart they are.
 *   build: cc -O2 tp_layer.c $(pkg-config --cflags --libs keel) -o tp_layer
 *   run:   keel-run -n 4 ./tp_layer [TP]   (TP ranks per group, dividing the world; default 2)
 * With 4 ranks and TP 2: ranks 0,1 and 2,3 are the TP groups (one replica each), ranks 0,2 and
 * 1,3 the DP groups (the ranks that hold the same columns of the weight). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/boot.h>

#define BATCH 16 /* samples per replica (B) */
#define IN    48 /* input features (K) */
#define OUT   32 /* output features (N) */

/* y = x w on a TP group of t ranks, sequence-parallel: rank r holds b/t samples (rows of x)
 * and n/t columns of w; t divides b and n. Row-major. */
struct tp_linear {
	struct keel_group *tp;
	uint32_t t, r, b, k, n;
	float *w, *dw; /* [k][n/t]: this rank's columns of the weight, and their gradient */
	float *x, *dx; /* [b][k]: the whole batch; this rank's samples from row r*b/t */
};

/* AllGather the samples, then y [b][n/t]: this rank's output columns for the whole batch. */
static int tp_forward(struct tp_linear *l, float *y)
{
	size_t nl = l->n / l->t, part = (size_t)l->b / l->t * l->k;
	int rc = keel_group_allgather(l->tp, l->x + l->r * part, l->x, part, KEEL_F32);
	for (size_t i = 0; rc == 0 && i < l->b; i++)
		for (size_t j = 0; j < nl; j++) {
			y[i * nl + j] = 0;
			for (size_t c = 0; c < l->k; c++)
				y[i * nl + j] += l->x[i * l->k + c] * l->w[c * nl + j];
		}
	return rc;
}

/* dy [b][n/t]: the gradient of this rank's output columns. Fills dw; each rank's dx sums over
 * its columns only, so ReduceScatter adds them up: this rank's samples' gradient. */
static int tp_backward(struct tp_linear *l, const float *dy)
{
	size_t nl = l->n / l->t, part = (size_t)l->b / l->t * l->k;
	memset(l->dw, 0, l->k * nl * sizeof(float));
	memset(l->dx, 0, (size_t)l->b * l->k * sizeof(float));
	for (size_t i = 0; i < l->b; i++)
		for (size_t c = 0; c < l->k; c++)
			for (size_t j = 0; j < nl; j++) {
				l->dw[c * nl + j] += l->x[i * l->k + c] * dy[i * nl + j];
				l->dx[i * l->k + c] += dy[i * nl + j] * l->w[c * nl + j];
			}
	return keel_group_reduce_scatter(l->tp, l->dx, l->dx + l->r * part, part, KEEL_F32,
					 KEEL_SUM);
}

/* The job's data, the same at every rank: a value in [-0.5, 0.5) for each (what, i, j). */
static float val(uint32_t what, uint32_t i, uint32_t j)
{
	uint32_t h = (what * 7919u + i) * 104729u + j;
	h = (h ^ (h >> 15)) * 2246822519u;
	return (float)((h ^ (h >> 13)) & 1023u) / 1024.0f - 0.5f;
}
static float weight(uint32_t c, uint32_t n) /* the whole weight [K][N] */
{
	return val(0, c, n);
}
static float input(uint32_t d, uint32_t i, uint32_t c) /* replica d's batch [B][K] */
{
	return val(1 + 2 * d, i, c);
}
static float grad_out(uint32_t d, uint32_t i, uint32_t n) /* the gradient of its output [B][N] */
{
	return val(2 + 2 * d, i, n);
}

static float worst; /* the largest difference from the reference, relative to 1 + |ref| */
static void against(double want, float got)
{
	float e = (float)(fabs(want - (double)got) / (1.0 + fabs(want)));
	if (!(e <= worst)) /* NaN too: an element nothing wrote */
		worst = isnan(e) ? INFINITY : e;
}

/* The whole layer on one rank, in double: this rank's share of the output, of the weight's
 * gradient averaged over the replicas, and of the input's gradient. */
static void check(const struct tp_linear *l, uint32_t d, uint32_t replicas, const float *y)
{
	uint32_t nl = l->n / l->t, bl = l->b / l->t;
	for (uint32_t i = 0; i < l->b; i++)
		for (uint32_t j = 0; j < nl; j++) {
			double s = 0;
			for (uint32_t c = 0; c < l->k; c++)
				s += (double)input(d, i, c) * weight(c, l->r * nl + j);
			against(s, y[i * nl + j]);
		}
	for (uint32_t c = 0; c < l->k; c++)
		for (uint32_t j = 0; j < nl; j++) {
			double s = 0;
			for (uint32_t e = 0; e < replicas; e++)
				for (uint32_t i = 0; i < l->b; i++)
					s += (double)input(e, i, c) * grad_out(e, i, l->r * nl + j);
			against(s / replicas, l->dw[c * nl + j]);
		}
	for (uint32_t i = l->r * bl; i < (l->r + 1) * bl; i++)
		for (uint32_t c = 0; c < l->k; c++) {
			double s = 0;
			for (uint32_t n = 0; n < l->n; n++)
				s += (double)grad_out(d, i, n) * weight(c, n);
			against(s, l->dx[i * l->k + c]);
		}
}

static float w[IN * OUT], dw[IN * OUT], x[BATCH * IN], dx[BATCH * IN], y[BATCH * OUT],
    dy[BATCH * OUT];

/* One step of the layer on the rank's TP group, and the DP average of the weight's gradient. */
static int step(struct tp_linear *l, struct keel_group *dp, uint32_t d)
{
	uint32_t nl = l->n / l->t, bl = l->b / l->t;
	for (uint32_t c = 0; c < l->k; c++)
		for (uint32_t j = 0; j < nl; j++)
			w[c * nl + j] = weight(c, l->r * nl + j);
	for (uint32_t i = 0; i < l->b; i++) /* its own samples; NaN where AllGather must write */
		for (uint32_t c = 0; c < l->k; c++)
			x[i * l->k + c] = i / bl == l->r ? input(d, i, c) : NAN;
	int rc = tp_forward(l, y);
	for (uint32_t i = 0; i < l->b; i++)
		for (uint32_t j = 0; j < nl; j++)
			dy[i * nl + j] = grad_out(d, i, l->r * nl + j);
	if (rc == 0)
		rc = tp_backward(l, dy);
	if (rc == 0) /* the same columns in every replica: average their gradients */
		rc = keel_group_allreduce(dp, dw, dw, (size_t)l->k * nl, KEEL_F32, KEEL_AVG);
	return rc;
}

/* 2-D groups from the world: TP groups of tp consecutive ranks, DP groups across them. */
static int make_groups(struct keel_boot *b, uint32_t tp, void *mem[3], struct keel_group *g[3])
{
	size_t len = keel_group_size(b->node);
	uint32_t rank = b->launch.rank;
	for (int i = 0; i < 3; i++)
		if ((mem[i] = malloc(len)) == NULL) /* malloc's alignment is enough (8 bytes) */
			return -ENOMEM;
	int rc = keel_group_world(b->node, mem[0], len, &g[0]);
	if (rc == 0)
		rc = keel_group_split(g[0], rank / tp, rank, mem[1], len, &g[1]);
	if (rc == 0)
		rc = keel_group_split(g[0], rank % tp, rank, mem[2], len, &g[2]);
	return rc;
}

int main(int argc, char **argv)
{
	struct keel_boot b;
	char err[256];
	if (keel_boot_start(&b, NULL, NULL, err, sizeof(err)) != 0) {
		fprintf(stderr, "tp_layer: %s\n", err);
		return 1;
	}
	uint32_t world = b.launch.world_size, rank = b.launch.rank;
	char *end = NULL;
	uint32_t tp = argc > 1 ? (uint32_t)strtoul(argv[1], &end, 10) : world % 2 ? 1 : 2;
	if (tp == 0 || (end != NULL && *end != '\0') || world % tp || BATCH % tp || OUT % tp) {
		fprintf(
		    stderr,
		    "tp_layer: TP '%s': expected the ranks of a tensor-parallel group, dividing "
		    "the world (%u ranks), the batch (%u) and the output features (%u)\n",
		    argc > 1 ? argv[1] : "", world, BATCH, OUT);
		keel_boot_stop(&b, 0);
		return 2;
	}
	void *mem[3] = {NULL, NULL, NULL};
	struct keel_group *g[3] = {NULL, NULL, NULL}; /* world, TP, DP */
	struct keel_group_info tpi = {0};
	int rc = make_groups(&b, tp, mem, g);
	if (rc == 0 && (rc = keel_group_info(g[1], &tpi, NULL, 0)) > 0)
		rc = 0; /* the member count */
	struct tp_linear l = {g[1], tp, tpi.rank, BATCH, IN, OUT, w, dw, x, dx};
	if (rc == 0)
		rc = step(&l, g[2], rank / tp);
	if (rc == 0) {
		check(&l, rank / tp, world / tp, y);
		printf("tp_layer: rank %u (TP rank %u of %u, replica %u of %u): %s (largest "
		       "difference "
		       "%.1e)\n",
		       rank, l.r, tp, rank / tp, world / tp,
		       worst < 1e-5f ? "matches the single-rank layer" : "WRONG", worst);
	} else {
		fprintf(stderr, "tp_layer: rank %u: %s\n", rank, keel_strerror(rc));
	}
	for (int i = 2; i >= 0; i--)
		if (g[i] != NULL && keel_group_free(g[i]) != 0)
			fprintf(stderr, "tp_layer: rank %u: a group is still busy\n", rank);
	keel_boot_stop(&b, 1000000000ull); /* linger up to 1 s for the last acks, then leave */
	for (int i = 0; i < 3; i++)
		free(mem[i]);
	return rc != 0 || !(worst < 1e-5f);
}
