/* Rendezvous over TCP (rank 0 collects and hands out the address table) or a static KEEL_PEERS
 * list. Tools only. Every wait is bounded by the caller's timeout; every socket is closed on
 * every path. Bytes from the network are checked before use. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "assert_int.h"
#include "boot_int.h"
#include "keel/limits.h"
#include "keel/posix.h"
#include "rendezvous.h"

#define MAGIC 0x4b524456u /* "KRDV" */
/* Wire layout, big-endian. entry: family u16, port u16, scope_id u32, address 16 bytes, then
 * the rank's blob: kind u8, length u8, zero u16, KEEL_RENDEZVOUS_BLOB_MAX bytes. */
#define ADDR_LEN  24u
#define BLOB_LEN  (4u + KEEL_RENDEZVOUS_BLOB_MAX)
#define ENTRY_LEN (ADDR_LEN + BLOB_LEN)
/* hello: magic u32, version u16, zero u16, job u32, world u32, rank u32, entry. */
#define HELLO_LEN (20u + ENTRY_LEN)
/* reply: magic u32, version u16, status u16, world u32, detail u32, then world entries. */
#define REPLY_HDR_LEN 16u
/* Connections rank 0 holds beyond world - 1, so a few strays cannot lock ranks out. */
#define SPARE_CONNS 8u
/* Client retry backoff while rank 0 is not listening yet. */
#define RETRY_NS_MIN 2000000ull
#define RETRY_NS_MAX 100000000ull

_Static_assert(KEEL_WORLD_MAX *ENTRY_LEN + REPLY_HDR_LEN < (1u << 20), "reply fits in 1 MiB");

enum status {
	ST_OK = 0,
	ST_DUPLICATE = 1, /* detail: the rank */
	ST_WORLD = 2,	  /* detail: rank 0's world size */
	ST_RANGE = 3,	  /* detail: the rank */
	ST_JOB = 4,	  /* detail: rank 0's job id */
	ST_ABORTED = 5,	  /* another rank's hello was bad; detail: that rank */
	ST_FAMILY = 6,	  /* address family unknown */
	ST_TIMEOUT = 7,	  /* rank 0 ran out of time; detail: ranks that arrived, rank 0 included */
};

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)get16(p) << 16) | get16(p + 2);
}

const char *keel_sockaddr_str(const struct sockaddr *addr, char *buf, size_t buf_len)
{
	char host[INET6_ADDRSTRLEN];

	KEEL_ASSERT(addr != NULL && buf != NULL && buf_len > 0);
	if (addr->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)addr;

		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		snprintf(buf, buf_len, "%s:%u", host, ntohs(a->sin_port));
	} else if (addr->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;

		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		snprintf(buf, buf_len, "[%s]:%u", host, ntohs(a->sin6_port));
	} else {
		snprintf(buf, buf_len, "(address family %d)", addr->sa_family);
	}
	return buf;
}

static void blob_put(uint8_t *p, const struct keel_rendezvous_blob *b)
{
	memset(p, 0, BLOB_LEN);
	if (b == NULL)
		return;
	KEEL_ASSERT(b->len <= KEEL_RENDEZVOUS_BLOB_MAX);
	p[0] = b->kind;
	p[1] = b->len;
	memcpy(p + 4, b->data, b->len);
}

/* Untrusted input: false for a length beyond the blob. */
static bool blob_get(const uint8_t *p, struct keel_rendezvous_blob *b)
{
	memset(b, 0, sizeof(*b));
	if (p[1] > KEEL_RENDEZVOUS_BLOB_MAX)
		return false;
	b->kind = p[0];
	b->len = p[1];
	memcpy(b->data, p + 4, b->len);
	return true;
}

static void entry_put(uint8_t *p, const struct sockaddr_storage *ss,
		      const struct keel_rendezvous_blob *b)
{
	memset(p, 0, ENTRY_LEN);
	blob_put(p + ADDR_LEN, b);
	put16(p, ss->ss_family == AF_INET6 ? 6 : 4);
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;

		put16(p + 2, ntohs(a->sin_port));
		memcpy(p + 8, &a->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;

		KEEL_ASSERT(ss->ss_family == AF_INET6);
		put16(p + 2, ntohs(a->sin6_port));
		put32(p + 4, a->sin6_scope_id);
		memcpy(p + 8, &a->sin6_addr, 16);
	}
}

