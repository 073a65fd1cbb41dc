/* The kernel UDP transport: one non-blocking socket, recvmmsg/sendmmsg bursts straight into and
 * out of the caller's buffers, senders mapped to ranks by a hash of their address.
 * It never blocks, never allocates (all state lives in the caller's `mem`), and never delivers a
 * datagram from an address it was not given with keel_udp_set_peer. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "assert_int.h"
#include "keel/limits.h"
#include "keel/transport_udp.h"
#include "udp_pieces_int.h"

#define CACHE_LINE_BYTES 64u
/* Holds a full reliable window of 64 KiB datagrams from a peer (64 x 64 KiB) four times over:
 * a receiver busy reducing must not make the kernel drop what the window let through. */
#define SOCKBUF_BYTES_DEFAULT (16 << 20)
#define HASH_SLOTS_MIN	      16u
#define HASH_EMPTY	      0u
/* A per-datagram send error is retried once (it is often a stale ICMP error for an earlier
 * datagram, reported on this call); a second error on the same datagram skips it. */
#define SEND_TRIES_PER_DATAGRAM 2u
/* recvmmsg may report a stale ICMP error instead of data; one more try reads the data. */
#define RECV_TRIES 2u
/* Segmentation offload (UDP_SEGMENT, Linux 4.18): a run of datagrams to one peer goes down the
 * stack as one send, cut into datagrams as late as possible (by the NIC where it can). Every
 * kernel since takes 64 segments, and the run must fit one IP packet's length field. */
#define GSO_SEGS_MAX  64u
#define GSO_BYTES_MAX 65507u
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#define GSO_CTRL_BYTES CMSG_SPACE(sizeof(uint16_t))
/* Receive coalescing (UDP_GRO, Linux 5.0): the kernel hands up a run of datagrams from one
 * sender as one buffer of up to 64 KiB, with the datagrams' size in a control message. Runs
 * land in GRO_SLOTS slots, as many as are free in one recvmmsg (each syscall costs about a
 * microsecond on a paravirtualized VM: perf-history.md), and are cut into datagrams: lent where
 * the caller takes lent bytes (KEEL_DGRAM_LEND: no copy), copied into the caller's buffers
 * otherwise. Lent bytes must stay until the caller's next call, so a slot lent from takes no
 * new run in that call; the last slot never lends, so a receive can always land one more run
 * (copied out) and still takes as many runs as it did with one slot (one datagram each, where
 * the sender did not coalesce). Worth it only where two datagrams, or two pieces, fit one
 * run (gro_wanted). */
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#define GRO_BUF_BYTES 65536u
#define GRO_SLOTS     4u /* a burst of 128 datagrams of 1 472 bytes is 3 runs: all lent */
#define GRO_COPY_SLOT (GRO_SLOTS - 1u)
/* Staged runs: a coalesced run of datagrams of up to STAGE_SEG_MAX bytes is copied into one
 * contiguous buffer before it is sent. In two pieces per datagram (header, payload where it
 * lies) a 64 KiB run of 1 472-byte datagrams is 88 iovecs, and the kernel's copy pays for each
 * piece: on the 2-vCPU VM of perf-history.md ("Kernel UDP: fewer pieces, wider checksums, bigger
 * windows") such a send took twice as long
 * as one of the same bytes in one piece, a copy in user space included. Larger datagrams
 * make few pieces per run and go as they are. */
#define STAGE_SEG_MAX  4096u
#define GRO_CTRL_BYTES CMSG_SPACE(sizeof(int))
/* Pieces (udp_pieces_int.h): a datagram longer than piece_bytes goes as pieces of at most
 * piece_bytes, copied into the stage with their headers and sent in coalesced runs. */
#define JOIN_SLOTS_DEFAULT 8u

_Static_assert(KEEL_WORLD_MAX < UINT16_MAX, "a hash slot holds rank + 1 in 16 bits");
_Static_assert(KEEL_BURST_MAX <= 1024, "recvmmsg/sendmmsg take at most UIO_MAXIOV messages");
_Static_assert(KEEL_MTU_MAX <= 65507, "an IPv4 UDP payload is at most 65507 bytes");
_Static_assert(GRO_SLOTS >= 2 && GRO_SLOTS <= 8, "gro_lent and gro_order hold every slot");

/* Large enough for either family; sa_family == AF_UNSPEC (0) marks a peer not yet set. */
union peer_addr {
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
};

struct udp {
	struct keel_transport t;
	int fd;
	int family;
	uint32_t burst;
	uint32_t hash_mask;
	union peer_addr *peers; /* [world_size] */
	uint16_t *hash;		/* [hash_mask + 1]: rank + 1, or HASH_EMPTY; linear probing */
	struct mmsghdr *msgs;	/* [burst], shared by send and receive (never both at once) */
	struct iovec *iovs;	/* [2 * burst]: a datagram's header and tail (KEEL_CAP_GATHER) */
	uint32_t *msg_dgrams;	/* [burst]: datagrams in each message a send fills */
	union peer_addr *srcs;	/* [burst]: source addresses recvmmsg fills in */
	uint8_t *gso_ctrl;	/* [burst][GSO_CTRL_BYTES]: each send's UDP_SEGMENT message */
	bool gso;		/* coalesce runs to one peer (off when the kernel refused it) */
	bool gro;		/* the kernel may hand up coalesced runs (then recv_gro) */
	uint8_t *gro_buf;	/* [GRO_SLOTS][GRO_BUF_BYTES]: where coalesced runs land */
	uint8_t *stage;		/* [stage_bytes]: staged runs of one burst, each 64-aligned */
	uint32_t stage_bytes;	/* 0 when runs are never staged */
	bool stage_small;	/* runs of small datagrams are staged (stage_runs) */
	uint32_t msgs_cap;	/* entries of msgs, msg_dgrams and gso_ctrl; iovs has iovs_cap */
	uint32_t iovs_cap;
	/* Datagrams longer than piece_bytes go as pieces (0: never); `joins` says whether
	 * pieces received are joined (piece_bytes was set at init) */
	uint32_t piece_bytes;
	bool joins;
	uint16_t piece_id; /* the id of the next datagram cut */
	struct piece_joiner join;
	/* The runs landed and not yet delivered, oldest first (gro_order[0..gro_pending)), each
	 * in its own slot: delivered first by the next receive. A receive returns fewer datagrams
	 * than asked only once none is left, and arm_wait refuses to let the caller sleep on one.
	 */
	struct gro_run {
		uint32_t off, left, seg, peer;
	} gro_runs[GRO_SLOTS];
	uint8_t gro_order[GRO_SLOTS];
	uint32_t gro_pending;
	uint32_t gro_lent; /* the bits of the slots this receive lent from */
	/* one recvmmsg lands a run in each free slot */
	struct mmsghdr gro_msgs[GRO_SLOTS];
	struct iovec gro_iovs[GRO_SLOTS];
	union peer_addr gro_srcs[GRO_SLOTS];
	_Alignas(struct cmsghdr) uint8_t gro_ctrl[GRO_SLOTS][GRO_CTRL_BYTES]; /* CMSG_FIRSTHDR */
	/* msgs[msgs_dirty..burst) hold the receive layout (all but the iovecs' targets), so a
	 * receive rewrites only the headers a send or the kernel touched since: rewriting all
	 * burst headers was most of an idle poll's cost (docs/perf-history.md, issue 16). */
	uint32_t msgs_dirty;
	struct keel_udp_stats stats;
};

