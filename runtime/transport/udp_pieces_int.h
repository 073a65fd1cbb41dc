/* Datagrams longer than a link's packet, cut into pieces by the UDP transport and joined again
 * by the receiving one (keel_udp_config.piece_bytes).
 *
 * A piece is one UDP datagram: an 8-byte piece header, then its share of the datagram's bytes.
 * Every piece of a datagram but the last carries exactly `chunk` bytes; the last carries 1 to
 * chunk. Header, little-endian: "KP" (a keel datagram begins with "KEEL", so the first two bytes
 * tell a piece from a whole datagram), the datagram's id (the sender's counter, per transport),
 * the piece's index, the piece count (2..PIECES_MAX), chunk.
 *
 * The joiner keeps one datagram per sending peer in a few slots. A piece of another datagram
 * from the same peer starts that one over (the sender moved on: its reliable layer resends a
 * datagram whose piece was lost as a new datagram, under a new id); with every slot busy the
 * least recently touched one is given up. Ids repeat after 65 536 datagrams: pieces left from
 * one that long ago, with no other piece from that peer since, could join a later one of the
 * same id and shape; the core's CRC (or MAC) over the whole datagram drops that one, and it is
 * sent again. A joined datagram stays in its slot, lent to the
 * caller, until the caller's next receive. Nothing is allocated: the slots live in the
 * transport's storage. */
#ifndef KEEL_UDP_PIECES_INT_H
#define KEEL_UDP_PIECES_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/transport_udp.h"

#define PIECE_HDR_BYTES KEEL_UDP_PIECE_HDR_BYTES
#define PIECES_MAX	64u /* a slot's bitmap of the pieces it has */

/* Pieces a datagram of `len` bytes takes at `chunk` bytes each (0 for len 0). */
uint32_t pieces_count(uint32_t len, uint32_t chunk);

/* Write the header of piece `index` of `count`, datagram `id`, at p. */
void piece_header_put(uint8_t *p, uint16_t id, uint32_t index, uint32_t count, uint32_t chunk);

/* Does a received datagram of `len` bytes at p begin like a piece? */
bool piece_looks(const uint8_t *p, uint32_t len);

struct piece_slot {
	uint32_t peer;
	uint16_t id;
	uint8_t count;
	bool busy;	   /* joining a datagram */
	uint32_t chunk;	   /* bytes of every piece but the last */
	uint32_t last_len; /* bytes of the last piece, once it came */
	uint64_t have;	   /* bit i: piece i is in */
	uint64_t touched;  /* the joiner's clock when a piece last came */
	uint8_t *buf;	   /* [cap] */
};

struct piece_stats {
	uint64_t joined;    /* datagrams joined and handed on */
	uint64_t bad;	    /* pieces whose header or length made no sense: dropped */
	uint64_t abandoned; /* datagrams given up with pieces missing (another from the same peer
			     * came, or every slot was busy) */
	uint64_t no_slot;   /* pieces dropped because every slot was lent this receive (the
			     * UDP transport keeps one slot unlent, so never there) */
};

struct piece_joiner {
	struct piece_slot *slots; /* [nslots] */
	uint32_t nslots;
	uint32_t cap;	/* the longest datagram a slot takes */
	uint64_t clock; /* counts pieces, for least recently touched */
	uint64_t lent;	/* bit i: slot i holds a datagram handed on in this receive */
	struct piece_stats stats;
};

/* Storage the joiner's slots and buffers take, from 64-byte aligned memory. */
size_t piece_joiner_bytes(uint32_t nslots, uint32_t cap);

/* Lay the joiner's slots out in `mem` (piece_joiner_bytes of it, 64-byte aligned). nslots is
 * 1..64. */
void piece_joiner_init(struct piece_joiner *j, uint8_t *mem, uint32_t nslots, uint32_t cap);

/* A new receive: what the last one lent may be written again. */
void piece_joiner_release(struct piece_joiner *j);

/* The joined datagram at buf (piece_join's *out) is lent to the caller: its slot takes nothing
 * until piece_joiner_release. */
void piece_joiner_lend(struct piece_joiner *j, const uint8_t *buf);

/* Slots not lent in this receive. */
uint32_t piece_joiner_unlent(const struct piece_joiner *j);

/* Take a piece (its header at p, `len` bytes) from rank `peer`. Returns the joined datagram's
 * length and sets *out to its bytes once its last missing piece came (valid until the next
 * piece_join, or until piece_joiner_release if lent); 0 while pieces are missing, or when the
 * piece was dropped (counted). */
uint32_t piece_join(struct piece_joiner *j, uint32_t peer, const uint8_t *p, uint32_t len,
		    const uint8_t **out);

#endif
