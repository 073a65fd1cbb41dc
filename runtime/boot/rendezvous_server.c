/* Rank 0's side of the TCP rendezvous (the rules are in rendezvous.h): greet each connection
 * with a fresh nonce, judge each hello (rendezvous_wire.c), seat the ranks that pass, close
 * everything else without an answer, then hand every seated rank the table and the job id.
 * Nothing a stranger sends can end the rendezvous early or hold a slot for long. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "assert_int.h"
#include "boot_int.h"
#include "keel/posix.h"
#include "rendezvous_int.h"

/* A connection must bring a whole hello within timeout / 4, clamped to these: long enough for
 * a rank on a slow network, short enough that idle strangers cannot hold slots for long. */
#define CONN_NS_MIN 50000000ull
#define CONN_NS_MAX 2000000000ull
/* Connections held at once, seats included: room for every rank twice over, and some. */
#define CONNS_SPARE 16u

struct conn {
	int fd;	      /* -1: slot free */
	int32_t rank; /* the seat it holds; -1 until its hello passed */
	uint32_t got; /* hello bytes received */
	uint64_t opened_ns, expires_ns;
	uint8_t nonce_s[RV_NONCE_LEN]; /* what we sent */
	uint8_t nonce_c[RV_NONCE_LEN]; /* what its hello brought */
	uint8_t hello[RV_HELLO_LEN];
};

struct server {
	struct keel_launch *l;
	struct keel_rendezvous_args *a;
	int listen_fd;
	uint32_t slot_count;
	uint32_t arrived; /* seats taken, rank 0 excluded */
	uint32_t job_out; /* the job id handed out */
	uint64_t conn_ns; /* each connection's time to send a whole hello */
	struct keel_rv_policy policy;
	uint8_t rv_key[RV_KEY_LEN];
	struct conn *conns;
	struct pollfd *pfds; /* [0] listens, [1 + i] is conns[i] */
	int32_t *seat;	     /* seat[rank]: the index of the connection holding it, or -1 */
	struct sockaddr_storage *table;
	struct keel_rendezvous_blob *blobs;
	uint8_t *reply; /* header, entries, mac */
	size_t reply_len;
	char where[96]; /* MASTER_ADDR:MASTER_PORT as given, for messages */
};

static void conn_close(struct server *s, struct conn *c)
{
	if (c->rank >= 0) {
		s->seat[c->rank] = -1;
		s->arrived--;
	}
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->got = 0;
	c->rank = -1;
}

/* An answer to a rank that proved the key (or holds a seat): best effort, it learns why
 * instead of waiting for its timeout. The mac makes it rank 0's word, for this connection. */
