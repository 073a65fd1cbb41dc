/* A stand-in for NVIDIA's libnvidia-ml.so.1, for tests/integ/metrics.sh on hosts without a
 * driver: two GPUs with fixed readings, so that the start-up library's dlopen path and the
 * keel_gpu_ series are checked anywhere. KEEL_NVML_FAKE_FAIL=1 makes nvmlInit_v2 fail as it
 * does when the kernel module is not loaded. Only the functions keel calls. */
#include <stdint.h>
#include <stdlib.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef struct {
	unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *out);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *out);
const char *nvmlErrorString(nvmlReturn_t rc);

enum { SUCCESS = 0, ERROR_INVALID_ARGUMENT = 2, ERROR_DRIVER_NOT_LOADED = 9 };
#define GPUS 2u

nvmlReturn_t nvmlInit_v2(void)
{
	/* a test-only harness variable, outside keel's env table (tests/integ/env_table.sh
	 * checks runtime/ dpdk/ verbs/ sim/ tools/ only) */
	const char *fail = getenv("KEEL_NVML_FAKE_FAIL");
	return fail != NULL && fail[0] == '1' ? ERROR_DRIVER_NOT_LOADED : SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
	return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	*count = GPUS;
	return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev)
{
	if (index >= GPUS)
		return ERROR_INVALID_ARGUMENT;
	*dev = (nvmlDevice_t)(uintptr_t)(index + 1);
	return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *out)
{
	uintptr_t i = (uintptr_t)dev;
	out->gpu = i == 1 ? 45 : 100;
	out->memory = 10;
	return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *out)
{
	uintptr_t i = (uintptr_t)dev;
	out->total = 80ull << 30;
	out->used = (unsigned long long)i << 30;
	out->free = out->total - out->used;
	return SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t rc)
{
	return rc == ERROR_DRIVER_NOT_LOADED ? "Driver Not Loaded" : "Unknown Error";
}