/* Byte offsets of each array from the aligned start of `mem`. */
struct layout {
	size_t peers, hash, msgs, iovs, msg_dgrams, srcs, gso_ctrl, gro_buf, stage, join, total;
	uint32_t stage_bytes;
	uint32_t hash_slots;
	uint32_t msgs_cap, iovs_cap;
};

static const struct keel_transport_ops udp_ops;

static size_t align_up(size_t n)
{
	return (n + CACHE_LINE_BYTES - 1) & ~(size_t)(CACHE_LINE_BYTES - 1);
}

static uint32_t max_u32(uint32_t a, uint32_t b)
{
	return a > b ? a : b;
}

static uint32_t min_u32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

/* splitmix64's finaliser: spreads address bits over the whole word. */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static int parse_host(const char *host, union peer_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (host == NULL)
		host = "127.0.0.1";
	if (inet_pton(AF_INET, host, &a->in4.sin_addr) == 1) {
		a->in4.sin_family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, host, &a->in6.sin6_addr) == 1) {
		a->in6.sin6_family = AF_INET6;
		return 0;
	}
	return -EINVAL;
}

static socklen_t family_addr_len(int family)
{
	return family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* The smallest piece that cuts a datagram of `mtu` bytes into at most PIECES_MAX. */
static uint32_t piece_bytes_min(uint32_t mtu)
{
	return PIECE_HDR_BYTES + (mtu + PIECES_MAX - 1) / PIECES_MAX;
}

static bool config_valid(const struct keel_udp_config *cfg)
{
	union peer_addr a;

	return cfg != NULL && cfg->world_size >= 1 && cfg->world_size <= KEEL_WORLD_MAX &&
	       cfg->rank < cfg->world_size && cfg->mtu >= KEEL_MTU_MIN &&
	       cfg->mtu <= KEEL_MTU_MAX && cfg->burst >= 1 && cfg->burst <= KEEL_BURST_MAX &&
	       cfg->sockbuf_bytes >= 0 && parse_host(cfg->bind_host, &a) == 0 &&
	       (cfg->piece_bytes == 0 || (cfg->piece_bytes >= piece_bytes_min(cfg->mtu) &&
					  cfg->piece_bytes <= GSO_BYTES_MAX &&
					  cfg->join_slots >= 1 && cfg->join_slots <= 64));
}

/* A cut datagram's bytes in the stage, its piece headers included, for the smallest piece
 * size allowed: keel_udp_set_piece_bytes may lower it after init. */
static uint32_t cut_bytes_max(uint32_t mtu)
{
	return mtu + PIECES_MAX * PIECE_HDR_BYTES;
}

/* Receive coalescing is asked for (the kernel may still refuse it): where two datagrams fit
 * one coalesced run, or where the transport joins pieces, whatever its datagram size. What
 * arrives then is pieces, which keel_udp_set_piece_bytes may make smaller still; without
 * UDP_GRO the kernel would cut every coalesced run it receives into one buffer per piece. */
static bool gro_wanted(const struct keel_udp_config *cfg)
{
	return cfg->gso && (2 * cfg->mtu <= GSO_BYTES_MAX || cfg->piece_bytes != 0);
}

static void layout_compute(const struct keel_udp_config *cfg, struct layout *l)
{
	uint32_t slots = HASH_SLOTS_MIN;

	/* At most half full, so probes stay short and an empty slot always ends a search. */
	while (slots < 2 * cfg->world_size)
		slots *= 2;
	l->hash_slots = slots;
	/* a cut datagram takes a message per piece where the kernel cannot coalesce */
	l->msgs_cap = cfg->burst + (cfg->piece_bytes != 0 ? PIECES_MAX : 0);
	l->iovs_cap = 2 * cfg->burst + (cfg->piece_bytes != 0 ? PIECES_MAX : 0);
	l->peers = align_up(sizeof(struct udp));
	l->hash = l->peers + align_up(cfg->world_size * sizeof(union peer_addr));
	l->msgs = l->hash + align_up(slots * sizeof(uint16_t));
	l->iovs = l->msgs + align_up(l->msgs_cap * sizeof(struct mmsghdr));
	l->msg_dgrams = l->iovs + align_up(l->iovs_cap * sizeof(struct iovec));
	l->srcs = l->msg_dgrams + align_up(l->msgs_cap * sizeof(uint32_t));
	l->gso_ctrl = l->srcs + align_up(cfg->burst * sizeof(union peer_addr));
	l->gro_buf = l->gso_ctrl + align_up(l->msgs_cap * GSO_CTRL_BYTES);
	l->stage = l->gro_buf + (gro_wanted(cfg) ? GRO_SLOTS * GRO_BUF_BYTES : 0);
	/* A burst's runs hold at most burst datagrams of at most mtu bytes, each run rounded
	 * up to a cache line; cut datagrams carry their piece headers too. */
	if (cfg->piece_bytes != 0)
		l->stage_bytes = cfg->burst * (uint32_t)align_up(cut_bytes_max(cfg->mtu));
	else if (cfg->gso && cfg->stage_runs && cfg->mtu <= STAGE_SEG_MAX)
		l->stage_bytes = cfg->burst * ((uint32_t)align_up(cfg->mtu));
	else
		l->stage_bytes = 0;
	l->join = l->stage + align_up(l->stage_bytes);
	l->total =
	    l->join + (cfg->piece_bytes != 0 ? piece_joiner_bytes(cfg->join_slots, cfg->mtu) : 0);
}

void keel_udp_config_default(struct keel_udp_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	memset(cfg, 0, sizeof(*cfg));
	cfg->rank = 0;
	cfg->world_size = 1;
	cfg->bind_host = "127.0.0.1";
	cfg->bind_port = 0;
	cfg->mtu = KEEL_MTU_DEFAULT;
	cfg->burst = KEEL_BURST_DEFAULT;
	cfg->sockbuf_bytes = 0;
	cfg->gso = true;
	cfg->stage_runs = true;
	cfg->piece_bytes = 0;
	cfg->join_slots = JOIN_SLOTS_DEFAULT;
}

size_t keel_udp_storage_size(const struct keel_udp_config *cfg)
{
	struct layout l;

	if (!config_valid(cfg))
		return 0;
	layout_compute(cfg, &l);
	/* Slack so that any `mem` can be aligned to a cache line. */
	return l.total + CACHE_LINE_BYTES - 1;
}

static struct udp *udp_of(struct keel_transport *t)
{
	KEEL_ASSERT(t != NULL && t->ops == &udp_ops && t->state != NULL);
	return t->state;
}

static uint32_t addr_hash(const union peer_addr *a)
{
	uint64_t w[2];

	if (a->sa.sa_family == AF_INET)
		return (uint32_t)mix64((uint64_t)a->in4.sin_addr.s_addr << 16 | a->in4.sin_port);
	memcpy(w, &a->in6.sin6_addr, sizeof(w));
	return (uint32_t)mix64(w[0] ^ mix64(w[1] ^ a->in6.sin6_port));
}

/* Address and port only: flow label and scope differ between what a peer announces and what
 * recvmmsg reports, and do not name a different sender. */
static bool addr_equal(const union peer_addr *a, const union peer_addr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return false;
	if (a->sa.sa_family == AF_INET)
		return a->in4.sin_port == b->in4.sin_port &&
		       a->in4.sin_addr.s_addr == b->in4.sin_addr.s_addr;
	return a->in6.sin6_port == b->in6.sin6_port &&
	       memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, sizeof(a->in6.sin6_addr)) == 0;
}

