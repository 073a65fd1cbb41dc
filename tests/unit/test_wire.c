/* Unit tests for the wire format (runtime/core/wire.c), CRC32C (runtime/base/crc32c.c) and
 * keel_strerror (runtime/core/errors.c). The mutation test is seeded: it prints its seed first
 * and SEED=n replays one run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the four above, which it needs; own block so it stays last */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel/errors.h"
#include "wire_int.h"

#define JOB   0x0badcafeu
#define EPOCH 7u
#define SELF  1u
#define PEER  2u
#define WORLD 4u

#define BUF_MAX (WIRE_HEADER_SIZE + 9000u)

static uint64_t test_seed;

static const struct wire_expect expect_default = {
    .job_id = JOB,
    .epoch = EPOCH,
    .self = SELF,
    .world_size = WORLD,
    .transport_src = PEER,
};

/* A valid header of the given type from PEER to SELF; DATA fragments sit at offset 100 of a
 * 20000-byte message. */
static struct wire_header make_header(enum wire_type type, uint32_t payload_len)
{
	struct wire_header h = {
	    .magic = WIRE_MAGIC,
	    .version = WIRE_VERSION,
	    .type = (uint8_t)type,
	    .job_id = JOB,
	    .epoch = EPOCH,
	    .src = PEER,
	    .dst = SELF,
	    .ack = 41,
	    .sack = 0x5u,
	    .payload_len = payload_len,
	};

	if (type == WIRE_DATA) {
		h.seq = 42;
		h.op_id = 9;
		h.step = 3;
		h.offset = 100;
		h.total_len = 20000;
	}
	return h;
}

static void fill_pattern(uint8_t *p, size_t len, uint32_t salt)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 131u + salt);
}

/* Payload already at buf + header; encodes h in front of it; returns the datagram length. */
static size_t encode(uint8_t *buf, const struct wire_header *h)
{
	wire_encode(buf, h);
	return WIRE_HEADER_SIZE + h->payload_len;
}

/* A valid datagram of the given type with a patterned payload. */
static size_t make_datagram(uint8_t *buf, enum wire_type type, uint32_t payload_len)
{
	struct wire_header h = make_header(type, payload_len);

	if (type == WIRE_HEARTBEAT) {
		struct wire_heartbeat hb = {.send_ns = 1000, .echo_ns = 900, .echo_held_ns = 50};

		wire_heartbeat_encode(buf + WIRE_HEADER_SIZE, &hb);
	} else {
		fill_pattern(buf + WIRE_HEADER_SIZE, payload_len, 17);
	}
	return encode(buf, &h);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Recompute the CRC (offset 52) after the test edited bytes, so later checks are reached. */
static void fix_crc(uint8_t *buf, size_t len)
{
	static const uint8_t zero[4];
	uint32_t crc;

	crc = crc32c(0, buf, 52);
	crc = crc32c(crc, zero, 4);
	crc = crc32c(crc, buf + WIRE_HEADER_SIZE, len - WIRE_HEADER_SIZE);
	wr32(buf + 52, crc);
}

static enum wire_verdict decode(const uint8_t *buf, size_t len)
{
	struct wire_header h;

	return wire_decode(buf, len, &expect_default, &h);
}

/* Encode h over a patterned payload and decode it against `exp`. */
static enum wire_verdict encode_decode(const struct wire_header *h, const struct wire_expect *exp)
{
	uint8_t buf[BUF_MAX];
	struct wire_header out;
	size_t len;

	assert_true(h->payload_len <= BUF_MAX - WIRE_HEADER_SIZE);
	fill_pattern(buf + WIRE_HEADER_SIZE, h->payload_len, 3);
	len = encode(buf, h);
	return wire_decode(buf, len, exp, &out);
}

static void assert_headers_equal(const struct wire_header *a, const struct wire_header *b)
{
	assert_int_equal(a->magic, b->magic);
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->type, b->type);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->job_id, b->job_id);
	assert_int_equal(a->epoch, b->epoch);
	assert_int_equal(a->src, b->src);
	assert_int_equal(a->dst, b->dst);
	assert_int_equal(a->seq, b->seq);
	assert_int_equal(a->ack, b->ack);
	assert_int_equal(a->sack, b->sack);
	assert_int_equal(a->op_id, b->op_id);
	assert_int_equal(a->step, b->step);
	assert_int_equal(a->wnd, b->wnd);
	assert_int_equal(a->offset, b->offset);
	assert_int_equal(a->total_len, b->total_len);
	assert_int_equal(a->payload_len, b->payload_len);
}

/* ---- round trips ---- */

static void test_wire_roundtrip_heartbeat(void **state)
{
	(void)state;
	uint8_t buf[BUF_MAX];
	struct wire_header h = make_header(WIRE_HEARTBEAT, WIRE_HEARTBEAT_SIZE), out;
	struct wire_heartbeat hb = {
	    .send_ns = 0x0123456789abcdefull,
	    .echo_ns = UINT64_MAX,
	    .echo_held_ns = 0x8000000000000001ull,
	};
	struct wire_heartbeat hb_out;
	size_t len;

	h.flags = 0xa585; /* not WIRE_FLAG_HEADER_CRC (0x20): this datagram's CRC covers all */
	h.ack = 0xffffffffu;
	h.sack = 0x80000001u;
	wire_heartbeat_encode(buf + WIRE_HEADER_SIZE, &hb);
	len = encode(buf, &h);
	assert_int_equal(len, WIRE_HEADER_SIZE + WIRE_HEARTBEAT_SIZE);
	assert_int_equal(wire_decode(buf, len, &expect_default, &out), WIRE_OK);
	assert_headers_equal(&h, &out);
	assert_int_equal(out.crc, rd32(buf + 52));
	wire_heartbeat_decode(buf + WIRE_HEADER_SIZE, &hb_out);
	assert_true(hb_out.send_ns == hb.send_ns);
	assert_true(hb_out.echo_ns == hb.echo_ns);
	assert_true(hb_out.echo_held_ns == hb.echo_held_ns);
}

static void test_wire_roundtrip_ack(void **state)
{
	(void)state;
	uint8_t buf[BUF_MAX];
	struct wire_header h = make_header(WIRE_ACK, 0), out;
	size_t len;

	h.ack = 123456;
	h.sack = 0xdeadbeefu;
	len = encode(buf, &h);
	assert_int_equal(len, WIRE_HEADER_SIZE);
	assert_int_equal(wire_decode(buf, len, &expect_default, &out), WIRE_OK);
	assert_headers_equal(&h, &out);
}

