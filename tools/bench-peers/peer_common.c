/* The peer benchmarks' shared part (peer_common.h). It must stay free of MPI and Gloo so that
 * both programs measure and check exactly alike. */
#include "peer_common.h"
#include "size_arg.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const op_names[PEER_OP_COUNT] = {
    "allreduce", "all_gather", "reduce_scatter", "alltoall", "pingpong",
    "exchange",	 "reduce",     "broadcast",	 "barrier",
};

int peer_op_parse(const char *name)
{
	for (int op = 0; op < PEER_OP_COUNT; op++)
		if (strcmp(name, op_names[op]) == 0)
			return op;
	return -1;
}

const char *peer_op_name(enum peer_op op)
{
	return op < PEER_OP_COUNT ? op_names[op] : "?";
}

static int usage(const char *prog, unsigned ops, const char *why)
{
	fprintf(stderr,
		"%s: %s\nusage: %s [-o OP] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] "
		"[-t WARMUP_MS]%s\n"
		"  sizes in bytes (K, M suffixes), multiples of 4 (f32); defaults -b 4 -e 64M "
		"-f 4 -n 20 -w 5 -t 0\n  OP:",
		prog, why, prog, strncmp(prog, "gloo-", 5) == 0 ? " -s STORE_DIR [-a ALGOS]" : "");
	for (int op = 0; op < PEER_OP_COUNT; op++)
		if (ops & (1u << op))
			fprintf(stderr, " %s", op_names[op]);
	fprintf(stderr, " (default %s)\n",
		op_names[ops & 1u ? PEER_ALLREDUCE : __builtin_ctz(ops)]);
	return -EINVAL;
}

/* -o: one of the program's operations. */
static int parse_op(const char *prog, unsigned ops, const char *arg, struct peer_opts *o)
{
	int op = peer_op_parse(arg);
	if (op < 0 || !(ops & (1u << op)))
		return usage(prog, ops, "-o: not an operation of this program");
	o->op = (enum peer_op)op;
	return 0;
}

int peer_parse_opts(int argc, char **argv, const char *prog, unsigned ops, struct peer_opts *o)
{
	*o = (struct peer_opts){.min_bytes = 4,
				.max_bytes = 64ull << 20,
				.factor = 4,
				.iters = 20,
				.warmup = 5,
				.op = ops & 1u ? PEER_ALLREDUCE : (enum peer_op)__builtin_ctz(ops)};
	int c;
	while ((c = getopt(argc, argv, "b:e:f:n:w:t:a:s:o:")) != -1) {
		uint64_t v = 0;
		if (strchr("befnwt", c) != NULL && keel_size_arg(optarg, &v) != 0)
			return usage(prog, ops, "bad number");
		switch (c) {
		case 'b':
			o->min_bytes = v;
			break;
		case 'e':
			o->max_bytes = v;
			break;
		case 'f':
			o->factor = v;
			break;
		case 'n':
		case 'w':
			if (v > 10000000 || (c == 'n' && v == 0))
				return usage(prog, ops, "iterations: 1..10000000 (warm-up 0..)");
			*(c == 'n' ? &o->iters : &o->warmup) = (uint32_t)v;
			break;
		case 't':
			if (v > 600000)
				return usage(prog, ops, "warm-up time: 0..600000 ms");
			o->warmup_ms = (uint32_t)v;
			break;
		case 'a':
			o->algos = optarg;
			break;
		case 's':
			o->store = optarg;
			break;
		case 'o':
			if (parse_op(prog, ops, optarg, o) != 0)
				return -EINVAL;
			break;
		default:
			return usage(prog, ops, "unknown option");
		}
	}
	if (optind != argc)
		return usage(prog, ops, "unexpected argument");
	if (o->min_bytes < 4 || o->min_bytes % 4 || o->max_bytes % 4 || o->min_bytes > o->max_bytes)
		return usage(prog, ops, "sizes must be multiples of 4, at least 4, MIN <= MAX");
	if (o->max_bytes > (1ull << 31) - 4)
		return usage(prog, ops, "largest size: below 2 GiB (an int count of floats)");
	if (o->factor < 2)
		return usage(prog, ops, "FACTOR must be at least 2");
	return 0;
}

uint64_t peer_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool peer_warm_enough(const struct peer_opts *o, double slowest_ms)
{
	return slowest_ms >= (double)o->warmup_ms;
}

/* 1..2039, below 2^11: 2^12 ranks keep every sum below 2^23, exact in f32. Never 0, so that
 * a max or a lost contribution cannot pass for the sum. */
static float input_of(size_t i, uint32_t rank)
{
	return (float)((i * 7u + rank * 131u + rank / 3u) % 2039u + 1u);
}

void peer_fill(float *in, size_t count, uint32_t rank)
{
	for (size_t i = 0; i < count; i++)
		in[i] = input_of(i, rank);
}

void peer_poison(float *out, size_t count)
{
	for (size_t i = 0; i < count; i++)
		out[i] = NAN;
}

