# Fuzzing with libFuzzer (clang; tools/deps/fuzz.txt). Targets are tests/fuzz/fuzz_*.c, each
# linked with the protocol core compiled by clang under ASan+UBSan (build-fuzz/).
#   make fuzz [FUZZ_SECONDS=60]  run every target that long on its corpus,
#                                tests/fuzz/corpus/<target>/ (kept in the tree; what the fuzzer
#                                finds new is added there)
# `make test` runs a short smoke of each and replays its corpus (tests/integ/fuzz_smoke.sh).
FUZZ_CC ?= clang
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(sort $(wildcard tests/fuzz/fuzz_*.c)))
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -O1 -g -march=x86-64-v2 -Iinclude -Iruntime/base \
	-Iruntime/core -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
	-Wno-pass-failed
FUZZ_CORE_OBJ := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(sort $(wildcard runtime/base/*.c \
	runtime/core/*.c)))

# What a target links besides the core: the readers it fuzzes.
FUZZ_PLAN_SRC := tools/keel-plan/plan_parse.c tools/common/plan_preset.c \
	tools/keel-plan/plan_xml.c $(sort $(wildcard runtime/plan/*.c))
# The rendezvous' pure parts (the hello rank 0 judges, the replies ranks read) and the key
# reader launch.c calls, with the proofs they need.
FUZZ_RDV_SRC := runtime/boot/rendezvous_wire.c runtime/boot/rendezvous_proof.c
FUZZ_PEERS_SRC := runtime/boot/launch.c runtime/boot/launch_key.c runtime/boot/env.c $(FUZZ_RDV_SRC)
FUZZ_CKPT_SRC := runtime/storage/checkpoint.c
# keel-sim's scenario reader with the cluster specs and presets it hands on to; no SimGrid.
FUZZ_SCENARIO_SRC := sim/scenario.c sim/platform.c tools/common/plan_preset.c \
	$(sort $(wildcard runtime/plan/*.c))
# The DPDK backend's frame checks are plain C: built without DPDK. Where DPDK is found, the
# target also compares their checksums with DPDK's helpers (inline in its headers: no library).
FUZZ_DPDK_FRAME_SRC := dpdk/frame.c

.PHONY: fuzz fuzz-build fuzz-check
# Probed only when a fuzz target is asked for, not each time make reads this file.
fuzz-check:
	@printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\
	{ (void)d; (void)n; return 0; }' | $(FUZZ_CC) -fsanitize=fuzzer -x c - -o /dev/null \
	2>/dev/null || { echo "keel: fuzzing needs clang with libFuzzer (tools/deps/fuzz.txt:" \
	"clang, libclang-rt-14-dev)"; false; }

$(FUZZ_BUILD)/obj/tests/fuzz/fuzz_plan.o $(FUZZ_BUILD)/obj/tools/%.o: FUZZ_FLAGS += -Itools/keel-plan -Itools/common
$(FUZZ_BUILD)/obj/tools/keel-plan/%.o: FUZZ_FLAGS += $(if $(filter 1,$(HAVE_EXPAT)),-DPLAN_HAVE_EXPAT)
$(FUZZ_BUILD)/obj/runtime/plan/%.o: FUZZ_FLAGS += -Iruntime/plan
$(FUZZ_BUILD)/obj/runtime/core/auth.o: FUZZ_FLAGS += $(SODIUM_CFLAGS)
$(FUZZ_BUILD)/obj/runtime/boot/%.o: FUZZ_FLAGS += $(SODIUM_CFLAGS)
$(FUZZ_BUILD)/obj/tests/fuzz/fuzz_rendezvous.o: FUZZ_FLAGS += -Iruntime/boot
$(FUZZ_BUILD)/fuzz_plan: $(FUZZ_PLAN_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
$(FUZZ_BUILD)/fuzz_plan: FUZZ_LIBS := $(EXPAT_LIBS)
$(FUZZ_BUILD)/fuzz_peers: $(FUZZ_PEERS_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
$(FUZZ_BUILD)/fuzz_ckpt: $(FUZZ_CKPT_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
$(FUZZ_BUILD)/fuzz_rendezvous: $(FUZZ_RDV_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
$(FUZZ_BUILD)/obj/tests/fuzz/fuzz_scenario.o $(FUZZ_BUILD)/obj/sim/%.o: FUZZ_FLAGS += -Isim \
	-Itools/keel-plan -Itools/common
$(FUZZ_BUILD)/fuzz_scenario: $(FUZZ_SCENARIO_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
$(FUZZ_BUILD)/obj/tests/fuzz/fuzz_dpdk_frame.o: FUZZ_FLAGS += -Idpdk \
	$(if $(filter 1,$(HAVE_DPDK)),$(DPDK_CFLAGS) -DKEEL_HAVE_DPDK=1)
$(FUZZ_BUILD)/fuzz_dpdk_frame: $(FUZZ_DPDK_FRAME_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)

$(FUZZ_BUILD)/obj/%.o: %.c $(CONFIG_STAMP) | fuzz-check
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/%: $(FUZZ_BUILD)/obj/tests/fuzz/%.o $(FUZZ_CORE_OBJ)
	$(FUZZ_CC) -fsanitize=fuzzer,address,undefined -o $@ $^ $(FUZZ_LIBS) $(SODIUM_LIBS) -lm

fuzz-build: fuzz-check $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/%)

fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
		mkdir -p tests/fuzz/corpus/$$t; \
		echo "== $$t: $(FUZZ_SECONDS) s"; \
		$(FUZZ_BUILD)/$$t -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
			tests/fuzz/corpus/$$t || exit 1; \
	done

-include $(FUZZ_CORE_OBJ:.o=.d) $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/obj/tests/fuzz/%.d) \
	$(patsubst %.c,$(FUZZ_BUILD)/obj/%.d,$(FUZZ_PLAN_SRC) $(FUZZ_PEERS_SRC) \
	$(FUZZ_CKPT_SRC))
-include $(patsubst %.c,$(FUZZ_BUILD)/obj/%.d,$(FUZZ_SCENARIO_SRC) $(FUZZ_DPDK_FRAME_SRC))
