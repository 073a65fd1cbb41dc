/* Trace events of the start-up library: KEEL_TRACE files (trace_file.c) and NVTX ranges for
 * Nsight Systems (trace_nvtx.c). */
#ifndef KEEL_BOOT_TRACE_H
#define KEEL_BOOT_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "assert_int.h"
#include "boot_int.h"
#include "keel/trace.h"

/* NVTX ranges open for collectives, by op id modulo this (ops_max is far below it). */
#define BOOT_NVTX_OPS 64u

struct boot_nvtx {
	bool on;
	uint64_t range[BOOT_NVTX_OPS]; /* nvtxRangeId_t; 0: none open */
	uint32_t range_op[BOOT_NVTX_OPS];
};

/* NVTX is compiled in (the CUDA toolkit's nvtx3 headers were found) and a tool is attached
 * (NVTX_INJECTION64_PATH set, as Nsight Systems does). */
bool boot_nvtx_wanted(void);
void boot_nvtx_init(struct boot_nvtx *x);
/* A collective's begin opens a range "keel allreduce"/"keel broadcast", its end closes it;
 * suspicions, views and fallbacks are marks. */
void boot_nvtx_event(struct boot_nvtx *x, const struct keel_event *ev);
void boot_nvtx_fini(struct boot_nvtx *x);

struct boot_trace;

/* From KEEL_TRACE (and NVTX): *out NULL when neither is on. Errors name the variable. */
int boot_trace_start(struct boot_trace **out, uint32_t rank, uint32_t world, char *err,
		     size_t err_len);
/* The config's on_event hook; ctx is the boot_trace. */
void boot_trace_event(void *ctx, const struct keel_event *ev);
/* Write what is left, close the file, free. NULL: nothing. */
void boot_trace_stop(struct boot_trace *t);

#endif
