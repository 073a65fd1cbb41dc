/* Tests of the tools' OS glue: launcher environment, KEEL_PEERS, TCP rendezvous on 127.0.0.1
 * (ranks as threads of this process) and the POSIX waiter. Network: loopback only. */
/* cmocka.h needs these first, in this order. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "keel/boot.h"
#include "keel/launch.h"
#include "keel/limits.h"
#include "keel/posix.h"
#include "rendezvous_int.h"

#define MS 1000000ull

static const char *const env_names[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_JOB_ID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "KEEL_PEERS",
    "KEEL_JOB_ID",
    "KEEL_WAIT",
    "KEEL_SPIN_US",
    "KEEL_JOB_KEY_FILE",
    "KEEL_JOB_KEY",
    "KEEL_MAC",
    "KEEL_HOST",
    "KEEL_SPIN_YIELD",
    "KEEL_MTU",
    "KEEL_WINDOW",
    "KEEL_BURST",
    "KEEL_UDP_STAGE",
    "KEEL_UDP_PIECES",
};

static int env_clear(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
		unsetenv(env_names[i]);
	/* Nodes these tests start talk UDP: auto would map shared memory for ranks on this host,
	 * and with KEEL_PEERS leave its name for restarts (keel-run removes it; no keel-run here).
	 */
	setenv("KEEL_TRANSPORT", "udp", 1);
	return 0;
}

static void env(const char *name, const char *value)
{
	assert_int_equal(setenv(name, value, 1), 0);
}

static void torchrun_env(const char *rank, const char *world)
{
	env("RANK", rank);
	env("WORLD_SIZE", world);
	env("MASTER_ADDR", "127.0.0.1");
	env("MASTER_PORT", "29500");
}

/* Expect keel_launch_from_env to fail with `code` and a message containing `needle`. */
static void expect_launch_error(int code, const char *needle)
{
	struct keel_launch l;
	char err[256] = "";
	int rc = keel_launch_from_env(&l, err, sizeof(err));

	if (rc != code || strstr(err, needle) == NULL)
		print_error("rc %d (want %d), err '%s' (want '%s')\n", rc, code, err, needle);
	assert_int_equal(rc, code);
	assert_non_null(strstr(err, needle));
}

/* ---- environment ------------------------------------------------------------------------ */

/* KEEL_HOST names this rank's host: equal names, equal ids; a machine's id otherwise; refused
 * when empty, too long, or beside KEEL_PEERS (no exchange would tell the others). */
static void test_launch_host(void **state)
{
	struct keel_launch a, b;
	char err[256], longname[300];

	(void)state;
	torchrun_env("1", "4");
	assert_int_equal(keel_launch_from_env(&a, err, sizeof(err)), 0);
	assert_int_not_equal(a.host_id, 0);
	env("KEEL_HOST", "h0");
	assert_int_equal(keel_launch_from_env(&b, err, sizeof(err)), 0);
	assert_int_not_equal(b.host_id, a.host_id);
	assert_int_not_equal(b.host_id, 0);
	assert_int_equal(keel_launch_from_env(&a, err, sizeof(err)), 0);
	assert_int_equal(a.host_id, b.host_id);
	env("KEEL_HOST", "h1");
	assert_int_equal(keel_launch_from_env(&a, err, sizeof(err)), 0);
	assert_int_not_equal(a.host_id, b.host_id);
	env("KEEL_HOST", "");
	expect_launch_error(-EINVAL, "KEEL_HOST='': expected a text of 1..255 bytes");
	memset(longname, 'x', 256);
	longname[256] = '\0';
	env("KEEL_HOST", longname);
	expect_launch_error(-EINVAL, "KEEL_HOST='xxxxxxxx");
	expect_launch_error(-EINVAL, "...': expected a text of 1..255 bytes");
	env("KEEL_HOST", "h0");
	env("KEEL_PEERS", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4");
	expect_launch_error(-EINVAL, "KEEL_HOST=h0: with KEEL_PEERS");
}

static void test_launch_torchrun_env(void **state)
{
	struct keel_launch l;
	char err[256];

	(void)state;
	torchrun_env("2", "4");
	env("LOCAL_RANK", "0");
	env("LOCAL_WORLD_SIZE", "2");
	env("KEEL_JOB_ID", "77");
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_int_equal(l.rank, 2);
	assert_int_equal(l.world_size, 4);
	assert_int_equal(l.local_rank, 0);
	assert_int_equal(l.local_world_size, 2);
	assert_int_equal(l.job_id, 77);
	assert_string_equal(l.master_addr, "127.0.0.1");
	assert_int_equal(l.master_port, 29500);
	assert_null(l.peers);
	assert_string_equal(l.source, "torchrun");
}

static void test_launch_precedence(void **state)
{
	struct keel_launch l;
	char err[256];

	(void)state;
	env("MASTER_ADDR", "127.0.0.1");
	env("MASTER_PORT", "1234");
	env("OMPI_COMM_WORLD_RANK", "3");
	env("OMPI_COMM_WORLD_SIZE", "8");
	env("OMPI_COMM_WORLD_LOCAL_RANK", "1");
	env("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_string_equal(l.source, "openmpi");
	assert_int_equal(l.rank, 3);
	assert_int_equal(l.world_size, 8);
	assert_int_equal(l.local_rank, 1);
	assert_int_equal(l.local_world_size, 2);

	/* mpirun in an sbatch script: every rank inherits the batch step's SLURM_PROCID=0 and
	 * the job's SLURM_NTASKS; Open MPI's own variables are the ones that tell ranks apart. */
	env("SLURM_PROCID", "0");
	env("SLURM_NTASKS", "8");
	env("SLURM_LOCALID", "0");
	env("SLURM_JOB_ID", "4242");
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_string_equal(l.source, "openmpi");
	assert_int_equal(l.rank, 3);
	assert_int_equal(l.world_size, 8);
	assert_int_equal(l.local_rank, 1);
	assert_int_equal(l.local_world_size, 2);
	assert_int_equal(l.job_id, 4242); /* the Slurm job's id is the same on every rank */

	unsetenv("OMPI_COMM_WORLD_RANK");
	unsetenv("OMPI_COMM_WORLD_SIZE");
	unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
	unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	env("SLURM_PROCID", "5");
	env("SLURM_NTASKS", "6");
	env("SLURM_LOCALID", "1");
	env("SLURM_NTASKS_PER_NODE", "2(x3)"); /* uneven form: ignored */
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_string_equal(l.source, "slurm");
	assert_int_equal(l.rank, 5);
	assert_int_equal(l.world_size, 6);
	assert_int_equal(l.local_rank, 1);
	assert_int_equal(l.local_world_size, 6);
	assert_int_equal(l.job_id, 4242);

	env("RANK", "0");
	env("WORLD_SIZE", "2");
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_string_equal(l.source, "torchrun");
	assert_int_equal(l.rank, 0);
	assert_int_equal(l.world_size, 2);
	/* No LOCAL_*: all ranks on this host, local rank = rank. */
	assert_int_equal(l.local_rank, 0);
	assert_int_equal(l.local_world_size, 2);
}

static void test_launch_nothing_set(void **state)
{
	(void)state;
	expect_launch_error(-ENOENT, "RANK");
	expect_launch_error(-ENOENT, "SLURM_PROCID");
	expect_launch_error(-ENOENT, "OMPI_COMM_WORLD_RANK");
	env("KEEL_PEERS", "127.0.0.1:5000");
	expect_launch_error(-ENOENT, "KEEL_PEERS needs");
}

static void test_launch_single(void **state)
{
	struct keel_launch l;

	(void)state;
	keel_launch_single(&l);
	assert_int_equal(l.rank, 0);
	assert_int_equal(l.world_size, 1);
	assert_int_equal(l.local_world_size, 1);
	assert_string_equal(l.source, "single");
	/* A world of 1 needs no master. */
	env("RANK", "0");
	env("WORLD_SIZE", "1");
	assert_int_equal(keel_launch_from_env(&l, NULL, 0), 0);
	assert_int_equal(l.world_size, 1);
}

static void test_launch_bad_numbers(void **state)
{
	(void)state;
	torchrun_env("abc", "4");
	expect_launch_error(-EINVAL, "RANK='abc'");
	torchrun_env("", "4");
	expect_launch_error(-EINVAL, "RANK=''");
	torchrun_env("-1", "4");
	expect_launch_error(-EINVAL, "RANK='-1'");
	torchrun_env("1", "4x");
	expect_launch_error(-EINVAL, "WORLD_SIZE='4x'");
	torchrun_env("0", "0");
	expect_launch_error(-EINVAL, "WORLD_SIZE='0'");
	torchrun_env("0", "4097");
	expect_launch_error(-EINVAL, "WORLD_SIZE='4097'");
	torchrun_env("0", "99999999999999999999999");
	expect_launch_error(-EINVAL, "WORLD_SIZE=");
	torchrun_env("4", "4");
	expect_launch_error(-EINVAL, "RANK=4 is not below the world size 4");
	torchrun_env("1", "4");
	env("LOCAL_RANK", "x");
	expect_launch_error(-EINVAL, "LOCAL_RANK='x'");
	env("LOCAL_RANK", "2");
	env("LOCAL_WORLD_SIZE", "2");
	expect_launch_error(-EINVAL, "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
	env("LOCAL_RANK", "0");
	env("LOCAL_WORLD_SIZE", "8");
	expect_launch_error(-EINVAL, "LOCAL_WORLD_SIZE=8 is above the world size 4");
	env("LOCAL_WORLD_SIZE", "0");
	expect_launch_error(-EINVAL, "LOCAL_WORLD_SIZE='0'");
}

static void test_launch_missing_partner(void **state)
{
	(void)state;
	env("RANK", "1");
	expect_launch_error(-EINVAL, "RANK is set but WORLD_SIZE is not");
	env_clear(NULL);
	env("SLURM_PROCID", "1");
	expect_launch_error(-EINVAL, "SLURM_NTASKS");
	env_clear(NULL);
	env("OMPI_COMM_WORLD_RANK", "1");
	expect_launch_error(-EINVAL, "OMPI_COMM_WORLD_SIZE");
}

static void test_launch_master(void **state)
{
	(void)state;
	env("RANK", "1");
	env("WORLD_SIZE", "2");
	expect_launch_error(-EINVAL, "MASTER_ADDR is not set");
	env("MASTER_ADDR", "127.0.0.1");
	expect_launch_error(-EINVAL, "MASTER_PORT is not set");
	env("MASTER_PORT", "0");
	expect_launch_error(-EINVAL, "MASTER_PORT='0'");
	env("MASTER_PORT", "65536");
	expect_launch_error(-EINVAL, "MASTER_PORT='65536'");
	env("MASTER_PORT", "http");
	expect_launch_error(-EINVAL, "MASTER_PORT='http'");
	env("MASTER_PORT", "65535");
	env("MASTER_ADDR", "");
	expect_launch_error(-EINVAL, "MASTER_ADDR is empty");
}

static void test_launch_job_id(void **state)
{
	struct keel_launch l;

	(void)state;
	torchrun_env("0", "2");
	env("KEEL_JOB_ID", "4294967296");
	expect_launch_error(-EINVAL, "KEEL_JOB_ID='4294967296'");
	env("KEEL_JOB_ID", "4294967295");
	assert_int_equal(keel_launch_from_env(&l, NULL, 0), 0);
	assert_int_equal(l.job_id, 4294967295u);
	assert_true(l.job_id_fixed);
	unsetenv("KEEL_JOB_ID");
	env("SLURM_JOB_ID", "junk"); /* unreadable: ignored */
	assert_int_equal(keel_launch_from_env(&l, NULL, 0), 0);
	assert_int_equal(l.job_id, 0);
	assert_false(l.job_id_fixed); /* rank 0's rendezvous will pick one */
	env("SLURM_JOB_ID", "4242");
	assert_int_equal(keel_launch_from_env(&l, NULL, 0), 0);
	assert_int_equal(l.job_id, 4242);
	assert_true(l.job_id_fixed);
}

/* ---- the job key -------------------------------------------------------------------------- */

#define KEY_HEX "00112233445566778899aabbccddeeffF0E1D2C3B4A5968778695A4B3C2D1E0f"

/* The key KEY_HEX spells. */
static void key_bytes(uint8_t *key)
{
	static const uint8_t k[32] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
				      0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
				      0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87,
				      0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};

	memcpy(key, k, sizeof(k));
}

/* Skip when keel was built without libsodium (every key is then refused: checked here). */
static void need_sodium(void)
{
	if (keel_rv_proof_available())
		return;
	torchrun_env("0", "2");
	env("KEEL_JOB_KEY", KEY_HEX);
	expect_launch_error(-ENOTSUP, "built without libsodium");
	skip();
}

/* Fails with `needle` in the message, which must never quote the key. */
static void expect_key_error(const char *needle)
{
	struct keel_launch l;
	char err[512] = "";
	int rc = keel_launch_from_env(&l, err, sizeof(err));

	if (rc != -EINVAL || strstr(err, needle) == NULL)
		print_error("rc %d, err '%s' (want '%s')\n", rc, err, needle);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(err, needle));
	assert_null(strstr(err, "00112233"));
	assert_null(strstr(err, "0011223344"));
}

static void test_launch_key_env(void **state)
{
	struct keel_launch l;
	uint8_t want[32];
	char err[256];
	uint32_t derived;

	(void)state;
	need_sodium();
	key_bytes(want);
	torchrun_env("1", "2");
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_false(l.has_key);
	assert_null(l.key_source);
	env("KEEL_JOB_KEY", KEY_HEX);
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_true(l.has_key);
	assert_memory_equal(l.key, want, 32);
	assert_string_equal(l.key_source, "KEEL_JOB_KEY");
	/* No job id given: one derived from the key, the same for every rank of the job. */
	assert_false(l.job_id_fixed);
	assert_int_not_equal(l.job_id, 0);
	derived = l.job_id;
	assert_int_equal(keel_rv_job_id_from_key(want), derived);
	want[0] ^= 1;
	assert_int_not_equal(keel_rv_job_id_from_key(want), derived);
	env("KEEL_JOB_ID", "12");
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_true(l.job_id_fixed);
	assert_int_equal(l.job_id, 12);
	/* Every way to get it wrong. */
	env("KEEL_JOB_KEY", "00112233");
	expect_key_error("KEEL_JOB_KEY: 8 characters where the key needs 64 hex digits");
	env("KEEL_JOB_KEY", KEY_HEX "0");
	expect_key_error("KEEL_JOB_KEY: 65 characters");
	env("KEEL_JOB_KEY", "0011g233445566778899aabbccddeeffF0E1D2C3B4A5968778695A4B3C2D1E0f");
	expect_key_error("KEEL_JOB_KEY: character 5 is not a hex digit");
	env("KEEL_JOB_KEY", "0011223344556677 899aabbccddeeffF0E1D2C3B4A5968778695A4B3C2D1E0f");
	expect_key_error("character 17 is not a hex digit");
	env("KEEL_JOB_KEY", "");
	expect_key_error("KEEL_JOB_KEY='': expected a text of 1..1024 bytes");
	env("KEEL_JOB_KEY", KEY_HEX);
	env("KEEL_JOB_KEY_FILE", "/nonexistent");
	expect_key_error("both KEEL_JOB_KEY_FILE and KEEL_JOB_KEY are set");
}

/* A file of `len` bytes from `data` with mode `mode` at dir/name; returns its path. */
static const char *key_file(const char *dir, const char *name, const void *data, size_t len,
			    mode_t mode)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, mode), 0);
	return path;
}

