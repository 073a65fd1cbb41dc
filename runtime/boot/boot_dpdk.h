/* The DPDK part of the start-up (boot.c dispatches here for KEEL_TRANSPORT=dpdk): EAL from
 * KEEL_DPDK_ARGS, the port, this rank's IPv4/UDP address, and every rank's (MAC, IP, port) from
 * the rendezvous or from KEEL_DPDK_PEERS. It allocates, reads the environment and blocks during
 * rendezvous. Archived with the DPDK backend (libkeel_dpdk.a). */
#ifndef KEEL_BOOT_DPDK_H
#define KEEL_BOOT_DPDK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/launch.h"
#include "keel/transport.h"

/* Start the DPDK transport for rank l->rank. Environment:
 *   KEEL_DPDK_ARGS      EAL arguments (required), e.g. "-l 0 --vdev=net_af_packet0,iface=eth1"
 *   KEEL_DPDK_PORT      ethdev name (default: the first port)
 *   KEEL_DPDK_IP        this rank's IPv4 address in its frames (required unless it is in
 *                       KEEL_DPDK_PEERS)
 *   KEEL_DPDK_UDP_PORT  this rank's UDP port (default 47100)
 *   KEEL_DPDK_RX        busy | sleep | interrupt (default busy; busy also makes KEEL_WAIT
 *                       default to busy)
 *   KEEL_DPDK_SLEEP_US  sleep mode: longest time between polls (default 50)
 *   KEEL_DPDK_PEERS     mac@ip:port,... one per rank: a static table instead of the rendezvous
 *   KEEL_DPDK_STATS=1   print the transport's counters on stderr at stop
 * mtu: the largest keel datagram wanted (0: the port's MTU minus IPv4/UDP); the transport's
 * mtu on return is what the node must use. The rendezvous may settle l->job_id (rendezvous.h).
 * Returns 0 or a negative error with a message. */
int keel_boot_dpdk_start(struct keel_launch *l, uint32_t mtu, uint32_t burst,
			 uint64_t rendezvous_timeout_ns, struct keel_transport **out, char *err,
			 size_t err_len);

/* Print counters (if asked), finish the transport, release the EAL. Safe if never started. */
void keel_boot_dpdk_stop(void);

#endif
