/* The shared-memory transport: one region per job on a host, one single-producer/single-consumer
 * ring of length-prefixed records per (sender, receiver), a doorbell socket per rank for waking
 * a receiver that went idle. No allocation: private state lives in the caller's `mem`, rings in
 * the shared region. The rules every rank follows are in keel/transport_shm.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "assert_int.h"
#include "keel/limits.h"
#include "keel/transport_shm.h"

#define CACHE_LINE_BYTES 64u
#define RECORD_HDR_BYTES 8u
/* tail = generation << POS_BITS | position: a publish names the generation it wrote for. */
#define POS_BITS 48u
#define POS_MASK ((1ull << POS_BITS) - 1)
#define GEN_MAX	 ((1ull << (64 - POS_BITS)) - 1)
/* A publish that races a receiver's restart is tried again on the new rings, once. */
#define PUBLISH_TRIES 2u
#define DRAIN_BYTES   64u
/* Staged runs: records of up to STAGE_RECORD_MAX bytes bound for one receiver are gathered in
 * private memory (STAGE_BYTES of the caller's) and copied into the ring in one piece. Copied
 * record by record, each a header and two pieces, they cost the sender a stall on every record:
 * its first store to a line the receiver last read waited for the line to come back (on the
 * 2-vCPU VM of perf-history.md, 2 ranks, 1472-byte datagrams, a third of the sender's cycles on
 * that store). One long copy does not: 1 MiB AllReduces took 1.7x less time. A single record
 * goes as it is: staging it only adds a copy. */
#define STAGE_RECORD_MAX 4096u
#define STAGE_BYTES	 65536u

_Static_assert(KEEL_MTU_MAX + RECORD_HDR_BYTES < KEEL_SHM_RING_BYTES_MAX / 2, "a ring holds two");

/* Head, tail and the sleeping mark on separate cache lines: the sender writes the tail, the
 * receiver the head, each on every record. The sender reads the mark after every publish and
 * the receiver writes it only around a block, so on its own line the mark stays in the
 * sender's cache; beside the head it would cost the sender a miss per record. */
struct ring_hdr {
	_Alignas(CACHE_LINE_BYTES) _Atomic uint64_t tail; /* written by the sender */
	_Alignas(CACHE_LINE_BYTES) _Atomic uint64_t head; /* written by the receiver */
	/* set by the receiver when it found the ring empty */
	_Alignas(CACHE_LINE_BYTES) _Atomic uint32_t sleeping;
};

/* The region's first line: a region mapped by name must have been made for the same job shape. */
struct region_hdr {
	_Alignas(CACHE_LINE_BYTES) _Atomic uint32_t world;
	_Atomic uint32_t ring_bytes;
};

struct shm {
	struct keel_transport t;
	uint8_t *region;
	size_t region_len;
	bool mapped; /* by init (munmap at fini), or the caller's */
	int bell_fd;
	uint32_t ring_bytes;
	uint32_t rr; /* the inbound ring recv_burst starts at, for fairness */
	bool more;   /* the last recv_burst filled the caller's array */
	/* The caller arms before it blocks (shm_arm_wait has been called): a receive no longer
	 * marks empty rings sleeping, so senders ring no doorbell for a receiver that spins. */
	bool caller_arms;
	bool armed; /* rings were marked since the last receive: doorbells may be waiting */
	bool lent;  /* some inbound ring's read is ahead of its head (shm_give_back) */
	/* [world]: how far this rank has taken each inbound ring's records; ahead of its head
	 * while some of them are lent to the caller (KEEL_DGRAM_LEND), whom the sender must not
	 * overwrite yet. Private memory: no other process can move it. */
	uint64_t *read;
	/* [world]: the head of each outbound ring as last read, with the generation of the tail
	 * it was read under. Heads only move forward within a generation, so the room it shows
	 * is never more than there is: the sender reads the receiver's head line only when a
	 * run does not fit, not on every record. */
	struct head_kept *kept;
	/* [STAGE_BYTES] when stage_runs (else NULL): records written at stage_pos onwards and not
	 * yet copied into the ring, stage_used bytes of them */
	uint8_t *stage;
	uint32_t stage_used;
	uint64_t stage_pos;
	char name[KEEL_SHM_NAME_MAX + 1];
	struct keel_shm_stats stats;
};

