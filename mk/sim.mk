# keel-sim: the SimGrid simulator (sim/). Built only when pkg-config finds simgrid
# (libsimgrid-dev); the core and the other tools never link SimGrid.
# Actor code is compiled with -fexceptions: SimGrid unwinds killed actors with an exception.
ifeq ($(HAVE_SIMGRID),1)
ifeq ($(SAN),)
SIM_SRC := sim/keel_sim_main.c sim/ckpt_optimum.c sim/fidelity.c sim/platform.c sim/plots.c sim/report.c sim/run.c sim/scenario.c \
	sim/straggler_sim.c sim/transport_sim.c
# The presets and `define` lines are read by tools/common/plan_preset.c (no expat in it), so both
# tools read them alike; SimGrid platform files by SimGrid itself (sim/platform_load.cc).
SIM_OBJ := $(SIM_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/sim/actor_guard.o \
	$(BUILD)/obj/sim/comm_wait.o $(BUILD)/obj/sim/platform_load.o $(PRESET_OBJ) $(PLOT_OBJ) \
	$(CLI_OBJ)
SIM_CFLAGS := $(shell pkg-config --cflags simgrid) -fexceptions
SIM_LIBS := $(shell pkg-config --libs simgrid)
KEEL_SIM := $(BUILD)/bin/keel-sim

$(BUILD)/obj/sim/%.o: sim/%.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_KEEL) $(INC) -Itools/common $(SIM_CFLAGS) \
		-MMD -MP -c $< -o $@

# C++ only to catch SimGrid's exceptions: a failed comm (sim/comm_wait.cc says why), one that
# escapes an actor (sim/actor_guard.cc), a platform file or route SimGrid refuses
# (sim/platform_load.cc).
$(BUILD)/obj/sim/%.o: sim/%.cc sim/%.h $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Werror $(SIM_CFLAGS) -MMD -MP -c $< -o $@

$(KEEL_SIM): $(SIM_OBJ) $(REFCHECK_OBJ) $(LIBBOOT) $(LIBKEEL)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS_KEEL) -o $@ $(SIM_OBJ) $(REFCHECK_OBJ) $(LINK_GROUP) $(SIM_LIBS) -lm

EXTRA_ALL += $(KEEL_SIM)
EXTRA_TESTS += $(KEEL_SIM)
-include $(SIM_OBJ:.o=.d)
endif
endif
