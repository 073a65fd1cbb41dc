/* The rendezvous' messages (rendezvous_int.h): encoding, decoding and rank 0's judgement of
 * a hello. Pure: no sockets, no clock, no allocation; every byte from the network is checked
 * before use. The fuzz target drives these directly. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "assert_int.h"
#include "keel/limits.h"
#include "rendezvous_int.h"

void rv_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

void rv_put32(uint8_t *p, uint32_t v)
{
	rv_put16(p, (uint16_t)(v >> 16));
	rv_put16(p + 2, (uint16_t)v);
}

uint16_t rv_get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

uint32_t rv_get32(const uint8_t *p)
{
	return ((uint32_t)rv_get16(p) << 16) | rv_get16(p + 2);
}

static const char *const verdict_names[KEEL_RV_VERDICTS] = {
    [KEEL_RV_ACCEPT] = "accepted",	  [KEEL_RV_NOT_KEEL] = "not keel",
    [KEEL_RV_VERSION] = "wrong version",  [KEEL_RV_PROOF] = "bad proof",
    [KEEL_RV_JOB] = "wrong job",	  [KEEL_RV_WORLD] = "wrong world size",
    [KEEL_RV_RANK] = "rank out of range", [KEEL_RV_ADDRESS] = "bad address or blob",
    [KEEL_RV_SEAT] = "seat taken",	  [KEEL_RV_IDLE] = "idle",
    [KEEL_RV_EVICTED] = "evicted",	  [KEEL_RV_HUNG_UP] = "hung up",
};

const char *keel_rv_verdict_name(enum keel_rv_verdict v)
{
	return (unsigned)v < KEEL_RV_VERDICTS ? verdict_names[v] : "?";
}

uint64_t keel_rv_refusals_str(const uint32_t *refused, char *buf, size_t len)
{
	uint64_t total = 0;
	size_t used;

	KEEL_ASSERT(buf != NULL && len > 0);
	for (unsigned v = 1; v < KEEL_RV_VERDICTS; v++)
		total += refused[v];
	if (total == 0) {
		snprintf(buf, len, "no connection refused");
		return 0;
	}
	used = (size_t)snprintf(buf, len, "%llu connection%s refused (", (unsigned long long)total,
				total == 1 ? "" : "s");
	for (unsigned v = 1; v < KEEL_RV_VERDICTS && used < len; v++) {
		if (refused[v] == 0)
			continue;
		used += (size_t)snprintf(buf + used, len - used, "%s%u %s",
					 buf[used - 1] == '(' ? "" : ", ", refused[v],
					 verdict_names[v]);
	}
	if (used < len)
		snprintf(buf + used, len - used, ")");
	return total;
}

void keel_rv_greeting_encode(uint8_t *out, bool keyed, const uint8_t *nonce_s)
{
	rv_put32(out, RV_MAGIC);
	rv_put16(out + 4, KEEL_RENDEZVOUS_VERSION);
	rv_put16(out + 6, keyed ? RV_FLAG_KEYED : 0);
	memcpy(out + 8, nonce_s, RV_NONCE_LEN);
}

enum keel_rv_verdict keel_rv_greeting_parse(const uint8_t *in, bool *keyed, uint8_t *nonce_s)
{
	if (rv_get32(in) != RV_MAGIC)
		return KEEL_RV_NOT_KEEL;
	if (rv_get16(in + 4) != KEEL_RENDEZVOUS_VERSION)
		return KEEL_RV_VERSION;
	*keyed = (rv_get16(in + 6) & RV_FLAG_KEYED) != 0;
	memcpy(nonce_s, in + 8, RV_NONCE_LEN);
	return KEEL_RV_ACCEPT;
}

static void blob_put(uint8_t *p, const struct keel_rendezvous_blob *b)
{
	memset(p, 0, RV_BLOB_LEN);
	if (b == NULL)
		return;
	KEEL_ASSERT(b->len <= KEEL_RENDEZVOUS_BLOB_MAX);
	p[0] = b->kind;
	p[1] = b->len;
	rv_put16(p + 2, b->offers);
	memcpy(p + 4, b->data, b->len);
	rv_put32(p + 4 + KEEL_RENDEZVOUS_BLOB_MAX, (uint32_t)(b->host >> 32));
	rv_put32(p + 8 + KEEL_RENDEZVOUS_BLOB_MAX, (uint32_t)b->host);
	/* a test writes sizes above KEEL_MTU_MAX, refused on receipt (one sets RV_MTU_PIECES) */
	KEEL_ASSERT(b->mtu < RV_MTU_SET);
	rv_put32(p + 12 + KEEL_RENDEZVOUS_BLOB_MAX,
		 b->mtu | (b->mtu_set ? RV_MTU_SET : 0) | (b->pieces ? RV_MTU_PIECES : 0));
}

/* Untrusted input: false for a length beyond the blob, or a datagram size no rank can use
 * (0: none announced). */