static void expect_key_file(const char *path, const uint8_t *want)
{
	struct keel_launch l;
	char err[512] = "";
	int rc;

	env("KEEL_JOB_KEY_FILE", path);
	rc = keel_launch_from_env(&l, err, sizeof(err));
	if (rc != 0)
		print_error("%s: %s\n", path, err);
	assert_int_equal(rc, 0);
	assert_true(l.has_key);
	assert_string_equal(l.key_source, "KEEL_JOB_KEY_FILE");
	assert_memory_equal(l.key, want, 32);
}

static void test_launch_key_file(void **state)
{
	char dir[] = "/tmp/keel-key-test.XXXXXX", want_path[300];
	uint8_t raw[100];
	const char *p;

	(void)state;
	need_sodium();
	assert_non_null(mkdtemp(dir));
	torchrun_env("0", "2");
	key_bytes(raw);
	expect_key_file(key_file(dir, "raw", raw, 32, 0600), raw);
	expect_key_file(key_file(dir, "hex", KEY_HEX "\n", 65, 0600), raw);
	expect_key_file(key_file(dir, "hex-no-newline", KEY_HEX, 64, 0400), raw);
	/* Too open, like ssh says: group or others may read or write it. */
	static const mode_t loose[] = {0644, 0640, 0604, 0602, 0620, 0660, 0777, 0610};
	for (size_t i = 0; i < sizeof(loose) / sizeof(loose[0]); i++) {
		char name[16], want[64];

		snprintf(name, sizeof(name), "loose%zu", i);
		p = key_file(dir, name, raw, 32, loose[i]);
		env("KEEL_JOB_KEY_FILE", p);
		snprintf(want, sizeof(want), "permissions %04o are too open", (unsigned)loose[i]);
		expect_key_error(want);
		snprintf(want_path, sizeof(want_path), "chmod 600 %s", p);
		expect_key_error(want_path);
	}
	/* Wrong size or content. */
	env("KEEL_JOB_KEY_FILE", key_file(dir, "short", raw, 31, 0600));
	expect_key_error("holds 31 bytes: expected 32 raw bytes, or 64 hex digits");
	env("KEEL_JOB_KEY_FILE", key_file(dir, "empty", raw, 0, 0600));
	expect_key_error("holds 0 bytes");
	env("KEEL_JOB_KEY_FILE", key_file(dir, "crlf", KEY_HEX "\r\n", 66, 0600));
	expect_key_error("holds 66 bytes");
	memset(raw + 32, 'a', sizeof(raw) - 32);
	env("KEEL_JOB_KEY_FILE", key_file(dir, "long", raw, sizeof(raw), 0600));
	expect_key_error("holds more than 66 bytes");
	env("KEEL_JOB_KEY_FILE",
	    key_file(dir, "badhex",
		     "00112233445566778899aabbccddeeffF0E1D2C3B4A5968778695A4B3C2D1EzZ\n", 65,
		     0600));
	expect_key_error("KEEL_JOB_KEY_FILE=");
	expect_key_error("character 63 is not a hex digit");
	/* Missing, not a file, empty variable. */
	snprintf(want_path, sizeof(want_path), "%s/missing", dir);
	env("KEEL_JOB_KEY_FILE", want_path);
	expect_key_error("cannot open it: No such file or directory");
	expect_key_error(want_path);
	env("KEEL_JOB_KEY_FILE", dir);
	expect_key_error("is not a regular file");
	env("KEEL_JOB_KEY_FILE", "");
	expect_key_error("KEEL_JOB_KEY_FILE='': expected a path of 1..4095 bytes");
	for (const char *n = "raw\0hex\0hex-no-newline\0short\0empty\0crlf\0long\0badhex\0"; *n;
	     n += strlen(n) + 1) {
		snprintf(want_path, sizeof(want_path), "%s/%s", dir, n);
		unlink(want_path);
	}
	for (size_t i = 0; i < sizeof(loose) / sizeof(loose[0]); i++) {
		snprintf(want_path, sizeof(want_path), "%s/loose%zu", dir, i);
		unlink(want_path);
	}
	assert_int_equal(rmdir(dir), 0);
}

/* ---- the proof of the key ------------------------------------------------------------------ */

/* A hello of rank 2 in a world of 4, job 1234, at 127.0.0.1:5000 with a blob announcing
 * datagrams of `mtu` bytes. */
static void hello_with_mtu(uint8_t *hello, const uint8_t *rv_key, const uint8_t *nonce_s,
			   uint32_t mtu)
{
	struct keel_rv_hello h = {.version = KEEL_RENDEZVOUS_VERSION,
				  .flags = RV_FLAG_JOB_FIXED | (rv_key != NULL ? RV_FLAG_KEYED : 0),
				  .job = 1234,
				  .world = 4,
				  .rank = 2};
	struct keel_rendezvous_blob blob = {
	    .kind = 9, .len = 3, .data = {1, 2, 3}, .mtu = mtu, .mtu_set = true};
	struct sockaddr_storage at;

	memset(&at, 0, sizeof(at));
	at.ss_family = AF_INET;
	((struct sockaddr_in *)&at)->sin_port = htons(5000);
	((struct sockaddr_in *)&at)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	memset(h.nonce, 0xc1, sizeof(h.nonce));
	keel_rv_entry_put(h.entry, &at, &blob);
	keel_rv_hello_encode(&h, hello);
	if (rv_key != NULL)
		keel_rv_hello_sign(rv_key, nonce_s, hello);
}

static void proof_hello(uint8_t *hello, const uint8_t *rv_key, const uint8_t *nonce_s)
{
	hello_with_mtu(hello, rv_key, nonce_s, 1472);
}

static enum keel_rv_verdict judge(const uint8_t *hello, const struct keel_rv_policy *p)
{
	struct keel_rv_hello h;
	struct sockaddr_storage addr;
	struct keel_rendezvous_blob blob;

	return keel_rv_hello_judge(hello, RV_HELLO_LEN, p, &h, &addr, &blob);
}

static void test_launch_proof_hello(void **state)
{
	uint8_t job_key[32], rv_key[32], other_key[32], nonce_s[32], hello[RV_HELLO_LEN];
	struct keel_rv_policy p = {.keyed = true,
				   .rv_key = rv_key,
				   .nonce_s = nonce_s,
				   .job_fixed = true,
				   .job = 1234,
				   .world = 4};
	struct keel_rv_hello h;
	struct sockaddr_storage addr;
	struct keel_rendezvous_blob blob;

	(void)state;
	if (!keel_rv_proof_available())
		skip();
	key_bytes(job_key);
	keel_rv_key_derive(job_key, rv_key);
	assert_memory_not_equal(rv_key, job_key, 32); /* never the datagram MACs' key itself */
	memset(nonce_s, 0x5e, sizeof(nonce_s));
	proof_hello(hello, rv_key, nonce_s);
	assert_int_equal(keel_rv_hello_judge(hello, RV_HELLO_LEN, &p, &h, &addr, &blob),
			 KEEL_RV_ACCEPT);
	assert_int_equal(h.rank, 2);
	assert_int_equal(ntohs(((struct sockaddr_in *)&addr)->sin_port), 5000);
	assert_int_equal(blob.kind, 9);
	assert_int_equal(blob.len, 3);
	assert_int_equal(blob.mtu, 1472);
	assert_true(blob.mtu_set);
	/* Any bit changed anywhere: magic, version, then the proof fails. */
	for (size_t i = 0; i < RV_HELLO_LEN; i++) {
		hello[i] ^= 0x10;
		assert_int_equal(judge(hello, &p), i < 4   ? KEEL_RV_NOT_KEEL
						   : i < 6 ? KEEL_RV_VERSION
							   : KEEL_RV_PROOF);
		hello[i] ^= 0x10;
	}
	assert_int_equal(judge(hello, &p), KEEL_RV_ACCEPT);
	/* Another nonce (a replay on another connection), another key, no proof at all. */
	nonce_s[0] ^= 1;
	assert_int_equal(judge(hello, &p), KEEL_RV_PROOF);
	nonce_s[0] ^= 1;
	memcpy(other_key, job_key, 32);
	other_key[5] ^= 0x80;
	keel_rv_key_derive(other_key, other_key);
	proof_hello(hello, other_key, nonce_s);
	assert_int_equal(judge(hello, &p), KEEL_RV_PROOF);
	proof_hello(hello, NULL, nonce_s); /* not flagged as proven */
	assert_int_equal(judge(hello, &p), KEEL_RV_PROOF);
	hello[7] |= RV_FLAG_KEYED; /* flagged, with a zero mac */
	assert_int_equal(judge(hello, &p), KEEL_RV_PROOF);
	/* Rank 0 without a key: a proven hello is not one of its job's. */
	p.keyed = false;
	proof_hello(hello, rv_key, nonce_s);
	assert_int_equal(judge(hello, &p), KEEL_RV_PROOF);
	proof_hello(hello, NULL, nonce_s);
	assert_int_equal(judge(hello, &p), KEEL_RV_ACCEPT);
}

static void test_launch_proof_hello_fields(void **state)
{
	uint8_t job_key[32], rv_key[32], nonce_s[32], hello[RV_HELLO_LEN];
	struct keel_rv_policy p = {.keyed = true,
				   .rv_key = rv_key,
				   .nonce_s = nonce_s,
				   .job_fixed = true,
				   .job = 1234,
				   .world = 4};

	(void)state;
	if (!keel_rv_proof_available())
		skip();
	key_bytes(job_key);
	keel_rv_key_derive(job_key, rv_key);
	memset(nonce_s, 0x77, sizeof(nonce_s));
	proof_hello(hello, rv_key, nonce_s);
	/* Proven, but not of this job: judged field by field, in this order. */
	p.job = 99;
	assert_int_equal(judge(hello, &p), KEEL_RV_JOB);
	p.job = 1234;
	p.job_fixed = false; /* rank 0 was to pick the id; this rank had one */
	assert_int_equal(judge(hello, &p), KEEL_RV_JOB);
	p.job_fixed = true;
	p.world = 5;
	assert_int_equal(judge(hello, &p), KEEL_RV_WORLD);
	p.world = 4;
	hello[19] = 4; /* rank 4 of 4, re-proven */
	keel_rv_hello_sign(rv_key, nonce_s, hello);
	assert_int_equal(judge(hello, &p), KEEL_RV_RANK);
	hello[19] = 0; /* rank 0 is rank 0's own seat */
	keel_rv_hello_sign(rv_key, nonce_s, hello);
	assert_int_equal(judge(hello, &p), KEEL_RV_RANK);
	hello[19] = 2;
	hello[20 + RV_NONCE_LEN + 1] = 5; /* address family 5, re-proven */
	keel_rv_hello_sign(rv_key, nonce_s, hello);
	assert_int_equal(judge(hello, &p), KEEL_RV_ADDRESS);
	/* Short, long, empty input. */
	struct keel_rv_hello h;
	struct sockaddr_storage addr;
	struct keel_rendezvous_blob blob;
	proof_hello(hello, rv_key, nonce_s);
	assert_int_equal(keel_rv_hello_judge(hello, RV_HELLO_LEN - 1, &p, &h, &addr, &blob),
			 KEEL_RV_NOT_KEEL);
	assert_int_equal(keel_rv_hello_judge(hello, 0, &p, &h, &addr, &blob), KEEL_RV_NOT_KEEL);
	assert_int_equal(keel_rv_hello_prefix(hello, 3), KEEL_RV_ACCEPT);
	assert_int_equal(keel_rv_hello_prefix((const uint8_t *)"GET / HTTP/1.0", 14),
			 KEEL_RV_NOT_KEEL);
}

/* A datagram size no rank can use (outside KEEL_MTU_MIN..KEEL_MTU_MAX) is a malformed entry:
 * rank 0 refuses the hello, and no rank ever sizes its datagrams from it. 0 means none
 * announced (a launcher without datagrams of its own). */
