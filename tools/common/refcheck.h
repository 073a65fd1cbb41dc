/* Inputs and reference results for checking AllReduce (keel-bench --check, the tests).
 * The inputs are small integers and powers of two, so every reduction is exact in every dtype:
 * the result does not depend on the reduction order and is compared bit for bit. */
#ifndef KEEL_REFCHECK_H
#define KEEL_REFCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "keel/types.h"

/* Element i of rank `rank`'s input for `op`, as a double (exact in every dtype). */
double keel_check_value(uint32_t rank, size_t i, enum keel_dtype dt, enum keel_redop op);
/* Write `value` as element i of a `dt` buffer. */
void keel_check_store(void *buf, size_t i, enum keel_dtype dt, double value);
/* Elements [begin, end) of buf = rank's input. Ranges let a caller keep polling its node
 * between pieces of a large buffer (a rank that stops polling looks dead to its peers). */
void keel_check_fill(void *buf, size_t begin, size_t end, uint32_t rank, enum keel_dtype dt,
		     enum keel_redop op);
/* Elements [begin, end) of buf = the AllReduce of all `world` ranks' inputs, as keel defines
 * it (avg: the sum divided in the dtype's accumulation precision, integers truncating). */
void keel_check_reference(void *buf, size_t begin, size_t end, uint32_t world, enum keel_dtype dt,
			  enum keel_redop op);
/* The same over an arbitrary member set (a view): ranks members[0..count). */
void keel_check_reference_members(void *buf, size_t begin, size_t end, const uint32_t *members,
				  uint32_t count, enum keel_dtype dt, enum keel_redop op);
/* Elements in [begin, end) whose bytes differ between `got` and `ref`. */
size_t keel_check_wrong(const void *got, const void *ref, size_t begin, size_t end,
			enum keel_dtype dt);

/* The element counts worth checking for a world and a fragment of `frag` elements: 0, 1,
 * world-1, frag-1, frag, frag+1, world*frag-1, world*frag, world*frag+1 (the edges of
 * fragments and of ring chunks), then `large`. Writes KEEL_CHECK_SIZES entries to out. */
#define KEEL_CHECK_SIZES 10u
void keel_check_sizes(size_t out[KEEL_CHECK_SIZES], uint32_t world, size_t frag, size_t large);

#endif
