/* keel-bench: AllReduce and the other collectives (over groups too) in the nccl-tests format,
 * Send/Recv, and heartbeat round trips. Launch with keel-run (or torchrun, Slurm, mpirun):
 * keel-run -n 4 -- keel-bench allreduce. */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_coll.h"
#include "bench_device.h"
#include "bench_failover.h"
#include "bench_preload.h"
#include "bench_stats.h"
#include "cli.h"
#include "keel/boot.h"
#include "keel/transport_router.h"
#include "refcheck.h"
#include "size_arg.h"

#define TOOL	  "keel-bench"
#define ITERS_MAX 100000000u	/* --iters, --warmup */
#define BYTES_MAX (16ull << 30) /* --minbytes, --maxbytes, --stepbytes: buffers of that size */

struct bench_opts {
	uint64_t min_bytes, max_bytes;
	uint64_t factor, step_bytes;
	int dtype, op;
	uint32_t iters, warmup;
	uint32_t warmup_ms; /* --warmup-ms: and warm up for at least this long (every rank) */
	bool check;
	bool median; /* --median: per-iteration slowest rank, median over iterations */
	double seconds;
	const char *device; /* --device cpu|cuda: buffers in device memory (NULL: host) */
	bool grad;	    /* --grad: gradient AllReduces, which keel may compress */
	bool reg; /* --register: buffers registered with the transport (keel_boot_register) */
	const char *series; /* --series FILE: every timed iteration, when it began (--median) */
	bool min_given, max_given, iters_given; /* rdma-lat has defaults of its own */
	int coll;	/* the table's operation (enum bench_coll); -1: heartbeat, rdma-lat */
	uint32_t group; /* --group G: within groups of G consecutive ranks (0: none given) */
	uint32_t root;	/* --root R: group rank of reduce's and broadcast's root */
	bool op_given, root_given;
};

/* --series: rank 0's clock at the start of the job, and the file the iterations go to. */
static uint64_t g_job_start_ns;
static FILE *g_series;

/* --grad: the error-feedback buffer of the gradient AllReduces (keel_grad_feedback_len). */
static float *g_feedback;

/* The device of --device, opened before the node starts (its config names it). */
static struct bench_device g_dev;
static bool g_dev_on;

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: keel-bench allreduce [options]   AllReduce table (nccl-tests format)\n"
	    "       keel-bench OP [options]          OP's table, through keel's groups: OP is\n"
	    "                                        all_gather reduce_scatter alltoall\n"
	    "                                        sendrecv reduce broadcast barrier\n"
	    "                                        (sendrecv: group ranks 0 and 1, ping-pong\n"
	    "                                        (half a round trip) and exchange)\n"
	    "       keel-bench heartbeat [options]   heartbeat round-trip p50/p99/max\n"
	    "       keel-bench failover [options]    kill ranks, time detection and new views\n"
	    "                                        (keel-bench failover --help)\n"
	    "       keel-bench preload FILE [CHUNK [N]]  read FILE through the pre-load executor\n"
	    "                                        (io_uring, then pread), N reads in flight\n"
	    "       keel-bench rdma-lat [options]    verbs transport latency, 2 ranks, like\n"
	    "                                        ib_write_lat/ib_send_lat (half round trip)\n"
	    "       keel-bench --version\n"
	    "Run all but failover and preload under keel-run (or another launcher).\n"
	    "allreduce and OP options (SIZE: 0..16G, K, M, G suffixes; as nccl-tests, a size\n"
	    "is all members' data together for all_gather, reduce_scatter and alltoall):\n"
	    "  -b, --minbytes SIZE   smallest message (default 8)\n"
	    "  -e, --maxbytes SIZE   largest message, from 1 (default 64M)\n"
	    "  -f, --stepfactor N    multiply the size by N each row, 1..1024 (default 2)\n"
	    "  -i, --stepbytes SIZE  add SIZE each row instead of multiplying\n"
	    "  -d, --dtype T         f32 f64 f16 bf16 i32 i64 u8 (default f32)\n"
	    "  -o, --op OP           sum prod min max avg (default sum): allreduce,\n"
	    "                        reduce_scatter and reduce\n"
	    "  -g, --group G         within groups of G consecutive ranks, all running at once\n"
	    "                        (G divides the ranks; allreduce then runs on keel's groups)\n"
	    "  -r, --root R          reduce's and broadcast's root, a group rank (default 0)\n"
	    "  -n, --iters N         timed iterations per size, 1..%u (default 20)\n"
	    "  -w, --warmup N        untimed iterations first, 0..%u (default 5)\n"
	    "      --warmup-ms MS    and more, in rounds of N, until every rank has warmed up\n"
	    "                        for MS milliseconds, 0..600000 (default 0: N alone)\n"
	    "  -c, --check           verify every element against a reference (over the\n"
	    "                        members each operation reports, after a failure too)\n"
	    "  -m, --median          time each iteration alone; report the median over\n"
	    "                        iterations of the slowest rank's time (default: the\n"
	    "                        slowest rank's mean)\n"
	    "      --series FILE     with --median: rank 0 writes one line per timed iteration:\n"
	    "                        size, in place (0/1), iteration, ms since the job\n"
	    "                        started when it began, the slowest rank's time (us)\n"
	    "allreduce without --group only:\n"
	    "  -D, --device D        buffers in device memory: cuda (GPU LOCAL_RANK, or 0) or\n"
	    "                        cpu (the CPU stand-in device); staged through registered\n"
	    "                        host memory\n"
	    "  -G, --grad            gradient AllReduces (f32 sum or avg) that keel may send\n"
	    "                        compressed (KEEL_COMPRESS=auto|off|bf16|f16); --check then\n"
	    "                        allows the documented rounding\n"
	    "  -R, --register        register the input and output buffers (and the stage of\n"
	    "                        --device) with the transport (keel_boot_register: over\n"
	    "                        verbs the NIC reads payloads where they lie)\n"
	    "common options:\n"
	    "      --transport T     udp (default), shm (ranks on one host), dpdk or verbs\n"
	    "  -h, --help            this text\n"
	    "      --version         keel's version and git hash\n"
	    "rdma-lat options: -b/-e/-f sizes (default 2..4096 bytes), -n iterations (default "
	    "1000)\n"
	    "heartbeat options:\n"
	    "  -t, --seconds S       how long to measure, 0.001..86400 (default 2)\n"
	    "Environment: KEEL_* settings, e.g. KEEL_HEARTBEAT_US, KEEL_ALGO, KEEL_MTU,\n"
	    "KEEL_WINDOW, KEEL_CHAOS, KEEL_WAIT, KEEL_DEVICE_CHUNK_KB (keel-run --help-env,\n"
	    "docs/reference/env.md).\n",
	    ITERS_MAX, ITERS_MAX);
	cli_exit_codes(f, "  75   this rank was left out of the job's view (keel-run: not a "
			  "failure)\n");
}

static int parse_name(const char *s, const char *(*name)(int), int count)
{
	for (int i = 0; i < count; i++)
		if (name(i) != NULL && strcmp(s, name(i)) == 0)
			return i;
	return -1;
}

static const char *dtype_name(int i)
{
	return keel_dtype_name((enum keel_dtype)i);
}

static const char *redop_name(int i)
{
	return keel_redop_name((enum keel_redop)i);
}

enum {
	OPT_MINBYTES,
	OPT_MAXBYTES,
	OPT_STEPFACTOR,
	OPT_STEPBYTES,
	OPT_DTYPE,
	OPT_OP,
	OPT_ITERS,
	OPT_WARMUP,
	OPT_WARMUP_MS,
	OPT_CHECK,
	OPT_MEDIAN,
	OPT_SERIES,
	OPT_SECONDS,
	OPT_TRANSPORT,
	OPT_DEVICE,
	OPT_GRAD,
	OPT_REGISTER,
	OPT_GROUP,
	OPT_ROOT,
	OPT_COUNT
};

