/* Straggler repair in keel-sim, with the runtime's own planner and controller (keel/partition.h,
 * keel/straggler.h): each simulated rank holds a plan of equal data shards over the members of
 * its view and feeds the controller the compute times that came back with the step's gradient.
 * Never decides from anything but those times: every rank decides the same thing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

static uint32_t shards_for(uint32_t world)
{
	uint32_t n = 8u * world;
	return n < SIM_STRAGGLER_SHARDS_MIN ? SIM_STRAGGLER_SHARDS_MIN : n;
}

int sim_straggler_init(struct sim_straggler *st, uint32_t world)
{
	memset(st, 0, sizeof(*st));
	if (world == 0 || world > SIM_STRAGGLER_RANKS_MAX)
		return -EINVAL;
	st->shards = shards_for(world);
	st->cap = world;
	struct keel_plan_config pc = {.workers_max = world, .items_max = st->shards};
	size_t plan_len = keel_plan_storage_size(&pc);
	size_t strag_doubles = keel_straggler_storage_doubles(world);
	st->plan_mem = calloc(1, plan_len);
	st->strag_mem = calloc(strag_doubles, sizeof(double));
	st->ranks = calloc(world, sizeof(uint32_t));
	st->time_s = calloc(world, sizeof(double));
	st->wk = calloc(world, sizeof(*st->wk));
	struct keel_item *items = calloc(st->shards, sizeof(*items));
	if (plan_len == 0 || st->plan_mem == NULL || st->strag_mem == NULL || st->ranks == NULL ||
	    st->time_s == NULL || st->wk == NULL || items == NULL) {
		free(items);
		sim_straggler_free(st);
		return -ENOMEM;
	}
	struct keel_straggler_config sc;
	keel_straggler_config_default(&sc);
	int rc = keel_plan_init(&st->plan, st->plan_mem, plan_len, &pc);
	if (rc == 0)
		rc = keel_straggler_init(&st->strag, st->strag_mem, strag_doubles, world, &sc);
	for (uint32_t i = 0; i < st->shards; i++)
		items[i] = (struct keel_item){.work = 1.0, .key = i};
	if (rc == 0)
		rc = keel_plan_set_items(st->plan, items, st->shards);
	free(items);
	for (uint32_t r = 0; r < world; r++) /* the first view: every rank */
		st->ranks[r] = r;
	st->count = world;
	if (rc == 0)
		rc = keel_straggler_plan_view(&st->strag, st->plan, st->ranks, world, st->wk);
	if (rc != 0)
		sim_straggler_free(st);
	return rc;
}

void sim_straggler_free(struct sim_straggler *st)
{
	free(st->plan_mem);
	free(st->strag_mem);
	free(st->ranks);
	free(st->time_s);
	free(st->wk);
	memset(st, 0, sizeof(*st));
}

/* Shards over `ranks`, equal rates (LPT: counts within one shard), as keel-train does at each
 * view: made from the member list alone, so every member makes the same one. */
int sim_straggler_replan(struct sim_straggler *st, const uint32_t *ranks, uint32_t count)
{
	if (count > st->cap)
		return -ENOSPC;
	memcpy(st->ranks, ranks, count * sizeof(uint32_t));
	st->count = count;
	return keel_straggler_plan_view(&st->strag, st->plan, ranks, count, st->wk);
}

double sim_straggler_share(const struct sim_straggler *st, uint32_t rank)
{
	for (uint32_t w = 0; w < st->count; w++) {
		struct keel_plan_load pl;
		if (st->ranks[w] == rank && keel_plan_worker_load(st->plan, w, &pl) == 0)
			return pl.work / (double)st->shards;
	}
	return 0; /* not in the plan: no shard */
}

static bool same_members(const struct sim_straggler *st, const uint32_t *ranks, uint32_t count)
{
	return count == st->count && memcmp(ranks, st->ranks, count * sizeof(uint32_t)) == 0;
}

int sim_straggler_step(struct sim_straggler *st, const uint32_t *ranks, uint32_t count,
		       const float *time_by_rank, struct keel_straggler_decision *d)
{
	memset(d, 0, sizeof(*d));
	if (!same_members(st, ranks, count))
		return sim_straggler_replan(st, ranks, count); /* times of another plan: skip */
	for (uint32_t w = 0; w < count; w++)
		st->time_s[w] = time_by_rank[ranks[w]];
	return keel_straggler_step(&st->strag, st->plan, st->time_s, NULL, d);
}