static void test_wire_roundtrip_leave(void **state)
{
	(void)state;
	uint8_t buf[BUF_MAX];
	struct wire_header h = make_header(WIRE_LEAVE, 0), out;

	h.op_id = 777; /* collectives the leaver completed */
	size_t len = encode(buf, &h);
	assert_int_equal(len, WIRE_HEADER_SIZE);
	assert_int_equal(wire_decode(buf, len, &expect_default, &out), WIRE_OK);
	assert_headers_equal(&h, &out);
}

static void test_wire_leave_shape_wrong(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_LEAVE, 4);

	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
	h = make_header(WIRE_LEAVE, 0);
	h.seq = 5;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
}

static void test_wire_roundtrip_data(void **state)
{
	(void)state;
	static const uint32_t sizes[] = {0, 1, 7, 8, 55, 56, 1000, 1472, 9000};
	uint8_t buf[BUF_MAX], want[9000];

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct wire_header h = make_header(WIRE_DATA, sizes[i]), out;
		size_t len;

		h.flags = WIRE_FLAG_RETRANSMIT;
		h.seq = 0xfffffff0u + (uint32_t)i;
		h.op_id = 0x01020304u;
		h.step = 0xfedc;
		h.offset = 5000;
		h.total_len = 5000 + sizes[i] + (uint32_t)i;
		fill_pattern(want, sizes[i], (uint32_t)i);
		memcpy(buf + WIRE_HEADER_SIZE, want, sizes[i]);
		len = encode(buf, &h);
		assert_int_equal(wire_decode(buf, len, &expect_default, &out), WIRE_OK);
		assert_headers_equal(&h, &out);
		assert_memory_equal(buf + WIRE_HEADER_SIZE, want, sizes[i]);
	}
}

/* A fragment may end exactly at total_len, also at the top of the 32-bit range. */
static void test_wire_data_fragment_edges_accepted(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_DATA, 64);

	h.offset = 0;
	h.total_len = 64;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_OK);
	h.offset = UINT32_MAX - 64;
	h.total_len = UINT32_MAX;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_OK);
	h.payload_len = 0;
	h.offset = UINT32_MAX;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_OK);
}

/* The bytes on the wire, field by field: pins the layout and the byte order. */
static void test_wire_layout_fixed_offsets(void **state)
{
	(void)state;
	static const uint8_t want[52] = {
	    'K',  'E',	'E',  'L',  /* magic */
	    8,			    /* version */
	    3,			    /* type */
	    0x04, 0x01,		    /* flags 0x0104 (not WIRE_FLAG_AUTH: the CRC is pinned below) */
	    0x14, 0x13, 0x12, 0x11, /* job 0x11121314 */
	    0x24, 0x23, 0x22, 0x21, /* epoch */
	    0x02, 0x00,		    /* src */
	    0x01, 0x00,		    /* dst */
	    0x34, 0x33, 0x32, 0x31, /* seq */
	    0x44, 0x43, 0x42, 0x41, /* ack */
	    0x54, 0x53, 0x52, 0x51, /* sack */
	    0x64, 0x63, 0x62, 0x61, /* op_id */
	    0x72, 0x71,		    /* step */
	    0x82, 0x81,		    /* wnd */
	    0x04, 0x00, 0x00, 0x00, /* offset */
	    0x00, 0x00, 0x00, 0x01, /* total_len 0x01000000 */
	    0x04, 0x00, 0x00, 0x00, /* payload_len */
	};
	struct wire_header h = {
	    .magic = WIRE_MAGIC,
	    .version = WIRE_VERSION,
	    .type = WIRE_DATA,
	    .flags = 0x0104,
	    .job_id = 0x11121314u,
	    .epoch = 0x21222324u,
	    .src = 2,
	    .dst = 1,
	    .seq = 0x31323334u,
	    .ack = 0x41424344u,
	    .sack = 0x51525354u,
	    .op_id = 0x61626364u,
	    .step = 0x7172,
	    .wnd = 0x8182,
	    .offset = 4,
	    .total_len = 0x01000000u,
	    .payload_len = 4,
	};
	uint8_t buf[WIRE_HEADER_SIZE + 4] = {0};
	uint8_t zeroed[WIRE_HEADER_SIZE + 4];

	memcpy(buf + WIRE_HEADER_SIZE, "abcd", 4);
	encode(buf, &h);
	assert_memory_equal(buf, want, sizeof(want));
	memcpy(zeroed, buf, sizeof(zeroed));
	memset(zeroed + 52, 0, 4);
	assert_int_equal(rd32(buf + 52), crc32c(0, zeroed, sizeof(zeroed)));
}

/* Encoding ignores h->crc and does not depend on what the buffer held before. */
static void test_wire_encode_ignores_crc_field_and_old_bytes(void **state)
{
	(void)state;
	uint8_t a[WIRE_HEADER_SIZE], b[WIRE_HEADER_SIZE];
	struct wire_header h = make_header(WIRE_ACK, 0);

	memset(a, 0x00, sizeof(a));
	memset(b, 0xff, sizeof(b));
	h.crc = 0;
	encode(a, &h);
	h.crc = 0x12345678u;
	encode(b, &h);
	assert_memory_equal(a, b, sizeof(a));
}

static void test_wire_heartbeat_payload_little_endian(void **state)
{
	(void)state;
	struct wire_heartbeat hb = {
	    .send_ns = 0x0807060504030201ull,
	    .echo_ns = 0x1817161514131211ull,
	    .echo_held_ns = 0x2827262524232221ull,
	    .incarnation = 0x34333231u,
	    .flags = 0x44434241u,
	    .ops_started = 0x54535251u,
	};
	uint8_t p[WIRE_HEARTBEAT_SIZE];

	wire_heartbeat_encode(p, &hb);
	for (unsigned i = 0; i < 8; i++) {
		assert_int_equal(p[i], 0x01 + i);
		assert_int_equal(p[8 + i], 0x11 + i);
		assert_int_equal(p[16 + i], 0x21 + i);
	}
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(p[24 + i], 0x31 + i);
		assert_int_equal(p[28 + i], 0x41 + i);
		assert_int_equal(p[32 + i], 0x51 + i);
	}
	struct wire_heartbeat back;
	wire_heartbeat_decode(p, &back);
	assert_int_equal(back.ops_started, hb.ops_started);
	assert_int_equal(back.flags, hb.flags);
}