static void test_launch_hello_mtu_range(void **state)
{
	uint8_t hello[RV_HELLO_LEN];
	struct keel_rv_policy p = {.keyed = false, .job_fixed = true, .job = 1234, .world = 4};
	const uint32_t good[] = {0, KEEL_MTU_MIN, 1472, KEEL_MTU_MAX};
	const uint32_t bad[] = {1, KEEL_MTU_MIN - 1, KEEL_MTU_MAX + 1, 0x7fffffffu};

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		hello_with_mtu(hello, NULL, NULL, good[i]);
		assert_int_equal(judge(hello, &p), KEEL_RV_ACCEPT);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		hello_with_mtu(hello, NULL, NULL, bad[i]);
		assert_int_equal(judge(hello, &p), KEEL_RV_ADDRESS);
	}
}

static void test_launch_proof_reply(void **state)
{
	uint8_t job_key[32], rv_key[32], nc[32], ns[32], hdr[RV_REPLY_HDR_LEN];
	uint8_t entries[3 * RV_ENTRY_LEN], digest[32], mac[32];

	(void)state;
	if (!keel_rv_proof_available())
		skip();
	key_bytes(job_key);
	keel_rv_key_derive(job_key, rv_key);
	memset(nc, 1, sizeof(nc));
	memset(ns, 2, sizeof(ns));
	memset(entries, 3, sizeof(entries));
	keel_rv_reply_hdr_encode(hdr, RV_ST_OK, 3, 77);
	keel_rv_digest(entries, sizeof(entries), digest);
	keel_rv_reply_mac(rv_key, nc, ns, hdr, digest, mac);
	assert_true(keel_rv_reply_verify(rv_key, nc, ns, hdr, digest, mac));
	/* Every input counts: either nonce, any header byte, any table byte, the key. */
	nc[31] ^= 1;
	assert_false(keel_rv_reply_verify(rv_key, nc, ns, hdr, digest, mac));
	nc[31] ^= 1;
	ns[0] ^= 1;
	assert_false(keel_rv_reply_verify(rv_key, nc, ns, hdr, digest, mac));
	ns[0] ^= 1;
	for (size_t i = 0; i < sizeof(hdr); i++) {
		hdr[i] ^= 4;
		assert_false(keel_rv_reply_verify(rv_key, nc, ns, hdr, digest, mac));
		hdr[i] ^= 4;
	}
	for (size_t i = 0; i < sizeof(entries); i += 7) {
		entries[i] ^= 8;
		keel_rv_digest(entries, sizeof(entries), digest);
		assert_false(keel_rv_reply_verify(rv_key, nc, ns, hdr, digest, mac));
		entries[i] ^= 8;
	}
	keel_rv_digest(entries, sizeof(entries), digest);
	assert_true(keel_rv_reply_verify(rv_key, nc, ns, hdr, digest, mac));
	rv_key[0] ^= 1;
	assert_false(keel_rv_reply_verify(rv_key, nc, ns, hdr, digest, mac));
	/* A hello's proof is not a reply's, whatever the bytes. */
	rv_key[0] ^= 1;
	memset(mac, 0, sizeof(mac));
	assert_false(keel_rv_reply_verify(rv_key, nc, ns, hdr, digest, mac));
}

static void test_launch_refusals_str(void **state)
{
	uint32_t refused[KEEL_RV_VERDICTS] = {0};
	char buf[256];

	(void)state;
	assert_int_equal(keel_rv_refusals_str(refused, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "no connection refused");
	refused[KEEL_RV_PROOF] = 3;
	refused[KEEL_RV_JOB] = 2;
	assert_int_equal(keel_rv_refusals_str(refused, buf, sizeof(buf)), 5);
	assert_string_equal(buf, "5 connections refused (3 bad proof, 2 wrong job)");
	memset(refused, 0, sizeof(refused));
	refused[KEEL_RV_IDLE] = 1;
	keel_rv_refusals_str(refused, buf, sizeof(buf));
	assert_string_equal(buf, "1 connection refused (1 idle)");
	for (unsigned v = 1; v < KEEL_RV_VERDICTS; v++)
		refused[v] = 4000000000u;
	keel_rv_refusals_str(refused, buf, 40); /* cut short, still terminated */
	assert_int_equal(strlen(buf), 39);
	assert_string_equal(keel_rv_verdict_name(KEEL_RV_SEAT), "seat taken");
}

/* ---- KEEL_PEERS ------------------------------------------------------------------------- */

static void test_launch_peers_env(void **state)
{
	struct keel_launch l;
	char err[256];

	(void)state;
	env("RANK", "1");
	env("KEEL_PEERS", "10.0.0.1:5000,[fe80::1%eth0]:5001,node-3.example:65535");
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_int_equal(l.world_size, 3);
	assert_int_equal(l.rank, 1);
	assert_non_null(l.peers);
	assert_string_equal(l.master_addr, ""); /* not needed with KEEL_PEERS */
	env("WORLD_SIZE", "3");
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	env("WORLD_SIZE", "4");
	expect_launch_error(-EINVAL, "KEEL_PEERS has 3 entries but WORLD_SIZE=4");
	unsetenv("WORLD_SIZE");
	env("RANK", "3");
	expect_launch_error(-EINVAL, "RANK=3 is not below the world size 3");
	env("RANK", "0");
	env("KEEL_PEERS", "10.0.0.1:5000,,10.0.0.2:5000");
	expect_launch_error(-EINVAL, "KEEL_PEERS entry 1 is empty");
}

static void test_launch_peers_entries(void **state)
{
	const char *list = "127.0.0.1:1,[::1]:65535,localhost:80,[fe80::1%lo]:7";
	char host[KEEL_LAUNCH_HOST_LEN], err[256];
	uint16_t port;
	uint32_t n;

	(void)state;
	assert_int_equal(keel_peers_count(list, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 4);
	assert_int_equal(keel_peers_entry(list, 0, host, sizeof(host), &port, err, sizeof(err)), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 1);
	assert_int_equal(keel_peers_entry(list, 1, host, sizeof(host), &port, err, sizeof(err)), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 65535);
	assert_int_equal(keel_peers_entry(list, 2, host, sizeof(host), &port, err, sizeof(err)), 0);
	assert_string_equal(host, "localhost");
	assert_int_equal(port, 80);
	assert_int_equal(keel_peers_entry(list, 3, host, sizeof(host), &port, err, sizeof(err)), 0);
	assert_string_equal(host, "fe80::1%lo");
	assert_int_equal(keel_peers_entry(list, 4, host, sizeof(host), &port, err, sizeof(err)),
			 -ENOENT);
	/* host_len too small for "localhost" */
	assert_int_equal(keel_peers_entry(list, 2, host, 5, &port, err, sizeof(err)), -EINVAL);
}

static void test_launch_peers_bad_entries(void **state)
{
	static const struct {
		const char *list, *needle;
	} bad[] = {
	    {"", "empty"},
	    {"127.0.0.1", "has no :port"},
	    {"127.0.0.1:", "port must be"},
	    {"127.0.0.1:0", "port must be"},
	    {"127.0.0.1:65536", "port must be"},
	    {"127.0.0.1:12a", "port must be"},
	    {"127.0.0.1:+12", "port must be"},
	    {":5000", "host is empty"},
	    {"::1:5000", "[addr]:port"},
	    {"[::1:5000", "[ipv6-address]:port"},
	    {"[::1]5000", "[ipv6-address]:port"},
	    {"[::1]", "[ipv6-address]:port"},
	    {"[]:5000", "host is empty"},
	    {"a:1,", "entry 1 is empty"},
	    {",a:1", "entry 0 is empty"},
	    {"a:1,b:2,c", "entry 2"},
	    {"a:1, b:2", "entry 1"}, /* no spaces: " b" resolves to nothing sensible */
	};
	char err[256];
	uint32_t n;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = keel_peers_count(bad[i].list, &n, err, sizeof(err));

		if (bad[i].list[0] == 'a' && strstr(bad[i].list, " b") != NULL) {
			/* A space is part of the host name; resolution rejects it later. */
			assert_int_equal(rc, 0);
			continue;
		}
		if (rc != -EINVAL || strstr(err, bad[i].needle) == NULL)
			print_error("'%s': rc %d err '%s'\n", bad[i].list, rc, err);
		assert_int_equal(rc, -EINVAL);
		assert_non_null(strstr(err, bad[i].needle));
	}
}

static void test_launch_peers_too_many(void **state)
{
	size_t cap = (KEEL_WORLD_MAX + 1) * 8 + 1, used = 0;
	char *list = malloc(cap), err[256];
	uint32_t n;

	(void)state;
	assert_non_null(list);
	for (uint32_t i = 0; i <= KEEL_WORLD_MAX; i++)
		used += (size_t)snprintf(list + used, cap - used, "%sh:%u", i ? "," : "", 1 + i);
	assert_int_equal(keel_peers_count(list, &n, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "more than 4096"));
	list[strlen(list) - strlen(strrchr(list, ','))] = '\0';
	assert_int_equal(keel_peers_count(list, &n, err, sizeof(err)), 0);
	assert_int_equal(n, KEEL_WORLD_MAX);
	free(list);
}

/* ---- rendezvous ------------------------------------------------------------------------- */

/* A UDP socket bound to host:0; its address in *addr. */
static int udp_bound(int family, const char *host, struct sockaddr_storage *addr)
{
	socklen_t len = sizeof(*addr);
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memset(addr, 0, sizeof(*addr));
	addr->ss_family = (sa_family_t)family;
	if (family == AF_INET)
		assert_int_equal(inet_pton(AF_INET, host, &((struct sockaddr_in *)addr)->sin_addr),
				 1);
	else
		assert_int_equal(
		    inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)addr)->sin6_addr), 1);
	if (bind(fd, (struct sockaddr *)addr,
		 family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) !=
	    0) {
		close(fd);
		return -errno;
	}
	assert_int_equal(getsockname(fd, (struct sockaddr *)addr, &len), 0);
	return fd;
}

static uint16_t port_of(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

static uint16_t free_tcp_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* Open descriptors of this process: rendezvous must close every socket on every path. */
static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	assert_non_null(d);
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	return n;
}

#define RV_MAX 8

/* One rank of a threaded rendezvous. Threads only record; the main thread asserts. */
struct rv_rank {
	struct keel_launch l;
	const char *bind_host;
	uint64_t start_delay_ns;
	uint64_t timeout_ns;
	int fd;
	struct sockaddr_storage self;
	struct sockaddr_storage peers[RV_MAX];
	struct keel_rendezvous_args a;
	int rc;
	uint64_t elapsed_ns;
	char err[512];
	pthread_t thread;
};

static void *rv_thread(void *arg)
{
	struct rv_rank *r = arg;
	uint64_t t0;

	if (r->start_delay_ns != 0)
		usleep((useconds_t)(r->start_delay_ns / 1000));
	t0 = keel_posix_now_ns();
	r->a.self_addr = (struct sockaddr *)&r->self;
	r->a.self_len = sizeof(r->self);
	r->a.timeout_ns = r->timeout_ns;
	r->a.peers = r->peers;
	r->rc = keel_rendezvous_run(&r->l, &r->a, r->err, sizeof(r->err));
	r->elapsed_ns = keel_posix_now_ns() - t0;
	return NULL;
}

/* Fill ranks[0..n) as one job of `world` on 127.0.0.1:port; rank i gets rank `ranks_of[i]`. */
static void rv_setup(struct rv_rank *ranks, uint32_t n, uint32_t world, uint16_t port,
		     const uint32_t *rank_of)
{
	memset(ranks, 0, sizeof(*ranks) * n);
	for (uint32_t i = 0; i < n; i++) {
		struct rv_rank *r = &ranks[i];

		r->l.rank = rank_of != NULL ? rank_of[i] : i;
		r->l.world_size = world;
		r->l.local_rank = r->l.rank;
		r->l.local_world_size = world;
		r->l.job_id = 1234;
		r->l.job_id_fixed = true;
		snprintf(r->l.master_addr, sizeof(r->l.master_addr), "127.0.0.1");
		r->l.master_port = port;
		r->l.source = "test";
		r->timeout_ns = 5000 * MS;
		r->fd =
		    udp_bound(AF_INET, r->bind_host != NULL ? r->bind_host : "127.0.0.1", &r->self);
		assert_true(r->fd >= 0);
	}
}

static void rv_run(struct rv_rank *ranks, uint32_t n)
{
	int fds_before = fd_count();

	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(pthread_create(&ranks[i].thread, NULL, rv_thread, &ranks[i]), 0);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(pthread_join(ranks[i].thread, NULL), 0);
	assert_int_equal(fd_count(), fds_before);
	for (uint32_t i = 0; i < n; i++)
		close(ranks[i].fd);
}

static void rv_check_tables(const struct rv_rank *ranks, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (ranks[i].rc != 0)
			print_error("rank %u: %d %s\n", ranks[i].l.rank, ranks[i].rc, ranks[i].err);
		assert_int_equal(ranks[i].rc, 0);
		for (uint32_t j = 0; j < n; j++) {
			const struct sockaddr_in *a =
			    (const struct sockaddr_in *)&ranks[i].peers[j];

			assert_int_equal(a->sin_family, AF_INET);
			assert_int_equal(ntohl(a->sin_addr.s_addr), INADDR_LOOPBACK);
			assert_int_equal(port_of(&ranks[i].peers[j]), port_of(&ranks[j].self));
		}
	}
}

static void test_launch_rendezvous_four_ranks(void **state)
{
	struct rv_rank ranks[4];
	uint64_t t0, slowest_ns = 0;

	(void)state;
	rv_setup(ranks, 4, 4, free_tcp_port(), NULL);
	t0 = keel_posix_now_ns();
	rv_run(ranks, 4);
	rv_check_tables(ranks, 4);
	for (uint32_t i = 0; i < 4; i++)
		if (ranks[i].elapsed_ns > slowest_ns)
			slowest_ns = ranks[i].elapsed_ns;
	printf("# rendezvous of 4 ranks on 127.0.0.1: %.3f ms (slowest rank), %.3f ms wall\n",
	       (double)slowest_ns / 1e6, (double)(keel_posix_now_ns() - t0) / 1e6);
	assert_true(slowest_ns < 1000 * MS);
}

