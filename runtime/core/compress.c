/* Gradient AllReduces on the wire: f32 partial sums sent as bf16 or f16 with error feedback,
 * and the per-link measurements KEEL_COMPRESS_AUTO decides by.
 *
 * Why every member ends with the same bits whatever each link decided: only the ring
 * compresses (cmp_begin), and in the ring each element of the result is computed by exactly one
 * member, the owner of its chunk, then copied around. The owner rounds its chunk to the
 * encoding when its own link compresses; every copy after that is lossless (a fragment goes
 * encoded only when each of its values survives the round trip bit for bit), so the owner's
 * bits are everyone's. Partial sums in the reduce-scatter may be rounded freely: they feed one
 * owner's computation, which every member then copies.
 *
 * Error feedback: what a member rounded away from an element (a partial sum it sent, or its own
 * chunk of the result) is added to the same element at the next call, so the errors do not add
 * up over a training run. The residuals of the last call are read from the first half of the
 * caller's feedback buffer and this attempt's are written to the second; cmp_finish copies them
 * over once the operation has succeeded, so a restart begins from the same residuals. */
#include <string.h>

#include "assert_int.h"
#include "half_int.h"
#include "keel/limits.h"
#include "node_int.h"

/* One link's traffic: the bytes collectives asked to send to the peer (before compression) in
 * windows of KEEL_COMPRESS_WINDOW_NS, and the link's bandwidth, measured from the wire bytes of
 * one collective at a time. */
struct cmp_peer {
	uint64_t win_start_ns, win_bytes; /* the window filling now */
	uint64_t prev_bytes, prev_len_ns; /* the one before it */
	uint32_t op_id;			  /* the collective being measured */
	bool op_open;
	uint64_t op_first_ns, op_last_ns, op_bytes, op_first_bytes;
	uint64_t bw_bytes_per_s; /* 0 until a collective sent enough to measure it */
};

size_t cmp_bytes(uint32_t world, uint32_t mtu)
{
	KEEL_ASSERT(world >= 1 && world <= KEEL_WORLD_MAX);
	size_t peers = ((size_t)world * sizeof(struct cmp_peer) + 63u) & ~(size_t)63u;
	return peers + 2u * (size_t)mtu; /* the scratch holds one fragment widened to f32 */
}

void cmp_carve(struct keel_node *n, uint8_t *mem)
{
	KEEL_ASSERT(((uintptr_t)mem & 63u) == 0);
	size_t peers = ((size_t)n->world * sizeof(struct cmp_peer) + 63u) & ~(size_t)63u;
	n->cmp_peers = (struct cmp_peer *)(void *)mem;
	n->cmp_scratch = (float *)(void *)(mem + peers);
	for (uint32_t r = 0; r < n->world; r++)
		n->cmp_peers[r].win_start_ns = n->now_ns;
}

/* Start a new window once the current one is KEEL_COMPRESS_WINDOW_NS old: a window that ran
 * long (an idle link) keeps its real length, so idleness lowers the rate. */
static void window_roll(struct cmp_peer *p, uint64_t now_ns)
{
	if (now_ns - p->win_start_ns < KEEL_COMPRESS_WINDOW_NS)
		return;
	p->prev_bytes = p->win_bytes;
	p->prev_len_ns = now_ns - p->win_start_ns;
	p->win_bytes = 0;
	p->win_start_ns = now_ns;
}

/* A finished collective's bytes to this peer over the time they took, when it sent enough for
 * the figure to mean something. A lower sample pulls the estimate down by an eighth of the gap
 * (the link got busier, or the peer slower); a higher one replaces it. */
static void bandwidth_sample(struct cmp_peer *p)
{
	uint64_t span = p->op_last_ns - p->op_first_ns;
	uint64_t bytes = p->op_bytes - p->op_first_bytes; /* what went after the first poll */
	if (!p->op_open || p->op_bytes < KEEL_COMPRESS_SAMPLE_BYTES || span == 0)
		return;
	uint64_t bw = bytes / span * 1000000000ull + bytes % span * 1000000000ull / span;
	if (bw >= p->bw_bytes_per_s)
		p->bw_bytes_per_s = bw;
	else
		p->bw_bytes_per_s -= (p->bw_bytes_per_s - bw) / 8;
}

