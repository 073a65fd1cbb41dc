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

int keel_bench_preload(int argc, char **argv)
{
	uint64_t chunk = 1u << 20, inflight = 16;
	if (argc < 2 || argc > 4 || (argc > 2 && keel_size_arg(argv[2], &chunk) != 0) ||
	    (argc > 3 && keel_size_arg(argv[3], &inflight) != 0) || chunk == 0 ||
	    chunk > (1u << 30) || inflight == 0 || inflight > KEEL_PRELOAD_READS_MAX) {
		fprintf(stderr,
			"usage: keel-bench preload FILE [CHUNK (1M) [INFLIGHT (16), 1..%u]]\n",
			KEEL_PRELOAD_READS_MAX);
		return 2;
	}
	static const enum keel_preload_engine engines[2] = {KEEL_PRELOAD_AUTO, KEEL_PRELOAD_PREAD};
	for (int e = 0; e < 2; e++) {
		double v[3];
		const char *name = "?";
		for (int k = 0; k < 3; k++) {
			v[k] = one_pass(argv[1], engines[e], chunk, (uint32_t)inflight, &name);
			if (v[k] < 0) {
				fprintf(stderr, "keel-bench preload: %s: %s\n", argv[1],
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
