/* The partition planner: layout in caller memory, workers and items, divisible shares, the even
 * baseline, skew repair and migration. Never allocates, never reads a clock, no recursion. */
#include <math.h>
#include <string.h>

#include "assert_int.h"
#include "partition_int.h"

#define ALIGN 8u

static size_t carve(size_t *off, size_t len)
{
	size_t at = (*off + ALIGN - 1) & ~(size_t)(ALIGN - 1);
	*off = at + len;
	return at;
}

static bool config_ok(const struct keel_plan_config *cfg)
{
	return cfg != NULL && cfg->workers_max >= 1 && cfg->workers_max <= KEEL_PLAN_WORKERS_MAX &&
	       cfg->items_max >= 1 && cfg->items_max <= KEEL_PLAN_ITEMS_MAX;
}

/* One description of the layout serves both storage_size (base NULL) and init. */
static size_t layout(const struct keel_plan_config *cfg, struct keel_plan *p, char *base)
{
	size_t off = 0, wm = cfg->workers_max, im = cfg->items_max, at[14];
	carve(&off, sizeof(struct keel_plan));
	at[0] = carve(&off, wm * sizeof(struct keel_worker));
	at[1] = carve(&off, wm * sizeof(bool));
	at[2] = carve(&off, wm * sizeof(double));
	at[3] = carve(&off, wm * sizeof(uint64_t));
	at[4] = carve(&off, wm * sizeof(uint32_t));
	at[5] = carve(&off, wm * sizeof(uint32_t));
	at[6] = carve(&off, wm * sizeof(uint32_t));
	at[7] = carve(&off, im * sizeof(struct keel_item));
	at[8] = carve(&off, im * sizeof(uint32_t));
	at[9] = carve(&off, im * sizeof(uint64_t));
	at[10] = carve(&off, im * sizeof(bool));
	at[11] = carve(&off, im * sizeof(uint32_t));
	at[12] = carve(&off, wm * sizeof(double));
	at[13] = carve(&off, wm * sizeof(uint64_t));
	if (p != NULL) {
		p->worker = (struct keel_worker *)(base + at[0]);
		p->drained = (bool *)(base + at[1]);
		p->work = (double *)(base + at[2]);
		p->mem = (uint64_t *)(base + at[3]);
		p->count = (uint32_t *)(base + at[4]);
		p->want = (uint32_t *)(base + at[5]);
		p->heap = (uint32_t *)(base + at[6]);
		p->item = (struct keel_item *)(base + at[7]);
		p->owner = (uint32_t *)(base + at[8]);
		p->prev_id = (uint64_t *)(base + at[9]);
		p->prev_ok = (bool *)(base + at[10]);
		p->order = (uint32_t *)(base + at[11]);
		p->inv_rate = (double *)(base + at[12]);
		p->id_hash = (uint64_t *)(base + at[13]);
	}
	return off;
}

size_t keel_plan_storage_size(const struct keel_plan_config *cfg)
{
	if (!config_ok(cfg))
		return 0;
	return layout(cfg, NULL, NULL);
}

int keel_plan_init(struct keel_plan **out, void *mem, size_t mem_len,
		   const struct keel_plan_config *cfg)
{
	KEEL_ASSERT(out != NULL);
	if (!config_ok(cfg) || mem == NULL || ((uintptr_t)mem & (ALIGN - 1)) != 0)
		return -EINVAL;
	if (mem_len < keel_plan_storage_size(cfg))
		return -ENOSPC;
	struct keel_plan *p = mem;
	memset(p, 0, sizeof(*p));
	p->cfg = *cfg;
	layout(cfg, p, mem);
	*out = p;
	return 0;
}

static bool id_less(const void *ctx, uint32_t a, uint32_t b)
{
	const struct keel_worker *w = ctx;
	return w[a].id < w[b].id || (w[a].id == w[b].id && a < b);
}

