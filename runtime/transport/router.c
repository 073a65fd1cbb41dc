/* The router transport (keel/transport_router.h): each peer on the best route that still
 * reaches it. It renames peers between the job's ranks and each route's own, and moves
 * nothing itself: the routes copy the bytes. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "assert_int.h"
#include "keel/limits.h"
#include "keel/transport_router.h"

#define NONE	  UINT32_MAX
#define NO_ROUTE8 0xffu
#define ALIGN	  64u
/* A route that carries no peer and delivered nothing lately (UDP behind shared memory on one
 * host) is a backup: polled every BACKUP_POLL_EVERY calls, not every call, which spares a
 * failed receive syscall per poll. A peer that sends on it anyway (its own shared memory
 * failed) is heard within that many polls; from then on the route is polled every call. */
#define BACKUP_POLL_EVERY 64u

struct router {
	struct keel_transport t;
	uint32_t routes;
	struct keel_transport *rt[KEEL_ROUTER_ROUTES_MAX];
	uint32_t *to_job[KEEL_ROUTER_ROUTES_MAX]; /* [rt->world_size]: route rank -> job rank */
	bool dead[KEEL_ROUTER_ROUTES_MAX];	  /* failed for every peer: not polled any more */
	uint32_t *to_route;			  /* [world x routes]: job rank -> route rank */
	uint8_t *cur;				  /* [world]: route carrying the peer, NO_ROUTE8 */
	uint8_t *failed;			  /* [world]: bit per route given up for the peer */
	uint8_t *used;				  /* [world]: bit per route that carried the peer */
	int epfd;
	bool closed;
	uint32_t rx_next; /* the route polled first next time: no route starves the others */
	uint64_t rx_calls;
	uint32_t carrying[KEEL_ROUTER_ROUTES_MAX];     /* peers whose cur is the route */
	uint64_t last_rx_call[KEEL_ROUTER_ROUTES_MAX]; /* rx_calls when it last delivered */
	keel_router_fallback_fn on_fallback;
	void *on_fallback_ctx;
	struct keel_router_stats st;
	struct keel_datagram out[KEEL_BURST_MAX]; /* a run for one route, peers renamed */
};

struct layout {
	size_t to_route, cur, failed, used, to_job[KEEL_ROUTER_ROUTES_MAX], total;
};

static const struct keel_transport_ops router_ops;

