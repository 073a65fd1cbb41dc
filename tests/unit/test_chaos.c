/* Unit tests for the chaos decorator: over two UDP transports on 127.0.0.1, and over a scripted
 * in-memory inner transport where exact replay and back-pressure need a deterministic inner.
 * Prints its seed first; SEED=n replays a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the four headers it needs */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "keel/limits.h"
#include "keel/transport_chaos.h"
#include "keel/transport_udp.h"

#define MEM_BYTES   (1u << 20)
#define MTU	    1500u
#define BURST	    32u
#define POLL_MS	    20
#define WAIT_ROUNDS 100 /* 2 s at most per wait */
#define NOW0	    1000000000ull
#define SIGMAS	    5.0 /* binomial bounds: a false failure about once in 3.5 million runs */

static uint64_t g_seed;
static _Alignas(64) uint8_t g_mem[4][MEM_BYTES];
static uint8_t g_tx[BURST][MTU];
static uint8_t g_rx[BURST][MTU];

struct pair {
	struct keel_transport *u[2]; /* UDP ranks 0 and 1 */
	struct keel_transport *c;    /* chaos over u[0] */
};

static struct keel_transport *udp_open(int slot, uint32_t rank)
{
	struct keel_transport *t;
	struct keel_udp_config cfg;

	keel_udp_config_default(&cfg);
	cfg.rank = rank;
	cfg.world_size = 2;
	cfg.mtu = MTU;
	assert_int_equal(keel_udp_init(&t, g_mem[slot], MEM_BYTES, &cfg), 0);
	return t;
}

static struct keel_transport *chaos_open(int slot, struct keel_chaos_config *cc,
					 struct keel_transport *inner)
{
	struct keel_transport *c;
	size_t need;

	cc->inner = inner;
	need = keel_chaos_storage_size(cc);
	assert_true(need > 0 && need <= MEM_BYTES);
	assert_int_equal(keel_chaos_init(&c, g_mem[slot], need, cc), 0);
	return c;
}

static void pair_open(struct pair *p, struct keel_chaos_config *cc)
{
	uint32_t i, j;

	for (i = 0; i < 2; i++)
		p->u[i] = udp_open((int)i, i);
	for (i = 0; i < 2; i++) {
		struct sockaddr_storage a;
		socklen_t len;

		assert_int_equal(keel_udp_local_addr(p->u[i], &a, &len), 0);
		for (j = 0; j < 2; j++)
			assert_int_equal(keel_udp_set_peer(p->u[j], i, (struct sockaddr *)&a, len),
					 0);
	}
	p->c = chaos_open(2, cc, p->u[0]);
	assert_int_equal(p->c->mtu, MTU);
	assert_int_equal(p->c->rank, 0);
	assert_int_equal(p->c->world_size, 2);
	assert_int_equal(p->c->ops->wait_fd(p->c), p->u[0]->ops->wait_fd(p->u[0]));
}

static void pair_close(struct pair *p)
{
	p->c->ops->fini(p->c);
	p->u[0]->ops->fini(p->u[0]);
	p->u[1]->ops->fini(p->u[1]);
}

/* Send sequence numbers first..first+n-1 (n <= BURST) to `peer` through t. */
static void send_seqs(struct keel_transport *t, uint64_t now_ns, uint32_t peer, uint32_t first,
		      uint32_t n)
{
	struct keel_datagram d[BURST];
	uint32_t i;

	assert_true(n <= BURST);
	for (i = 0; i < n; i++) {
		uint32_t seq = first + i;

		memset(g_tx[i], (int)(seq & 0xff), 64);
		memcpy(g_tx[i], &seq, sizeof(seq));
		d[i] = (struct keel_datagram){.buf = g_tx[i], .len = 64, .peer = peer};
	}
	assert_int_equal(t->ops->send_burst(t, now_ns, d, n), (int)n);
}

/* Receive until `want` more datagrams have arrived (or 2 s passed); appends their sequence
 * numbers to seqs (which holds seqs_max) and returns how many arrived. want 0 means "expect
 * nothing": wait one poll interval and return whatever came. */