void cmp_note_sent(struct keel_node *n, uint32_t peer, uint32_t op_id, uint64_t logical,
		   uint64_t wire)
{
	KEEL_ASSERT(peer < n->world && peer != n->self && wire <= logical);
	struct cmp_peer *p = &n->cmp_peers[peer];
	window_roll(p, n->now_ns);
	p->win_bytes += logical;
	if (!p->op_open || p->op_id != op_id) {
		bandwidth_sample(p);
		p->op_open = true;
		p->op_id = op_id;
		p->op_first_ns = n->now_ns;
		p->op_bytes = 0;
	}
	if (p->op_first_ns == n->now_ns)
		p->op_first_bytes = p->op_bytes + wire; /* sent before the clock moved */
	p->op_bytes += wire;
	p->op_last_ns = n->now_ns;
}

/* AUTO: has the link to `peer` carried more than compress_util_pct of its measured bandwidth
 * over the last window and the current one? */
static bool link_busy(struct keel_node *n, uint32_t peer, uint32_t op_id)
{
	struct cmp_peer *p = &n->cmp_peers[peer];
	window_roll(p, n->now_ns);
	if (p->op_open && p->op_id != op_id) { /* the collective before has sent all it will */
		bandwidth_sample(p);
		p->op_open = false;
	}
	uint64_t span = p->prev_len_ns + (n->now_ns - p->win_start_ns);
	uint64_t bytes = p->prev_bytes + p->win_bytes;
	if (p->bw_bytes_per_s == 0 || span == 0)
		return false; /* nothing measured yet */
	/* bytes / span > pct% of bw, in integers: bytes * 1e9 * 100 > pct * bw * span, in
	 * units of KiB and microseconds so nothing overflows below 2^64 */
	uint64_t lhs = (bytes >> 10) * 100000u;
	uint64_t rhs =
	    (uint64_t)n->cfg.compress_util_pct * (p->bw_bytes_per_s >> 10) * (span / 1000u) / 1000u;
	return lhs > rhs;
}

void cmp_begin(struct keel_node *n, struct keel_op *op, uint32_t next_peer)
{
	op->enc_tx = WIRE_ENC_RAW;
	if (!op->grad || op->fb == NULL || op->algo != KEEL_ALGO_RING || op->world < 2)
		return; /* no feedback memory: this member sends f32 (and rounds nothing) */
	KEEL_ASSERT(op->dtype == KEEL_F32 && (op->redop == KEEL_SUM || op->redop == KEEL_AVG));
	KEEL_ASSERT(next_peer < n->world && next_peer != n->self);
	switch (n->cfg.compress) {
	case KEEL_COMPRESS_BF16:
		op->enc_tx = WIRE_ENC_BF16;
		break;
	case KEEL_COMPRESS_F16:
		op->enc_tx = WIRE_ENC_F16;
		break;
	case KEEL_COMPRESS_AUTO:
		/* A peer on this host is reached at memory speed (shared memory, loopback): there
		 * the codec's passes over the data cost more than the bytes they save. */
		if (n->host_of[next_peer] != n->host_of[n->self] && link_busy(n, next_peer, op->id))
			op->enc_tx = WIRE_ENC_BF16;
		break;
	case KEEL_COMPRESS_OFF:
	default:
		break;
	}
}

/* ---- the encodings ----
 * One loop per encoding, without branches per element (bit masks instead), so that gcc
 * vectorizes them: the codec runs over every byte a compressed link carries. */

static inline uint32_t finite_mask(uint32_t bits)
{
	return (uint32_t)0 - (uint32_t)((bits & 0x7f800000u) != 0x7f800000u);
}

/* gcc 12 at -O2 vectorizes only loops with a constant trip count and no possible dependence
 * between iterations (reduce.c says why): the work goes in blocks of CODEC_BLOCK elements
 * through a block of 16-bit codes on the stack (the payload follows a 56-byte header, so it is
 * copied, not cast), and the last partial block goes through the same code. */
