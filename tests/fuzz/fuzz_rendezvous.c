/* libFuzzer entry point over what rank 0's rendezvous reads from strangers (rendezvous_wire.c):
 * any bytes, as a hello, are judged without a crash and accepted only with a sound rank, address
 * and blob; the same bytes re-proven with the key (as fuzz_ckpt re-stamps its CRC) reach the
 * checks behind the proof. The bytes are also read as a greeting and as table entries, which a
 * rank reads from whatever answers on MASTER_PORT, and every entry that decodes encodes back to
 * itself. Built and run by `make fuzz` (mk/fuzz.mk); `make test` runs a smoke of it. */
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rendezvous_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define WORLD 4u
#define JOB   0x0badcafeu

static void check_verdict(enum keel_rv_verdict v, const struct keel_rv_hello *h,
			  const struct sockaddr_storage *addr, const struct keel_rendezvous_blob *b)
{
	if (v >= KEEL_RV_SEAT)
		__builtin_trap(); /* the judge never decides what needs the server's state */
	if (v != KEEL_RV_ACCEPT)
		return;
	if (h->rank == 0 || h->rank >= WORLD || h->world != WORLD || h->job != JOB)
		__builtin_trap();
	if ((addr->ss_family != AF_INET && addr->ss_family != AF_INET6) ||
	    b->len > KEEL_RENDEZVOUS_BLOB_MAX)
		__builtin_trap();
}

static void judge_both(const uint8_t *in, size_t len, const uint8_t *rv_key, const uint8_t *nonce_s)
{
	struct keel_rv_policy open = {.job_fixed = true, .job = JOB, .world = WORLD};
	struct keel_rv_policy keyed = open;
	struct keel_rv_hello h;
	struct sockaddr_storage addr;
	struct keel_rendezvous_blob blob;
	enum keel_rv_verdict v;

	v = keel_rv_hello_judge(in, len, &open, &h, &addr, &blob);
	check_verdict(v, &h, &addr, &blob);
	if (!keel_rv_proof_available())
		return;
	keyed.keyed = true;
	keyed.rv_key = rv_key;
	keyed.nonce_s = nonce_s;
	v = keel_rv_hello_judge(in, len, &keyed, &h, &addr, &blob);
	check_verdict(v, &h, &addr, &blob);
}

/* Entries that decode must encode back to the same decoding. */
static void entries(const uint8_t *data, size_t size)
{
	for (size_t off = 0; off + RV_ENTRY_LEN <= size; off += RV_ENTRY_LEN) {
		struct sockaddr_storage a, a2;
		struct keel_rendezvous_blob b, b2;
		uint8_t again[RV_ENTRY_LEN];

		if (!keel_rv_entry_get(data + off, &a, &b))
			continue;
		keel_rv_entry_put(again, &a, &b);
		if (!keel_rv_entry_get(again, &a2, &b2) || memcmp(&a, &a2, sizeof(a)) != 0 ||
		    memcmp(&b, &b2, sizeof(b)) != 0)
			__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t job_key[32] = {1, 2, 3, 4, 5, 6, 7, 8};
	uint8_t rv_key[RV_KEY_LEN], nonce_s[RV_NONCE_LEN], hello[RV_HELLO_LEN];
	uint32_t refused[KEEL_RV_VERDICTS];
	char line[256];
	bool keyed;

	memset(nonce_s, 0x6e, sizeof(nonce_s));
	memset(rv_key, 0, sizeof(rv_key));
	if (keel_rv_proof_available())
		keel_rv_key_derive(job_key, rv_key);
	(void)keel_rv_hello_prefix(data, size);
	judge_both(data, size, rv_key, nonce_s);
	/* Re-proven: the fields behind the proof get fuzzed too. */
	if (size == RV_HELLO_LEN && keel_rv_proof_available()) {
		memcpy(hello, data, sizeof(hello));
		keel_rv_hello_sign(rv_key, nonce_s, hello);
		judge_both(hello, sizeof(hello), rv_key, nonce_s);
	}
	if (size >= RV_GREETING_LEN)
		(void)keel_rv_greeting_parse(data, &keyed, nonce_s);
	entries(data, size);
	memset(refused, 0, sizeof(refused));
	for (size_t i = 0; i < size && i < KEEL_RV_VERDICTS; i++)
		refused[i] = (uint32_t)data[i] << (data[i] & 24);
	(void)keel_rv_refusals_str(refused, line, sizeof(line));
	return 0;
}
