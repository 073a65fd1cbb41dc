/* Rendezvous: every rank learns every other rank's UDP address before the node starts.
 * Tools only: this blocks (bounded by a timeout) and uses TCP or a static list. */
#ifndef KEEL_RENDEZVOUS_H
#define KEEL_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "keel/errors.h"
#include "keel/launch.h"

/* Version of the TCP rendezvous messages; a rank 0 of another version ignores us.
 * 2: each table entry carries a keel_rendezvous_blob. */
#define KEEL_RENDEZVOUS_VERSION 2u

/* An opaque per-rank record exchanged beside the address (a backend's own addressing: the
 * DPDK port's MAC, a verbs GID/QPN...). `kind` says whose it is (0: none); rank 0 checks only
 * that len <= KEEL_RENDEZVOUS_BLOB_MAX. */
#define KEEL_RENDEZVOUS_BLOB_MAX 64u
struct keel_rendezvous_blob {
	uint8_t kind;
	uint8_t len;
	uint8_t data[KEEL_RENDEZVOUS_BLOB_MAX];
};

/* Fill peers[0 .. l->world_size) with each rank's UDP address; peers[l->rank] is the address
 * this rank advertised. self_addr is the address the caller's UDP socket is bound to.
 *
 * With l->peers (KEEL_PEERS), the list is parsed and resolved (numeric IPv4, [IPv6], or host
 * names through getaddrinfo, in self_addr's family) and nothing is sent; the entry for this rank
 * must carry self_addr's port.
 * Otherwise rank 0 listens on TCP l->master_addr:l->master_port (SO_REUSEADDR), collects one
 * hello (job, world, rank, address) from each other rank, checks them and sends everyone the
 * whole table; the other ranks connect, retrying while rank 0 is not up yet. A rank bound to a
 * wildcard address (0.0.0.0 or ::) advertises the local address of its TCP connection to rank 0
 * (rank 0: of its listening socket) with its UDP port.
 * A world of 1 returns self_addr at once.
 *
 * Blocks for at most timeout_ns (name resolution through DNS excepted); every socket it opened
 * is closed on return. A message is written to err (may be NULL) on failure.
 * Errors: -ETIMEDOUT (rank 0 unreachable, or ranks missing when the time ran out; the message
 * names MASTER_ADDR:MASTER_PORT), KEEL_ERENDEZVOUS (rank 0 rejected a hello: duplicate rank,
 * rank out of range, world or job mismatch; or a host name did not resolve; or the peer
 * closed the connection), -EINVAL (bad KEEL_PEERS entry, this rank's port differs from its entry,
 * unusable self_addr), -ENOMEM, or a socket errno such as -EADDRINUSE (rank 0 could not listen). */
KEEL_MUST_USE int keel_rendezvous(const struct keel_launch *l, const struct sockaddr *self_addr,
				  socklen_t self_len, struct sockaddr_storage *peers,
				  uint64_t timeout_ns, char *err, size_t err_len);

/* keel_rendezvous, also exchanging one blob per rank: self_blob (NULL: an empty one) is this
 * rank's, blobs[0 .. world_size) (may be NULL) receives everyone's. With KEEL_PEERS nothing is
 * exchanged and every blob comes back empty (kind 0): the backend needs its own static list. */
KEEL_MUST_USE int keel_rendezvous_blob(const struct keel_launch *l,
				       const struct sockaddr *self_addr, socklen_t self_len,
				       const struct keel_rendezvous_blob *self_blob,
				       struct sockaddr_storage *peers,
				       struct keel_rendezvous_blob *blobs, uint64_t timeout_ns,
				       char *err, size_t err_len);

/* "a.b.c.d:port" or "[v6]:port" into buf (at least 64 bytes recommended); returns buf. */
const char *keel_sockaddr_str(const struct sockaddr *addr, char *buf, size_t buf_len);

#endif
