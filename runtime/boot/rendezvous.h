/* Rendezvous: every rank learns every other rank's UDP address before the node starts.
 * Tools only: this blocks (bounded by a timeout) and uses TCP or a static list. The rules it
 * keeps against strangers on the network are in docs/guide/security.md ("The rendezvous rules"). */
#ifndef KEEL_RENDEZVOUS_H
#define KEEL_RENDEZVOUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "keel/errors.h"
#include "keel/launch.h"

/* Version of the TCP rendezvous messages; a rank 0 of another version ignores us.
 * 2: each table entry carries a keel_rendezvous_blob.
 * 3: rank 0 greets each connection with a nonce; hello and reply carry a proof of the job
 *    key (zero without one); rank 0 hands out the job id; refused hellos get no answer.
 * 4: each blob carries its rank's host identity (which ranks can share memory) and the
 *    transports it offers its host's ranks.
 * 5: each blob carries its rank's datagram size, so the job agrees on one. */
#define KEEL_RENDEZVOUS_VERSION 5u

/* A per-rank record exchanged beside the address: the rank's host (keel_launch.host_id, filled
 * in by the rendezvous itself), and an opaque record of a backend's own addressing (the DPDK
 * port's MAC, a verbs GID/QPN...): `kind` says whose it is (0: none); rank 0 checks only that
 * len <= KEEL_RENDEZVOUS_BLOB_MAX. */
#define KEEL_RENDEZVOUS_BLOB_MAX 64u
struct keel_rendezvous_blob {
	uint8_t kind;
	uint8_t len;
	uint8_t data[KEEL_RENDEZVOUS_BLOB_MAX];
	uint64_t host;	 /* ranks with the same host share a machine (its memory) */
	uint16_t offers; /* KEEL_RV_OFFER_* bits: what the rank sets up (the caller's to fill) */
	/* The largest datagram the rank can take (its link's, or KEEL_MTU), and whether KEEL_MTU
	 * set it. The caller's to fill and to judge; 0 says nothing. */
	uint32_t mtu;
	bool mtu_set;
	/* Its UDP transport cuts longer datagrams into pieces of `mtu` bytes and joins them
	 * (keel_udp_config.piece_bytes): with every rank so, the job's datagrams may be longer */
	bool pieces;
};
#define KEEL_RV_OFFER_SHM 1u /* maps its host's shared-memory region */

/* What rank 0 made of a connection; every refusal is counted by its reason. */
enum keel_rv_verdict {
	KEEL_RV_ACCEPT = 0,
	KEEL_RV_NOT_KEEL, /* no rendezvous magic */
	KEEL_RV_VERSION,  /* another version of the rendezvous */
	KEEL_RV_PROOF,	  /* no or a wrong proof of the key (or a proof where rank 0 has none) */
	KEEL_RV_JOB,	  /* another job id */
	KEEL_RV_WORLD,	  /* another world size */
	KEEL_RV_RANK,	  /* rank 0, or a rank outside the world */
	KEEL_RV_ADDRESS,  /* unknown address family, port 0 or a bad blob (a datagram size no rank
			     can use) */
	KEEL_RV_SEAT,	  /* the rank's seat is held by a live connection */
	KEEL_RV_IDLE,	  /* no whole hello before the connection's deadline */
	KEEL_RV_EVICTED,  /* closed to make room (the oldest unproven connection goes first) */
	KEEL_RV_HUNG_UP,  /* closed by the peer before a whole hello */
	KEEL_RV_VERDICTS,
};

/* One rendezvous. In: self_addr/self_len (the address the caller's UDP socket is bound to),
 * self_blob (NULL: an empty one), timeout_ns. Out: peers[0 .. world) (required), blobs[0 ..
 * world) (may be NULL), and on rank 0 refused[verdict], the connections it turned away. */
struct keel_rendezvous_args {
	const struct sockaddr *self_addr;
	socklen_t self_len;
	const struct keel_rendezvous_blob *self_blob;
	uint64_t timeout_ns;
	struct sockaddr_storage *peers;
	struct keel_rendezvous_blob *blobs;
	uint32_t refused[KEEL_RV_VERDICTS];
};

