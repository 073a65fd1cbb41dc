# keel-train reads the digits data set (gzip'd CSV) with zlib: only keel-train and its unit
# test link -lz (zlib1g-dev is in tools/deps/core.txt; the data set comes from
# tools/deps/train.txt).
$(BUILD)/bin/keel-train $(BUILD)/tests/test_train: EXTRA_SYS_LIBS += -lz