/* The rank whose address is `a`, or -1. Bounded by the table size; the table is at most half
 * full, so in practice it stops at the first empty slot within a few probes. */
static int hash_lookup(const struct udp *u, const union peer_addr *a)
{
	uint32_t s = addr_hash(a) & u->hash_mask;
	uint32_t probes;

	for (probes = 0; probes <= u->hash_mask; probes++) {
		uint16_t e = u->hash[s];

		if (e == HASH_EMPTY)
			return -1;
		if (addr_equal(&u->peers[e - 1], a))
			return e - 1;
		s = (s + 1) & u->hash_mask;
	}
	return -1;
}

static void hash_insert(struct udp *u, uint32_t rank)
{
	uint32_t s = addr_hash(&u->peers[rank]) & u->hash_mask;
	uint32_t probes;

	for (probes = 0; probes <= u->hash_mask; probes++) {
		if (u->hash[s] == HASH_EMPTY) {
			u->hash[s] = (uint16_t)(rank + 1);
			return;
		}
		s = (s + 1) & u->hash_mask;
	}
	KEEL_ASSERT(!"peer hash full"); /* impossible: slots >= 2 * world_size */
}

/* Backward-shift deletion: no tombstones, so lookups stay short however often peers move. */
static void hash_remove(struct udp *u, uint32_t rank)
{
	uint32_t i = addr_hash(&u->peers[rank]) & u->hash_mask;
	uint32_t j, probes;

	for (probes = 0; probes <= u->hash_mask && u->hash[i] != rank + 1; probes++)
		i = (i + 1) & u->hash_mask;
	KEEL_ASSERT(u->hash[i] == rank + 1);
	j = i;
	for (probes = 0; probes <= u->hash_mask; probes++) {
		uint32_t home;

		j = (j + 1) & u->hash_mask;
		if (u->hash[j] == HASH_EMPTY)
			break;
		home = addr_hash(&u->peers[u->hash[j] - 1]) & u->hash_mask;
		/* The entry at j may fill the hole at i only if i lies on its probe path [home, j).
		 */
		if (((j - home) & u->hash_mask) >= ((j - i) & u->hash_mask)) {
			u->hash[i] = u->hash[j];
			i = j;
		}
	}
	u->hash[i] = HASH_EMPTY;
}

/* Best effort: as root the FORCE variants pass net.core.[rw]mem_max; otherwise the kernel
 * clamps the plain request. A small buffer costs throughput, not correctness. */
static void set_sockbufs(int fd, int bytes)
{
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

/* Whether this kernel takes UDP_SEGMENT (0 as the socket's default segment size changes
 * nothing: each send names its own). */
static bool gso_supported(int fd)
{
	int zero = 0;

	return setsockopt(fd, IPPROTO_UDP, UDP_SEGMENT, &zero, sizeof(zero)) == 0;
}

/* Ask for coalesced receives; false where the kernel does not have them. */
static bool gro_enable(int fd)
{
	int one = 1;

	return setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) == 0;
}