static void test_launch_rendezvous_rank0_late(void **state)
{
	struct rv_rank ranks[4];

	(void)state;
	rv_setup(ranks, 4, 4, free_tcp_port(), NULL);
	ranks[0].start_delay_ns = 150 * MS; /* the others are refused and retry */
	rv_run(ranks, 4);
	rv_check_tables(ranks, 4);
	for (uint32_t i = 1; i < 4; i++)
		assert_true(ranks[i].elapsed_ns < 1000 * MS);
}

static void test_launch_rendezvous_wildcard_advertises_local(void **state)
{
	struct rv_rank ranks[2];

	(void)state;
	memset(ranks, 0, sizeof(ranks));
	ranks[0].bind_host = "0.0.0.0";
	ranks[1].bind_host = "0.0.0.0";
	/* rv_setup clears the struct: bind by hand after it. */
	rv_setup(ranks, 2, 2, free_tcp_port(), NULL);
	for (uint32_t i = 0; i < 2; i++) {
		close(ranks[i].fd);
		ranks[i].fd = udp_bound(AF_INET, "0.0.0.0", &ranks[i].self);
		assert_true(ranks[i].fd >= 0);
	}
	rv_run(ranks, 2);
	rv_check_tables(ranks, 2); /* checks 127.0.0.1, not 0.0.0.0 */
}

static void test_launch_rendezvous_unreachable_master(void **state)
{
	struct rv_rank r;
	char want[64];

	(void)state;
	int fds_before;

	rv_setup(&r, 1, 3, free_tcp_port(), (const uint32_t[]){2});
	r.timeout_ns = 300 * MS;
	fds_before = fd_count();
	rv_thread(&r);
	assert_int_equal(fd_count(), fds_before);
	close(r.fd);
	assert_int_equal(r.rc, -ETIMEDOUT);
	snprintf(want, sizeof(want), "127.0.0.1:%u", r.l.master_port);
	assert_non_null(strstr(r.err, want));
	assert_non_null(strstr(r.err, "MASTER_ADDR:MASTER_PORT"));
	assert_true(r.elapsed_ns >= 300 * MS);
	assert_true(r.elapsed_ns < 450 * MS);
}

/* Every rank of ranks[0..n) holds `key` (NULL: a key of its own index, i.e. all different). */
static void rv_key(struct rv_rank *ranks, uint32_t n, const uint8_t *key)
{
	for (uint32_t i = 0; i < n; i++) {
		ranks[i].l.has_key = true;
		ranks[i].l.key_source = "KEEL_JOB_KEY";
		if (key != NULL)
			memcpy(ranks[i].l.key, key, 32);
		else
			memset(ranks[i].l.key, (int)(0x40 + i), 32);
	}
}

static void rv_expect(const struct rv_rank *r, int rc, const char *needle)
{
	if (r->rc != rc || strstr(r->err, needle) == NULL)
		print_error("rank %u: rc %d (want %d), err '%s' (want '%s')\n", r->l.rank, r->rc,
			    rc, r->err, needle);
	assert_int_equal(r->rc, rc);
	assert_non_null(strstr(r->err, needle));
}

static void test_launch_rendezvous_missing_rank_times_out(void **state)
{
	struct rv_rank ranks[2];

	(void)state;
	rv_setup(ranks, 2, 3, free_tcp_port(), NULL); /* world 3, rank 2 never comes */
	ranks[0].timeout_ns = 300 * MS;
	ranks[1].timeout_ns = 3000 * MS;
	rv_run(ranks, 2);
	rv_expect(&ranks[0], -ETIMEDOUT,
		  "only 2 of 3 ranks arrived in time; 1 rank missing (2); no connection refused");
	/* Rank 1 hears it from rank 0 instead of waiting out its own timeout. */
	rv_expect(&ranks[1], -ETIMEDOUT, "timed out: only 2 of 3 ranks");
	for (uint32_t i = 0; i < 2; i++)
		assert_true(ranks[i].elapsed_ns < 450 * MS);
	/* A rank whose own time runs out first. */
	rv_setup(ranks, 2, 3, free_tcp_port(), NULL);
	ranks[0].timeout_ns = 500 * MS;
	ranks[1].timeout_ns = 200 * MS;
	rv_run(ranks, 2);
	rv_expect(&ranks[1], -ETIMEDOUT, "did not come in time");
	assert_true(ranks[1].elapsed_ns < 350 * MS);
	/* The same with a key: rank 0's word about the timeout is proven too. */
	if (!keel_launch_auth_available())
		return;
	rv_setup(ranks, 2, 3, free_tcp_port(), NULL);
	rv_key(ranks, 2, ranks[0].l.key);
	ranks[0].timeout_ns = 300 * MS;
	rv_run(ranks, 2);
	rv_expect(&ranks[1], -ETIMEDOUT, "timed out: only 2 of 3 ranks");
}

/* Ranks {0, 1, 1, 2} of a world of 3, rank 2 late so that both twins ask while the seat is
 * held: one twin gets the seat, the other is refused without abort of anything. */
static void test_launch_rendezvous_duplicate_rank(void **state)
{
	struct rv_rank ranks[4];
	uint8_t key[32];

	(void)state;
	for (int keyed = 0; keyed < 1 + keel_launch_auth_available(); keyed++) {
		struct rv_rank *winner, *loser;

		rv_setup(ranks, 4, 3, free_tcp_port(), (const uint32_t[]){0, 1, 1, 2});
		if (keyed) {
			memset(key, 7, sizeof(key));
			rv_key(ranks, 4, key);
		}
		ranks[3].start_delay_ns = 300 * MS;
		for (uint32_t i = 0; i < 4; i++)
			ranks[i].timeout_ns = 1500 * MS;
		rv_run(ranks, 4);
		winner = ranks[1].rc == 0 ? &ranks[1] : &ranks[2];
		loser = ranks[1].rc == 0 ? &ranks[2] : &ranks[1];
		assert_int_equal(ranks[0].rc, 0);
		assert_int_equal(ranks[3].rc, 0);
		assert_int_equal(winner->rc, 0);
		assert_int_equal(port_of(&ranks[0].peers[1]), port_of(&winner->self));
		assert_true(ranks[0].a.refused[KEEL_RV_SEAT] >= 1);
		if (keyed) { /* it proved the key: told at once */
			rv_expect(loser, KEEL_ERENDEZVOUS, "another live process holds that rank");
			assert_true(loser->elapsed_ns < 1000 * MS);
		} else { /* no word to an unproven hello: it tries until its time is up */
			rv_expect(loser, -ETIMEDOUT, "closed this rank's connection");
		}
	}
}

static void test_launch_rendezvous_world_mismatch(void **state)
{
	struct rv_rank ranks[2];

	(void)state;
	for (int keyed = 0; keyed < 1 + keel_launch_auth_available(); keyed++) {
		rv_setup(ranks, 2, 2, free_tcp_port(), NULL);
		if (keyed)
			rv_key(ranks, 2, ranks[0].l.key);
		ranks[1].l.world_size = 3;
		ranks[0].timeout_ns = 500 * MS;
		ranks[1].timeout_ns = 500 * MS;
		rv_run(ranks, 2);
		rv_expect(&ranks[0], -ETIMEDOUT, "1 rank missing (1)");
		rv_expect(&ranks[0], -ETIMEDOUT, "wrong world size)");
		if (keyed)
			rv_expect(&ranks[1], KEEL_ERENDEZVOUS, "its world size is 2, ours 3");
		else
			rv_expect(&ranks[1], -ETIMEDOUT, "closed this rank's connection");
	}
}

/* A rank with the key but another job id is told so, and never told rank 0's job id. */
static void test_launch_rendezvous_job_mismatch(void **state)
{
	struct rv_rank ranks[2];

	(void)state;
	if (!keel_launch_auth_available())
		skip(); /* keys need libsodium */
	rv_setup(ranks, 2, 2, free_tcp_port(), NULL);
	rv_key(ranks, 2, ranks[0].l.key);
	ranks[1].l.job_id = 99;
	ranks[0].timeout_ns = 400 * MS;
	rv_run(ranks, 2);
	rv_expect(&ranks[1], KEEL_ERENDEZVOUS, "runs another job than this rank's 99");
	assert_null(strstr(ranks[1].err, "1234"));
	rv_expect(&ranks[0], -ETIMEDOUT, "(1 wrong job)");
	/* Job id given on one side only. */
	rv_setup(ranks, 2, 2, free_tcp_port(), NULL);
	rv_key(ranks, 2, ranks[0].l.key);
	ranks[1].l.job_id_fixed = false;
	ranks[0].timeout_ns = 400 * MS;
	rv_run(ranks, 2);
	rv_expect(&ranks[1], KEEL_ERENDEZVOUS, "this rank's 1234 (none given)");
}

/* Connect to 127.0.0.1:port, retrying while nobody listens yet; replies wait at most 3 s. */
static int tcp_connect(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {.tv_sec = 3};

	a.sin_port = htons(port);
	for (int i = 0; i < 400; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		assert_true(fd >= 0);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
			return fd;
		}
		close(fd);
		usleep(5000);
	}
	fail_msg("nothing listens on 127.0.0.1:%u", port);
	return -1;
}

/* Bytes that come on fd until rank 0 closes it; -1 if it stays open for 3 s. */
static ssize_t drain(int fd)
{
	uint8_t buf[4096];
	ssize_t total = 0;

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);

		if (n == 0)
			return total;
		if (n < 0)
			return errno == ECONNRESET ? total : -1;
		total += n;
	}
}

/* A stranger's hello: read rank 0's greeting, send a well-formed hello with these fields,
 * proven with `key` (NULL: none; any key: flagged as proven), and return what came back
 * before rank 0 closed the connection (it must be nothing). */
static ssize_t stranger_hello(uint16_t port, uint32_t job, bool job_fixed, uint32_t world,
			      uint32_t rank, const uint8_t *key)
{
	struct keel_rv_hello h = {
	    .version = KEEL_RENDEZVOUS_VERSION, .job = job, .world = world, .rank = rank};
	struct sockaddr_storage at;
	uint8_t greeting[RV_GREETING_LEN], nonce_s[RV_NONCE_LEN], hello[RV_HELLO_LEN], rv_key[32];
	bool keyed;
	int fd = tcp_connect(port);
	ssize_t back;

	assert_int_equal(recv(fd, greeting, sizeof(greeting), MSG_WAITALL), sizeof(greeting));
	assert_int_equal(keel_rv_greeting_parse(greeting, &keyed, nonce_s), KEEL_RV_ACCEPT);
	h.flags =
	    (uint16_t)((key != NULL ? RV_FLAG_KEYED : 0) | (job_fixed ? RV_FLAG_JOB_FIXED : 0));
	keel_rv_random(h.nonce, sizeof(h.nonce));
	memset(&at, 0, sizeof(at));
	at.ss_family = AF_INET;
	((struct sockaddr_in *)&at)->sin_port = htons(9);
	keel_rv_entry_put(h.entry, &at, NULL);
	keel_rv_hello_encode(&h, hello);
	if (key != NULL) {
		keel_rv_key_derive(key, rv_key);
		keel_rv_hello_sign(rv_key, nonce_s, hello);
	}
	assert_int_equal(send(fd, hello, sizeof(hello), MSG_NOSIGNAL), sizeof(hello));
	back = drain(fd);
	close(fd);
	return back;
}

struct attack {
	uint16_t port;
	bool keyed;
	int idle_fds[40];
	ssize_t back[3];
};

/* The four attacks of issue 15 on a job of 3 (job id 1234): a hello of another job, one
 * claiming rank 7, 40 idle connections (left open), and a fake rank 2 that knows the job id
 * but not the key. */
static void *attack_thread(void *arg)
{
	struct attack *t = arg;
	uint8_t not_the_key[32];

	memset(not_the_key, 0x5a, sizeof(not_the_key));
	t->back[0] = stranger_hello(t->port, 99, true, 3, 1, t->keyed ? not_the_key : NULL);
	t->back[1] = stranger_hello(t->port, 1234, true, 3, 7, t->keyed ? not_the_key : NULL);
	for (int i = 0; i < 40; i++)
		t->idle_fds[i] = tcp_connect(t->port);
	t->back[2] = t->keyed ? stranger_hello(t->port, 1234, true, 3, 2, not_the_key) : 0;
	return NULL;
}

static void test_launch_rendezvous_attacks(void **state)
{
	struct rv_rank ranks[3];
	struct attack t;
	pthread_t at;
	uint8_t key[32];

	(void)state;
	for (int keyed = 0; keyed < 1 + keel_launch_auth_available(); keyed++) {
		memset(&t, 0, sizeof(t));
		t.port = free_tcp_port();
		t.keyed = keyed;
		rv_setup(ranks, 3, 3, t.port, NULL);
		if (keyed) {
			memset(key, 0x33, sizeof(key));
			rv_key(ranks, 3, key);
		}
		ranks[1].start_delay_ns = 400 * MS; /* the attacks come first */
		ranks[2].start_delay_ns = 400 * MS;
		assert_int_equal(pthread_create(&at, NULL, attack_thread, &t), 0);
		for (uint32_t i = 0; i < 3; i++) /* not rv_run: the attacker opens sockets too */
			assert_int_equal(
			    pthread_create(&ranks[i].thread, NULL, rv_thread, &ranks[i]), 0);
		for (uint32_t i = 0; i < 3; i++) {
			assert_int_equal(pthread_join(ranks[i].thread, NULL), 0);
			close(ranks[i].fd);
		}
		assert_int_equal(pthread_join(at, NULL), 0);
		for (int i = 0; i < 40; i++)
			close(t.idle_fds[i]);
		rv_check_tables(ranks, 3);
		for (int i = 0; i < 3; i++)
			assert_int_equal(t.back[i], 0); /* closed without a word */
		if (keyed) {
			assert_int_equal(ranks[0].a.refused[KEEL_RV_PROOF], 3);
		} else {
			assert_int_equal(ranks[0].a.refused[KEEL_RV_JOB], 1);
			assert_int_equal(ranks[0].a.refused[KEEL_RV_RANK], 1);
		}
		for (int i = 0; i < 3; i++) { /* the job's id, from rank 0, on every rank */
			assert_int_equal(ranks[i].l.job_id, 1234);
			assert_true(ranks[i].l.job_id_fixed);
		}
	}
}

