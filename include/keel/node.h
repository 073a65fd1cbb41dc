/* A keel node: configuration, init on caller memory, the poll loop, views, peers, counters.
 * The node never allocates, never creates threads, never reads a clock and never sleeps:
 * the caller passes now_ns to keel_poll and waits until the deadline it returns. */
#ifndef KEEL_NODE_H
#define KEEL_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/limits.h"
#include "keel/trace.h"
#include "keel/transport.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct keel_node;

enum keel_algo {
	/* Recursive doubling up to rd_max_bytes (or fewer elements than members); above, the
	 * hierarchical algorithm where it applies (see KEEL_ALGO_HIER), else the ring. */
	KEEL_ALGO_AUTO = 0,
	KEEL_ALGO_RING,
	KEEL_ALGO_RD, /* recursive doubling */
	/* Two levels, by host (keel_config.host_of): a ring reduce-scatter among the members of
	 * each host, an AllReduce of each member's slice among the members with the same local
	 * index on the other hosts (recursive doubling for slices up to rd_max_bytes, ring above),
	 * a ring all-gather inside each host. Runs when the view has at least 2 hosts and every
	 * host has the same number of members, at least 2; on any other view (uneven hosts after
	 * a failure, one rank per host) the operation runs as AUTO's flat choice instead. */
	KEEL_ALGO_HIER,
};

/* How gradient AllReduces (keel_allreduce_grad_start) travel on the wire. Plain AllReduces are
 * never compressed. AUTO: as bf16 on a link to another host (host_of) whose measured
 * utilisation passes compress_util_pct of the bandwidth keel measured on it, else as f32 (a
 * peer on the same host is reached at memory speed, where encoding costs more than it saves); OFF:
 * always f32; BF16 / F16: always that encoding (F16 keeps 3 more mantissa bits, but values beyond
 * +-65504 go as f32). See keel/collectives.h. */
enum keel_compress {
	KEEL_COMPRESS_AUTO = 0,
	KEEL_COMPRESS_OFF,
	KEEL_COMPRESS_BF16,
	KEEL_COMPRESS_F16,
};

/* The caller's time and waiting, used only by the blocking calls (keel_allreduce).
 * now_ns: a monotonic clock. wait: return when `deadline_ns` passes or the transport
 * may have input, whichever is first; may return early. */
struct keel_waiter {
	uint64_t (*now_ns)(void *ctx);
	void (*wait)(void *ctx, uint64_t deadline_ns);
	void *ctx;
};

/* The MAC on every datagram when keel_config.auth is set. AUTO: AES-256-GCM where this CPU
 * has AES-NI and carry-less multiply, else ChaCha20-Poly1305. Every rank must be able to
 * check what the others send: a job on mixed CPUs sets CHACHA20POLY1305 everywhere. */
enum keel_mac {
	KEEL_MAC_AUTO = 0,
	KEEL_MAC_AES256GCM,
	KEEL_MAC_CHACHA20POLY1305,
};

enum keel_peer_state {
	KEEL_PEER_ALIVE = 0,
	KEEL_PEER_SUSPECTED,
	KEEL_PEER_DEAD,
	KEEL_PEER_SELF,
};

struct keel_view;
struct keel_device; /* keel/device.h */

/* Called from keel_poll when a peer changes state. Must not call back into the node. */
typedef void (*keel_peer_fn)(void *ctx, uint32_t peer, enum keel_peer_state state, uint64_t now_ns);
/* Called from keel_poll when this node installs a view (members: the member ranks in order).
 * Must not call back into the node; keel_view_get gives the same data later. */
typedef void (*keel_view_fn)(void *ctx, const struct keel_view *view, const uint32_t *members,
			     uint64_t now_ns);

