/* Unit tests for the shared-memory transport: rings in a MAP_SHARED anonymous region (shared
 * with forked children), or in a named region this test unlinks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the four headers it needs */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "keel/limits.h"
#include "keel/transport_shm.h"

#define MEM_BYTES  (80u << 10) /* private state and the 64 KiB stage */
#define SLOTS	   4
#define SMALL_MTU  256u
#define SMALL_RING 1024u /* holds 3 records of SMALL_MTU (264 bytes each) */
#define EXCHANGE   100000u
#define BURST	   32u

static _Alignas(64) uint8_t g_mem[SLOTS][MEM_BYTES];
static uint8_t g_bufs[BURST][KEEL_MTU_MAX];
static uint8_t g_out[BURST][KEEL_MTU_MAX];
static char g_name[KEEL_SHM_NAME_MAX];
static unsigned g_name_seq;

/* A fresh name per test: the doorbells of a finished test must not be reused. */
static void cfg_make(struct keel_shm_config *cfg, uint32_t world, uint32_t mtu, uint32_t ring)
{
	keel_shm_config_default(cfg);
	snprintf(g_name, sizeof(g_name), "/keel-ut-%d-%u", (int)getpid(), g_name_seq++);
	cfg->name = g_name;
	cfg->world_size = world;
	cfg->mtu = mtu;
	cfg->ring_bytes = ring;
}

/* A shared anonymous region that forked children see too. */
static void *region_new(struct keel_shm_config *cfg)
{
	size_t len = keel_shm_region_size(cfg);
	void *p;

	assert_true(len > 0);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	cfg->region = p;
	cfg->region_len = len;
	return p;
}

static struct keel_transport *shm_open_rank(int slot, struct keel_shm_config *cfg, uint32_t rank)
{
	struct keel_transport *t = NULL;
	size_t need;

	cfg->rank = rank;
	need = keel_shm_storage_size(cfg);
	assert_true(need > 0 && need <= MEM_BYTES);
	assert_int_equal(keel_shm_init(&t, g_mem[slot], need, cfg), 0);
	assert_non_null(t);
	assert_int_equal(t->caps, KEEL_CAP_ORDERED | KEEL_CAP_INTACT | KEEL_CAP_GATHER |
				      (cfg->reliable ? KEEL_CAP_RELIABLE : 0u));
	assert_int_equal(t->mtu, cfg->mtu);
	assert_true(t->ops->wait_fd(t) >= 0);
	return t;
}

static void recv_setup(struct keel_datagram *d, uint32_t n, uint32_t cap)
{
	for (uint32_t i = 0; i < n; i++)
		d[i] = (struct keel_datagram){.buf = g_bufs[i], .cap = cap};
}

static void fill(uint8_t *buf, uint32_t len, uint32_t seq)
{
	for (uint32_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(seq * 13 + i * 7 + (i >> 8));
}

static int check(const uint8_t *buf, uint32_t len, uint32_t seq)
{
	for (uint32_t i = 0; i < len; i++)
		if (buf[i] != (uint8_t)(seq * 13 + i * 7 + (i >> 8)))
			return -1;
	return 0;
}

static struct keel_datagram out_make(uint32_t slot, uint32_t peer, uint32_t len, uint32_t seq)
{
	fill(g_out[slot], len, seq);
	return (struct keel_datagram){.buf = g_out[slot], .len = len, .peer = peer};
}

/* Many records of varying length through a small ring: positions wrap, records split. */
static void test_shm_wrap_around(void **state)
{
	struct keel_shm_config cfg;
	struct keel_datagram o, d[1];
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	void *reg = region_new(&cfg);
	struct keel_transport *a = shm_open_rank(0, &cfg, 0), *b = shm_open_rank(1, &cfg, 1);

	for (uint32_t seq = 0; seq < 1000; seq++) {
		uint32_t len = (seq * 37) % (SMALL_MTU + 1);

		o = out_make(0, 1, len, seq);
		assert_int_equal(a->ops->send_burst(a, 0, &o, 1), 1);
		recv_setup(d, 1, SMALL_MTU);
		assert_int_equal(b->ops->recv_burst(b, 0, d, 1), 1);
		assert_int_equal(d[0].len, len);
		assert_int_equal(d[0].peer, 0);
		assert_int_equal(check(d[0].buf, len, seq), 0);
	}
	a->ops->fini(a);
	b->ops->fini(b);
	munmap(reg, cfg.region_len);
}

/* Datagrams in two pieces (KEEL_CAP_GATHER: a header, then a payload where it lies) arrive as
 * one, cut at every point and at every ring position, copied or lent. A tail that does not
 * fit the mtu, or has no bytes, is refused like any bad datagram. */
static void test_shm_two_pieces(void **state)
{
	struct keel_shm_config cfg;
	struct keel_datagram o[2], d[1];
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	void *reg = region_new(&cfg);
	struct keel_transport *a = shm_open_rank(0, &cfg, 0), *b = shm_open_rank(1, &cfg, 1);

	for (uint32_t seq = 0; seq < 2000; seq++) {
		uint32_t len = (seq * 37) % (SMALL_MTU + 1);
		uint32_t cut = len == 0 ? 0 : (seq * 13) % (len + 1);

		o[0] = out_make(0, 1, len, seq);
		o[0].len = cut;
		o[0].tail = g_out[0] + cut;
		o[0].tail_len = len - cut;
		if (o[0].tail_len == 0)
			o[0].tail = NULL;
		assert_int_equal(a->ops->send_burst(a, 0, o, 1), 1);
		recv_setup(d, 1, SMALL_MTU);
		if (seq % 2 == 0)
			d[0].flags = KEEL_DGRAM_LEND;
		assert_int_equal(b->ops->recv_burst(b, 0, d, 1), 1);
		assert_int_equal(d[0].len, len);
		assert_int_equal(check(d[0].buf, len, seq), 0);
	}
	o[0] = out_make(0, 1, SMALL_MTU, 1);
	o[0].len = 1;
	o[0].tail = g_out[0] + 1;
	o[0].tail_len = SMALL_MTU; /* one byte over */
	assert_int_equal(a->ops->send_burst(a, 0, o, 1), -EINVAL);
	o[0].tail_len = SMALL_MTU + 1; /* over on its own */
	assert_int_equal(a->ops->send_burst(a, 0, o, 1), -EINVAL);
	o[0].tail = NULL;
	o[0].tail_len = 4; /* bytes announced, none given */
	assert_int_equal(a->ops->send_burst(a, 0, o, 1), -EINVAL);
	o[1] = o[0];
	o[0] = out_make(1, 1, 10, 7);
	assert_int_equal(a->ops->send_burst(a, 0, o, 2), 1); /* stops at the bad one */
	recv_setup(d, 1, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 1), 1);
	assert_int_equal(check(d[0].buf, 10, 7), 0);
	a->ops->fini(a);
	b->ops->fini(b);
	munmap(reg, cfg.region_len);
}