static size_t align_up(size_t n)
{
	return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

static struct router *of(struct keel_transport *t)
{
	KEEL_ASSERT(t != NULL && t->ops == &router_ops);
	return (struct router *)t->state;
}

/* The job rank of route rank i. */
static uint32_t job_rank(const struct keel_router_route *r, uint32_t i)
{
	return r->ranks != NULL ? r->ranks[i] : i;
}

static bool route_valid(const struct keel_router_config *cfg, const struct keel_router_route *r)
{
	if (r->t == NULL || r->t->ops == NULL || r->t->ops->send_burst == NULL ||
	    r->t->ops->recv_burst == NULL || r->t->world_size == 0 ||
	    r->t->world_size > KEEL_WORLD_MAX || r->t->rank >= r->t->world_size)
		return false;
	if (r->ranks == NULL)
		return r->t->world_size == cfg->world_size && r->t->rank == cfg->rank;
	if (r->ranks[r->t->rank] != cfg->rank)
		return false;
	for (uint32_t i = 0; i < r->t->world_size; i++) {
		if (r->ranks[i] >= cfg->world_size)
			return false;
		for (uint32_t j = 0; j < i; j++) /* init only: worlds on one route are small */
			if (r->ranks[j] == r->ranks[i])
				return false;
	}
	return true;
}

static bool config_valid(const struct keel_router_config *cfg)
{
	if (cfg == NULL || cfg->world_size == 0 || cfg->world_size > KEEL_WORLD_MAX ||
	    cfg->rank >= cfg->world_size || cfg->routes == 0 ||
	    cfg->routes > KEEL_ROUTER_ROUTES_MAX)
		return false;
	for (uint32_t r = 0; r < cfg->routes; r++)
		if (!route_valid(cfg, &cfg->route[r]))
			return false;
	return true;
}

static size_t layout_of(const struct keel_router_config *cfg, struct layout *l)
{
	size_t off = align_up(sizeof(struct router));
	l->to_route = off;
	off = align_up(off + (size_t)cfg->world_size * cfg->routes * sizeof(uint32_t));
	l->cur = off;
	off = align_up(off + cfg->world_size);
	l->failed = off;
	off = align_up(off + cfg->world_size);
	l->used = off;
	off = align_up(off + cfg->world_size);
	for (uint32_t r = 0; r < cfg->routes; r++) {
		l->to_job[r] = off;
		off = align_up(off + (size_t)cfg->route[r].t->world_size * sizeof(uint32_t));
	}
	l->total = off;
	return off;
}

size_t keel_router_storage_size(const struct keel_router_config *cfg)
{
	struct layout l;
	return config_valid(cfg) ? layout_of(cfg, &l) : 0;
}

/* The first route, in preference order, that reaches peer and has not failed for it. */
static uint8_t first_route(const struct router *x, uint32_t peer)
{
	for (uint32_t r = 0; r < x->routes; r++)
		if (x->to_route[peer * x->routes + r] != NONE && !(x->failed[peer] & (1u << r)))
			return (uint8_t)r;
	return NO_ROUTE8;
}

/* Give up route r for peer: the next one carries it from now on. */
static void fail_route(struct router *x, uint32_t peer, uint32_t r, int err)
{
	KEEL_ASSERT(peer < x->t.world_size && r < x->routes);
	if (x->failed[peer] & (1u << r))
		return;
	x->failed[peer] |= (uint8_t)(1u << r);
	bool carried = x->cur[peer] == r;
	if (carried) {
		x->carrying[r]--;
		x->cur[peer] = first_route(x, peer);
		if (x->cur[peer] != NO_ROUTE8)
			x->carrying[x->cur[peer]]++;
	}
	if (!carried)
		return; /* a route the peer was not on: nothing changes for it */
	x->st.fallbacks++;
	if (x->on_fallback != NULL)
		x->on_fallback(x->on_fallback_ctx, peer, r,
			       x->cur[peer] == NO_ROUTE8 ? KEEL_ROUTER_NONE : x->cur[peer], err);
}

/* Route r broke as a whole (its send or receive returned a fatal error). */
static void fail_route_all(struct router *x, uint32_t r, int err)
{
	if (x->dead[r])
		return;
	x->dead[r] = true;
	int fd = x->rt[r]->ops->wait_fd != NULL ? x->rt[r]->ops->wait_fd(x->rt[r]) : -1;
	if (x->epfd >= 0 && fd >= 0)
		(void)epoll_ctl(x->epfd, EPOLL_CTL_DEL, fd, NULL); /* a dead fd may poll readable */
	for (uint32_t p = 0; p < x->t.world_size; p++)
		if (p != x->t.rank)
			fail_route(x, p, r, err);
}

static bool reaches(struct router *x, uint32_t r, uint32_t peer)
{
	struct keel_transport *t = x->rt[r];
	return t->ops->peer_ok == NULL || t->ops->peer_ok(t, x->to_route[peer * x->routes + r]);
}

/* The route for peer now, after asking the current one whether it still reaches it. One that
 * never carried the peer and does not reach it yet (a peer still mapping its rings) is not
 * given up: a later route carries the traffic until it does. */
static uint32_t route_for(struct router *x, uint32_t peer)
{
	uint32_t r;
	while ((r = x->cur[peer]) != NO_ROUTE8) {
		if (reaches(x, r, peer)) {
			x->used[peer] |= (uint8_t)(1u << r);
			return r;
		}
		if (!(x->used[peer] & (1u << r)))
			break;
		fail_route(x, peer, r, 0);
	}
	for (r = r == NO_ROUTE8 ? x->routes : r + 1; r < x->routes; r++)
		if (x->to_route[peer * x->routes + r] != NONE && !(x->failed[peer] & (1u << r)) &&
		    reaches(x, r, peer)) {
			x->last_rx_call[r] = x->rx_calls; /* its answers come back on it: listen */
			return r;			  /* for now */
		}
	return NONE;
}

/* Can route r carry d as the core wrote it (for the caps the peer's route had then)? */
static bool route_takes(struct router *x, uint32_t r, const struct keel_datagram *d)
{
	uint32_t need = (d->tail_len != 0 ? KEEL_CAP_GATHER : 0u) |
			((d->flags & KEEL_DGRAM_INTACT) != 0 ? KEEL_CAP_INTACT : 0u);
	if (need == 0)
		return true;
	struct keel_transport *rt = x->rt[r];
	uint32_t rpeer = x->to_route[d->peer * x->routes + r];
	/* a tail in device memory goes only where the NIC reads it (a route without that, or
	 * whose registration is gone, would have the CPU copy it) */
	if ((d->flags & KEEL_DGRAM_DEVICE_TAIL) != 0 &&
	    (rt->ops->device_tail_ok == NULL ||
	     !rt->ops->device_tail_ok(rt, rpeer, d->tail, d->tail_len)))
		return false;
	uint32_t caps = keel_transport_peer_caps(rt, rpeer);
	return (caps & need) == need;
}

static bool peer_valid(const struct router *x, uint32_t peer)
{
	return peer < x->t.world_size && peer != x->t.rank;
}

static int router_send_burst(struct keel_transport *t, uint64_t now_ns,
			     const struct keel_datagram *d, uint32_t count)
{
	struct router *x = of(t);
	if (x->closed)
		return KEEL_ETRANSPORT;
	uint32_t i = 0;
	while (i < count) {
		if (!peer_valid(x, d[i].peer))
			return i == 0 ? -EINVAL : (int)i;
		uint32_t r = route_for(x, d[i].peer);
		if (r == NONE) { /* nothing reaches it: dropped, as by a network */
			x->st.tx_unroutable++;
			i++;
			continue;
		}
		/* The run of datagrams that go on route r, renamed into its ranks. A datagram
		 * the route cannot take as written stops it: in two pieces where the route takes
		 * one, or without a CRC (KEEL_DGRAM_INTACT) where the route is a wire. The route
		 * changed after the core wrote it (the core asked router_peer_caps then):
		 * refused like one to a full route, it comes back from the core as the new route
		 * needs it. */
		uint32_t n = 0;
		while (i + n < count && n < KEEL_BURST_MAX && peer_valid(x, d[i + n].peer) &&
		       (n == 0 || route_for(x, d[i + n].peer) == r) &&
		       route_takes(x, r, &d[i + n])) {
			x->out[n] = d[i + n];
			x->out[n].peer = x->to_route[d[i + n].peer * x->routes + r];
			n++;
		}
		if (n == 0)
			break; /* route r cannot take d[i] as the core wrote it */
		int rc = x->rt[r]->ops->send_burst(x->rt[r], now_ns, x->out, n);
		if (rc == -EINVAL)
			return i == 0 ? -EINVAL : (int)i;
		if (rc < 0) { /* the route broke: the same datagrams go on the next one */
			fail_route_all(x, r, rc);
			continue;
		}
		KEEL_ASSERT((uint32_t)rc <= n);
		x->st.tx_datagrams[r] += (uint64_t)rc;
		i += (uint32_t)rc;
		if ((uint32_t)rc < n)
			break; /* the route is full: the caller tries the rest later */
	}
	KEEL_ASSERT(i <= count);
	return (int)i;
}

/* Would route r be asked this call? A backup, quiet lately, only every BACKUP_POLL_EVERY. */
static bool route_polled(const struct router *x, uint32_t r)
{
	return !x->dead[r] &&
	       (x->carrying[r] != 0 || x->rx_calls - x->last_rx_call[r] < BACKUP_POLL_EVERY ||
		x->rx_calls % BACKUP_POLL_EVERY == 0);
}

static int router_recv_burst(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
			     uint32_t count_max)
{
	struct router *x = of(t);
	if (x->closed)
		return KEEL_ETRANSPORT;
	uint32_t got = 0;
	x->rx_calls++;
	for (uint32_t k = 0; k < x->routes && got < count_max; k++) {
		uint32_t r = (x->rx_next + k) % x->routes;
		if (!route_polled(x, r))
			continue; /* dead, or a backup quiet lately */
		int rc = x->rt[r]->ops->recv_burst(x->rt[r], now_ns, d + got, count_max - got);
		if (rc < 0) {
			fail_route_all(x, r, rc);
			continue;
		}
		if (rc > 0)
			x->last_rx_call[r] = x->rx_calls;
		uint32_t kept = got;
		for (uint32_t j = got; j < got + (uint32_t)rc; j++) {
			uint32_t from = d[j].peer;
			uint32_t job = from < x->rt[r]->world_size ? x->to_job[r][from] : NONE;
			if (job == NONE || job == x->t.rank) {
				x->st.rx_unknown++;
				if ((d[j].flags & KEEL_DGRAM_DEVICE_TAIL) != 0 &&
				    x->rt[r]->ops->rx_release != NULL)
					x->rt[r]->ops->rx_release(x->rt[r], from, d[j].tail);
				continue;
			}
			if (kept != j) { /* close the gap: the caller's buffers move with them */
				struct keel_datagram tmp = d[kept];
				d[kept] = d[j];
				d[j] = tmp;
			}
			d[kept++].peer = job;
		}
		x->st.rx_datagrams[r] += kept - got;
		got = kept;
	}
	x->rx_next = (x->rx_next + 1) % x->routes;
	for (uint32_t r = 0; got == 0 && r < x->routes; r++)
		if (!x->dead[r])
			return 0;
	return got == 0 ? KEEL_ETRANSPORT : (int)got; /* every route broke */
}

static uint64_t router_next_deadline_ns(struct keel_transport *t)
{
	struct router *x = of(t);
	uint64_t next = UINT64_MAX;
	for (uint32_t r = 0; r < x->routes; r++) {
		if (x->dead[r] || x->rt[r]->ops->next_deadline_ns == NULL)
			continue;
		uint64_t v = x->rt[r]->ops->next_deadline_ns(x->rt[r]);
		next = v < next ? v : next;
	}
	return next;
}

/* Input on a route: its own cheap check, else a poll of its descriptor (a syscall), else yes
 * (a route that can only be polled). */
static bool route_rx_ready(struct keel_transport *t)
{
	if (t->ops->rx_ready != NULL)
		return t->ops->rx_ready(t);
	int fd = t->ops->wait_fd != NULL ? t->ops->wait_fd(t) : -1;
	if (fd < 0)
		return true;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) != 0;
}

