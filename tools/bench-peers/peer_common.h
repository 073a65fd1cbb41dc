/* What the peer benchmarks (Open MPI, Gloo) share: options, inputs whose f32 sum is exact, the
 * check, the median and the table they print. Plain C, callable from C++; no MPI or Gloo here. */
#ifndef PEER_COMMON_H
#define PEER_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct peer_opts {
	uint64_t min_bytes, max_bytes, factor;
	uint32_t iters, warmup;
	uint32_t warmup_ms; /* -t: warm up for at least this long too (every rank, in rounds) */
	const char *algos;  /* Gloo: comma-separated algorithm names, NULL for all */
	const char *store;  /* Gloo: rendezvous folder */
};

/* Parses -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP -t WARMUP_MS (and for Gloo -a ALGOS -s
 * STORE).
 * Returns 0, or -EINVAL after printing why (prog names the program). */
int peer_parse_opts(int argc, char **argv, const char *prog, struct peer_opts *o);

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