static bool in_region(const void *p, const void *reg, size_t len)
{
	return (const uint8_t *)p >= (const uint8_t *)reg &&
	       (const uint8_t *)p < (const uint8_t *)reg + len;
}

/* A caller that takes lent buffers gets each record where it lies in the ring, unless it wraps
 * around the ring's end (then copied), every one marked intact; the sender cannot write over
 * lent bytes until the receiver's next call. */
static void test_shm_lent_in_place(void **state)
{
	struct keel_shm_config cfg;
	struct keel_datagram o[3], d[3];
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	void *reg = region_new(&cfg);
	struct keel_transport *a = shm_open_rank(0, &cfg, 0), *b = shm_open_rank(1, &cfg, 1);
	uint64_t pos = 0; /* where the next record starts, as the ring counts */
	uint32_t lent = 0, copied = 0;

	for (uint32_t seq = 0; seq < 1000; seq++) {
		uint32_t len = (seq * 37) % (SMALL_MTU + 1);
		uint32_t at = (uint32_t)((pos + 8) % SMALL_RING);
		bool wraps = at + len > SMALL_RING;

		o[0] = out_make(0, 1, len, seq);
		assert_int_equal(a->ops->send_burst(a, 0, o, 1), 1);
		recv_setup(d, 1, SMALL_MTU);
		d[0].flags = KEEL_DGRAM_LEND;
		assert_int_equal(b->ops->recv_burst(b, 0, d, 1), 1);
		assert_int_equal(d[0].len, len);
		assert_int_equal(d[0].flags, KEEL_DGRAM_INTACT);
		assert_int_equal(check(d[0].buf, len, seq), 0);
		if (wraps) {
			assert_ptr_equal(d[0].buf, g_bufs[0]);
			copied++;
		} else {
			assert_true(in_region(d[0].buf, reg, cfg.region_len));
			lent++;
		}
		pos += 8 + ((len + 7u) & ~7u);
	}
	assert_true(lent > 0 && copied > 0);

	/* 3 records of 200 bytes (208 in the ring) lent: 400 of 1024 bytes are free, not 1024 */
	for (uint32_t i = 0; i < 3; i++)
		o[i] = out_make(i, 1, 200, 100 + i);
	recv_setup(d, 3, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 3), 0); /* empty, nothing lent */
	assert_int_equal(a->ops->send_burst(a, 0, o, 3), 3);
	for (uint32_t i = 0; i < 3; i++)
		d[i].flags = KEEL_DGRAM_LEND;
	assert_int_equal(b->ops->recv_burst(b, 0, d, 3), 3);
	for (uint32_t i = 0; i < 3; i++)
		o[i] = out_make(i, 1, 200, 200 + i);
	assert_int_equal(a->ops->send_burst(a, 0, o, 3), 1);
	for (uint32_t i = 0; i < 3; i++) /* still as they were sent */
		assert_int_equal(check(d[i].buf, 200, 100 + i), 0);
	/* rx_ready gives them back (so would arm_wait or the next receive) */
	assert_true(b->ops->rx_ready(b));
	assert_int_equal(a->ops->send_burst(a, 0, o + 1, 2), 2);
	recv_setup(d, 3, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 3), 3); /* copied: flags 0 asked for it */
	for (uint32_t i = 0; i < 3; i++) {
		assert_ptr_equal(d[i].buf, g_bufs[i]);
		assert_int_equal(check(d[i].buf, 200, 200 + i), 0);
	}
	a->ops->fini(a);
	b->ops->fini(b);
	munmap(reg, cfg.region_len);
}

/* A burst larger than the ring: the prefix that fits is taken, the rest later. */
static void test_shm_full_ring_partial(void **state)
{
	struct keel_shm_config cfg;
	struct keel_datagram o[10], d[10];
	struct keel_shm_stats st;
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	void *reg = region_new(&cfg);
	struct keel_transport *a = shm_open_rank(0, &cfg, 0), *b = shm_open_rank(1, &cfg, 1);

	for (uint32_t i = 0; i < 10; i++)
		o[i] = out_make(i, 1, SMALL_MTU, i);
	assert_int_equal(a->ops->send_burst(a, 0, o, 10), 3);
	keel_shm_stats_get(a, &st);
	assert_int_equal(st.tx_ring_full, 1);
	assert_int_equal(a->ops->send_burst(a, 0, o + 3, 7), 0); /* still full */
	recv_setup(d, 10, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 10), 3);
	assert_int_equal(a->ops->send_burst(a, 0, o + 3, 7), 3);
	recv_setup(d, 10, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 10), 3);
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(check(d[i].buf, SMALL_MTU, 3 + i), 0);
	a->ops->fini(a);
	b->ops->fini(b);
	munmap(reg, cfg.region_len);
}