size_t peer_check(const float *out, size_t count, uint32_t ranks)
{
	size_t wrong = 0;
	for (size_t i = 0; i < count; i++) {
		float want = 0;
		for (uint32_t r = 0; r < ranks; r++)
			want += input_of(i, r);
		wrong += !(out[i] == want);
	}
	return wrong;
}

void peer_shape_of(enum peer_op op, uint64_t bytes, uint32_t rank, uint32_t ranks,
		   struct peer_shape *s)
{
	size_t elems = (size_t)(bytes / sizeof(float));
	bool split = op == PEER_ALL_GATHER || op == PEER_REDUCE_SCATTER || op == PEER_ALLTOALL;
	size_t c = split ? elems / ranks : elems, all = c * ranks;
	*s = (struct peer_shape){.count = c, .send = c, .recv = c, .bytes = c * sizeof(float)};
	if (split)
		s->bytes = all * sizeof(float);
	if (op == PEER_ALL_GATHER || op == PEER_ALLTOALL)
		s->recv = all;
	if (op == PEER_REDUCE_SCATTER || op == PEER_ALLTOALL)
		s->send = all;
	if ((op == PEER_PINGPONG || op == PEER_EXCHANGE) && rank > 1)
		s->send = s->recv = 0; /* ranks 0 and 1 alone */
	if ((op == PEER_REDUCE && rank != 0) || (op == PEER_BROADCAST && rank == 0))
		s->recv = 0; /* the root's alone; the root's own data */
	if (op == PEER_BROADCAST && rank != 0)
		s->send = 0;
	if (op == PEER_BARRIER)
		*s = (struct peer_shape){0};
}

/* Element j of rank `rank`'s result of `op`. */
static float expected(enum peer_op op, size_t c, size_t j, uint32_t rank, uint32_t ranks)
{
	float sum = 0;
	switch (op) {
	case PEER_ALL_GATHER: /* block k: rank k's input */
		return input_of(j % c, (uint32_t)(j / c));
	case PEER_ALLTOALL: /* block k: rank k's block for this rank */
		return input_of(rank * c + j % c, (uint32_t)(j / c));
	case PEER_PINGPONG:
	case PEER_EXCHANGE:
		return input_of(j, 1 - rank);
	case PEER_BROADCAST:
		return input_of(j, 0);
	default: /* allreduce, reduce: the sum; reduce_scatter: of this rank's block */
		for (uint32_t r = 0; r < ranks; r++)
			sum += input_of((op == PEER_REDUCE_SCATTER ? rank * c : 0) + j, r);
		return sum;
	}
}

size_t peer_check_op(enum peer_op op, const struct peer_shape *s, const float *out, uint32_t rank,
		     uint32_t ranks)
{
	size_t wrong = 0;
	for (size_t j = 0; j < s->recv; j++)
		wrong += !(out[j] == expected(op, s->count, j, rank, ranks));
	return wrong;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double peer_median(double *t, uint32_t n)
{
	qsort(t, n, sizeof(*t), cmp_double);
	uint32_t h = n / 2;
	return n % 2 ? t[h] : (t[h - 1] + t[h]) / 2;
}

void peer_print_header(const char *prog, uint32_t ranks, const struct peer_opts *o)
{
	printf("# %s: %s, %u ranks, f32%s, warm-up %u calls and at least %u ms\n", prog,
	       peer_op_name(o->op), ranks,
	       o->op == PEER_ALLREDUCE || o->op == PEER_REDUCE_SCATTER || o->op == PEER_REDUCE
		   ? " sum"
		   : "",
	       o->warmup, o->warmup_ms);
	if (o->op == PEER_ALL_GATHER || o->op == PEER_REDUCE_SCATTER || o->op == PEER_ALLTOALL)
		printf("# size: every rank's part together, a rank's count = size / 4 / ranks "
		       "(nccl-tests, keel-bench)\n");
	if (o->op == PEER_PINGPONG)
		printf("# time: half a round trip between ranks 0 and 1\n");
	printf("# time: median over the iterations of the slowest rank's time in each\n");
	printf("#%11s %12s %8s %10s %10s %10s %7s %s\n", "size(B)", "count", "iters", "median(us)",
	       "min(us)", "max(us)", "#wrong", "algorithm");
	fflush(stdout);
}

void peer_print_row(uint64_t bytes, size_t count, uint32_t iters, double median_us,
		    const double *sorted, long wrong, const char *algo)
{
	printf(" %11" PRIu64 " %12zu %8u %10.2f %10.2f %10.2f %7ld %s\n", bytes, count, iters,
	       median_us, sorted[0], sorted[iters - 1], wrong, algo);
	fflush(stdout);
}

void peer_print_footer(long wrong_total)
{
	printf("# Out of bounds values : %ld %s\n", wrong_total,
	       wrong_total == 0 ? "OK" : "FAILED");
	fflush(stdout);
}