/* heap[] holds the workers sorted by id after this; binary search maps an id to its index. */
static uint32_t index_of_id(const struct keel_plan *p, uint64_t id)
{
	uint32_t lo = 0, hi = p->worker_count;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (p->worker[p->heap[mid]].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < p->worker_count && p->worker[p->heap[lo]].id == id)
		return p->heap[lo];
	return KEEL_PLAN_NONE;
}

/* Remember who owned what, by id, so the next plan can say what moved. */
static void snapshot(struct keel_plan *p)
{
	for (uint32_t i = 0; i < p->item_count; i++) {
		uint32_t o = p->owner[i];
		p->prev_ok[i] = o != KEEL_PLAN_NONE;
		p->prev_id[i] = o != KEEL_PLAN_NONE ? p->worker[o].id : 0;
	}
}

int keel_plan_set_workers(struct keel_plan *p, const struct keel_worker *w, uint32_t n)
{
	KEEL_ASSERT(p != NULL && (w != NULL || n == 0));
	if (n == 0)
		return -EINVAL;
	if (n > p->cfg.workers_max)
		return -ENOSPC;
	for (uint32_t i = 0; i < n; i++)
		if (!(w[i].rate > 0) || !isfinite(w[i].rate) || !(w[i].measured_rate >= 0) ||
		    !(w[i].load >= 0))
			return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		p->heap[i] = i;
	keel_sort_idx(p->heap, n, id_less, w);
	for (uint32_t i = 1; i < n; i++)
		if (w[p->heap[i]].id == w[p->heap[i - 1]].id)
			return -EINVAL;
	snapshot(p);
	memcpy(p->worker, w, n * sizeof(*w));
	p->worker_count = n;
	for (uint32_t i = 0; i < n; i++)
		p->drained[i] = false;
	/* Owners become indexes in the new view; a lost worker's items become unassigned. */
	for (uint32_t i = 0; i < p->item_count; i++)
		p->owner[i] = p->prev_ok[i] ? index_of_id(p, p->prev_id[i]) : KEEL_PLAN_NONE;
	p->snap_valid = true;
	keel_plan_recount(p);
	return 0;
}

int keel_plan_set_measured(struct keel_plan *p, uint32_t w, double measured_rate, double load,
			   bool suspected)
{
	KEEL_ASSERT(p != NULL);
	if (w >= p->worker_count || !(measured_rate >= 0) || !isfinite(measured_rate) ||
	    !(load >= 0) || !isfinite(load))
		return -EINVAL;
	p->worker[w].measured_rate = measured_rate;
	p->worker[w].load = load;
	p->worker[w].suspected = suspected;
	return 0;
}

int keel_plan_set_items(struct keel_plan *p, const struct keel_item *items, uint32_t n)
{
	KEEL_ASSERT(p != NULL && (items != NULL || n == 0));
	if (n > p->cfg.items_max)
		return -ENOSPC;
	for (uint32_t i = 0; i < n; i++)
		if (!(items[i].work >= 0) || !isfinite(items[i].work))
			return -EINVAL;
	memcpy(p->item, items, (size_t)n * sizeof(*items));
	p->item_count = n;
	for (uint32_t i = 0; i < n; i++) {
		p->owner[i] = KEEL_PLAN_NONE;
		p->prev_ok[i] = false;
	}
	p->kind = PLAN_NONE;
	p->is_units = false;
	p->snap_valid = false;
	keel_plan_recount(p);
	return 0;
}

bool keel_plan_usable(const struct keel_plan *p, uint32_t w)
{
	return !p->drained[w];
}

bool keel_plan_fits(const struct keel_plan *p, uint32_t w, uint64_t bytes)
{
	uint64_t cap = p->worker[w].mem_bytes;
	return cap == 0 || (p->mem[w] <= cap && bytes <= cap - p->mem[w]);
}

void keel_plan_recount(struct keel_plan *p)
{
	for (uint32_t w = 0; w < p->worker_count; w++) {
		p->work[w] = 0;
		p->mem[w] = 0;
		p->count[w] = 0;
	}
	for (uint32_t i = 0; i < p->item_count; i++) {
		uint32_t o = p->owner[i];
		if (o == KEEL_PLAN_NONE)
			continue;
		p->work[o] += p->item[i].work;
		p->mem[o] += p->item[i].mem_bytes;
		p->count[o]++;
	}
}

