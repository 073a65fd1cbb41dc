/* Statistics of keel-bench's timings that must not keep a rank from polling for long. */
#include "bench_stats.h"

/* The k-th smallest of v[0..n) (k < n), moving values about (Hoare's selection): linear time,
 * where sorting a long run's half a million times kept the rank from polling for longer than
 * its peers' detector allows. */
static double kth_smallest(double *v, uint32_t n, uint32_t k)
{
	uint32_t lo = 0, hi = n - 1;
	while (lo < hi) {
		double pivot = v[lo + (hi - lo) / 2];
		uint32_t i = lo, j = hi;
		while (i <= j) {
			while (v[i] < pivot)
				i++;
			while (v[j] > pivot)
				j--;
			if (i <= j) {
				double t = v[i];
				v[i] = v[j];
				v[j] = t;
				i++;
				if (j == 0)
					break;
				j--;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return v[k];
	}
	return v[k];
}

double bench_median(double *v, uint32_t n)
{
	uint32_t h = n / 2;
	double upper = kth_smallest(v, n, h);
	if (n % 2)
		return upper;
	double lower = v[0]; /* the largest of those below h */
	for (uint32_t i = 1; i < h; i++)
		lower = v[i] > lower ? v[i] : lower;
	return (lower + upper) / 2;
}
