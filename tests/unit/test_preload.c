/* The pre-load executor on real files, with both engines (io_uring where the kernel allows
 * it, and pread): byte for byte against the file, the bounds, a file truncated after its read
 * was queued, a kernel I/O error (/proc/self/mem at an unmapped address gives EIO), reads
 * cancelled when their shard moves (queued and in flight), a file closed under its reads. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "keel/preload.h"

static uint64_t g_seed;
static char g_path[64];
static uint8_t *g_data;
#define FILE_BYTES (8u << 20)

static uint64_t rnd(void)
{
	g_seed ^= g_seed >> 12;
	g_seed ^= g_seed << 25;
	g_seed ^= g_seed >> 27;
	return g_seed * 2685821657736338717ull;
}

static void write_file(const char *path, const uint8_t *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

struct ended {
	uint32_t count;
	int status[512];
	size_t got[512];
	uint64_t tag[512];
};

static void on_done(void *ctx, uint64_t tag, int status, size_t got)
{
	struct ended *e = ctx;
	assert_true(e->count < 512);
	e->status[e->count] = status;
	e->got[e->count] = got;
	e->tag[e->count++] = tag;
}

static struct keel_preload *make(enum keel_preload_engine engine, uint32_t reads, uint32_t inflight,
				 void **mem)
{
	struct keel_preload_config cfg;
	keel_preload_config_default(&cfg);
	cfg.engine = engine;
	cfg.reads_max = reads;
	cfg.inflight_max = inflight;
	size_t sz = keel_preload_storage_size(&cfg);
	assert_true(sz > 0);
	*mem = calloc(1, sz);
	struct keel_preload *p;
	assert_int_equal(keel_preload_init(&p, *mem, sz, &cfg), 0);
	return p;
}

/* Poll until every read has ended, for up to 10 s of wall time: io_uring may hand a read to
 * a kernel worker thread, which a loaded 2-core machine runs late (a bound in polls, 100 000,
 * ran out under the sanitizers in CI). The pause between polls lets that thread run. */
static void drain(struct keel_preload *p)
{
	struct timespec t0, now, pause = {0, 20000};
	clock_gettime(CLOCK_MONOTONIC, &t0);
	now = t0;
	while (keel_preload_pending(p) > 0 && now.tv_sec - t0.tv_sec < 10) {
		assert_true(keel_preload_poll(p) >= 0);
		if (keel_preload_pending(p) > 0)
			nanosleep(&pause, NULL);
		clock_gettime(CLOCK_MONOTONIC, &now);
	}
	assert_int_equal(keel_preload_pending(p), 0);
}

/* 200 random ranges (1 byte to 256 KiB, any offset, the last byte too), each checked. */
static void exact_ranges(enum keel_preload_engine engine)
{
	void *mem;
	struct keel_preload *p = make(engine, 64, 8, &mem);
	printf("engine %s\n", keel_preload_engine_name(p));
	uint32_t file;
	assert_int_equal(keel_preload_open(p, g_path, &file), 0);
	enum { N = 200 };
	static uint8_t *bufs[N];
	static uint64_t offs[N];
	static size_t lens[N];
	struct ended e = {0};
	for (uint32_t i = 0; i < N; i++) {
		lens[i] = i == 0 ? 1 : 1 + rnd() % (256u << 10);
		offs[i] = i == 1 ? FILE_BYTES - lens[i] : rnd() % (FILE_BYTES - lens[i] + 1);
		bufs[i] = malloc(lens[i]);
		int rc;
		while ((rc = keel_preload_read(p, file, offs[i], bufs[i], lens[i], i, on_done,
					       &e)) == -ENOSPC)
			assert_true(keel_preload_poll(p) >= 0); /* reads_max queued: make room */
		assert_int_equal(rc, 0);
	}
	drain(p);
	assert_int_equal(e.count, N);
	for (uint32_t k = 0; k < N; k++) {
		uint64_t i = e.tag[k];
		assert_int_equal(e.status[k], 0);
		assert_int_equal(e.got[k], lens[i]);
		assert_memory_equal(bufs[i], g_data + offs[i], lens[i]);
		free(bufs[i]);
	}
	struct keel_preload_stats st;
	keel_preload_stats_get(p, &st);
	assert_int_equal(st.reads, N);
	assert_int_equal(st.failed + st.cancelled, 0);
	assert_true(st.inflight_max_seen <= 8);
	keel_preload_fini(p);
	free(mem);
}

static void test_preload_exact_ranges_io_uring(void **state)
{
	(void)state;
	exact_ranges(KEEL_PRELOAD_AUTO);
}

static void test_preload_exact_ranges_pread(void **state)
{
	(void)state;
	exact_ranges(KEEL_PRELOAD_PREAD);
}