/* An idle connection is closed at its deadline (timeout / 4), having had only the greeting. */
static void test_launch_rendezvous_idle_deadline(void **state)
{
	struct rv_rank ranks[2];
	uint8_t greeting[RV_GREETING_LEN];
	uint64_t t0;
	int fd;

	(void)state;
	rv_setup(ranks, 2, 2, free_tcp_port(), NULL);
	ranks[0].timeout_ns = 2000 * MS;
	ranks[1].start_delay_ns = 1000 * MS;
	for (uint32_t i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&ranks[i].thread, NULL, rv_thread, &ranks[i]), 0);
	fd = tcp_connect(ranks[0].l.master_port);
	t0 = keel_posix_now_ns();
	assert_int_equal(recv(fd, greeting, sizeof(greeting), MSG_WAITALL), sizeof(greeting));
	assert_int_equal(drain(fd), 0);
	printf("# an idle connection was closed after %.0f ms (deadline 500 ms)\n",
	       (double)(keel_posix_now_ns() - t0) / 1e6);
	assert_true(keel_posix_now_ns() - t0 >= 400 * MS);
	assert_true(keel_posix_now_ns() - t0 < 1500 * MS);
	close(fd);
	for (uint32_t i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(ranks[i].thread, NULL), 0);
		close(ranks[i].fd);
	}
	rv_check_tables(ranks, 2);
	assert_int_equal(ranks[0].a.refused[KEEL_RV_IDLE], 1);
}

static void test_launch_rendezvous_keyed(void **state)
{
	struct rv_rank ranks[4];
	uint8_t key[32];
	uint32_t first = 0;

	(void)state;
	if (!keel_launch_auth_available())
		skip(); /* keys need libsodium */
	memset(key, 0x11, sizeof(key));
	for (int run = 0; run < 2; run++) {
		rv_setup(ranks, 4, 4, free_tcp_port(), NULL);
		rv_key(ranks, 4, key);
		for (uint32_t i = 0; i < 4; i++) /* no job id given: rank 0 picks one */
			ranks[i].l.job_id_fixed = false;
		rv_run(ranks, 4);
		rv_check_tables(ranks, 4);
		for (uint32_t i = 0; i < 4; i++) {
			assert_true(ranks[i].l.job_id_fixed);
			assert_int_equal(ranks[i].l.job_id, ranks[0].l.job_id);
		}
		assert_int_not_equal(ranks[0].l.job_id, 1234);
		assert_int_not_equal(ranks[0].l.job_id, first); /* random: 2^-32 to collide */
		first = ranks[0].l.job_id;
	}
}

static void test_launch_rendezvous_wrong_key(void **state)
{
	struct rv_rank ranks[3];
	uint8_t key[32];

	(void)state;
	if (!keel_launch_auth_available())
		skip(); /* keys need libsodium */
	memset(key, 0x22, sizeof(key));
	rv_setup(ranks, 3, 3, free_tcp_port(), NULL);
	rv_key(ranks, 3, key);
	ranks[2].l.key[31] ^= 1; /* one bit off */
	ranks[0].timeout_ns = 600 * MS;
	ranks[1].timeout_ns = 2000 * MS;
	ranks[2].timeout_ns = 1000 * MS;
	rv_run(ranks, 3);
	rv_expect(&ranks[0], -ETIMEDOUT, "1 rank missing (2)");
	rv_expect(&ranks[0], -ETIMEDOUT, "bad proof)");
	assert_true(ranks[0].a.refused[KEEL_RV_PROOF] >= 1);
	rv_expect(&ranks[1], -ETIMEDOUT, "timed out: only 2 of 3 ranks");
	rv_expect(&ranks[2], -ETIMEDOUT, "closed this rank's connection");
}

static void test_launch_rendezvous_key_on_one_side(void **state)
{
	struct rv_rank ranks[2];

	(void)state;
	if (!keel_launch_auth_available())
		skip(); /* keys need libsodium */
	rv_setup(ranks, 2, 2, free_tcp_port(), NULL);
	rv_key(ranks, 1, NULL); /* rank 0 only */
	ranks[0].timeout_ns = 300 * MS;
	rv_run(ranks, 2);
	rv_expect(&ranks[1], KEEL_ERENDEZVOUS, "requires the job key and this rank has none");
	assert_true(ranks[1].elapsed_ns < 250 * MS);
	rv_setup(ranks, 2, 2, free_tcp_port(), NULL);
	rv_key(ranks + 1, 1, NULL); /* rank 1 only */
	ranks[0].timeout_ns = 300 * MS;
	rv_run(ranks, 2);
	rv_expect(&ranks[1], KEEL_ERENDEZVOUS, "has no job key while this rank has one");
	assert_int_equal(ranks[0].rc, -ETIMEDOUT);
}

/* A fake rank 0 without the key: it greets, takes the hello and sends a table. */
struct fake_rank0 {
	uint16_t port;
	uint32_t world;
	bool sign_with_zero_mac;
};

static void *fake_rank0_thread(void *arg)
{
	struct fake_rank0 *f = arg;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	uint8_t nonce[RV_NONCE_LEN], msg[RV_GREETING_LEN], hello[RV_HELLO_LEN];
	uint8_t reply[RV_REPLY_HDR_LEN + RV_MAX * RV_ENTRY_LEN + RV_MAC_LEN];
	size_t len = RV_REPLY_HDR_LEN + f->world * RV_ENTRY_LEN + RV_MAC_LEN;
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), fd;

	a.sin_port = htons(f->port);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 4) != 0)
		return NULL;
	fd = accept(lfd, NULL, NULL);
	keel_rv_random(nonce, sizeof(nonce));
	keel_rv_greeting_encode(msg, true, nonce);
	if (fd >= 0 && send(fd, msg, sizeof(msg), MSG_NOSIGNAL) == (ssize_t)sizeof(msg) &&
	    recv(fd, hello, sizeof(hello), MSG_WAITALL) == (ssize_t)sizeof(hello)) {
		/* Every rank at the hello's own address: a table a stranger would like taken. */
		keel_rv_reply_hdr_encode(reply, RV_ST_OK, f->world, 5);
		for (uint32_t r = 0; r < f->world; r++)
			memcpy(reply + RV_REPLY_HDR_LEN + r * RV_ENTRY_LEN,
			       hello + 20 + RV_NONCE_LEN, RV_ENTRY_LEN);
		if (f->sign_with_zero_mac)
			memset(reply + len - RV_MAC_LEN, 0, RV_MAC_LEN);
		else
			keel_rv_random(reply + len - RV_MAC_LEN, RV_MAC_LEN);
		send(fd, reply, len, MSG_NOSIGNAL);
		drain(fd);
	}
	if (fd >= 0)
		close(fd);
	close(lfd);
	return NULL;
}

static void test_launch_rendezvous_forged_table(void **state)
{
	struct rv_rank r;
	pthread_t t;

	(void)state;
	if (!keel_launch_auth_available())
		skip(); /* keys need libsodium */
	for (int zero = 0; zero < 2; zero++) {
		struct fake_rank0 f = {
		    .port = free_tcp_port(), .world = 3, .sign_with_zero_mac = zero};

		rv_setup(&r, 1, 3, f.port, (const uint32_t[]){1});
		rv_key(&r, 1, NULL);
		r.timeout_ns = 2000 * MS;
		assert_int_equal(pthread_create(&t, NULL, fake_rank0_thread, &f), 0);
		rv_thread(&r);
		assert_int_equal(pthread_join(t, NULL), 0);
		close(r.fd);
		if (r.rc != KEEL_ERENDEZVOUS)
			print_error("%d %s\n", r.rc, r.err);
		rv_expect(&r, KEEL_ERENDEZVOUS, "did not prove the job key in its reply");
		assert_int_equal(r.l.job_id, 1234); /* nothing of the forged reply was taken */
	}
}

static void test_launch_rendezvous_strays_and_other_jobs(void **state)
{
	struct rv_rank ranks[2], other;
	uint8_t junk[44], greeting[RV_GREETING_LEN];
	uint16_t port = free_tcp_port();
	int fd;

	(void)state;
	rv_setup(ranks, 2, 2, port, NULL);
	rv_setup(&other, 1, 2, port, (const uint32_t[]){1});
	other.l.job_id = 99;
	other.timeout_ns = 300 * MS;
	assert_int_equal(pthread_create(&ranks[0].thread, NULL, rv_thread, &ranks[0]), 0);
	/* Garbage from a port scanner: dropped, the rendezvous goes on. */
	fd = tcp_connect(port);
	memset(junk, 0xab, sizeof(junk));
	assert_int_equal(send(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	assert_int_equal(recv(fd, greeting, sizeof(greeting), MSG_WAITALL), sizeof(greeting));
	assert_int_equal(drain(fd), 0); /* nothing but the greeting */
	close(fd);
	/* Another job on our port: closed without a word, the rendezvous goes on. */
	rv_thread(&other);
	close(other.fd);
	rv_expect(&other, -ETIMEDOUT, "closed this rank's connection");
	assert_int_equal(pthread_create(&ranks[1].thread, NULL, rv_thread, &ranks[1]), 0);
	for (uint32_t i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(ranks[i].thread, NULL), 0);
		close(ranks[i].fd);
	}
	rv_check_tables(ranks, 2);
	assert_int_equal(ranks[0].a.refused[KEEL_RV_NOT_KEEL], 1);
	assert_true(ranks[0].a.refused[KEEL_RV_JOB] >= 1);
}

static void test_launch_rendezvous_world_one(void **state)
{
	struct rv_rank r;

	(void)state;
	rv_setup(&r, 1, 1, 0, NULL);
	r.l.master_addr[0] = '\0';
	rv_thread(&r);
	close(r.fd);
	assert_int_equal(r.rc, 0);
	assert_int_equal(port_of(&r.peers[0]), port_of(&r.self));
}

static void test_launch_sockaddr_str(void **state)
{
	struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(29500)};
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(7)};
	struct sockaddr_storage other = {.ss_family = AF_UNIX};
	char buf[64];

	(void)state;
	a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a6.sin6_addr = in6addr_loopback;
	assert_string_equal(keel_sockaddr_str((struct sockaddr *)&a4, buf, sizeof(buf)),
			    "127.0.0.1:29500");
	assert_string_equal(keel_sockaddr_str((struct sockaddr *)&a6, buf, sizeof(buf)), "[::1]:7");
	assert_string_equal(keel_sockaddr_str((struct sockaddr *)&other, buf, sizeof(buf)),
			    "(address family 1)");
	/* Truncated, still terminated. */
	assert_string_equal(keel_sockaddr_str((struct sockaddr *)&a4, buf, 5), "127.");
}

static void test_launch_rendezvous_peers_list(void **state)
{
	struct sockaddr_storage self[2], peers[2];
	char list[128], err[256];
	struct keel_launch l;
	int fds[2];

	(void)state;
	for (int i = 0; i < 2; i++) {
		fds[i] = udp_bound(AF_INET, "127.0.0.1", &self[i]);
		assert_true(fds[i] >= 0);
	}
	snprintf(list, sizeof(list), "127.0.0.1:%u,localhost:%u", port_of(&self[0]),
		 port_of(&self[1]));
	env("KEEL_PEERS", list);
	env("RANK", "1");
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_int_equal(keel_rendezvous(&l, (struct sockaddr *)&self[1], sizeof(self[1]), peers,
					 100 * MS, err, sizeof(err)),
			 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(peers[i].ss_family, AF_INET);
		assert_int_equal(port_of(&peers[i]), port_of(&self[i]));
	}
	/* Our own entry names another port. */
	l.rank = 0;
	assert_int_equal(keel_rendezvous(&l, (struct sockaddr *)&self[1], sizeof(self[1]), peers,
					 100 * MS, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "entry 0 (this rank)"));
	/* IPv6 entries do not resolve for an IPv4 socket. */
	snprintf(list, sizeof(list), "[::1]:%u,127.0.0.1:%u", port_of(&self[0]), port_of(&self[1]));
	env("KEEL_PEERS", list);
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_int_equal(keel_rendezvous(&l, (struct sockaddr *)&self[1], sizeof(self[1]), peers,
					 100 * MS, err, sizeof(err)),
			 KEEL_ERENDEZVOUS);
	assert_non_null(strstr(err, "cannot resolve '::1' as IPv4"));
	/* A host name that does not resolve (".invalid" never does, RFC 6761). */
	snprintf(list, sizeof(list), "no-such-host.invalid:1,127.0.0.1:%u", port_of(&self[1]));
	env("KEEL_PEERS", list);
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_int_equal(keel_rendezvous(&l, (struct sockaddr *)&self[1], sizeof(self[1]), peers,
					 100 * MS, err, sizeof(err)),
			 KEEL_ERENDEZVOUS);
	assert_non_null(strstr(err, "KEEL_PEERS entry 0"));
	close(fds[0]);
	close(fds[1]);
}