/* A control datagram for a full ring is dropped, and the burst goes on to the other peers. */
static void test_shm_full_ring_drops_control(void **state)
{
	struct keel_shm_config cfg;
	struct keel_datagram o[4], d[4];
	struct keel_shm_stats st;
	struct keel_transport *t[3];
	(void)state;
	cfg_make(&cfg, 3, SMALL_MTU, SMALL_RING);
	void *reg = region_new(&cfg);
	for (uint32_t r = 0; r < 3; r++)
		t[r] = shm_open_rank((int)r, &cfg, r);
	for (uint32_t i = 0; i < 3; i++)
		o[i] = out_make(i, 1, SMALL_MTU, i);
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, o, 3), 3); /* rank 1's ring is full */
	o[0] = out_make(0, 1, SMALL_MTU, 3);
	o[0].flags = KEEL_DGRAM_CONTROL;
	o[1] = out_make(1, 2, 16, 4);
	o[2] = out_make(2, 1, SMALL_MTU, 5); /* reliable: refused */
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, o, 3), 2);
	keel_shm_stats_get(t[0], &st);
	assert_int_equal(st.tx_control_dropped, 1);
	assert_int_equal(st.tx_datagrams, 4);
	recv_setup(d, 4, SMALL_MTU);
	assert_int_equal(t[2]->ops->recv_burst(t[2], 0, d, 4), 1);
	assert_int_equal(check(d[0].buf, 16, 4), 0);
	recv_setup(d, 4, SMALL_MTU);
	assert_int_equal(t[1]->ops->recv_burst(t[1], 0, d, 4), 3);
	for (uint32_t r = 0; r < 3; r++)
		t[r]->ops->fini(t[r]);
	munmap(reg, cfg.region_len);
}

/* A receive that empties a ring leaves it marked sleeping (the next record rings the doorbell);
 * one that fills the caller's array asks to be called again at once. */
static void test_shm_recv_leaves_rings_armed(void **state)
{
	struct keel_shm_config cfg;
	struct keel_datagram o[3], d[3];
	struct keel_shm_stats st;
	struct pollfd p;
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	void *reg = region_new(&cfg);
	struct keel_transport *a = shm_open_rank(0, &cfg, 0), *b = shm_open_rank(1, &cfg, 1);

	for (uint32_t i = 0; i < 3; i++)
		o[i] = out_make(i, 1, 8, i);
	assert_int_equal(a->ops->send_burst(a, 0, o, 3), 3);
	recv_setup(d, 3, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 2), 2);
	assert_int_equal(b->ops->next_deadline_ns(b), 0);
	recv_setup(d, 3, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 3), 1); /* found data, then emptied it */
	assert_int_equal(b->ops->next_deadline_ns(b), UINT64_MAX);
	assert_int_equal(a->ops->send_burst(a, 0, o, 1), 1);
	keel_shm_stats_get(a, &st);
	assert_int_equal(st.doorbells_sent, 1);
	p = (struct pollfd){.fd = b->ops->wait_fd(b), .events = POLLIN};
	assert_int_equal(poll(&p, 1, 1000), 1);
	recv_setup(d, 3, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 3), 1);
	assert_int_equal(poll(&p, 1, 0), 0); /* the doorbell was drained */
	a->ops->fini(a);
	b->ops->fini(b);
	munmap(reg, cfg.region_len);
}

/* A caller that arms before it blocks: records sent while it spins ring no doorbell (rx_ready
 * sees them), a record sent after the arm rings one, and an arm with a record waiting says so. */
static void test_shm_caller_arms(void **state)
{
	struct keel_shm_config cfg;
	struct keel_datagram o, d[2];
	struct keel_shm_stats st;
	struct pollfd p;
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	void *reg = region_new(&cfg);
	struct keel_transport *a = shm_open_rank(0, &cfg, 0), *b = shm_open_rank(1, &cfg, 1);

	p = (struct pollfd){.fd = b->ops->wait_fd(b), .events = POLLIN};
	assert_false(b->ops->rx_ready(b));
	assert_true(b->ops->arm_wait(b)); /* nothing there: block */
	o = out_make(0, 1, 16, 1);
	assert_int_equal(a->ops->send_burst(a, 0, &o, 1), 1);
	keel_shm_stats_get(a, &st);
	assert_int_equal(st.doorbells_sent, 1);
	assert_int_equal(poll(&p, 1, 1000), 1);
	assert_true(b->ops->rx_ready(b));
	assert_false(b->ops->arm_wait(b)); /* a record waits: do not block */
	recv_setup(d, 2, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 2), 1);
	assert_int_equal(check(d[0].buf, 16, 1), 0);
	assert_int_equal(poll(&p, 1, 0), 0); /* drained */
	assert_false(b->ops->rx_ready(b));
	/* Awake and spinning: the next records ring nothing, and rx_ready sees them. */
	for (uint32_t i = 2; i < 5; i++) {
		o = out_make(0, 1, 16, i);
		assert_int_equal(a->ops->send_burst(a, 0, &o, 1), 1);
		assert_true(b->ops->rx_ready(b));
		recv_setup(d, 2, SMALL_MTU);
		assert_int_equal(b->ops->recv_burst(b, 0, d, 2), 1);
		assert_int_equal(check(d[0].buf, 16, i), 0);
	}
	keel_shm_stats_get(a, &st);
	assert_int_equal(st.doorbells_sent, 1);
	assert_int_equal(poll(&p, 1, 0), 0);
	/* Armed again: the next one rings. */
	assert_true(b->ops->arm_wait(b));
	o = out_make(0, 1, 16, 9);
	assert_int_equal(a->ops->send_burst(a, 0, &o, 1), 1);
	keel_shm_stats_get(a, &st);
	assert_int_equal(st.doorbells_sent, 2);
	assert_int_equal(poll(&p, 1, 1000), 1);
	a->ops->fini(a);
	b->ops->fini(b);
	munmap(reg, cfg.region_len);
}

