/* HEFT list scheduling for heterogeneous workers, with a round-robin baseline. Everything lives
 * in the caller's memory; ranks are computed in reverse topological order (no recursion). */
#include <math.h>
#include <string.h>

#include "assert_int.h"
#include "keel/sched.h"
#include "partition_int.h"

#define ALIGN 8u

struct keel_sched {
	struct keel_sched_config cfg;
	uint32_t worker_count, type_count, task_count, edge_count;
	uint32_t failed_task;
	bool ran, ranked;
	struct keel_sched_worker *worker; /* [workers_max] */
	uint32_t *head;			  /* [workers_max] first task on the worker, by start */
	double *cost;			  /* [tasks_max * types_max] */
	uint8_t *hint;			  /* [tasks_max] */
	uint32_t *hint_w;		  /* [tasks_max] */
	double *rank, *start, *finish;	  /* [tasks_max] */
	uint32_t *where, *next, *topo, *pos, *order; /* [tasks_max] */
	uint32_t *succ_off, *pred_off;		     /* [tasks_max + 1] */
	uint32_t *e_from, *e_to, *succ, *pred;	     /* [edges_max] */
	double *e_bytes;			     /* [edges_max] */
};

static size_t carve(size_t *off, size_t len)
{
	size_t at = (*off + ALIGN - 1) & ~(size_t)(ALIGN - 1);
	*off = at + len;
	return at;
}

static bool config_ok(const struct keel_sched_config *c)
{
	return c != NULL && c->tasks_max >= 1 && c->tasks_max <= KEEL_SCHED_TASKS_MAX &&
	       c->edges_max <= KEEL_SCHED_EDGES_MAX && c->workers_max >= 1 &&
	       c->workers_max <= KEEL_SCHED_WORKERS_MAX && c->types_max >= 1 &&
	       c->types_max <= KEEL_SCHED_TYPES_MAX;
}

#define PLACE(field, len)                                                                          \
	do {                                                                                       \
		size_t at_ = carve(&off, (len));                                                   \
		if (s != NULL)                                                                     \
			s->field = (void *)(base + at_);                                           \
	} while (0)

static size_t layout(const struct keel_sched_config *c, struct keel_sched *s, char *base)
{
	size_t off = 0, t = c->tasks_max, e = c->edges_max, w = c->workers_max;
	carve(&off, sizeof(struct keel_sched));
	PLACE(worker, w * sizeof(struct keel_sched_worker));
	PLACE(head, w * sizeof(uint32_t));
	PLACE(cost, t * c->types_max * sizeof(double));
	PLACE(hint, t);
	PLACE(hint_w, t * sizeof(uint32_t));
	PLACE(rank, t * sizeof(double));
	PLACE(start, t * sizeof(double));
	PLACE(finish, t * sizeof(double));
	PLACE(where, t * sizeof(uint32_t));
	PLACE(next, t * sizeof(uint32_t));
	PLACE(topo, t * sizeof(uint32_t));
	PLACE(pos, t * sizeof(uint32_t));
	PLACE(order, t * sizeof(uint32_t));
	PLACE(succ_off, (t + 1) * sizeof(uint32_t));
	PLACE(pred_off, (t + 1) * sizeof(uint32_t));
	PLACE(e_from, e * sizeof(uint32_t));
	PLACE(e_to, e * sizeof(uint32_t));
	PLACE(succ, e * sizeof(uint32_t));
	PLACE(pred, e * sizeof(uint32_t));
	PLACE(e_bytes, e * sizeof(double));
	return off;
}

size_t keel_sched_storage_size(const struct keel_sched_config *cfg)
{
	return config_ok(cfg) ? layout(cfg, NULL, NULL) : 0;
}

