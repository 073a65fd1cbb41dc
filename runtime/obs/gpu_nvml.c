/* GPU utilisation and memory through NVML, loaded at run time: keel builds and runs without an
 * NVIDIA driver, and reads the GPUs when one is there. It never fails a start over a GPU. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "assert_int.h"
#include "gpu_nvml.h"

/* The few NVML declarations used (nvml.h is not needed to build): every call returns an
 * nvmlReturn_t, 0 on success; a device is an opaque pointer. */
typedef int nvml_return;
typedef void *nvml_device;
struct nvml_utilization {
	unsigned int gpu, memory; /* percent of the last sample period */
};
struct nvml_memory {
	unsigned long long total, free, used; /* bytes */
};
typedef nvml_return (*nvml_init_fn)(void);
typedef nvml_return (*nvml_count_fn)(unsigned int *count);
typedef nvml_return (*nvml_handle_fn)(unsigned int index, nvml_device *dev);
typedef nvml_return (*nvml_util_fn)(nvml_device dev, struct nvml_utilization *out);
typedef nvml_return (*nvml_mem_fn)(nvml_device dev, struct nvml_memory *out);
typedef nvml_return (*nvml_shutdown_fn)(void);
typedef const char *(*nvml_error_fn)(nvml_return rc);

/* NVML's own words for rc, when the library has nvmlErrorString. */
static const char *nvml_why(void *lib, nvml_return rc, char *buf, size_t len)
{
	nvml_error_fn f = (nvml_error_fn)dlsym(lib, "nvmlErrorString");
	const char *s = f != NULL ? f(rc) : NULL;
	snprintf(buf, len, "%s (NVML error %d)", s != NULL ? s : "unknown", rc);
	return buf;
}

/* The symbols, and the GPUs' handles; -EIO with why on any failure. */
static int find_gpus(struct keel_nvml *g, char *why, size_t why_len)
{
	char e[160];
	nvml_init_fn init = (nvml_init_fn)dlsym(g->lib, "nvmlInit_v2");
	nvml_count_fn count = (nvml_count_fn)dlsym(g->lib, "nvmlDeviceGetCount_v2");
	nvml_handle_fn handle = (nvml_handle_fn)dlsym(g->lib, "nvmlDeviceGetHandleByIndex_v2");
	g->utilization = dlsym(g->lib, "nvmlDeviceGetUtilizationRates");
	g->memory = dlsym(g->lib, "nvmlDeviceGetMemoryInfo");
	void *shutdown = dlsym(g->lib, "nvmlShutdown");
	if (init == NULL || count == NULL || handle == NULL || g->utilization == NULL ||
	    g->memory == NULL || shutdown == NULL) {
		snprintf(why, why_len, "libnvidia-ml.so.1 lacks the NVML functions keel reads");
		return -EIO;
	}
	nvml_return rc = init();
	if (rc != 0) {
		snprintf(why, why_len, "nvmlInit_v2: %s", nvml_why(g->lib, rc, e, sizeof(e)));
		return -EIO;
	}
	g->shutdown = shutdown; /* initialised: shut down on close */
	unsigned int n = 0;
	rc = count(&n);
	if (rc != 0 || n == 0) {
		snprintf(why, why_len, "%s",
			 rc != 0 ? nvml_why(g->lib, rc, e, sizeof(e)) : "NVML sees no GPU");
		return -EIO;
	}
	for (unsigned int i = 0; i < n && g->count < KEEL_NVML_GPUS_MAX; i++) {
		rc = handle(i, &g->dev[g->count]);
		if (rc != 0) {
			snprintf(why, why_len, "GPU %u: %s", i, nvml_why(g->lib, rc, e, sizeof(e)));
			return -EIO;
		}
		g->count++;
	}
	return 0;
}

int keel_nvml_open(struct keel_nvml *g, char *why, size_t why_len)
{
	KEEL_ASSERT(g != NULL);
	memset(g, 0, sizeof(*g));
	g->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (g->lib == NULL) {
		const char *e = dlerror();
		snprintf(why, why_len, "%s (no NVIDIA driver here)",
			 e != NULL ? e : "libnvidia-ml.so.1 not found");
		return -ENOENT;
	}
	int rc = find_gpus(g, why, why_len);
	if (rc != 0)
		keel_nvml_close(g);
	return rc;
}

bool keel_nvml_read(const struct keel_nvml *g, uint32_t i, struct keel_nvml_reading *out)
{
	KEEL_ASSERT(g != NULL && out != NULL && i < g->count);
	struct nvml_utilization u;
	struct nvml_memory m;
	if (((nvml_util_fn)g->utilization)(g->dev[i], &u) != 0 ||
	    ((nvml_mem_fn)g->memory)(g->dev[i], &m) != 0)
		return false;
	out->utilization_pct = u.gpu <= 100 ? u.gpu : 100;
	out->memory_used_bytes = m.used;
	out->memory_total_bytes = m.total;
	return true;
}

void keel_nvml_close(struct keel_nvml *g)
{
	if (g == NULL)
		return;
	if (g->shutdown != NULL)
		(void)((nvml_shutdown_fn)g->shutdown)();
	if (g->lib != NULL)
		dlclose(g->lib);
	memset(g, 0, sizeof(*g));
}
