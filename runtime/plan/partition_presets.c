/* The one table of hardware presets (GPUs and links) that the planner, keel-plan and keel-sim
 * share, each figure with its public source. Only constants and lookups: no I/O, no allocation;
 * every figure can be overridden per worker, and tools describe other parts themselves. */
#include <strings.h>

#include "assert_int.h"
#include "keel/partition.h"

#define TFLOPS 1e12
#define GB     1000000000ull

/* Compute is the dense BF16 tensor-core peak: the datasheets mostly print the "with sparsity"
 * figure, twice the dense one. Memory as the datasheet states it (decimal GB). Where a source
 * leaves doubt, `source` says so: docs/keel-plan.md's table prints it. */
static const struct keel_gpu_preset gpu_presets[KEEL_GPU_COUNT] = {
    [KEEL_GPU_V100_16] = {"V100-16", 125 * TFLOPS, 16 * GB, KEEL_LINK_NVLINK2,
			  "NVIDIA Tesla V100 datasheet (SXM2): 125 TFLOPS tensor; FP16, V100 "
			  "has no BF16; 16 GB HBM2; NVLink 300 GB/s"},
    [KEEL_GPU_V100_32] = {"V100-32", 125 * TFLOPS, 32 * GB, KEEL_LINK_NVLINK2,
			  "NVIDIA Tesla V100 datasheet (SXM2): 125 TFLOPS tensor; FP16, V100 "
			  "has no BF16; 32 GB HBM2; NVLink 300 GB/s"},
    [KEEL_GPU_A100_40] = {"A100-40", 312 * TFLOPS, 40 * GB, KEEL_LINK_NVLINK3,
			  "NVIDIA A100 Tensor Core GPU datasheet (SXM): BF16 312 TFLOPS (624 "
			  "sparse); 40 GB HBM2; NVLink 600 GB/s"},
    [KEEL_GPU_A100_80] = {"A100-80", 312 * TFLOPS, 80 * GB, KEEL_LINK_NVLINK3,
			  "NVIDIA A100 Tensor Core GPU datasheet (SXM): BF16 312 TFLOPS (624 "
			  "sparse); 80 GB HBM2e; NVLink 600 GB/s"},
    [KEEL_GPU_H100] = {"H100", 989 * TFLOPS, 80 * GB, KEEL_LINK_NVLINK4,
		       "NVIDIA H100 Tensor Core GPU datasheet (SXM): BF16 1,979 TFLOPS sparse, "
		       "989 dense; 80 GB HBM3; NVLink 900 GB/s"},
    [KEEL_GPU_H200] = {"H200", 989 * TFLOPS, 141 * GB, KEEL_LINK_NVLINK4,
		       "NVIDIA H200 Tensor Core GPU datasheet (SXM): BF16 1,979 TFLOPS sparse, "
		       "989 dense; 141 GB HBM3e; NVLink 900 GB/s"},
    [KEEL_GPU_B200] = {"B200", 2250 * TFLOPS, 180 * GB, KEEL_LINK_NVLINK5,
		       "NVIDIA DGX B200 datasheet / HGX B200 spec: BF16 4.5 PFLOPS per GPU with "
		       "sparsity (dense taken as half); 1,440 GB per 8 GPUs; NVLink 5 1.8 TB/s"},
    [KEEL_GPU_GB200] = {"GB200", 2500 * TFLOPS, 186 * GB, KEEL_LINK_NVLINK5,
			"NVIDIA GB200 NVL72 spec: BF16 10 PFLOPS per superchip (2 GPUs) with "
			"sparsity (dense taken as half); 13.4 TB HBM3e per 72 GPUs (unsure: "
			"earlier revisions said 384 GB per superchip); NVLink 5 1.8 TB/s"},
    [KEEL_GPU_MI300X] = {"MI300X", 1307.4 * TFLOPS, 192 * GB, KEEL_LINK_XGMI,
			 "AMD Instinct MI300X datasheet: FP16/BF16 1,307.4 TFLOPS dense; 192 GB "
			 "HBM3; Infinity Fabric 7 x 128 GB/s = 896 GB/s"},
    [KEEL_GPU_MI325X] = {"MI325X", 1307.4 * TFLOPS, 256 * GB, KEEL_LINK_XGMI,
			 "AMD Instinct MI325X datasheet: FP16/BF16 1,307.4 TFLOPS dense; 256 GB "
			 "HBM3E; Infinity Fabric 7 x 128 GB/s = 896 GB/s"},
    [KEEL_GPU_L40S] = {"L40S", 362.05 * TFLOPS, 48 * GB, KEEL_LINK_PCIE4,
		       "NVIDIA L40S datasheet: BF16 362.05 TFLOPS dense (733 sparse as printed); "
		       "48 GB GDDR6; PCIe Gen4 x16 64 GB/s, no NVLink"},
};

/* Bandwidth per direction: scale-up totals (NVLink, Infinity Fabric, PCIe) are printed for
 * both directions, so they are halved; NIC port rates are per direction already (Gb/s / 8).
 * Latencies are one-way small-message estimates (about 0.35 us per NVLink/fabric hop, two
 * hops through a switch; 1.5 us InfiniBand verbs; 2 us RoCE; kernel UDP/TCP over Ethernet
 * 7-20 us), not datasheet values: override them with measurements. */
