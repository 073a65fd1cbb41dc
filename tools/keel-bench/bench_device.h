/* keel-bench --device: the device AllReduce's buffers live on a GPU (cuda) or on the CPU
 * stand-in (cpu), with a registered stage; results are copied back to check them. */
#ifndef KEEL_BENCH_DEVICE_H
#define KEEL_BENCH_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "guarded_mem.h"
#include "keel/device.h"

struct bench_device {
	const char *kind; /* "cpu" or "cuda" */
	struct keel_device dev;
	void *dev_mem;
	void *d_in, *d_out; /* device buffers */
	/* cpu: d_in and d_out fault when the CPU touches them, as a GPU's would */
	struct guarded_mem g_in, g_out, g_area;
	void *area;  /* the transport's device area (GPUDirect RDMA of what is received), or NULL */
	void *stage; /* registered host memory */
	size_t stage_bytes, cap;
	char name[128]; /* the GPU's, for the header */
};

/* Open the device `kind` and allocate buffers of `cap` bytes. 0, or an error with `err` set
 * (e.g. "keel-bench was built without CUDA"). */
int bench_device_open(struct bench_device *d, const char *kind, size_t cap, char *err,
		      size_t err_len);
/* Copy host <-> the device buffers (blocking; checks only). The stand-in's buffers are
 * reached through their working mapping: keel never touches them from the CPU. */
int bench_device_put(struct bench_device *d, void *dst_dev, const void *src, size_t bytes);
int bench_device_get(struct bench_device *d, void *dst, const void *src_dev, size_t bytes);
/* A device buffer (d_in or d_out) as a dma-buf, for the NIC to read it (GPUDirect RDMA):
 * *fd and *offset for keel_boot_register_dmabuf. cpu: the guarded memfd (kept open); cuda:
 * exported by the driver (*owned set: close it once registered). -EOPNOTSUPP when the driver
 * cannot. */
int bench_device_dmabuf(struct bench_device *d, void *buf, int *fd, uint64_t *offset, bool *owned);
/* Device memory of `bytes` for the verbs transport's device area, as a dma-buf (*fd and
 * *offset as bench_device_dmabuf gives them; *owned: close it once registered). It stays
 * until bench_device_close, which comes after the transport's end. -EOPNOTSUPP when the
 * driver cannot export it. */
int bench_device_area(struct bench_device *d, size_t bytes, void **area, int *fd, uint64_t *offset,
		      bool *owned);
void bench_device_close(struct bench_device *d);

#endif
