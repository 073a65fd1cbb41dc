# make bench-peers: keel's collectives and Send/Recv beside Open MPI's and Gloo's on this host
# (issues 16 and 52; tools/bench-peers.sh, docs/perf-history.md). The peer programs live in tools/bench-peers/ and are
# built into $(BUILD)/bench-peers/, never into libkeel. They need libopenmpi-dev and
# libgloo-dev (tools/deps/bench.txt): without them plain `make` skips them silently (they are
# benchmarks, not part of keel), `make bench-peers` says what is missing and stops, and
# tests/integ/bench_peers.sh skips.
#   make bench-peers [BENCH_PEERS_ARGS="--quick --ranks 2"]
PEERS_DIR := $(BUILD)/bench-peers
PEERS_CFLAGS := -O2 -g $(WARN) -D_GNU_SOURCE -Itools/bench-peers -Itools/common
HAVE_OMPI := $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1)
HAVE_GLOO := $(if $(wildcard /usr/include/gloo/allreduce_ring.h),$(if $(wildcard \
	/usr/lib/libgloo.so /usr/lib/*/libgloo.so),1))
PEERS_MISSING := $(strip $(if $(HAVE_OMPI),,libopenmpi-dev) $(if $(HAVE_GLOO),,libgloo-dev) \
	$(if $(shell command -v mpirun 2>/dev/null),,openmpi-bin))
PEERS_BINS := $(PEERS_DIR)/ompi-coll $(PEERS_DIR)/gloo-allreduce $(PEERS_DIR)/gloo-coll
BENCH_PEERS_ARGS ?=

# Built by `make tests` where the packages are (not again by the sanitizer build), so the smoke
# test finds them ready.
ifeq ($(PEERS_MISSING)$(SAN),)
EXTRA_TESTS += $(PEERS_BINS)
endif

.PHONY: bench-peers bench-peers-build bench-peers-check
bench-peers-check:
	@[ -z "$(PEERS_MISSING)" ] || { echo "keel: make bench-peers needs $(PEERS_MISSING)" \
		"(apt-get install $(PEERS_MISSING), or tools/deps.sh)"; false; }

bench-peers-build: bench-peers-check $(PEERS_BINS)

bench-peers: all bench-peers-build
	tools/bench-peers.sh --build $(BUILD) $(BENCH_PEERS_ARGS)

$(PEERS_DIR)/peer_common.o: tools/bench-peers/peer_common.c tools/bench-peers/peer_common.h \
	tools/common/size_arg.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(PEERS_CFLAGS) -c $< -o $@

$(PEERS_DIR)/size_arg.o: tools/common/size_arg.c tools/common/size_arg.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(PEERS_CFLAGS) -c $< -o $@

$(PEERS_DIR)/ompi-coll: tools/bench-peers/ompi_coll.c $(PEERS_DIR)/peer_common.o \
	$(PEERS_DIR)/size_arg.o \
	| bench-peers-check
	$(CC) -std=c11 $(PEERS_CFLAGS) $(shell pkg-config --cflags ompi-c 2>/dev/null) -o $@ $^ \
		$(shell pkg-config --libs ompi-c 2>/dev/null) -lm

$(PEERS_DIR)/gloo-allreduce: tools/bench-peers/gloo_allreduce.cc $(PEERS_DIR)/peer_common.o \
	$(PEERS_DIR)/size_arg.o \
	| bench-peers-check
	$(CXX) -std=c++17 $(filter-out -Wmissing-prototypes -Wstrict-prototypes -Wvla,\
		$(PEERS_CFLAGS)) -o $@ $^ -lgloo -lpthread -lm

$(PEERS_DIR)/gloo-coll: tools/bench-peers/gloo_coll.cc $(PEERS_DIR)/peer_common.o \
	$(PEERS_DIR)/size_arg.o \
	| bench-peers-check
	$(CXX) -std=c++17 $(filter-out -Wmissing-prototypes -Wstrict-prototypes -Wvla,\
		$(PEERS_CFLAGS)) -o $@ $^ -lgloo -lpthread -lm
