/* Exhaustive state exploration of the view-change protocol, on the real code: 3 or 4 nodes of
 * runtime/ (membership.c, the detector's suspicion, the node's receive path) in one process,
 * whose transport only records what they send. The network is the set of every datagram ever
 * sent: any of them may be delivered to its destination at any later moment, any number of
 * times, or never — loss, duplication, reordering and delay in one rule, as in the usual
 * Paxos models. From every reachable state the explorer tries every delivery, every suspicion
 * a detector could raise (of a dead process at any time; of a live one, a bounded number of
 * false ones), a clock tick at any node, the crash of any node at any point and, where the
 * scenario allows, its restart as a new incarnation. A state (every node's memory that the
 * protocol reads, the set of sent datagrams, the views installed so far, the budgets left) is
 * expanded once, at the smallest depth it was reached. After every step: no two nodes ever
 * installed different views (members and incarnations) for one epoch. Each scenario prints
 * its bounds and how many states it covered; a violation prints the schedule that led to it.
 * After each delivery or tick the node runs its membership step at once, as keel_poll does
 * after every receive burst (one datagram per burst here).
 *
 * A forger (bound `forgeries`) may also hand any node a COMMIT it made up: the next epoch,
 * decided at a high ballot of the lowest other rank, accepted by every other rank, and a
 * member set that is the receiver alone or it and that rank — as consistent with what the
 * receiver knows as a forger can make it. It sends it with a CRC, or sealed under another
 * key. In a `keyed` scenario the nodes run with keel_config.auth: the checker then proves no
 * forgery is installed and replays (every datagram may be delivered again) change nothing.
 * Keyed states are told apart without the MAC counters and replay windows (which only grow
 * and would make every state new), so that scenario explores less than the keyless ones; its
 * keyless twin (tests/model/check.sh) must find a violation, or the forger would be too weak
 * to prove anything. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth_int.h"
#include "keel/keel.h"
#include "keel/limits.h"
#include "node_int.h"
#include "wire_int.h"

#define MC_NODES_MAX 4
#define MC_MSGS_MAX  4096
#define MC_MSG_CAP   KEEL_MTU_MIN
#define MC_DEPTH_MAX 64
#define MC_EPOCHS    16
#define MC_T0	     1000000000ull
#define MC_HB	     1000000ull

struct mc_bounds {
	const char *name;
	uint32_t nodes;
	uint32_t crashes;	   /* processes that may die (any node, any moment) */
	uint32_t restarts;	   /* dead processes that may come back as a new incarnation */
	uint32_t false_suspicions; /* suspicions of a live process */
	uint32_t ticks;		   /* clock advances, all nodes together */
	uint32_t rounds;	   /* view-change rounds one coordinator may start */
	uint32_t depth;		   /* steps in one schedule */
	bool heavy;		   /* too long for the sanitizer build */
	/* Left to the slow tier (tests/run.sh --tier long, `make test-long`): in the plain
	 * build (long_plain) or in the sanitizer build (long_san). Every scenario runs in one
	 * tier of each build it runs in; `make test` keeps the others to its time budget. */
	bool long_plain, long_san;
	uint32_t forgeries; /* COMMITs a forger without the key may hand any node */
	bool keyed;	    /* nodes run with keel_config.auth */
};

enum mc_kind { MC_DELIVER, MC_SUSPECT, MC_TICK, MC_CRASH, MC_RESTART, MC_FORGE };
#define MC_FORGE_VARIANTS 4 /* member set {dst} or {dst, sender}; with a CRC, or wrong key */

struct mc_action {
	enum mc_kind kind;
	uint32_t a, b;
};

struct mc_msg {
	uint32_t src, dst, len, type;
	uint64_t hash;
	uint8_t bytes[MC_MSG_CAP];
};

/* What the explorer tracks beside the nodes' memory; part of the state. */
struct mc_meta {
	uint32_t crashes, restarts, false_suspicions, ticks, forgeries;
	bool crashed[MC_NODES_MAX];
	uint32_t inc[MC_NODES_MAX]; /* incarnation of the process now running each rank */
	uint64_t views[MC_EPOCHS];  /* signature of the view installed for each epoch, 0: none */
	uint32_t viewer[MC_EPOCHS]; /* the first node that installed it */
};

