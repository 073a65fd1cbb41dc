/* The chaos transport: a decorator that drops, duplicates, reorders, delays and partitions the
 * datagrams another transport carries, from a seeded xoshiro256** generator, so a seed and a
 * call sequence replay exactly. It never reads a clock, never allocates, never owns the inner. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "assert_int.h"
#include "keel/limits.h"
#include "keel/transport_chaos.h"

#define CACHE_LINE_BYTES 64u
#define PPM_ONE		 1000000u
/* Held datagrams at once; hold_max * mtu bytes of caller memory (64 Ki * 64 KiB = 4 GiB). */
#define HOLD_LIMIT	 65536u
#define HOLD_MAX_DEFAULT 256u
/* Datagrams handed to the inner transport per send_burst call of its own. */
#define OUT_MAX KEEL_BURST_MAX
/* Longest spec keel_chaos_parse reads; bounds its loop. */
#define SPEC_LEN_MAX 1024u
#define NONE	     UINT32_MAX
/* What the decorator takes from the inner's caps: it loses, duplicates and reorders, and no
 * CRC may be left out (every datagram through it carries its own). Two pieces pass: a copy it
 * holds back is written whole, a datagram it passes on goes as it came. */
#define CAPS_BROKEN ((uint32_t)(KEEL_CAP_RELIABLE | KEEL_CAP_ORDERED | KEEL_CAP_INTACT))

/* A datagram held back for delay or reorder; its bytes live at data + index * mtu. */
struct hold_slot {
	uint64_t release_ns;
	uint64_t seq; /* breaks release_ns ties in holding order, so release order is fixed */
	uint32_t peer;
	uint32_t len;
	uint32_t flags; /* the datagram's keel_datagram_flags, passed on to the inner transport */
};

/* Where a batch entry came from, to settle it once the inner transport has answered. */
struct out_meta {
	uint32_t caller_idx; /* index in the caller's burst when this copy carries its acceptance */
	uint32_t slot;	     /* hold slot the bytes live in, or NONE */
};

struct chaos {
	struct keel_transport t;
	struct keel_transport *inner;
	struct keel_chaos_config cfg;
	uint64_t rng[4];
	uint64_t seq_next;
	struct keel_chaos_stats stats;
	uint64_t cut[KEEL_WORLD_MAX / 64];    /* bit per peer: both ways */
	uint64_t cut_tx[KEEL_WORLD_MAX / 64]; /* bit per peer: what we send it only */
	struct hold_slot *slots;	      /* [hold_max] */
	uint8_t *data;			      /* [hold_max * mtu] */
	uint32_t *free_list;		      /* [hold_max]: a stack of free slot indexes */
	uint32_t *heap;			      /* [hold_max]: delayed slots, min-heap on release */
	uint32_t *reorder;		      /* [hold_max]: slots waiting for the next datagram */
	uint32_t free_count, heap_count, reorder_count;
	uint32_t out_count;
	struct keel_datagram out[OUT_MAX]; /* the batch for the inner transport */
	struct out_meta meta[OUT_MAX];
};

struct layout {
	size_t slots, data, free_list, heap, reorder, total;
};

static const struct keel_transport_ops chaos_ops;

static size_t align_up(size_t n)
{
	return (n + CACHE_LINE_BYTES - 1) & ~(size_t)(CACHE_LINE_BYTES - 1);
}

/* xoshiro256** (Blackman and Vigna), seeded through splitmix64 so that any seed, 0 included,
 * gives a well-mixed non-zero state. */