/* Call before computing a plan: the previous owners, unless set_workers already took them. */
void keel_plan_begin(struct keel_plan *p)
{
	if (!p->snap_valid)
		snapshot(p);
	p->snap_valid = false;
	/* Per-plan caches for the O(items x workers) loops: no call or division inside them. */
	for (uint32_t w = 0; w < p->worker_count; w++) {
		p->inv_rate[w] = keel_plan_usable(p, w) ? 1.0 / keel_worker_rate(&p->worker[w]) : 0;
		p->id_hash[w] = keel_mix64(p->worker[w].id ^ 0x6b65656c706c616eull);
	}
}

static double capped_bound(const struct keel_plan *p, double lb);

static void bounds(const struct keel_plan *p, struct keel_plan_result *res)
{
	double total = 0, largest = 0, rate_sum = 0, rate_max = 0, makespan = 0;
	for (uint32_t i = 0; i < p->item_count; i++) {
		total += p->item[i].work;
		largest = fmax(largest, p->item[i].work);
	}
	for (uint32_t w = 0; w < p->worker_count; w++) {
		double r = keel_worker_rate(&p->worker[w]);
		if (p->count[w] > 0)
			makespan = fmax(makespan, p->work[w] / r);
		if (!keel_plan_usable(p, w))
			continue;
		rate_sum += r;
		rate_max = fmax(rate_max, r);
	}
	res->makespan_s = makespan;
	res->lower_bound_s = rate_sum > 0 ? fmax(total / rate_sum, largest / rate_max) : 0;
	res->lower_bound_s = capped_bound(p, res->lower_bound_s);
}

/* Shares under memory caps: worker w can do at most cap_w units, so no plan beats the smallest
 * t with sum_w min(cap_w * unit, t * r_w) >= total. Found by bisection (bounded: 100 steps). */
static double capped_bound(const struct keel_plan *p, double lb)
{
	const struct keel_item *u = &p->item[0];
	if (!p->is_units || p->item_count == 0 || u->mem_bytes == 0 || u->work <= 0)
		return lb;
	double total = u->work * p->item_count, lo = lb, hi = 0;
	for (uint32_t w = 0; w < p->worker_count; w++)
		if (keel_plan_usable(p, w))
			hi = fmax(hi, total / keel_worker_rate(&p->worker[w]));
	for (int step = 0; step < 100 && hi > lo * (1 + 1e-12); step++) {
		double t = (lo + hi) / 2, done = 0;
		for (uint32_t w = 0; w < p->worker_count; w++) {
			if (!keel_plan_usable(p, w))
				continue;
			double cap =
			    p->worker[w].mem_bytes == 0
				? INFINITY
				: (double)(p->worker[w].mem_bytes / u->mem_bytes) * u->work;
			done += fmin(cap, t * keel_worker_rate(&p->worker[w]));
		}
		if (done >= total)
			hi = t;
		else
			lo = t;
	}
	return lo;
}

void keel_plan_finish(struct keel_plan *p, struct keel_plan_result *res)
{
	keel_plan_recount(p);
	bounds(p, res);
	res->moved = 0;
	res->moved_work = 0;
	res->moved_bytes = 0;
	for (uint32_t i = 0; i < p->item_count; i++) {
		uint32_t o = p->owner[i];
		if (!p->prev_ok[i] || (o != KEEL_PLAN_NONE && p->worker[o].id == p->prev_id[i]))
			continue;
		res->moved++;
		res->moved_work += p->item[i].work;
		res->moved_bytes += p->item[i].mem_bytes;
	}
}

static void result_clear(struct keel_plan_result *res)
{
	*res = (struct keel_plan_result){.failed_item = KEEL_PLAN_NONE, .skew = 1.0};
}