static struct {
	struct mc_bounds b;
	struct keel_transport tp[MC_NODES_MAX];
	struct keel_config cfg[MC_NODES_MAX];
	struct keel_node *node[MC_NODES_MAX];
	uint8_t *mem[MC_NODES_MAX];
	size_t mem_size;
	uint64_t node_hash[MC_NODES_MAX];
	struct mc_msg *net;
	uint32_t net_count, net_max;
	bool startup;	  /* the first heartbeats, exchanged before exploring */
	uint64_t net_sum; /* order-free hash of the set */
	struct mc_meta meta;
	uint8_t *save;	  /* one node's memory per depth, for backtracking */
	uint64_t *seen;	  /* open addressing: state hash, 0 = empty */
	uint8_t *seen_at; /* smallest depth the state was expanded at */
	uint64_t seen_mask;
	uint64_t *noop; /* deliveries known to change nothing: hash of (datagram, receiver state) */
	uint64_t noop_mask, noop_hits;
	uint64_t sends; /* datagrams handed to the network, new or not */
	struct mc_action path[MC_DEPTH_MAX];
	uint32_t depth;
	uint64_t states, transitions, cut_depth, cut_rounds, installs;
	uint64_t installs_rejoined, installs_without_0;	 /* what the schedules reached */
	uint64_t installs_excluded, installs_readmitted; /* a live process left out, let back in */
	bool violated;
	char why[256];
	struct auth_ctx forger_keys[MC_NODES_MAX]; /* another job's key, per claimed sender */
} mc;

static const uint8_t mc_key[KEEL_AUTH_KEY_BYTES] = "the model's job key, 32 bytes..";
static const uint8_t mc_wrong_key[KEEL_AUTH_KEY_BYTES] = "a key the forger made up, 32 b.";

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

static uint64_t lane(uint64_t acc, uint64_t w)
{
	acc += w * 0xc2b2ae3d27d4eb4full;
	acc = (acc << 31) | (acc >> 33);
	return acc * 0x9e3779b185ebca87ull;
}

/* Four independent lanes: hashing the nodes' memory is most of the explorer's work. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t len)
{
	const uint8_t *b = p;
	uint64_t a[4] = {h, h ^ 0x27d4eb2f165667c5ull, h + 0x165667b19e3779f9ull, ~h};
	size_t i = 0;
	for (; i + 32 <= len; i += 32) {
		uint64_t w[4];
		memcpy(w, b + i, 32);
		for (int k = 0; k < 4; k++)
			a[k] = lane(a[k], w[k]);
	}
	for (; i + 8 <= len; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		a[0] = lane(a[0], w);
	}
	for (; i < len; i++)
		a[1] = lane(a[1], b[i]);
	return mix(mix(mix(mix(len, a[0]), a[1]), a[2]), a[3]);
}

/* ---- the recording transport ---- */

static int mc_send(struct keel_transport *t, uint64_t now_ns, const struct keel_datagram *d,
		   uint32_t count)
{
	(void)now_ns;
	for (uint32_t i = 0; i < count; i++) {
		assert_true(d[i].len <= MC_MSG_CAP);
		struct wire_expect exp = {.job_id = 42,
					  .epoch = 0,
					  .self = d[i].peer,
					  .world_size = t->world_size,
					  .transport_src = t->rank,
					  .auth = mc.b.keyed ? &mc.node[t->rank]->auth_ctx : NULL};
		struct wire_header h;
		enum wire_verdict v = wire_decode(d[i].buf, d[i].len, &exp, &h);
		assert_int_equal(v, WIRE_OK);
		/* Heartbeats matter to the protocol as a request to join — a restarted process's,
		 * or an excluded live one's — and the catch-up it triggers; the rest of them only
		 * refresh liveness, which the explorer decides itself (suspicions). Acks carry
		 * nothing it reads. */
		struct wire_heartbeat hb = {0};
		if (h.type == WIRE_HEARTBEAT)
			wire_heartbeat_decode(d[i].buf + WIRE_HEADER_SIZE, &hb);
		bool join_request = h.type == WIRE_HEARTBEAT &&
				    (mc.meta.inc[t->rank] > 1 || (hb.flags & WIRE_HB_JOINING) != 0);
		if (h.type != WIRE_VIEW && !join_request && !mc.startup)
			continue;
		/* Keyed: the same message sent again differs only in its MAC trailer (a new
		 * counter); the set keeps the first copy, which any delivery replays. */
		uint32_t same = d[i].len - (mc.b.keyed ? KEEL_AUTH_TRAILER_BYTES : 0);
		uint64_t hh = hash_bytes(mix(t->rank, d[i].peer), d[i].buf, same);
		bool known = false;
		for (uint32_t m = 0; m < mc.net_count && !known; m++)
			known = mc.net[m].hash == hh && mc.net[m].len == d[i].len &&
				mc.net[m].src == t->rank && mc.net[m].dst == d[i].peer &&
				memcmp(mc.net[m].bytes, d[i].buf, same) == 0;
		mc.sends++;
		if (known)
			continue; /* the set holds it already: resending adds nothing */
		assert_true(mc.net_count < MC_MSGS_MAX);
		struct mc_msg *m = &mc.net[mc.net_count++];
		m->src = t->rank;
		m->dst = d[i].peer;
		m->len = d[i].len;
		m->type = h.type;
		m->hash = hh;
		memcpy(m->bytes, d[i].buf, d[i].len);
		mc.net_sum += hh;
		if (mc.net_count > mc.net_max)
			mc.net_max = mc.net_count;
	}
	return (int)count;
}

static int mc_recv(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
		   uint32_t count_max)
{
	(void)t, (void)now_ns, (void)d, (void)count_max;
	return 0; /* the explorer delivers, through node_handle_datagram */
}