static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct chaos *c)
{
	uint64_t *s = c->rng;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

/* True with probability ppm / 1e6. Draws nothing when ppm is 0, so an unused fault costs
 * nothing; the draw sequence still depends only on the config and the calls. */
static bool roll_ppm(struct chaos *c, uint32_t ppm)
{
	if (ppm == 0)
		return false;
	return (((rng_next(c) >> 32) * PPM_ONE) >> 32) < ppm;
}

/* Uniform in [0, max]; the modulo bias is below 2^-40 for any delay a test uses. */
static uint64_t rng_upto(struct chaos *c, uint64_t max)
{
	uint64_t r = rng_next(c);

	return max == UINT64_MAX ? r : r % (max + 1);
}

void keel_chaos_config_default(struct keel_chaos_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	memset(cfg, 0, sizeof(*cfg));
	cfg->seed = 1;
	cfg->hold_max = HOLD_MAX_DEFAULT;
}

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

/* A fraction in [0,1] as parts per million. */
static int parse_ppm(const char *v, const char **end, uint32_t *ppm)
{
	char *e;
	double x;

	if (!is_digit(*v) && *v != '.')
		return -EINVAL; /* no sign, space, "inf" or "nan" */
	errno = 0;
	x = strtod(v, &e);
	if (e == v || errno == ERANGE || !(x >= 0.0 && x <= 1.0))
		return -EINVAL;
	*ppm = (uint32_t)(x * PPM_ONE + 0.5);
	*end = e;
	return 0;
}

static int parse_u64(const char *v, const char **end, uint64_t *out)
{
	char *e;

	if (!is_digit(*v))
		return -EINVAL; /* strtoull would accept and negate a leading '-' */
	errno = 0;
	*out = strtoull(v, &e, 10);
	if (e == v || errno == ERANGE)
		return -EINVAL;
	*end = e;
	return 0;
}

static bool key_is(const char *key, size_t key_len, const char *name)
{
	return strlen(name) == key_len && memcmp(key, name, key_len) == 0;
}

/* One "key=value"; *end is left on the character after the value. */
static int parse_pair(const char *key, size_t key_len, const char *v, const char **end,
		      struct keel_chaos_config *cfg)
{
	uint64_t n;
	int err;

	if (key_is(key, key_len, "loss"))
		return parse_ppm(v, end, &cfg->drop_ppm);
	if (key_is(key, key_len, "dup"))
		return parse_ppm(v, end, &cfg->dup_ppm);
	if (key_is(key, key_len, "reorder"))
		return parse_ppm(v, end, &cfg->reorder_ppm);
	err = parse_u64(v, end, &n);
	if (err < 0)
		return err;
	if (key_is(key, key_len, "seed")) {
		cfg->seed = n;
	} else if (key_is(key, key_len, "delay_us")) {
		if (n > UINT64_MAX / 1000)
			return -EINVAL;
		cfg->delay_ns_max = n * 1000;
	} else if (key_is(key, key_len, "hold")) {
		if (n > HOLD_LIMIT)
			return -EINVAL;
		cfg->hold_max = (uint32_t)n;
	} else {
		return -EINVAL;
	}
	return 0;
}

int keel_chaos_parse(const char *spec, struct keel_chaos_config *cfg)
{
	struct keel_chaos_config tmp;
	const char *p, *end;
	size_t len;

	if (spec == NULL || cfg == NULL)
		return -EINVAL;
	len = strnlen(spec, SPEC_LEN_MAX + 1);
	if (len > SPEC_LEN_MAX)
		return -EINVAL;
	tmp = *cfg; /* cfg changes only if the whole spec is good */
	p = spec;
	end = spec + len;
	/* Each pass consumes at least "k=v" or fails, so it ends within len passes. */
	while (p < end) {
		size_t key_len = strcspn(p, "=,");
		const char *after;
		int err;

		if (key_len == 0 || p[key_len] != '=')
			return -EINVAL;
		err = parse_pair(p, key_len, p + key_len + 1, &after, &tmp);
		if (err < 0)
			return err;
		if (*after == '\0')
			break;
		if (*after != ',' || after[1] == '\0')
			return -EINVAL; /* junk after the number, or a trailing comma */
		p = after + 1;
	}
	*cfg = tmp;
	return 0;
}

static bool config_valid(const struct keel_chaos_config *cfg)
{
	const struct keel_transport *in = cfg ? cfg->inner : NULL;

	return in != NULL && in->ops != NULL && in->ops->send_burst != NULL &&
	       in->ops->recv_burst != NULL && in->mtu > 0 && in->world_size <= KEEL_WORLD_MAX &&
	       cfg->drop_ppm <= PPM_ONE && cfg->dup_ppm <= PPM_ONE && cfg->reorder_ppm <= PPM_ONE &&
	       cfg->hold_max <= HOLD_LIMIT;
}

static void layout_compute(const struct keel_chaos_config *cfg, struct layout *l)
{
	size_t hold = cfg->hold_max;

	l->slots = align_up(sizeof(struct chaos));
	l->free_list = l->slots + align_up(hold * sizeof(struct hold_slot));
	l->heap = l->free_list + align_up(hold * sizeof(uint32_t));
	l->reorder = l->heap + align_up(hold * sizeof(uint32_t));
	l->data = l->reorder + align_up(hold * sizeof(uint32_t));
	l->total = l->data + align_up(hold * cfg->inner->mtu);
}

size_t keel_chaos_storage_size(const struct keel_chaos_config *cfg)
{
	struct layout l;

	if (!config_valid(cfg))
		return 0;
	layout_compute(cfg, &l);
	return l.total + CACHE_LINE_BYTES - 1;
}

int keel_chaos_init(struct keel_transport **out, void *mem, size_t mem_len,
		    const struct keel_chaos_config *cfg)
{
	struct layout l;
	struct chaos *c;
	uint8_t *base;
	uint64_t x;
	uint32_t i;

	KEEL_ASSERT(out != NULL);
	*out = NULL;
	if (!config_valid(cfg))
		return -EINVAL;
	if (mem == NULL || mem_len < keel_chaos_storage_size(cfg))
		return -ENOSPC;
	layout_compute(cfg, &l);
	base = (uint8_t *)align_up((uintptr_t)mem);
	c = (struct chaos *)base;
	memset(c, 0, sizeof(*c));
	c->inner = cfg->inner;
	c->cfg = *cfg;
	c->slots = (struct hold_slot *)(base + l.slots);
	c->free_list = (uint32_t *)(base + l.free_list);
	c->heap = (uint32_t *)(base + l.heap);
	c->reorder = (uint32_t *)(base + l.reorder);
	c->data = base + l.data;
	/* Popped from the top: slot 0 first, so slot use is part of the replay too. */
	for (i = 0; i < cfg->hold_max; i++)
		c->free_list[i] = cfg->hold_max - 1 - i;
	c->free_count = cfg->hold_max;
	x = cfg->seed;
	for (i = 0; i < 4; i++)
		c->rng[i] = splitmix64(&x);
	c->t = (struct keel_transport){
	    .ops = &chaos_ops,
	    .state = c,
	    .caps = cfg->inner->caps & ~CAPS_BROKEN,
	    .mtu = cfg->inner->mtu,
	    .rank = cfg->inner->rank,
	    .world_size = cfg->inner->world_size,
	};
	*out = &c->t;
	return 0;
}

static struct chaos *chaos_of(struct keel_transport *t)
{
	KEEL_ASSERT(t != NULL && t->ops == &chaos_ops && t->state != NULL);
	return t->state;
}

static bool peer_is_cut(const struct chaos *c, uint32_t peer)
{
	return peer < KEEL_WORLD_MAX && (c->cut[peer / 64] >> (peer % 64) & 1u);
}

/* What we send `peer` is dropped: the link is cut both ways, or this way only. */
static bool send_is_cut(const struct chaos *c, uint32_t peer)
{
	return peer_is_cut(c, peer) ||
	       (peer < KEEL_WORLD_MAX && (c->cut_tx[peer / 64] >> (peer % 64) & 1u));
}

static int set_cut(struct keel_transport *t, uint64_t *bits, uint32_t peer, bool cut)
{
	uint64_t bit;

	if (peer >= t->world_size)
		return -EINVAL;
	bit = (uint64_t)1 << (peer % 64);
	if (cut)
		bits[peer / 64] |= bit;
	else
		bits[peer / 64] &= ~bit;
	return 0;
}

int keel_chaos_cut(struct keel_transport *t, uint32_t peer, bool cut)
{
	return set_cut(t, chaos_of(t)->cut, peer, cut);
}

int keel_chaos_cut_send(struct keel_transport *t, uint32_t peer, bool cut)
{
	return set_cut(t, chaos_of(t)->cut_tx, peer, cut);
}

void keel_chaos_stats_get(struct keel_transport *t, struct keel_chaos_stats *out)
{
	struct chaos *c = chaos_of(t);

	KEEL_ASSERT(out != NULL);
	*out = c->stats;
}

/* Heap order: earlier release first, then earlier hold. */
static bool slot_before(const struct chaos *c, uint32_t a, uint32_t b)
{
	const struct hold_slot *x = &c->slots[a], *y = &c->slots[b];

	return x->release_ns < y->release_ns || (x->release_ns == y->release_ns && x->seq < y->seq);
}

static void heap_swap(struct chaos *c, uint32_t i, uint32_t j)
{
	uint32_t tmp = c->heap[i];

	c->heap[i] = c->heap[j];
	c->heap[j] = tmp;
}

static void heap_push(struct chaos *c, uint32_t slot)
{
	uint32_t i = c->heap_count++;

	KEEL_ASSERT(c->heap_count <= c->cfg.hold_max);
	c->heap[i] = slot;
	while (i > 0 && slot_before(c, c->heap[i], c->heap[(i - 1) / 2])) {
		heap_swap(c, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static uint32_t heap_pop(struct chaos *c)
{
	uint32_t top = c->heap[0], i = 0;

	KEEL_ASSERT(c->heap_count > 0);
	c->heap[0] = c->heap[--c->heap_count];
	for (;;) { /* descends one level per pass: at most log2(hold_max) passes */
		uint32_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < c->heap_count && slot_before(c, c->heap[l], c->heap[m]))
			m = l;
		if (r < c->heap_count && slot_before(c, c->heap[r], c->heap[m]))
			m = r;
		if (m == i)
			break;
		heap_swap(c, i, m);
		i = m;
	}
	return top;
}

static void slot_free(struct chaos *c, uint32_t slot)
{
	KEEL_ASSERT(slot < c->cfg.hold_max && c->free_count < c->cfg.hold_max);
	c->free_list[c->free_count++] = slot;
}

/* Copy g into a free slot; NONE when every slot is taken. */
static uint32_t slot_hold(struct chaos *c, const struct keel_datagram *g, uint64_t release_ns)
{
	struct hold_slot *s;
	uint32_t slot;

	if (c->free_count == 0)
		return NONE;
	slot = c->free_list[--c->free_count];
	s = &c->slots[slot];
	s->release_ns = release_ns;
	s->seq = c->seq_next++;
	s->peer = g->peer;
	s->len = g->len + g->tail_len; /* datagram_valid: within the mtu */
	s->flags = g->flags;
	if (g->len > 0)
		memcpy(c->data + (size_t)slot * c->t.mtu, g->buf, g->len);
	if (g->tail_len > 0) /* a tail is held whole: its owner may write it once this returns */
		memcpy(c->data + (size_t)slot * c->t.mtu + g->len, g->tail, g->tail_len);
	return slot;
}

/* Hand the batch to the inner transport and settle every entry. Returns the inner's error, or
 * how many entries did not go out (0: all did). *refused is the lowest caller index whose
 * carrying copy did not go out, or NONE. Held copies that did not go out return to the heap
 * for a later call; extra duplicate copies that did not go out are lost. Each pass settles at
 * least one entry or stops, so it makes at most out_count + 1 inner calls. */
static int flush(struct chaos *c, uint64_t now_ns, uint32_t *refused)
{
	uint32_t base = 0, j;
	int err = 0;

	*refused = NONE;
	while (base < c->out_count) {
		uint32_t n = c->out_count - base;
		int r = c->inner->ops->send_burst(c->inner, now_ns, c->out + base, n);

		if (r == -EINVAL && c->meta[base].caller_idx == NONE) {
			/* A copy of ours the inner will never take (say its peer was never set):
			 * dropping it keeps it from clogging the hold. */
			if (c->meta[base].slot != NONE)
				slot_free(c, c->meta[base].slot);
			base++;
			continue;
		}
		if (r < 0) {
			err = r;
			break;
		}
		KEEL_ASSERT((uint32_t)r <= n);
		for (j = base; j < base + (uint32_t)r; j++) {
			if (c->meta[j].slot != NONE)
				slot_free(c, c->meta[j].slot);
			else
				c->stats.passed++;
		}
		base += (uint32_t)r;
		if ((uint32_t)r < n)
			break;
	}
	for (j = base; j < c->out_count; j++) {
		if (c->meta[j].slot != NONE)
			heap_push(c, c->meta[j].slot);
		if (c->meta[j].caller_idx < *refused)
			*refused = c->meta[j].caller_idx;
	}
	j = c->out_count - base;
	c->out_count = 0;
	return err < 0 ? err : (int)j;
}

static int flush_if_any(struct chaos *c, uint64_t now_ns, uint32_t *refused)
{
	*refused = NONE;
	return c->out_count > 0 ? flush(c, now_ns, refused) : 0;
}

static void out_append(struct chaos *c, const struct keel_datagram *g, uint32_t caller_idx,
		       uint32_t slot)
{
	KEEL_ASSERT(c->out_count < OUT_MAX);
	c->out[c->out_count] = *g;
	c->meta[c->out_count].caller_idx = caller_idx;
	c->meta[c->out_count].slot = slot;
	c->out_count++;
}

/* Append a held slot to the batch, or drop it if its peer was cut meanwhile. A full batch is
 * flushed first; if that flush could not send everything the slot goes back to the heap and
 * the flush's result is returned. */
static int out_append_slot(struct chaos *c, uint64_t now_ns, uint32_t slot, uint32_t *refused)
{
	const struct hold_slot *s = &c->slots[slot];
	int r = 0;

	*refused = NONE;
	if (send_is_cut(c, s->peer)) {
		c->stats.cut_dropped++;
		slot_free(c, slot);
		return 0;
	}
	if (c->out_count == OUT_MAX) {
		r = flush(c, now_ns, refused);
		if (r != 0) {
			heap_push(c, slot);
			return r;
		}
	}
	out_append(c,
		   &(struct keel_datagram){.buf = c->data + (size_t)slot * c->t.mtu,
					   .len = s->len,
					   .cap = s->len,
					   .peer = s->peer,
					   .flags = s->flags},
		   NONE, slot);
	return 0;
}

/* Datagrams held for reorder go out right behind the next one sent. Stops when the inner is
 * full; what is left waits in the heap (already due) for the next call. */
static int release_reordered(struct chaos *c, uint64_t now_ns, uint32_t *refused)
{
	uint32_t k;
	int r = 0;

	*refused = NONE;
	for (k = 0; k < c->reorder_count && r == 0; k++)
		r = out_append_slot(c, now_ns, c->reorder[k], refused);
	for (; k < c->reorder_count; k++)
		heap_push(c, c->reorder[k]);
	c->reorder_count = 0;
	return r;
}

/* At the start of each call: everything an earlier call held for reorder, then every delayed
 * datagram now due, oldest first, until the inner is full. At most hold_max are released. */
static int release_due(struct chaos *c, uint64_t now_ns)
{
	uint32_t refused, released = 0;
	int r;

	KEEL_ASSERT(c->out_count == 0);
	r = release_reordered(c, now_ns, &refused);
	while (r == 0 && c->heap_count > 0 && released < c->cfg.hold_max &&
	       c->slots[c->heap[0]].release_ns <= now_ns) {
		r = out_append_slot(c, now_ns, heap_pop(c), &refused);
		released++;
	}
	if (r == 0)
		r = flush_if_any(c, now_ns, &refused);
	KEEL_ASSERT(c->out_count == 0 && refused == NONE);
	return r < 0 ? r : 0;
}

/* Hold a copy of g for reorder or delay. Returns false when no slot is free. */
static bool hold_copy(struct chaos *c, uint64_t now_ns, const struct keel_datagram *g, bool reorder)
{
	uint64_t release_ns = now_ns, delay_ns;
	uint32_t slot;

	if (!reorder) {
		delay_ns = rng_upto(c, c->cfg.delay_ns_max);
		/* UINT64_MAX means "no deadline" to next_deadline_ns's callers. */
		release_ns =
		    delay_ns < UINT64_MAX - 1 - now_ns ? now_ns + delay_ns : UINT64_MAX - 1;
	}
	slot = slot_hold(c, g, release_ns);
	if (slot == NONE) {
		c->stats.hold_full++;
		return false;
	}
	if (reorder) {
		c->reorder[c->reorder_count++] = slot;
		c->stats.reordered++;
	} else {
		heap_push(c, slot);
		c->stats.delayed++;
	}
	return true;
}

static bool must_stop(int r, uint32_t refused)
{
	return r < 0 || refused != NONE;
}

/* Decide the fate of caller datagram g = d[idx] and act on it. Anything that consumes it for
 * good (drop, hold) first flushes the batch, so that if the inner refuses an earlier
 * datagram, nothing after it has been consumed and the caller can retry from there.
 * Returns an inner error, or 0 with *refused set when such a refusal ended the burst. */
static int send_one(struct chaos *c, uint64_t now_ns, const struct keel_datagram *g, uint32_t idx,
		    uint32_t *refused)
{
	bool cut = send_is_cut(c, g->peer), consumed = false;
	uint32_t copies = 1, k;
	int r;

	if (cut || roll_ppm(c, c->cfg.drop_ppm)) {
		r = flush_if_any(c, now_ns, refused);
		if (must_stop(r, *refused))
			return r;
		if (cut)
			c->stats.cut_dropped++;
		else
			c->stats.dropped++;
		return 0;
	}
	if (roll_ppm(c, c->cfg.dup_ppm)) {
		copies = 2;
		c->stats.duplicated++;
	}
	for (k = 0; k < copies; k++) {
		bool reorder = roll_ppm(c, c->cfg.reorder_ppm);

		if (reorder || c->cfg.delay_ns_max > 0) {
			r = flush_if_any(c, now_ns, refused);
			if (must_stop(r, *refused))
				return r;
			if (hold_copy(c, now_ns, g, reorder)) {
				consumed = true;
				continue;
			}
		}
		if (c->out_count == OUT_MAX) {
			r = flush(c, now_ns, refused);
			if (must_stop(r, *refused))
				return r;
		}
		/* The first copy appended carries acceptance unless a held copy already did. */
		out_append(c, g, consumed ? NONE : idx, NONE);
		consumed = true;
		r = release_reordered(c, now_ns, refused);
		if (must_stop(r, *refused))
			return r;
	}
	*refused = NONE;
	return 0;
}

static bool datagram_valid(const struct keel_transport *t, const struct keel_datagram *g)
{
	return g->peer < t->world_size && keel_datagram_fits(g, t->mtu);
}

static int chaos_send_burst(struct keel_transport *t, uint64_t now_ns,
			    const struct keel_datagram *d, uint32_t count)
{
	struct chaos *c = chaos_of(t);
	uint32_t i, refused = NONE;
	bool invalid = false;
	int r;

	KEEL_ASSERT(d != NULL || count == 0);
	KEEL_ASSERT(count <= INT32_MAX);
	r = release_due(c, now_ns);
	if (r < 0)
		return r;
	for (i = 0; i < count; i++) {
		if (!datagram_valid(t, &d[i])) {
			invalid = true;
			break;
		}
		r = send_one(c, now_ns, &d[i], i, &refused);
		if (must_stop(r, refused))
			break;
	}
	if (!must_stop(r, refused))
		r = flush_if_any(c, now_ns, &refused);
	KEEL_ASSERT(c->out_count == 0);
	if (refused != NONE)
		i = refused;
	if (i > 0)
		return (int)i;
	if (r < 0)
		return r;
	return invalid ? -EINVAL : 0;
}

static int chaos_recv_burst(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
			    uint32_t count_max)
{
	struct chaos *c = chaos_of(t);
	uint32_t i, kept = 0;
	int r;

	KEEL_ASSERT(d != NULL || count_max == 0);
	r = release_due(c, now_ns);
	if (r < 0)
		return r;
	r = c->inner->ops->recv_burst(c->inner, now_ns, d, count_max);
	if (r <= 0)
		return r;
	KEEL_ASSERT((uint32_t)r <= count_max);
	for (i = 0; i < (uint32_t)r; i++) {
		if (peer_is_cut(c, d[i].peer)) {
			c->stats.cut_dropped++;
			if ((d[i].flags & KEEL_DGRAM_DEVICE_TAIL) != 0)
				c->inner->ops->rx_release(c->inner, d[i].peer, d[i].tail);
			continue;
		}
		/* this layer may have changed its bytes on the way: no end-to-end check holds */
		d[i].flags &= ~(uint32_t)KEEL_DGRAM_LINK_CHECKED;
		/* Close the gap by exchanging buffers, as the inner backends do. */
		if (kept != i) {
			struct keel_datagram tmp = d[kept];

			d[kept] = d[i];
			d[i] = tmp;
		}
		kept++;
	}
	return (int)kept;
}

static void chaos_rx_release(struct keel_transport *t, uint32_t peer, const void *tail)
{
	struct chaos *c = chaos_of(t);
	if (c->inner->ops->rx_release != NULL)
		c->inner->ops->rx_release(c->inner, peer, tail);
}

static uint64_t chaos_next_deadline_ns(struct keel_transport *t)
{
	struct chaos *c = chaos_of(t);
	uint64_t d = UINT64_MAX;

	if (c->reorder_count > 0)
		d = c->slots[c->reorder[0]].release_ns;
	if (c->heap_count > 0 && c->slots[c->heap[0]].release_ns < d)
		d = c->slots[c->heap[0]].release_ns;
	if (c->inner->ops->next_deadline_ns != NULL) {
		uint64_t in = c->inner->ops->next_deadline_ns(c->inner);

		if (in < d)
			d = in;
	}
	return d;
}

/* The inner's way to the peer (a router's route), less what the decorator breaks. */
static uint32_t chaos_peer_caps(struct keel_transport *t, uint32_t peer)
{
	struct chaos *c = chaos_of(t);

	return keel_transport_peer_caps(c->inner, peer) & ~CAPS_BROKEN;
}

static int chaos_wait_fd(struct keel_transport *t)
{
	struct chaos *c = chaos_of(t);

	return c->inner->ops->wait_fd != NULL ? c->inner->ops->wait_fd(c->inner) : -1;
}

/* The inner transport may hold input its descriptor does not show (the rest of a coalesced
 * UDP run; a shared-memory ring that wants its doorbell asked for): a waiter about to sleep
 * asks it through here. */
static bool chaos_arm_wait(struct keel_transport *t)
{
	struct chaos *c = chaos_of(t);

	return c->inner->ops->arm_wait == NULL || c->inner->ops->arm_wait(c->inner);
}

/* Held datagrams are forgotten; the inner transport is the caller's and stays open. */
static void chaos_fini(struct keel_transport *t)
{
	struct chaos *c;
	uint32_t i;

	if (t == NULL)
		return; /* a failed init leaves *out NULL */
	c = chaos_of(t);
	c->heap_count = 0;
	c->reorder_count = 0;
	c->out_count = 0;
	for (i = 0; i < c->cfg.hold_max; i++)
		c->free_list[i] = c->cfg.hold_max - 1 - i;
	c->free_count = c->cfg.hold_max;
}

static const struct keel_transport_ops chaos_ops = {
    .name = "chaos",
    .send_burst = chaos_send_burst,
    .recv_burst = chaos_recv_burst,
    .next_deadline_ns = chaos_next_deadline_ns,
    .wait_fd = chaos_wait_fd,
    .fini = chaos_fini,
    .arm_wait = chaos_arm_wait,
    .peer_caps = chaos_peer_caps,
    .rx_release = chaos_rx_release,
};
