/* keel partition planner: who does what on a heterogeneous cluster. Divisible work (micro-batch
 * shares), indivisible items (LPT, hash, range, weighted rendezvous), skew repair, migration and
 * view changes with minimal movement. Caller memory only: never allocates, never reads a clock. */
#ifndef KEEL_PARTITION_H
#define KEEL_PARTITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Defaults from DESIGN.md "Defaults taken from practice". */
#define KEEL_PLAN_SKEW_MAX_DEFAULT 2.0 /* re-partition when max/min task time is above this */
#define KEEL_PLAN_LOAD_MAX_DEFAULT 0.8 /* migrate work off a worker whose load is above this */
#define KEEL_PLAN_SPLIT_MIN	   8u  /* shares: finest split is 1/16, coarsest 1/8 of a block */
#define KEEL_PLAN_SPLIT_MAX	   16u
#define KEEL_PLAN_NONE		   UINT32_MAX /* "no worker" / "no item" */
/* Hard maxima for the config: bound storage_size arithmetic. */
#define KEEL_PLAN_WORKERS_MAX 65536u
#define KEEL_PLAN_ITEMS_MAX   (1u << 24)

/* Hardware presets: ONE table, shared by the planner, keel-plan and keel-sim. Each entry's
 * figures and their public datasheet source are in runtime/plan/partition_presets.c (`source`
 * below) and in docs/keel-plan.md's presets table. Tools describe other parts with
 * `define gpu` / `define link` (tools/common/plan_preset.c); the runtime only holds the
 * constants. */
enum keel_gpu {
	KEEL_GPU_V100_16 = 0,
	KEEL_GPU_V100_32,
	KEEL_GPU_A100_40,
	KEEL_GPU_A100_80,
	KEEL_GPU_H100,
	KEEL_GPU_H200,
	KEEL_GPU_B200,
	KEEL_GPU_GB200,
	KEEL_GPU_MI300X,
	KEEL_GPU_MI325X,
	KEEL_GPU_L40S,
	KEEL_GPU_COUNT
};

/* Link presets: the link a worker reaches the others through (a GPU's own scale-up link, or
 * the NIC of a scale-out fabric). */
enum keel_link {
	KEEL_LINK_NVLINK2 = 0,
	KEEL_LINK_NVLINK3,
	KEEL_LINK_NVLINK4,
	KEEL_LINK_NVLINK5,
	KEEL_LINK_XGMI,	 /* AMD Infinity Fabric (MI300X / MI325X platforms) */
	KEEL_LINK_PCIE4, /* PCIe 4.0 x16 */
	KEEL_LINK_PCIE5, /* PCIe 5.0 x16 */
	KEEL_LINK_IB_EDR,
	KEEL_LINK_IB_HDR,
	KEEL_LINK_IB_NDR,
	KEEL_LINK_IB_XDR,
	KEEL_LINK_ROCE_100G,
	KEEL_LINK_ROCE_200G,
	KEEL_LINK_ROCE_400G,
	KEEL_LINK_ETH_25G,
	KEEL_LINK_ETH_100G,
	KEEL_LINK_ETH_400G,
	KEEL_LINK_COUNT,
	/* Not a table entry: a link the caller described itself (bw_Bps, lat_s of the worker). */
	KEEL_LINK_CUSTOM = 255
};

struct keel_gpu_preset {
	const char *name;    /* "H100", "A100-80", ... */
	double rate_flops;   /* dense BF16 tensor peak (FP16 on V100), FLOP/s, no sparsity */
	uint64_t mem_bytes;  /* device memory, bytes (decimal GB as the datasheet states) */
	enum keel_link link; /* the part's own scale-up link (NVLink, Infinity Fabric, PCIe) */
	const char *source;  /* the datasheet the figures come from, and any doubt about them */
};

struct keel_link_preset {
	const char *name;   /* "nvlink4", "ib-ndr", "eth-100g", ... */
	double bw_Bps;	    /* per direction, bytes/s */
	double lat_s;	    /* one-way, endpoint to endpoint: an estimate, not a datasheet figure */
	const char *label;  /* "NVLink 4, 900 GB/s both directions" */
	const char *source; /* where the bandwidth comes from */
};

/* Preset tables. NULL when out of range. */
const struct keel_gpu_preset *keel_gpu_preset_get(enum keel_gpu gpu);
const struct keel_link_preset *keel_link_preset_get(enum keel_link link);
/* Look a preset up by name, case-insensitive. Older short names are kept as aliases: GPUs
 * "V100" (V100-32), "A100" (A100-80); links "ib" and "ndr" (ib-ndr), "hdr", "edr", "xdr",
 * "eth" (eth-100g), "eth400" (eth-400g), "infinity-fabric" (xgmi). Returns the enum value,
 * or -ENOENT. */
KEEL_MUST_USE int keel_gpu_preset_find(const char *name);
KEEL_MUST_USE int keel_link_preset_find(const char *name);

