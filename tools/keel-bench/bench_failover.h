/* keel-bench failover: failure detection and view change, measured by killing ranks. */
#ifndef KEEL_BENCH_FAILOVER_H
#define KEEL_BENCH_FAILOVER_H

/* argv[0] is "failover". Prints per-trial lines and p50/p99/max; returns the exit status. */
int keel_bench_failover(int argc, char **argv);

#endif
