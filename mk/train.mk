# keel-train reads the digits data set (gzip'd CSV) with zlib, and checks its shard file's
# CRC-32s with it: only keel-train and its unit tests link -lz (zlib1g-dev is in
# tools/deps/core.txt; the data set comes from tools/deps/train.txt).
$(BUILD)/bin/keel-train $(BUILD)/tests/test_train $(BUILD)/tests/test_train_feed: EXTRA_SYS_LIBS += -lz
