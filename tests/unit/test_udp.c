/* Unit tests for the kernel UDP transport. Every socket is bound to loopback (127.0.0.1 or ::1);
 * nothing here reaches another host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the four headers it needs */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "keel/limits.h"
#include "keel/transport_udp.h"

#define MEM_BYTES   (1u << 20)
#define SLOTS	    4
#define POLL_MS	    20
#define WAIT_ROUNDS 100 /* 2 s at most per wait */
#define MTU	    1500u

static _Alignas(64) uint8_t g_mem[SLOTS][MEM_BYTES];
static uint8_t g_bufs[KEEL_BURST_MAX][KEEL_MTU_MAX];

/* sendmmsg interposer: the loopback device never pushes back, so the would-block and the
 * per-datagram error paths are reached by injecting the errno after `allow` datagrams. */
static struct inject {
	int fd;		/* only this socket; -1 disables injection */
	unsigned allow; /* datagrams let through before failing */
	int err;	/* errno to fail with */
	unsigned fails; /* failures left to inject */
} g_inject = {.fd = -1};

int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	if (fd == g_inject.fd && g_inject.fails > 0) {
		if (g_inject.allow == 0) {
			g_inject.fails--;
			errno = g_inject.err;
			return -1;
		}
		if (n > g_inject.allow)
			n = g_inject.allow;
		g_inject.allow -= n;
	}
	return (int)syscall(SYS_sendmmsg, fd, v, n, flags);
}

static void cfg_make(struct keel_udp_config *cfg, uint32_t rank, uint32_t world, const char *host)
{
	keel_udp_config_default(cfg);
	cfg->rank = rank;
	cfg->world_size = world;
	cfg->bind_host = host;
	cfg->mtu = MTU;
}

static struct keel_transport *udp_open(int slot, const struct keel_udp_config *cfg)
{
	struct keel_transport *t = NULL;
	size_t need = keel_udp_storage_size(cfg);

	assert_true(need > 0 && need <= MEM_BYTES);
	assert_int_equal(keel_udp_init(&t, g_mem[slot], need, cfg), 0);
	assert_non_null(t);
	assert_int_equal(t->caps, KEEL_CAP_GATHER);
	assert_int_equal(t->mtu, cfg->mtu);
	assert_true(t->ops->wait_fd(t) >= 0);
	return t;
}

static void udp_close(struct keel_transport *t)
{
	t->ops->fini(t);
}

/* Every transport learns every other's address. */
static void wire_all(struct keel_transport **t, uint32_t n)
{
	uint32_t i, j;

	for (i = 0; i < n; i++) {
		struct sockaddr_storage a;
		socklen_t len;

		assert_int_equal(keel_udp_local_addr(t[i], &a, &len), 0);
		for (j = 0; j < n; j++)
			assert_int_equal(keel_udp_set_peer(t[j], i, (struct sockaddr *)&a, len), 0);
	}
}

static void recv_setup(struct keel_datagram *d, uint32_t n, uint32_t cap)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		d[i] = (struct keel_datagram){.buf = g_bufs[i], .cap = cap};
}

/* Receive until `want` datagrams arrived (or 2 s passed); returns how many. */
static uint32_t recv_wait(struct keel_transport *t, struct keel_datagram *d, uint32_t cap,
			  uint32_t want)
{
	struct pollfd p = {.fd = t->ops->wait_fd(t), .events = POLLIN};
	uint32_t got = 0, round;

	for (round = 0; round < WAIT_ROUNDS && got < want; round++) {
		int r;

		recv_setup(d + got, want - got, cap);
		r = t->ops->recv_burst(t, 0, d + got, want - got);
		assert_true(r >= 0);
		got += (uint32_t)r;
		if (got < want && r == 0)
			(void)poll(&p, 1, POLL_MS);
	}
	return got;
}

static void fill_payload(uint8_t *buf, uint32_t len, uint32_t src, uint32_t dst, uint32_t seq)
{
	uint32_t i;

	for (i = 0; i < len; i++)
		buf[i] = (uint8_t)(src * 31 + dst * 7 + seq * 13 + i);
	if (len >= 3) {
		buf[0] = (uint8_t)src;
		buf[1] = (uint8_t)dst;
		buf[2] = (uint8_t)seq;
	}
}

static void test_udp_exchange_three(void **state)
{
	struct keel_transport *t[3];
	struct keel_udp_config cfg;
	static uint8_t out[3][16][MTU];
	struct keel_datagram d[32];
	uint32_t i, k, n, seen[3][3] = {{0}};

	(void)state;
	for (i = 0; i < 3; i++) {
		cfg_make(&cfg, i, 3, "127.0.0.1");
		t[i] = udp_open((int)i, &cfg);
		assert_int_equal(t[i]->rank, i);
		assert_int_equal(t[i]->world_size, 3);
	}
	wire_all(t, 3);
	for (i = 0; i < 3; i++) {
		for (k = 0; k < 16; k++) {
			uint32_t dst = (i + 1 + k % 2) % 3, len = 3 + k * 97;

			fill_payload(out[i][k], len, i, dst, k);
			d[k] = (struct keel_datagram){.buf = out[i][k], .len = len, .peer = dst};
		}
		assert_int_equal(t[i]->ops->send_burst(t[i], 0, d, 16), 16);
	}
	for (i = 0; i < 3; i++) {
		n = recv_wait(t[i], d, MTU, 16);
		assert_int_equal(n, 16);
		for (k = 0; k < n; k++) {
			uint32_t src = d[k].peer, seq = d[k].buf[2];

			assert_true(src < 3 && src != i);
			assert_int_equal(d[k].buf[0], src);
			assert_int_equal(d[k].buf[1], i);
			assert_int_equal(d[k].len, 3 + seq * 97);
			assert_memory_equal(d[k].buf, out[src][seq], d[k].len);
			seen[i][src]++;
		}
	}
	for (i = 0; i < 3; i++) {
		struct keel_udp_stats st;

		keel_udp_stats_get(t[i], &st);
		assert_int_equal(st.tx_datagrams, 16);
		assert_int_equal(st.rx_datagrams, 16);
		assert_int_equal(seen[i][(i + 1) % 3] + seen[i][(i + 2) % 3], 16);
		udp_close(t[i]);
	}
}

static int plain_socket_to(struct keel_transport *t, const void *buf, size_t len)
{
	struct sockaddr_storage a;
	socklen_t alen;
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	ssize_t r;

	assert_true(fd >= 0);
	assert_int_equal(keel_udp_local_addr(t, &a, &alen), 0);
	r = sendto(fd, buf, len, 0, (struct sockaddr *)&a, alen);
	assert_int_equal(r, (ssize_t)len);
	return fd;
}

