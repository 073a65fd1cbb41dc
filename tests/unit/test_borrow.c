/* Datagrams that borrow their payload from the caller's buffer (KEEL_CAP_GATHER): the core
 * sends a stable source (an out-of-place input, a ring's all-gather, the restart copy) as a
 * tail instead of copying it into its window. Checked here: tails are used where they may
 * be and nowhere else; a way that stops taking tails gets the payload copied in; and nothing
 * in flight points into a caller's buffer once its collective has ended, even a failed one.
 * Over shared memory, through a decorator that watches every datagram sent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "auth_int.h"
#include "cluster_int.h"
#include "crc32c_int.h"
#include "keel/device.h"
#include "keel/device_cpu.h"
#include "keel/keel.h"
#include "node_int.h"
#include "refcheck.h"
#include "wire_int.h"

#define WORLD 3u
#define MTU   9000u
#define COUNT 200003u /* f32: not a multiple of the world, the mtu or a page */

/* What rank r's core hands its transport, watched; it can refuse a peer's data, and stop
 * taking tails as a router does when a peer's route changes. */
struct spy {
	struct keel_transport t;
	struct keel_transport *inner;
	bool gather;		/* peer_caps says KEEL_CAP_GATHER */
	bool jam_data[WORLD];	/* refuse data datagrams to this peer (a full ring) */
	uint64_t tails;		/* data datagrams sent in two pieces */
	uint64_t whole;		/* data datagrams sent whole */
	uint64_t tails_refused; /* offered in two pieces while gather was off */
	uint64_t poisoned;	/* data datagrams carrying a poison byte */
	int poison;		/* a byte no payload may carry, or -1 */
	const uint8_t *lo, *hi; /* where tails may lie (a device op's stage), or NULL */
	uint64_t tails_outside; /* tails outside [lo, hi) */
	bool wire;		/* peer_caps: the way is a wire (no INTACT, no GATHER), as a
				 * router's after it fell back from shared memory */
	uint64_t sealed;	/* data datagrams sent with a MAC */
	bool jam_ctrl[WORLD];	/* refuse control datagrams (acks) to this peer: lost */
	uint32_t seq_of[WORLD][1024], crc_of[WORLD][1024]; /* by seq % 1024: first send */
	uint64_t resent;				   /* data datagrams sent again */
	uint64_t changed;	 /* ...whose payload differed from the first send's */
	bool wire_at_send;	 /* the next send_burst with data finds the way a wire (a router
				  * falling back inside it), and refuses what was written for memory */
	uint64_t intact_refused; /* datagrams flagged KEEL_DGRAM_INTACT refused while a wire */
};

static struct spy g_spy[WORLD];

static bool is_data(const struct keel_datagram *d)
{
	return (d->flags & KEEL_DGRAM_CONTROL) == 0;
}

static int spy_send(struct keel_transport *t, uint64_t now, const struct keel_datagram *d,
		    uint32_t count)
{
	struct spy *s = t->state;
	uint32_t n;

	for (n = 0; s->wire_at_send && n < count; n++)
		if (is_data(&d[n])) {
			s->wire = true;
			s->wire_at_send = false;
		}
	for (n = 0; n < count; n++) {
		if (s->wire && (d[n].flags & KEEL_DGRAM_INTACT) != 0) {
			s->intact_refused++;
			break; /* written without CRC or MAC for memory: not for a wire */
		}
		if (is_data(&d[n]) && s->jam_data[d[n].peer])
			break;
		if (!is_data(&d[n]) && s->jam_ctrl[d[n].peer])
			break;
		if (d[n].tail != NULL && !s->gather) {
			s->tails_refused++;
			break; /* as a router whose route to the peer takes one piece */
		}
	}
	if (n == 0)
		return 0;
	int rc = s->inner->ops->send_burst(s->inner, now, d, n);
	for (int i = 0; i < rc; i++) {
		if (!is_data(&d[i]))
			continue;
		const uint8_t *pl = d[i].tail != NULL ? d[i].tail : d[i].buf + WIRE_HEADER_SIZE;
		uint32_t len = d[i].tail != NULL ? d[i].tail_len : d[i].len - WIRE_HEADER_SIZE;
		assert_true(d[i].tail == NULL || d[i].len == WIRE_HEADER_SIZE);
		if (d[i].tail != NULL)
			s->tails++;
		else
			s->whole++;
		if ((wire_get16(d[i].buf + 6) & WIRE_FLAG_AUTH) != 0) /* the header's flags */
			s->sealed++;
		uint32_t seq = wire_get32(d[i].buf + 20), c = crc32c(0, pl, len); /* header seq */
		uint32_t *first_seq = &s->seq_of[d[i].peer][seq % 1024];
		if (*first_seq == seq) {
			s->resent++;
			s->changed += s->crc_of[d[i].peer][seq % 1024] != c;
		} else {
			*first_seq = seq;
			s->crc_of[d[i].peer][seq % 1024] = c;
		}
		if (d[i].tail != NULL && s->lo != NULL &&
		    (d[i].tail < s->lo || d[i].tail + d[i].tail_len > s->hi))
			s->tails_outside++;
		if (s->poison >= 0 && memchr(pl, s->poison, len) != NULL)
			s->poisoned++;
	}
	return rc;
}