/* One worker (a GPU). Every field may be overridden after keel_worker_from_preset. */
struct keel_worker {
	uint64_t id;   /* stable across views (e.g. the rank's incarnation-free id); unique */
	uint32_t type; /* worker type: index into DAG cost tables; free for the caller */
	double rate;   /* nominal throughput, work units/s (FLOP/s for presets); > 0 */
	double measured_rate; /* measured throughput; 0 = not measured, use `rate` */
	uint64_t mem_bytes;   /* memory for items/units; 0 = no cap */
	enum keel_link link;  /* link class */
	double bw_Bps;	      /* bandwidth to the others, bytes/s */
	double lat_s;	      /* latency to the others, s */
	double load;	      /* measured load, 0..1 (busy fraction from other work) */
	bool suspected;	      /* the failure detector suspects it */
};

/* Fill `w` from presets: rate, memory, link bandwidth/latency. type = gpu. */
void keel_worker_from_preset(struct keel_worker *w, uint64_t id, enum keel_gpu gpu,
			     enum keel_link link);
/* The rate the planner uses: measured_rate when set, else rate. */
double keel_worker_rate(const struct keel_worker *w);

/* An indivisible item: a shard, a layer, an expert. */
struct keel_item {
	double work;	    /* work units (same unit as worker rate); >= 0 */
	uint64_t mem_bytes; /* memory it needs on its worker */
	uint64_t key;	    /* hashing key (hash, range and rendezvous placement) */
};

struct keel_plan_config {
	uint32_t workers_max; /* 1..KEEL_PLAN_WORKERS_MAX */
	uint32_t items_max;   /* items, or share units (blocks * split); 1..KEEL_PLAN_ITEMS_MAX */
};

/* Divisible work: a global batch of `blocks` data blocks, each split into `split` units
 * (granularity 1/split of a block, split in KEEL_PLAN_SPLIT_MIN..MAX). */
struct keel_shares_spec {
	uint32_t blocks;
	uint32_t split;
	double block_work;    /* work per block */
	uint64_t block_bytes; /* memory per block on its worker (a unit needs block_bytes/split) */
};

/* Thresholds for repair; zero fields take the defaults above. */
struct keel_plan_policy {
	double skew_max;
	double load_max;
};

struct keel_plan_result {
	double makespan_s;    /* predicted step time: max over workers of work / rate */
	double lower_bound_s; /* max(total work / total rate, largest item / fastest rate); for
			       * shares also what memory caps force on the faster workers */
	uint32_t moved;	      /* items (units) whose worker changed since the previous plan */
	double moved_work;
	uint64_t moved_bytes;
	uint32_t failed_item; /* on -ENOSPC: the item that fit on no worker; else KEEL_PLAN_NONE */
	double skew;	      /* repair: max/min of the measured times */
	uint32_t drained;     /* repair: workers drained (overloaded or suspected) */
	bool repartitioned;   /* repair: the plan was recomputed */
};

/* Per-worker view of the current plan. */
struct keel_plan_load {
	uint32_t count;	    /* items or units */
	double work;	    /* sum of their work */
	uint64_t mem_bytes; /* sum of their memory */
	double time_s;	    /* work / keel_worker_rate (0 with no work) */
	bool drained;	    /* excluded by repair */
};

struct keel_plan;

/* Bytes keel_plan_init needs for `cfg`; 0 if cfg is invalid. */
size_t keel_plan_storage_size(const struct keel_plan_config *cfg);
/* Build an empty planner in `mem` (>= storage_size bytes, 8-byte aligned). Never allocates.
 * -EINVAL: cfg out of range or mem misaligned; -ENOSPC: mem_len too small. */
KEEL_MUST_USE int keel_plan_init(struct keel_plan **out, void *mem, size_t mem_len,
				 const struct keel_plan_config *cfg);

/* Install the workers of a view (copied). The current assignment is remembered by worker id,
 * so the next plan keeps what it can and reports what moved. Clears drained marks.
 * -EINVAL: n == 0, a rate <= 0 or not finite, duplicate id; -ENOSPC: n > workers_max. */
KEEL_MUST_USE int keel_plan_set_workers(struct keel_plan *p, const struct keel_worker *w,
					uint32_t n);
/* Update what was measured about worker `w` (index in the current view): throughput
 * (0 = none), load 0..1, suspicion. -EINVAL: bad index or values. */
KEEL_MUST_USE int keel_plan_set_measured(struct keel_plan *p, uint32_t w, double measured_rate,
					 double load, bool suspected);
/* Install items (copied). A new item set forgets the previous assignment.
 * -EINVAL: bad work; -ENOSPC: n > items_max. */
KEEL_MUST_USE int keel_plan_set_items(struct keel_plan *p, const struct keel_item *items,
				      uint32_t n);

/* Divisible work: units to workers in proportion to throughput, memory caps respected. Greedy
 * earliest-finish over units, which is optimal for equal units; makespan <= lower bound + one
 * unit on the slowest used worker (unit_work / min rate). Units stay with their previous
 * worker where the new counts allow (minimal movement). -EINVAL: bad spec; -ENOSPC: more units
 * than items_max, or the units do not fit in the workers' memory. */