/* Untrusted input: false for an unknown family, port 0 or a bad blob. */
static bool entry_get(const uint8_t *p, struct sockaddr_storage *ss, struct keel_rendezvous_blob *b)
{
	uint16_t family = get16(p), port = get16(p + 2);

	memset(ss, 0, sizeof(*ss));
	if (port == 0 || !blob_get(p + ADDR_LEN, b))
		return false;
	if (family == 4) {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;

		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		memcpy(&a->sin_addr, p + 8, 4);
		return true;
	}
	if (family == 6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		a->sin6_scope_id = get32(p + 4);
		memcpy(&a->sin6_addr, p + 8, 16);
		return true;
	}
	return false;
}

static uint16_t addr_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

static bool addr_is_wildcard(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

/* The address to advertise: self, or for a wildcard self the local address `local` (of the
 * TCP connection to rank 0, or rank 0's listening socket) with self's port. */
static int advertise(const struct sockaddr_storage *self, const struct sockaddr_storage *local,
		     struct sockaddr_storage *out, char *err, size_t err_len)
{
	uint16_t port = addr_port(self);

	*out = *self;
	if (!addr_is_wildcard(self) || local == NULL)
		return 0;
	if (local->ss_family == self->ss_family) {
		*out = *local;
	} else if (self->ss_family == AF_INET6) {
		struct sockaddr_in6 *o = (struct sockaddr_in6 *)out;
		const struct sockaddr_in *l4 = (const struct sockaddr_in *)local;

		/* IPv6 dual-stack UDP socket, IPv4 rendezvous: the v4-mapped form reaches us. */
		memset(o, 0, sizeof(*o));
		o->sin6_family = AF_INET6;
		o->sin6_addr.s6_addr[10] = 0xff;
		o->sin6_addr.s6_addr[11] = 0xff;
		memcpy(&o->sin6_addr.s6_addr[12], &l4->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *l6 = (const struct sockaddr_in6 *)local;
		struct sockaddr_in *o = (struct sockaddr_in *)out;

		if (!IN6_IS_ADDR_V4MAPPED(&l6->sin6_addr))
			return keel_fail(
			    err, err_len, -EINVAL,
			    "the UDP socket is IPv4 and bound to 0.0.0.0 but MASTER_ADDR is "
			    "reached over IPv6: bind the UDP socket to a specific address");
		memset(o, 0, sizeof(*o));
		o->sin_family = AF_INET;
		memcpy(&o->sin_addr, &l6->sin6_addr.s6_addr[12], 4);
	}
	if (out->ss_family == AF_INET)
		((struct sockaddr_in *)out)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)out)->sin6_port = htons(port);
	return 0;
}

/* Milliseconds poll may wait before deadline_ns, rounded up; 0 once it has passed. */
static int ms_left(uint64_t deadline_ns)
{
	uint64_t now_ns = keel_posix_now_ns(), ms;

	if (now_ns >= deadline_ns)
		return 0;
	ms = (deadline_ns - now_ns + 999999u) / 1000000u;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Send or receive exactly len bytes on a non-blocking socket by deadline_ns.
 * Returns 0, -ETIMEDOUT, -ECONNRESET (peer closed while receiving) or -errno. */
static int io_full(int fd, uint8_t *buf, size_t len, bool is_send, uint64_t deadline_ns)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = is_send ? send(fd, buf + done, len - done, MSG_NOSIGNAL)
				    : recv(fd, buf + done, len - done, 0);
		struct pollfd p = {.fd = fd, .events = is_send ? POLLOUT : POLLIN};

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (poll(&p, 1, ms_left(deadline_ns)) == 0 && ms_left(deadline_ns) == 0)
			return -ETIMEDOUT;
	}
	return 0;
}

static int resolve(const char *host, uint16_t port, int family, int socktype, struct addrinfo **out)
{
	struct addrinfo hints;
	char service[8];

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = family;
	hints.ai_socktype = socktype;
	hints.ai_flags = AI_NUMERICSERV | (family == AF_INET6 ? AI_V4MAPPED : 0);
	snprintf(service, sizeof(service), "%u", port);
	return getaddrinfo(host, service, &hints, out);
}

