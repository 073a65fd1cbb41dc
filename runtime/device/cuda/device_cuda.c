/* The CUDA device (keel/device_cuda.h): one stream per device, a pool of events naming the
 * work queued on it, the reduction kernels of reduce_kernels.cu. Never blocks in the ops
 * (cudaEventQuery, async copies, kernel launches); CUDA allocates only inside init (stream,
 * events) and in the test helpers keel_device_cuda_alloc/copy_sync. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "assert_int.h"
#include "keel/device_cuda.h"
#include "reduce_kernels_int.h"

struct slot {
	cudaEvent_t ev;
	uint32_t gen;
	bool used;
};

struct region {
	uint8_t *host;
	uint8_t *dev; /* its device alias (cudaHostGetDevicePointer) */
	size_t bytes;
};

struct cuda_dev {
	struct keel_device_cuda_config cfg;
	cudaStream_t stream;
	bool stream_made;
	uint32_t events_made;
	struct region regions[KEEL_DEVICE_CUDA_REGIONS_MAX];
	/* a NIC's writes into device memory: 0 ordered by the GPU, 1 flushed by the host
	 * (cudaDeviceFlushGPUDirectRDMAWrites), -EOPNOTSUPP neither (keel_device_cuda_gdr_writes) */
	int nic_writes;
	struct slot *slots; /* inflight_max */
};

_Static_assert(KEEL_DEVICE_CUDA_INFLIGHT_MAX <= 256, "a slot index fits a ticket's low byte");

static uint32_t inflight_of(const struct keel_device_cuda_config *cfg)
{
	return cfg->inflight_max != 0 ? cfg->inflight_max : 64u;
}

size_t keel_device_cuda_storage_size(const struct keel_device_cuda_config *cfg)
{
	if (cfg == NULL || inflight_of(cfg) > KEEL_DEVICE_CUDA_INFLIGHT_MAX || cfg->ordinal < 0)
		return 0;
	return sizeof(struct cuda_dev) + inflight_of(cfg) * sizeof(struct slot);
}

/* CUDA's errors as keel's: the device is gone or broken -> -EIO. */
static int from_cuda(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInvalidValue:
		return -EINVAL;
	case cudaErrorNoDevice:
	case cudaErrorInvalidDevice:
	case cudaErrorInsufficientDriver:
		return -ENODEV;
	default:
		return -EIO;
	}
}

static struct slot *take_slot(struct cuda_dev *d, uint32_t *ticket)
{
	for (uint32_t i = 0; i < inflight_of(&d->cfg); i++) {
		struct slot *s = &d->slots[i];
		if (s->used)
			continue;
		s->used = true;
		s->gen = (s->gen + 1) & 0xffffffu;
		*ticket = s->gen << 8 | i;
		return s;
	}
	return NULL;
}

/* Record the slot's event behind the work just queued; a failure releases the slot. */
static int record(struct cuda_dev *d, struct slot *s, cudaError_t queued)
{
	if (queued == cudaSuccess)
		queued = cudaEventRecord(s->ev, d->stream);
	if (queued != cudaSuccess) {
		s->used = false;
		return from_cuda(queued);
	}
	return 0;
}

static int cuda_copy(void *state, void *dst, const void *src, size_t bytes, enum keel_copy_dir dir,
		     uint32_t *ticket)
{
	static const enum cudaMemcpyKind kinds[KEEL_COPY_DIR_COUNT] = {
	    [KEEL_COPY_D2H] = cudaMemcpyDeviceToHost,
	    [KEEL_COPY_H2D] = cudaMemcpyHostToDevice,
	    [KEEL_COPY_D2D] = cudaMemcpyDeviceToDevice,
	};
	struct cuda_dev *d = state;
	if (d == NULL || dst == NULL || src == NULL || bytes == 0 || ticket == NULL ||
	    (unsigned)dir >= KEEL_COPY_DIR_COUNT)
		return -EINVAL;
	struct slot *s = take_slot(d, ticket);
	if (s == NULL)
		return -EAGAIN;
	return record(d, s, cudaMemcpyAsync(dst, src, bytes, kinds[dir], d->stream));
}

/* The device alias of registered host memory; ptr itself when it is device memory. */
static const void *device_alias(const struct cuda_dev *d, const void *ptr)
{
	const uint8_t *p = ptr;
	for (uint32_t i = 0; i < KEEL_DEVICE_CUDA_REGIONS_MAX; i++) {
		const struct region *g = &d->regions[i];
		if (g->host != NULL && p >= g->host && p < g->host + g->bytes)
			return g->dev + (p - g->host);
	}
	return ptr;
}

