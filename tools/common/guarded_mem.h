/* Device memory that faults when the host touches it: one memfd mapped twice, the program's
 * view without access and a working view with it, registered with the CPU stand-in
 * (keel_device_cpu_guard) when one is given. Tests and keel-bench --device cpu hand keel
 * `view` and read or fill what the "device" holds through `work`; the memfd stays open as the
 * region's dma-buf, for a NIC (the fake verbs provider) to map as an importer would. */
#ifndef KEEL_GUARDED_MEM_H
#define KEEL_GUARDED_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "keel/device.h"

struct guarded_mem {
	uint8_t *view;		       /* device addresses: PROT_NONE */
	uint8_t *work;		       /* the same pages, readable and writable */
	size_t bytes;		       /* rounded up to whole pages */
	int fd;			       /* the memfd: the region's dma-buf (offset 0 is view[0]) */
	const struct keel_device *dev; /* NULL: no stand-in guards it */
};

/* Map at least `bytes` (> 0) and guard them with dev (a CPU stand-in, or NULL). 0 or a
 * -errno. */
int guarded_mem_map(struct guarded_mem *g, const struct keel_device *dev, size_t bytes);
/* Unguard, unmap and close; 0, or the stand-in's -EBUSY (work still queued: nothing
 * unmapped). */
int guarded_mem_unmap(struct guarded_mem *g);

#endif