/* The largest datagram, an empty one, one too large, and one too long for its buffer. */
static void test_shm_mtu_and_empty(void **state)
{
	struct keel_shm_config cfg;
	struct keel_datagram o[3], d[3];
	struct keel_shm_stats st;
	(void)state;
	cfg_make(&cfg, 2, KEEL_MTU_MAX, 1u << 18);
	void *reg = region_new(&cfg);
	struct keel_transport *a = shm_open_rank(0, &cfg, 0), *b = shm_open_rank(1, &cfg, 1);

	o[0] = out_make(0, 1, KEEL_MTU_MAX, 1);
	o[1] = (struct keel_datagram){.buf = NULL, .len = 0, .peer = 1};
	o[2] = out_make(2, 1, KEEL_MTU_MAX, 2);
	o[2].len = KEEL_MTU_MAX + 1;
	assert_int_equal(a->ops->send_burst(a, 0, o, 3), 2); /* stops at the oversized one */
	assert_int_equal(a->ops->send_burst(a, 0, o + 2, 1), -EINVAL);
	recv_setup(d, 3, KEEL_MTU_MAX);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 3), 2);
	assert_int_equal(d[0].len, KEEL_MTU_MAX);
	assert_int_equal(check(d[0].buf, KEEL_MTU_MAX, 1), 0);
	assert_int_equal(d[1].len, 0);
	o[0] = out_make(0, 1, 300, 3);
	o[1] = out_make(1, 1, 100, 4);
	assert_int_equal(a->ops->send_burst(a, 0, o, 2), 2);
	recv_setup(d, 3, 200);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 3), 1); /* 300 > cap 200: dropped */
	assert_int_equal(d[0].len, 100);
	keel_shm_stats_get(b, &st);
	assert_int_equal(st.rx_truncated, 1);
	a->ops->fini(a);
	b->ops->fini(b);
	munmap(reg, cfg.region_len);
}

/* Bad peers and configurations are refused with -EINVAL; small memory with -ENOSPC. */
static void test_shm_bad_config(void **state)
{
	struct keel_shm_config cfg;
	struct keel_transport *t = (struct keel_transport *)1;
	struct keel_datagram o;
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, 1000);
	assert_int_equal(keel_shm_storage_size(&cfg), 0); /* not a power of two */
	assert_int_equal(keel_shm_init(&t, g_mem[0], MEM_BYTES, &cfg), -EINVAL);
	assert_null(t);
	cfg_make(&cfg, 2, SMALL_MTU, 512); /* two records do not fit */
	assert_int_equal(keel_shm_region_size(&cfg), 0);
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	cfg.name = "no-slash";
	assert_int_equal(keel_shm_storage_size(&cfg), 0);
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	assert_int_equal(keel_shm_init(&t, g_mem[0], 8, &cfg), -ENOSPC);
	void *reg = region_new(&cfg);
	cfg.region_len = 64; /* too small */
	assert_int_equal(keel_shm_init(&t, g_mem[0], MEM_BYTES, &cfg), -EINVAL);
	cfg.region_len = keel_shm_region_size(&cfg);
	t = shm_open_rank(0, &cfg, 0);
	o = out_make(0, 0, 10, 0); /* to itself */
	assert_int_equal(t->ops->send_burst(t, 0, &o, 1), -EINVAL);
	o.peer = 2;
	assert_int_equal(t->ops->send_burst(t, 0, &o, 1), -EINVAL);
	/* The same rank twice on one host: its doorbell is taken. */
	struct keel_transport *t2 = NULL;
	assert_int_equal(keel_shm_init(&t2, g_mem[1], MEM_BYTES, &cfg), -EADDRINUSE);
	t->ops->fini(t);
	t->ops->fini(t); /* twice is safe */
	assert_int_equal(t->ops->send_burst(t, 0, &o, 1), KEEL_ETRANSPORT);
	munmap(reg, cfg.region_len);
}

/* Datagrams for several peers in one burst keep their order per peer. */
static void test_shm_burst_in_order(void **state)
{
	struct keel_shm_config cfg;
	struct keel_datagram o[BURST], d[BURST];
	struct keel_transport *t[3];
	(void)state;
	cfg_make(&cfg, 3, 1024, 1u << 16);
	assert_true(cfg.reliable); /* the default: the caps say so (shm_open_rank checks them) */
	void *reg = region_new(&cfg);
	for (uint32_t r = 0; r < 3; r++)
		t[r] = shm_open_rank((int)r, &cfg, r);
	for (uint32_t r = 0; r < 3; r++)
		assert_int_equal(keel_shm_attach(t[r]), 0);
	for (uint32_t i = 0; i < BURST; i++)
		o[i] = out_make(i, 1 + (i / 4) % 2, 4 + i, i); /* runs of 4 for 1, then 2, ... */
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, o, BURST), BURST);
	for (uint32_t r = 1; r < 3; r++) {
		uint32_t last = 0, n;

		recv_setup(d, BURST, 1024);
		n = (uint32_t)t[r]->ops->recv_burst(t[r], 0, d, BURST);
		assert_int_equal(n, BURST / 2);
		for (uint32_t i = 0; i < n; i++) {
			uint32_t seq = d[i].len - 4;

			assert_int_equal(d[i].peer, 0);
			assert_int_equal(1 + (seq / 4) % 2, r);
			assert_true(i == 0 || seq > last);
			assert_int_equal(check(d[i].buf, d[i].len, seq), 0);
			last = seq;
		}
	}
	for (uint32_t r = 0; r < 3; r++)
		t[r]->ops->fini(t[r]);
	munmap(reg, cfg.region_len);
}

