/* Indivisible items: LPT for min makespan under memory caps, hash and range partitioning,
 * weighted rendezvous hashing, and the minimal-movement LPT replan. No allocation. */
#include <math.h>
#include <string.h>

#include "assert_int.h"
#include "partition_int.h"

static void result_reset(struct keel_plan_result *res)
{
	*res = (struct keel_plan_result){.failed_item = KEEL_PLAN_NONE, .skew = 1.0};
}

static bool work_desc(const void *ctx, uint32_t a, uint32_t b)
{
	const struct keel_item *it = ctx;
	return it[a].work > it[b].work || (it[a].work == it[b].work && a < b);
}

static void give(struct keel_plan *p, uint32_t i, uint32_t w)
{
	p->owner[i] = w;
	p->work[w] += p->item[i].work;
	p->mem[w] += p->item[i].mem_bytes;
	p->count[w]++;
}

static void take(struct keel_plan *p, uint32_t i)
{
	uint32_t w = p->owner[i];
	p->owner[i] = KEEL_PLAN_NONE;
	p->work[w] -= p->item[i].work;
	p->mem[w] -= p->item[i].mem_bytes;
	p->count[w]--;
}

/* The usable worker with room where item i would finish first; ties to the lowest index. */
static uint32_t earliest(const struct keel_plan *p, uint32_t i, uint32_t skip, double *t_out)
{
	uint32_t best = KEEL_PLAN_NONE;
	double best_t = INFINITY;
	double c = p->item[i].work;
	for (uint32_t w = 0; w < p->worker_count; w++) {
		/* inv_rate is 0 for drained workers; the memory check only for a new best */
		double t = (p->work[w] + c) * p->inv_rate[w];
		if (t < best_t && p->inv_rate[w] > 0 && w != skip &&
		    keel_plan_fits(p, w, p->item[i].mem_bytes)) {
			best_t = t;
			best = w;
		}
	}
	*t_out = best_t;
	return best;
}

/* Place the unassigned items, largest first. */
static int place_lpt(struct keel_plan *p, struct keel_plan_result *res)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < p->item_count; i++)
		if (p->owner[i] == KEEL_PLAN_NONE)
			p->order[n++] = i;
	keel_sort_idx(p->order, n, work_desc, p->item);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = p->order[k];
		double t;
		uint32_t w = earliest(p, i, KEEL_PLAN_NONE, &t);
		if (w == KEEL_PLAN_NONE) {
			res->failed_item = i;
			return -ENOSPC;
		}
		give(p, i, w);
	}
	return 0;
}

static bool have_input(const struct keel_plan *p)
{
	return p->item_count > 0 && p->worker_count > 0;
}

int keel_plan_items_lpt(struct keel_plan *p, struct keel_plan_result *res)
{
	KEEL_ASSERT(p != NULL && res != NULL);
	result_reset(res);
	if (!have_input(p))
		return -EINVAL;
	keel_plan_begin(p);
	p->kind = PLAN_LPT;
	for (uint32_t i = 0; i < p->item_count; i++)
		p->owner[i] = KEEL_PLAN_NONE;
	keel_plan_recount(p);
	int err = place_lpt(p, res);
	if (err == 0)
		keel_plan_finish(p, res);
	return err;
}

static uint32_t bottleneck(const struct keel_plan *p, double *t_out)
{
	uint32_t b = KEEL_PLAN_NONE;
	double bt = -1;
	for (uint32_t w = 0; w < p->worker_count; w++) {
		double t = p->work[w] / keel_worker_rate(&p->worker[w]);
		if (p->count[w] > 0 && t > bt) {
			bt = t;
			b = w;
		}
	}
	*t_out = bt;
	return b;
}

/* One improving move off the bottleneck: the item whose move gives the lowest pair maximum.
 * Returns false when no move lowers the bottleneck's time. */
static bool improve_once(struct keel_plan *p)
{
	double tb;
	uint32_t b = bottleneck(p, &tb);
	if (b == KEEL_PLAN_NONE)
		return false;
	double rb = keel_worker_rate(&p->worker[b]);
	uint32_t best_i = KEEL_PLAN_NONE, best_w = KEEL_PLAN_NONE;
	double best = tb * (1 - 1e-12);
	for (uint32_t i = 0; i < p->item_count; i++) {
		if (p->owner[i] != b || p->item[i].work <= 0)
			continue;
		double t;
		uint32_t w = earliest(p, i, b, &t);
		double pair = fmax(t, (p->work[b] - p->item[i].work) / rb);
		if (w != KEEL_PLAN_NONE && pair < best) {
			best = pair;
			best_i = i;
			best_w = w;
		}
	}
	if (best_i == KEEL_PLAN_NONE)
		return false;
	take(p, best_i);
	give(p, best_i, best_w);
	return true;
}

int keel_plan_items_replan(struct keel_plan *p, struct keel_plan_result *res)
{
	KEEL_ASSERT(p != NULL && res != NULL);
	result_reset(res);
	if (!have_input(p))
		return -EINVAL;
	keel_plan_begin(p);
	p->kind = PLAN_LPT;
	for (uint32_t i = 0; i < p->item_count; i++) {
		uint32_t o = p->owner[i];
		if (o != KEEL_PLAN_NONE && !keel_plan_usable(p, o))
			p->owner[i] = KEEL_PLAN_NONE;
	}
	keel_plan_recount(p);
	int err = place_lpt(p, res);
	if (err != 0)
		return err;
	/* Each move lowers the sorted vector of worker times, so this ends; the bound is a cap. */
	for (uint32_t k = 0; k < p->item_count && improve_once(p); k++)
		;
	keel_plan_finish(p, res);
	return 0;
}