static void test_launch_rendezvous_peers_ipv6(void **state)
{
	struct sockaddr_storage self[2], peers[2];
	char list[128], err[256];
	struct keel_launch l;
	int fds[2];

	(void)state;
	for (int i = 0; i < 2; i++) {
		fds[i] = udp_bound(AF_INET6, "::1", &self[i]);
		if (fds[i] < 0) {
			if (i == 1)
				close(fds[0]);
			skip(); /* no IPv6 loopback in this sandbox */
		}
	}
	snprintf(list, sizeof(list), "[::1]:%u,[::1]:%u", port_of(&self[0]), port_of(&self[1]));
	env("KEEL_PEERS", list);
	env("RANK", "0");
	assert_int_equal(keel_launch_from_env(&l, err, sizeof(err)), 0);
	assert_int_equal(keel_rendezvous(&l, (struct sockaddr *)&self[0], sizeof(self[0]), peers,
					 100 * MS, err, sizeof(err)),
			 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(peers[i].ss_family, AF_INET6);
		assert_int_equal(port_of(&peers[i]), port_of(&self[i]));
	}
	close(fds[0]);
	close(fds[1]);
}

static void test_launch_rendezvous_bad_self(void **state)
{
	struct keel_launch l;
	struct sockaddr_storage peers[1], self;
	char err[256];

	(void)state;
	keel_launch_single(&l);
	memset(&self, 0, sizeof(self));
	self.ss_family = AF_UNIX;
	assert_int_equal(keel_rendezvous(&l, (struct sockaddr *)&self, sizeof(self), peers, MS, err,
					 sizeof(err)),
			 -EINVAL);
	self.ss_family = AF_INET; /* port 0: never bound */
	assert_int_equal(keel_rendezvous(&l, (struct sockaddr *)&self, sizeof(self), peers, MS, err,
					 sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "no port"));
	l.world_size = 2;
	((struct sockaddr_in *)&self)->sin_port = htons(9);
	assert_int_equal(keel_rendezvous(&l, (struct sockaddr *)&self, sizeof(self), peers, MS, err,
					 sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "MASTER_ADDR and MASTER_PORT"));
}

/* ---- keel_boot: the key into the node's config ---------------------------------------------- */

/* Run keel_boot_start with stderr going to a file; returns its rc, the file's text in out. */
static int boot_capture(struct keel_boot *b, char *err, size_t err_len, char *out, size_t out_len)
{
	char path[] = "/tmp/keel-boot-stderr.XXXXXX";
	int fd = mkstemp(path), saved = dup(2), rc;
	ssize_t n;

	assert_true(fd >= 0 && saved >= 0);
	fflush(stderr);
	assert_int_equal(dup2(fd, 2), 2);
	rc = keel_boot_start(b, NULL, NULL, err, err_len);
	if (rc == 0)
		keel_boot_stop(b, 0);
	fflush(stderr);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	n = pread(fd, out, out_len - 1, 0);
	out[n > 0 ? n : 0] = '\0';
	close(fd);
	unlink(path);
	return rc;
}

/* Start rank 0 as the environment says and check the waiter's spin: yields or not, and its
 * length in ns (UINT64_MAX: not checked). */
static void boot_spin_expect(bool yield, uint64_t spin_ns)
{
	struct keel_boot b;
	char err[256];

	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), 0);
	assert_int_equal(b.waiter.spin_yield, yield);
	if (spin_ns != UINT64_MAX)
		assert_int_equal(b.waiter.spin_ns, spin_ns);
	keel_boot_stop(&b, 0);
}

/* Acks ride on the next collective's data (keel_config.acks_ride), and a silent flight's
 * tail is probed (tail_probe), only where no rank waits for a core, unless KEEL_ACKS_RIDE and
 * KEEL_TAIL_PROBE say. */
static void boot_ride_expect(bool ride, bool probe)
{
	struct keel_boot b;
	char err[256];

	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), 0);
	assert_int_equal(b.cfg.acks_ride, ride);
	assert_int_equal(b.cfg.tail_probe, probe);
	keel_boot_stop(&b, 0);
}

/* keel_boot_register on a transport that copies (a single rank over UDP here): nothing to
 * register, so 0 and 0 again to let go; bad arguments are refused by name; a dma-buf cannot be
 * read by a transport that is not verbs. The verbs side: tests/unit/test_verbs.c and the VM. */
static void test_launch_boot_register_copying_transport(void **state)
{
	(void)state;
	struct keel_boot b;
	char err[256];
	static uint8_t grad[4096];
	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), 0);
	assert_int_equal(keel_boot_register(&b, grad, sizeof(grad)), 0);
	assert_int_equal(keel_boot_unregister(&b, grad), 0);
	assert_int_equal(keel_boot_register(&b, NULL, 64), -EINVAL);
	assert_int_equal(keel_boot_register(&b, grad, 0), -EINVAL);
	assert_int_equal(keel_boot_register(NULL, grad, 64), -EINVAL);
	assert_int_equal(keel_boot_unregister(&b, NULL), -EINVAL);
	assert_int_equal(keel_boot_register_dmabuf(&b, grad, sizeof(grad), 3, 0), -EOPNOTSUPP);
	assert_int_equal(keel_boot_register_dmabuf(&b, grad, sizeof(grad), -1, 0), -EINVAL);
	assert_int_equal(keel_boot_device_area_bytes(&b), 0); /* not verbs: no device area */
	assert_int_equal(keel_boot_register_device_area(&b, grad, sizeof(grad), 3, 0), -EOPNOTSUPP);
	assert_int_equal(keel_boot_register_device_area(&b, grad, sizeof(grad), -1, 0), -EINVAL);
	assert_int_equal(keel_boot_register_device_area(&b, NULL, sizeof(grad), 3, 0), -EINVAL);
	keel_boot_stop(&b, 0);
}

/* Ranks that outnumber their CPUs spin briefly with a yield by default, unless their heartbeat
 * interval is under 10 ms, the user chose a spin (KEEL_SPIN_US) or blocking; KEEL_SPIN_YIELD=1
 * makes the spin yield anyway, 0 never; anything else names itself. Their acks do not ride on
 * the next collective's data (keel_config.acks_ride) unless KEEL_ACKS_RIDE=1; ranks with cores
 * to spare ride unless KEEL_ACKS_RIDE=0. Likewise tail probes (tail_probe, KEEL_TAIL_PROBE). */
static void test_launch_boot_spin_yield(void **state)
{
	struct keel_boot b;
	char err[256];
	uint16_t p0 = free_tcp_port();

	(void)state;
	env("RANK", "0");
	env("KEEL_TRANSPORT", "udp");
	/* This process on one CPU, its parent (the test's launcher) on all of them. */
	cpu_set_t all, one;
	assert_int_equal(sched_getaffinity(0, sizeof(all), &all), 0);
	CPU_ZERO(&one);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all)) {
			CPU_SET(c, &one);
			break;
		}
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	/* bound to one CPU by a launcher that has them all (mpirun --bind-to core): as many ranks
	 * as CPUs is not oversubscribed */
	long share = keel_posix_cpu_count();
	assert_int_equal(share, CPU_COUNT(&all) < sysconf(_SC_NPROCESSORS_ONLN)
				    ? CPU_COUNT(&all)
				    : sysconf(_SC_NPROCESSORS_ONLN));
	char ranks[24];
	assert_false(keel_posix_oversubscribed((uint32_t)share));
	assert_true(keel_posix_oversubscribed((uint32_t)share + 1));
	snprintf(ranks, sizeof(ranks), "%ld", share + 1);
	env("LOCAL_WORLD_SIZE", ranks);
	/* a job of that many ranks on this host (rank 0 starts; KEEL_PEERS needs no others) */
	size_t peers_len = (size_t)(share + 1) * 24 + 1, used = 0;
	char *peers = calloc(1, peers_len);
	assert_non_null(peers);
	for (long r = 0; r <= share; r++)
		used += (size_t)snprintf(peers + used, peers_len - used, "%s127.0.0.1:%u",
					 r > 0 ? "," : "", (unsigned)(p0 + r));
	env("KEEL_PEERS", peers);
	free(peers);
	/* by default: a short yielding spin, as the heartbeat interval grew with the ranks */
	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), 0);
	assert_true(b.cfg.heartbeat_ns >= 10000000);
	keel_boot_stop(&b, 0);
	boot_spin_expect(true, 20000);
	/* heartbeats under 10 ms: a yielding spinner would delay them; it blocks at once */
	env("KEEL_HEARTBEAT_US", "9999");
	boot_spin_expect(false, 0);
	env("KEEL_HEARTBEAT_US", "10000");
	boot_spin_expect(true, 20000);
	unsetenv("KEEL_HEARTBEAT_US");
	/* a spin the user chose is left alone: no yield unless asked */
	env("KEEL_SPIN_US", "0");
	boot_spin_expect(false, 0);
	unsetenv("KEEL_SPIN_US");
	env("KEEL_WAIT", "block");
	boot_spin_expect(false, 0);
	unsetenv("KEEL_WAIT");
	env("KEEL_SPIN_YIELD", "1");
	env("KEEL_HEARTBEAT_US", "250"); /* asked for: yields whatever the interval */
	boot_spin_expect(true, 20000);
	unsetenv("KEEL_HEARTBEAT_US");
	env("KEEL_SPIN_YIELD", "0");
	boot_spin_expect(false, 0);
	env("KEEL_SPIN_YIELD", "yes");
	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "KEEL_SPIN_YIELD=\'yes\': expected 0 (off) or 1 (on)"));
	unsetenv("KEEL_SPIN_YIELD");
	/* oversubscribed: acks go at once and tails are not probed, unless asked */
	boot_ride_expect(false, false);
	env("KEEL_ACKS_RIDE", "1");
	boot_ride_expect(true, false);
	env("KEEL_ACKS_RIDE", "on");
	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "KEEL_ACKS_RIDE=\'on\': expected 0 (off) or 1 (on)"));
	unsetenv("KEEL_ACKS_RIDE");
	env("KEEL_TAIL_PROBE", "1");
	boot_ride_expect(false, true);
	env("KEEL_TAIL_PROBE", "2");
	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "KEEL_TAIL_PROBE=\'2\': expected 0 (off) or 1 (on)"));
	unsetenv("KEEL_TAIL_PROBE");
	/* under mpirun: the ranks on the host counted from Open MPI's own variable */
	unsetenv("RANK");
	unsetenv("LOCAL_WORLD_SIZE");
	env("OMPI_COMM_WORLD_RANK", "0");
	snprintf(ranks, sizeof(ranks), "%ld", share + 1);
	env("OMPI_COMM_WORLD_SIZE", ranks);
	env("OMPI_COMM_WORLD_LOCAL_SIZE", ranks);
	boot_spin_expect(true, 20000);
	snprintf(ranks, sizeof(ranks), "%ld", share);
	env("OMPI_COMM_WORLD_LOCAL_SIZE", ranks); /* the others on other hosts */
	boot_spin_expect(false, KEEL_POSIX_SPIN_NS_DEFAULT);
	boot_ride_expect(true, true); /* cores to spare: acks ride, tails are probed */
	env("KEEL_ACKS_RIDE", "0");
	boot_ride_expect(false, true);
	unsetenv("KEEL_ACKS_RIDE");
	env("KEEL_TAIL_PROBE", "0");
	boot_ride_expect(true, false);
	unsetenv("KEEL_TAIL_PROBE");
	env("RANK", "0");
	assert_false(keel_posix_oversubscribed(1));
	assert_int_equal(sched_setaffinity(0, sizeof(all), &all), 0);
}

/* Start rank 0 of a 2-rank KEEL_PEERS job and check the window and burst it chose. */
#define ANY UINT32_MAX /* boot_sizes_expect: not checked */

/* Start rank 0 as the environment says and check the datagram size, piece size, window and
 * burst it picks (ANY: not checked). */
static void boot_sizes_expect(uint32_t mtu, uint32_t piece_bytes, uint32_t window, uint32_t burst)
{
	struct keel_boot b;
	char err[256];

	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), 0);
	if ((mtu != ANY && b.cfg.mtu != mtu) ||
	    (piece_bytes != ANY && b.piece_bytes != piece_bytes) || b.cfg.window != window ||
	    (burst != ANY && b.cfg.burst != burst))
		print_error("mtu %u pieces %u window %u burst %u; want %u, %u, %u, %u\n", b.cfg.mtu,
			    b.piece_bytes, b.cfg.window, b.cfg.burst, mtu, piece_bytes, window,
			    burst);
	if (mtu != ANY)
		assert_int_equal(b.cfg.mtu, mtu);
	if (piece_bytes != ANY)
		assert_int_equal(b.piece_bytes, piece_bytes);
	assert_int_equal(b.cfg.window, window);
	if (burst != ANY)
		assert_int_equal(b.cfg.burst, burst);
	keel_boot_stop(&b, 0);
}

static void boot_window_expect(uint32_t window, uint32_t burst)
{
	boot_sizes_expect(ANY, ANY, window, burst);
}

/* Rank 0 of two on loopback through KEEL_PEERS (no rendezvous), job id 7 (no warning). */
static void rank0_of_two_env(void)
{
	static char peers[64];
	uint16_t p0 = free_tcp_port();

	snprintf(peers, sizeof(peers), "127.0.0.1:%u,127.0.0.1:%u", p0, p0 + 1u);
	env("KEEL_PEERS", peers);
	env("RANK", "0");
	env("KEEL_JOB_ID", "7");
}

/* Datagrams smaller than the default carry less each: the window and burst grow with them (up
 * to 4x), unless KEEL_WINDOW or KEEL_BURST is set. Only over UDP (the DPDK pool is sized from
 * the burst). And KEEL_UDP_STAGE is a 0/1 switch like KEEL_UDP_GSO. */
