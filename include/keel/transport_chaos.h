/* The chaos transport: a decorator over any transport that drops, duplicates, reorders and
 * delays datagrams from a seeded RNG, and cuts chosen peers off (a partition).
 * Replays exactly for the same seed and the same sequence of calls (and inner answers).
 *
 * send_burst decides each datagram in order: cut peer -> dropped; else lost with drop_ppm;
 * else sent once more with dup_ppm; each copy is then held for reorder (sent right behind the
 * next datagram this burst sends, or on the next call) or, with delay_ns_max, held until
 * now_ns + uniform[0, delay_ns_max]. Held bytes are copied into the decorator's memory; with
 * no slot free a copy goes out at once (hold_full). Every send_burst and recv_burst call
 * first releases what is due (to peers still not cut). When the inner refuses some, the
 * decorator returns the accepted prefix, and anything held stays held for the next call.
 * recv_burst calls the inner's and drops datagrams from cut peers, moving the survivors up
 * by exchanging entries of d. next_deadline_ns is the earliest release (or the inner's).
 * wait_fd is the inner's. fini forgets held datagrams and does NOT fini the inner: the
 * caller owns the inner and finis it after the decorator. */
#ifndef KEEL_TRANSPORT_CHAOS_H
#define KEEL_TRANSPORT_CHAOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

struct keel_chaos_config {
	struct keel_transport *inner; /* required; owned by the caller, outlives the decorator */
	uint64_t seed;
	/* Each sent datagram is lost with probability drop_ppm (parts per million), sent twice
	 * with dup_ppm, held back and sent after the next one with reorder_ppm. */
	uint32_t drop_ppm;
	uint32_t dup_ppm;
	uint32_t reorder_ppm;
	/* Each sent datagram delayed uniformly in [0, delay_ns_max]; 0 turns delay off. */
	uint64_t delay_ns_max;
	/* Datagrams held at once for delay/reorder, 0..65536 (hold_max * inner mtu bytes of
	 * mem); beyond it a datagram is sent at once. */
	uint32_t hold_max;
};

/* Defaults: no faults, seed 1, hold_max 256. */
void keel_chaos_config_default(struct keel_chaos_config *cfg);

/* Parse "loss=0.01,dup=0.001,reorder=0.01,delay_us=50,seed=7,hold=256" (any subset, any
 * order) into cfg (other fields untouched). Probabilities are fractions in [0,1].
 * Errors: -EINVAL naming nothing global: the caller prints the spec. */
KEEL_MUST_USE int keel_chaos_parse(const char *spec, struct keel_chaos_config *cfg);

size_t keel_chaos_storage_size(const struct keel_chaos_config *cfg);
/* Errors: -EINVAL (no inner, ppm > 1e6, hold_max > 65536), -ENOSPC (mem NULL or too small);
 * on error *out is NULL. The decorator has the inner transport's caps, per peer too, minus
 * RELIABLE/ORDERED (it breaks both) and INTACT (so every datagram through it carries a CRC);
 * GATHER passes (a datagram in two pieces that it holds back is copied whole), and it has the
 * inner's mtu, rank and world_size. */
KEEL_MUST_USE int keel_chaos_init(struct keel_transport **out, void *mem, size_t mem_len,
				  const struct keel_chaos_config *cfg);

/* Cut (or heal) the link between this node and `peer`: while cut, datagrams to it are
 * dropped on send and from it on receive. -EINVAL if peer is out of range. */
KEEL_MUST_USE int keel_chaos_cut(struct keel_transport *t, uint32_t peer, bool cut);
/* Cut (or heal) one way only, an asymmetric partition: while cut, datagrams to `peer` are
 * dropped on send; what it sends still arrives. -EINVAL if peer is out of range. */
KEEL_MUST_USE int keel_chaos_cut_send(struct keel_transport *t, uint32_t peer, bool cut);

/* Decisions are counted when made; a datagram the inner refused is decided again when the
 * caller retries it. */
struct keel_chaos_stats {
	uint64_t passed;      /* copies the inner accepted straight from send_burst (not held) */
	uint64_t dropped;     /* lost to drop_ppm */
	uint64_t duplicated;  /* datagrams given a second copy */
	uint64_t reordered;   /* copies held for reorder */
	uint64_t delayed;     /* copies held for delay */
	uint64_t cut_dropped; /* to or from a cut peer, on send, release or receive */
	uint64_t hold_full;   /* copies that should have been held but went out at once */
};
void keel_chaos_stats_get(struct keel_transport *t, struct keel_chaos_stats *out);

#ifdef __cplusplus
}
#endif

#endif
