# keel-train reads the digits data set (gzip'd CSV) with zlib: every program links -lz
# (zlib1g-dev is in tools/deps/core.txt; the data set comes from tools/deps/train.txt).
EXTRA_SYS_LIBS += -lz
