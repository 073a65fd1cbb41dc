/* Authentication of datagrams: keys, the MAC trailer and the replay window (auth_int.h).
 * libsodium does the cryptography (AES-256-GCM or ChaCha20-Poly1305 as a MAC: no plaintext,
 * the whole datagram as associated data). Nothing here allocates; keys live in the node. */
#include <errno.h>
#include <string.h>

#include "assert_int.h"
#include "auth_int.h"
#include "wire_int.h"

#ifdef KEEL_HAVE_SODIUM
#include <sodium.h>

struct auth_keys {
	crypto_aead_aes256gcm_state gcm;
	uint8_t chacha[crypto_aead_chacha20poly1305_ietf_KEYBYTES];
	uint64_t counter; /* last one sealed */
	uint32_t inc;
	uint16_t self;
	uint8_t alg; /* what this node seals with */
	bool gcm_ok; /* this CPU can check AES-GCM tags */
};
_Static_assert(sizeof(struct auth_keys) <= AUTH_CTX_BYTES, "auth state fits the node's room");
_Static_assert(_Alignof(struct auth_keys) <= 64, "auth state alignment");
_Static_assert(crypto_aead_aes256gcm_ABYTES == AUTH_TAG_BYTES, "tag size");
_Static_assert(crypto_aead_chacha20poly1305_ietf_ABYTES == AUTH_TAG_BYTES, "tag size");
_Static_assert(crypto_aead_aes256gcm_NPUBBYTES == 12, "nonce: rank, incarnation, counter");
_Static_assert(crypto_aead_chacha20poly1305_ietf_NPUBBYTES == 12, "nonce size");
_Static_assert(KEEL_AUTH_KEY_BYTES == crypto_aead_aes256gcm_KEYBYTES, "job key size");
#endif

/* Trailer offsets. */
enum { TR_INC = 0, TR_ALG = 4, TR_COUNTER = 8, TR_TAG = 16 };
_Static_assert(TR_TAG + AUTH_TAG_BYTES == KEEL_AUTH_TRAILER_BYTES, "trailer layout");
_Static_assert(KEEL_AUTH_TRAILER_BYTES % 8 == 0, "trailer keeps datagrams 8-byte sized");
_Static_assert(KEEL_AUTH_REPLAY_WINDOW % 64 == 0, "replay window is whole words");

enum auth_alg auth_pick(enum keel_mac mac)
{
#ifdef KEEL_HAVE_SODIUM
	if (sodium_init() < 0)
		return 0;
	bool aes = crypto_aead_aes256gcm_is_available() == 1;
	switch (mac) {
	case KEEL_MAC_AUTO:
		return aes ? AUTH_AES256GCM : AUTH_CHACHA20POLY1305;
	case KEEL_MAC_AES256GCM:
		return aes ? AUTH_AES256GCM : 0;
	case KEEL_MAC_CHACHA20POLY1305:
		return AUTH_CHACHA20POLY1305;
	}
#else
	(void)mac;
#endif
	return 0;
}

#ifdef KEEL_HAVE_SODIUM
/* Each algorithm gets its own key, derived from the job key and the algorithm's name. */
static void derive(uint8_t out[32], const uint8_t job_key[KEEL_AUTH_KEY_BYTES], const char *label)
{
	int rc = crypto_generichash(out, 32, (const uint8_t *)label, strlen(label), job_key,
				    KEEL_AUTH_KEY_BYTES);
	KEEL_ASSERT(rc == 0);
}

static void nonce_of(uint8_t nonce[12], uint32_t src, uint32_t inc, uint64_t counter)
{
	KEEL_ASSERT_DEBUG(src <= UINT16_MAX && counter <= AUTH_COUNTER_MAX);
	wire_put16(nonce, (uint16_t)src);
	wire_put32(nonce + 2, inc);
	wire_put16(nonce + 6, (uint16_t)counter);
	wire_put32(nonce + 8, (uint32_t)(counter >> 16));
}
#endif

int auth_init(struct auth_ctx *a, const struct keel_config *cfg)
{
	KEEL_ASSERT(a != NULL && cfg != NULL && cfg->auth);
	memset(a, 0, sizeof(*a));
	enum auth_alg alg = auth_pick(cfg->mac);
	if (alg == 0)
		return -ENOTSUP;
#ifdef KEEL_HAVE_SODIUM
	struct auth_keys *k = (struct auth_keys *)a->opaque;
	uint8_t key[32];
	k->gcm_ok = crypto_aead_aes256gcm_is_available() == 1;
	if (k->gcm_ok) {
		derive(key, cfg->auth_key, "keel datagram mac v1: aes256gcm");
		crypto_aead_aes256gcm_beforenm(&k->gcm, key);
	}
	derive(k->chacha, cfg->auth_key, "keel datagram mac v1: chacha20poly1305");
	sodium_memzero(key, sizeof(key));
	k->alg = (uint8_t)alg;
	k->inc = cfg->incarnation;
	k->self = (uint16_t)cfg->rank;
	KEEL_ASSERT(k->alg != AUTH_AES256GCM || k->gcm_ok);
	return 0;
#else
	return -ENOTSUP;
#endif
}

