/* keel-train's 2-D parallel mode (--tp T): the groups and the collectives of one step. Rank r
 * is member r % T of replica r / T. Its tensor-parallel group holds its replica's ranks; its
 * data-parallel group holds the ranks with the same shard in every replica. Both are split
 * from keel_group_world, made again on each view the trainer installs. The arithmetic is
 * train_model.h's; this file only moves it, and never decides what the trainer does next. */
#ifndef KEEL_TRAIN_TP_H
#define KEEL_TRAIN_TP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "keel/group.h"
#include "train_model.h"

/* Wait for a group request, serving what the trainer serves meanwhile (rendezvous, input);
 * returns as keel_req_test, never -EINPROGRESS. */
typedef int (*train_tp_wait_fn)(void *ctx, struct keel_req *req, struct keel_req_info *info);

enum train_tp_op { TP_GATHER, TP_SCATTER, TP_DP, TP_ASSEMBLE, TP_SPLIT, TP_OPS };

struct train_tp_stats {
	uint64_t count[TP_OPS], failed[TP_OPS], ns[TP_OPS];
	uint64_t bytes[TP_OPS]; /* what this rank put in */
	uint64_t regroups;
};

/* Generations of groups: the current one, and those replaced but not yet forgotten. A group
 * is freed only once every member has installed the view that replaced it (a whole round of
 * the trainer later): keel holds a message for a group it does not know, in its stream from
 * that peer, until the group is made, so a member's late view-change notice (SYNC) for a group
 * already freed here would block everything else that peer sends (seen: stalls of
 * entry_timeout_ns in the split after a restarted rank's admission). */
#define TP_GENS 8u
struct tp_gen {
	struct keel_group *g[3]; /* the world, the replica's group, the shard's group */
	bool used;
};

struct train_tp {
	uint32_t size, index, replica; /* T, rank % T, rank / T */
	uint32_t rank, cap;	       /* cap: the global batch (train_tp_batch) */
	struct keel_node *node;
	train_tp_wait_fn wait;
	void *ctx;
	size_t group_len;
	uint8_t *mem; /* TP_GENS x 3 groups of group_len */
	struct tp_gen gen[TP_GENS];
	uint32_t cur;					/* the current generation; TP_GENS: none */
	struct keel_group *world, *tp_group, *dp_group; /* the current generation's */
	uint32_t epoch; /* the view the groups were made on; 0: none, or to be made again */
	int part_rc;	/* the last step's tensor-parallel part: 0, or why it gave nothing */
	double *block, *gathered, *scatter, *mine; /* collective buffers, sized by cap */
	double *grad, *sum; /* this rank's shard gradient, and its sum over the DP group */
	struct train_tp_stats stats;
};

/* Memory for groups and buffers (the only allocation). Errors: -ENOMEM, -EINVAL (size not a
 * divisor of TRAIN_HIDDEN in 2..TRAIN_TP_MAX). */
int train_tp_init(struct train_tp *p, struct keel_node *node, uint32_t size, uint32_t rank,
		  uint32_t cap, train_tp_wait_fn wait, void *ctx);
void train_tp_fini(struct train_tp *p);

/* Make the groups again on the view `epoch` (the one the trainer's last collective ended on):
 * every member of that view calls it at the same place of its sequence. The groups it
 * replaces are retired, not freed. On failure there are none (epoch 0): the error returned. */
int train_tp_regroup(struct train_tp *p, uint32_t epoch);

/* The trainer's collective ended on the view the groups were made on, a round after they were:
 * every member has installed it, and said so to the retired groups; free them. */
void train_tp_settle(struct train_tp *p);

/* Whether this rank's tensor-parallel group has all T members, in shard order. */
bool train_tp_replica_whole(const struct train_tp *p);

/* One gradient step's collectives. When the replica is in the plan (in_plan, the same at its
 * members) and whole: forward AllGather, output layer, backward ReduceScatter, giving this
 * shard's gradient over the replica's samples (nothing when a member says it is not synced,
 * or a collective failed: part_rc). Then, always when the groups exist, the data-parallel
 * AllReduce of that gradient (zeros when there is none), into p->sum. Returns its status:
 * -ENOTCONN (no groups), the AllReduce's error, or 0 (p->sum is the sum over the members
 * it ran over; its TRAIN_TP_SAMPLES element says whether every sample of the batch is in). */
int train_tp_step(struct train_tp *p, const float *w, const struct train_tp_batch *b, bool synced,
		  bool in_plan);

/* Element `what` (TRAIN_TP_LOSS, _HITS, _SAMPLES) of the last data-parallel sum. */
double train_tp_sum(const struct train_tp *p, uint32_t what);

/* Forget every group (this rank left the view: its groups are no longer its members'). */
void train_tp_drop(struct train_tp *p);

/* The whole model at every member of a whole replica: an AllGather of the shards into w. */
int train_tp_assemble(struct train_tp *p, float *w);

/* One line: what this rank's collectives did and cost. */
void train_tp_print(const struct train_tp *p, FILE *f);

#endif