/* Fill a->peers[0 .. l->world_size) with each rank's UDP address; peers[l->rank] is the address
 * this rank advertised.
 *
 * With l->peers (KEEL_PEERS), the list is parsed and resolved (numeric IPv4, [IPv6], or host
 * names through getaddrinfo, in self_addr's family) and nothing is sent; the entry for this rank
 * must carry self_addr's port.
 * Otherwise rank 0 listens on TCP l->master_addr:l->master_port (SO_REUSEADDR), greets each
 * connection with a fresh nonce and collects one hello (job, world, rank, address, blob) from
 * each other rank; when all are in it sends everyone the whole table and the job id. The other
 * ranks connect, retrying while rank 0 is not up yet (or closed them without an answer). A
 * rank bound to a wildcard address (0.0.0.0 or ::) advertises the local address of its TCP
 * connection to rank 0 (rank 0: of its listening socket) with its UDP port.
 * A world of 1 returns self_addr at once.
 *
 * With l->has_key, each hello proves the key for rank 0's nonce and each reply proves it for
 * the rank's: a stranger can neither take a rank's seat nor hand out a table. Rank 0 never
 * answers a hello it refuses unless it proved the key (nor, without a key, ever), never aborts
 * for one, gives each connection until min(2 s, timeout / 4) to send a whole hello, and holds
 * at most 2 x world + 16 connections (the oldest unproven goes first). A seat is held while
 * its connection is open: a rank that dies before the table went out frees it for its
 * restarted life; a second hello for a held seat is refused (and told so, if proven).
 * Refusals are counted in a->refused and, if any, summed up in one line on stderr at the end
 * (or in the timeout's message).
 * Without l->job_id_fixed, rank 0 picks a random job id and every rank's l->job_id becomes it
 * (and l->job_id_fixed true); every hello must agree with rank 0 on both.
 *
 * Blocks for at most a->timeout_ns (name resolution through DNS excepted); every socket it
 * opened is closed on return. A message is written to err (may be NULL) on failure.
 * Errors: -ETIMEDOUT (rank 0 unreachable, or ranks missing when the time ran out, or rank 0
 * closed this rank's hellos without an answer until then; the message names
 * MASTER_ADDR:MASTER_PORT), KEEL_ERENDEZVOUS (rank 0, having checked this rank's proof,
 * refused its hello: duplicate rank, rank out of range, world or job mismatch; rank 0 failed
 * to prove the key, or has none while this rank has one, or the other way round; a host name
 * did not resolve), -EINVAL (bad KEEL_PEERS entry, this rank's port differs from its entry,
 * unusable self_addr), -ENOMEM, or a socket errno such as -EADDRINUSE (rank 0 could not
 * listen). */
KEEL_MUST_USE int keel_rendezvous_run(struct keel_launch *l, struct keel_rendezvous_args *a,
				      char *err, size_t err_len);

/* keel_rendezvous_run with no blob. */
KEEL_MUST_USE int keel_rendezvous(struct keel_launch *l, const struct sockaddr *self_addr,
				  socklen_t self_len, struct sockaddr_storage *peers,
				  uint64_t timeout_ns, char *err, size_t err_len);

/* keel_rendezvous_run, also exchanging one blob per rank: self_blob (NULL: an empty one) is
 * this rank's, blobs[0 .. world_size) (may be NULL) receives everyone's. With KEEL_PEERS
 * nothing is exchanged and every blob comes back empty (kind 0): the backend needs its own
 * static list. */
KEEL_MUST_USE int keel_rendezvous_blob(struct keel_launch *l, const struct sockaddr *self_addr,
				       socklen_t self_len,
				       const struct keel_rendezvous_blob *self_blob,
				       struct sockaddr_storage *peers,
				       struct keel_rendezvous_blob *blobs, uint64_t timeout_ns,
				       char *err, size_t err_len);

/* "a.b.c.d:port" or "[v6]:port" into buf (at least 64 bytes recommended); returns buf. */
const char *keel_sockaddr_str(const struct sockaddr *addr, char *buf, size_t buf_len);

#endif