int keel_sched_init(struct keel_sched **out, void *mem, size_t mem_len,
		    const struct keel_sched_config *cfg)
{
	KEEL_ASSERT(out != NULL);
	if (!config_ok(cfg) || mem == NULL || ((uintptr_t)mem & (ALIGN - 1)) != 0)
		return -EINVAL;
	if (mem_len < keel_sched_storage_size(cfg))
		return -ENOSPC;
	struct keel_sched *s = mem;
	memset(s, 0, sizeof(*s));
	s->cfg = *cfg;
	layout(cfg, s, mem);
	s->failed_task = KEEL_SCHED_NONE;
	*out = s;
	return 0;
}

void keel_sched_clear(struct keel_sched *s)
{
	KEEL_ASSERT(s != NULL);
	s->task_count = 0;
	s->edge_count = 0;
	s->ran = false;
	s->ranked = false;
	s->failed_task = KEEL_SCHED_NONE;
}

int keel_sched_set_workers(struct keel_sched *s, const struct keel_sched_worker *w, uint32_t n,
			   uint32_t types)
{
	KEEL_ASSERT(s != NULL && (w != NULL || n == 0));
	if (n == 0 || types == 0)
		return -EINVAL;
	if (n > s->cfg.workers_max || types > s->cfg.types_max)
		return -ENOSPC;
	if (s->task_count > 0 && types != s->type_count)
		return -EINVAL; /* the cost tables were written for the old type count */
	for (uint32_t i = 0; i < n; i++)
		if (w[i].type >= types || !(w[i].bw_Bps > 0) || !(w[i].lat_s >= 0))
			return -EINVAL;
	memcpy(s->worker, w, n * sizeof(*w));
	s->worker_count = n;
	s->type_count = types;
	s->ran = false;
	return 0;
}

int keel_sched_add_task(struct keel_sched *s, const double *cost_s, enum keel_sched_hint hint,
			uint32_t hint_worker, uint32_t *id_out)
{
	KEEL_ASSERT(s != NULL && cost_s != NULL && id_out != NULL);
	if (s->worker_count == 0 || (unsigned)hint > KEEL_SCHED_AVOID)
		return -EINVAL;
	if (hint != KEEL_SCHED_ANY && hint_worker >= s->worker_count)
		return -EINVAL;
	for (uint32_t k = 0; k < s->type_count; k++)
		if (!(cost_s[k] >= 0))
			return -EINVAL;
	if (s->task_count >= s->cfg.tasks_max)
		return -ENOSPC;
	uint32_t t = s->task_count++;
	memcpy(&s->cost[(size_t)t * s->type_count], cost_s, s->type_count * sizeof(double));
	s->hint[t] = (uint8_t)hint;
	s->hint_w[t] = hint_worker;
	s->ran = false;
	*id_out = t;
	return 0;
}

int keel_sched_add_edge(struct keel_sched *s, uint32_t from, uint32_t to, double bytes)
{
	KEEL_ASSERT(s != NULL);
	if (from >= s->task_count || to >= s->task_count || from == to || !(bytes >= 0) ||
	    !isfinite(bytes))
		return -EINVAL;
	if (s->edge_count >= s->cfg.edges_max)
		return -ENOSPC;
	uint32_t e = s->edge_count++;
	s->e_from[e] = from;
	s->e_to[e] = to;
	s->e_bytes[e] = bytes;
	s->ran = false;
	return 0;
}

double keel_sched_comm_s(const struct keel_sched *s, uint32_t a, uint32_t b, double bytes)
{
	KEEL_ASSERT(s != NULL && a < s->worker_count && b < s->worker_count);
	if (a == b)
		return 0;
	const struct keel_sched_worker *wa = &s->worker[a], *wb = &s->worker[b];
	return fmax(wa->lat_s, wb->lat_s) + bytes / fmin(wa->bw_Bps, wb->bw_Bps);
}

static double cost_on(const struct keel_sched *s, uint32_t t, uint32_t w)
{
	return s->cost[(size_t)t * s->type_count + s->worker[w].type];
}