static void test_launch_boot_window_follows_datagram_size(void **state)
{
	char err[256];
	struct keel_boot b;

	(void)state;
	rank0_of_two_env();					     /* no warning about job id 0 */
	boot_window_expect(KEEL_WINDOW_DEFAULT, KEEL_BURST_DEFAULT); /* loopback: 64 KiB */
	env("KEEL_MTU", "8972");
	boot_window_expect(KEEL_WINDOW_DEFAULT, KEEL_BURST_DEFAULT);
	env("KEEL_MTU", "4000");
	boot_window_expect(2 * KEEL_WINDOW_DEFAULT, 2 * KEEL_BURST_DEFAULT);
	env("KEEL_MTU", "1472");
	boot_window_expect(4 * KEEL_WINDOW_DEFAULT, 4 * KEEL_BURST_DEFAULT);
	env("KEEL_MTU", "300");
	boot_window_expect(4 * KEEL_WINDOW_DEFAULT, 4 * KEEL_BURST_DEFAULT); /* at most 4x */
	env("KEEL_MTU", "1472");
	env("KEEL_WINDOW", "32");
	boot_window_expect(32, 4 * KEEL_BURST_DEFAULT);
	unsetenv("KEEL_WINDOW");
	env("KEEL_BURST", "16");
	boot_window_expect(4 * KEEL_WINDOW_DEFAULT, 16);
	unsetenv("KEEL_BURST");
	env("KEEL_UDP_STAGE", "0");
	boot_window_expect(4 * KEEL_WINDOW_DEFAULT, 4 * KEEL_BURST_DEFAULT);
	env("KEEL_UDP_STAGE", "2");
	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "KEEL_UDP_STAGE=\'2\': expected 0 (off) or 1 (on)"));
}

static void boot_pieces_expect(uint32_t mtu, uint32_t piece_bytes, uint32_t window)
{
	boot_sizes_expect(mtu, piece_bytes, window, ANY);
}

/* KEEL_UDP_PIECES: on loopback nothing is cut unless a size is given; given one, datagrams
 * take as many whole pieces as 4 x 8 972 bytes hold (1 472-byte pieces: 24 x 1 464 = 35 136),
 * with half the default window. KEEL_MTU sets the size itself and nothing is cut; 0 turns
 * cutting off; a size no link has, or a word, is refused by name. */
static void test_launch_boot_udp_pieces(void **state)
{
	char err[256];
	struct keel_boot b;

	(void)state;
	rank0_of_two_env();
	boot_pieces_expect(KEEL_MTU_MAX, 0, KEEL_WINDOW_DEFAULT);
	env("KEEL_UDP_PIECES", "1");
	boot_pieces_expect(KEEL_MTU_MAX, 0, KEEL_WINDOW_DEFAULT); /* loopback needs none */
	env("KEEL_UDP_PIECES", "1472");
	boot_pieces_expect(24 * 1464, 1472, KEEL_WINDOW_DEFAULT / 2);
	env("KEEL_WINDOW", "128"); /* a window asked for stays */
	boot_pieces_expect(24 * 1464, 1472, 128);
	unsetenv("KEEL_WINDOW");
	env("KEEL_UDP_PIECES", "576");
	boot_pieces_expect(63 * 568, 576, KEEL_WINDOW_DEFAULT / 2); /* 63 pieces of 64 at most */
	env("KEEL_UDP_PIECES", "8000");
	boot_pieces_expect(4 * 7992, 8000, KEEL_WINDOW_DEFAULT / 2);
	env("KEEL_UDP_PIECES", "9000"); /* larger than the default datagram: nothing to gain */
	boot_pieces_expect(KEEL_MTU_MAX, 0, KEEL_WINDOW_DEFAULT);
	env("KEEL_UDP_PIECES", "1472");
	env("KEEL_MTU", "1472");
	boot_pieces_expect(1472, 0, 4 * KEEL_WINDOW_DEFAULT);
	unsetenv("KEEL_MTU");
	env("KEEL_UDP_PIECES", "0");
	boot_pieces_expect(KEEL_MTU_MAX, 0, KEEL_WINDOW_DEFAULT);
	const char *bad[] = {"575", "65508", "yes", "-1", "1472x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[80];
		env("KEEL_UDP_PIECES", bad[i]);
		assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), -EINVAL);
		snprintf(want, sizeof(want), "KEEL_UDP_PIECES='%s': expected 0 (off), 1 (on)",
			 bad[i]);
		if (strstr(err, want) == NULL)
			print_error("%s\n", err);
		assert_non_null(strstr(err, want));
	}
	unsetenv("KEEL_UDP_PIECES");
}

static void test_launch_boot_auth(void **state)
{
	struct keel_boot b;
	char err[256], out[2048], peers[64];
	uint8_t want[32];
	uint16_t p0 = free_tcp_port();

	(void)state;
	/* Two ranks through KEEL_PEERS (no rendezvous to wait for), no key: one warning per
	 * process, however many nodes it starts, naming the job id 0 it falls back to. */
	snprintf(peers, sizeof(peers), "127.0.0.1:%u,127.0.0.1:%u", p0, p0 + 1u);
	env("KEEL_PEERS", peers);
	env("RANK", "0");
	assert_int_equal(boot_capture(&b, err, sizeof(err), out, sizeof(out)), 0);
	assert_non_null(strstr(out, "keel: warning: no job key"));
	assert_non_null(strstr(out, "KEEL_JOB_KEY_FILE"));
	assert_non_null(strstr(out, "job id is 0 (set KEEL_JOB_ID)"));
	assert_false(b.cfg.auth);
	assert_int_equal(boot_capture(&b, err, sizeof(err), out, sizeof(out)), 0);
	assert_null(strstr(out, "no job key")); /* said once */
	if (!keel_launch_auth_available())
		skip();
	/* With a key: the node authenticates, under the key, with the MAC asked for. */
	env("KEEL_JOB_KEY", KEY_HEX);
	env("KEEL_MAC", "chacha20poly1305");
	key_bytes(want);
	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), 0);
	assert_true(b.cfg.auth);
	assert_memory_equal(b.cfg.auth_key, want, 32);
	assert_int_equal(b.cfg.mac, KEEL_MAC_CHACHA20POLY1305);
	assert_int_equal(b.cfg.job_id,
			 keel_rv_job_id_from_key(want)); /* KEEL_PEERS: from the key */
	keel_boot_stop(&b, 0);
	for (size_t i = 0; i < 32; i++) /* no copy of the key outlives the node */
		assert_int_equal(b.cfg.auth_key[i] | b.launch.key[i], 0);
	env("KEEL_TRANSPORT", "tcp"); /* an unknown transport, named with the choices */
	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(
	    strstr(err, "KEEL_TRANSPORT=\'tcp\': expected auto, udp, shm, dpdk or verbs"));
	env("KEEL_TRANSPORT", "udp");
	env("KEEL_MAC", "aes256gcm");
	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), 0);
	assert_int_equal(b.cfg.mac, KEEL_MAC_AES256GCM);
	keel_boot_stop(&b, 0);
	env("KEEL_MAC", "md5");
	assert_int_equal(keel_boot_start(&b, NULL, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(
	    strstr(err, "KEEL_MAC=\'md5\': expected auto, aes256gcm or chacha20poly1305"));
}

/* ---- waiter ----------------------------------------------------------------------------- */

struct delayed_send {
	int fd;
	struct sockaddr_storage to;
	uint64_t delay_ns;
};

static void *delayed_send_thread(void *arg)
{
	struct delayed_send *d = arg;
	ssize_t n;

	usleep((useconds_t)(d->delay_ns / 1000));
	n = sendto(d->fd, "x", 1, 0, (struct sockaddr *)&d->to, sizeof(struct sockaddr_in));
	(void)n;
	return NULL;
}

/* Wait with `mode` for up to deadline_ms; a datagram arrives after send_ms (0: none).
 * Returns the elapsed time. */
static uint64_t wait_once(enum keel_wait_mode mode, uint64_t spin_ns, uint64_t deadline_ms,
			  uint64_t send_ms, struct keel_posix_waiter *w)
{
	struct sockaddr_storage rx_addr, tx_addr;
	int rx = udp_bound(AF_INET, "127.0.0.1", &rx_addr);
	int tx = udp_bound(AF_INET, "127.0.0.1", &tx_addr);
	struct delayed_send d = {.fd = tx, .to = rx_addr, .delay_ns = send_ms * MS};
	struct keel_waiter kw;
	pthread_t th;
	uint64_t t0;

	assert_true(rx >= 0 && tx >= 0);
	keel_posix_waiter_init(w, rx, mode, spin_ns);
	kw = keel_posix_waiter_get(w);
	if (send_ms != 0)
		assert_int_equal(pthread_create(&th, NULL, delayed_send_thread, &d), 0);
	t0 = kw.now_ns(kw.ctx);
	kw.wait(kw.ctx, t0 + deadline_ms * MS);
	t0 = kw.now_ns(kw.ctx) - t0;
	if (send_ms != 0)
		assert_int_equal(pthread_join(th, NULL), 0);
	close(rx);
	close(tx);
	return t0;
}

static void test_launch_waiter_block(void **state)
{
	struct keel_posix_waiter w;
	uint64_t dt;

	(void)state;
	keel_posix_timer_slack_min();
	/* Deadline: returns at it, not much later. */
	dt = wait_once(KEEL_WAIT_BLOCK, 0, 20, 0, &w);
	assert_true(dt >= 20 * MS);
	assert_true(dt < 60 * MS);
	assert_int_equal(w.blocks, 1);
	assert_int_equal(w.spins, 0);
	assert_int_equal(w.wakeups_input, 0);
	/* Input: returns when the datagram lands, long before the deadline. */
	dt = wait_once(KEEL_WAIT_BLOCK, 0, 2000, 10, &w);
	assert_true(dt >= 9 * MS);
	assert_true(dt < 500 * MS);
	assert_int_equal(w.wakeups_input, 1);
}

static void test_launch_waiter_block_pipe_and_no_fd(void **state)
{
	struct keel_posix_waiter w;
	struct keel_waiter kw;
	int p[2];
	uint64_t t0;

	(void)state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	keel_posix_waiter_init(&w, p[0], KEEL_WAIT_BUSY, 0);
	assert_int_equal(w.fd_is_socket, 0);
	kw = keel_posix_waiter_get(&w);
	t0 = keel_posix_now_ns();
	kw.wait(kw.ctx, t0 + 1000 * MS); /* readable pipe: at once, through ppoll */
	assert_true(keel_posix_now_ns() - t0 < 100 * MS);
	assert_int_equal(w.wakeups_input, 1);
	close(p[0]);
	close(p[1]);
	keel_posix_waiter_init(&w, -1, KEEL_WAIT_BLOCK, 0);
	kw = keel_posix_waiter_get(&w);
	t0 = keel_posix_now_ns();
	kw.wait(kw.ctx, t0 + 5 * MS); /* no fd: a nanosecond sleep */
	assert_true(keel_posix_now_ns() - t0 >= 5 * MS);
	/* A deadline in the past returns at once. */
	kw.wait(kw.ctx, 1);
	assert_int_equal(w.waits, 2);
	assert_int_equal(keel_posix_waiter_add_fd(&w, 0), -EINVAL); /* a waiter without fd */
}

/* Several descriptors (a router's routes): input on any one ends the wait, blocking or spinning
 * (socket or not); the number is bounded. */
static void test_launch_waiter_more_fds(void **state)
{
	struct keel_posix_waiter w;
	struct keel_waiter kw;
	int a[2], b[2], c[2];
	uint64_t t0;

	(void)state;
	assert_int_equal(pipe(a), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, b), 0);
	assert_int_equal(pipe(c), 0);
	for (int mode = 0; mode < 2; mode++) {
		keel_posix_waiter_init(&w, b[0], mode == 0 ? KEEL_WAIT_BLOCK : KEEL_WAIT_BUSY, 0);
		assert_int_equal(keel_posix_waiter_add_fd(&w, a[0]), 0);
		assert_int_equal(keel_posix_waiter_add_fd(&w, -1), -EINVAL);
		kw = keel_posix_waiter_get(&w);
		t0 = keel_posix_now_ns();
		kw.wait(kw.ctx, t0 + 20 * MS); /* nothing: the deadline */
		assert_true(keel_posix_now_ns() - t0 >= 20 * MS);
		assert_int_equal(write(a[1], "x", 1), 1); /* input on the second descriptor */
		t0 = keel_posix_now_ns();
		kw.wait(kw.ctx, t0 + 1000 * MS);
		assert_true(keel_posix_now_ns() - t0 < 500 * MS);
		assert_int_equal(w.wakeups_input, 1);
		char byte;
		assert_int_equal(read(a[0], &byte, 1), 1);
	}
	assert_int_equal(keel_posix_waiter_add_fd(&w, c[0]), 0);
	assert_int_equal(keel_posix_waiter_add_fd(&w, c[1]), 0);
	assert_int_equal(keel_posix_waiter_add_fd(&w, c[0]), -ENOSPC); /* 4 in all */
	for (int i = 0; i < 2; i++) {
		close(a[i]);
		close(b[i]);
		close(c[i]);
	}
}

/* A stand-in transport for the waiter: rx_ready and arm_wait answer from fields and count. */
struct fake_tp {
	struct keel_transport t;
	bool ready, arm_quiet;
	uint32_t ready_calls, arm_calls;
};

static bool fake_rx_ready(struct keel_transport *t)
{
	struct fake_tp *f = t->state;
	f->ready_calls++;
	return f->ready;
}

static bool fake_arm_wait(struct keel_transport *t)
{
	struct fake_tp *f = t->state;
	f->arm_calls++;
	return f->arm_quiet;
}

static const struct keel_transport_ops fake_tp_ops = {
    .name = "fake",
    .rx_ready = fake_rx_ready,
    .arm_wait = fake_arm_wait,
};

/* With a transport set, a spin asks its rx_ready (not the descriptor, which stays readable
 * here), and a block first arms it: an arm that finds input ends the wait at once. */
