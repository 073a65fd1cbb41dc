/* The other ranks' side of the TCP rendezvous (the rules are in rendezvous.h): connect to
 * rank 0, read its greeting, send a hello that proves the job key for rank 0's nonce, and
 * take only a reply that proves it for ours. A connection rank 0 closes without an answer (it
 * refused the hello, or made room for others) is tried again until the deadline. */
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
#include "keel/limits.h"
#include "keel/posix.h"
#include "rendezvous_int.h"

/* Backoff while rank 0 is not listening yet. */
#define RETRY_NS_MIN 2000000ull
#define RETRY_NS_MAX 100000000ull
/* Backoff after rank 0 closed a connection without an answer. */
#define CLOSED_NS_MIN 50000000ull
#define CLOSED_NS_MAX 1000000000ull
/* client_exchange: rank 0 closed the connection without an answer. */
#define CLOSED_SILENTLY 1

struct client {
	struct keel_launch *l;
	struct keel_rendezvous_args *a;
	struct sockaddr_storage me; /* the address this rank advertises */
	uint8_t rv_key[RV_KEY_LEN];
	uint8_t nonce_s[RV_NONCE_LEN], nonce_c[RV_NONCE_LEN];
	uint8_t hdr[RV_REPLY_HDR_LEN];
	uint8_t *body;	 /* the reply after its header: entries and mac */
	uint32_t closed; /* connections rank 0 closed without an answer */
	char where[96];	 /* MASTER_ADDR:MASTER_PORT as given, for messages */
};

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
	if (poll(&p, 1, rv_ms_left(deadline_ns)) <= 0) {
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
	while (rv_ms_left(deadline_ns) > 0) {
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

/* Rank 0's greeting: its nonce, and whether it holds a key as we do. */
static int client_greeting(struct client *c, int fd, uint64_t deadline_ns, char *err,
			   size_t err_len)
{
	uint8_t g[RV_GREETING_LEN];
	bool keyed = false;
	int rc = rv_io_full(fd, g, sizeof(g), false, deadline_ns);

	if (rc == -ECONNRESET)
		return CLOSED_SILENTLY;
	if (rc != 0)
		return keel_fail(err, err_len, rc == -ETIMEDOUT ? -ETIMEDOUT : KEEL_ERENDEZVOUS,
				 "connected to rank 0 at MASTER_ADDR:MASTER_PORT %s, but it sent "
				 "no greeting (%s; keel of an older version there?)",
				 c->where, strerror(-rc));
	if (keel_rv_greeting_parse(g, &keyed, c->nonce_s) != KEEL_RV_ACCEPT)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "%s is not a keel rendezvous of version %u (another program on "
				 "MASTER_PORT, or keel of another version)",
				 c->where, KEEL_RENDEZVOUS_VERSION);
	if (keyed && !c->l->has_key)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s requires the job key and this rank has none: give "
				 "every rank the same KEEL_JOB_KEY_FILE (or KEEL_JOB_KEY)",
				 c->where);
	if (!keyed && c->l->has_key)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s has no job key while this rank has one (%s): "
				 "refusing a table nobody can vouch for; give every rank the same "
				 "key",
				 c->where, c->l->key_source);
	return 0;
}

static int client_hello(struct client *c, int fd, uint64_t deadline_ns)
{
	const struct keel_launch *l = c->l;
	struct keel_rv_hello h = {
	    .version = KEEL_RENDEZVOUS_VERSION,
	    .flags = (uint16_t)((l->has_key ? RV_FLAG_KEYED : 0) |
				(l->job_id_fixed ? RV_FLAG_JOB_FIXED : 0)),
	    .job = l->job_id,
	    .world = l->world_size,
	    .rank = l->rank,
	};
	uint8_t hello[RV_HELLO_LEN];

	keel_rv_random(c->nonce_c, sizeof(c->nonce_c));
	memcpy(h.nonce, c->nonce_c, sizeof(h.nonce));
	keel_rv_entry_put(h.entry, &c->me, c->a->self_blob);
	keel_rv_hello_encode(&h, hello);
	if (l->has_key)
		keel_rv_hello_sign(c->rv_key, c->nonce_s, hello);
	return rv_io_full(fd, hello, sizeof(hello), true, deadline_ns);
}