static bool router_rx_ready(struct keel_transport *t)
{
	struct router *x = of(t);
	if (x->closed)
		return true; /* recv_burst has an error to give */
	for (uint32_t r = 0; r < x->routes; r++)
		if (route_polled(x, r) && route_rx_ready(x->rt[r]))
			return true;
	return false;
}

/* Every live route armed; a route without the op is always armed. */
static bool router_arm_wait(struct keel_transport *t)
{
	struct router *x = of(t);
	bool quiet = !x->closed;
	for (uint32_t r = 0; r < x->routes && quiet; r++)
		if (!x->dead[r] && x->rt[r]->ops->arm_wait != NULL)
			quiet = x->rt[r]->ops->arm_wait(x->rt[r]);
	return quiet;
}

static int router_wait_fd(struct keel_transport *t)
{
	return of(t)->epfd;
}

static bool router_peer_ok(struct keel_transport *t, uint32_t peer)
{
	struct router *x = of(t);
	return peer_valid(x, peer) && route_for(x, peer) != NONE;
}

/* The caps of the route send_burst would take to peer now, less what several routes cannot
 * promise (keel_router_init). */
static uint32_t router_peer_caps(struct keel_transport *t, uint32_t peer)
{
	struct router *x = of(t);
	if (!peer_valid(x, peer))
		return 0;
	uint32_t r = route_for(x, peer);
	if (r == NONE)
		return 0;
	uint32_t caps = keel_transport_peer_caps(x->rt[r], x->to_route[peer * x->routes + r]);
	if (x->routes > 1)
		caps &= ~(uint32_t)(KEEL_CAP_RELIABLE | KEEL_CAP_ORDERED);
	return caps;
}