static uint32_t recv_seqs(struct keel_transport *t, uint64_t now_ns, uint32_t want, uint32_t *seqs,
			  uint32_t seqs_max, uint32_t *seqs_count)
{
	struct pollfd p = {.fd = t->ops->wait_fd(t), .events = POLLIN};
	uint32_t got = 0, round;

	for (round = 0; round < WAIT_ROUNDS; round++) {
		struct keel_datagram d[BURST];
		uint32_t i;
		int r;

		for (i = 0; i < BURST; i++)
			d[i] = (struct keel_datagram){.buf = g_rx[i], .cap = MTU};
		r = t->ops->recv_burst(t, now_ns, d, BURST);
		assert_true(r >= 0);
		for (i = 0; i < (uint32_t)r; i++) {
			uint32_t seq;

			assert_int_equal(d[i].len, 64);
			memcpy(&seq, d[i].buf, sizeof(seq));
			assert_int_equal(d[i].buf[63], seq & 0xff);
			if (seqs != NULL && *seqs_count < seqs_max)
				seqs[(*seqs_count)++] = seq;
		}
		got += (uint32_t)r;
		if (r == 0 && (want == 0 || got >= want))
			break;
		if (r == 0)
			(void)poll(&p, 1, POLL_MS);
	}
	if (want == 0)
		(void)poll(&p, 1, POLL_MS);
	return got;
}

static void assert_binomial(uint64_t k, uint64_t n, double p)
{
	double mean = (double)n * p, sd = sqrt((double)n * p * (1.0 - p));

	print_message("  %" PRIu64 " of %" PRIu64 " (expected %.0f +- %.0f)\n", k, n, mean,
		      SIGMAS * sd);
	assert_true((double)k >= mean - SIGMAS * sd && (double)k <= mean + SIGMAS * sd);
}

static void cfg_seeded(struct keel_chaos_config *cc, uint64_t salt)
{
	keel_chaos_config_default(cc);
	cc->seed = g_seed ^ salt;
}

static void test_chaos_no_faults_passes_all(void **state)
{
	static uint32_t seqs[1024];
	struct keel_chaos_config cc;
	struct keel_chaos_stats st;
	struct pair p;
	uint32_t i, n = 0;

	(void)state;
	cfg_seeded(&cc, 1);
	pair_open(&p, &cc);
	assert_int_equal(p.c->caps & (KEEL_CAP_RELIABLE | KEEL_CAP_ORDERED), 0);
	for (i = 0; i < 1024; i += BURST) {
		send_seqs(p.c, NOW0, 1, i, BURST);
		recv_seqs(p.u[1], NOW0, BURST, seqs, 1024, &n);
	}
	assert_int_equal(n, 1024);
	for (i = 0; i < n; i++)
		assert_int_equal(seqs[i], i);
	keel_chaos_stats_get(p.c, &st);
	assert_int_equal(st.passed, 1024);
	assert_int_equal(st.dropped + st.duplicated + st.reordered + st.delayed + st.hold_full, 0);
	assert_int_equal(p.c->ops->next_deadline_ns(p.c), UINT64_MAX);
	pair_close(&p);
}

static void test_chaos_drop_rate(void **state)
{
	const uint32_t n = 20000;
	struct keel_chaos_config cc;
	struct keel_chaos_stats st;
	struct pair p;
	uint32_t i, got = 0, ignored = 0;

	(void)state;
	cfg_seeded(&cc, 2);
	cc.drop_ppm = 100000;
	pair_open(&p, &cc);
	for (i = 0; i < n; i += BURST) {
		uint64_t before;

		keel_chaos_stats_get(p.c, &st);
		before = st.passed;
		send_seqs(p.c, NOW0, 1, i, BURST);
		keel_chaos_stats_get(p.c, &st);
		got += recv_seqs(p.u[1], NOW0, (uint32_t)(st.passed - before), NULL, 0, &ignored);
	}
	keel_chaos_stats_get(p.c, &st);
	assert_binomial(st.dropped, n, 0.1);
	assert_int_equal(st.passed + st.dropped, n);
	assert_int_equal(got, st.passed);
	pair_close(&p);
}

