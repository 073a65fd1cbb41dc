/* gpu-check: the CUDA device on a real GPU. (1) Every dtype x op x boundary size (and
 * unaligned buffers) through the device's reduce op, with random bit patterns (NaNs, -0,
 * subnormals, infinities included) and the mirror, against keel_reduce on the CPU, bit for
 * bit; the one allowed difference is a NaN's payload from a float sum, prod or avg (both
 * sides NaN), counted apart. (2) keel_device_cuda_copy_sync ordered with keel's stream both
 * ways. (3) The kernel's bandwidth on device memory against the HBM peak. (4) Host<->device
 * copy rates through registered memory, which bound the staging pipeline. Exits 77 when no
 * GPU is visible; 1 on any failure. tools/gpu-check.sh runs it. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "keel/device_cuda.h"
#include "keel/reduce.h"

static struct keel_device g_dev;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	g_rng ^= g_rng >> 12;
	g_rng ^= g_rng << 25;
	g_rng ^= g_rng >> 27;
	return g_rng * 2685821657736338717ull;
}

/* Poll a ticket to its end; the device's verdict. */
static int wait_ticket(uint32_t t)
{
	int rc;
	while ((rc = g_dev.ops->test(g_dev.state, t)) == -EINPROGRESS)
		;
	return rc;
}

static void fill_random(uint8_t *p, size_t bytes)
{
	for (size_t i = 0; i < bytes; i++)
		p[i] = (uint8_t)rnd();
}

static bool is_nan(enum keel_dtype dt, const uint8_t *p)
{
	uint64_t v = 0;
	memcpy(&v, p, keel_dtype_size(dt)); /* little-endian: the element in the low bits */
	switch (dt) {
	case KEEL_F32:
		return (v & 0x7fffffffu) > 0x7f800000u;
	case KEEL_F64:
		return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
	case KEEL_F16:
		return (v & 0x7fffu) > 0x7c00u;
	case KEEL_BF16:
		return (v & 0x7fffu) > 0x7f80u;
	default:
		return false;
	}
}

/* Does the device's element differ from the CPU's? Not when both are NaN from a float sum,
 * prod or avg: which NaN an arithmetic op returns is the hardware's (the GPU's f32 units give
 * their one canonical NaN, a CPU the input's payload), and docs/guide/gpu.md allows it.
 * Those are counted in *nan_payloads. min and max pick a NaN by keel's rule: bit for bit. */
static int differs(enum keel_dtype dt, enum keel_redop op, const uint8_t *got, const uint8_t *ref,
		   size_t *nan_payloads)
{
	size_t es = keel_dtype_size(dt);
	if (memcmp(got, ref, es) == 0)
		return 0;
	if (op != KEEL_MIN && op != KEEL_MAX && is_nan(dt, got) && is_nan(dt, ref)) {
		if (nan_payloads != NULL)
			(*nan_payloads)++;
		return 0;
	}
	return 1;
}

/* One element's bits in hex, most significant first, in one of four static buffers. */
static const char *hex(const uint8_t *p, size_t es, int which)
{
	static char out[4][20];
	char *o = out[which];
	o[0] = 0;
	for (size_t k = es; k-- > 0;)
		snprintf(o + strlen(o), sizeof(out[0]) - strlen(o), "%02x", p[k]);
	return o;
}

/* Integers and products of random bits overflow: fine, they wrap alike. avg divides by 3. */
static int check_one(enum keel_dtype dt, enum keel_redop op, size_t count, size_t skew,
		     uint8_t *stage, uint8_t *d_buf, size_t *nan_payloads)
{
	size_t es = keel_dtype_size(dt), bytes = count * es;
	uint8_t *a = stage + skew, *b = stage + skew + bytes + 64, *mirror = b;
	uint8_t *ref = malloc(bytes), *got = malloc(bytes), *b0 = malloc(bytes);
	uint32_t divisor = op == KEEL_AVG ? 3 : 0;
	fill_random(a, bytes);
	fill_random(b, bytes);
	memcpy(b0, b, bytes);
	keel_reduce(ref, a, b, count, dt, op);
	if (divisor != 0)
		keel_reduce_finish_avg(ref, count, dt, divisor);
	uint8_t *dst = d_buf + skew;
	int rc = keel_device_cuda_copy_sync(&g_dev, dst, a, bytes, KEEL_COPY_H2D);
	struct keel_device_reduce r = {.dst = dst,
				       .a = dst,
				       .b = b,
				       .mirror = mirror,
				       .count = count,
				       .dtype = dt,
				       .op = op,
				       .divisor = divisor};
	uint32_t t = 0;
	if (rc == 0)
		rc = g_dev.ops->reduce(g_dev.state, &r, &t);
	if (rc == 0)
		rc = wait_ticket(t);
	if (rc == 0)
		rc = keel_device_cuda_copy_sync(&g_dev, got, dst, bytes, KEEL_COPY_D2H);
	size_t wrong = 0, wrong_mirror = 0, first = count;
	for (size_t i = 0; rc == 0 && i < count; i++) {
		int w = differs(dt, op, got + i * es, ref + i * es, nan_payloads);
		wrong += w;
		wrong_mirror += differs(dt, op, mirror + i * es, ref + i * es, NULL);
		first = w && first == count ? i : first;
	}
	if (rc != 0 || wrong != 0 || wrong_mirror != 0) {
		printf("FAIL kernel %s %s count %zu offset %zu: rc %d, %zu wrong, %zu wrong in the "
		       "mirror\n",
		       keel_dtype_name(dt), keel_redop_name(op), count, skew, rc, wrong,
		       wrong_mirror);
		if (first < count) /* b held the chunk until the mirror overwrote it: b0 */
			printf("  first at %zu: a %s b %s, cpu %s gpu %s\n", first,
			       hex(a + first * es, es, 0), hex(b0 + first * es, es, 1),
			       hex(ref + first * es, es, 2), hex(got + first * es, es, 3));
	}
	free(ref);
	free(got);
	free(b0);
	return rc != 0 || wrong != 0 || wrong_mirror != 0;
}