#define CODEC_BLOCK 32u

/* A copy of n elements of `size` bytes: a whole block is a copy of constant size, which gcc
 * makes a few vector moves (a variable one would be `rep movs`, slower than the work). */
#define BLOCK_COPY(dst, src, n, size)                                                              \
	do {                                                                                       \
		if ((n) == CODEC_BLOCK)                                                            \
			memcpy((dst), (src), CODEC_BLOCK *(size));                                 \
		else                                                                               \
			memcpy((dst), (src), (n) * (size));                                        \
	} while (0)

/* Per encoding: lossy (partial sums: codes of src + old, new_res = what the rounding lost, 0 for
 * NaN and inf, which go as they are; false when a finite value overflowed the encoding, f16
 * beyond 65504: the fragment must go as f32), exact (values of the result: encoded only if each
 * comes back bit for bit), widen, and round (the owner's chunk: v + old rounded in place, unless
 * it is NaN, inf or beyond the encoding). */
#define DEFINE_CODEC(tag, NARROW, WIDEN)                                                           \
	static bool lossy_##tag(uint8_t *dst, const float *src, const float *old, float *new_res,  \
				size_t cnt)                                                        \
	{                                                                                          \
		uint32_t overflow = 0;                                                             \
		for (size_t b = 0; b < cnt; b += CODEC_BLOCK) {                                    \
			uint16_t h[CODEC_BLOCK];                                                   \
			float v[CODEC_BLOCK], o[CODEC_BLOCK], e[CODEC_BLOCK];                      \
			size_t n = cnt - b < CODEC_BLOCK ? cnt - b : CODEC_BLOCK;                  \
			if (n < CODEC_BLOCK) /* the tail: no garbage in the unused lanes */        \
			{                                                                          \
				memset(h, 0, sizeof(h));                                           \
				memset(v, 0, sizeof(v));                                           \
				memset(o, 0, sizeof(o));                                           \
				memset(e, 0, sizeof(e));                                           \
			}                                                                          \
			BLOCK_COPY(v, src + b, n, 4);                                              \
			BLOCK_COPY(o, old + b, n, 4);                                              \
			for (size_t j = 0; j < CODEC_BLOCK; j++) {                                 \
				float x = v[j] + o[j];                                             \
				uint32_t c = NARROW(x);                                            \
				float w = WIDEN(c);                                                \
				uint32_t fin = finite_mask(f32_to_bits(x));                        \
				overflow |= fin & ~finite_mask(f32_to_bits(w));                    \
				e[j] = f32_from_bits(f32_to_bits(x - w) & fin);                    \
				h[j] = (uint16_t)c;                                                \
			}                                                                          \
			BLOCK_COPY(dst + 2 * b, h, n, 2);                                          \
			BLOCK_COPY(new_res + b, e, n, 4);                                          \
		}                                                                                  \
		return overflow == 0;                                                              \
	}                                                                                          \
	static bool exact_##tag(uint8_t *dst, const float *src, size_t cnt)                        \
	{                                                                                          \
		uint32_t inexact = 0;                                                              \
		for (size_t b = 0; b < cnt; b += CODEC_BLOCK) {                                    \
			uint16_t h[CODEC_BLOCK];                                                   \
			float v[CODEC_BLOCK];                                                      \
			size_t n = cnt - b < CODEC_BLOCK ? cnt - b : CODEC_BLOCK;                  \
			if (n < CODEC_BLOCK) /* the tail: no garbage in the unused lanes */        \
			{                                                                          \
				memset(h, 0, sizeof(h));                                           \
				memset(v, 0, sizeof(v));                                           \
			}                                                                          \
			BLOCK_COPY(v, src + b, n, 4);                                              \
			for (size_t j = 0; j < CODEC_BLOCK; j++) {                                 \
				uint32_t c = NARROW(v[j]);                                         \
				inexact |= f32_to_bits(WIDEN(c)) ^ f32_to_bits(v[j]);              \
				h[j] = (uint16_t)c;                                                \
			}                                                                          \
			BLOCK_COPY(dst + 2 * b, h, n, 2);                                          \
		}                                                                                  \
		return inexact == 0;                                                               \
	}                                                                                          \
	static void widen_##tag(float *dst, const uint8_t *src, size_t cnt)                        \
	{                                                                                          \
		for (size_t b = 0; b < cnt; b += CODEC_BLOCK) {                                    \
			uint16_t h[CODEC_BLOCK];                                                   \
			float v[CODEC_BLOCK];                                                      \
			size_t n = cnt - b < CODEC_BLOCK ? cnt - b : CODEC_BLOCK;                  \
			if (n < CODEC_BLOCK) /* the tail: no garbage in the unused lanes */        \
			{                                                                          \
				memset(h, 0, sizeof(h));                                           \
				memset(v, 0, sizeof(v));                                           \
			}                                                                          \
			BLOCK_COPY(h, src + 2 * b, n, 2);                                          \
			for (size_t j = 0; j < CODEC_BLOCK; j++)                                   \
				v[j] = WIDEN(h[j]);                                                \
			BLOCK_COPY(dst + b, v, n, 4);                                              \
		}                                                                                  \
	}                                                                                          \
	static void round_##tag(float *val, const float *old, float *new_res, size_t cnt)          \
	{                                                                                          \
		for (size_t b = 0; b < cnt; b += CODEC_BLOCK) {                                    \
			float v[CODEC_BLOCK], o[CODEC_BLOCK], e[CODEC_BLOCK];                      \
			size_t n = cnt - b < CODEC_BLOCK ? cnt - b : CODEC_BLOCK;                  \
			if (n < CODEC_BLOCK) /* the tail: no garbage in the unused lanes */        \
			{                                                                          \
				memset(v, 0, sizeof(v));                                           \
				memset(o, 0, sizeof(o));                                           \
				memset(e, 0, sizeof(e));                                           \
			}                                                                          \
			BLOCK_COPY(v, val + b, n, 4);                                              \
			BLOCK_COPY(o, old + b, n, 4);                                              \
			for (size_t j = 0; j < CODEC_BLOCK; j++) {                                 \
				float x = v[j] + o[j];                                             \
				float w = WIDEN(NARROW(x));                                        \
				uint32_t ok =                                                      \
				    finite_mask(f32_to_bits(x)) & finite_mask(f32_to_bits(w));     \
				v[j] =                                                             \
				    f32_from_bits((f32_to_bits(w) & ok) | (f32_to_bits(x) & ~ok)); \
				e[j] = f32_from_bits(f32_to_bits(x - w) & ok);                     \
			}                                                                          \
			BLOCK_COPY(val + b, v, n, 4);                                              \
			BLOCK_COPY(new_res + b, e, n, 4);                                          \
		}                                                                                  \
	}

