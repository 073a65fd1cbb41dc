/* Authentication (keel_config.auth): the MAC trailer, the replay window, the verdicts the
 * decoder gives, and whole nodes on real sockets that talk only to holders of their key. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include "auth_int.h"
#include "cluster_int.h"
#include "crc32c_int.h"
#include "wire_int.h"

static uint64_t g_seed;
static const uint8_t key_a[KEEL_AUTH_KEY_BYTES] = "keel unit test key, 32 bytes...";
static const uint8_t key_b[KEEL_AUTH_KEY_BYTES] = "another job's key, 32 bytes....";

static bool have_sodium(void)
{
	return auth_pick(KEEL_MAC_CHACHA20POLY1305) != 0;
}

static void keyed_config(struct keel_config *cfg, const uint8_t *key, enum keel_mac mac,
			 uint32_t rank, uint32_t inc)
{
	keel_config_default(cfg);
	cfg->auth = true;
	cfg->mac = mac;
	memcpy(cfg->auth_key, key, KEEL_AUTH_KEY_BYTES);
	cfg->rank = rank;
	cfg->world_size = 4;
	cfg->incarnation = inc;
}

/* ---- replay window ---- */

static void test_auth_replay_window(void **state)
{
	(void)state;
	struct auth_peer p;
	memset(&p, 0, sizeof(p));
	assert_true(auth_replay_accept(&p, 1, 5));
	assert_false(auth_replay_accept(&p, 1, 5)); /* the same datagram again */
	assert_true(auth_replay_accept(&p, 1, 7));
	assert_true(auth_replay_accept(&p, 1, 6)); /* late, inside the window: taken once */
	assert_false(auth_replay_accept(&p, 1, 6));
	assert_true(auth_replay_accept(&p, 1, 3)); /* older than the first, never seen */
	/* A jump: counters other peers used in between. The window is KEEL_AUTH_REPLAY_WINDOW
	 * counters back from the newest, edges included. */
	uint64_t top = 7 + 5000;
	assert_true(auth_replay_accept(&p, 1, top));
	assert_true(auth_replay_accept(&p, 1, top - (KEEL_AUTH_REPLAY_WINDOW - 1)));
	assert_false(auth_replay_accept(&p, 1, top - (KEEL_AUTH_REPLAY_WINDOW - 1)));
	assert_false(auth_replay_accept(&p, 1, top - KEEL_AUTH_REPLAY_WINDOW));
	assert_false(auth_replay_accept(&p, 1, 7));
	/* shifts by amounts that are not whole words keep every bit where it belongs */
	for (uint64_t c = top + 1; c < top + 300; c += 3)
		assert_true(auth_replay_accept(&p, 1, c));
	for (uint64_t c = top + 1; c < top + 300; c += 3)
		assert_false(auth_replay_accept(&p, 1, c));
	for (uint64_t c = top + 2; c < top + 300; c += 3)
		assert_true(auth_replay_accept(&p, 1, c));
	/* a new life starts over; the old one is refused from then on */
	assert_true(auth_replay_accept(&p, 2, 1));
	assert_false(auth_replay_accept(&p, 1, top + 1000));
	assert_false(auth_replay_accept(&p, 2, 1));
	assert_true(auth_replay_accept(&p, 2, 2));
}

/* ---- trailer ---- */

static size_t sealed_datagram(struct auth_ctx *a, uint8_t *buf, uint32_t src, uint32_t dst)
{
	struct wire_header h = {.magic = WIRE_MAGIC,
				.version = WIRE_VERSION,
				.type = WIRE_DATA,
				.flags = WIRE_FLAG_AUTH,
				.job_id = 42,
				.epoch = 1,
				.src = (uint16_t)src,
				.dst = (uint16_t)dst,
				.seq = 9,
				.total_len = 64,
				.payload_len = 64};
	for (uint32_t i = 0; i < 64; i++)
		buf[WIRE_HEADER_SIZE + i] = (uint8_t)(i * 7);
	wire_encode(buf, &h);
	auth_seal(a, buf, WIRE_HEADER_SIZE + 64);
	return WIRE_HEADER_SIZE + 64 + KEEL_AUTH_TRAILER_BYTES;
}