/* Take everything waiting for rank r and check it against what was sent to it, in order. */
static void drain_expected(struct keel_transport *t, uint32_t r, const uint32_t *seqs,
			   const uint32_t *lens, uint32_t sent, uint32_t *got)
{
	struct keel_datagram d[BURST];
	int n;

	do {
		recv_setup(d, BURST, KEEL_MTU_MAX);
		n = t->ops->recv_burst(t, 0, d, BURST);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++, (*got)++) {
			assert_true(*got < sent);
			assert_int_equal(d[i].peer, 0);
			assert_int_equal(d[i].len, lens[*got]);
			assert_int_equal(check(d[i].buf, d[i].len, seqs[*got]), 0);
		}
	} while (n > 0);
	(void)r;
}

#define STAGED_SENDS 6000u

/* Runs of small records for one receiver go into the ring in one piece (stage_runs): every
 * record arrives whole and in order at every ring position (the ring wraps, runs are cut by a
 * full ring), whatever the run mixes: one-piece and two-piece datagrams, records too large to
 * stage between small ones, more small ones than the stage holds. The same with staging off,
 * which then copies nothing through the stage. */
static void test_shm_staged_runs(void **state)
{
	static uint32_t seqs[3][STAGED_SENDS], lens[3][STAGED_SENDS];
	struct keel_shm_config cfg;
	struct keel_datagram o[BURST];
	struct keel_transport *t[3];
	struct keel_shm_stats st;
	(void)state;
	for (int staged = 0; staged < 2; staged++) {
		uint32_t sent[3] = {0}, got[3] = {0}, seq = 0;

		cfg_make(&cfg, 3, 9000, 1u << 17);
		cfg.stage_runs = staged == 1;
		void *reg = region_new(&cfg);
		for (uint32_t r = 0; r < 3; r++)
			t[r] = shm_open_rank((int)r, &cfg, r);
		for (uint32_t r = 0; r < 3; r++)
			assert_int_equal(keel_shm_attach(t[r]), 0);
		for (uint32_t round = 0; seq + BURST <= STAGED_SENDS; round++) {
			uint32_t n = 1 + (round * 7) % BURST, done = 0;

			for (uint32_t i = 0; i < n; i++, seq++) {
				/* runs of 1 to 5 for one receiver; one record in 7 too large to
				 * stage; every third in two pieces */
				uint32_t to = 1 + (round + i / (1 + round % 5)) % 2;
				uint32_t len = seq % 7 == 3 ? 4096 + (seq * 977) % 4904
							    : 1 + (seq * 53) % 4000;
				uint32_t cut = seq % 3 == 0 ? (seq * 13) % len : 0;

				o[i] = out_make(i, to, len, seq);
				if (cut > 0) {
					o[i].len = cut;
					o[i].tail = g_out[i] + cut;
					o[i].tail_len = len - cut;
				}
				seqs[to][sent[to]] = seq;
				lens[to][sent[to]++] = len;
			}
			/* 32 records of up to 9 000 bytes outgrow the ring: the receivers drain */
			for (uint32_t tries = 0; done < n; tries++) {
				int k = t[0]->ops->send_burst(t[0], 0, o + done, n - done);

				assert_true(k >= 0 && tries < 4 * BURST);
				done += (uint32_t)k;
				for (uint32_t r = 1; r < 3; r++)
					drain_expected(t[r], r, seqs[r], lens[r], sent[r], &got[r]);
			}
		}
		for (uint32_t r = 1; r < 3; r++) {
			drain_expected(t[r], r, seqs[r], lens[r], sent[r], &got[r]);
			assert_int_equal(got[r], sent[r]);
		}
		keel_shm_stats_get(t[0], &st);
		assert_int_equal(st.tx_datagrams, seq);
		if (staged)
			assert_true(st.tx_staged_runs > 100);
		else
			assert_int_equal(st.tx_staged_runs, 0);
		for (uint32_t r = 0; r < 3; r++)
			t[r]->ops->fini(t[r]);
		munmap(reg, cfg.region_len);
	}
}

/* attach waits for every peer's rings; a named region is created once and checked after. */
static void test_shm_named_region_attach(void **state)
{
	struct keel_shm_config cfg, other;
	struct keel_transport *a, *b, *c = NULL;
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	a = shm_open_rank(0, &cfg, 0);
	assert_int_equal(keel_shm_attach(a), -EAGAIN);
	b = shm_open_rank(1, &cfg, 1);
	assert_int_equal(keel_shm_attach(a), 0);
	assert_int_equal(keel_shm_attach(b), 0);
	other = cfg;
	other.world_size = 3;
	other.rank = 2;
	assert_int_equal(keel_shm_init(&c, g_mem[2], MEM_BYTES, &other), -EINVAL);
	assert_null(c);
	struct keel_datagram o = out_make(0, 1, 50, 9), d[1];
	assert_int_equal(a->ops->send_burst(a, 0, &o, 1), 1);
	recv_setup(d, 1, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 1), 1);
	assert_int_equal(check(d[0].buf, 50, 9), 0);
	a->ops->fini(a);
	b->ops->fini(b);
	assert_int_equal(keel_shm_unlink(cfg.name), 0);
	assert_int_equal(keel_shm_unlink(cfg.name), -ENOENT);
}

