/* Collective operations over the current view. All ranks of the view must start the same
 * collectives in the same order (as with NCCL and MPI). */
#ifndef KEEL_COLLECTIVES_H
#define KEEL_COLLECTIVES_H

#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/node.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct keel_op;

/* Start an AllReduce of `count` elements. `send` and `recv` may be the same buffer
 * (in place) or must not overlap. Both must stay valid and `send` unchanged until the
 * operation completes: keel may send from them directly (no copy into its window) until
 * then, and holds no reference to either once keel_op_test has reported the end, with a
 * result or an error. count may be 0 (completes at once) or smaller than the world.
 * Errors: -EINVAL (NULL buffer with count > 0, bad dtype/op, overlap), -EBUSY (ops_max
 * operations already pending), KEEL_EEXCLUDED (a view left this node out since its last
 * collective and none has said so yet: said once, here; see keel_op_test). On success *op is
 * a handle for keel_op_test. */
KEEL_MUST_USE int keel_allreduce_start(struct keel_node *node, const void *send, void *recv,
				       size_t count, enum keel_dtype dtype, enum keel_redop op,
				       struct keel_op **handle);

/* What a finished collective ran over: the reduction is over exactly these members. */
struct keel_op_info {
	uint32_t epoch; /* the view the result belongs to */
	uint32_t member_count;
	uint32_t restarts; /* times it was restarted on a new view (view change or soft fault) */
	/* What computed it: for an AllReduce RING, RD or HIER, never AUTO (on the view of
	 * `epoch`); a broadcast is a pipelined ring: RING. */
	enum keel_algo algo;
	/* Gradient AllReduce: payload bytes this rank did not send because it sent them as bf16
	 * or f16 (0 for every other collective). */
	uint64_t bytes_saved;
};

/* Has `handle` finished? Never blocks; progress is made by keel_poll.
 * Returns 0 when it completed (the handle is released), -EINPROGRESS while running,
 * or the operation's error (handle released): -ETIMEDOUT (no progress after soft_retries
 * restarts; a member that never started it within entry_timeout_ns; or keel_op_bound_ns
 * passed), KEEL_ENOQUORUM (this node is on the minority side of a split), KEEL_EVIEWCHANGED
 * (the view changed under an in-place collective larger than restart_copy_bytes, or the root
 * of a broadcast left the view before every member had its bytes: the input is gone, the
 * caller must run it again — every member gets this same answer; or a view change brought
 * the result of a small AllReduce, eager_result_bytes, that other members reported, to a call
 * here on device buffers or of another length: they went on, so it must not be run again —
 * take the result, or the state it updates, from a live member), KEEL_EEXCLUDED (the others
 * installed a view without this node — it was paused or cut off past the detector — and went on:
 * this node asks to be admitted again at once; once keel_view_get says self_member, fetch state
 * from view.donor as a restarted rank does, or leave), KEEL_EMISMATCH (a member started a different
 * collective at this place of the sequence: a bug in the caller's program), KEEL_ETRANSPORT. A view
 * change restarts a collective that no member has a result of on the new view from the caller's
 * untouched input; the result is then the reduction over exactly the new view's members. One
 * that some member reported (a small AllReduce, eager_result_bytes) stands: the new view brings
 * its result to the members without it, reported over the view it was computed on. */
KEEL_MUST_USE int keel_op_test(struct keel_node *node, struct keel_op *handle);

/* keel_op_test, and on completion (0 returned) also what the result was computed over:
 * `info` (may be NULL) and the member ranks in `members` (may be NULL; -ENOSPC, handle kept,
 * when members_cap is smaller than the member count). */
KEEL_MUST_USE int keel_op_test_info(struct keel_node *node, struct keel_op *handle,
				    struct keel_op_info *info, uint32_t *members,
				    uint32_t members_cap);

/* Longest time from a member's failure (death, or a pause past the detector) to the view
 * without it, from the config: keel_detect_bound_ns and a view change (heartbeat_ns for a
 * member's report to the coordinator + 2 x view_timeout_ns: a round that waits for slow
 * members, and one retry). A collective that cannot progress because a member failed restarts
 * on that view within this bound. */
uint64_t keel_recovery_bound_ns(const struct keel_config *cfg);

/* The soft-fault stall limit in effect: cfg->op_timeout_ns, or when 0, derived from the
 * detector: 2 x rto_max_ns + 2 x keel_recovery_bound_ns. */