static void check_algorithm(enum keel_mac mac)
{
	struct auth_ctx tx, rx, other;
	struct keel_config cfg;
	keyed_config(&cfg, key_a, mac, 1, 3);
	assert_int_equal(auth_init(&tx, &cfg), 0);
	keyed_config(&cfg, key_a, mac, 0, 1);
	assert_int_equal(auth_init(&rx, &cfg), 0);
	keyed_config(&cfg, key_b, mac, 0, 1);
	assert_int_equal(auth_init(&other, &cfg), 0);
	uint8_t buf[256];
	size_t len = sealed_datagram(&tx, buf, 1, 0);
	uint32_t inc = 0;
	uint64_t counter = 0;
	assert_true(auth_open(&rx, buf, len, 1, &inc, &counter));
	assert_int_equal(inc, 3);
	assert_int_equal(counter, 1);
	assert_false(auth_open(&other, buf, len, 1, &inc, &counter)); /* another key */
	assert_false(auth_open(&rx, buf, len, 2, &inc, &counter));    /* another sender */
	/* every bit of header, payload and trailer is covered */
	for (size_t bit = 0; bit < 8 * len; bit++) {
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		assert_false(auth_open(&rx, buf, len, 1, &inc, &counter));
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	assert_false(auth_open(&rx, buf, len - 1, 1, &inc, &counter));
	len = sealed_datagram(&tx, buf, 1, 0); /* the next datagram takes the next counter */
	assert_true(auth_open(&rx, buf, len, 1, &inc, &counter));
	assert_int_equal(counter, 2);
}

static void test_auth_trailer_covers_everything(void **state)
{
	(void)state;
	if (!have_sodium())
		skip();
	check_algorithm(KEEL_MAC_CHACHA20POLY1305);
	if (auth_pick(KEEL_MAC_AES256GCM) != 0)
		check_algorithm(KEEL_MAC_AES256GCM);
	check_algorithm(KEEL_MAC_AUTO);
}

/* A receiver checks whatever algorithm the sender used, as long as this CPU can: a job may
 * mix AUTO ranks and CHACHA20POLY1305 ranks. */
static void test_auth_algorithms_interoperate(void **state)
{
	(void)state;
	if (!have_sodium() || auth_pick(KEEL_MAC_AES256GCM) == 0)
		skip();
	struct auth_ctx tx, rx;
	struct keel_config cfg;
	keyed_config(&cfg, key_a, KEEL_MAC_CHACHA20POLY1305, 1, 1);
	assert_int_equal(auth_init(&tx, &cfg), 0);
	keyed_config(&cfg, key_a, KEEL_MAC_AES256GCM, 0, 1);
	assert_int_equal(auth_init(&rx, &cfg), 0);
	uint8_t buf[256];
	size_t len = sealed_datagram(&tx, buf, 1, 0);
	uint32_t inc;
	uint64_t counter;
	assert_true(auth_open(&rx, buf, len, 1, &inc, &counter));
	/* naming the other algorithm in the trailer does not pass either */
	buf[len - KEEL_AUTH_TRAILER_BYTES + 4] = AUTH_AES256GCM;
	assert_false(auth_open(&rx, buf, len, 1, &inc, &counter));
}

/* ---- decoder verdicts ---- */

static void test_auth_decoder_verdicts(void **state)
{
	(void)state;
	if (!have_sodium())
		skip();
	struct auth_ctx tx, rx;
	struct keel_config cfg;
	keyed_config(&cfg, key_a, KEEL_MAC_AUTO, 1, 1);
	assert_int_equal(auth_init(&tx, &cfg), 0);
	keyed_config(&cfg, key_a, KEEL_MAC_AUTO, 0, 1);
	assert_int_equal(auth_init(&rx, &cfg), 0);
	struct wire_expect keyed = {.job_id = 42,
				    .epoch = 1,
				    .self = 0,
				    .world_size = 4,
				    .transport_src = UINT32_MAX,
				    .auth = &rx};
	struct wire_expect keyless = keyed;
	keyless.auth = NULL;
	uint8_t buf[256];
	size_t len = sealed_datagram(&tx, buf, 1, 0);
	struct wire_header h;
	assert_int_equal(wire_decode(buf, len, &keyed, &h), WIRE_OK);
	assert_int_equal(h.auth_inc, 1);
	assert_int_equal(h.auth_counter, 1);
	assert_int_equal(h.payload_len, 64);
	/* a keyed sender, a receiver without the key: refused, not read as CRC'd */
	assert_int_equal(wire_decode(buf, len, &keyless, &h), WIRE_BAD_AUTH);
	/* the CRC'd datagram a forger without the key can make: refused where a key is set */
	struct wire_header plain = {.magic = WIRE_MAGIC,
				    .version = WIRE_VERSION,
				    .type = WIRE_ACK,
				    .job_id = 42,
				    .epoch = 1,
				    .src = 1};
	wire_encode(buf, &plain);
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &keyless, &h), WIRE_OK);
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &keyed, &h), WIRE_BAD_AUTH);
	/* the flag without a trailer, or a trailer without the flag: lengths disagree */
	plain.flags = WIRE_FLAG_AUTH;
	wire_encode(buf, &plain);
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &keyed, &h), WIRE_BAD_LENGTH);
	/* No CRC and no MAC, as over shared memory: taken where the transport says it came
	 * through memory (nothing outside the job writes there), a forgery anywhere else. */
	plain.flags = WIRE_FLAG_NO_CRC;
	wire_encode(buf, &plain);
	struct wire_expect keyed_intact = keyed, keyless_intact = keyless;
	keyed_intact.intact = keyless_intact.intact = true;
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &keyless_intact, &h), WIRE_OK);
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &keyed_intact, &h), WIRE_OK);
	assert_int_equal(h.auth_counter, 0);
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &keyed, &h), WIRE_BAD_AUTH);
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &keyless, &h), WIRE_BAD_CRC);
	/* ...with a crc where there should be none: damaged, even from memory */
	wire_put32(buf + 52, 1); /* the header's crc field */
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &keyed_intact, &h), WIRE_BAD_AUTH);
	/* a MAC'd datagram that also claims no CRC is refused, from memory too */
	len = sealed_datagram(&tx, buf, 1, 0);
	wire_put16(buf + 6, (uint16_t)(wire_get16(buf + 6) | WIRE_FLAG_NO_CRC)); /* flags */
	assert_int_equal(wire_decode(buf, len, &keyed_intact, &h), WIRE_BAD_AUTH);
	/* the sender's side: a datagram encoded for a MAC set to go through memory, and back */
	plain.flags = WIRE_FLAG_AUTH;
	wire_encode(buf, &plain);
	wire_set_sealed(buf, false);
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &keyed_intact, &h), WIRE_OK);
	assert_int_equal(h.flags & (WIRE_FLAG_AUTH | WIRE_FLAG_NO_CRC), WIRE_FLAG_NO_CRC);
	wire_set_sealed(buf, true);
	assert_int_equal(wire_decode(buf, WIRE_HEADER_SIZE, &keyed_intact, &h), WIRE_BAD_LENGTH);
	assert_string_equal(wire_verdict_name(WIRE_BAD_AUTH), "bad mac");
	assert_string_equal(wire_verdict_name(WIRE_BAD_REPLAY), "replay");
}

