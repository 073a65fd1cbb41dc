/* An attacker on the same host as a running keel job (tests/integ/attacks.sh), with root but
 * without the job's key: it sniffs the job's datagrams on the loopback interface (AF_PACKET),
 * then sends forgeries with spoofed sources (a raw IPv4 socket, so each one arrives from the
 * address and port of the rank it claims to be). Loopback only.
 *   integ-attacker MODE SECONDS [RATE]
 * MODE: replay (sniffed datagrams again, verbatim), commit (a COMMIT of a newer epoch naming
 * rank 0 alone), data (sniffed DATA with later sequence numbers and other bytes), leave (an
 * ACK turned into a LEAVE), incarnation (a heartbeat with a new incarnation), soft (a
 * "collective stalled" report to the coordinator), garbage (random bytes and bit flips), flood
 * (all of them in turn, from datagrams of at most 1472 bytes). Forgeries get a correct CRC32C; a
 * datagram that carried a MAC trailer keeps one (it cannot make a valid one). RATE: datagrams a
 * second (default 20000). Prints what it sniffed and sent; exits 77 when it may not open raw
 * sockets. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HDR	    56u
#define SAMPLES_MAX 512u
#define RANKS_MAX   64u
#define DGRAM_MAX   9000u
#define BATCH	    64u

enum { T_HEARTBEAT = 1, T_ACK = 2, T_DATA = 3, T_LEAVE = 4, T_VIEW = 5 };
enum { F_AUTH = 0x2 };

struct sample {
	uint16_t sport, dport, len;
	uint8_t b[DGRAM_MAX];
};

static struct sample g_samples[SAMPLES_MAX];
static uint32_t g_nsamples;
static uint16_t g_port_of[RANKS_MAX]; /* rank -> its UDP port, learnt from traffic */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	return g_rng;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* CRC32C, bit by bit: the attacker brings its own. */
static uint32_t crc32c_bytes(uint32_t crc, const uint8_t *p, size_t n)
{
	crc = ~crc;
	for (size_t i = 0; i < n; i++) {
		crc ^= p[i];
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
	}
	return ~crc;
}

/* Fix up payload_len for a datagram of `len` bytes and stamp a correct CRC over header and
 * payload (a MAC trailer, if the flags announce one, is left as it is: not covered). */
static void restamp(uint8_t *b, uint32_t len)
{
	uint32_t trailer = (get16(b + 6) & F_AUTH) != 0 ? 32u : 0u;
	uint32_t payload = len - HDR - trailer;
	put32(b + 48, payload);
	put32(b + 52, 0);
	put32(b + 52, crc32c_bytes(0, b, HDR + payload));
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Keep keel datagrams seen on lo (each once: the incoming copy) until `seconds` pass or the
 * table is full. */
static void sniff(double seconds)
{
	int fd = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP));
	if (fd < 0) {
		fprintf(stderr, "attacker: AF_PACKET socket: %s\n", strerror(errno));
		exit(77);
	}
	struct sockaddr_ll ll = {.sll_family = AF_PACKET,
				 .sll_protocol = htons(ETH_P_IP),
				 .sll_ifindex = (int)if_nametoindex("lo")};
	struct timeval tv = {0, 100000};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (bind(fd, (struct sockaddr *)&ll, sizeof(ll)) != 0) {
		fprintf(stderr, "attacker: bind lo: %s\n", strerror(errno));
		exit(77);
	}
	double end = now_s() + seconds;
	static uint8_t pkt[65536];
	while (now_s() < end && g_nsamples < SAMPLES_MAX) {
		struct sockaddr_ll from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&from, &fl);
		if (n < 28 || from.sll_pkttype == PACKET_OUTGOING)
			continue;
		const struct iphdr *ip = (const struct iphdr *)pkt;
		size_t ihl = (size_t)ip->ihl * 4;
		if (ip->protocol != IPPROTO_UDP || (size_t)n < ihl + 8 + HDR)
			continue;
		const struct udphdr *udp = (const struct udphdr *)(pkt + ihl);
		const uint8_t *k = pkt + ihl + 8;
		size_t len = (size_t)n - ihl - 8;
		if (memcmp(k, "KEEL", 4) != 0 || len > DGRAM_MAX)
			continue;
		struct sample *s = &g_samples[g_nsamples++];
		s->sport = ntohs(udp->source);
		s->dport = ntohs(udp->dest);
		s->len = (uint16_t)len;
		memcpy(s->b, k, len);
		if (get16(k + 16) < RANKS_MAX)
			g_port_of[get16(k + 16)] = s->sport;
		if (get16(k + 18) < RANKS_MAX)
			g_port_of[get16(k + 18)] = s->dport;
	}
	close(fd);
}

/* Whether sample s can be made into a forgery of `mode` (before copying it). */
static bool fits(const char *mode, const struct sample *s, uint32_t len_max)
{
	uint32_t type = s->b[5];
	if (s->len > len_max)
		return false;
	if (strcmp(mode, "data") == 0)
		return type == T_DATA;
	if (strcmp(mode, "leave") == 0)
		return type == T_ACK;
	if (strcmp(mode, "incarnation") == 0)
		return type == T_HEARTBEAT;
	if (strcmp(mode, "commit") == 0 || strcmp(mode, "soft") == 0)
		return type == T_HEARTBEAT &&
		       (strcmp(mode, "soft") == 0) == (get16(s->b + 18) == 0);
	return true;
}

