/* Process groups and the collectives of model parallelism: AllGather, ReduceScatter,
 * AllReduce, Broadcast, Reduce, Gather, Scatter, AllToAll, Barrier over a group, and
 * point-to-point Send/Recv launched in batches.
 *
 * A group is a subset of the job's ranks with its own ordered stream of operations. Every
 * member of a group must start the group's collectives in the same order (as with NCCL
 * communicators and MPI communicators); groups are independent of each other, so
 * operations of different groups may be in flight at once, and a slow or failed member
 * holds up only the groups it belongs to.
 *
 * Memory: a group lives in caller memory of keel_group_size(node) bytes, which it needs until
 * keel_group_free; keel allocates nothing. Buffers passed to an operation stay the caller's
 * and must stay valid (and the input unchanged) until the operation has ended.
 *
 * Failures. A group follows the view: when the view drops a member (it died, was excluded
 * or left), every group that held it continues over its surviving members (old group ∩ new
 * view, in the same order: group ranks are positions in this list, so they shift down past
 * the member that left). An operation interrupted by a view change ends the same way at
 * every surviving member of its group, within keel_op_bound_ns:
 *   - if every surviving member had its result, it completes (0), over the members it ran
 *     on — keel_req_test_info says which;
 *   - otherwise a reduction whose members all survived, and AllReduce, Reduce, Broadcast and
 *     Barrier with fewer members (while the root lives), run again over the survivors from
 *     the caller's untouched input (in place: only while the input has not been written,
 *     else KEEL_EVIEWCHANGED);
 *   - a rank-indexed operation (AllGather, ReduceScatter, Gather, Scatter, AllToAll) whose
 *     group lost a member, and a rooted one whose root left, fails with KEEL_EVIEWCHANGED:
 *     its result would be indexed differently, and keel never re-indexes it silently. The
 *     group already has its new membership (keel_group_info): run the step again on it.
 * An operation of a group that held no member the view dropped is not disturbed: it
 * completes over the same members (at most it runs again inside keel, transparently).
 * Send/Recv: see keel_group_p2p_start. */
#ifndef KEEL_GROUP_H
#define KEEL_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/node.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct keel_group;
struct keel_req; /* a pending group operation; lives in its group's memory */

/* The color that leaves a rank out of every group of a split (as MPI_UNDEFINED). */
#define KEEL_COLOR_NONE UINT32_MAX

/* Bytes of caller memory one group of `node` needs (enough for a group of every rank). */
size_t keel_group_size(const struct keel_node *node);

/* The group of every member of the installed view, in rank order. Local: every member must
 * create it on the same view (right after start-up, or after a collective that ended on
 * the view in question: keel_view_get says which). Errors: -EINVAL (NULL argument, mem not
 * 8-byte aligned), -ENOSPC (len below keel_group_size), KEEL_EEXCLUDED (this node is not in
 * the view). */
KEEL_MUST_USE int keel_group_world(struct keel_node *node, void *mem, size_t len,
				   struct keel_group **out);

/* Split `parent` as MPI_Comm_split and ncclCommSplit do: a collective over the parent (every
 * member calls it, in its place in the parent's sequence). Members that give the same
 * `color` form one new group, ordered by `key`, then by their rank in the parent. A member
 * giving KEEL_COLOR_NONE joins none: *out is NULL and `mem` is not used. Every member of a
 * new group gets the same members in the same order and the same group identity.
 * The *_start form returns a request; the group is usable once it completed (0).
 * Errors: as the group's collectives; -EINVAL for bad arguments. */
KEEL_MUST_USE int keel_group_split_start(struct keel_group *parent, uint32_t color, uint32_t key,
					 void *mem, size_t len, struct keel_group **out,
					 struct keel_req **req);
KEEL_MUST_USE int keel_group_split(struct keel_group *parent, uint32_t color, uint32_t key,
				   void *mem, size_t len, struct keel_group **out);

/* A group of the parent's members listed in `ranks` (job ranks, in the new group's order, no
 * duplicates), as torch.distributed.new_group: a collective over the parent, which every
 * member of the parent calls with the same list. Members not in the list get *out NULL. A
 * member passing another list gets KEEL_EMISMATCH, as does every other member. */
KEEL_MUST_USE int keel_group_from_ranks(struct keel_group *parent, const uint32_t *ranks,
					uint32_t count, void *mem, size_t len,
					struct keel_group **out);

