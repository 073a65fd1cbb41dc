/* Rendezvous (rendezvous.h): the static KEEL_PEERS list, or rank 0's TCP exchange
 * (rendezvous_server.c for rank 0, rendezvous_client.c for the others, rendezvous_wire.c and
 * rendezvous_proof.c for the messages and the key), and what both sides share. Tools only.
 * Every wait is bounded by the caller's timeout; every socket is closed on every path. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "assert_int.h"
#include "boot_int.h"
#include "keel/limits.h"
#include "keel/posix.h"
#include "rendezvous_int.h"

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

uint16_t rv_addr_port(const struct sockaddr_storage *ss)
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
int rv_advertise(const struct sockaddr_storage *self, const struct sockaddr_storage *local,
		 struct sockaddr_storage *out, char *err, size_t err_len)
{
	uint16_t port = rv_addr_port(self);

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
int rv_ms_left(uint64_t deadline_ns)
{
	uint64_t now_ns = keel_posix_now_ns(), ms;

	if (now_ns >= deadline_ns)
		return 0;
	ms = (deadline_ns - now_ns + 999999u) / 1000000u;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Send or receive exactly len bytes on a non-blocking socket by deadline_ns.
 * Returns 0, -ETIMEDOUT, -ECONNRESET (peer closed while receiving) or -errno. */
int rv_io_full(int fd, uint8_t *buf, size_t len, bool is_send, uint64_t deadline_ns)
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
		if (poll(&p, 1, rv_ms_left(deadline_ns)) == 0 && rv_ms_left(deadline_ns) == 0)
			return -ETIMEDOUT;
	}
	return 0;
}

int rv_resolve(const char *host, uint16_t port, int family, int socktype, struct addrinfo **out)
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

/* The addresses, and each rank's host: ranks whose entries name the same host (as written)
 * share one. */
static int peers_from_list(const struct keel_launch *l, const struct sockaddr_storage *self,
			   struct sockaddr_storage *peers, struct keel_rendezvous_blob *blobs,
			   char *err, size_t err_len)
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
		rc = rv_resolve(host, port, self->ss_family, SOCK_DGRAM, &ai);
		if (rc != 0)
			return keel_fail(err, err_len, KEEL_ERENDEZVOUS,
					 "KEEL_PEERS entry %u: cannot resolve '%s' as %s: %s", i,
					 host, self->ss_family == AF_INET ? "IPv4" : "IPv6",
					 gai_strerror(rc));
		if (blobs != NULL)
			blobs[i].host = keel_launch_host_hash("KEEL_PEERS", host);
		KEEL_ASSERT(ai->ai_addrlen <= sizeof(peers[i]));
		memset(&peers[i], 0, sizeof(peers[i]));
		memcpy(&peers[i], ai->ai_addr, ai->ai_addrlen);
		freeaddrinfo(ai);
		if (i == l->rank && port != rv_addr_port(self))
			return keel_fail(
			    err, err_len, -EINVAL,
			    "KEEL_PEERS entry %u (this rank) has port %u but the UDP socket "
			    "is bound to port %u",
			    i, port, rv_addr_port(self));
	}
	return 0;
}

/* Copy the caller's UDP address: -EINVAL unless it is a bound IPv4 or IPv6 one. */
static int self_copy(const struct keel_rendezvous_args *a, struct sockaddr_storage *self, char *err,
		     size_t err_len)
{
	const struct sockaddr *s = a->self_addr;

	if ((s->sa_family != AF_INET || a->self_len < sizeof(struct sockaddr_in)) &&
	    (s->sa_family != AF_INET6 || a->self_len < sizeof(struct sockaddr_in6)))
		return keel_fail(err, err_len, -EINVAL, "the UDP address is neither IPv4 nor IPv6");
	memset(self, 0, sizeof(*self));
	memcpy(self, s,
	       s->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
	if (rv_addr_port(self) == 0)
		return keel_fail(err, err_len, -EINVAL,
				 "the UDP socket has no port (not bound yet?)");
	return 0;
}

int keel_rendezvous_run(struct keel_launch *l, struct keel_rendezvous_args *a, char *err,
			size_t err_len)
{
	struct sockaddr_storage self;
	uint64_t now_ns = keel_posix_now_ns();
	uint64_t deadline_ns =
	    a->timeout_ns > UINT64_MAX - now_ns ? UINT64_MAX : now_ns + a->timeout_ns;
	int rc;

	KEEL_ASSERT(l != NULL && a != NULL && a->self_addr != NULL && a->peers != NULL);
	KEEL_ASSERT(l->world_size >= 1 && l->world_size <= KEEL_WORLD_MAX);
	KEEL_ASSERT(l->rank < l->world_size);
	KEEL_ASSERT(a->self_blob == NULL || a->self_blob->len <= KEEL_RENDEZVOUS_BLOB_MAX);
	memset(a->refused, 0, sizeof(a->refused));
	rc = self_copy(a, &self, err, err_len);
	if (rc != 0)
		return rc;
	if (a->blobs != NULL)
		memset(a->blobs, 0, (size_t)l->world_size * sizeof(*a->blobs));
	if (l->peers != NULL)
		return peers_from_list(l, &self, a->peers, a->blobs, err, err_len);
	/* This rank's record goes out with its host, whatever the backend put in it. */
	const struct keel_rendezvous_blob *caller_blob = a->self_blob;
	struct keel_rendezvous_blob me = {0};
	if (caller_blob != NULL)
		me = *caller_blob;
	me.host = l->host_id;
	if (l->world_size == 1) {
		a->peers[0] = self;
		if (a->blobs != NULL)
			a->blobs[0] = me;
		return 0;
	}
	if (l->master_addr[0] == '\0' || l->master_port == 0)
		return keel_fail(err, err_len, -EINVAL,
				 "MASTER_ADDR and MASTER_PORT are needed for a "
				 "rendezvous of %u ranks",
				 l->world_size);
	if (l->has_key && !keel_rv_proof_available())
		return keel_fail(err, err_len, -ENOTSUP,
				 "this keel was built without libsodium: it cannot prove the "
				 "job key in the rendezvous");
	a->self_blob = &me;
	if (l->rank == 0)
		rc = rv_run_server(l, &self, a, deadline_ns, err, err_len);
	else
		rc = rv_run_client(l, &self, a, deadline_ns, err, err_len);
	a->self_blob = caller_blob;
	return rc;
}

int keel_rendezvous_blob(struct keel_launch *l, const struct sockaddr *self_addr,
			 socklen_t self_len, const struct keel_rendezvous_blob *self_blob,
			 struct sockaddr_storage *peers, struct keel_rendezvous_blob *blobs,
			 uint64_t timeout_ns, char *err, size_t err_len)
{
	struct keel_rendezvous_args a = {
	    .self_addr = self_addr,
	    .self_len = self_len,
	    .self_blob = self_blob,
	    .timeout_ns = timeout_ns,
	    .peers = peers,
	    .blobs = blobs,
	};

	return keel_rendezvous_run(l, &a, err, err_len);
}

int keel_rendezvous(struct keel_launch *l, const struct sockaddr *self_addr, socklen_t self_len,
		    struct sockaddr_storage *peers, uint64_t timeout_ns, char *err, size_t err_len)
{
	return keel_rendezvous_blob(l, self_addr, self_len, NULL, peers, NULL, timeout_ns, err,
				    err_len);
}
