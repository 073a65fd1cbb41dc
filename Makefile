# keel — one Makefile. `make` builds build/libkeel.a and build/bin/keel-*.
# `make test` runs the fast tier of the tests (unit in both builds, the integration tests that
# guard a promise), `make test-long` the slow suites; `make demo` runs the main job.
# `make bench-peers` runs keel beside Open MPI and Gloo (mk/bench-peers.mk, tools/bench-peers.sh).
# BUILD=dir puts objects elsewhere (the sanitizer build uses build-san).

BUILD ?= build
CC ?= cc
SAN ?=
OPT ?= -O2 -g
WARN := -Wall -Wextra -Werror -Wshadow -Wvla -Wmissing-prototypes -Wstrict-prototypes
CFLAGS_KEEL := -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) -fno-strict-aliasing -march=x86-64-v2 $(SAN)
LDFLAGS_KEEL := $(SAN)

# Optional parts: found with pkg-config, skipped with one clear line.
HAVE_DPDK := $(shell pkg-config --exists libdpdk 2>/dev/null && echo 1)
HAVE_VERBS := $(shell pkg-config --exists libibverbs 2>/dev/null && echo 1)
HAVE_SIMGRID := $(shell pkg-config --exists simgrid 2>/dev/null && echo 1)
HAVE_CMOCKA := $(shell pkg-config --exists cmocka 2>/dev/null && echo 1)
# expat: keel-plan's SimGrid platform reader (tools/keel-plan/plan_xml.c) and its unit test only.
HAVE_EXPAT := $(shell pkg-config --exists expat 2>/dev/null && echo 1)
# libsodium: the MAC on every datagram (keel_config.auth) and the start-up library's keys and
# challenge-response. Without it keel builds, and a node or rank asked for auth refuses to start.
HAVE_SODIUM := $(shell pkg-config --exists libsodium 2>/dev/null && echo 1)
# liburing: the pre-load executor's io_uring engine (runtime/data/preload.c); without it the
# executor reads with pread.
HAVE_URING := $(shell pkg-config --exists liburing 2>/dev/null && echo 1)
# NVTX ranges around collectives for Nsight Systems: the CUDA toolkit's header-only nvtx3.
CUDA_HOME ?= /usr/local/cuda
HAVE_NVTX := $(shell test -f $(CUDA_HOME)/include/nvtx3/nvToolsExt.h && echo 1)
ifeq ($(MAKELEVEL),0)
ifneq ($(HAVE_DPDK),1)
$(info keel: DPDK backend skipped (pkg-config libdpdk not found; install libdpdk-dev))
endif
ifneq ($(HAVE_VERBS),1)
$(info keel: ibverbs backend skipped (pkg-config libibverbs not found; install libibverbs-dev))
endif
ifneq ($(HAVE_SIMGRID),1)
$(info keel: SimGrid simulator skipped (pkg-config simgrid not found; install libsimgrid-dev))
endif
ifneq ($(HAVE_SODIUM),1)
$(info keel: authentication skipped (pkg-config libsodium not found; install libsodium-dev))
endif
ifneq ($(HAVE_URING),1)
$(info keel: io_uring pre-load skipped, pread instead (pkg-config liburing not found; install liburing-dev))
endif
ifneq ($(HAVE_NVTX),1)
$(info keel: NVTX ranges skipped ($(CUDA_HOME)/include/nvtx3 not found; install the CUDA Toolkit or set CUDA_HOME))
endif
ifneq ($(HAVE_EXPAT),1)
$(info keel: keel-plan --cluster-xml skipped (pkg-config expat not found; install libexpat1-dev))
endif
endif