struct head_kept {
	uint64_t head;
	uint64_t gen; /* 0 (no tail has it: generations start at 1): none kept */
};

static const struct keel_transport_ops shm_ops;

static size_t align_up(size_t n)
{
	return (n + CACHE_LINE_BYTES - 1) & ~(size_t)(CACHE_LINE_BYTES - 1);
}

static uint32_t record_bytes(uint32_t len)
{
	return RECORD_HDR_BYTES + ((len + 7u) & ~7u);
}

static bool name_valid(const char *name)
{
	size_t len = name != NULL ? strnlen(name, KEEL_SHM_NAME_MAX + 1) : 0;

	return len >= 2 && len <= KEEL_SHM_NAME_MAX && name[0] == '/' &&
	       strchr(name + 1, '/') == NULL;
}

static bool config_valid(const struct keel_shm_config *cfg)
{
	return cfg != NULL && cfg->world_size >= 1 && cfg->world_size <= KEEL_WORLD_MAX &&
	       cfg->rank < cfg->world_size && cfg->mtu >= KEEL_MTU_MIN &&
	       cfg->mtu <= KEEL_MTU_MAX && cfg->ring_bytes <= KEEL_SHM_RING_BYTES_MAX &&
	       (cfg->ring_bytes & (cfg->ring_bytes - 1)) == 0 &&
	       cfg->ring_bytes >= 2 * record_bytes(cfg->mtu) && name_valid(cfg->name);
}

static size_t ring_stride(uint32_t ring_bytes)
{
	return sizeof(struct ring_hdr) + ring_bytes;
}

static size_t rings_offset(uint32_t world)
{
	(void)world; /* no per-rank header: the rings follow the region's */
	return align_up(sizeof(struct region_hdr));
}

void keel_shm_config_default(struct keel_shm_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	memset(cfg, 0, sizeof(*cfg));
	cfg->world_size = 1;
	cfg->mtu = KEEL_MTU_MAX;
	cfg->ring_bytes = KEEL_SHM_RING_BYTES_DEFAULT;
	cfg->reliable = true; /* the rings lose nothing (what the core drops, it resends) */
	cfg->stage_runs = true;
}

size_t keel_shm_region_size(const struct keel_shm_config *cfg)
{
	if (!config_valid(cfg))
		return 0;
	return rings_offset(cfg->world_size) +
	       (size_t)cfg->world_size * (cfg->world_size - 1) * ring_stride(cfg->ring_bytes);
}

size_t keel_shm_storage_size(const struct keel_shm_config *cfg)
{
	if (!config_valid(cfg))
		return 0;
	return align_up(sizeof(struct shm)) +
	       align_up((size_t)cfg->world_size * (sizeof(uint64_t) + sizeof(struct head_kept))) +
	       (cfg->stage_runs ? STAGE_BYTES : 0) + CACHE_LINE_BYTES - 1;
}

static struct shm *shm_of(struct keel_transport *t)
{
	KEEL_ASSERT(t != NULL && t->ops == &shm_ops && t->state != NULL);
	return t->state;
}

/* The ring that `to` reads and `from` writes; there is none from a rank to itself. */
static struct ring_hdr *ring_of(const struct shm *s, uint32_t to, uint32_t from)
{
	size_t idx = (size_t)to * (s->t.world_size - 1) + (from < to ? from : from - 1);

	KEEL_ASSERT_DEBUG(to != from && to < s->t.world_size && from < s->t.world_size);
	return (struct ring_hdr *)(s->region + rings_offset(s->t.world_size) +
				   idx * ring_stride(s->ring_bytes));
}

static uint8_t *ring_data(struct ring_hdr *r)
{
	return (uint8_t *)(r + 1);
}

/* Copy into the ring at byte position pos, wrapping at its end. */
static void ring_put(struct shm *s, struct ring_hdr *r, uint64_t pos, const void *src, uint32_t n)
{
	uint32_t off = (uint32_t)(pos & (s->ring_bytes - 1));
	uint32_t first = n < s->ring_bytes - off ? n : s->ring_bytes - off;

	memcpy(ring_data(r) + off, src, first);
	if (first < n)
		memcpy(ring_data(r), (const uint8_t *)src + first, n - first);
}

