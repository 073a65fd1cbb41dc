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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "keel/launch.h"
#include "keel/limits.h"
#include "keel/posix.h"
#include "rendezvous.h"

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
};

static int env_clear(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
		unsetenv(env_names[i]);
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
	unsetenv("KEEL_JOB_ID");
	env("SLURM_JOB_ID", "junk"); /* unreadable: ignored */
	assert_int_equal(keel_launch_from_env(&l, NULL, 0), 0);
	assert_int_equal(l.job_id, 0);
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
	int rc;
	uint64_t elapsed_ns;
	char err[256];
	pthread_t thread;
};

static void *rv_thread(void *arg)
{
	struct rv_rank *r = arg;
	uint64_t t0;

	if (r->start_delay_ns != 0)
		usleep((useconds_t)(r->start_delay_ns / 1000));
	t0 = keel_posix_now_ns();
	r->rc = keel_rendezvous(&r->l, (struct sockaddr *)&r->self, sizeof(r->self), r->peers,
				r->timeout_ns, r->err, sizeof(r->err));
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

static void test_launch_rendezvous_missing_rank_times_out(void **state)
{
	struct rv_rank ranks[2];

	(void)state;
	rv_setup(ranks, 2, 3, free_tcp_port(), NULL); /* world 3, rank 2 never comes */
	ranks[0].timeout_ns = 300 * MS;
	ranks[1].timeout_ns = 3000 * MS;
	rv_run(ranks, 2);
	assert_int_equal(ranks[0].rc, -ETIMEDOUT);
	assert_non_null(strstr(ranks[0].err, "only 2 of 3 ranks"));
	assert_non_null(strstr(ranks[0].err, "missing ranks 2"));
	/* Rank 1 hears it from rank 0 instead of waiting out its own timeout. */
	assert_int_equal(ranks[1].rc, -ETIMEDOUT);
	assert_non_null(strstr(ranks[1].err, "timed out: only 2 of 3 ranks"));
	for (uint32_t i = 0; i < 2; i++)
		assert_true(ranks[i].elapsed_ns < 450 * MS);
	/* A rank whose own time runs out first. */
	rv_setup(ranks, 2, 3, free_tcp_port(), NULL);
	ranks[0].timeout_ns = 500 * MS;
	ranks[1].timeout_ns = 200 * MS;
	rv_run(ranks, 2);
	assert_int_equal(ranks[1].rc, -ETIMEDOUT);
	assert_non_null(strstr(ranks[1].err, "did not come in time"));
	assert_true(ranks[1].elapsed_ns < 350 * MS);
}

static void test_launch_rendezvous_duplicate_rank(void **state)
{
	struct rv_rank ranks[3];

	(void)state;
	rv_setup(ranks, 3, 3, free_tcp_port(), (const uint32_t[]){0, 1, 1});
	rv_run(ranks, 3);
	assert_int_equal(ranks[0].rc, KEEL_ERENDEZVOUS);
	assert_non_null(strstr(ranks[0].err, "duplicate rank 1"));
	/* One twin is told it is a duplicate, the other that the rendezvous was aborted. */
	assert_int_equal(ranks[1].rc, KEEL_ERENDEZVOUS);
	assert_int_equal(ranks[2].rc, KEEL_ERENDEZVOUS);
	assert_true((strstr(ranks[1].err, "duplicate") && strstr(ranks[2].err, "aborted")) ||
		    (strstr(ranks[2].err, "duplicate") && strstr(ranks[1].err, "aborted")));
	for (uint32_t i = 0; i < 3; i++)
		assert_true(ranks[i].elapsed_ns < 2000 * MS); /* fails fast, not by timeout */
}

static void test_launch_rendezvous_world_mismatch(void **state)
{
	struct rv_rank ranks[2];

	(void)state;
	rv_setup(ranks, 2, 2, free_tcp_port(), NULL);
	ranks[1].l.world_size = 3;
	rv_run(ranks, 2);
	assert_int_equal(ranks[0].rc, KEEL_ERENDEZVOUS);
	assert_non_null(strstr(ranks[0].err, "world size is 3, ours is 2"));
	assert_int_equal(ranks[1].rc, KEEL_ERENDEZVOUS);
	assert_non_null(strstr(ranks[1].err, "world size is 2"));
}

static void test_launch_rendezvous_strays_and_other_jobs(void **state)
{
	struct rv_rank ranks[2], other;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	uint8_t junk[44];
	uint16_t port = free_tcp_port();
	int fd = -1;

	(void)state;
	rv_setup(ranks, 2, 2, port, NULL);
	rv_setup(&other, 1, 2, port, (const uint32_t[]){1});
	other.l.job_id = 99;
	assert_int_equal(pthread_create(&ranks[0].thread, NULL, rv_thread, &ranks[0]), 0);
	/* Garbage from a port scanner: dropped, the rendezvous goes on. */
	a.sin_port = htons(port);
	for (int i = 0; i < 200 && fd < 0; i++) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
			close(fd);
			fd = -1;
			usleep(5000);
		}
	}
	assert_true(fd >= 0);
	memset(junk, 0xab, sizeof(junk));
	assert_int_equal(send(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	/* Another job on our port: turned away, the rendezvous goes on. */
	rv_thread(&other);
	close(other.fd);
	assert_int_equal(other.rc, KEEL_ERENDEZVOUS);
	assert_non_null(strstr(other.err, "another job"));
	assert_int_equal(pthread_create(&ranks[1].thread, NULL, rv_thread, &ranks[1]), 0);
	for (uint32_t i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(ranks[i].thread, NULL), 0);
		close(ranks[i].fd);
	}
	close(fd);
	rv_check_tables(ranks, 2);
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
	assert_int_equal(keel_posix_wait_mode_from_env(&mode, &spin), 0);
	assert_int_equal(mode, KEEL_WAIT_ADAPTIVE);
	assert_int_equal(spin, KEEL_POSIX_SPIN_NS_DEFAULT);
	env("LOCAL_WORLD_SIZE", "1"); /* fewer ranks than CPUs: spin */
	assert_int_equal(keel_posix_wait_mode_from_env(&mode, &spin), 0);
	assert_int_equal(spin, KEEL_POSIX_SPIN_NS_DEFAULT);
	env("LOCAL_WORLD_SIZE", "100000"); /* oversubscribed: block at once */
	assert_int_equal(keel_posix_wait_mode_from_env(&mode, &spin), 0);
	assert_int_equal(mode, KEEL_WAIT_ADAPTIVE);
	assert_int_equal(spin, 0);
	env("KEEL_SPIN_US", "7"); /* explicit spin wins */
	assert_int_equal(keel_posix_wait_mode_from_env(&mode, &spin), 0);
	assert_int_equal(spin, 7000);
	env("KEEL_WAIT", "busy");
	assert_int_equal(keel_posix_wait_mode_from_env(&mode, &spin), 0);
	assert_int_equal(mode, KEEL_WAIT_BUSY);
	assert_int_equal(spin, UINT64_MAX);
	env("KEEL_WAIT", "block");
	assert_int_equal(keel_posix_wait_mode_from_env(&mode, &spin), 0);
	assert_int_equal(mode, KEEL_WAIT_BLOCK);
	assert_int_equal(spin, 0);
	env("KEEL_WAIT", "adaptive");
	assert_int_equal(keel_posix_wait_mode_from_env(&mode, &spin), 0);
	assert_int_equal(mode, KEEL_WAIT_ADAPTIVE);
	assert_string_equal(keel_posix_wait_mode_name(mode), "adaptive");
	for (size_t i = 0; i < sizeof(bad_wait) / sizeof(bad_wait[0]); i++) {
		env("KEEL_WAIT", bad_wait[i]);
		mode = KEEL_WAIT_BLOCK;
		assert_int_equal(keel_posix_wait_mode_from_env(&mode, &spin), -EINVAL);
		assert_int_equal(mode, KEEL_WAIT_BLOCK); /* untouched */
	}
	env("KEEL_WAIT", "busy");
	for (size_t i = 0; i < sizeof(bad_spin) / sizeof(bad_spin[0]); i++) {
		env("KEEL_SPIN_US", bad_spin[i]);
		assert_int_equal(keel_posix_wait_mode_from_env(&mode, &spin), -EINVAL);
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
	    cmocka_unit_test_setup(test_launch_rendezvous_strays_and_other_jobs, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_world_one, env_clear),
	    cmocka_unit_test_setup(test_launch_sockaddr_str, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_peers_list, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_peers_ipv6, env_clear),
	    cmocka_unit_test_setup(test_launch_rendezvous_bad_self, env_clear),
	    cmocka_unit_test_setup(test_launch_waiter_block, env_clear),
	    cmocka_unit_test_setup(test_launch_waiter_block_pipe_and_no_fd, env_clear),
	    cmocka_unit_test_setup(test_launch_waiter_busy, env_clear),
	    cmocka_unit_test_setup(test_launch_waiter_adaptive, env_clear),
	    cmocka_unit_test_setup(test_launch_wait_mode_from_env, env_clear),
	    cmocka_unit_test_setup(test_launch_timer_slack_min, env_clear),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