uint64_t keel_op_timeout_ns(const struct keel_config *cfg);

/* Longest time any collective may take from start to its final status, computed from the
 * config: entry_timeout_ns (members that have not started it), then (soft_retries + 1)
 * rounds of keel_op_timeout_ns plus a recovery each, and one more recovery. keel_op_test
 * reports -ETIMEDOUT at that bound whatever happens. */
uint64_t keel_op_bound_ns(const struct keel_config *cfg);

/* Broadcast `bytes` of `buf` from rank `root` to every member (a pipelined ring), e.g. to
 * bring a node that just joined up to date from view.donor. Errors as keel_allreduce_start,
 * and -EINVAL if root is not a member. */
KEEL_MUST_USE int keel_broadcast_start(struct keel_node *node, uint32_t root, void *buf,
				       size_t bytes, struct keel_op **handle);
KEEL_MUST_USE int keel_broadcast(struct keel_node *node, uint32_t root, void *buf, size_t bytes);

/* Start, then poll and wait with cfg.waiter until done. Returns like keel_op_test, never
 * -EINPROGRESS; -EINVAL also when no waiter was configured. Bounded by op_timeout_ns
 * of no progress. */
KEEL_MUST_USE int keel_allreduce(struct keel_node *node, const void *send, void *recv, size_t count,
				 enum keel_dtype dtype, enum keel_redop op);

/* ---- Gradient AllReduce: keel may compress it on the wire ----
 *
 * An AllReduce of f32 values, KEEL_SUM or KEEL_AVG, that keel may send as bf16 (or f16) and
 * accumulate in f32, with error feedback. keel_config.compress decides per link, when the
 * operation starts on a view (KEEL_COMPRESS_AUTO: when the link's recent traffic passes
 * compress_util_pct of the bandwidth measured on it); every fragment says how it is
 * encoded. Whatever each link decided, every member ends with the same bits: each element of
 * the result is computed by one member (the ring's owner of its chunk) and copied to the
 * others, losslessly. Only the ring compresses: recursive doubling (buffers up to
 * rd_max_bytes) and the hierarchy send f32, as plain AllReduces do.
 *
 * What changes when a link compresses: each partial sum a member sends is rounded to the
 * encoding (bf16: 8 significant bits, relative error up to 2^-8; f16: 11 bits, 2^-11, and only
 * values within +-65504: larger ones go as f32), and so is each element of the result whose
 * owner's link compresses. The rounding errors are kept in `feedback` and added to the same
 * elements at the next call, so that over many calls nothing is lost: the sum of the results
 * tracks the sum of the exact results within one call's rounding, where without feedback the
 * errors would add up.
 *
 * feedback: keel_grad_feedback_len(count) floats of caller memory, zeroed before the first
 * call, kept for this tensor between calls (one per tensor, and not shared by operations
 * pending at once), not overlapping send or recv. keel reads it and writes its second half
 * while the operation runs; the first half (the residuals) changes only when the operation
 * completes with 0 after compressing something, so a failed or restarted attempt leaves it as
 * it was. A NaN or inf element is sent as is and leaves no residual.
 *
 * feedback NULL: this member compresses nothing it sends (f32 on every link, its own chunk of
 * the result unrounded) but takes part in the gradient AllReduce all the same, beside members
 * that do compress. For a call whose values must not be rounded, every member passes NULL: the
 * result is then a plain f32 AllReduce's, bit for bit. A program that runs the same sequence
 * of collectives whatever it carries (a rank just admitted, with nothing to contribute yet;
 * a state transfer between gradient steps) passes NULL where it cannot afford rounding.
 *
 * Errors: as keel_allreduce_start, and -EINVAL for op other than KEEL_SUM or KEEL_AVG, or
 * feedback overlapping a buffer; keel_op_test also gives KEEL_EMISMATCH when
 * compressed data came for this place of the sequence while this member runs a plain
 * AllReduce there (the programs disagree). */
size_t keel_grad_feedback_len(size_t count);
KEEL_MUST_USE int keel_allreduce_grad_start(struct keel_node *node, const float *send, float *recv,
					    size_t count, enum keel_redop op, float *feedback,
					    struct keel_op **handle);
/* keel_allreduce_grad_start, then wait as keel_allreduce does. */
KEEL_MUST_USE int keel_allreduce_grad(struct keel_node *node, const float *send, float *recv,
				      size_t count, enum keel_redop op, float *feedback);

#ifdef __cplusplus
}
#endif

#endif