static void test_launch_waiter_transport(void **state)
{
	struct keel_posix_waiter w;
	struct keel_waiter kw;
	struct fake_tp f = {.t = {.ops = &fake_tp_ops, .world_size = 2}};
	int b[2];
	uint64_t t0;

	(void)state;
	f.t.state = &f;
	assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, b), 0);
	assert_int_equal(write(b[1], "x", 1), 1); /* the descriptor is readable throughout */
	keel_posix_waiter_init(&w, b[0], KEEL_WAIT_BUSY, 0);
	keel_posix_waiter_set_transport(&w, &f.t);
	assert_int_equal(f.arm_calls, 1); /* busy never blocks: armed once, to say it arms */
	kw = keel_posix_waiter_get(&w);
	t0 = keel_posix_now_ns();
	kw.wait(kw.ctx, t0 + 20 * MS); /* rx_ready says no: the spin runs to the deadline */
	assert_true(keel_posix_now_ns() - t0 >= 20 * MS);
	assert_true(f.ready_calls > 1);
	assert_int_equal(f.arm_calls, 1); /* a spin never arms */
	f.ready = true;
	t0 = keel_posix_now_ns();
	kw.wait(kw.ctx, t0 + 1000 * MS);
	assert_true(keel_posix_now_ns() - t0 < 500 * MS);
	assert_int_equal(w.wakeups_input, 1);
	/* a yielding spin: the same answers */
	keel_posix_waiter_set_spin_yield(&w, true);
	f.ready = false;
	t0 = keel_posix_now_ns();
	kw.wait(kw.ctx, t0 + 20 * MS);
	assert_true(keel_posix_now_ns() - t0 >= 20 * MS);
	f.ready = true;
	t0 = keel_posix_now_ns();
	kw.wait(kw.ctx, t0 + 1000 * MS);
	assert_true(keel_posix_now_ns() - t0 < 500 * MS);
	assert_int_equal(w.wakeups_input, 2);
	/* blocking: armed first; input found while arming returns at once, without ppoll */
	f.arm_calls = 0;
	keel_posix_waiter_init(&w, b[0], KEEL_WAIT_BLOCK, 0);
	keel_posix_waiter_set_transport(&w, &f.t);
	assert_int_equal(f.arm_calls, 0); /* a waiter that blocks arms before each block only */
	kw = keel_posix_waiter_get(&w);
	f.arm_quiet = false;
	t0 = keel_posix_now_ns();
	kw.wait(kw.ctx, t0 + 1000 * MS);
	assert_true(keel_posix_now_ns() - t0 < 500 * MS);
	assert_int_equal(f.arm_calls, 1);
	assert_int_equal(w.blocks, 0);
	assert_int_equal(w.wakeups_input, 1);
	f.arm_quiet = true; /* armed and quiet: ppoll, which finds the readable descriptor */
	kw.wait(kw.ctx, keel_posix_now_ns() + 1000 * MS);
	assert_int_equal(f.arm_calls, 2);
	assert_int_equal(w.blocks, 1);
	assert_int_equal(w.wakeups_input, 2);
	char byte;
	assert_int_equal(read(b[0], &byte, 1), 1);
	t0 = keel_posix_now_ns(); /* armed, quiet, nothing readable: the deadline */
	kw.wait(kw.ctx, t0 + 20 * MS);
	assert_true(keel_posix_now_ns() - t0 >= 20 * MS);
	assert_int_equal(f.arm_calls, 3);
	for (int i = 0; i < 2; i++)
		close(b[i]);
}

/* wake_fd (the /metrics endpoint's): it ends a blocking wait, never a spin. */
static void test_launch_waiter_wake_fd(void **state)
{
	struct keel_posix_waiter w;
	struct keel_waiter kw;
	int b[2], e[2];
	uint64_t t0, dt;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, b), 0);
	assert_int_equal(pipe(e), 0);
	assert_int_equal(write(e[1], "x", 1), 1); /* readable throughout */
	/* blocking: at once */
	keel_posix_waiter_init(&w, b[0], KEEL_WAIT_BLOCK, 0);
	assert_int_equal(w.wake_fd, -1);
	keel_posix_waiter_set_wake_fd(&w, e[0]);
	kw = keel_posix_waiter_get(&w);
	t0 = keel_posix_now_ns();
	kw.wait(kw.ctx, t0 + 1000 * MS);
	assert_true(keel_posix_now_ns() - t0 < 500 * MS);
	assert_int_equal(w.wakeups_wake_fd, 1);
	/* busy: the spin does not look at it, the deadline ends the wait */
	keel_posix_waiter_init(&w, b[0], KEEL_WAIT_BUSY, 0);
	keel_posix_waiter_set_wake_fd(&w, e[0]);
	kw = keel_posix_waiter_get(&w);
	t0 = keel_posix_now_ns();
	kw.wait(kw.ctx, t0 + 20 * MS);
	assert_true(keel_posix_now_ns() - t0 >= 20 * MS);
	assert_int_equal(w.wakeups_wake_fd, 0);
	/* adaptive: the spin runs its course, then the block ends at once */
	keel_posix_waiter_init(&w, b[0], KEEL_WAIT_ADAPTIVE, 10 * MS);
	keel_posix_waiter_set_wake_fd(&w, e[0]);
	kw = keel_posix_waiter_get(&w);
	t0 = keel_posix_now_ns();
	kw.wait(kw.ctx, t0 + 1000 * MS);
	dt = keel_posix_now_ns() - t0;
	assert_true(dt >= 10 * MS && dt < 500 * MS);
	assert_int_equal(w.wakeups_wake_fd, 1);
	/* none again */
	keel_posix_waiter_set_wake_fd(&w, -1);
	t0 = keel_posix_now_ns();
	kw.wait(kw.ctx, t0 + 20 * MS);
	assert_true(keel_posix_now_ns() - t0 >= 20 * MS);
	for (int i = 0; i < 2; i++) {
		close(b[i]);
		close(e[i]);
	}
}

static void test_launch_waiter_busy(void **state)
{
	struct keel_posix_waiter w;
	uint64_t dt;

	(void)state;
	dt = wait_once(KEEL_WAIT_BUSY, 0, 5, 0, &w);
	assert_true(dt >= 5 * MS);
	assert_int_equal(w.blocks, 0);
	assert_int_equal(w.spins, 1);
	dt = wait_once(KEEL_WAIT_BUSY, 0, 2000, 5, &w);
	assert_true(dt < 500 * MS);
	assert_int_equal(w.wakeups_input, 1);
	assert_int_equal(w.blocks, 0);
}

static void test_launch_waiter_adaptive(void **state)
{
	struct keel_posix_waiter w;
	uint64_t dt;

	(void)state;
	/* Spins 1 ms, then blocks until the deadline. */
	dt = wait_once(KEEL_WAIT_ADAPTIVE, 1 * MS, 20, 0, &w);
	assert_true(dt >= 20 * MS);
	assert_int_equal(w.blocks, 1);
	assert_int_equal(w.spins, 0);
	/* Input during the block phase. */
	dt = wait_once(KEEL_WAIT_ADAPTIVE, 1 * MS, 2000, 10, &w);
	assert_true(dt < 500 * MS);
	assert_int_equal(w.wakeups_input, 1);
	assert_int_equal(w.blocks, 1);
	/* A spin longer than the wait never blocks. */
	dt = wait_once(KEEL_WAIT_ADAPTIVE, 100 * MS, 3, 0, &w);
	assert_true(dt >= 3 * MS);
	assert_int_equal(w.blocks, 0);
	assert_int_equal(w.spins, 1);
}

static void test_launch_wait_mode_from_env(void **state)
{
	static const char *const bad_wait[] = {"fast", "BUSY", "adaptive ", "1"};
	static const char *const bad_spin[] = {"-1", "abc", "1.5", "10000001",
					       "99999999999999999999"};
	enum keel_wait_mode mode = KEEL_WAIT_BUSY;
	uint64_t spin = 0;

	(void)state;
	assert_int_equal(keel_posix_wait_mode_from_env(1, &mode, &spin, NULL, 0), 0);
	assert_int_equal(mode, KEEL_WAIT_ADAPTIVE);
	assert_int_equal(spin, KEEL_POSIX_SPIN_NS_DEFAULT);
	/* as many ranks as CPUs: spin */
	assert_int_equal(
	    keel_posix_wait_mode_from_env((uint32_t)keel_posix_cpu_count(), &mode, &spin, NULL, 0),
	    0);
	assert_int_equal(spin, KEEL_POSIX_SPIN_NS_DEFAULT);
	/* oversubscribed: block at once */
	assert_int_equal(keel_posix_wait_mode_from_env(100000, &mode, &spin, NULL, 0), 0);
	assert_int_equal(mode, KEEL_WAIT_ADAPTIVE);
	assert_int_equal(spin, 0);
	env("KEEL_SPIN_US", "7"); /* explicit spin wins */
	assert_int_equal(keel_posix_wait_mode_from_env(100000, &mode, &spin, NULL, 0), 0);
	assert_int_equal(spin, 7000);
	env("KEEL_WAIT", "busy");
	assert_int_equal(keel_posix_wait_mode_from_env(1, &mode, &spin, NULL, 0), 0);
	assert_int_equal(mode, KEEL_WAIT_BUSY);
	assert_int_equal(spin, UINT64_MAX);
	env("KEEL_WAIT", "block");
	assert_int_equal(keel_posix_wait_mode_from_env(1, &mode, &spin, NULL, 0), 0);
	assert_int_equal(mode, KEEL_WAIT_BLOCK);
	assert_int_equal(spin, 0);
	env("KEEL_WAIT", "adaptive");
	assert_int_equal(keel_posix_wait_mode_from_env(1, &mode, &spin, NULL, 0), 0);
	assert_int_equal(mode, KEEL_WAIT_ADAPTIVE);
	assert_string_equal(keel_posix_wait_mode_name(mode), "adaptive");
	for (size_t i = 0; i < sizeof(bad_wait) / sizeof(bad_wait[0]); i++) {
		env("KEEL_WAIT", bad_wait[i]);
		mode = KEEL_WAIT_BLOCK;
		assert_int_equal(keel_posix_wait_mode_from_env(1, &mode, &spin, NULL, 0), -EINVAL);
		assert_int_equal(mode, KEEL_WAIT_BLOCK); /* untouched */
	}
	env("KEEL_WAIT", "busy");
	for (size_t i = 0; i < sizeof(bad_spin) / sizeof(bad_spin[0]); i++) {
		env("KEEL_SPIN_US", bad_spin[i]);
		assert_int_equal(keel_posix_wait_mode_from_env(1, &mode, &spin, NULL, 0), -EINVAL);
	}
}

static void test_launch_timer_slack_min(void **state)
{
	(void)state;
	keel_posix_timer_slack_min();
	assert_int_equal(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_launch_torchrun_env, env_clear),
	    cmocka_unit_test_setup(test_launch_precedence, env_clear),
	    cmocka_unit_test_setup(test_launch_nothing_set, env_clear),
	    cmocka_unit_test_setup(test_launch_single, env_clear),
	    cmocka_unit_test_setup(test_launch_bad_numbers, env_clear),
	    cmocka_unit_test_setup(test_launch_missing_partner, env_clear),
	    cmocka_unit_test_setup(test_launch_master, env_clear),
	    cmocka_unit_test_setup(test_launch_job_id, env_clear),
	    cmocka_unit_test_setup(test_launch_key_env, env_clear),
	    cmocka_unit_test_setup(test_launch_key_file, env_clear),
	    cmocka_unit_test_setup(test_launch_proof_hello, env_clear),
	    cmocka_unit_test_setup(test_launch_proof_hello_fields, env_clear),
	    cmocka_unit_test_setup(test_launch_hello_mtu_range, env_clear),
	    cmocka_unit_test_setup(test_launch_proof_reply, env_clear),
	    cmocka_unit_test_setup(test_launch_refusals_str, env_clear),
	    cmocka_unit_test_setup(test_launch_peers_env, env_clear),
	    cmocka_unit_test_setup(test_launch_peers_entries, env_clear),
	    cmocka_unit_test_setup(test_launch_peers_bad_entries, env_clear),
	    cmocka_unit_test_setup(test_launch_peers_too_many, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_four_ranks, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_rank0_late, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_wildcard_advertises_local, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_unreachable_master, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_missing_rank_times_out, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_duplicate_rank, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_world_mismatch, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_job_mismatch, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_strays_and_other_jobs, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_attacks, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_idle_deadline, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_keyed, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_wrong_key, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_key_on_one_side, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_forged_table, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_world_one, env_clear),
	    cmocka_unit_test_setup(test_launch_sockaddr_str, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_peers_list, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_peers_ipv6, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_bad_self, env_clear),
	    cmocka_unit_test_setup(test_launch_boot_auth, env_clear),
	    cmocka_unit_test_setup(test_launch_waiter_block, env_clear),
	    cmocka_unit_test_setup(test_launch_waiter_block_pipe_and_no_fd, env_clear),
	    cmocka_unit_test_setup(test_launch_waiter_busy, env_clear),
	    cmocka_unit_test_setup(test_launch_waiter_more_fds, env_clear),
	    cmocka_unit_test_setup(test_launch_waiter_transport, env_clear),
	    cmocka_unit_test_setup(test_launch_boot_spin_yield, env_clear),
	    cmocka_unit_test_setup(test_launch_boot_window_follows_datagram_size, env_clear),
	    cmocka_unit_test_setup(test_launch_boot_udp_pieces, env_clear),
	    cmocka_unit_test_setup(test_launch_boot_register_copying_transport, env_clear),
	    cmocka_unit_test_setup(test_launch_waiter_wake_fd, env_clear),
	    cmocka_unit_test_setup(test_launch_host, env_clear),
	    cmocka_unit_test_setup(test_launch_waiter_adaptive, env_clear),
	    cmocka_unit_test_setup(test_launch_wait_mode_from_env, env_clear),
	    cmocka_unit_test_setup(test_launch_timer_slack_min, env_clear),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