/* ---- KEEL_PEERS ---------------------------------------------------------------------- */

static int peers_from_list(const struct keel_launch *l, const struct sockaddr_storage *self,
			   struct sockaddr_storage *peers, char *err, size_t err_len)
{
	char host[KEEL_LAUNCH_HOST_LEN];

	for (uint32_t i = 0; i < l->world_size; i++) {
		struct addrinfo *ai = NULL;
		uint16_t port;
		int rc = keel_peers_entry(l->peers, i, host, sizeof(host), &port, err, err_len);

		if (rc != 0)
			return rc == -ENOENT
				   ? keel_fail(err, err_len, -EINVAL,
					       "KEEL_PEERS has %u entries, world size is %u", i,
					       l->world_size)
				   : rc;
		rc = resolve(host, port, self->ss_family, SOCK_DGRAM, &ai);
		if (rc != 0)
			return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
					 "KEEL_PEERS entry %u: cannot resolve '%s' as %s: %s", i,
					 host, self->ss_family == AF_INET ? "IPv4" : "IPv6",
					 gai_strerror(rc));
		KEEL_ASSERT(ai->ai_addrlen <= sizeof(peers[i]));
		memset(&peers[i], 0, sizeof(peers[i]));
		memcpy(&peers[i], ai->ai_addr, ai->ai_addrlen);
		freeaddrinfo(ai);
		if (i == l->rank && port != addr_port(self))
			return keel_fail(
			    err, err_len, -EINVAL,
			    "KEEL_PEERS entry %u (this rank) has port %u but the UDP socket "
			    "is bound to port %u",
			    i, port, addr_port(self));
	}
	return 0;
}

/* ---- rank 0 ---------------------------------------------------------------------------- */

struct conn {
	int fd;	      /* -1: slot free */
	uint32_t got; /* hello bytes received */
	int32_t rank; /* -1 until a valid hello */
	uint8_t hello[HELLO_LEN];
};

struct server {
	const struct keel_launch *l;
	int listen_fd;
	uint32_t slot_count;
	uint32_t arrived; /* valid hellos held, rank 0 excluded */
	uint64_t strays;  /* connections dropped for a bad magic or version */
	struct conn *conns;
	struct pollfd *pfds; /* [0] listens, [1 + i] is conns[i] */
	bool *have;	     /* have[rank]: table[rank] is filled */
	struct sockaddr_storage *table;
	struct keel_rendezvous_blob *blobs; /* [world]: each rank's blob */
	uint8_t *reply;
	char where[96]; /* MASTER_ADDR:MASTER_PORT as given, for messages */
};

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->got = 0;
	c->rank = -1;
}

/* Best effort: a rejected rank learns why instead of waiting for its timeout. */
static void send_status(int fd, enum status st, uint32_t world, uint32_t detail)
{
	uint8_t hdr[REPLY_HDR_LEN];
	ssize_t n;

	put32(hdr, MAGIC);
	put16(hdr + 4, KEEL_RENDEZVOUS_VERSION);
	put16(hdr + 6, (uint16_t)st);
	put32(hdr + 8, world);
	put32(hdr + 12, detail);
	n = send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL | MSG_DONTWAIT);
	(void)n;
}

static int server_listen(struct server *s, char *err, size_t err_len)
{
	struct addrinfo *ai = NULL, *a;
	int rc = resolve(s->l->master_addr, s->l->master_port, AF_UNSPEC, SOCK_STREAM, &ai);
	int last = 0, one = 1;

	if (rc != 0)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 cannot resolve MASTER_ADDR %s: %s", s->where,
				 gai_strerror(rc));
	for (a = ai; a != NULL && s->listen_fd < 0; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

		if (fd < 0) {
			last = errno;
			continue;
		}
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
		    bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
			s->listen_fd = fd;
			break;
		}
		last = errno;
		close(fd);
	}
	freeaddrinfo(ai);
	if (s->listen_fd < 0)
		return keel_fail(err, err_len, last != 0 ? -last : KEEL_ERENDEZVOUS,
				 "rank 0 cannot listen on MASTER_ADDR:MASTER_PORT %s: %s", s->where,
				 strerror(last));
	return 0;
}

