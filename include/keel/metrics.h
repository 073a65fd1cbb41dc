/* Metrics: what a node has counted and timed, for operators. Counters and gauges come from
 * the node's own state (keel_counters, peers, the view); histograms with fixed buckets time
 * heartbeat round trips, AllReduce by size, detection and view changes, and checkpoint writes.
 * keel_metrics_render writes all of it in the Prometheus text exposition format into the
 * caller's buffer. Nothing here allocates; the histograms live in the node's storage. */
#ifndef KEEL_METRICS_H
#define KEEL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

struct keel_node;

/* AllReduce times are kept by size class: up to 4 KiB, 64 KiB, 1 MiB, 16 MiB, and larger. */
#define KEEL_SIZE_CLASSES 5u
/* The size class of a collective of `bytes` bytes (0..KEEL_SIZE_CLASSES-1). */
uint32_t keel_size_class(uint64_t bytes);
/* Its largest size in bytes, UINT64_MAX for the last class. */
uint64_t keel_size_class_max(uint32_t size_class);

enum keel_hist {
	KEEL_HIST_HEARTBEAT_RTT = 0, /* a heartbeat's round trip, per sample, any peer */
	KEEL_HIST_DETECTION,	     /* a peer's last datagram to this node suspecting it */
	KEEL_HIST_VIEW_CHANGE,	     /* this node's first suspicion to the next view installed */
	KEEL_HIST_CKPT_WRITE,	     /* a checkpoint write, observed by the caller */
	KEEL_HIST_ALLREDUCE,	     /* an AllReduce, start to result, plus its size class */
	KEEL_HIST_COUNT = KEEL_HIST_ALLREDUCE + KEEL_SIZE_CLASSES
};

/* Bucket upper bounds, 1 µs to 10 s in steps of 1, 2.5, 5 per decade; one more bucket
 * (+Inf) holds the rest. */
#define KEEL_HIST_BUCKETS 22u
extern const uint64_t keel_hist_bounds_ns[KEEL_HIST_BUCKETS];

struct keel_histogram {
	uint64_t count;
	uint64_t sum_ns;
	uint64_t bucket[KEEL_HIST_BUCKETS + 1]; /* per bucket, not cumulative; last: +Inf */
};

/* Record one observation of `ns` nanoseconds: for what the node cannot see itself
 * (KEEL_HIST_CKPT_WRITE). -EINVAL for an unknown histogram. */
KEEL_MUST_USE int keel_metrics_observe(struct keel_node *node, enum keel_hist hist, uint64_t ns);
/* Copy a histogram. -EINVAL for an unknown one. */
KEEL_MUST_USE int keel_histogram_get(const struct keel_node *node, enum keel_hist hist,
				     struct keel_histogram *out);

/* Write every metric of the node in the Prometheus text format (version 0.0.4) into buf:
 * names with the keel_ prefix, base units, labels job (as given: any bytes, escaped) and rank
 * on every series, peer on per-peer ones. *len is set to the bytes the whole text takes
 * (without a terminating NUL, which is written when it fits). Returns 0, or -ENOSPC when cap
 * is too small (buf then holds a prefix; call again with at least *len + 1 bytes), or -EINVAL
 * for a NULL argument. Takes O(world) time: for a scrape, not for every poll. */
KEEL_MUST_USE int keel_metrics_render(const struct keel_node *node, const char *job, char *buf,
				      size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
