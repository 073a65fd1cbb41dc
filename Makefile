# keel — one Makefile. `make` builds build/libkeel.a and build/bin/keel-*.
# `make test` runs everything (unit, sanitizer, multi-process); `make demo` runs the main job.
# BUILD=dir puts objects elsewhere (the sanitizer build uses build-san).

BUILD ?= build
CC ?= cc
SAN ?=
OPT ?= -O2 -g
WARN := -Wall -Wextra -Werror -Wshadow -Wvla -Wmissing-prototypes -Wstrict-prototypes
CFLAGS_KEEL := -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) -Iinclude -Iruntime -Itools/common \
	-fno-strict-aliasing -march=x86-64-v2 $(SAN)
LDFLAGS_KEEL := $(SAN)

# Optional parts: found with pkg-config / nvcc, skipped with one clear line.
HAVE_DPDK := $(shell pkg-config --exists libdpdk 2>/dev/null && echo 1)
HAVE_VERBS := $(shell pkg-config --exists libibverbs 2>/dev/null && echo 1)
HAVE_SIMGRID := $(shell pkg-config --exists simgrid 2>/dev/null && echo 1)
HAVE_NVCC := $(shell command -v nvcc >/dev/null 2>&1 && echo 1)
HAVE_CMOCKA := $(shell pkg-config --exists cmocka 2>/dev/null && echo 1)
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
ifneq ($(HAVE_NVCC),1)
$(info keel: CUDA kernels skipped (nvcc not found))
endif
endif

RUNTIME_SRC := $(sort $(wildcard runtime/*.c))
TOOLS_COMMON_SRC := $(sort $(wildcard tools/common/*.c))
TOOL_SRC := $(sort $(wildcard tools/keel-*.c))
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
INTEG_SRC := $(sort $(wildcard tests/integ/*.c))

RUNTIME_OBJ := $(RUNTIME_SRC:%.c=$(BUILD)/obj/%.o)
TOOLS_COMMON_OBJ := $(TOOLS_COMMON_SRC:%.c=$(BUILD)/obj/%.o)
TOOLS := $(patsubst tools/%.c,$(BUILD)/bin/%,$(TOOL_SRC))
UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
INTEG_BINS := $(patsubst tests/integ/%.c,$(BUILD)/tests/integ-%,$(INTEG_SRC))

LIBKEEL := $(BUILD)/libkeel.a
LIBTOOLS := $(BUILD)/libkeel_tools.a
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null || echo -lcmocka)

# Optional parts (DPDK, verbs, the simulator...) bring their own rules in mk/<part>.mk and
# add their outputs to EXTRA_ALL (built by `make`) and EXTRA_TESTS (built for `make test`).
EXTRA_ALL :=
EXTRA_TESTS :=
EXTRA_LIBS :=
EXTRA_SYS_LIBS :=
-include $(sort $(wildcard mk/*.mk))

.PHONY: all tools tests test unit demo deps clean format format-check san model-check
all: $(LIBKEEL) $(LIBTOOLS) $(TOOLS) $(EXTRA_ALL)
tools: $(TOOLS)
tests: $(UNIT_TESTS) $(INTEG_BINS) $(EXTRA_TESTS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_KEEL) -MMD -MP -c $< -o $@

$(LIBKEEL): $(RUNTIME_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBTOOLS): $(TOOLS_COMMON_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# Programs link the tools' glue, any optional backends (EXTRA_LIBS, from mk/*.mk) and the core
# as one group, then the system libraries those backends need (EXTRA_SYS_LIBS).
LINK_GROUP = -Wl,--start-group $(LIBTOOLS) $(EXTRA_LIBS) $(LIBKEEL) -Wl,--end-group \
	$(EXTRA_SYS_LIBS)

$(BUILD)/bin/%: $(BUILD)/obj/tools/%.o $(LIBTOOLS) $(LIBKEEL) $(EXTRA_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_KEEL) -o $@ $< $(LINK_GROUP) -lm

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIBTOOLS) $(LIBKEEL) $(EXTRA_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_KEEL) -o $@ $< $(LINK_GROUP) $(CMOCKA_LIBS) -lm

$(BUILD)/tests/integ-%: $(BUILD)/obj/tests/integ/%.o $(LIBTOOLS) $(LIBKEEL) $(EXTRA_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_KEEL) -o $@ $< $(LINK_GROUP) -lm

# The deps step runs only when something is missing (tools/deps.sh --check is fast).
deps:
	@tools/deps.sh --check >/dev/null 2>&1 || tools/deps.sh

san:
	$(MAKE) BUILD=build-san OPT="-O1 -g -fno-omit-frame-pointer" \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" tests

test: deps
	$(MAKE) all tests
	$(MAKE) san
	tests/run.sh

# The membership model checker's longer bounds and its planted-bug mutants (minutes).
model-check: all tests
	tests/model/check.sh

demo: deps
	$(MAKE) all
	tools/demo.sh

FORMAT_SRC = $(sort $(wildcard include/keel/*.h runtime/*.[ch] runtime/cuda/*.cu tools/*.c \
	tools/common/*.[ch] tests/unit/*.[ch] tests/integ/*.c tests/fuzz/*.c dpdk/*.[ch] \
	verbs/*.[ch] sim/*.[ch]))
format:
	clang-format -i $(FORMAT_SRC)
format-check:
	clang-format --dry-run -Werror $(FORMAT_SRC)

clean:
	rm -rf build build-san build-*

-include $(RUNTIME_OBJ:.o=.d) $(TOOLS_COMMON_OBJ:.o=.d) $(TOOL_SRC:%.c=$(BUILD)/obj/%.d) \
	$(UNIT_SRC:%.c=$(BUILD)/obj/%.d) $(INTEG_SRC:%.c=$(BUILD)/obj/%.d)
.SECONDARY:
