# DPDK backend (dpdk/): built when pkg-config finds libdpdk, skipped otherwise (the Makefile
# prints one line). The archive carries the start-up library's DPDK part too
# (runtime/boot/boot_dpdk.c), pulled into a program with -u keel_boot_dpdk_start.
#   make static    build/static/keel-bench, fully static with the DPDK drivers keel needs

DPDK_SRC := $(sort $(wildcard dpdk/*.c))
DPDK_OBJ := $(DPDK_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/runtime/boot/boot_dpdk.o
LIBKEEL_DPDK := $(BUILD)/libkeel_dpdk.a
# Drivers a static binary carries, linked whole (they register themselves from constructors
# that nothing references): the virtual buses, the ring mempool, and the virtual NICs used
# here. Add a hardware PMD (net_mlx5 with rdma-core's static libraries, net_i40e, net_ice)
# with DPDK_STATIC_DRIVERS="... net_i40e".
DPDK_STATIC_DRIVERS ?= bus_vdev bus_pci mempool_ring net_af_packet net_memif net_ring

ifeq ($(HAVE_DPDK),1)
# DPDK's headers do not build under our warnings: include them as system headers.
DPDK_CFLAGS := $(patsubst -I%,-isystem %,$(filter-out -march=%,\
	$(shell pkg-config --cflags libdpdk)))
$(DPDK_OBJ): CFLAGS_KEEL += $(DPDK_CFLAGS)
# The unit test joins two net_ring ports in one process (rte_eth_from_rings).
$(BUILD)/obj/tests/unit/test_dpdk.o: CFLAGS_KEEL += $(DPDK_CFLAGS) -DKEEL_HAVE_DPDK=1
$(BUILD)/tests/test_dpdk: EXTRA_SYS_LIBS += -lrte_net_ring

$(LIBKEEL_DPDK): $(DPDK_OBJ)
	$(public_archive)

EXTRA_ALL += $(LIBKEEL_DPDK)
EXTRA_LIBS += $(LIBKEEL_DPDK)
EXTRA_UNDEFINED += -Wl,-u,keel_boot_dpdk_start
EXTRA_SYS_LIBS += $(shell pkg-config --libs libdpdk)

DPDK_STATIC_LIBS = -Wl,--whole-archive $(DPDK_STATIC_DRIVERS:%=-l:librte_%.a) \
	-Wl,--no-whole-archive \
	$(shell pkg-config --static --libs libdpdk-libs | sed 's/-lrte_\([a-z0-9_]*\)/-l:librte_\1.a/g') -lbsd -lmd

.PHONY: static
static: $(BUILD)/static/keel-bench
# tests/integ/dpdk_netns.sh runs it (not in the sanitizer build: ASan does not link statically).
ifeq ($(SAN),)
EXTRA_TESTS += $(BUILD)/static/keel-bench
endif
$(BUILD)/static/keel-bench: $(KEEL_BENCH_OBJ) $(LIBBOOT) $(LIBKEEL) $(LIBKEEL_DPDK)
	@mkdir -p $(dir $@)
	$(CC) -static -o $@ $(KEEL_BENCH_OBJ) $(EXTRA_UNDEFINED) -Wl,--start-group $(LIBBOOT) $(LIBKEEL_DPDK) $(LIBKEEL) \
		-Wl,--end-group $(DPDK_STATIC_LIBS) $(SODIUM_STATIC_LIBS) $(URING_STATIC_LIBS) -lm
	@file $@
else
.PHONY: static
static:
	@echo "keel: 'make static' needs DPDK (pkg-config libdpdk not found; install libdpdk-dev)"
	@false
endif

-include $(DPDK_OBJ:.o=.d)