static int open_socket(struct udp *u, const union peer_addr *bind_addr, int sockbuf_bytes)
{
	int one = 1;
	int fd = socket(u->family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int err;

	if (fd < 0)
		return -errno;
	/* An IPv6 socket speaks IPv6 only, so every source address has the socket's family. */
	if (u->family == AF_INET6 &&
	    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0)
		goto fail;
	set_sockbufs(fd, sockbuf_bytes ? sockbuf_bytes : SOCKBUF_BYTES_DEFAULT);
	if (bind(fd, &bind_addr->sa, family_addr_len(u->family)) != 0)
		goto fail;
	u->fd = fd;
	return 0;
fail:
	err = -errno;
	close(fd);
	return err;
}

int keel_udp_init(struct keel_transport **out, void *mem, size_t mem_len,
		  const struct keel_udp_config *cfg)
{
	union peer_addr bind_addr;
	struct layout l;
	struct udp *u;
	uint8_t *base;
	int err;

	KEEL_ASSERT(out != NULL);
	*out = NULL;
	if (!config_valid(cfg))
		return -EINVAL;
	if (mem == NULL || mem_len < keel_udp_storage_size(cfg))
		return -ENOSPC;
	layout_compute(cfg, &l);
	base = (uint8_t *)align_up((uintptr_t)mem);
	memset(base, 0, l.total); /* peers start AF_UNSPEC, hash slots HASH_EMPTY */
	u = (struct udp *)base;
	u->fd = -1;
	u->peers = (union peer_addr *)(base + l.peers);
	u->hash = (uint16_t *)(base + l.hash);
	u->msgs = (struct mmsghdr *)(base + l.msgs);
	u->iovs = (struct iovec *)(base + l.iovs);
	u->msg_dgrams = (uint32_t *)(base + l.msg_dgrams);
	u->srcs = (union peer_addr *)(base + l.srcs);
	u->gso_ctrl = base + l.gso_ctrl;
	u->gro_buf = base + l.gro_buf;
	u->stage = base + l.stage;
	u->stage_bytes = l.stage_bytes;
	u->stage_small = cfg->gso && cfg->stage_runs && cfg->mtu <= STAGE_SEG_MAX;
	u->msgs_cap = l.msgs_cap;
	u->iovs_cap = l.iovs_cap;
	u->piece_bytes = cfg->piece_bytes;
	u->joins = cfg->piece_bytes != 0;
	if (u->joins)
		piece_joiner_init(&u->join, base + l.join, cfg->join_slots, cfg->mtu);
	u->hash_mask = l.hash_slots - 1;
	u->burst = cfg->burst;
	u->msgs_dirty = u->burst; /* no header has the receive layout yet */
	err = parse_host(cfg->bind_host, &bind_addr);
	KEEL_ASSERT(err == 0); /* config_valid parsed it already */
	u->family = bind_addr.sa.sa_family;
	if (u->family == AF_INET)
		bind_addr.in4.sin_port = htons(cfg->bind_port);
	else
		bind_addr.in6.sin6_port = htons(cfg->bind_port);
	u->t = (struct keel_transport){
	    .ops = &udp_ops,
	    .state = u,
	    .caps = KEEL_CAP_GATHER, /* sendmmsg takes each datagram as two iovecs */
	    .mtu = cfg->mtu,
	    .rank = cfg->rank,
	    .world_size = cfg->world_size,
	};
	err = open_socket(u, &bind_addr, cfg->sockbuf_bytes);
	if (err < 0)
		return err; /* nothing is left open; *out stays NULL */
	u->gso = cfg->gso && gso_supported(u->fd);
	u->stats.gso = u->gso;
	u->gro = gro_wanted(cfg) && gro_enable(u->fd);
	u->stats.gro = u->gro;
	*out = &u->t;
	return 0;
}

int keel_udp_local_addr(struct keel_transport *t, struct sockaddr_storage *addr,
			socklen_t *addr_len)
{
	struct udp *u = udp_of(t);

	KEEL_ASSERT(addr != NULL && addr_len != NULL);
	if (u->fd < 0)
		return -EBADF;
	*addr_len = sizeof(*addr);
	if (getsockname(u->fd, (struct sockaddr *)addr, addr_len) != 0)
		return -errno;
	return 0;
}

int keel_udp_set_peer(struct keel_transport *t, uint32_t peer, const struct sockaddr *addr,
		      socklen_t addr_len)
{
	struct udp *u = udp_of(t);
	union peer_addr a;
	socklen_t need;

	if (peer >= t->world_size || addr == NULL || addr->sa_family != u->family)
		return -EINVAL;
	need = family_addr_len(u->family);
	if (addr_len < need)
		return -EINVAL;
	memset(&a, 0, sizeof(a));
	memcpy(&a, addr, need);
	if ((u->family == AF_INET ? a.in4.sin_port : a.in6.sin6_port) == 0)
		return -EINVAL; /* nothing listens on port 0 */
	if (u->peers[peer].sa.sa_family != AF_UNSPEC)
		hash_remove(u, peer);
	u->peers[peer] = a;
	hash_insert(u, peer);
	KEEL_ASSERT_DEBUG(hash_lookup(u, &a) >= 0);
	return 0;
}

void keel_udp_stats_get(struct keel_transport *t, struct keel_udp_stats *out)
{
	struct udp *u = udp_of(t);

	KEEL_ASSERT(out != NULL);
	*out = u->stats;
	out->rx_joined = u->join.stats.joined;
	out->rx_pieces_bad = u->join.stats.bad;
	out->rx_pieces_abandoned = u->join.stats.abandoned + u->join.stats.no_slot;
}

int keel_udp_set_piece_bytes(struct keel_transport *t, uint32_t piece_bytes)
{
	struct udp *u = udp_of(t);

	if (!u->joins || (piece_bytes != 0 &&
			  (piece_bytes < piece_bytes_min(t->mtu) || piece_bytes > GSO_BYTES_MAX)))
		return -EINVAL;
	u->piece_bytes = piece_bytes;
	return 0;
}

/* The socket buffer (or the qdisc/device queue) is full: the caller keeps the rest. */
static bool err_would_block(int err)
{
	return err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS || err == ENOMEM ||
	       err == EINTR;
}

/* Errors about one destination (an ICMP error from a dead or unreachable peer, a firewall
 * verdict): the socket itself is fine, so one bad peer must not stop the others' traffic. */
static bool err_is_datagram(int err)
{
	return err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH ||
	       err == EHOSTDOWN || err == ENETDOWN || err == EMSGSIZE || err == EPERM ||
	       err == EACCES || err == EADDRNOTAVAIL || err == ECONNRESET;
}

/* Datagrams in msgs[i]: one per iovec (a coalesced run has several). */
static uint32_t msg_datagrams(const struct udp *u, uint32_t i)
{
	return u->msg_dgrams[i];
}

/* Send msgs[0..n). Returns how many messages are done (sent, or skipped after a per-datagram
 * error), or KEEL_ETRANSPORT when the socket failed before any. *blocked is set when the kernel
 * would block; *gso_refused when it refused a coalesced run (the path's MTU is below the
 * datagrams, or the route cannot segment): coalescing is then off and the caller sends the
 * rest one by one. Each pass of the loop finishes a message or fails one try of it, so it ends
 * within n * SEND_TRIES_PER_DATAGRAM passes. */
static int send_msgs(struct udp *u, uint32_t n, bool *blocked, bool *gso_refused)
{
	uint32_t i = 0, tries = 0;

	*blocked = false;
	*gso_refused = false;
	while (i < n) {
		int r = sendmmsg(u->fd, u->msgs + i, n - i, MSG_DONTWAIT);
		int err;

		u->stats.tx_syscalls++;
		if (r > 0) {
			for (int k = 0; k < r; k++, i++) {
				u->stats.tx_datagrams += msg_datagrams(u, i);
				u->stats.tx_gso_sends += u->msgs[i].msg_hdr.msg_control != NULL;
				/* a coalesced run in one iovec was staged */
				u->stats.tx_staged_sends +=
				    u->msgs[i].msg_hdr.msg_control != NULL &&
				    u->msgs[i].msg_hdr.msg_iovlen == 1;
			}
			tries = 0;
			continue;
		}
		err = r == 0 ? EAGAIN : errno;
		if (err_would_block(err)) {
			*blocked = true;
			return (int)i;
		}
		if ((err == EINVAL || err == EIO) && u->msgs[i].msg_hdr.msg_control != NULL) {
			u->gso = false;
			u->stats.gso = false;
			u->stats.tx_gso_refused++;
			*gso_refused = true;
			return (int)i;
		}
		if (!err_is_datagram(err))
			return i > 0 ? (int)i : KEEL_ETRANSPORT;
		u->stats.tx_errors++;
		if (++tries >= SEND_TRIES_PER_DATAGRAM) {
			i++; /* lost, as UDP may lose anything */
			tries = 0;
		}
	}
	return (int)i;
}

static bool send_valid(const struct udp *u, const struct keel_datagram *g)
{
	return g->peer < u->t.world_size && u->peers[g->peer].sa.sa_family != AF_UNSPEC &&
	       keel_datagram_fits(g, u->t.mtu);
}

/* A datagram's bytes on the wire: its header piece and its tail. */
static uint32_t wire_len(const struct keel_datagram *g)
{
	return g->len + g->tail_len;
}

/* How many of d[i..n) join d[i] in one coalesced send: the same peer, every datagram but the
 * last as long as the first, within the kernel's segment and length limits. */
static uint32_t gso_run(const struct udp *u, const struct keel_datagram *d, uint32_t i, uint32_t n)
{
	uint32_t seg = wire_len(&d[i]), total = seg, j = i + 1;

	if (!u->gso || seg == 0)
		return 1;
	while (j < n && j - i < GSO_SEGS_MAX && d[j].peer == d[i].peer &&
	       wire_len(&d[j - 1]) == seg && wire_len(&d[j]) != 0 && wire_len(&d[j]) <= seg &&
	       total + wire_len(&d[j]) <= GSO_BYTES_MAX && send_valid(u, &d[j])) {
		total += wire_len(&d[j]);
		j++;
	}
	return j - i;
}

/* Point iov at the pieces of d[0..run) as they lie; returns the iovecs used. */
static uint32_t iov_pieces(const struct keel_datagram *d, uint32_t run, struct iovec *iov)
{
	uint32_t v = 0;

	for (uint32_t k = 0; k < run; k++) {
		iov[v++] = (struct iovec){.iov_base = d[k].buf, .iov_len = d[k].len};
		if (d[k].tail_len > 0)
			iov[v++] = (struct iovec){.iov_base = (void *)(uintptr_t)d[k].tail,
						  .iov_len = d[k].tail_len};
	}
	return v;
}

/* Copy the run d[0..run) into stage at *used, as the bytes the kernel would cut it from, and
 * point *iov at them. False (nothing copied) when runs are not staged: a single datagram, or
 * a transport whose mtu is above STAGE_SEG_MAX (then stage_bytes is 0). */
static bool stage_run(struct udp *u, const struct keel_datagram *d, uint32_t run, uint32_t *used,
		      struct iovec *iov)
{
	uint32_t bytes = 0;
	uint8_t *o = u->stage + *used;

	if (run < 2 || !u->stage_small)
		return false;
	for (uint32_t k = 0; k < run; k++) {
		memcpy(o + bytes, d[k].buf, d[k].len);
		bytes += d[k].len;
		if (d[k].tail_len > 0) {
			memcpy(o + bytes, d[k].tail, d[k].tail_len);
			bytes += d[k].tail_len;
		}
	}
	*iov = (struct iovec){.iov_base = o, .iov_len = bytes};
	*used += (uint32_t)align_up(bytes);
	/* fill_send_msgs takes at most burst datagrams of at most mtu bytes (send_valid) */
	KEEL_ASSERT(*used <= u->stage_bytes);
	return true;
}

/* Message m is a coalesced run: the kernel cuts it every `seg` bytes (UDP_SEGMENT). */
static void msg_segment(struct udp *u, uint32_t m, uint32_t seg)
{
	struct msghdr *h = &u->msgs[m].msg_hdr;
	uint16_t seg16 = (uint16_t)seg;
	struct cmsghdr *c;

	KEEL_ASSERT(seg > 0 && seg <= UINT16_MAX);
	h->msg_control = u->gso_ctrl + (size_t)m * GSO_CTRL_BYTES;
	h->msg_controllen = GSO_CTRL_BYTES;
	c = CMSG_FIRSTHDR(h);
	c->cmsg_level = IPPROTO_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(seg16));
	memcpy(CMSG_DATA(c), &seg16, sizeof(seg16));
}

