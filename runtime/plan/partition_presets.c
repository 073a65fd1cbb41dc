/* GPU and link presets for the planner, with the figures' sources. Only constants and lookups:
 * every figure can be overridden in struct keel_worker. */
#include <strings.h>

#include "assert_int.h"
#include "keel/partition.h"

#define TFLOPS 1e12
#define GB     1000000000ull

/* Dense FP16/BF16 tensor-core peak (the datasheets' "with sparsity" figures are twice these):
 * - V100: NVIDIA Tesla V100 GPU datasheet (SXM2): "Deep Learning 125 teraFLOPS", 16/32 GB HBM2,
 *   NVLink 300 GB/s (NVLink 2).
 * - A100: NVIDIA A100 Tensor Core GPU datasheet (SXM): BF16/FP16 Tensor Core 312 TFLOPS (624
 *   with sparsity), 40 GB HBM2 / 80 GB HBM2e, NVLink 600 GB/s (NVLink 3).
 * - H100: NVIDIA H100 Tensor Core GPU datasheet (SXM): BF16/FP16 Tensor Core 1,979 TFLOPS with
 *   sparsity, i.e. 989 dense; 80 GB HBM3; NVLink 900 GB/s (NVLink 4).
 * - H200: NVIDIA H200 Tensor Core GPU datasheet (SXM): same compute as H100 (989 dense),
 *   141 GB HBM3e, NVLink 900 GB/s.
 * - MI300X: AMD Instinct MI300X accelerator datasheet: FP16/BF16 1,307.4 TFLOPS dense,
 *   192 GB HBM3, AMD Infinity Fabric links (7 x 128 GB/s = 896 GB/s peer to peer). */
static const struct keel_gpu_preset gpu_presets[KEEL_GPU_COUNT] = {
    [KEEL_GPU_V100_16] = {"V100-16", 125 * TFLOPS, 16 * GB, KEEL_LINK_NVLINK2},
    [KEEL_GPU_V100_32] = {"V100-32", 125 * TFLOPS, 32 * GB, KEEL_LINK_NVLINK2},
    [KEEL_GPU_A100_40] = {"A100-40", 312 * TFLOPS, 40 * GB, KEEL_LINK_NVLINK3},
    [KEEL_GPU_A100_80] = {"A100-80", 312 * TFLOPS, 80 * GB, KEEL_LINK_NVLINK3},
    [KEEL_GPU_H100] = {"H100", 989 * TFLOPS, 80 * GB, KEEL_LINK_NVLINK4},
    [KEEL_GPU_H200] = {"H200", 989 * TFLOPS, 141 * GB, KEEL_LINK_NVLINK4},
    [KEEL_GPU_MI300X] = {"MI300X", 1307.4 * TFLOPS, 192 * GB, KEEL_LINK_XGMI},
};

/* Bandwidth per direction. NVLink totals above are bidirectional, so per direction is half:
 * NVLink 2/3/4 = 150/300/450 GB/s; Infinity Fabric 896/2 = 448 GB/s. InfiniBand (NVIDIA
 * ConnectX-5/6/7 product briefs): EDR 100, HDR 200, NDR 400 Gb/s per port = 12.5/25/50 GB/s.
 * Ethernet: IEEE 802.3 line rates 25/100/400 Gb/s = 3.125/12.5/50 GB/s.
 * Latencies are typical small-message figures, not datasheet values: about 2 us through NVLink
 * (NCCL/CUDA peer copy launch), 1.5 us for InfiniBand verbs, 5-20 us for kernel TCP over
 * Ethernet (RoCE is lower). Treat them as estimates and override with measurements. */
static const struct keel_link_preset link_presets[KEEL_LINK_COUNT] = {
    [KEEL_LINK_NVLINK2] = {"nvlink2", 150e9, 2e-6},
    [KEEL_LINK_NVLINK3] = {"nvlink3", 300e9, 2e-6},
    [KEEL_LINK_NVLINK4] = {"nvlink4", 450e9, 2e-6},
    [KEEL_LINK_XGMI] = {"xgmi", 448e9, 2e-6},
    [KEEL_LINK_IB_EDR] = {"ib-edr", 12.5e9, 1.5e-6},
    [KEEL_LINK_IB_HDR] = {"ib-hdr", 25e9, 1.5e-6},
    [KEEL_LINK_IB_NDR] = {"ib-ndr", 50e9, 1.5e-6},
    [KEEL_LINK_ETH_25G] = {"eth-25g", 3.125e9, 20e-6},
    [KEEL_LINK_ETH_100G] = {"eth-100g", 12.5e9, 10e-6},
    [KEEL_LINK_ETH_400G] = {"eth-400g", 50e9, 10e-6},
};

const struct keel_gpu_preset *keel_gpu_preset_get(enum keel_gpu gpu)
{
	if ((unsigned)gpu >= KEEL_GPU_COUNT)
		return NULL;
	return &gpu_presets[gpu];
}

const struct keel_link_preset *keel_link_preset_get(enum keel_link link)
{
	if ((unsigned)link >= KEEL_LINK_COUNT)
		return NULL;
	return &link_presets[link];
}

int keel_gpu_preset_find(const char *name)
{
	KEEL_ASSERT(name != NULL);
	for (int i = 0; i < KEEL_GPU_COUNT; i++)
		if (strcasecmp(name, gpu_presets[i].name) == 0)
			return i;
	return -ENOENT;
}

int keel_link_preset_find(const char *name)
{
	KEEL_ASSERT(name != NULL);
	for (int i = 0; i < KEEL_LINK_COUNT; i++)
		if (strcasecmp(name, link_presets[i].name) == 0)
			return i;
	return -ENOENT;
}

void keel_worker_from_preset(struct keel_worker *w, uint64_t id, enum keel_gpu gpu,
			     enum keel_link link)
{
	KEEL_ASSERT(w != NULL);
	KEEL_ASSERT((unsigned)gpu < KEEL_GPU_COUNT && (unsigned)link < KEEL_LINK_COUNT);
	const struct keel_gpu_preset *g = &gpu_presets[gpu];
	const struct keel_link_preset *l = &link_presets[link];
	*w = (struct keel_worker){
	    .id = id,
	    .type = (uint32_t)gpu,
	    .rate = g->rate_flops,
	    .mem_bytes = g->mem_bytes,
	    .link = link,
	    .bw_Bps = l->bw_Bps,
	    .lat_s = l->lat_s,
	};
}

double keel_worker_rate(const struct keel_worker *w)
{
	KEEL_ASSERT(w != NULL);
	return w->measured_rate > 0 ? w->measured_rate : w->rate;
}