static int spy_recv(struct keel_transport *t, uint64_t now, struct keel_datagram *d, uint32_t count)
{
	struct spy *s = t->state;
	int got = s->inner->ops->recv_burst(s->inner, now, d, count);
	/* What a sender whose way is a wire sends arrives as off a wire: not intact. */
	for (int i = 0; i < got; i++)
		if (d[i].peer < WORLD && g_spy[d[i].peer].wire)
			d[i].flags &= ~(uint32_t)KEEL_DGRAM_INTACT;
	return got;
}

static uint32_t spy_peer_caps(struct keel_transport *t, uint32_t peer)
{
	struct spy *s = t->state;
	uint32_t caps = keel_transport_peer_caps(s->inner, peer);
	if (s->wire)
		caps &= ~(uint32_t)(KEEL_CAP_INTACT | KEEL_CAP_GATHER);
	return s->gather ? caps : caps & ~(uint32_t)KEEL_CAP_GATHER;
}

static const struct keel_transport_ops spy_ops = {
    .name = "spy", .send_burst = spy_send, .recv_burst = spy_recv, .peer_caps = spy_peer_caps};

static enum keel_algo g_algo;
static struct keel_device g_dev[WORLD]; /* CPU stand-ins, when g_with_dev */
static bool g_with_dev;
static bool g_keyed;   /* every rank holds the same job key */
static bool g_patient; /* nobody suspected for missing heartbeats (acks held back on purpose) */

static void tweak(struct keel_config *cfg)
{
	static const uint8_t key[KEEL_AUTH_KEY_BYTES] = "keel borrow test key, 32 bytes.";
	cfg->auth = g_keyed;
	if (g_keyed)
		memcpy(cfg->auth_key, key, sizeof(key));
	cfg->algo = g_algo;
	cfg->device = g_with_dev ? &g_dev[cfg->rank] : NULL;
	cfg->entry_timeout_ns = 50000000; /* a member that never comes: 50 ms */
	if (g_patient)
		cfg->miss_limit = 1000;
}

/* WORLD ranks over shared memory, each behind a spy. */
static void spy_cluster_init(struct cluster *c, enum keel_algo algo)
{
	g_algo = algo;
	assert_int_equal(cluster_init_shm(c, WORLD, MTU, tweak), 0);
	for (uint32_t r = 0; r < WORLD; r++) {
		keel_fini(c->node[r]);
		free(c->mem_node[r]);
		struct spy *s = &g_spy[r];
		memset(s, 0, sizeof(*s));
		s->inner = c->tp[r];
		s->t = *s->inner;
		s->t.ops = &spy_ops;
		s->t.state = s;
		s->gather = true;
		s->poison = -1;
		assert_true((s->t.caps & KEEL_CAP_GATHER) != 0);
		c->tp[r] = &s->t;
	}
	assert_int_equal(cluster_nodes_init(c, tweak), 0);
}

