/* keel wire format: one fixed 56-byte header in front of every datagram, little-endian.
 * Decoding validates every field before anything is used; it never asserts on input. */
#ifndef KEEL_WIRE_INT_H
#define KEEL_WIRE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth_int.h"
#include "crc32c_int.h"

#define WIRE_MAGIC 0x4c45454bu /* "KEEL" read as a little-endian u32 */
/* 2: heartbeats carry ops_started and may probe; 3: MAC trailer; 4: no CRC through shared
 * memory (WIRE_FLAG_NO_CRC); 5: with a key too, no MAC through shared memory; 6: small
 * AllReduces reported early, views may carry a result (an older node would drop it unread);
 * 7: payloads read from device memory by the NIC carry a CRC over the header alone
 * (WIRE_FLAG_HEADER_CRC); 8: group operations (WIRE_FLAG_GROUP) */
#define WIRE_VERSION	 8u
#define WIRE_HEADER_SIZE 56u

enum wire_type {
	WIRE_HEARTBEAT = 1, /* unreliable; payload struct wire_heartbeat */
	WIRE_ACK = 2,	    /* unreliable; no payload; ack/sack fields only */
	WIRE_DATA = 3,	    /* reliable; a fragment of a collective's message */
	WIRE_LEAVE = 4,	    /* unreliable; no payload; the sender is leaving for good after
			     * completing op_id collectives (a clean exit, not a failure) */
	WIRE_VIEW = 5,	    /* unreliable; the membership protocol (membership.c decodes the
			     * payload, WIRE_VIEW_MIN..mtu bytes) */
	WIRE_TYPE_MAX = 5,
};

/* Header flags. */
#define WIRE_FLAG_RETRANSMIT 0x1u /* this copy was sent again (no RTT sample from its ack) */
#define WIRE_FLAG_AUTH	     0x2u /* a MAC trailer follows the payload; the crc field is 0 */
/* No CRC (the crc field is 0): the sender's way to dst is memory (KEEL_CAP_INTACT), where a
 * CRC pass on each side cost a third of a large AllReduce's time; with a key, no MAC either
 * (nothing outside the job writes that memory). Accepted only from a datagram its transport
 * marked KEEL_DGRAM_INTACT; never leaves with WIRE_FLAG_AUTH. */
#define WIRE_FLAG_NO_CRC 0x10u
/* The crc covers the header alone: the payload was read by the sender's NIC from device
 * memory (GPUDirect RDMA), where its CPU cannot read it, over a link that checks every byte
 * end to end (an RC queue pair's ICRC). Accepted only from a datagram its transport marked
 * KEEL_DGRAM_LINK_CHECKED, in a job without a key; never with WIRE_FLAG_NO_CRC or
 * WIRE_FLAG_AUTH. */
#define WIRE_FLAG_HEADER_CRC 0x20u
/* DATA of a group operation (keel/group.h): the payload begins with the group's sub-header
 * (group_int.h) and goes to the group engine, not the world's collectives. */
#define WIRE_FLAG_GROUP 0x40u
/* DATA of a gradient AllReduce: how the payload is encoded (enum wire_enc, in bits 2-3). The
 * header's offset and total_len count the f32 bytes the payload stands for. */
#define WIRE_FLAG_ENC_SHIFT 2u
#define WIRE_FLAG_ENC_MASK  0xcu
enum wire_enc {
	WIRE_ENC_RAW = 0, /* the elements as they are */
	WIRE_ENC_BF16,	  /* f32 elements as bf16, 2 bytes each */
	WIRE_ENC_F16,	  /* f32 elements as f16, 2 bytes each */
	WIRE_ENC_COUNT
};

struct wire_header {
	uint32_t magic;
	uint8_t version;
	uint8_t type;
	uint16_t flags;
	uint32_t job_id;
	uint32_t epoch;
	uint16_t src;
	uint16_t dst;
	uint32_t seq;	      /* reliable sequence number, 0 for unreliable types */
	uint32_t ack;	      /* next reliable seq the sender expects from dst (cumulative) */
	uint32_t sack;	      /* bit i: sender holds seq ack+1+i from dst */
	uint32_t op_id;	      /* collective operation number (DATA) */
	uint16_t step;	      /* step within the operation (DATA) */
	uint16_t wnd;	      /* receive window: the sender of this header accepts reliable
			       * seqs from dst below ack + wnd */
	uint32_t offset;      /* byte offset of this fragment in the step's message (DATA) */
	uint32_t total_len;   /* bytes of the step's whole message (DATA) */
	uint32_t payload_len; /* bytes after the header */
	uint32_t crc;	      /* CRC32C of header (crc field as 0) and payload */
	/* Not header fields: from the MAC trailer of an authenticated datagram (auth_int.h). */
	uint32_t auth_inc;
	uint64_t auth_counter;
};

/* Heartbeat payload: the sender's clock, and the echo of the last heartbeat it received
 * from the destination with how long it held it, so the receiver gets an RTT; and who the
 * sender is: its incarnation (a restarted process has a higher one) and whether it is a member
 * of its view or asking to join. */
struct wire_heartbeat {
	uint64_t send_ns;
	uint64_t echo_ns;      /* send_ns of the last heartbeat from dst, 0 if none */
	uint64_t echo_held_ns; /* time between receiving that heartbeat and sending this one */
	uint32_t incarnation;
	uint32_t flags;	      /* WIRE_HB_* */
	uint32_t ops_started; /* collectives the sender's program started in its epoch */
};
#define WIRE_HEARTBEAT_SIZE 36u
#define WIRE_HB_JOINING	    0x1u /* not a member of any view yet: asking to be admitted */
#define WIRE_HB_NOQUORUM    0x2u /* sees no majority of its view: stopped */
#define WIRE_HB_PROBE	    0x4u /* the sender has not heard from dst lately: answer at once */
/* Smallest VIEW payload: sub-type, target epoch, ballot. */
#define WIRE_VIEW_MIN 16u

