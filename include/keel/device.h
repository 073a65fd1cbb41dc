/* Devices (GPUs) as the collectives see them: a const ops table, like a transport's, that
 * queues copies and reductions and says when each finished. Nothing here blocks: the engine
 * polls from keel_poll. Implementations: CUDA (keel/device_cuda.h, libkeel_cuda.a) and a CPU
 * stand-in with the same contract on host memory (keel/device_cpu.h). */
#ifndef KEEL_DEVICE_H
#define KEEL_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct keel_node;
struct keel_op;

/* Which side of a copy is device memory. */
enum keel_copy_dir {
	KEEL_COPY_D2H = 0, /* device -> host (staging) */
	KEEL_COPY_H2D,	   /* host (staging) -> device */
	KEEL_COPY_D2D,
	KEEL_COPY_DIR_COUNT,
};

/* One reduction: dst[i] = a[i] op b[i] for i < count, then, when `divisor` is not 0 (the
 * last step of a KEEL_AVG), dst[i] /= divisor in the dtype's accumulation precision.
 * dst is device memory; a is device memory (may equal dst) or registered host memory; b is
 * registered host memory (a received chunk), or device memory (a chunk the NIC wrote there,
 * GPUDirect RDMA). When `mirror` is not NULL (registered host
 * memory, may equal b) it receives the same values as dst, so the host can forward them.
 * Regions do not overlap except dst == a and mirror == b; each is aligned to its element size
 * (a GPU cannot load a misaligned element). Results are those of keel_reduce
 * (keel/reduce.h): bit for bit for integers, min and max; floats within the tolerance
 * docs/guide/gpu.md states. */
struct keel_device_reduce {
	void *dst;
	const void *a;
	const void *b;
	void *mirror;
	size_t count;
	enum keel_dtype dtype;
	enum keel_redop op;
	uint32_t divisor;
};

/* The ops a device provides. Work is queued and runs asynchronously; work queued earlier may
 * finish after work queued later (the engine never queues two pieces of work that touch the
 * same bytes at once), unless the device says it is ordered. A ticket names one piece of work until
 * test() has said 0 or an error for it once; it is then released. */
struct keel_device_ops {
	const char *name;
	/* Queue a copy of `bytes` from src to dst (host memory must be registered). Never
	 * blocks. 0 and *ticket on success; -EAGAIN when inflight_max pieces of work are queued
	 * (nothing queued: test() some, then retry); -EINVAL (bad direction, NULL, 0 bytes);
	 * -EIO (the device refused it; the device is unusable). */
	int (*copy)(void *state, void *dst, const void *src, size_t bytes, enum keel_copy_dir dir,
		    uint32_t *ticket);
	/* Queue a reduction (struct keel_device_reduce). Never blocks; errors as copy. */
	int (*reduce)(void *state, const struct keel_device_reduce *r, uint32_t *ticket);
	/* Has the work of `ticket` finished? Never blocks. 0: done and its writes are visible to
	 * the host (the ticket is released); -EINPROGRESS; -EIO: it failed (released). */
	int (*test)(void *state, uint32_t ticket);
	/* Register caller memory as staging: pinned and mapped for the device (CUDA:
	 * cudaHostRegister). keel never allocates staging; the caller registers once at start
	 * and unregisters before freeing. 0, -EINVAL, -ENOMEM (the driver could not pin it),
	 * -EIO. */
	int (*host_register)(void *state, void *mem, size_t bytes);
	int (*host_unregister)(void *state, void *mem);
	/* Release what init took (streams, events). Safe after a failed init. */
	void (*fini)(void *state);
	/* GPUDirect RDMA into device memory (a device area): make what a NIC wrote there, whose
	 * completion the host has seen, visible to device work queued after this call. A NIC's
	 * writes cross PCIe as posted writes, and on some GPUs a kernel may still read older
	 * bytes after the completion arrived (NCCL's "GDR flush"). keel calls it once per
	 * received burst that holds such payloads. May block briefly. NULL: nothing needed.
	 * 0; -EOPNOTSUPP: this device can neither order nor flush such writes (keel then
	 * refuses it a device area); -EIO: the device is unusable. */
	int (*nic_writes_visible)(void *state);
	/* Does work finish in the order it was queued (CUDA: one stream)? Then nothing queued
	 * after an unfinished piece has finished either, and the engine stops testing at the
	 * first unfinished piece of each queue (each test() is a driver call). NULL: no. */
	bool (*ordered)(void *state);
};