static const struct cli_opt options[OPT_COUNT] = {
    [OPT_MINBYTES] = {"minbytes", 'b', CLI_TEXT}, /* sizes: keel_size_arg, then the range */
    [OPT_MAXBYTES] = {"maxbytes", 'e', CLI_TEXT},
    [OPT_STEPFACTOR] = {"stepfactor", 'f', CLI_UINT, .min_u = 1, .max_u = 1024},
    [OPT_STEPBYTES] = {"stepbytes", 'i', CLI_TEXT},
    [OPT_DTYPE] = {"dtype", 'd', CLI_TEXT},
    [OPT_OP] = {"op", 'o', CLI_TEXT},
    [OPT_ITERS] = {"iters", 'n', CLI_UINT, .min_u = 1, .max_u = ITERS_MAX},
    [OPT_WARMUP] = {"warmup", 'w', CLI_UINT, .min_u = 0, .max_u = ITERS_MAX},
    [OPT_WARMUP_MS] = {"warmup-ms", 0, CLI_UINT, .min_u = 0, .max_u = 600000},
    [OPT_CHECK] = {"check", 'c', CLI_FLAG},
    [OPT_MEDIAN] = {"median", 'm', CLI_FLAG},
    [OPT_SERIES] = {"series", 0, CLI_TEXT},
    [OPT_SECONDS] = {"seconds", 't', CLI_REAL, .min_r = 0.001, .max_r = 86400},
    [OPT_TRANSPORT] = {"transport", 0, CLI_TEXT},
    [OPT_DEVICE] = {"device", 'D', CLI_TEXT},
    [OPT_GRAD] = {"grad", 'G', CLI_FLAG},
    [OPT_REGISTER] = {"register", 'R', CLI_FLAG},
    [OPT_GROUP] = {"group", 'g', CLI_UINT, .min_u = 1, .max_u = KEEL_WORLD_MAX},
    [OPT_ROOT] = {"root", 'r', CLI_UINT, .min_u = 0, .max_u = KEEL_WORLD_MAX - 1},
};

/* A size on the command line ("64K", "16M"): 0..BYTES_MAX, or exit 2 naming the option. */
static uint64_t size_value(const struct cli *c, uint64_t min)
{
	uint64_t v;
	if (keel_size_arg(c->value, &v) != 0 || v < min || v > BYTES_MAX)
		cli_usage_error(TOOL, "%s: '%s' is not a size in %llu..%llu (K, M, G suffixes)",
				c->opt_text, c->value, (unsigned long long)min,
				(unsigned long long)BYTES_MAX);
	return v;
}

/* The options that take text. */
static void set_text_option(struct bench_opts *o, int id, const struct cli *c)
{
	if (id == OPT_MINBYTES || id == OPT_MAXBYTES || id == OPT_STEPBYTES) {
		uint64_t v = size_value(c, id == OPT_MAXBYTES ? 1 : 0);
		*(id == OPT_MINBYTES   ? &o->min_bytes
		  : id == OPT_MAXBYTES ? &o->max_bytes
				       : &o->step_bytes) = v;
		o->min_given |= id == OPT_MINBYTES;
		o->max_given |= id == OPT_MAXBYTES;
	} else if (id == OPT_DTYPE || id == OPT_OP) {
		int *dst = id == OPT_DTYPE ? &o->dtype : &o->op;
		*dst = id == OPT_DTYPE ? parse_name(c->value, dtype_name, KEEL_DTYPE_COUNT)
				       : parse_name(c->value, redop_name, KEEL_REDOP_COUNT);
		o->op_given |= id == OPT_OP;
		if (*dst < 0)
			cli_usage_error(TOOL, "%s: unknown %s '%s' (see '%s --help')", c->opt_text,
					id == OPT_DTYPE ? "dtype" : "op", c->value, TOOL);
	} else if (id == OPT_SERIES) {
		o->series = c->value;
	} else if (id == OPT_DEVICE) {
		o->device = c->value; /* bench_device_open says what it does not know */
	} else if (id == OPT_TRANSPORT && setenv("KEEL_TRANSPORT", c->value, 1) != 0) {
		cli_usage_error(TOOL, "--transport: cannot set KEEL_TRANSPORT"); /* boot.c checks */
	}
}

static void set_option(struct bench_opts *o, int id, const struct cli *c)
{
	switch (id) {
	case OPT_STEPFACTOR:
		o->factor = c->u;
		break;
	case OPT_ITERS:
		o->iters = (uint32_t)c->u;
		o->iters_given = true;
		break;
	case OPT_WARMUP:
		o->warmup = (uint32_t)c->u;
		break;
	case OPT_WARMUP_MS:
		o->warmup_ms = (uint32_t)c->u;
		break;
	case OPT_SECONDS:
		o->seconds = c->r;
		break;
	case OPT_CHECK:
		o->check = true;
		break;
	case OPT_MEDIAN:
		o->median = true;
		break;
	case OPT_GRAD:
		o->grad = true;
		break;
	case OPT_REGISTER:
		o->reg = true;
		break;
	case OPT_GROUP:
		o->group = (uint32_t)c->u;
		break;
	case OPT_ROOT:
		o->root = (uint32_t)c->u;
		o->root_given = true;
		break;
	default:
		set_text_option(o, id, c);
	}
}

/* The options of the operations over groups, against the operation; NULL when they agree. */
static const char *group_conflict(const struct bench_opts *o, char *msg, size_t len)
{
	if (o->coll < 0)
		return o->group > 0 || o->root_given ? "--group and --root are for the tables "
						       "(allreduce, all_gather, ...)"
						     : NULL;
	const struct bench_coll_desc *d = bench_coll_desc((enum bench_coll)o->coll);
	if ((o->coll != BENCH_ALLREDUCE || o->group > 0) &&
	    (o->device != NULL || o->grad || o->reg)) {
		snprintf(msg, len,
			 "--device, --grad and --register are for allreduce without "
			 "--group, not %s%s",
			 d->name, o->group > 0 ? " --group" : "");
		return msg;
	}
	if (o->op_given && !d->reduces) {
		snprintf(msg, len,
			 "--op: %s reduces nothing (allreduce, reduce_scatter and reduce do)",
			 d->name);
		return msg;
	}
	if (o->root_given && !d->rooted) {
		snprintf(msg, len, "--root: %s has no root (reduce and broadcast have)", d->name);
		return msg;
	}
	if (o->coll == BENCH_SENDRECV && o->group == 1)
		return "--group 1: sendrecv needs two members in a group";
	return NULL;
}

/* What the options say together; NULL when they agree. */
static const char *options_conflict(const struct bench_opts *o, char *msg, size_t len)
{
	if (o->min_bytes > o->max_bytes) {
		snprintf(msg, len,
			 "--minbytes %" PRIu64 " is larger than --maxbytes %" PRIu64
			 ": nothing to measure",
			 o->min_bytes, o->max_bytes);
		return msg;
	}
	if (o->factor < 2 && o->step_bytes == 0)
		return "--stepfactor must be at least 2 (or give --stepbytes)";
	if (o->grad &&
	    (o->dtype != KEEL_F32 || (o->op != KEEL_SUM && o->op != KEEL_AVG) || o->device != NULL))
		return "--grad is for host f32 sum or avg";
	if (o->series != NULL && !o->median)
		return "--series needs --median (it writes the per-iteration times)";
	return group_conflict(o, msg, len);
}

/* argv[0] is the command (allreduce or another table's operation, heartbeat, rdma-lat). A
 * mistake exits 2. */
static void parse_opts(int argc, char **argv, struct bench_opts *o)
{
	*o = (struct bench_opts){.min_bytes = 8,
				 .max_bytes = 64ull << 20,
				 .factor = 2,
				 .dtype = KEEL_F32,
				 .op = KEEL_SUM,
				 .iters = 20,
				 .warmup = 5,
				 .seconds = 2.0,
				 .coll = bench_coll_parse(argv[0])};
	struct cli c = {.tool = TOOL,
			.opts = options,
			.opt_count = OPT_COUNT,
			.usage = usage,
			.argc = argc,
			.argv = argv};
	int id;
	char msg[160];
	while ((id = cli_next(&c)) >= 0)
		set_option(o, id, &c);
	if (c.next < argc)
		cli_usage_error(TOOL, "unexpected argument '%s' (see '%s --help')", argv[c.next],
				TOOL);
	const char *why = options_conflict(o, msg, sizeof(msg));
	if (why != NULL)
		cli_usage_error(TOOL, "%s (see '%s --help')", why, TOOL);
}