/* Successor and predecessor lists (edge indexes) by counting sort: CSR in caller memory. */
static void build_csr(struct keel_sched *s)
{
	uint32_t n = s->task_count;
	for (uint32_t i = 0; i <= n; i++) {
		s->succ_off[i] = 0;
		s->pred_off[i] = 0;
	}
	for (uint32_t e = 0; e < s->edge_count; e++) {
		s->succ_off[s->e_from[e] + 1]++;
		s->pred_off[s->e_to[e] + 1]++;
	}
	for (uint32_t i = 0; i < n; i++) {
		s->succ_off[i + 1] += s->succ_off[i];
		s->pred_off[i + 1] += s->pred_off[i];
	}
	/* order[] and pos[] serve as fill cursors here; topo() overwrites them afterwards. */
	for (uint32_t i = 0; i < n; i++) {
		s->order[i] = s->succ_off[i];
		s->pos[i] = s->pred_off[i];
	}
	for (uint32_t e = 0; e < s->edge_count; e++) {
		s->succ[s->order[s->e_from[e]]++] = e;
		s->pred[s->pos[s->e_to[e]]++] = e;
	}
}

/* Kahn's algorithm; topo[] doubles as the FIFO. Returns false on a cycle. */
static bool topo_sort(struct keel_sched *s)
{
	uint32_t n = s->task_count, tail = 0;
	uint32_t *indeg = s->order; /* scratch until the rank sort */
	for (uint32_t i = 0; i < n; i++) {
		indeg[i] = s->pred_off[i + 1] - s->pred_off[i];
		if (indeg[i] == 0)
			s->topo[tail++] = i;
	}
	for (uint32_t head = 0; head < tail; head++) {
		uint32_t t = s->topo[head];
		s->pos[t] = head;
		for (uint32_t k = s->succ_off[t]; k < s->succ_off[t + 1]; k++) {
			uint32_t j = s->e_to[s->succ[k]];
			if (--indeg[j] == 0)
				s->topo[tail++] = j;
		}
	}
	return tail == n;
}

static bool bw_less(const void *ctx, uint32_t a, uint32_t b)
{
	const struct keel_sched_worker *w = ctx;
	return w[a].bw_Bps < w[b].bw_Bps || (w[a].bw_Bps == w[b].bw_Bps && a < b);
}

static bool lat_less(const void *ctx, uint32_t a, uint32_t b)
{
	const struct keel_sched_worker *w = ctx;
	return w[a].lat_s < w[b].lat_s || (w[a].lat_s == w[b].lat_s && a < b);
}

/* Mean over worker pairs of min(bw) and max(lat), in O(p log p): once sorted ascending, the
 * i-th bandwidth is the minimum of its pairs with the p-1-i above it, the i-th latency the
 * maximum of its pairs with the i below it. head[] is scratch here. */
static void mean_link(struct keel_sched *s, double *lat_s, double *bw_Bps)
{
	uint32_t p = s->worker_count;
	double pairs = (double)p * (p - 1) / 2, bw = 0, lat = 0;
	for (uint32_t i = 0; i < p; i++)
		s->head[i] = i;
	keel_sort_idx(s->head, p, bw_less, s->worker);
	for (uint32_t i = 0; i < p; i++)
		bw += s->worker[s->head[i]].bw_Bps * (p - 1 - i);
	for (uint32_t i = 0; i < p; i++)
		s->head[i] = i;
	keel_sort_idx(s->head, p, lat_less, s->worker);
	for (uint32_t i = 0; i < p; i++)
		lat += s->worker[s->head[i]].lat_s * i;
	*lat_s = p > 1 ? lat / pairs : 0;
	*bw_Bps = p > 1 ? bw / pairs : INFINITY;
}

/* Upward rank: mean cost plus the longest (mean comm + rank) over successors, in reverse
 * topological order so every successor is ranked first. */
static int upward_ranks(struct keel_sched *s)
{
	double lat, bw;
	mean_link(s, &lat, &bw);
	for (uint32_t k = s->task_count; k-- > 0;) {
		uint32_t t = s->topo[k], finite = 0;
		double sum = 0, tail = 0;
		for (uint32_t w = 0; w < s->worker_count; w++) {
			double c = cost_on(s, t, w);
			if (isfinite(c)) {
				sum += c;
				finite++;
			}
		}
		if (finite == 0) {
			s->failed_task = t;
			return -ENOENT;
		}
		for (uint32_t e = s->succ_off[t]; e < s->succ_off[t + 1]; e++) {
			uint32_t ed = s->succ[e];
			double c = s->worker_count > 1 ? lat + s->e_bytes[ed] / bw : 0;
			tail = fmax(tail, c + s->rank[s->e_to[ed]]);
		}
		s->rank[t] = sum / finite + tail;
	}
	return 0;
}

/* Rank descending; equal ranks keep topological order, so the result is a topological order. */
static bool rank_before(const void *ctx, uint32_t a, uint32_t b)
{
	const struct keel_sched *s = ctx;
	return s->rank[a] > s->rank[b] || (s->rank[a] == s->rank[b] && s->pos[a] < s->pos[b]);
}

/* When every input of t could be on worker w. */
static double ready_on(const struct keel_sched *s, uint32_t t, uint32_t w)
{
	double r = 0;
	for (uint32_t k = s->pred_off[t]; k < s->pred_off[t + 1]; k++) {
		uint32_t e = s->pred[k], from = s->e_from[e];
		r = fmax(r,
			 s->finish[from] + keel_sched_comm_s(s, s->where[from], w, s->e_bytes[e]));
	}
	return r;
}

/* Earliest start >= ready for `dur` on w: the first idle gap long enough (insertion), or after
 * the worker's last task. */
static double start_on(const struct keel_sched *s, uint32_t w, double ready, double dur,
		       bool insertion)
{
	double prev_end = 0;
	for (uint32_t t = s->head[w]; t != KEEL_SCHED_NONE; t = s->next[t]) {
		double at = fmax(ready, prev_end);
		if (insertion && at + dur <= s->start[t])
			return at;
		prev_end = fmax(prev_end, s->finish[t]);
	}
	return fmax(ready, prev_end);
}

static void commit(struct keel_sched *s, uint32_t t, uint32_t w, double start)
{
	s->where[t] = w;
	s->start[t] = start;
	s->finish[t] = start + cost_on(s, t, w);
	uint32_t *link = &s->head[w];
	while (*link != KEEL_SCHED_NONE && s->start[*link] <= start)
		link = &s->next[*link];
	s->next[t] = *link;
	*link = t;
}

static bool allowed(const struct keel_sched *s, uint32_t t, uint32_t w, bool avoid_strict)
{
	if (!isfinite(cost_on(s, t, w)))
		return false;
	if (s->hint[t] == KEEL_SCHED_PIN)
		return w == s->hint_w[t];
	if (s->hint[t] == KEEL_SCHED_AVOID && avoid_strict)
		return w != s->hint_w[t];
	return true;
}

/* HEFT choice: the allowed worker with the earliest finish (ties to the lowest index); an
 * avoided worker only if nothing else can run the task; a preferred one if close enough. */