static int check_kernels(void)
{
	static const size_t counts[] = {1,   2,	  3,   7,    8,	   9,	 15,	16,    17,
					255, 256, 257, 4095, 4096, 4097, 65535, 65536, 1000003};
	size_t max_bytes = 1000003 * 8 + 4096;
	uint8_t *stage = aligned_alloc(4096, 2 * max_bytes + 4096);
	void *d_buf = NULL;
	int rc = stage == NULL ? -ENOMEM
			       : g_dev.ops->host_register(g_dev.state, stage, 2 * max_bytes + 4096);
	if (rc == 0)
		rc = keel_device_cuda_alloc(&g_dev, &d_buf, max_bytes);
	if (rc != 0) {
		printf("FAIL buffers: %s\n", keel_strerror(rc));
		return 1;
	}
	int failed = 0, cases = 0;
	size_t nan_payloads = 0;
	for (int dt = 0; dt < KEEL_DTYPE_COUNT; dt++)
		for (int op = 0; op < KEEL_REDOP_COUNT; op++)
			for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
				for (size_t skew = 0; skew <= 1; skew++) {
					/* 16-byte aligned (vector loads), then one element off */
					failed +=
					    check_one(dt, op, counts[c], skew * keel_dtype_size(dt),
						      stage, d_buf, &nan_payloads);
					cases++;
				}
	printf("kernels: %d cases (7 dtypes x 5 ops x %zu sizes x aligned/unaligned, random "
	       "bits), %d differ from keel_reduce\n",
	       cases, sizeof(counts) / sizeof(counts[0]), failed);
	if (failed == 0)
		printf("kernels: bit-identical to the CPU for every dtype and op, but for %zu NaNs "
		       "of float sum/prod/avg whose payload differs (NaN on both)\n",
		       nan_payloads);
	keel_device_cuda_free(&g_dev, d_buf);
	(void)g_dev.ops->host_unregister(g_dev.state, stage);
	free(stage);
	return failed != 0;
}

/* keel_device_cuda_copy_sync against keel's stream, both ways, at sizes where a copy from
 * pageable memory may return before its DMA lands: (1) a copy_sync into device memory, then
 * at once a queued D2H copy of it, which must see the new bytes (keel-bench fills an
 * AllReduce's input so); (2) a queued reduction into device memory, not waited for, then a
 * copy_sync out of it, which must see the reduction's result. */