/* Message m is iovecs [v, v + iovs) for `peer`, cut by the kernel every `seg` bytes when seg
 * is not 0 (a coalesced run); it completes `dgrams` datagrams. */
static void msg_set(struct udp *u, uint32_t m, uint32_t v, uint32_t iovs, uint32_t peer,
		    uint32_t seg, uint32_t dgrams)
{
	struct msghdr *h = &u->msgs[m].msg_hdr;

	KEEL_ASSERT(m < u->msgs_cap && v + iovs <= u->iovs_cap);
	memset(h, 0, sizeof(*h));
	h->msg_name = &u->peers[peer];
	h->msg_namelen = family_addr_len(u->family);
	h->msg_iov = &u->iovs[v];
	h->msg_iovlen = iovs;
	u->msg_dgrams[m] = dgrams;
	if (seg != 0)
		msg_segment(u, m, seg);
}

/* Message *m is `len` bytes of the stage at `at` (one iovec, *v); both move on. */
static void msg_staged(struct udp *u, uint32_t *m, uint32_t *v, uint32_t peer, uint8_t *at,
		       uint32_t len, uint32_t seg, uint32_t dgrams)
{
	KEEL_ASSERT(*v < u->iovs_cap);
	u->iovs[*v] = (struct iovec){.iov_base = at, .iov_len = len};
	msg_set(u, (*m)++, (*v)++, 1, peer, seg, dgrams);
}

/* Copy `n` bytes of g's wire form from byte `off` on to o (its header piece, then its tail). */
static void wire_copy(const struct keel_datagram *g, uint32_t off, uint32_t n, uint8_t *o)
{
	if (off < g->len) {
		uint32_t k = min_u32(n, g->len - off);

		memcpy(o, g->buf + off, k);
		o += k;
		off += k;
		n -= k;
	}
	if (n > 0)
		memcpy(o, g->tail + (off - g->len), n);
}