static void test_chaos_dup(void **state)
{
	const uint32_t n = 10000;
	static uint32_t seqs[20000];
	static uint8_t seen[10000];
	struct keel_chaos_config cc;
	struct keel_chaos_stats st;
	struct pair p;
	uint32_t i, count = 0, twice = 0;

	(void)state;
	cfg_seeded(&cc, 3);
	cc.dup_ppm = 50000;
	pair_open(&p, &cc);
	for (i = 0; i < n; i += BURST) {
		uint64_t before;

		keel_chaos_stats_get(p.c, &st);
		before = st.passed;
		send_seqs(p.c, NOW0, 1, i, i + BURST <= n ? BURST : n - i);
		keel_chaos_stats_get(p.c, &st);
		recv_seqs(p.u[1], NOW0, (uint32_t)(st.passed - before), seqs, 20000, &count);
	}
	keel_chaos_stats_get(p.c, &st);
	assert_binomial(st.duplicated, n, 0.05);
	assert_int_equal(count, n + st.duplicated);
	for (i = 0; i < count; i++) {
		assert_true(seqs[i] < n);
		seen[seqs[i]]++;
	}
	for (i = 0; i < n; i++) {
		assert_true(seen[i] == 1 || seen[i] == 2);
		twice += seen[i] == 2;
	}
	assert_int_equal(twice, st.duplicated);
	pair_close(&p);
}

static void test_chaos_reorder(void **state)
{
	const uint32_t n = 2000;
	static uint32_t seqs[2000];
	static uint8_t seen[2000];
	struct keel_chaos_config cc;
	struct keel_chaos_stats st;
	struct pair p;
	uint32_t i, count = 0, inversions = 0;
	uint64_t now = NOW0;

	(void)state;
	cfg_seeded(&cc, 4);
	cc.reorder_ppm = 100000;
	pair_open(&p, &cc);
	for (i = 0; i < n; i += BURST) {
		send_seqs(p.c, now, 1, i, i + BURST <= n ? BURST : n - i);
		recv_seqs(p.u[1], now, 0, seqs, n, &count);
		now += 1000;
	}
	/* A datagram held last in a burst waits for the next call: make one, then collect. */
	assert_true(p.c->ops->next_deadline_ns(p.c) < now ||
		    p.c->ops->next_deadline_ns(p.c) == UINT64_MAX);
	assert_int_equal(p.c->ops->send_burst(p.c, now, NULL, 0), 0);
	assert_int_equal(p.c->ops->next_deadline_ns(p.c), UINT64_MAX);
	recv_seqs(p.u[1], now, n - count, seqs, n, &count);
	keel_chaos_stats_get(p.c, &st);
	assert_binomial(st.reordered, n, 0.1);
	assert_int_equal(count, n);
	for (i = 0; i < n; i++) {
		assert_int_equal(seen[seqs[i]]++, 0);
		inversions += i > 0 && seqs[i] < seqs[i - 1];
	}
	print_message("  %u inversions\n", inversions);
	assert_true(inversions > 0 && inversions <= st.reordered);
	pair_close(&p);
}