static float g_in[WORLD][COUNT], g_out[WORLD][COUNT], g_ref[COUNT];

/* One AllReduce on every rank, out of place or in place; the results are checked. */
static void allreduce_all(struct cluster *c, bool in_place, uint32_t count)
{
	struct keel_op *h[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	keel_check_reference(g_ref, 0, count, WORLD, KEEL_F32, KEEL_SUM);
	for (uint32_t r = 0; r < WORLD; r++) {
		keel_check_fill(g_in[r], 0, count, r, KEEL_F32, KEEL_SUM);
		if (in_place)
			memcpy(g_out[r], g_in[r], count * sizeof(float));
		assert_int_equal(keel_allreduce_start(c->node[r], in_place ? g_out[r] : g_in[r],
						      g_out[r], count, KEEL_F32, KEEL_SUM, &h[r]),
				 0);
	}
	assert_int_equal(cluster_wait_ops(c, h, rc, 200000), 0);
	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(rc[r], 0);
		assert_int_equal(keel_check_wrong(g_out[r], g_ref, 0, count, KEEL_F32), 0);
		assert_int_equal(c->node[r]->tx_borrowed, 0);
	}
}

/* Every rank starts one out-of-place AllReduce of COUNT floats (the reference is set). */
static void start_all(struct cluster *c, struct keel_op **h)
{
	keel_check_reference(g_ref, 0, COUNT, WORLD, KEEL_F32, KEEL_SUM);
	for (uint32_t r = 0; r < WORLD; r++) {
		keel_check_fill(g_in[r], 0, COUNT, r, KEEL_F32, KEEL_SUM);
		assert_int_equal(keel_allreduce_start(c->node[r], g_in[r], g_out[r], COUNT,
						      KEEL_F32, KEEL_SUM, &h[r]),
				 0);
	}
}

/* ...and every one ends with the exact result. */
static void wait_exact(struct cluster *c, struct keel_op **h)
{
	int rc[CLUSTER_MAX];
	assert_int_equal(cluster_wait_ops(c, h, rc, 200000), 0);
	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(rc[r], 0);
		assert_int_equal(keel_check_wrong(g_out[r], g_ref, 0, COUNT, KEEL_F32), 0);
	}
}

static uint64_t tails_all(void)
{
	uint64_t t = 0;
	for (uint32_t r = 0; r < WORLD; r++)
		t += g_spy[r].tails;
	return t;
}

/* The ring sends everything as tails: its input (out of place, or the restart copy in place),
 * its reduce-scatter's partial sums (copied in if still borrowed when the all-gather writes
 * the final sums over them) and its all-gather. Recursive doubling borrows the input out of
 * place, and nothing in place, where every step sends from the output. */
static void test_borrow_where_the_bytes_stay(void **state)
{
	(void)state;
	struct cluster c;
	spy_cluster_init(&c, KEEL_ALGO_RING);
	allreduce_all(&c, false, COUNT);
	uint64_t t = tails_all(), w = g_spy[0].whole + g_spy[1].whole + g_spy[2].whole;
	printf("# ring out of place: %llu tails, %llu whole\n", (unsigned long long)t,
	       (unsigned long long)w);
	/* 3 ranks: every step borrows (step 1's partial sums too); on shared memory nothing
	 * has to go whole */
	assert_true(t > 0);
	assert_int_equal(w, 0);
	allreduce_all(&c, true, COUNT); /* step 0 whole when the input is above the restart copy */
	assert_true(tails_all() > t);
	cluster_fini(&c);

	spy_cluster_init(&c, KEEL_ALGO_RD);
	allreduce_all(&c, false, 3000);
	t = tails_all();
	assert_true(t > 0);
	allreduce_all(&c, true, 3000);
	assert_int_equal(tails_all(), t);
	assert_true(g_spy[0].whole > 0);
	cluster_fini(&c);
}

/* A ring's partial sums still borrowed when the all-gather writes the final sums over them:
 * rank 1's acks to rank 0 are lost for a while, so rank 0's partial sums stay in its window
 * (rank 1 used them: the final sums come back only after it did) and are sent again by the
 * timer. They are copied in before the final sums land, so every copy sent again carries
 * what the first carried. */