struct keel_config {
	uint32_t rank;
	uint32_t world_size; /* 1..KEEL_WORLD_MAX */
	uint32_t job_id;     /* datagrams of another job are dropped and counted */
	uint32_t mtu;	     /* largest datagram; clamped to the transport's mtu */
	uint32_t window;     /* reliable window per peer, datagrams, power of two */
	uint32_t burst;	     /* datagrams per transport call */
	uint32_t ops_max;    /* collective operations started and not yet completed */
	uint64_t heartbeat_ns;
	uint32_t miss_limit;	  /* silent intervals before a peer is suspected */
	uint32_t fd_fanout;	  /* watchers per member (ring distances 1, 2, 4...) when world >
				     KEEL_FD_ALL_TO_ALL_MAX */
	uint64_t join_timeout_ns; /* start-up grace: nobody is suspected this soon after init */
	uint64_t rto_initial_ns, rto_min_ns, rto_max_ns;
	uint64_t ack_delay_ns; /* longest wait for traffic to carry an ack, < rto_min_ns */
	/* A collective whose peers it waits for have started it, and that moves nothing for
	 * this long, is a soft fault: restarted on a new epoch, soft_retries times, then
	 * -ETIMEDOUT (0: derived from the detector, see KEEL_OP_TIMEOUT_NS_DEFAULT). */
	uint64_t op_timeout_ns;
	/* A collective waits this long for a live member that has not started it, then fails
	 * with -ETIMEDOUT. */
	uint64_t entry_timeout_ns;
	uint32_t probes; /* direct probes of a silent peer before suspecting it (0..16) */
	uint32_t soft_retries;
	enum keel_algo algo;
	uint32_t rd_max_bytes;
	/* Which ranks share a host (shared memory, NVLink): world_size entries, host_of[r] the
	 * host number of rank r, each in 0..world_size-1 (e.g. the lowest rank on that host);
	 * equal numbers mean the same host. NULL: every rank is a host of its own. keel_init
	 * copies it into the node's storage. Only the collectives read it (KEEL_ALGO_HIER). */
	const uint32_t *host_of;
	struct keel_transport *transport; /* required; owned by the caller */
	struct keel_waiter waiter;	  /* required only for blocking calls */
	keel_peer_fn on_peer;		  /* optional */
	void *on_peer_ctx;
	/* Membership. A process that restarts gives a higher incarnation than its previous life
	 * (keel-run passes KEEL_INCARNATION) and sets rejoin: it starts outside any view and is
	 * admitted by the next view change. */
	uint32_t incarnation; /* > 0 */
	bool rejoin;
	uint64_t view_timeout_ns;    /* a view-change round waits this long for slow members,
				      * and is retried after twice this (0: miss_limit intervals) */
	uint64_t restart_copy_bytes; /* in-place collectives up to this size keep a copy of their
				      * input so a view change can restart them; larger ones
				      * fail with KEEL_EVIEWCHANGED instead (0: none) */
	/* AllReduces on host buffers of at most this many bytes are reported as soon as this
	 * node has the result, and the node keeps a copy of the last one: a view change that
	 * finds such a result at some members only carries it, in the view itself, to the
	 * members still without it, which report it too (so one trip per collective where
	 * larger ones take two: their result waits until every member has it). At most
	 * KEEL_EAGER_RESULT_MAX, and what one control datagram carries besides the view (about
	 * mtu - 200 - 6 x world_size bytes); a multiple of 8. 0: every result waits for every
	 * member. Ranks may differ in it: each takes what the others kept. */
	uint32_t eager_result_bytes;
	/* Such a result reported, the acks this node owes go at once to every member but the
	 * one the next collective of the same shape sends to first (its data carries the ack).
	 * With acks_ride, also the others that collective sends to (recursive doubling's later
	 * partners) wait for its data, up to ack_delay_ns: one datagram fewer per partner and
	 * collective, and no poll woken for it. Off by default: where ranks outnumber the
	 * cores, an ack left to its timer wakes a rank that waits for a core. keel_boot turns
	 * it on where they do not (KEEL_ACKS_RIDE=0|1 decides instead). */
	bool acks_ride;
	/* Over a transport that may lose datagrams, when a peer's acks stop while data is out,
	 * the newest unacked datagram goes again after max(2 srtt, srtt + 4 rttvar) + ack_delay_ns
	 * (RFC 8985's tail loss probe), once until an ack moves: a lost last datagram of a step
	 * has no later one whose ack would reveal it, and would wait for the retransmission timer
	 * (rto_min_ns, 1 ms). Off by default: where ranks outnumber the cores, acks come late
	 * often, and each probe would go to a rank waiting for a core. keel_boot turns it on
	 * where they do not (KEEL_TAIL_PROBE=0|1 decides instead). */
	bool tail_probe;
	keel_view_fn on_view; /* optional */
	void *on_view_ctx;
	/* Trace events (keel/trace.h): collectives, suspicions, view rounds and views. */
	keel_event_fn on_event; /* optional */
	void *on_event_ctx;
	/* Peers that hold reliable-window buffers at once (window x mtu each way). 0: every
	 * peer has its own, fixed (world x window x mtu x 2 bytes). Fewer, for large worlds: a
	 * peer takes a free one when it has data in flight or held, and gives it back when idle.
	 * A collective talks to 2 peers at a time (ring) or log2(world) in turn (recursive
	 * doubling), so ops_max x (2 + log2(world)) never waits for one. */
	uint32_t streams;
	/* Authentication. With auth set, every datagram carries a MAC under auth_key (a secret
	 * every rank of the job shares and nobody else has: keel-run makes one per job; see
	 * security.md) covering header and payload, in place of the CRC; a datagram without
	 * a valid MAC, or one already received (a replay), is dropped and counted. Datagrams
	 * through memory only the job's user can write (a transport with KEEL_CAP_INTACT: shared
	 * memory) go without MAC and CRC, and only such a transport's are taken so. Without it
	 * keel checks a CRC32C only: anyone who can send to the job's ports can forge traffic.
	 * Each life of a rank must have a new incarnation (the MAC's nonce includes it). */
	bool auth;
	enum keel_mac mac;
	uint8_t auth_key[KEEL_AUTH_KEY_BYTES];
	/* The device keel_allreduce_device_start's buffers live on (keel/device.h; NULL: none,
	 * host buffers only), owned by the caller, and the bytes per device call (0: the
	 * default, KEEL_DEVICE_CHUNK_DEFAULT; at least KEEL_DEVICE_CHUNK_MIN). */
	struct keel_device *device;
	uint32_t device_chunk_bytes;
	/* Gradient compression (enum keel_compress) and AUTO's threshold: the share of a link's
	 * measured bandwidth, in percent (1..100; 0: KEEL_COMPRESS_UTIL_PCT_DEFAULT), that its
	 * recent traffic must pass. */
	enum keel_compress compress;
	uint32_t compress_util_pct;
};