static void test_chaos_delay_until_release(void **state)
{
	static uint32_t seqs[16];
	struct keel_chaos_config cc;
	struct keel_chaos_stats st;
	struct pair p;
	uint64_t dl, prev = NOW0;
	uint32_t count = 0, steps = 0;

	(void)state;
	cfg_seeded(&cc, 5);
	cc.delay_ns_max = 1000000;
	pair_open(&p, &cc);
	send_seqs(p.c, NOW0, 1, 0, 16);
	assert_int_equal(recv_seqs(p.u[1], NOW0, 0, seqs, 16, &count), 0);
	/* Walk the manual clock from one deadline to the next: nothing leaves a tick early, and
	 * something leaves at each deadline. */
	while ((dl = p.c->ops->next_deadline_ns(p.c)) != UINT64_MAX) {
		uint32_t before = count;

		assert_true(dl >= prev && dl <= NOW0 + cc.delay_ns_max);
		assert_true(steps++ < 16);
		if (dl > NOW0) {
			assert_int_equal(p.c->ops->send_burst(p.c, dl - 1, NULL, 0), 0);
			assert_int_equal(recv_seqs(p.u[1], dl - 1, 0, seqs, 16, &count), 0);
		}
		assert_int_equal(p.c->ops->recv_burst(p.c, dl, NULL, 0), 0);
		recv_seqs(p.u[1], dl, 1, seqs, 16, &count);
		assert_true(count > before);
		prev = dl;
	}
	assert_int_equal(count, 16);
	keel_chaos_stats_get(p.c, &st);
	assert_int_equal(st.delayed, 16);
	assert_int_equal(st.passed, 0);
	pair_close(&p);
}

/* Datagrams in two pieces (KEEL_CAP_GATHER passes through the decorator, per peer too): a
 * copy held back is written whole at once, so the caller may write its tail as soon as the
 * send returns; what arrives later is what was sent. Under delay, duplicates and reorder. */
static void test_chaos_two_pieces_held_whole(void **state)
{
	static uint32_t seqs[64];
	static uint8_t tails[16][56];
	struct keel_chaos_config cc;
	struct keel_chaos_stats st;
	struct keel_datagram d[16];
	struct pair p;
	uint64_t dl, last = NOW0;
	uint32_t count = 0, i, steps = 0;

	(void)state;
	cfg_seeded(&cc, 11);
	cc.delay_ns_max = 1000000;
	cc.dup_ppm = 300000;
	cc.reorder_ppm = 300000;
	pair_open(&p, &cc);
	assert_true((p.u[0]->caps & KEEL_CAP_GATHER) != 0);
	assert_true((p.c->caps & KEEL_CAP_GATHER) != 0);
	assert_int_equal(keel_transport_peer_caps(p.c, 1),
			 keel_transport_peer_caps(p.u[0], 1) &
			     ~(uint32_t)(KEEL_CAP_RELIABLE | KEEL_CAP_ORDERED | KEEL_CAP_INTACT));
	for (i = 0; i < 16; i++) {
		memcpy(g_tx[i], &i, sizeof(i));
		memset(g_tx[i] + 4, (int)i, 4);
		memset(tails[i], (int)i, sizeof(tails[i]));
		d[i] = (struct keel_datagram){
		    .buf = g_tx[i], .len = 8, .peer = 1, .tail = tails[i], .tail_len = 56};
	}
	assert_int_equal(p.c->ops->send_burst(p.c, NOW0, d, 16), 16);
	memset(tails, 0xee, sizeof(tails)); /* the caller's buffer, written again */
	while ((dl = p.c->ops->next_deadline_ns(p.c)) != UINT64_MAX) {
		assert_true(steps++ < 64);
		assert_int_equal(p.c->ops->recv_burst(p.c, dl, NULL, 0), 0);
		last = dl;
	}
	keel_chaos_stats_get(p.c, &st);
	recv_seqs(p.u[1], last, 16 + (uint32_t)st.duplicated, seqs, 64, &count);
	assert_int_equal(count, 16 + st.duplicated); /* each with its own bytes (recv_seqs) */
	assert_true(st.delayed + st.reordered > 0);
	pair_close(&p);
}