/* ---- size, magic, version, type ---- */

static void test_wire_truncated(void **state)
{
	(void)state;
	uint8_t buf[BUF_MAX];
	struct wire_header h;

	make_datagram(buf, WIRE_ACK, 0);
	assert_int_equal(wire_decode(NULL, 0, &expect_default, &h), WIRE_BAD_TRUNCATED);
	for (size_t len = 0; len < WIRE_HEADER_SIZE; len++)
		assert_int_equal(decode(buf, len), WIRE_BAD_TRUNCATED);
	assert_int_equal(decode(buf, 55), WIRE_BAD_TRUNCATED);
	assert_int_equal(decode(buf, 56), WIRE_OK);
}

static void test_wire_bad_magic(void **state)
{
	(void)state;
	uint8_t buf[BUF_MAX];
	size_t len = make_datagram(buf, WIRE_ACK, 0);
	struct wire_header h = make_header(WIRE_ACK, 0);

	for (unsigned bit = 0; bit < 32; bit++) {
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		assert_int_equal(decode(buf, len), WIRE_BAD_MAGIC);
		fix_crc(buf, len);
		assert_int_equal(decode(buf, len), WIRE_BAD_MAGIC);
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		fix_crc(buf, len);
	}
	h.magic = 0x4b45454cu; /* "KEEL" in the wrong byte order */
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_MAGIC);
}

static void test_wire_bad_version(void **state)
{
	(void)state;
	/* 2: before the MAC trailer; 3: before WIRE_FLAG_NO_CRC; 4: every keyed datagram sealed
	 * (a peer of 4 would drop this version's unsealed ones through shared memory); 5: every
	 * result waited for every member (a peer of 5 would ignore a result a view carries); 6:
	 * no CRC over the header alone (a peer of 6 would drop device payloads as damaged); 7:
	 * no group operations (a peer of 7 would take a group's data for its own AllReduce) */
	static const uint8_t versions[] = {0, 1, 2, 3, 4, 5, 6, 7, 9, 0x81, 255};
	struct wire_header h = make_header(WIRE_ACK, 0);

	for (size_t i = 0; i < sizeof(versions); i++) {
		h.version = versions[i];
		assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_VERSION);
	}
}

static void test_wire_bad_type(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_ACK, 0);

	h.type = 0;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_TYPE);
	for (unsigned t = WIRE_TYPE_MAX + 1; t <= 255; t++) {
		h.type = (uint8_t)t;
		assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_TYPE);
	}
}

/* ---- lengths and header shape (all WIRE_BAD_LENGTH) ---- */

static void test_wire_payload_len_mismatch(void **state)
{
	(void)state;
	uint8_t buf[BUF_MAX];
	size_t len = make_datagram(buf, WIRE_DATA, 100);

	/* Datagram one byte longer, and one byte shorter, than payload_len says. */
	assert_int_equal(decode(buf, len + 1), WIRE_BAD_LENGTH);
	assert_int_equal(decode(buf, len - 1), WIRE_BAD_LENGTH);
	assert_int_equal(decode(buf, WIRE_HEADER_SIZE), WIRE_BAD_LENGTH);
	/* The field itself too big or too small, with a CRC that matches. */
	wr32(buf + 48, 101);
	fix_crc(buf, len);
	assert_int_equal(decode(buf, len), WIRE_BAD_LENGTH);
	wr32(buf + 48, 99);
	fix_crc(buf, len);
	assert_int_equal(decode(buf, len), WIRE_BAD_LENGTH);
	wr32(buf + 48, UINT32_MAX);
	fix_crc(buf, len);
	assert_int_equal(decode(buf, len), WIRE_BAD_LENGTH);
	wr32(buf + 48, 100);
	fix_crc(buf, len);
	assert_int_equal(decode(buf, len), WIRE_OK);
}

static void test_wire_fragment_outside_total_len(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_DATA, 16);

	h.offset = 0;
	h.total_len = 15;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
	h.offset = 1;
	h.total_len = 16;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
	h.offset = 17;
	h.total_len = 16;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
	/* Values whose 32-bit sum wraps to something inside total_len. */
	h.offset = UINT32_MAX;
	h.total_len = 100;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
	h.offset = UINT32_MAX - 7;
	h.total_len = UINT32_MAX;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
	h.offset = 0x80000000u;
	h.total_len = 0x80000000u;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
	h.payload_len = 0;
	h.offset = 1;
	h.total_len = 0;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
}

static void test_wire_data_seq_zero(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_DATA, 8);

	h.seq = 0;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
}

static void test_wire_heartbeat_size_wrong(void **state)
{
	(void)state;
	static const uint32_t sizes[] = {0, 1, WIRE_HEARTBEAT_SIZE - 1, WIRE_HEARTBEAT_SIZE + 1,
					 48};
	struct wire_header h;

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		h = make_header(WIRE_HEARTBEAT, sizes[i]);
		assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
	}
	h = make_header(WIRE_HEARTBEAT, WIRE_HEARTBEAT_SIZE);
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_OK);
	h.seq = 1;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
}

static void test_wire_ack_shape_wrong(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_ACK, 1);

	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
	h = make_header(WIRE_ACK, 0);
	h.seq = 5;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
}

/* wnd is flow-control data, not shape: every value is accepted on every type. */
static void test_wire_wnd_any_value_accepted(void **state)
{
	(void)state;
	static const enum wire_type types[] = {WIRE_HEARTBEAT, WIRE_ACK, WIRE_DATA, WIRE_LEAVE};
	static const uint32_t payload[] = {WIRE_HEARTBEAT_SIZE, 0, 32, 0};
	static const uint16_t wnds[] = {0, 1, 0x8000, UINT16_MAX};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		for (size_t k = 0; k < sizeof(wnds) / sizeof(wnds[0]); k++) {
			struct wire_header h = make_header(types[i], payload[i]);

			h.wnd = wnds[k];
			assert_int_equal(encode_decode(&h, &expect_default), WIRE_OK);
		}
	}
}

/* ---- crc ---- */