static const struct keel_transport_ops mc_ops = {
    .name = "model",
    .send_burst = mc_send,
    .recv_burst = mc_recv,
};

/* ---- the invariant ---- */

static uint64_t view_signature(const struct view *v, uint32_t world)
{
	uint64_t h = mix(0x51, v->epoch);
	for (uint32_t r = 0; r < world; r++)
		if (view_has(v, r))
			h = mix(mix(h, r), v->inc[r]);
	return h | 1;
}

static void on_view(void *ctx, const struct keel_view *kv, const uint32_t *members, uint64_t now)
{
	(void)members, (void)now;
	uint32_t i = (uint32_t)(uintptr_t)ctx;
	const struct keel_node *n = mc.node[i];
	mc.installs++;
	if (kv->epoch >= MC_EPOCHS) {
		snprintf(mc.why, sizeof(mc.why), "epoch %u beyond the model's %u", kv->epoch,
			 MC_EPOCHS);
		mc.violated = true;
		return;
	}
	mc.installs_rejoined += kv->self_joined && mc.meta.inc[i] > 1;
	mc.installs_readmitted += kv->self_joined && mc.meta.inc[i] == 1;
	mc.installs_excluded += !kv->self_member && n->ctr.self_exclusions > 0;
	mc.installs_without_0 += !view_has(&n->view, 0);
	uint64_t sig = view_signature(&n->view, n->world);
	if (mc.meta.views[kv->epoch] == 0) {
		mc.meta.views[kv->epoch] = sig;
		mc.meta.viewer[kv->epoch] = i;
	} else if (mc.meta.views[kv->epoch] != sig) {
		snprintf(mc.why, sizeof(mc.why),
			 "node %u installed a view for epoch %u that differs from node %u's", i,
			 kv->epoch, mc.meta.viewer[kv->epoch]);
		mc.violated = true;
	}
}

/* ---- nodes ---- */

/* Node i's config: small windows and buffers (the explorer copies node memory each step). */
static void node_config(struct keel_config *c, uint32_t i, bool rejoin)
{
	keel_config_default(c);
	c->rank = i;
	c->world_size = mc.b.nodes;
	c->job_id = 42;
	c->transport = &mc.tp[i];
	c->mtu = KEEL_MTU_MIN;
	c->window = 2;
	c->burst = 4;
	c->ops_max = 1;
	c->heartbeat_ns = MC_HB;
	c->view_timeout_ns = 2 * MC_HB;
	c->join_timeout_ns = 1;
	c->restart_copy_bytes = 0;
	c->incarnation = mc.meta.inc[i];
	c->rejoin = rejoin;
	c->on_view = on_view;
	c->on_view_ctx = (void *)(uintptr_t)i;
	c->auth = mc.b.keyed;
	c->mac = KEEL_MAC_CHACHA20POLY1305; /* any CPU */
	memcpy(c->auth_key, mc_key, sizeof(mc_key));
}

static void node_start(uint32_t i, bool rejoin, uint64_t now)
{
	struct keel_config *c = &mc.cfg[i];
	node_config(c, i, rejoin);
	size_t sz = keel_storage_size(c);
	assert_true(sz != 0 && sz <= mc.mem_size);
	memset(mc.mem[i], 0, mc.mem_size);
	assert_int_equal(keel_init(&mc.node[i], mc.mem[i], sz, c, now), 0);
}

/* Forget what does not steer the protocol (counters, scratch buffers), then hash the rest. */
static uint64_t node_hash(uint32_t i)
{
	struct keel_node *n = mc.node[i];
	uint32_t w = n->world;
	memset(&n->ctr, 0, sizeof(n->ctr));
	memset(n->msg_buf, 0, n->ctrl_size);
	struct view *s = &n->scratch_view;
	s->epoch = s->count = s->flags = s->frontier = s->ops_resume = s->donor = 0;
	s->ballot = 0;
	memset(s->bits, 0, w / 8 + 1);
	memset(s->acceptors, 0, w / 8 + 1);
	memset(s->inc, 0, w * sizeof(uint32_t));
	for (uint32_t r = 0; r < w; r++) {
		struct fd_peer *p = &n->fd_peers[r];
		p->suspicions = p->rtt_samples = p->rtt_ns_last = p->hb_srtt_ns = 0;
		n->rel_peers[r].data_sent = 0;
	}
	/* metrics: histograms and the time of the first suspicion they measure from */
	memset(n->hist, 0, sizeof(n->hist));
	n->first_suspect_ns = 0;
	/* the MAC counter only grows: left out, like the replay windows (not hashed) */
	struct auth_ctx keys = n->auth_ctx;
	memset(&n->auth_ctx, 0, sizeof(n->auth_ctx));
	uint64_t h = hash_bytes(mix(0xabc, i), n, sizeof(*n));
	n->auth_ctx = keys;
	h = hash_bytes(h, n->rel_peers, w * sizeof(struct rel_peer));
	h = hash_bytes(h, n->fd_peers, w * sizeof(struct fd_peer));
	h = hash_bytes(h, n->mb_peers, w * sizeof(struct mb_peer));
	const struct view *views[] = {&n->view, &n->acc_value, &n->prop_best, &n->prop_value};
	for (size_t v = 0; v < sizeof(views) / sizeof(views[0]); v++) {
		h = hash_bytes(h, views[v]->bits, w / 8 + 1);
		h = hash_bytes(h, views[v]->acceptors, w / 8 + 1);
		h = hash_bytes(h, views[v]->inc, w * sizeof(uint32_t));
	}
	return h;
}