static void test_borrow_partial_sums_copied_in_before_overwritten(void **state)
{
	(void)state;
	struct cluster c;
	struct keel_op *h[CLUSTER_MAX] = {NULL};
	g_patient = true;
	spy_cluster_init(&c, KEEL_ALGO_RING);
	g_spy[1].jam_ctrl[0] = true;
	start_all(&c, h);
	for (int i = 0; i < 3000; i++)
		cluster_round(&c);
	g_spy[1].jam_ctrl[0] = false;
	wait_exact(&c, h);
	printf("# rank 0: %llu data datagrams sent again, %llu of them changed\n",
	       (unsigned long long)g_spy[0].resent, (unsigned long long)g_spy[0].changed);
	assert_true(g_spy[0].resent > 0);
	assert_int_equal(g_spy[0].changed, 0);
	cluster_fini(&c);
	g_patient = false;
}

/* The way to a peer stops taking two pieces while borrowed datagrams wait in the window
 * (refused by a full ring, then the route changed): they are copied in and go whole, and
 * no tail is offered after the change. The results stay exact. */
static void test_borrow_route_change_copies_in(void **state)
{
	(void)state;
	struct cluster c;
	struct keel_op *h[CLUSTER_MAX] = {NULL};
	spy_cluster_init(&c, KEEL_ALGO_RING);
	g_spy[0].jam_data[1] = true;
	start_all(&c, h);
	for (int i = 0; i < 200; i++)
		cluster_round(&c);
	assert_true(c.node[0]->tx_borrowed > 0); /* written as tails, refused so far */
	uint64_t whole_before = g_spy[0].whole;
	g_spy[0].gather = false;
	g_spy[0].jam_data[1] = false;
	wait_exact(&c, h);
	assert_int_equal(g_spy[0].tails_refused, 0);
	assert_true(g_spy[0].whole > whole_before);
	assert_int_equal(c.node[0]->tx_borrowed, 0);
	cluster_fini(&c);
}

/* A collective that fails (a member never starts it) while its borrowed datagrams are still
 * in the window: once the caller is told, the caller may write its buffer; what is sent
 * after that carries the bytes as they were, never the new ones. */
static void test_borrow_failed_collective_lets_go(void **state)
{
	(void)state;
	struct cluster c;
	struct keel_op *h0 = NULL;
	spy_cluster_init(&c, KEEL_ALGO_RING);
	g_spy[0].jam_data[1] = true; /* rank 0's data to rank 1 waits in its window */
	for (uint32_t i = 0; i < COUNT; i++)
		g_in[0][i] = 1.0f; /* bytes 00 00 80 3f: no 0xee among them */
	assert_int_equal(
	    keel_allreduce_start(c.node[0], g_in[0], g_out[0], COUNT, KEEL_F32, KEEL_SUM, &h0), 0);
	int st = -EINPROGRESS;
	for (int i = 0; i < 200000 && st == -EINPROGRESS; i++) {
		cluster_round(&c);
		st = keel_op_test(c.node[0], h0);
	}
	assert_int_equal(st, -ETIMEDOUT); /* ranks 1 and 2 never started it */
	assert_int_equal(c.node[0]->tx_borrowed, 0);
	assert_true(g_spy[0].tails > 0 || c.node[0]->tx_flight > 0);
	memset(g_in[0], 0xee, sizeof(g_in[0])); /* the caller's buffer, written again */
	g_spy[0].poison = 0xee;
	uint64_t sent = g_spy[0].tails + g_spy[0].whole;
	g_spy[0].jam_data[1] = false;
	for (int i = 0; i < 2000; i++)
		cluster_round(&c);
	printf("# after the failure: %llu data datagrams sent\n",
	       (unsigned long long)(g_spy[0].tails + g_spy[0].whole - sent));
	assert_true(g_spy[0].tails + g_spy[0].whole > sent); /* the window drained */
	assert_int_equal(g_spy[0].poisoned, 0);
	cluster_fini(&c);
}