/* Forget `group`: it must have no operation pending, nor a result not yet taken, nor a word
 * it still owes a member (the DONE of its last operation waiting for room in a full window):
 * -EBUSY then; poll and call again. Its memory is the caller's again. Other members need not
 * free it at the same time; messages for it that come later are dropped. */
KEEL_MUST_USE int keel_group_free(struct keel_group *group);

struct keel_group_info {
	uint64_t id;	       /* the same at every member, distinct from the job's other groups */
	uint32_t size;	       /* members now */
	uint32_t rank;	       /* this member's group rank: its position among them */
	uint32_t created_size; /* members when it was created */
	uint32_t epoch;	       /* the view its membership was last brought up to */
	bool self_member;      /* false: the view left this node out (KEEL_EEXCLUDED) */
};
/* The group's membership now; `ranks` (may be NULL) gets its members' job ranks, in group
 * order. Returns the member count, or -ENOSPC when ranks_cap is smaller. */
KEEL_MUST_USE int keel_group_info(const struct keel_group *group, struct keel_group_info *info,
				  uint32_t *ranks, uint32_t ranks_cap);
/* The job rank of group rank `group_rank` (UINT32_MAX when there is none). */
uint32_t keel_group_rank_to_job(const struct keel_group *group, uint32_t group_rank);

/* Device buffers. After keel_group_use_device, every collective of `g` takes device memory of
 * the node's device (keel_config.device: CUDA, or the CPU stand-in) for its send and receive
 * buffers, as NCCL's do. keel copies the input this member contributes into `stage`
 * (registered host memory: the device's host_register), runs the operation there, and copies
 * the result back to the receive buffer before the operation may end; the member tells the
 * others it has the result only then. The staged input stays untouched until the end, so an
 * operation a view change interrupts runs again from it, in place too. `stage` must hold the
 * input and the output of each operation (each rounded up to 64 bytes; e.g. an AllGather of
 * n bytes per member over w members: 64-rounded n + 64-rounded n x w); a larger one fails to
 * start with -ENOSPC. Buffers must be aligned to the element size. Send/Recv and splits stay
 * on host memory. stage NULL returns the group to host buffers. Errors: -EINVAL (no device on
 * the node, stage not 64-byte aligned), -EBUSY (operations of the group pending). */
KEEL_MUST_USE int keel_group_use_device(struct keel_group *g, void *stage, size_t stage_bytes);

/* ---- requests ---- */

/* How a group collective moved its data, chosen alike at every member from its size, the
 * group's size and the config (rd_max_bytes), at each (re)start. DIRECT: one step per peer,
 * each member's data straight to where it goes (pairwise exchange: ReduceScatter, AllToAll,
 * Gather, Scatter, Reduce; small AllGather and AllReduce in groups under 8 or not a power of
 * two, out of place; small Broadcast); RING: a pipelined ring (AllGather, AllReduce as
 * pairwise ReduceScatter then ring AllGather, Broadcast — above rd_max_bytes; and a small
 * AllReduce in place in a group that is not a power of two, where direct would overwrite the
 * input it still sends); RD: recursive doubling (small AllGather and AllReduce in groups of a
 * power of two from 8 up, and small AllReduce in place in any power of two). */
enum keel_group_algo { KEEL_GALGO_DIRECT = 0, KEEL_GALGO_RING, KEEL_GALGO_RD };

/* What a finished group operation ran over. */
struct keel_req_info {
	uint32_t epoch;	       /* the view its result belongs to */
	uint32_t member_count; /* group members it ran over (its rank-indexed results) */
	uint32_t restarts;     /* times it ran again after a view change */
	enum keel_group_algo algo;
};

/* Has `req` finished? Never blocks (keel_poll makes progress). 0 when it completed (the
 * request is released), -EINPROGRESS while it runs, or its error (released): -ETIMEDOUT
 * (a member never started it within entry_timeout_ns, or keel_op_bound_ns passed),
 * KEEL_EVIEWCHANGED (above: the group lost a member under a rank-indexed operation, or
 * a root), KEEL_EPEERGONE (Send/Recv: the peer left the view), KEEL_EEXCLUDED,
 * KEEL_ENOQUORUM, KEEL_EMISMATCH (members started different operations at this place of
 * the group's sequence: a bug in the caller's program), KEEL_ETRANSPORT. */