static uint64_t state_hash(void)
{
	uint64_t h = mix(0x5eed, mc.net_sum);
	for (uint32_t i = 0; i < mc.b.nodes; i++)
		h = mix(h, mc.node_hash[i]);
	return hash_bytes(h, &mc.meta, sizeof(mc.meta)) | 1;
}

/* True when the state is new, or is now reached in fewer steps (its subtree then has more
 * room under the depth bound). */
static bool first_visit(uint64_t h, uint32_t depth)
{
	for (uint64_t k = h & mc.seen_mask;; k = (k + 1) & mc.seen_mask) {
		if (mc.seen[k] == 0) {
			mc.seen[k] = h;
			mc.seen_at[k] = (uint8_t)depth;
			mc.states++;
			if (mc.states >= mc.seen_mask / 2) {
				printf("model: more than %" PRIu64
				       " states (MC_STATES=n for more)\n",
				       mc.states);
				exit(2);
			}
			return true;
		}
		if (mc.seen[k] == h) {
			if (depth >= mc.seen_at[k])
				return false;
			mc.seen_at[k] = (uint8_t)depth;
			return true;
		}
	}
}

/* A heartbeat now, whatever the node's beat phase (the explorer decides when beats go out). */
static void beat_now(struct keel_node *n)
{
	n->next_beat_ns = n->now_ns;
	fd_beat(n);
}

/* The membership step a poll runs after its receive burst or at a timer. */
static void node_step(uint32_t i)
{
	mb_poll(mc.node[i]);
	node_txq_flush(mc.node[i]);
}

/* The process that node i's view knows as rank j is gone (crashed, or replaced by a restart). */
static bool known_life_dead(uint32_t i, uint32_t j)
{
	const struct keel_node *n = mc.node[i];
	uint32_t known = n->view.inc[j] != 0 ? n->view.inc[j] : 1;
	return mc.meta.crashed[j] || mc.meta.inc[j] != known;
}

static bool enabled(const struct mc_action *a)
{
	switch (a->kind) {
	case MC_DELIVER:
		return !mc.meta.crashed[mc.net[a->a].dst];
	case MC_SUSPECT: {
		const struct keel_node *n = mc.node[a->a];
		if (mc.meta.crashed[a->a] || !n->member || !view_has(&n->view, a->b) ||
		    !fd_is_alive(n, a->b))
			return false;
		return known_life_dead(a->a, a->b) ||
		       mc.meta.false_suspicions < mc.b.false_suspicions;
	}
	case MC_TICK:
		return !mc.meta.crashed[a->a] && mc.meta.ticks < mc.b.ticks;
	case MC_CRASH:
		return !mc.meta.crashed[a->a] && mc.meta.crashes < mc.b.crashes;
	case MC_RESTART:
		return mc.meta.crashed[a->a] && mc.meta.restarts < mc.b.restarts;
	case MC_FORGE:
		if ((a->b & 2) != 0 && auth_pick(KEEL_MAC_CHACHA20POLY1305) == 0)
			return false; /* built without libsodium: nothing to seal with */
		return !mc.meta.crashed[a->a] && mc.meta.forgeries < mc.b.forgeries;
	}
	return false;
}

/* The forger's COMMIT to `dst` (see the top of the file), from the lowest other rank. */
static uint32_t forge_commit(uint8_t *buf, uint32_t dst, uint32_t variant)
{
	const struct keel_node *n = mc.node[dst];
	uint32_t from = dst == 0 ? 1 : 0, nodes = mc.b.nodes, count = 0;
	uint8_t *p = buf + WIRE_HEADER_SIZE;
	memset(p, 0, MC_MSG_CAP - WIRE_HEADER_SIZE);
	p[0] = 5; /* VM_COMMIT */
	wire_put32(p + 4, n->view.epoch + 1);
	wire_put64(p + 8, (60ull << 16) | from); /* above any round the explorer allows */
	for (uint32_t r = 0; r < nodes; r++)
		if (r != dst)
			p[16 + r / 8] |=
			    (uint8_t)(1u << (r % 8)); /* a majority, never the receiver */
	uint8_t *v = p + 16 + (nodes + 7) / 8;
	wire_put32(v, n->view.epoch + 1);
	wire_put32(v + 12, dst); /* donor */
	for (uint32_t r = 0; r < nodes; r++) {
		if (r != dst && !(r == from && (variant & 1)))
			continue;
		wire_put16(v + 24 + 6 * count, (uint16_t)r);
		wire_put32(v + 24 + 6 * count + 2, mc.meta.inc[r]);
		count++;
	}
	wire_put32(v + 20, count);
	uint32_t len = (uint32_t)(v + 24 + 6 * count - p);
	bool sealed = (variant & 2) != 0;
	struct wire_header h = {.magic = WIRE_MAGIC,
				.version = WIRE_VERSION,
				.type = WIRE_VIEW,
				.flags = sealed ? WIRE_FLAG_AUTH : 0,
				.job_id = 42,
				.epoch = n->epoch,
				.src = (uint16_t)from,
				.dst = (uint16_t)dst,
				.payload_len = len};
	wire_encode(buf, &h);
	if (!sealed)
		return WIRE_HEADER_SIZE + len;
	auth_seal(&mc.forger_keys[from], buf, WIRE_HEADER_SIZE + len);
	return WIRE_HEADER_SIZE + len + KEEL_AUTH_TRAILER_BYTES;
}