/* On device buffers the stage holds what is sent: its input copy (staged once, never written
 * again) and, in the ring's all-gather, the final sums in its mirror. Those go as tails
 * pointing into the stage, never into the device buffers; partial sums go whole. Out of
 * place and in place, every result exact, nothing borrowed once the collective ended. */
static void test_borrow_device_stage(void **state)
{
	(void)state;
	struct keel_device_cpu_config dc;
	keel_device_cpu_config_default(&dc);
	size_t dev_sz = keel_device_cpu_storage_size(&dc);
	void *dev_mem[WORLD];
	for (uint32_t r = 0; r < WORLD; r++) {
		dev_mem[r] = calloc(1, dev_sz);
		dc.seed = r + 1;
		assert_int_equal(keel_device_cpu_init(&g_dev[r], dev_mem[r], dev_sz, &dc), 0);
	}
	g_with_dev = true;
	struct cluster c;
	spy_cluster_init(&c, KEEL_ALGO_RING);
	size_t stage_bytes = keel_allreduce_device_stage_bytes(COUNT, KEEL_F32);
	uint8_t *stage[WORLD];
	keel_check_reference(g_ref, 0, COUNT, WORLD, KEEL_F32, KEEL_SUM);
	for (uint32_t in_place = 0; in_place < 2; in_place++) {
		struct keel_op *h[CLUSTER_MAX] = {NULL};
		int rc[CLUSTER_MAX];
		for (uint32_t r = 0; r < WORLD; r++) {
			stage[r] = malloc(stage_bytes);
			assert_int_equal(
			    g_dev[r].ops->host_register(g_dev[r].state, stage[r], stage_bytes), 0);
			g_spy[r].lo = stage[r];
			g_spy[r].hi = stage[r] + stage_bytes;
			keel_check_fill(g_in[r], 0, COUNT, r, KEEL_F32, KEEL_SUM);
			float *out = in_place ? g_in[r] : g_out[r];
			assert_int_equal(keel_allreduce_device_start(c.node[r], g_in[r], out, COUNT,
								     KEEL_F32, KEEL_SUM, stage[r],
								     stage_bytes, &h[r]),
					 0);
		}
		assert_int_equal(cluster_wait_ops(&c, h, rc, 200000), 0);
		for (uint32_t r = 0; r < WORLD; r++) {
			assert_int_equal(rc[r], 0);
			assert_int_equal(keel_check_wrong(in_place ? g_in[r] : g_out[r], g_ref, 0,
							  COUNT, KEEL_F32),
					 0);
			assert_int_equal(c.node[r]->tx_borrowed, 0);
			assert_int_equal(g_dev[r].ops->host_unregister(g_dev[r].state, stage[r]),
					 0);
			free(stage[r]);
			g_spy[r].lo = g_spy[r].hi = NULL;
		}
		printf("# device ring %s: %llu tails, %llu whole\n",
		       in_place ? "in place" : "out of place", (unsigned long long)tails_all(),
		       (unsigned long long)(g_spy[0].whole + g_spy[1].whole + g_spy[2].whole));
		assert_true(tails_all() > 0 && g_spy[0].whole > 0);
		for (uint32_t r = 0; r < WORLD; r++)
			assert_int_equal(g_spy[r].tails_outside, 0);
	}
	cluster_fini(&c);
	g_with_dev = false;
	for (uint32_t r = 0; r < WORLD; r++) {
		g_dev[r].ops->fini(g_dev[r].state);
		free(dev_mem[r]);
	}
}

static uint64_t sealed_all(void)
{
	uint64_t n = 0;
	for (uint32_t r = 0; r < WORLD; r++)
		n += g_spy[r].sealed;
	return n;
}

static void no_drops(struct cluster *c)
{
	struct keel_counters k;
	for (uint32_t r = 0; r < WORLD; r++) {
		keel_counters_get(c->node[r], &k);
		assert_int_equal(k.drop_auth + k.drop_replay + k.drop_crc, 0);
	}
}

/* A way that becomes a wire between the moment the core writes a datagram for memory and the
 * moment it leaves (a router that falls back inside send_burst): the transport refuses what the
 * core marked KEEL_DGRAM_INTACT, and it comes back with its CRC, or sealed and whole with a key.
 * Nothing reaches a receiver without its check: no drops, every result exact. */