/* ---- nodes ---- */

static const uint8_t *g_key_of[4];
static uint32_t g_tweak_rank;

static void tweak_keys(struct keel_config *cfg)
{
	const uint8_t *key = g_key_of[g_tweak_rank++];
	cfg->auth = key != NULL;
	if (key != NULL)
		memcpy(cfg->auth_key, key, KEEL_AUTH_KEY_BYTES);
}

static int keyed_cluster(struct cluster *c, uint32_t world, const uint8_t *const *keys)
{
	g_tweak_rank = 0;
	for (uint32_t r = 0; r < 4; r++)
		g_key_of[r] = r < world ? keys[r] : NULL;
	return cluster_init(c, world, NULL, g_seed, tweak_keys);
}

static void allreduce_exact(struct cluster *c, uint32_t count)
{
	static float buf[3][20000];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < c->world; r++) {
		for (uint32_t i = 0; i < count; i++)
			buf[r][i] = (float)(r + 1) * (float)(i % 97);
		assert_int_equal(keel_allreduce_start(c->node[r], buf[r], buf[r], count, KEEL_F32,
						      KEEL_SUM, &ops[r]),
				 0);
	}
	assert_int_equal(cluster_wait_ops(c, ops, rc, 20000), 0);
	float ranks = (float)(c->world * (c->world + 1) / 2);
	for (uint32_t r = 0; r < c->world; r++) {
		assert_int_equal(rc[r], 0);
		for (uint32_t i = 0; i < count; i++)
			assert_true(buf[r][i] == ranks * (float)(i % 97));
	}
}