/* Flipping any bit of a field that is only checked after the CRC gives WIRE_BAD_CRC. */
static void test_wire_bad_crc_header(void **state)
{
	(void)state;
	/* flags, job, epoch, src, dst, seq, ack, sack, op_id, step, wnd, crc. seq is 42, so no
	 * single flip makes it 0 (which would be a length verdict). */
	static const struct {
		unsigned off, size;
	} fields[] = {{6, 2},  {8, 4},	{12, 4}, {16, 2}, {18, 2}, {20, 4},
		      {24, 4}, {28, 4}, {32, 4}, {36, 2}, {38, 2}, {52, 4}};
	uint8_t buf[BUF_MAX];
	size_t len = make_datagram(buf, WIRE_DATA, 200);

	for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
		for (unsigned bit = 0; bit < 8 * fields[f].size; bit++) {
			uint8_t *p = buf + fields[f].off + bit / 8;
			uint8_t old = *p;

			*p ^= (uint8_t)(1u << (bit % 8));
			/* WIRE_FLAG_AUTH announces a trailer this datagram does not have */
			bool auth_flag = fields[f].off == 6 && bit == 1;
			assert_int_equal(decode(buf, len),
					 auth_flag ? WIRE_BAD_LENGTH : WIRE_BAD_CRC);
			*p = old;
		}
	}
	assert_int_equal(decode(buf, len), WIRE_OK);
}

/* WIRE_FLAG_NO_CRC: accepted only where the transport said the bytes came through memory;
 * wire_add_crc turns it into an ordinary datagram, in place. */
static void test_wire_no_crc_only_from_memory(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_DATA, 300), out;
	struct wire_expect intact = expect_default;
	uint8_t buf[BUF_MAX], copy[BUF_MAX];
	size_t len;

	intact.intact = true;
	h.flags |= WIRE_FLAG_NO_CRC;
	fill_pattern(buf + WIRE_HEADER_SIZE, h.payload_len, 5);
	len = encode(buf, &h);
	assert_true(wire_crc_left_out(buf));
	assert_int_equal(rd32(buf + 52), 0);
	assert_int_equal(wire_decode(buf, len, &intact, &out), WIRE_OK);
	assert_headers_equal(&h, &out);
	assert_int_equal(decode(buf, len), WIRE_BAD_CRC); /* off a wire: a damaged one */
	/* a crc field that is not 0 is not ours either */
	buf[53] ^= 1;
	assert_int_equal(wire_decode(buf, len, &intact, &out), WIRE_BAD_CRC);
	buf[53] ^= 1;

	memcpy(copy, buf, len);
	wire_add_crc(buf, NULL);
	assert_false(wire_crc_left_out(buf));
	assert_int_equal(decode(buf, len), WIRE_OK);
	assert_int_equal(wire_decode(buf, len, &intact, &out), WIRE_OK);
	assert_int_equal(out.flags, h.flags & ~WIRE_FLAG_NO_CRC);
	/* the same bytes as a datagram written with its CRC from the start */
	h.flags &= ~WIRE_FLAG_NO_CRC;
	encode(copy, &h);
	assert_memory_equal(buf, copy, len);
	wire_add_crc(buf, NULL); /* one with its CRC already: left alone */
	assert_memory_equal(buf, copy, len);
	/* and its payload is checked again */
	buf[WIRE_HEADER_SIZE + 7] ^= 4;
	assert_int_equal(wire_decode(buf, len, &intact, &out), WIRE_BAD_CRC);
}

/* WIRE_FLAG_HEADER_CRC (a payload the sender's NIC read from device memory): its CRC covers
 * the header alone, accepted only where the transport says the link checked every byte, and
 * never in a keyed job; wire_crc_whole makes it an ordinary datagram once the payload is in. */
static void test_wire_header_crc_only_from_checked_link(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_DATA, 700), out;
	struct wire_expect link = expect_default, intact = expect_default, keyed = expect_default;
	static struct auth_ctx key; /* never opened: the flag is refused before any MAC */
	uint8_t buf[BUF_MAX], whole[BUF_MAX];
	size_t len;

	link.link_checked = true;
	intact.intact = true;
	keyed.auth = &key;
	keyed.link_checked = true;
	h.flags |= WIRE_FLAG_HEADER_CRC;
	fill_pattern(buf + WIRE_HEADER_SIZE, h.payload_len, 3);
	len = encode(buf, &h);
	assert_false(wire_crc_left_out(buf));
	uint8_t head[WIRE_HEADER_SIZE];
	memcpy(head, buf, sizeof(head));
	memset(head + 52, 0, 4);
	assert_int_equal(rd32(buf + 52), crc32c(0, head, sizeof(head))); /* the header alone */
	assert_int_equal(wire_decode(buf, len, &link, &out), WIRE_OK);
	assert_headers_equal(&h, &out);
	assert_int_equal(decode(buf, len), WIRE_BAD_CRC);		      /* any other link */
	assert_int_equal(wire_decode(buf, len, &intact, &out), WIRE_BAD_CRC); /* memory too */
	assert_int_equal(wire_decode(buf, len, &keyed, &out), WIRE_BAD_AUTH);
	/* the payload is the link's to check; every bit of the header is still ours */
	buf[WIRE_HEADER_SIZE + 100] ^= 0x40;
	assert_int_equal(wire_decode(buf, len, &link, &out), WIRE_OK);
	buf[WIRE_HEADER_SIZE + 100] ^= 0x40;
	for (size_t i = 0; i < WIRE_HEADER_SIZE; i++) {
		for (unsigned bit = 0; bit < 8; bit++) {
			buf[i] ^= (uint8_t)(1u << bit);
			assert_int_not_equal(wire_decode(buf, len, &link, &out), WIRE_OK);
			buf[i] ^= (uint8_t)(1u << bit);
		}
	}
	/* with WIRE_FLAG_NO_CRC as well it is nobody's: refused */
	h.flags |= WIRE_FLAG_NO_CRC;
	len = encode(buf, &h);
	assert_int_equal(wire_decode(buf, len, &link, &out), WIRE_BAD_CRC);
	h.flags &= ~WIRE_FLAG_NO_CRC;

	/* the device copied the payload in: a CRC over all of it, as if written whole */
	len = encode(buf, &h);
	wire_crc_whole(buf);
	h.flags &= ~WIRE_FLAG_HEADER_CRC;
	memcpy(whole + WIRE_HEADER_SIZE, buf + WIRE_HEADER_SIZE, h.payload_len);
	encode(whole, &h);
	assert_memory_equal(buf, whole, len);
	assert_int_equal(decode(buf, len), WIRE_OK);
	buf[WIRE_HEADER_SIZE + 100] ^= 0x40;
	assert_int_equal(wire_decode(buf, len, &link, &out), WIRE_BAD_CRC);
}

