/* A stand-in for an NVTX tool (what Nsight Systems loads through NVTX_INJECTION64_PATH): it
 * takes the core NVTX calls and logs them, one line each, to $KEEL_TEST_NVTX_LOG.PID, so a
 * test can check the ranges and marks keel makes without a GPU or Nsight. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

static FILE *g_log;
static uint64_t g_next_id;

static void NVTX_API mark_a(const char *message)
{
	fprintf(g_log, "mark %s\n", message);
	fflush(g_log);
}

static nvtxRangeId_t NVTX_API range_start_a(const char *message)
{
	nvtxRangeId_t id = ++g_next_id;
	fprintf(g_log, "start %llu %s\n", (unsigned long long)id, message);
	fflush(g_log);
	return id;
}

static void NVTX_API range_end(nvtxRangeId_t id)
{
	fprintf(g_log, "end %llu\n", (unsigned long long)id);
	fflush(g_log);
}

int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table);

int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table)
{
	/* a test-only harness variable, outside keel's env table (tests/integ/env_table.sh
	 * checks runtime/ dpdk/ verbs/ sim/ tools/ only) */
	const char *path = getenv("KEEL_TEST_NVTX_LOG");
	if (path == NULL)
		return 0;
	char name[4096];
	snprintf(name, sizeof(name), "%s.%d", path, (int)getpid());
	g_log = fopen(name, "w");
	if (g_log == NULL)
		return 0;
	const NvtxExportTableCallbacks *cb = get_table(NVTX_ETID_CALLBACKS);
	NvtxFunctionTable table = NULL;
	unsigned int size = 0;
	if (cb == NULL || cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) == 0 ||
	    size <= NVTX_CBID_CORE_RangeEnd)
		return 0;
	*table[NVTX_CBID_CORE_MarkA] = (NvtxFunctionPointer)mark_a;
	*table[NVTX_CBID_CORE_RangeStartA] = (NvtxFunctionPointer)range_start_a;
	*table[NVTX_CBID_CORE_RangeEnd] = (NvtxFunctionPointer)range_end;
	fprintf(g_log, "attached\n");
	fflush(g_log);
	return 1;
}
