/* The node's capacities and defaults (struct keel_config, keel_config_default): what each
 * bounds and why; keel_init checks config values against the hard maxima here.
 * A module with a config of its own keeps its bounds and defaults in its own header, beside
 * that config: transport_udp.h, transport_shm.h, transport_router.h, transport_dpdk.h,
 * transport_verbs.h (transports); device_cpu.h, device_cuda.h (devices); checkpoint.h,
 * partition.h, sched.h, preload.h, arrow.h (storage, planning, data); metrics_http.h, posix.h
 * and boot.h (the start-up library: KEEL_RENDEZVOUS_TIMEOUT_MS_DEFAULT). The KEEL_* environment
 * variables name these constants as their defaults in one table (runtime/boot/env_table.def,
 * keel/env.h; docs/reference/env.md). */
#ifndef KEEL_LIMITS_H
#define KEEL_LIMITS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Ranks in one job. Bounds peer tables; 16-bit ranks on the wire. */
#define KEEL_WORLD_MAX 4096u
/* Datagram size bounds (keel header included). 65507 is the largest UDP/IPv4 payload. */
#define KEEL_MTU_MIN 256u
#define KEEL_MTU_MAX 65507u
/* Default datagram: fits a 9000-byte jumbo frame after IPv4+UDP headers. */
#define KEEL_MTU_DEFAULT 8972u
/* Reliable window per peer, in datagrams, power of two. Bounds in-flight and reorder
 * memory: 2 * window * mtu bytes per peer. 64 * 8972 B covers a 100 us RTT at 5 GB/s.
 * keel_boot gives UDP ranks with smaller datagrams up to 4x as many (256 at 1472 bytes), and
 * the burst likewise (docs/guide/transports.md). */
#define KEEL_WINDOW_DEFAULT 64u
#define KEEL_WINDOW_MAX	    1024u
/* Datagrams moved per recvmmsg/sendmmsg call. */
#define KEEL_BURST_DEFAULT 32u
#define KEEL_BURST_MAX	   256u
/* Collective operations that may be started and not yet completed. */
#define KEEL_OPS_DEFAULT 8u
#define KEEL_OPS_MAX	 256u
/* Device (GPU) AllReduce: pieces of device work one operation keeps queued, per kind (input
 * chunks being staged; received regions being reduced into device memory). 16 x 1 MiB
 * chunks keep a PCIe 5 link busy for ~300 us, far longer than a kernel launch or an event
 * poll. */
#define KEEL_DEVICE_INFLIGHT_MAX 16u
/* Bytes per device call: the input is staged in chunks of this size, and received fragments
 * are gathered up to it before one reduction is queued (keel_config.device_chunk_bytes). Each
 * call costs 7-11 us on an H200 whatever its size; 512 KiB-4 MiB gave 2 ranks the same
 * times, 10-20 % under 256 KiB's at 4-64 MiB (docs/PERF.md, "On an NVIDIA H200"). */
#define KEEL_DEVICE_CHUNK_DEFAULT (1024u << 10)
#define KEEL_DEVICE_CHUNK_MIN	  4096u
/* GPUDirect RDMA: datagrams whose device payload the device copies to the host at once, when
 * the way to a peer no longer has a NIC that reads device memory (a router fell back from
 * verbs). Each holds one datagram in the node's storage (a node with a device only). */
#define KEEL_DEVICE_COPYIN_MAX 4u
/* Failure detection. */
/* 10 ms: suspicion after 3 silent intervals plus the silence margin and the probes (47.5 ms
 * at most: keel_detect_bound_ns), and no false suspicions when ranks share cores with other
 * work (docs/PERF.md). Dedicated cores run 1 ms on UDP, 100-500 us on DPDK/verbs. */
#define KEEL_HEARTBEAT_NS_DEFAULT 10000000ull
#define KEEL_MISS_LIMIT_DEFAULT	  3u
/* A peer silent past miss_limit intervals (plus a margin for its measured delay and jitter)
 * gets this many direct probes, a quarter interval apart, before it is suspected: it refutes
 * by answering any one. 3 probes: at 1 % independent loss a live peer fails all of them
 * about once in 10^5 would-be suspicions, themselves about once in 10^6 intervals. 0: none. */
#define KEEL_PROBES_DEFAULT 3u
#define KEEL_PROBES_MAX	    16u
/* All-to-all heartbeats up to this world size; above it each rank watches k ring
 * neighbours so heartbeat cost stays O(k*N). */
#define KEEL_FD_ALL_TO_ALL_MAX 32u
#define KEEL_FD_FANOUT_DEFAULT 4u
/* Start-up grace: no peer is suspected within this long of init. Ranks start a few ms apart
 * and fault in their arenas at the same time, so the first moments of a job are its noisiest;
 * a peer that dies then is found when the grace ends. */