/* A datagram whose payload the NIC wrote into device memory: the header alone is in buf, the
 * payload's length comes from the transport (detached). Accepted only as a data header with a
 * header-only CRC from a checked link, without a key, and with nothing after the header: a
 * peer that put payload bytes there too would have the core read past the detached payload. */
static void test_wire_detached_payload(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_DATA, 700), out;
	struct wire_expect link = expect_default, keyed = expect_default;
	static struct auth_ctx key;
	uint8_t buf[BUF_MAX];

	link.link_checked = true;
	link.detached = 700;
	keyed = link;
	keyed.auth = &key;
	h.flags |= WIRE_FLAG_HEADER_CRC;
	encode(buf, &h); /* the payload's bytes after the header are not passed on */
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &link, &out), WIRE_OK);
	assert_int_equal(out.payload_len, 700);
	/* the header and 100 payload bytes in buf, 600 detached: payload_len covers both */
	link.detached = 600;
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE + 100, &link, &out), WIRE_BAD_LENGTH);
	link.detached = 699; /* the transport's length and the header's disagree */
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &link, &out), WIRE_BAD_LENGTH);
	link.detached = 700;
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &keyed, &out), WIRE_BAD_AUTH);
	link.link_checked = false; /* through a layer that may change bytes */
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &link, &out), WIRE_BAD_CRC);
	link.link_checked = true;
	/* a full CRC covers bytes the CPU cannot read */
	h.flags &= ~WIRE_FLAG_HEADER_CRC;
	encode(buf, &h);
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &link, &out), WIRE_BAD_CRC);
	/* no other type has its payload in device memory */
	struct wire_header hb = make_header(WIRE_VIEW, WIRE_VIEW_MIN);
	hb.flags |= WIRE_FLAG_HEADER_CRC;
	link.detached = WIRE_VIEW_MIN;
	encode(buf, &hb);
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &link, &out), WIRE_BAD_LENGTH);
}

/* A datagram in two pieces (a header in the window, its payload borrowed from where it lies):
 * wire_add_crc over the header and the tail gives the bytes of the datagram written whole. */
static void test_wire_add_crc_over_tail(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_DATA, 777);
	uint8_t head[BUF_MAX], whole[BUF_MAX], tail[BUF_MAX];
	size_t len;

	h.flags |= WIRE_FLAG_NO_CRC;
	fill_pattern(tail, h.payload_len, 9);
	memset(head, 0xa5, sizeof(head)); /* what the window holds after the header: not read */
	encode(head, &h);
	wire_add_crc(head, tail);
	assert_false(wire_crc_left_out(head));
	h.flags &= ~WIRE_FLAG_NO_CRC;
	memcpy(whole + WIRE_HEADER_SIZE, tail, h.payload_len);
	len = encode(whole, &h);
	assert_memory_equal(head, whole, WIRE_HEADER_SIZE);
	/* the joined pieces pass the check; a bit off in the tail does not */
	memcpy(head + WIRE_HEADER_SIZE, tail, h.payload_len);
	assert_int_equal(decode(head, len), WIRE_OK);
	head[WIRE_HEADER_SIZE + 500] ^= 0x10;
	assert_int_equal(decode(head, len), WIRE_BAD_CRC);
}

static void test_wire_bad_crc_payload(void **state)
{
	(void)state;
	uint8_t buf[BUF_MAX];
	size_t len = make_datagram(buf, WIRE_DATA, 300);

	for (size_t i = WIRE_HEADER_SIZE; i < len; i++) {
		for (unsigned bit = 0; bit < 8; bit++) {
			buf[i] ^= (uint8_t)(1u << bit);
			assert_int_equal(decode(buf, len), WIRE_BAD_CRC);
			buf[i] ^= (uint8_t)(1u << bit);
		}
	}
	len = make_datagram(buf, WIRE_HEARTBEAT, WIRE_HEARTBEAT_SIZE);
	buf[len - 1] ^= 0x80;
	assert_int_equal(decode(buf, len), WIRE_BAD_CRC);
}

/* ---- job, destination, source, epoch ---- */

static void test_wire_wrong_job(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_ACK, 0);

	h.job_id = JOB + 1;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_JOB);
	h.job_id = 0;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_JOB);
}

static void test_wire_wrong_destination(void **state)
{
	(void)state;
	static const uint16_t dsts[] = {0, 2, 3, 4, UINT16_MAX};
	struct wire_header h = make_header(WIRE_DATA, 10);

	for (size_t i = 0; i < sizeof(dsts) / sizeof(dsts[0]); i++) {
		h.dst = dsts[i];
		assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_DESTINATION);
	}
}

static void test_wire_src_is_self(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_HEARTBEAT, WIRE_HEARTBEAT_SIZE);
	struct wire_expect exp = expect_default;

	h.src = SELF;
	assert_int_equal(encode_decode(&h, &exp), WIRE_BAD_SOURCE);
	exp.transport_src = SELF; /* even when the transport agrees */
	assert_int_equal(encode_decode(&h, &exp), WIRE_BAD_SOURCE);
	exp.transport_src = UINT32_MAX;
	assert_int_equal(encode_decode(&h, &exp), WIRE_BAD_SOURCE);
}

static void test_wire_src_outside_world(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_ACK, 0);
	struct wire_expect exp = expect_default;

	exp.transport_src = UINT32_MAX;
	h.src = WORLD;
	assert_int_equal(encode_decode(&h, &exp), WIRE_BAD_SOURCE);
	h.src = UINT16_MAX;
	assert_int_equal(encode_decode(&h, &exp), WIRE_BAD_SOURCE);
	exp.transport_src = WORLD; /* a transport that reports the same bad rank changes nothing */
	h.src = WORLD;
	assert_int_equal(encode_decode(&h, &exp), WIRE_BAD_SOURCE);
	h.src = WORLD - 1;
	exp.transport_src = WORLD - 1;
	assert_int_equal(encode_decode(&h, &exp), WIRE_OK);
}

static void test_wire_src_mismatches_transport(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_DATA, 10);
	struct wire_expect exp = expect_default;

	h.src = 3;
	assert_int_equal(encode_decode(&h, &exp), WIRE_BAD_SOURCE);
	h.src = 0;
	assert_int_equal(encode_decode(&h, &exp), WIRE_BAD_SOURCE);
	/* Unknown transport sender: any rank in the world but self is accepted. */
	exp.transport_src = UINT32_MAX;
	for (uint16_t src = 0; src < WORLD; src++) {
		h.src = src;
		assert_int_equal(encode_decode(&h, &exp), src == SELF ? WIRE_BAD_SOURCE : WIRE_OK);
	}
}