static void server_accept(struct server *s)
{
	for (uint32_t i = 0; i < s->slot_count; i++) {
		int fd;

		if (s->conns[i].fd >= 0)
			continue;
		fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return; /* EAGAIN, or a connection that died in the backlog */
		s->conns[i].fd = fd;
	}
}

/* A complete hello arrived on c. Returns 0 (accepted, or a stray dropped) or a fatal error
 * after telling every connected rank. */
static int server_hello(struct server *s, struct conn *c, char *err, size_t err_len)
{
	const struct keel_launch *l = s->l;
	const uint8_t *h = c->hello;
	uint32_t job = get32(h + 8), world = get32(h + 12), rank = get32(h + 16);
	enum status st = ST_OK;

	if (get32(h) != MAGIC || get16(h + 4) != KEEL_RENDEZVOUS_VERSION) {
		s->strays++;
		conn_close(c);
		return 0;
	}
	if (job != l->job_id) {
		/* Another job found our port: turn it away, keep waiting for ours. */
		send_status(c->fd, ST_JOB, l->world_size, l->job_id);
		conn_close(c);
		return 0;
	}
	if (world != l->world_size)
		st = ST_WORLD;
	else if (rank == 0 || rank >= l->world_size)
		st = ST_RANGE;
	else if (s->have[rank])
		st = ST_DUPLICATE;
	else if (!entry_get(h + 20, &s->table[rank], &s->blobs[rank]))
		st = ST_FAMILY;
	if (st == ST_OK) {
		s->have[rank] = true;
		c->rank = (int32_t)rank;
		s->arrived++;
		return 0;
	}
	send_status(c->fd, st, l->world_size, st == ST_WORLD ? l->world_size : rank);
	conn_close(c);
	for (uint32_t i = 0; i < s->slot_count; i++)
		if (s->conns[i].fd >= 0)
			send_status(s->conns[i].fd, ST_ABORTED, l->world_size, rank);
	if (st == ST_WORLD)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0: rank %u says the world size is %u, ours is %u", rank,
				 world, l->world_size);
	if (st == ST_RANGE)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0: a hello claims rank %u, outside 1..%u", rank,
				 l->world_size - 1);
	if (st == ST_DUPLICATE)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0: duplicate rank %u (two processes have the same rank)",
				 rank);
	return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
			 "rank 0: rank %u sent an unknown address family", rank);
}

/* Read what is ready on connection c. */
static int server_read(struct server *s, struct conn *c, char *err, size_t err_len)
{
	ssize_t n;

	if (c->rank >= 0) {
		uint8_t junk[64];

		/* Nothing more is expected; EOF means the rank gave up: forget it so that a
		 * retry of the same rank is not a duplicate. */
		n = recv(c->fd, junk, sizeof(junk), 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			s->have[c->rank] = false;
			s->arrived--;
			conn_close(c);
		}
		return 0;
	}
	n = recv(c->fd, c->hello + c->got, HELLO_LEN - c->got, 0);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		conn_close(c);
		return 0;
	}
	if (n < 0)
		return 0;
	c->got += (uint32_t)n;
	return c->got == HELLO_LEN ? server_hello(s, c, err, err_len) : 0;
}

static int server_collect(struct server *s, uint64_t deadline_ns, char *err, size_t err_len)
{
	while (s->arrived < s->l->world_size - 1) {
		uint32_t used = 0;
		int n, rc;

		for (uint32_t i = 0; i < s->slot_count; i++) {
			s->pfds[1 + i].fd = s->conns[i].fd;
			s->pfds[1 + i].events = POLLIN;
			s->pfds[1 + i].revents = 0;
			used += s->conns[i].fd >= 0;
		}
		/* With every slot taken, leave new connections in the backlog. */
		s->pfds[0].fd = used < s->slot_count ? s->listen_fd : -1;
		s->pfds[0].events = POLLIN;
		s->pfds[0].revents = 0;
		n = poll(s->pfds, 1 + s->slot_count, ms_left(deadline_ns));
		if (n < 0 && errno != EINTR)
			return keel_fail(err, err_len, -errno, "rank 0: poll: %s", strerror(errno));
		if (n <= 0 && ms_left(deadline_ns) == 0)
			return -ETIMEDOUT;
		if (s->pfds[0].revents != 0)
			server_accept(s);
		for (uint32_t i = 0; i < s->slot_count; i++) {
			if (s->pfds[1 + i].revents == 0 || s->conns[i].fd < 0)
				continue;
			rc = server_read(s, &s->conns[i], err, err_len);
			if (rc != 0)
				return rc;
		}
	}
	return 0;
}

