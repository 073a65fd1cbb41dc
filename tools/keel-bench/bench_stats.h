#ifndef KEEL_BENCH_STATS_H
#define KEEL_BENCH_STATS_H

#include <stdint.h>

/* The median of v[0..n) (n > 0; the mean of the middle two when n is even), in linear time.
 * Reorders v. */
double bench_median(double *v, uint32_t n);

#endif
