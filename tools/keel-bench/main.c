/* keel-bench: AllReduce bandwidth/latency in the nccl-tests format, and heartbeat round trips.
 * Launch with keel-run (or torchrun, Slurm, mpirun): keel-run -n 4 -- keel-bench allreduce. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_device.h"
#include "bench_failover.h"
#include "bench_preload.h"
#include "bench_stats.h"
#include "keel/boot.h"
#include "keel/transport_router.h"
#include "refcheck.h"
#include "size_arg.h"

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
	    "       keel-bench heartbeat [options]   heartbeat round-trip p50/p99/max\n"
	    "       keel-bench failover [options]    kill ranks, time detection and new views\n"
	    "       keel-bench preload FILE [CHUNK [N]]  read FILE through the pre-load executor\n"
	    "                                        (io_uring, then pread), N reads in flight\n"
	    "       keel-bench rdma-lat [options]    verbs transport latency, 2 ranks, like\n"
	    "                                        ib_write_lat/ib_send_lat (half round trip)\n"
	    "allreduce options:\n"
	    "  -b, --minbytes SIZE   smallest message (default 8); K, M, G suffixes\n"
	    "  -e, --maxbytes SIZE   largest message (default 64M)\n"
	    "  -f, --stepfactor N    multiply the size by N each row (default 2)\n"
	    "  -i, --stepbytes SIZE  add SIZE each row instead of multiplying\n"
	    "  -d, --dtype T         f32 f64 f16 bf16 i32 i64 u8 (default f32)\n"
	    "  -o, --op OP           sum prod min max avg (default sum)\n"
	    "  -n, --iters N         timed iterations per size (default 20)\n"
	    "  -w, --warmup N        untimed iterations first (default 5)\n"
	    "      --warmup-ms MS    and more, in rounds of N, until every rank has warmed up\n"
	    "                        for MS milliseconds (default 0: N alone)\n"
	    "  -c, --check           verify every element against a reference\n"
	    "  -m, --median          time each iteration alone; report the median over\n"
	    "                        iterations of the slowest rank's time (default: the\n"
	    "                        slowest rank's mean)\n"
	    "      --series FILE     with --median: rank 0 writes one line per timed iteration:\n"
	    "                        size, in place (0/1), iteration, ms since the job\n"
	    "                        started when it began, the slowest rank's time (us)\n"
	    "  -D, --device D        buffers in device memory: cuda (GPU LOCAL_RANK, or 0) or\n"
	    "                        cpu (the CPU stand-in device); staged through registered\n"
	    "                        host memory (README \"GPU buffers\")\n"
	    "  -G, --grad            gradient AllReduces (f32 sum or avg) that keel may send\n"
	    "                        compressed (KEEL_COMPRESS=auto|off|bf16|f16); --check then\n"
	    "                        allows the documented rounding\n"
	    "  -R, --register        register the input and output buffers (and the stage of\n"
	    "                        --device) with the transport\n"
	    "                        (keel_boot_register: over verbs the NIC reads payloads\n"
	    "                        where they lie; a no-op elsewhere)\n"
	    "common options:\n"
	    "  --transport T         udp (default), shm (ranks on one host), dpdk or verbs\n"
	    "                        (KEEL_SHM_RING_KB, KEEL_DPDK_*, KEEL_VERBS_*: README)\n"
	    "rdma-lat options: -b/-e/-f sizes (default 2..4096 bytes), -n iterations (default "
	    "1000)\n"
	    "heartbeat options:\n"
	    "  -t, --seconds S       how long to measure (default 2)\n"
	    "environment: KEEL_HEARTBEAT_US, KEEL_ALGO=auto|ring|rd, KEEL_MTU, KEEL_WINDOW,\n"
	    "  KEEL_CHAOS=loss=0.01,..., KEEL_WAIT=busy|adaptive|block, KEEL_DEVICE_CHUNK_KB\n"
	    "  (--device: KiB per device call, default 1024) (see README)\n");
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

static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
	static const struct option longs[] = {{"minbytes", required_argument, 0, 'b'},
					      {"maxbytes", required_argument, 0, 'e'},
					      {"stepfactor", required_argument, 0, 'f'},
					      {"stepbytes", required_argument, 0, 'i'},
					      {"dtype", required_argument, 0, 'd'},
					      {"op", required_argument, 0, 'o'},
					      {"iters", required_argument, 0, 'n'},
					      {"warmup", required_argument, 0, 'w'},
					      {"warmup-ms", required_argument, 0, 'W'},
					      {"check", no_argument, 0, 'c'},
					      {"median", no_argument, 0, 'm'},
					      {"series", required_argument, 0, 'S'},
					      {"seconds", required_argument, 0, 't'},
					      {"transport", required_argument, 0, 'T'},
					      {"device", required_argument, 0, 'D'},
					      {"grad", no_argument, 0, 'G'},
					      {"register", no_argument, 0, 'R'},
					      {"help", no_argument, 0, 'h'},
					      {0, 0, 0, 0}};
	*o = (struct bench_opts){.min_bytes = 8,
				 .max_bytes = 64ull << 20,
				 .factor = 2,
				 .dtype = KEEL_F32,
				 .op = KEEL_SUM,
				 .iters = 20,
				 .warmup = 5,
				 .seconds = 2.0};
	int c;
	while ((c = getopt_long(argc, argv, "b:e:f:i:d:o:n:w:W:cmt:D:GRh", longs, NULL)) != -1) {
		uint64_t v;
		switch (c) {
		case 'b':
		case 'e':
		case 'i':
			if (keel_size_arg(optarg, &v) != 0) {
				fprintf(stderr, "keel-bench: bad size '%s'\n", optarg);
				return -EINVAL;
			}
			*(c == 'b' ? &o->min_bytes : c == 'e' ? &o->max_bytes : &o->step_bytes) = v;
			break;
		case 'f':
		case 'n':
		case 'w':
			if (keel_size_arg(optarg, &v) != 0 || (c != 'w' && v == 0) ||
			    v > 100000000) {
				fprintf(stderr, "keel-bench: bad number '%s' for -%c\n", optarg, c);
				return -EINVAL;
			}
			if (c == 'f')
				o->factor = v;
			else if (c == 'n')
				o->iters = (uint32_t)v;
			else
				o->warmup = (uint32_t)v;
			break;
		case 'd':
			o->dtype = parse_name(optarg, dtype_name, KEEL_DTYPE_COUNT);
			if (o->dtype < 0) {
				fprintf(stderr, "keel-bench: unknown dtype '%s'\n", optarg);
				return -EINVAL;
			}
			break;
		case 'o':
			o->op = parse_name(optarg, redop_name, KEEL_REDOP_COUNT);
			if (o->op < 0) {
				fprintf(stderr, "keel-bench: unknown op '%s'\n", optarg);
				return -EINVAL;
			}
			break;
		case 'W':
			if (keel_size_arg(optarg, &v) != 0 || v > 600000) {
				fprintf(stderr, "keel-bench: bad --warmup-ms '%s' (0..600000)\n",
					optarg);
				return -EINVAL;
			}
			o->warmup_ms = (uint32_t)v;
			break;
		case 'c':
			o->check = true;
			break;
		case 'm':
			o->median = true;
			break;
		case 'S':
			o->series = optarg;
			break;
		case 't':
			o->seconds = strtod(optarg, NULL);
			if (!(o->seconds > 0 && o->seconds < 86400)) {
				fprintf(stderr, "keel-bench: bad --seconds '%s'\n", optarg);
				return -EINVAL;
			}
			break;
		case 'D':
			o->device = optarg; /* bench_device_open says what it does not know */
			break;
		case 'G':
			o->grad = true;
			break;
		case 'R':
			o->reg = true;
			break;
		case 'T':
			/* boot.c reads KEEL_TRANSPORT; it says what it does not know. */
			if (setenv("KEEL_TRANSPORT", optarg, 1) != 0)
				return -EINVAL;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	const char *why = NULL;
	char msg[128];
	if (optind != argc) {
		snprintf(msg, sizeof(msg), "unexpected argument '%s'", argv[optind]);
		why = msg;
	} else if (o->min_bytes > o->max_bytes) {
		snprintf(msg, sizeof(msg),
			 "--minbytes %" PRIu64 " is larger than --maxbytes %" PRIu64
			 ": nothing to measure",
			 o->min_bytes, o->max_bytes);
		why = msg;
	} else if (o->factor < 2 && o->step_bytes == 0) {
		why = "--stepfactor must be at least 2 (or give --stepbytes)";
	} else if (o->grad && (o->dtype != KEEL_F32 || (o->op != KEEL_SUM && o->op != KEEL_AVG) ||
			       o->device != NULL)) {
		why = "--grad is for host f32 sum or avg";
	} else if (o->series != NULL && !o->median) {
		why = "--series needs --median (it writes the per-iteration times)";
	}
	if (why != NULL) {
		fprintf(stderr, "keel-bench: %s (keel-bench --help for the options)\n", why);
		return -EINVAL;
	}
	return 0;
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
static void warm_up(struct keel_boot *b, const struct bench_opts *o, void *in, void *out,
		    size_t count)
{
	uint64_t w0 = keel_posix_now_ns();
	for (uint32_t round = o->warmup;; round = o->warmup > 0 ? o->warmup : 1) {
		for (uint32_t i = 0; i < round; i++) {
			int rc = ar_run(b, o, in, out, count);
			if (rc != 0)
				die(b, "allreduce (warmup)", rc);
		}
		if (o->warmup_ms == 0 || across(b, (double)(keel_posix_now_ns() - w0) / 1e6,
						KEEL_MAX) >= (double)o->warmup_ms)
			break;
	}
}