/* Every documented argument error. */
static void test_preload_bad_arguments(void **state)
{
	(void)state;
	struct keel_preload_config cfg;
	keel_preload_config_default(&cfg);
	cfg.inflight_max = cfg.reads_max + 1;
	assert_int_equal(keel_preload_storage_size(&cfg), 0);
	keel_preload_config_default(&cfg);
	cfg.files_max = KEEL_PRELOAD_FILES_MAX + 1;
	assert_int_equal(keel_preload_storage_size(&cfg), 0);
	void *mem;
	struct keel_preload *p = make(KEEL_PRELOAD_AUTO, 2, 1, &mem);
	uint32_t file, f2;
	uint8_t buf[16];
	assert_int_equal(keel_preload_open(p, "/nonexistent/keel", &file), -ENOENT);
	assert_int_equal(keel_preload_open(p, g_path, &file), 0);
	assert_int_equal(keel_preload_read(p, file, FILE_BYTES - 8, buf, 16, 0, NULL, NULL),
			 -ERANGE); /* past the end: said now */
	assert_int_equal(keel_preload_read(p, file, 0, buf, 0, 0, NULL, NULL), -EINVAL);
	assert_int_equal(keel_preload_read(p, 7, 0, buf, 1, 0, NULL, NULL), -EINVAL);
	assert_int_equal(keel_preload_read(p, file, 0, buf, 8, 0, NULL, NULL), 0);
	assert_int_equal(keel_preload_read(p, file, 8, buf + 8, 8, 0, NULL, NULL), 0);
	assert_int_equal(keel_preload_read(p, file, 0, buf, 8, 0, NULL, NULL), -ENOSPC);
	drain(p);
	assert_memory_equal(buf, g_data, 16);
	for (uint32_t i = 1; i < 8; i++) /* files_max 8 */
		assert_int_equal(keel_preload_open(p, g_path, &f2), 0);
	assert_int_equal(keel_preload_open(p, g_path, &f2), -ENOSPC);
	assert_int_equal(keel_preload_close(p, 9), -EINVAL);
	keel_preload_fini(p);
	free(mem);
}

/* The file loses its tail after the read was queued: the read says -ENODATA and how much
 * arrived, which is exactly what the file still holds. */
static void truncated(enum keel_preload_engine engine)
{
	char path[64];
	snprintf(path, sizeof(path), "/tmp/keel-preload-trunc-%d", (int)getpid());
	write_file(path, g_data, 1u << 20);
	void *mem;
	struct keel_preload *p = make(engine, 4, 2, &mem);
	uint32_t file;
	assert_int_equal(keel_preload_open(p, path, &file), 0);
	uint8_t *buf = malloc(1u << 20);
	struct ended e = {0};
	assert_int_equal(keel_preload_read(p, file, 0, buf, 1u << 20, 5, on_done, &e), 0);
	assert_int_equal(truncate(path, 100000), 0);
	drain(p);
	assert_int_equal(e.count, 1);
	assert_int_equal(e.status[0], -ENODATA);
	assert_int_equal(e.got[0], 100000);
	assert_memory_equal(buf, g_data, 100000);
	keel_preload_fini(p);
	unlink(path);
	free(buf);
	free(mem);
}

static void test_preload_file_truncated_mid_run(void **state)
{
	(void)state;
	truncated(KEEL_PRELOAD_AUTO);
	truncated(KEEL_PRELOAD_PREAD);
}

/* A real I/O error from the kernel: /proc/self/mem at address 0 (never mapped) is EIO. */
static void test_preload_kernel_io_error(void **state)
{
	(void)state;
	for (int e = 0; e < 2; e++) {
		void *mem;
		struct keel_preload *p =
		    make(e == 0 ? KEEL_PRELOAD_AUTO : KEEL_PRELOAD_PREAD, 4, 2, &mem);
		uint32_t file;
		assert_int_equal(keel_preload_open(p, "/proc/self/mem", &file), 0);
		uint8_t buf[4096];
		struct ended en = {0};
		assert_int_equal(keel_preload_read(p, file, 0, buf, sizeof(buf), 1, on_done, &en),
				 0);
		drain(p);
		assert_int_equal(en.count, 1);
		assert_int_equal(en.status[0], -EIO);
		struct keel_preload_stats st;
		keel_preload_stats_get(p, &st);
		assert_int_equal(st.failed, 1);
		keel_preload_fini(p);
		free(mem);
	}
}

/* Shards 0..31 queued; the partitioner then gives this rank the even ones only: the odd ones
 * end -ECANCELED (those in flight when the kernel returns them), the even ones are exact. */
static bool even(void *ctx, uint64_t tag)
{
	(void)ctx;
	return tag % 2 == 0;
}

