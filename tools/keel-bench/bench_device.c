/* keel-bench --device cpu|cuda: device buffers and staging for the device AllReduce. The CUDA
 * device is referenced weakly: a keel-bench linked without libkeel_cuda.a says so. */
#include "bench_device.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/device_cpu.h"
#include "keel/device_cuda.h"

#pragma weak keel_device_cuda_storage_size
#pragma weak keel_device_cuda_init
#pragma weak keel_device_cuda_describe
#pragma weak keel_device_cuda_alloc
#pragma weak keel_device_cuda_free
#pragma weak keel_device_cuda_copy_sync
#pragma weak keel_device_cuda_dmabuf

static bool is_cuda(const struct bench_device *d)
{
	return strcmp(d->kind, "cuda") == 0;
}

/* CUDA's ordinal for this rank: LOCAL_RANK (torchrun, keel-run) over the GPUs seen. */
static int cuda_open(struct bench_device *d, char *err, size_t err_len)
{
	if (keel_device_cuda_init == NULL) {
		snprintf(err, err_len,
			 "--device cuda: keel-bench was built without CUDA (nvcc "
			 "not found when it was built)");
		return -ENOTSUP;
	}
	const char *lr = getenv("LOCAL_RANK");
	struct keel_device_cuda_config cfg = {.ordinal = lr != NULL ? atoi(lr) : 0};
	size_t sz = keel_device_cuda_storage_size(&cfg);
	d->dev_mem = sz != 0 ? calloc(1, sz) : NULL;
	int rc =
	    d->dev_mem == NULL ? -ENOMEM : keel_device_cuda_init(&d->dev, d->dev_mem, sz, &cfg);
	if (rc == -ENODEV && cfg.ordinal != 0) { /* fewer GPUs than local ranks: share GPU 0 */
		d->dev.ops->fini(d->dev.state);
		cfg.ordinal = 0;
		rc = keel_device_cuda_init(&d->dev, d->dev_mem, sz, &cfg);
	}
	double peak = 0;
	if (rc == 0)
		rc = keel_device_cuda_describe(&d->dev, d->name, sizeof(d->name), &peak);
	if (rc == 0)
		rc = keel_device_cuda_alloc(&d->dev, &d->d_in, d->cap);
	if (rc == 0)
		rc = keel_device_cuda_alloc(&d->dev, &d->d_out, d->cap);
	if (rc != 0)
		snprintf(err, err_len, "--device cuda: %s", keel_strerror(rc));
	return rc;
}

static int cpu_open(struct bench_device *d, char *err, size_t err_len)
{
	struct keel_device_cpu_config cfg;
	keel_device_cpu_config_default(&cfg);
	cfg.delay_tests = 0; /* as soon as it is asked: the pipeline's own cost is measured */
	cfg.jitter_tests = 0;
	size_t sz = keel_device_cpu_storage_size(&cfg);
	d->dev_mem = calloc(1, sz);
	int rc = d->dev_mem == NULL ? -ENOMEM : keel_device_cpu_init(&d->dev, d->dev_mem, sz, &cfg);
	/* device memory the CPU cannot touch: a pipeline that reads it on the host faults here */
	if (rc == 0)
		rc = guarded_mem_map(&d->g_in, &d->dev, d->cap);
	if (rc == 0)
		rc = guarded_mem_map(&d->g_out, &d->dev, d->cap);
	d->d_in = d->g_in.view;
	d->d_out = d->g_out.view;
	snprintf(d->name, sizeof(d->name), "CPU stand-in");
	if (rc != 0)
		snprintf(err, err_len, "--device cpu: %s", keel_strerror(rc));
	return rc;
}

