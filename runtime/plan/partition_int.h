/* Private to the planner (partition*.c, sched.c): the plan's layout and shared helpers.
 * Everything lives in the caller's memory; nothing here allocates. */
#ifndef KEEL_PARTITION_INT_H
#define KEEL_PARTITION_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "keel/partition.h"

enum plan_kind { PLAN_NONE = 0, PLAN_SHARES, PLAN_LPT, PLAN_HASH, PLAN_RANGE, PLAN_RDV, PLAN_EVEN };

struct keel_plan {
	struct keel_plan_config cfg;
	enum plan_kind kind;
	uint32_t worker_count;
	uint32_t item_count;
	bool is_units;		      /* items are share units (keel_plan_shares) */
	bool snap_valid;	      /* prev_id/prev_ok already hold the previous plan */
	struct keel_shares_spec spec; /* last shares spec (PLAN_SHARES) */
	struct keel_worker *worker;   /* [workers_max] */
	bool *drained;		      /* [workers_max] */
	double *work;		      /* [workers_max] assigned work */
	double *inv_rate;	      /* [workers_max] 1 / rate, 0 when drained (plan_begin) */
	uint64_t *id_hash;	      /* [workers_max] mixed worker id (rendezvous) */
	uint64_t *mem;		      /* [workers_max] assigned memory */
	uint32_t *count;	      /* [workers_max] assigned items */
	uint32_t *want;		      /* [workers_max] shares: target unit counts */
	uint32_t *heap;		      /* [workers_max] scratch: heap / sorted worker ids */
	struct keel_item *item;	      /* [items_max] */
	uint32_t *owner;	      /* [items_max] worker index or KEEL_PLAN_NONE */
	uint64_t *prev_id;	      /* [items_max] previous owner's id, valid if prev_ok */
	bool *prev_ok;		      /* [items_max] */
	uint32_t *order;	      /* [items_max] scratch: item order */
};

/* Sort idx[0..n) with a strict weak order; heapsort, so no recursion and no extra memory. */
typedef bool (*keel_less_fn)(const void *ctx, uint32_t a, uint32_t b);
void keel_sort_idx(uint32_t *idx, uint32_t n, keel_less_fn less, const void *ctx);
/* 64-bit mixer (splitmix64 finaliser): deterministic, well spread. */
uint64_t keel_mix64(uint64_t x);

/* Shared by partition.c and partition_items.c. */
void keel_plan_recount(struct keel_plan *p);
void keel_plan_begin(struct keel_plan *p);
void keel_plan_finish(struct keel_plan *p, struct keel_plan_result *res);
bool keel_plan_usable(const struct keel_plan *p, uint32_t w);
bool keel_plan_fits(const struct keel_plan *p, uint32_t w, uint64_t bytes);
int keel_plan_items_replan(struct keel_plan *p, struct keel_plan_result *res);

#endif