/* Why a datagram was rejected; each maps to a counter. */
enum wire_verdict {
	WIRE_OK = 0,
	WIRE_BAD_TRUNCATED, /* shorter than the header */
	WIRE_BAD_MAGIC,
	WIRE_BAD_VERSION,
	WIRE_BAD_TYPE,
	WIRE_BAD_LENGTH, /* payload_len != datagram - header, or fragment outside total_len,
			  * or a type-specific size (heartbeat) violated */
	WIRE_BAD_CRC,
	WIRE_BAD_JOB,
	WIRE_BAD_EPOCH,	      /* DATA or ACK of another epoch (reliable streams are per view) */
	WIRE_BAD_SOURCE,      /* src >= world, src == self, or src != transport's sender */
	WIRE_BAD_DESTINATION, /* dst != self */
	WIRE_BAD_AUTH,	      /* no MAC where a key is set, a MAC that does not verify, or a MAC
			       * where no key is set */
	WIRE_BAD_REPLAY,      /* authenticated, but received before (node.c's replay window) */
	WIRE_VERDICT_COUNT
};

/* What the receiver expects, for validation. */
struct wire_expect {
	uint32_t job_id;
	uint32_t epoch;
	uint32_t self;
	uint32_t world_size;
	uint32_t transport_src; /* sender rank the transport reported, or UINT32_MAX if unknown */
	const struct auth_ctx *auth; /* the job's keys, or NULL: no key, CRC32C only */
	bool intact;	   /* the transport marked the datagram KEEL_DGRAM_INTACT: WIRE_FLAG_NO_CRC
			    * is accepted */
	bool link_checked; /* marked KEEL_DGRAM_LINK_CHECKED: WIRE_FLAG_HEADER_CRC is accepted
			    * (without a key) */
	uint32_t detached; /* the payload's bytes, where it lies in device memory apart from the
			    * header (KEEL_DGRAM_DEVICE_TAIL): buf holds the header alone, and only
			    * a data datagram with WIRE_FLAG_HEADER_CRC is accepted */
};

/* Write `h` (crc ignored) and compute the CRC over header and `payload_len` bytes that
 * already sit at buf + WIRE_HEADER_SIZE. buf must hold WIRE_HEADER_SIZE + h->payload_len.
 * With WIRE_FLAG_AUTH in h->flags the crc field is 0: auth_seal adds the MAC when it leaves.
 * With WIRE_FLAG_NO_CRC it is 0 too, and no pass is made over the payload. With
 * WIRE_FLAG_HEADER_CRC it covers the header alone (buf need only hold the header). */
void wire_encode(uint8_t *buf, const struct wire_header *h);

/* An encoded datagram marked WIRE_FLAG_NO_CRC about to leave on a way that is not memory:
 * clear the flag and fill in the CRC, in place (the retransmit copy keeps it). Any other
 * datagram is left as it is. Its payload is at buf + WIRE_HEADER_SIZE, or at `tail` when
 * not NULL (a datagram in two pieces, struct keel_datagram). */
void wire_add_crc(uint8_t *buf, const uint8_t *tail);
/* An encoded datagram marked WIRE_FLAG_HEADER_CRC whose payload now sits at
 * buf + WIRE_HEADER_SIZE (the device copied it to the host): a CRC over all of it instead. */
void wire_crc_whole(uint8_t *buf);
/* A keyed node's datagram as it leaves (encoded with WIRE_FLAG_AUTH, or WIRE_FLAG_NO_CRC): to
 * be sealed (WIRE_FLAG_AUTH; auth_seal then appends the trailer), or to go through memory
 * without MAC or CRC (WIRE_FLAG_NO_CRC, which only a receiver told the datagram is intact
 * accepts). */
void wire_set_sealed(uint8_t *buf, bool sealed);
/* Was this encoded datagram written with WIRE_FLAG_NO_CRC? */
bool wire_crc_left_out(const uint8_t *buf);

/* Validate and decode the datagram buf[0..len). On WIRE_OK, *h is filled and the payload
 * is buf + WIRE_HEADER_SIZE. Checks in this order: size, magic, version, type, lengths,
 * MAC (exp->auth set: required and verified, except that where exp->intact WIRE_FLAG_NO_CRC
 * without WIRE_FLAG_AUTH stands for it) or crc (not set: a MAC'd datagram is refused;
 * WIRE_FLAG_NO_CRC stands for the crc only where exp->intact, and WIRE_FLAG_HEADER_CRC's
 * crc over the header only where exp->link_checked),
 * job, destination, source, epoch. Only DATA and ACK are fenced by epoch here: liveness
 * (HEARTBEAT, LEAVE) crosses views, and VIEW messages are the protocol that changes them.
 * Never reads outside buf[0..len). */
enum wire_verdict wire_decode(const uint8_t *buf, size_t len, const struct wire_expect *exp,
			      struct wire_header *h);

void wire_heartbeat_encode(uint8_t *payload, const struct wire_heartbeat *hb);
void wire_heartbeat_decode(const uint8_t *payload, struct wire_heartbeat *hb);

const char *wire_verdict_name(enum wire_verdict v);

/* Little-endian field access for payloads laid out byte by byte. */
void wire_put16(uint8_t *p, uint16_t v);
void wire_put32(uint8_t *p, uint32_t v);
void wire_put64(uint8_t *p, uint64_t v);
uint16_t wire_get16(const uint8_t *p);
uint32_t wire_get32(const uint8_t *p);
uint64_t wire_get64(const uint8_t *p);

#endif