/* Apply an enabled action; returns the node whose memory it changed (-1: none). */
static int apply(const struct mc_action *a)
{
	switch (a->kind) {
	case MC_DELIVER: {
		const struct mc_msg *m = &mc.net[a->a];
		uint8_t buf[MC_MSG_CAP];
		memcpy(buf, m->bytes, m->len);
		struct keel_datagram d = {.buf = buf, .len = m->len, .cap = m->len, .peer = m->src};
		node_handle_datagram(mc.node[m->dst], &d);
		node_step(m->dst);
		return (int)m->dst;
	}
	case MC_SUSPECT:
		if (!known_life_dead(a->a, a->b))
			mc.meta.false_suspicions++;
		fd_suspect(mc.node[a->a], a->b);
		node_step(a->a);
		return (int)a->a;
	case MC_TICK: {
		struct keel_node *n = mc.node[a->a];
		uint64_t dl = mb_next_deadline(n);
		if (mc.meta.inc[a->a] > 1 && n->next_beat_ns < dl)
			dl = n->next_beat_ns;
		n->now_ns = dl != UINT64_MAX && dl > n->now_ns ? dl : n->now_ns + MC_HB;
		mc.meta.ticks++;
		beat_now(n);
		node_step(a->a);
		return (int)a->a;
	}
	case MC_CRASH:
		mc.meta.crashes++;
		mc.meta.crashed[a->a] = true;
		return -1;
	case MC_RESTART: {
		uint64_t now = mc.node[a->a]->now_ns;
		mc.meta.restarts++;
		mc.meta.crashed[a->a] = false;
		mc.meta.inc[a->a]++;
		node_start(a->a, true, now);
		beat_now(mc.node[a->a]);
		node_step(a->a);
		return (int)a->a;
	}
	case MC_FORGE: {
		uint8_t buf[MC_MSG_CAP];
		uint32_t len = forge_commit(buf, a->a, a->b);
		uint32_t from = a->a == 0 ? 1 : 0;
		struct keel_datagram d = {.buf = buf, .len = len, .cap = len, .peer = from};
		mc.meta.forgeries++;
		node_handle_datagram(mc.node[a->a], &d);
		node_step(a->a);
		return (int)a->a;
	}
	}
	return -1;
}