static int cuda_reduce(void *state, const struct keel_device_reduce *r, uint32_t *ticket)
{
	struct cuda_dev *d = state;
	if (d == NULL || r == NULL || ticket == NULL || r->dst == NULL || r->a == NULL ||
	    r->b == NULL || r->count == 0 || (unsigned)r->dtype >= KEEL_DTYPE_COUNT ||
	    (unsigned)r->op >= KEEL_REDOP_COUNT)
		return -EINVAL;
	struct slot *s = take_slot(d, ticket);
	if (s == NULL)
		return -EAGAIN;
	void *mirror = r->mirror != NULL ? (void *)device_alias(d, r->mirror) : NULL;
	int rc = cuda_reduce_launch(r->dst, device_alias(d, r->a), device_alias(d, r->b), mirror,
				    r->count, r->dtype, r->op, r->divisor, d->stream);
	return record(d, s, (cudaError_t)rc);
}

static int cuda_test(void *state, uint32_t ticket)
{
	struct cuda_dev *d = state;
	uint32_t i = ticket & 0xffu;
	if (d == NULL || i >= inflight_of(&d->cfg) || !d->slots[i].used ||
	    d->slots[i].gen != ticket >> 8)
		return -EINVAL;
	cudaError_t e = cudaEventQuery(d->slots[i].ev);
	if (e == cudaErrorNotReady)
		return -EINPROGRESS;
	d->slots[i].used = false;
	return e == cudaSuccess ? 0 : -EIO;
}

static int cuda_register(void *state, void *mem, size_t bytes)
{
	struct cuda_dev *d = state;
	if (d == NULL || mem == NULL || bytes == 0)
		return -EINVAL;
	for (uint32_t i = 0; i < KEEL_DEVICE_CUDA_REGIONS_MAX; i++) {
		struct region *g = &d->regions[i];
		if (g->host != NULL)
			continue;
		cudaError_t e =
		    cudaHostRegister(mem, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
		if (e != cudaSuccess)
			return e == cudaErrorHostMemoryAlreadyRegistered ? -EINVAL : from_cuda(e);
		void *alias = NULL;
		e = cudaHostGetDevicePointer(&alias, mem, 0);
		if (e != cudaSuccess) {
			(void)cudaHostUnregister(mem);
			return from_cuda(e);
		}
		*g = (struct region){.host = mem, .dev = alias, .bytes = bytes};
		return 0;
	}
	return -ENOMEM;
}

static int cuda_unregister(void *state, void *mem)
{
	struct cuda_dev *d = state;
	if (d == NULL || mem == NULL)
		return -EINVAL;
	for (uint32_t i = 0; i < KEEL_DEVICE_CUDA_REGIONS_MAX; i++) {
		if (d->regions[i].host == mem) {
			d->regions[i] = (struct region){0};
			return from_cuda(cudaHostUnregister(mem));
		}
	}
	return -EINVAL;
}

static void cuda_fini(void *state)
{
	struct cuda_dev *d = state;
	if (d == NULL)
		return;
	if (d->stream_made)
		(void)cudaStreamSynchronize(d->stream);
	for (uint32_t i = 0; i < d->events_made; i++)
		(void)cudaEventDestroy(d->slots[i].ev);
	d->events_made = 0;
	if (d->stream_made)
		(void)cudaStreamDestroy(d->stream);
	d->stream_made = false;
}

static bool cuda_ordered(void *state)
{
	(void)state;
	return true; /* every copy and kernel goes on the one stream */
}

static int cuda_nic_writes_visible(void *state)
{
	struct cuda_dev *d = state;
	if (d == NULL)
		return -EINVAL;
	if (d->nic_writes != 1)
		return d->nic_writes;
	return from_cuda(cudaDeviceFlushGPUDirectRDMAWrites(
	    cudaFlushGPUDirectRDMAWritesTargetCurrentDevice, cudaFlushGPUDirectRDMAWritesToOwner));
}

/* How this GPU makes a NIC's writes visible to its kernels: ordered (nothing to do), or a
 * flush the host asks for; an attribute the driver does not know counts as neither. */
static int nic_writes_of(int ordinal)
{
	int ordering = 0, options = 0;
	if (cudaDeviceGetAttribute(&ordering, cudaDevAttrGPUDirectRDMAWritesOrdering, ordinal) !=
	    cudaSuccess)
		ordering = cudaGPUDirectRDMAWritesOrderingNone;
	if (cudaDeviceGetAttribute(&options, cudaDevAttrGPUDirectRDMAFlushWritesOptions,
				   ordinal) != cudaSuccess)
		options = 0;
	(void)cudaGetLastError(); /* a refused query leaves nothing behind */
	if (ordering >= cudaGPUDirectRDMAWritesOrderingOwner)
		return 0;
	return (options & cudaFlushGPUDirectRDMAWritesOptionHost) != 0 ? 1 : -EOPNOTSUPP;
}

static const struct keel_device_ops cuda_ops = {
    .name = "cuda",
    .copy = cuda_copy,
    .reduce = cuda_reduce,
    .test = cuda_test,
    .host_register = cuda_register,
    .host_unregister = cuda_unregister,
    .fini = cuda_fini,
    .nic_writes_visible = cuda_nic_writes_visible,
    .ordered = cuda_ordered,
};

int keel_device_cuda_init(struct keel_device *dev, void *mem, size_t mem_len,
			  const struct keel_device_cuda_config *cfg)
{
	if (dev == NULL || keel_device_cuda_storage_size(cfg) == 0)
		return -EINVAL;
	size_t need = keel_device_cuda_storage_size(cfg);
	if (mem == NULL || mem_len < need)
		return -ENOSPC;
	memset(mem, 0, need);
	struct cuda_dev *d = mem;
	d->cfg = *cfg;
	d->slots = (struct slot *)(d + 1);
	dev->ops = &cuda_ops;
	dev->state = d;
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || cfg->ordinal >= count)
		return e == cudaSuccess ? -ENODEV : from_cuda(e);
	e = cudaSetDevice(cfg->ordinal);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking);
	d->stream_made = e == cudaSuccess;
	for (uint32_t i = 0; e == cudaSuccess && i < inflight_of(cfg); i++) {
		e = cudaEventCreateWithFlags(&d->slots[i].ev, cudaEventDisableTiming);
		d->events_made += e == cudaSuccess;
	}
	if (e == cudaSuccess)
		d->nic_writes = nic_writes_of(cfg->ordinal);
	return from_cuda(e);
}

