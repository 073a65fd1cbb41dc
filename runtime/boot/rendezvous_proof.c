/* Proofs of the job key in the rendezvous (rendezvous_int.h), with libsodium: HMAC-SHA512-256
 * (crypto_auth) under a key derived from the job key with keyed BLAKE2b, checked in constant
 * time. Each proof starts with a label of its own, so that a hello's proof can never pass for
 * a reply's. Built without libsodium, only the random bytes work: the start-up library then
 * refuses a key before anything here could need one (keel_launch_from_env). */
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#ifdef KEEL_HAVE_SODIUM
#include <sodium.h>
#endif

#include "assert_int.h"
#include "rendezvous_int.h"

#define LABEL_RV_KEY "keel rendezvous v3 key"
#define LABEL_JOB_ID "keel job id from key v1"
#define LABEL_HELLO  "keel rendezvous v3 hello"
#define LABEL_REPLY  "keel rendezvous v3 reply"

bool keel_rv_proof_available(void)
{
#ifdef KEEL_HAVE_SODIUM
	return true;
#else
	return false;
#endif
}

void keel_rv_wipe(void *p, size_t len)
{
	explicit_bzero(p, len);
}

#ifdef KEEL_HAVE_SODIUM

static void sodium_ready(void)
{
	/* 0: done now, 1: done before (cheap, thread-safe); -1: no random source at all, where
	 * libsodium's own generator would abort anyway. */
	int rc = sodium_init();

	KEEL_ASSERT(rc >= 0);
}

void keel_rv_random(uint8_t *buf, size_t len)
{
	sodium_ready();
	randombytes_buf(buf, len);
}

void keel_rv_key_derive(const uint8_t *job_key, uint8_t *rv_key)
{
	sodium_ready();
	crypto_generichash(rv_key, RV_KEY_LEN, (const uint8_t *)LABEL_RV_KEY,
			   sizeof(LABEL_RV_KEY) - 1, job_key, KEEL_AUTH_KEY_BYTES);
}

uint32_t keel_rv_job_id_from_key(const uint8_t *job_key)
{
	uint8_t h[16];
	uint32_t id;

	sodium_ready();
	crypto_generichash(h, sizeof(h), (const uint8_t *)LABEL_JOB_ID, sizeof(LABEL_JOB_ID) - 1,
			   job_key, KEEL_AUTH_KEY_BYTES);
	id = rv_get32(h);
	return id != 0 ? id : 1;
}