/* Device tails go where the route the peer is on now says its NIC reads them. */
static bool router_device_tail_ok(struct keel_transport *t, uint32_t peer, const void *addr,
				  size_t len)
{
	struct router *x = of(t);
	if (!peer_valid(x, peer))
		return false;
	uint32_t r = route_for(x, peer);
	if (r == NONE || x->rt[r]->ops->device_tail_ok == NULL)
		return false;
	return x->rt[r]->ops->device_tail_ok(x->rt[r], x->to_route[peer * x->routes + r], addr,
					     len);
}

/* A payload handed over in device memory goes back to the route that has such payloads (the
 * one whose rx_release knows it; the others have none). */
static void router_rx_release(struct keel_transport *t, uint32_t peer, const void *tail)
{
	struct router *x = of(t);
	if (!peer_valid(x, peer))
		return;
	for (uint32_t r = 0; r < x->routes; r++) {
		uint32_t rp = x->to_route[peer * x->routes + r];
		if (x->rt[r]->ops->rx_release != NULL && rp != NONE)
			x->rt[r]->ops->rx_release(x->rt[r], rp, tail);
	}
}

static void router_fini(struct keel_transport *t)
{
	struct router *x = of(t);
	if (x->epfd >= 0)
		close(x->epfd);
	x->epfd = -1;
	x->closed = true;
}

static const struct keel_transport_ops router_ops = {
    .name = "router",
    .send_burst = router_send_burst,
    .recv_burst = router_recv_burst,
    .next_deadline_ns = router_next_deadline_ns,
    .wait_fd = router_wait_fd,
    .fini = router_fini,
    .peer_ok = router_peer_ok,
    .rx_ready = router_rx_ready,
    .arm_wait = router_arm_wait,
    .peer_caps = router_peer_caps,
    .device_tail_ok = router_device_tail_ok,
    .rx_release = router_rx_release,
};