KEEL_MUST_USE int keel_plan_shares(struct keel_plan *p, const struct keel_shares_spec *spec,
				   struct keel_plan_result *res);

/* Indivisible items (after keel_plan_set_items). All return -ENOSPC with res->failed_item set
 * when an item fits on no worker's remaining memory, -EINVAL without items/workers.
 * LPT: largest work first, each to the worker where it finishes first (among those with room).
 * Without memory caps, makespan <= 2m/(m+1) * optimum (Gonzalez, Ibarra, Sahni 1977) and
 * <= total/R + (m-1) * largest / R (list-scheduling argument, R = total rate). */
KEEL_MUST_USE int keel_plan_items_lpt(struct keel_plan *p, struct keel_plan_result *res);
/* hash(key) mod m: the classic, for comparison (moves ~all items on a view change). */
KEEL_MUST_USE int keel_plan_items_hash(struct keel_plan *p, struct keel_plan_result *res);
/* Contiguous ranges of items (in the order given) with work proportional to rate. */
KEEL_MUST_USE int keel_plan_items_range(struct keel_plan *p, struct keel_plan_result *res);
/* Weighted rendezvous (highest random weight): score = rate / -ln(u(key, worker id)); the
 * highest-scoring worker with room. Removing a worker moves only that worker's items. */
KEEL_MUST_USE int keel_plan_items_rendezvous(struct keel_plan *p, struct keel_plan_result *res);
/* Even split, ignoring rates and memory: units in equal contiguous ranges, items round robin.
 * The baseline the capacity-aware plan is compared with. Fills makespan and lower bound. */
KEEL_MUST_USE int keel_plan_even(struct keel_plan *p, struct keel_plan_result *res);

/* Recompute the last plan kind for the current workers with minimal movement: shares keep
 * units; rendezvous rehashes (only lost workers' items move); LPT keeps items on surviving
 * workers, places orphans largest first, then moves items off the bottleneck while that
 * lowers the makespan. Call after keel_plan_set_workers on a view change. */
KEEL_MUST_USE int keel_plan_replan(struct keel_plan *p, struct keel_plan_result *res);

/* Skew of measured task times: max/min over entries > 0; 1.0 with fewer than two. */
double keel_plan_skew(const double *task_s, uint32_t n);
/* Triggers, strict: skew > skew_max; load > load_max or suspected. */
bool keel_plan_skew_exceeded(double skew, const struct keel_plan_policy *pol);
bool keel_plan_worker_overloaded(const struct keel_worker *w, const struct keel_plan_policy *pol);
/* Skew repair and migration. task_s[w] is worker w's measured time for its current work (0 =
 * not measured; NULL = none): it sets measured_rate = work / time. Workers overloaded or
 * suspected are drained (get nothing). If the skew exceeds the policy or a worker is drained,
 * the plan is recomputed as keel_plan_replan does; res says what happened and what moved.
 * -EINVAL: no plan yet; -ENOSPC as the plan kind; -EAGAIN: every worker drained. */
KEEL_MUST_USE int keel_plan_repair(struct keel_plan *p, const struct keel_plan_policy *pol,
				   const double *task_s, struct keel_plan_result *res);

/* Queries on the current plan. */
uint32_t keel_plan_worker_count(const struct keel_plan *p);
const struct keel_worker *keel_plan_worker(const struct keel_plan *p, uint32_t w);
/* Items (or units) in the current plan. */
uint32_t keel_plan_item_count(const struct keel_plan *p);
/* Worker index of item/unit i, KEEL_PLAN_NONE if unassigned or out of range. */
uint32_t keel_plan_owner(const struct keel_plan *p, uint32_t i);
/* An item the last plan moved: an application that holds the item's data sends it from the
 * previous owner to the new one before the next step uses the plan. */
struct keel_plan_move {
	uint32_t item;
	uint64_t from_id; /* keel_worker.id of the previous owner */
	uint64_t to_id;	  /* the new owner's id (0 when to_none) */
	bool to_none;	  /* the item has no owner now (it fitted nowhere) */
};

/* The items whose worker changed in the last plan (keel_plan_items_*, keel_plan_shares,
 * keel_plan_even, keel_plan_replan, keel_plan_repair), in item order: up to `max` written to
 * out (NULL when max is 0). Returns how many moved in all, the result's `moved`, which may be
 * more than max (call again with room for them). A worker that left in keel_plan_set_workers
 * is the `from` of its items. Valid until the next keel_plan_set_workers, keel_plan_set_items
 * or plan; before any plan, 0. */
uint32_t keel_plan_moves(const struct keel_plan *p, struct keel_plan_move *out, uint32_t max);
/* -EINVAL: bad index. */
KEEL_MUST_USE int keel_plan_worker_load(const struct keel_plan *p, uint32_t w,
					struct keel_plan_load *out);

#ifdef __cplusplus
}
#endif

#endif