DEFINE_CODEC(bf16, bf16_narrow32, bf16_widen32)
DEFINE_CODEC(f16, f16_narrow32, f16_widen32)

static bool encode_lossy(enum wire_enc enc, uint8_t *dst, const float *src, const float *old,
			 float *new_res, size_t cnt)
{
	KEEL_ASSERT(enc == WIRE_ENC_BF16 || enc == WIRE_ENC_F16);
	return enc == WIRE_ENC_BF16 ? lossy_bf16(dst, src, old, new_res, cnt)
				    : lossy_f16(dst, src, old, new_res, cnt);
}

static bool encode_exact(enum wire_enc enc, uint8_t *dst, const float *src, size_t cnt)
{
	KEEL_ASSERT(enc == WIRE_ENC_BF16 || enc == WIRE_ENC_F16);
	return enc == WIRE_ENC_BF16 ? exact_bf16(dst, src, cnt) : exact_f16(dst, src, cnt);
}

uint64_t cmp_send(struct keel_node *n, struct keel_op *op, const struct step *s, uint32_t peer,
		  struct wire_header *h, const uint8_t *src, uint64_t len)
{
	KEEL_ASSERT(op->grad && op->enc_tx != WIRE_ENC_RAW && op->algo == KEEL_ALGO_RING);
	KEEL_ASSERT(len > 0 && len % 4 == 0 && ((uintptr_t)src & 3u) == 0);
	uint8_t *dst = rel_send_slot(n, peer);
	KEEL_ASSERT(dst != NULL); /* pump_sends asked rel_can_send */
	enum wire_enc enc = (enum wire_enc)op->enc_tx;
	uint64_t first = (s->send_off + op->send_off) / 4; /* element index in the buffer */
	size_t cnt = (size_t)(len / 4);
	if (cnt > n->payload_max / 2)
		cnt = n->payload_max / 2;
	KEEL_ASSERT(first + cnt <= op->count);
	/* From step world-1 on the ring sends values of the result; before, partial sums. */
	bool result = op->send_step >= op->world - 1;
	const float *v = (const float *)(const void *)src;
	bool ok = result
		      ? encode_exact(enc, dst, v, cnt)
		      : encode_lossy(enc, dst, v, op->fb + first, op->fb + op->count + first, cnt);
	if (ok) {
		h->flags |= (uint16_t)(enc << WIRE_FLAG_ENC_SHIFT);
		rel_send_commit(n, peer, h, (uint32_t)(cnt * 2));
		n->ctr.compress_frags++;
		n->ctr.compress_bytes_saved += cnt * 2;
		op->cmp_saved += cnt * 2;
		return cnt * 4;
	}
	/* As f32: a fragment of the usual size. A partial sum sent whole keeps its old residual
	 * for the next call. */
	uint64_t raw = len < op->frag_bytes ? len : op->frag_bytes;
	memcpy(dst, src, (size_t)raw);
	if (!result)
		memcpy(op->fb + op->count + first, op->fb + first, (size_t)raw);
	rel_send_commit(n, peer, h, (uint32_t)raw);
	return raw;
}

