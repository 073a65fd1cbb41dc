/* What the rendezvous' files share: the wire format of version 3, the proof of the job key,
 * and the socket helpers of rank 0 (rendezvous_server.c) and the other ranks
 * (rendezvous_client.c). The wire and proof functions are pure (no sockets, no clock), so
 * that the unit tests and the fuzz target (tests/fuzz/fuzz_rendezvous.c) can drive them;
 * they carry the keel_ prefix only to stay visible to the unit tests through the archive.
 *
 * The exchange, on one TCP connection (big-endian integers):
 *   rank 0 -> rank  greeting: magic u32, version u16, flags u16, nonce_s[32]
 *   rank -> rank 0  hello: magic u32, version u16, flags u16, job u32, world u32, rank u32,
 *                   nonce_c[32], entry (address and blob), mac[32]
 *   rank 0 -> rank  reply: magic u32, version u16, status u16, world u32, detail u32,
 *                   [world entries when status is OK], mac[32]
 * With a key, the hello's mac proves the rank holds it (HMAC-SHA512-256 over nonce_s and the
 * hello) and the reply's mac proves rank 0 does (over nonce_c, nonce_s, the header and a
 * BLAKE2b digest of the entries). Without a key both macs are zero and unchecked. */
#ifndef KEEL_RENDEZVOUS_INT_H
#define KEEL_RENDEZVOUS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "keel/launch.h"
#include "rendezvous.h"

#define RV_MAGIC     0x4b524456u /* "KRDV" */
#define RV_NONCE_LEN 32u
#define RV_MAC_LEN   32u
#define RV_KEY_LEN   32u
/* entry: family u16, port u16, scope_id u32, address 16 bytes, then the rank's blob: kind u8,
 * length u8, offers u16, KEEL_RENDEZVOUS_BLOB_MAX bytes, host u64, mtu u32 (top bit: set by
 * KEEL_MTU). */
#define RV_ADDR_LEN	  24u
#define RV_BLOB_LEN	  (16u + KEEL_RENDEZVOUS_BLOB_MAX)
#define RV_MTU_SET	  0x80000000u
#define RV_MTU_PIECES	  0x40000000u
#define RV_ENTRY_LEN	  (RV_ADDR_LEN + RV_BLOB_LEN)
#define RV_GREETING_LEN	  (8u + RV_NONCE_LEN)
#define RV_HELLO_BODY_LEN (20u + RV_NONCE_LEN + RV_ENTRY_LEN) /* what the hello's mac covers */
#define RV_HELLO_LEN	  (RV_HELLO_BODY_LEN + RV_MAC_LEN)
#define RV_REPLY_HDR_LEN  16u

/* Flags of the greeting and the hello. */
#define RV_FLAG_KEYED	  1u /* the sender holds a job key and proves it */
#define RV_FLAG_JOB_FIXED 2u /* hello: the job id is settled (keel_launch.job_id_fixed) */

_Static_assert(KEEL_WORLD_MAX *RV_ENTRY_LEN + RV_REPLY_HDR_LEN + RV_MAC_LEN < (1u << 20),
	       "a reply fits in 1 MiB");

/* Reply status. Only a rank that proved the key (or, without a key, one holding a seat) is
 * ever answered: anything else is closed without a word. */
enum rv_status {
	RV_ST_OK = 0,	     /* detail: the job id */
	RV_ST_DUPLICATE = 1, /* detail: the rank */
	RV_ST_WORLD = 2,     /* detail: rank 0's world size */
	RV_ST_RANGE = 3,     /* detail: the rank */
	RV_ST_JOB = 4, /* detail: 0 (the job id is never told, not even to a rank with the key) */
	RV_ST_FAMILY = 6,  /* address family unknown, or a bad blob */
	RV_ST_TIMEOUT = 7, /* rank 0 ran out of time; detail: ranks that arrived, rank 0 included */
};

/* A hello, decoded. */
struct keel_rv_hello {
	uint16_t version, flags;
	uint32_t job, world, rank;
	uint8_t nonce[RV_NONCE_LEN];
	uint8_t entry[RV_ENTRY_LEN]; /* undecoded: checked only once the hello is proven */
};

/* What rank 0 asks of a hello. */
struct keel_rv_policy {
	bool keyed;
	const uint8_t *rv_key;	/* RV_KEY_LEN, when keyed */
	const uint8_t *nonce_s; /* the nonce rank 0 sent on this connection */
	bool job_fixed;
	uint32_t job, world;
};

/* ---- rendezvous_wire.c: encoding and checks, pure ----------------------------------------- */

const char *keel_rv_verdict_name(enum keel_rv_verdict v);
/* "5 connections refused (3 bad proof, 2 wrong job)" or "no connection refused" into buf;
 * returns the number refused. */
uint64_t keel_rv_refusals_str(const uint32_t *refused, char *buf, size_t len);

void keel_rv_greeting_encode(uint8_t *out, bool keyed, const uint8_t *nonce_s);
/* KEEL_RV_ACCEPT, KEEL_RV_NOT_KEEL or KEEL_RV_VERSION; *keyed and nonce_s filled on accept. */
enum keel_rv_verdict keel_rv_greeting_parse(const uint8_t *in, bool *keyed, uint8_t *nonce_s);

