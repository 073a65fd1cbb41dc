/* keel-bench preload FILE [CHUNK [INFLIGHT]]: reads the whole file in CHUNK-byte ranges
 * (default 1 MiB) through the pre-load executor, INFLIGHT at a time (default 16), with
 * io_uring and then pread, three times each, and prints each run's MB/s and the median per
 * engine. Every byte is read into one of INFLIGHT buffers; nothing is checked here
 * (tests/unit/test_preload.c checks bytes). Compare with `dd if=FILE of=/dev/null bs=CHUNK`. */
#include "bench_preload.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "keel/preload.h"
#include "size_arg.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct run {
	struct keel_preload *p;
	uint32_t file;
	uint64_t size, next, chunk;
	uint8_t *bufs;
	int failed;
};

static void queue_next(struct run *r, uint64_t slot);

static void on_done(void *ctx, uint64_t slot, int status, size_t got)
{
	struct run *r = ctx;
	(void)got;
	if (status != 0 && r->failed == 0)
		r->failed = status;
	queue_next(r, slot); /* the buffer is free: the next range goes into it */
}

static void queue_next(struct run *r, uint64_t slot)
{
	if (r->next >= r->size || r->failed != 0)
		return;
	uint64_t len = r->size - r->next < r->chunk ? r->size - r->next : r->chunk;
	int rc = keel_preload_read(r->p, r->file, r->next, r->bufs + slot * r->chunk, len, slot,
				   on_done, r);
	if (rc != 0)
		r->failed = rc;
	r->next += len;
}

/* One pass over the file; MB/s, or a negative errno. */
static double one_pass(const char *path, enum keel_preload_engine engine, uint64_t chunk,
		       uint32_t inflight, const char **name)
{
	struct keel_preload_config cfg;
	keel_preload_config_default(&cfg);
	cfg.engine = engine;
	cfg.reads_max = inflight;
	cfg.inflight_max = inflight;
	size_t sz = keel_preload_storage_size(&cfg);
	void *mem = calloc(1, sz);
	struct run r = {.chunk = chunk};
	struct stat st;
	int rc = mem == NULL ? -ENOMEM : keel_preload_init(&r.p, mem, sz, &cfg);
	if (rc == 0)
		rc = keel_preload_open(r.p, path, &r.file);
	if (rc == 0)
		rc = stat(path, &st) == 0 ? 0 : -errno;
	r.bufs = rc == 0 ? aligned_alloc(4096, (size_t)(chunk * inflight)) : NULL;
	if (rc == 0 && r.bufs == NULL)
		rc = -ENOMEM;
	double t0 = now_s(), mbs = rc;
	if (rc == 0) {
		*name = keel_preload_engine_name(r.p);
		r.size = (uint64_t)st.st_size;
		for (uint32_t s = 0; s < inflight; s++)
			queue_next(&r, s);
		while (keel_preload_pending(r.p) > 0 && r.failed == 0)
			if ((rc = keel_preload_poll(r.p)) < 0)
				r.failed = rc;
		mbs = r.failed != 0 ? r.failed : r.size / (now_s() - t0) / 1e6;
	}
	if (r.p != NULL)
		keel_preload_fini(r.p);
	free(r.bufs);
	free(mem);
	return mbs;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void preload_usage(FILE *f)
{
	fprintf(f,
		"usage: keel-bench preload FILE [CHUNK [INFLIGHT]]\n"
		"Read FILE whole in CHUNK-byte ranges (1..1G, K, M, G suffixes; default 1M),\n"
		"INFLIGHT at a time (1..%u, default 16), through the pre-load executor with\n"
		"io_uring and then pread, three times each; MB/s of each run and the median.\n",
		KEEL_PRELOAD_READS_MAX);
	cli_exit_codes(f, NULL);
}

/* argv[0] is "preload"; a mistake exits 2 (cli.h), a missing FILE before anything else. */
static const char *preload_args(int argc, char **argv, uint64_t *chunk, uint64_t *inflight)
{
	struct cli c = {.tool = "keel-bench", .usage = preload_usage, .argc = argc, .argv = argv};
	(void)cli_next(&c); /* no options but --help and --version: any other is unknown */
	int n = argc - c.next;
	if (n < 1 || n > 3)
		cli_usage_error("keel-bench", "preload FILE [CHUNK [INFLIGHT]] (see 'keel-bench "
					      "preload --help')");
	const char *path = argv[c.next];
	cli_check_file("keel-bench", "preload", path);
	const char *ch = n > 1 ? argv[c.next + 1] : NULL, *in = n > 2 ? argv[c.next + 2] : NULL;
	if (ch != NULL && (keel_size_arg(ch, chunk) != 0 || *chunk == 0 || *chunk > (1u << 30)))
		cli_usage_error("keel-bench",
				"preload CHUNK: '%s' is not a size in 1..1073741824 (K, M, G "
				"suffixes)",
				ch);
	if (in != NULL && cli_parse_uint(in, 1, KEEL_PRELOAD_READS_MAX, inflight) != 0)
		cli_bad_uint("keel-bench", "preload INFLIGHT", in, 1, KEEL_PRELOAD_READS_MAX);
	return path;
}

int keel_bench_preload(int argc, char **argv)
{
	uint64_t chunk = 1u << 20, inflight = 16;
	const char *path = preload_args(argc, argv, &chunk, &inflight);
	static const enum keel_preload_engine engines[2] = {KEEL_PRELOAD_AUTO, KEEL_PRELOAD_PREAD};
	for (int e = 0; e < 2; e++) {
		double v[3];
		const char *name = "?";
		for (int k = 0; k < 3; k++) {
			v[k] = one_pass(path, engines[e], chunk, (uint32_t)inflight, &name);
			if (v[k] < 0) {
				fprintf(stderr, "keel-bench preload: %s: %s\n", path,
					keel_strerror((int)v[k]));
				return 1;
			}
		}
		printf(
		    "preload %-8s chunk %llu, %llu in flight: %.0f %.0f %.0f MB/s, median %.0f\n",
		    name, (unsigned long long)chunk, (unsigned long long)inflight, v[0], v[1], v[2],
		    (qsort(v, 3, sizeof(v[0]), cmp_double), v[1]));
	}
	return 0;
}
