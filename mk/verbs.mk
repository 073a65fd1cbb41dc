# ibverbs backend (verbs/): built when pkg-config finds libibverbs, skipped otherwise (the
# Makefile prints one line). The archive carries the start-up library's verbs part too
# (runtime/boot/boot_verbs.c), pulled into a program with -u keel_boot_verbs_start.
#   make test-verbs     boot Debian's kernel with Soft-RoCE in QEMU and run the verbs tests in it
#   make static-verbs   $(BUILD)/static/keel-bench, fully static, with rdma-core's providers
#                       (VERBS_STATIC_PROVIDERS; with DPDK it is the same binary `make static`
#                       builds, carrying both)

VERBS_SRC := $(sort $(wildcard verbs/*.c))
VERBS_OBJ := $(VERBS_SRC:%.c=$(BUILD)/obj/%.o)
LIBKEEL_VERBS := $(BUILD)/libkeel_verbs.a
# Providers a static binary carries (RDMA_STATIC_PROVIDERS): rxe for the VM test; `all` for a
# training binary that must run on any NIC (mlx5, efa, bnxt_re, irdma...).
VERBS_STATIC_PROVIDERS ?= rxe

.PHONY: test-verbs static-verbs
# What the VM runs (tests/vm/in_vm.sh); the static keel-bench too when `make static-verbs` made it.
test-verbs: $(BUILD)/bin/keel-run $(BUILD)/bin/keel-bench $(BUILD)/tests/integ-allreduce_check \
	$(if $(filter 1,$(HAVE_VERBS)),$(BUILD)/tests/test_verbs)
	BUILD=$(BUILD) bash tests/vm/run.sh

ifeq ($(HAVE_VERBS),1)
VERBS_CFLAGS := $(patsubst -I%,-isystem %,$(shell pkg-config --cflags libibverbs))
$(VERBS_OBJ): CFLAGS_KEEL += $(VERBS_CFLAGS)

$(LIBKEEL_VERBS): $(VERBS_OBJ) $(BUILD)/obj/runtime/boot/boot_verbs.o
	$(public_archive)

EXTRA_ALL += $(LIBKEEL_VERBS)
EXTRA_LIBS += $(LIBKEEL_VERBS)
EXTRA_UNDEFINED += -Wl,-u,keel_boot_verbs_start
EXTRA_SYS_LIBS += $(shell pkg-config --libs libibverbs)

# The unit test runs the backend against a fake device (tests/support/verbs_fake.c): it
# links transport_verbs.o without ibv_shim.o, so every keel_ibv_* call lands in the fake.
$(BUILD)/tests/test_verbs: $(BUILD)/obj/tests/unit/test_verbs.o \
	$(BUILD)/obj/tests/support/verbs_fake.o $(GUARDED_OBJ) $(BUILD)/obj/verbs/transport_verbs.o \
	$(LIBKEEL)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_KEEL) -o $@ $^ $(CMOCKA_LIBS) $(SODIUM_LIBS) -lm
# GPUDirect RDMA: keel nodes over the backend on the same fake device.
$(BUILD)/tests/test_gpudirect: $(BUILD)/obj/tests/unit/test_gpudirect.o \
	$(BUILD)/obj/tests/support/verbs_fake.o $(GUARDED_OBJ) $(REFCHECK_OBJ) \
	$(BUILD)/obj/verbs/transport_verbs.o $(LIBKEEL)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_KEEL) -o $@ $^ $(CMOCKA_LIBS) $(SODIUM_LIBS) -lm
$(BUILD)/obj/tests/unit/test_verbs.o $(BUILD)/obj/tests/unit/test_gpudirect.o \
	$(BUILD)/obj/tests/support/verbs_fake.o: CFLAGS_KEEL += $(VERBS_CFLAGS) -Iverbs

VERBS_STATIC_LIBS = -Wl,--whole-archive -l:librxe-rdmav34.a -Wl,--no-whole-archive \
	-l:libibverbs.a -lnl-route-3 -lnl-3 -lpthread
ifneq ($(VERBS_STATIC_PROVIDERS),rxe)
VERBS_STATIC_LIBS = $(shell pkg-config --static --libs libibverbs | \
	sed 's/-libverbs/-l:libibverbs.a/') -lnl-route-3 -lnl-3 -lpthread
endif
# The backend with a shim compiled under RDMA_STATIC_PROVIDERS (<infiniband/verbs.h> then makes
# ibv_get_device_list reference the providers, so they are linked in and registered).
LIBKEEL_VERBS_STATIC := $(BUILD)/libkeel_verbs_static.a
$(BUILD)/obj-static-verbs/ibv_shim.o: verbs/ibv_shim.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_KEEL) $(INC) $(VERBS_CFLAGS) -DRDMA_STATIC_PROVIDERS=$(VERBS_STATIC_PROVIDERS) \
		-MMD -MP -c $< -o $@
$(LIBKEEL_VERBS_STATIC): $(BUILD)/obj/verbs/transport_verbs.o $(BUILD)/obj-static-verbs/ibv_shim.o \
	$(BUILD)/obj/runtime/boot/boot_verbs.o
	$(public_archive)

ifeq ($(HAVE_DPDK),1)
# mk/dpdk.mk links $(BUILD)/static/keel-bench: the same binary carries verbs and its providers.
static-verbs: $(BUILD)/static/keel-bench
$(BUILD)/static/keel-bench: $(LIBKEEL_VERBS_STATIC)
$(BUILD)/static/keel-bench: LIBKEEL_DPDK += $(LIBKEEL_VERBS_STATIC)
$(BUILD)/static/keel-bench: DPDK_STATIC_LIBS += $(VERBS_STATIC_LIBS)
else
static-verbs: $(BUILD)/static/keel-bench
ifeq ($(SAN),)
EXTRA_TESTS += $(BUILD)/static/keel-bench
endif
$(BUILD)/static/keel-bench: $(KEEL_BENCH_OBJ) $(LIBBOOT) $(LIBKEEL) $(LIBKEEL_VERBS_STATIC)
	@mkdir -p $(dir $@)
	$(CC) -static -o $@ $(KEEL_BENCH_OBJ) $(EXTRA_UNDEFINED) -Wl,--start-group $(LIBBOOT) $(LIBKEEL_VERBS_STATIC) \
		$(LIBKEEL) \
		-Wl,--end-group $(VERBS_STATIC_LIBS) $(SODIUM_STATIC_LIBS) $(URING_STATIC_LIBS) -lm
	@file $@
endif
static: static-verbs
else
static-verbs:
	@echo "keel: 'make static-verbs' needs libibverbs (install libibverbs-dev)"
endif

-include $(VERBS_OBJ:.o=.d) $(BUILD)/obj/tests/support/verbs_fake.d \
	$(BUILD)/obj-static-verbs/ibv_shim.d