static bool blob_get(const uint8_t *p, struct keel_rendezvous_blob *b)
{
	memset(b, 0, sizeof(*b));
	if (p[1] > KEEL_RENDEZVOUS_BLOB_MAX)
		return false;
	b->kind = p[0];
	b->len = p[1];
	b->offers = rv_get16(p + 2);
	memcpy(b->data, p + 4, b->len);
	b->host = (uint64_t)rv_get32(p + 4 + KEEL_RENDEZVOUS_BLOB_MAX) << 32 |
		  rv_get32(p + 8 + KEEL_RENDEZVOUS_BLOB_MAX);
	uint32_t mtu = rv_get32(p + 12 + KEEL_RENDEZVOUS_BLOB_MAX);
	b->mtu = mtu & ~(RV_MTU_SET | RV_MTU_PIECES);
	b->mtu_set = (mtu & RV_MTU_SET) != 0;
	b->pieces = (mtu & RV_MTU_PIECES) != 0;
	return b->mtu == 0 || (b->mtu >= KEEL_MTU_MIN && b->mtu <= KEEL_MTU_MAX);
}

void keel_rv_entry_put(uint8_t *p, const struct sockaddr_storage *ss,
		       const struct keel_rendezvous_blob *b)
{
	memset(p, 0, RV_ENTRY_LEN);
	blob_put(p + RV_ADDR_LEN, b);
	rv_put16(p, ss->ss_family == AF_INET6 ? 6 : 4);
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;

		rv_put16(p + 2, ntohs(a->sin_port));
		memcpy(p + 8, &a->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;

		KEEL_ASSERT(ss->ss_family == AF_INET6);
		rv_put16(p + 2, ntohs(a->sin6_port));
		rv_put32(p + 4, a->sin6_scope_id);
		memcpy(p + 8, &a->sin6_addr, 16);
	}
}

bool keel_rv_entry_get(const uint8_t *p, struct sockaddr_storage *ss,
		       struct keel_rendezvous_blob *b)
{
	uint16_t family = rv_get16(p), port = rv_get16(p + 2);

	memset(ss, 0, sizeof(*ss));
	if (port == 0 || !blob_get(p + RV_ADDR_LEN, b))
		return false;
	if (family == 4) {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;

		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		memcpy(&a->sin_addr, p + 8, 4);
		return true;
	}
	if (family == 6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		a->sin6_scope_id = rv_get32(p + 4);
		memcpy(&a->sin6_addr, p + 8, 16);
		return true;
	}
	return false;
}

void keel_rv_hello_encode(const struct keel_rv_hello *h, uint8_t *out)
{
	memset(out, 0, RV_HELLO_LEN);
	rv_put32(out, RV_MAGIC);
	rv_put16(out + 4, h->version);
	rv_put16(out + 6, h->flags);
	rv_put32(out + 8, h->job);
	rv_put32(out + 12, h->world);
	rv_put32(out + 16, h->rank);
	memcpy(out + 20, h->nonce, RV_NONCE_LEN);
	memcpy(out + 20 + RV_NONCE_LEN, h->entry, RV_ENTRY_LEN);
}

static void hello_decode(const uint8_t *in, struct keel_rv_hello *h)
{
	h->version = rv_get16(in + 4);
	h->flags = rv_get16(in + 6);
	h->job = rv_get32(in + 8);
	h->world = rv_get32(in + 12);
	h->rank = rv_get32(in + 16);
	memcpy(h->nonce, in + 20, RV_NONCE_LEN);
	memcpy(h->entry, in + 20 + RV_NONCE_LEN, RV_ENTRY_LEN);
}

enum keel_rv_verdict keel_rv_hello_prefix(const uint8_t *in, size_t len)
{
	if (len >= 4 && rv_get32(in) != RV_MAGIC)
		return KEEL_RV_NOT_KEEL;
	if (len >= 6 && rv_get16(in + 4) != KEEL_RENDEZVOUS_VERSION)
		return KEEL_RV_VERSION;
	return KEEL_RV_ACCEPT;
}

enum keel_rv_verdict keel_rv_hello_judge(const uint8_t *in, size_t len,
					 const struct keel_rv_policy *p, struct keel_rv_hello *h,
					 struct sockaddr_storage *addr,
					 struct keel_rendezvous_blob *blob)
{
	enum keel_rv_verdict v = keel_rv_hello_prefix(in, len);
	bool keyed;

	memset(h, 0, sizeof(*h));
	if (v != KEEL_RV_ACCEPT)
		return v;
	if (len != RV_HELLO_LEN)
		return KEEL_RV_NOT_KEEL; /* a keel hello has exactly this length */
	hello_decode(in, h);
	/* The proof comes before any field an attacker could learn something from. */
	keyed = (h->flags & RV_FLAG_KEYED) != 0;
	if (keyed != p->keyed || (keyed && !keel_rv_hello_verify(p->rv_key, p->nonce_s, in)))
		return KEEL_RV_PROOF;
	if (((h->flags & RV_FLAG_JOB_FIXED) != 0) != p->job_fixed || h->job != p->job)
		return KEEL_RV_JOB;
	if (h->world != p->world)
		return KEEL_RV_WORLD;
	if (h->rank == 0 || h->rank >= p->world)
		return KEEL_RV_RANK;
	if (!keel_rv_entry_get(h->entry, addr, blob))
		return KEEL_RV_ADDRESS;
	return KEEL_RV_ACCEPT;
}

void keel_rv_reply_hdr_encode(uint8_t *out, enum rv_status st, uint32_t world, uint32_t detail)
{
	rv_put32(out, RV_MAGIC);
	rv_put16(out + 4, KEEL_RENDEZVOUS_VERSION);
	rv_put16(out + 6, (uint16_t)st);
	rv_put32(out + 8, world);
	rv_put32(out + 12, detail);
}