static void test_wire_wrong_epoch(void **state)
{
	(void)state;
	static const uint32_t epochs[] = {0, EPOCH - 1, EPOCH + 1, UINT32_MAX};

	/* reliable streams (DATA, ACK) belong to one view */
	for (size_t i = 0; i < sizeof(epochs) / sizeof(epochs[0]); i++) {
		struct wire_header d = make_header(WIRE_DATA, 16), a = make_header(WIRE_ACK, 0);
		d.epoch = a.epoch = epochs[i];
		assert_int_equal(encode_decode(&d, &expect_default), WIRE_BAD_EPOCH);
		assert_int_equal(encode_decode(&a, &expect_default), WIRE_BAD_EPOCH);
	}
	/* liveness and the membership protocol cross views: the node judges their epoch */
	for (size_t i = 0; i < sizeof(epochs) / sizeof(epochs[0]); i++) {
		struct wire_header hb = make_header(WIRE_HEARTBEAT, WIRE_HEARTBEAT_SIZE);
		struct wire_header lv = make_header(WIRE_LEAVE, 0);
		struct wire_header vw = make_header(WIRE_VIEW, WIRE_VIEW_MIN);
		hb.epoch = lv.epoch = vw.epoch = epochs[i];
		assert_int_equal(encode_decode(&hb, &expect_default), WIRE_OK);
		assert_int_equal(encode_decode(&lv, &expect_default), WIRE_OK);
		assert_int_equal(encode_decode(&vw, &expect_default), WIRE_OK);
	}
}

static void test_wire_view_shape_wrong(void **state)
{
	(void)state;
	struct wire_header h = make_header(WIRE_VIEW, WIRE_VIEW_MIN - 1);

	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
	h = make_header(WIRE_VIEW, WIRE_VIEW_MIN);
	h.seq = 3;
	assert_int_equal(encode_decode(&h, &expect_default), WIRE_BAD_LENGTH);
}

/* With several faults, the first in the documented order wins. */
static void test_wire_check_order(void **state)
{
	(void)state;
	uint8_t buf[BUF_MAX];
	size_t len;
	struct wire_header h = make_header(WIRE_DATA, 10);

	h.epoch = 0;
	h.src = SELF;
	h.dst = 3;
	h.job_id = 1;
	h.magic = 0;
	h.version = 9;
	h.type = 9;
	h.seq = 0;
	fill_pattern(buf + WIRE_HEADER_SIZE, 10, 1);
	len = encode(buf, &h);
	buf[len - 1] ^= 1; /* crc wrong as well */
	assert_int_equal(decode(buf, WIRE_HEADER_SIZE - 1), WIRE_BAD_TRUNCATED);
	assert_int_equal(decode(buf, len), WIRE_BAD_MAGIC);
	wr32(buf, WIRE_MAGIC);
	assert_int_equal(decode(buf, len), WIRE_BAD_VERSION);
	buf[4] = WIRE_VERSION;
	assert_int_equal(decode(buf, len), WIRE_BAD_TYPE);
	buf[5] = WIRE_DATA;
	assert_int_equal(decode(buf, len), WIRE_BAD_LENGTH);
	buf[20] = 1; /* seq 1 */
	assert_int_equal(decode(buf, len), WIRE_BAD_CRC);
	buf[len - 1] ^= 1;
	fix_crc(buf, len);
	assert_int_equal(decode(buf, len), WIRE_BAD_JOB);
	wr32(buf + 8, JOB);
	fix_crc(buf, len);
	assert_int_equal(decode(buf, len), WIRE_BAD_DESTINATION);
	buf[18] = SELF;
	fix_crc(buf, len);
	assert_int_equal(decode(buf, len), WIRE_BAD_SOURCE);
	buf[16] = PEER;
	fix_crc(buf, len);
	assert_int_equal(decode(buf, len), WIRE_BAD_EPOCH);
	wr32(buf + 12, EPOCH);
	fix_crc(buf, len);
	assert_int_equal(decode(buf, len), WIRE_OK);
}

static void test_wire_reject_leaves_header_untouched(void **state)
{
	(void)state;
	uint8_t buf[BUF_MAX];
	size_t len = make_datagram(buf, WIRE_DATA, 10);
	struct wire_header h, want;

	memset(&h, 0x5a, sizeof(h));
	want = h;
	buf[len - 1] ^= 1;
	assert_int_equal(wire_decode(buf, len, &expect_default, &h), WIRE_BAD_CRC);
	assert_memory_equal(&h, &want, sizeof(h));
}

static void test_wire_verdict_names(void **state)
{
	(void)state;
	for (int v = 0; v < WIRE_VERDICT_COUNT; v++) {
		const char *name = wire_verdict_name((enum wire_verdict)v);

		assert_non_null(name);
		assert_string_not_equal(name, "unknown verdict");
		for (int w = 0; w < v; w++)
			assert_string_not_equal(name, wire_verdict_name((enum wire_verdict)w));
	}
	assert_string_equal(wire_verdict_name(WIRE_VERDICT_COUNT), "unknown verdict");
	assert_string_equal(wire_verdict_name((enum wire_verdict) - 1), "unknown verdict");
}

/* ---- crc32c ---- */

/* Bit at a time, straight from the definition: the reference every fast path must match. */
static uint32_t crc32c_bitwise(uint32_t crc, const uint8_t *p, size_t len)
{
	crc = ~crc;
	for (size_t i = 0; i < len; i++) {
		crc ^= p[i];
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
	}
	return ~crc;
}

