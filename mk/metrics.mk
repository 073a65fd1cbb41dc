# /metrics over HTTP (runtime/obs/metrics_http.c): what its integration test needs beside the
# tools. tests/integ/metrics.sh loads this stand-in for NVIDIA's libnvidia-ml.so.1 (two GPUs,
# fixed readings; tests/support/nvml_fake.c) so that the GPU series are checked on any host.
# Built without the sanitizers: it is loaded by the plain build's tools only.
NVML_FAKE := $(BUILD)/tests/nvml/libnvidia-ml.so.1
EXTRA_TESTS += $(NVML_FAKE)

$(NVML_FAKE): tests/support/nvml_fake.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(OPT) $(WARN) -fPIC -shared -Wl,-soname,libnvidia-ml.so.1 -o $@ $<
