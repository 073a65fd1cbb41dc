/* GPU readings through NVML (gpu_nvml.c) for the /metrics text. Private to the start-up
 * library (runtime/boot/boot_metrics.c reads them); never loads NVML unless metrics are on. */
#ifndef KEEL_GPU_NVML_H
#define KEEL_GPU_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GPUs seen through NVML (libnvidia-ml.so.1, loaded with dlopen when metrics are on). */
#define KEEL_NVML_GPUS_MAX 64u
struct keel_nvml {
	void *lib;
	uint32_t count;
	void *dev[KEEL_NVML_GPUS_MAX];
	void *utilization, *memory, *shutdown; /* NVML functions (dlsym), typed in gpu_nvml.c */
};
struct keel_nvml_reading {
	uint32_t utilization_pct; /* 0..100, over the driver's last sample period */
	uint64_t memory_used_bytes, memory_total_bytes;
};
/* Load NVML and find the GPUs. 0, or -ENOENT (no library: no driver), -EIO (NVML failed or
 * sees no GPU) with the reason in why. g is zeroed first; keel_nvml_close is safe after either. */
int keel_nvml_open(struct keel_nvml *g, char *why, size_t why_len);
/* GPU i now; false when NVML cannot say (the GPU fell off the bus, a driver reload). */
bool keel_nvml_read(const struct keel_nvml *g, uint32_t i, struct keel_nvml_reading *out);
void keel_nvml_close(struct keel_nvml *g);

#endif