static void test_chaos_cut_and_heal(void **state)
{
	static uint8_t mem_delay[MEM_BYTES];
	struct keel_chaos_config cc, cd;
	struct keel_chaos_stats st;
	struct keel_transport *delayed;
	struct pair p;
	uint32_t ignored = 0;

	(void)state;
	cfg_seeded(&cc, 6);
	pair_open(&p, &cc);
	assert_int_equal(keel_chaos_cut(p.c, 2, true), -EINVAL);
	assert_int_equal(keel_chaos_cut(p.c, 1, true), 0);
	send_seqs(p.c, NOW0, 1, 0, 8); /* accepted, and dropped */
	assert_int_equal(recv_seqs(p.u[1], NOW0, 0, NULL, 0, &ignored), 0);
	send_seqs(p.u[1], NOW0, 0, 100, 8); /* reaches rank 0's socket, dropped by chaos */
	assert_int_equal(recv_seqs(p.c, NOW0, 0, NULL, 0, &ignored), 0);
	keel_chaos_stats_get(p.c, &st);
	assert_int_equal(st.cut_dropped, 16);
	assert_int_equal(keel_chaos_cut(p.c, 1, false), 0);
	send_seqs(p.c, NOW0, 1, 0, 8);
	assert_int_equal(recv_seqs(p.u[1], NOW0, 8, NULL, 0, &ignored), 8);
	send_seqs(p.u[1], NOW0, 0, 100, 8);
	assert_int_equal(recv_seqs(p.c, NOW0, 8, NULL, 0, &ignored), 8);
	/* A datagram held before the cut is dropped when it comes due during the cut. */
	cfg_seeded(&cd, 7);
	cd.delay_ns_max = 1000;
	cd.inner = p.u[0];
	assert_int_equal(keel_chaos_init(&delayed, mem_delay, sizeof(mem_delay), &cd), 0);
	send_seqs(delayed, NOW0, 1, 0, 4);
	assert_int_equal(keel_chaos_cut(delayed, 1, true), 0);
	assert_int_equal(delayed->ops->send_burst(delayed, NOW0 + 1000, NULL, 0), 0);
	assert_int_equal(recv_seqs(p.u[1], NOW0, 0, NULL, 0, &ignored), 0);
	keel_chaos_stats_get(delayed, &st);
	assert_int_equal(st.cut_dropped, 4);
	assert_int_equal(delayed->ops->next_deadline_ns(delayed), UINT64_MAX);
	delayed->ops->fini(delayed);
	pair_close(&p);
}

static void test_chaos_hold_full(void **state)
{
	struct keel_chaos_config cc;
	struct keel_chaos_stats st;
	struct pair p;
	uint32_t ignored = 0;

	(void)state;
	cfg_seeded(&cc, 8);
	cc.delay_ns_max = 1000000;
	cc.hold_max = 4;
	pair_open(&p, &cc);
	send_seqs(p.c, NOW0, 1, 0, 10);
	keel_chaos_stats_get(p.c, &st);
	assert_int_equal(st.delayed, 4);
	assert_int_equal(st.hold_full, 6);
	assert_int_equal(st.passed, 6);
	assert_int_equal(recv_seqs(p.u[1], NOW0, 6, NULL, 0, &ignored), 6);
	assert_int_equal(p.c->ops->send_burst(p.c, NOW0 + cc.delay_ns_max, NULL, 0), 0);
	assert_int_equal(recv_seqs(p.u[1], NOW0, 4, NULL, 0, &ignored), 4);
	pair_close(&p);
}