static int server_timeout_msg(const struct server *s, char *err, size_t err_len)
{
	char missing[128];
	size_t used = 0;
	uint32_t shown = 0;

	/* Tell the ranks that did arrive, so they fail now and with the reason. */
	for (uint32_t i = 0; i < s->slot_count; i++)
		if (s->conns[i].fd >= 0 && s->conns[i].rank >= 0)
			send_status(s->conns[i].fd, ST_TIMEOUT, s->l->world_size, s->arrived + 1);
	missing[0] = '\0';
	for (uint32_t r = 1; r < s->l->world_size && shown < 8; r++) {
		if (s->have[r])
			continue;
		used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%u",
					 shown == 0 ? "" : ", ", r);
		shown++;
	}
	return keel_fail(
	    err, err_len, -ETIMEDOUT,
	    "rank 0 listening on MASTER_ADDR:MASTER_PORT %s: only %u of %u ranks arrived in "
	    "time; missing ranks %s%s",
	    s->where, s->arrived + 1, s->l->world_size, missing,
	    s->l->world_size - 1 - s->arrived > shown ? ", ..." : "");
}

static int server_send_table(struct server *s, uint64_t deadline_ns, char *err, size_t err_len)
{
	size_t len = REPLY_HDR_LEN + (size_t)s->l->world_size * ENTRY_LEN;

	put32(s->reply, MAGIC);
	put16(s->reply + 4, KEEL_RENDEZVOUS_VERSION);
	put16(s->reply + 6, ST_OK);
	put32(s->reply + 8, s->l->world_size);
	put32(s->reply + 12, s->l->job_id);
	for (uint32_t r = 0; r < s->l->world_size; r++)
		entry_put(s->reply + REPLY_HDR_LEN + (size_t)r * ENTRY_LEN, &s->table[r],
			  &s->blobs[r]);
	for (uint32_t i = 0; i < s->slot_count; i++) {
		struct conn *c = &s->conns[i];
		int rc;

		if (c->fd < 0 || c->rank < 0)
			continue;
		rc = io_full(c->fd, s->reply, len, true, deadline_ns);
		if (rc != 0)
			return keel_fail(err, err_len,
					 rc == -ETIMEDOUT ? -ETIMEDOUT : KEEL_ERENDEZVOUS,
					 "rank 0: sending the table to rank %d failed: %s", c->rank,
					 strerror(-rc));
		shutdown(c->fd, SHUT_WR);
	}
	return 0;
}