static void test_auth_nodes_reduce_exactly(void **state)
{
	(void)state;
	if (!have_sodium())
		skip();
	struct cluster c;
	const uint8_t *keys[] = {key_a, key_a, key_a};
	assert_int_equal(keyed_cluster(&c, 3, keys), 0);
	allreduce_exact(&c, 20000); /* many fragments: the payload leaves room for the trailer */
	allreduce_exact(&c, 3);
	struct keel_counters k;
	for (uint32_t r = 0; r < 3; r++) {
		keel_counters_get(c.node[r], &k);
		assert_int_equal(k.drop_auth + k.drop_replay + k.drop_crc, 0);
		assert_true(k.rx_datagrams > 10);
	}
	cluster_fini(&c);
}

/* A rank with another key, or none, is not heard, and hears nobody: each side counts the
 * other's datagrams as drop_auth and suspects it once the start-up grace is over. */
static void test_auth_other_key_or_none_is_not_heard(void **state)
{
	(void)state;
	if (!have_sodium())
		skip();
	struct cluster c;
	const uint8_t *keys[] = {key_a, key_a, key_b, NULL};
	assert_int_equal(keyed_cluster(&c, 4, keys), 0);
	for (int i = 0; i < 2000; i++)
		cluster_round(&c);
	struct keel_counters k[4];
	for (uint32_t r = 0; r < 4; r++)
		keel_counters_get(c.node[r], &k[r]);
	for (uint32_t r = 0; r < 4; r++)
		assert_true(k[r].drop_auth > 0);
	assert_true(keel_peer_is_alive(c.node[0], 1));
	assert_false(keel_peer_is_alive(c.node[0], 2));
	assert_false(keel_peer_is_alive(c.node[0], 3));
	cluster_fini(&c);
}

/* Rank 1's first datagram to rank 0 of a keyed pair on UDP, taken off the socket before rank 0
 * reads it; it is then sent `copies` times from rank 1's socket, as it was or turned into one
 * that claims to have come through memory (no MAC, no CRC). Returns rank 0's counters. */
static void resend_rank1_mail(bool as_memory, int copies, struct keel_counters *k)
{
	struct cluster c;
	const uint8_t *keys[] = {key_a, key_a};
	assert_int_equal(keyed_cluster(&c, 2, keys), 0);
	int fd0 = c.udp[0]->ops->wait_fd(c.udp[0]);
	int fd1 = c.udp[1]->ops->wait_fd(c.udp[1]);
	struct sockaddr_storage a0;
	socklen_t l0 = sizeof(a0);
	assert_int_equal(keel_udp_local_addr(c.udp[0], &a0, &l0), 0);
	uint8_t buf[2048];
	ssize_t got = -1;
	for (int i = 0; i < 1000 && got < 0; i++) {
		uint64_t dl;
		assert_int_equal(keel_poll(c.node[1], c.now_ns, &dl), 0);
		c.now_ns += c.step_ns;
		got = recv(fd0, buf, sizeof(buf), MSG_DONTWAIT); /* rank 0's mail, taken first */
	}
	assert_true(got > (ssize_t)(WIRE_HEADER_SIZE + KEEL_AUTH_TRAILER_BYTES));
	if (as_memory) { /* the trailer cut off, the header's flags (byte 6) as memory's */
		wire_set_sealed(buf, false);
		got -= KEEL_AUTH_TRAILER_BYTES;
	}
	for (int copy = 0; copy < copies; copy++)
		assert_int_equal(sendto(fd1, buf, (size_t)got, 0, (struct sockaddr *)&a0, l0), got);
	uint64_t dl;
	assert_int_equal(keel_poll(c.node[0], c.now_ns, &dl), 0);
	keel_counters_get(c.node[0], k);
	cluster_fini(&c);
}

/* A datagram taken off the wire and sent again is refused as a replay; the original counts. */
static void test_auth_replayed_datagram_is_refused(void **state)
{
	(void)state;
	if (!have_sodium())
		skip();
	struct keel_counters k;
	resend_rank1_mail(false, 3, &k);
	assert_int_equal(k.rx_datagrams, 1);
	assert_int_equal(k.drop_replay, 2);
	assert_int_equal(k.drop_auth, 0);
}

/* Datagrams through shared memory go without a MAC (nothing outside the job writes there);
 * one that claims the same off a wire is a forgery: refused before any field is believed. */
static void test_auth_unsealed_datagram_off_a_wire_is_refused(void **state)
{
	(void)state;
	if (!have_sodium())
		skip();
	struct keel_counters k;
	resend_rank1_mail(true, 2, &k);
	assert_int_equal(k.rx_datagrams, 0);
	assert_int_equal(k.drop_auth, 2);
}