/* Fill `cfg` with the defaults of include/keel/limits.h; rank, world_size and transport
 * are left for the caller (rank 0, world 1, no transport). */
void keel_config_default(struct keel_config *cfg);

/* Longest time from a peer's last datagram to its suspicion, from the config: miss_limit
 * intervals, the silence margin (a quarter interval plus the measured one-way delay and four
 * times its variation, at most one interval), then `probes` probes a quarter interval apart:
 * (miss_limit + 1) x heartbeat_ns + probes x heartbeat_ns / 4, plus the path's latency. */
uint64_t keel_detect_bound_ns(const struct keel_config *cfg);

/* The smallest mtu keel_init accepts for `world_size` ranks: a membership view travels in one
 * control datagram (about 6 bytes per rank; 1 472 bytes carry up to ~215 ranks). 0 when
 * world_size is 0 or above KEEL_WORLD_MAX. */
uint32_t keel_view_mtu_min(uint32_t world_size);

/* Bytes of caller memory keel_init needs for `cfg`, or 0 if cfg is invalid.
 * The figure depends on world_size, window, mtu, burst, ops_max, streams, auth,
 * restart_copy_bytes and eager_result_bytes only. */
size_t keel_storage_size(const struct keel_config *cfg);

/* Validate `cfg` and build a node inside `mem` (at least keel_storage_size bytes,
 * 64-byte alignment recommended; no other memory is used).
 * Errors: -EINVAL (a field out of range: rank >= world, window not a power of two,
 * missing transport, mtu below KEEL_MTU_MIN, a host_of entry >= world_size...), -ENOSPC (mem_len
 * too small), -ENOTSUP (auth set, but keel was built without libsodium, or mac is
 * KEEL_MAC_AES256GCM on a CPU without AES-NI). The transport must outlive the node. `now_ns` starts
 * the failure detector. */
