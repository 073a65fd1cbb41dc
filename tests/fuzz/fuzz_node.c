/* libFuzzer entry point over a node's whole receive path: datagrams cut from the input go
 * through node_handle_datagram (decode, reliable window, detector, membership, collectives),
 * with the node's timers running between them and an AllReduce in flight. Whatever arrives,
 * the node must not crash, trip an assertion, read outside a datagram or allocate.
 *
 * The first byte picks the node (bits 0-1: rank in a world of 3), whether to start an
 * AllReduce first (bit 2) and whether the job has a key (bit 3: keel_config.auth; the harness
 * then seals the datagrams it encodes as their claimed sender would — an insider's view — while
 * whole-datagram inputs must get past the MAC on their own). Then each datagram is: 1 byte source
 * rank, 1 byte "how" (bit 0: the bytes are a whole datagram as sent, CRC included; else they are a
 * header's fields and a payload, and the harness encodes a well-formed header for this job, epoch
 * and node around them, so the fuzzer reaches what lies behind the checks; bit 1: it came
 * through shared memory, KEEL_DGRAM_INTACT), 2 bytes length, then
 * the bytes. Built by `make fuzz` (clang, mk/fuzz.mk); `make test` runs a short smoke of it. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "keel/keel.h"
#include "node_int.h"
#include "wire_int.h"

#define WORLD	  3u
#define JOB	  42u
#define MEM_BYTES (8u << 20)
#define DGRAM_MAX 2048u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fz_send(struct keel_transport *t, uint64_t now_ns, const struct keel_datagram *d,
		   uint32_t count)
{
	(void)t, (void)now_ns, (void)d;
	return (int)count; /* the network takes everything and delivers nothing back */
}

static int fz_recv(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
		   uint32_t count_max)
{
	(void)t, (void)now_ns, (void)d, (void)count_max;
	return 0; /* datagrams arrive through node_handle_datagram */
}

static const struct keel_transport_ops fz_ops = {
    .name = "fuzz", .send_burst = fz_send, .recv_burst = fz_recv};

static const uint8_t g_key[KEEL_AUTH_KEY_BYTES] = "keel fuzz key, not a secret....";
static struct auth_ctx g_sender[WORLD]; /* each rank's sealing keys, when keyed */
static _Alignas(64) uint8_t g_mem[MEM_BYTES];
static uint8_t g_buf[DGRAM_MAX];

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Header fields from the fuzzer's bytes, the identity fields right for this node. */
static uint32_t encode_plausible(struct keel_node *n, uint32_t src, const uint8_t *p, size_t len)
{
	uint8_t f[28] = {0};
	memcpy(f, p, len < sizeof(f) ? len : sizeof(f));
	size_t payload = len > sizeof(f) ? len - sizeof(f) : 0;
	if (payload > DGRAM_MAX - WIRE_HEADER_SIZE - KEEL_AUTH_TRAILER_BYTES)
		payload = DGRAM_MAX - WIRE_HEADER_SIZE - KEEL_AUTH_TRAILER_BYTES;
	struct wire_header h = {
	    .magic = WIRE_MAGIC,
	    .version = WIRE_VERSION,
	    .type = (uint8_t)(1 + f[0] % WIRE_TYPE_MAX),
	    .flags = n->auth ? WIRE_FLAG_AUTH : f[1],
	    .job_id = JOB,
	    .epoch = (f[2] & 1) ? n->epoch : n->epoch + (f[2] >> 1) % 3,
	    .src = (uint16_t)src,
	    .dst = (uint16_t)n->self,
	    .seq = get_u32(f + 4) % 64,
	    .ack = get_u32(f + 8) % 64,
	    .sack = get_u32(f + 12),
	    .op_id = f[16] % 4,
	    .step = f[17] % 6,
	    .wnd = f[18],
	    .offset = get_u32(f + 20) % 4096,
	    .total_len = get_u32(f + 24) % 4096,
	    .payload_len = (uint32_t)payload,
	};
	if (payload > 0)
		memcpy(g_buf + WIRE_HEADER_SIZE, p + sizeof(f), payload);
	wire_encode(g_buf, &h);
	if (!n->auth)
		return WIRE_HEADER_SIZE + (uint32_t)payload;
	auth_seal(&g_sender[src], g_buf, WIRE_HEADER_SIZE + (uint32_t)payload);
	return WIRE_HEADER_SIZE + (uint32_t)payload + KEEL_AUTH_TRAILER_BYTES;
}

/* Keys for the job (bit 3 of the first byte): the node's, and every sender's. */
static void set_keys(struct keel_config *cfg, bool keyed)
{
	cfg->auth = keyed;
	if (!keyed)
		return;
	memcpy(cfg->auth_key, g_key, sizeof(g_key));
	for (uint32_t r = 0; r < WORLD; r++) {
		struct keel_config s = *cfg;
		s.rank = r;
		if (auth_init(&g_sender[r], &s) != 0)
			__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	struct keel_transport tp = {.ops = &fz_ops,
				    .caps = 0,
				    .mtu = KEEL_MTU_MIN,
				    .rank = data[0] % WORLD,
				    .world_size = WORLD};
	struct keel_config cfg;
	keel_config_default(&cfg);
	cfg.rank = tp.rank;
	cfg.world_size = WORLD;
	cfg.job_id = JOB;
	cfg.transport = &tp;
	cfg.mtu = KEEL_MTU_MIN;
	cfg.window = 4;
	cfg.burst = 8;
	cfg.ops_max = 2;
	cfg.heartbeat_ns = 1000000;
	set_keys(&cfg, (data[0] & 8) != 0);
	size_t need = keel_storage_size(&cfg);
	if (need == 0 || need > sizeof(g_mem))
		__builtin_trap(); /* the harness's own mistake, not an input's */
	memset(g_mem, 0, need);
	uint64_t now = 1000000000ull, next;
	struct keel_node *n;
	if (keel_init(&n, g_mem, need, &cfg, now) != 0)
		__builtin_trap();
	static float in[64], out[64];
	struct keel_op *op = NULL;
	if (data[0] & 4)
		(void)keel_allreduce_start(n, in, out, 64, KEEL_F32, KEEL_SUM, &op);
	size_t at = 1;
	while (at + 4 <= size) {
		uint32_t src = data[at] % WORLD, how = data[at + 1];
		size_t len = (size_t)data[at + 2] | (size_t)data[at + 3] << 8;
		at += 4;
		if (len > size - at)
			len = size - at;
		struct keel_datagram d = {.buf = g_buf, .peer = src, .cap = DGRAM_MAX};
		if (how & 2) /* as if through shared memory: a datagram without a CRC passes */
			d.flags = KEEL_DGRAM_INTACT;
		if (how & 1) {
			d.len = (uint32_t)(len < DGRAM_MAX ? len : DGRAM_MAX);
			memcpy(g_buf, data + at, d.len);
		} else {
			d.len = encode_plausible(n, src, data + at, len);
		}
		at += len;
		if (src != n->self)
			node_handle_datagram(n, &d);
		now += 100000 * (1 + (how >> 4)); /* 0.1 to 1.6 ms between datagrams */
		(void)keel_poll(n, now, &next);
		if (op != NULL && keel_op_test(n, op) != -EINPROGRESS)
			op = NULL;
	}
	keel_fini(n);
	return 0;
}