static int run_server(const struct keel_launch *l, const struct sockaddr_storage *self,
		      const struct keel_rendezvous_blob *self_blob, struct sockaddr_storage *peers,
		      struct keel_rendezvous_blob *blobs, uint64_t deadline_ns, char *err,
		      size_t err_len)
{
	struct server s = {.l = l, .listen_fd = -1};
	struct sockaddr_storage local;
	socklen_t local_len = sizeof(local);
	size_t reply_len = REPLY_HDR_LEN + (size_t)l->world_size * ENTRY_LEN;
	int rc;

	snprintf(s.where, sizeof(s.where), "%.80s:%u", l->master_addr, l->master_port);
	s.slot_count = l->world_size - 1 + SPARE_CONNS;
	s.conns = calloc(s.slot_count, sizeof(*s.conns));
	s.pfds = calloc(1 + s.slot_count, sizeof(*s.pfds));
	s.have = calloc(l->world_size, sizeof(*s.have));
	s.table = calloc(l->world_size, sizeof(*s.table));
	s.blobs = calloc(l->world_size, sizeof(*s.blobs));
	s.reply = malloc(reply_len);
	/* calloc left fd 0 in every slot: mark them free before any cleanup can close them. */
	for (uint32_t i = 0; s.conns != NULL && i < s.slot_count; i++) {
		s.conns[i].fd = -1;
		s.conns[i].rank = -1;
	}
	rc = -ENOMEM;
	if (s.conns == NULL || s.pfds == NULL || s.have == NULL || s.table == NULL ||
	    s.blobs == NULL || s.reply == NULL)
		goto out;
	rc = server_listen(&s, err, err_len);
	if (rc != 0)
		goto out;
	rc = getsockname(s.listen_fd, (struct sockaddr *)&local, &local_len) == 0 ? 0 : -errno;
	if (rc == 0)
		rc = advertise(self, &local, &s.table[0], err, err_len);
	if (rc != 0)
		goto out;
	s.have[0] = true;
	if (self_blob != NULL)
		s.blobs[0] = *self_blob;
	rc = server_collect(&s, deadline_ns, err, err_len);
	if (rc == -ETIMEDOUT)
		rc = server_timeout_msg(&s, err, err_len);
	if (rc == 0)
		rc = server_send_table(&s, deadline_ns, err, err_len);
	if (rc == 0)
		memcpy(peers, s.table, (size_t)l->world_size * sizeof(*peers));
	if (rc == 0 && blobs != NULL)
		memcpy(blobs, s.blobs, (size_t)l->world_size * sizeof(*blobs));
out:
	for (uint32_t i = 0; s.conns != NULL && i < s.slot_count; i++)
		conn_close(&s.conns[i]);
	if (s.listen_fd >= 0)
		close(s.listen_fd);
	free(s.reply);
	free(s.blobs);
	free(s.table);
	free(s.have);
	free(s.pfds);
	free(s.conns);
	if (rc == -ENOMEM)
		return keel_fail(err, err_len, rc, "rank 0: out of memory for %u ranks",
				 l->world_size);
	return rc;
}

/* ---- other ranks ------------------------------------------------------------------------ */

/* One non-blocking connect to a, waiting until deadline_ns. Returns the socket or -errno. */
static int connect_once(const struct addrinfo *a, uint64_t deadline_ns)
{
	int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int soerr = 0;
	socklen_t len = sizeof(soerr);
	struct pollfd p;

	if (fd < 0)
		return -errno;
	if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
		return fd;
	if (errno != EINPROGRESS) {
		soerr = errno;
		close(fd);
		return -soerr;
	}
	p.fd = fd;
	p.events = POLLOUT;
	p.revents = 0;
	if (poll(&p, 1, ms_left(deadline_ns)) <= 0) {
		close(fd);
		return -ETIMEDOUT;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
		soerr = errno;
	if (soerr != 0) {
		close(fd);
		return -soerr;
	}
	return fd;
}

/* Connect to rank 0, retrying with backoff until deadline_ns. Returns the socket or a
 * negative code; *last_err is the last connect error seen. */
static int connect_retry(const struct addrinfo *ai, uint64_t deadline_ns, int *last_err)
{
	uint64_t backoff_ns = RETRY_NS_MIN;
	const struct addrinfo *a = ai;

	*last_err = ETIMEDOUT;
	while (ms_left(deadline_ns) > 0) {
		int fd = connect_once(a, deadline_ns);
		uint64_t now_ns, nap_ns;

		if (fd >= 0)
			return fd;
		*last_err = -fd;
		a = a->ai_next != NULL ? a->ai_next : ai;
		if (a != ai)
			continue; /* try the other addresses of MASTER_ADDR before sleeping */
		now_ns = keel_posix_now_ns();
		if (now_ns >= deadline_ns)
			break;
		nap_ns = deadline_ns - now_ns < backoff_ns ? deadline_ns - now_ns : backoff_ns;
		poll(NULL, 0, (int)((nap_ns + 999999u) / 1000000u));
		backoff_ns = backoff_ns * 2 > RETRY_NS_MAX ? RETRY_NS_MAX : backoff_ns * 2;
	}
	return -ETIMEDOUT;
}

static int client_reject_msg(const uint8_t *hdr, const char *where, uint32_t rank, char *err,
			     size_t err_len)
{
	uint32_t world = get32(hdr + 8), detail = get32(hdr + 12);

	switch (get16(hdr + 6)) {
	case ST_DUPLICATE:
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s rejected rank %u: duplicate rank", where, rank);
	case ST_WORLD:
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s rejected rank %u: its world size is %u", where, rank,
				 world);
	case ST_RANGE:
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s rejected rank %u: out of range for world %u", where,
				 rank, world);
	case ST_JOB:
		return keel_fail(
		    err, err_len, KEEL_ERENDEZVOUS,
		    "rank 0 at %s belongs to another job (job id %u; check KEEL_JOB_ID)", where,
		    detail);
	case ST_TIMEOUT:
		return keel_fail(
		    err, err_len, -ETIMEDOUT,
		    "rank 0 at MASTER_ADDR:MASTER_PORT %s timed out: only %u of %u ranks "
		    "arrived",
		    where, detail, world);
	case ST_ABORTED:
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s aborted the rendezvous: rank %u sent a bad hello",
				 where, detail);
	default:
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s rejected rank %u (status %u)", where, rank,
				 get16(hdr + 6));
	}
}