static const struct keel_link_preset link_presets[KEEL_LINK_COUNT] = {
    [KEEL_LINK_NVLINK2] = {"nvlink2", 150e9, 0.7e-6, "NVLink 2, 300 GB/s both directions",
			   "NVIDIA Tesla V100 datasheet"},
    [KEEL_LINK_NVLINK3] = {"nvlink3", 300e9, 0.7e-6, "NVLink 3, 600 GB/s both directions",
			   "NVIDIA A100 datasheet"},
    [KEEL_LINK_NVLINK4] = {"nvlink4", 450e9, 0.7e-6, "NVLink 4, 900 GB/s both directions",
			   "NVIDIA H100 / H200 datasheets"},
    [KEEL_LINK_NVLINK5] = {"nvlink5", 900e9, 0.7e-6, "NVLink 5, 1.8 TB/s both directions",
			   "NVIDIA DGX B200 datasheet, GB200 NVL72 spec"},
    [KEEL_LINK_XGMI] = {"xgmi", 448e9, 0.7e-6, "AMD Infinity Fabric, 896 GB/s both directions",
			"AMD Instinct MI300X / MI325X datasheets (7 links x 128 GB/s)"},
    [KEEL_LINK_PCIE4] = {"pcie4", 32e9, 2e-6, "PCIe 4.0 x16, 64 GB/s both directions",
			 "NVIDIA L40S datasheet (PCIe Gen4 x16 64 GB/s); PCI-SIG PCIe 4.0"},
    [KEEL_LINK_PCIE5] = {"pcie5", 64e9, 2e-6, "PCIe 5.0 x16, 128 GB/s both directions",
			 "NVIDIA H100 PCIe datasheet (PCIe Gen5 128 GB/s); PCI-SIG PCIe 5.0"},
    [KEEL_LINK_IB_EDR] = {"ib-edr", 12.5e9, 1.5e-6, "EDR InfiniBand 100 Gb/s",
			  "NVIDIA ConnectX-5 product brief: 100 Gb/s per port"},
    [KEEL_LINK_IB_HDR] = {"ib-hdr", 25e9, 1.5e-6, "HDR InfiniBand 200 Gb/s",
			  "NVIDIA ConnectX-6 / Quantum HDR: 200 Gb/s per port"},
    [KEEL_LINK_IB_NDR] = {"ib-ndr", 50e9, 1.5e-6, "NDR InfiniBand 400 Gb/s",
			  "NVIDIA ConnectX-7 / Quantum-2 NDR: 400 Gb/s per port"},
    [KEEL_LINK_IB_XDR] = {"ib-xdr", 100e9, 1.5e-6, "XDR InfiniBand 800 Gb/s",
			  "NVIDIA ConnectX-8 SuperNIC / Quantum-X800: 800 Gb/s per port"},
    [KEEL_LINK_ROCE_100G] = {"roce-100g", 12.5e9, 2e-6, "RoCE v2 over 100 GbE",
			     "IEEE 802.3 100GBASE line rate; latency an estimate"},
    [KEEL_LINK_ROCE_200G] = {"roce-200g", 25e9, 2e-6, "RoCE v2 over 200 GbE",
			     "IEEE 802.3bs 200GBASE line rate; latency an estimate"},
    [KEEL_LINK_ROCE_400G] = {"roce-400g", 50e9, 2e-6, "RoCE v2 over 400 GbE",
			     "IEEE 802.3bs 400GBASE line rate; latency an estimate"},
    [KEEL_LINK_ETH_25G] = {"eth-25g", 3.125e9, 20e-6, "25 GbE, kernel UDP/TCP",
			   "IEEE 802.3by 25GBASE line rate"},
    [KEEL_LINK_ETH_100G] = {"eth-100g", 12.5e9, 7e-6, "100 GbE, kernel UDP/TCP",
			    "IEEE 802.3 100GBASE line rate"},
    [KEEL_LINK_ETH_400G] = {"eth-400g", 50e9, 7e-6, "400 GbE, kernel UDP/TCP",
			    "IEEE 802.3bs 400GBASE line rate"},
};

struct alias {
	const char *name;
	int to;
};

/* Short names keel-sim and older cluster files used. */
static const struct alias gpu_aliases[] = {
    {"V100", KEEL_GPU_V100_32},
    {"A100", KEEL_GPU_A100_80},
};
static const struct alias link_aliases[] = {
    {"ib", KEEL_LINK_IB_NDR},	    {"ndr", KEEL_LINK_IB_NDR},
    {"hdr", KEEL_LINK_IB_HDR},	    {"edr", KEEL_LINK_IB_EDR},
    {"xdr", KEEL_LINK_IB_XDR},	    {"eth", KEEL_LINK_ETH_100G},
    {"eth400", KEEL_LINK_ETH_400G}, {"infinity-fabric", KEEL_LINK_XGMI},
};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

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
	for (size_t i = 0; i < COUNT_OF(gpu_aliases); i++)
		if (strcasecmp(name, gpu_aliases[i].name) == 0)
			return gpu_aliases[i].to;
	return -ENOENT;
}

int keel_link_preset_find(const char *name)
{
	KEEL_ASSERT(name != NULL);
	for (int i = 0; i < KEEL_LINK_COUNT; i++)
		if (strcasecmp(name, link_presets[i].name) == 0)
			return i;
	for (size_t i = 0; i < COUNT_OF(link_aliases); i++)
		if (strcasecmp(name, link_aliases[i].name) == 0)
			return link_aliases[i].to;
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
