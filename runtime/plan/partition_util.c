/* Helpers the planner and scheduler share: an index heapsort and a 64-bit mixer.
 * No recursion, no allocation: sorting happens in the caller's index array. */
#include "assert_int.h"
#include "partition_int.h"

static void sift_down(uint32_t *idx, uint32_t root, uint32_t n, keel_less_fn less, const void *ctx)
{
	/* Each step moves one level down: at most log2(n) steps. */
	for (;;) {
		uint32_t child = 2 * root + 1;
		if (child >= n)
			return;
		if (child + 1 < n && less(ctx, idx[child], idx[child + 1]))
			child++;
		if (!less(ctx, idx[root], idx[child]))
			return;
		uint32_t t = idx[root];
		idx[root] = idx[child];
		idx[child] = t;
		root = child;
	}
}

void keel_sort_idx(uint32_t *idx, uint32_t n, keel_less_fn less, const void *ctx)
{
	KEEL_ASSERT(idx != NULL || n == 0);
	if (n < 2)
		return;
	for (uint32_t i = n / 2; i-- > 0;)
		sift_down(idx, i, n, less, ctx);
	for (uint32_t end = n - 1; end > 0; end--) {
		uint32_t t = idx[0];
		idx[0] = idx[end];
		idx[end] = t;
		sift_down(idx, 0, end, less, ctx);
	}
}

uint64_t keel_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}
