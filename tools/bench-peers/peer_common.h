/* What the peer benchmarks (Open MPI, Gloo) share: options, the operations and how their sizes
 * count (as keel-bench and nccl-tests count them), inputs whose f32 sums are exact, the check of
 * every operation's result, the median and the table they print. Plain C, callable from C++; no
 * MPI or Gloo here. */
#ifndef PEER_COMMON_H
#define PEER_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The operations, named as keel-bench names them (pingpong and exchange: keel-bench sendrecv's
 * two halves, between ranks 0 and 1). f32, sums, root 0. */
enum peer_op {
	PEER_ALLREDUCE = 0,
	PEER_ALL_GATHER,
	PEER_REDUCE_SCATTER,
	PEER_ALLTOALL,
	PEER_PINGPONG, /* a send and its answer; the time is half the round trip */
	PEER_EXCHANGE, /* both ways at once */
	PEER_REDUCE,
	PEER_BROADCAST,
	PEER_BARRIER,
	PEER_OP_COUNT
};

/* "all_gather" -> PEER_ALL_GATHER; -1 when unknown. */
int peer_op_parse(const char *name);
const char *peer_op_name(enum peer_op op);

struct peer_opts {
	uint64_t min_bytes, max_bytes, factor;
	uint32_t iters, warmup;
	uint32_t warmup_ms; /* -t: warm up for at least this long too (every rank, in rounds) */
	const char *algos;  /* Gloo: comma-separated algorithm names, NULL for all */
	const char *store;  /* Gloo: rendezvous folder */
	enum peer_op op;    /* -o OP (default allreduce) */
};

/* Parses -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP -t WARMUP_MS -o OP (and for Gloo -a ALGOS
 * -s STORE). `ops` is the mask (1u << op) of the operations the program has: -o names one of
 * them. Returns 0, or -EINVAL after printing why (prog names the program). */
int peer_parse_opts(int argc, char **argv, const char *prog, unsigned ops, struct peer_opts *o);

uint64_t peer_now_ns(void);

/* The warm-up's rule, the same in keel-bench: at least o->warmup calls, then rounds of
 * max(warmup, 1) calls while the slowest rank has warmed up for less than o->warmup_ms.
 * `slowest_ms` is the AllReduce MAX of each rank's elapsed time since the warm-up began, so
 * every rank decides alike. */
bool peer_warm_enough(const struct peer_opts *o, double slowest_ms);

/* Rank `rank`'s input: small whole numbers, so that any sum over up to 2^12 ranks is exact in
 * f32 and a missing, doubled or misplaced contribution changes the result. */
void peer_fill(float *in, size_t count, uint32_t rank);
/* NaN everywhere: a result left unwritten fails the check. */
void peer_poison(float *out, size_t count);
/* Elements of `out` that differ from the sum of peer_fill over `ranks` ranks. */
size_t peer_check(const float *out, size_t count, uint32_t ranks);

/* One size of an operation on `ranks` ranks, seen from `rank`: `count` elements each rank
 * gives (the size split among the ranks for all_gather, reduce_scatter and alltoall, as
 * nccl-tests and keel-bench split it), the elements of its input (`send`) and of the result
 * it gets (`recv`, 0 where it gets none: reduce off the root, pingpong beyond rank 1), and
 * the size the table prints (the elements of every rank's part, in bytes). Every rank's input
 * is peer_fill's, s->send elements. */
struct peer_shape {
	size_t count, send, recv;
	uint64_t bytes;
};
void peer_shape_of(enum peer_op op, uint64_t bytes, uint32_t rank, uint32_t ranks,
		   struct peer_shape *s);
/* Elements of this rank's result (s->recv of them in out) that differ from `op`'s. */
size_t peer_check_op(enum peer_op op, const struct peer_shape *s, const float *out, uint32_t rank,
		     uint32_t ranks);

/* Sorts t[0..n) and returns its median (the mean of the middle two when n is even). */
double peer_median(double *t, uint32_t n);

void peer_print_header(const char *prog, uint32_t ranks, const struct peer_opts *o);
/* One row; `sorted` holds the per-iteration maxima, sorted (min first). */
void peer_print_row(uint64_t bytes, size_t count, uint32_t iters, double median_us,
		    const double *sorted, long wrong, const char *algo);
void peer_print_footer(long wrong_total);

#ifdef __cplusplus
}
#endif

#endif
