/* keel wire format: explicit little-endian (de)serialisation of the 56-byte header and the
 * heartbeat payload, and validation of every received datagram.
 * Never reads outside the caller's buffer and never asserts on received bytes. */
#include <stddef.h>
#include <stdint.h>

#include "assert_int.h"
#include "keel/limits.h"
#include "wire_int.h"

/* Field offsets in the header. Written out here, not taken from struct wire_header, so the
 * layout on the wire never depends on what a compiler does with padding. */
enum {
	OFF_MAGIC = 0,
	OFF_VERSION = 4,
	OFF_TYPE = 5,
	OFF_FLAGS = 6,
	OFF_JOB_ID = 8,
	OFF_EPOCH = 12,
	OFF_SRC = 16,
	OFF_DST = 18,
	OFF_SEQ = 20,
	OFF_ACK = 24,
	OFF_SACK = 28,
	OFF_OP_ID = 32,
	OFF_STEP = 36,
	OFF_WND = 38,
	OFF_OFFSET = 40,
	OFF_TOTAL_LEN = 44,
	OFF_PAYLOAD_LEN = 48,
	OFF_CRC = 52,
};

/* Each field starts where the previous one ends and the last one ends at the header size. */
_Static_assert(OFF_VERSION == OFF_MAGIC + 4, "wire layout");
_Static_assert(OFF_TYPE == OFF_VERSION + 1, "wire layout");
_Static_assert(OFF_FLAGS == OFF_TYPE + 1, "wire layout");
_Static_assert(OFF_JOB_ID == OFF_FLAGS + 2, "wire layout");
_Static_assert(OFF_EPOCH == OFF_JOB_ID + 4, "wire layout");
_Static_assert(OFF_SRC == OFF_EPOCH + 4, "wire layout");
_Static_assert(OFF_DST == OFF_SRC + 2, "wire layout");
_Static_assert(OFF_SEQ == OFF_DST + 2, "wire layout");
_Static_assert(OFF_ACK == OFF_SEQ + 4, "wire layout");
_Static_assert(OFF_SACK == OFF_ACK + 4, "wire layout");
_Static_assert(OFF_OP_ID == OFF_SACK + 4, "wire layout");
_Static_assert(OFF_STEP == OFF_OP_ID + 4, "wire layout");
_Static_assert(OFF_WND == OFF_STEP + 2, "wire layout");
_Static_assert(OFF_OFFSET == OFF_WND + 2, "wire layout");
_Static_assert(OFF_TOTAL_LEN == OFF_OFFSET + 4, "wire layout");
_Static_assert(OFF_PAYLOAD_LEN == OFF_TOTAL_LEN + 4, "wire layout");
_Static_assert(OFF_CRC == OFF_PAYLOAD_LEN + 4, "wire layout");
_Static_assert(OFF_CRC + 4 == WIRE_HEADER_SIZE, "wire layout");
_Static_assert(WIRE_HEADER_SIZE % 8 == 0, "payload starts 8-byte aligned after the header");
_Static_assert(WIRE_MAGIC ==
		   ((uint32_t)'K' | (uint32_t)'E' << 8 | (uint32_t)'E' << 16 | (uint32_t)'L' << 24),
	       "magic is \"KEEL\" on the wire");
_Static_assert(WIRE_VERSION <= UINT8_MAX, "version fits its byte");
_Static_assert(WIRE_TYPE_MAX <= UINT8_MAX, "type fits its byte");

/* Heartbeat payload offsets. */
enum {
	HB_OFF_SEND_NS = 0,
	HB_OFF_ECHO_NS = 8,
	HB_OFF_ECHO_HELD_NS = 16,
	HB_OFF_INCARNATION = 24,
	HB_OFF_FLAGS = 28,
	HB_OFF_OPS_STARTED = 32,
};
_Static_assert(HB_OFF_OPS_STARTED + 4 == WIRE_HEARTBEAT_SIZE, "heartbeat layout");
_Static_assert(KEEL_MTU_MIN >= WIRE_HEADER_SIZE + WIRE_HEARTBEAT_SIZE, "a heartbeat fits any MTU");
_Static_assert(KEEL_MTU_MIN >= WIRE_HEADER_SIZE + WIRE_VIEW_MIN, "a VIEW message fits any MTU");

/* The longest payload keel ever encodes: every datagram buffer holds at most KEEL_MTU_MAX. */
#define PAYLOAD_MAX (KEEL_MTU_MAX - WIRE_HEADER_SIZE)

