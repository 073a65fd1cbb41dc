/* Collective operations over the current view. All ranks of the view must start the same
 * collectives in the same order (as with NCCL and MPI). */
#ifndef KEEL_COLLECTIVES_H
#define KEEL_COLLECTIVES_H

#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/node.h"
#include "keel/types.h"

struct keel_op;

/* Start an AllReduce of `count` elements. `send` and `recv` may be the same buffer
 * (in place) or must not overlap. Both must stay valid and `send` unchanged until the
 * operation completes. count may be 0 (completes at once) or smaller than the world.
 * Errors: -EINVAL (NULL buffer with count > 0, bad dtype/op, overlap), -EBUSY (ops_max
 * operations already pending). On success *op is a handle for keel_op_test. */
KEEL_MUST_USE int keel_allreduce_start(struct keel_node *node, const void *send, void *recv,
				       size_t count, enum keel_dtype dtype, enum keel_redop op,
				       struct keel_op **handle);

/* Has `handle` finished? Never blocks; progress is made by keel_poll.
 * Returns 0 when it completed (the handle is released), -EINPROGRESS while running,
 * or the operation's error (handle released): -ETIMEDOUT (no progress for
 * op_timeout_ns), KEEL_EPEERDEAD (a rank it needed is suspected), KEEL_ETRANSPORT. */
KEEL_MUST_USE int keel_op_test(struct keel_node *node, struct keel_op *handle);

/* Start, then poll and wait with cfg.waiter until done. Returns like keel_op_test, never
 * -EINPROGRESS; -EINVAL also when no waiter was configured. Bounded by op_timeout_ns
 * of no progress. */
KEEL_MUST_USE int keel_allreduce(struct keel_node *node, const void *send, void *recv, size_t count,
				 enum keel_dtype dtype, enum keel_redop op);

#endif