static void test_udp_unknown_source_dropped(void **state)
{
	struct keel_transport *t[2];
	struct keel_udp_config cfg;
	struct keel_udp_stats st;
	struct keel_datagram d[4];
	uint8_t msg[40] = "from rank 1";
	int fd;

	(void)state;
	cfg_make(&cfg, 0, 2, NULL);
	t[0] = udp_open(0, &cfg);
	cfg_make(&cfg, 1, 2, NULL);
	t[1] = udp_open(1, &cfg);
	wire_all(t, 2);
	fd = plain_socket_to(t[0], "stranger", 8);
	d[0] = (struct keel_datagram){.buf = msg, .len = sizeof(msg), .peer = 0};
	assert_int_equal(t[1]->ops->send_burst(t[1], 0, d, 1), 1);
	assert_int_equal(recv_wait(t[0], d, MTU, 1), 1);
	assert_int_equal(d[0].peer, 1);
	assert_int_equal(d[0].len, sizeof(msg));
	assert_memory_equal(d[0].buf, msg, sizeof(msg));
	keel_udp_stats_get(t[0], &st);
	assert_int_equal(st.rx_unknown_source, 1);
	assert_int_equal(st.rx_datagrams, 1);
	close(fd);
	udp_close(t[0]);
	udp_close(t[1]);
}

static void test_udp_truncated_dropped(void **state)
{
	struct keel_transport *t[2];
	struct keel_udp_config cfg;
	struct keel_udp_stats st;
	static uint8_t big[1000], small[10] = "small";
	struct keel_datagram d[4];
	uint32_t got = 0, round;

	(void)state;
	cfg_make(&cfg, 0, 2, NULL);
	t[0] = udp_open(0, &cfg);
	cfg_make(&cfg, 1, 2, NULL);
	t[1] = udp_open(1, &cfg);
	wire_all(t, 2);
	d[0] = (struct keel_datagram){.buf = big, .len = sizeof(big), .peer = 0};
	d[1] = (struct keel_datagram){.buf = small, .len = sizeof(small), .peer = 0};
	assert_int_equal(t[1]->ops->send_burst(t[1], 0, d, 2), 2);
	/* Both in one recvmmsg: the truncated one is dropped and the good one moves up. */
	for (round = 0; round < WAIT_ROUNDS && got == 0; round++) {
		recv_setup(d, 4, 100);
		got = (uint32_t)t[0]->ops->recv_burst(t[0], 0, d, 4);
		if (got == 0)
			usleep(1000);
	}
	assert_int_equal(got, 1);
	assert_int_equal(d[0].len, sizeof(small));
	assert_int_equal(d[0].peer, 1);
	assert_memory_equal(d[0].buf, small, sizeof(small));
	assert_true(d[0].buf == g_bufs[0] || d[0].buf == g_bufs[1]); /* buffers exchanged */
	assert_true(d[1].buf == g_bufs[0] || d[1].buf == g_bufs[1]);
	assert_ptr_not_equal(d[0].buf, d[1].buf);
	keel_udp_stats_get(t[0], &st);
	assert_int_equal(st.rx_truncated, 1);
	assert_int_equal(st.rx_datagrams, 1);
	udp_close(t[0]);
	udp_close(t[1]);
}

/* Rank 1 is dead; rank 0 keeps sending to 1 and 2. IP_RECVERR makes the kernel report the
 * ICMP port-unreachable errors on rank 0's later calls, as a connected socket would. */
static void test_udp_dead_peer_does_not_wedge(void **state)
{
	struct keel_transport *t[3];
	struct keel_udp_config cfg;
	struct keel_udp_stats st;
	struct keel_datagram d[16];
	uint8_t msg[64];
	uint32_t i, k, total = 0;
	int one = 1;

	(void)state;
	for (i = 0; i < 3; i++) {
		cfg_make(&cfg, i, 3, NULL);
		t[i] = udp_open((int)i, &cfg);
	}
	wire_all(t, 3);
	udp_close(t[1]);
	assert_int_equal(
	    setsockopt(t[0]->ops->wait_fd(t[0]), IPPROTO_IP, IP_RECVERR, &one, sizeof(one)), 0);
	memset(msg, 0xab, sizeof(msg));
	for (k = 0; k < 16; k++) /* ends on the dead peer: its error shows on the next call */
		d[k] = (struct keel_datagram){.buf = msg, .len = sizeof(msg), .peer = 2 - k % 2};
	for (i = 0; i < 8; i++) {
		struct keel_datagram r[16];

		assert_int_equal(t[0]->ops->send_burst(t[0], 0, d, 16), 16);
		total += recv_wait(t[2], r, MTU, 8);
		/* rank 0's receive side must not report the ICMP error as fatal */
		assert_int_equal(t[0]->ops->recv_burst(t[0], 0, r, 0), 0);
		recv_setup(r, 4, MTU);
		assert_int_equal(t[0]->ops->recv_burst(t[0], 0, r, 4), 0);
	}
	assert_int_equal(total, 64);
	keel_udp_stats_get(t[0], &st);
	print_message("dead peer: tx_errors=%llu tx_datagrams=%llu tx_syscalls=%llu\n",
		      (unsigned long long)st.tx_errors, (unsigned long long)st.tx_datagrams,
		      (unsigned long long)st.tx_syscalls);
	assert_true(st.tx_errors > 0);
	udp_close(t[0]);
	udp_close(t[2]);
}

static void test_udp_bad_config(void **state)
{
	struct keel_transport *t = (struct keel_transport *)1;
	struct keel_udp_config cfg, bad;
	size_t need;

	(void)state;
	cfg_make(&cfg, 0, 2, NULL);
	need = keel_udp_storage_size(&cfg);
	assert_true(need > 0);
	bad = cfg;
	bad.world_size = 0;
	assert_int_equal(keel_udp_storage_size(&bad), 0);
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	assert_null(t);
	bad = cfg;
	bad.world_size = KEEL_WORLD_MAX + 1;
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	bad = cfg;
	bad.rank = 2;
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	bad = cfg;
	bad.mtu = KEEL_MTU_MIN - 1;
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	bad.mtu = KEEL_MTU_MAX + 1;
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	bad = cfg;
	bad.burst = 0;
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	bad.burst = KEEL_BURST_MAX + 1;
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	bad = cfg;
	bad.sockbuf_bytes = -1;
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	bad = cfg;
	bad.bind_host = "localhost"; /* numeric only: no resolver in the runtime */
	assert_int_equal(keel_udp_storage_size(&bad), 0);
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	bad.bind_host = "127.0.0.256";
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	/* pieces: a datagram of mtu bytes must be at most 64 of them (8 + ceil(mtu / 64) bytes
	 * each), a piece at most one UDP datagram, the slots 1..64 */
	bad = cfg;
	bad.mtu = 6400;
	bad.piece_bytes = 8 + 100 - 1;
	assert_int_equal(keel_udp_storage_size(&bad), 0);
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	bad.piece_bytes = 8 + 100;
	assert_true(keel_udp_storage_size(&bad) > 0);
	bad.piece_bytes = 65508;
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	bad.piece_bytes = 1472;
	bad.join_slots = 0;
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	bad.join_slots = 65;
	assert_int_equal(keel_udp_init(&t, g_mem[0], MEM_BYTES, &bad), -EINVAL);
	assert_null(t);
	assert_int_equal(keel_udp_init(&t, g_mem[0], need - 1, &cfg), -ENOSPC);
	assert_int_equal(keel_udp_init(&t, NULL, need, &cfg), -ENOSPC);
	assert_null(t);
	/* Any alignment of mem works with exactly storage_size bytes. */
	assert_int_equal(keel_udp_init(&t, g_mem[0] + 3, need, &cfg), 0);
	/* made without pieces: the piece size cannot be set */
	assert_int_equal(keel_udp_set_piece_bytes(t, 1472), -EINVAL);
	udp_close(t);
	/* made with them: lowered, raised, turned off; never below 8 + mtu / 64 or above 65507 */
	bad = cfg;
	bad.mtu = 8972;
	bad.piece_bytes = 1472;
	t = udp_open(0, &bad);
	assert_int_equal(keel_udp_set_piece_bytes(t, 1200), 0);
	assert_int_equal(keel_udp_set_piece_bytes(t, 9000), 0);
	assert_int_equal(keel_udp_set_piece_bytes(t, 0), 0);
	assert_int_equal(keel_udp_set_piece_bytes(t, 8 + 141 - 1), -EINVAL);
	assert_int_equal(keel_udp_set_piece_bytes(t, 8 + 141), 0);
	assert_int_equal(keel_udp_set_piece_bytes(t, 65508), -EINVAL);
	udp_close(t);
}