static void test_preload_retain_follows_shard_moves(void **state)
{
	(void)state;
	for (int eng = 0; eng < 2; eng++) {
		void *mem;
		struct keel_preload *p =
		    make(eng == 0 ? KEEL_PRELOAD_AUTO : KEEL_PRELOAD_PREAD, 64, 4, &mem);
		uint32_t file;
		assert_int_equal(keel_preload_open(p, g_path, &file), 0);
		enum { SHARDS = 32, SHARD = 65536 };
		static uint8_t buf[SHARDS][SHARD];
		struct ended e = {0};
		for (uint64_t s = 0; s < SHARDS; s++)
			assert_int_equal(
			    keel_preload_read(p, file, s * SHARD, buf[s], SHARD, s, on_done, &e),
			    0);
		assert_true(keel_preload_poll(p) >= 0); /* some at the kernel, or read */
		uint32_t before = e.count;
		uint32_t cancelled = keel_preload_retain(p, even, NULL);
		assert_true(cancelled > 0);
		drain(p);
		assert_int_equal(e.count, SHARDS);
		uint32_t got_cancel = 0;
		for (uint32_t k = 0; k < e.count; k++) {
			uint64_t s = e.tag[k];
			if (e.status[k] == -ECANCELED) {
				assert_true(s % 2 == 1 && k >= before);
				got_cancel++;
				continue;
			}
			assert_int_equal(e.status[k], 0);
			assert_true(s % 2 == 0 || k < before); /* an odd one read before the move */
			assert_memory_equal(buf[s], g_data + s * SHARD, SHARD);
		}
		assert_int_equal(got_cancel, cancelled);
		keel_preload_fini(p);
		free(mem);
	}
}

/* A read queued from a callback (the next shard when one arrives) runs in a later poll. */
struct chain {
	struct keel_preload *p;
	uint32_t file, next, ends;
	uint8_t buf[8][4096];
};

static void on_chain(void *ctx, uint64_t tag, int status, size_t got)
{
	struct chain *c = ctx;
	assert_int_equal(status, 0);
	assert_int_equal(got, 4096);
	assert_memory_equal(c->buf[tag], g_data + tag * 4096, 4096);
	c->ends++;
	if (c->next < 8) {
		uint32_t t = c->next++;
		assert_int_equal(
		    keel_preload_read(c->p, c->file, t * 4096ull, c->buf[t], 4096, t, on_chain, c),
		    0);
	}
}

static void test_preload_callback_queues_the_next(void **state)
{
	(void)state;
	void *mem;
	static struct chain c;
	memset(&c, 0, sizeof(c));
	c.p = make(KEEL_PRELOAD_AUTO, 1, 1, &mem);
	assert_int_equal(keel_preload_open(c.p, g_path, &c.file), 0);
	c.next = 1;
	assert_int_equal(keel_preload_read(c.p, c.file, 0, c.buf[0], 4096, 0, on_chain, &c), 0);
	drain(c.p);
	assert_int_equal(c.ends, 8);
	keel_preload_fini(c.p);
	free(mem);
}

/* Closing a file ends its queued reads with -ECANCELED. */
static void test_preload_close_cancels_queued(void **state)
{
	(void)state;
	void *mem;
	struct keel_preload *p = make(KEEL_PRELOAD_AUTO, 8, 1, &mem);
	uint32_t file;
	assert_int_equal(keel_preload_open(p, g_path, &file), 0);
	static uint8_t buf[4][4096];
	struct ended e = {0};
	for (int i = 0; i < 4; i++)
		assert_int_equal(
		    keel_preload_read(p, file, i * 4096ull, buf[i], 4096, (uint64_t)i, on_done, &e),
		    0);
	assert_int_equal(keel_preload_close(p, file), 0);
	drain(p);
	assert_int_equal(e.count, 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(e.status[i], -ECANCELED);
	keel_preload_fini(p);
	free(mem);
}

int main(void)
{
	const char *s = getenv("SEED");
	g_seed = s != NULL ? strtoull(s, NULL, 0) : 11;
	printf("SEED=%" PRIu64 "\n", g_seed);
	g_data = malloc(FILE_BYTES);
	for (size_t i = 0; i < FILE_BYTES; i++)
		g_data[i] = (uint8_t)(rnd() >> 13);
	snprintf(g_path, sizeof(g_path), "/tmp/keel-preload-%d", (int)getpid());
	write_file(g_path, g_data, FILE_BYTES);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_preload_exact_ranges_io_uring),
	    cmocka_unit_test(test_preload_exact_ranges_pread),
	    cmocka_unit_test(test_preload_bad_arguments),
	    cmocka_unit_test(test_preload_file_truncated_mid_run),
	    cmocka_unit_test(test_preload_kernel_io_error),
	    cmocka_unit_test(test_preload_retain_follows_shard_moves),
	    cmocka_unit_test(test_preload_callback_queues_the_next),
	    cmocka_unit_test(test_preload_close_cancels_queued),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(g_path);
	free(g_data);
	return rc;
}