/* Mean time of one AllReduce over `iters`, in microseconds, slowest rank. */
static double time_allreduce(struct keel_boot *b, const struct bench_opts *o, void *in, void *out,
			     size_t count)
{
	warm_up(b, o, in, out, count);
	across(b, 0, KEEL_MAX); /* line the ranks up */
	uint64_t t0 = keel_posix_now_ns();
	for (uint32_t i = 0; i < o->iters; i++) {
		int rc = ar_run(b, o, in, out, count);
		if (rc != 0)
			die(b, "allreduce", rc);
	}
	double us = (double)(keel_posix_now_ns() - t0) / 1e3 / o->iters;
	return across(b, us, KEEL_MAX);
}

/* Lines of --series written between two polls. */
#define SERIES_PIECE 4096u

/* --median: each iteration timed alone, the slowest rank's time per iteration (an AllReduce
 * MAX over the per-iteration times, after the timed loop), and the median of those, in
 * microseconds. The method of tools/bench-peers/, so keel and its peers compare alike.
 * `mine` and `slowest` hold o->iters values each. */
static double time_allreduce_median(struct keel_boot *b, const struct bench_opts *o, void *in,
				    void *out, size_t count, bool in_place, double *mine,
				    double *slowest, uint64_t *began)
{
	warm_up(b, o, in, out, count);
	across(b, 0, KEEL_MAX); /* line the ranks up */
	for (uint32_t i = 0; i < o->iters; i++) {
		uint64_t t0 = keel_posix_now_ns();
		int rc = ar_run(b, o, in, out, count);
		if (rc != 0)
			die(b, "allreduce", rc);
		mine[i] = (double)(keel_posix_now_ns() - t0) / 1e3;
		if (began != NULL)
			began[i] = t0;
	}
	int rc = keel_allreduce(b->node, mine, slowest, o->iters, KEEL_F64, KEEL_MAX);
	if (rc != 0)
		die(b, "allreduce of per-iteration times", rc);
	for (uint32_t i = 0; g_series != NULL && i < o->iters; i++) {
		fprintf(g_series, "%zu %d %u %.3f %.3f\n", count * keel_dtype_size(o->dtype),
			in_place ? 1 : 0, i, (double)(began[i] - g_job_start_ns) / 1e6, slowest[i]);
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

static int bench_allreduce(struct keel_boot *b, const struct bench_opts *o)
{
	size_t es = keel_dtype_size(o->dtype);
	size_t cap = (size_t)o->max_bytes + es;
	uint8_t *in = calloc(1, cap), *out = calloc(1, cap),
		*ref = o->check ? calloc(1, cap) : NULL;
	double *mine = o->median ? malloc(o->iters * sizeof(double)) : NULL,
	       *slowest = o->median ? malloc(o->iters * sizeof(double)) : NULL;
	/* --series: rank 0 alone writes the file */
	uint64_t *began = g_series != NULL ? malloc(o->iters * sizeof(uint64_t)) : NULL;
	if (o->grad) {
		g_feedback = calloc(keel_grad_feedback_len(cap / es) + 1, sizeof(float));
		if (g_feedback == NULL)
			die(b, "feedback buffer", -ENOMEM);
	}
	if (in == NULL || out == NULL || (o->check && ref == NULL) ||
	    (o->median && (mine == NULL || slowest == NULL)) || (g_series != NULL && began == NULL))
		die(b, "buffers", -ENOMEM);
	/* Touched now: a page's first touch inside a timed call would be timed with it. */
	if (o->median) {
		memset(mine, 0, o->iters * sizeof(double));
		memset(slowest, 0, o->iters * sizeof(double));
	}
	if (began != NULL)
		memset(began, 0, o->iters * sizeof(uint64_t));
	/* --register: the buffers sends read (with --device, the stage holds them) */
	void *reg_buf[3] = {in, out, g_dev_on ? g_dev.stage : NULL};
	size_t reg_len[3] = {cap, cap, g_dev_on ? g_dev.stage_bytes : 0};
	for (uint32_t k = 0; o->reg && k < 3 && reg_buf[k] != NULL; k++) {
		int rc = keel_boot_register(b, reg_buf[k], reg_len[k]);
		if (rc != 0)
			die(b, "--register", rc);
	}
	int direct = g_dev_on && o->reg ? register_device_buffers(b) : -ENOENT;
	int area = g_dev_on && o->reg ? register_device_area(b) : -ENOENT;
	uint32_t n = b->launch.world_size;
	bool lead = b->launch.rank == 0;
	if (lead) {
		char pieces[40] = "";
		if (b->piece_bytes != 0) /* datagrams cut into link-sized UDP pieces */
			snprintf(pieces, sizeof(pieces), " udp pieces %u,", b->piece_bytes);
		printf("# keel-bench allreduce: %u ranks (%s), transport %s, algo %s, mtu %u, "
		       "window %u,%s wait %s%s, heartbeat %llu us\n",
		       n, b->launch.source, b->tp->ops->name,
		       b->cfg.algo == KEEL_ALGO_RING   ? "ring"
		       : b->cfg.algo == KEEL_ALGO_RD   ? "rd"
		       : b->cfg.algo == KEEL_ALGO_HIER ? "hier"
						       : "auto",
		       b->cfg.mtu, b->cfg.window, pieces, keel_posix_wait_mode_name(b->waiter.mode),
		       b->waiter.spin_yield ? " (spin yields)" : "",
		       (unsigned long long)(b->cfg.heartbeat_ns / 1000));
		if (o->median)
			printf("# time: median over %u iterations of the slowest rank's time in "
			       "each\n",
			       o->iters);
		if (o->warmup_ms > 0)
			printf("# warm-up: %u calls, then rounds of them for at least %u ms\n",
			       o->warmup, o->warmup_ms);
		if (o->grad)
			printf("# gradient AllReduces (keel_allreduce_grad), compression %s\n",
			       b->cfg.compress == KEEL_COMPRESS_OFF    ? "off"
			       : b->cfg.compress == KEEL_COMPRESS_BF16 ? "bf16"
			       : b->cfg.compress == KEEL_COMPRESS_F16  ? "f16"
								       : "auto");
		if (g_dev_on)
			printf(
			    "# buffers on device: %s (%s), staged through %zu bytes of registered "
			    "host memory, %u-byte chunks\n",
			    g_dev.kind, g_dev.name, g_dev.stage_bytes,
			    b->cfg.device_chunk_bytes != 0 ? b->cfg.device_chunk_bytes
							   : KEEL_DEVICE_CHUNK_DEFAULT);
		if (g_dev_on && o->reg)
			printf("# device buffers: %s%s%s\n",
			       direct == 0
				   ? "registered as dma-bufs, the NIC reads what is sent "
				     "where every peer's way can (GPUDirect RDMA)"
				   : "staged through host memory (the transport cannot read "
				     "device memory: ",
			       direct == 0 ? "" : keel_strerror(direct), direct == 0 ? "" : ")");
		if (g_dev_on && o->reg)
			printf("# device area: %s%s%s\n",
			       area == 0 ? "registered, the NIC writes what peers send from "
					   "device memory into it (GPUDirect RDMA)"
					 : "none, what is received lands in host memory (",
			       area == 0 ? "" : keel_strerror(area), area == 0 ? "" : ")");
		printf("#%61s%32s\n", "out-of-place", "in-place");
		printf("#%11s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count",
		       "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
		       "busbw", "#wrong");
		printf("#%11s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)",
		       "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
		       "(GB/s)", "");
	}
	double busbw_sum = 0, wrong_total = 0;
	uint32_t smaller = 0;
	int rows = 0;
	for (uint64_t bytes = o->min_bytes; bytes <= o->max_bytes;
	     bytes = o->step_bytes ? bytes + o->step_bytes : bytes * o->factor) {
		size_t count = bytes / es;
		double t[2], wrong[2] = {-1, -1};
		/* with --device, the timed AllReduces run on the device buffers */
		void *t_in = g_dev_on ? g_dev.d_in : in, *t_out = g_dev_on ? g_dev.d_out : out;
		for (int ip = 0; ip < 2; ip++) {
			t[ip] = o->median
				    ? time_allreduce_median(b, o, t_in, ip ? t_in : t_out, count,
							    ip == 1, mine, slowest, began)
				    : time_allreduce(b, o, t_in, ip ? t_in : t_out, count);
			if (o->check)
				wrong[ip] =
				    check_allreduce(b, o, in, out, ref, count, ip, &smaller);
		}
		double algbw[2], busbw[2];
		for (int ip = 0; ip < 2; ip++) {
			algbw[ip] = (double)(count * es) / (t[ip] * 1e3);
			busbw[ip] = algbw[ip] * (n > 1 ? 2.0 * (n - 1) / n : 1.0);
			wrong_total += wrong[ip] > 0 ? wrong[ip] : 0;
		}
		busbw_sum += busbw[0];
		rows++;
		if (lead) {
			char w0[16], w1[16];
			snprintf(w0, sizeof(w0), o->check ? "%.0f" : "N/A", wrong[0]);
			snprintf(w1, sizeof(w1), o->check ? "%.0f" : "N/A", wrong[1]);
			printf(" %11" PRIu64
			       " %12zu %8s %6s %6d %8.2f %7.3f %7.3f %6s %8.2f %7.3f %7.3f %6s\n",
			       (uint64_t)(count * es), count, keel_dtype_name(o->dtype),
			       keel_redop_name(o->op), -1, t[0], algbw[0], busbw[0], w0, t[1],
			       algbw[1], busbw[1], w1);
			fflush(stdout);
		}
		if (bytes == 0 && o->step_bytes == 0)
			break;
	}
	struct keel_counters k;
	keel_counters_get(b->node, &k);
	double retx = across(b, (double)k.retransmits, KEEL_SUM);
	double sent = across(b, (double)k.tx_datagrams, KEEL_SUM);
	double susp = across(b, (double)k.suspicions, KEEL_SUM);
	double late = across(b, (double)k.local_pauses, KEEL_SUM);
	struct keel_router_stats rs = {0};
	if (b->router != NULL)
		keel_router_stats_get(b->router, &rs);
	double on_shm = across(b, (double)rs.tx_datagrams[0], KEEL_SUM);
	double on_udp = across(b, (double)rs.tx_datagrams[1], KEEL_SUM);
	double fallbacks = across(b, (double)rs.fallbacks, KEEL_SUM);
	double bytes_sent = across(b, (double)k.tx_bytes, KEEL_SUM);
	double saved = across(b, (double)k.compress_bytes_saved, KEEL_SUM);
	double direct_frags = across(b, (double)k.device_direct_frags, KEEL_SUM);
	double copy_ins = across(b, (double)k.device_copy_ins, KEEL_SUM);
	double rx_frags = across(b, (double)k.device_rx_frags, KEEL_SUM);
	double rx_later = across(b, (double)k.drop_device_later, KEEL_SUM);
	if (lead) {
		printf("# Datagrams sent %.0f, retransmitted %.0f (%.3f %%), suspicions %.0f, late "
		       "polls %.0f\n",
		       sent, retx, sent > 0 ? 100.0 * retx / sent : 0.0, susp, late);
		if (b->router != NULL)
			printf("# Routes: %.0f datagrams over shared memory, %.0f over UDP, %.0f "
			       "fallbacks\n",
			       on_shm, on_udp, fallbacks);
		printf("# Bytes sent %.0f, saved by compression %.0f\n", bytes_sent, saved);
		if (g_dev_on)
			printf("# Datagrams the NIC read from device memory %.0f, copied to the "
			       "host after a route change %.0f; received into device memory and "
			       "used there %.0f, given back to be sent again %.0f\n",
			       direct_frags, copy_ins, rx_frags, rx_later);
		printf("# Out of bounds values : %.0f %s\n", wrong_total,
		       o->check ? (wrong_total == 0 ? "OK" : "FAILED")
				: "(not checked: use --check)");
		if (o->check)
			printf("# Checked on a smaller view: %u operations (each against the "
			       "reduction over the members it reports)\n",
			       smaller);
		printf("# Avg bus bandwidth    : %g\n", rows ? busbw_sum / rows : 0.0);
	}
	for (uint32_t which = 0; o->reg && which < 5; which++) {
		void *dev_buf = which == 3 ? g_dev.d_in : g_dev.d_out;
		void *buf = which < 3 ? reg_buf[which] : direct == 0 ? dev_buf : NULL;
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
	free(in);
	free(out);
	free(ref);
	free(mine);
	free(slowest);
	free(began);
	free(g_feedback);
	return wrong_total == 0 ? 0 : 1;
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

static int bench_heartbeat(struct keel_boot *b, const struct bench_opts *o)
{
	uint32_t n = b->launch.world_size, self = b->launch.rank;
	uint64_t count = 0, max_ns = 0;
	uint64_t *hist = calloc(HIST_BUCKETS, sizeof(*hist)), *seen = calloc(n, sizeof(*seen));
	double *table = calloc((size_t)n * 6, sizeof(double)),
	       *sum = calloc((size_t)n * 6, sizeof(double));
	if (hist == NULL || seen == NULL || table == NULL || sum == NULL)
		die(b, "buffers", -ENOMEM);
	across(b, 0, KEEL_MAX);
	uint64_t end = keel_posix_now_ns() + (uint64_t)(o->seconds * 1e9);
	for (uint64_t now = keel_posix_now_ns(); now < end; now = keel_posix_now_ns()) {
		uint64_t next;
		int rc = keel_poll(b->node, now, &next);
		if (rc != 0)
			die(b, "poll", rc);
		for (uint32_t p = 0; p < n; p++) {
			struct keel_peer_info pi;
			if (p == self || keel_peer_get(b->node, p, &pi) != 0 ||
			    pi.rtt_samples == seen[p])
				continue;
			seen[p] = pi.rtt_samples;
			uint64_t us = pi.rtt_ns_last / 1000;
			hist[us < HIST_BUCKETS ? us : HIST_BUCKETS - 1]++;
			max_ns = pi.rtt_ns_last > max_ns ? pi.rtt_ns_last : max_ns;
			count++;
		}
		b->cfg.waiter.wait(b->cfg.waiter.ctx, next < end ? next : end);
	}
	struct keel_counters k;
	keel_counters_get(b->node, &k);
	double *row = table + (size_t)self * 6;
	row[0] = count ? hist_percentile(hist, count, 0.50) : 0;
	row[1] = count ? hist_percentile(hist, count, 0.99) : 0;
	row[2] = (double)max_ns / 1e3;
	row[3] = (double)count;
	row[4] = (double)k.suspicions;
	row[5] = (double)k.local_pauses;
	int rc = keel_allreduce(b->node, table, sum, (size_t)n * 6, KEEL_F64, KEEL_SUM);
	if (rc != 0)
		die(b, "gathering results", rc);
	/* Every rank's own view and suspicions, so a kill test can check each survivor. */
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
	if (self == 0) {
		printf("# keel-bench heartbeat: %u ranks, interval %" PRIu64
		       " us, miss limit %u, %.1f s, "
		       "wait %s\n",
		       n, b->cfg.heartbeat_ns / 1000, b->cfg.miss_limit, o->seconds,
		       keel_posix_wait_mode_name(b->waiter.mode));
		printf("# %4s %10s %10s %10s %10s %10s %12s\n", "rank", "rtt p50", "rtt p99",
		       "rtt max", "samples", "suspicions", "late polls");
		printf("# %4s %10s %10s %10s\n", "", "(us)", "(us)", "(us)");
		double worst99 = 0, worstmax = 0;
		for (uint32_t r = 0; r < n; r++) {
			const double *x = sum + (size_t)r * 6;
			printf("  %4u %10.0f %10.0f %10.1f %10.0f %10.0f %12.0f\n", r, x[0], x[1],
			       x[2], x[3], x[4], x[5]);
			worst99 = x[1] > worst99 ? x[1] : worst99;
			worstmax = x[2] > worstmax ? x[2] : worstmax;
		}
		printf("# worst rank: p99 %.0f us, max %.1f us (percentiles to 1 us)\n", worst99,
		       worstmax);
		struct keel_view v;
		uint32_t members[KEEL_WORLD_MAX];
		int nm = keel_view_get(b->node, &v, members, KEEL_WORLD_MAX);
		printf("# view: epoch %u, %d members:", v.epoch, nm);
		for (int m = 0; m < nm; m++)
			printf(" %u", members[m]);
		printf(" (view changes %llu)\n", (unsigned long long)k.view_changes);
	}
	free(hist);
	free(seen);
	free(table);
	free(sum);
	return 0;
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

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "failover") == 0)
		return keel_bench_failover(argc - 1, argv + 1);
	if (strcmp(argv[1], "preload") == 0)
		return keel_bench_preload(argc - 1, argv + 1);
	const char *cmd = argv[1];
	bool is_ar = strcmp(cmd, "allreduce") == 0, is_hb = strcmp(cmd, "heartbeat") == 0;
	bool is_lat = strcmp(cmd, "rdma-lat") == 0;
	if (!is_ar && !is_hb && !is_lat) {
		fprintf(stderr, "keel-bench: unknown command '%s'\n", cmd);
		usage(stderr);
		return 2;
	}
	struct bench_opts o;
	if (parse_opts(argc - 1, argv + 1, &o) != 0)
		return 2;
	if (is_lat) {
		setenv("KEEL_TRANSPORT", "verbs", 0); /* it measures the verbs path by default */
		bool b_set = false, e_set = false, n_set = false;
		for (int i = 2; i < argc; i++) {
			b_set |=
			    strcmp(argv[i], "-b") == 0 || strncmp(argv[i], "--minbytes", 10) == 0;
			e_set |=
			    strcmp(argv[i], "-e") == 0 || strncmp(argv[i], "--maxbytes", 10) == 0;
			n_set |= strcmp(argv[i], "-n") == 0 || strncmp(argv[i], "--iters", 7) == 0;
		}
		o.min_bytes = b_set ? o.min_bytes : 2;
		o.max_bytes = e_set ? o.max_bytes : 4096;
		o.iters = n_set ? o.iters : 1000;
	}
	struct keel_boot b;
	char err[512] = "";
	if (o.device != NULL && !is_ar) {
		fprintf(stderr, "keel-bench: --device is for allreduce only\n");
		return 2;
	}
	if (o.device != NULL && device_chunk_env() != 0)
		return 2;
	if (o.device != NULL) {
		size_t cap = (size_t)o.max_bytes + keel_dtype_size(o.dtype);
		if (bench_device_open(&g_dev, o.device, cap, err, sizeof(err)) != 0) {
			fprintf(stderr, "keel-bench: %s\n", err);
			bench_device_close(&g_dev);
			return 1;
		}
		g_dev_on = true;
	}
	int rc = keel_boot_start(&b, g_dev_on ? device_tweak : NULL, NULL, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "keel-bench: %s\n", err[0] ? err : keel_strerror(rc));
		return 1;
	}
	g_job_start_ns = keel_posix_now_ns();
	if (o.series != NULL && b.launch.rank == 0) {
		g_series = fopen(o.series, "w");
		if (g_series == NULL) {
			fprintf(stderr, "keel-bench: --series %s: %s\n", o.series, strerror(errno));
			keel_boot_stop(&b, 0);
			return 1;
		}
		fprintf(g_series, "# bytes in_place iteration began_ms slowest_us\n");
	}
	int status = is_ar   ? bench_allreduce(&b, &o)
		     : is_hb ? bench_heartbeat(&b, &o)
			     : bench_rdma_lat(&b, &o);
	if (g_series != NULL && fclose(g_series) != 0) {
		fprintf(stderr, "keel-bench: --series %s: %s\n", o.series, strerror(errno));
		status = 1;
	}
	fflush(stdout); /* the results, before any linger (KEEL_METRICS_LINGER_MS) */
	keel_boot_stop(&b, 500000000ull);
	if (g_dev_on)
		bench_device_close(&g_dev);
	return status;
}