static void test_chaos_parse(void **state)
{
	static const char *const bad[] = {
	    "loss=1.5",
	    "loss=-0.1",
	    "loss=",
	    "=1",
	    "loss",
	    "foo=1",
	    "loss=0.1,",
	    ",loss=0.1",
	    "loss=0.1,,dup=0",
	    "seed=abc",
	    "seed=12x",
	    "seed=-1",
	    "seed=+1",
	    "loss=nan",
	    "loss=inf",
	    "seed= 1",
	    "seed=1 ",
	    "hold=65537",
	    "delay_us=99999999999999999999",
	    "delay_us=18446744073709552",
	    "loss=0.1;dup=0.1",
	    "LOSS=0.1",
	};
	struct keel_chaos_config cc, orig;
	size_t i;

	(void)state;
	keel_chaos_config_default(&cc);
	assert_int_equal(
	    keel_chaos_parse("loss=0.01,dup=0.001,reorder=0.01,delay_us=50,seed=7,hold=256", &cc),
	    0);
	assert_int_equal(cc.drop_ppm, 10000);
	assert_int_equal(cc.dup_ppm, 1000);
	assert_int_equal(cc.reorder_ppm, 10000);
	assert_int_equal(cc.delay_ns_max, 50000);
	assert_int_equal(cc.seed, 7);
	assert_int_equal(cc.hold_max, 256);
	assert_int_equal(keel_chaos_parse("hold=0,seed=18446744073709551615,loss=1", &cc), 0);
	assert_int_equal(cc.hold_max, 0);
	assert_int_equal(cc.seed, UINT64_MAX);
	assert_int_equal(cc.drop_ppm, 1000000);
	assert_int_equal(cc.dup_ppm, 1000); /* untouched */
	assert_int_equal(keel_chaos_parse("", &cc), 0);
	assert_int_equal(keel_chaos_parse("reorder=.5", &cc), 0);
	assert_int_equal(cc.reorder_ppm, 500000);
	orig = cc;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (keel_chaos_parse(bad[i], &cc) != -EINVAL)
			fail_msg("accepted bad spec \"%s\"", bad[i]);
		assert_memory_equal(&cc, &orig, sizeof(cc));
	}
	assert_int_equal(keel_chaos_parse(NULL, &cc), -EINVAL);
	assert_int_equal(keel_chaos_parse("seed=1", NULL), -EINVAL);
}

/* A scripted inner transport: accepts up to `accept_per_call` datagrams per send_burst,
 * refuses peer `bad_peer` with -EINVAL, and logs what it was handed. */
struct fake {
	struct keel_transport t;
	uint32_t accept_per_call;
	uint32_t bad_peer;
	uint32_t log_count;
	uint64_t log[4096]; /* now_ns << 24 | peer << 16 | seq */
};

static int fake_send(struct keel_transport *t, uint64_t now_ns, const struct keel_datagram *d,
		     uint32_t count)
{
	struct fake *f = t->state;
	uint32_t i;

	for (i = 0; i < count && i < f->accept_per_call; i++) {
		uint32_t seq;

		if (d[i].peer >= t->world_size || d[i].peer == f->bad_peer)
			return i > 0 ? (int)i : -EINVAL;
		memcpy(&seq, d[i].buf, sizeof(seq));
		assert_true(f->log_count < 4096);
		f->log[f->log_count++] = now_ns << 24 | (uint64_t)d[i].peer << 16 | (seq & 0xffff);
	}
	return (int)i;
}

static int fake_recv(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
		     uint32_t count_max)
{
	(void)t;
	(void)now_ns;
	(void)d;
	(void)count_max;
	return 0;
}

static int fake_wait_fd(struct keel_transport *t)
{
	(void)t;
	return 42;
}

static const struct keel_transport_ops fake_ops = {
    .name = "fake", .send_burst = fake_send, .recv_burst = fake_recv, .wait_fd = fake_wait_fd};

static void fake_init(struct fake *f, uint32_t accept_per_call)
{
	memset(f, 0, sizeof(*f));
	f->t = (struct keel_transport){.ops = &fake_ops,
				       .state = f,
				       .caps = KEEL_CAP_RELIABLE | KEEL_CAP_ORDERED |
					       KEEL_CAP_RDMA_WRITE,
				       .mtu = MTU,
				       .world_size = 4};
	f->accept_per_call = accept_per_call;
	f->bad_peer = UINT32_MAX;
}

struct run {
	struct keel_chaos_stats st;
	int ret[200];
};