static void ring_get(struct shm *s, struct ring_hdr *r, uint64_t pos, void *dst, uint32_t n)
{
	uint32_t off = (uint32_t)(pos & (s->ring_bytes - 1));
	uint32_t first = n < s->ring_bytes - off ? n : s->ring_bytes - off;

	memcpy(dst, ring_data(r) + off, first);
	if (first < n)
		memcpy((uint8_t *)dst + first, ring_data(r), n - first);
}

/* The doorbell's abstract address, "\0keel-shm<name>.<rank>": no file to clean up, released
 * when its process dies. Written by hand: a sender builds it for every wake-up, and snprintf
 * cost more than the rest of a small send. */
static socklen_t bell_addr(const struct shm *s, uint32_t rank, struct sockaddr_un *a)
{
	static const char prefix[] = "keel-shm";
	char digits[10]; /* a uint32_t has at most 10 */
	size_t name_len = strlen(s->name), d = 0, at = 1;

	do {
		digits[d++] = (char)('0' + rank % 10u);
		rank /= 10u;
	} while (rank != 0);
	/* names are short (KEEL_SHM_NAME_MAX) */
	KEEL_ASSERT(at + sizeof(prefix) - 1 + name_len + 1 + d < sizeof(a->sun_path));
	a->sun_family = AF_UNIX;
	a->sun_path[0] = '\0'; /* abstract: no file, gone with the socket */
	memcpy(a->sun_path + at, prefix, sizeof(prefix) - 1);
	at += sizeof(prefix) - 1;
	memcpy(a->sun_path + at, s->name, name_len);
	at += name_len;
	a->sun_path[at++] = '.';
	while (d > 0)
		a->sun_path[at++] = digits[--d];
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + at);
}

static int bell_open(struct shm *s)
{
	struct sockaddr_un a;
	socklen_t len = bell_addr(s, s->t.rank, &a);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int err;

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a, len) != 0) {
		err = -errno;
		close(fd);
		return err;
	}
	s->bell_fd = fd;
	return 0;
}

/* Best effort: a full socket already holds a wake-up, and a dead receiver needs none. */
static void bell_ring(struct shm *s, uint32_t to)
{
	struct sockaddr_un a;
	socklen_t len = bell_addr(s, to, &a);
	uint8_t byte = 1;

	if (sendto(s->bell_fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, len) ==
	    1)
		s->stats.doorbells_sent++;
}

/* Read every wake-up waiting, so the socket polls readable only for new ones. Every call
 * reads (one syscall when there is none): a count of doorbells kept beside the socket, to
 * skip that syscall, went wrong around a restart (a byte sent to the new socket but counted
 * before it existed), and a byte left unread keeps the waiter spinning on a readable socket. */
static void bell_drain(struct shm *s)
{
	uint8_t buf[DRAIN_BYTES];
	uint32_t i;

	/* Bounded: the socket holds at most its queue length of bytes (net.unix.max_dgram_qlen)
	 * plus what senders add meanwhile; the rest is read on the next call. */
	for (i = 0; i <= KEEL_WORLD_MAX; i++) {
		if (recv(s->bell_fd, buf, sizeof(buf), MSG_DONTWAIT) < 0)
			break;
		s->stats.doorbells_drained++;
	}
}

/* Awake again after the rings were armed: read the doorbells, and, where the caller arms
 * before each block, take the marks off so that senders stop ringing until the next arm. A
 * sender that saw a mark before it went rings once more: one spurious wake-up, never a lost
 * one (the next arm looks at every ring again). */
static void wake_settle(struct shm *s)
{
	uint32_t from;

	bell_drain(s);
	if (!s->caller_arms)
		return;
	s->armed = false;
	for (from = 0; from < s->t.world_size; from++) {
		if (from == s->t.rank)
			continue;
		struct ring_hdr *r = ring_of(s, s->t.rank, from);
		if (atomic_load_explicit(&r->sleeping, memory_order_relaxed))
			atomic_store_explicit(&r->sleeping, 0, memory_order_relaxed);
	}
}

/* A region mapped by name: created if absent (every rank sizes it alike), else checked.
 * Only this user may have made it, and only this user may open it: a datagram through the
 * rings carries no CRC, and in a job with a key no MAC either (nothing outside the job can
 * write here), so a region another user made first, or left open to others, is refused. */