/* Datagrams of d[0..n) to cut, for d[0].peer, go into the stage at *used as pieces, back to
 * back, and into messages from *m (iovecs from *v): runs of up to a kernel run's worth of
 * pieces, across datagrams, each ended early by a short piece (the kernel cuts a run into
 * equal segments, the last one shorter), or one piece a message without coalescing. A full
 * datagram is whole pieces, so a burst of them to one peer goes in runs of 44 1472-byte
 * pieces: as few sends, and as few receives, as whole 1472-byte datagrams took. Stops at
 * another peer, a datagram that goes whole, or where the stage or the messages are full.
 * Returns the datagrams taken. */
static uint32_t cut_run(struct udp *u, const struct keel_datagram *d, uint32_t n, uint32_t *m,
			uint32_t *v, uint32_t *used)
{
	uint32_t chunk = u->piece_bytes - PIECE_HDR_BYTES, taken;
	uint32_t per_msg = u->gso ? min_u32(GSO_SEGS_MAX, GSO_BYTES_MAX / u->piece_bytes) : 1;
	uint8_t *start = u->stage + *used, *at = start, *msg_at = start;
	uint32_t in_msg = 0, msg_dgrams = 0;

	KEEL_ASSERT(per_msg >= 1);
	for (taken = 0; taken < n; taken++) {
		const struct keel_datagram *g = &d[taken];
		uint32_t len = wire_len(g);

		if (g->peer != d[0].peer || !send_valid(u, g) || len <= u->piece_bytes)
			break;
		uint32_t count = pieces_count(len, chunk);
		/* each piece opens at most one message */
		if ((size_t)(at - u->stage) + len + count * PIECE_HDR_BYTES > u->stage_bytes ||
		    *m + (in_msg > 0) + count > u->msgs_cap ||
		    *v + (in_msg > 0) + count > u->iovs_cap)
			break;
		KEEL_ASSERT(count >= 2 && count <= PIECES_MAX);
		for (uint32_t i = 0; i < count; i++) {
			uint32_t off = i * chunk, part = min_u32(chunk, len - off);

			if (in_msg == 0)
				msg_at = at;
			piece_header_put(at, u->piece_id, i, count, chunk);
			wire_copy(g, off, part, at + PIECE_HDR_BYTES);
			at += PIECE_HDR_BYTES + part;
			in_msg++;
			msg_dgrams += i + 1 == count;
			if (in_msg == per_msg || part < chunk) {
				msg_staged(u, m, v, g->peer, msg_at, (uint32_t)(at - msg_at),
					   in_msg > 1 ? u->piece_bytes : 0, msg_dgrams);
				in_msg = 0;
				msg_dgrams = 0;
			}
		}
		u->piece_id++;
		u->stats.tx_cut++;
		u->stats.tx_pieces += count;
	}
	if (in_msg > 0)
		msg_staged(u, m, v, d[0].peer, msg_at, (uint32_t)(at - msg_at),
			   in_msg > 1 ? u->piece_bytes : 0, msg_dgrams);
	*used += (uint32_t)align_up((size_t)(at - start));
	return taken;
}

/* Fill msgs with the valid prefix of d[0..n); stops at a bad peer or an oversized datagram,
 * or where the messages or the stage are full. Returns the datagrams taken; *msgs_out the
 * messages they make. */
static uint32_t fill_send_msgs(struct udp *u, const struct keel_datagram *d, uint32_t n,
			       uint32_t *msgs_out)
{
	uint32_t i = 0, m = 0, v = 0, staged = 0;

	KEEL_ASSERT(n <= u->burst);
	while (i < n && send_valid(u, &d[i])) {
		if (u->piece_bytes != 0 && wire_len(&d[i]) > u->piece_bytes) {
			uint32_t cut = cut_run(u, d + i, n - i, &m, &v, &staged);
			if (cut == 0)
				break;
			i += cut;
			continue;
		}
		if (m >= u->msgs_cap || v + 2 > u->iovs_cap)
			break;
		uint32_t run = gso_run(u, d, i, n), first = v;

		/* The kernel cuts a coalesced run every seg bytes of the iovecs joined: a
		 * datagram in two pieces is two iovecs, and its segment still one datagram. */
		if (stage_run(u, d + i, run, &staged, &u->iovs[v]))
			v++;
		else if (v + 2 * run <= u->iovs_cap)
			v += iov_pieces(d + i, run, &u->iovs[v]);
		else
			break;
		msg_set(u, m, first, v - first, d[i].peer, run > 1 ? wire_len(&d[i]) : 0, run);
		i += run;
		m++;
	}
	/* only the first burst entries ever take the receive layout */
	u->msgs_dirty = min_u32(u->burst, max_u32(u->msgs_dirty, m));
	*msgs_out = m;
	return i;
}

static int udp_send_burst(struct keel_transport *t, uint64_t now_ns, const struct keel_datagram *d,
			  uint32_t count)
{
	struct udp *u = udp_of(t);
	uint32_t done = 0;

	(void)now_ns;
	KEEL_ASSERT(d != NULL || count == 0);
	KEEL_ASSERT(count <= INT32_MAX);
	if (u->fd < 0)
		return KEEL_ETRANSPORT;
	/* Bounded by count: every pass moves done forward by a whole chunk or returns, except
	 * once, when the kernel refuses coalescing (it is then off for good). */
	while (done < count) {
		uint32_t m, sent = 0;
		uint32_t n = fill_send_msgs(u, d + done, min_u32(count - done, u->burst), &m);
		bool blocked, gso_refused;
		int r;

		if (n == 0)
			return done > 0 ? (int)done : -EINVAL;
		r = send_msgs(u, m, &blocked, &gso_refused);
		if (r < 0)
			return done > 0 ? (int)done : r;
		for (int k = 0; k < r; k++)
			sent += msg_datagrams(u, (uint32_t)k);
		done += sent;
		if (blocked) {
			u->stats.tx_would_block += count - done;
			return (int)done;
		}
		if (gso_refused)
			continue;
		if ((uint32_t)r < m)
			return (
			    int)done; /* a fatal error after some went out; reported next call */
	}
	return (int)done;
}

/* Point msgs at the caller's buffers: the kernel copies each datagram straight into them.
 * Only the headers below msgs_dirty are rewritten; the rest kept the receive layout. */
