/* keel-train's sharded input on real files: what a rank reads is its own shards only, byte for
 * byte, one epoch ahead (or each when needed); shard moves cancel the old owner's reads and
 * the new owner reads them; an epoch gone back (a rollback) is read again; and every bad file
 * (missing, not ours, written for other shards, corrupt header, corrupt block, truncated
 * before or after it was opened) is refused with an error that names it. Synthetic data, so
 * this needs no data set; SEED=n replays. */
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train_feed.h"

#define SHARDS 64u

static struct train_data g_src, g_got;
static struct train_feed g_f;
static char g_path[64];
static uint64_t g_seed;

static int setup(void **state)
{
	(void)state;
	const char *env = getenv("SEED");
	g_seed = env != NULL ? strtoull(env, NULL, 0) : (uint64_t)getpid();
	printf("test_train_feed: SEED=%" PRIu64 "\n", g_seed);
	uint64_t s = g_seed;
	g_src.count = TRAIN_SAMPLES_MAX;
	for (uint32_t i = 0; i < g_src.count; i++) {
		for (uint32_t j = 0; j < TRAIN_IN; j++)
			g_src.x[i][j] = (float)(train_rng_next(&s) >> 40) / 16777216.0f;
		g_src.y[i] = (uint8_t)(train_rng_next(&s) % 10);
	}
	train_data_split(&g_src);
	snprintf(g_path, sizeof(g_path), "/tmp/keel-feed-%ld.keel", (long)getpid());
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	(void)unlink(g_path);
	return 0;
}

static void write_src(uint32_t shards)
{
	char err[256];
	assert_int_equal(train_feed_write(g_path, &g_src, shards, err, sizeof(err)), 0);
}

static int open_feed(bool ahead, char *err)
{
	memset(&g_got, 0, sizeof(g_got));
	return train_feed_open(&g_f, g_path, SHARDS, ahead, &g_got, err, 256);
}

static bool owns_mod3(void *ctx, uint32_t shard)
{
	(void)ctx;
	return shard % 3 == 0;
}

static bool owns_even(void *ctx, uint32_t shard)
{
	(void)ctx;
	return shard % 2 == 0;
}

static bool owns_odd(void *ctx, uint32_t shard)
{
	(void)ctx;
	return shard % 2 == 1;
}

/* Poll until every read has ended, for up to 10 s of wall time (io_uring may hand a read to
 * a kernel worker thread, which a loaded machine runs late; the pause lets it run). */
static void drain(void)
{
	struct timespec t0, now, pause = {0, 20000};
	clock_gettime(CLOCK_MONOTONIC, &t0);
	now = t0;
	while (keel_preload_pending(g_f.pre) > 0 && now.tv_sec - t0.tv_sec < 10) {
		assert_true(train_feed_poll(&g_f) >= 0);
		if (keel_preload_pending(g_f.pre) > 0)
			nanosleep(&pause, NULL);
		clock_gettime(CLOCK_MONOTONIC, &now);
	}
	assert_int_equal(keel_preload_pending(g_f.pre), 0);
}

/* Every row of `shard` as the feed gives it, against the source sample it stands for. */
static void check_shard(uint64_t epoch, uint32_t shard)
{
	const float *x;
	const uint8_t *y;
	uint32_t rows;
	assert_int_equal(train_feed_rows(&g_f, epoch, shard, &x, &y, &rows), 0);
	assert_int_equal(rows, (g_src.train_count - shard + SHARDS - 1) / SHARDS);
	for (uint32_t r = 0; r < rows; r++) {
		uint32_t sample = g_src.train[shard + r * SHARDS];
		assert_memory_equal(x + (size_t)r * TRAIN_IN, g_src.x[sample], TRAIN_IN * 4);
		assert_int_equal(y[r], g_src.y[sample]);
	}
}

