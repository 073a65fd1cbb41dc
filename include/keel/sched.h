/* keel DAG placement: a task graph with per-worker-type costs, data volumes on edges and
 * placement hints, scheduled on heterogeneous workers by HEFT (Topcuoglu, Hariri, Wu, IEEE TPDS
 * 2002: upward rank, insertion-based earliest finish time). Caller memory only, no recursion. */
#ifndef KEEL_SCHED_H
#define KEEL_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hard maxima for the config: bound storage_size arithmetic. */
#define KEEL_SCHED_TASKS_MAX   (1u << 20)
#define KEEL_SCHED_EDGES_MAX   (1u << 24)
#define KEEL_SCHED_WORKERS_MAX 65536u
#define KEEL_SCHED_TYPES_MAX   256u
/* A "prefer" hint wins when its finish time is within this fraction of the best one. */
#define KEEL_SCHED_PREFER_SLACK 0.10
#define KEEL_SCHED_NONE		UINT32_MAX

struct keel_sched_config {
	uint32_t tasks_max;   /* 1..KEEL_SCHED_TASKS_MAX */
	uint32_t edges_max;   /* 0..KEEL_SCHED_EDGES_MAX */
	uint32_t workers_max; /* 1..KEEL_SCHED_WORKERS_MAX */
	uint32_t types_max;   /* worker types (cost table columns), 1..KEEL_SCHED_TYPES_MAX */
};

/* A worker: its type selects the cost column; communication between two different workers
 * takes max(lat) + bytes / min(bw); on the same worker it is free. */
struct keel_sched_worker {
	uint32_t type;
	double bw_Bps; /* > 0 */
	double lat_s;  /* >= 0 */
};

enum keel_sched_hint {
	KEEL_SCHED_ANY = 0, /* no hint */
	KEEL_SCHED_PIN,	    /* must run on hint_worker */
	KEEL_SCHED_PREFER,  /* hint_worker unless another finishes more than PREFER_SLACK earlier */
	KEEL_SCHED_AVOID,   /* not on hint_worker, unless it is the only one that can run it */
};

enum keel_sched_algo {
	KEEL_SCHED_HEFT = 0,	/* upward rank order, insertion-based earliest finish time */
	KEEL_SCHED_ROUND_ROBIN, /* baseline: topological order, workers in turn, no insertion */
};

/* Where and when a task runs. */
struct keel_sched_slot {
	uint32_t worker;
	double start_s;
	double finish_s;
};

struct keel_sched;

/* Bytes keel_sched_init needs; 0 if cfg is invalid. */
size_t keel_sched_storage_size(const struct keel_sched_config *cfg);
/* Build an empty scheduler in `mem` (8-byte aligned). -EINVAL: bad cfg or alignment;
 * -ENOSPC: mem_len too small. Never allocates. */
KEEL_MUST_USE int keel_sched_init(struct keel_sched **out, void *mem, size_t mem_len,
				  const struct keel_sched_config *cfg);
/* Forget tasks and edges (workers stay). */
void keel_sched_clear(struct keel_sched *s);
/* Workers (copied) and how many types the cost tables have. -EINVAL: n == 0, type >= types,
 * bw <= 0, lat < 0; -ENOSPC: n > workers_max or types > types_max. */
KEEL_MUST_USE int keel_sched_set_workers(struct keel_sched *s, const struct keel_sched_worker *w,
					 uint32_t n, uint32_t types);
/* Add a task; cost_s[type] is its run time on a worker of that type (INFINITY: cannot run
 * there). Ids are given in order from 0. -EINVAL: a cost < 0 or NaN, hint_worker out of range
 * for a hint, no workers yet; -ENOSPC: tasks_max reached. */
KEEL_MUST_USE int keel_sched_add_task(struct keel_sched *s, const double *cost_s,
				      enum keel_sched_hint hint, uint32_t hint_worker,
				      uint32_t *id_out);
/* from must finish, and its `bytes` reach to's worker, before to starts.
 * -EINVAL: unknown task, from == to, bytes < 0; -ENOSPC: edges_max reached. */
KEEL_MUST_USE int keel_sched_add_edge(struct keel_sched *s, uint32_t from, uint32_t to,
				      double bytes);
/* Schedule every task. -EINVAL: no tasks or workers, or the graph has a cycle; -ENOENT: a task
 * can run on no allowed worker (keel_sched_failed_task names it). */
KEEL_MUST_USE int keel_sched_run(struct keel_sched *s, enum keel_sched_algo algo,
				 double *makespan_s);
/* After a successful run. -EINVAL: bad id or not run. */
KEEL_MUST_USE int keel_sched_slot_get(const struct keel_sched *s, uint32_t task,
				      struct keel_sched_slot *out);
/* HEFT upward rank of a task after a HEFT run (NaN before, or for a bad id). */
double keel_sched_rank(const struct keel_sched *s, uint32_t task);
uint32_t keel_sched_task_count(const struct keel_sched *s);
uint32_t keel_sched_failed_task(const struct keel_sched *s);
/* Communication time for `bytes` from worker a to worker b (0 when a == b). */
double keel_sched_comm_s(const struct keel_sched *s, uint32_t a, uint32_t b, double bytes);

#ifdef __cplusplus
}
#endif

#endif