static void fill_recv_msgs(struct udp *u, struct keel_datagram *d, uint32_t n)
{
	uint32_t i, dirty = min_u32(u->msgs_dirty, n);

	KEEL_ASSERT(u->msgs_dirty <= u->burst && n <= u->burst);
	for (i = 0; i < dirty; i++) {
		struct msghdr *h = &u->msgs[i].msg_hdr;

		memset(h, 0, sizeof(*h));
		h->msg_name = &u->srcs[i];
		h->msg_namelen = sizeof(u->srcs[i]);
		h->msg_iov = &u->iovs[i];
		h->msg_iovlen = 1;
	}
	for (i = 0; i < n; i++) {
		u->iovs[i].iov_base = d[i].buf;
		u->iovs[i].iov_len = d[i].cap;
	}
	if (u->msgs_dirty <= n)
		u->msgs_dirty = 0;
	KEEL_ASSERT_DEBUG(n == 0 || (u->msgs[n - 1].msg_hdr.msg_name == &u->srcs[n - 1] &&
				     u->msgs[n - 1].msg_hdr.msg_iov == &u->iovs[n - 1] &&
				     u->msgs[n - 1].msg_hdr.msg_control == NULL));
}

static uint8_t *gro_slot_buf(const struct udp *u, uint32_t slot)
{
	return u->gro_buf + (size_t)slot * GRO_BUF_BYTES;
}

/* A piece from `peer` at p (len bytes) goes to the joiner; a datagram it completes goes to d,
 * lent where d takes lent bytes, copied otherwise. Returns the datagrams filled (0 or 1). */
static uint32_t deliver_joined(struct udp *u, struct keel_datagram *d, uint32_t peer,
			       const uint8_t *p, uint32_t len)
{
	const uint8_t *joined;
	uint32_t total = piece_join(&u->join, peer, p, len, &joined);

	if (total == 0)
		return 0;
	if (total > d->cap) { /* longer than the caller takes, lent or not */
		u->stats.rx_truncated++;
		return 0;
	}
	/* Lent, the slot stays until the next receive; one slot is never lent, so that pieces
	 * of the datagrams after it still find room in this one (copied out, as with GRO's). */
	if ((d->flags & KEEL_DGRAM_LEND) != 0 && piece_joiner_unlent(&u->join) > 1) {
		piece_joiner_lend(&u->join, joined);
		d->buf = (uint8_t *)(uintptr_t)joined; /* the joiner's slot, ours to lend */
	} else {
		memcpy(d->buf, joined, total);
	}
	d->len = total;
	d->peer = peer;
	return 1;
}

/* Cut the runs landed, oldest first, into d[0..n), lent or copied; returns the datagrams
 * filled. Pieces among them are joined (deliver_joined). A datagram longer than its buffer's cap is
 * dropped and counted, as recvmmsg's truncation is. A run of length 0 is one empty datagram. */
static uint32_t gro_deliver(struct udp *u, struct keel_datagram *d, uint32_t n)
{
	uint32_t k = 0;

	while (u->gro_pending > 0 && k < n) {
		uint32_t slot = u->gro_order[0];
		struct gro_run *run = &u->gro_runs[slot];
		uint32_t len = min_u32(run->seg, run->left);
		uint8_t *seg_at = gro_slot_buf(u, slot) + run->off;

		if (u->joins && piece_looks(seg_at, len)) {
			k += deliver_joined(u, &d[k], run->peer, seg_at, len);
		} else if (len <= d[k].cap) {
			uint8_t *at = seg_at;

			if ((d[k].flags & KEEL_DGRAM_LEND) && slot != GRO_COPY_SLOT) {
				d[k].buf = at;
				u->gro_lent |= 1u << slot;
			} else if (len > 0) {
				memcpy(d[k].buf, at, len);
			}
			d[k].len = len;
			d[k].peer = run->peer;
			k++;
		} else {
			u->stats.rx_truncated++;
		}
		run->off += len;
		run->left -= len;
		if (run->left == 0) { /* used up: the slot is free for the next landing */
			u->gro_pending--;
			memmove(u->gro_order, u->gro_order + 1, u->gro_pending);
		}
	}
	return k;
}

/* The segment size of a coalesced receive, or 0 when the kernel handed up one datagram. */
static uint32_t gro_segment(const struct msghdr *h)
{
	for (const struct cmsghdr *c = CMSG_FIRSTHDR(h); c != NULL;
	     c = CMSG_NXTHDR((struct msghdr *)h, (struct cmsghdr *)c)) {
		int seg;

		if (c->cmsg_level != IPPROTO_UDP || c->cmsg_type != UDP_GRO ||
		    c->cmsg_len < CMSG_LEN(sizeof(seg)))
			continue;
		memcpy(&seg, CMSG_DATA(c), sizeof(seg));
		return seg > 0 ? (uint32_t)seg : 0;
	}
	return 0;
}

/* Is `slot` free to land a run in this receive: no run left in it, nothing lent from it? */
static bool gro_slot_free(const struct udp *u, uint32_t slot)
{
	if ((u->gro_lent >> slot) & 1u)
		return false;
	for (uint32_t i = 0; i < u->gro_pending; i++)
		if (u->gro_order[i] == slot)
			return false;
	return true;
}

/* Point gro_msgs at the free slots, at most `max` of them; *slots gets each one's slot. */
static uint32_t gro_prepare(struct udp *u, uint32_t max, uint8_t *slots)
{
	uint32_t v = 0;

	for (uint32_t slot = 0; slot < GRO_SLOTS && v < max; slot++) {
		if (!gro_slot_free(u, slot))
			continue;
		u->gro_iovs[v] =
		    (struct iovec){.iov_base = gro_slot_buf(u, slot), .iov_len = GRO_BUF_BYTES};
		u->gro_msgs[v].msg_hdr = (struct msghdr){
		    .msg_name = &u->gro_srcs[v],
		    .msg_namelen = sizeof(u->gro_srcs[v]),
		    .msg_iov = &u->gro_iovs[v],
		    .msg_iovlen = 1,
		    .msg_control = u->gro_ctrl[v],
		    .msg_controllen = sizeof(u->gro_ctrl[v]),
		};
		slots[v++] = (uint8_t)slot;
	}
	return v;
}

/* Queue what message i of the last recvmmsg brought into `slot`, if it is a run to keep. */
static void gro_land(struct udp *u, uint32_t i, uint32_t slot)
{
	const struct msghdr *h = &u->gro_msgs[i].msg_hdr;
	uint32_t r = u->gro_msgs[i].msg_len;

	if (h->msg_flags & MSG_TRUNC) {
		u->stats.rx_truncated++;
		return;
	}
	int rank = hash_lookup(u, &u->gro_srcs[i]);
	if (rank < 0) {
		u->stats.rx_unknown_source++;
		return;
	}
	uint32_t seg = gro_segment(h);
	if (seg == 0 || seg > r)
		seg = r;
	u->stats.rx_gro_runs += seg < r;
	u->gro_runs[slot] =
	    (struct gro_run){.off = 0, .left = r, .seg = seg, .peer = (uint32_t)rank};
	KEEL_ASSERT(u->gro_pending < GRO_SLOTS);
	u->gro_order[u->gro_pending++] = (uint8_t)slot;
}