void wire_put16(uint8_t *p, uint16_t v)
{
	KEEL_ASSERT_DEBUG(p != NULL);
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	KEEL_ASSERT_DEBUG(wire_get16(p) == v);
}

void wire_put32(uint8_t *p, uint32_t v)
{
	KEEL_ASSERT_DEBUG(p != NULL);
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
	KEEL_ASSERT_DEBUG(wire_get32(p) == v);
}

void wire_put64(uint8_t *p, uint64_t v)
{
	KEEL_ASSERT_DEBUG(p != NULL);
	wire_put32(p, (uint32_t)v);
	wire_put32(p + 4, (uint32_t)(v >> 32));
	KEEL_ASSERT_DEBUG(wire_get64(p) == v);
}

/* The getters read received bytes: they check the pointer, never what it points at. */
uint16_t wire_get16(const uint8_t *p)
{
	KEEL_ASSERT_DEBUG(p != NULL);
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

uint32_t wire_get32(const uint8_t *p)
{
	KEEL_ASSERT_DEBUG(p != NULL);
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t wire_get64(const uint8_t *p)
{
	KEEL_ASSERT_DEBUG(p != NULL);
	return (uint64_t)wire_get32(p) | (uint64_t)wire_get32(p + 4) << 32;
}

/* CRC of the header as it stands in buf, its crc field taken as zero, then the payload. */
static uint32_t datagram_crc(const uint8_t *buf, const uint8_t *payload, uint32_t payload_len)
{
	KEEL_ASSERT_DEBUG(buf != NULL);
	uint32_t crc = crc32c_then_zeros(0, buf, OFF_CRC, WIRE_HEADER_SIZE - OFF_CRC);
	return crc32c(crc, payload, payload_len);
}

void wire_encode(uint8_t *buf, const struct wire_header *h)
{
	KEEL_ASSERT(buf != NULL && h != NULL);
	/* The datagram (header + payload_len) fits the largest buffer keel encodes into. Only the
	 * length: tests encode bad types and versions on purpose, for the decoder to reject. */
	KEEL_ASSERT(h->payload_len <= PAYLOAD_MAX);
	wire_put32(buf + OFF_MAGIC, h->magic);
	buf[OFF_VERSION] = h->version;
	buf[OFF_TYPE] = h->type;
	wire_put16(buf + OFF_FLAGS, h->flags);
	wire_put32(buf + OFF_JOB_ID, h->job_id);
	wire_put32(buf + OFF_EPOCH, h->epoch);
	wire_put16(buf + OFF_SRC, h->src);
	wire_put16(buf + OFF_DST, h->dst);
	wire_put32(buf + OFF_SEQ, h->seq);
	wire_put32(buf + OFF_ACK, h->ack);
	wire_put32(buf + OFF_SACK, h->sack);
	wire_put32(buf + OFF_OP_ID, h->op_id);
	wire_put16(buf + OFF_STEP, h->step);
	wire_put16(buf + OFF_WND, h->wnd);
	wire_put32(buf + OFF_OFFSET, h->offset);
	wire_put32(buf + OFF_TOTAL_LEN, h->total_len);
	wire_put32(buf + OFF_PAYLOAD_LEN, h->payload_len);
	uint32_t crc = 0;
	if ((h->flags & WIRE_FLAG_HEADER_CRC) != 0)
		crc = datagram_crc(buf, buf + WIRE_HEADER_SIZE, 0);
	else if ((h->flags & (WIRE_FLAG_AUTH | WIRE_FLAG_NO_CRC)) == 0)
		crc = datagram_crc(buf, buf + WIRE_HEADER_SIZE, h->payload_len);
	wire_put32(buf + OFF_CRC, crc);
	/* The CRC covered the payload length the header now announces. */
	KEEL_ASSERT(wire_get32(buf + OFF_PAYLOAD_LEN) == h->payload_len);
}

bool wire_crc_left_out(const uint8_t *buf)
{
	KEEL_ASSERT(buf != NULL);
	return (wire_get16(buf + OFF_FLAGS) & WIRE_FLAG_NO_CRC) != 0;
}

void wire_add_crc(uint8_t *buf, const uint8_t *tail)
{
	KEEL_ASSERT(buf != NULL);
	uint16_t flags = wire_get16(buf + OFF_FLAGS);
	if ((flags & WIRE_FLAG_NO_CRC) == 0)
		return;
	/* wire_encode wrote this header: its lengths are ours, not a peer's */
	uint32_t payload_len = wire_get32(buf + OFF_PAYLOAD_LEN);
	KEEL_ASSERT(payload_len <= PAYLOAD_MAX && (flags & WIRE_FLAG_AUTH) == 0);
	wire_put16(buf + OFF_FLAGS, (uint16_t)(flags & ~WIRE_FLAG_NO_CRC));
	wire_put32(buf + OFF_CRC,
		   datagram_crc(buf, tail != NULL ? tail : buf + WIRE_HEADER_SIZE, payload_len));
}

void wire_crc_whole(uint8_t *buf)
{
	KEEL_ASSERT(buf != NULL);
	uint16_t flags = wire_get16(buf + OFF_FLAGS);
	KEEL_ASSERT((flags & WIRE_FLAG_HEADER_CRC) != 0 &&
		    (flags & (WIRE_FLAG_AUTH | WIRE_FLAG_NO_CRC)) == 0);
	uint32_t payload_len = wire_get32(buf + OFF_PAYLOAD_LEN);
	KEEL_ASSERT(payload_len <= PAYLOAD_MAX);
	wire_put16(buf + OFF_FLAGS, (uint16_t)(flags & ~WIRE_FLAG_HEADER_CRC));
	wire_put32(buf + OFF_CRC, datagram_crc(buf, buf + WIRE_HEADER_SIZE, payload_len));
}

void wire_set_sealed(uint8_t *buf, bool sealed)
{
	KEEL_ASSERT(buf != NULL);
	uint16_t flags = wire_get16(buf + OFF_FLAGS);
	/* wire_encode wrote it for a MAC or without a CRC: its crc field is 0 either way */
	KEEL_ASSERT((flags & (WIRE_FLAG_AUTH | WIRE_FLAG_NO_CRC)) != 0 &&
		    wire_get32(buf + OFF_CRC) == 0);
	flags &= (uint16_t) ~(WIRE_FLAG_AUTH | WIRE_FLAG_NO_CRC);
	wire_put16(buf + OFF_FLAGS,
		   (uint16_t)(flags | (sealed ? WIRE_FLAG_AUTH : WIRE_FLAG_NO_CRC)));
}

static void read_header(const uint8_t *buf, struct wire_header *h)
{
	KEEL_ASSERT(buf != NULL);
	KEEL_ASSERT(h != NULL);
	h->magic = wire_get32(buf + OFF_MAGIC);
	h->version = buf[OFF_VERSION];
	h->type = buf[OFF_TYPE];
	h->flags = wire_get16(buf + OFF_FLAGS);
	h->job_id = wire_get32(buf + OFF_JOB_ID);
	h->epoch = wire_get32(buf + OFF_EPOCH);
	h->src = wire_get16(buf + OFF_SRC);
	h->dst = wire_get16(buf + OFF_DST);
	h->seq = wire_get32(buf + OFF_SEQ);
	h->ack = wire_get32(buf + OFF_ACK);
	h->sack = wire_get32(buf + OFF_SACK);
	h->op_id = wire_get32(buf + OFF_OP_ID);
	h->step = wire_get16(buf + OFF_STEP);
	h->wnd = wire_get16(buf + OFF_WND);
	h->offset = wire_get32(buf + OFF_OFFSET);
	h->total_len = wire_get32(buf + OFF_TOTAL_LEN);
	h->payload_len = wire_get32(buf + OFF_PAYLOAD_LEN);
	h->crc = wire_get32(buf + OFF_CRC);
	h->auth_inc = 0;
	h->auth_counter = 0;
}

/*
 * The header-shape rules, all reported as WIRE_BAD_LENGTH: payload_len is exactly what
 * follows the header; a heartbeat carries exactly its payload and no seq; an
 * ack or a leave carries nothing and no seq; a data fragment has a seq and lies inside total_len.
 * 64-bit sums, so offset + payload_len cannot wrap past total_len.
 */
static bool lengths_ok(const struct wire_header *h, size_t len)
{
	KEEL_ASSERT(h != NULL);
	KEEL_ASSERT(len >= WIRE_HEADER_SIZE); /* wire_decode rejected shorter datagrams */
	uint64_t trailer = (h->flags & WIRE_FLAG_AUTH) != 0 ? KEEL_AUTH_TRAILER_BYTES : 0;
	if ((uint64_t)h->payload_len + trailer != (uint64_t)len - WIRE_HEADER_SIZE)
		return false;
	switch (h->type) {
	case WIRE_HEARTBEAT:
		return h->payload_len == WIRE_HEARTBEAT_SIZE && h->seq == 0;
	case WIRE_ACK:
	case WIRE_LEAVE:
		return h->payload_len == 0 && h->seq == 0;
	case WIRE_VIEW:
		return h->payload_len >= WIRE_VIEW_MIN && h->seq == 0;
	case WIRE_DATA:
		return (uint64_t)h->offset + h->payload_len <= h->total_len && h->seq != 0;
	default:
		return false;
	}
}

static bool source_ok(const struct wire_header *h, const struct wire_expect *exp)
{
	KEEL_ASSERT(h != NULL && exp != NULL);
	if (h->src >= exp->world_size || h->src == exp->self)
		return false;
	bool ok = exp->transport_src == UINT32_MAX || h->src == exp->transport_src;
	/* What the consumers rely on: a sender's rank indexes their per-peer arrays. */
	KEEL_ASSERT(!ok || (h->src < exp->world_size && h->src != exp->self));
	return ok;
}

/* The MAC where the receiver has a key (and nothing else will do), else the CRC. Called once
 * lengths_ok held, so payload_len (+ the trailer) is exactly what follows the header. */
static enum wire_verdict integrity(const uint8_t *buf, size_t len, const struct wire_expect *exp,
				   struct wire_header *h)
{
	bool sealed = (h->flags & WIRE_FLAG_AUTH) != 0;
	bool no_crc = (h->flags & WIRE_FLAG_NO_CRC) != 0;
	bool header_crc = (h->flags & WIRE_FLAG_HEADER_CRC) != 0;
	if (exp->auth == NULL) {
		if (sealed)
			return WIRE_BAD_AUTH; /* a keyed sender: a rank started with a key, we
						 without */
		if (header_crc)		      /* only a link that checks every byte may carry it */
			return exp->link_checked && !no_crc &&
				       datagram_crc(buf, buf + WIRE_HEADER_SIZE, 0) == h->crc
				   ? WIRE_OK
				   : WIRE_BAD_CRC;
		if (no_crc) /* only memory may carry it: off a wire it is a damaged one */
			return exp->intact && h->crc == 0 ? WIRE_OK : WIRE_BAD_CRC;
		return datagram_crc(buf, buf + WIRE_HEADER_SIZE, h->payload_len) == h->crc
			   ? WIRE_OK
			   : WIRE_BAD_CRC;
	}
	/* Unsealed and without a CRC: only memory that nobody outside the job writes may carry
	 * that (shared memory, node_peer_caps); off a wire it is a forgery or a damaged one. */
	if (header_crc) /* a keyed job's payloads are all MAC'd by the CPU */
		return WIRE_BAD_AUTH;
	if (!sealed && no_crc)
		return exp->intact && h->crc == 0 ? WIRE_OK : WIRE_BAD_AUTH;
	if (!sealed || no_crc || h->crc != 0 ||
	    !auth_open(exp->auth, buf, len, h->src, &h->auth_inc, &h->auth_counter))
		return WIRE_BAD_AUTH;
	return WIRE_OK;
}

enum wire_verdict wire_decode(const uint8_t *buf, size_t len, const struct wire_expect *exp,
			      struct wire_header *h)
{
	struct wire_header tmp;

	KEEL_ASSERT(exp != NULL && h != NULL);
	KEEL_ASSERT(buf != NULL || len == 0);
	/* Work in a local copy: on a rejection the caller's *h is left as it was. */
	if (len < WIRE_HEADER_SIZE)
		return WIRE_BAD_TRUNCATED;
	read_header(buf, &tmp);
	if (tmp.magic != WIRE_MAGIC)
		return WIRE_BAD_MAGIC;
	if (tmp.version != WIRE_VERSION)
		return WIRE_BAD_VERSION;
	if (tmp.type == 0 || tmp.type > WIRE_TYPE_MAX)
		return WIRE_BAD_TYPE;
	if (!lengths_ok(&tmp, len + exp->detached))
		return WIRE_BAD_LENGTH;
	/* A payload in device memory: the CPU checks the header, the link checked the rest.
	 * Only a data header, alone: bytes after it would make payload_len reach past the
	 * detached payload, which is all the core reads. */
	if (exp->detached != 0 &&
	    (tmp.type != WIRE_DATA || (tmp.flags & WIRE_FLAG_AUTH) != 0 || len != WIRE_HEADER_SIZE))
		return WIRE_BAD_LENGTH;
	if (exp->detached != 0 && (tmp.flags & WIRE_FLAG_HEADER_CRC) == 0)
		return exp->auth != NULL ? WIRE_BAD_AUTH : WIRE_BAD_CRC;
	enum wire_verdict v = integrity(buf, len, exp, &tmp);
	if (v != WIRE_OK)
		return v;
	if (tmp.job_id != exp->job_id)
		return WIRE_BAD_JOB;
	if (tmp.dst != exp->self)
		return WIRE_BAD_DESTINATION;
	if (!source_ok(&tmp, exp))
		return WIRE_BAD_SOURCE;
	if ((tmp.type == WIRE_DATA || tmp.type == WIRE_ACK) && tmp.epoch != exp->epoch)
		return WIRE_BAD_EPOCH;
	/* Accepted: the payload is exactly what follows the header, of a type keel knows. These
	 * hold because of the checks above, whatever the bytes were. */
	KEEL_ASSERT((uint64_t)WIRE_HEADER_SIZE + tmp.payload_len +
			((tmp.flags & WIRE_FLAG_AUTH) != 0 ? KEEL_AUTH_TRAILER_BYTES : 0) ==
		    (uint64_t)len + exp->detached);
	KEEL_ASSERT(exp->auth == NULL || (tmp.flags & WIRE_FLAG_AUTH) != 0 || exp->intact);
	KEEL_ASSERT(tmp.type >= WIRE_HEARTBEAT && tmp.type <= WIRE_TYPE_MAX);
	/* coll_deliver and wire_heartbeat_decode read exactly these regions. */
	KEEL_ASSERT(tmp.type != WIRE_DATA ||
		    (uint64_t)tmp.offset + tmp.payload_len <= tmp.total_len);
	KEEL_ASSERT(tmp.type != WIRE_HEARTBEAT || tmp.payload_len == WIRE_HEARTBEAT_SIZE);
	*h = tmp;
	return WIRE_OK;
}

void wire_heartbeat_encode(uint8_t *payload, const struct wire_heartbeat *hb)
{
	KEEL_ASSERT(payload != NULL);
	KEEL_ASSERT(hb != NULL);
	wire_put64(payload + HB_OFF_SEND_NS, hb->send_ns);
	wire_put64(payload + HB_OFF_ECHO_NS, hb->echo_ns);
	wire_put64(payload + HB_OFF_ECHO_HELD_NS, hb->echo_held_ns);
	wire_put32(payload + HB_OFF_INCARNATION, hb->incarnation);
	wire_put32(payload + HB_OFF_FLAGS, hb->flags);
	wire_put32(payload + HB_OFF_OPS_STARTED, hb->ops_started);
}

/* Called only on a datagram wire_decode accepted as a heartbeat (exactly its size); the
 * fields are the peer's claims and are not asserted on. */
void wire_heartbeat_decode(const uint8_t *payload, struct wire_heartbeat *hb)
{
	KEEL_ASSERT(payload != NULL);
	KEEL_ASSERT(hb != NULL);
	hb->send_ns = wire_get64(payload + HB_OFF_SEND_NS);
	hb->echo_ns = wire_get64(payload + HB_OFF_ECHO_NS);
	hb->echo_held_ns = wire_get64(payload + HB_OFF_ECHO_HELD_NS);
	hb->incarnation = wire_get32(payload + HB_OFF_INCARNATION);
	hb->flags = wire_get32(payload + HB_OFF_FLAGS);
	hb->ops_started = wire_get32(payload + HB_OFF_OPS_STARTED);
}

const char *wire_verdict_name(enum wire_verdict v)
{
	static const char *const names[WIRE_VERDICT_COUNT] = {
	    [WIRE_OK] = "ok",
	    [WIRE_BAD_TRUNCATED] = "truncated",
	    [WIRE_BAD_MAGIC] = "bad magic",
	    [WIRE_BAD_VERSION] = "bad version",
	    [WIRE_BAD_TYPE] = "bad type",
	    [WIRE_BAD_LENGTH] = "bad length",
	    [WIRE_BAD_CRC] = "bad crc",
	    [WIRE_BAD_JOB] = "wrong job",
	    [WIRE_BAD_EPOCH] = "wrong epoch",
	    [WIRE_BAD_SOURCE] = "bad source",
	    [WIRE_BAD_DESTINATION] = "wrong destination",
	    [WIRE_BAD_AUTH] = "bad mac",
	    [WIRE_BAD_REPLAY] = "replay",
	};

	_Static_assert(WIRE_VERDICT_COUNT == 13, "name every verdict above");

	/* Every verdict wire_decode can return has a name (the count alone cannot see a hole). */
	KEEL_ASSERT((unsigned)v >= WIRE_VERDICT_COUNT || names[v] != NULL);
	if ((unsigned)v >= WIRE_VERDICT_COUNT || names[v] == NULL)
		return "unknown verdict";
	return names[v];
}