static int client_reject_msg(const struct client *c, char *err, size_t err_len)
{
	uint32_t rank = c->l->rank, world = rv_get32(c->hdr + 8), detail = rv_get32(c->hdr + 12);
	const char *w = c->where;

	switch (rv_get16(c->hdr + 6)) {
	case RV_ST_DUPLICATE:
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s refused rank %u: another live process holds that "
				 "rank (two processes with the same rank?)",
				 w, rank);
	case RV_ST_WORLD:
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s refused rank %u: its world size is %u, ours %u", w,
				 rank, world, c->l->world_size);
	case RV_ST_RANGE:
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s refused rank %u: out of range for world %u", w, rank,
				 world);
	case RV_ST_JOB:
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s runs another job than this rank's %u%s (KEEL_JOB_ID "
				 "differs, or is set on one side only)",
				 w, c->l->job_id, c->l->job_id_fixed ? "" : " (none given)");
	case RV_ST_FAMILY:
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s refused rank %u: its address or start-up data is "
				 "malformed (an unknown address family, or a datagram size outside "
				 "%u..%u)",
				 w, rank, KEEL_MTU_MIN, KEEL_MTU_MAX);
	case RV_ST_TIMEOUT:
		return keel_fail(err, err_len, -ETIMEDOUT,
				 "rank 0 at MASTER_ADDR:MASTER_PORT %s timed out: only %u of %u "
				 "ranks arrived",
				 w, detail, world);
	default:
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s refused rank %u (status %u)", w, rank,
				 rv_get16(c->hdr + 6));
	}
}

/* Read the reply; with a key, it counts only if it proves the key for our nonce. */
static int client_reply(struct client *c, int fd, uint64_t deadline_ns, char *err, size_t err_len)
{
	uint32_t world = c->l->world_size;
	size_t entries_len;
	uint8_t digest[RV_MAC_LEN];
	int rc = rv_io_full(fd, c->hdr, sizeof(c->hdr), false, deadline_ns);

	if (rc == -ECONNRESET)
		return CLOSED_SILENTLY;
	if (rc == -ETIMEDOUT)
		return keel_fail(err, err_len, -ETIMEDOUT,
				 "connected to rank 0 at MASTER_ADDR:MASTER_PORT %s, but the "
				 "address table did not come in time (other ranks missing?)",
				 c->where);
	if (rc == 0 &&
	    (rv_get32(c->hdr) != RV_MAGIC || rv_get16(c->hdr + 4) != KEEL_RENDEZVOUS_VERSION))
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "%s is not a keel rendezvous of version %u", c->where,
				 KEEL_RENDEZVOUS_VERSION);
	if (rc == 0 && rv_get16(c->hdr + 6) == RV_ST_OK && rv_get32(c->hdr + 8) != world)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s sent a table of %u ranks, we are %u", c->where,
				 rv_get32(c->hdr + 8), world);
	entries_len = rv_get16(c->hdr + 6) == RV_ST_OK ? (size_t)world * RV_ENTRY_LEN : 0;
	if (rc == 0)
		rc = rv_io_full(fd, c->body, entries_len + RV_MAC_LEN, false, deadline_ns);
	if (rc != 0)
		return keel_fail(err, err_len, rc == -ETIMEDOUT ? -ETIMEDOUT : KEEL_ERENDEZVOUS,
				 "rank 0 at MASTER_ADDR:MASTER_PORT %s: reading its reply: %s",
				 c->where, strerror(-rc));
	if (c->l->has_key) {
		keel_rv_digest(c->body, entries_len, digest);
		if (!keel_rv_reply_verify(c->rv_key, c->nonce_c, c->nonce_s, c->hdr, digest,
					  c->body + entries_len))
			return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
					 "rank 0 at %s did not prove the job key in its reply (a "
					 "different key there, or not this job's rank 0): its "
					 "table is refused",
					 c->where);
	}
	return rv_get16(c->hdr + 6) == RV_ST_OK ? 0 : client_reject_msg(c, err, err_len);
}

/* The table is proven (or there is no key): take it, and the job id. */
static int client_take_table(struct client *c, char *err, size_t err_len)
{
	struct keel_launch *l = c->l;
	struct keel_rendezvous_blob blob;

	for (uint32_t r = 0; r < l->world_size; r++)
		if (!keel_rv_entry_get(c->body + (size_t)r * RV_ENTRY_LEN, &c->a->peers[r],
				       c->a->blobs != NULL ? &c->a->blobs[r] : &blob))
			return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
					 "rank 0 at %s sent a bad address for rank %u", c->where,
					 r);
	if (rv_addr_port(&c->a->peers[l->rank]) != rv_addr_port(&c->me))
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "rank 0 at %s sent port %u for this rank, we are on %u", c->where,
				 rv_addr_port(&c->a->peers[l->rank]), rv_addr_port(&c->me));
	l->job_id = rv_get32(c->hdr + 12);
	l->job_id_fixed = true;
	return 0;
}

/* Greeting in, hello out, reply in, over the connected socket fd. Returns 0, an error, or
 * CLOSED_SILENTLY. */