static void send_status(const struct server *s, const struct conn *c, enum rv_status st,
			uint32_t detail)
{
	uint8_t msg[RV_REPLY_HDR_LEN + RV_MAC_LEN], digest[RV_MAC_LEN];
	ssize_t n;

	keel_rv_reply_hdr_encode(msg, st, s->l->world_size, detail);
	memset(msg + RV_REPLY_HDR_LEN, 0, RV_MAC_LEN);
	if (s->policy.keyed) {
		keel_rv_digest(NULL, 0, digest);
		keel_rv_reply_mac(s->rv_key, c->nonce_c, c->nonce_s, msg, digest,
				  msg + RV_REPLY_HDR_LEN);
	}
	n = send(c->fd, msg, sizeof(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
	(void)n;
}

/* Turn a connection away and count it. `tell`: it proved the key, so it may hear why. */
static void refuse(struct server *s, struct conn *c, enum keel_rv_verdict v, bool tell,
		   const struct keel_rv_hello *h)
{
	static const enum rv_status status[KEEL_RV_VERDICTS] = {
	    [KEEL_RV_JOB] = RV_ST_JOB,	      [KEEL_RV_WORLD] = RV_ST_WORLD,
	    [KEEL_RV_RANK] = RV_ST_RANGE,     [KEEL_RV_ADDRESS] = RV_ST_FAMILY,
	    [KEEL_RV_SEAT] = RV_ST_DUPLICATE,
	};

	KEEL_ASSERT(v > KEEL_RV_ACCEPT && v < KEEL_RV_VERDICTS && c->rank < 0);
	s->a->refused[v]++;
	if (tell && status[v] != RV_ST_OK)
		send_status(s, c, status[v],
			    v == KEEL_RV_WORLD ? s->l->world_size
			    : v == KEEL_RV_JOB ? 0
					       : h->rank);
	conn_close(s, c);
}

/* Where a new connection goes: a free slot, else the oldest one still without a seat. */
static struct conn *slot_for_new(struct server *s)
{
	struct conn *oldest = NULL;

	for (uint32_t i = 0; i < s->slot_count; i++) {
		struct conn *c = &s->conns[i];

		if (c->fd < 0)
			return c;
		if (c->rank < 0 && (oldest == NULL || c->opened_ns < oldest->opened_ns))
			oldest = c;
	}
	/* More slots than seats: some connection is unseated. */
	KEEL_ASSERT(oldest != NULL);
	refuse(s, oldest, KEEL_RV_EVICTED, false, NULL);
	return oldest;
}

static void conn_open(struct server *s, struct conn *c, int fd, uint64_t now_ns)
{
	uint8_t greeting[RV_GREETING_LEN];

	c->fd = fd;
	c->rank = -1;
	c->got = 0;
	c->opened_ns = now_ns;
	c->expires_ns = now_ns + s->conn_ns;
	keel_rv_random(c->nonce_s, sizeof(c->nonce_s));
	keel_rv_greeting_encode(greeting, s->policy.keyed, c->nonce_s);
	/* A new socket's buffer is empty: the greeting goes at once or the peer is gone. */
	if (send(fd, greeting, sizeof(greeting), MSG_NOSIGNAL | MSG_DONTWAIT) !=
	    (ssize_t)sizeof(greeting))
		refuse(s, c, KEEL_RV_HUNG_UP, false, NULL);
}

static void server_accept(struct server *s, uint64_t now_ns)
{
	/* Bounded, so that a flood of connections cannot starve the reads. */
	for (uint32_t i = 0; i < s->slot_count; i++) {
		int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
			return; /* EAGAIN, or a connection that died in the backlog */
		conn_open(s, slot_for_new(s), fd, now_ns);
	}
}

static void server_expire(struct server *s, uint64_t now_ns)
{
	for (uint32_t i = 0; i < s->slot_count; i++) {
		struct conn *c = &s->conns[i];

		if (c->fd >= 0 && c->rank < 0 && now_ns >= c->expires_ns)
			refuse(s, c, KEEL_RV_IDLE, false, NULL);
	}
}

/* Is rank's seat held by a live connection? A holder whose rank died (its restarted life may
 * be the one asking) is let go here rather than when its turn to be read comes. */
static bool seat_held(struct server *s, uint32_t rank)
{
	int32_t i = s->seat[rank];
	uint8_t b;
	ssize_t n;

	if (i < 0)
		return false;
	n = recv(s->conns[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
		conn_close(s, &s->conns[i]);
		return false;
	}
	return true;
}

/* A whole hello is in on c: seat its rank, or refuse it. */
static void server_hello(struct server *s, struct conn *c)
{
	struct keel_rv_hello h;
	struct sockaddr_storage addr;
	struct keel_rendezvous_blob blob;
	enum keel_rv_verdict v;
	bool proven;

	s->policy.nonce_s = c->nonce_s;
	v = keel_rv_hello_judge(c->hello, RV_HELLO_LEN, &s->policy, &h, &addr, &blob);
	/* Verdicts from KEEL_RV_JOB on are given after the proof passed. */
	proven = s->policy.keyed && (v == KEEL_RV_ACCEPT || v >= KEEL_RV_JOB);
	memcpy(c->nonce_c, h.nonce, sizeof(c->nonce_c));
	if (v == KEEL_RV_ACCEPT && seat_held(s, h.rank))
		v = KEEL_RV_SEAT;
	if (v != KEEL_RV_ACCEPT) {
		refuse(s, c, v, proven, &h);
		return;
	}
	s->table[h.rank] = addr;
	s->blobs[h.rank] = blob;
	s->seat[h.rank] = (int32_t)(c - s->conns);
	c->rank = (int32_t)h.rank;
	s->arrived++;
}

/* Read what is ready on connection c. */
static void server_read(struct server *s, struct conn *c)
{
	enum keel_rv_verdict v;
	ssize_t n;

	if (c->rank >= 0) {
		uint8_t junk[64];

		/* Nothing more is expected; EOF means the rank gave up or died: free its seat
		 * so that its next try (or next life) is not a duplicate. */
		n = recv(c->fd, junk, sizeof(junk), 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			conn_close(s, c);
		return;
	}
	n = recv(c->fd, c->hello + c->got, RV_HELLO_LEN - c->got, 0);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		refuse(s, c, KEEL_RV_HUNG_UP, false, NULL);
		return;
	}
	if (n < 0)
		return;
	c->got += (uint32_t)n;
	v = keel_rv_hello_prefix(c->hello, c->got);
	if (v != KEEL_RV_ACCEPT)
		refuse(s, c, v, false, NULL); /* a stranger: no need to wait for the rest */
	else if (c->got == RV_HELLO_LEN)
		server_hello(s, c);
}

/* Fill the poll set; returns when poll must wake: the deadline, or a connection's. */
static uint64_t server_poll_set(struct server *s, uint64_t deadline_ns)
{
	uint64_t wake_ns = deadline_ns;

	for (uint32_t i = 0; i < s->slot_count; i++) {
		const struct conn *c = &s->conns[i];

		s->pfds[1 + i].fd = c->fd;
		s->pfds[1 + i].events = POLLIN;
		s->pfds[1 + i].revents = 0;
		if (c->fd >= 0 && c->rank < 0 && c->expires_ns < wake_ns)
			wake_ns = c->expires_ns;
	}
	s->pfds[0].fd = s->listen_fd;
	s->pfds[0].events = POLLIN;
	s->pfds[0].revents = 0;
	return wake_ns;
}

static int server_collect(struct server *s, uint64_t deadline_ns, char *err, size_t err_len)
{
	while (s->arrived < s->l->world_size - 1) {
		uint64_t wake_ns = server_poll_set(s, deadline_ns), now_ns;
		int n = poll(s->pfds, 1 + s->slot_count, rv_ms_left(wake_ns));

		if (n < 0 && errno != EINTR)
			return keel_fail(err, err_len, -errno, "rank 0: poll: %s", strerror(errno));
		if (rv_ms_left(deadline_ns) == 0)
			return -ETIMEDOUT;
		now_ns = keel_posix_now_ns();
		/* Reads first: accepting may reuse a slot whose revents are still unread. */
		for (uint32_t i = 0; n > 0 && i < s->slot_count; i++)
			if (s->pfds[1 + i].revents != 0 && s->conns[i].fd >= 0 &&
			    s->conns[i].fd == s->pfds[1 + i].fd)
				server_read(s, &s->conns[i]);
		if (n > 0 && s->pfds[0].revents != 0)
			server_accept(s, now_ns);
		server_expire(s, now_ns);
	}
	return 0;
}

static int server_listen(struct server *s, char *err, size_t err_len)
{
	struct addrinfo *ai = NULL, *a;
	int rc = rv_resolve(s->l->master_addr, s->l->master_port, AF_UNSPEC, SOCK_STREAM, &ai);
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

static int server_timeout_msg(struct server *s, char *err, size_t err_len)
{
	uint32_t world = s->l->world_size, missing = world - 1 - s->arrived, shown = 0;
	char list[128], refusals[256];
	size_t used = 0;

	/* Tell the ranks that did arrive, so they fail now and with the reason. */
	for (uint32_t i = 0; i < s->slot_count; i++)
		if (s->conns[i].fd >= 0 && s->conns[i].rank >= 0)
			send_status(s, &s->conns[i], RV_ST_TIMEOUT, s->arrived + 1);
	list[0] = '\0';
	for (uint32_t r = 1; r < world && shown < 8; r++) {
		if (s->seat[r] >= 0)
			continue;
		used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%u",
					 shown == 0 ? "" : ", ", r);
		shown++;
	}
	keel_rv_refusals_str(s->a->refused, refusals, sizeof(refusals));
	return keel_fail(err, err_len, -ETIMEDOUT,
			 "rank 0 listening on MASTER_ADDR:MASTER_PORT %s: only %u of %u ranks "
			 "arrived in time; %u rank%s missing (%s%s); %s",
			 s->where, s->arrived + 1, world, missing, missing == 1 ? "" : "s", list,
			 missing > shown ? ", ..." : "", refusals);
}

static int server_send_table(struct server *s, uint64_t deadline_ns, char *err, size_t err_len)
{
	size_t entries_len = (size_t)s->l->world_size * RV_ENTRY_LEN;
	uint8_t *mac = s->reply + RV_REPLY_HDR_LEN + entries_len, digest[RV_MAC_LEN];

	keel_rv_reply_hdr_encode(s->reply, RV_ST_OK, s->l->world_size, s->job_out);
	for (uint32_t r = 0; r < s->l->world_size; r++)
		keel_rv_entry_put(s->reply + RV_REPLY_HDR_LEN + (size_t)r * RV_ENTRY_LEN,
				  &s->table[r], &s->blobs[r]);
	memset(mac, 0, RV_MAC_LEN);
	if (s->policy.keyed)
		keel_rv_digest(s->reply + RV_REPLY_HDR_LEN, entries_len, digest);
	for (uint32_t i = 0; i < s->slot_count; i++) {
		struct conn *c = &s->conns[i];
		int rc;

		if (c->fd < 0 || c->rank < 0)
			continue;
		if (s->policy.keyed)
			keel_rv_reply_mac(s->rv_key, c->nonce_c, c->nonce_s, s->reply, digest, mac);
		rc = rv_io_full(c->fd, s->reply, s->reply_len, true, deadline_ns);
		if (rc != 0)
			return keel_fail(err, err_len,
					 rc == -ETIMEDOUT ? -ETIMEDOUT : KEEL_ERENDEZVOUS,
					 "rank 0: sending the table to rank %d failed: %s", c->rank,
					 strerror(-rc));
		shutdown(c->fd, SHUT_WR);
	}
	return 0;
}

static int server_alloc(struct server *s)
{
	uint32_t world = s->l->world_size;

	s->slot_count = 2 * world + CONNS_SPARE;
	s->reply_len = RV_REPLY_HDR_LEN + (size_t)world * RV_ENTRY_LEN + RV_MAC_LEN;
	s->conns = calloc(s->slot_count, sizeof(*s->conns));
	s->pfds = calloc(1 + s->slot_count, sizeof(*s->pfds));
	s->seat = malloc(world * sizeof(*s->seat));
	s->table = calloc(world, sizeof(*s->table));
	s->blobs = calloc(world, sizeof(*s->blobs));
	s->reply = malloc(s->reply_len);
	if (s->conns == NULL || s->pfds == NULL || s->seat == NULL || s->table == NULL ||
	    s->blobs == NULL || s->reply == NULL)
		return -ENOMEM;
	/* calloc left fd 0 in every slot: mark them free before any cleanup can close them. */
	for (uint32_t i = 0; i < s->slot_count; i++) {
		s->conns[i].fd = -1;
		s->conns[i].rank = -1;
	}
	for (uint32_t r = 0; r < world; r++)
		s->seat[r] = -1;
	return 0;
}

static void server_free(struct server *s)
{
	for (uint32_t i = 0; s->conns != NULL && i < s->slot_count; i++)
		if (s->conns[i].fd >= 0)
			close(s->conns[i].fd);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	keel_rv_wipe(s->rv_key, sizeof(s->rv_key));
	free(s->reply);
	free(s->blobs);
	free(s->table);
	free(s->seat);
	free(s->pfds);
	free(s->conns);
}

/* Listen, seat rank 0 itself, settle the job id and the rules for hellos. */
static int server_start(struct server *s, const struct sockaddr_storage *self, char *err,
			size_t err_len)
{
	struct sockaddr_storage local;
	socklen_t local_len = sizeof(local);
	uint64_t quarter = s->a->timeout_ns / 4;
	int rc = server_listen(s, err, err_len);

	if (rc == 0)
		rc = getsockname(s->listen_fd, (struct sockaddr *)&local, &local_len) == 0 ? 0
											   : -errno;
	if (rc == 0)
		rc = rv_advertise(self, &local, &s->table[0], err, err_len);
	if (rc != 0)
		return rc;
	if (s->a->self_blob != NULL)
		s->blobs[0] = *s->a->self_blob;
	s->conn_ns = quarter < CONN_NS_MIN   ? CONN_NS_MIN
		     : quarter > CONN_NS_MAX ? CONN_NS_MAX
					     : quarter;
	s->policy.keyed = s->l->has_key;
	s->policy.rv_key = s->rv_key;
	s->policy.job_fixed = s->l->job_id_fixed;
	s->policy.job = s->l->job_id;
	s->policy.world = s->l->world_size;
	if (s->l->has_key)
		keel_rv_key_derive(s->l->key, s->rv_key);
	s->job_out = s->l->job_id;
	if (!s->l->job_id_fixed)
		s->job_out = 0;
	while (s->job_out == 0 && !s->l->job_id_fixed) /* not settled: a random one, not 0 */
		keel_rv_random((uint8_t *)&s->job_out, sizeof(s->job_out));
	return 0;
}

int rv_run_server(struct keel_launch *l, const struct sockaddr_storage *self,
		  struct keel_rendezvous_args *a, uint64_t deadline_ns, char *err, size_t err_len)
{
	struct server s = {.l = l, .a = a, .listen_fd = -1};
	char refusals[256];
	int rc;

	snprintf(s.where, sizeof(s.where), "%.80s:%u", l->master_addr, l->master_port);
	rc = server_alloc(&s);
	if (rc == 0)
		rc = server_start(&s, self, err, err_len);
	if (rc == 0)
		rc = server_collect(&s, deadline_ns, err, err_len);
	if (rc == -ETIMEDOUT)
		rc = server_timeout_msg(&s, err, err_len);
	if (rc == 0)
		rc = server_send_table(&s, deadline_ns, err, err_len);
	if (rc == 0) {
		memcpy(a->peers, s.table, (size_t)l->world_size * sizeof(*a->peers));
		if (a->blobs != NULL)
			memcpy(a->blobs, s.blobs, (size_t)l->world_size * sizeof(*a->blobs));
		l->job_id = s.job_out;
		l->job_id_fixed = true;
		if (keel_rv_refusals_str(a->refused, refusals, sizeof(refusals)) != 0)
			fprintf(stderr,
				"keel: rank 0 at MASTER_ADDR:MASTER_PORT %s: all %u ranks "
				"arrived; %s\n",
				s.where, l->world_size, refusals);
	}
	server_free(&s);
	if (rc == -ENOMEM)
		return keel_fail(err, err_len, rc, "rank 0: out of memory for %u ranks",
				 l->world_size);
	return rc;
}