KEEL_MUST_USE int keel_req_test(struct keel_req *req);
/* (KEEL_EDEVICE too: the device failed a copy of a group using device buffers.) */
/* keel_req_test, and on completion what it ran over: `info` (may be NULL) and the members'
 * job ranks in group order (`members`, may be NULL; -ENOSPC, request kept, when members_cap is
 * smaller than the member count). */
KEEL_MUST_USE int keel_req_test_info(struct keel_req *req, struct keel_req_info *info,
				     uint32_t *members, uint32_t members_cap);
/* Poll and wait with the node's cfg.waiter until `req` ends; returns as keel_req_test, never
 * -EINPROGRESS (-EINVAL when no waiter was configured). */
KEEL_MUST_USE int keel_req_wait(struct keel_req *req, struct keel_req_info *info);

/* ---- collectives ----
 *
 * Every member of the group calls each one in the same order with matching arguments (the
 * same count and dtype, the same root). Counts are elements of `dtype`; ranks and roots
 * are group ranks. Each has a *_start form returning a request, and a blocking form that
 * waits with the node's waiter. Common errors at start: -EINVAL (NULL buffer with a count,
 * bad dtype or op, a root outside the group, overlapping buffers where they may not),
 * -EBUSY (ops_max operations of this group pending), KEEL_EEXCLUDED (the view left this node
 * out). Reductions: every keel_redop (KEEL_AVG divides by the members it ran over). */

/* AllGather: recv gets every member's `count` elements, member i's at recv + i x count.
 * In place when send == recv + rank x count. Rank-indexed. */
KEEL_MUST_USE int keel_group_allgather_start(struct keel_group *g, const void *send, void *recv,
					     size_t count, enum keel_dtype dtype,
					     struct keel_req **req);
KEEL_MUST_USE int keel_group_allgather(struct keel_group *g, const void *send, void *recv,
				       size_t count, enum keel_dtype dtype);
/* AllGatherV: member i sends counts[i] elements, which land at recv + displs[i] elements.
 * counts and displs (size entries, the same at every member) are read until it ends;
 * regions must not overlap. In place when send == recv + displs[rank]. */
KEEL_MUST_USE int keel_group_allgatherv_start(struct keel_group *g, const void *send, void *recv,
					      const size_t *counts, const size_t *displs,
					      enum keel_dtype dtype, struct keel_req **req);

/* ReduceScatter: send holds size x count elements; member i gets the reduction of every
 * member's block i (send + i x count) in recv (count elements). In place when
 * recv == send + rank x count. Rank-indexed. */
KEEL_MUST_USE int keel_group_reduce_scatter_start(struct keel_group *g, const void *send,
						  void *recv, size_t count, enum keel_dtype dtype,
						  enum keel_redop op, struct keel_req **req);
KEEL_MUST_USE int keel_group_reduce_scatter(struct keel_group *g, const void *send, void *recv,
					    size_t count, enum keel_dtype dtype,
					    enum keel_redop op);
/* ReduceScatterV: block i is counts[i] elements, the blocks back to back in send. In place
 * when recv is this member's block of send. */
KEEL_MUST_USE int keel_group_reduce_scatterv_start(struct keel_group *g, const void *send,
						   void *recv, const size_t *counts,
						   enum keel_dtype dtype, enum keel_redop op,
						   struct keel_req **req);

/* AllReduce over the group (in place when send == recv). */
KEEL_MUST_USE int keel_group_allreduce_start(struct keel_group *g, const void *send, void *recv,
					     size_t count, enum keel_dtype dtype,
					     enum keel_redop op, struct keel_req **req);
KEEL_MUST_USE int keel_group_allreduce(struct keel_group *g, const void *send, void *recv,
				       size_t count, enum keel_dtype dtype, enum keel_redop op);

/* Broadcast `bytes` of buf from group rank `root`. */
KEEL_MUST_USE int keel_group_broadcast_start(struct keel_group *g, uint32_t root, void *buf,
					     size_t bytes, struct keel_req **req);
KEEL_MUST_USE int keel_group_broadcast(struct keel_group *g, uint32_t root, void *buf,
				       size_t bytes);

/* Reduce to `root`: recv (count elements) is written at the root only (others may pass
 * NULL). In place at the root when send == recv. */
