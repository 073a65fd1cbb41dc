/* CRC32C (Castagnoli), hardware-accelerated where the CPU has SSE4.2: the wire format's and the
 * checkpoint format's checksum. */
#ifndef KEEL_CRC32C_INT_H
#define KEEL_CRC32C_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* crc32c(0, p, n) is the standard CRC32C of p[0..n); chainable: crc32c(crc32c(0,a),b). */
uint32_t crc32c(uint32_t crc, const void *data, size_t len);

/* crc32c of data[0..len) followed by `zeros` zero bytes: a header whose own CRC field counts
 * as zero, in one call (each datagram's header; docs/perf-history.md). */
uint32_t crc32c_then_zeros(uint32_t crc, const void *data, size_t len, size_t zeros);

/* The same, never on 512-bit registers (tests compare both ways; benchmarks time both). */
uint32_t crc32c_narrow(uint32_t crc, const void *data, size_t len);

/* True where crc32c folds inputs of 256 bytes and up on 512-bit registers (VPCLMULQDQ). */
bool crc32c_wide_available(void);

#endif