static int client_exchange(struct client *c, int fd, uint64_t deadline_ns, char *err,
			   size_t err_len)
{
	int rc = client_greeting(c, fd, deadline_ns, err, err_len);

	if (rc != 0)
		return rc;
	rc = client_hello(c, fd, deadline_ns);
	if (rc == -EPIPE || rc == -ECONNRESET)
		return CLOSED_SILENTLY; /* closed while we were still sending */
	if (rc != 0)
		return keel_fail(err, err_len, rc == -ETIMEDOUT ? -ETIMEDOUT : KEEL_ERENDEZVOUS,
				 "rank 0 at MASTER_ADDR:MASTER_PORT %s: sending the hello: %s",
				 c->where, strerror(-rc));
	rc = client_reply(c, fd, deadline_ns, err, err_len);
	if (rc == 0)
		rc = client_take_table(c, err, err_len);
	return rc;
}

/* The deadline passed before rank 0 answered. */
static int client_timeout_msg(const struct client *c, uint64_t timeout_ns, int last_err, char *err,
			      size_t err_len)
{
	if (c->closed > 0)
		return keel_fail(
		    err, err_len, -ETIMEDOUT,
		    "rank %u: rank 0 at MASTER_ADDR:MASTER_PORT %s closed this rank's "
		    "connection %u time%s without an answer within %llu ms: it refused "
		    "the hello (a different KEEL_JOB_ID, world size or key?) or was "
		    "overloaded; rank 0's own message counts what it refused",
		    c->l->rank, c->where, c->closed, c->closed == 1 ? "" : "s",
		    (unsigned long long)(timeout_ns / 1000000u));
	return keel_fail(err, err_len, -ETIMEDOUT,
			 "rank %u could not reach rank 0 at MASTER_ADDR:MASTER_PORT %s within "
			 "%llu ms (last error: %s)",
			 c->l->rank, c->where, (unsigned long long)(timeout_ns / 1000000u),
			 strerror(last_err));
}

/* Connect and exchange until rank 0 answers or the deadline passes. */
static int client_loop(struct client *c, const struct addrinfo *ai,
		       const struct sockaddr_storage *self, uint64_t deadline_ns, char *err,
		       size_t err_len)
{
	uint64_t backoff_ns = CLOSED_NS_MIN;
	int rc, last_err;

	for (;;) {
		struct sockaddr_storage local;
		socklen_t local_len = sizeof(local);
		int fd = connect_retry(ai, deadline_ns, &last_err);

		if (fd < 0)
			return client_timeout_msg(c, c->a->timeout_ns, last_err, err, err_len);
		rc = getsockname(fd, (struct sockaddr *)&local, &local_len) == 0 ? 0 : -errno;
		if (rc == 0)
			rc = rv_advertise(self, &local, &c->me, err, err_len);
		if (rc == 0)
			rc = client_exchange(c, fd, deadline_ns, err, err_len);
		close(fd);
		if (rc != CLOSED_SILENTLY)
			return rc;
		c->closed++;
		if (rv_ms_left(deadline_ns) == 0)
			return client_timeout_msg(c, c->a->timeout_ns, 0, err, err_len);
		poll(NULL, 0, rv_ms_left(keel_posix_now_ns() + backoff_ns));
		backoff_ns = backoff_ns * 2 > CLOSED_NS_MAX ? CLOSED_NS_MAX : backoff_ns * 2;
	}
}

int rv_run_client(struct keel_launch *l, const struct sockaddr_storage *self,
		  struct keel_rendezvous_args *a, uint64_t deadline_ns, char *err, size_t err_len)
{
	struct client c = {.l = l, .a = a};
	struct addrinfo *ai = NULL;
	int rc;

	snprintf(c.where, sizeof(c.where), "%.80s:%u", l->master_addr, l->master_port);
	rc = rv_resolve(l->master_addr, l->master_port, AF_UNSPEC, SOCK_STREAM, &ai);
	if (rc != 0)
		return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
				 "cannot resolve MASTER_ADDR %s: %s", c.where, gai_strerror(rc));
	c.body = malloc((size_t)l->world_size * RV_ENTRY_LEN + RV_MAC_LEN);
	if (c.body == NULL) {
		freeaddrinfo(ai);
		return keel_fail(err, err_len, -ENOMEM, "rank %u: out of memory for %u ranks",
				 l->rank, l->world_size);
	}
	if (l->has_key)
		keel_rv_key_derive(l->key, c.rv_key);
	rc = client_loop(&c, ai, self, deadline_ns, err, err_len);
	keel_rv_wipe(c.rv_key, sizeof(c.rv_key));
	free(c.body);
	freeaddrinfo(ai);
	return rc;
}