/* Hello out, table in, over the connected socket fd. */
static int client_exchange(const struct keel_launch *l, int fd, const struct sockaddr_storage *me,
			   const struct keel_rendezvous_blob *self_blob,
			   struct sockaddr_storage *peers, struct keel_rendezvous_blob *blobs,
			   uint64_t deadline_ns, const char *where, char *err, size_t err_len)
{
	struct keel_rendezvous_blob blob;
	uint8_t hello[HELLO_LEN], hdr[REPLY_HDR_LEN], entry[ENTRY_LEN];
	int rc;

	put32(hello, MAGIC);
	put16(hello + 4, KEEL_RENDEZVOUS_VERSION);
	put16(hello + 6, 0);
	put32(hello + 8, l->job_id);
	put32(hello + 12, l->world_size);
	put32(hello + 16, l->rank);
	entry_put(hello + 20, me, self_blob);
	rc = io_full(fd, hello, sizeof(hello), true, deadline_ns);
	if (rc == 0)
		rc = io_full(fd, hdr, sizeof(hdr), false, deadline_ns);
	if (rc == -ETIMEDOUT)
		return keel_fail(
		    err, err_len, -ETIMEDOUT,
		    "connected to rank 0 at MASTER_ADDR:MASTER_PORT %s, but the address "
		    "table did not come in time (other ranks missing?)",
		    where);
	if (rc != 0)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at MASTER_ADDR:MASTER_PORT %s dropped the connection: %s",
				 where, strerror(-rc));
	if (get32(hdr) != MAGIC || get16(hdr + 4) != KEEL_RENDEZVOUS_VERSION)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "%s is not a keel rendezvous of version %u", where,
				 KEEL_RENDEZVOUS_VERSION);
	if (get16(hdr + 6) != ST_OK)
		return client_reject_msg(hdr, where, l->rank, err, err_len);
	if (get32(hdr + 8) != l->world_size)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s sent a table of %u ranks", where, get32(hdr + 8));
	for (uint32_t r = 0; r < l->world_size; r++) {
		rc = io_full(fd, entry, sizeof(entry), false, deadline_ns);
		if (rc != 0)
			return keel_fail(
			    err, err_len, rc == -ETIMEDOUT ? -ETIMEDOUT : KEEL_ERENDEZVOUS,
			    "rank 0 at %s: reading the table: %s", where, strerror(-rc));
		if (!entry_get(entry, &peers[r], blobs != NULL ? &blobs[r] : &blob))
			return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
					 "rank 0 at %s sent a bad address for rank %u", where, r);
	}
	if (addr_port(&peers[l->rank]) != addr_port(me))
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s sent port %u for this rank, we are on %u", where,
				 addr_port(&peers[l->rank]), addr_port(me));
	return 0;
}

