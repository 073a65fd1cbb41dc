/* keel-bench preload: the pre-load executor's read throughput on one file. */
#ifndef KEEL_BENCH_PRELOAD_H
#define KEEL_BENCH_PRELOAD_H

/* argv[0] is "preload". Prints MB/s per engine; returns the exit status. */
int keel_bench_preload(int argc, char **argv);

#endif