void auth_seal(struct auth_ctx *a, uint8_t *buf, uint32_t len)
{
#ifdef KEEL_HAVE_SODIUM
	struct auth_keys *k = (struct auth_keys *)a->opaque;
	/* 2^48 datagrams is over 300 days at 10 million a second; a nonce is never reused. */
	KEEL_ASSERT(k->alg != 0 && k->counter < AUTH_COUNTER_MAX);
	uint8_t *t = buf + len, nonce[12];
	wire_put32(t + TR_INC, k->inc);
	t[TR_ALG] = k->alg;
	t[TR_ALG + 1] = t[TR_ALG + 2] = t[TR_ALG + 3] = 0;
	wire_put64(t + TR_COUNTER, ++k->counter);
	nonce_of(nonce, k->self, k->inc, k->counter);
	unsigned long long tag_len = 0;
	uint8_t none[1]; /* no ciphertext: the datagram is associated data, sent in the clear */
	int rc = k->alg == AUTH_AES256GCM ? crypto_aead_aes256gcm_encrypt_detached_afternm(
						none, t + TR_TAG, &tag_len, NULL, 0, buf,
						(size_t)len + TR_TAG, NULL, nonce, &k->gcm)
					  : crypto_aead_chacha20poly1305_ietf_encrypt_detached(
						none, t + TR_TAG, &tag_len, NULL, 0, buf,
						(size_t)len + TR_TAG, NULL, nonce, k->chacha);
	KEEL_ASSERT(rc == 0 && tag_len == AUTH_TAG_BYTES);
#else
	(void)a, (void)buf, (void)len;
	KEEL_ASSERT(!"auth_seal without libsodium: auth_init refused this node");
#endif
}

bool auth_open(const struct auth_ctx *a, const uint8_t *buf, size_t len, uint32_t src,
	       uint32_t *inc, uint64_t *counter)
{
	KEEL_ASSERT(a != NULL && buf != NULL && inc != NULL && counter != NULL);
#ifdef KEEL_HAVE_SODIUM
	const struct auth_keys *k = (const struct auth_keys *)a->opaque;
	if (len < KEEL_AUTH_TRAILER_BYTES || src > UINT16_MAX)
		return false;
	const uint8_t *t = buf + len - KEEL_AUTH_TRAILER_BYTES;
	uint32_t i = wire_get32(t + TR_INC);
	uint64_t c = wire_get64(t + TR_COUNTER);
	if (i == 0 || c == 0 || c > AUTH_COUNTER_MAX || t[TR_ALG + 1] != 0 || t[TR_ALG + 2] != 0 ||
	    t[TR_ALG + 3] != 0)
		return false;
	uint8_t nonce[12];
	nonce_of(nonce, src, i, c);
	size_t covered = len - KEEL_AUTH_TRAILER_BYTES + TR_TAG;
	int rc = -1;
	uint8_t none[1] = {0}; /* no ciphertext, no plaintext */
	if (t[TR_ALG] == AUTH_AES256GCM && k->gcm_ok)
		rc = crypto_aead_aes256gcm_decrypt_detached_afternm(none, NULL, none, 0, t + TR_TAG,
								    buf, covered, nonce, &k->gcm);
	else if (t[TR_ALG] == AUTH_CHACHA20POLY1305)
		rc = crypto_aead_chacha20poly1305_ietf_decrypt_detached(
		    none, NULL, none, 0, t + TR_TAG, buf, covered, nonce, k->chacha);
	if (rc != 0)
		return false;
	*inc = i;
	*counter = c;
	return true;
#else
	(void)a, (void)buf, (void)len, (void)src, (void)inc, (void)counter;
	return false;
#endif
}

/* Move the window `by` counters up: bit i (counter top - i) becomes bit i + by. */
static void window_shift(uint64_t *seen, uint64_t by)
{
	const size_t words = KEEL_AUTH_REPLAY_WINDOW / 64;
	if (by >= KEEL_AUTH_REPLAY_WINDOW) {
		memset(seen, 0, words * sizeof(*seen));
		return;
	}
	size_t w = (size_t)(by / 64);
	unsigned b = (unsigned)(by % 64);
	for (size_t i = words; i-- > 0;) {
		uint64_t v = i >= w ? seen[i - w] << b : 0;
		if (b != 0 && i >= w + 1)
			v |= seen[i - w - 1] >> (64 - b);
		seen[i] = v;
	}
}

bool auth_replay_accept(struct auth_peer *p, uint32_t inc, uint64_t counter)
{
	KEEL_ASSERT(p != NULL);
	if (inc < p->inc)
		return false; /* an older life's datagram */
	if (inc > p->inc) {
		/* A new life (authenticated, so not a forgery): its counters start over. */
		memset(p->seen, 0, sizeof(p->seen));
		p->inc = inc;
		p->top = counter;
		p->seen[0] = 1;
		return true;
	}
	if (counter > p->top) {
		window_shift(p->seen, counter - p->top);
		p->top = counter;
		p->seen[0] |= 1;
		return true;
	}
	uint64_t back = p->top - counter;
	if (back >= KEEL_AUTH_REPLAY_WINDOW)
		return false; /* too old to tell: refused, as a replay may be */
	uint64_t bit = 1ull << (back % 64);
	if (p->seen[back / 64] & bit)
		return false;
	p->seen[back / 64] |= bit;
	return true;
}