/* One epoll descriptor over every route's wait_fd; -1 (and 0) when a route has none. */
static int open_epoll(struct router *x)
{
	x->epfd = -1;
	for (uint32_t r = 0; r < x->routes; r++)
		if (x->rt[r]->ops->wait_fd == NULL || x->rt[r]->ops->wait_fd(x->rt[r]) < 0)
			return 0; /* a route that can only be polled: so must the router be */
	x->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (x->epfd < 0)
		return -errno;
	for (uint32_t r = 0; r < x->routes; r++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = r};
		if (epoll_ctl(x->epfd, EPOLL_CTL_ADD, x->rt[r]->ops->wait_fd(x->rt[r]), &ev) != 0) {
			int rc = -errno;
			close(x->epfd);
			x->epfd = -1;
			return rc;
		}
	}
	return 0;
}

int keel_router_init(struct keel_transport **out, void *mem, size_t mem_len,
		     const struct keel_router_config *cfg)
{
	if (out == NULL)
		return -EINVAL;
	*out = NULL;
	if (!config_valid(cfg))
		return -EINVAL;
	struct layout l;
	if (mem == NULL || mem_len < layout_of(cfg, &l))
		return -ENOSPC;
	memset(mem, 0, l.total);
	struct router *x = mem;
	uint8_t *base = mem;
	uint32_t caps = ~0u, mtu = UINT32_MAX;
	x->routes = cfg->routes;
	x->to_route = (uint32_t *)(void *)(base + l.to_route);
	x->cur = base + l.cur;
	x->failed = base + l.failed;
	x->used = base + l.used;
	x->on_fallback = cfg->on_fallback;
	x->on_fallback_ctx = cfg->on_fallback_ctx;
	for (size_t k = 0; k < (size_t)cfg->world_size * cfg->routes; k++)
		x->to_route[k] = NONE;
	for (uint32_t r = 0; r < cfg->routes; r++) {
		const struct keel_router_route *rt = &cfg->route[r];
		x->rt[r] = rt->t;
		x->to_job[r] = (uint32_t *)(void *)(base + l.to_job[r]);
		for (uint32_t i = 0; i < rt->t->world_size; i++) {
			uint32_t job = job_rank(rt, i);
			x->to_job[r][i] = job;
			if (i != rt->t->rank)
				x->to_route[job * cfg->routes + r] = i;
		}
		caps &= rt->t->caps;
		mtu = rt->t->mtu < mtu ? rt->t->mtu : mtu;
	}
	for (uint32_t p = 0; p < cfg->world_size; p++) {
		x->cur[p] = p == cfg->rank ? NO_ROUTE8 : first_route(x, p);
		if (x->cur[p] != NO_ROUTE8)
			x->carrying[x->cur[p]]++;
	}
	if (cfg->routes > 1) /* see the header: a failover may lose or overtake */
		caps &= ~(uint32_t)(KEEL_CAP_RELIABLE | KEEL_CAP_ORDERED);
	x->t = (struct keel_transport){
	    .ops = &router_ops,
	    .state = x,
	    .caps = caps,
	    .mtu = mtu,
	    .rank = cfg->rank,
	    .world_size = cfg->world_size,
	};
	int rc = open_epoll(x);
	if (rc != 0)
		return rc;
	*out = &x->t;
	return 0;
}

uint32_t keel_router_wait_fds(struct keel_transport *t, int *fds, uint32_t max)
{
	struct router *x = of(t);
	uint32_t n = 0;
	for (uint32_t r = 0; r < x->routes; r++) {
		if (x->dead[r])
			continue;
		int fd = x->rt[r]->ops->wait_fd != NULL ? x->rt[r]->ops->wait_fd(x->rt[r]) : -1;
		if (fd < 0 || n == max)
			return 0;
		fds[n++] = fd;
	}
	return n;
}

uint32_t keel_router_peer_route(struct keel_transport *t, uint32_t peer)
{
	struct router *x = of(t);
	if (!peer_valid(x, peer))
		return KEEL_ROUTER_NONE;
	uint32_t r = route_for(x, peer);
	return r == NONE ? KEEL_ROUTER_NONE : r;
}

void keel_router_stats_get(struct keel_transport *t, struct keel_router_stats *out)
{
	*out = of(t)->st;
}