static void test_train_feed_reads_own_shards_byte_for_byte(void **state)
{
	(void)state;
	char err[256] = "";
	write_src(SHARDS);
	assert_int_equal(open_feed(true, err), 0);
	/* the test set at open, in the test samples' places; no train row */
	assert_int_equal(g_got.test_count, g_src.test_count);
	for (uint32_t k = 0; k < g_got.test_count; k++) {
		assert_memory_equal(g_got.x[g_got.test[k]], g_src.x[g_src.test[k]], TRAIN_IN * 4);
		assert_int_equal(g_got.y[g_got.test[k]], g_src.y[g_src.test[k]]);
	}
	train_feed_follow(&g_f, 5, owns_mod3, NULL);
	drain();
	uint32_t owned = (SHARDS + 2) / 3;
	assert_int_equal(g_f.stats.reads, 2 * owned); /* epoch 5 and, ahead, epoch 6 */
	for (uint32_t s = 0; s < SHARDS; s++) {
		if (s % 3 == 0) {
			check_shard(5, s);
			check_shard(6, s);
		} else {
			assert_int_equal(g_f.slot[0][s].state, SLOT_EMPTY); /* never read */
			assert_int_equal(g_f.slot[1][s].state, SLOT_EMPTY);
		}
	}
	assert_int_equal(g_f.stats.waits, 0); /* read ahead: no step waited */
	/* The next epoch keeps epoch 6 and reads 7 into epoch 5's slots. */
	train_feed_follow(&g_f, 6, owns_mod3, NULL);
	drain();
	assert_int_equal(g_f.stats.reads, 3 * owned);
	check_shard(7, 3);
	/* the reference's full read matches the source too */
	assert_int_equal(train_feed_read_all(&g_f, &g_got), 0);
	for (uint32_t i = 0; i < g_src.train_count; i++)
		assert_memory_equal(g_got.x[g_src.train[i]], g_src.x[g_src.train[i]], TRAIN_IN * 4);
	train_feed_close(&g_f);
}

static void test_train_feed_follows_shard_moves(void **state)
{
	(void)state;
	char err[256] = "";
	write_src(SHARDS);
	assert_int_equal(open_feed(true, err), 0);
	train_feed_follow(&g_f, 0, owns_even, NULL); /* queued, not yet submitted */
	train_feed_follow(&g_f, 0, owns_odd, NULL);  /* the plan moved every shard */
	drain();
	assert_int_equal(g_f.stats.cancelled, SHARDS); /* 32 even shards x 2 epochs */
	assert_int_equal(g_f.stats.moved_in, SHARDS / 2);
	for (uint32_t s = 0; s < SHARDS; s += 2)
		for (uint32_t p = 0; p < 2; p++)
			assert_int_equal(g_f.slot[p][s].state, SLOT_EMPTY);
	for (uint32_t s = 1; s < SHARDS; s += 2)
		check_shard(0, s);
	/* Read, then moved away before use: dropped and counted, never handed out. */
	train_feed_follow(&g_f, 0, owns_even, NULL);
	assert_int_equal(g_f.stats.discarded, SHARDS); /* 32 odd shards x 2 epochs */
	drain();
	for (uint32_t s = 0; s < SHARDS; s += 2)
		check_shard(0, s);
	train_feed_close(&g_f);
}

static void test_train_feed_demand_and_rollback(void **state)
{
	(void)state;
	char err[256] = "";
	write_src(SHARDS);
	assert_int_equal(open_feed(false, err), 0);
	train_feed_follow(&g_f, 2, owns_mod3, NULL);
	assert_int_equal(keel_preload_pending(g_f.pre), 0); /* demand: nothing read ahead */
	check_shard(2, 6);
	assert_int_equal(g_f.stats.waits, 1);
	assert_int_equal(g_f.stats.reads, 1);
	train_feed_close(&g_f);
	/* Ahead, then the epoch goes back (a rollback): the slot holds epoch 4, epoch 2 is read
	 * again into it. */
	assert_int_equal(open_feed(true, err), 0);
	train_feed_follow(&g_f, 3, owns_mod3, NULL);
	drain();
	assert_int_equal(g_f.slot[0][9].epoch, 4);
	train_feed_follow(&g_f, 2, owns_mod3, NULL);
	check_shard(2, 9);
	assert_int_equal(g_f.slot[0][9].epoch, 2);
	train_feed_close(&g_f);
}