#define KEEL_JOIN_TIMEOUT_NS_DEFAULT 2000000000ull
/* Retransmission timer bounds (RFC 6298 style, scaled for datacentre RTTs). */
#define KEEL_RTO_INITIAL_NS_DEFAULT 2000000ull /* before any RTT sample */
/* 1 ms: 200 us resent 0.06-0.1 % of datagrams needlessly on loopback (a receiver may spend
 * most of a millisecond in one 1 MiB poll); losses a later datagram reveals are resent after
 * 1.25 RTT anyway (RACK), so the minimum only matters for the last datagram of a burst. */
#define KEEL_RTO_MIN_NS_DEFAULT 1000000ull
#define KEEL_RTO_MAX_NS_DEFAULT 200000000ull
/* In-order data is acknowledged within this long even when no other traffic carries the ack
 * (usually the next collective step does); must stay well below rto_min. */
#define KEEL_ACK_DELAY_NS_DEFAULT 50000ull
/* A collective whose peers have entered it that moves no data for this long is a soft fault
 * (restarted on a new epoch). 0: derived from the detector, 2 x rto_max + 2 x
 * keel_recovery_bound_ns (faults the detector sees end sooner, by a view change). */
#define KEEL_OP_TIMEOUT_NS_DEFAULT 0ull
/* How long a collective waits for a live member whose program has not started it yet (busy
 * between collectives: a checkpoint write, data loading, a slow step), then fails with
 * -ETIMEDOUT. Not a fault the detector can see; PyTorch waits 10 min, keel reports a hung
 * program within a minute. */
#define KEEL_ENTRY_TIMEOUT_NS_DEFAULT 60000000000ull
/* AllReduce: recursive doubling up to this many bytes, ring above. Measured on loopback
 * (docs/PERF.md): recursive doubling is faster up to 128 KiB at 2 and 4 ranks (fewer steps,
 * each a wakeup); it moves log2(n) copies of the buffer against the ring's 2(n-1)/n, so the
 * default stays below the 4-rank crossover for larger worlds. */
#define KEEL_RD_MAX_BYTES_DEFAULT 65536u
/* AllReduces up to this size are reported at once, their result kept (keel_config); a view
 * carries a result of up to KEEL_EAGER_RESULT_MAX bytes, the most eager_result_bytes gives. */
#define KEEL_EAGER_RESULT_BYTES_DEFAULT 1024u
#define KEEL_EAGER_RESULT_MAX		1024u
/* Gradient compression, KEEL_COMPRESS_AUTO: a link is compressed once its traffic over the
 * last window or two passes this share of the bandwidth measured on it; a bandwidth sample is
 * one collective's bytes to a peer over the time they took, from collectives that sent at
 * least KEEL_COMPRESS_SAMPLE_BYTES to it. The window is long enough to hold a few training
 * steps: a step computes, then communicates, so at the start of its AllReduce the link has just
 * been idle for the whole compute phase; what says whether the network is the bottleneck is its
 * share of the whole step (keel-sim, 350 M parameters over 25 GbE: 100 ms windows never saw
 * the link busy, with comm 72 % of the step). */
#define KEEL_COMPRESS_UTIL_PCT_DEFAULT 50u
#define KEEL_COMPRESS_WINDOW_NS	       1000000000ull
#define KEEL_COMPRESS_SAMPLE_BYTES     (256u << 10)
#define KEEL_SOFT_RETRIES_DEFAULT      3u
/* A membership round waits this long for members that are slow to answer (0: miss_limit
 * heartbeat intervals, what the detector gives a silent peer anyway). */
#define KEEL_VIEW_TIMEOUT_NS_DEFAULT 0ull
/* Authentication (keel_config.auth): a 256-bit per-job key, and what it adds to each datagram
 * (the MAC trailer: the sender's incarnation, algorithm, a 48-bit per-sender counter, a
 * 16-byte tag). Replays are refused by a sliding window of this many counter values per peer:
 * a sender's counter counts datagrams to all its peers, so the window must cover the
 * reordering of one peer's datagrams among everyone's. */
#define KEEL_AUTH_KEY_BYTES	32u
#define KEEL_AUTH_TRAILER_BYTES 32u
#define KEEL_AUTH_REPLAY_WINDOW 1024u
/* Views travel in one datagram: members x 6 bytes plus this must fit the MTU. */
#define KEEL_VIEW_MSG_OVERHEAD 64u

#ifdef __cplusplus
}
#endif

#endif
