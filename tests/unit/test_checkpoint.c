/* Checkpoints: round trip, truncation at every header and section offset, bit flips, a writer
 * killed at random points, config hash refusal, keep-K, O_DIRECT, and the rollback vote
 * agreed over a chaos-transport cluster that loses a member mid-vote. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster_int.h"
#include "keel/checkpoint.h"

#define SEC_A_BYTES 100u   /* small, not block aligned */
#define SEC_B_BYTES 20000u /* several blocks */

static uint64_t g_seed;

struct fixture {
	char dir[128];
	uint8_t mem[8192] __attribute__((aligned(64)));
	uint8_t a[SEC_A_BYTES], b[SEC_B_BYTES];
	struct keel_ckpt *ck;
	struct keel_ckpt_config cfg;
};

static uint8_t g_scratch[1 << 17] __attribute__((aligned(KEEL_CKPT_ALIGN)));

static void fill(struct fixture *f, uint64_t step)
{
	for (uint32_t i = 0; i < SEC_A_BYTES; i++)
		f->a[i] = (uint8_t)(step * 7 + i);
	for (uint32_t i = 0; i < SEC_B_BYTES; i++)
		f->b[i] = (uint8_t)(step * 13 + i * 3);
}

static bool matches(const struct fixture *f, uint64_t step)
{
	for (uint32_t i = 0; i < SEC_A_BYTES; i++)
		if (f->a[i] != (uint8_t)(step * 7 + i))
			return false;
	for (uint32_t i = 0; i < SEC_B_BYTES; i++)
		if (f->b[i] != (uint8_t)(step * 13 + i * 3))
			return false;
	return true;
}

static void open_ck(struct fixture *f, uint64_t hash, bool direct)
{
	keel_ckpt_config_default(&f->cfg);
	f->cfg.dir = f->dir;
	f->cfg.config_hash = hash;
	f->cfg.interval_ns = 0;
	f->cfg.direct = direct;
	f->cfg.scratch = g_scratch;
	f->cfg.scratch_len = sizeof(g_scratch);
	assert_int_equal(keel_ckpt_init(&f->ck, f->mem, sizeof(f->mem), &f->cfg), 0);
	assert_int_equal(keel_ckpt_register(f->ck, "a", f->a, SEC_A_BYTES), 0);
	assert_int_equal(keel_ckpt_register(f->ck, "b", f->b, SEC_B_BYTES), 0);
}

static int setup(void **state)
{
	static struct fixture f;
	memset(&f, 0, sizeof(f));
	snprintf(f.dir, sizeof(f.dir), "/tmp/keel-ckpt-test-%d-XXXXXX", (int)getpid());
	assert_non_null(mkdtemp(f.dir));
	open_ck(&f, 0x1234, false);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	keel_ckpt_fini(f->ck);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	assert_int_equal(system(cmd), 0);
	return 0;
}

static void path_of(const struct fixture *f, uint64_t step, char *out, size_t len)
{
	snprintf(out, len, "%s/ckpt-%020llu.keel", f->dir, (unsigned long long)step);
}

static size_t read_file(const char *path, uint8_t *buf, size_t cap)
{
	FILE *fp = fopen(path, "rb");
	assert_non_null(fp);
	size_t n = fread(buf, 1, cap, fp);
	fclose(fp);
	return n;
}

