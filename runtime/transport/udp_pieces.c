/* Cutting datagrams into link-sized pieces and joining them again: the format and the joiner
 * (udp_pieces_int.h). The UDP transport does the sending and receiving. */
#include <string.h>

#include "assert_int.h"
#include "udp_pieces_int.h"

#define PIECE_MAGIC0 'K'
#define PIECE_MAGIC1 'P'
#define SLOT_ALIGN   64u

_Static_assert(PIECES_MAX <= 64, "a slot's bitmap holds every piece");

static size_t align_up(size_t n)
{
	return (n + SLOT_ALIGN - 1) & ~(size_t)(SLOT_ALIGN - 1);
}

static uint32_t get16(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

uint32_t pieces_count(uint32_t len, uint32_t chunk)
{
	KEEL_ASSERT(chunk > 0);
	return (len + chunk - 1) / chunk;
}

void piece_header_put(uint8_t *p, uint16_t id, uint32_t index, uint32_t count, uint32_t chunk)
{
	KEEL_ASSERT(index < count && count >= 2 && count <= PIECES_MAX && chunk > 0 &&
		    chunk <= UINT16_MAX);
	p[0] = PIECE_MAGIC0;
	p[1] = PIECE_MAGIC1;
	p[2] = (uint8_t)id;
	p[3] = (uint8_t)(id >> 8);
	p[4] = (uint8_t)index;
	p[5] = (uint8_t)count;
	p[6] = (uint8_t)chunk;
	p[7] = (uint8_t)(chunk >> 8);
}

bool piece_looks(const uint8_t *p, uint32_t len)
{
	return len >= 2 && p[0] == PIECE_MAGIC0 && p[1] == PIECE_MAGIC1;
}

size_t piece_joiner_bytes(uint32_t nslots, uint32_t cap)
{
	return align_up(nslots * sizeof(struct piece_slot)) + (size_t)nslots * align_up(cap);
}

void piece_joiner_init(struct piece_joiner *j, uint8_t *mem, uint32_t nslots, uint32_t cap)
{
	KEEL_ASSERT(j != NULL && mem != NULL && nslots >= 1 && nslots <= 64 && cap > 0);
	KEEL_ASSERT(((uintptr_t)mem & (SLOT_ALIGN - 1)) == 0);
	memset(j, 0, sizeof(*j));
	j->slots = (struct piece_slot *)(void *)mem;
	j->nslots = nslots;
	j->cap = cap;
	uint8_t *bufs = mem + align_up(nslots * sizeof(struct piece_slot));
	for (uint32_t i = 0; i < nslots; i++)
		j->slots[i] = (struct piece_slot){.buf = bufs + (size_t)i * align_up(cap)};
}

void piece_joiner_release(struct piece_joiner *j)
{
	j->lent = 0;
}

void piece_joiner_lend(struct piece_joiner *j, const uint8_t *buf)
{
	for (uint32_t i = 0; i < j->nslots; i++)
		if (j->slots[i].buf == buf) {
			j->lent |= 1ull << i;
			return;
		}
	KEEL_ASSERT(!"lent bytes are a slot's");
}

uint32_t piece_joiner_unlent(const struct piece_joiner *j)
{
	return j->nslots - (uint32_t)__builtin_popcountll(j->lent);
}

static bool slot_lent(const struct piece_joiner *j, uint32_t i)
{
	return ((j->lent >> i) & 1u) != 0;
}

/* The slot joining `peer`'s datagram, a free one, or the least recently touched busy one
 * (given up); NULL when every slot is lent in this receive. */
static struct piece_slot *slot_for(struct piece_joiner *j, uint32_t peer)
{
	struct piece_slot *free_slot = NULL, *oldest = NULL;

	for (uint32_t i = 0; i < j->nslots; i++) {
		struct piece_slot *s = &j->slots[i];

		if (slot_lent(j, i))
			continue;
		if (s->busy && s->peer == peer)
			return s;
		if (!s->busy && free_slot == NULL)
			free_slot = s;
		if (s->busy && (oldest == NULL || s->touched < oldest->touched))
			oldest = s;
	}
	if (free_slot != NULL)
		return free_slot;
	if (oldest != NULL) {
		j->stats.abandoned++;
		oldest->busy = false;
	}
	return oldest;
}

/* Is the header of a piece of `data` bytes sound for a joiner whose datagrams hold `cap`? */
static bool header_ok(uint32_t index, uint32_t count, uint32_t chunk, uint32_t data, uint32_t cap)
{
	if (count < 2 || count > PIECES_MAX || index >= count || chunk == 0 || data == 0 ||
	    (uint64_t)(count - 1) * chunk >= cap)
		return false;
	if (index + 1 < count)
		return data == chunk;
	return data <= chunk && (uint64_t)(count - 1) * chunk + data <= cap;
}

uint32_t piece_join(struct piece_joiner *j, uint32_t peer, const uint8_t *p, uint32_t len,
		    const uint8_t **out)
{
	KEEL_ASSERT(j != NULL && p != NULL && out != NULL);
	*out = NULL;
	if (len <= PIECE_HDR_BYTES || !piece_looks(p, len)) {
		j->stats.bad++;
		return 0;
	}
	uint16_t id = (uint16_t)get16(p + 2);
	uint32_t index = p[4], count = p[5], chunk = get16(p + 6), data = len - PIECE_HDR_BYTES;
	if (!header_ok(index, count, chunk, data, j->cap)) {
		j->stats.bad++;
		return 0;
	}
	struct piece_slot *s = slot_for(j, peer);
	if (s == NULL) {
		j->stats.no_slot++;
		return 0;
	}
	if (s->busy && (s->id != id || s->count != count || s->chunk != chunk)) {
		j->stats.abandoned++; /* the peer moved on to another datagram */
		s->busy = false;
	}
	if (!s->busy)
		*s = (struct piece_slot){.peer = peer,
					 .id = id,
					 .count = (uint8_t)count,
					 .busy = true,
					 .chunk = chunk,
					 .buf = s->buf};
	s->touched = ++j->clock;
	uint64_t bit = 1ull << index;
	if ((s->have & bit) != 0)
		return 0; /* a duplicate */
	memcpy(s->buf + (size_t)index * chunk, p + PIECE_HDR_BYTES, data);
	s->have |= bit;
	if (index + 1 == count)
		s->last_len = data;
	uint64_t all = count == 64 ? ~0ull : (1ull << count) - 1;
	if (s->have != all)
		return 0;
	s->busy = false;
	j->stats.joined++;
	*out = s->buf;
	uint32_t total = (count - 1) * chunk + s->last_len;
	KEEL_ASSERT(total <= j->cap);
	return total;
}