static void test_udp_bad_peer_and_datagram(void **state)
{
	struct keel_transport *t[2];
	struct keel_udp_config cfg;
	struct sockaddr_storage a;
	struct sockaddr_in6 six = {.sin6_family = AF_INET6, .sin6_port = htons(9)};
	struct sockaddr_in zero_port = {.sin_family = AF_INET};
	struct keel_datagram d[3];
	static uint8_t msg[MTU + 1];
	socklen_t alen;

	(void)state;
	cfg_make(&cfg, 0, 3, NULL);
	t[0] = udp_open(0, &cfg);
	cfg_make(&cfg, 1, 3, NULL);
	t[1] = udp_open(1, &cfg);
	assert_int_equal(keel_udp_local_addr(t[1], &a, &alen), 0);
	assert_int_equal(keel_udp_set_peer(t[0], 3, (struct sockaddr *)&a, alen), -EINVAL);
	assert_int_equal(keel_udp_set_peer(t[0], 1, (struct sockaddr *)&a, alen - 1), -EINVAL);
	assert_int_equal(keel_udp_set_peer(t[0], 1, (struct sockaddr *)&six, sizeof(six)), -EINVAL);
	zero_port.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(
	    keel_udp_set_peer(t[0], 1, (struct sockaddr *)&zero_port, sizeof(zero_port)), -EINVAL);
	assert_int_equal(keel_udp_set_peer(t[0], 1, (struct sockaddr *)&a, alen), 0);
	d[0] = (struct keel_datagram){.buf = msg, .len = 10, .peer = 1};
	d[1] = (struct keel_datagram){.buf = msg, .len = 10, .peer = 2}; /* never set */
	d[2] = (struct keel_datagram){.buf = msg, .len = MTU + 1, .peer = 1};
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, d, 2), 1); /* the valid prefix */
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, d + 1, 1), -EINVAL);
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, d + 2, 1), -EINVAL);
	d[1].peer = 3;
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, d + 1, 1), -EINVAL);
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, d, 0), 0);
	assert_int_equal(recv_wait(t[1], d, MTU, 1), 0); /* rank 1 does not know rank 0 */
	udp_close(t[0]);
	udp_close(t[1]);
}

static void test_udp_ipv6_loopback(void **state)
{
	struct keel_transport *t[2] = {NULL, NULL};
	struct keel_udp_config cfg;
	struct keel_datagram d[2];
	struct sockaddr_in four = {.sin_family = AF_INET, .sin_port = htons(9)};
	uint8_t msg[300] = "over ::1";
	int err;

	(void)state;
	cfg_make(&cfg, 0, 2, "::1");
	err = keel_udp_init(&t[0], g_mem[0], MEM_BYTES, &cfg);
	if (err == -EADDRNOTAVAIL || err == -EAFNOSUPPORT) {
		print_message("IPv6 ::1 unavailable here (%s): skipped\n", strerror(-err));
		skip();
	}
	assert_int_equal(err, 0);
	cfg_make(&cfg, 1, 2, "::1");
	t[1] = udp_open(1, &cfg);
	wire_all(t, 2);
	four.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(keel_udp_set_peer(t[0], 1, (struct sockaddr *)&four, sizeof(four)),
			 -EINVAL);
	d[0] = (struct keel_datagram){.buf = msg, .len = sizeof(msg), .peer = 1};
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, d, 1), 1);
	assert_int_equal(recv_wait(t[1], d, MTU, 1), 1);
	assert_int_equal(d[0].peer, 0);
	assert_int_equal(d[0].len, sizeof(msg));
	assert_memory_equal(d[0].buf, msg, sizeof(msg));
	udp_close(t[0]);
	udp_close(t[1]);
}

static void test_udp_fini_twice(void **state)
{
	struct keel_transport *t, *t2 = (struct keel_transport *)1;
	struct keel_udp_config cfg;
	struct sockaddr_storage a;
	struct keel_datagram d[1];
	socklen_t alen;

	(void)state;
	cfg_make(&cfg, 0, 1, NULL);
	t = udp_open(0, &cfg);
	/* A failed init (port taken) leaves nothing open and *out NULL; fini(NULL) is a no-op. */
	assert_int_equal(keel_udp_local_addr(t, &a, &alen), 0);
	cfg.bind_port = ntohs(((struct sockaddr_in *)&a)->sin_port);
	assert_int_equal(keel_udp_init(&t2, g_mem[1], MEM_BYTES, &cfg), -EADDRINUSE);
	assert_null(t2);
	t->ops->fini(t2);
	t->ops->fini(t);
	t->ops->fini(t);
	assert_int_equal(t->ops->wait_fd(t), -1);
	assert_int_equal(keel_udp_local_addr(t, &a, &alen), -EBADF);
	recv_setup(d, 1, MTU);
	assert_int_equal(t->ops->recv_burst(t, 0, d, 1), KEEL_ETRANSPORT);
	assert_int_equal(t->ops->send_burst(t, 0, d, 1), KEEL_ETRANSPORT);
}

/* 256 jumbo datagrams against a 4 KiB socket buffer: whatever the kernel does, the burst
 * returns a count in [0, 256], never an error; then the would-block and per-datagram error
 * paths are forced with the interposer. */
