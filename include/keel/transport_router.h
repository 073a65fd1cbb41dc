/* The router transport: each peer's traffic on the best transport that reaches it.
 *
 * A router holds up to KEEL_ROUTER_ROUTES_MAX inner transports ("routes") in order of
 * preference (keel_boot: shared memory for peers on this host, then verbs, DPDK, UDP). Each
 * route may reach only some of the job's ranks and number them its own way (a shared-memory
 * transport among the 4 ranks of one host calls them 0..3): route.ranks maps its numbers to
 * the job's. A datagram for peer p leaves on the first route that reaches p and has not
 * failed for it; received datagrams come from every route, their senders renamed to job ranks.
 *
 * Failing over: a route fails for a peer when its peer_ok op says it can no longer reach it
 * (a verbs QP in error, a DPDK port down) after it carried traffic to it, and for every peer
 * when its send_burst or recv_burst returns an error other than -EINVAL. A route that does
 * not reach a peer yet (shared memory whose peer has not mapped its rings) is not given up:
 * the next route carries the traffic until it does. The router then sends that
 * peer's traffic on the next route, counts it (keel_router_stats.fallbacks), and calls
 * cfg.on_fallback once per peer and route so the program can say so. A failed route is not
 * taken up again for that peer: it may be failing intermittently, and the next one works.
 * When no route is left for a peer, send_burst accepts and drops its datagrams (counted in
 * tx_unroutable), as a network drops traffic to a host it cannot reach: the failure detector
 * then suspects the peer, and the job goes on without it.
 *
 * Caps: with one route, the route's own. With several, the caps every route has, without
 * KEEL_CAP_RELIABLE and KEEL_CAP_ORDERED: a datagram in flight on a route that fails is lost,
 * and one sent on the next route may overtake it; the core's retransmission covers both.
 * peer_caps answers for the route a peer is on now (KEEL_CAP_INTACT and KEEL_CAP_GATHER on
 * shared memory), and received datagrams keep the flags their route set. A datagram in two
 * pieces bound for a route that takes one (the peer's route changed after it was written) is
 * refused, as by a full route: the core sends it again whole.
 * mtu: the smallest route's. wait_fd: an epoll descriptor that becomes readable when any
 * route's does (-1 when a route can only be polled). The router owns none of its routes:
 * fini closes its epoll descriptor only, and the caller finis the routes after it. No
 * allocation after init; keel_router_init's only system call is epoll_create1. */
#ifndef KEEL_TRANSPORT_ROUTER_H
#define KEEL_TRANSPORT_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KEEL_ROUTER_ROUTES_MAX 4u

struct keel_router_route {
	struct keel_transport *t;
	/* t->world_size entries: the job rank of each of t's ranks (ranks[t->rank] must be
	 * the router's rank; no job rank twice). NULL: t numbers ranks as the job does (its
	 * world_size and rank are the router's). Copied at init. */
	const uint32_t *ranks;
};

/* Called from send_burst when route `from` fails for `peer`; `to` is the route now used
 * (KEEL_ROUTER_NONE when none is left), err the route's error (0 when peer_ok said so).
 * Must not call into the router or the node. */
#define KEEL_ROUTER_NONE UINT32_MAX
typedef void (*keel_router_fallback_fn)(void *ctx, uint32_t peer, uint32_t from, uint32_t to,
					int err);

struct keel_router_config {
	uint32_t rank;
	uint32_t world_size;
	uint32_t routes;					/* 1..KEEL_ROUTER_ROUTES_MAX */
	struct keel_router_route route[KEEL_ROUTER_ROUTES_MAX]; /* best first */
	keel_router_fallback_fn on_fallback;			/* optional */
	void *on_fallback_ctx;
};

/* Caller memory for this config; 0 if it is invalid (see keel_router_init's -EINVAL). */
size_t keel_router_storage_size(const struct keel_router_config *cfg);

/* Build the router in mem. Errors: -EINVAL (world_size 0 or above KEEL_WORLD_MAX, rank out of
 * range, routes 0 or above the maximum, a route without a transport or ops, a route whose
 * rank table is out of range, names a job rank twice, or does not map its own rank to the
 * router's; a route without a table whose world or rank differ from the router's; a peer no
 * route reaches is allowed: it is unroutable from the start), -ENOSPC (mem too small), or
 * epoll's -errno. On error *out is NULL and nothing is left open. */
KEEL_MUST_USE int keel_router_init(struct keel_transport **out, void *mem, size_t mem_len,
				   const struct keel_router_config *cfg);

/* The routes' own wait descriptors, for a waiter that polls several at once (keel_posix's):
 * fills fds[0 .. return) in route order, one per route that has not failed as a whole. 0 when
 * a route can only be polled (then so must the router be), or max is too small. A waiter on
 * these wakes sooner than one on wait_fd's epoll descriptor (docs/perf-history.md). */
uint32_t keel_router_wait_fds(struct keel_transport *t, int *fds, uint32_t max);

/* The route now carrying traffic to `peer`, or KEEL_ROUTER_NONE (none left, or peer is this
 * rank or out of range). */
uint32_t keel_router_peer_route(struct keel_transport *t, uint32_t peer);

struct keel_router_stats {
	uint64_t tx_datagrams[KEEL_ROUTER_ROUTES_MAX]; /* accepted by each route */
	uint64_t rx_datagrams[KEEL_ROUTER_ROUTES_MAX];
	uint64_t fallbacks;	/* (peer, route) pairs given up */
	uint64_t tx_unroutable; /* datagrams for a peer no route reaches: dropped */
	uint64_t rx_unknown;	/* from a route's rank that maps to no job rank: dropped */
};
void keel_router_stats_get(struct keel_transport *t, struct keel_router_stats *out);

#ifdef __cplusplus
}
#endif

#endif