static int region_map(struct shm *s, const struct keel_shm_config *cfg, size_t len)
{
	int fd = shm_open(cfg->name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	struct stat st;
	void *p;
	int err = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0)
		err = -errno;
	else if (st.st_uid != geteuid() || (st.st_mode & 077) != 0)
		err = -EACCES; /* another user made it, or may open it: see region_map's comment */
	else if (st.st_size != 0 && (size_t)st.st_size != len)
		err = -EINVAL; /* made for another world size or ring size */
	else if (st.st_size == 0 && ftruncate(fd, (off_t)len) != 0)
		err = -errno;
	if (err == 0) {
		/* Populated now: a first touch later costs a page fault in the middle of a copy
		 * (measured: 32 KiB AllReduces 60 % slower until the rings had wrapped once). */
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
		if (p == MAP_FAILED)
			err = -errno;
		else
			s->region = p;
	}
	close(fd); /* the mapping keeps the memory */
	s->mapped = err == 0;
	s->region_len = len;
	return err;
}

/* The first rank to arrive stamps the shape; the others must match it. */
static int region_check(struct shm *s)
{
	struct region_hdr *h = (struct region_hdr *)s->region;
	uint32_t w = 0, rb = 0;

	if (!atomic_compare_exchange_strong(&h->world, &w, s->t.world_size) && w != s->t.world_size)
		return -EINVAL;
	if (!atomic_compare_exchange_strong(&h->ring_bytes, &rb, s->ring_bytes) &&
	    rb != s->ring_bytes)
		return -EINVAL;
	return 0;
}

/* Empty this rank's inbound rings under a new generation: records a sender wrote for the
 * previous life are never read, and a publish racing this fails its compare-and-swap. */
static void rings_reset(struct shm *s)
{
	uint32_t from;

	for (from = 0; from < s->t.world_size; from++) {
		struct ring_hdr *r;
		uint64_t gen;

		if (from == s->t.rank)
			continue;
		r = ring_of(s, s->t.rank, from);
		gen = (atomic_load(&r->tail) >> POS_BITS) + 1;
		if (gen > GEN_MAX) /* wrap, skipping 0 ("never initialised") */
			gen = 1;
		atomic_store(&r->head, 0);
		s->read[from] = 0;
		atomic_store(&r->sleeping, 0);
		atomic_store(&r->tail, gen << POS_BITS);
	}
}

static void state_init(struct shm *s, const struct keel_shm_config *cfg)
{
	memset(s, 0, sizeof(*s));
	s->bell_fd = -1;
	s->ring_bytes = cfg->ring_bytes;
	memcpy(s->name, cfg->name, strlen(cfg->name) + 1);
	s->t = (struct keel_transport){
	    .ops = &shm_ops,
	    .state = s,
	    .caps = KEEL_CAP_ORDERED | KEEL_CAP_INTACT | KEEL_CAP_GATHER |
		    (cfg->reliable ? KEEL_CAP_RELIABLE : 0u),
	    .mtu = cfg->mtu,
	    .rank = cfg->rank,
	    .world_size = cfg->world_size,
	};
}

static void release(struct shm *s)
{
	if (s->bell_fd >= 0)
		close(s->bell_fd);
	s->bell_fd = -1;
	if (s->mapped && s->region != NULL)
		(void)munmap(s->region, s->region_len);
	s->region = NULL;
	s->mapped = false;
}