static void test_udp_burst_beyond_sockbuf(void **state)
{
	struct keel_transport *t[2];
	struct keel_udp_config cfg;
	struct keel_udp_stats st;
	static struct keel_datagram d[KEEL_BURST_MAX];
	static uint8_t jumbo[KEEL_MTU_DEFAULT];
	uint32_t i;
	int r;

	(void)state;
	for (i = 0; i < 2; i++) {
		cfg_make(&cfg, i, 2, NULL);
		cfg.mtu = KEEL_MTU_DEFAULT;
		cfg.burst = KEEL_BURST_MAX;
		cfg.sockbuf_bytes = 4096;
		cfg.gso = false; /* the interposer counts datagrams: one per message */
		t[i] = udp_open((int)i, &cfg);
	}
	wire_all(t, 2);
	for (i = 0; i < KEEL_BURST_MAX; i++)
		d[i] = (struct keel_datagram){.buf = jumbo, .len = sizeof(jumbo), .peer = 1};
	r = t[0]->ops->send_burst(t[0], 0, d, KEEL_BURST_MAX);
	assert_true(r >= 0 && r <= (int)KEEL_BURST_MAX);
	keel_udp_stats_get(t[0], &st);
	print_message("real 4 KiB sndbuf: %d of %u accepted, would_block=%llu\n", r, KEEL_BURST_MAX,
		      (unsigned long long)st.tx_would_block);
	assert_true(r == (int)KEEL_BURST_MAX || st.tx_would_block > 0);

	g_inject =
	    (struct inject){.fd = t[0]->ops->wait_fd(t[0]), .allow = 5, .err = EAGAIN, .fails = 1};
	keel_udp_stats_get(t[0], &st);
	r = t[0]->ops->send_burst(t[0], 0, d, 40);
	assert_int_equal(r, 5);
	g_inject.allow = 0;
	g_inject.fails = 1;
	g_inject.err = ENOBUFS;
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, d, 3), 0); /* 0, not an error */
	{
		struct keel_udp_stats st2;

		keel_udp_stats_get(t[0], &st2);
		assert_int_equal(st2.tx_would_block - st.tx_would_block, 35 + 3);
		st = st2;
	}
	/* One datagram refused twice is skipped and counted; the rest go out. */
	g_inject = (struct inject){
	    .fd = t[0]->ops->wait_fd(t[0]), .allow = 3, .err = EHOSTUNREACH, .fails = 2};
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, d, 10), 10);
	{
		struct keel_udp_stats st2;

		keel_udp_stats_get(t[0], &st2);
		assert_int_equal(st2.tx_errors - st.tx_errors, 2);
		assert_int_equal(st2.tx_datagrams - st.tx_datagrams, 9);
	}
	/* A fatal socket error before anything went out is KEEL_ETRANSPORT. */
	g_inject = (struct inject){.fd = t[0]->ops->wait_fd(t[0]), .err = EBADF, .fails = 1};
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, d, 4), KEEL_ETRANSPORT);
	g_inject.fd = -1;
	udp_close(t[0]);
	udp_close(t[1]);
}

/* Sender t[0] -> receivers; checks each datagram's length, source and bytes in order. */
static uint32_t expect_seq(struct keel_transport *t, uint32_t src, uint32_t dst,
			   const uint32_t *lens, uint32_t first, uint32_t n, uint32_t per_call,
			   uint32_t flags)
{
	static struct keel_datagram d[KEEL_BURST_MAX];
	static uint8_t want[KEEL_MTU_MAX];
	uint32_t got = 0, round, lent = 0;

	for (round = 0; round < WAIT_ROUNDS * 4 && got < n; round++) {
		uint32_t ask = per_call < n - got ? per_call : n - got;
		int r;

		recv_setup(d, ask, KEEL_MTU_MAX);
		for (uint32_t k = 0; k < ask; k++)
			d[k].flags = flags;
		r = t->ops->recv_burst(t, 0, d, ask);
		assert_true(r >= 0 && (uint32_t)r <= ask);
		for (int k = 0; k < r; k++, got++) {
			assert_int_equal(d[k].peer, src);
			assert_int_equal(d[k].len, lens[first + got]);
			fill_payload(want, lens[first + got], src, dst, first + got);
			assert_memory_equal(d[k].buf, want, lens[first + got]);
			lent += d[k].buf != g_bufs[k];
		}
		/* Fewer than asked means nothing is held back: the caller may sleep. */
		if ((uint32_t)r < ask) {
			assert_true(t->ops->arm_wait(t));
			(void)poll(&(struct pollfd){.fd = t->ops->wait_fd(t), .events = POLLIN}, 1,
				   POLL_MS);
		}
	}
	assert_int_equal(got, n);
	return lent;
}

/* Cut d into two pieces (KEEL_CAP_GATHER) at a point that depends on i, for every third i:
 * on the wire it is the same datagram. */
static void split_some(struct keel_datagram *d, uint32_t i)
{
	uint32_t cut = d->len == 0 ? 0 : (i * 131u) % d->len;

	if (i % 3 != 1 || d->len == 0)
		return;
	d->tail = d->buf + cut;
	d->tail_len = d->len - cut;
	d->len = cut;
}

/* Runs of equal datagrams to one peer go as one send (UDP_SEGMENT), some of them in two pieces,
 * and come up as one receive (UDP_GRO), cut back into datagrams: every one arrives, in order,
 * whole; runs end at a shorter datagram, at another peer and at 64 datagrams. A receiver
 * asking for fewer than a run holds the rest and says so (arm_wait false, rx_ready true).
 * With stage_runs every run is copied into one piece first (each is counted), without it
 * none is: the same bytes arrive either way. */