static void test_borrow_way_turns_wire_while_queued(void **state)
{
	(void)state;
	struct keel_config probe;
	keel_config_default(&probe);
	probe.auth = true;
	bool sodium = auth_pick(probe.mac) != 0;
	for (int keyed = 0; keyed <= (sodium ? 1 : 0); keyed++) {
		g_keyed = keyed != 0;
		struct cluster c;
		spy_cluster_init(&c, KEEL_ALGO_RING);
		struct keel_op *h[CLUSTER_MAX] = {NULL};
		g_spy[0].wire_at_send = true; /* rank 0's first data finds a wire */
		start_all(&c, h);
		wait_exact(&c, h);
		printf("# %s: %llu refused as written for memory, %llu sealed\n",
		       keyed ? "keyed" : "no key", (unsigned long long)g_spy[0].intact_refused,
		       (unsigned long long)g_spy[0].sealed);
		assert_true(g_spy[0].intact_refused > 0);
		assert_true(!keyed || g_spy[0].sealed > 0);
		no_drops(&c);
		allreduce_all(&c, false, COUNT); /* and on over the wire */
		no_drops(&c);
		cluster_fini(&c);
	}
	g_keyed = false;
}

/* With a job key, datagrams through shared memory go as without one: no MAC (only the job's
 * ranks can write those rings), payloads borrowed. Where a way becomes a wire (a router fell
 * back), everything on it is sealed and whole from then on, the tails written before the
 * change included; nothing is dropped, every result exact. */
static void test_borrow_keyed_memory_needs_no_mac(void **state)
{
	(void)state;
	struct keel_config probe;
	keel_config_default(&probe);
	probe.auth = true;
	if (auth_pick(probe.mac) == 0)
		skip(); /* built without libsodium */
	g_keyed = true;
	struct cluster c;
	spy_cluster_init(&c, KEEL_ALGO_RING);
	allreduce_all(&c, false, COUNT);
	printf("# keyed, memory: %llu tails, %llu sealed\n", (unsigned long long)tails_all(),
	       (unsigned long long)sealed_all());
	assert_true(tails_all() > 0);
	assert_int_equal(sealed_all(), 0);
	no_drops(&c);

	/* rank 0's ways become wires while its tails wait in the window (a full ring) */
	struct keel_op *h[CLUSTER_MAX] = {NULL};
	g_spy[0].jam_data[1] = true;
	start_all(&c, h);
	for (int i = 0; i < 200; i++)
		cluster_round(&c);
	assert_true(c.node[0]->tx_borrowed > 0);
	uint64_t tails0 = g_spy[0].tails;
	g_spy[0].wire = true;
	g_spy[0].jam_data[1] = false;
	wait_exact(&c, h);
	assert_int_equal(g_spy[0].tails, tails0); /* none offered after the change */
	assert_true(g_spy[0].sealed > 0);
	assert_int_equal(g_spy[1].sealed + g_spy[2].sealed, 0); /* their ways stayed memory */
	uint64_t sealed0 = g_spy[0].sealed, whole0 = g_spy[0].whole;
	allreduce_all(&c, true, COUNT);
	assert_int_equal(g_spy[0].sealed - sealed0, g_spy[0].whole - whole0); /* all of them */
	assert_int_equal(g_spy[0].tails, tails0);
	no_drops(&c);
	cluster_fini(&c);
	g_keyed = false;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_borrow_where_the_bytes_stay),
	    cmocka_unit_test(test_borrow_partial_sums_copied_in_before_overwritten),
	    cmocka_unit_test(test_borrow_route_change_copies_in),
	    cmocka_unit_test(test_borrow_failed_collective_lets_go),
	    cmocka_unit_test(test_borrow_device_stage),
	    cmocka_unit_test(test_borrow_keyed_memory_needs_no_mac),
	    cmocka_unit_test(test_borrow_way_turns_wire_while_queued),
	};
	return cmocka_run_group_tests_name("borrow", tests, NULL, NULL);
}