int keel_shm_init(struct keel_transport **out, void *mem, size_t mem_len,
		  const struct keel_shm_config *cfg)
{
	size_t len;
	struct shm *s;
	int err;

	KEEL_ASSERT(out != NULL);
	*out = NULL;
	if (!config_valid(cfg))
		return -EINVAL;
	if (mem == NULL || mem_len < keel_shm_storage_size(cfg))
		return -ENOSPC;
	len = keel_shm_region_size(cfg);
	if (cfg->region != NULL &&
	    (cfg->region_len < len || ((uintptr_t)cfg->region & (CACHE_LINE_BYTES - 1)) != 0))
		return -EINVAL;
	s = (struct shm *)align_up((uintptr_t)mem);
	state_init(s, cfg);
	s->read = (uint64_t *)(void *)((uint8_t *)s + align_up(sizeof(struct shm)));
	s->kept = (struct head_kept *)(void *)(s->read + cfg->world_size);
	s->stage = cfg->stage_runs ? (uint8_t *)s + align_up(sizeof(struct shm)) +
					 align_up((size_t)cfg->world_size *
						  (sizeof(uint64_t) + sizeof(struct head_kept)))
				   : NULL;
	s->stage_used = 0;
	/* The caller's memory may hold anything: a generation left there could vouch for a head
	 * never read here. */
	memset(s->kept, 0, (size_t)cfg->world_size * sizeof(struct head_kept));
	if (cfg->region != NULL) {
		s->region = cfg->region;
		s->region_len = len;
		err = 0;
	} else {
		err = region_map(s, cfg, len);
	}
	if (err == 0)
		err = region_check(s);
	if (err == 0)
		err = bell_open(s); /* first: a second live copy of this rank must not reset */
	if (err != 0) {
		release(s);
		return err;
	}
	rings_reset(s);
	*out = &s->t;
	return 0;
}

int keel_shm_attach(struct keel_transport *t)
{
	struct shm *s = shm_of(t);
	uint32_t to;

	if (s->region == NULL)
		return KEEL_ETRANSPORT;
	for (to = 0; to < t->world_size; to++) {
		if (to != t->rank &&
		    atomic_load_explicit(&ring_of(s, to, t->rank)->tail, memory_order_acquire) >>
			    POS_BITS ==
			0)
			return -EAGAIN;
	}
	return 0;
}

/* Reached once the peer has initialised its inbound rings (keel_shm_attach's test, per peer):
 * before, a record could be reset away by its init. */
static bool shm_peer_ok(struct keel_transport *t, uint32_t peer)
{
	struct shm *s = shm_of(t);

	return s->region != NULL && peer < t->world_size && peer != t->rank &&
	       atomic_load_explicit(&ring_of(s, peer, t->rank)->tail, memory_order_acquire) >>
		       POS_BITS !=
		   0;
}

int keel_shm_unlink(const char *name)
{
	if (!name_valid(name))
		return -EINVAL;
	return shm_unlink(name) == 0 ? 0 : -errno;
}

void keel_shm_stats_get(struct keel_transport *t, struct keel_shm_stats *out)
{
	struct shm *s = shm_of(t);

	KEEL_ASSERT(out != NULL);
	*out = s->stats;
}

static bool datagram_ok(const struct shm *s, const struct keel_datagram *g)
{
	return g->peer < s->t.world_size && g->peer != s->t.rank && keel_datagram_fits(g, s->t.mtu);
}

/* Copy what the stage holds into the ring (at the positions its records were given). */
static void stage_flush(struct shm *s, struct ring_hdr *r)
{
	if (s->stage_used == 0)
		return;
	ring_put(s, r, s->stage_pos, s->stage, s->stage_used);
	s->stats.tx_staged_runs++;
	s->stage_used = 0;
}

/* Does d[i]'s record go through the stage: a small one, with the stage already started or a
 * small one for the same receiver right behind it? */
static bool stage_takes(const struct shm *s, const struct keel_datagram *d, uint32_t i,
			uint32_t count)
{
	if (s->stage == NULL || record_bytes(d[i].len + d[i].tail_len) > STAGE_RECORD_MAX)
		return false;
	return s->stage_used > 0 ||
	       (i + 1 < count && d[i + 1].peer == d[i].peer &&
		record_bytes(d[i + 1].len + d[i + 1].tail_len) <= STAGE_RECORD_MAX);
}

/* Write the record of g (`len` bytes, `need` with its header and padding) at *pos: into the
 * stage when stage_takes said so, into the ring otherwise. */