static int place_heft(struct keel_sched *s, uint32_t t)
{
	uint32_t best = KEEL_SCHED_NONE;
	double best_eft = INFINITY, best_st = 0;
	for (int pass = 0; pass < 2 && best == KEEL_SCHED_NONE; pass++) {
		for (uint32_t w = 0; w < s->worker_count; w++) {
			if (!allowed(s, t, w, pass == 0))
				continue;
			double c = cost_on(s, t, w);
			double st = start_on(s, w, ready_on(s, t, w), c, true);
			if (st + c < best_eft) {
				best_eft = st + c;
				best_st = st;
				best = w;
			}
		}
	}
	if (best == KEEL_SCHED_NONE) {
		s->failed_task = t;
		return -ENOENT;
	}
	uint32_t pw = s->hint_w[t];
	if (s->hint[t] == KEEL_SCHED_PREFER && pw != best && isfinite(cost_on(s, t, pw))) {
		double c = cost_on(s, t, pw);
		double st = start_on(s, pw, ready_on(s, t, pw), c, true);
		if (st + c <= best_eft * (1 + KEEL_SCHED_PREFER_SLACK)) {
			best = pw;
			best_st = st;
		}
	}
	commit(s, t, best, best_st);
	return 0;
}

/* Baseline: workers in turn (skipping those that cannot run the task), no insertion. */
static int place_rr(struct keel_sched *s, uint32_t t, uint32_t *turn)
{
	uint32_t p = s->worker_count, w = KEEL_SCHED_NONE;
	for (int pass = 0; pass < 2 && w == KEEL_SCHED_NONE; pass++) {
		for (uint32_t k = 0; k < p; k++) {
			uint32_t c = (*turn + k) % p;
			if (allowed(s, t, c, pass == 0)) {
				w = c;
				break;
			}
		}
	}
	if (w == KEEL_SCHED_NONE) {
		s->failed_task = t;
		return -ENOENT;
	}
	if (s->hint[t] != KEEL_SCHED_PIN)
		*turn = (w + 1) % p;
	commit(s, t, w, start_on(s, w, ready_on(s, t, w), cost_on(s, t, w), false));
	return 0;
}

int keel_sched_run(struct keel_sched *s, enum keel_sched_algo algo, double *makespan_s)
{
	KEEL_ASSERT(s != NULL && makespan_s != NULL);
	s->ran = false;
	s->ranked = false;
	s->failed_task = KEEL_SCHED_NONE;
	if (s->task_count == 0 || s->worker_count == 0 || (unsigned)algo > KEEL_SCHED_ROUND_ROBIN)
		return -EINVAL;
	build_csr(s);
	if (!topo_sort(s))
		return -EINVAL;
	uint32_t n = s->task_count;
	if (algo == KEEL_SCHED_HEFT) {
		int err = upward_ranks(s);
		if (err != 0)
			return err;
		s->ranked = true;
	}
	for (uint32_t i = 0; i < n; i++)
		s->order[i] = s->topo[i];
	if (algo == KEEL_SCHED_HEFT)
		keel_sort_idx(s->order, n, rank_before, s);
	for (uint32_t w = 0; w < s->worker_count; w++)
		s->head[w] = KEEL_SCHED_NONE;
	uint32_t turn = 0;
	double makespan = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t t = s->order[i];
		int err = algo == KEEL_SCHED_HEFT ? place_heft(s, t) : place_rr(s, t, &turn);
		if (err != 0)
			return err;
		makespan = fmax(makespan, s->finish[t]);
	}
	s->ran = true;
	*makespan_s = makespan;
	return 0;
}

int keel_sched_slot_get(const struct keel_sched *s, uint32_t task, struct keel_sched_slot *out)
{
	KEEL_ASSERT(s != NULL && out != NULL);
	if (!s->ran || task >= s->task_count)
		return -EINVAL;
	*out = (struct keel_sched_slot){s->where[task], s->start[task], s->finish[task]};
	return 0;
}

double keel_sched_rank(const struct keel_sched *s, uint32_t task)
{
	KEEL_ASSERT(s != NULL);
	if (!s->ranked || task >= s->task_count)
		return NAN;
	return s->rank[task];
}

uint32_t keel_sched_task_count(const struct keel_sched *s)
{
	KEEL_ASSERT(s != NULL);
	return s->task_count;
}

uint32_t keel_sched_failed_task(const struct keel_sched *s)
{
	KEEL_ASSERT(s != NULL);
	return s->failed_task;
}
