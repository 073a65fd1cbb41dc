/* The kernel UDP transport: non-blocking sockets, batched with recvmmsg/sendmmsg.
 * The portable default. Unreliable and unordered (caps 0): the core adds its reliable layer.
 *
 * Ops (see keel/transport.h): send_burst sends to the addresses given by keel_udp_set_peer; it
 * returns the valid prefix it handled, or -EINVAL when d[0] names a peer out of range or never
 * set, or is longer than mtu. A full socket buffer ends the burst early (tx_would_block); an
 * error about one destination (e.g. ECONNREFUSED after a peer died) loses that one datagram
 * (tx_errors) and the burst goes on. recv_burst makes one recvmmsg straight into the caller's
 * buffers; datagrams longer than their cap or from unknown addresses are dropped and counted,
 * and the survivors are moved up by exchanging buf/cap pairs between entries of d (no bytes
 * are copied), so on return d[0..n) hold the datagrams and d[n..count_max) the other buffers.
 * wait_fd is the socket. fini closes it; safe twice. After fini, ops return KEEL_ETRANSPORT.
 * With piece_bytes, longer datagrams leave as pieces and arrive joined (below). */
#ifndef KEEL_TRANSPORT_UDP_H
#define KEEL_TRANSPORT_UDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "keel/errors.h"
#include "keel/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A piece's header (keel_udp_config.piece_bytes), and the smallest piece size keel_boot
 * takes from KEEL_UDP_PIECES (IPv4's minimum datagram). */
#define KEEL_UDP_PIECE_HDR_BYTES 8u
#define KEEL_UDP_PIECES_MIN	 576u

struct keel_udp_config {
	uint32_t rank;
	uint32_t world_size;
	const char *bind_host; /* numeric IPv4/IPv6 address; NULL means 127.0.0.1 */
	uint16_t bind_port;    /* 0 picks a free port (read it with keel_udp_local_addr) */
	uint32_t mtu;	       /* largest datagram, KEEL_MTU_MIN..KEEL_MTU_MAX */
	uint32_t burst;	       /* datagrams per recvmmsg/sendmmsg, 1..KEEL_BURST_MAX */
	int sockbuf_bytes;     /* SO_RCVBUF/SO_SNDBUF wish; 0 means 16 MiB (above
				* net.core.rmem_max it needs CAP_NET_ADMIN) */
	bool gso;	       /* coalesce runs of datagrams to one peer into one send
				* (UDP_SEGMENT) where the kernel supports it; default true */
	bool stage_runs;       /* with gso and an mtu of at most 4096: copy each coalesced run
				* into one buffer of the transport's before the send, so the
				* kernel copies one piece instead of two per datagram (header,
				* payload where it lies); default true. Costs burst x mtu bytes
				* of storage */
	/* Datagrams longer than this go as pieces of at most this many bytes (an 8-byte piece
	 * header and a share of the datagram), and pieces received are joined again: a link
	 * whose packets are shorter than the datagrams the core sends (1 472 bytes of UDP on a
	 * 1500-byte link) gets them without IP fragmentation, as runs the kernel coalesces.
	 * Every rank of the job must set it (a receiver without it hands pieces on whole, and
	 * the core drops them). A lost piece loses its datagram, which the core sends again.
	 * 0 (the default): nothing is cut or joined. Else at least 8 + mtu / 64 (rounded up: a
	 * datagram is at most 64 pieces), at most 65507; costs burst x (mtu + 512)
	 * bytes of stage and join_slots x mtu of joining. Datagrams must not begin with "KP"
	 * (keel's begin with "KEEL"). */
	uint32_t piece_bytes;
	uint32_t join_slots; /* datagrams joined at once, each from its own peer: 1..64,
			      * default 8; with more senders at once the least recent is lost */
};

/* Fill defaults: 127.0.0.1, port 0, KEEL_MTU_DEFAULT, KEEL_BURST_DEFAULT. */
void keel_udp_config_default(struct keel_udp_config *cfg);

/* Caller memory the transport needs (state, peer address table, mmsg vectors); 0 if invalid. */
size_t keel_udp_storage_size(const struct keel_udp_config *cfg);

/* Create and bind the socket inside `mem` (any alignment; mem_len >= storage_size). Peers are
 * set afterwards (rendezvous needs the bound address first). Errors: -EINVAL (bad config or
 * bind_host), -ENOSPC (mem NULL or too small), or the socket/bind errno (e.g. -EADDRINUSE,
 * -EADDRNOTAVAIL for ::1 without IPv6). On error nothing is left open and *out is NULL
 * (fini(NULL) is a no-op). keel_transport_ops.fini closes the socket. */
KEEL_MUST_USE int keel_udp_init(struct keel_transport **out, void *mem, size_t mem_len,
				const struct keel_udp_config *cfg);

/* The bound address (after init). -EBADF after fini, or getsockname's -errno. */
KEEL_MUST_USE int keel_udp_local_addr(struct keel_transport *t, struct sockaddr_storage *addr,
				      socklen_t *addr_len);

/* Where rank `peer` listens; may be called again to move a peer. Datagrams from unknown
 * addresses are dropped and counted. Senders are matched on address and port only.
 * Errors: -EINVAL (peer out of range, addr_len short, port 0, or address family differs
 * from the socket's). */
KEEL_MUST_USE int keel_udp_set_peer(struct keel_transport *t, uint32_t peer,
				    const struct sockaddr *addr, socklen_t addr_len);

struct keel_udp_stats {
	uint64_t rx_datagrams, tx_datagrams;
	uint64_t rx_syscalls, tx_syscalls;
	uint64_t rx_unknown_source;   /* from an address that is no peer's */
	uint64_t rx_truncated;	      /* longer than the buffer given */
	uint64_t tx_would_block;      /* socket buffer full; datagrams left to the caller */
	uint64_t tx_errors;	      /* other send errors (e.g. ECONNREFUSED from a dead peer) */
	uint64_t tx_gso_sends;	      /* coalesced sends (each carried 2..64 datagrams) */
	uint64_t tx_gso_refused;      /* the kernel refused a coalesced send: coalescing went off */
	uint64_t tx_staged_sends;     /* coalesced sends copied into one piece first (stage_runs,
				       * and every run of pieces) */
	uint64_t rx_gro_runs;	      /* coalesced receives (each held 2 or more datagrams) */
	uint64_t tx_cut;	      /* datagrams sent as pieces (piece_bytes) */
	uint64_t tx_pieces;	      /* the pieces they made */
	uint64_t rx_joined;	      /* datagrams joined from pieces */
	uint64_t rx_pieces_bad;	      /* pieces with a header or length that made no sense */
	uint64_t rx_pieces_abandoned; /* datagrams given up with pieces missing (lost, or the
				       * peer's next one came first, or no slot was free) */
	bool gso;		      /* send coalescing is on now */
	bool gro;		      /* receive coalescing is on */
};
void keel_udp_stats_get(struct keel_transport *t, struct keel_udp_stats *out);

/* Change the piece size of a transport made with piece_bytes (the job agreed on a smaller
 * one: the smallest link of its ranks); 0 stops cutting (pieces received are still joined).
 * Errors: -EINVAL (made without piece_bytes, or a size below 8 + mtu / 64 or above 65507). */
KEEL_MUST_USE int keel_udp_set_piece_bytes(struct keel_transport *t, uint32_t piece_bytes);

#ifdef __cplusplus
}
#endif

#endif