/* The usable workers, in index order, into heap[]; returns how many. */
static uint32_t usable_list(struct keel_plan *p)
{
	uint32_t m = 0;
	for (uint32_t w = 0; w < p->worker_count; w++)
		if (keel_plan_usable(p, w))
			p->heap[m++] = w;
	return m;
}

static int start_simple(struct keel_plan *p, struct keel_plan_result *res, enum plan_kind kind,
			uint32_t *m)
{
	result_reset(res);
	if (!have_input(p))
		return -EINVAL;
	*m = usable_list(p);
	if (*m == 0)
		return -EAGAIN;
	keel_plan_begin(p);
	p->kind = kind;
	for (uint32_t i = 0; i < p->item_count; i++)
		p->owner[i] = KEEL_PLAN_NONE;
	keel_plan_recount(p);
	return 0;
}

int keel_plan_items_hash(struct keel_plan *p, struct keel_plan_result *res)
{
	KEEL_ASSERT(p != NULL && res != NULL);
	uint32_t m;
	int err = start_simple(p, res, PLAN_HASH, &m);
	if (err != 0)
		return err;
	for (uint32_t i = 0; i < p->item_count; i++) {
		uint64_t h = keel_mix64(p->item[i].key) % m;
		uint32_t k = 0; /* probe on: the next usable worker with room */
		while (k < m && !keel_plan_fits(p, p->heap[(h + k) % m], p->item[i].mem_bytes))
			k++;
		if (k == m) {
			res->failed_item = i;
			return -ENOSPC;
		}
		give(p, i, p->heap[(h + k) % m]);
	}
	keel_plan_finish(p, res);
	return 0;
}

int keel_plan_items_range(struct keel_plan *p, struct keel_plan_result *res)
{
	KEEL_ASSERT(p != NULL && res != NULL);
	uint32_t m;
	int err = start_simple(p, res, PLAN_RANGE, &m);
	if (err != 0)
		return err;
	double total = 0, rate_sum = 0, cum = 0, edge;
	for (uint32_t i = 0; i < p->item_count; i++)
		total += p->item[i].work;
	for (uint32_t k = 0; k < m; k++)
		rate_sum += keel_worker_rate(&p->worker[p->heap[k]]);
	uint32_t k = 0;
	edge = keel_worker_rate(&p->worker[p->heap[0]]) / rate_sum;
	for (uint32_t i = 0; i < p->item_count; i++) {
		/* The item belongs to the range its midpoint falls in. */
		double mid =
		    total > 0 ? (cum + p->item[i].work / 2) / total : (i + 0.5) / p->item_count;
		cum += p->item[i].work;
		while (mid >= edge && k + 1 < m) {
			k++;
			edge += keel_worker_rate(&p->worker[p->heap[k]]) / rate_sum;
		}
		if (!keel_plan_fits(p, p->heap[k], p->item[i].mem_bytes)) {
			res->failed_item = i;
			return -ENOSPC;
		}
		give(p, i, p->heap[k]);
	}
	keel_plan_finish(p, res);
	return 0;
}

/* -ln(u) for a uniform u in (0,1) drawn from (key, worker): the same pair always gives the same
 * value. The logarithm is computed here, not by libm, so it is cheap in the items x workers
 * loop and bit-identical everywhere: u = m * 2^e with m in [1, 2) taken from the bits, and
 * ln m from the atanh series in s = (m-1)/(m+1), |s| <= 1/3, to s^11 (relative error < 1e-6). */
static double neg_log_draw(uint64_t key, uint64_t id_hash)
{
	uint64_t h = keel_mix64(key ^ id_hash);
	double u = ((double)(h >> 11) + 0.5) * 0x1.0p-53, m;
	uint64_t bits;
	memcpy(&bits, &u, sizeof(bits));
	int e = (int)((bits >> 52) & 0x7ff) - 1023;
	bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
	memcpy(&m, &bits, sizeof(m));
	double s = (m - 1) / (m + 1), s2 = s * s;
	double ln_m =
	    2 * s *
	    (1 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9 + s2 / 11)))));
	return -(e * 0.69314718055994530942 + ln_m);
}

int keel_plan_items_rendezvous(struct keel_plan *p, struct keel_plan_result *res)
{
	KEEL_ASSERT(p != NULL && res != NULL);
	uint32_t m;
	int err = start_simple(p, res, PLAN_RDV, &m);
	if (err != 0)
		return err;
	for (uint32_t i = 0; i < p->item_count; i++) {
		uint32_t best = KEEL_PLAN_NONE;
		double best_s = INFINITY;
		for (uint32_t k = 0; k < m; k++) {
			uint32_t w = p->heap[k];
			/* Weighted HRW: the highest rate / -ln(u) is the lowest -ln(u) / rate, and
			 * P(w wins) = rate_w / sum of rates. */
			double sc = neg_log_draw(p->item[i].key, p->id_hash[w]) * p->inv_rate[w];
			if (sc < best_s && keel_plan_fits(p, w, p->item[i].mem_bytes)) {
				best_s = sc;
				best = w;
			}
		}
		if (best == KEEL_PLAN_NONE) {
			res->failed_item = i;
			return -ENOSPC;
		}
		give(p, i, best);
	}
	keel_plan_finish(p, res);
	return 0;
}