/* One forgery of `mode` into d (from a sample no longer than len_max); returns its length, 0
 * if the sample drawn does not fit. */
static uint32_t forge(const char *mode, uint8_t *d, uint16_t *sport, uint16_t *dport,
		      uint32_t len_max)
{
	const struct sample *s = &g_samples[rnd() % g_nsamples];
	if (!fits(mode, s, len_max))
		return 0;
	memcpy(d, s->b, s->len);
	*sport = s->sport;
	*dport = s->dport;
	uint32_t len = s->len;
	uint32_t trailer = (get16(d + 6) & F_AUTH) != 0 ? 32u : 0u;
	if (strcmp(mode, "replay") == 0)
		return len;
	if (strcmp(mode, "garbage") == 0) {
		if (rnd() & 1) {
			d[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
			return len;
		}
		for (uint32_t i = 0; i < len; i++)
			d[i] = (uint8_t)rnd();
		return len;
	}
	if (strcmp(mode, "data") == 0) {
		put32(d + 20, get32(d + 20) + 1 + (uint32_t)(rnd() % 8)); /* a later seq */
		for (uint32_t i = HDR; i < len - trailer; i++)
			d[i] = (uint8_t)rnd();
	} else if (strcmp(mode, "leave") == 0) {
		d[5] = T_LEAVE;
	} else if (strcmp(mode, "incarnation") == 0) {
		put32(d + HDR + 24, get32(d + HDR + 24) + 1);
	} else if (strcmp(mode, "commit") == 0 || strcmp(mode, "soft") == 0) {
		/* a VIEW message from rank 0 (commit) or to it (soft), on a heartbeat's header */
		uint8_t *p = d + HDR;
		memset(p, 0, 64);
		d[5] = T_VIEW;
		uint32_t epoch = get32(d + 12);
		if (strcmp(mode, "commit") == 0) {
			p[0] = 5;
			put32(p + 4, epoch + 100);
			p[16] = 0x06; /* "accepted by 1 and 2" */
			put32(p + 17, epoch + 100);
			put32(p + 17 + 12, 0);
			put32(p + 17 + 20, 1);	   /* one member: */
			put32(p + 17 + 24 + 2, 1); /* rank 0, incarnation 1 */
			len = HDR + 17 + 24 + 6 + trailer;
		} else {
			p[0] = 8;
			put32(p + 4, epoch);
			len = HDR + 16 + trailer;
		}
		memset(d + len - trailer, 0, trailer);
	} else {
		return 0;
	}
	restamp(d, len);
	return len;
}

static int send_all(const char *mode, double seconds, double rate)
{
	int fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
	if (fd < 0) {
		fprintf(stderr, "attacker: raw socket: %s\n", strerror(errno));
		return 77;
	}
	static uint8_t pkts[BATCH][20 + 8 + DGRAM_MAX];
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	const char *modes[] = {"replay",      "commit", "data",	  "leave",
			       "incarnation", "soft",	"garbage"};
	bool flood = strcmp(mode, "flood") == 0;
	uint64_t sent = 0;
	double t0 = now_s();
	while (now_s() - t0 < seconds) {
		uint32_t n = 0;
		for (uint32_t tries = 0; n < BATCH && tries < 64 * BATCH; tries++) {
			uint8_t *pk = pkts[n];
			uint16_t sport, dport;
			const char *m = flood ? modes[rnd() % 7] : mode;
			/* a flood is of datagrams that fit an Ethernet frame, as a real one */
			uint32_t len = forge(m, pk + 28, &sport, &dport, flood ? 1472 : DGRAM_MAX);
			if (len == 0)
				continue;
			struct iphdr *ip = (struct iphdr *)pk;
			memset(ip, 0, 20);
			ip->version = 4, ip->ihl = 5, ip->ttl = 64, ip->protocol = IPPROTO_UDP;
			ip->saddr = ip->daddr = htonl(INADDR_LOOPBACK);
			struct udphdr *udp = (struct udphdr *)(pk + 20);
			udp->source = htons(sport), udp->dest = htons(dport);
			udp->len = htons((uint16_t)(8 + len)), udp->check = 0;
			iov[n] = (struct iovec){pk, 28 + len};
			msgs[n] = (struct mmsghdr){.msg_hdr = {.msg_name = &to,
							       .msg_namelen = sizeof(to),
							       .msg_iov = &iov[n],
							       .msg_iovlen = 1}};
			n++;
		}
		if (n == 0)
			break;
		int got = sendmmsg(fd, msgs, n, 0);
		sent += got > 0 ? (uint64_t)got : 0;
		double ahead = (double)sent / rate - (now_s() - t0);
		if (ahead > 0)
			usleep((useconds_t)(ahead * 1e6));
	}
	double took = now_s() - t0;
	printf("attacker %s: sniffed %u datagrams, sent %llu forgeries in %.1f s (%.0f a second)\n",
	       mode, g_nsamples, (unsigned long long)sent, took, (double)sent / took);
	close(fd);
	return sent == 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: integ-attacker MODE SECONDS [RATE]\n");
		return 2;
	}
	double seconds = atof(argv[2]), rate = argc > 3 ? atof(argv[3]) : 20000;
	sniff(1.0);
	if (g_nsamples == 0) {
		fprintf(stderr, "attacker: no keel datagram seen on lo in 1 s\n");
		return 1;
	}
	return send_all(argv[1], seconds, rate);
}