static void hello_mac(const uint8_t *rv_key, const uint8_t *nonce_s, const uint8_t *hello,
		      uint8_t *mac)
{
	crypto_auth_hmacsha512256_state st;

	crypto_auth_hmacsha512256_init(&st, rv_key, RV_KEY_LEN);
	crypto_auth_hmacsha512256_update(&st, (const uint8_t *)LABEL_HELLO, sizeof(LABEL_HELLO));
	crypto_auth_hmacsha512256_update(&st, nonce_s, RV_NONCE_LEN);
	crypto_auth_hmacsha512256_update(&st, hello, RV_HELLO_BODY_LEN);
	crypto_auth_hmacsha512256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

void keel_rv_hello_sign(const uint8_t *rv_key, const uint8_t *nonce_s, uint8_t *hello)
{
	hello_mac(rv_key, nonce_s, hello, hello + RV_HELLO_BODY_LEN);
}

bool keel_rv_hello_verify(const uint8_t *rv_key, const uint8_t *nonce_s, const uint8_t *hello)
{
	uint8_t mac[RV_MAC_LEN];

	hello_mac(rv_key, nonce_s, hello, mac);
	return crypto_verify_32(mac, hello + RV_HELLO_BODY_LEN) == 0;
}

void keel_rv_digest(const uint8_t *entries, size_t len, uint8_t *digest)
{
	crypto_generichash(digest, RV_MAC_LEN, entries, len, NULL, 0);
}

void keel_rv_reply_mac(const uint8_t *rv_key, const uint8_t *nonce_c, const uint8_t *nonce_s,
		       const uint8_t *hdr, const uint8_t *digest, uint8_t *mac)
{
	crypto_auth_hmacsha512256_state st;

	crypto_auth_hmacsha512256_init(&st, rv_key, RV_KEY_LEN);
	crypto_auth_hmacsha512256_update(&st, (const uint8_t *)LABEL_REPLY, sizeof(LABEL_REPLY));
	crypto_auth_hmacsha512256_update(&st, nonce_c, RV_NONCE_LEN);
	crypto_auth_hmacsha512256_update(&st, nonce_s, RV_NONCE_LEN);
	crypto_auth_hmacsha512256_update(&st, hdr, RV_REPLY_HDR_LEN);
	crypto_auth_hmacsha512256_update(&st, digest, RV_MAC_LEN);
	crypto_auth_hmacsha512256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

bool keel_rv_reply_verify(const uint8_t *rv_key, const uint8_t *nonce_c, const uint8_t *nonce_s,
			  const uint8_t *hdr, const uint8_t *digest, const uint8_t *mac)
{
	uint8_t want[RV_MAC_LEN];

	keel_rv_reply_mac(rv_key, nonce_c, nonce_s, hdr, digest, want);
	return crypto_verify_32(want, mac) == 0;
}

#else /* !KEEL_HAVE_SODIUM: nothing keyed can happen (keel_launch_from_env refuses a key) */

void keel_rv_random(uint8_t *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = getrandom(buf + done, len - done, 0);

		if (n > 0) {
			done += (size_t)n;
		} else if (n < 0 && errno != EINTR) {
			/* No random source: only unkeyed nonces and job ids come here, which
			 * need to differ between jobs, not to be secret. */
			uint64_t x =
			    (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();

			for (; done < len; done++, x = x * 6364136223846793005ull + 1)
				buf[done] = (uint8_t)(x >> 56);
		}
	}
}

void keel_rv_key_derive(const uint8_t *job_key, uint8_t *rv_key)
{
	(void)job_key;
	(void)rv_key;
	KEEL_ASSERT(!"keel_rv_key_derive without libsodium");
}

uint32_t keel_rv_job_id_from_key(const uint8_t *job_key)
{
	(void)job_key;
	KEEL_ASSERT(!"keel_rv_job_id_from_key without libsodium");
	return 0;
}

void keel_rv_hello_sign(const uint8_t *rv_key, const uint8_t *nonce_s, uint8_t *hello)
{
	(void)rv_key;
	(void)nonce_s;
	(void)hello;
	KEEL_ASSERT(!"keel_rv_hello_sign without libsodium");
}

bool keel_rv_hello_verify(const uint8_t *rv_key, const uint8_t *nonce_s, const uint8_t *hello)
{
	(void)rv_key;
	(void)nonce_s;
	(void)hello;
	return false; /* nothing can be proven here */
}

void keel_rv_digest(const uint8_t *entries, size_t len, uint8_t *digest)
{
	(void)entries;
	(void)len;
	memset(digest, 0, RV_MAC_LEN);
}

void keel_rv_reply_mac(const uint8_t *rv_key, const uint8_t *nonce_c, const uint8_t *nonce_s,
		       const uint8_t *hdr, const uint8_t *digest, uint8_t *mac)
{
	(void)rv_key;
	(void)nonce_c;
	(void)nonce_s;
	(void)hdr;
	(void)digest;
	(void)mac;
	KEEL_ASSERT(!"keel_rv_reply_mac without libsodium");
}

bool keel_rv_reply_verify(const uint8_t *rv_key, const uint8_t *nonce_c, const uint8_t *nonce_s,
			  const uint8_t *hdr, const uint8_t *digest, const uint8_t *mac)
{
	(void)rv_key;
	(void)nonce_c;
	(void)nonce_s;
	(void)hdr;
	(void)digest;
	(void)mac;
	return false;
}

#endif