/* A name made first by someone else, or open to others: the rings are trusted without CRC
 * or MAC, so init refuses it (-EACCES) and leaves it as it was. Another user's is tried only
 * where this process may give a file away (root). */
static void test_shm_region_of_others_refused(void **state)
{
	struct keel_shm_config cfg;
	struct keel_transport *t = NULL;
	struct stat st;
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	for (int how = 0; how < 3; how++) {
		int fd = shm_open(cfg.name, O_RDWR | O_CREAT | O_EXCL, 0600);
		assert_true(fd >= 0);
		if (how == 0)
			assert_int_equal(fchmod(fd, 0640), 0); /* the group may read it */
		else if (how == 1)
			assert_int_equal(fchmod(fd, 0606), 0); /* others may write it */
		else if (geteuid() != 0 || fchown(fd, 65534, 65534) != 0) {
			printf("# another user's region: not tried (not root)\n");
			close(fd);
			assert_int_equal(keel_shm_unlink(cfg.name), 0);
			continue;
		}
		assert_int_equal(keel_shm_init(&t, g_mem[0], MEM_BYTES, &cfg), -EACCES);
		assert_null(t);
		assert_int_equal(fstat(fd, &st), 0);
		assert_int_equal(st.st_size, 0); /* not sized, not touched */
		close(fd);
		assert_int_equal(keel_shm_unlink(cfg.name), 0);
	}
	/* this user's, closed to others: taken */
	t = shm_open_rank(0, &cfg, 0);
	assert_non_null(t);
	t->ops->fini(t);
	assert_int_equal(keel_shm_unlink(cfg.name), 0);
}

/* A receiver that restarts (same rank, new life) never reads what was sent to its old life. */
static void test_shm_restarted_receiver(void **state)
{
	struct keel_shm_config cfg;
	struct keel_datagram o[2], d[4];
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	cfg.reliable = false; /* caps KEEL_CAP_ORDERED alone (shm_open_rank checks them) */
	void *reg = region_new(&cfg);
	struct keel_transport *a = shm_open_rank(0, &cfg, 0), *b = shm_open_rank(1, &cfg, 1);

	o[0] = out_make(0, 1, 40, 1);
	o[1] = out_make(1, 1, 40, 2);
	assert_int_equal(a->ops->send_burst(a, 0, o, 2), 2);
	b->ops->fini(b); /* dies with two records unread */
	b = shm_open_rank(1, &cfg, 1);
	assert_int_equal(keel_shm_attach(a), 0);
	recv_setup(d, 4, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 4), 0);
	o[0] = out_make(0, 1, 41, 7);
	assert_int_equal(a->ops->send_burst(a, 0, o, 1), 1);
	recv_setup(d, 4, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 4), 1);
	assert_int_equal(d[0].len, 41);
	assert_int_equal(check(d[0].buf, 41, 7), 0);
	a->ops->fini(a);
	b->ops->fini(b);
	munmap(reg, cfg.region_len);
}

/* A transport started over memory that an earlier one used (a rank restarted in the same
 * arena) reads the receiver's head before it trusts any room: the head an earlier life saw, on
 * another region whose ring had the same generation, must not let it write over records its
 * receiver has not read. */
static void test_shm_sender_memory_reused(void **state)
{
	struct keel_shm_config cfg;
	struct keel_datagram o[3], d[4];
	(void)state;
	/* Life 1, region 1: rank 0 sees its receiver's head at 528 (two records of 264 bytes). */
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	void *reg1 = region_new(&cfg);
	struct keel_transport *a = shm_open_rank(0, &cfg, 0), *b = shm_open_rank(1, &cfg, 1);
	for (uint32_t i = 0; i < 3; i++)
		o[i] = out_make(i, 1, SMALL_MTU, i);
	assert_int_equal(a->ops->send_burst(a, 0, o, 2), 2);
	recv_setup(d, 4, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 4), 2);
	assert_int_equal(a->ops->send_burst(a, 0, o, 3), 3); /* reads the head: 528 */
	a->ops->fini(a);
	b->ops->fini(b);
	munmap(reg1, cfg.region_len);

	/* Region 2: another sender leaves two records unread in rank 1's ring from rank 0 (the
	 * same generation as before, 1), then rank 0 starts again in life 1's memory. */
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	void *reg2 = region_new(&cfg);
	b = shm_open_rank(1, &cfg, 1);
	struct keel_transport *c = shm_open_rank(2, &cfg, 0);
	o[0] = out_make(0, 1, SMALL_MTU, 10);
	o[1] = out_make(1, 1, SMALL_MTU, 11);
	assert_int_equal(c->ops->send_burst(c, 0, o, 2), 2);
	c->ops->fini(c);
	a = shm_open_rank(0, &cfg, 0);
	for (uint32_t i = 0; i < 3; i++)
		o[i] = out_make(i, 1, SMALL_MTU, 20 + i);
	assert_int_equal(a->ops->send_burst(a, 0, o, 3), 1); /* room for one: 1024 - 528 */
	recv_setup(d, 4, SMALL_MTU);
	assert_int_equal(b->ops->recv_burst(b, 0, d, 4), 3);
	assert_int_equal(check(d[0].buf, SMALL_MTU, 10), 0);
	assert_int_equal(check(d[1].buf, SMALL_MTU, 11), 0);
	assert_int_equal(check(d[2].buf, SMALL_MTU, 20), 0);
	a->ops->fini(a);
	b->ops->fini(b);
	munmap(reg2, cfg.region_len);
}