KEEL_MUST_USE int keel_init(struct keel_node **out, void *mem, size_t mem_len,
			    const struct keel_config *cfg, uint64_t now_ns);

/* Do all pending work: receive, acknowledge, retransmit, heartbeat, detect failures,
 * advance collectives. Never blocks. Sets *next_deadline_ns to the latest time the
 * caller may wait before calling again (input on the transport's fd also warrants a call).
 * Returns 0, or KEEL_ETRANSPORT when the transport failed fatally. */
KEEL_MUST_USE int keel_poll(struct keel_node *node, uint64_t now_ns, uint64_t *next_deadline_ns);

/* The view of the cluster: its epoch and who is in it. Epochs only grow; every member that
 * installs epoch e installs the same member set. */
struct keel_view {
	uint32_t epoch; /* 0 while a rejoining node waits to be admitted */
	uint32_t member_count;
	uint32_t world_size;
	uint32_t self;
	bool self_member;      /* false: waiting to join, or left out (KEEL_ENOQUORUM, split) */
	bool self_joined;      /* this view admitted this node (restart or rejoin after a split) */
	uint32_t joined_count; /* members admitted by this view */
	/* The lowest member that was also in the previous view: where a node that just joined
	 * fetches state (e.g. keel_broadcast from it). UINT32_MAX when none. */
	uint32_t donor;
	/* Collectives the members had started and not finished when this view was decided: a
	 * node that just joined takes part in that many before its own (they restart here). */
	uint32_t ops_resume;
};
/* Fill `view`; `members` (capacity `members_cap`) gets the live ranks in order.
 * Returns the number of members written, or -ENOSPC if members_cap is too small. */
KEEL_MUST_USE int keel_view_get(const struct keel_node *node, struct keel_view *view,
				uint32_t *members, uint32_t members_cap);

struct keel_peer_info {
	enum keel_peer_state state; /* DEAD: not in this node's view (left, failed, excluded) */
	bool member;		    /* in this node's current view */
	uint32_t incarnation;	    /* latest heard from it (0: never heard) */
	uint64_t last_heard_ns;
	uint64_t rtt_ns;      /* smoothed heartbeat round-trip time, 0 before the first sample */
	uint64_t rtt_ns_last; /* last heartbeat round trip */
	uint64_t rto_ns;      /* retransmission timeout, from data acks (includes peer polling) */
	uint64_t rtt_samples; /* heartbeat round trips measured so far */
	uint64_t data_sent;   /* reliable datagrams sent to this peer for the first time */
	uint64_t retransmits; /* datagrams sent again to this peer */
	uint64_t suspicions;
	bool left; /* it announced a clean exit (keel_leave) and no later life has spoken since */
};
/* -EINVAL if peer >= world_size. */
KEEL_MUST_USE int keel_peer_get(const struct keel_node *node, uint32_t peer,
				struct keel_peer_info *info);
bool keel_peer_is_alive(const struct keel_node *node, uint32_t peer);