/* Receive with coalescing: one recvmmsg lands a run in each free slot, and the runs are cut
 * into d. Stops when d is full (the rest waits in its slots), the socket is empty (fewer runs
 * came than asked for), no slot is free, or after n receives. */
static int recv_gro(struct udp *u, struct keel_datagram *d, uint32_t n)
{
	uint32_t kept, tries = 0;
	uint8_t slots[GRO_SLOTS];

	u->gro_lent = 0; /* the caller gave back what the last receive lent */
	kept = gro_deliver(u, d, n);
	/* At most n receives a call, as recvmmsg takes at most n: a flood of datagrams from
	 * unknown addresses must not keep the caller here. */
	for (uint32_t calls = 0; kept < n && calls < n; calls++) {
		/* each run is a datagram at least: no more runs than d has room for */
		uint32_t v = gro_prepare(u, n - kept, slots);
		if (v == 0)
			break; /* every slot lent or holding what d has no room for */
		int r = recvmmsg(u->fd, u->gro_msgs, v, MSG_DONTWAIT, NULL);

		u->stats.rx_syscalls++;
		if (r < 0) {
			int err = errno;

			if (err_would_block(err))
				break;
			if (!err_is_datagram(err))
				return kept > 0 ? (int)kept : KEEL_ETRANSPORT;
			u->stats.tx_errors++; /* an ICMP error about something we sent */
			if (++tries >= RECV_TRIES)
				break;
			continue;
		}
		for (uint32_t i = 0; i < (uint32_t)r; i++)
			gro_land(u, i, slots[i]);
		kept += gro_deliver(u, d + kept, n - kept);
		if ((uint32_t)r < v)
			break; /* the socket had no more: no call to learn it again */
	}
	u->stats.rx_datagrams += kept;
	return (int)kept;
}

/* Keep what messages 0..r of the last recvmmsg brought into d, moved up past the ones dropped
 * (truncated, from unknown senders, pieces that complete nothing); returns how many. */
static uint32_t recv_keep(struct udp *u, struct keel_datagram *d, uint32_t r)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < r; i++) {
		const struct msghdr *h = &u->msgs[i].msg_hdr;
		int rank;

		if (h->msg_flags & MSG_TRUNC) {
			u->stats.rx_truncated++;
			continue;
		}
		rank = hash_lookup(u, &u->srcs[i]);
		if (rank < 0) {
			u->stats.rx_unknown_source++;
			continue;
		}
		/* A piece's bytes go to the joiner at once: its buffer may then take the datagram
		 * it completes (below, copied: the caller's buffers stay in d). */
		const uint8_t *joined = NULL;
		uint32_t len = u->msgs[i].msg_len;
		if (u->joins && piece_looks(d[i].buf, len)) {
			len = piece_join(&u->join, (uint32_t)rank, d[i].buf, len, &joined);
			if (len == 0)
				continue;
			if (len > d[i].cap) {
				u->stats.rx_truncated++;
				continue;
			}
		}
		/* Close the gap left by a dropped datagram by exchanging buffers, not bytes. */
		if (kept != i) {
			uint8_t *buf = d[kept].buf;
			uint32_t cap = d[kept].cap;

			d[kept].buf = d[i].buf;
			d[kept].cap = d[i].cap;
			d[i].buf = buf;
			d[i].cap = cap;
		}
		if (joined != NULL)
			memcpy(d[kept].buf, joined, len);
		d[kept].len = len;
		d[kept].peer = (uint32_t)rank;
		kept++;
	}
	return kept;
}

static int udp_recv_burst(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
			  uint32_t count_max)
{
	struct udp *u = udp_of(t);
	uint32_t n = min_u32(count_max, u->burst), kept, tries;
	int r = -1;

	(void)now_ns;
	KEEL_ASSERT(d != NULL || count_max == 0);
	if (u->fd < 0)
		return KEEL_ETRANSPORT;
	if (n == 0)
		return 0;
	if (u->joins)
		piece_joiner_release(&u->join); /* the caller is done with what was lent */
	if (u->gro)
		return recv_gro(u, d, n);
	fill_recv_msgs(u, d, n);
	for (tries = 0; tries < RECV_TRIES; tries++) {
		int err;

		r = recvmmsg(u->fd, u->msgs, n, MSG_DONTWAIT, NULL);
		u->stats.rx_syscalls++;
		/* The kernel wrote back msg_namelen, msg_flags, msg_len of the first r; one more
		 * (the one that failed, if any) is counted as touched too, to be safe. */
		u->msgs_dirty = max_u32(u->msgs_dirty, min_u32(n, (r > 0 ? (uint32_t)r : 0u) + 1u));
		if (r >= 0)
			break;
		err = errno;
		if (err_would_block(err))
			return 0;
		if (!err_is_datagram(err))
			return KEEL_ETRANSPORT;
		u->stats.tx_errors++; /* an ICMP error about something we sent */
	}
	kept = r > 0 ? recv_keep(u, d, (uint32_t)r) : 0;
	u->stats.rx_datagrams += kept;
	return (int)kept;
}

static uint64_t udp_next_deadline_ns(struct keel_transport *t)
{
	(void)udp_of(t);
	return UINT64_MAX; /* nothing is ever held back */
}

static int udp_wait_fd(struct keel_transport *t)
{
	return udp_of(t)->fd;
}

/* Input is waiting: the rest of a coalesced run, or anything on the socket. */
static bool udp_rx_ready(struct keel_transport *t)
{
	struct udp *u = udp_of(t);
	char byte;

	if (u->gro_pending > 0)
		return true;
	if (u->fd < 0)
		return false;
	if (recv(u->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0)
		return true;
	return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

/* The socket wakes a sleeper by itself; only the rest of a run in gro_buf would not. */
static bool udp_arm_wait(struct keel_transport *t)
{
	return udp_of(t)->gro_pending == 0;
}

static void udp_fini(struct keel_transport *t)
{
	struct udp *u;

	if (t == NULL)
		return; /* a failed init leaves *out NULL */
	u = udp_of(t);
	if (u->fd >= 0)
		close(u->fd);
	u->fd = -1;
}

static const struct keel_transport_ops udp_ops = {
    .name = "udp",
    .send_burst = udp_send_burst,
    .recv_burst = udp_recv_burst,
    .next_deadline_ns = udp_next_deadline_ns,
    .wait_fd = udp_wait_fd,
    .fini = udp_fini,
    .rx_ready = udp_rx_ready,
    .arm_wait = udp_arm_wait,
};
