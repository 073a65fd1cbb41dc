/* Unit tests for the DPDK transport over net_ring: two ethdev ports joined by two rte_rings in
 * one process (rank 0 and rank 1), so no NIC, hugepage, namespace or root is needed. Covers the
 * exchange, malformed frames (each counted and dropped), backpressure with heartbeats jumping
 * the queue, and loss accounting. Skips (77) when DPDK is not built in or under a sanitizer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the four headers it needs */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(KEEL_HAVE_DPDK) && !defined(__SANITIZE_ADDRESS__)

#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "keel/limits.h"
#include "keel/transport_dpdk.h"

#define MEM_BYTES (1u << 20)
#define RING_SIZE 64u
#define PQ_MAX	  16u

static _Alignas(64) uint8_t g_mem[2][MEM_BYTES];
static uint8_t g_buf[8][2048];
static struct rte_ring *g_ab, *g_ba; /* frames from rank 0 to rank 1, and back */
static uint16_t g_port[2];
static struct keel_transport *g_t[2];

/* The backend never reads the payload: any bytes will do; the first one marks which kind of
 * datagram the test sent, so the receiving side can tell them apart. */
#define MARK_DATA      0xd0u
#define MARK_HEARTBEAT 0xc0u

static void datagram(uint8_t *b, uint32_t len, uint8_t mark)
{
	memset(b, 0xab, len);
	b[0] = mark;
}

