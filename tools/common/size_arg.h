/* Sizes on benchmark command lines ("4", "64K", "16M", "1G"): keel-bench and the peer
 * benchmarks (tools/bench-peers) read them alike. */
#ifndef KEEL_SIZE_ARG_H
#define KEEL_SIZE_ARG_H

#include <stdint.h>

/* A whole number with an optional K, M or G suffix (powers of 1024, either case) into *out.
 * -EINVAL for anything else: empty, negative, out of range, other suffixes or trailing text. */
int keel_size_arg(const char *s, uint64_t *out);

#endif