static void write_file(const char *path, const uint8_t *buf, size_t len)
{
	FILE *fp = fopen(path, "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(buf, 1, len, fp), len);
	fclose(fp);
}

static void test_checkpoint_round_trip(void **state)
{
	struct fixture *f = *state;
	fill(f, 5);
	assert_int_equal(keel_ckpt_write(f->ck, 5, 3, 0), 0);
	fill(f, 0);
	struct keel_ckpt_report rep;
	assert_int_equal(keel_ckpt_restore(f->ck, UINT64_MAX, &rep), 0);
	assert_int_equal(rep.step, 5);
	assert_int_equal(rep.epoch, 3);
	assert_int_equal(rep.bytes, SEC_A_BYTES + SEC_B_BYTES);
	assert_int_equal(rep.rejected_count, 0);
	assert_true(matches(f, 5));
}

static uint8_t g_file[1 << 16];

/* Step 2 is cut at `cut` bytes: step 1 must be restored, step 2 reported with `reason`. */
static void expect_fallback(struct fixture *f, enum keel_ckpt_reason reason)
{
	fill(f, 0);
	struct keel_ckpt_report rep;
	assert_int_equal(keel_ckpt_restore(f->ck, UINT64_MAX, &rep), 0);
	assert_int_equal(rep.step, 1);
	assert_true(matches(f, 1));
	assert_int_equal(rep.rejected_count, 1);
	assert_int_equal(rep.rejected[0].step, 2);
	if (rep.rejected[0].reason != reason)
		fail_msg("got %s, want %s", keel_ckpt_reason_str(rep.rejected[0].reason),
			 keel_ckpt_reason_str(reason));
}

static void test_checkpoint_truncated_at_every_offset(void **state)
{
	struct fixture *f = *state;
	fill(f, 1);
	assert_int_equal(keel_ckpt_write(f->ck, 1, 1, 0), 0);
	fill(f, 2);
	assert_int_equal(keel_ckpt_write(f->ck, 2, 1, 0), 0);
	char p[256];
	path_of(f, 2, p, sizeof(p));
	size_t len = read_file(p, g_file, sizeof(g_file));
	/* Every offset of the header and of section a (and its padding), and of section b. */
	for (size_t cut = 0; cut < len; cut += cut < 2 * KEEL_CKPT_HEADER_BYTES ? 1 : 97) {
		write_file(p, g_file, cut);
		expect_fallback(f, KEEL_CKPT_TRUNCATED);
	}
	write_file(p, g_file, len);
}

static void test_checkpoint_bit_flip_caught(void **state)
{
	struct fixture *f = *state;
	srand((unsigned)g_seed);
	fill(f, 1);
	assert_int_equal(keel_ckpt_write(f->ck, 1, 1, 0), 0);
	fill(f, 2);
	assert_int_equal(keel_ckpt_write(f->ck, 2, 1, 0), 0);
	char p[256];
	path_of(f, 2, p, sizeof(p));
	size_t len = read_file(p, g_file, sizeof(g_file));
	/* Every byte of both sections, a random bit of each. */
	size_t a0 = KEEL_CKPT_HEADER_BYTES, b0 = 2 * KEEL_CKPT_HEADER_BYTES;
	for (size_t i = a0; i < b0 + SEC_B_BYTES; i++) {
		if (i >= a0 + SEC_A_BYTES && i < b0)
			continue; /* padding: not data */
		uint8_t bit = (uint8_t)(1u << (rand() % 8));
		g_file[i] ^= bit;
		write_file(p, g_file, len);
		expect_fallback(f, KEEL_CKPT_SECTION_CRC);
		g_file[i] ^= bit;
	}
	/* A flipped bit in the used part of the header. */
	for (size_t i = 0; i < 64 + 2 * 48; i++) {
		g_file[i] ^= 0x10;
		write_file(p, g_file, len);
		fill(f, 0);
		struct keel_ckpt_report rep;
		assert_int_equal(keel_ckpt_restore(f->ck, UINT64_MAX, &rep), 0);
		assert_int_equal(rep.step, 1);
		assert_int_not_equal(rep.rejected[0].reason, KEEL_CKPT_OK);
		g_file[i] ^= 0x10;
	}
}

static void test_checkpoint_config_hash_refused(void **state)
{
	struct fixture *f = *state;
	fill(f, 4);
	assert_int_equal(keel_ckpt_write(f->ck, 4, 1, 0), 0);
	keel_ckpt_fini(f->ck);
	open_ck(f, 0x9999, false);
	struct keel_ckpt_report rep;
	assert_int_equal(keel_ckpt_restore(f->ck, UINT64_MAX, &rep), -ENOENT);
	assert_int_equal(rep.rejected_count, 1);
	assert_int_equal(rep.rejected[0].reason, KEEL_CKPT_CONFIG_HASH);
	assert_int_equal(rep.rejected[0].config_hash, 0x1234);
	assert_non_null(strstr(keel_ckpt_reason_str(KEEL_CKPT_CONFIG_HASH), "config"));
}

static void test_checkpoint_keeps_last_k(void **state)
{
	struct fixture *f = *state;
	for (uint64_t s = 1; s <= 7; s++) {
		fill(f, s);
		assert_int_equal(keel_ckpt_write(f->ck, s * 10, 1, 0), 0);
	}
	uint64_t steps[8];
	assert_int_equal(keel_ckpt_list(f->ck, steps, 8), KEEL_CKPT_KEEP_DEFAULT);
	assert_int_equal(steps[0], 70);
	assert_int_equal(steps[2], 50);
	fill(f, 0);
	struct keel_ckpt_report rep;
	assert_int_equal(keel_ckpt_restore(f->ck, 65, &rep), 0);
	assert_int_equal(rep.step, 60);
	assert_true(matches(f, 6));
	assert_int_equal(rep.rejected[0].reason, KEEL_CKPT_NOT_WANTED);
}

static void test_checkpoint_due(void **state)
{
	struct fixture *f = *state;
	keel_ckpt_fini(f->ck);
	keel_ckpt_config_default(&f->cfg);
	f->cfg.dir = f->dir;
	f->cfg.interval_steps = 10;
	f->cfg.scratch = g_scratch;
	f->cfg.scratch_len = sizeof(g_scratch);
	assert_int_equal(keel_ckpt_init(&f->ck, f->mem, sizeof(f->mem), &f->cfg), 0);
	assert_false(keel_ckpt_due(f->ck, 0, 0));
	assert_false(keel_ckpt_due(f->ck, 9, 1000));
	assert_true(keel_ckpt_due(f->ck, 10, 1000));
	assert_true(keel_ckpt_due(f->ck, 3, KEEL_CKPT_INTERVAL_NS_DEFAULT));
	struct keel_ckpt *x;
	/* Any positive interval is the caller's choice (a 10-30 min cadence is advice): 1 s, and
	 * the largest value, which must not overflow into "always due". */
	keel_ckpt_fini(f->ck);
	f->cfg.interval_steps = 0;
	f->cfg.interval_ns = 1000000000ull;
	assert_true(keel_ckpt_storage_size(&f->cfg) > 0);
	assert_int_equal(keel_ckpt_init(&f->ck, f->mem, sizeof(f->mem), &f->cfg), 0);
	assert_false(keel_ckpt_due(f->ck, 0, 5000000000ull));
	assert_false(keel_ckpt_due(f->ck, 1, 5999999999ull));
	assert_true(keel_ckpt_due(f->ck, 2, 6000000000ull));
	keel_ckpt_fini(f->ck);
	f->cfg.interval_ns = UINT64_MAX;
	assert_int_equal(keel_ckpt_init(&f->ck, f->mem, sizeof(f->mem), &f->cfg), 0);
	assert_false(keel_ckpt_due(f->ck, 0, 100));
	assert_false(keel_ckpt_due(f->ck, 1, UINT64_MAX - 1));
	f->cfg.interval_ns = 0;
	assert_int_equal(keel_ckpt_init(&x, f->mem, 16, &f->cfg), -ENOSPC);
	assert_int_equal(keel_ckpt_register(f->ck, "", f->a, 1), -EINVAL);
	assert_int_equal(keel_ckpt_register(f->ck, "a", f->a, 1), 0);
	assert_int_equal(keel_ckpt_register(f->ck, "a", f->a, 1), -EINVAL);
	assert_int_equal(keel_ckpt_restore(f->ck, UINT64_MAX, NULL), -ENOENT);
}

static void test_checkpoint_direct(void **state)
{
	struct fixture *f = *state;
	/* Ask the file system itself whether it takes O_DIRECT (tmpfs does not): only then is the
	 * test skipped. An -EINVAL from keel on a file system that takes it is a bug (say, a
	 * misaligned transfer), and fails the test. */
	char probe[512];
	snprintf(probe, sizeof(probe), "%s/direct-probe", f->dir);
	int pfd = open(probe, O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (pfd < 0 && errno == EINVAL) {
		printf("O_DIRECT not supported by the file system of %s\n", f->dir);
		skip();
	}
	assert_true(pfd >= 0);
	close(pfd);
	unlink(probe);
	keel_ckpt_fini(f->ck);
	open_ck(f, 0x1234, true);
	fill(f, 9);
	assert_int_equal(keel_ckpt_write(f->ck, 9, 2, 0), 0);
	fill(f, 0);
	struct keel_ckpt_report rep;
	assert_int_equal(keel_ckpt_restore(f->ck, UINT64_MAX, &rep), 0);
	assert_true(matches(f, 9));
	keel_ckpt_fini(f->ck);
	open_ck(f, 0x1234, false); /* same format either way */
	fill(f, 0);
	assert_int_equal(keel_ckpt_restore(f->ck, UINT64_MAX, &rep), 0);
	assert_true(matches(f, 9));
}

/* A child writes checkpoints of a 4 MiB state back to back; it is SIGKILLed at a random
 * moment. Whatever was on disk then, the newest file that verifies is a whole checkpoint. */
#define BIG_BYTES (4u << 20)
static void writer_child(const char *dir)
{
	static uint8_t big[BIG_BYTES], mem[8192] __attribute__((aligned(64)));
	struct keel_ckpt_config c;
	keel_ckpt_config_default(&c);
	c.dir = dir;
	c.interval_ns = 0;
	c.scratch = g_scratch;
	c.scratch_len = sizeof(g_scratch);
	struct keel_ckpt *ck;
	if (keel_ckpt_init(&ck, mem, sizeof(mem), &c) != 0 ||
	    keel_ckpt_register(ck, "big", big, sizeof(big)) != 0)
		_exit(1);
	for (uint64_t step = 1;; step++) {
		memset(big, (int)(step & 0xff), sizeof(big));
		if (keel_ckpt_write(ck, step, 0, 0) != 0)
			_exit(1);
	}
}

static void test_checkpoint_killed_writer(void **state)
{
	struct fixture *f = *state;
	static uint8_t big[BIG_BYTES], mem[8192] __attribute__((aligned(64)));
	srand((unsigned)g_seed);
	for (int round = 0; round < 8; round++) {
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0)
			writer_child(f->dir);
		struct timespec ts = {0, 20000000 + (rand() % 80) * 1000000};
		nanosleep(&ts, NULL);
		kill(pid, SIGKILL);
		int st;
		waitpid(pid, &st, 0);
		struct keel_ckpt_config c;
		keel_ckpt_config_default(&c);
		c.dir = f->dir;
		c.interval_ns = 0;
		c.scratch = g_scratch;
		c.scratch_len = sizeof(g_scratch);
		struct keel_ckpt *ck;
		assert_int_equal(keel_ckpt_init(&ck, mem, sizeof(mem), &c), 0);
		assert_int_equal(keel_ckpt_register(ck, "big", big, sizeof(big)), 0);
		struct keel_ckpt_report rep;
		int rc = keel_ckpt_restore(ck, UINT64_MAX, &rep);
		if (rc == -ENOENT && rep.candidates == 0) {
			keel_ckpt_fini(ck);
			continue; /* killed before the first rename */
		}
		assert_int_equal(rc, 0);
		for (size_t i = 0; i < sizeof(big); i += 4093)
			assert_int_equal(big[i], (uint8_t)(rep.step & 0xff));
		keel_ckpt_fini(ck);
		char cmd[256];
		snprintf(cmd, sizeof(cmd), "rm -f '%s'/ckpt-*", f->dir);
		assert_int_equal(system(cmd), 0);
	}
}

static void test_checkpoint_vote_decide(void **state)
{
	(void)state;
	enum { W = 4, K = 3 };
	float sum[W * K] = {0};
	/* rank 0 has 30 20 10, rank 1 has 20 10, rank 3 has 30 20 (steps + 1 in the vote). */
	float r0[K] = {31, 21, 11}, r1[K] = {21, 11, 0}, r3[K] = {31, 21, 0};
	memcpy(sum + 0 * K, r0, sizeof(r0));
	memcpy(sum + 1 * K, r1, sizeof(r1));
	memcpy(sum + 3 * K, r3, sizeof(r3));
	uint32_t all[3] = {0, 1, 3}, two[2] = {0, 3}, none[2] = {0, 2};
	uint64_t step = 99;
	assert_int_equal(keel_ckpt_vote_decide(sum, W * K, W, K, all, 3, &step), 0);
	assert_int_equal(step, 20);
	assert_int_equal(keel_ckpt_vote_decide(sum, W * K, W, K, two, 2, &step), 0);
	assert_int_equal(step, 30);
	assert_int_equal(keel_ckpt_vote_decide(sum, W * K, W, K, none, 2, &step), -ENOENT);
	assert_int_equal(keel_ckpt_vote_decide(sum, 2, W, K, all, 3, &step), -EINVAL);
}

/* Rollback agreement over the chaos transport: three members vote; member 2 dies during the
 * vote (a hard fault); the vote restarts on the survivors, who restore the same step. */
static void test_checkpoint_rollback_chaos(void **state)
{
	struct fixture *f = *state;
	enum { W = 3 };
	static struct fixture m[W];
	static uint8_t mem[W][8192] __attribute__((aligned(64)));
	static uint8_t scratch[W][1 << 16] __attribute__((aligned(KEEL_CKPT_ALIGN)));
	const uint64_t have[W][3] = {{10, 20, 30}, {10, 20, 0}, {20, 30, 0}};
	struct keel_ckpt *ck[W];
	for (uint32_t r = 0; r < W; r++) {
		int len = snprintf(m[r].dir, sizeof(m[r].dir), "%.100s/r%u", f->dir, r);
		assert_true(len > 0 && (size_t)len < sizeof(m[r].dir));
		assert_int_equal(mkdir(m[r].dir, 0755), 0);
		struct keel_ckpt_config c;
		keel_ckpt_config_default(&c);
		c.dir = m[r].dir;
		c.interval_ns = 0;
		c.scratch = scratch[r];
		c.scratch_len = sizeof(scratch[r]);
		assert_int_equal(keel_ckpt_init(&ck[r], mem[r], sizeof(mem[r]), &c), 0);
		assert_int_equal(keel_ckpt_register(ck[r], "a", m[r].a, SEC_A_BYTES), 0);
		for (uint32_t i = 0; i < 3 && have[r][i] != 0; i++) {
			fill(&m[r], have[r][i]);
			assert_int_equal(keel_ckpt_write(ck[r], have[r][i], 1, 0), 0);
		}
	}
	struct cluster c;
	char spec[128];
	snprintf(spec, sizeof(spec), "loss=0.05,dup=0.01,reorder=0.05,seed=%llu",
		 (unsigned long long)g_seed);
	assert_int_equal(cluster_init(&c, W, spec, g_seed, NULL), 0);
	static float vote[W][W * KEEL_CKPT_KEEP_DEFAULT], sum[W][W * KEEL_CKPT_KEEP_DEFAULT];
	size_t n = keel_ckpt_vote_count(W, KEEL_CKPT_KEEP_DEFAULT);
	struct keel_op *ops[CLUSTER_MAX] = {0};
	int rc[CLUSTER_MAX] = {0};
	for (uint32_t r = 0; r < W; r++) {
		assert_int_equal(keel_ckpt_vote_fill(ck[r], r, W, vote[r], n), 0);
		assert_int_equal(keel_allreduce_start(c.node[r], vote[r], sum[r], n, KEEL_F32,
						      KEEL_SUM, &ops[r]),
				 0);
	}
	c.paused[2] = true; /* member 2 dies before its vote goes anywhere useful */
	ops[2] = NULL;
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 2000000), 0);
	uint64_t step[2];
	for (uint32_t r = 0; r < 2; r++) {
		assert_int_equal(rc[r], 0);
		uint32_t voters[2] = {0, 1};
		assert_int_equal(keel_ckpt_vote_decide(sum[r], n, W, KEEL_CKPT_KEEP_DEFAULT, voters,
						       2, &step[r]),
				 0);
		struct keel_ckpt_report rep;
		fill(&m[r], 0);
		assert_int_equal(keel_ckpt_restore(ck[r], step[r], &rep), 0);
		assert_int_equal(rep.step, step[r]);
	}
	assert_int_equal(step[0], 20);
	assert_int_equal(step[1], 20);
	cluster_fini(&c);
	for (uint32_t r = 0; r < W; r++)
		keel_ckpt_fini(ck[r]);
}

int main(void)
{
	g_seed = cluster_seed((uint64_t)time(NULL));
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_checkpoint_round_trip, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_truncated_at_every_offset, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_bit_flip_caught, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_config_hash_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_keeps_last_k, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_due, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_direct, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_killed_writer, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_vote_decide, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_rollback_chaos, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