static void coalesced_runs(bool stage, uint32_t rx_flags)
{
	struct keel_transport *t[3];
	struct keel_udp_config cfg;
	struct keel_udp_stats st0, st1;
	static struct keel_datagram d[KEEL_BURST_MAX];
	static uint8_t bufs[KEEL_BURST_MAX][1472];
	static uint32_t lens1[256], lens2[256];
	uint32_t i, n1 = 0, n2 = 0, mtu = 1472, lent;

	for (i = 0; i < 3; i++) {
		cfg_make(&cfg, i, 3, NULL);
		cfg.mtu = mtu;
		cfg.burst = KEEL_BURST_MAX;
		cfg.stage_runs = stage;
		t[i] = udp_open((int)i, &cfg);
	}
	wire_all(t, 3);
	keel_udp_stats_get(t[0], &st0);
	if (!st0.gso) {
		print_message("this kernel has no UDP_SEGMENT: coalescing not tested\n");
		skip();
	}
	/* 100 full to 1 (runs of 64 + 36), one shorter to 1, 5 full to 2, 3 small to 1, one
	 * empty to 1, 20 of 1000 bytes to 1. */
	for (i = 0; i < 130; i++) {
		uint32_t peer = i >= 101 && i < 106 ? 2 : 1;
		uint32_t len = i < 100	  ? mtu
			       : i == 100 ? 700
			       : i < 106  ? mtu
			       : i < 109  ? 100
			       : i == 109 ? 0
					  : 1000;
		uint32_t seq = peer == 1 ? n1 : n2;

		fill_payload(bufs[i], len, 0, peer, seq);
		d[i] = (struct keel_datagram){.buf = bufs[i], .len = len, .peer = peer};
		split_some(&d[i], i); /* runs mix datagrams in one and two pieces */
		if (peer == 1)
			lens1[n1++] = len;
		else
			lens2[n2++] = len;
	}
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, d, 130), 130);
	keel_udp_stats_get(t[0], &st0);
	assert_int_equal(st0.tx_datagrams, 130);
	assert_true(st0.tx_gso_sends >= 4); /* 64, 36+1, 5, 3, 20 */
	assert_true(st0.tx_syscalls <= 2);
	assert_int_equal(st0.tx_staged_sends, stage ? st0.tx_gso_sends : 0);
	/* Receiver 1 takes 7 at a time: runs straddle its calls. */
	lent = expect_seq(t[1], 0, 1, lens1, 0, 20, 7, rx_flags);
	keel_udp_stats_get(t[1], &st1);
	if (st1.gro) {
		assert_true(st1.rx_gro_runs >= 1);
		assert_false(t[1]->ops->arm_wait(t[1])); /* part of the first run is held */
		assert_true(t[1]->ops->rx_ready(t[1]));
	}
	/* Lent: calls that span runs, whose later runs must not land on the lent one. */
	lent += expect_seq(t[1], 0, 1, lens1, 20, n1 - 20, rx_flags ? KEEL_BURST_MAX : 7, rx_flags);
	lent += expect_seq(t[2], 0, 2, lens2, 0, n2, KEEL_BURST_MAX, rx_flags);
	keel_udp_stats_get(t[1], &st1);
	/* Without KEEL_DGRAM_LEND every datagram is copied into the caller's buffers; with
	 * it, each call lends from the run it starts in (the first 20 come 7 a call from the
	 * first run) and copies the runs after it. */
	if (rx_flags == 0 || !st1.gro)
		assert_int_equal(lent, 0);
	else
		assert_true(lent >= 20 && lent < n1 + n2);
	print_message("sender: %llu sends of %llu datagrams in %llu syscalls; receiver 1: %llu "
		      "coalesced receives, %llu syscalls\n",
		      (unsigned long long)st0.tx_gso_sends, (unsigned long long)st0.tx_datagrams,
		      (unsigned long long)st0.tx_syscalls, (unsigned long long)st1.rx_gro_runs,
		      (unsigned long long)st1.rx_syscalls);
	assert_int_equal(st1.rx_datagrams, n1);
	assert_int_equal(st1.rx_truncated, 0);
	for (i = 0; i < 3; i++)
		udp_close(t[i]);
}

static void test_udp_coalesced_runs(void **state)
{
	(void)state;
	coalesced_runs(false, 0);
}

static void test_udp_coalesced_runs_lent(void **state)
{
	(void)state;
	coalesced_runs(true, KEEL_DGRAM_LEND);
}

/* The stage costs burst x mtu bytes, and nothing where runs are not staged: datagrams above
 * 4 KiB, or no coalescing. */
static void test_udp_coalesced_runs_staged(void **state)
{
	struct keel_udp_config on, off;

	(void)state;
	coalesced_runs(true, 0);
	cfg_make(&on, 0, 2, NULL);
	on.mtu = 1472;
	off = on;
	off.stage_runs = false;
	assert_int_equal(keel_udp_storage_size(&on) - keel_udp_storage_size(&off),
			 (size_t)on.burst * 1472);
	on.gso = off.gso = false;
	assert_int_equal(keel_udp_storage_size(&on), keel_udp_storage_size(&off));
	on.gso = off.gso = true;
	on.mtu = off.mtu = 8972;
	assert_int_equal(keel_udp_storage_size(&on), keel_udp_storage_size(&off));
}

/* Send d[0..n) from t: sockets take it all on loopback; a short send is retried, as the
 * caller of send_burst does. */
static void send_all(struct keel_transport *t, const struct keel_datagram *d, uint32_t n)
{
	uint32_t done = 0;

	for (uint32_t tries = 0; done < n && tries < 10; tries++) {
		int r = t->ops->send_burst(t, 0, d + done, n - done);
		assert_true(r >= 0);
		done += (uint32_t)r;
	}
	assert_int_equal(done, n);
}

/* Datagrams longer than piece_bytes go as pieces and arrive joined: every one whole and in
 * order, at every length around the piece boundaries (one byte over, exact multiples, the
 * largest), one-piece and two-piece (gather) datagrams alike, mixed with datagrams that go
 * whole, to two receivers. With coalescing on either side or off (one piece per send; each
 * piece its own receive), lent or copied. */
static void pieces_exchange(bool gso_tx, bool gso_rx, uint32_t rx_flags)
{
	struct keel_transport *t[3];
	struct keel_udp_config cfg;
	struct keel_udp_stats st0, st1, st2;
	static struct keel_datagram d[KEEL_BURST_MAX];
	static uint8_t bufs[KEEL_BURST_MAX][8972];
	static uint32_t lens1[4096], lens2[4096];
	const uint32_t piece = 1472, chunk = piece - KEEL_UDP_PIECE_HDR_BYTES;
	const uint32_t sizes[] = {8972,	     6 * chunk, 6 * chunk + 1, 2 * chunk,
				  chunk + 1, piece + 1, piece,	       100,
				  1,	     5000,	3 * chunk - 1};
	const uint32_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
	uint32_t i, n1 = 0, n2 = 0, cut = 0;

	for (i = 0; i < 3; i++) {
		cfg_make(&cfg, i, 3, NULL);
		cfg.mtu = 8972;
		cfg.burst = 32;
		cfg.piece_bytes = piece;
		cfg.gso = i == 0 ? gso_tx : gso_rx;
		t[i] = udp_open((int)i, &cfg);
	}
	wire_all(t, 3);
	for (uint32_t round = 0; round < 20; round++) {
		uint32_t first1 = n1, first2 = n2;

		for (i = 0; i < 32; i++) {
			uint32_t peer = 1 + (i / 3 + round) % 2;
			/* round 0: full datagrams only, whose pieces go in runs across them */
			uint32_t len = round == 0 ? 6 * chunk : sizes[(i + round * 7) % nsizes];
			uint32_t seq = peer == 1 ? n1 : n2;

			fill_payload(bufs[i], len, 0, peer, seq);
			d[i] = (struct keel_datagram){.buf = bufs[i], .len = len, .peer = peer};
			split_some(&d[i], i + round);
			if (peer == 1)
				lens1[n1++] = len;
			else
				lens2[n2++] = len;
			cut += len > piece;
		}
		send_all(t[0], d, 32);
		if (round == 0 && gso_tx) {
			/* 32 x 6 pieces for two peers in runs of 3 datagrams: 18 pieces a run,
			 * one send each, not one per datagram */
			keel_udp_stats_get(t[0], &st0);
			assert_int_equal(st0.tx_pieces, 32 * 6);
			assert_int_equal(st0.tx_gso_sends, 11);
		}
		expect_seq(t[1], 0, 1, lens1, first1, n1 - first1, 7, rx_flags);
		expect_seq(t[2], 0, 2, lens2, first2, n2 - first2, KEEL_BURST_MAX, rx_flags);
	}
	keel_udp_stats_get(t[0], &st0);
	keel_udp_stats_get(t[1], &st1);
	keel_udp_stats_get(t[2], &st2);
	print_message("pieces (gso %d/%d): %llu datagrams cut into %llu pieces, %llu sends in %llu "
		      "syscalls; joined %llu + %llu\n",
		      gso_tx, gso_rx, (unsigned long long)st0.tx_cut,
		      (unsigned long long)st0.tx_pieces, (unsigned long long)st0.tx_gso_sends,
		      (unsigned long long)st0.tx_syscalls, (unsigned long long)st1.rx_joined,
		      (unsigned long long)st2.rx_joined);
	assert_int_equal(st0.tx_datagrams, 20 * 32);
	assert_int_equal(st0.tx_cut, cut);
	assert_int_equal(st1.rx_joined + st2.rx_joined, cut);
	assert_int_equal(st1.rx_pieces_bad + st2.rx_pieces_bad, 0);
	assert_int_equal(st1.rx_pieces_abandoned + st2.rx_pieces_abandoned, 0);
	assert_int_equal(st1.rx_truncated + st2.rx_truncated, 0);
	for (i = 0; i < 3; i++)
		udp_close(t[i]);
}