/* A device: its ops and its private state (in caller memory, from its init). */
struct keel_device {
	const struct keel_device_ops *ops;
	void *state;
};

/* May a NIC write into this device's memory (a device area for GPUDirect RDMA of what is
 * received)? false when its nic_writes_visible says -EOPNOTSUPP (asking it flushes nothing
 * there is to flush), or dev is NULL. keel_boot_register_device_area asks it. */
bool keel_device_takes_nic_writes(const struct keel_device *dev);

/* Staging an AllReduce on device buffers needs: the host copy of the input (which stays
 * untouched, so a view change restarts from it even in place) and the host mirror of the
 * output the network reads, count x dtype size bytes each. 0 when count is 0 or too large. */
size_t keel_allreduce_device_stage_bytes(size_t count, enum keel_dtype dtype);

/* Start an AllReduce of `count` elements whose `send` and `recv` are device memory of the
 * node's device (keel_config.device); they may be the same buffer (in place) or must not
 * overlap. `stage` is registered host memory of at least keel_allreduce_device_stage_bytes.
 * All three are aligned to the element size (cudaMalloc and page-aligned memory are).
 * The engine copies the input it sends to the stage in chunks of device_chunk_bytes (out of
 * place only those bytes, a ring's own chunk; the kernels read the input in device memory;
 * in place all of it), sends from it,
 * reduces each received chunk on the device into `recv` (a kernel that reads the chunk from
 * the stage and mirrors its result there), and forwards from the mirror: copy, network and
 * reduction overlap. The ring, recursive doubling and the hierarchy run as on the host, with
 * the same guarantees: a view change restarts from the staged input (in place too); the
 * result is the reduction over exactly the view keel_op_test_info reports. send, recv and
 * stage must stay valid until the operation completes.
 * Streams: keel's device work runs on its own stream, which waits for no other. `send` must
 * hold its values when start is called (synchronize the stream or event of the work that
 * wrote it first), and `recv` may be read, by any stream or the host, once keel_op_test
 * returned 0: no keel work on it is left queued then.
 * GPUDirect RDMA: where a buffer lies in a dma-buf registration of the verbs transport
 * (keel_boot_register_dmabuf) and the way to every other member of the view is that
 * transport, in a job without a key, the NIC reads what keel sends from it: the input out of
 * place (not staged at all; the kernels read it there too), and the sums a ring forwards from
 * `recv` (the kernel mirrors none to the stage). Each such datagram carries a CRC over its
 * header only (the CPU never reads the payload; RC's ICRC checks it end to end).
 * keel_op_test then reports the operation only once every datagram that read device memory
 * was acknowledged. Should a peer's way lose that NIC meanwhile (a router falling back to
 * UDP), the device copies the payloads still unsent to the stage and they go from there.
 * keel_counters says how many went each way (device_direct_frags, device_copy_ins). Where the
 * receiver registered a device area (keel_boot_register_device_area), such payloads of an
 * operation out of place land in its device memory and the kernels read them there
 * (device_rx_frags); one the device cannot take at once is sent again (drop_device_later). In
 * place they land in host memory (KEEL_DGRAM_HOST_LANDING): there a step's data often comes
 * before the receiver may use it, and only the host window can hold it. Anything else is
 * staged as above, results and guarantees the same.
 * Errors: those of keel_allreduce_start, and -EINVAL also when the node has no device, stage
 * is NULL or shorter than needed, or overlaps send or recv, or a buffer is misaligned. keel_op_test
 * then also returns KEEL_EDEVICE when the device failed a piece of the work (that rank's GPU is
 * unusable: its peers see it stall, as they would see a rank die). */
KEEL_MUST_USE int keel_allreduce_device_start(struct keel_node *node, const void *send, void *recv,
					      size_t count, enum keel_dtype dtype,
					      enum keel_redop op, void *stage, size_t stage_bytes,
					      struct keel_op **handle);

/* Start, then poll and wait with cfg.waiter until done; returns like keel_op_test. */
KEEL_MUST_USE int keel_allreduce_device(struct keel_node *node, const void *send, void *recv,
					size_t count, enum keel_dtype dtype, enum keel_redop op,
					void *stage, size_t stage_bytes);

#ifdef __cplusplus
}
#endif

#endif