/* Shares: a min-heap of workers keyed by the finish time of one more unit, (want+1)/rate. */
static bool unit_less(const struct keel_plan *p, uint32_t a, uint32_t b)
{
	double ta = (p->want[a] + 1.0) / keel_worker_rate(&p->worker[a]);
	double tb = (p->want[b] + 1.0) / keel_worker_rate(&p->worker[b]);
	return ta < tb || (ta == tb && a < b);
}

static void heap_down(struct keel_plan *p, uint32_t n, uint32_t i)
{
	uint32_t *h = p->heap;
	for (;;) { /* one level per step: log2(n) steps */
		uint32_t c = 2 * i + 1;
		if (c >= n)
			return;
		if (c + 1 < n && unit_less(p, h[c + 1], h[c]))
			c++;
		if (!unit_less(p, h[c], h[i]))
			return;
		uint32_t t = h[i];
		h[i] = h[c];
		h[c] = t;
		i = c;
	}
}

static uint32_t unit_cap(const struct keel_plan *p, uint32_t w, uint64_t unit_bytes)
{
	uint64_t cap = p->worker[w].mem_bytes;
	if (cap == 0 || unit_bytes == 0)
		return UINT32_MAX;
	uint64_t n = cap / unit_bytes;
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* Target counts: first floor(N r / R) (all of these are among the N earliest unit finishes, so
 * this equals pure greedy), then the rest one by one to the earliest finish. */
static int share_counts(struct keel_plan *p, uint32_t units, uint64_t unit_bytes)
{
	double rate_sum = 0;
	for (uint32_t w = 0; w < p->worker_count; w++)
		if (keel_plan_usable(p, w))
			rate_sum += keel_worker_rate(&p->worker[w]);
	uint64_t given = 0;
	uint32_t n = 0;
	for (uint32_t w = 0; w < p->worker_count; w++) {
		p->want[w] = 0;
		if (!keel_plan_usable(p, w))
			continue;
		double f = floor(units * (keel_worker_rate(&p->worker[w]) / rate_sum) * (1 - 1e-9));
		uint32_t cap = unit_cap(p, w, unit_bytes);
		p->want[w] = f < cap ? (uint32_t)f : cap;
		given += p->want[w];
		if (p->want[w] < cap)
			p->heap[n++] = w;
	}
	KEEL_ASSERT(given <= units);
	for (uint32_t i = n / 2; i-- > 0;)
		heap_down(p, n, i);
	for (uint64_t left = units - given; left > 0; left--) {
		if (n == 0)
			return -ENOSPC;
		uint32_t w = p->heap[0];
		p->want[w]++;
		if (p->want[w] >= unit_cap(p, w, unit_bytes))
			p->heap[0] = p->heap[--n];
		heap_down(p, n, 0);
	}
	return 0;
}

static bool spec_ok(const struct keel_shares_spec *s)
{
	return s->blocks > 0 && s->split >= KEEL_PLAN_SPLIT_MIN &&
	       s->split <= KEEL_PLAN_SPLIT_MAX && s->block_work >= 0 && isfinite(s->block_work);
}

/* (Re)build the unit items unless the current items are already these units. */
static void shares_items(struct keel_plan *p, const struct keel_shares_spec *s, uint32_t units)
{
	bool same = p->is_units && p->item_count == units && p->spec.block_work == s->block_work &&
		    p->spec.block_bytes == s->block_bytes && p->spec.split == s->split;
	if (same)
		return;
	uint64_t unit_bytes = (s->block_bytes + s->split - 1) / s->split;
	for (uint32_t u = 0; u < units; u++) {
		p->item[u] = (struct keel_item){s->block_work / s->split, unit_bytes, u};
		p->owner[u] = KEEL_PLAN_NONE;
		p->prev_ok[u] = false;
	}
	p->item_count = units;
	p->is_units = true;
	p->snap_valid = false;
}

int keel_plan_shares(struct keel_plan *p, const struct keel_shares_spec *spec,
		     struct keel_plan_result *res)
{
	KEEL_ASSERT(p != NULL && spec != NULL && res != NULL);
	result_clear(res);
	if (!spec_ok(spec) || p->worker_count == 0)
		return -EINVAL;
	uint64_t units = (uint64_t)spec->blocks * spec->split;
	if (units > p->cfg.items_max)
		return -ENOSPC;
	shares_items(p, spec, (uint32_t)units);
	p->spec = *spec;
	p->kind = PLAN_SHARES;
	keel_plan_begin(p);
	int err = share_counts(p, (uint32_t)units, p->item[0].mem_bytes);
	if (err != 0) {
		res->failed_item = 0;
		return err;
	}
	/* Keep each unit where it is while its worker still wants that many, in unit order. */
	for (uint32_t w = 0; w < p->worker_count; w++)
		p->count[w] = 0;
	for (uint32_t u = 0; u < units; u++) {
		uint32_t o = p->owner[u];
		if (o != KEEL_PLAN_NONE && p->count[o] < p->want[o])
			p->count[o]++;
		else
			p->owner[u] = KEEL_PLAN_NONE;
	}
	uint32_t w = 0;
	for (uint32_t u = 0; u < units; u++) {
		if (p->owner[u] != KEEL_PLAN_NONE)
			continue;
		while (p->count[w] >= p->want[w])
			w++; /* sum(want) == units, so w stays in range */
		KEEL_ASSERT(w < p->worker_count);
		p->owner[u] = w;
		p->count[w]++;
	}
	keel_plan_finish(p, res);
	return 0;
}

int keel_plan_even(struct keel_plan *p, struct keel_plan_result *res)
{
	KEEL_ASSERT(p != NULL && res != NULL);
	result_clear(res);
	uint32_t m = 0;
	for (uint32_t w = 0; w < p->worker_count; w++)
		if (keel_plan_usable(p, w))
			p->heap[m++] = w;
	if (m == 0 || p->item_count == 0)
		return -EINVAL;
	keel_plan_begin(p);
	uint32_t n = p->item_count;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t k = p->is_units ? (uint64_t)i * m / n : i % m;
		p->owner[i] = p->heap[k];
	}
	p->kind = PLAN_EVEN;
	keel_plan_finish(p, res);
	return 0;
}

