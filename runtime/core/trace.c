/* The trace ring: a fixed number of events in the caller's memory, oldest overwritten. */
#include <errno.h>
#include <stddef.h>

#include "assert_int.h"
#include "keel/trace.h"

int keel_trace_ring_init(struct keel_trace_ring *r, struct keel_event *ev, uint32_t cap)
{
	if (r == NULL || ev == NULL || cap < 2 || (cap & (cap - 1)) != 0)
		return -EINVAL;
	*r = (struct keel_trace_ring){.ev = ev, .cap = cap};
	return 0;
}

void keel_trace_ring_push(struct keel_trace_ring *r, const struct keel_event *ev)
{
	KEEL_ASSERT(r->head - r->tail <= r->cap);
	if (r->head - r->tail == r->cap) {
		r->tail++;
		r->lost++;
	}
	r->ev[r->head & (r->cap - 1)] = *ev;
	r->head++;
}

uint32_t keel_trace_ring_count(const struct keel_trace_ring *r)
{
	return (uint32_t)(r->head - r->tail);
}

uint32_t keel_trace_ring_take(struct keel_trace_ring *r, struct keel_event *out, uint32_t max)
{
	uint32_t k = 0;
	while (k < max && r->tail != r->head) {
		out[k++] = r->ev[r->tail & (r->cap - 1)];
		r->tail++;
	}
	return k;
}