static int check_ordering(void)
{
	static const size_t sizes[] = {4, 64, 4096, 65536, 1u << 20, 8u << 20};
	const size_t max = 8u << 20;
	const int rounds = 20;
	uint8_t *src = malloc(max), *back = malloc(max); /* pageable, as a program's buffers */
	uint8_t *stage = aligned_alloc(4096, 2 * max);
	void *d = NULL;
	int rc = src == NULL || back == NULL || stage == NULL
		     ? -ENOMEM
		     : g_dev.ops->host_register(g_dev.state, stage, 2 * max);
	if (rc == 0)
		rc = keel_device_cuda_alloc(&g_dev, &d, max);
	if (rc != 0) {
		printf("FAIL ordering buffers: %s\n", keel_strerror(rc));
		return 1;
	}
	uint8_t *ones = stage + max;
	memset(ones, 1, max);
	size_t stale_in = 0, stale_out = 0, cases = 0;
	for (int round = 0; round < rounds && rc == 0; round++)
		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]) && rc == 0; k++) {
			size_t bytes = sizes[k];
			uint32_t t = 0;
			fill_random(src, bytes);
			rc = keel_device_cuda_copy_sync(&g_dev, d, src, bytes, KEEL_COPY_H2D);
			if (rc == 0)
				rc = g_dev.ops->copy(g_dev.state, stage, d, bytes, KEEL_COPY_D2H,
						     &t);
			if (rc == 0)
				rc = wait_ticket(t);
			stale_in += rc == 0 && memcmp(stage, src, bytes) != 0;
			struct keel_device_reduce r = {.dst = d,
						       .a = d,
						       .b = ones,
						       .count = bytes,
						       .dtype = KEEL_U8,
						       .op = KEEL_SUM};
			if (rc == 0)
				rc = g_dev.ops->reduce(g_dev.state, &r, &t);
			if (rc == 0)
				rc = keel_device_cuda_copy_sync(&g_dev, back, d, bytes,
								KEEL_COPY_D2H);
			if (rc == 0)
				rc = wait_ticket(t);
			for (size_t i = 0; rc == 0 && i < bytes; i++)
				if (back[i] != (uint8_t)(src[i] + 1)) {
					stale_out++;
					break;
				}
			cases++;
		}
	printf("copy_sync ordered with keel's stream: %zu cases (%d rounds x %zu sizes, 4 B to "
	       "8 MiB), %zu read an old input, %zu missed queued work%s%s\n",
	       cases, rounds, sizeof(sizes) / sizeof(sizes[0]), stale_in, stale_out,
	       rc != 0 ? ": " : "", rc != 0 ? keel_strerror(rc) : "");
	(void)g_dev.ops->host_unregister(g_dev.state, stage);
	keel_device_cuda_free(&g_dev, d);
	free(stage);
	free(src);
	free(back);
	return rc != 0 || stale_in != 0 || stale_out != 0;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

/* How this GPU makes a NIC's writes visible to its kernels (GPUDirect RDMA of what is
 * received), and what keel's flush per received burst costs here (median of 201). */
static int report_nic_writes(void)
{
	enum { N = 201 };
	int mode = keel_device_cuda_gdr_writes(&g_dev);
	double t[N];
	for (int i = 0; i < N; i++) {
		double t0 = now_s();
		int rc = g_dev.ops->nic_writes_visible(g_dev.state);
		t[i] = (now_s() - t0) * 1e6;
		if (rc != 0 && rc != -EOPNOTSUPP) {
			printf("FAIL GPUDirect RDMA writes: nic_writes_visible: %s\n",
			       keel_strerror(rc));
			return 1;
		}
	}
	qsort(t, N, sizeof(t[0]), cmp_double);
	printf("GPUDirect RDMA writes into device memory: %s, %.2f us per call of "
	       "nic_writes_visible\n",
	       mode == 0   ? "ordered by the GPU (no flush)"
	       : mode == 1 ? "flushed by keel once per received burst "
			     "(cudaDeviceFlushGPUDirectRDMAWrites)"
			   : "neither ordered nor flushable (no device area)",
	       t[N / 2]);
	return 0;
}

/* One small piece of work from queue to done, as the pipeline sees each step of a small
 * AllReduce: the median of 201 (microseconds), or -1. */
static double call_latency_us(bool reduce, void *dev4, uint8_t *host)
{
	enum { N = 201 };
	double t[N];
	struct keel_device_reduce r = {
	    .dst = dev4, .a = dev4, .b = host, .count = 1, .dtype = KEEL_F32, .op = KEEL_SUM};
	for (int i = 0; i < N; i++) {
		uint32_t ticket = 0;
		double t0 = now_s();
		int rc = reduce
			     ? g_dev.ops->reduce(g_dev.state, &r, &ticket)
			     : g_dev.ops->copy(g_dev.state, host, dev4, 4, KEEL_COPY_D2H, &ticket);
		if (rc != 0 || wait_ticket(ticket) != 0)
			return -1;
		t[i] = (now_s() - t0) * 1e6;
	}
	qsort(t, N, sizeof(t[0]), cmp_double);
	return t[N / 2];
}

/* Seconds per call of `reps` reductions (or copies) on the device, queued back to back. */
static double time_reps(int reps, const struct keel_device_reduce *r, void *dst, const void *src,
			size_t bytes, enum keel_copy_dir dir)
{
	uint32_t t[64];
	double t0 = now_s();
	for (int i = 0; i < reps; i++) {
		int rc = r != NULL ? g_dev.ops->reduce(g_dev.state, r, &t[i % 64])
				   : g_dev.ops->copy(g_dev.state, dst, src, bytes, dir, &t[i % 64]);
		if (rc != 0 || (i % 64 == 63 && wait_ticket(t[63]) != 0))
			return -1;
		if (i % 64 == 63)
			for (int k = 0; k < 63; k++)
				(void)wait_ticket(t[k]);
	}
	for (int k = 0; k < reps % 64; k++)
		(void)wait_ticket(t[k]);
	return (now_s() - t0) / reps;
}