static int run_client(const struct keel_launch *l, const struct sockaddr_storage *self,
		      const struct keel_rendezvous_blob *self_blob, struct sockaddr_storage *peers,
		      struct keel_rendezvous_blob *blobs, uint64_t deadline_ns, uint64_t timeout_ns,
		      char *err, size_t err_len)
{
	char where[96];
	struct addrinfo *ai = NULL;
	struct sockaddr_storage local, me;
	socklen_t local_len = sizeof(local);
	int rc, fd, last_err;

	snprintf(where, sizeof(where), "%.80s:%u", l->master_addr, l->master_port);
	rc = resolve(l->master_addr, l->master_port, AF_UNSPEC, SOCK_STREAM, &ai);
	if (rc != 0)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "cannot resolve MASTER_ADDR %s: %s", where, gai_strerror(rc));
	fd = connect_retry(ai, deadline_ns, &last_err);
	freeaddrinfo(ai);
	if (fd < 0)
		return keel_fail(
		    err, err_len, -ETIMEDOUT,
		    "rank %u could not reach rank 0 at MASTER_ADDR:MASTER_PORT %s within "
		    "%llu ms (last error: %s)",
		    l->rank, where, (unsigned long long)(timeout_ns / 1000000u),
		    strerror(last_err));
	rc = getsockname(fd, (struct sockaddr *)&local, &local_len) == 0 ? 0 : -errno;
	if (rc == 0)
		rc = advertise(self, &local, &me, err, err_len);
	if (rc == 0)
		rc = client_exchange(l, fd, &me, self_blob, peers, blobs, deadline_ns, where, err,
				     err_len);
	close(fd);
	return rc;
}

int keel_rendezvous_blob(const struct keel_launch *l, const struct sockaddr *self_addr,
			 socklen_t self_len, const struct keel_rendezvous_blob *self_blob,
			 struct sockaddr_storage *peers, struct keel_rendezvous_blob *blobs,
			 uint64_t timeout_ns, char *err, size_t err_len)
{
	struct sockaddr_storage self;
	uint64_t now_ns = keel_posix_now_ns();
	uint64_t deadline_ns = timeout_ns > UINT64_MAX - now_ns ? UINT64_MAX : now_ns + timeout_ns;

	KEEL_ASSERT(l != NULL && self_addr != NULL && peers != NULL);
	KEEL_ASSERT(l->world_size >= 1 && l->world_size <= KEEL_WORLD_MAX);
	KEEL_ASSERT(l->rank < l->world_size);
	if ((self_addr->sa_family != AF_INET || self_len < sizeof(struct sockaddr_in)) &&
	    (self_addr->sa_family != AF_INET6 || self_len < sizeof(struct sockaddr_in6)))
		return keel_fail(err, err_len, -EINVAL, "the UDP address is neither IPv4 nor IPv6");
	memset(&self, 0, sizeof(self));
	memcpy(&self, self_addr,
	       self_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
					       : sizeof(struct sockaddr_in6));
	if (addr_port(&self) == 0)
		return keel_fail(err, err_len, -EINVAL,
				 "the UDP socket has no port (not bound yet?)");
	KEEL_ASSERT(self_blob == NULL || self_blob->len <= KEEL_RENDEZVOUS_BLOB_MAX);
	if (blobs != NULL)
		memset(blobs, 0, (size_t)l->world_size * sizeof(*blobs));
	if (l->peers != NULL)
		return peers_from_list(l, &self, peers, err, err_len);
	if (l->world_size == 1) {
		peers[0] = self;
		if (blobs != NULL && self_blob != NULL)
			blobs[0] = *self_blob;
		return 0;
	}
	if (l->master_addr[0] == '\0' || l->master_port == 0)
		return keel_fail(err, err_len, -EINVAL,
				 "MASTER_ADDR and MASTER_PORT are needed for a "
				 "rendezvous of %u ranks",
				 l->world_size);
	if (l->rank == 0)
		return run_server(l, &self, self_blob, peers, blobs, deadline_ns, err, err_len);
	return run_client(l, &self, self_blob, peers, blobs, deadline_ns, timeout_ns, err, err_len);
}

int keel_rendezvous(const struct keel_launch *l, const struct sockaddr *self_addr,
		    socklen_t self_len, struct sockaddr_storage *peers, uint64_t timeout_ns,
		    char *err, size_t err_len)
{
	return keel_rendezvous_blob(l, self_addr, self_len, NULL, peers, NULL, timeout_ns, err,
				    err_len);
}