int cmp_logical_len(const struct wire_header *h, uint32_t *len)
{
	uint32_t enc = (h->flags & WIRE_FLAG_ENC_MASK) >> WIRE_FLAG_ENC_SHIFT;
	*len = h->payload_len;
	if (enc == WIRE_ENC_RAW)
		return 0;
	if (enc >= WIRE_ENC_COUNT || h->payload_len % 2 != 0)
		return -EPROTO;
	*len = h->payload_len * 2;
	return 1;
}

const uint8_t *cmp_widen(struct keel_node *n, const struct wire_header *h, const uint8_t *payload)
{
	enum wire_enc enc = (enum wire_enc)((h->flags & WIRE_FLAG_ENC_MASK) >> WIRE_FLAG_ENC_SHIFT);
	size_t cnt = h->payload_len / 2;
	KEEL_ASSERT(enc == WIRE_ENC_BF16 || enc == WIRE_ENC_F16); /* cmp_logical_len said so */
	KEEL_ASSERT(cnt * 4 <= 2u * n->mtu);			  /* the scratch's size */
	if (enc == WIRE_ENC_BF16)
		widen_bf16(n->cmp_scratch, payload, cnt);
	else
		widen_f16(n->cmp_scratch, payload, cnt);
	return (const uint8_t *)n->cmp_scratch;
}

void cmp_round_final(const struct keel_op *op, uint8_t *dst, uint64_t byte_off, size_t cnt)
{
	if (!op->grad || op->enc_tx == WIRE_ENC_RAW)
		return;
	KEEL_ASSERT(byte_off % 4 == 0 && byte_off / 4 + cnt <= op->count);
	float *v = (float *)(void *)dst;
	const float *old = op->fb + byte_off / 4;
	float *new_res = op->fb + op->count + byte_off / 4;
	if (op->enc_tx == WIRE_ENC_BF16)
		round_bf16(v, old, new_res, cnt);
	else
		round_f16(v, old, new_res, cnt);
}

void cmp_finish(const struct keel_op *op, int status)
{
	if (status != 0 || !op->grad || op->enc_tx == WIRE_ENC_RAW || op->count == 0)
		return;
	memcpy(op->fb, op->fb + op->count, (size_t)op->count * sizeof(float));
}
