/* Trace events: what happened when, for a timeline (Perfetto, Nsight Systems). The node calls
 * the config's on_event hook at each event; what the hook does with it is the caller's — the
 * start-up library keeps them in a keel_trace_ring and writes Chrome trace-event JSON
 * (KEEL_TRACE=path), and adds NVTX ranges in CUDA builds. The ring below is a fixed-size
 * buffer in the caller's memory: when full, the oldest events are overwritten and counted. */
#ifndef KEEL_TRACE_H
#define KEEL_TRACE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum keel_event_kind {
	KEEL_EV_COLL_BEGIN = 0, /* a collective starts moving data (again, after a restart) */
	KEEL_EV_COLL_END,	/* a collective ended: t_ns its start by the caller, dur_ns */
	KEEL_EV_SUSPECT,	/* this node suspects `peer`; dur_ns: the silence before */
	KEEL_EV_VIEW_ROUND,	/* this node (coordinator) started a view-change round */
	KEEL_EV_VIEW,		/* a view installed: epoch, members in `peer`; dur_ns: since the
				 * first suspicion this node had, 0 if none */
	KEEL_EV_CKPT_WRITE,	/* the caller's: a checkpoint written (t_ns, dur_ns, bytes) */
	KEEL_EV_CKPT_RESTORE,	/* the caller's: a checkpoint restored */
	KEEL_EV_FALLBACK,	/* the caller's: traffic to `peer` moved to another transport */
	KEEL_EV_KIND_COUNT
};

struct keel_event {
	uint64_t t_ns;	 /* start (the node's clock: the now_ns it was given) */
	uint64_t dur_ns; /* 0 for an instant */
	uint64_t bytes;	 /* collective or checkpoint size */
	uint32_t kind;	 /* enum keel_event_kind */
	uint32_t epoch;	 /* the view's, when it happened */
	uint32_t peer;	 /* the peer concerned; KEEL_EV_VIEW: members; else UINT32_MAX */
	uint32_t op;	 /* collectives: the operation's local id */
	uint32_t algo;	 /* collectives: enum keel_algo run (KEEL_EV_COLL_*) */
	uint32_t restarts;
	int32_t status; /* KEEL_EV_COLL_END: 0 or the error it ended with */
	uint32_t reserved;
};

/* Called by the node at each event (from keel_poll or a collective's start). Must not call
 * back into the node. */
typedef void (*keel_event_fn)(void *ctx, const struct keel_event *ev);

/* Short name of an event kind ("allreduce" is not one: collectives are "collective"). */
const char *keel_event_kind_name(uint32_t kind);

struct keel_trace_ring {
	struct keel_event *ev;
	uint32_t cap;	     /* a power of two */
	uint64_t head, tail; /* events pushed, and taken (or overwritten) so far */
	uint64_t lost;	     /* overwritten before they were taken */
};

/* `ev` holds `cap` events (a power of two, >= 2). -EINVAL otherwise. */
int keel_trace_ring_init(struct keel_trace_ring *r, struct keel_event *ev, uint32_t cap);
/* Append; when full, the oldest is dropped and counted in `lost`. */
void keel_trace_ring_push(struct keel_trace_ring *r, const struct keel_event *ev);
/* Copy out up to `max` of the oldest events not yet taken; returns how many. */
uint32_t keel_trace_ring_take(struct keel_trace_ring *r, struct keel_event *out, uint32_t max);
/* Events waiting to be taken. */
uint32_t keel_trace_ring_count(const struct keel_trace_ring *r);

#ifdef __cplusplus
}
#endif

#endif
