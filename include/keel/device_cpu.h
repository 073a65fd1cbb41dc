/* The CPU stand-in device: the contract of keel/device.h on host memory, so the device
 * pipeline runs in ordinary tests and on machines without a GPU. Work is held until it
 * "finishes" a seeded number of test() calls later, and only then takes effect, so finishing
 * out of order and late are both exercised; a chosen piece of work can fail. "Device memory"
 * is any host memory outside the registered staging regions (the stand-in checks that every
 * copy and reduction reads and writes the side its direction names); memory the program
 * guards (keel_device_cpu_guard) faults when the CPU touches it, as a GPU's would. */
#ifndef KEEL_DEVICE_CPU_H
#define KEEL_DEVICE_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "keel/device.h"
#include "keel/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KEEL_DEVICE_CPU_INFLIGHT_MAX 256u /* pieces of work queued at once */
#define KEEL_DEVICE_CPU_REGIONS_MAX  16u  /* registered staging regions */
#define KEEL_DEVICE_CPU_GUARDS_MAX   16u  /* guarded device regions (keel_device_cpu_guard) */

struct keel_device_cpu_config {
	uint32_t inflight_max; /* 1..KEEL_DEVICE_CPU_INFLIGHT_MAX; more: copy/reduce -EAGAIN */
	/* A piece of work finishes once the device has seen delay_tests + uniform[0,
	 * jitter_tests] test() calls (for any ticket) since it was queued. jitter > 0: work
	 * finishes out of order. */
	uint32_t delay_tests, jitter_tests;
	uint64_t seed;
	/* The fail_at-th piece of work queued (1-based) fails: test() says -EIO for it and it
	 * has no effect. 0: none fails. */
	uint32_t fail_at;
	/* What nic_writes_visible returns (each call is counted in stats.nic_flushes): 0, or
	 * -EOPNOTSUPP (a GPU that can neither order nor flush a NIC's writes) or -EIO, so those
	 * paths can be tested. The stand-in's memory needs no flush either way. */
	int nic_writes_rc;
	/* Work finishes in queue order, as on one CUDA stream (ops->ordered says so): a piece
	 * is done only once it is due and all work queued before it was reported done. */
	bool in_order;
};

/* inflight_max 64, delay 2, jitter 4, seed 1, no failure. */
void keel_device_cpu_config_default(struct keel_device_cpu_config *cfg);

size_t keel_device_cpu_storage_size(const struct keel_device_cpu_config *cfg);
/* Errors: -EINVAL (inflight_max out of range, nic_writes_rc not one of the three, NULL), -ENOSPC
 * (mem NULL or smaller than keel_device_cpu_storage_size). */
KEEL_MUST_USE int keel_device_cpu_init(struct keel_device *dev, void *mem, size_t mem_len,
				       const struct keel_device_cpu_config *cfg);

/* Device memory the host cannot touch, as a GPU's (cudaMalloc memory faults on a CPU load):
 * `view` is what the program hands keel as device memory, mapped without access (PROT_NONE),
 * so that any load or store by the CPU faults; `work` maps the same pages with access, and the
 * stand-in's copies and reductions go through it. The caller maps both (a memfd mapped twice)
 * and reads or fills what the device holds through `work`, as it would with cudaMemcpy. A
 * device address inside a view must lie wholly inside it; memory in no view and outside the
 * registered stages still counts as device memory, unguarded. Errors: -EINVAL (dev not a CPU
 * stand-in, NULL, 0 bytes, view equal to work, or overlapping a view or a registered stage),
 * -ENOSPC (KEEL_DEVICE_CPU_GUARDS_MAX views already). */
KEEL_MUST_USE int keel_device_cpu_guard(const struct keel_device *dev, void *view, void *work,
					size_t bytes);
/* Forget the view starting at `view` (unmap it only after): 0, -ENOENT (no such view),
 * -EBUSY (queued work still reads or writes it), -EINVAL (dev not a CPU stand-in, NULL). */
KEEL_MUST_USE int keel_device_cpu_unguard(const struct keel_device *dev, void *view);

struct keel_device_cpu_stats {
	uint64_t copies, reductions, bytes;
	uint64_t finished_out_of_order; /* finished while older work was still queued */
	uint64_t refused_full;		/* -EAGAIN: inflight_max queued */
	uint64_t failed;
	uint64_t nic_flushes;	 /* nic_writes_visible calls */
	uint32_t used, used_max; /* pieces queued now, and at most */
};
void keel_device_cpu_stats(const struct keel_device *dev, struct keel_device_cpu_stats *out);

#ifdef __cplusplus
}
#endif

#endif