/* Datagrams dropped, by reason, and other event counts. Monotonic since init. */
struct keel_counters {
	uint64_t rx_datagrams, tx_datagrams;
	uint64_t rx_bytes, tx_bytes; /* of those datagrams, headers included */
	uint64_t drop_truncated;     /* shorter than the header */
	uint64_t drop_magic;
	uint64_t drop_version;
	uint64_t drop_type;
	uint64_t drop_length; /* payload length disagrees with the datagram or bounds */
	uint64_t drop_crc;
	uint64_t drop_auth;   /* auth: no MAC, a MAC that does not verify, or a MAC where this
			       * node has no key (a rank started with a different key, or a forger) */
	uint64_t drop_replay; /* auth: a MAC'd datagram received before, or from an older life */
	uint64_t drop_job;
	uint64_t drop_epoch;
	uint64_t drop_source;	    /* unknown rank, or the transport disagrees about the sender */
	uint64_t drop_destination;  /* not addressed to this rank */
	uint64_t drop_duplicate;    /* reliable datagram already delivered */
	uint64_t drop_window;	    /* beyond the receive window */
	uint64_t drop_no_stream;    /* out of order, and no window buffers free to hold it
				     * (config streams): the sender resends it */
	uint64_t drop_stale;	    /* data for an operation that already finished */
	uint64_t drop_device_later; /* a payload the NIC wrote into device memory that the
				     * device could not take at once: given back to the NIC,
				     * not acknowledged (the sender resends it), since a held
				     * payload would stop the peer's credits */
	uint64_t drop_protocol;	    /* well formed, but not what the operation expects (step,
				     * offset, size): a peer with a different config or a bug */
	uint64_t data_sent;	    /* reliable datagrams sent for the first time */
	uint64_t data_delivered;    /* reliable datagrams handed to the collectives, in order */
	uint64_t retransmits;
	uint64_t fast_retransmits;
	uint64_t tail_probes; /* retransmissions of a silent flight's newest datagram */
	uint64_t acks_sent;
	uint64_t heartbeats_sent, heartbeats_received;
	uint64_t suspicions, false_suspicions;
	uint64_t probes_sent;	 /* direct probes to silent peers (not yet suspected) */
	uint64_t probes_refuted; /* silent peers that answered before being suspected */
	uint64_t local_pauses;	 /* polls that came two or more intervals after the previous one */
	uint64_t tx_blocked;	 /* datagrams the transport refused for now */
	uint64_t ops_completed, ops_failed;
	uint64_t ops_restarted;	   /* collectives restarted on a new view */
	uint64_t ops_adopted;	   /* results a view change brought from members that reported
				    * them early (eager_result_bytes) */
	uint64_t view_changes;	   /* views installed after the first */
	uint64_t view_proposals;   /* view-change rounds this node started as coordinator */
	uint64_t drop_view;	   /* membership messages malformed or for a view we cannot use */
	uint64_t noquorum_entries; /* times this node found itself without a majority */
	uint64_t self_exclusions;  /* views this node installed that left it out after it had been
				    * a member (it was paused or cut off): KEEL_EEXCLUDED */
	uint64_t compress_frags;   /* gradient fragments sent as bf16 or f16 */
	uint64_t compress_bytes_saved; /* payload bytes those fragments did not send */
	/* GPUDirect RDMA (device AllReduce over verbs with dma-buf registrations): datagrams
	 * whose payload the NIC read from device memory, and of those, the ones the device
	 * copied to the host instead because the way to the peer lost that NIC mid-flight. */
	uint64_t device_direct_frags;
	uint64_t device_copy_ins;
	/* Received payloads the NIC wrote into device memory (a verbs device area) that the
	 * device reduced or copied from there, never through the host. */
	uint64_t device_rx_frags;
	/* Flushes asked of the device so that payloads the NIC wrote into its memory are
	 * visible to its work (keel/device.h nic_writes_visible): at most one per received
	 * burst, before the first device call that reads one of its payloads. */
	uint64_t device_nic_flushes;
};
void keel_counters_get(const struct keel_node *node, struct keel_counters *out);

/* True when no collective is pending, every reliable datagram this node sent has been
 * acknowledged, and every member of the view has said it finished the collectives this node
 * finished (a result reported early, eager_result_bytes, may still be missing elsewhere): the
 * moment a process may exit without leaving a peer short of data or handing it a view change
 * in the middle of a collective. The others say so with their next datagram, a heartbeat at
 * the latest. */
bool keel_is_idle(const struct keel_node *node);

/* Tell every peer this node is leaving for good (a clean exit, not a failure): they mark it
 * KEEL_PEER_DEAD at once instead of suspecting it after miss_limit intervals, and their
 * collectives fail only if they still needed it. Call when keel_is_idle() (after that, the
 * node must not start collectives). Sends one datagram to every other rank: members, and
 * ranks outside the view — a restarted rank asking to be admitted, or one the view left out
 * while it was paused, which reads it when it resumes (its keel_peer_info then says `left`: it
 * need not wait for a view change that nobody is left to make). One lost on the way leaves
 * that peer to notice the silence. Returns 0, or KEEL_ETRANSPORT. */
KEEL_MUST_USE int keel_leave(struct keel_node *node, uint64_t now_ns);

/* Release nothing but the transport's hold on the node; the caller then owns `mem` again. */
void keel_fini(struct keel_node *node);

#ifdef __cplusplus
}
#endif

#endif
