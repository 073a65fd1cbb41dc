/* The router transport: each peer on the best route (shared memory on its host, UDP to the
 * others), peers renamed between a route's ranks and the job's, and failover when a route
 * fails for one peer or as a whole. Real shared-memory and UDP transports underneath; a test
 * decorator ("breaker") stands for a route that fails: a verbs QP in error, a port down. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <poll.h>

#include "cluster_int.h"
#include "keel/transport_router.h"
#include "refcheck.h"
#include "wire_int.h"

#define MTU	  1024u
#define HOSTS_MAX 4u

/* ---- the breaker: an inner transport that can be made to fail -------------------------- */

struct breaker {
	struct keel_transport t;
	struct keel_transport *inner;
	bool cut[CLUSTER_MAX]; /* peer_ok false for these; their datagrams vanish, as on a QP
				* in error */
	bool fatal;	       /* send and receive return KEEL_ETRANSPORT */
	bool strip_intact;     /* received datagrams lose KEEL_DGRAM_INTACT (a careless layer) */
	bool device_tails;     /* device_tail_ok says yes (a NIC that reads device memory) */
	uint64_t recv_calls;
	uint64_t rx_no_crc; /* datagrams received that were sent without a CRC */
};

static struct breaker *breaker_of(struct keel_transport *t)
{
	return (struct breaker *)t->state;
}

static int breaker_send(struct keel_transport *t, uint64_t now, const struct keel_datagram *d,
			uint32_t count)
{
	struct breaker *b = breaker_of(t);
	if (b->fatal)
		return KEEL_ETRANSPORT;
	uint32_t i = 0;
	while (i < count) {
		if (b->cut[d[i].peer]) { /* accepted and lost */
			i++;
			continue;
		}
		uint32_t n = 0;
		while (i + n < count && !b->cut[d[i + n].peer])
			n++;
		int rc = b->inner->ops->send_burst(b->inner, now, d + i, n);
		if (rc < 0)
			return i == 0 ? rc : (int)i;
		i += (uint32_t)rc;
		if ((uint32_t)rc < n)
			break;
	}
	return (int)i;
}

static int breaker_recv(struct keel_transport *t, uint64_t now, struct keel_datagram *d,
			uint32_t count)
{
	struct breaker *b = breaker_of(t);
	b->recv_calls++;
	if (b->fatal)
		return KEEL_ETRANSPORT;
	int got = b->inner->ops->recv_burst(b->inner, now, d, count);
	for (int i = 0; i < got; i++) {
		if (d[i].len >= WIRE_HEADER_SIZE && wire_crc_left_out(d[i].buf))
			b->rx_no_crc++;
		if (b->strip_intact)
			d[i].flags &= ~(uint32_t)KEEL_DGRAM_INTACT;
	}
	return got;
}

static bool breaker_peer_ok(struct keel_transport *t, uint32_t peer)
{
	return !breaker_of(t)->cut[peer];
}

static int breaker_wait_fd(struct keel_transport *t)
{
	struct keel_transport *in = breaker_of(t)->inner;
	return in->ops->wait_fd(in);
}

static bool breaker_rx_ready(struct keel_transport *t)
{
	struct keel_transport *in = breaker_of(t)->inner;
	return breaker_of(t)->fatal || in->ops->rx_ready(in);
}

static bool breaker_arm_wait(struct keel_transport *t)
{
	struct keel_transport *in = breaker_of(t)->inner;
	return !breaker_of(t)->fatal && in->ops->arm_wait(in);
}

static bool breaker_device_tail_ok(struct keel_transport *t, uint32_t peer, const void *addr,
				   size_t len)
{
	(void)addr;
	return breaker_of(t)->device_tails && !breaker_of(t)->cut[peer] && len != 0;
}

static const struct keel_transport_ops breaker_ops = {
    .name = "breaker",
    .send_burst = breaker_send,
    .recv_burst = breaker_recv,
    .wait_fd = breaker_wait_fd,
    .peer_ok = breaker_peer_ok,
    .rx_ready = breaker_rx_ready,
    .arm_wait = breaker_arm_wait,
    .device_tail_ok = breaker_device_tail_ok,
};

static void breaker_init(struct breaker *b, struct keel_transport *inner)
{
	memset(b, 0, sizeof(*b));
	b->inner = inner;
	b->t = *inner;
	b->t.ops = &breaker_ops;
	b->t.state = b;
}

/* ---- a cluster of routers: shared memory per host, UDP between all ------------------------ */

struct routed {
	struct cluster c; /* c.udp: the UDP transports, c.tp: the routers */
	uint32_t host_of[CLUSTER_MAX];
	uint32_t hosts;
	void *region[HOSTS_MAX];
	struct keel_transport *shm[CLUSTER_MAX];
	struct keel_transport *router[CLUSTER_MAX]; /* routed_init_chaos: c.tp is the chaos */
	void *mem_shm[CLUSTER_MAX], *mem_router[CLUSTER_MAX];
	uint32_t local_ranks[HOSTS_MAX][CLUSTER_MAX]; /* per host: its job ranks in order */
	uint32_t local_count[HOSTS_MAX];
	struct breaker brk[CLUSTER_MAX]; /* around each rank's shared-memory route */
	uint32_t fallbacks[CLUSTER_MAX]; /* on_fallback calls per rank */
	uint32_t last_fallback[CLUSTER_MAX][4];
};

static void on_fallback(void *ctx, uint32_t peer, uint32_t from, uint32_t to, int err)
{
	uint32_t *rec = ctx; /* [0]: calls, [1..4]: the last call */
	rec[0]++;
	rec[1] = peer;
	rec[2] = from;
	rec[3] = to;
	rec[4] = (uint32_t)err;
}

static uint32_t g_records[CLUSTER_MAX][5];

static void node_tweak(struct keel_config *cfg)
{
	cfg->mtu = MTU;
	cfg->op_timeout_ns = 5000000000ull;
}

/* One region per host, one shared-memory transport per rank among its host's ranks. */
static int shm_per_host(struct routed *x)
{
	for (uint32_t h = 0; h < x->hosts; h++) {
		struct keel_shm_config sc;
		char name[KEEL_SHM_NAME_MAX];
		static uint32_t runs; /* a name per cluster: a failed test leaves its doorbells */
		snprintf(name, sizeof(name), "/keel-router-%d-%u-%u", (int)getpid(), runs++, h);
		keel_shm_config_default(&sc);
		sc.world_size = x->local_count[h];
		sc.name = name;
		sc.mtu = MTU;
		sc.ring_bytes = 1u << 18;
		sc.region_len = keel_shm_region_size(&sc);
		x->region[h] = aligned_alloc(64, (sc.region_len + 63) & ~(size_t)63);
		if (sc.region_len == 0 || x->region[h] == NULL)
			return -EINVAL;
		memset(x->region[h], 0, sc.region_len);
		sc.region = x->region[h];
		for (uint32_t i = 0; i < x->local_count[h]; i++) {
			uint32_t r = x->local_ranks[h][i];
			sc.rank = i;
			size_t sz = keel_shm_storage_size(&sc);
			x->mem_shm[r] = calloc(1, sz);
			int rc = keel_shm_init(&x->shm[r], x->mem_shm[r], sz, &sc);
			if (rc != 0)
				return rc;
		}
	}
	for (uint32_t r = 0; r < x->c.world; r++)
		if (keel_shm_attach(x->shm[r]) != 0)
			return -EIO;
	return 0;
}

/* world ranks on hosts host_of[] (0..hosts-1): rank r's router has its host's shared memory
 * (behind a breaker) first, then (with_udp) UDP to everyone. Nodes on top when with_nodes. */
static int routed_init(struct routed *x, uint32_t world, const uint32_t *host_of, bool with_nodes,
		       bool with_udp)
{
	memset(x, 0, sizeof(*x));
	memset(g_records, 0, sizeof(g_records));
	cluster_clock_init(&x->c, world);
	for (uint32_t r = 0; r < world; r++) {
		uint32_t h = host_of[r];
		x->host_of[r] = h;
		x->hosts = h + 1 > x->hosts ? h + 1 : x->hosts;
		x->local_ranks[h][x->local_count[h]++] = r;
	}
	int rc = cluster_udp_init(&x->c, MTU);
	if (rc == 0)
		rc = shm_per_host(x);
	for (uint32_t r = 0; rc == 0 && r < world; r++) {
		struct keel_router_config rc_cfg = {
		    .rank = r, .world_size = world, .routes = with_udp ? 2u : 1u};
		breaker_init(&x->brk[r], x->shm[r]);
		rc_cfg.route[0].t = &x->brk[r].t;
		rc_cfg.route[0].ranks = x->local_ranks[host_of[r]];
		rc_cfg.route[1].t = x->c.udp[r];
		rc_cfg.on_fallback = on_fallback;
		rc_cfg.on_fallback_ctx = g_records[r];
		size_t sz = keel_router_storage_size(&rc_cfg);
		x->mem_router[r] = calloc(1, sz);
		rc = sz == 0 ? -EINVAL
			     : keel_router_init(&x->c.tp[r], x->mem_router[r], sz, &rc_cfg);
	}
	if (rc == 0 && with_nodes)
		rc = cluster_nodes_init(&x->c, node_tweak);
	return rc;
}

/* The same, with the chaos transport between each router and its node. */
static int routed_init_chaos(struct routed *x, uint32_t world, const uint32_t *host_of,
			     const char *spec, uint64_t seed)
{
	int rc = routed_init(x, world, host_of, false, true);
	for (uint32_t r = 0; rc == 0 && r < world; r++) {
		struct keel_chaos_config cc;
		keel_chaos_config_default(&cc);
		if (keel_chaos_parse(spec, &cc) != 0)
			return -EINVAL;
		cc.inner = x->c.tp[r];
		cc.seed = seed * 1000003u + r;
		size_t sz = keel_chaos_storage_size(&cc);
		x->c.mem_chaos[r] = calloc(1, sz);
		rc = keel_chaos_init(&x->c.chaos[r], x->c.mem_chaos[r], sz, &cc);
		x->router[r] = x->c.tp[r];
		x->c.tp[r] = x->c.chaos[r];
	}
	return rc == 0 ? cluster_nodes_init(&x->c, node_tweak) : rc;
}