static void record_write(struct shm *s, struct ring_hdr *r, const struct keel_datagram *g,
			 bool staged, uint64_t pos, uint32_t len, uint32_t need)
{
	uint32_t hdr[2] = {len, ~len};

	if (!staged) {
		stage_flush(s, r); /* the stage holds only records back to back */
		ring_put(s, r, pos, hdr, sizeof(hdr));
		if (g->len > 0)
			ring_put(s, r, pos + RECORD_HDR_BYTES, g->buf, g->len);
		if (g->tail_len > 0) /* two pieces: the payload straight from where it lies */
			ring_put(s, r, pos + RECORD_HDR_BYTES + g->len, g->tail, g->tail_len);
		return;
	}
	if (s->stage_used + need > STAGE_BYTES)
		stage_flush(s, r);
	if (s->stage_used == 0)
		s->stage_pos = pos;
	/* the records in the stage lie back to back, as in the ring */
	KEEL_ASSERT_DEBUG(((s->stage_pos + s->stage_used) & POS_MASK) == pos);
	uint8_t *o = s->stage + s->stage_used;
	memcpy(o, hdr, sizeof(hdr));
	if (g->len > 0)
		memcpy(o + RECORD_HDR_BYTES, g->buf, g->len);
	if (g->tail_len > 0)
		memcpy(o + RECORD_HDR_BYTES + g->len, g->tail, g->tail_len);
	s->stage_used += need;
}

/* Copy the run of d[0..count) bound for d[0].peer that fits, after position pos of a ring with
 * `room` free bytes (at least that many when !exact: then nothing is dropped for want of
 * room). Returns how many; *pos moves past them. Every byte is in the ring on return. */
static uint32_t run_copy(struct shm *s, struct ring_hdr *r, const struct keel_datagram *d,
			 uint32_t count, uint64_t *pos, uint64_t room, bool exact)
{
	uint32_t i;

	KEEL_ASSERT(s->stage_used == 0);
	for (i = 0; i < count && d[i].peer == d[0].peer && datagram_ok(s, &d[i]); i++) {
		uint32_t len = d[i].len + d[i].tail_len; /* datagram_ok: at most the mtu */
		uint32_t need = record_bytes(len);

		if (need > room && exact && (d[i].flags & KEEL_DGRAM_CONTROL) != 0) {
			/* Lossy anyway, and refusing it would hold back every datagram behind
			 * it in the burst, for live peers too, while this receiver is stopped. */
			s->stats.tx_control_dropped++;
			continue;
		}
		if (need > room)
			break;
		record_write(s, r, &d[i], stage_takes(s, d, i, count), *pos, len, need);
		*pos = (*pos + need) & POS_MASK;
		room -= need;
		s->stats.tx_datagrams++;
	}
	stage_flush(s, r);
	return i;
}

/* The receiver's head, read now (acquire: the bytes before it were copied out), and kept as the
 * one seen under the tail's generation `gen`. */
static uint64_t head_read(struct shm *s, struct ring_hdr *r, uint32_t to, uint64_t gen)
{
	s->kept[to] = (struct head_kept){
	    .head = atomic_load_explicit(&r->head, memory_order_acquire), .gen = gen};
	return s->kept[to].head;
}

/* Write a run for one receiver and publish it. Returns how many were taken (0: ring full). */
static uint32_t run_send(struct shm *s, const struct keel_datagram *d, uint32_t count)
{
	uint32_t to = d[0].peer;
	struct ring_hdr *r = ring_of(s, to, s->t.rank);
	uint32_t tries;

	for (tries = 0; tries < PUBLISH_TRIES; tries++) {
		uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
		uint64_t gen = tail >> POS_BITS;
		uint64_t pos = tail & POS_MASK;
		/* A head seen under another generation says nothing about this one. */
		bool exact = s->kept[to].gen != gen;
		uint64_t head = exact ? head_read(s, r, to, gen) : s->kept[to].head;
		uint32_t n = 0;

		/* At most two passes: the kept head, then (stopped for room) the head read now. */
		for (;;) {
			uint64_t used = (pos - head) & POS_MASK;
			/* more than the ring: the receiver is resetting (its new head with our
			 * old tail), or the kept head is behind a reset */
			if (used <= s->ring_bytes)
				n += run_copy(s, r, d + n, count - n, &pos, s->ring_bytes - used,
					      exact);
			if (exact || n == count || d[n].peer != to)
				break;
			head = head_read(s, r, to, gen);
			exact = true;
		}
		if (n == 0)
			return 0;
		/* seq_cst: ordered before the load of `sleeping` below (the receiver stores
		 * `sleeping`, then loads `tail`): one of the two sees the other. */
		if (!atomic_compare_exchange_strong(&r->tail, &tail, (tail & ~POS_MASK) | pos)) {
			s->stats.tx_reattach++;
			continue;
		}
		if (atomic_load(&r->sleeping) != 0 && atomic_exchange(&r->sleeping, 0) != 0)
			bell_ring(s, d[0].peer);
		return n;
	}
	return 0;
}