int keel_plan_replan(struct keel_plan *p, struct keel_plan_result *res)
{
	KEEL_ASSERT(p != NULL && res != NULL);
	switch (p->kind) {
	case PLAN_SHARES:
		return keel_plan_shares(p, &p->spec, res);
	case PLAN_LPT:
		return keel_plan_items_replan(p, res);
	case PLAN_HASH:
		return keel_plan_items_hash(p, res);
	case PLAN_RANGE:
		return keel_plan_items_range(p, res);
	case PLAN_RDV:
		return keel_plan_items_rendezvous(p, res);
	case PLAN_EVEN:
		return keel_plan_even(p, res);
	case PLAN_NONE:
		break;
	}
	result_clear(res);
	return -EINVAL;
}

double keel_plan_skew(const double *task_s, uint32_t n)
{
	KEEL_ASSERT(task_s != NULL || n == 0);
	double lo = INFINITY, hi = 0;
	uint32_t seen = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (!(task_s[i] > 0))
			continue;
		lo = fmin(lo, task_s[i]);
		hi = fmax(hi, task_s[i]);
		seen++;
	}
	return seen < 2 ? 1.0 : hi / lo;
}

static double or_default(double v, double d)
{
	return v > 0 ? v : d;
}

bool keel_plan_skew_exceeded(double skew, const struct keel_plan_policy *pol)
{
	double max = or_default(pol != NULL ? pol->skew_max : 0, KEEL_PLAN_SKEW_MAX_DEFAULT);
	return skew > max;
}

bool keel_plan_worker_overloaded(const struct keel_worker *w, const struct keel_plan_policy *pol)
{
	KEEL_ASSERT(w != NULL);
	double max = or_default(pol != NULL ? pol->load_max : 0, KEEL_PLAN_LOAD_MAX_DEFAULT);
	return w->suspected || w->load > max;
}