static void routed_fini(struct routed *x)
{
	for (uint32_t r = 0; r < x->c.world; r++) {
		if (x->c.node[r] != NULL)
			keel_fini(x->c.node[r]);
		x->c.node[r] = NULL;
		struct keel_transport *router = x->router[r] != NULL ? x->router[r] : x->c.tp[r];
		if (router != NULL)
			router->ops->fini(router); /* cluster_fini finis the chaos */
		if (x->shm[r] != NULL)
			x->shm[r]->ops->fini(x->shm[r]);
		free(x->mem_shm[r]);
		free(x->mem_router[r]);
	}
	for (uint32_t h = 0; h < x->hosts; h++)
		free(x->region[h]);
	cluster_fini(&x->c); /* the UDP transports and the nodes' memory */
}

/* ---- raw datagrams through the routers ---------------------------------------------------- */

/* Send one datagram from `from` to `to` through the routers and receive it: the receiver sees
 * the sender's job rank and the bytes. Returns the route it went on, as the sender's stats
 * say. */
/* Wait for one datagram at `to` and check it is `want` (len bytes) from `from`. */
static void recv_expect(struct routed *x, uint32_t from, uint32_t to, const uint8_t *want,
			uint32_t len)
{
	uint8_t in[MTU];
	for (int tries = 0; tries < 100000; tries++) {
		struct keel_datagram r = {.buf = in, .cap = sizeof(in)};
		int got = x->c.tp[to]->ops->recv_burst(x->c.tp[to], 1, &r, 1);
		assert_true(got >= 0);
		if (got == 0)
			continue;
		assert_int_equal(r.peer, from);
		assert_int_equal(r.len, len);
		assert_memory_equal(r.buf, want, len);
		return;
	}
	fail_msg("datagram %u -> %u never arrived", from, to);
}

static uint32_t send_one(struct routed *x, uint32_t from, uint32_t to, uint8_t tag)
{
	struct keel_router_stats before, after;
	keel_router_stats_get(x->c.tp[from], &before);
	uint8_t out[64];
	memset(out, tag, sizeof(out));
	struct keel_datagram d = {.buf = out, .len = sizeof(out), .peer = to};
	assert_int_equal(x->c.tp[from]->ops->send_burst(x->c.tp[from], 1, &d, 1), 1);
	keel_router_stats_get(x->c.tp[from], &after);
	recv_expect(x, from, to, out, sizeof(out));
	for (uint32_t k = 0; k < KEEL_ROUTER_ROUTES_MAX; k++)
		if (after.tx_datagrams[k] != before.tx_datagrams[k])
			return k;
	return KEEL_ROUTER_NONE;
}

/* Two ranks of one host, shared memory (behind a breaker) then UDP, nodes left out: rank 0's
 * router, and `len` bytes of out filled with a pattern of `seed` to send through it. */
static struct keel_transport *one_host_pair(struct routed *x, uint8_t *out, uint32_t len,
					    uint32_t seed)
{
	static const uint32_t hosts[] = {0, 0};
	assert_int_equal(routed_init(x, 2, hosts, false, true), 0);
	for (uint32_t i = 0; i < len; i++)
		out[i] = (uint8_t)(i * seed + 1);
	return x->c.tp[0];
}

/* A datagram in two pieces (KEEL_CAP_GATHER) goes on a route that takes them for its peer and
 * arrives whole. A route that takes one piece (here shared memory behind a layer without the
 * cap) refuses it as a full route would, so the core copies it in and sends it whole; after a
 * fallback to UDP, which takes two, they go again. peer_caps says which, for each peer. */
static void test_router_two_pieces_only_where_the_route_takes_them(void **state)
{
	(void)state;
	struct routed x;
	uint8_t out[64];
	struct keel_transport *t = one_host_pair(&x, out, sizeof(out), 3);
	struct keel_datagram d = {
	    .buf = out, .len = 16, .tail = out + 16, .tail_len = 48, .peer = 1};
	assert_true((keel_transport_peer_caps(t, 1) & KEEL_CAP_GATHER) != 0);
	assert_int_equal(t->ops->send_burst(t, 1, &d, 1), 1);
	recv_expect(&x, 0, 1, out, sizeof(out));
	x.brk[0].t.caps &= ~(uint32_t)KEEL_CAP_GATHER; /* the shared-memory route: one piece */
	assert_int_equal(keel_transport_peer_caps(t, 1) & KEEL_CAP_GATHER, 0);
	assert_int_equal(t->ops->send_burst(t, 1, &d, 1), 0); /* refused, not lost */
	assert_int_equal(send_one(&x, 0, 1, 9), 0);	      /* whole: still shared memory */
	x.brk[0].cut[1] = true;
	assert_int_equal(send_one(&x, 0, 1, 10), 1); /* fell back to UDP */
	assert_true((keel_transport_peer_caps(t, 1) & KEEL_CAP_GATHER) != 0);
	assert_int_equal(t->ops->send_burst(t, 1, &d, 1), 1);
	recv_expect(&x, 0, 1, out, sizeof(out));
	routed_fini(&x);
}