static void test_wire_crc32c_known_vectors(void **state)
{
	(void)state;
	uint8_t b[32];

	assert_int_equal(crc32c(0, "", 0), 0);
	assert_int_equal(crc32c(0, NULL, 0), 0);
	assert_int_equal(crc32c(0x12345678u, NULL, 0), 0x12345678u);
	assert_int_equal(crc32c(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(crc32c(0, "a", 1), 0xC1D04330u);
	/* RFC 3720 (iSCSI) B.4 vectors. */
	memset(b, 0, sizeof(b));
	assert_int_equal(crc32c(0, b, 32), 0x8A9136AAu);
	memset(b, 0xff, sizeof(b));
	assert_int_equal(crc32c(0, b, 32), 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)i;
	assert_int_equal(crc32c(0, b, 32), 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)(31 - i);
	assert_int_equal(crc32c(0, b, 32), 0x113FDB5Cu);
	assert_int_equal(crc32c_bitwise(0, (const uint8_t *)"123456789", 9), 0xE3069283u);
}

static void test_wire_crc32c_matches_reference_small(void **state)
{
	(void)state;
	static uint8_t b[256 + 8];

	fill_pattern(b, sizeof(b), 99);
	for (size_t off = 0; off < 8; off++) {
		for (size_t len = 1; len <= 200; len++) {
			assert_int_equal(crc32c(0, b + off, len), crc32c_bitwise(0, b + off, len));
			assert_int_equal(crc32c(0xdeadbeefu, b + off, len),
					 crc32c_bitwise(0xdeadbeefu, b + off, len));
		}
	}
}

/* Lengths around every multi-stream block size the crc32 path uses (3 x 128, 3 x 256,
 * 3 x 448, 3 x 1024, 3 x 4096) and the folding path's (256-byte rounds, 64-byte steps, the rest
 * under 64), a 1 472-byte datagram's payload and every length up to 1 600, plus jumbo and 64 KiB
 * buffers, from unaligned starts; both paths where the CPU has the folding one. */
static void test_wire_crc32c_matches_reference_large(void **state)
{
	(void)state;
	static const size_t lens[] = {
	    255,  256,	257,  319,   320,   321,   511,	  512,	 513,	383,   384,   385,
	    767,  768,	769,  775,   1343,  1344,  1345,  1408,	 1472,	1536,  3071,  3072,
	    3073, 3840, 9000, 12287, 12288, 12289, 24583, 36864, 65535, 65536, 65537, 70000};
	static uint8_t b[70000 + 8];

	fill_pattern(b, sizeof(b), 5);
	for (size_t i = 0; i < sizeof(b); i += 97)
		b[i] ^= (uint8_t)(i >> 8);
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		for (size_t off = 0; off < 8; off += 3) {
			uint32_t want = crc32c_bitwise(0, b + off, lens[i]);

			assert_int_equal(crc32c(0, b + off, lens[i]), want);
			assert_int_equal(crc32c_narrow(0, b + off, lens[i]), want);
		}
	}
	for (size_t len = 201; len <= 1600; len++) {
		uint32_t want = crc32c_bitwise(0x1234u, b + 5, len);

		assert_int_equal(crc32c(0x1234u, b + 5, len), want);
		assert_int_equal(crc32c_narrow(0x1234u, b + 5, len), want);
	}
	print_message("crc32c: %s\n",
		      crc32c_wide_available()
			  ? "folding on 512-bit registers and crc32 steps both checked"
			  : "no VPCLMULQDQ here: the crc32 steps checked");
}

static void test_wire_crc32c_chains(void **state)
{
	(void)state;
	static uint8_t b[1000];

	fill_pattern(b, sizeof(b), 44);
	uint32_t whole = crc32c(0, b, sizeof(b));
	for (size_t cut = 0; cut <= sizeof(b); cut++)
		assert_int_equal(crc32c(crc32c(0, b, cut), b + cut, sizeof(b) - cut), whole);
}

/* A header whose CRC field counts as zero, in one call: the same as the bytes followed by
 * that many zero bytes, for every start, length and count of zeros around a word. */
static void test_wire_crc32c_then_zeros(void **state)
{
	(void)state;
	static uint8_t b[80 + 8], z[80 + 20];

	fill_pattern(b, sizeof(b), 71);
	for (size_t off = 0; off < 8; off++)
		for (size_t len = 0; len <= 80; len++)
			for (size_t zeros = 0; zeros <= 17; zeros++) {
				memcpy(z, b + off, len);
				memset(z + len, 0, zeros);
				assert_int_equal(crc32c_then_zeros(0x5eedu, b + off, len, zeros),
						 crc32c_bitwise(0x5eedu, z, len + zeros));
			}
}

/* ---- random mutation ---- */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Each iteration: a valid datagram, then random byte flips, truncation or extension, and
 * sometimes a CRC that is fixed up afterwards so the checks behind it are reached too.
 * The mutated bytes go into an exactly sized heap block, so ASan sees any read past len. */
static void test_wire_random_mutation(void **state)
{
	(void)state;
	uint64_t rng = test_seed;
	unsigned verdicts[WIRE_VERDICT_COUNT] = {0};
	uint8_t src[BUF_MAX + 64];

	printf("test_wire_random_mutation: SEED=%" PRIu64 "\n", test_seed);
	for (unsigned iter = 0; iter < 100000; iter++) {
		uint64_t r = rng_next(&rng);
		enum wire_type type = (enum wire_type)(1 + r % 3);
		uint32_t plen = type == WIRE_HEARTBEAT ? WIRE_HEARTBEAT_SIZE
				: type == WIRE_ACK     ? 0
						       : (uint32_t)(rng_next(&rng) % 1500);
		size_t len = make_datagram(src, type, plen);
		unsigned flips = (unsigned)(rng_next(&rng) % 6);
		struct wire_header h;
		enum wire_verdict v;
		uint8_t *dgram;

		for (unsigned k = 0; k < flips; k++) {
			size_t at = (size_t)(rng_next(&rng) % (r & 256 ? WIRE_HEADER_SIZE : len));

			src[at] ^= (uint8_t)(1u + rng_next(&rng) % 255);
		}
		switch ((r >> 8) % 4) {
		case 0: /* truncate anywhere */
			len = (size_t)(rng_next(&rng) % (len + 1));
			break;
		case 1: /* append garbage */
			for (unsigned k = (unsigned)(rng_next(&rng) % 64); k > 0; k--)
				src[len++] = (uint8_t)rng_next(&rng);
			break;
		default:
			break;
		}
		if ((r >> 16) & 1 && len >= WIRE_HEADER_SIZE)
			fix_crc(src, len);
		dgram = malloc(len ? len : 1);
		assert_non_null(dgram);
		memcpy(dgram, src, len);
		v = wire_decode(dgram, len, &expect_default, &h);
		assert_in_range(v, WIRE_OK, WIRE_VERDICT_COUNT - 1);
		if (v == WIRE_OK) {
			assert_int_equal(h.payload_len, len - WIRE_HEADER_SIZE);
			assert_int_equal(h.dst, SELF);
			assert_int_equal(h.src, PEER);
		}
		verdicts[v]++;
		free(dgram);
	}
	for (int v = 0; v < WIRE_VERDICT_COUNT; v++)
		printf("  %-18s %u\n", wire_verdict_name((enum wire_verdict)v), verdicts[v]);
	assert_true(verdicts[WIRE_OK] > 0);
	assert_true(verdicts[WIRE_BAD_CRC] > 0);
}

/* ---- keel_strerror ---- */

static void test_wire_strerror_every_code(void **state)
{
	(void)state;
	static const int keel_codes[] = {
	    KEEL_EVIEWCHANGED, KEEL_ENOQUORUM, KEEL_ERENDEZVOUS, KEEL_ETRANSPORT, KEEL_EEXCLUDED,
	    KEEL_EMISMATCH,    KEEL_EENDED,    KEEL_EDEVICE,	 KEEL_EPEERGONE,
	};
	static const struct {
		int err;
		const char *name;
	} errnos[] = {
	    {EINVAL, "EINVAL"},
	    {ENOSPC, "ENOSPC"},
	    {EAGAIN, "EAGAIN"},
	    {EBUSY, "EBUSY"},
	    {ETIMEDOUT, "ETIMEDOUT"},
	    {EIO, "EIO"},
	    {EINPROGRESS, "EINPROGRESS"},
	    {ENOENT, "ENOENT"},
	    {ECONNREFUSED, "ECONNREFUSED"},
	    {EADDRINUSE, "EADDRINUSE"},
	    {EPROTO, "EPROTO"},
	    {EMSGSIZE, "EMSGSIZE"},
	    {ENOTSUP, "ENOTSUP"},
	    {ENOMEM, "ENOMEM"},
	    {ECANCELED, "ECANCELED"},
	    {EALREADY, "EALREADY"},
	    {EHOSTUNREACH, "EHOSTUNREACH"},
	    {ECONNRESET, "ECONNRESET"},
	    {EBADMSG, "EBADMSG"},
	    {EOVERFLOW, "EOVERFLOW"},
	};
	const char *seen[1 + sizeof(keel_codes) / sizeof(keel_codes[0])];
	size_t seen_count = 0;

	assert_string_equal(keel_strerror(0), "success");
	seen[seen_count++] = keel_strerror(0);
	for (size_t i = 0; i < sizeof(keel_codes) / sizeof(keel_codes[0]); i++) {
		const char *s = keel_strerror(keel_codes[i]);

		assert_non_null(s);
		assert_string_not_equal(s, "unknown error");
		assert_true(strncmp(s, "KEEL_E", 6) == 0);
		for (size_t k = 0; k < seen_count; k++)
			assert_string_not_equal(s, seen[k]);
		seen[seen_count++] = s;
	}
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++) {
		const char *s = keel_strerror(-errnos[i].err);
		size_t n = strlen(errnos[i].name);

		assert_non_null(s);
		assert_true(strncmp(s, errnos[i].name, n) == 0);
		assert_true(s[n] == ':');
		for (size_t k = 0; k < i; k++)
			assert_string_not_equal(s, keel_strerror(-errnos[k].err));
	}
}

