/* libFuzzer entry point over membership alone, white-box: a node of a 3 to 5 rank world is put
 * in a chosen state through membership's own entry point (mb_on_view_msg, fed well-formed
 * messages), then fed VIEW payloads from its peers, with time passing and mb_poll between them.
 * Whatever arrives, after every step: the installed epoch never goes back, the promise never
 * goes down within an epoch, every view the node holds has as many members as bits, the
 * acceptor's accepted ballot stays at or below its promise and names the next epoch, what the
 * node sends decodes and its answers report its acceptor state truly, and no read goes past a
 * payload (each one is an exactly sized heap copy, so ASan sees it). A broken rule prints why
 * and aborts.
 *
 * Input: byte 0, the world (3 + b % 3); byte 1, the node's rank; byte 2, its state (enum setup).
 * Then steps of 1 control byte (bits 0-1: 0, a payload built from fields, so that most inputs
 * are messages the node takes seriously; 1, the bytes as the payload; 2, the detector suspects
 * the sender; 3, a heartbeat from it, which is how a peer asks to join. Bits 2-7: quarter
 * milliseconds passing before the poll), 1 byte naming the sender among the other ranks,
 * 1 byte length, then that many bytes.
 * Built by `make fuzz` (clang, mk/fuzz.mk); `make test` runs a short smoke of it. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/keel.h"
#include "node_int.h"
#include "wire_int.h"

#define WORLD_MIN 3u
#define WORLDS	  3u
#define JOB	  42u
#define HB_NS	  1000000ull
#define T0_NS	  1000000000000ull
#define TICK_NS	  250000ull
#define MEM_BYTES (4u << 20)
#define FIELDS	  48u

/* membership.c's message layout (its comment above OFF_KIND): private there, so restated */
enum vmsg { VM_PREPARE = 1, VM_PROMISE, VM_ACCEPT, VM_ACCEPTED, VM_COMMIT, VM_NACK, VM_SUSPECT };
#define VM_KINDS      8u
#define VALUE_HEADER  24u
#define VIEW_RESULT   1u /* a value flag: u32 length and a result follow the entries */
#define VALUE_ENTRY   6u
#define PROMISE_EXTRA 20u
#define KEPT_HEADER   8u /* a promise's kept result: u32 collective + 1, u32 length */
#define KEPT_MAX      16u
#define ENTRIES_MAX   8u
/* a COMMIT's acceptor set: ceil(world / 8) bytes, one for the worlds here */
#define ACCEPTOR_BYTES 1u
#define MSG_MAX                                                                                    \
	(WIRE_VIEW_MIN + PROMISE_EXTRA + ACCEPTOR_BYTES + VALUE_HEADER +                           \
	 ENTRIES_MAX * VALUE_ENTRY + KEPT_HEADER + KEPT_MAX)

enum setup {
	ST_MEMBER,    /* a member of the first view (epoch 1, every rank) */
	ST_LATER,     /* caught up to epoch 3, a view without the highest other rank */
	ST_PREPARING, /* coordinator of a view from itself up, PREPARE sent */
	ST_ACCEPTING, /* the same after every member promised: ACCEPT sent */
	ST_PROMISED,  /* acceptor: promised the lowest other rank's ballot */
	ST_ACCEPTED,  /* acceptor: then accepted its value */
	ST_EXCLUDED,  /* a view left it out: it asks to be admitted again */
	ST_REJOINING, /* restarted (cfg.rejoin): no view yet */
	ST_COUNT
};

