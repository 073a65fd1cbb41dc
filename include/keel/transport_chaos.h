/* The chaos transport: a decorator over any transport that drops, duplicates, reorders and
 * delays datagrams from a seeded RNG, and cuts chosen peers off (a partition).
 * Replays exactly for the same seed and the same sequence of calls. */
#ifndef KEEL_TRANSPORT_CHAOS_H
#define KEEL_TRANSPORT_CHAOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/transport.h"

struct keel_chaos_config {
	struct keel_transport *inner; /* required; owned by the caller, outlives the decorator */
	uint64_t seed;
	uint32_t drop_ppm;    /* each sent datagram lost with this probability (parts per million) */
	uint32_t dup_ppm;     /* ... sent twice */
	uint32_t reorder_ppm; /* ... held back and sent after the next one */
	uint64_t delay_ns_max; /* each sent datagram delayed uniformly in [0, delay_ns_max]; 0 off */
	uint32_t hold_max;     /* datagrams held at once for delay/reorder; beyond it sent at once */
};

/* Defaults: no faults, seed 1, hold_max 256. */
void keel_chaos_config_default(struct keel_chaos_config *cfg);

/* Parse "loss=0.01,dup=0.001,reorder=0.01,delay_us=50,seed=7,hold=256" (any subset, any
 * order) into cfg (other fields untouched). Probabilities are fractions in [0,1].
 * Errors: -EINVAL naming nothing global: the caller prints the spec. */
KEEL_MUST_USE int keel_chaos_parse(const char *spec, struct keel_chaos_config *cfg);

size_t keel_chaos_storage_size(const struct keel_chaos_config *cfg);
/* Errors: -EINVAL (no inner, ppm > 1e6), -ENOSPC (mem too small). The decorator has the
 * inner transport's caps minus RELIABLE/ORDERED (it breaks both), and its mtu and rank. */
KEEL_MUST_USE int keel_chaos_init(struct keel_transport **out, void *mem, size_t mem_len,
				  const struct keel_chaos_config *cfg);

/* Cut (or heal) the link between this node and `peer`: while cut, datagrams to it are
 * dropped on send and from it on receive. -EINVAL if peer is out of range. */
KEEL_MUST_USE int keel_chaos_cut(struct keel_transport *t, uint32_t peer, bool cut);

struct keel_chaos_stats {
	uint64_t passed, dropped, duplicated, reordered, delayed, cut_dropped, hold_full;
};
void keel_chaos_stats_get(struct keel_transport *t, struct keel_chaos_stats *out);

#endif