static void test_udp_pieces(void **state)
{
	(void)state;
	pieces_exchange(true, true, 0);
	pieces_exchange(true, true, KEEL_DGRAM_LEND);
	pieces_exchange(false, true, KEEL_DGRAM_LEND);
	pieces_exchange(true, false, 0);
	pieces_exchange(false, false, KEEL_DGRAM_LEND);
}

/* Datagrams too large for two to share a coalesced run still go as 1472-byte pieces, and
 * those arrive coalesced: the receiver asks for UDP_GRO whenever it joins pieces (without it,
 * the kernel cuts each run it receives into a buffer per piece). Both when the transports are
 * made with those pieces, and when made with larger ones that the job then lowers
 * (keel_udp_set_piece_bytes, as keel_boot does when the ranks agree on a smaller link). */
static void pieces_large_coalesced(uint32_t piece_at_init)
{
	struct keel_transport *t[2];
	struct keel_udp_config cfg;
	struct keel_udp_stats st0, st1;
	static struct keel_datagram d[8];
	static uint8_t bufs[8][35136];
	static uint32_t lens[24];
	const uint32_t piece = 1472, mtu = 24 * (piece - KEEL_UDP_PIECE_HDR_BYTES);

	for (uint32_t i = 0; i < 2; i++) {
		cfg_make(&cfg, i, 2, NULL);
		cfg.mtu = mtu;
		cfg.burst = 8;
		cfg.piece_bytes = piece_at_init;
		t[i] = udp_open((int)i, &cfg);
		if (piece_at_init != piece)
			assert_int_equal(keel_udp_set_piece_bytes(t[i], piece), 0);
	}
	wire_all(t, 2);
	for (uint32_t round = 0; round < 3; round++) {
		for (uint32_t i = 0; i < 8; i++) {
			uint32_t seq = round * 8 + i;

			lens[seq] = mtu - (i == 7 ? 1000 : 0); /* the last ends its run short */
			fill_payload(bufs[i], lens[seq], 0, 1, seq);
			d[i] = (struct keel_datagram){.buf = bufs[i], .len = lens[seq], .peer = 1};
			split_some(&d[i], seq);
		}
		send_all(t[0], d, 8);
		expect_seq(t[1], 0, 1, lens, round * 8, 8, 7, KEEL_DGRAM_LEND);
	}
	keel_udp_stats_get(t[0], &st0);
	keel_udp_stats_get(t[1], &st1);
	print_message("pieces of %u bytes at init, then %u: %llu pieces in %llu sends, received in "
		      "%llu coalesced runs, %llu syscalls\n",
		      piece_at_init, piece, (unsigned long long)st0.tx_pieces,
		      (unsigned long long)st0.tx_gso_sends, (unsigned long long)st1.rx_gro_runs,
		      (unsigned long long)st1.rx_syscalls);
	assert_int_equal(st0.tx_cut, 24);
	assert_int_equal(st0.tx_pieces, 24 * 24);
	assert_int_equal(st1.rx_joined, 24);
	assert_true(st1.gro);
	/* every send of 2 or more pieces comes up whole: at least 44 pieces a receive but the
	 * last of each round's */
	assert_true(st0.tx_gso_sends >= 3 * (8 * 24 / 44));
	assert_true(st1.rx_gro_runs >= st0.tx_gso_sends);
	assert_true(st1.rx_syscalls < st0.tx_pieces / 8);
	for (uint32_t i = 0; i < 2; i++)
		udp_close(t[i]);
}

static void test_udp_pieces_large_datagrams_coalesced(void **state)
{
	(void)state;
	pieces_large_coalesced(1472);
	pieces_large_coalesced(8 + 35136 / 2);
}

/* A plain socket on loopback that rank `peer` of t's job is said to be: what it sends comes
 * from that rank. */
static int fake_peer(struct keel_transport *t, uint32_t peer)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
	assert_int_equal(keel_udp_set_peer(t, peer, (struct sockaddr *)&a, alen), 0);
	return fd;
}

/* Send piece `index` of `count` of datagram `id` (chunk bytes a piece; `len` its own bytes,
 * from the datagram's byte index * chunk on, the datagram's bytes being fill_payload's of
 * `seq`), as the format says: "KP", id, index, count, chunk, little-endian. */
static void piece_send(int fd, struct keel_transport *t, uint16_t id, uint32_t index,
		       uint32_t count, uint32_t chunk, uint32_t len, uint32_t seq)
{
	static uint8_t whole[KEEL_MTU_MAX], p[KEEL_MTU_MAX];
	struct sockaddr_storage a;
	socklen_t alen;

	fill_payload(whole, sizeof(whole), 9, 0, seq);
	p[0] = 'K';
	p[1] = 'P';
	p[2] = (uint8_t)id;
	p[3] = (uint8_t)(id >> 8);
	p[4] = (uint8_t)index;
	p[5] = (uint8_t)count;
	p[6] = (uint8_t)chunk;
	p[7] = (uint8_t)(chunk >> 8);
	memcpy(p + 8, whole + (size_t)index * chunk, len);
	assert_int_equal(keel_udp_local_addr(t, &a, &alen), 0);
	assert_int_equal(sendto(fd, p, 8 + len, 0, (struct sockaddr *)&a, alen),
			 (ssize_t)(8 + len));
}

/* Receive what is there (waiting up to 100 ms for the first); every datagram must be the
 * `len` bytes of fill_payload(seq) from `peer`. Returns how many came. */