/* A fixed script of sends and polls under every fault and back-pressure at once. */
static void scripted_run(struct fake *f, uint64_t seed, struct run *out)
{
	struct keel_chaos_config cc;
	struct keel_transport *c;
	uint64_t now = NOW0;
	uint32_t call, next_seq = 0;

	fake_init(f, 5);
	keel_chaos_config_default(&cc);
	assert_int_equal(keel_chaos_parse("loss=0.1,dup=0.1,reorder=0.2,delay_us=30,hold=16", &cc),
			 0);
	cc.seed = seed;
	c = chaos_open(3, &cc, &f->t);
	for (call = 0; call < 200; call++) {
		uint32_t n = 1 + call % 8;

		if (call % 3 == 2) {
			out->ret[call] = c->ops->recv_burst(c, now, NULL, 0);
		} else {
			struct keel_datagram d[8];
			uint32_t i;

			for (i = 0; i < n; i++) {
				uint32_t seq = next_seq + i;

				memcpy(g_tx[i], &seq, sizeof(seq));
				d[i] = (struct keel_datagram){
				    .buf = g_tx[i], .len = 64, .peer = seq % 4};
			}
			out->ret[call] = c->ops->send_burst(c, now, d, n);
			assert_true(out->ret[call] >= 0 && out->ret[call] <= (int)n);
			next_seq += (uint32_t)out->ret[call];
		}
		now += 7000;
	}
	keel_chaos_stats_get(c, &out->st);
	c->ops->fini(c);
}

static void test_chaos_replay_same_seed(void **state)
{
	static struct fake f1, f2;
	static struct run r1, r2;

	(void)state;
	memset(&r1, 0, sizeof(r1));
	memset(&r2, 0, sizeof(r2));
	scripted_run(&f1, g_seed, &r1);
	scripted_run(&f2, g_seed, &r2);
	assert_true(f1.log_count > 100);
	assert_int_equal(f1.log_count, f2.log_count);
	assert_memory_equal(f1.log, f2.log, f1.log_count * sizeof(f1.log[0]));
	assert_memory_equal(&r1, &r2, sizeof(r1));
	print_message("  %u datagrams out; dropped %" PRIu64 " dup %" PRIu64 " reordered %" PRIu64
		      " delayed %" PRIu64 " hold_full %" PRIu64 "\n",
		      f1.log_count, r1.st.dropped, r1.st.duplicated, r1.st.reordered, r1.st.delayed,
		      r1.st.hold_full);
	scripted_run(&f2, g_seed + 1, &r2);
	assert_true(f1.log_count != f2.log_count ||
		    memcmp(f1.log, f2.log, f1.log_count * sizeof(f1.log[0])) != 0);
}

/* The inner takes 3 per call: the decorator returns the accepted prefix, keeps what it holds,
 * and passes the inner's -EINVAL for a caller's datagram through at the right index. */
static void test_chaos_backpressure(void **state)
{
	static struct fake f;
	struct keel_chaos_config cc;
	struct keel_chaos_stats st;
	struct keel_transport *c;
	struct keel_datagram d[8];
	uint32_t i;

	(void)state;
	fake_init(&f, 3);
	cfg_seeded(&cc, 9);
	c = chaos_open(3, &cc, &f.t);
	for (i = 0; i < 8; i++) {
		memcpy(g_tx[i], &i, sizeof(i));
		d[i] = (struct keel_datagram){.buf = g_tx[i], .len = 64, .peer = 1};
	}
	assert_int_equal(c->ops->send_burst(c, NOW0, d, 8), 3);
	f.bad_peer = 1;
	assert_int_equal(c->ops->send_burst(c, NOW0, d, 8), -EINVAL);
	d[2].peer = 2;
	d[3].peer = 2;
	f.bad_peer = 2;
	assert_int_equal(c->ops->send_burst(c, NOW0, d, 8), 2);
	d[4].peer = 4; /* beyond world_size: the decorator's own check */
	f.bad_peer = UINT32_MAX;
	assert_int_equal(c->ops->send_burst(c, NOW0, d + 4, 4), -EINVAL);
	c->ops->fini(c);

	/* Eight delayed datagrams, three leave per call once due; none is lost. */
	f.log_count = 0;
	cc.delay_ns_max = 1000;
	cc.hold_max = 8;
	c = chaos_open(3, &cc, &f.t);
	d[4].peer = 1;
	for (i = 0; i < 8; i++)
		d[i].peer = 1;
	assert_int_equal(c->ops->send_burst(c, NOW0, d, 8), 8);
	assert_int_equal(f.log_count, 0);
	for (i = 0; i < 3; i++)
		assert_int_equal(c->ops->recv_burst(c, NOW0 + 1000, NULL, 0), 0);
	assert_int_equal(f.log_count, 8);
	assert_int_equal(c->ops->next_deadline_ns(c), UINT64_MAX);
	keel_chaos_stats_get(c, &st);
	assert_int_equal(st.delayed, 8);
	c->ops->fini(c);
}