int keel_device_cuda_gdr_writes(const struct keel_device *dev)
{
	if (dev == NULL || dev->ops != &cuda_ops)
		return -EINVAL;
	return ((const struct cuda_dev *)dev->state)->nic_writes;
}

int keel_device_cuda_describe(const struct keel_device *dev, char *name, size_t name_len,
			      double *hbm_peak_bps)
{
	if (dev == NULL || dev->ops != &cuda_ops || name == NULL || name_len == 0 ||
	    hbm_peak_bps == NULL)
		return -EINVAL;
	const struct cuda_dev *d = dev->state;
	struct cudaDeviceProp p;
	int clock_khz = 0, bus_bits = 0;
	cudaError_t e = cudaGetDeviceProperties(&p, d->cfg.ordinal);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, d->cfg.ordinal);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth,
					   d->cfg.ordinal);
	if (e != cudaSuccess)
		return from_cuda(e);
	snprintf(name, name_len, "%s", p.name);
	/* double data rate: two transfers per memory clock */
	*hbm_peak_bps = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0);
	return 0;
}

int keel_device_cuda_alloc(const struct keel_device *dev, void **ptr, size_t bytes)
{
	if (dev == NULL || dev->ops != &cuda_ops || ptr == NULL || bytes == 0)
		return -EINVAL;
	return from_cuda(cudaMalloc(ptr, bytes));
}

void keel_device_cuda_free(const struct keel_device *dev, void *ptr)
{
	KEEL_ASSERT(dev != NULL && dev->ops == &cuda_ops);
	if (ptr != NULL)
		(void)cudaFree(ptr);
}

int keel_device_cuda_copy_sync(const struct keel_device *dev, void *dst, const void *src,
			       size_t bytes, enum keel_copy_dir dir)
{
	static const enum cudaMemcpyKind kinds[KEEL_COPY_DIR_COUNT] = {
	    [KEEL_COPY_D2H] = cudaMemcpyDeviceToHost,
	    [KEEL_COPY_H2D] = cudaMemcpyHostToDevice,
	    [KEEL_COPY_D2D] = cudaMemcpyDeviceToDevice,
	};
	if (dev == NULL || dev->ops != &cuda_ops || (unsigned)dir >= KEEL_COPY_DIR_COUNT)
		return -EINVAL;
	/* On keel's stream, then wait for it: ordered after the work queued there, and done on
	 * return. cudaMemcpy would run on the legacy stream, which a non-blocking stream does
	 * not wait for, and from pageable memory it returns before the DMA lands: an AllReduce
	 * started right after it read the old input (seen on an H200, 4 ranks, 4 B to 1 MiB). */
	const struct cuda_dev *d = dev->state;
	cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kinds[dir], d->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(d->stream);
	return from_cuda(e);
}

/* The driver's export, found through the runtime (no -lcuda: a static binary carries only
 * libcudart_static.a, and the driver is there or not at run time). */
typedef CUresult (*get_handle_fn)(void *handle, CUdeviceptr dptr, size_t size,
				  CUmemRangeHandleType type, unsigned long long flags);

int keel_device_cuda_dmabuf(const struct keel_device *dev, void *ptr, size_t bytes, int *fd,
			    uint64_t *offset)
{
	const size_t gpu_page = 64u << 10;
	if (dev == NULL || dev->ops != &cuda_ops || ptr == NULL || bytes == 0 || fd == NULL ||
	    offset == NULL || (uintptr_t)ptr % gpu_page != 0 || bytes % gpu_page != 0)
		return -EINVAL;
	void *fn = NULL;
	enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
	cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn,
							 12000, cudaEnableDefault, &found);
	if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == NULL)
		return -ENOTSUP;
	int out = -1;
	CUresult r = ((get_handle_fn)fn)(&out, (CUdeviceptr)(uintptr_t)ptr, bytes,
					 CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
	if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_DEVICE)
		return -ENOTSUP;
	if (r != CUDA_SUCCESS || out < 0)
		return -EINVAL;
	*fd = out;
	*offset = 0; /* the export starts at ptr */
	return 0;
}