static void test_auth_config_errors(void **state)
{
	(void)state;
	struct cluster c;
	const uint8_t *keys[] = {key_a, key_a};
	assert_int_equal(keyed_cluster(&c, 2, keys), have_sodium() ? 0 : -ENOTSUP);
	struct keel_config cfg = c.cfg[0];
	cfg.mac = (enum keel_mac)7;
	assert_int_equal(keel_storage_size(&cfg), 0);
	cfg.mac = KEEL_MAC_AES256GCM;
	if (have_sodium() && auth_pick(KEEL_MAC_AES256GCM) == 0) {
		static uint8_t mem[1 << 22];
		struct keel_node *n;
		assert_true(keel_storage_size(&cfg) <= sizeof(mem));
		assert_int_equal(keel_init(&n, mem, sizeof(mem), &cfg, 1), -ENOTSUP);
	}
	cluster_fini(&c);
}

/* ---- what it costs (test_auth --cost; docs/perf-history.md) ---- */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Seal and open datagrams of a heartbeat's, a small DATA's and a full MTU's size, and the
 * CRC32C they replace: nanoseconds each, median of 9 runs of a fixed count. */
static void cost_table(enum keel_mac mac, const char *name)
{
	static uint8_t buf[KEEL_MTU_DEFAULT];
	const uint32_t sizes[] = {WIRE_HEADER_SIZE + WIRE_HEARTBEAT_SIZE, WIRE_HEADER_SIZE + 8,
				  KEEL_MTU_DEFAULT - KEEL_AUTH_TRAILER_BYTES};
	struct auth_ctx tx, rx;
	struct keel_config cfg;
	keyed_config(&cfg, key_a, mac, 1, 1);
	if (auth_init(&tx, &cfg) != 0)
		return;
	keyed_config(&cfg, key_a, mac, 0, 1);
	(void)auth_init(&rx, &cfg);
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint32_t len = sizes[s], n = len > 1000 ? 20000 : 200000;
		double seal[9], open[9], crc[9];
		for (int run = 0; run < 9; run++) {
			uint32_t inc, sink = 0;
			uint64_t counter;
			double t0 = now_s();
			for (uint32_t i = 0; i < n; i++)
				auth_seal(&tx, buf, len);
			double t1 = now_s();
			for (uint32_t i = 0; i < n; i++)
				sink += auth_open(&rx, buf, len + KEEL_AUTH_TRAILER_BYTES, 1, &inc,
						  &counter);
			double t2 = now_s();
			for (uint32_t i = 0; i < n; i++)
				sink += crc32c(i, buf, len);
			double t3 = now_s();
			seal[run] = (t1 - t0) / n * 1e9;
			open[run] = (t2 - t1) / n * 1e9;
			crc[run] = (t3 - t2) / n * 1e9 + (sink == 0xffffffffu); /* keep the loop */
		}
		for (double *v[] = {seal, open, crc}, **p = v; p < v + 3; p++)
			for (int i = 1; i < 9; i++) /* insertion sort: the median is [4] */
				for (int j = i; j > 0 && (*p)[j] < (*p)[j - 1]; j--) {
					double t = (*p)[j];
					(*p)[j] = (*p)[j - 1], (*p)[j - 1] = t;
				}
		printf("%-18s %6u bytes: seal %8.0f ns  open %8.0f ns  (%.2f GB/s each)  crc32c "
		       "%6.0f ns\n",
		       name, len, seal[4], open[4], len / seal[4], crc[4]);
	}
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--cost") == 0) {
		if (!have_sodium())
			return 77;
		if (auth_pick(KEEL_MAC_AES256GCM) != 0)
			cost_table(KEEL_MAC_AES256GCM, "aes256gcm");
		cost_table(KEEL_MAC_CHACHA20POLY1305, "chacha20poly1305");
		return 0;
	}
	g_seed = cluster_seed(1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_auth_replay_window),
	    cmocka_unit_test(test_auth_trailer_covers_everything),
	    cmocka_unit_test(test_auth_algorithms_interoperate),
	    cmocka_unit_test(test_auth_decoder_verdicts),
	    cmocka_unit_test(test_auth_nodes_reduce_exactly),
	    cmocka_unit_test(test_auth_other_key_or_none_is_not_heard),
	    cmocka_unit_test(test_auth_replayed_datagram_is_refused),
	    cmocka_unit_test(test_auth_unsealed_datagram_off_a_wire_is_refused),
	    cmocka_unit_test(test_auth_config_errors),
	};
	return cmocka_run_group_tests_name("auth", tests, NULL, NULL);
}