static void test_chaos_init_errors(void **state)
{
	static struct fake f;
	struct keel_chaos_config cc, bad;
	struct keel_transport *c = (struct keel_transport *)1;
	struct keel_datagram d[1];
	size_t need;

	(void)state;
	fake_init(&f, 100);
	cfg_seeded(&cc, 10);
	cc.inner = &f.t;
	need = keel_chaos_storage_size(&cc);
	assert_true(need >= (size_t)cc.hold_max * MTU);
	bad = cc;
	bad.inner = NULL;
	assert_int_equal(keel_chaos_storage_size(&bad), 0);
	assert_int_equal(keel_chaos_init(&c, g_mem[3], MEM_BYTES, &bad), -EINVAL);
	assert_null(c);
	bad = cc;
	bad.drop_ppm = 1000001;
	assert_int_equal(keel_chaos_init(&c, g_mem[3], MEM_BYTES, &bad), -EINVAL);
	bad = cc;
	bad.dup_ppm = 1000001;
	assert_int_equal(keel_chaos_init(&c, g_mem[3], MEM_BYTES, &bad), -EINVAL);
	bad = cc;
	bad.reorder_ppm = 1000001;
	assert_int_equal(keel_chaos_init(&c, g_mem[3], MEM_BYTES, &bad), -EINVAL);
	bad = cc;
	bad.hold_max = 65537;
	assert_int_equal(keel_chaos_init(&c, g_mem[3], MEM_BYTES, &bad), -EINVAL);
	assert_int_equal(keel_chaos_init(&c, g_mem[3], need - 1, &cc), -ENOSPC);
	assert_int_equal(keel_chaos_init(&c, NULL, need, &cc), -ENOSPC);
	assert_int_equal(keel_chaos_init(&c, g_mem[3] + 5, need, &cc), 0);
	assert_int_equal(c->caps, KEEL_CAP_RDMA_WRITE);
	assert_int_equal(c->ops->wait_fd(c), 42);
	c->ops->fini(c);
	c->ops->fini(c);
	/* The inner is the caller's and still works. */
	memset(g_tx[0], 0, 64);
	d[0] = (struct keel_datagram){.buf = g_tx[0], .len = 64, .peer = 1};
	assert_int_equal(f.t.ops->send_burst(&f.t, NOW0, d, 1), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_chaos_no_faults_passes_all),
	    cmocka_unit_test(test_chaos_drop_rate),
	    cmocka_unit_test(test_chaos_dup),
	    cmocka_unit_test(test_chaos_reorder),
	    cmocka_unit_test(test_chaos_delay_until_release),
	    cmocka_unit_test(test_chaos_two_pieces_held_whole),
	    cmocka_unit_test(test_chaos_cut_and_heal),
	    cmocka_unit_test(test_chaos_hold_full),
	    cmocka_unit_test(test_chaos_parse),
	    cmocka_unit_test(test_chaos_replay_same_seed),
	    cmocka_unit_test(test_chaos_backpressure),
	    cmocka_unit_test(test_chaos_init_errors),
	};
	const char *env = getenv("SEED");

	g_seed = env != NULL ? strtoull(env, NULL, 0)
			     : (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
	printf("seed=%" PRIu64 " (SEED=%" PRIu64 " replays this run)\n", g_seed, g_seed);
	fflush(stdout);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
