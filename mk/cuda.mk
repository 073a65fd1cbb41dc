# The CUDA device (runtime/device/cuda/): built when nvcc is found ($(CUDA_HOME)/bin/nvcc),
# skipped otherwise (the Makefile prints one line). libkeel_cuda.a holds the device and its
# kernels, compiled for the GPUs in CUDA_ARCHS plus PTX for the newest (JIT on later GPUs);
# programs link it with libcudart_static.a. keel-bench links it (--device cuda), and so do
# $(BUILD)/tests/gpu-check and gpu-pipeline, which tools/gpu-check.sh runs on a machine with a
# GPU.
NVCC ?= $(CUDA_HOME)/bin/nvcc
HAVE_CUDA := $(shell test -x $(NVCC) && echo 1)
# A100, H100/H200, B200; PTX of the last for anything newer.
CUDA_ARCHS ?= 80 90 100
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
	-gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))
ifeq ($(MAKELEVEL),0)
ifneq ($(HAVE_CUDA),1)
$(info keel: CUDA device skipped ($(NVCC) not found; install the CUDA Toolkit or set CUDA_HOME))
endif
endif

ifeq ($(HAVE_CUDA),1)
LIBKEEL_CUDA := $(BUILD)/libkeel_cuda.a
CUDA_OBJ := $(BUILD)/obj/runtime/device/cuda/device_cuda.o \
	$(BUILD)/obj/runtime/device/cuda/reduce_kernels.o
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -l:libcudart_static.a -ldl -lrt -lpthread
$(BUILD)/obj/runtime/device/cuda/device_cuda.o: INC += -isystem $(CUDA_HOME)/include

# The kernels: no sanitizer flags; no thread-safe statics or exceptions in the host stubs, so
# a C program links them without libstdc++.
$(BUILD)/obj/runtime/device/cuda/reduce_kernels.o: runtime/device/cuda/reduce_kernels.cu \
	runtime/device/cuda/reduce_kernels_int.h include/keel/types.h $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O3 -Iinclude $(CUDA_GENCODE) -Xcompiler -fPIC,-Wall,-Wextra,-fno-threadsafe-statics,-fno-exceptions \
		-c $< -o $@

$(LIBKEEL_CUDA): $(CUDA_OBJ)
	$(public_archive)

EXTRA_ALL += $(LIBKEEL_CUDA)
EXTRA_TESTS += $(BUILD)/tests/gpu-check

# keel-bench refers to the CUDA device weakly; -u pulls it in here.
$(BUILD)/bin/keel-bench: $(LIBKEEL_CUDA)
$(BUILD)/bin/keel-bench: TOOL_LIBS += -Wl,-u,keel_device_cuda_init $(LIBKEEL_CUDA) $(CUDA_LIBS)

# The kernel and pipeline check for a real GPU (tools/gpu-check.sh); links here, runs there.
$(BUILD)/tests/gpu-check: $(BUILD)/obj/tests/gpu/gpu_check.o $(LIBKEEL_CUDA) $(LIBKEEL) \
	$(REFCHECK_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_KEEL) -o $@ $(filter %.o,$^) $(LIBKEEL_CUDA) $(LIBKEEL) $(CUDA_LIBS) \
		$(SODIUM_LIBS) -lm
# The device AllReduce's pipeline on a real GPU: 3 nodes in one process, a rank killed.
EXTRA_TESTS += $(BUILD)/tests/gpu-pipeline
$(BUILD)/tests/gpu-pipeline: $(BUILD)/obj/tests/gpu/gpu_pipeline.o $(LIBKEEL_CUDA) $(LIBKEEL) \
	$(REFCHECK_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_KEEL) -o $@ $(filter %.o,$^) $(LIBKEEL_CUDA) $(LIBKEEL) $(CUDA_LIBS) \
		$(SODIUM_LIBS) -lm
-include $(BUILD)/obj/runtime/device/cuda/device_cuda.d $(BUILD)/obj/tests/gpu/gpu_check.d \
	$(BUILD)/obj/tests/gpu/gpu_pipeline.d
endif