/* FNV-1a over the payload after the 8-byte header (seq, hash). */
static uint32_t fnv(const uint8_t *p, uint32_t n)
{
	uint32_t h = 2166136261u;

	for (uint32_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

static uint32_t xlen(uint32_t seq)
{
	return 8 + (seq * 131u) % 4000u;
}

static void xfill(uint8_t *buf, uint32_t seq, uint32_t rank)
{
	uint32_t len = xlen(seq), h;

	for (uint32_t i = 8; i < len; i++)
		buf[i] = (uint8_t)(seq * 7 + i + rank);
	h = fnv(buf + 8, len - 8);
	memcpy(buf, &seq, 4);
	memcpy(buf + 4, &h, 4);
}

static bool g_lend; /* exchange takes lent buffers */

/* Returns how many in-order datagrams with good checksums arrived; -1 on a bad one. */
static int xrecv(struct keel_transport *t, uint32_t *next)
{
	struct keel_datagram d[BURST];
	int n;

	recv_setup(d, BURST, 4096);
	for (uint32_t i = 0; g_lend && i < BURST; i++)
		d[i].flags = KEEL_DGRAM_LEND;
	n = t->ops->recv_burst(t, 0, d, BURST);
	for (int i = 0; i < n; i++) {
		uint32_t seq, h;

		memcpy(&seq, d[i].buf, 4);
		memcpy(&h, d[i].buf + 4, 4);
		if (seq != *next || d[i].len != xlen(seq) || h != fnv(d[i].buf + 8, d[i].len - 8))
			return -1;
		(*next)++;
	}
	return n;
}

static bool g_arm;	    /* exchange arms before each sleep (the waiter's way) */
static uint32_t g_timeouts; /* sleeps that ran out: with g_arm, a lost wake-up */

/* Both directions at once until each side sent and received EXCHANGE; idle sides sleep on
 * the doorbell (10 ms; with g_arm, a side with nothing left to send arms and sleeps 2 s).
 * Returns 0 on success. */
static int exchange(struct keel_transport *t)
{
	struct keel_datagram o[BURST];
	uint32_t sent = 0, next = 0, peer = 1 - t->rank;
	struct pollfd p = {.fd = t->ops->wait_fd(t), .events = POLLIN};

	while (keel_shm_attach(t) == -EAGAIN)
		usleep(1000);
	while (sent < EXCHANGE || next < EXCHANGE) {
		uint32_t n = EXCHANGE - sent < BURST ? EXCHANGE - sent : BURST;
		int s, r;

		for (uint32_t i = 0; i < n; i++) {
			xfill(g_out[i], sent + i, t->rank);
			o[i] = (struct keel_datagram){
			    .buf = g_out[i], .len = xlen(sent + i), .peer = peer};
		}
		s = n > 0 ? t->ops->send_burst(t, 0, o, n) : 0;
		r = xrecv(t, &next);
		if (s < 0 || r < 0)
			return -1;
		sent += (uint32_t)s;
		if (s != 0 || r != 0)
			continue;
		/* Waiting for room in a full ring: no doorbell announces it, so a short sleep. */
		bool for_input = g_arm && n == 0;
		if (for_input && !t->ops->arm_wait(t))
			continue;
		int rc = poll(&p, 1, for_input ? 2000 : 10);
		if (rc < 0)
			return -1;
		g_timeouts += for_input && rc == 0;
	}
	return 0;
}

/* fn as rank 1 in a forked child and as rank 0 here, over one region: both must return 0
 * (-1: a wrong datagram; n > 0: n sleeps that ran out). Returns rank 0's transport (the caller
 * reads its stats, then finis it and unmaps *reg). */
static struct keel_transport *both_ranks(struct keel_shm_config *cfg, void **reg,
					 int (*fn)(struct keel_transport *t))
{
	int status;
	*reg = region_new(cfg);
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(60);
		int rc = fn(shm_open_rank(1, cfg, 1));
		_exit(rc < 0 ? 100 : rc > 99 ? 99 : rc);
	}
	struct keel_transport *t = shm_open_rank(0, cfg, 0);
	assert_int_equal(fn(t), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0); /* 100: a bad datagram; else lost wake-ups */
	return t;
}

/* exchange, and with g_arm the sleeps that ran out (each a lost wake-up) */
static int exchange_checked(struct keel_transport *t)
{
	return exchange(t) != 0 ? -1 : g_arm ? (int)g_timeouts : 0;
}

static void fork_exchange(bool arm, bool lend)
{
	struct keel_shm_config cfg;
	struct keel_shm_stats st;
	void *reg;

	g_arm = arm;
	g_lend = lend;
	g_timeouts = 0;
	cfg_make(&cfg, 2, 4096, 1u << 16);
	struct keel_transport *t = both_ranks(&cfg, &reg, exchange_checked);
	keel_shm_stats_get(t, &st);
	assert_int_equal(st.rx_datagrams, EXCHANGE);
	assert_int_equal(st.tx_datagrams, EXCHANGE);
	printf("fork exchange%s%s: %llu ring-full bursts, %llu doorbells sent, %u sleeps ran out\n",
	       arm ? " (caller arms)" : "", lend ? " (lent buffers)" : "",
	       (unsigned long long)st.tx_ring_full, (unsigned long long)st.doorbells_sent,
	       g_timeouts);
	if (arm)
		assert_int_equal(g_timeouts, 0); /* a sleep of 2 s ran out: a wake-up was lost */
	t->ops->fini(t);
	munmap(reg, cfg.region_len);
}

static void test_shm_fork_exchange(void **state)
{
	(void)state;
	fork_exchange(false, false);
}

/* The same with each side arming before it sleeps: no wake-up is ever lost. */
static void test_shm_fork_exchange_caller_arms(void **state)
{
	(void)state;
	fork_exchange(true, false);
}

/* The same, receiving in place: a sender never writes over bytes the receiver still reads. */
static void test_shm_fork_exchange_lent(void **state)
{
	(void)state;
	fork_exchange(true, true);
}

#define PINGS 20000u

/* Rank 0 sends ping i, rank 1 answers it; each side arms and sleeps (up to 2 s) whenever its
 * ring is empty, so every sleep waits for input and a lost wake-up shows as a sleep that ran
 * out. Returns the number of such sleeps, or -1 on a wrong or missing datagram. */
static int ping_pong(struct keel_transport *t)
{
	struct pollfd p = {.fd = t->ops->wait_fd(t), .events = POLLIN};
	struct keel_datagram d[BURST], o;
	int timeouts = 0;

	while (keel_shm_attach(t) == -EAGAIN)
		usleep(1000);
	for (uint32_t i = 0; i < PINGS; i++) {
		if (t->rank == 0) {
			o = out_make(0, 1, 24, i);
			if (t->ops->send_burst(t, 0, &o, 1) != 1)
				return -1;
		}
		int n = 0;
		for (uint32_t waits = 0; n == 0 && waits < 4; waits++) {
			recv_setup(d, BURST, SMALL_MTU);
			n = t->ops->recv_burst(t, 0, d, BURST);
			if (n == 0 && t->ops->arm_wait(t))
				timeouts += poll(&p, 1, 2000) == 0;
		}
		if (n != 1 || check(d[0].buf, 24, i) != 0)
			return -1;
		if (t->rank == 1) {
			o = out_make(0, 0, 24, i);
			if (t->ops->send_burst(t, 0, &o, 1) != 1)
				return -1;
		}
	}
	return timeouts;
}

/* Every wait of a ping-pong between two processes is armed: none is lost. */
static void test_shm_ping_pong_caller_arms(void **state)
{
	struct keel_shm_config cfg;
	struct keel_shm_stats st;
	void *reg;
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	struct keel_transport *t = both_ranks(&cfg, &reg, ping_pong);
	keel_shm_stats_get(t, &st);
	printf("ping-pong: %u round trips, %llu doorbells sent by rank 0\n", PINGS,
	       (unsigned long long)st.doorbells_sent);
	t->ops->fini(t);
	munmap(reg, cfg.region_len);
}

/* A receiver blocked in poll on wait_fd is woken by a sender in another process. */
static void test_shm_sleeper_woken(void **state)
{
	struct keel_shm_config cfg;
	struct keel_shm_stats st;
	int fds[2], status;
	char c;
	(void)state;
	cfg_make(&cfg, 2, SMALL_MTU, SMALL_RING);
	void *reg = region_new(&cfg);
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct keel_datagram d[1];
		alarm(20);
		struct keel_transport *t = shm_open_rank(1, &cfg, 1);
		struct pollfd p = {.fd = t->ops->wait_fd(t), .events = POLLIN};
		recv_setup(d, 1, SMALL_MTU);
		if (t->ops->recv_burst(t, 0, d, 1) != 0 || write(fds[1], "r", 1) != 1)
			_exit(2);
		if (poll(&p, 1, 10000) != 1) /* only the doorbell can end this early */
			_exit(3);
		recv_setup(d, 1, SMALL_MTU);
		_exit(t->ops->recv_burst(t, 0, d, 1) == 1 && check(d[0].buf, 20, 5) == 0 ? 0 : 4);
	}
	struct keel_transport *t = shm_open_rank(0, &cfg, 0);
	assert_int_equal(read(fds[0], &c, 1), 1); /* the child found its ring empty */
	usleep(50000);				  /* and is asleep in poll by now */
	struct keel_datagram o = out_make(0, 1, 20, 5);
	assert_int_equal(t->ops->send_burst(t, 0, &o, 1), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	keel_shm_stats_get(t, &st);
	assert_int_equal(st.doorbells_sent, 1);
	/* A second datagram finds the ring no longer marked sleeping: no doorbell. */
	assert_int_equal(t->ops->send_burst(t, 0, &o, 1), 1);
	keel_shm_stats_get(t, &st);
	assert_int_equal(st.doorbells_sent, 1);
	close(fds[0]);
	close(fds[1]);
	t->ops->fini(t);
	munmap(reg, cfg.region_len);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_shm_wrap_around),
	    cmocka_unit_test(test_shm_two_pieces),
	    cmocka_unit_test(test_shm_full_ring_partial),
	    cmocka_unit_test(test_shm_lent_in_place),
	    cmocka_unit_test(test_shm_mtu_and_empty),
	    cmocka_unit_test(test_shm_bad_config),
	    cmocka_unit_test(test_shm_burst_in_order),
	    cmocka_unit_test(test_shm_staged_runs),
	    cmocka_unit_test(test_shm_named_region_attach),
	    cmocka_unit_test(test_shm_region_of_others_refused),
	    cmocka_unit_test(test_shm_restarted_receiver),
	    cmocka_unit_test(test_shm_sender_memory_reused),
	    cmocka_unit_test(test_shm_fork_exchange),
	    cmocka_unit_test(test_shm_fork_exchange_caller_arms),
	    cmocka_unit_test(test_shm_fork_exchange_lent),
	    cmocka_unit_test(test_shm_caller_arms),
	    cmocka_unit_test(test_shm_ping_pong_caller_arms),
	    cmocka_unit_test(test_shm_recv_leaves_rings_armed),
	    cmocka_unit_test(test_shm_sleeper_woken),
	    cmocka_unit_test(test_shm_full_ring_drops_control),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