/* A datagram the core wrote without a CRC for shared memory (KEEL_DGRAM_INTACT on send) goes
 * there; once the peer's route is a wire (the ring cut: the router falls back to UDP), the same
 * datagram is refused as by a full route, so it comes back from the core with its CRC rather
 * than reaching a receiver that drops it. Unflagged datagrams take the new route at once. */
static void test_router_intact_datagram_refused_on_a_wire(void **state)
{
	(void)state;
	struct routed x;
	uint8_t out[64];
	struct keel_transport *t = one_host_pair(&x, out, sizeof(out), 0);
	memset(out, 0x5a, sizeof(out));
	struct keel_datagram d = {
	    .buf = out, .len = sizeof(out), .peer = 1, .flags = KEEL_DGRAM_INTACT};
	assert_true((keel_transport_peer_caps(t, 1) & KEEL_CAP_INTACT) != 0);
	assert_int_equal(t->ops->send_burst(t, 1, &d, 1), 1); /* shared memory takes it */
	recv_expect(&x, 0, 1, out, sizeof(out));
	x.brk[0].cut[1] = true;
	assert_int_equal(t->ops->send_burst(t, 1, &d, 1), 0); /* the route fell back: refused */
	assert_int_equal(keel_router_peer_route(t, 1), 1);
	assert_int_equal(keel_transport_peer_caps(t, 1) & KEEL_CAP_INTACT, 0);
	struct keel_datagram two[2] = {d, d};
	two[0].flags = 0; /* one with its CRC goes, the one without stays */
	assert_int_equal(t->ops->send_burst(t, 1, two, 2), 1);
	recv_expect(&x, 0, 1, out, sizeof(out));
	assert_int_equal(send_one(&x, 0, 1, 11), 1);
	routed_fini(&x);
}

/* A datagram whose tail is device memory (KEEL_DGRAM_DEVICE_TAIL) goes only on a route whose
 * device_tail_ok says yes for it; once the peer's route falls back to one that cannot read
 * device memory (UDP), it is refused as by a full route, so the core has the device copy it
 * to the host. device_tail_ok answers for the route the peer is on. */
static void test_router_device_tail_only_where_the_nic_reads_it(void **state)
{
	(void)state;
	struct routed x;
	uint8_t out[64];
	struct keel_transport *t = one_host_pair(&x, out, sizeof(out), 5);
	struct keel_datagram d = {.buf = out,
				  .len = 16,
				  .tail = out + 16,
				  .tail_len = 48,
				  .peer = 1,
				  .flags = KEEL_DGRAM_DEVICE_TAIL};
	assert_false(t->ops->device_tail_ok(t, 1, out + 16, 48)); /* shared memory: no NIC */
	assert_int_equal(t->ops->send_burst(t, 1, &d, 1), 0);
	x.brk[0].device_tails = true;
	assert_true(t->ops->device_tail_ok(t, 1, out + 16, 48));
	assert_false(t->ops->device_tail_ok(t, 0, out + 16, 48)); /* itself */
	assert_int_equal(t->ops->send_burst(t, 1, &d, 1), 1);
	recv_expect(&x, 0, 1, out, sizeof(out));
	x.brk[0].cut[1] = true;
	assert_int_equal(send_one(&x, 0, 1, 12), 1); /* fell back to UDP */
	assert_false(t->ops->device_tail_ok(t, 1, out + 16, 48));
	assert_int_equal(t->ops->send_burst(t, 1, &d, 1), 0); /* refused, not lost */
	d.flags = 0;					      /* copied to the host: it goes */
	assert_int_equal(t->ops->send_burst(t, 1, &d, 1), 1);
	recv_expect(&x, 0, 1, out, sizeof(out));
	routed_fini(&x);
}

