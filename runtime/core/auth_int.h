/* Authentication of datagrams (keel_config.auth): a MAC trailer sealed onto every datagram as
 * it leaves, checked before anything else of it is believed, and a per-peer replay window.
 *
 * Trailer (KEEL_AUTH_TRAILER_BYTES after the payload, little-endian):
 *   u32 incarnation of the sender, u8 algorithm (enum auth_alg), 3 zero bytes,
 *   u64 counter (per sender life, < 2^48, counts every datagram it sends), 16-byte tag.
 * The tag covers header, payload and the first 16 bytes of the trailer. The nonce is
 * (sender rank u16, incarnation u32, counter u48): unique as long as every life of a rank has
 * a new incarnation, which keel already requires of a restarted process. The key of each
 * algorithm is derived from the job key (BLAKE2b, keyed), so the two never share a key. */
#ifndef KEEL_AUTH_INT_H
#define KEEL_AUTH_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/limits.h"
#include "keel/node.h"

enum auth_alg {
	AUTH_AES256GCM = 1,
	AUTH_CHACHA20POLY1305 = 2,
};

#define AUTH_TAG_BYTES	 16u
#define AUTH_COUNTER_MAX ((1ull << 48) - 1)
/* Room for libsodium's AES-GCM state (512 bytes, 16-aligned), the ChaCha key and ours. */
#define AUTH_CTX_BYTES 640u

/* The sealing and opening keys of one node; lives inside struct keel_node. */
struct auth_ctx {
	_Alignas(64) uint8_t opaque[AUTH_CTX_BYTES];
};

/* What one peer has been seen to send: its life and the counters received near the highest. */
struct auth_peer {
	uint32_t inc;
	uint32_t pad;
	uint64_t top; /* highest counter accepted in life `inc` (0: none yet) */
	uint64_t seen[KEEL_AUTH_REPLAY_WINDOW / 64]; /* bit i: counter top - i was accepted */
};

/* Set up keys from cfg (auth, mac, auth_key, rank, incarnation). Returns 0, or -ENOTSUP when
 * keel was built without libsodium or cfg->mac names AES-256-GCM on a CPU without AES-NI. */
int auth_init(struct auth_ctx *a, const struct keel_config *cfg);
/* The algorithm a node with `mac` uses on this CPU (0 if none). */
enum auth_alg auth_pick(enum keel_mac mac);

/* Append the trailer to the datagram buf[0..len) (header and payload); buf must hold
 * len + KEEL_AUTH_TRAILER_BYTES. Each call takes the next counter. */
void auth_seal(struct auth_ctx *a, uint8_t *buf, uint32_t len);

/* Check the trailer of buf[0..len) (whole datagram, trailer included) sent by rank `src`.
 * On success *inc and *counter are the sender's claims, now authenticated. */
bool auth_open(const struct auth_ctx *a, const uint8_t *buf, size_t len, uint32_t src,
	       uint32_t *inc, uint64_t *counter);

/* Replay window: true (and the datagram recorded) if (inc, counter) was not accepted before
 * and is not from an older life or too far behind the newest. */
bool auth_replay_accept(struct auth_peer *p, uint32_t inc, uint64_t counter);

#endif