/* A value as the harness writes it: entries as given, so it may be malformed on purpose. */
struct value {
	uint32_t epoch, flags, pending, donor, frontier, count, entries;
	uint16_t rank[ENTRIES_MAX];
	uint32_t inc[ENTRIES_MAX];
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static _Alignas(64) uint8_t g_mem[MEM_BYTES];
static struct keel_node *g_n; /* NULL while keel_init runs */
static uint32_t g_world, g_self;
static uint32_t g_epoch;    /* installed epoch at the last check */
static uint64_t g_promised; /* the acceptor's promise then, for the epoch after it */
static uint32_t g_told;	    /* the last epoch the application was told of */

static void fail(const char *why, uint32_t a, uint64_t b)
{
	fprintf(stderr, "fuzz_membership: %s (%u, %llu)\n", why, a, (unsigned long long)b);
	abort();
}

/* What a receiver's value_decode needs of the node's own values, except that incarnations
 * of the first view may be 0 (learnt at first contact; a catch-up can carry them so). */
static void check_sent_value(const uint8_t *p, size_t len, uint32_t target)
{
	if (len < VALUE_HEADER)
		fail("sent value shorter than its header", (uint32_t)len, 0);
	uint32_t count = wire_get32(p + 20);
	size_t entries = VALUE_HEADER + (size_t)count * VALUE_ENTRY;
	bool result = (wire_get32(p + 4) & VIEW_RESULT) != 0;
	uint32_t result_len = result && len >= entries + 4 ? wire_get32(p + entries) : 0;
	if (count == 0 || count > g_world || len != entries + (result ? 4u + result_len : 0u))
		fail("sent value's count does not match its length", count, len);
	if (result && (result_len == 0 || result_len > g_n->result_cap || wire_get32(p + 16) == 0))
		fail("sent value carries a result it cannot", result_len, wire_get32(p + 16));
	if (wire_get32(p) != target)
		fail("sent value is for another epoch than the message", wire_get32(p), target);
	for (uint32_t i = 0; i < count; i++) {
		uint32_t rank = wire_get16(p + VALUE_HEADER + (size_t)i * VALUE_ENTRY);
		uint32_t prev = i == 0 ? 0 : wire_get16(p + VALUE_HEADER + (i - 1u) * VALUE_ENTRY);
		if (rank >= g_world || (i > 0 && rank <= prev))
			fail("sent value's ranks are not ascending world ranks", rank, i);
	}
}

/* The node's answers as an acceptor say what it holds (checked at the flush right after the
 * message that caused them: nothing in between changes the acceptor). */
static void check_sent_view(const uint8_t *p, size_t len)
{
	const struct keel_node *n = g_n;
	uint32_t kind = p[0], target = wire_get32(p + 4);
	uint64_t ballot = wire_get64(p + 8);
	const uint8_t *x = p + WIRE_VIEW_MIN;
	size_t xlen = len - WIRE_VIEW_MIN;
	if (kind < VM_PREPARE || kind > VM_KINDS || p[1] != 0 || p[2] != 0 || p[3] != 0)
		fail("sent a view message of no kind", kind, 0);
	if (kind == VM_ACCEPT)
		check_sent_value(x, xlen, target);
	if (kind == VM_COMMIT) {
		/* its proof: the deciding ballot (none only for the first view) and acceptors */
		if (xlen < ACCEPTOR_BYTES || (ballot == 0 && target != 1) ||
		    (x[0] >> g_world) != 0 || (ballot != 0 && x[0] == 0))
			fail("a commit without its proof", kind, ballot);
		check_sent_value(x + ACCEPTOR_BYTES, xlen - ACCEPTOR_BYTES, target);
	}
	if (kind == VM_PROMISE) {
		if (xlen < PROMISE_EXTRA || ballot != n->acc_promised ||
		    wire_get64(x) != n->acc_ballot || wire_get64(x) > ballot)
			fail("a promise that misreports the acceptor", kind, ballot);
		if (wire_get64(x) != 0)
			check_sent_value(x + PROMISE_EXTRA, xlen - PROMISE_EXTRA, target);
		else if (xlen != PROMISE_EXTRA &&
			 (n->kept_done == 0 || n->kept_epoch != n->view.epoch ||
			  xlen != PROMISE_EXTRA + KEPT_HEADER + n->kept_len ||
			  wire_get32(x + PROMISE_EXTRA) != n->kept_done))
			fail("a promise with more than what it keeps", kind, xlen);
	}
	if (kind == VM_ACCEPTED && (ballot != n->acc_ballot || ballot > n->acc_promised))
		fail("accepted a ballot it does not hold", kind, ballot);
	if (kind == VM_NACK &&
	    (xlen != 8 || wire_get64(x) != n->acc_promised || wire_get64(x) < ballot))
		fail("a refusal that misreports the promise", kind, ballot);
	if (kind == VM_PREPARE && (ballot != n->prop_ballot || (ballot & 0xffffu) != n->self))
		fail("a prepare for a ballot that is not this coordinator's", kind, ballot);
}

static int fz_send(struct keel_transport *t, uint64_t now_ns, const struct keel_datagram *d,
		   uint32_t count)
{
	(void)t, (void)now_ns;
	for (uint32_t i = 0; i < count && g_n != NULL; i++) {
		struct wire_expect exp = {.job_id = JOB,
					  .epoch = g_n->epoch,
					  .self = d[i].peer,
					  .world_size = g_world,
					  .transport_src = g_self};
		struct wire_header h;
		enum wire_verdict v = wire_decode(d[i].buf, d[i].len, &exp, &h);
		if (v != WIRE_OK)
			fail("sent a datagram its peer would drop", v, d[i].peer);
		if (h.type == WIRE_VIEW)
			check_sent_view(d[i].buf + WIRE_HEADER_SIZE, h.payload_len);
	}
	return (int)count;
}

static int fz_recv(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
		   uint32_t count_max)
{
	(void)t, (void)now_ns, (void)d, (void)count_max;
	return 0; /* messages arrive through mb_on_view_msg */
}

static const struct keel_transport_ops fz_ops = {
    .name = "fuzz", .send_burst = fz_send, .recv_burst = fz_recv};

/* What the application hears: epochs in order, members as many as counted, ascending. */
static void on_view(void *ctx, const struct keel_view *kv, const uint32_t *members, uint64_t now)
{
	(void)ctx, (void)now;
	if (kv->member_count > g_world || kv->world_size != g_world || kv->self != g_self)
		fail("the application was told a view of another shape", kv->member_count, 0);
	for (uint32_t i = 0; i < kv->member_count; i++)
		if (members[i] >= g_world || (i > 0 && members[i] <= members[i - 1]))
			fail("the application was told members out of order", members[i], i);
	if (!seq_before(g_told, kv->epoch))
		fail("the application was told an epoch that is not newer", kv->epoch, g_told);
	g_told = kv->epoch;
}

static void check_view(const struct view *v, const char *which)
{
	uint32_t members = 0;
	for (uint32_t r = 0; r < (g_world / 8 + 1) * 8; r++)
		if (view_has(v, r) && r >= g_world)
			fail(which, r, v->count);
		else
			members += view_has(v, r);
	if (members != v->count)
		fail(which, members, v->count);
}

/* The invariants after every step. */
static void check_node(void)
{
	const struct keel_node *n = g_n;
	if (n->epoch != n->view.epoch || seq_before(n->view.epoch, g_epoch))
		fail("the installed epoch went back", n->view.epoch, g_epoch);
	if (n->view.epoch == g_epoch && n->acc_promised < g_promised)
		fail("the promise went down within an epoch", n->view.epoch, n->acc_promised);
	g_epoch = n->view.epoch;
	g_promised = n->acc_promised;
	check_view(&n->view, "the installed view's count differs from its bits");
	if (n->acc_ballot > n->acc_promised)
		fail("accepted a ballot above its promise", 0, n->acc_ballot);
	if (mb_next_deadline(n) <= n->now_ns)
		fail("a round's deadline already passed", n->prop_phase, mb_next_deadline(n));
	if (n->acc_ballot != 0) {
		check_view(&n->acc_value, "the accepted value's count differs from its bits");
		if (n->acc_value.epoch != n->view.epoch + 1)
			fail("accepted a value for another epoch", n->acc_value.epoch, 0);
	}
	if (n->member && (!view_has(&n->view, n->self) || n->view.inc[n->self] != n->incarnation ||
			  n->pos_of[n->self] >= n->view.count))
		fail("a member missing from its own view", n->self, n->view.count);
	for (uint32_t i = 0; i < n->view.count; i++)
		if (n->rank_at[i] >= g_world || n->pos_of[n->rank_at[i]] != i)
			fail("positions disagree with the view", i, n->rank_at[i]);
	if (n->prop_phase == PROP_IDLE)
		return;
	if (!n->member || (n->prop_ballot & 0xffffu) != n->self)
		fail("a round run by a non-member, or on another's ballot", n->member,
		     n->prop_ballot);
	if (n->prop_best_ballot != 0)
		check_view(&n->prop_best, "the adopted value's count differs from its bits");
	if (n->prop_phase == PROP_ACCEPT) {
		check_view(&n->prop_value, "the proposed value's count differs from its bits");
		if (n->prop_value.epoch != n->view.epoch + 1)
			fail("proposing a value for another epoch", n->prop_value.epoch, 0);
	}
}

/* ---- writing messages ---- */

static size_t msg_head(uint8_t *p, uint32_t kind, uint32_t target, uint64_t ballot)
{
	memset(p, 0, WIRE_VIEW_MIN);
	p[0] = (uint8_t)kind;
	wire_put32(p + 4, target);
	wire_put64(p + 8, ballot);
	return WIRE_VIEW_MIN;
}

static size_t value_put(uint8_t *p, const struct value *v)
{
	wire_put32(p, v->epoch);
	wire_put32(p + 4, v->flags);
	wire_put32(p + 8, v->pending);
	wire_put32(p + 12, v->donor);
	wire_put32(p + 16, v->frontier);
	wire_put32(p + 20, v->count);
	for (uint32_t i = 0; i < v->entries; i++) {
		wire_put16(p + VALUE_HEADER + i * VALUE_ENTRY, v->rank[i]);
		wire_put32(p + VALUE_HEADER + i * VALUE_ENTRY + 2, v->inc[i]);
	}
	return VALUE_HEADER + (size_t)v->entries * VALUE_ENTRY;
}

/* A well-formed value: the ranks in `mask`, this node in its own life, the others in their
 * first. */
static void value_of(struct value *v, uint32_t epoch, uint32_t mask)
{
	memset(v, 0, sizeof(*v));
	v->epoch = epoch;
	v->donor = UINT32_MAX;
	for (uint32_t r = 0; r < g_world; r++) {
		if (!((mask >> r) & 1u))
			continue;
		if (v->donor == UINT32_MAX)
			v->donor = r;
		v->rank[v->entries] = (uint16_t)r;
		v->inc[v->entries++] = r == g_self ? g_n->incarnation : 1u;
	}
	v->count = v->entries;
}

/* Hand one payload to membership from an exactly sized copy, then send what it answered. */
static void deliver(uint32_t from, const uint8_t *payload, size_t len)
{
	if (from == g_self || len < WIRE_VIEW_MIN || len > g_n->mtu - WIRE_HEADER_SIZE)
		fail("the harness built a payload the decoder would not pass", from, len);
	uint8_t *copy = malloc(len);
	if (copy == NULL)
		abort();
	memcpy(copy, payload, len);
	struct wire_header h = {.magic = WIRE_MAGIC,
				.version = WIRE_VERSION,
				.type = WIRE_VIEW,
				.job_id = JOB,
				.epoch = g_n->epoch,
				.src = (uint16_t)from,
				.dst = (uint16_t)g_self,
				.payload_len = (uint32_t)len};
	mb_on_view_msg(g_n, from, &h, copy);
	free(copy);
	node_txq_flush(g_n);
}

static void poll_at(uint64_t dt_ns)
{
	g_n->now_ns += dt_ns;
	mb_poll(g_n);
	node_txq_flush(g_n);
	check_node();
}

/* ---- messages from fuzzed fields ---- */

/* An epoch near `base` (mostly base itself), just behind or ahead, half the space away, or
 * any (from raw). */
static uint32_t pick_epoch(uint8_t sel, uint32_t base, const uint8_t *raw)
{
	static const uint32_t delta[7] = {0, 0, 0, UINT32_MAX, 1, 2, 0x80000000u};
	return (sel & 7u) == 7u ? wire_get32(raw) : base + delta[sel & 7u];
}

/* A ballot from f[0..9]: the node's own as coordinator or acceptor, a round of the sender's,
 * or any; then one up or down at times. */
static uint64_t pick_ballot(const uint8_t *f, uint32_t from)
{
	static const uint64_t delta[4] = {0, 0, 1, UINT64_MAX};
	uint64_t b;
	switch (f[0] & 3u) {
	case 0:
		b = g_n->prop_ballot;
		break;
	case 1:
		b = g_n->acc_promised;
		break;
	case 2:
		b = (uint64_t)f[1] << 16 | from;
		break;
	default:
		b = wire_get64(f + 2);
		break;
	}
	return b + delta[(f[0] >> 2) & 3u];
}

/* A value from v[0..11]: v[0..3] any epoch, v[4] which epoch, v[5] the members, v[6] joined,
 * v[7] pending, v[8] frontier, v[9] donor, v[10] how to spoil it, v[11] a spoiler. */
static void pick_value(struct value *v, const uint8_t *f, uint32_t target)
{
	value_of(v, pick_epoch(f[4], target, f), f[5] & ((1u << g_world) - 1u));
	v->flags = (uint32_t)(f[6] & 7u) << 16;
	v->pending = f[7];
	v->frontier = f[8];
	if (f[9] & 0x80u)
		v->donor = (f[9] & 0x7fu) == 0x7fu ? UINT32_MAX : (f[9] & 0x7fu) % (g_world + 1);
	uint8_t how = f[10];
	uint32_t last = v->entries - 1u; /* used only when there are entries */
	if (v->entries > 0 && (how & 3u) == 1u)
		v->inc[last]++; /* a later life than the one known */
	else if (v->entries > 0 && (how & 3u) == 2u)
		v->inc[0] = 0;
	else if ((how & 3u) == 3u)
		for (uint32_t i = 0; i < v->entries; i++)
			v->inc[i] = f[11];
	v->count += ((how >> 2) & 3u) == 2u ? 1u : ((how >> 2) & 3u) == 3u ? UINT32_MAX : 0u;
	if (v->entries > 1 && (how & 0x10u)) {
		uint16_t r = v->rank[0];
		v->rank[0] = v->rank[1], v->rank[1] = r;
	}
	if (v->entries > 0 && (how & 0x20u)) {
		v->rank[v->entries] = v->rank[last], v->inc[v->entries] = v->inc[last];
		v->entries++, last++;
	}
	if (v->entries > 0 && (how & 0x40u))
		v->rank[last] = (uint16_t)(g_world + (f[11] & 3u));
	if (v->entries > 0 && (how & 0x80u))
		v->entries--; /* the count stays: the bytes end early */
}

/* PROMISE's extra from x[0..27]: x[10] bit 0 an accepted ballot (x[0..9]), bit 1 a value
 * even without one, else bit 2 a kept result (x[15] low nibble its length, high nibble how
 * far its stated length is off); x[11] done, x[12] pending, x[13] which incarnation, x[14]
 * any; the value from x[16..27]. */
static size_t promise_put(uint8_t *p, const uint8_t *x, uint32_t from, uint32_t target)
{
	const struct keel_node *n = g_n;
	uint64_t acc = (x[10] & 1u) ? pick_ballot(x, from) : 0;
	uint32_t known = n->view.inc[from] != 0 ? n->view.inc[from] : 1u;
	static const uint32_t spoil[3] = {0, 0, 1};
	uint32_t inc = (x[13] & 3u) == 3u   ? x[14]
		       : (x[13] & 3u) == 1u ? 0u
					    : known + spoil[x[13] & 3u];
	wire_put64(p, acc);
	wire_put32(p + 8, x[11]);
	wire_put32(p + 12, x[12]);
	wire_put32(p + 16, inc);
	size_t len = PROMISE_EXTRA;
	if (acc != 0 || (x[10] & 2u)) {
		struct value v;
		pick_value(&v, x + 16, target);
		len += value_put(p + len, &v);
	} else if (x[10] & 4u) {
		uint32_t kept = x[15] & 15u;
		wire_put32(p + len, x[11] + 1u);
		wire_put32(p + len + 4, kept + (x[15] >> 4));
		memset(p + len + KEPT_HEADER, x[14], kept);
		len += KEPT_HEADER + kept;
	}
	return len;
}

/* One message from fields f[0..FIELDS): f[0] kind (low 4 bits; bit 4 spoils the padding),
 * f[1..5] target, f[6..15] ballot, f[16..] what the kind carries. */
static size_t build_msg(uint8_t *p, const uint8_t *f, uint32_t from)
{
	uint32_t kind = (f[0] & 15u) % (VM_KINDS + 1u); /* 0: no kind */
	uint32_t target = pick_epoch(f[1], g_n->view.epoch + 1, f + 2);
	size_t len = msg_head(p, kind, target, pick_ballot(f + 6, from));
	const uint8_t *x = f + 16;
	struct value v;
	if (f[0] & 16u)
		p[1 + f[0] % 3u] = f[1] | 1u;
	switch (kind) {
	case VM_PROMISE:
		return len + promise_put(p + len, x, from, target);
	case VM_ACCEPT:
		pick_value(&v, x, target);
		return len + value_put(p + len, &v);
	case VM_COMMIT:
		/* acceptors from x[12]: world ranks, or (x[13] bit 0) any bits */
		p[len] = (x[13] & 1u) ? x[12] : (uint8_t)(x[12] & ((1u << g_world) - 1u));
		pick_value(&v, x, target);
		return len + ACCEPTOR_BYTES + value_put(p + len + ACCEPTOR_BYTES, &v);
	case VM_NACK:
		wire_put64(p + len, pick_ballot(x, from));
		return len + ((x[10] & 1u) ? 4u : 8u);
	case VM_SUSPECT:
		wire_put32(p + len, x[0] % (g_world + 1u));
		wire_put32(p + len + 4, x[1]);
		return len + ((x[2] & 1u) ? 4u : 8u);
	default:
		memcpy(p + len, x + 1, x[0] & 7u); /* bytes no kind reads */
		return len + (x[0] & 7u);
	}
}

/* ---- the node and its starting state ---- */

static int node_start(uint8_t w, uint8_t r, enum setup st)
{
	static struct keel_transport tp;
	struct keel_config cfg;
	g_world = WORLD_MIN + w % WORLDS;
	/* a coordinator needs a member above it: the view then starts at its rank */
	bool coord = st == ST_PREPARING || st == ST_ACCEPTING;
	g_self = r % (coord ? g_world - 1u : g_world);
	tp = (struct keel_transport){
	    .ops = &fz_ops, .mtu = KEEL_MTU_MIN, .rank = g_self, .world_size = g_world};
	keel_config_default(&cfg);
	cfg.rank = g_self;
	cfg.world_size = g_world;
	cfg.job_id = JOB;
	cfg.transport = &tp;
	cfg.mtu = KEEL_MTU_MIN;
	cfg.window = 4;
	cfg.burst = 8;
	cfg.ops_max = 1;
	cfg.heartbeat_ns = HB_NS;
	cfg.on_view = on_view;
	cfg.rejoin = st == ST_REJOINING;
	cfg.incarnation = cfg.rejoin ? 2u : 1u;
	size_t need = keel_storage_size(&cfg);
	if (need == 0 || need > sizeof(g_mem))
		return -1;
	memset(g_mem, 0, need);
	g_n = NULL;
	g_epoch = g_told = 0;
	struct keel_node *n;
	if (keel_init(&n, g_mem, need, &cfg, T0_NS) != 0)
		return -1;
	g_n = n;
	g_epoch = g_told = n->view.epoch;
	g_promised = 0;
	return 0;
}

static uint32_t lowest_other(void)
{
	return g_self == 0 ? 1u : 0u;
}

/* A decision of `from`'s first round, accepted by every rank but this node. */
static void send_commit(uint32_t from, uint32_t epoch, uint32_t mask)
{
	uint8_t msg[MSG_MAX];
	struct value v;
	value_of(&v, epoch, mask);
	size_t len = msg_head(msg, VM_COMMIT, epoch, 1u << 16 | from);
	msg[len] = (uint8_t)(((1u << g_world) - 1u) & ~(1u << g_self));
	len += ACCEPTOR_BYTES;
	deliver(from, msg, len + value_put(msg + len, &v));
}

/* Coordinator of the ranks from itself up: a stalled collective asks for a new epoch, and
 * with `promised` every other member answers the prepare. */
static void become_coordinator(bool promised)
{
	uint32_t all = (1u << g_world) - 1u, up = all & ~((1u << g_self) - 1u);
	if (g_self != 0)
		send_commit(g_self + 1, 2, up);
	mb_request_bump(g_n);
	poll_at(0);
	for (uint32_t r = g_self + 1; promised && r < g_world; r++) {
		uint8_t msg[MSG_MAX];
		size_t len = msg_head(msg, VM_PROMISE, g_n->view.epoch + 1, g_n->prop_ballot);
		memset(msg + len, 0, PROMISE_EXTRA);
		wire_put32(msg + len + 16, g_n->view.inc[r] != 0 ? g_n->view.inc[r] : 1u);
		deliver(r, msg, len + PROMISE_EXTRA);
	}
}

/* Acceptor of the lowest other rank's first round: promised, and with `accept` accepted. */
static void become_acceptor(bool accept)
{
	uint32_t c = lowest_other();
	uint64_t ballot = 1u << 16 | c;
	uint8_t msg[MSG_MAX];
	deliver(c, msg, msg_head(msg, VM_PREPARE, 2, ballot));
	if (!accept)
		return;
	struct value v;
	value_of(&v, 2, (1u << g_world) - 1u);
	size_t len = msg_head(msg, VM_ACCEPT, 2, ballot);
	deliver(c, msg, len + value_put(msg + len, &v));
}

static void setup(enum setup st)
{
	const struct keel_node *n = g_n;
	uint32_t all = (1u << g_world) - 1u,
		 top = g_self == g_world - 1 ? g_world - 2 : g_world - 1;
	bool ok = true;
	switch (st) {
	case ST_LATER:
		send_commit(lowest_other(), 3, all & ~(1u << top));
		ok = n->member && n->view.epoch == 3;
		break;
	case ST_PREPARING:
	case ST_ACCEPTING:
		become_coordinator(st == ST_ACCEPTING);
		ok = n->prop_phase == (st == ST_ACCEPTING ? PROP_ACCEPT : PROP_PREPARE);
		break;
	case ST_PROMISED:
	case ST_ACCEPTED:
		become_acceptor(st == ST_ACCEPTED);
		ok = n->acc_promised != 0 && (n->acc_ballot != 0) == (st == ST_ACCEPTED);
		break;
	case ST_EXCLUDED:
		send_commit(lowest_other(), 2, all & ~(1u << g_self));
		ok = !n->member && n->view.epoch == 2;
		break;
	case ST_REJOINING:
		ok = !n->member && n->view.epoch == 0;
		break;
	default:
		break;
	}
	if (!ok)
		fail("the harness did not reach its starting state", st, n->view.epoch);
	check_node();
}

/* A heartbeat from fields: f[0] the incarnation (bits 0-1 above the one known, bit 2 any from
 * f[4]), f[1] flags, f[2] which epoch (any from f[4..7]), f[3] collectives started. It goes
 * through the detector, which drops an older life's and tells membership the rest. */
static void heartbeat(uint32_t from, const uint8_t *f)
{
	uint32_t known = mb_peer_of(g_n, from)->inc;
	struct wire_heartbeat hb = {
	    .incarnation = (f[0] & 4u) ? f[4] : (known != 0 ? known : 1u) + (f[0] & 3u),
	    .flags = f[1] & 7u,
	    .ops_started = f[3],
	};
	struct wire_header h = {.type = WIRE_HEARTBEAT,
				.epoch = pick_epoch(f[2], g_n->epoch, f + 4),
				.src = (uint16_t)from,
				.payload_len = WIRE_HEARTBEAT_SIZE};
	uint8_t *payload = malloc(WIRE_HEARTBEAT_SIZE);
	if (payload == NULL)
		abort();
	wire_heartbeat_encode(payload, &hb);
	fd_on_heartbeat(g_n, from, &h, payload);
	free(payload);
	node_txq_flush(g_n);
}

static void step(uint8_t ctl, uint32_t from, const uint8_t *b, size_t len)
{
	uint8_t f[FIELDS] = {0}, msg[KEEL_MTU_MIN] = {0};
	size_t cap = g_n->mtu - WIRE_HEADER_SIZE;
	memcpy(f, b, len < FIELDS ? len : FIELDS);
	switch (ctl & 3u) {
	case 0:
		deliver(from, msg, build_msg(msg, f, from));
		break;
	case 1:
		memcpy(msg, b, len < cap ? len : cap);
		deliver(from, msg, len < WIRE_VIEW_MIN ? WIRE_VIEW_MIN : len < cap ? len : cap);
		break;
	case 2:
		if (fd_is_alive(g_n, from))
			fd_suspect(g_n, from); /* what the detector does after silence */
		break;
	default:
		heartbeat(from, f);
		break;
	}
	poll_at((uint64_t)(ctl >> 2) * TICK_NS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	enum setup st = (enum setup)(data[2] % ST_COUNT);
	if (node_start(data[0], data[1], st) != 0)
		fail("the harness's node did not start", st, 0);
	setup(st);
	for (size_t at = 3; at + 3 <= size;) {
		uint32_t from = (g_self + 1u + data[at + 1] % (g_world - 1u)) % g_world;
		uint8_t ctl = data[at];
		size_t len = data[at + 2];
		at += 3;
		if (len > size - at)
			len = size - at;
		step(ctl, from, data + at, len);
		at += len;
	}
	keel_fini(g_n);
	g_n = NULL;
	return 0;
}