static int measure(double hbm_peak)
{
	const size_t bytes = 256u << 20;
	void *a = NULL, *b = NULL, *dst = NULL;
	uint8_t *host = aligned_alloc(4096, bytes);
	int rc = keel_device_cuda_alloc(&g_dev, &a, bytes);
	if (rc == 0)
		rc = keel_device_cuda_alloc(&g_dev, &b, bytes);
	if (rc == 0)
		rc = keel_device_cuda_alloc(&g_dev, &dst, bytes);
	if (rc == 0 && host != NULL)
		rc = g_dev.ops->host_register(g_dev.state, host, bytes);
	if (rc != 0 || host == NULL) {
		printf("FAIL measuring buffers: %s\n", keel_strerror(rc));
		return 1;
	}
	struct keel_device_reduce r = {
	    .dst = dst, .a = a, .b = b, .count = bytes / 4, .dtype = KEEL_F32, .op = KEEL_SUM};
	(void)time_reps(3, &r, NULL, NULL, 0, KEEL_COPY_D2D); /* warm up */
	double k = time_reps(20, &r, NULL, NULL, 0, KEEL_COPY_D2D);
	struct keel_device_reduce rh = r;
	rh.b = host; /* the received chunk read from registered host memory, as the pipeline does */
	rh.mirror = host;
	double kh = time_reps(5, &rh, NULL, NULL, 0, KEEL_COPY_D2D);
	double d2h = time_reps(10, NULL, host, a, bytes, KEEL_COPY_D2H);
	double h2d = time_reps(10, NULL, a, host, bytes, KEEL_COPY_H2D);
	printf("kernel f32 sum, device memory: %.1f GB/s (3 x 256 MiB per call) = %.0f %% of the "
	       "HBM peak %.1f GB/s\n",
	       3.0 * bytes / k / 1e9, 100.0 * 3.0 * bytes / k / hbm_peak, hbm_peak / 1e9);
	printf("kernel f32 sum, chunk in host memory (the pipeline's reduction): %.1f GB/s of "
	       "chunk\n",
	       bytes / kh / 1e9);
	printf("copies through registered host memory: D2H %.1f GB/s, H2D %.1f GB/s\n",
	       bytes / d2h / 1e9, bytes / h2d / 1e9);
	double lc = call_latency_us(false, a, host), lr = call_latency_us(true, a, host);
	printf("device call, queued to done (median of 201, one process on the GPU): copy of 4 B "
	       "D2H %.1f us, reduction of one f32 %.1f us\n",
	       lc, lr);
	(void)g_dev.ops->host_unregister(g_dev.state, host);
	free(host);
	keel_device_cuda_free(&g_dev, a);
	keel_device_cuda_free(&g_dev, b);
	keel_device_cuda_free(&g_dev, dst);
	return k > 0 && kh > 0 && d2h > 0 && h2d > 0 && lc > 0 && lr > 0 ? 0 : 1;
}

int main(void)
{
	struct keel_device_cuda_config cfg = {.ordinal = 0, .inflight_max = 64};
	size_t sz = keel_device_cuda_storage_size(&cfg);
	void *mem = calloc(1, sz);
	int rc = keel_device_cuda_init(&g_dev, mem, sz, &cfg);
	if (rc == -ENODEV) {
		printf("gpu-check: no GPU visible (%s): skipped\n", keel_strerror(rc));
		g_dev.ops->fini(g_dev.state);
		return 77;
	}
	char name[128] = "";
	double peak = 0;
	if (rc == 0)
		rc = keel_device_cuda_describe(&g_dev, name, sizeof(name), &peak);
	if (rc != 0) {
		printf("gpu-check: CUDA device: %s\n", keel_strerror(rc));
		return 1;
	}
	printf("gpu-check: %s\n", name);
	int failed = check_kernels();
	failed |= check_ordering();
	failed |= measure(peak);
	failed |= report_nic_writes();
	int fd = -1;
	uint64_t off = 0;
	void *d = NULL;
	if (keel_device_cuda_alloc(&g_dev, &d, 2u << 20) == 0) {
		rc = keel_device_cuda_dmabuf(&g_dev, d, 2u << 20, &fd, &off);
		printf("GPUDirect dma-buf export: %s\n", rc == 0	  ? "yes"
							 : rc == -ENOTSUP ? "not supported here"
									  : keel_strerror(rc));
		if (rc == 0)
			close(fd);
		keel_device_cuda_free(&g_dev, d);
	}
	g_dev.ops->fini(g_dev.state);
	free(mem);
	return failed ? 1 : 0;
}