static int setup(void **state)
{
	static unsigned round;
	struct keel_dpdk_config c;
	char name[32];
	int port;

	(void)state;
	snprintf(name, sizeof(name), "ab%u", round);
	g_ab = rte_ring_create(name, RING_SIZE, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
	snprintf(name, sizeof(name), "ba%u", round);
	g_ba = rte_ring_create(name, RING_SIZE, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
	assert_non_null(g_ab);
	assert_non_null(g_ba);
	snprintf(name, sizeof(name), "r0_%u", round);
	port = rte_eth_from_rings(name, &g_ba, 1, &g_ab, 1, 0);
	assert_true(port >= 0);
	g_port[0] = (uint16_t)port;
	snprintf(name, sizeof(name), "r1_%u", round);
	port = rte_eth_from_rings(name, &g_ab, 1, &g_ba, 1, 0);
	assert_true(port >= 0);
	g_port[1] = (uint16_t)port;
	round++;
	for (uint32_t r = 0; r < 2; r++) {
		keel_dpdk_config_default(&c);
		c.rank = r;
		c.world_size = 2;
		c.port_id = g_port[r];
		c.self.ip[0] = 10;
		c.self.ip[3] = (uint8_t)(r + 1);
		c.self.udp_port = 47100;
		c.rx_desc = c.tx_desc = 32;
		c.mbuf_count = 511;
		c.peer_queue_max = PQ_MAX;
		c.ctrl_queue_max = 8;
		c.burst = 8;
		assert_true(keel_dpdk_storage_size(&c) <= MEM_BYTES);
		assert_int_equal(keel_dpdk_init(&g_t[r], g_mem[r], MEM_BYTES, &c), 0);
		assert_int_equal(g_t[r]->mtu, 1500u - 28u);
	}
	for (uint32_t r = 0; r < 2; r++)
		for (uint32_t p = 0; p < 2; p++) {
			struct keel_dpdk_addr a;
			keel_dpdk_local_addr(g_t[p], &a);
			assert_int_equal(keel_dpdk_set_peer(g_t[r], p, &a), 0);
		}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (uint32_t r = 0; r < 2; r++) {
		g_t[r]->ops->fini(g_t[r]);
		g_t[r]->ops->fini(g_t[r]); /* safe twice */
	}
	rte_ring_free(g_ab);
	rte_ring_free(g_ba);
	return 0;
}

static int recv_all(struct keel_transport *t, struct keel_datagram *d, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		d[i].buf = g_buf[i];
		d[i].cap = sizeof(g_buf[i]);
	}
	return t->ops->recv_burst(t, 1, d, n);
}

static void test_dpdk_exchange(void **state)
{
	uint8_t out[1000];
	struct keel_datagram s = {.buf = out, .len = sizeof(out), .peer = 1}, d[8];
	struct keel_dpdk_stats st;

	(void)state;
	datagram(out, sizeof(out), MARK_DATA);
	assert_int_equal(g_t[0]->ops->send_burst(g_t[0], 1, &s, 1), 1);
	assert_int_equal(recv_all(g_t[1], d, 8), 1);
	assert_int_equal(d[0].len, sizeof(out));
	assert_int_equal(d[0].peer, 0);
	assert_memory_equal(d[0].buf, out, sizeof(out));
	keel_dpdk_stats_get(g_t[1], &st);
	assert_int_equal(st.rx_datagrams, 1);
	s.peer = 5;
	assert_int_equal(g_t[0]->ops->send_burst(g_t[0], 1, &s, 1), -EINVAL);
	s.peer = 1;
	s.len = g_t[0]->mtu + 1;
	assert_int_equal(g_t[0]->ops->send_burst(g_t[0], 1, &s, 1), -EINVAL);
}

/* Take the frame rank 0 just sent off the wire, so the test can damage copies of it. */
static struct rte_mbuf *capture_one(void)
{
	uint8_t out[200];
	struct keel_datagram s = {.buf = out, .len = sizeof(out), .peer = 1};
	void *m = NULL;

	datagram(out, sizeof(out), MARK_DATA);
	assert_int_equal(g_t[0]->ops->send_burst(g_t[0], 1, &s, 1), 1);
	assert_int_equal(rte_ring_dequeue(g_ab, &m), 0);
	return m;
}

static void inject(struct rte_mbuf *good, void (*damage)(uint8_t *f, uint32_t *len))
{
	struct rte_mbuf *m = rte_pktmbuf_copy(good, good->pool, 0, UINT32_MAX);
	uint32_t len;

	assert_non_null(m);
	len = rte_pktmbuf_pkt_len(m);
	damage(rte_pktmbuf_mtod(m, uint8_t *), &len);
	rte_pktmbuf_trim(m, (uint16_t)(rte_pktmbuf_pkt_len(m) - len));
	assert_int_equal(rte_ring_enqueue(g_ab, m), 0);
}

static void bad_ethertype(uint8_t *f, uint32_t *len)
{
	(void)len;
	f[12] = 0x86; /* IPv6 */
	f[13] = 0xdd;
}
static void truncated(uint8_t *f, uint32_t *len)
{
	(void)f;
	*len = 30; /* inside the IPv4 header */
}
static void bad_ip_cksum(uint8_t *f, uint32_t *len)
{
	(void)len;
	f[14 + 10] ^= 0x55;
}
static void bad_udp_cksum(uint8_t *f, uint32_t *len)
{
	(void)len;
	f[42 + 100] ^= 0x01; /* payload byte: only the UDP checksum can tell */
}
static void unknown_source(uint8_t *f, uint32_t *len)
{
	(void)len;
	f[34] ^= 0x01;	   /* UDP source port: no peer's */
	f[40] = f[41] = 0; /* no UDP checksum: the source is what must stop it */
}
static void not_udp(uint8_t *f, uint32_t *len)
{
	(void)len;
	f[14 + 9] = 6; /* TCP; the IPv4 checksum is now wrong too, but the protocol comes first */
}

static void test_dpdk_malformed_counted_and_dropped(void **state)
{
	struct rte_mbuf *good = capture_one();
	struct keel_datagram d[8];
	struct keel_dpdk_stats st;

	(void)state;
	inject(good, bad_ethertype);
	inject(good, truncated);
	inject(good, bad_ip_cksum);
	inject(good, bad_udp_cksum);
	inject(good, unknown_source);
	inject(good, not_udp);
	assert_int_equal(rte_ring_enqueue(g_ab, good), 0); /* the untouched one passes */
	assert_int_equal(recv_all(g_t[1], d, 8), 1);
	assert_int_equal(d[0].len, 200);
	keel_dpdk_stats_get(g_t[1], &st);
	assert_int_equal(st.rx_frames, 7);
	assert_int_equal(st.rx_bad_ethertype, 1);
	assert_int_equal(st.rx_truncated, 1);
	assert_int_equal(st.rx_bad_cksum, 2);
	assert_int_equal(st.rx_unknown_source, 1);
	assert_int_equal(st.rx_not_for_us, 1);
	assert_int_equal(st.rx_datagrams, 1);
}

/* The ring holds RING_SIZE - 1 frames and the peer queue PQ_MAX: beyond that the burst is cut
 * short (the vtable's -EAGAIN), nothing accepted is lost, and heartbeats still go first. */
static void test_dpdk_backpressure_heartbeats_jump(void **state)
{
	uint8_t out[300], hb[80];
	struct keel_datagram s[8], d[8];
	struct keel_datagram h = {
	    .buf = hb, .len = sizeof(hb), .peer = 1, .flags = KEEL_DGRAM_CONTROL};
	uint32_t accepted = 0, got = 0, heartbeat_pos = UINT32_MAX;
	struct keel_dpdk_stats st;
	int n;

	(void)state;
	datagram(out, sizeof(out), MARK_DATA);
	datagram(hb, sizeof(hb), MARK_HEARTBEAT);
	for (uint32_t i = 0; i < 8; i++)
		s[i] = (struct keel_datagram){.buf = out, .len = sizeof(out), .peer = 1};
	for (uint32_t round = 0; round < 40; round++) {
		n = g_t[0]->ops->send_burst(g_t[0], 1, s, 8);
		assert_true(n >= 0 && n <= 8);
		accepted += (uint32_t)n;
		if (n < 8)
			break;
	}
	assert_int_equal(accepted, RING_SIZE - 1 + PQ_MAX);
	assert_int_equal(g_t[0]->ops->send_burst(g_t[0], 1, &h, 1), 1); /* its own queue */
	/* Drain: rank 0 pushes its queues whenever it polls; the heartbeat is sent before
	 * the data still queued. */
	for (uint32_t round = 0; round < 100 && got < accepted + 1; round++) {
		n = recv_all(g_t[1], d, 8);
		for (int i = 0; i < n; i++, got++)
			if (d[i].buf[0] == MARK_HEARTBEAT)
				heartbeat_pos = got;
		n = recv_all(g_t[0], d, 8); /* flushes rank 0's queues */
		assert_int_equal(n, 0);
	}
	assert_int_equal(got, accepted + 1);
	assert_true(heartbeat_pos < accepted); /* overtook queued data */
	keel_dpdk_stats_get(g_t[0], &st);
	assert_int_equal(st.tx_queued_max, PQ_MAX);
	assert_true(st.tx_refused > 0);
}

static void test_dpdk_loss_accounting(void **state)
{
	uint8_t out[100], rt[100];
	struct keel_datagram s = {.buf = out, .len = sizeof(out), .peer = 1},
			     r = {.buf = rt,
				  .len = sizeof(rt),
				  .peer = 1,
				  .flags = KEEL_DGRAM_RETRANSMIT},
			     d[8];
	struct keel_dpdk_loss loss;
	struct keel_dpdk_stats st;

	(void)state;
	datagram(out, sizeof(out), MARK_DATA);
	datagram(rt, sizeof(rt), MARK_DATA);
	for (uint32_t i = 0; i < 2000; i++) {
		assert_int_equal(g_t[0]->ops->send_burst(g_t[0], 1, i % 500 == 0 ? &r : &s, 1), 1);
		while (recv_all(g_t[1], d, 8) > 0)
			;
	}
	assert_int_equal(keel_dpdk_loss_get(g_t[0], 1, &loss), 0);
	assert_int_equal(loss.retransmits, 4);
	assert_int_equal(loss.data_sent, 1996);
	/* A control datagram is never data: it counts neither way. */
	s.flags = KEEL_DGRAM_CONTROL;
	assert_int_equal(g_t[0]->ops->send_burst(g_t[0], 1, &s, 1), 1);
	assert_int_equal(keel_dpdk_loss_get(g_t[0], 1, &loss), 0);
	assert_int_equal(loss.data_sent, 1996);
	assert_int_equal(g_t[0]->ops->send_burst(g_t[0], 1, &r, 1), 1);
	assert_int_equal(keel_dpdk_loss_get(g_t[0], 1, &loss), 0);
	assert_int_equal(loss.retransmits, 5);
	assert_true(loss.loss_ppm > KEEL_DPDK_LOSS_ALARM_PPM);
	assert_true(loss.alarm);
	keel_dpdk_stats_get(g_t[0], &st);
	assert_int_equal(st.loss_warnings, 1);
	assert_int_equal(keel_dpdk_loss_get(g_t[0], 2, &loss), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_dpdk_exchange, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dpdk_malformed_counted_and_dropped, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_dpdk_backpressure_heartbeats_jump, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_dpdk_loss_accounting, setup, teardown),
	};
	char args[128], err[256] = "";

	snprintf(args, sizeof(args),
		 "--no-huge --no-pci --no-telemetry -m 64 --log-level=error --file-prefix "
		 "keel_unit_%d",
		 (int)getpid());
	if (keel_dpdk_eal_init(args, err, sizeof(err)) != 0) {
		printf("test_dpdk: skipped, the EAL did not start: %s\n", err);
		return 77;
	}
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	keel_dpdk_eal_cleanup();
	return rc;
}

#else

int main(void)
{
	printf("test_dpdk: skipped (DPDK not built in, or a sanitizer build)\n");
	return 77;
}

#endif