static void test_router_routes_each_peer_by_host(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 1, 1, 1};
	struct routed x;
	assert_int_equal(routed_init(&x, 5, hosts, false, true), 0);
	/* the routers promise only what both routes do: no reliability, no order */
	assert_int_equal(x.c.tp[0]->caps & (KEEL_CAP_RELIABLE | KEEL_CAP_ORDERED), 0);
	assert_int_equal(x.c.tp[0]->mtu, MTU);
	for (uint32_t a = 0; a < 5; a++)
		for (uint32_t b = 0; b < 5; b++) {
			if (a == b)
				continue;
			uint32_t want = hosts[a] == hosts[b] ? 0u : 1u;
			assert_int_equal(keel_router_peer_route(x.c.tp[a], b), want);
			assert_int_equal(send_one(&x, a, b, (uint8_t)(a * 5 + b)), want);
		}
	assert_int_equal(keel_router_peer_route(x.c.tp[0], 0), KEEL_ROUTER_NONE);
	assert_int_equal(keel_router_peer_route(x.c.tp[0], 5), KEEL_ROUTER_NONE);
	/* a bad peer is refused, as by every transport */
	uint8_t b[8] = {0};
	struct keel_datagram d = {.buf = b, .len = 8, .peer = 0};
	assert_int_equal(x.c.tp[0]->ops->send_burst(x.c.tp[0], 1, &d, 1), -EINVAL);
	d.peer = 9;
	assert_int_equal(x.c.tp[0]->ops->send_burst(x.c.tp[0], 1, &d, 1), -EINVAL);
	/* one descriptor to wait on, readable when a route has something; or the routes' own */
	assert_true(x.c.tp[0]->ops->wait_fd(x.c.tp[0]) >= 0);
	int fds[KEEL_ROUTER_ROUTES_MAX];
	assert_int_equal(keel_router_wait_fds(x.c.tp[0], fds, KEEL_ROUTER_ROUTES_MAX), 2);
	assert_int_equal(fds[0], x.shm[0]->ops->wait_fd(x.shm[0]));
	assert_int_equal(fds[1], x.c.udp[0]->ops->wait_fd(x.c.udp[0]));
	assert_int_equal(keel_router_wait_fds(x.c.tp[0], fds, 1), 0); /* no room: poll */
	routed_fini(&x);
}

/* rx_ready: input on any route (shared memory by a load, UDP by a poll); arm_wait: false while
 * input waits, and once armed a shared-memory datagram makes the route's descriptor readable. */
static void test_router_ready_and_arm(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 1};
	struct routed x;
	assert_int_equal(routed_init(&x, 3, hosts, false, true), 0);
	struct keel_transport *t0 = x.c.tp[0], *t1 = x.c.tp[1];
	assert_false(t1->ops->rx_ready(t1));
	assert_true(t1->ops->arm_wait(t1));
	uint8_t out[32] = {7}, in[MTU];
	struct keel_datagram d = {.buf = out, .len = sizeof(out), .peer = 1};
	assert_int_equal(t0->ops->send_burst(t0, 1, &d, 1), 1); /* shared memory */
	struct pollfd p = {.fd = x.shm[1]->ops->wait_fd(x.shm[1]), .events = POLLIN};
	assert_int_equal(poll(&p, 1, 1000), 1); /* armed: the doorbell rang */
	assert_true(t1->ops->rx_ready(t1));
	assert_false(t1->ops->arm_wait(t1));
	static uint8_t bufs[4][MTU];
	struct keel_datagram r4[4];
	for (int i = 0; i < 4; i++)
		r4[i] = (struct keel_datagram){.buf = bufs[i], .cap = MTU};
	assert_int_equal(t1->ops->recv_burst(t1, 1, r4, 4), 1); /* room left: the ring is empty */
	assert_int_equal(r4[0].peer, 0);
	assert_false(t1->ops->rx_ready(t1));
	struct keel_datagram r;
	/* from the other host, over UDP: the router polls that route's descriptor */
	d.peer = 0;
	assert_int_equal(x.c.tp[2]->ops->send_burst(x.c.tp[2], 1, &d, 1), 1);
	bool seen = false;
	for (int i = 0; i < 100000 && !seen; i++)
		seen = t0->ops->rx_ready(t0);
	assert_true(seen);
	/* UDP has no arm: its descriptor is always armed, and readable now */
	assert_true(t0->ops->arm_wait(t0));
	p = (struct pollfd){.fd = x.c.udp[0]->ops->wait_fd(x.c.udp[0]), .events = POLLIN};
	assert_int_equal(poll(&p, 1, 1000), 1);
	r = (struct keel_datagram){.buf = in, .cap = sizeof(in)};
	assert_int_equal(t0->ops->recv_burst(t0, 1, &r, 1), 1);
	assert_int_equal(r.peer, 2);
	routed_fini(&x);
}

static void test_router_falls_back_when_a_route_fails_for_one_peer(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 0};
	struct routed x;
	assert_int_equal(routed_init(&x, 3, hosts, false, true), 0);
	assert_int_equal(send_one(&x, 0, 1, 1), 0);
	x.brk[0].cut[1] = true; /* rank 0's shared memory can no longer reach rank 1 */
	assert_int_equal(send_one(&x, 0, 1, 2), 1);
	assert_int_equal(send_one(&x, 0, 2, 3), 0); /* the others stay on shared memory */
	assert_int_equal(send_one(&x, 1, 0, 4), 0); /* and so does the way back */
	assert_int_equal(g_records[0][0], 1);	    /* said once */
	assert_int_equal(g_records[0][1], 1);
	assert_int_equal(g_records[0][2], 0);
	assert_int_equal(g_records[0][3], 1);
	assert_int_equal(g_records[0][4], 0);
	x.brk[0].cut[1] = false; /* not taken up again: it may fail again */
	assert_int_equal(send_one(&x, 0, 1, 5), 1);
	struct keel_router_stats st;
	keel_router_stats_get(x.c.tp[0], &st);
	assert_int_equal(st.fallbacks, 1);
	assert_int_equal(st.tx_unroutable, 0);
	routed_fini(&x);
}