static void corrupt(long at, uint8_t xor_with)
{
	FILE *fp = fopen(g_path, "r+b");
	assert_non_null(fp);
	assert_int_equal(fseek(fp, at, SEEK_SET), 0);
	int c = fgetc(fp);
	assert_int_equal(fseek(fp, at, SEEK_SET), 0);
	fputc(c ^ xor_with, fp);
	assert_int_equal(fclose(fp), 0);
}

static void test_train_feed_bad_files(void **state)
{
	(void)state;
	char err[256];
	(void)unlink(g_path);
	assert_int_equal(open_feed(true, err), -ENOENT);
	assert_non_null(strstr(err, g_path));
	FILE *fp = fopen(g_path, "wb"); /* someone else's file */
	assert_non_null(fp);
	for (int i = 0; i < 8192; i++)
		fputc(i * 7, fp);
	assert_int_equal(fclose(fp), 0);
	assert_int_equal(open_feed(true, err), -EINVAL);
	assert_non_null(strstr(err, "not a keel-train shard file"));
	assert_int_equal(truncate(g_path, 10), 0); /* shorter than a header */
	assert_int_equal(open_feed(true, err), -ERANGE);
	assert_non_null(strstr(err, "truncated"));
	write_src(32); /* written for 32 shards, opened for 64 */
	assert_int_equal(open_feed(true, err), -EINVAL);
	assert_non_null(strstr(err, "written for 32 shards"));
	write_src(SHARDS);
	corrupt(40 + 16 * 3 + 8, 0x01); /* block 3's row count in the table */
	assert_int_equal(open_feed(true, err), -EBADMSG);
	assert_non_null(strstr(err, "header"));
	write_src(SHARDS);
	struct stat st;
	assert_int_equal(stat(g_path, &st), 0);
	assert_int_equal(truncate(g_path, st.st_size - 100), 0); /* the test set, last, cut short */
	assert_int_equal(open_feed(true, err), -ERANGE);
	assert_non_null(strstr(err, "truncated"));
}

static void test_train_feed_bad_blocks_at_read_time(void **state)
{
	(void)state;
	char err[256] = "";
	write_src(SHARDS);
	assert_int_equal(open_feed(true, err), 0);
	corrupt((long)g_f.block[7].offset + 100, 0x40); /* a pixel of shard 7 */
	train_feed_follow(&g_f, 0, owns_mod3, NULL);
	drain();
	const float *x;
	const uint8_t *y;
	uint32_t rows;
	assert_int_equal(train_feed_rows(&g_f, 0, 6, &x, &y, &rows), 0);
	assert_int_equal(train_feed_rows(&g_f, 0, 0, &x, &y, &rows), 0);
	assert_int_equal(train_feed_rows(&g_f, 1, 9, &x, &y, &rows), 0);
	train_feed_close(&g_f);
	/* shard 7 is not shard%3: own it now */
	assert_int_equal(open_feed(false, err), 0);
	assert_int_equal(train_feed_rows(&g_f, 0, 7, &x, &y, &rows), -EBADMSG);
	assert_non_null(strstr(g_f.err, "shard 7"));
	assert_non_null(strstr(g_f.err, "checksum"));
	/* The file cut short after it was opened: the read of a shard past the cut fails, named. */
	assert_int_equal(truncate(g_path, (long)g_f.block[40].offset + 10), 0);
	int rc = train_feed_rows(&g_f, 0, 50, &x, &y, &rows);
	assert_true(rc == -ERANGE || rc == -ENODATA);
	assert_non_null(strstr(g_f.err, "shard 50"));
	assert_non_null(strstr(g_f.err, "truncated"));
	train_feed_close(&g_f);
	assert_int_equal(open_feed(false, err), -ERANGE); /* reopened: refused at once */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_train_feed_reads_own_shards_byte_for_byte),
	    cmocka_unit_test(test_train_feed_follows_shard_moves),
	    cmocka_unit_test(test_train_feed_demand_and_rollback),
	    cmocka_unit_test(test_train_feed_bad_files),
	    cmocka_unit_test(test_train_feed_bad_blocks_at_read_time),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