static int shm_send_burst(struct keel_transport *t, uint64_t now_ns, const struct keel_datagram *d,
			  uint32_t count)
{
	struct shm *s = shm_of(t);
	uint32_t done = 0;

	(void)now_ns;
	KEEL_ASSERT(d != NULL || count == 0);
	KEEL_ASSERT(count <= INT32_MAX);
	if (s->region == NULL)
		return KEEL_ETRANSPORT;
	/* Bounded by count: each pass takes a run or returns. */
	while (done < count) {
		uint32_t n;

		if (!datagram_ok(s, &d[done]))
			return done > 0 ? (int)done : -EINVAL;
		n = run_send(s, d + done, count - done);
		done += n;
		if (n == 0 || (done < count && d[done].peer == d[done - 1].peer &&
			       datagram_ok(s, &d[done]))) {
			s->stats.tx_ring_full++;
			break;
		}
	}
	return (int)done;
}

/* Is the ring empty? If so, and `arm`, mark it sleeping and look again, so that a sender
 * publishing now either is seen here or sees the mark and rings the doorbell. */
static bool ring_empty_arm(struct ring_hdr *r, uint64_t head, bool arm)
{
	if ((atomic_load_explicit(&r->tail, memory_order_acquire) & POS_MASK) != head)
		return false;
	if (!arm)
		return true;
	if (atomic_load_explicit(&r->sleeping, memory_order_relaxed) == 0)
		atomic_store(&r->sleeping, 1);
	return (atomic_load(&r->tail) & POS_MASK) == head;
}

/* Take records from one ring into d[0..count_max): lent where they lie when the caller takes
 * lent buffers and the record does not wrap around the ring's end, copied otherwise. Returns
 * how many were delivered. The head moves at once when nothing was lent, else at the caller's
 * next call (shm_give_back). A ring left behind is either marked sleeping (empty: its next record
 * rings the doorbell) or has records left only because d is full (recv_burst then asks to be called
 * again at once). */
static uint32_t ring_recv(struct shm *s, uint32_t from, struct keel_datagram *d, uint32_t count_max)
{
	struct ring_hdr *r = ring_of(s, s->t.rank, from);
	uint64_t pos = s->read[from]; /* == head: shm_give_back ran first */
	uint64_t tail = pos;
	uint32_t n = 0;
	bool lent = false;

	/* Bounded: each pass delivers or drops a record, or reloads the tail after a failed
	 * arm (so the next pass finds a record), or ends. */
	while (n < count_max) {
		uint32_t hdr[2];

		if (pos == tail) {
			if (ring_empty_arm(r, pos, !s->caller_arms))
				break;
			tail = atomic_load_explicit(&r->tail, memory_order_acquire) & POS_MASK;
			continue;
		}
		ring_get(s, r, pos, hdr, sizeof(hdr));
		if (hdr[0] != ~hdr[1] || record_bytes(hdr[0]) > ((tail - pos) & POS_MASK)) {
			/* Another process scribbled on the region: nothing after it can be
			 * trusted, so the ring is emptied (its datagrams count as lost). */
			s->stats.rx_bad_records++;
			pos = tail;
			continue;
		}
		uint32_t off = (uint32_t)((pos + RECORD_HDR_BYTES) & (s->ring_bytes - 1));
		if ((d[n].flags & KEEL_DGRAM_LEND) != 0 && hdr[0] <= s->ring_bytes - off) {
			/* in one piece: lent where it lies, no copy */
			d[n].buf = ring_data(r) + off;
			lent = true;
		} else if (hdr[0] > d[n].cap) {
			s->stats.rx_truncated++;
			pos = (pos + record_bytes(hdr[0])) & POS_MASK;
			continue;
		} else {
			ring_get(s, r, pos + RECORD_HDR_BYTES, d[n].buf, hdr[0]);
		}
		d[n].len = hdr[0];
		d[n].peer = from;
		d[n].flags = KEEL_DGRAM_INTACT;
		n++;
		pos = (pos + record_bytes(hdr[0])) & POS_MASK;
	}
	s->read[from] = pos;
	if (lent)
		s->lent = true; /* head follows at shm_give_back */
	else /* release: the sender may overwrite the bytes only after they were copied out */
		atomic_store_explicit(&r->head, pos, memory_order_release);
	return n;
}