/* A route that does not reach a peer yet (its rings not mapped) is waited for, not given up:
 * the next route carries the traffic meanwhile, and nothing is said. */
static void test_router_uses_a_route_once_it_is_up(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0};
	struct routed x;
	assert_int_equal(routed_init(&x, 2, hosts, false, true), 0);
	x.brk[0].cut[1] = true; /* before any traffic: not up yet */
	assert_int_equal(send_one(&x, 0, 1, 1), 1);
	assert_int_equal(send_one(&x, 0, 1, 2), 1);
	x.brk[0].cut[1] = false;
	assert_int_equal(send_one(&x, 0, 1, 3), 0);
	assert_int_equal(g_records[0][0], 0);
	x.brk[0].cut[1] = true; /* it carried the peer: now it has failed */
	assert_int_equal(send_one(&x, 0, 1, 4), 1);
	assert_int_equal(g_records[0][0], 1);
	routed_fini(&x);
}

static void test_router_falls_back_when_a_route_breaks(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 0};
	struct routed x;
	assert_int_equal(routed_init(&x, 3, hosts, false, true), 0);
	x.brk[0].fatal = true;
	assert_int_equal(send_one(&x, 0, 1, 1), 1);
	assert_int_equal(send_one(&x, 0, 2, 2), 1);
	assert_int_equal(g_records[0][0], 2); /* one per peer */
	assert_int_equal((int)g_records[0][4], KEEL_ETRANSPORT);
	uint64_t calls = x.brk[0].recv_calls;
	uint8_t in[MTU];
	struct keel_datagram r = {.buf = in, .cap = sizeof(in)};
	assert_int_equal(x.c.tp[0]->ops->recv_burst(x.c.tp[0], 1, &r, 1), 0);
	assert_int_equal(x.brk[0].recv_calls, calls); /* a broken route is not polled again */
	routed_fini(&x);
}

static void test_router_drops_for_a_peer_no_route_reaches(void **state)
{
	(void)state;
	/* rank 0's only way to rank 1 is shared memory: no UDP route in this router */
	static const uint32_t hosts[] = {0, 0};
	struct routed x;
	assert_int_equal(routed_init(&x, 2, hosts, false, true), 0);
	struct keel_transport *only;
	struct keel_router_config cfg = {.rank = 0, .world_size = 2, .routes = 1};
	cfg.route[0].t = &x.brk[0].t;
	cfg.route[0].ranks = x.local_ranks[0];
	size_t sz = keel_router_storage_size(&cfg);
	void *mem = calloc(1, sz);
	assert_int_equal(keel_router_init(&only, mem, sz, &cfg), 0);
	assert_int_equal(only->caps, x.shm[0]->caps); /* one route: its own promises */
	x.brk[0].cut[1] = true;
	uint8_t b[16] = {0};
	struct keel_datagram d = {.buf = b, .len = sizeof(b), .peer = 1};
	assert_int_equal(only->ops->send_burst(only, 1, &d, 1), 1); /* accepted, dropped */
	struct keel_router_stats st;
	keel_router_stats_get(only, &st);
	assert_int_equal(st.tx_unroutable, 1);
	assert_int_equal(keel_router_peer_route(only, 1), KEEL_ROUTER_NONE);
	assert_false(only->ops->peer_ok(only, 1));
	only->ops->fini(only);
	free(mem);
	routed_fini(&x);
}

static void test_router_config_errors(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 1};
	struct routed x;
	assert_int_equal(routed_init(&x, 3, hosts, false, true), 0);
	struct keel_transport *t = (struct keel_transport *)&x; /* not NULL after a failure */
	uint8_t mem[1 << 16];
	struct keel_router_config ok = {.rank = 0, .world_size = 3, .routes = 2};
	ok.route[0].t = x.shm[0];
	ok.route[0].ranks = x.local_ranks[0];
	ok.route[1].t = x.c.udp[0];
	assert_true(keel_router_storage_size(&ok) > 0);
	assert_true(keel_router_storage_size(&ok) <= sizeof(mem));

	struct keel_router_config bad[10];
	uint32_t twice[2] = {0, 0}, out_of_range[2] = {0, 3}, not_self[2] = {1, 2};
	for (int i = 0; i < 10; i++)
		bad[i] = ok;
	bad[0].world_size = 0;
	bad[1].rank = 3;
	bad[2].routes = 0;
	bad[3].routes = KEEL_ROUTER_ROUTES_MAX + 1;
	bad[4].route[1].t = NULL;
	bad[5].route[0].ranks = twice;
	bad[6].route[0].ranks = out_of_range;
	bad[7].route[0].ranks = not_self;
	bad[8].route[0].ranks = NULL; /* a 2-rank route numbered as the 3-rank job */
	bad[9].world_size = KEEL_WORLD_MAX + 1;
	for (int i = 0; i < 10; i++) {
		assert_int_equal(keel_router_storage_size(&bad[i]), 0);
		assert_int_equal(keel_router_init(&t, mem, sizeof(mem), &bad[i]), -EINVAL);
		assert_null(t);
	}
	assert_int_equal(keel_router_init(&t, mem, keel_router_storage_size(&ok) - 1, &ok),
			 -ENOSPC);
	assert_int_equal(keel_router_init(&t, NULL, sizeof(mem), &ok), -ENOSPC);
	assert_int_equal(keel_router_init(&t, mem, sizeof(mem), NULL), -EINVAL);
	assert_int_equal(keel_router_init(&t, mem, sizeof(mem), &ok), 0);
	t->ops->fini(t);
	assert_int_equal(t->ops->send_burst(t, 1, NULL, 0), KEEL_ETRANSPORT);
	t->ops->fini(t); /* twice is safe */
	routed_fini(&x);
}

