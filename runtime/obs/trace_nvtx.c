/* NVTX ranges around collectives, so that Nsight Systems shows keel's AllReduce on the GPU
 * timeline. Built with the CUDA toolkit's header-only nvtx3 when the build finds it
 * (KEEL_NVTX); the calls cost nothing unless a tool is attached, and keel makes them only
 * when NVTX_INJECTION64_PATH says one is. Without the headers every function here is empty. */
#include <stdlib.h>
#include <string.h>

#include "boot_trace.h"

#ifdef KEEL_NVTX
#include <nvtx3/nvToolsExt.h>

bool boot_nvtx_wanted(void)
{
	const char *p = getenv("NVTX_INJECTION64_PATH");
	return p != NULL && *p != '\0';
}

void boot_nvtx_init(struct boot_nvtx *x)
{
	memset(x, 0, sizeof(*x));
	x->on = boot_nvtx_wanted();
}

static void mark(const char *what)
{
	nvtxMarkA(what);
}

void boot_nvtx_event(struct boot_nvtx *x, const struct keel_event *ev)
{
	if (!x->on)
		return;
	uint32_t slot = ev->op % BOOT_NVTX_OPS;
	switch (ev->kind) {
	case KEEL_EV_COLL_BEGIN:
		if (x->range[slot] != 0 && x->range_op[slot] == ev->op) {
			mark("keel collective restarted"); /* the range stays open */
			return;
		}
		x->range[slot] =
		    nvtxRangeStartA(ev->peer == UINT32_MAX ? "keel allreduce" : "keel broadcast");
		x->range_op[slot] = ev->op;
		break;
	case KEEL_EV_COLL_END:
		if (x->range[slot] != 0 && x->range_op[slot] == ev->op) {
			nvtxRangeEnd(x->range[slot]);
			x->range[slot] = 0;
		}
		break;
	case KEEL_EV_SUSPECT:
		mark("keel suspicion");
		break;
	case KEEL_EV_VIEW:
		mark("keel view installed");
		break;
	case KEEL_EV_FALLBACK:
		mark("keel transport fallback");
		break;
	default:
		break;
	}
}

void boot_nvtx_fini(struct boot_nvtx *x)
{
	for (uint32_t i = 0; i < BOOT_NVTX_OPS; i++)
		if (x->on && x->range[i] != 0)
			nvtxRangeEnd(x->range[i]);
	memset(x, 0, sizeof(*x));
}

#else

bool boot_nvtx_wanted(void)
{
	return false;
}

void boot_nvtx_init(struct boot_nvtx *x)
{
	memset(x, 0, sizeof(*x));
}

void boot_nvtx_event(struct boot_nvtx *x, const struct keel_event *ev)
{
	(void)x;
	(void)ev;
}

void boot_nvtx_fini(struct boot_nvtx *x)
{
	memset(x, 0, sizeof(*x));
}

#endif
