/* Rendezvous: every rank learns every other rank's UDP address before the node starts.
 * Tools only: this blocks (bounded by a timeout) and uses TCP or a static list. */
#ifndef KEEL_RENDEZVOUS_H
#define KEEL_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "keel/errors.h"
#include "launch.h"

/* Version of the TCP rendezvous messages; a rank 0 of another version ignores us. */
#define KEEL_RENDEZVOUS_VERSION 1u

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

/* "a.b.c.d:port" or "[v6]:port" into buf (at least 64 bytes recommended); returns buf. */
const char *keel_sockaddr_str(const struct sockaddr *addr, char *buf, size_t buf_len);

#endif