/* ---- nodes over routers --------------------------------------------------------------------- */

/* An AllReduce among ranks 0..members-1 (the others are out of the view), checked. */
static void run_allreduce(struct routed *x, size_t count, enum keel_dtype dt, enum keel_redop op,
			  uint32_t members)
{
	struct cluster *c = &x->c;
	size_t bytes = count * keel_dtype_size(dt) + 1;
	uint8_t *in[CLUSTER_MAX], *out[CLUSTER_MAX], *ref = malloc(bytes);
	struct keel_op *ops[CLUSTER_MAX];
	int rc[CLUSTER_MAX];
	static const uint32_t first[] = {0, 1, 2, 3, 4, 5, 6, 7};
	keel_check_reference_members(ref, 0, count, first, members, dt, op);
	for (uint32_t r = 0; r < c->world; r++) {
		ops[r] = NULL;
		if (r >= members)
			continue;
		in[r] = malloc(bytes);
		out[r] = malloc(bytes);
		keel_check_fill(in[r], 0, count, r, dt, op);
		assert_int_equal(
		    keel_allreduce_start(c->node[r], in[r], out[r], count, dt, op, &ops[r]), 0);
	}
	assert_int_equal(cluster_wait_ops(c, ops, rc, 2000000), 0);
	for (uint32_t r = 0; r < members; r++) {
		assert_int_equal(rc[r], 0);
		assert_int_equal(keel_check_wrong(out[r], ref, 0, count, dt), 0);
		free(in[r]);
		free(out[r]);
	}
	free(ref);
}

/* Every dtype and op at the boundary sizes, 2 hosts of 2; then rank 0's shared memory fails
 * for rank 1 mid-run (one way), and later host 1's breaks as a whole (both ranks see it):
 * results stay exact, nobody is suspected, and the traffic moved to UDP. */
static void test_router_allreduce_exact_across_failovers(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 1, 1};
	struct routed x;
	assert_int_equal(routed_init(&x, 4, hosts, true, true), 0);
	for (int dt = 0; dt < KEEL_DTYPE_COUNT; dt++) {
		size_t sizes[KEEL_CHECK_SIZES];
		keel_check_sizes(sizes, 4, (MTU - 56) / keel_dtype_size(dt), 5000);
		for (int op = 0; op < KEEL_REDOP_COUNT; op++)
			for (size_t s = 0; s < KEEL_CHECK_SIZES; s++) {
				if (dt == KEEL_F32 && op == KEEL_SUM && s == 3)
					x.brk[0].cut[1] = true;
				if (dt == KEEL_F64 && op == KEEL_MAX && s == 5)
					x.brk[2].fatal = x.brk[3].fatal = true; /* host 1's */
				run_allreduce(&x, sizes[s], dt, op, 4);
			}
	}
	struct keel_router_stats st0, st2, st3;
	keel_router_stats_get(x.c.tp[0], &st0);
	keel_router_stats_get(x.c.tp[2], &st2);
	keel_router_stats_get(x.c.tp[3], &st3);
	assert_int_equal(st0.fallbacks, 1);
	assert_int_equal(st2.fallbacks, 1); /* rank 3, its only shared-memory peer */
	assert_int_equal(st3.fallbacks, 1);
	assert_true(st0.tx_datagrams[0] > 0 && st0.tx_datagrams[1] > 0);
	assert_int_equal(keel_router_peer_route(x.c.tp[0], 1), 1);
	assert_int_equal(keel_router_peer_route(x.c.tp[1], 0), 0);
	assert_int_equal(keel_router_peer_route(x.c.tp[3], 2), 1);
	assert_int_equal(keel_router_peer_route(x.c.tp[2], 3), 1);
	for (uint32_t r = 0; r < 4; r++) {
		struct keel_counters k;
		keel_counters_get(x.c.node[r], &k);
		assert_int_equal(k.suspicions, 0);
		assert_int_equal(k.drop_crc, 0);
	}
	routed_fini(&x);
}