/* The hello's body; the mac field is left zero (keel_rv_hello_sign fills it). */
void keel_rv_hello_encode(const struct keel_rv_hello *h, uint8_t *out);
/* The first len bytes of a hello (any len): KEEL_RV_ACCEPT while they may still start one,
 * else KEEL_RV_NOT_KEEL or KEEL_RV_VERSION. Lets rank 0 drop a stranger before it is done. */
enum keel_rv_verdict keel_rv_hello_prefix(const uint8_t *in, size_t len);
/* The whole decision about len bytes received as a hello, in the order that tells an attacker
 * nothing: magic, version, proof (with a key), then job, world, rank and address. Fills *h
 * as far as it got; on KEEL_RV_ACCEPT addr and blob hold the rank's entry. */
enum keel_rv_verdict keel_rv_hello_judge(const uint8_t *in, size_t len,
					 const struct keel_rv_policy *p, struct keel_rv_hello *h,
					 struct sockaddr_storage *addr,
					 struct keel_rendezvous_blob *blob);

void keel_rv_entry_put(uint8_t *p, const struct sockaddr_storage *ss,
		       const struct keel_rendezvous_blob *b);
/* Untrusted input: false for an unknown family, port 0 or a blob longer than its room. */
bool keel_rv_entry_get(const uint8_t *p, struct sockaddr_storage *ss,
		       struct keel_rendezvous_blob *b);

void keel_rv_reply_hdr_encode(uint8_t *out, enum rv_status st, uint32_t world, uint32_t detail);

void rv_put16(uint8_t *p, uint16_t v);
void rv_put32(uint8_t *p, uint32_t v);
uint16_t rv_get16(const uint8_t *p);
uint32_t rv_get32(const uint8_t *p);

/* ---- rendezvous_proof.c: the key (libsodium) ---------------------------------------------- */

/* False when keel was built without libsodium: then nothing below may be called with a key. */
bool keel_rv_proof_available(void);
/* len random bytes (libsodium's generator; getrandom() without libsodium). */
void keel_rv_random(uint8_t *buf, size_t len);
/* The key the rendezvous proves, derived from the job key so that the datagram MACs and the
 * rendezvous never use one key for two purposes. */
void keel_rv_key_derive(const uint8_t *job_key, uint8_t *rv_key);
/* The job id a key implies (nonzero), for jobs that name none and meet without a rendezvous. */
uint32_t keel_rv_job_id_from_key(const uint8_t *job_key);
/* Fill the mac field of an encoded hello, for the nonce rank 0 sent. */
void keel_rv_hello_sign(const uint8_t *rv_key, const uint8_t *nonce_s, uint8_t *hello);
bool keel_rv_hello_verify(const uint8_t *rv_key, const uint8_t *nonce_s, const uint8_t *hello);
/* BLAKE2b-256 of a reply's entries (len may be 0). */
void keel_rv_digest(const uint8_t *entries, size_t len, uint8_t *digest);
/* The mac of a reply to the rank that sent nonce_c on the connection where rank 0 sent
 * nonce_s: over both nonces, the header and the digest of its entries. */
void keel_rv_reply_mac(const uint8_t *rv_key, const uint8_t *nonce_c, const uint8_t *nonce_s,
		       const uint8_t *hdr, const uint8_t *digest, uint8_t *mac);
bool keel_rv_reply_verify(const uint8_t *rv_key, const uint8_t *nonce_c, const uint8_t *nonce_s,
			  const uint8_t *hdr, const uint8_t *digest, const uint8_t *mac);
/* Forget a secret (not optimized away). */
void keel_rv_wipe(void *p, size_t len);

/* ---- rendezvous.c: what both sides use ---------------------------------------------------- */

/* Milliseconds poll may wait before deadline_ns, rounded up; 0 once it has passed. */
int rv_ms_left(uint64_t deadline_ns);
/* Send or receive exactly len bytes on a non-blocking socket by deadline_ns.
 * Returns 0, -ETIMEDOUT, -ECONNRESET (peer closed while receiving) or -errno. */
int rv_io_full(int fd, uint8_t *buf, size_t len, bool is_send, uint64_t deadline_ns);
struct addrinfo;
int rv_resolve(const char *host, uint16_t port, int family, int socktype, struct addrinfo **out);
uint16_t rv_addr_port(const struct sockaddr_storage *ss);
/* The address to advertise: self, or for a wildcard self the local address `local` (of the
 * TCP connection to rank 0, or rank 0's listening socket) with self's port. */
int rv_advertise(const struct sockaddr_storage *self, const struct sockaddr_storage *local,
		 struct sockaddr_storage *out, char *err, size_t err_len);

/* One side of the TCP rendezvous; self is this rank's UDP address. */
int rv_run_server(struct keel_launch *l, const struct sockaddr_storage *self,
		  struct keel_rendezvous_args *a, uint64_t deadline_ns, char *err, size_t err_len);
int rv_run_client(struct keel_launch *l, const struct sockaddr_storage *self,
		  struct keel_rendezvous_args *a, uint64_t deadline_ns, char *err, size_t err_len);

#endif
