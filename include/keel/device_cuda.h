/* The CUDA device (libkeel_cuda.a, built when nvcc is found): one stream, a pool of events,
 * reduction kernels for every dtype and op. Copies are cudaMemcpyAsync on the stream; a
 * reduction reads the received chunk straight from registered (mapped) host memory. Link
 * with libcudart_static.a (pkg-config keel-cuda). No header of CUDA's is needed to use it. */
#ifndef KEEL_DEVICE_CUDA_H
#define KEEL_DEVICE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "keel/device.h"
#include "keel/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KEEL_DEVICE_CUDA_INFLIGHT_MAX 256u /* events: pieces of work queued at once */
#define KEEL_DEVICE_CUDA_REGIONS_MAX  16u  /* registered staging regions */

struct keel_device_cuda_config {
	int ordinal;	       /* the GPU (cudaSetDevice); the polling thread uses it */
	uint32_t inflight_max; /* 1..KEEL_DEVICE_CUDA_INFLIGHT_MAX (0: 64) */
};

size_t keel_device_cuda_storage_size(const struct keel_device_cuda_config *cfg);
/* Creates the stream and events (CUDA allocates inside, at init only). Errors: -EINVAL,
 * -ENOSPC (mem too small), -ENODEV (no such GPU, or no driver), -EIO (CUDA failed). After a
 * failure *dev is unusable; its fini is still safe. */
KEEL_MUST_USE int keel_device_cuda_init(struct keel_device *dev, void *mem, size_t mem_len,
					const struct keel_device_cuda_config *cfg);

/* The GPU's name and its HBM peak (bytes/s, from clock and bus width), for reports.
 * -EINVAL for a device that is not CUDA's. */
KEEL_MUST_USE int keel_device_cuda_describe(const struct keel_device *dev, char *name,
					    size_t name_len, double *hbm_peak_bps);

/* Device memory for tests and tools (cudaMalloc/cudaFree: not used by keel itself), and
 * blocking copies to fill inputs and check results: queued on keel's stream behind the work
 * already there, complete on return (host memory may be pageable). 0 or -ENOMEM / -EIO. */
KEEL_MUST_USE int keel_device_cuda_alloc(const struct keel_device *dev, void **ptr, size_t bytes);
void keel_device_cuda_free(const struct keel_device *dev, void *ptr);
KEEL_MUST_USE int keel_device_cuda_copy_sync(const struct keel_device *dev, void *dst,
					     const void *src, size_t bytes, enum keel_copy_dir dir);

/* GPUDirect RDMA: a dma-buf file descriptor for device memory [ptr, ptr + bytes), for
 * keel_boot_register_dmabuf and keel_boot_register_device_area (the verbs transport then
 * registers it with ibv_reg_dmabuf_mr; docs/guide/gpu.md). ptr and bytes must be multiples
 * of the GPU page (64 KiB). *offset is ptr's offset in the exported buffer. Errors: -ENOTSUP (the
 * driver cannot export dma-bufs: older than 515, or the kernel lacks CONFIG_DMABUF_MOVE_NOTIFY),
 * -EINVAL. The caller closes the fd after registering it. */
KEEL_MUST_USE int keel_device_cuda_dmabuf(const struct keel_device *dev, void *ptr, size_t bytes,
					  int *fd, uint64_t *offset);

/* How this GPU makes what a NIC wrote into its memory visible to its kernels (GPUDirect RDMA
 * of what is received, keel/device.h nic_writes_visible): 0 the GPU orders such writes itself;
 * 1 keel flushes them (cudaDeviceFlushGPUDirectRDMAWrites) once per received burst that holds
 * some; -EOPNOTSUPP neither, and keel_boot_register_device_area refuses such a device. -EINVAL
 * for a device that is not CUDA's. */
KEEL_MUST_USE int keel_device_cuda_gdr_writes(const struct keel_device *dev);

#ifdef __cplusplus
}
#endif

#endif