/* Datagrams over shared memory go without a CRC, and only those: a datagram without one that
 * reached UDP would be dropped (drop_crc). A layer that loses the transport's KEEL_DGRAM_INTACT
 * mark costs a retransmission of what it received (sent again with a CRC), never the job. */
static void test_router_crc_left_out_on_shared_memory_only(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 1, 1};
	struct routed x;
	struct keel_counters k;
	assert_int_equal(routed_init(&x, 4, hosts, true, true), 0);
	run_allreduce(&x, 20000, KEEL_F32, KEEL_SUM, 4);
	run_allreduce(&x, 3, KEEL_I64, KEEL_MAX, 4);
	for (uint32_t r = 0; r < 4; r++) {
		keel_counters_get(x.c.node[r], &k);
		assert_true(x.brk[r].rx_no_crc > 0);
		assert_int_equal(k.drop_crc, 0);
		assert_int_equal(k.retransmits, 0);
	}
	x.brk[1].strip_intact = true;
	uint64_t no_crc_before = x.brk[1].rx_no_crc;
	run_allreduce(&x, 20000, KEEL_F32, KEEL_SUM, 4);
	keel_counters_get(x.c.node[1], &k);
	assert_true(k.drop_crc > 0); /* what rank 0 sent it without a CRC */
	assert_true(x.brk[1].rx_no_crc > no_crc_before);
	keel_counters_get(x.c.node[0], &k);
	assert_true(k.retransmits > 0);
	routed_fini(&x);
}

/* Routers of shared memory alone: rank 2 loses its only route to the others (and they theirs
 * to it). Its datagrams are dropped as unroutable, the failure detector takes over, and the
 * others go on without it. */
static void test_router_peer_without_route_is_left_out(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 0};
	static const uint32_t survivors[] = {0, 1};
	struct routed x;
	assert_int_equal(routed_init(&x, 3, hosts, true, false), 0);
	run_allreduce(&x, 100, KEEL_F32, KEEL_SUM, 3);
	x.brk[2].cut[0] = x.brk[2].cut[1] = true;
	x.brk[0].cut[2] = x.brk[1].cut[2] = true;
	struct keel_view v;
	uint32_t members[3];
	uint64_t end = x.c.now_ns + 2000000000ull;
	do
		cluster_round(&x.c);
	while ((keel_view_get(x.c.node[0], &v, members, 3) != 0 || v.member_count != 2) &&
	       x.c.now_ns < end);
	assert_int_equal(v.member_count, 2);
	struct keel_router_stats st;
	keel_router_stats_get(x.c.tp[0], &st);
	assert_true(st.tx_unroutable > 0);
	assert_int_equal(st.fallbacks, 1);
	x.c.paused[2] = true;
	run_allreduce(&x, 5000, KEEL_I32, KEEL_SUM, 2);
	(void)survivors;
	routed_fini(&x);
}

/* Loss, duplicates and reordering on top of the routes: the core repairs them, exact results. */
static void test_router_allreduce_under_chaos(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 1, 1};
	uint64_t seed = cluster_seed(7);
	struct routed x;
	assert_int_equal(routed_init_chaos(&x, 4, hosts, "loss=0.02,dup=0.01,reorder=0.02", seed),
			 0);
	for (int dt = 0; dt < KEEL_DTYPE_COUNT; dt += 3)
		for (size_t count = 1; count <= 20000; count *= 7)
			run_allreduce(&x, count, dt, KEEL_SUM, 4);
	struct keel_counters k;
	keel_counters_get(x.c.node[0], &k);
	assert_true(k.retransmits > 0);	 /* the chaos did drop something */
	for (uint32_t r = 0; r < 4; r++) /* through chaos, every datagram carries its CRC */
		assert_int_equal(x.brk[r].rx_no_crc, 0);
	routed_fini(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_router_routes_each_peer_by_host),
	    cmocka_unit_test(test_router_two_pieces_only_where_the_route_takes_them),
	    cmocka_unit_test(test_router_intact_datagram_refused_on_a_wire),
	    cmocka_unit_test(test_router_device_tail_only_where_the_nic_reads_it),
	    cmocka_unit_test(test_router_ready_and_arm),
	    cmocka_unit_test(test_router_falls_back_when_a_route_fails_for_one_peer),
	    cmocka_unit_test(test_router_uses_a_route_once_it_is_up),
	    cmocka_unit_test(test_router_falls_back_when_a_route_breaks),
	    cmocka_unit_test(test_router_drops_for_a_peer_no_route_reaches),
	    cmocka_unit_test(test_router_config_errors),
	    cmocka_unit_test(test_router_allreduce_exact_across_failovers),
	    cmocka_unit_test(test_router_crc_left_out_on_shared_memory_only),
	    cmocka_unit_test(test_router_peer_without_route_is_left_out),
	    cmocka_unit_test(test_router_allreduce_under_chaos),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