static uint32_t joined_expect(struct keel_transport *t, uint32_t peer, uint32_t len, uint32_t seq)
{
	static struct keel_datagram d[8];
	static uint8_t want[KEEL_MTU_MAX];
	uint32_t got = 0;

	fill_payload(want, sizeof(want), 9, 0, seq);
	for (int round = 0; round < 5; round++) {
		recv_setup(d, 8, KEEL_MTU_MAX);
		int r = t->ops->recv_burst(t, 0, d, 8);
		assert_true(r >= 0);
		for (int k = 0; k < r; k++, got++) {
			assert_int_equal(d[k].peer, peer);
			assert_int_equal(d[k].len, len);
			assert_memory_equal(d[k].buf, want, len);
		}
		if (r == 0)
			(void)poll(&(struct pollfd){.fd = t->ops->wait_fd(t), .events = POLLIN}, 1,
				   POLL_MS);
	}
	return got;
}

/* The joiner against pieces as a network may deliver them, and against pieces no keel rank
 * sends: lost, reordered, duplicated, interleaved from two peers, from more peers at once than
 * it has slots, and with headers that make no sense. Nothing is delivered that was not sent
 * whole, and every drop is counted. */
static void test_udp_pieces_lost_reordered_bad(void **state)
{
	struct keel_transport *t;
	struct keel_udp_config cfg;
	struct keel_udp_stats st;
	const uint32_t chunk = 1000;
	int fd1, fd2, fd3;

	(void)state;
	cfg_make(&cfg, 0, 4, NULL);
	cfg.mtu = 8972;
	cfg.piece_bytes = chunk + KEEL_UDP_PIECE_HDR_BYTES;
	cfg.join_slots = 2;
	t = udp_open(0, &cfg);
	fd1 = fake_peer(t, 1);
	fd2 = fake_peer(t, 2);
	fd3 = fake_peer(t, 3);
	/* in order, then reversed, then with a duplicate: each joined once */
	for (uint32_t i = 0; i < 3; i++)
		piece_send(fd1, t, 1, i, 3, chunk, i < 2 ? chunk : 500, 1);
	assert_int_equal(joined_expect(t, 1, 2500, 1), 1);
	for (uint32_t i = 3; i-- > 0;)
		piece_send(fd1, t, 2, i, 3, chunk, i < 2 ? chunk : 500, 1);
	assert_int_equal(joined_expect(t, 1, 2500, 1), 1);
	piece_send(fd1, t, 3, 0, 2, chunk, chunk, 2);
	piece_send(fd1, t, 3, 0, 2, chunk, chunk, 2);
	piece_send(fd1, t, 3, 1, 2, chunk, 1, 2);
	piece_send(fd1, t, 3, 1, 2, chunk, 1, 2); /* after the join: starts a datagram anew */
	assert_int_equal(joined_expect(t, 1, chunk + 1, 2), 1);
	keel_udp_stats_get(t, &st);
	assert_int_equal(st.rx_joined, 3);
	assert_int_equal(st.rx_pieces_abandoned, 0);
	/* a lost piece: the peer's next datagram gives the first up */
	piece_send(fd1, t, 4, 0, 3, chunk, chunk, 3);
	piece_send(fd1, t, 4, 2, 3, chunk, 7, 3);
	piece_send(fd1, t, 5, 0, 2, chunk, chunk, 4);
	piece_send(fd1, t, 5, 1, 2, chunk, 9, 4);
	assert_int_equal(joined_expect(t, 1, chunk + 9, 4), 1);
	keel_udp_stats_get(t, &st);
	assert_int_equal(st.rx_pieces_abandoned, 2); /* datagram 4, and the stray after 3 */
	/* two peers interleaved: both joined */
	piece_send(fd1, t, 6, 0, 2, chunk, chunk, 5);
	piece_send(fd2, t, 6, 0, 2, chunk, chunk, 5);
	piece_send(fd2, t, 6, 1, 2, chunk, 11, 5);
	piece_send(fd1, t, 6, 1, 2, chunk, 11, 5);
	static struct keel_datagram d[8];
	uint32_t got = 0, from = 0;
	for (int round = 0; round < 5 && got < 2; round++) {
		recv_setup(d, 8, KEEL_MTU_MAX);
		int r = t->ops->recv_burst(t, 0, d, 8);
		assert_true(r >= 0);
		for (int k = 0; k < r; k++, got++) {
			assert_int_equal(d[k].len, chunk + 11);
			from |= 1u << d[k].peer;
		}
		if (r == 0)
			(void)poll(&(struct pollfd){.fd = t->ops->wait_fd(t), .events = POLLIN}, 1,
				   POLL_MS);
	}
	assert_int_equal(got, 2);
	assert_int_equal(from, 6u);
	/* three peers at once through two slots: the least recently touched is given up */
	keel_udp_stats_get(t, &st);
	uint64_t abandoned = st.rx_pieces_abandoned;
	piece_send(fd1, t, 7, 0, 2, chunk, chunk, 6);
	piece_send(fd2, t, 7, 0, 2, chunk, chunk, 6);
	piece_send(fd3, t, 7, 0, 2, chunk, chunk, 6); /* evicts peer 1's */
	piece_send(fd3, t, 7, 1, 2, chunk, 3, 6);
	piece_send(fd2, t, 7, 1, 2, chunk, 3, 6);
	piece_send(fd1, t, 7, 1, 2, chunk, 3, 6); /* its first piece is gone: held, not joined */
	got = 0;
	for (int round = 0; round < 5; round++) {
		recv_setup(d, 8, KEEL_MTU_MAX);
		int r = t->ops->recv_burst(t, 0, d, 8);
		assert_true(r >= 0);
		for (int k = 0; k < r; k++, got++)
			assert_true(d[k].peer == 2 || d[k].peer == 3);
		if (r == 0)
			(void)poll(&(struct pollfd){.fd = t->ops->wait_fd(t), .events = POLLIN}, 1,
				   POLL_MS);
	}
	assert_int_equal(got, 2);
	keel_udp_stats_get(t, &st);
	assert_int_equal(st.rx_pieces_abandoned, abandoned + 1);
	/* headers no sender writes: a count of 1 or 65, an index past the count, a middle piece
	 * short, a last piece longer than the rest, a datagram beyond the mtu, a bare header */
	piece_send(fd2, t, 8, 0, 1, chunk, chunk, 7);
	piece_send(fd2, t, 8, 0, 65, chunk, chunk, 7);
	piece_send(fd2, t, 8, 3, 3, chunk, chunk, 7);
	piece_send(fd2, t, 8, 0, 3, chunk, chunk - 1, 7);
	piece_send(fd2, t, 8, 2, 3, chunk, chunk + 1, 7);
	piece_send(fd2, t, 8, 0, 10, chunk, chunk, 7); /* 9 full pieces already pass 8 972 */
	piece_send(fd2, t, 8, 0, 2, chunk, 0, 7);
	assert_int_equal(joined_expect(t, 2, 1, 7), 0);
	keel_udp_stats_get(t, &st);
	assert_int_equal(st.rx_pieces_bad, 7);
	assert_int_equal(st.rx_joined, 8); /* 1, 2, 3, 5, two of 6, two of 7 */
	/* joined, but longer than the caller's buffers take: dropped and counted, lent or not */
	for (uint32_t lend = 0; lend < 2; lend++) {
		for (uint32_t i = 0; i < 3; i++)
			piece_send(fd1, t, (uint16_t)(20 + lend), i, 3, chunk, i < 2 ? chunk : 500,
				   1);
		for (int round = 0; round < 5; round++) {
			recv_setup(d, 8, 2000);
			for (int k = 0; k < 8; k++)
				d[k].flags = lend ? KEEL_DGRAM_LEND : 0;
			assert_int_equal(t->ops->recv_burst(t, 0, d, 8), 0);
			(void)poll(&(struct pollfd){.fd = t->ops->wait_fd(t), .events = POLLIN}, 1,
				   POLL_MS);
		}
	}
	keel_udp_stats_get(t, &st);
	assert_int_equal(st.rx_joined, 10);
	assert_int_equal(st.rx_truncated, 2);
	close(fd1);
	close(fd2);
	close(fd3);
	udp_close(t);
}