static const char *kind_name(uint32_t kind)
{
	static const char *names[] = {"?",	"prepare", "promise", "accept", "accepted",
				      "commit", "nack",	   "suspect", "soft"};
	return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

static void print_action(const struct mc_action *a)
{
	switch (a->kind) {
	case MC_DELIVER: {
		const struct mc_msg *m = &mc.net[a->a];
		if (m->type == WIRE_VIEW)
			printf("  deliver %u -> %u %s\n", m->src, m->dst,
			       kind_name(m->bytes[WIRE_HEADER_SIZE]));
		else
			printf("  deliver %u -> %u heartbeat\n", m->src, m->dst);
		break;
	}
	case MC_SUSPECT:
		printf("  node %u suspects %u\n", a->a, a->b);
		break;
	case MC_TICK:
		printf("  tick at node %u\n", a->a);
		break;
	case MC_CRASH:
		printf("  node %u crashes\n", a->a);
		break;
	case MC_RESTART:
		printf("  node %u restarts\n", a->a);
		break;
	case MC_FORGE:
		printf("  a forger hands node %u a COMMIT of %s, %s\n", a->a,
		       (a->b & 1) ? "it and one more" : "it alone",
		       (a->b & 2) ? "sealed under another key" : "with a CRC");
		break;
	}
}

static bool rounds_exceeded(void)
{
	for (uint32_t i = 0; i < mc.b.nodes; i++)
		if (mc.node[i]->prop_round > mc.b.rounds)
			return true;
	return false;
}

static void explore(uint32_t depth);

static uint64_t *noop_slot(uint64_t key)
{
	return &mc.noop[key & mc.noop_mask];
}

static void try_action(const struct mc_action *a, uint32_t depth)
{
	if (!enabled(a))
		return;
	uint64_t noop_key = 0;
	/* Keyed, a delivery's effect depends on the replay window, which the hash leaves out. */
	if (a->kind == MC_DELIVER && !mc.b.keyed) {
		noop_key = mix(mc.net[a->a].hash, mc.node_hash[mc.net[a->a].dst]) | 1;
		if (*noop_slot(noop_key) == noop_key) {
			mc.noop_hits++;
			return;
		}
	}
	/* what the action may change, kept to undo it */
	uint32_t net_count = mc.net_count;
	uint64_t net_sum = mc.net_sum;
	struct mc_meta meta = mc.meta;
	uint64_t hashes[MC_NODES_MAX];
	memcpy(hashes, mc.node_hash, sizeof(hashes));
	uint32_t who = a->kind == MC_DELIVER ? mc.net[a->a].dst : a->a;
	uint8_t *save = mc.save + (size_t)depth * mc.mem_size;
	memcpy(save, mc.mem[who], mc.mem_size);

	mc.path[depth] = *a;
	if (++mc.transitions % 4000000 == 0 && getenv("MC_PROGRESS") != NULL)
		fprintf(stderr,
			"model: %" PRIu64 " states, %" PRIu64 " steps, depth %u, %u datagrams\n",
			mc.states, mc.transitions, depth, mc.net_count);
	uint64_t sends = mc.sends;
	int changed = apply(a);
	if (changed >= 0)
		mc.node_hash[changed] = node_hash((uint32_t)changed);
	if (noop_key != 0 && mc.node_hash[who] == hashes[who] && mc.sends == sends &&
	    memcmp(&meta, &mc.meta, sizeof(meta)) == 0) {
		/* the receiver ignored it and sent nothing: in that state of its own it always
		 * will, whatever the rest of the world is */
		*noop_slot(noop_key) = noop_key;
		memcpy(mc.mem[who], save, mc.mem_size);
		return;
	}
	if (mc.violated) {
		mc.depth = depth + 1;
		return; /* leave the state as it is: the test prints the schedule */
	}
	uint64_t h = state_hash();
	if (first_visit(h, depth + 1)) {
		if (depth + 1 >= mc.b.depth)
			mc.cut_depth++;
		else if (rounds_exceeded())
			mc.cut_rounds++;
		else
			explore(depth + 1);
	}
	if (mc.violated)
		return;
	memcpy(mc.mem[who], save, mc.mem_size);
	mc.net_count = net_count;
	mc.net_sum = net_sum;
	mc.meta = meta;
	memcpy(mc.node_hash, hashes, sizeof(hashes));
}

static void explore(uint32_t depth)
{
	uint32_t nodes = mc.b.nodes, net_count = mc.net_count;
	for (uint32_t m = 0; m < net_count && !mc.violated; m++)
		try_action(&(struct mc_action){MC_DELIVER, m, 0}, depth);
	for (uint32_t i = 0; i < nodes && !mc.violated; i++)
		for (uint32_t j = 0; j < nodes && !mc.violated; j++)
			if (i != j)
				try_action(&(struct mc_action){MC_SUSPECT, i, j}, depth);
	for (uint32_t i = 0; i < nodes && !mc.violated; i++)
		try_action(&(struct mc_action){MC_TICK, i, 0}, depth);
	for (uint32_t i = 0; i < nodes && !mc.violated; i++)
		try_action(&(struct mc_action){MC_CRASH, i, 0}, depth);
	for (uint32_t i = 0; i < nodes && !mc.violated; i++)
		try_action(&(struct mc_action){MC_RESTART, i, 0}, depth);
	for (uint32_t i = 0; i < nodes && !mc.violated; i++)
		for (uint32_t v = 0; v < MC_FORGE_VARIANTS && !mc.violated; v++)
			try_action(&(struct mc_action){MC_FORGE, i, v}, depth);
}

static void run_scenario(const struct mc_bounds *b)
{
	memset(&mc, 0, sizeof(mc));
	mc.b = *b;
	assert_true(b->nodes <= MC_NODES_MAX && b->depth <= MC_DEPTH_MAX);
	for (uint32_t i = 0; i < b->nodes; i++) {
		mc.tp[i] = (struct keel_transport){
		    .ops = &mc_ops, .mtu = KEEL_MTU_MIN, .rank = i, .world_size = b->nodes};
		mc.meta.inc[i] = 1;
		struct keel_config fc;
		node_config(&fc, i, false);
		memcpy(fc.auth_key, mc_wrong_key, sizeof(mc_wrong_key));
		fc.auth = true;
		if (auth_pick(fc.mac) != 0) {
			assert_int_equal(auth_init(&mc.forger_keys[i], &fc), 0);
			/* counters far above the real ones: no replay window refuses them, the
			 * MAC alone has to */
			uint8_t scratch[WIRE_HEADER_SIZE + KEEL_AUTH_TRAILER_BYTES] = {0};
			for (int c = 0; c < 2000; c++)
				auth_seal(&mc.forger_keys[i], scratch, WIRE_HEADER_SIZE);
		}
	}
	/* every node's storage has the same size, whatever its rank or incarnation */
	struct keel_config probe;
	node_config(&probe, 0, false);
	mc.mem_size = (keel_storage_size(&probe) + 63) & ~(size_t)63;
	assert_true(mc.mem_size > 64);
	for (uint32_t i = 0; i < b->nodes; i++)
		mc.mem[i] = aligned_alloc(64, mc.mem_size);
	mc.net = calloc(MC_MSGS_MAX, sizeof(*mc.net));
	mc.save = malloc((size_t)MC_DEPTH_MAX * mc.mem_size);
	const char *want = getenv("MC_STATES");
	size_t slots = (size_t)1 << 23;
	while (want != NULL && slots < 2 * strtoull(want, NULL, 0) && slots < ((size_t)1 << 30))
		slots <<= 1;
	mc.seen = calloc(slots, sizeof(uint64_t));
	mc.seen_at = calloc(slots, 1);
	mc.seen_mask = slots - 1;
	mc.noop = calloc((size_t)1 << 20, sizeof(uint64_t));
	mc.noop_mask = ((uint64_t)1 << 20) - 1;
	assert_non_null(mc.noop);
	assert_non_null(mc.net);
	assert_non_null(mc.save);
	assert_non_null(mc.seen);
	assert_non_null(mc.seen_at);

	for (uint32_t i = 0; i < b->nodes; i++)
		node_start(i, false, MC_T0);
	/* Start where a real job is a moment after start-up: every node has heard everyone's
	 * first heartbeat, so each knows the others' incarnations. */
	mc.startup = true;
	for (uint32_t i = 0; i < b->nodes; i++) {
		beat_now(mc.node[i]);
		node_txq_flush(mc.node[i]);
	}
	mc.startup = false;
	for (uint32_t m = 0; m < mc.net_count; m++) {
		struct keel_datagram d = {.buf = mc.net[m].bytes,
					  .len = mc.net[m].len,
					  .cap = mc.net[m].len,
					  .peer = mc.net[m].src};
		node_handle_datagram(mc.node[mc.net[m].dst], &d);
	}
	mc.net_count = 0;
	mc.net_sum = 0;
	for (uint32_t i = 0; i < b->nodes; i++) {
		node_step(i);
		mc.node_hash[i] = node_hash(i);
	}
	first_visit(state_hash(), 0);
	explore(0);

	printf(
	    "model %s: %u nodes, crashes %u, restarts %u, false suspicions %u, ticks %u, "
	    "rounds %u, forgeries %u%s, depth %u: %" PRIu64 " states, %" PRIu64 " steps, %" PRIu64
	    " views installed (%" PRIu64 " by a restarted process that rejoined, %" PRIu64
	    " without rank 0, %" PRIu64 " leaving out a live member, %" PRIu64
	    " readmitting it), %u datagrams sent at most, %zu bytes a node; cut by depth %" PRIu64
	    ", by rounds %" PRIu64 "\n",
	    b->name, b->nodes, b->crashes, b->restarts, b->false_suspicions, b->ticks, b->rounds,
	    b->forgeries, b->keyed ? " (keyed)" : "", b->depth, mc.states, mc.transitions,
	    mc.installs, mc.installs_rejoined, mc.installs_without_0, mc.installs_excluded,
	    mc.installs_readmitted, mc.net_max, mc.mem_size, mc.cut_depth, mc.cut_rounds);
	if (mc.violated) {
		printf("model %s: VIOLATION: %s\nschedule:\n", b->name, mc.why);
		for (uint32_t d = 0; d < mc.depth; d++)
			print_action(&mc.path[d]);
	}
	fflush(stdout);
	bool violated = mc.violated;
	for (uint32_t i = 0; i < b->nodes; i++)
		free(mc.mem[i]);
	free(mc.net);
	free(mc.save);
	free(mc.seen);
	free(mc.seen_at);
	free(mc.noop);
	assert_false(violated);
}

/* Each scenario bounds the faults; within them every schedule is tried. The bounds were
 * chosen so that the checker finds planted Paxos bugs (tests/model/check.sh): a coordinator
 * that does not adopt an accepted value (3-crash-false), an acceptor that ignores its promise
 * (3-duel). */
static const struct mc_bounds scenarios[] = {
    /* any node dies at any moment while another is wrongly suspected */
    {.name = "3-crash-false",
     .nodes = 3,
     .crashes = 1,
     .false_suspicions = 1,
     .rounds = 1,
     .depth = 40,
     .long_san = true},
    /* two wrong suspicions: competing coordinators with interleaved ballots */
    {.name = "3-duel",
     .nodes = 3,
     .false_suspicions = 2,
     .rounds = 1,
     .depth = 40,
     .heavy = true,
     .long_plain = true},
    /* a process dies and comes back as a new incarnation, at any moments */
    {.name = "3-restart",
     .nodes = 3,
     .crashes = 1,
     .restarts = 1,
     .ticks = 1,
     .rounds = 1,
     .depth = 40},
    /* a round that stalls is started over with a higher ballot */
    {.name = "3-crash-retry", .nodes = 3, .crashes = 1, .ticks = 1, .rounds = 2, .depth = 40},
    {.name = "4-crash", .nodes = 4, .crashes = 1, .rounds = 1, .depth = 40},
    {.name = "4-false", .nodes = 4, .false_suspicions = 1, .rounds = 1, .depth = 40},
    /* a live node is suspected and excluded (it was paused), then speaks again in the same
     * incarnation: its old in-flight messages and its new heartbeats (ticks) reach anyone at
     * any moment, it learns it was left out and asks to be admitted, and a second round may
     * admit it */
    {.name = "3-pause-rejoin",
     .nodes = 3,
     .false_suspicions = 1,
     .rounds = 2,
     .depth = 40,
     .long_san = true},
    /* a forger without the job's key hands out COMMITs while a node dies and the others
     * change the view: none is installed, and replays of every real datagram change nothing */
    {.name = "3-forged-commit-keyed",
     .nodes = 3,
     .crashes = 1,
     .false_suspicions = 1,
     .forgeries = 2,
     .keyed = true,
     .rounds = 1,
     .depth = 40,
     .heavy = true},
    /* ... and while a process restarts as a new incarnation (its replay window starts over) */
    {.name = "3-forged-restart-keyed",
     .nodes = 3,
     .crashes = 1,
     .restarts = 1,
     .ticks = 1,
     .forgeries = 1,
     .keyed = true,
     .rounds = 1,
     .depth = 40,
     .heavy = true},
};

#if defined(__SANITIZE_ADDRESS__)
#define MC_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MC_SANITIZED 1
#endif
#endif

/* Whether this scenario belongs to the tier tests/run.sh runs (KEEL_TEST_TIER: fast, long or
 * all; unset, as when the binary is run by hand: all). */
static bool in_tier(const struct mc_bounds *b, bool sanitized)
{
	const char *tier = getenv("KEEL_TEST_TIER");
	if (tier == NULL || strcmp(tier, "all") == 0)
		return true;
	bool is_long = sanitized ? b->long_san : b->long_plain;
	return is_long == (strcmp(tier, "long") == 0);
}

static void test_model_scenario(void **state)
{
	const struct mc_bounds *b = *state;
#ifdef MC_SANITIZED
	const bool sanitized = true;
#else
	const bool sanitized = false;
#endif
	if (!in_tier(b, sanitized)) {
		printf("model %s: in the other tier (KEEL_TEST_TIER=%s)\n", b->name,
		       getenv("KEEL_TEST_TIER"));
		skip();
	}
	if (b->keyed && auth_pick(KEEL_MAC_CHACHA20POLY1305) == 0) {
		printf("model %s: keel was built without libsodium\n", b->name);
		skip();
	}
#ifdef MC_SANITIZED
	if (b->heavy) {
		printf("model %s: not run under the sanitizers (the plain build runs it)\n",
		       b->name);
		skip(); /* reported as skipped, not passed */
	}
#endif
	run_scenario(b);
}

/* `test_membership_model NODES CRASHES RESTARTS FALSE TICKS ROUNDS DEPTH [FORGERIES KEYED]`
 * explores one scenario with other bounds (tests/model/check.sh; MC_STATES=n sizes the state
 * table). */
int main(int argc, char **argv)
{
	if (argc == 8 || argc == 10) {
		struct mc_bounds b = {.name = "cli"};
		uint32_t keyed = 0;
		uint32_t *f[] = {&b.nodes, &b.crashes, &b.restarts, &b.false_suspicions,
				 &b.ticks, &b.rounds,  &b.depth,    &b.forgeries,
				 &keyed};
		for (int i = 0; i < argc - 1; i++) {
			char *end;
			unsigned long v = strtoul(argv[i + 1], &end, 0);
			if (*end != '\0' || v > 64) {
				fprintf(stderr,
					"test_membership_model: bad bound '%s' (argument %d)\n",
					argv[i + 1], i + 1);
				return 2;
			}
			*f[i] = (uint32_t)v;
		}
		b.keyed = keyed != 0;
		if (b.nodes < 2 || b.nodes > MC_NODES_MAX || b.depth > MC_DEPTH_MAX) {
			fprintf(stderr, "test_membership_model: 2..%d nodes, depth up to %d\n",
				MC_NODES_MAX, MC_DEPTH_MAX);
			return 2;
		}
		run_scenario(&b);
		return 0;
	}
	struct CMUnitTest tests[sizeof(scenarios) / sizeof(scenarios[0])];
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		tests[i] = (struct CMUnitTest){.name = scenarios[i].name,
					       .test_func = test_model_scenario,
					       .initial_state = (void *)&scenarios[i]};
	return _cmocka_run_group_tests("membership_model", tests, sizeof(tests) / sizeof(tests[0]),
				       NULL, NULL);
}