/* The caller is done with what the last receive lent it: senders may write there again. */
static void shm_give_back(struct shm *s)
{
	uint32_t from;

	if (!s->lent)
		return;
	s->lent = false;
	for (from = 0; from < s->t.world_size; from++) {
		struct ring_hdr *r;

		if (from == s->t.rank)
			continue;
		r = ring_of(s, s->t.rank, from);
		/* only this rank writes the head: a store of the same value would still take the
		 * line away from the sender */
		if (atomic_load_explicit(&r->head, memory_order_relaxed) != s->read[from])
			atomic_store_explicit(&r->head, s->read[from], memory_order_release);
	}
}

static int shm_recv_burst(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
			  uint32_t count_max)
{
	struct shm *s = shm_of(t);
	uint32_t n = 0, i;

	(void)now_ns;
	KEEL_ASSERT(d != NULL || count_max == 0);
	if (s->region == NULL)
		return KEEL_ETRANSPORT;
	shm_give_back(s);
	if (count_max == 0 || t->world_size == 1)
		return 0;
	if (!s->caller_arms || s->armed)
		wake_settle(s);
	/* Round-robin from a moving start: a busy sender cannot starve the others (wrapped by
	 * hand, no division per ring). */
	KEEL_ASSERT(s->rr < t->world_size);
	uint32_t from = s->rr;
	for (i = 0; i < t->world_size && n < count_max; i++) {
		if (from != t->rank)
			n += ring_recv(s, from, d + n, count_max - n);
		from = from + 1 == t->world_size ? 0 : from + 1;
	}
	s->rr = s->rr + 1 == t->world_size ? 0 : s->rr + 1;
	s->stats.rx_datagrams += n;
	/* Full: a ring may hold more, unmarked, so no doorbell would wake a sleep now. */
	s->more = n == count_max;
	return (int)n;
}

static bool shm_rx_ready(struct keel_transport *t)
{
	struct shm *s = shm_of(t);
	uint32_t from;

	if (s->region == NULL)
		return true; /* recv_burst has an error to give */
	shm_give_back(s);
	if (s->more)
		return true; /* records left */
	for (from = 0; from < t->world_size; from++) {
		struct ring_hdr *r;

		if (from == t->rank)
			continue;
		r = ring_of(s, t->rank, from);
		if ((atomic_load_explicit(&r->tail, memory_order_acquire) & POS_MASK) !=
		    s->read[from])
			return true;
	}
	return false;
}

/* Mark every inbound ring sleeping and look at each again (ring_empty_arm): a record published
 * from now on rings the doorbell, one published before is found here. */
static bool shm_arm_wait(struct keel_transport *t)
{
	struct shm *s = shm_of(t);
	bool empty = true;
	uint32_t from;

	if (s->region == NULL)
		return false;
	shm_give_back(s); /* a sender must not wait on bytes this rank sleeps on */
	if (s->more)
		return false;
	s->caller_arms = true;
	s->armed = true;
	for (from = 0; from < t->world_size && empty; from++) {
		struct ring_hdr *r;

		if (from == t->rank)
			continue;
		r = ring_of(s, t->rank, from);
		empty = ring_empty_arm(r, s->read[from], true);
	}
	return empty;
}

static uint64_t shm_next_deadline_ns(struct keel_transport *t)
{
	return shm_of(t)->more ? 0 : UINT64_MAX;
}

static int shm_wait_fd(struct keel_transport *t)
{
	return shm_of(t)->bell_fd;
}

static void shm_fini(struct keel_transport *t)
{
	if (t == NULL)
		return; /* a failed init leaves *out NULL */
	release(shm_of(t));
}

static const struct keel_transport_ops shm_ops = {
    .name = "shm",
    .send_burst = shm_send_burst,
    .recv_burst = shm_recv_burst,
    .next_deadline_ns = shm_next_deadline_ns,
    .wait_fd = shm_wait_fd,
    .fini = shm_fini,
    .peer_ok = shm_peer_ok,
    .rx_ready = shm_rx_ready,
    .arm_wait = shm_arm_wait,
};