int bench_device_open(struct bench_device *d, const char *kind, size_t cap, char *err,
		      size_t err_len)
{
	memset(d, 0, sizeof(*d));
	d->kind = kind;
	d->cap = cap;
	if (strcmp(kind, "cpu") != 0 && strcmp(kind, "cuda") != 0) {
		snprintf(err, err_len, "--device '%s': cpu or cuda", kind);
		return -EINVAL;
	}
	int rc = is_cuda(d) ? cuda_open(d, err, err_len) : cpu_open(d, err, err_len);
	if (rc != 0)
		return rc;
	/* Stage for the largest message: input copy and output mirror, whole pages (what
	 * aligned_alloc requires, and what a registration pins anyway). */
	d->stage_bytes = (2 * cap + 4095) & ~(size_t)4095;
	d->stage = aligned_alloc(4096, d->stage_bytes);
	rc = d->stage == NULL ? -ENOMEM
			      : d->dev.ops->host_register(d->dev.state, d->stage, d->stage_bytes);
	if (rc != 0)
		snprintf(err, err_len, "--device %s: registering %zu bytes of staging: %s", kind,
			 d->stage_bytes, keel_strerror(rc));
	return rc;
}

/* The stand-in's working mapping of device address p (in d_in's or d_out's view). */
static uint8_t *cpu_reach(struct bench_device *d, const void *p)
{
	const uint8_t *x = p;
	const struct guarded_mem *g =
	    x >= d->g_out.view && x < d->g_out.view + d->g_out.bytes ? &d->g_out : &d->g_in;
	return g->work + (x - g->view);
}

int bench_device_put(struct bench_device *d, void *dst_dev, const void *src, size_t bytes)
{
	if (!is_cuda(d)) {
		memcpy(cpu_reach(d, dst_dev), src, bytes);
		return 0;
	}
	return keel_device_cuda_copy_sync(&d->dev, dst_dev, src, bytes, KEEL_COPY_H2D);
}

int bench_device_get(struct bench_device *d, void *dst, const void *src_dev, size_t bytes)
{
	if (!is_cuda(d)) {
		memcpy(dst, cpu_reach(d, src_dev), bytes);
		return 0;
	}
	return keel_device_cuda_copy_sync(&d->dev, dst, src_dev, bytes, KEEL_COPY_D2H);
}

int bench_device_dmabuf(struct bench_device *d, void *buf, int *fd, uint64_t *offset, bool *owned)
{
	*owned = is_cuda(d);
	if (!is_cuda(d)) {
		*fd = buf == d->d_in ? d->g_in.fd : d->g_out.fd;
		*offset = 0;
		return 0;
	}
	if (keel_device_cuda_dmabuf == NULL)
		return -EOPNOTSUPP;
	return keel_device_cuda_dmabuf(&d->dev, buf, d->cap, fd, offset);
}

int bench_device_area(struct bench_device *d, size_t bytes, void **area, int *fd, uint64_t *offset,
		      bool *owned)
{
	*owned = is_cuda(d);
	if (!is_cuda(d)) {
		int rc = guarded_mem_map(&d->g_area, &d->dev, bytes);
		if (rc != 0)
			return rc;
		d->area = *area = d->g_area.view;
		*fd = d->g_area.fd;
		*offset = 0;
		return 0;
	}
	if (keel_device_cuda_dmabuf == NULL)
		return -EOPNOTSUPP;
	int rc = keel_device_cuda_alloc(&d->dev, &d->area, bytes);
	if (rc != 0)
		return rc;
	*area = d->area;
	return keel_device_cuda_dmabuf(&d->dev, d->area, bytes, fd, offset);
}

void bench_device_close(struct bench_device *d)
{
	if (d->stage != NULL && d->dev.ops != NULL)
		(void)d->dev.ops->host_unregister(d->dev.state, d->stage);
	free(d->stage);
	if (is_cuda(d) && d->dev.ops != NULL) {
		keel_device_cuda_free(&d->dev, d->d_in);
		keel_device_cuda_free(&d->dev, d->d_out);
		if (d->area != NULL)
			keel_device_cuda_free(&d->dev, d->area);
	} else {
		(void)guarded_mem_unmap(&d->g_in); /* the operations ended: nothing queued */
		(void)guarded_mem_unmap(&d->g_out);
		if (d->area != NULL)
			(void)guarded_mem_unmap(&d->g_area);
	}
	if (d->dev.ops != NULL)
		d->dev.ops->fini(d->dev.state);
	free(d->dev_mem);
	memset(d, 0, sizeof(*d));
}