static void die(struct keel_boot *b, const char *what, int rc)
{
	struct keel_counters k;
	keel_counters_get(b->node, &k);
	if (rc == KEEL_EEXCLUDED) {
		/* The others went on without this rank; a benchmark cannot catch up with their
		 * sequence of calls, so it leaves cleanly and says why. */
		fprintf(stderr,
			"keel-bench: rank %u: %s: excluded from the job's view (silent too long: "
			"%llu late polls of its own); leaving (exit %d)\n",
			b->launch.rank, what, (unsigned long long)k.local_pauses,
			KEEL_EXIT_EXCLUDED);
		keel_boot_stop(b, 0);
		exit(KEEL_EXIT_EXCLUDED);
	}
	fprintf(stderr, "keel-bench: rank %u: %s: %s (own late polls %llu)\n", b->launch.rank, what,
		keel_strerror(rc), (unsigned long long)k.local_pauses);
	for (uint32_t p = 0; p < b->launch.world_size; p++) {
		struct keel_peer_info pi;
		if (p != b->launch.rank && keel_peer_get(b->node, p, &pi) == 0 &&
		    pi.state != KEEL_PEER_ALIVE)
			fprintf(stderr,
				"keel-bench: rank %u: peer %u suspected (last heard %.3f ms "
				"ago)\n",
				b->launch.rank, p, (keel_posix_now_ns() - pi.last_heard_ns) / 1e6);
	}
	exit(1);
}

/* A view change under an in-place AllReduce loses its input (keel-bench keeps no restart
 * copy): every member hears KEEL_EVIEWCHANGED and, as the API asks, runs it again. */
#define VIEW_CHANGE_RETRIES 3

/* --device with --register: the device buffers as dma-bufs, for the NIC to read (GPUDirect
 * RDMA). 0, or why they are staged instead (-EOPNOTSUPP where the transport, the NIC or the
 * driver cannot; whatever the NIC's driver said otherwise): never fatal, the run says so. */
