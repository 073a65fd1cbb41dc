/* The ibverbs part of a tool's start-up (boot.c dispatches here for
 * KEEL_TRANSPORT=verbs): device, port and GID, one RC QP per peer, and the exchange of every
 * rank's address and QPNs over the rendezvous. Tools only: it allocates, reads the
 * environment and blocks during rendezvous. */
#ifndef KEEL_BOOT_VERBS_H
#define KEEL_BOOT_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/launch.h"
#include "keel/transport.h"

/* Start the verbs transport for rank l->rank. Environment (all optional):
 *   KEEL_VERBS_DEVICE   device name (ibv_devices), default: the first with an active port
 *   KEEL_VERBS_PORT     port number (default: the first active one)
 *   KEEL_VERBS_GID      GID index (default: automatic, a RoCEv2 IPv4-mapped GID first)
 *   KEEL_VERBS_POLL     busy | event (default busy; busy also makes KEEL_WAIT default busy)
 *   KEEL_VERBS_SLOTS    receive slots per peer (power of two, default 32)
 *   KEEL_VERBS_TIMEOUT  QP ACK timeout exponent (default 14: 67 ms)
 *   KEEL_VERBS_RETRY    QP retry count (default 7)
 *   KEEL_VERBS_STATS=1  print the transport's counters on stderr at stop
 * The rendezvous carries each rank's address in a first round (MASTER_PORT) and its QPNs in
 * ceil(world / 16) more rounds (MASTER_PORT + 1, + 2, ...); the first may settle l->job_id
 * (rendezvous.h). KEEL_PEERS is not supported.
 * mtu: the largest keel datagram (slot size; 0: 64 KiB). Returns 0 or a negative error with
 * a message in err. */
int keel_boot_verbs_start(struct keel_launch *l, uint32_t mtu, uint64_t rendezvous_timeout_ns,
			  struct keel_transport **out, char *err, size_t err_len);

/* keel_verbs_register / _dmabuf / _unregister on the started transport; 1 when verbs was not
 * started (nothing to register with). */
int keel_boot_verbs_register(const void *addr, size_t len, int dmabuf_fd, uint64_t offset);
int keel_boot_verbs_unregister(const void *addr);
/* keel_verbs_device_area_bytes (0 when verbs was not started) and
 * keel_verbs_register_device_area (1 when verbs was not started). */
size_t keel_boot_verbs_area_bytes(void);
int keel_boot_verbs_register_area(void *addr, size_t len, int fd, uint64_t offset);

/* Print counters (if asked) and finish the transport. Safe if never started. */
void keel_boot_verbs_stop(void);

#endif