KEEL_MUST_USE int keel_group_reduce_start(struct keel_group *g, const void *send, void *recv,
					  size_t count, enum keel_dtype dtype, enum keel_redop op,
					  uint32_t root, struct keel_req **req);
/* Gather to `root`: member i's count elements land at recv + i x count at the root (others
 * may pass recv NULL). In place at the root when send == recv + root x count. Rank-indexed. */
KEEL_MUST_USE int keel_group_gather_start(struct keel_group *g, const void *send, void *recv,
					  size_t count, enum keel_dtype dtype, uint32_t root,
					  struct keel_req **req);
/* Scatter from `root`: member i gets send + i x count (read at the root only; others may pass
 * send NULL). In place at the root when recv == send + root x count. Rank-indexed. */
KEEL_MUST_USE int keel_group_scatter_start(struct keel_group *g, const void *send, void *recv,
					   size_t count, enum keel_dtype dtype, uint32_t root,
					   struct keel_req **req);

/* AllToAll: block j of send (count elements at send + j x count) goes to member j, and
 * member i's block for this member lands at recv + i x count. Not in place. Rank-indexed. */
KEEL_MUST_USE int keel_group_alltoall_start(struct keel_group *g, const void *send, void *recv,
					    size_t count, enum keel_dtype dtype,
					    struct keel_req **req);
KEEL_MUST_USE int keel_group_alltoall(struct keel_group *g, const void *send, void *recv,
				      size_t count, enum keel_dtype dtype);
/* AllToAllV (torch's all_to_all_single with split sizes): send_counts[j] elements from
 * send + send_displs[j] go to member j; recv_counts[i] from member i land at
 * recv + recv_displs[i]. Member i's send_counts[j] must equal member j's recv_counts[i]
 * (else KEEL_EMISMATCH). Arrays of size entries, read until it ends. */
KEEL_MUST_USE int keel_group_alltoallv_start(struct keel_group *g, const void *send,
					     const size_t *send_counts, const size_t *send_displs,
					     void *recv, const size_t *recv_counts,
					     const size_t *recv_displs, enum keel_dtype dtype,
					     struct keel_req **req);

/* Barrier: ends at a member only once every member of the group has entered it. */
KEEL_MUST_USE int keel_group_barrier_start(struct keel_group *g, struct keel_req **req);
KEEL_MUST_USE int keel_group_barrier(struct keel_group *g);

/* ---- point to point ----
 *
 * Send and Recv between two members of a group, ordered per (group, peer): the n-th send to
 * a peer meets the peer's n-th receive from this member, whose tag and byte count must match
 * (else both fail with KEEL_EMISMATCH). A batch (as ncclGroupStart/End) starts every item at
 * once and ends when all have: a pipeline's exchange or a hand-written AllToAll cannot
 * deadlock.
 * A message leaves only once its receive is posted (the receiver says so), so it never waits
 * at a receiver that holds up what follows it. A member's collectives and Send/Recv in one
 * group share the way to each peer: issue them in an order both sides agree on, as on one
 * NCCL communicator.
 * A send ends when the peer has received every byte; a receive when it has them all. An item
 * whose peer leaves the view first fails with KEEL_EPEERGONE within keel_recovery_bound_ns
 * of the failure (never hangs); one whose peer stays is carried on across a view change. */
enum keel_p2p_kind { KEEL_P2P_SEND = 0, KEEL_P2P_RECV };
struct keel_p2p {
	enum keel_p2p_kind kind;
	uint32_t peer; /* group rank */
	void *buf;     /* const for a send */
	size_t bytes;
	uint32_t tag;
};
/* Up to KEEL_P2P_BATCH_MAX items; the array is copied. */
#define KEEL_P2P_BATCH_MAX 64u
KEEL_MUST_USE int keel_group_p2p_start(struct keel_group *g, const struct keel_p2p *items,
				       uint32_t count, struct keel_req **req);
KEEL_MUST_USE int keel_group_send(struct keel_group *g, uint32_t peer, const void *buf,
				  size_t bytes, uint32_t tag);
KEEL_MUST_USE int keel_group_recv(struct keel_group *g, uint32_t peer, void *buf, size_t bytes,
				  uint32_t tag);

#ifdef __cplusplus
}
#endif

#endif