/* A kernel that refuses a coalesced send (here: checksums turned off on the socket, which
 * UDP_SEGMENT requires) turns coalescing off for good; the burst still goes out whole. */
static void test_udp_coalescing_refused(void **state)
{
	struct keel_transport *t[2];
	struct keel_udp_config cfg;
	struct keel_udp_stats st;
	static struct keel_datagram d[64];
	static uint8_t bufs[64][1472];
	static uint32_t lens[64];
	int one = 1;
	uint32_t i;

	(void)state;
	for (i = 0; i < 2; i++) {
		cfg_make(&cfg, i, 2, NULL);
		cfg.mtu = 1472;
		cfg.burst = 64;
		t[i] = udp_open((int)i, &cfg);
	}
	wire_all(t, 2);
	keel_udp_stats_get(t[0], &st);
	if (!st.gso)
		skip();
	assert_int_equal(
	    setsockopt(t[0]->ops->wait_fd(t[0]), SOL_SOCKET, SO_NO_CHECK, &one, sizeof(one)), 0);
	for (i = 0; i < 64; i++) {
		lens[i] = 1472;
		fill_payload(bufs[i], 1472, 0, 1, i);
		d[i] = (struct keel_datagram){.buf = bufs[i], .len = 1472, .peer = 1};
		split_some(&d[i], i); /* sent one by one, in two pieces too */
	}
	assert_int_equal(t[0]->ops->send_burst(t[0], 0, d, 64), 64);
	keel_udp_stats_get(t[0], &st);
	assert_false(st.gso);
	assert_int_equal(st.tx_gso_refused, 1);
	assert_int_equal(st.tx_gso_sends, 0);
	assert_int_equal(st.tx_datagrams, 64);
	expect_seq(t[1], 0, 1, lens, 0, 64, 64, 0);
	udp_close(t[0]);
	udp_close(t[1]);
}

/* A 4096-rank table with 32 real senders among fake addresses; peers are moved around many
 * times (deletion must keep every probe chain whole), then each real sender is recognised. */
static void test_udp_peer_table_full_world(void **state)
{
	enum { REAL = 32 };
	struct keel_transport *t;
	struct keel_udp_config cfg;
	struct keel_udp_stats st;
	struct keel_datagram d[REAL];
	struct sockaddr_in fake = {.sin_family = AF_INET};
	struct sockaddr_storage local;
	socklen_t llen;
	uint32_t rank_of[REAL], i, round, got;
	int fds[REAL];

	(void)state;
	cfg_make(&cfg, 0, KEEL_WORLD_MAX, NULL);
	t = udp_open(0, &cfg);
	fake.sin_addr.s_addr = htonl(0x7f000002);
	for (i = 1; i < KEEL_WORLD_MAX; i++) {
		fake.sin_port = htons((uint16_t)(10000 + i));
		assert_int_equal(keel_udp_set_peer(t, i, (struct sockaddr *)&fake, sizeof(fake)),
				 0);
	}
	for (round = 0; round < 4; round++) { /* move every peer to another fake address */
		for (i = 1; i < KEEL_WORLD_MAX; i++) {
			fake.sin_port = htons((uint16_t)(20000 + round * 5000 + (i * 7) % 4096));
			assert_int_equal(
			    keel_udp_set_peer(t, i, (struct sockaddr *)&fake, sizeof(fake)), 0);
		}
	}
	assert_int_equal(keel_udp_local_addr(t, &local, &llen), 0);
	for (i = 0; i < REAL; i++) {
		struct sockaddr_in a = {.sin_family = AF_INET};
		socklen_t alen = sizeof(a);

		fds[i] = socket(AF_INET, SOCK_DGRAM, 0);
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_int_equal(bind(fds[i], (struct sockaddr *)&a, sizeof(a)), 0);
		assert_int_equal(getsockname(fds[i], (struct sockaddr *)&a, &alen), 0);
		rank_of[i] = 1 + (i * 127) % (KEEL_WORLD_MAX - 1);
		assert_int_equal(keel_udp_set_peer(t, rank_of[i], (struct sockaddr *)&a, alen), 0);
	}
	for (i = 0; i < REAL; i++) {
		uint32_t v = i;

		assert_int_equal(sendto(fds[i], &v, sizeof(v), 0, (struct sockaddr *)&local, llen),
				 sizeof(v));
	}
	got = recv_wait(t, d, MTU, REAL);
	assert_int_equal(got, REAL);
	for (i = 0; i < got; i++) {
		uint32_t v;

		assert_int_equal(d[i].len, sizeof(v));
		memcpy(&v, d[i].buf, sizeof(v));
		assert_true(v < REAL);
		assert_int_equal(d[i].peer, rank_of[v]);
	}
	keel_udp_stats_get(t, &st);
	assert_int_equal(st.rx_unknown_source, 0);
	for (i = 0; i < REAL; i++)
		close(fds[i]);
	udp_close(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_udp_exchange_three),
	    cmocka_unit_test(test_udp_unknown_source_dropped),
	    cmocka_unit_test(test_udp_truncated_dropped),
	    cmocka_unit_test(test_udp_dead_peer_does_not_wedge),
	    cmocka_unit_test(test_udp_bad_config),
	    cmocka_unit_test(test_udp_bad_peer_and_datagram),
	    cmocka_unit_test(test_udp_ipv6_loopback),
	    cmocka_unit_test(test_udp_fini_twice),
	    cmocka_unit_test(test_udp_burst_beyond_sockbuf),
	    cmocka_unit_test(test_udp_peer_table_full_world),
	    cmocka_unit_test(test_udp_coalesced_runs),
	    cmocka_unit_test(test_udp_coalesced_runs_staged),
	    cmocka_unit_test(test_udp_coalesced_runs_lent),
	    cmocka_unit_test(test_udp_coalescing_refused),
	    cmocka_unit_test(test_udp_pieces),
	    cmocka_unit_test(test_udp_pieces_large_datagrams_coalesced),
	    cmocka_unit_test(test_udp_pieces_lost_reordered_bad),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