static int register_device_buffers(struct keel_boot *b)
{
	void *bufs[2] = {g_dev.d_in, g_dev.d_out};
	for (int k = 0; k < 2; k++) {
		int fd = -1;
		uint64_t offset = 0;
		bool owned = false;
		int rc = bench_device_dmabuf(&g_dev, bufs[k], &fd, &offset, &owned);
		if (rc == 0)
			rc = keel_boot_register_dmabuf(b, bufs[k], g_dev.cap, fd, offset);
		if (owned && fd >= 0)
			close(fd);
		if (rc != 0 && k == 1 && keel_boot_unregister(b, bufs[0]) != 0)
			die(b, "unregistering the device input", rc); /* nothing sent it yet */
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* --device with --register: also a device area, where the NIC writes what peers send from
 * their device memory (GPUDirect RDMA of what is received). 0, or why not (never fatal). */
static int register_device_area(struct keel_boot *b)
{
	size_t bytes = keel_boot_device_area_bytes(b);
	if (bytes == 0)
		return -EOPNOTSUPP; /* not verbs */
	void *area = NULL;
	int fd = -1;
	uint64_t offset = 0;
	bool owned = false;
	int rc = bench_device_area(&g_dev, bytes, &area, &fd, &offset, &owned);
	if (rc == 0)
		rc = keel_boot_register_device_area(b, area, bytes, fd, offset);
	if (owned && fd >= 0)
		close(fd);
	return rc;
}

/* One AllReduce of the benchmark: host buffers, or (--device) device buffers staged. The
 * timed loops do not look at the values, so a lost in-place input is simply run again. */
static int ar_run(struct keel_boot *b, const struct bench_opts *o, void *in, void *out,
		  size_t count)
{
	int rc = KEEL_EVIEWCHANGED;
	for (int t = 0; t <= VIEW_CHANGE_RETRIES && rc == KEEL_EVIEWCHANGED; t++)
		rc = g_dev_on  ? keel_allreduce_device(b->node, in, out, count, o->dtype, o->op,
						       g_dev.stage, g_dev.stage_bytes)
		     : o->grad ? keel_allreduce_grad(b->node, in, out, count, o->op, g_feedback)
			       : keel_allreduce(b->node, in, out, count, o->dtype, o->op);
	return rc;
}

/* The groups the table's calls go to: with --group, and for every operation but allreduce. */
static struct bench_group g_grp;
static bool g_grp_on;

static const char *op_name(const struct bench_opts *o)
{
	return bench_coll_desc((enum bench_coll)o->coll)->name;
}

/* One call of the table's operation: half 0 (out of place; sendrecv: ping-pong) or 1 (in
 * place; the exchange), on the timed loops' buffers (with --device, the device's). */
struct op_call {
	int half;
	void *in, *out;
	size_t count; /* the row's, as nccl-tests counts it */
};

static int op_run(struct keel_boot *b, const struct bench_opts *o, const struct op_call *c)
{
	if (g_grp_on)
		return bench_coll_run(&g_grp, c->half, c->in, c->out, c->count);
	return ar_run(b, o, c->in, c->half ? c->in : c->out, c->count);
}

/* Max (or sum) of one value across ranks, through keel itself. */
static double across(struct keel_boot *b, double v, enum keel_redop op)
{
	double out;
	int rc = keel_allreduce(b->node, &v, &out, 1, KEEL_F64, op);
	if (rc != 0)
		die(b, "allreduce of results", rc);
	return out;
}

/* --warmup N calls, then (--warmup-ms) rounds of N until the slowest rank has warmed up that
 * long: a short run's first milliseconds are slower on a VM (tools/bench-peers/ runs its peers
 * by the same rule). Every rank decides on the same maximum, so all make the same calls. */
static void warm_up(struct keel_boot *b, const struct bench_opts *o, const struct op_call *c)
{
	uint64_t w0 = keel_posix_now_ns();
	for (uint32_t round = o->warmup;; round = o->warmup > 0 ? o->warmup : 1) {
		for (uint32_t i = 0; i < round; i++) {
			int rc = op_run(b, o, c);
			if (rc != 0)
				die(b, op_name(o), rc);
		}
		if (o->warmup_ms == 0 || across(b, (double)(keel_posix_now_ns() - w0) / 1e6,
						KEEL_MAX) >= (double)o->warmup_ms)
			break;
	}
}

/* Mean time of one call over `iters`, in microseconds, slowest rank. */
static double time_op(struct keel_boot *b, const struct bench_opts *o, const struct op_call *c)
{
	warm_up(b, o, c);
	across(b, 0, KEEL_MAX); /* line the ranks up */
	uint64_t t0 = keel_posix_now_ns();
	for (uint32_t i = 0; i < o->iters; i++) {
		int rc = op_run(b, o, c);
		if (rc != 0)
			die(b, op_name(o), rc);
	}
	double us = (double)(keel_posix_now_ns() - t0) / 1e3 / o->iters;
	return across(b, us, KEEL_MAX);
}

/* Lines of --series written between two polls. */
#define SERIES_PIECE 4096u

/* --median: each iteration timed alone, the slowest rank's time per iteration (an AllReduce
 * MAX over the per-iteration times, after the timed loop; with --group, the slowest of every
 * group running at once), and the median of those, in microseconds. The method of
 * tools/bench-peers/, so keel and its peers compare alike. `mine` and `slowest` hold o->iters
 * values each. */
static double time_op_median(struct keel_boot *b, const struct bench_opts *o,
			     const struct op_call *c, double *mine, double *slowest,
			     uint64_t *began)
{
	warm_up(b, o, c);
	across(b, 0, KEEL_MAX); /* line the ranks up */
	for (uint32_t i = 0; i < o->iters; i++) {
		uint64_t t0 = keel_posix_now_ns();
		int rc = op_run(b, o, c);
		if (rc != 0)
			die(b, op_name(o), rc);
		mine[i] = (double)(keel_posix_now_ns() - t0) / 1e3;
		if (began != NULL)
			began[i] = t0;
	}
	int rc = keel_allreduce(b->node, mine, slowest, o->iters, KEEL_F64, KEEL_MAX);
	if (rc != 0)
		die(b, "allreduce of per-iteration times", rc);
	for (uint32_t i = 0; g_series != NULL && i < o->iters; i++) {
		fprintf(g_series, "%zu %d %u %.3f %.3f\n", c->count * keel_dtype_size(o->dtype),
			c->half, i, (double)(began[i] - g_job_start_ns) / 1e6, slowest[i]);
		/* a long series takes longer to write than the detector allows a silent rank */
		if (i % SERIES_PIECE == SERIES_PIECE - 1 && keel_boot_poll(b) != 0)
			die(b, "poll", KEEL_ETRANSPORT);
	}
	return bench_median(slowest, o->iters); /* after the series: it reorders them */
}

/* Checking works in pieces with a poll between them: a rank that stops polling for longer
 * than the failure detector allows looks dead to its peers. */
#define CHECK_PIECE 16384u

/* Fill this rank's input, run one AllReduce (through the device with --device: the result
 * is copied back into `out`) and wait for it. Returns its status; *res is where it is. */
static int check_once(struct keel_boot *b, const struct bench_opts *o, void *in, void *out,
		      size_t count, bool in_place, struct keel_op_info *info, uint32_t *members,
		      void **res)
{
	struct keel_op *op;
	for (size_t i = 0; i < count; i += CHECK_PIECE) {
		size_t end = i + CHECK_PIECE < count ? i + CHECK_PIECE : count;
		keel_check_fill(in, i, end, b->launch.rank, o->dtype, o->op);
		if (keel_boot_poll(b) != 0)
			die(b, "poll", KEEL_ETRANSPORT);
	}
	*res = in_place ? in : out;
	if (o->grad) { /* residuals of the timed calls belong to other values */
		memset(g_feedback, 0, keel_grad_feedback_len(count) * sizeof(float));
		int rc =
		    keel_allreduce_grad_start(b->node, in, *res, count, o->op, g_feedback, &op);
		return rc != 0 ? rc : keel_boot_wait(b, op, info, members, KEEL_WORLD_MAX);
	}
	if (!g_dev_on) {
		int rc = keel_allreduce_start(b->node, in, *res, count, o->dtype, o->op, &op);
		return rc != 0 ? rc : keel_boot_wait(b, op, info, members, KEEL_WORLD_MAX);
	}
	size_t bytes = count * keel_dtype_size(o->dtype);
	void *d_res = in_place ? g_dev.d_in : g_dev.d_out;
	int rc = bench_device_put(&g_dev, g_dev.d_in, in, bytes);
	if (rc == 0)
		rc = keel_allreduce_device_start(b->node, g_dev.d_in, d_res, count, o->dtype, o->op,
						 g_dev.stage, g_dev.stage_bytes, &op);
	if (rc == 0)
		rc = keel_boot_wait(b, op, info, members, KEEL_WORLD_MAX);
	if (rc == 0)
		rc = bench_device_get(&g_dev, out, d_res, bytes);
	*res = out;
	return rc;
}

/* --grad: a compressed result is right within its rounding, (members + 1) roundings of bf16's
 * unit of the exact value (the check's inputs are positive; see keel/collectives.h). */
static size_t grad_wrong(const void *res, const void *ref, size_t from, size_t to, uint32_t members)
{
	const float *r = res, *x = ref;
	size_t wrong = 0;
	for (size_t i = from; i < to; i++) {
		double err = r[i] > x[i] ? (double)r[i] - x[i] : (double)x[i] - r[i];
		double mag = x[i] < 0 ? -(double)x[i] : (double)x[i];
		wrong += err > (members + 1.0) * 0x1p-8 * mag;
	}
	return wrong;
}

/* Check one AllReduce against the reduction over the members the operation reports: after a
 * failure, the survivors' sum is the right answer. *smaller counts operations that ran on a
 * view smaller than the job. */
static double check_allreduce(struct keel_boot *b, const struct bench_opts *o, void *in, void *out,
			      void *ref, size_t count, bool in_place, uint32_t *smaller)
{
	static uint32_t members[KEEL_WORLD_MAX];
	struct keel_op_info info;
	void *res = out;
	int rc = KEEL_EVIEWCHANGED;
	for (int t = 0; t <= VIEW_CHANGE_RETRIES && rc == KEEL_EVIEWCHANGED; t++)
		rc = check_once(b, o, in, out, count, in_place, &info, members, &res);
	if (rc != 0)
		die(b, "allreduce (check)", rc);
	if (info.member_count < b->launch.world_size)
		(*smaller)++;
	size_t wrong = 0;
	for (size_t i = 0; i < count; i += CHECK_PIECE) {
		size_t end = i + CHECK_PIECE < count ? i + CHECK_PIECE : count;
		keel_check_reference_members(ref, i, end, members, info.member_count, o->dtype,
					     o->op);
		wrong += o->grad ? grad_wrong(res, ref, i, end, info.member_count)
				 : keel_check_wrong(res, ref, i, end, o->dtype);
		if (keel_boot_poll(b) != 0)
			die(b, "poll", KEEL_ETRANSPORT);
	}
	return across(b, (double)wrong, KEEL_SUM);
}

/* The host buffers of one allreduce run (--register: the first three are registered). */
struct ar_bufs {
	size_t cap;
	uint8_t *in, *out, *ref; /* ref: --check */
	double *mine, *slowest;	 /* --median: o->iters each */
	uint64_t *began;	 /* --series: rank 0 alone writes the file */
	void *reg_buf[3];
	size_t reg_len[3];
	int direct, area; /* --device --register: 0, or why the device memory is staged */
	uint32_t groups;  /* --group: groups running at once */
};

/* Every buffer, touched now: a page's first touch inside a timed call would be timed with it. */
static void ar_alloc(struct keel_boot *b, const struct bench_opts *o, struct ar_bufs *m)
{
	size_t es = keel_dtype_size(o->dtype);
	m->cap = (size_t)o->max_bytes + es;
	m->in = calloc(1, m->cap);
	m->out = calloc(1, m->cap);
	m->ref = o->check ? calloc(1, m->cap) : NULL;
	m->mine = o->median ? calloc(o->iters, sizeof(double)) : NULL;
	m->slowest = o->median ? calloc(o->iters, sizeof(double)) : NULL;
	m->began = g_series != NULL ? calloc(o->iters, sizeof(uint64_t)) : NULL;
	if (o->grad) {
		g_feedback = calloc(keel_grad_feedback_len(m->cap / es) + 1, sizeof(float));
		if (g_feedback == NULL)
			die(b, "feedback buffer", -ENOMEM);
	}
	if (m->in == NULL || m->out == NULL || (o->check && m->ref == NULL) ||
	    (o->median && (m->mine == NULL || m->slowest == NULL)) ||
	    (g_series != NULL && m->began == NULL))
		die(b, "buffers", -ENOMEM);
	if (o->median) {
		memset(m->mine, 0, o->iters * sizeof(double));
		memset(m->slowest, 0, o->iters * sizeof(double));
	}
	if (m->began != NULL)
		memset(m->began, 0, o->iters * sizeof(uint64_t));
}

/* --register: the buffers sends read (with --device, the stage holds them). */
static void ar_register(struct keel_boot *b, const struct bench_opts *o, struct ar_bufs *m)
{
	void *bufs[3] = {m->in, m->out, g_dev_on ? g_dev.stage : NULL};
	size_t lens[3] = {m->cap, m->cap, g_dev_on ? g_dev.stage_bytes : 0};
	memcpy(m->reg_buf, bufs, sizeof(bufs));
	memcpy(m->reg_len, lens, sizeof(lens));
	for (uint32_t k = 0; o->reg && k < 3 && m->reg_buf[k] != NULL; k++) {
		int rc = keel_boot_register(b, m->reg_buf[k], m->reg_len[k]);
		if (rc != 0)
			die(b, "--register", rc);
	}
	m->direct = g_dev_on && o->reg ? register_device_buffers(b) : -ENOENT;
	m->area = g_dev_on && o->reg ? register_device_area(b) : -ENOENT;
}

static void ar_unregister_free(struct keel_boot *b, const struct bench_opts *o, struct ar_bufs *m)
{
	for (uint32_t which = 0; o->reg && which < 5; which++) {
		void *dev_buf = which == 3 ? g_dev.d_in : g_dev.d_out;
		void *buf = which < 3 ? m->reg_buf[which] : m->direct == 0 ? dev_buf : NULL;
		if (buf == NULL)
			continue;
		int rc;
		/* a send that read it may still be completing at the NIC */
		while ((rc = keel_boot_unregister(b, buf)) == -EBUSY)
			if ((rc = keel_boot_poll(b)) < 0)
				break;
		if (rc != 0)
			die(b, "unregistering a buffer", rc);
	}
	free(m->in);
	free(m->out);
	free(m->ref);
	free(m->mine);
	free(m->slowest);
	free(m->began);
	free(g_feedback);
}

static const char *algo_name(enum keel_algo algo)
{
	return algo == KEEL_ALGO_RING	? "ring"
	       : algo == KEEL_ALGO_RD	? "rd"
	       : algo == KEEL_ALGO_HIER ? "hier"
					: "auto";
}

static const char *compress_name(enum keel_compress c)
{
	return c == KEEL_COMPRESS_OFF	 ? "off"
	       : c == KEEL_COMPRESS_BF16 ? "bf16"
	       : c == KEEL_COMPRESS_F16	 ? "f16"
					 : "auto";
}

/* --device: where the buffers are and what the NIC may read and write there. */
static void ar_device_lines(const struct keel_boot *b, const struct bench_opts *o,
			    const struct ar_bufs *m)
{
	if (!g_dev_on)
		return;
	printf("# buffers on device: %s (%s), staged through %zu bytes of registered host "
	       "memory, %u-byte chunks\n",
	       g_dev.kind, g_dev.name, g_dev.stage_bytes,
	       b->cfg.device_chunk_bytes != 0 ? b->cfg.device_chunk_bytes
					      : KEEL_DEVICE_CHUNK_DEFAULT);
	if (!o->reg)
		return;
	printf("# device buffers: %s%s%s\n",
	       m->direct == 0 ? "registered as dma-bufs, the NIC reads what is sent where every "
				"peer's way can (GPUDirect RDMA)"
			      : "staged through host memory (the transport cannot read device "
				"memory: ",
	       m->direct == 0 ? "" : keel_strerror(m->direct), m->direct == 0 ? "" : ")");
	printf("# device area: %s%s%s\n",
	       m->area == 0 ? "registered, the NIC writes what peers send from device memory "
			      "into it (GPUDirect RDMA)"
			    : "none, what is received lands in host memory (",
	       m->area == 0 ? "" : keel_strerror(m->area), m->area == 0 ? "" : ")");
}

/* The header's words on groups: which, and what the sendrecv halves time. */
static const char *group_text(const struct bench_opts *o, const struct ar_bufs *m)
{
	static char text[160];
	if (!g_grp_on)
		return "";
	int at =
	    snprintf(text, sizeof(text),
		     o->group > 0 ? ", groups of %u ranks, %u at once" : ", one group of %u ranks",
		     g_grp.created, o->group > 0 ? m->groups : 1);
	if (o->coll == BENCH_SENDRECV && at > 0 && (size_t)at < sizeof(text))
		snprintf(text + at, sizeof(text) - (size_t)at,
			 " (group ranks 0 and 1: ping-pong, half a round trip; exchange, both ways "
			 "at once)");
	return text;
}

/* Rank 0's lines before the table: the setup, then the column heads. */
static void ar_header(const struct keel_boot *b, const struct bench_opts *o,
		      const struct ar_bufs *m)
{
	char pieces[40] = "";
	if (b->piece_bytes != 0) /* datagrams cut into link-sized UDP pieces */
		snprintf(pieces, sizeof(pieces), " udp pieces %u,", b->piece_bytes);
	printf("# keel-bench %s: %u ranks (%s)%s, transport %s, algo %s, mtu %u, window "
	       "%u,%s wait %s%s, heartbeat %llu us\n",
	       op_name(o), b->launch.world_size, b->launch.source, group_text(o, m),
	       b->tp->ops->name, algo_name(b->cfg.algo), b->cfg.mtu, b->cfg.window, pieces,
	       keel_posix_wait_mode_name(b->waiter.mode),
	       b->waiter.spin_yield ? " (spin yields)" : "",
	       (unsigned long long)(b->cfg.heartbeat_ns / 1000));
	if (o->median)
		printf("# time: median over %u iterations of the slowest rank's time in each\n",
		       o->iters);
	if (o->warmup_ms > 0)
		printf("# warm-up: %u calls, then rounds of them for at least %u ms\n", o->warmup,
		       o->warmup_ms);
	if (o->grad)
		printf("# gradient AllReduces (keel_allreduce_grad), compression %s\n",
		       compress_name(b->cfg.compress));
	ar_device_lines(b, o, m);
	const struct bench_coll_desc *d = bench_coll_desc((enum bench_coll)o->coll);
	printf("#%61s%32s\n", d->half[0] != NULL ? d->half[0] : "",
	       d->half[1] != NULL ? d->half[1] : "");
	printf("#%11s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type",
	       "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
	       "#wrong");
	printf("#%11s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "",
	       "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

/* What the rows add up to. */
struct ar_totals {
	double busbw_sum, wrong_total;
	uint32_t smaller;   /* --check: operations checked on a view smaller than the job */
	uint32_t peer_gone; /* --check: sendrecv calls that ended with KEEL_EPEERGONE */
	int rows;
};

/* Check one call of the row (--check): the wrong elements of every rank together. */
static double check_op(struct keel_boot *b, const struct bench_opts *o, struct ar_bufs *m,
		       const struct op_call *c, struct ar_totals *tot)
{
	if (!g_grp_on)
		return check_allreduce(b, o, m->in, m->out, m->ref, c->count, c->half == 1,
				       &tot->smaller);
	struct bench_coll_verdict v;
	int rc = bench_coll_check(&g_grp, b, c->half, m->in, m->out, m->ref, c->count, &v);
	if (rc != 0)
		die(b, op_name(o), rc);
	tot->smaller += v.smaller;
	tot->peer_gone += v.peer_gone;
	return across(b, (double)v.wrong, KEEL_SUM);
}

/* One half of a row as printed: time, algbw, busbw, #wrong (N/A where not run or checked). */
static void half_text(char *out, size_t len, bool run, const double *v, bool checked)
{
	char w[16] = "N/A";
	if (checked)
		snprintf(w, sizeof(w), "%.0f", v[3]);
	if (run)
		snprintf(out, len, "%8.2f %7.3f %7.3f %6s", v[0], v[1], v[2], w);
	else
		snprintf(out, len, "%8s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
}

static void print_row(const struct bench_opts *o, size_t count, double r[2][4], bool checked)
{
	const struct bench_coll_desc *d = bench_coll_desc((enum bench_coll)o->coll);
	char h[2][64];
	for (int k = 0; k < 2; k++)
		half_text(h[k], sizeof(h[k]), d->half[k] != NULL, r[k], checked);
	printf(" %11" PRIu64 " %12zu %8s %6s %6d %s %s\n",
	       (uint64_t)(count * keel_dtype_size(o->dtype)), count, keel_dtype_name(o->dtype),
	       d->reduces ? keel_redop_name(o->op) : "none", d->rooted ? (int)o->root : -1, h[0],
	       h[1]);
	fflush(stdout);
}

/* One row of the table: a size, its two halves (out of place then in place; sendrecv:
 * ping-pong then exchange). r[half]: time, algbw, busbw, #wrong. */
static void ar_row(struct keel_boot *b, const struct bench_opts *o, struct ar_bufs *m, size_t count,
		   struct ar_totals *tot)
{
	const struct bench_coll_desc *d = bench_coll_desc((enum bench_coll)o->coll);
	size_t es = keel_dtype_size(o->dtype);
	uint32_t n = g_grp_on ? g_grp.created : b->launch.world_size;
	double r[2][4] = {{0, 0, 0, -1}, {0, 0, 0, -1}}, busbw_first = -1;
	/* with --device, the timed AllReduces run on the device buffers */
	void *t_in = g_dev_on ? g_dev.d_in : m->in, *t_out = g_dev_on ? g_dev.d_out : m->out;
	g_grp.pair_broken = false; /* the results of the last row lined every view up */
	for (int h = 0; h < 2; h++) {
		struct op_call c = {h, t_in, t_out, count};
		if (d->half[h] == NULL)
			continue;
		double t = o->median ? time_op_median(b, o, &c, m->mine, m->slowest, m->began)
				     : time_op(b, o, &c);
		r[h][0] = t / d->time_div[h];
		if (o->check && o->coll != BENCH_BARRIER)
			r[h][3] =
			    check_op(b, o, m, &(struct op_call){h, m->in, m->out, count}, tot);
		r[h][1] = (double)(count * es) / (r[h][0] * 1e3);
		r[h][2] = r[h][1] * (g_grp_on || n > 1 ? bench_coll_busbw_factor(o->coll, n) : 1.0);
		tot->wrong_total += r[h][3] > 0 ? r[h][3] : 0;
		busbw_first = busbw_first < 0 ? r[h][2] : busbw_first;
	}
	tot->busbw_sum += busbw_first;
	tot->rows++;
	if (b->launch.rank == 0)
		print_row(o, count, r, o->check && o->coll != BENCH_BARRIER);
}

/* The lines after the table: every rank's counters summed (every rank takes part). */
static void ar_footer(struct keel_boot *b, const struct bench_opts *o, const struct ar_totals *t)
{
	struct keel_counters k;
	struct keel_router_stats rs = {0};
	keel_counters_get(b->node, &k);
	if (b->router != NULL)
		keel_router_stats_get(b->router, &rs);
	double sent = across(b, (double)k.tx_datagrams, KEEL_SUM);
	double retx = across(b, (double)k.retransmits, KEEL_SUM);
	double susp = across(b, (double)k.suspicions, KEEL_SUM);
	double late = across(b, (double)k.local_pauses, KEEL_SUM);
	double routes[3] = {across(b, (double)rs.tx_datagrams[0], KEEL_SUM),
			    across(b, (double)rs.tx_datagrams[1], KEEL_SUM),
			    across(b, (double)rs.fallbacks, KEEL_SUM)};
	double bytes_sent = across(b, (double)k.tx_bytes, KEEL_SUM);
	double saved = across(b, (double)k.compress_bytes_saved, KEEL_SUM);
	double dev[4] = {across(b, (double)k.device_direct_frags, KEEL_SUM),
			 across(b, (double)k.device_copy_ins, KEEL_SUM),
			 across(b, (double)k.device_rx_frags, KEEL_SUM),
			 across(b, (double)k.drop_device_later, KEEL_SUM)};
	double smaller = across(b, (double)t->smaller, KEEL_MAX);
	double gone = across(b, (double)t->peer_gone + g_grp.peer_gone, KEEL_SUM);
	if (b->launch.rank != 0)
		return;
	printf("# Datagrams sent %.0f, retransmitted %.0f (%.3f %%), suspicions %.0f, late polls "
	       "%.0f\n",
	       sent, retx, sent > 0 ? 100.0 * retx / sent : 0.0, susp, late);
	if (b->router != NULL)
		printf("# Routes: %.0f datagrams over shared memory, %.0f over UDP, %.0f "
		       "fallbacks\n",
		       routes[0], routes[1], routes[2]);
	printf("# Bytes sent %.0f, saved by compression %.0f\n", bytes_sent, saved);
	if (g_dev_on)
		printf("# Datagrams the NIC read from device memory %.0f, copied to the host after "
		       "a route change %.0f; received into device memory and used there %.0f, "
		       "given back to be sent again %.0f\n",
		       dev[0], dev[1], dev[2], dev[3]);
	printf("# Out of bounds values : %.0f %s\n", t->wrong_total,
	       o->check ? (t->wrong_total == 0 ? "OK" : "FAILED") : "(not checked: use --check)");
	if (o->check)
		printf("# Checked on a smaller view: %.0f operations (each against the %s over the "
		       "members it reports)\n",
		       smaller, o->coll == BENCH_ALLREDUCE ? "reduction" : "result");
	if (o->coll == BENCH_SENDRECV)
		printf("# Sends and receives that ended with their peer gone (KEEL_EPEERGONE): "
		       "%.0f\n",
		       gone);
	if (o->check && o->coll == BENCH_BARRIER)
		printf("# (a barrier has no result to compare: only that every call returned 0)\n");
	printf("# Avg bus bandwidth    : %g\n", t->rows ? t->busbw_sum / t->rows : 0.0);
}

static int bench_allreduce(struct keel_boot *b, const struct bench_opts *o)
{
	struct ar_bufs m = {0};
	struct ar_totals tot = {0};
	size_t es = keel_dtype_size(o->dtype);
	uint32_t n = g_grp_on ? g_grp.created : b->launch.world_size;
	ar_alloc(b, o, &m);
	ar_register(b, o, &m);
	m.groups = o->group > 0 ? b->launch.world_size / o->group : 1;
	if (b->launch.rank == 0)
		ar_header(b, o, &m);
	if (o->coll == BENCH_BARRIER) /* no sizes: one row */
		ar_row(b, o, &m, 0, &tot);
	for (uint64_t bytes = o->min_bytes; o->coll != BENCH_BARRIER && bytes <= o->max_bytes;
	     bytes = o->step_bytes ? bytes + o->step_bytes : bytes * o->factor) {
		ar_row(b, o, &m, bench_coll_count((enum bench_coll)o->coll, bytes, es, n), &tot);
		if (bytes == 0 && o->step_bytes == 0)
			break;
	}
	ar_footer(b, o, &tot);
	ar_unregister_free(b, o, &m);
	return tot.wrong_total == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
}

/* Round trips go into a 1 us histogram (plus an exact maximum) so the percentiles need no sort
 * at the end: a rank that stops polling to sort looks dead to peers at sub-ms heartbeats. */
#define HIST_BUCKETS 100000u /* 1 us each: up to 100 ms; larger samples land in the last */

static double hist_percentile(const uint64_t *hist, uint64_t count, double q)
{
	uint64_t want = (uint64_t)(q * (double)count), seen = 0;
	for (uint32_t i = 0; i < HIST_BUCKETS; i++) {
		seen += hist[i];
		if (seen > want)
			return (double)i;
	}
	return (double)(HIST_BUCKETS - 1);
}

/* What one rank measured: round trips to every peer, in the histogram. */
struct hb_measure {
	uint64_t *hist, *seen; /* seen: each peer's RTT samples counted so far */
	uint64_t count, max_ns;
};

static void hb_measure(struct keel_boot *b, const struct bench_opts *o, struct hb_measure *h)
{
	uint32_t n = b->launch.world_size, self = b->launch.rank;
	uint64_t end = keel_posix_now_ns() + (uint64_t)(o->seconds * 1e9);
	for (uint64_t now = keel_posix_now_ns(); now < end; now = keel_posix_now_ns()) {
		uint64_t next;
		int rc = keel_poll(b->node, now, &next);
		if (rc != 0)
			die(b, "poll", rc);
		for (uint32_t p = 0; p < n; p++) {
			struct keel_peer_info pi;
			if (p == self || keel_peer_get(b->node, p, &pi) != 0 ||
			    pi.rtt_samples == h->seen[p])
				continue;
			h->seen[p] = pi.rtt_samples;
			uint64_t us = pi.rtt_ns_last / 1000;
			h->hist[us < HIST_BUCKETS ? us : HIST_BUCKETS - 1]++;
			h->max_ns = pi.rtt_ns_last > h->max_ns ? pi.rtt_ns_last : h->max_ns;
			h->count++;
		}
		b->cfg.waiter.wait(b->cfg.waiter.ctx, next < end ? next : end);
	}
}

/* Every rank's own view and suspicions, so a kill test can check each survivor. */
static void hb_own_line(struct keel_boot *b)
{
	uint32_t n = b->launch.world_size, self = b->launch.rank;
	struct keel_view own;
	uint32_t own_members[KEEL_WORLD_MAX];
	int own_n = keel_view_get(b->node, &own, own_members, KEEL_WORLD_MAX);
	char line[64 + 16 * KEEL_WORLD_MAX];
	int at = snprintf(line, sizeof(line), "# rank %u: view epoch %u, %d members:", self,
			  own.epoch, own_n);
	for (int m = 0; m < own_n && at < (int)sizeof(line); m++)
		at += snprintf(line + at, sizeof(line) - (size_t)at, " %u", own_members[m]);
	at += snprintf(line + at, sizeof(line) - (size_t)at, "; suspected:");
	for (uint32_t p = 0; p < n && at < (int)sizeof(line); p++) {
		struct keel_peer_info pi;
		if (p != self && keel_peer_get(b->node, p, &pi) == 0 && pi.suspicions > 0)
			at += snprintf(line + at, sizeof(line) - (size_t)at, " %u", p);
	}
	printf("%s\n", line);
	fflush(stdout);
}

/* Rank 0: the table of every rank's row (sum: 6 values a rank) and the view. */
static void hb_table(struct keel_boot *b, const struct bench_opts *o, const double *sum,
		     uint64_t view_changes)
{
	uint32_t n = b->launch.world_size;
	printf("# keel-bench heartbeat: %u ranks, interval %" PRIu64 " us, miss limit %u, %.1f s, "
	       "wait %s\n",
	       n, b->cfg.heartbeat_ns / 1000, b->cfg.miss_limit, o->seconds,
	       keel_posix_wait_mode_name(b->waiter.mode));
	printf("# %4s %10s %10s %10s %10s %10s %12s\n", "rank", "rtt p50", "rtt p99", "rtt max",
	       "samples", "suspicions", "late polls");
	printf("# %4s %10s %10s %10s\n", "", "(us)", "(us)", "(us)");
	double worst99 = 0, worstmax = 0;
	for (uint32_t r = 0; r < n; r++) {
		const double *x = sum + (size_t)r * 6;
		printf("  %4u %10.0f %10.0f %10.1f %10.0f %10.0f %12.0f\n", r, x[0], x[1], x[2],
		       x[3], x[4], x[5]);
		worst99 = x[1] > worst99 ? x[1] : worst99;
		worstmax = x[2] > worstmax ? x[2] : worstmax;
	}
	printf("# worst rank: p99 %.0f us, max %.1f us (percentiles to 1 us)\n", worst99, worstmax);
	struct keel_view v;
	uint32_t members[KEEL_WORLD_MAX];
	int nm = keel_view_get(b->node, &v, members, KEEL_WORLD_MAX);
	printf("# view: epoch %u, %d members:", v.epoch, nm);
	for (int m = 0; m < nm; m++)
		printf(" %u", members[m]);
	printf(" (view changes %llu)\n", (unsigned long long)view_changes);
}

static int bench_heartbeat(struct keel_boot *b, const struct bench_opts *o)
{
	uint32_t n = b->launch.world_size, self = b->launch.rank;
	struct hb_measure h = {.hist = calloc(HIST_BUCKETS, sizeof(uint64_t)),
			       .seen = calloc(n, sizeof(uint64_t))};
	double *table = calloc((size_t)n * 6, sizeof(double)),
	       *sum = calloc((size_t)n * 6, sizeof(double));
	if (h.hist == NULL || h.seen == NULL || table == NULL || sum == NULL)
		die(b, "buffers", -ENOMEM);
	across(b, 0, KEEL_MAX);
	hb_measure(b, o, &h);
	struct keel_counters k;
	keel_counters_get(b->node, &k);
	double *row = table + (size_t)self * 6;
	row[0] = h.count ? hist_percentile(h.hist, h.count, 0.50) : 0;
	row[1] = h.count ? hist_percentile(h.hist, h.count, 0.99) : 0;
	row[2] = (double)h.max_ns / 1e3;
	row[3] = (double)h.count;
	row[4] = (double)k.suspicions;
	row[5] = (double)k.local_pauses;
	int rc = keel_allreduce(b->node, table, sum, (size_t)n * 6, KEEL_F64, KEEL_SUM);
	if (rc != 0)
		die(b, "gathering results", rc);
	hb_own_line(b);
	if (self == 0)
		hb_table(b, o, sum, k.view_changes);
	free(h.hist);
	free(h.seen);
	free(table);
	free(sum);
	return CLI_EXIT_OK;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

#define LAT_MAGIC 0x54414c4c45454bull /* "KEELLAT": not a keel wire header */

/* Wait for one latency datagram of `seq` on the raw transport (keel datagrams that arrive in
 * between are dropped: the node is not polled during the measurement). */
static int lat_recv(struct keel_transport *tp, uint8_t *buf, uint32_t cap, uint64_t seq, bool yield)
{
	uint64_t end = keel_posix_now_ns() + 5000000000ull;
	for (;;) {
		struct keel_datagram d = {.buf = buf, .cap = cap};
		int got = tp->ops->recv_burst(tp, 0, &d, 1);
		if (got < 0)
			return got;
		uint64_t m, s;
		if (got == 1 && d.len >= 16) {
			memcpy(&m, buf, 8);
			memcpy(&s, buf + 8, 8);
			if (m == LAT_MAGIC && s == seq)
				return 0;
		}
		if (got == 0 && keel_posix_now_ns() > end)
			return -ETIMEDOUT;
		if (got == 0 && yield)
			sched_yield(); /* ranks sharing a core: let the peer run */
	}
}

static int lat_send(struct keel_transport *tp, uint8_t *buf, uint32_t len, uint32_t peer,
		    uint64_t seq, bool yield)
{
	uint64_t m = LAT_MAGIC;
	memcpy(buf, &m, 8);
	memcpy(buf + 8, &seq, 8);
	struct keel_datagram d = {.buf = buf, .len = len, .cap = len, .peer = peer};
	for (int tries = 0; tries < 1000000; tries++) {
		int rc = tp->ops->send_burst(tp, 0, &d, 1);
		if (rc != 0)
			return rc < 0 ? rc : 0;
		struct keel_datagram r = {.buf = buf + len, .cap = 16};
		rc = tp->ops->recv_burst(tp, 0, &r, 0); /* completions free send slots */
		if (yield)
			sched_yield();
	}
	return -EAGAIN;
}

/* Ping-pong between ranks 0 and 1 on the transport itself, as perftest does on raw verbs:
 * half of each round trip, median and p99, per size. */
static int bench_rdma_lat(struct keel_boot *b, const struct bench_opts *o)
{
	struct keel_transport *tp = b->tp;
	uint32_t self = b->launch.rank;
	if (b->launch.world_size != 2) {
		fprintf(stderr, "keel-bench rdma-lat: needs exactly 2 ranks\n");
		return 1;
	}
	uint32_t peer = 1 - self, iters = o->iters;
	bool yield = (long)b->launch.local_world_size > keel_posix_cpu_count();
	uint8_t *buf = calloc(1, 2 * (size_t)tp->mtu + 64);
	uint64_t *t = calloc(iters, sizeof(*t));
	if (buf == NULL || t == NULL)
		die(b, "memory", -ENOMEM);
	if (self == 0)
		printf("# keel-bench rdma-lat: transport %s, %u iterations, half round trip\n"
		       "# %10s %12s %12s %12s\n",
		       tp->ops->name, iters, "bytes", "t_p50(us)", "t_p99(us)", "t_min(us)");
	uint64_t seq = 1;
	for (uint64_t size = o->min_bytes; size <= o->max_bytes && size <= tp->mtu;
	     size = o->step_bytes ? size + o->step_bytes : size * o->factor) {
		uint32_t len = size < 16 ? 16 : (uint32_t)size; /* magic and sequence */
		for (uint32_t i = 0; i < iters + 10; i++, seq++) {
			uint64_t t0 = keel_posix_now_ns();
			int rc = self == 0 ? lat_send(tp, buf, len, peer, seq, yield) : 0;
			if (rc == 0)
				rc = lat_recv(tp, buf, tp->mtu, seq, yield);
			if (rc == 0 && self == 1)
				rc = lat_send(tp, buf, len, peer, seq, yield);
			if (rc != 0)
				die(b, "rdma-lat ping-pong", rc);
			if (i >= 10) /* warm-up rounds first */
				t[i - 10] = keel_posix_now_ns() - t0;
		}
		qsort(t, iters, sizeof(*t), cmp_u64);
		if (self == 0)
			printf("  %10llu %12.2f %12.2f %12.2f\n", (unsigned long long)size,
			       (double)t[iters / 2] / 2e3, (double)t[(size_t)(iters * 0.99)] / 2e3,
			       (double)t[0] / 2e3);
	}
	free(buf);
	free(t);
	return 0;
}

/* KEEL_DEVICE_CHUNK_KB, checked before the node starts: 0 when unset (keel's default). */
static uint32_t g_chunk_bytes;

static int device_chunk_env(void)
{
	char err[256];
	uint64_t kb = 0;
	int set = keel_env_uint("KEEL_DEVICE_CHUNK_KB", &kb, err, sizeof(err));
	if (set < 0)
		fprintf(stderr, "keel-bench: %s\n", err);
	if (set <= 0)
		return set;
	g_chunk_bytes = (uint32_t)(kb * 1024);
	return 0;
}

static void device_tweak(struct keel_config *cfg, void *ctx)
{
	(void)ctx;
	cfg->device = &g_dev.dev;
	cfg->device_chunk_bytes = g_chunk_bytes;
}

/* --device: the device, opened before the node starts (its config names it). 0 or the exit
 * code. */
static int device_open(const struct bench_opts *o, bool is_ar)
{
	char err[512] = "";
	if (o->device == NULL)
		return 0;
	if (!is_ar)
		cli_usage_error(TOOL, "--device is for allreduce only");
	if (device_chunk_env() != 0)
		return CLI_EXIT_USAGE;
	size_t cap = (size_t)o->max_bytes + keel_dtype_size(o->dtype);
	if (bench_device_open(&g_dev, o->device, cap, err, sizeof(err)) != 0) {
		fprintf(stderr, "keel-bench: %s\n", err);
		bench_device_close(&g_dev);
		return CLI_EXIT_FAILURE;
	}
	g_dev_on = true;
	return 0;
}

/* What --group and --root ask of the job, now that its size is known: NULL, or why not. */
static const char *group_mismatch(const struct bench_opts *o, char *msg, size_t len)
{
	const struct bench_coll_desc *d = bench_coll_desc((enum bench_coll)o->coll);
	if (d->rooted && o->root >= g_grp.created)
		snprintf(msg, len, "--root %u is not a group rank (groups of %u ranks)", o->root,
			 g_grp.created);
	else if (o->coll == BENCH_SENDRECV && g_grp.created < 2)
		snprintf(msg, len, "sendrecv needs groups of at least 2 ranks, not %u",
			 g_grp.created);
	else
		return NULL;
	return msg;
}

/* The table: with --group, and for every operation but allreduce, on keel's groups. */
static int bench_table(struct keel_boot *b, const struct bench_opts *o)
{
	char err[160];
	const struct bench_coll_desc *d = bench_coll_desc((enum bench_coll)o->coll);
	g_grp_on = o->coll != BENCH_ALLREDUCE || o->group > 0;
	if (!g_grp_on)
		return bench_allreduce(b, o);
	int rc = bench_group_open(&g_grp, b, o->group, err, sizeof(err));
	const char *why = rc == 0 ? group_mismatch(o, err, sizeof(err)) : err;
	if (why != NULL) { /* every rank stops alike; one says why */
		if (b->launch.rank == 0 || (rc != 0 && rc != -EINVAL))
			fprintf(stderr, "keel-bench: rank %u: %s\n", b->launch.rank, why);
		bench_group_close(&g_grp);
		return rc == 0 || rc == -EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAILURE;
	}
	g_grp.x = (struct bench_coll_ctx){.coll = (enum bench_coll)o->coll,
					  .dtype = (enum keel_dtype)o->dtype,
					  .op = d->reduces ? (enum keel_redop)o->op : KEEL_SUM,
					  .root = o->root};
	int status = bench_allreduce(b, o);
	bench_group_close(&g_grp);
	return status;
}

/* The tables, heartbeat and rdma-lat: one keel node each. */
static int bench_node(const char *cmd, struct bench_opts *o)
{
	struct keel_boot b;
	char err[512] = "";
	bool is_ar = o->coll >= 0, is_hb = strcmp(cmd, "heartbeat") == 0;
	if (strcmp(cmd, "rdma-lat") == 0) {
		setenv("KEEL_TRANSPORT", "verbs", 0); /* it measures the verbs path by default */
		o->min_bytes = o->min_given ? o->min_bytes : 2;
		o->max_bytes = o->max_given ? o->max_bytes : 4096;
		o->iters = o->iters_given ? o->iters : 1000;
	}
	int rc = device_open(o, is_ar);
	if (rc != 0)
		return rc;
	rc = keel_boot_start(&b, g_dev_on ? device_tweak : NULL, NULL, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "keel-bench: %s\n", err[0] ? err : keel_strerror(rc));
		return CLI_EXIT_FAILURE;
	}
	g_job_start_ns = keel_posix_now_ns();
	if (o->series != NULL && b.launch.rank == 0) {
		g_series = fopen(o->series, "w");
		if (g_series == NULL) {
			fprintf(stderr, "keel-bench: --series %s: %s\n", o->series,
				strerror(errno));
			keel_boot_stop(&b, 0);
			return CLI_EXIT_FAILURE;
		}
		fprintf(g_series, "# bytes in_place iteration began_ms slowest_us\n");
	}
	int status = is_ar   ? bench_table(&b, o)
		     : is_hb ? bench_heartbeat(&b, o)
			     : bench_rdma_lat(&b, o);
	if (g_series != NULL && fclose(g_series) != 0) {
		fprintf(stderr, "keel-bench: --series %s: %s\n", o->series, strerror(errno));
		status = CLI_EXIT_FAILURE;
	}
	fflush(stdout); /* the results, before any linger (KEEL_METRICS_LINGER_MS) */
	keel_boot_stop(&b, 500000000ull);
	if (g_dev_on)
		bench_device_close(&g_dev);
	return status;
}

int main(int argc, char **argv)
{
	const char *cmd = argc >= 2 ? argv[1] : "";
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
		usage(stdout);
		return CLI_EXIT_OK;
	}
	if (strcmp(cmd, "--version") == 0) {
		cli_version(stdout, TOOL);
		return CLI_EXIT_OK;
	}
	if (strcmp(cmd, "failover") == 0)
		return keel_bench_failover(argc - 1, argv + 1);
	if (strcmp(cmd, "preload") == 0)
		return keel_bench_preload(argc - 1, argv + 1);
	if (argc < 2)
		cli_usage_error(
		    TOOL,
		    "which benchmark? allreduce, all_gather, reduce_scatter, alltoall, "
		    "sendrecv, reduce, broadcast, barrier, heartbeat, failover, preload "
		    "or rdma-lat (see '%s --help')",
		    TOOL);
	if (cmd[0] == '-')
		cli_usage_error(TOOL, "unknown option '%s' (see '%s --help')", cmd, TOOL);
	if (bench_coll_parse(cmd) < 0 && strcmp(cmd, "heartbeat") != 0 &&
	    strcmp(cmd, "rdma-lat") != 0)
		cli_usage_error(TOOL, "unknown command '%s' (see '%s --help')", cmd, TOOL);
	struct bench_opts o;
	parse_opts(argc - 1, argv + 1, &o);
	return bench_node(cmd, &o);
}