# The layers (docs/DESIGN.md). libkeel.a: the runtime without its start-up library.
RUNTIME_LAYERS := base core device transport plan storage
RUNTIME_SRC := $(sort $(foreach l,$(RUNTIME_LAYERS),$(wildcard runtime/$(l)/*.c)))
# The start-up library, libkeel_boot.a, in three folders: boot/ (launcher env, rendezvous,
# waiter, the node's start), obs/ (the metrics server, NVML, traces) and data/ (the pre-loader,
# Arrow export). Its DPDK and verbs parts are archived with those backends (mk/*.mk).
BOOT_LAYERS := boot obs data
BOOT_SRC := $(filter-out runtime/boot/boot_dpdk.c runtime/boot/boot_verbs.c,\
	$(sort $(foreach l,$(BOOT_LAYERS),$(wildcard runtime/$(l)/*.c))))
TOOL_NAMES := $(sort $(notdir $(patsubst %/,%,$(dir $(wildcard tools/keel-*/main.c)))))
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
INTEG_SRC := $(sort $(wildcard tests/integ/*.c))

RUNTIME_OBJ := $(RUNTIME_SRC:%.c=$(BUILD)/obj/%.o)
BOOT_OBJ := $(BOOT_SRC:%.c=$(BUILD)/obj/%.o)
TOOLS := $(TOOL_NAMES:%=$(BUILD)/bin/%)
UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
INTEG_BINS := $(patsubst tests/integ/%.c,$(BUILD)/tests/integ-%,$(INTEG_SRC))
# Code that ships in more than one tool lives in tools/common/ (tests link it too):
# the exact-result oracle (keel-bench --check, keel-sim and the tests), size arguments,
# device memory the CPU stand-in guards (faults when the host touches it), the hardware
# presets keel-plan and keel-sim read, and the gnuplot runner behind --plot.
REFCHECK_OBJ := $(BUILD)/obj/tools/common/refcheck.o
SIZE_ARG_OBJ := $(BUILD)/obj/tools/common/size_arg.o
GUARDED_OBJ := $(BUILD)/obj/tools/common/guarded_mem.o
PRESET_OBJ := $(BUILD)/obj/tools/common/plan_preset.o
# A tool is its folder: tools/<tool>/*.c (main.c and what that tool alone uses).
tool_obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(sort $(wildcard tools/$(1)/*.c)))
PLOT_OBJ := $(BUILD)/obj/tools/common/plot.o
# Every tool's command line (tools/common/cli.c): one parser, one wording, one set of exit codes.
CLI_OBJ := $(BUILD)/obj/tools/common/cli.o
KEEL_BENCH_OBJ := $(call tool_obj,keel-bench) $(REFCHECK_OBJ) $(SIZE_ARG_OBJ) $(GUARDED_OBJ) \
	$(CLI_OBJ)

LIBKEEL := $(BUILD)/libkeel.a
LIBBOOT := $(BUILD)/libkeel_boot.a
# The same objects with their internal symbols visible, for white-box unit tests only.
LIBKEEL_WHITEBOX := $(BUILD)/obj/libkeel_whitebox.a
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null || echo -lcmocka)

# Include paths, per folder: a layer sees the public headers, the base helpers (assertions,
# CRC32C) and its own folder (a quoted include finds its neighbours), never another layer's
# private headers. A backend or tool that reaches for one fails to compile.
INC := -Iinclude
$(BUILD)/obj/runtime/%.o $(BUILD)/obj/dpdk/%.o $(BUILD)/obj/verbs/%.o: INC += -Iruntime/base
# The start-up library's folders: boot/ reaches obs/ (traces, NVML) through their private
# headers, obs/ uses boot's one error helper (keel_fail, boot_int.h); data/ needs neither.
$(BUILD)/obj/runtime/boot/%.o: INC += -Iruntime/boot -Iruntime/obs
$(BUILD)/obj/runtime/obs/%.o: INC += -Iruntime/boot
$(BUILD)/obj/tools/%.o: INC += -Itools/common
$(BUILD)/obj/tests/%.o: INC += -Itests/support -Itools/common
# --version's git hash: the header GIT_HASH_H, rewritten only when the hash changes (so that a
# commit relinks the tools, and nothing else does); "unknown" outside a git checkout.
GIT_HASH_H := $(BUILD)/gen/keel_git.h
$(GIT_HASH_H): FORCE
	@mkdir -p $(dir $@)
	@h=$$( { test -e .git && git rev-parse --short HEAD; } 2>/dev/null || echo unknown); \
	echo "#define KEEL_GIT_HASH \"$$h\"" >$@.tmp; \
	if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(CLI_OBJ): $(GIT_HASH_H)
$(CLI_OBJ): INC += -I$(BUILD)/gen
.PHONY: FORCE
FORCE:
# White-box tests reach into the core and the start-up library; tests of one tool's code, into
# that tool's folder.
$(BUILD)/obj/tests/unit/%.o $(BUILD)/obj/tests/fuzz/%.o: INC += -Iruntime/base -Iruntime/core
$(BUILD)/obj/tests/unit/%.o $(BUILD)/obj/tests/integ/%.o: INC += -Iruntime/boot -Iruntime/obs
$(BUILD)/obj/tests/unit/test_train.o $(BUILD)/obj/tests/unit/test_train_feed.o: \
	INC += -Itools/keel-train
$(BUILD)/obj/tests/unit/test_plan_parse.o: INC += -Itools/keel-plan
$(BUILD)/obj/tests/unit/test_bench_stats.o $(BUILD)/obj/tests/unit/test_bench_coll.o: \
	INC += -Itools/keel-bench
# keel-plan's SimGrid reader is built with expat when pkg-config finds it; without it,
# --cluster-xml says so. Only keel-plan and test_plan_parse link -lexpat.
ifeq ($(HAVE_EXPAT),1)
$(BUILD)/obj/tools/keel-plan/plan_xml.o: INC += -DPLAN_HAVE_EXPAT $(shell pkg-config --cflags expat)
EXPAT_LIBS := $(shell pkg-config --libs expat)
endif

ifeq ($(HAVE_SODIUM),1)
SODIUM_CFLAGS := -DKEEL_HAVE_SODIUM $(shell pkg-config --cflags libsodium)
SODIUM_LIBS := $(shell pkg-config --libs libsodium)
SODIUM_STATIC_LIBS := $(shell pkg-config --static --libs libsodium | sed 's/-lsodium/-l:libsodium.a/')
endif
$(BUILD)/obj/runtime/core/auth.o $(BUILD)/obj/runtime/boot/%.o $(BUILD)/obj/runtime/obs/%.o \
	$(BUILD)/obj/runtime/data/%.o $(BUILD)/obj/tests/unit/test_auth.o: \
	INC += $(SODIUM_CFLAGS)
ifeq ($(HAVE_URING),1)
$(BUILD)/obj/runtime/data/preload.o: INC += -DKEEL_HAVE_URING $(shell pkg-config --cflags liburing)
URING_LIBS := $(shell pkg-config --libs liburing)
URING_STATIC_LIBS := -l:liburing.a
endif
ifeq ($(HAVE_NVTX),1)
$(BUILD)/obj/runtime/obs/trace_nvtx.o: INC += -DKEEL_NVTX -isystem $(CUDA_HOME)/include
# A stand-in NVTX tool for tests/integ/nvtx.sh: logs the ranges keel opens.
NVTX_INJECT := $(BUILD)/tests/libnvtx_inject.so
$(NVTX_INJECT): tests/support/nvtx_inject.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_KEEL) -Wno-missing-prototypes -isystem $(CUDA_HOME)/include -fPIC -shared \
		-o $@ $<
endif

# Optional parts (DPDK, verbs, the simulator...) bring their own rules in mk/<part>.mk and
# add their outputs to EXTRA_ALL (built by `make`) and EXTRA_TESTS (built for `make test`).
EXTRA_ALL :=
EXTRA_TESTS :=
EXTRA_LIBS :=
EXTRA_SYS_LIBS :=
# -u flags that pull an optional backend's start-up out of its archive (boot.c refers to it
# only weakly, so that a program without the backend links without its libraries).
EXTRA_UNDEFINED :=
.DEFAULT_GOAL := all
-include $(sort $(wildcard mk/*.mk))
# keel-sim links the optional backends' archives too; they are added to EXTRA_LIBS by mk files
# read after sim.mk, so its dependency on them is stated here, once all are known.
ifneq ($(KEEL_SIM),)
$(KEEL_SIM): $(EXTRA_LIBS)
endif

.PHONY: all tools tests test test-long unit demo deps clean format format-check san model-check env-doc
all: $(LIBKEEL) $(LIBBOOT) $(TOOLS) $(EXTRA_ALL)
tools: $(TOOLS)
tests: $(UNIT_TESTS) $(INTEG_BINS) $(EXTRA_TESTS) $(NVTX_INJECT)

# Which optional parts this build found. Every object depends on it, so installing a package
# (tools/deps.sh) rebuilds what its presence changes instead of keeping stale objects.
CONFIG_STAMP := $(BUILD)/config.stamp
CONFIG_NOW := dpdk=$(HAVE_DPDK) verbs=$(HAVE_VERBS) simgrid=$(HAVE_SIMGRID) \
	cmocka=$(HAVE_CMOCKA) expat=$(HAVE_EXPAT) sodium=$(HAVE_SODIUM) uring=$(HAVE_URING) \
	cflags=$(CFLAGS_KEEL)
$(shell mkdir -p $(BUILD) && [ "$$(cat $(CONFIG_STAMP) 2>/dev/null)" = '$(CONFIG_NOW)' ] || \
	echo '$(CONFIG_NOW)' >$(CONFIG_STAMP))

$(BUILD)/obj/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_KEEL) $(INC) -MMD -MP -c $< -o $@

# Only keel_ symbols leave an archive: its objects are linked into one (ld -r) and every other
# global symbol is made local, so internal names (crc32c, wire_encode...) cannot clash with a
# training binary's own. tests/integ/tidy.sh checks every archive in $(BUILD).
define public_archive
	@mkdir -p $(dir $@)
	ld -r -o $@.o $^
	objcopy --wildcard --keep-global-symbol='keel_*' $@.o
	rm -f $@ && ar rcs $@ $@.o && rm -f $@.o
endef

$(LIBKEEL): $(RUNTIME_OBJ)
	$(public_archive)

$(LIBBOOT): $(BOOT_OBJ)
	$(public_archive)

$(LIBKEEL_WHITEBOX): $(RUNTIME_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# Programs link the start-up library, any optional backends (EXTRA_LIBS, from mk/*.mk) and the
# core as one group, then the system libraries those backends need (EXTRA_SYS_LIBS).
LINK_GROUP = $(EXTRA_UNDEFINED) -Wl,--start-group $(LIBBOOT) $(EXTRA_LIBS) $(LIBKEEL) \
	-Wl,--end-group $(EXTRA_SYS_LIBS) $(SODIUM_LIBS) $(URING_LIBS)
LINK_GROUP_WHITEBOX = $(EXTRA_UNDEFINED) -Wl,--start-group $(LIBBOOT) $(EXTRA_LIBS) \
	$(LIBKEEL_WHITEBOX) -Wl,--end-group $(EXTRA_SYS_LIBS) $(SODIUM_LIBS) $(URING_LIBS)

define tool_rule
$(BUILD)/bin/$(1): $(call tool_obj,$(1)) $(LIBBOOT) $(LIBKEEL) $(EXTRA_LIBS)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS_KEEL) -o $$@ $$(filter %.o,$$^) $$(LINK_GROUP) $$(TOOL_LIBS) -lm
endef
$(foreach t,$(TOOL_NAMES),$(eval $(call tool_rule,$(t))))
$(TOOLS): $(CLI_OBJ)
$(BUILD)/bin/keel-bench: $(KEEL_BENCH_OBJ)
$(BUILD)/bin/keel-train: $(PLOT_OBJ)
$(BUILD)/bin/keel-plan: $(PRESET_OBJ)
$(BUILD)/bin/keel-plan: TOOL_LIBS := $(EXPAT_LIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIBBOOT) $(LIBKEEL_WHITEBOX) $(EXTRA_LIBS) \
	$(REFCHECK_OBJ) $(GUARDED_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_KEEL) -o $@ $(filter %.o,$^) $(LINK_GROUP_WHITEBOX) $(CMOCKA_LIBS) \
		$(TOOL_LIBS) -lm
$(BUILD)/tests/test_train: $(BUILD)/obj/tools/keel-train/train_model.o
$(BUILD)/tests/test_train_feed: $(BUILD)/obj/tools/keel-train/train_model.o \
	$(BUILD)/obj/tools/keel-train/train_feed.o
$(BUILD)/tests/test_plan_parse: $(BUILD)/obj/tools/keel-plan/plan_parse.o \
	$(BUILD)/obj/tools/keel-plan/plan_xml.o $(PRESET_OBJ)
$(BUILD)/tests/test_plan_parse: TOOL_LIBS := $(EXPAT_LIBS)
$(BUILD)/tests/test_bench_stats: $(BUILD)/obj/tools/keel-bench/bench_stats.o
$(BUILD)/tests/test_bench_coll: $(BUILD)/obj/tools/keel-bench/bench_coll_plan.o
# keel-sim's multi-fidelity arithmetic has no SimGrid in it: tested in every build.
$(BUILD)/obj/tests/unit/test_sim_fidelity.o: INC += -Isim
$(BUILD)/tests/test_sim_fidelity: $(BUILD)/obj/sim/fidelity.o

$(BUILD)/tests/integ-%: $(BUILD)/obj/tests/integ/%.o $(LIBBOOT) $(LIBKEEL) $(EXTRA_LIBS) \
	$(REFCHECK_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_KEEL) -o $@ $(filter %.o,$^) $(LINK_GROUP) -lm

# The deps step runs only when something is missing (tools/deps.sh --check is fast).
deps:
	@tools/deps.sh --check >/dev/null 2>&1 || tools/deps.sh

# The sanitizer build also turns on KEEL_ASSERT_DEBUG: the hot-path re-checks (per step, per
# datagram) and the O(n) ones run in every `make test`, not in release builds.
san:
	$(MAKE) BUILD=build-san OPT="-O1 -g -fno-omit-frame-pointer -DKEEL_DEBUG" \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" tests

# The tiers (tests/run.sh): `make test`, the fast one (every unit test in both builds and the
# integration tests that guard a promise, at most 12 minutes on 2 cores from a fresh clone);
# `make test-long`, the slow suites (tests whose script says `# tier: long`: the QEMU verbs VM,
# long simulator runs, fuzzing beyond the smoke, the model checker's larger bounds). CI runs
# both. Each prints the time its build and its tests took.
NPROC := $(shell nproc 2>/dev/null || echo 2)
test: deps
	@t0=$$(date +%s); $(MAKE) -j$(NPROC) all tests && $(MAKE) -j$(NPROC) san && \
	t1=$$(date +%s) && echo "keel: make test: build $$((t1 - t0)) s" && \
	tests/run.sh --tier fast; rc=$$?; t2=$$(date +%s); \
	echo "keel: make test (fast tier): $$((t2 - t0)) s in all"; exit $$rc

test-long: deps
	@t0=$$(date +%s); $(MAKE) -j$(NPROC) all tests && $(MAKE) -j$(NPROC) san && \
	tests/run.sh --tier long; rc=$$?; t2=$$(date +%s); \
	echo "keel: make test-long (long tier): $$((t2 - t0)) s in all"; exit $$rc

# The membership model checker's longer bounds and its planted-bug mutants (minutes).
model-check: all tests
	tests/model/check.sh

demo: deps
	$(MAKE) all
	tools/demo.sh

# The reference of the KEEL_* variables is printed from their one table
# (runtime/boot/env_table.def): edit the table, then `make env-doc` and commit the page.
# tests/integ/env_table.sh fails when the committed page differs from what keel-run prints.
env-doc: $(BUILD)/bin/keel-run
	@mkdir -p docs/reference
	$(BUILD)/bin/keel-run --help-env=markdown >docs/reference/env.md

FORMAT_SRC = $(sort $(wildcard include/keel/*.h runtime/*/*.[ch] tools/*/*.[ch] tests/*/*.[ch] \
	dpdk/*.[ch] verbs/*.[ch] sim/*.[ch]))
format:
	clang-format -i $(FORMAT_SRC)
format-check:
	clang-format --dry-run -Werror $(FORMAT_SRC)

clean:
	rm -rf build build-san build-*

# Every object built with -MMD has its .d here, the start-up parts archived with the DPDK and
# verbs backends too: a stale boot_verbs.o (an old struct layout) once crashed every verbs run.
-include $(RUNTIME_OBJ:.o=.d) $(BOOT_OBJ:.o=.d) \
	$(BUILD)/obj/runtime/boot/boot_dpdk.d $(BUILD)/obj/runtime/boot/boot_verbs.d \
	$(foreach t,$(TOOL_NAMES),$(patsubst %.o,%.d,$(call tool_obj,$(t)))) \
	$(UNIT_SRC:%.c=$(BUILD)/obj/%.d) $(INTEG_SRC:%.c=$(BUILD)/obj/%.d) $(REFCHECK_OBJ:.o=.d) $(SIZE_ARG_OBJ:.o=.d) \
	$(GUARDED_OBJ:.o=.d) \
	$(PLOT_OBJ:.o=.d) $(PRESET_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
.SECONDARY:
