/* What the start-up library's files share and a program does not see. */
#ifndef KEEL_BOOT_INT_H
#define KEEL_BOOT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct keel_launch;

/* Write a message into err (if not NULL) and return `code`: the one way the start-up fails
 * with a reason. */
__attribute__((format(printf, 4, 5))) int keel_fail(char *err, size_t err_len, int code,
						    const char *fmt, ...);

/* Decimal digits only (no sign, space or base prefix), s[0..len), at most max: the one number
 * reader of the environment (env.c) and the launcher's variables (launch.c). */
bool keel_parse_decimal(const char *s, size_t len, uint64_t max, uint64_t *out);

/* A host identity from a name (launch.c): FNV-1a over `space` and `name`, never 0. */
uint64_t keel_launch_host_hash(const char *space, const char *name);

/* KEEL_JOB_KEY_FILE or KEEL_JOB_KEY into out->key (launch_key.c); errors as
 * keel_launch_from_env's. Without a key variable: 0, and out->has_key stays false. */
int keel_launch_read_key(struct keel_launch *out, char *err, size_t err_len);

/* The MTU of the interface that holds `host` (numeric), or for a wildcard address the smallest
 * MTU of the interfaces that are up, loopback aside (link_mtu.c); 0 when unknown.
 * *ip_udp_header: the IP and UDP header bytes a datagram adds there (28 or 48). */
uint32_t keel_boot_link_mtu(const char *host, uint32_t *ip_udp_header);

#endif