static void test_wire_strerror_unknown(void **state)
{
	(void)state;
	/* -1003..-1005 are retired codes: never returned, so unknown */
	static const int unknown[] = {1,     EINVAL, -1000, -1003,   -1004,
				      -1005, -1013,  -9999, INT_MIN, INT_MAX};

	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++)
		assert_string_equal(keel_strerror(unknown[i]), "unknown error");
}

int main(void)
{
	const char *env = getenv("SEED");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_wire_roundtrip_heartbeat),
	    cmocka_unit_test(test_wire_roundtrip_ack),
	    cmocka_unit_test(test_wire_roundtrip_leave),
	    cmocka_unit_test(test_wire_leave_shape_wrong),
	    cmocka_unit_test(test_wire_roundtrip_data),
	    cmocka_unit_test(test_wire_data_fragment_edges_accepted),
	    cmocka_unit_test(test_wire_layout_fixed_offsets),
	    cmocka_unit_test(test_wire_encode_ignores_crc_field_and_old_bytes),
	    cmocka_unit_test(test_wire_heartbeat_payload_little_endian),
	    cmocka_unit_test(test_wire_truncated),
	    cmocka_unit_test(test_wire_bad_magic),
	    cmocka_unit_test(test_wire_bad_version),
	    cmocka_unit_test(test_wire_bad_type),
	    cmocka_unit_test(test_wire_payload_len_mismatch),
	    cmocka_unit_test(test_wire_fragment_outside_total_len),
	    cmocka_unit_test(test_wire_data_seq_zero),
	    cmocka_unit_test(test_wire_heartbeat_size_wrong),
	    cmocka_unit_test(test_wire_ack_shape_wrong),
	    cmocka_unit_test(test_wire_wnd_any_value_accepted),
	    cmocka_unit_test(test_wire_bad_crc_header),
	    cmocka_unit_test(test_wire_bad_crc_payload),
	    cmocka_unit_test(test_wire_no_crc_only_from_memory),
	    cmocka_unit_test(test_wire_header_crc_only_from_checked_link),
	    cmocka_unit_test(test_wire_add_crc_over_tail),
	    cmocka_unit_test(test_wire_detached_payload),
	    cmocka_unit_test(test_wire_wrong_job),
	    cmocka_unit_test(test_wire_wrong_destination),
	    cmocka_unit_test(test_wire_src_is_self),
	    cmocka_unit_test(test_wire_src_outside_world),
	    cmocka_unit_test(test_wire_src_mismatches_transport),
	    cmocka_unit_test(test_wire_wrong_epoch),
	    cmocka_unit_test(test_wire_view_shape_wrong),
	    cmocka_unit_test(test_wire_check_order),
	    cmocka_unit_test(test_wire_reject_leaves_header_untouched),
	    cmocka_unit_test(test_wire_verdict_names),
	    cmocka_unit_test(test_wire_crc32c_known_vectors),
	    cmocka_unit_test(test_wire_crc32c_matches_reference_small),
	    cmocka_unit_test(test_wire_crc32c_matches_reference_large),
	    cmocka_unit_test(test_wire_crc32c_chains),
	    cmocka_unit_test(test_wire_crc32c_then_zeros),
	    cmocka_unit_test(test_wire_random_mutation),
	    cmocka_unit_test(test_wire_strerror_every_code),
	    cmocka_unit_test(test_wire_strerror_unknown),
	};

	test_seed = env != NULL ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
	printf("test_wire: SEED=%" PRIu64 "\n", test_seed);
	fflush(stdout);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