/* Measured times become measured rates; returns the skew over workers that have work. */
static double measure(struct keel_plan *p, const double *task_s)
{
	double lo = INFINITY, hi = 0;
	uint32_t seen = 0;
	for (uint32_t w = 0; task_s != NULL && w < p->worker_count; w++) {
		if (p->count[w] == 0 || !(task_s[w] > 0) || !isfinite(task_s[w]))
			continue;
		if (p->work[w] > 0)
			p->worker[w].measured_rate = p->work[w] / task_s[w];
		lo = fmin(lo, task_s[w]);
		hi = fmax(hi, task_s[w]);
		seen++;
	}
	return seen < 2 ? 1.0 : hi / lo;
}

int keel_plan_repair(struct keel_plan *p, const struct keel_plan_policy *pol, const double *task_s,
		     struct keel_plan_result *res)
{
	KEEL_ASSERT(p != NULL && res != NULL);
	result_clear(res);
	if (p->kind == PLAN_NONE || p->worker_count == 0)
		return -EINVAL;
	keel_plan_recount(p);
	double skew = measure(p, task_s);
	bool changed = false, loaded = false;
	uint32_t drained = 0;
	for (uint32_t w = 0; w < p->worker_count; w++) {
		bool d = keel_plan_worker_overloaded(&p->worker[w], pol);
		changed |= d != p->drained[w];
		loaded |= d && p->count[w] > 0;
		p->drained[w] = d;
		drained += d;
	}
	if (drained == p->worker_count)
		return -EAGAIN;
	bool repartition = keel_plan_skew_exceeded(skew, pol) || changed || loaded;
	int err = 0;
	if (repartition) {
		err = keel_plan_replan(p, res);
	} else {
		keel_plan_begin(p);
		keel_plan_finish(p, res);
	}
	res->skew = skew;
	res->drained = drained;
	res->repartitioned = repartition;
	return err;
}

uint32_t keel_plan_worker_count(const struct keel_plan *p)
{
	KEEL_ASSERT(p != NULL);
	return p->worker_count;
}

const struct keel_worker *keel_plan_worker(const struct keel_plan *p, uint32_t w)
{
	KEEL_ASSERT(p != NULL);
	return w < p->worker_count ? &p->worker[w] : NULL;
}

uint32_t keel_plan_item_count(const struct keel_plan *p)
{
	KEEL_ASSERT(p != NULL);
	return p->item_count;
}

uint32_t keel_plan_owner(const struct keel_plan *p, uint32_t i)
{
	KEEL_ASSERT(p != NULL);
	return i < p->item_count ? p->owner[i] : KEEL_PLAN_NONE;
}

/* The same test as keel_plan_finish's count of moved items, item by item. */
uint32_t keel_plan_moves(const struct keel_plan *p, struct keel_plan_move *out, uint32_t max)
{
	KEEL_ASSERT(p != NULL && (out != NULL || max == 0));
	uint32_t n = 0;
	for (uint32_t i = 0; i < p->item_count; i++) {
		uint32_t o = p->owner[i];
		if (!p->prev_ok[i] || (o != KEEL_PLAN_NONE && p->worker[o].id == p->prev_id[i]))
			continue;
		if (n < max)
			out[n] = (struct keel_plan_move){
			    .item = i,
			    .from_id = p->prev_id[i],
			    .to_id = o != KEEL_PLAN_NONE ? p->worker[o].id : 0,
			    .to_none = o == KEEL_PLAN_NONE,
			};
		n++;
	}
	return n;
}

int keel_plan_worker_load(const struct keel_plan *p, uint32_t w, struct keel_plan_load *out)
{
	KEEL_ASSERT(p != NULL && out != NULL);
	if (w >= p->worker_count)
		return -EINVAL;
	double r = keel_worker_rate(&p->worker[w]);
	*out = (struct keel_plan_load){
	    .count = p->count[w],
	    .work = p->work[w],
	    .mem_bytes = p->mem[w],
	    .time_s = p->count[w] > 0 ? p->work[w] / r : 0,
	    .drained = p->drained[w],
	};
	return 0;
}
