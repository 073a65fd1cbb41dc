/* The node's private state, shared by the core: node.c, reliable.c, detector.c, membership.c
 * and the collectives (collectives.c, coll_steps.c). Each module keeps its own per-peer record
 * (rel_peer, fd_peer, mb_peer) in its own carve-out of the caller's storage; nothing is
 * allocated. */
#ifndef KEEL_NODE_INT_H
#define KEEL_NODE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "assert_int.h"
#include "keel/collectives.h"
#include "keel/metrics.h"
#include "keel/node.h"
#include "wire_int.h"

/* Groups freed lately whose ids a node remembers (group.c) */
#define KEEL_GROUPS_FREED_KEPT 32u

/* Serial-number comparison for 32-bit sequence numbers that wrap. */
static inline bool seq_before(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) < 0;
}

/* One reliable datagram kept until acknowledged; its bytes sit in rel_peer->tx_buf. */
struct tx_slot {
	uint64_t sent_ns; /* last transmission; 0 = not handed to the transport yet */
	/* The payload, when it was borrowed from the caller's buffer (rel_send_borrowed): the
	 * slot's own buffer then holds only the header. NULL: all of it is in the slot. */
	const uint8_t *tail;
	uint32_t len;	   /* header + payload */
	uint16_t tries;	   /* transmissions so far; RTT is sampled only when 1 (Karn) */
	uint8_t sacked;	   /* the receiver holds it out of order: do not resend */
	uint8_t fast_done; /* already fast-retransmitted since its last send */
	uint8_t no_sample; /* its timer was restarted: its ack measures no round trip */
	uint8_t queued;	   /* in the transport queue (node.c) until its next flush */
	/* a borrowed payload the operation writes again (a ring's partial sums): a write of
	 * those bytes copies it in first (rel_borrowed_copy_in_range) */
	uint8_t rewritten;
	/* the borrowed payload lies in device memory (rel_send_device): the NIC reads it, the
	 * CPU never does */
	uint8_t device;
	uint8_t dev_copy;     /* its way lost that NIC: the device copies it to the host now */
	uint8_t host_landing; /* a device payload for the receiver's host memory (its
			       * KEEL_DGRAM_HOST_LANDING): the receiver may have to hold it */
};

/* A device copy of a borrowed device payload to the host (reliable.c, device_copy_in), into
 * its home in the operation's stage (coll_dev_home): the window slot may be released while
 * it runs, and the stage is registered host memory the device may write. */
struct dev_copyin {
	const uint8_t *home;
	uint32_t peer, seq; /* the slot it is for; peer UINT32_MAX: the slot went meanwhile */
	uint32_t ticket;
	bool busy;
};

/* One datagram held by the receiver: out of order, or in order but not yet consumable.
 * Its payload sits in rel_peer->rx_buf; the decoded header is kept so it is not decoded twice. */
struct rx_slot {
	struct wire_header h;
	uint32_t used;
};

/* Each module keeps its own per-peer record, in its own carve-out of the caller's storage
 * (node.c's layout), indexed by rank. A module writes only its own records; the others read
 * them through the const accessors below. */

/* The reliable layer's (reliable.c) per-peer window state. */
struct rel_peer {
	/* send */
	uint32_t snd_una, snd_nxt; /* oldest unacked, next to assign */
	uint32_t snd_edge;	   /* receiver's window: seqs before it may be sent */
	uint64_t srtt_ns, rttvar_ns, rto_ns;
	uint64_t rtx_deadline_ns; /* earliest retransmission due in the window */
	uint64_t rtx_base_ns;	  /* last time an ack moved the window: timers count from here */
	bool unsent;		  /* the transport refused some slots: send them next poll */
	bool sack_any;		  /* the last ack selectively acknowledged something... */
	uint32_t sack_high;	  /* ...up to this seq: unacked seqs below it are holes */
	uint64_t probe_base_ns;	  /* tail_probe: the last new send or window move */
	bool probed;		  /* tail_probe: sent since then (one per silence) */
	uint64_t retransmits;
	uint64_t data_sent; /* first transmissions (metrics: loss ratio) */
	struct tx_slot *tx;
	uint8_t *tx_buf;
	/* receive */
	uint32_t rcv_nxt;     /* next seq to deliver to the collectives */
	uint32_t rcv_ack;     /* next seq not yet stored: everything before it is acknowledged */
	uint32_t rx_held;     /* receive slots in use */
	uint32_t rcv_high;    /* past the highest seq stored: no slot after it is used */
	bool ack_pending;     /* something arrived that the peer has not been told about */
	uint32_t rcv_unacked; /* datagrams taken since the last ack we sent */
	uint64_t ack_due_ns;  /* send a pure ack by then unless one rides on other traffic */
	struct rx_slot *rx;
	uint8_t *rx_buf;
};

/* The failure detector's (detector.c) per-peer state. `state` changes only in detector.c's
 * set_state, which also tells the caller (on_peer). */
struct fd_peer {
	enum keel_peer_state state;
	bool watched; /* we expect to hear from it (all-to-all, or one of our k ring watchees) */
	bool beat_to; /* we heartbeat it */
	bool left;    /* it left cleanly in our epoch (keel_leave) */
	uint32_t left_reported; /* ...having reported this many of the epoch's collectives */
	bool gone;		/* it announced a clean exit (any epoch) and no later life spoke */
	uint64_t last_heard_ns;
	uint64_t deaf_at_heard_ns; /* node->deaf_ns when last_heard_ns was set */
	uint64_t hb_echo_ns;	   /* send_ns of the last heartbeat from it */
	uint64_t hb_echo_recv_ns;  /* when we received that heartbeat */
	uint64_t rtt_ns_last, rtt_samples, hb_srtt_ns, hb_rttvar_ns, suspicions;
	/* silent past its deadline: probed before it is suspected (probe_ns 0: not probing) */
	uint64_t probe_ns, probe_deaf_ns, probe_sent_ns;
	uint32_t probes_sent;
};

/* Membership's (membership.c) per-peer state: what its heartbeats and headers say, and the
 * round this node runs as coordinator (pr_*). */
struct mb_peer {
	uint32_t inc;	      /* latest incarnation heard (0: never) */
	uint32_t hb_epoch;    /* the epoch of its last heartbeat */
	bool joining;	      /* its last heartbeat asked to be admitted */
	uint32_t ops_done;    /* collectives it finished locally in our epoch */
	uint32_t ops_started; /* collectives its program started in our epoch (heartbeats) */
	uint64_t catchup_ns;  /* last time we sent it our view because it was behind */
	bool suspect_report;  /* a member told us (the coordinator) it suspects this peer */
	bool pr_promised, pr_accepted;
	bool pr_reported;		  /* a member reported it suspected when this round began */
	uint32_t pr_done, pr_ops_pending; /* its collectives with results, and started */
};

/* RUNNING: moving data. LOCAL_DONE: this node has the result, and waits to hear that every
 * member has it too before reporting it — so that a view change never finds the result
 * reported at one member and missing at another (then every member restarts it instead). */
enum op_state { OP_FREE = 0, OP_QUEUED, OP_RUNNING, OP_LOCAL_DONE, OP_DONE };
enum op_kind { OPK_ALLREDUCE = 0, OPK_BROADCAST };

/* What one step of a collective does at this rank. */
enum step_action { ACT_NONE = 0, ACT_REDUCE_IN, ACT_REDUCE_OUT, ACT_COPY };
/* Steps op_step remembers per operation: a power of two. */
#define STEP_MEMO 8u

struct step {
	int32_t send_peer;	     /* -1: nothing to send */
	bool send_from_out;	     /* else from the caller's input */
	uint64_t send_off, send_len; /* byte region of the buffer */
	int32_t recv_peer;	     /* -1: nothing to receive */
	enum step_action action;
	uint64_t recv_off, recv_len;
	bool final;	      /* the received region is final after this step (avg divides) */
	bool recv_after_send; /* recv may only overwrite bytes this step already sent */
};

/* One piece of device work an operation waits for (coll_device.c): a chunk of the input
 * being staged, or a received region being reduced or copied into device memory (step and
 * step-relative bytes [lo, hi), at buffer offset `at`). */
struct dev_item {
	uint32_t ticket;
	uint32_t step;
	uint64_t lo, hi, at;
	bool done;
	/* a received payload in the transport's device area this work reads: given back when
	 * the item is popped (NULL: none) */
	const uint8_t *held;
	uint32_t held_peer;
};

/* An AllReduce on device buffers: op->in and op->out are then the caller's staging (the
 * untouched copy of the input, and the host mirror of the output the network reads). */
struct op_dev {
	bool on;
	int fault;	     /* the device failed: KEEL_EDEVICE at the next advance */
	const uint8_t *d_in; /* the caller's device buffers */
	uint8_t *d_out;
	/* The input bytes this attempt stages, [stage_lo, stage_hi): all of it in place (a
	 * restart needs the copy); out of place only what it sends from there (the kernels read
	 * the input in device memory). Of those, [stage_lo, staged) queued for staging and
	 * [stage_lo, in_ready) staged. */
	uint64_t stage_lo, stage_hi, staged, in_ready;
	bool solo_copy; /* a view of one: d_out = d_in still to be queued */
	/* GPUDirect RDMA: this attempt sends its input from d_in, and (a ring) the sums it
	 * forwards from d_out, the NIC reading them there; and some attempt did (datagrams may
	 * still read them; coll_dev_home finds them) */
	bool direct_in, direct_out, direct_in_used, direct_out_used;
	uint32_t in_head, in_tail, ap_head, ap_tail; /* free-running, mask by the capacity */
	/* Received bytes [pend_lo, pend_hi) of step pend_step, in the mirror, not yet queued:
	 * fragments of one poll are gathered into one device call (up to device_chunk_bytes). */
	bool pend;
	uint32_t pend_step;
	uint64_t pend_lo, pend_hi;
	/* Last, and not cleared for a new operation (op_alloc): only [head, tail) is read, and
	 * an item is written whole when queued. Clearing them was most of a small AllReduce's
	 * start (1.5 KiB of the operation's 2.2). */
	struct dev_item in_q[KEEL_DEVICE_INFLIGHT_MAX], ap_q[KEEL_DEVICE_INFLIGHT_MAX];
};

struct keel_op {
	enum op_state state;
	enum op_kind kind;
	int status;
	uint32_t id;	   /* local sequence; on the wire: id - node->op_base */
	uint32_t root;	   /* broadcast: the sending rank */
	uint32_t self_pos; /* this node's position in the view it runs over */
	uint32_t restarts;
	uint32_t stalls;    /* soft faults: op_timeout_ns without progress */
	bool began;	    /* ran at least once (a later begin is a restart) */
	bool has_copy;	    /* in-place input saved in the node's restart copy */
	bool entry_wait;    /* stalled while a member had not started it: not a soft fault */
	uint64_t start_ns;  /* first begin: keel_op_bound_ns counts from here */
	uint64_t queued_ns; /* started by the caller (a joiner's wait counts from here) */
	uint32_t done_epoch, done_count; /* the view the result was computed over */
	uint8_t *done_bits;		 /* its members (world bits, in the node's storage) */
	uint32_t root_pos;
	enum keel_algo algo; /* never AUTO once begun */
	/* KEEL_ALGO_HIER (coll_hier.c): `hosts` hosts of `local` members each, this node's
	 * host and local index, the algorithm across hosts (RING or RD), and the view positions
	 * host-major (hier_pos[host * local + index], the node's table for this view). */
	uint32_t hosts, local, host_idx, local_idx;
	enum keel_algo inter;
	const uint32_t *hier_pos;
	enum keel_dtype dtype;
	enum keel_redop redop;
	uint32_t elem_size;
	uint32_t frag_bytes; /* payload per DATA datagram, a multiple of elem_size */
	uint32_t step_count;
	uint32_t world; /* contributors */
	const uint8_t *in;
	uint8_t *out;
	uint64_t count, bytes;
	uint32_t send_step, recv_step;
	uint64_t send_off, recv_off; /* progress within the current step, bytes */
	/* recv_step was found to expect data, recv_len bytes of it (skip_empty_recv): until
	 * recv_off reaches that, it needs no second look. 0: not looked at. */
	uint64_t recv_step_len;
	/* Steps mapped to ranks (op_step), in slot t % STEP_MEMO: t + 1 in step_memo_t, 0 for
	 * none. Recursive doubling's whole plan up to 64 ranks fits (its empty fold-in and
	 * fold-out steps are looked at on every poll too); a ring's steps cycle through. Cleared
	 * by op_begin, as every mapping depends on the view. */
	struct step step_memo[STEP_MEMO];
	uint32_t step_memo_t[STEP_MEMO];
	uint64_t progress_ns; /* last time anything moved */
	/* Gradient AllReduce (compress.c): f32 SUM or AVG that may travel compressed. fb: the
	 * caller's residuals (count floats) and, after them, the ones this attempt writes;
	 * enc_tx: how this attempt sends its partial sums and its own chunk of the result to the
	 * ring's next member (enum wire_enc, decided at each begin); saved: payload bytes not sent.
	 */
	bool grad;
	uint8_t enc_tx;
	float *fb;
	uint64_t cmp_saved;
	struct op_dev dev; /* last: its queues are (op_alloc) */
};

/* What op_alloc clears: all but the device queues at the end. */
#define OP_CLEARED_BYTES offsetof(struct keel_op, dev.in_q)
_Static_assert(offsetof(struct keel_op, dev.ap_q) + sizeof(((struct keel_op *)0)->dev.ap_q) ==
		   sizeof(struct keel_op),
	       "the device queues are the operation's last bytes");

/* A view, or a proposed one: epoch, member bitset by rank, each member's incarnation. */
struct view {
	uint32_t epoch;
	uint32_t count;
	uint32_t flags;	     /* bits 16..: how many members it admitted */
	uint32_t frontier;   /* previous epoch's collectives complete at every member */
	uint32_t ops_resume; /* collectives the members had pending when it was decided */
	uint32_t donor;	     /* lowest member that was in the view before, or UINT32_MAX */
	/* How it was decided, what a COMMIT carries as its proof: the ballot and the members
	 * whose ACCEPTED the coordinator counted (0 and none: the first view, decided by no
	 * round). */
	uint64_t ballot;
	uint8_t *acceptors; /* world bits */
	uint8_t *bits;	    /* world bits */
	uint32_t *inc;	    /* world entries, meaningful for members */
	/* The result of the previous epoch's collective frontier - 1 when some members
	 * reported it early (keel_config.eager_result_bytes) and others lack it: they take it
	 * from here. result_len 0: none. Storage: the node's result_cap bytes. */
	uint8_t *result;
	uint32_t result_len;
};

static inline bool view_has(const struct view *v, uint32_t rank)
{
	return (v->bits[rank / 8] >> (rank % 8)) & 1u;
}

enum prop_phase { PROP_IDLE = 0, PROP_PREPARE, PROP_ACCEPT };

struct keel_node {
	struct keel_config cfg;
	/* Even a reliable one gets the retransmission timer: what this node's receive path
	 * dropped must come again (reliable.c). */
	struct keel_transport *tp;

	uint32_t self, world, epoch;
	uint32_t mtu, window, burst;
	uint64_t now_ns;
	/* failure detector */
	uint64_t init_ns, last_poll_ns, next_beat_ns, deaf_ns;
	/* fd_check's next walk over the watched peers: none is due before it (their deadlines
	 * only move later, except where detector.c sets this to 0: walk at the next poll) */
	uint64_t fd_walk_at;
	struct fd_peer *fd_peers;	   /* world entries: written by detector.c only */
	uint32_t *watch_list, watch_count; /* ranks with fd_peer.watched, rebuilt each view */
	uint32_t *beat_list, beat_count;   /* ranks with fd_peer.beat_to */
	struct rel_peer *rel_peers;	   /* world entries: written by reliable.c only */
	/* reliable-window buffers: one per peer, or a pool lent to peers on demand (streams) */
	uint32_t streams;
	bool stream_pool;
	uint32_t *stream_owner; /* peer holding each pooled stream, UINT32_MAX: free */
	struct tx_slot *stream_tx;
	struct rx_slot *stream_rx;
	uint8_t *stream_tx_buf, *stream_rx_buf;
	/* totals over all peers, so that an idle poll skips the per-peer scans (large worlds) */
	uint64_t op_bound_ns; /* keel_op_bound_ns(&cfg) */
	uint64_t tx_flight;   /* reliable datagrams sent and not yet acknowledged */
	uint64_t tx_borrowed; /* of those, the ones whose payload lies in a caller's buffer */
	/* Of those, the ones marked rewritten; every one lies in [rewritten_lo, rewritten_hi)
	 * (reset when none is left): a write elsewhere needs no look at the window. */
	uint64_t tx_rewritten;
	uintptr_t rewritten_lo, rewritten_hi;
	/* Of the borrowed, the ones in device memory: an operation whose input they are is
	 * handed back only once none is left (coll_dev_nic_done). */
	uint64_t tx_device;
	uint32_t copyin_busy; /* device copies of such payloads to the host running (copyin) */
	uint64_t rx_held;     /* datagrams held in receive slots */
	uint32_t acks_owed;   /* peers with ack_pending */
	/* When rel_timers and rel_send_acks must next walk the active peers: no retransmission
	 * (ack) is due before rel_timer_at (rel_ack_at). Lowered wherever a peer's deadline is
	 * set, found exactly by each walk; 0 at init. rel_unsent: some peer may have slots the
	 * transport refused (the timers' walk sends them). */
	uint64_t rel_timer_at, rel_ack_at;
	bool rel_unsent;
	/* One bit per peer that may have data in flight, an ack owed or datagrams held: the
	 * per-poll scans visit these instead of the whole world (a ring step talks to two peers
	 * of 1 024). Set whenever a peer gets any of those; cleared lazily by the scans. */
	uint64_t *rel_active;
	/* transmit queue for this poll, flushed in bursts */
	struct keel_datagram *txq;
	uint32_t txq_count;
	uint32_t *txq_tag; /* peer's seq for DATA, 0 for control datagrams */
	uint8_t *ctrl_buf; /* burst x CTRL_BUF_SIZE for heartbeats and acks */
	uint32_t ctrl_used;
	/* receive burst */
	struct keel_datagram *rxq;
	struct keel_datagram *rxq_fresh; /* [burst]: rxq before each recv_burst */
	uint8_t *rx_burst_buf;
	/* collectives */
	struct keel_op *ops;
	uint32_t ops_max;
	uint32_t op_next_id; /* id of the next op to start */
	uint32_t op_run_id;  /* id of the op now running (== op_next_id when idle) */
	/* Their slots in ops[], kept in step with them: no division on every look at the
	 * frontier, and no two ids in flight share a slot when the ids wrap (id % ops_max did,
	 * for an ops_max that does not divide 2^32). */
	uint32_t op_next_slot, op_run_slot;
	uint32_t op_base;	 /* local id of the first collective of this epoch (wire id 0) */
	uint32_t ops_done_local; /* collectives of this epoch whose result this node has */
	uint8_t *restart_copy;	 /* restart_copy_bytes for in-place inputs */
	/* The last result reported early (collectives.c), kept for members that lack it: the
	 * collective kept_done - 1 of epoch kept_epoch, kept_len bytes (kept_done 0: none). This
	 * node reports results of up to kept_cap bytes early (eager_result_bytes, clamped to
	 * result_cap); a view carries one of up to result_cap (result_cap bytes of storage). */
	uint8_t *kept;
	uint32_t kept_cap, result_cap, kept_len, kept_epoch, kept_done;
	/* groups (group.c): the caller's, in its memory; keel_group_world's count this epoch */
	struct keel_group *groups;
	uint32_t group_worlds, group_worlds_epoch;
	/* groups freed here lately: their late messages are dropped, not held for a group that
	 * will never exist again */
	uint64_t groups_freed[KEEL_GROUPS_FREED_KEPT];
	uint32_t groups_freed_next;
	/* membership */
	struct mb_peer *mb_peers; /* world entries: written by membership.c only */
	uint32_t incarnation;
	bool member;	  /* in the installed view */
	bool noquorum;	  /* a majority of the view is suspected: stopped */
	bool joined_last; /* the installed view admitted this node */
	/* A view left this node out after it had been a member (it was silent: paused, cut
	 * off): its collectives failed with KEEL_EEXCLUDED; when none was pending, the next one
	 * started fails so, once — the application must learn its state is behind. */
	bool excluded_unseen;
	struct view view;  /* installed */
	uint32_t *rank_at; /* position -> rank, view.count entries */
	uint32_t *pos_of;  /* rank -> position, UINT32_MAX for non-members */
	/* The view by host (coll_hier.c): host_of (world entries, copied from the config), and
	 * for the view of epoch hier_epoch, when hier_ok (every host has hier_local >= 2 members,
	 * hier_hosts >= 2 hosts), the positions host-major; hier_tmp is scratch (2 x world). */
	uint32_t *host_of, *hier_pos, *hier_tmp;
	uint32_t hier_epoch, hier_hosts, hier_local, hier_host_self, hier_local_self;
	bool hier_valid; /* the fields above describe the view of epoch hier_epoch */
	bool hier_ok;
	uint32_t donor, joined_count;
	uint64_t acc_promised, acc_ballot; /* acceptor state for epoch view.epoch + 1 */
	struct view acc_value;
	enum prop_phase prop_phase; /* coordinator state */
	uint32_t prop_round;
	uint64_t prop_ballot, prop_started_ns, prop_sent_ns, prop_best_ballot;
	struct view prop_best, prop_value;
	/* The newest result kept by a member that promised in this round (self included):
	 * collective prop_kept_done - 1 of this epoch, prop_kept_len bytes in prop_kept. */
	uint8_t *prop_kept;
	uint32_t prop_kept_done, prop_kept_len;
	struct view scratch_view; /* decoding target for values from the network */
	uint64_t report_ns;	  /* last report (suspicion, soft fault) to the coordinator */
	/* What mb_poll derives from peer states, the view and reports, recomputed only when one
	 * of them changed (mb_dirty): a poll must not cost O(world) at 1 024 ranks. */
	bool mb_dirty, mb_coordinator, mb_change;
	uint32_t mb_down; /* members other than self not alive */
	bool soft_fault;  /* a collective stalled: bump the epoch with the same members */
	uint8_t *msg_buf; /* encoding scratch, ctrl_size bytes */
	uint32_t ctrl_size;
	/* authentication (auth.c): keys, and each peer's replay window (world entries, when on) */
	bool auth;
	struct auth_ctx auth_ctx;
	struct auth_peer *auth_peers;
	uint32_t payload_max; /* payload bytes a datagram carries: mtu - header (- MAC trailer) */
	/* compress.c: each peer link's recent traffic and measured bandwidth (world entries), and
	 * room to widen one compressed fragment (2 x payload_max bytes) */
	struct cmp_peer *cmp_peers;
	float *cmp_scratch;
	int fatal;	       /* sticky transport error */
	uint32_t budget_bytes; /* data this poll may still move (POLL_BUDGET_BYTES per poll) */
	struct keel_counters ctr;
	/* metrics.c: histograms, and when this node first suspected a peer since the last view
	 * (0: none), which the next view's install measures against */
	struct keel_histogram hist[KEEL_HIST_COUNT];
	uint64_t first_suspect_ns;
	/* GPUDirect RDMA's fallback (reliable.c, device_copy_in): cold, so last */
	struct dev_copyin copyin[KEEL_DEVICE_COPYIN_MAX];
	/* node_handle_datagram is on a datagram whose payload the transport handed over in
	 * device memory; kept: a device work item holds it now, so it is not given back when
	 * the datagram was handled (the receive window never holds one: rel_on_data) */
	bool rx_device, rx_device_kept;
	/* the device was asked to make the NIC's writes visible since this burst came in (one
	 * flush covers every payload whose completion was seen before it) */
	bool nic_writes_flushed;
};

/* Read-only views of each module's per-peer record, for the other modules. */
static inline const struct rel_peer *rel_peer_of(const struct keel_node *n, uint32_t rank)
{
	KEEL_ASSERT(rank < n->world);
	return &n->rel_peers[rank];
}

static inline const struct fd_peer *fd_peer_of(const struct keel_node *n, uint32_t rank)
{
	KEEL_ASSERT(rank < n->world);
	return &n->fd_peers[rank];
}

static inline const struct mb_peer *mb_peer_of(const struct keel_node *n, uint32_t rank)
{
	KEEL_ASSERT(rank < n->world);
	return &n->mb_peers[rank];
}

static inline bool fd_is_alive(const struct keel_node *n, uint32_t rank)
{
	return fd_peer_of(n, rank)->state == KEEL_PEER_ALIVE;
}

/* Control datagrams (heartbeats, acks, membership) use buffers of node->ctrl_size: at least
 * this, more when a view (6 bytes a member) needs it. */
#define CTRL_BUF_MIN 128u
_Static_assert(CTRL_BUF_MIN >= WIRE_HEADER_SIZE + WIRE_HEARTBEAT_SIZE + KEEL_AUTH_TRAILER_BYTES,
	       "ctrl buffer too small");

/* node.c */
/* Queue one datagram for the transport: buf[0..len), then tail[0..tail_len) when tail is not
 * NULL (only where node_peer_caps has KEEL_CAP_GATHER); seq != 0 tags a reliable one
 * (refusals go back to its window); flags are enum keel_datagram_flags, what the backend may
 * know about it. */
void node_txq_push(struct keel_node *n, uint32_t peer, uint8_t *buf, uint32_t len,
		   const uint8_t *tail, uint32_t tail_len, uint32_t seq, uint32_t flags);
void node_txq_flush(struct keel_node *n);
/* Take reliable datagram `seq` to `peer` out of the transport queue, unsent (every copy). */
void node_txq_drop(struct keel_node *n, uint32_t peer, uint32_t seq);
/* The caps of the transport's way to `peer` now that the core may use: none with a job key
 * on a wire (a MAC covers each datagram whole, and is never left out). */
uint32_t node_peer_caps(struct keel_node *n, uint32_t peer);
/* May a datagram to `peer` go without a CRC? While its way is memory (KEEL_CAP_INTACT). */
bool node_peer_intact(struct keel_node *n, uint32_t peer);
/* May a datagram to `peer` carry a payload from device memory [addr, addr + len), read by
 * the NIC (the transport's device_tail_ok), with a CRC over its header alone? Never in a job
 * with a key: a MAC is computed by the CPU over every byte. */
bool node_peer_device_tail(struct keel_node *n, uint32_t peer, const void *addr, uint64_t len);
void node_budget_spend(struct keel_node *n, uint32_t bytes);
/* Check and dispatch one received datagram (the poll loop; the membership model checker). */
void node_handle_datagram(struct keel_node *n, const struct keel_datagram *d);
/* Give a received payload in device memory back to the transport (its rx_release). */
void node_rx_release(struct keel_node *n, uint32_t peer, const uint8_t *payload);
/* Queue an unreliable control datagram (heartbeat, ack, leave) to `peer`, carrying our acks;
 * `payload` (len bytes, may be NULL) follows the header. */
void node_send_ctrl(struct keel_node *n, uint32_t peer, enum wire_type type, uint32_t op_id,
		    const void *payload, uint32_t len);
void node_header_init(const struct keel_node *n, struct wire_header *h, enum wire_type type,
		      uint32_t dst);

/* reliable.c */
bool rel_can_send(const struct keel_node *n, uint32_t peer);
/* Copy header+payload into the next window slot and queue it. -EAGAIN when the window is full. */
/* rel_send in two halves, for a payload written in place: the buffer of the next datagram to
 * `peer` (NULL when rel_can_send says no), then send it with `len` bytes written there. */
uint8_t *rel_send_slot(struct keel_node *n, uint32_t peer);
void rel_send_commit(struct keel_node *n, uint32_t peer, struct wire_header *h, uint32_t len);
/* rel_send without the copy: the datagram's payload stays at `payload` (len bytes, not 0),
 * which must keep those bytes until rel_borrowed_copy_in (the collective that owns them calls
 * it before it ends or writes them again). Only where node_peer_caps has KEEL_CAP_GATHER. A
 * copy is made later only if the way to the peer stops taking two pieces before it is sent
 * again. `rewritten`: the operation writes those bytes again before it ends, after
 * rel_borrowed_copy_in_range over them; otherwise it never does. -EAGAIN when the window is
 * full. */
int rel_send_borrowed(struct keel_node *n, uint32_t peer, struct wire_header *h,
		      const uint8_t *payload, uint32_t len, bool rewritten);
/* rel_send_borrowed for a payload in device memory, which the NIC reads and the CPU never
 * does (node_peer_device_tail said yes for it): its datagram carries a CRC over the header
 * alone. Those bytes stay as they are until it is acknowledged (an operation's input, never
 * written). Should the way lose that NIC, the device copies it to its home in the stage
 * first (coll_dev_home). -EAGAIN as rel_send_borrowed. */
int rel_send_device(struct keel_node *n, uint32_t peer, struct wire_header *h,
		    const uint8_t *payload, uint32_t len, bool host_landing);
/* Does a datagram in flight still borrow device bytes in [lo, lo + len)? */
bool rel_device_tails_in(const struct keel_node *n, const uint8_t *lo, uint64_t len);
/* Have the device copy every payload in flight that still borrows device bytes in
 * [lo, lo + len) to its home in the stage: once each copy is done, it goes whole from the
 * host, and the NIC no longer reads those bytes. Nothing is resent meanwhile. */
void rel_device_copy_in_range(struct keel_node *n, const uint8_t *lo, uint64_t len);
/* Does a device copy of such bytes still run into host memory in [lo, lo + len)? */
bool rel_device_copies_into(const struct keel_node *n, const uint8_t *lo, uint64_t len);
/* Take finished device copies to the host (rel_send_device's fallback) into their slots. */
void rel_device_copies(struct keel_node *n);
/* Copy every payload still borrowed by a datagram in flight into its window slot, but those
 * in device memory, which stay until acknowledged. */
void rel_borrowed_copy_in(struct keel_node *n);
/* The same for payloads that share a byte with [lo, lo + len): about to be written. */
void rel_borrowed_copy_in_range(struct keel_node *n, const uint8_t *lo, uint64_t len);
int rel_send(struct keel_node *n, uint32_t peer, struct wire_header *h, const void *payload,
	     uint32_t len);
void rel_on_ack(struct keel_node *n, uint32_t peer, uint32_t ack, uint32_t sack, uint16_t wnd);
void rel_on_data(struct keel_node *n, uint32_t peer, const struct wire_header *h,
		 const uint8_t *payload);
void rel_redeliver(struct keel_node *n);
void rel_timers(struct keel_node *n);
void rel_send_acks(struct keel_node *n);
void rel_txq_refused(struct keel_node *n, uint32_t peer, uint32_t seq);
/* A reliable datagram the transport queue handed over: it no longer holds it. */
void rel_txq_sent(struct keel_node *n, uint32_t peer, uint32_t seq);
/* Owe `peer` an ack at this poll's end (it carries our count of finished collectives). */
void rel_ack_soon(struct keel_node *n, uint32_t peer);
/* An ack owed to `peer`, if any, leaves at this poll's end rather than after ack_delay_ns. */
void rel_ack_owed_now(struct keel_node *n, uint32_t peer);
uint64_t rel_next_deadline(const struct keel_node *n);
void rel_peer_init(struct keel_node *n, uint32_t peer);
/* A new view: the streams to and from `peer` start over (old-epoch traffic is fenced). */
void rel_peer_reset(struct keel_node *n, uint32_t peer);
/* Fill the ack fields of an outgoing header to `peer`; the ack is then no longer owed. */
void rel_ack_fields(struct keel_node *n, uint32_t peer, struct wire_header *h);

/* detector.c */
void fd_init(struct keel_node *n, uint64_t now_ns);
void fd_heard(struct keel_node *n, uint32_t peer);
void fd_on_heartbeat(struct keel_node *n, uint32_t peer, const struct wire_header *h,
		     const uint8_t *payload);
void fd_on_leave(struct keel_node *n, uint32_t peer, uint32_t epoch, uint32_t reported);
void fd_suspect(struct keel_node *n, uint32_t peer); /* suspect it now (it restarted) */
/* A view was installed (membership): `peer` is DEAD outside it, ALIVE inside it (a member of
 * the decided view answered its coordinator: it is listened to afresh), and whatever it said
 * about leaving in the old epoch is forgotten. Goes through the detector's one state change,
 * which tells the caller. */
void fd_peer_for_view(struct keel_node *n, uint32_t peer, bool member);
/* A new incarnation of `peer` spoke (membership): a leave announced before was its old life's. */
void fd_new_life(struct keel_node *n, uint32_t peer);
void fd_on_view(struct keel_node *n); /* watch exactly the new view's members */
void fd_poll_start(struct keel_node *n);
void fd_beat(struct keel_node *n);
/* A heartbeat to `peer` now; `flags` adds WIRE_HB_PROBE (answer at once). */
void fd_beat_one(struct keel_node *n, uint32_t peer, uint32_t flags);
void fd_beat_all(struct keel_node *n); /* a heartbeat to everyone it beats, now */
void fd_check(struct keel_node *n);
uint64_t fd_next_deadline(const struct keel_node *n);

/* membership.c */
/* Storage for one struct view's arrays, and the control datagram size, for `world` ranks and
 * kept results of up to `kept` bytes (mb_kept_cap). */
size_t mb_view_bytes(uint32_t world, uint32_t kept);
uint32_t mb_ctrl_size(uint32_t world, uint32_t kept);
/* The largest kept result (a multiple of 8, up to `want`) whose view messages still fit `mtu`;
 * 0 when none does. */
uint32_t mb_kept_cap(uint32_t world, uint32_t mtu, uint32_t want);
void mb_carve(struct keel_node *n, uint8_t **cursor); /* the views' arrays from storage */
void mb_init(struct keel_node *n);
void mb_on_view_msg(struct keel_node *n, uint32_t peer, const struct wire_header *h,
		    const uint8_t *payload);
/* Returns false when the heartbeat comes from a new incarnation of a member (it restarted). */
bool mb_on_heartbeat(struct keel_node *n, uint32_t peer, const struct wire_heartbeat *hb,
		     uint32_t epoch);
/* A header of this epoch from a member says it finished `done` collectives. */
void mb_heard_done(struct keel_node *n, uint32_t peer, uint32_t done);
void mb_poll(struct keel_node *n);
uint64_t mb_next_deadline(const struct keel_node *n);
bool mb_is_coordinator(const struct keel_node *n);
void mb_request_bump(struct keel_node *n); /* a collective stalled without a view change */
/* A peer's state, the view or a report changed: mb_poll re-derives what it depends on. */
static inline void mb_touch(struct keel_node *n)
{
	n->mb_dirty = true;
}

/* coll_steps.c */
uint32_t coll_step_count(const struct keel_op *op);
void coll_step(const struct keel_op *op, uint32_t t, struct step *s); /* in view positions */
/* Ring AllReduce step t (0..2(w-1)-1) of member r of w over elements [first, first + count):
 * peers as member indexes (r - 1, r + 1). Shared by the flat ring and the hierarchy. */
void coll_ring_part(const struct keel_op *op, uint32_t w, uint32_t r, uint32_t t, uint64_t first,
		    uint64_t count, struct step *s);
/* Recursive doubling step t of member r of w over [first, first + count); `in_out`: the
 * input already lies in the output (a slice the hierarchy reduced within the host). */
void coll_rd_part(const struct keel_op *op, uint32_t w, uint32_t r, uint32_t t, uint64_t first,
		  uint64_t count, bool in_out, struct step *s);
uint32_t coll_flat_steps(enum keel_algo algo, uint32_t world);
/* Part c of `count` elements cut into w as evenly as possible: its first element and size. */
void coll_part(uint64_t count, uint32_t w, uint32_t c, uint64_t *first, uint64_t *n);

/* coll_device.c: the device parts of an AllReduce on device buffers (op->dev.on). */
/* How far received data is applied: the step of the first byte not yet in device memory
 * (the receive cursor when nothing waits for the device), and whether step t's bytes up to
 * `end` are. Forwarding reads the mirror only up to there. Host operations: the receive
 * cursor. */
uint32_t coll_dev_applied_step(const struct keel_op *op);
bool coll_dev_applied_passed(const struct keel_op *op, uint32_t t, uint64_t end);
/* Are input bytes [lo, end) staged (sends from the input may read them)? Host ops: true. */
bool coll_dev_input_ready(const struct keel_op *op, uint64_t lo, uint64_t end);
/* May a received fragment of step t (its step-relative bytes [off, off + len) of region s)
 * be taken now? false: keep it for later (the device still works on those bytes, or the
 * queue is full). Then coll_dev_take copies it into the mirror and queues it. */
bool coll_dev_can_take(struct keel_node *n, struct keel_op *op, uint32_t t, const struct step *s,
		       uint64_t off, uint64_t len);
void coll_dev_take(struct keel_node *n, struct keel_op *op, uint32_t t, const struct step *s,
		   uint64_t off, const uint8_t *data, uint64_t len);
/* The same for a fragment whose payload lies in the transport's device area (GPUDirect RDMA):
 * queued at once as device work that reads it there and gives it back to the transport when
 * done; false: not now (keep it). */
bool coll_dev_take_device(struct keel_node *n, struct keel_op *op, uint32_t t, const struct step *s,
			  uint64_t off, const uint8_t *data, uint64_t len, uint32_t peer);
/* Test queued work, stage more input, queue what was gathered. Returns true if anything
 * moved. */
bool coll_dev_progress(struct keel_node *n, struct keel_op *op);
/* No device work queued or gathered (a result may be reported; a restart may begin). */
bool coll_dev_idle(const struct keel_op *op);
/* The operation goes back to QUEUED for a new view, or has finished (then it queues no more
 * work): forget what was gathered. Its queued work still drains: coll_dev_drain tests it
 * (keel_op_test reports a finished operation only once it drained, so the device never
 * writes the caller's buffers after the call returned). Returns coll_dev_idle. */
void coll_dev_stop(struct keel_op *op, bool finished);
bool coll_dev_drain(struct keel_node *n, struct keel_op *op);
/* A (re)start on a new view: forget what was gathered for the old one (its queued work
 * drains first: coll_dev_idle), queue the copy of a view of one. */
void coll_dev_begin(struct keel_node *n, struct keel_op *op);
/* GPUDirect RDMA: where step data is sent from device memory, which the NIC reads (every
 * member's way said yes for the whole buffer, no key; decided at each begin): the input, out
 * of place (it needs no staging), and a ring's sums from the output (the kernel mirrors
 * nothing). NULL: from the stage, as staged. `from_out`: the step sends from the output. */
const uint8_t *coll_dev_direct_src(const struct keel_op *op, bool from_out);
/* Decide the input's way for a view of `world` members: at each begin, and when the
 * operation is queued (so that nothing stages an input the NIC will read). */
void coll_dev_plan(struct keel_node *n, struct keel_op *op, uint32_t world);
/* The stage bytes standing for device bytes [p, p + len) of an operation not yet handed back
 * that sent them from device memory (its input, or its output's mirror): where the device
 * copies them when the way loses the NIC that read them. NULL when no such operation holds
 * them. */
uint8_t *coll_dev_home(struct keel_node *n, const uint8_t *p, uint32_t len);
/* Nothing sent from this operation's device memory is unacknowledged or being copied: the
 * caller may have its buffers back, and a restart may write the output and its mirror. */
bool coll_dev_nic_done(const struct keel_node *n, const struct keel_op *op);
/* A finished operation whose datagrams still borrow its device memory: the device copies
 * them to the host (rel_device_copy_in_range), so coll_dev_nic_done comes true without
 * waiting for acknowledgements. */
void coll_dev_release_nic(struct keel_node *n, const struct keel_op *op);
/* Check the device arguments of keel_allreduce_device_start; 0 or -EINVAL. */
int coll_dev_check_args(const struct keel_node *n, const void *send, const void *recv,
			uint64_t bytes, uint32_t elem_size, const void *stage, size_t stage_bytes);

/* coll_hier.c */
/* Storage for the host map and the per-view tables: world x 16 bytes. */
size_t coll_hier_bytes(uint32_t world);
bool coll_hier_config_valid(const struct keel_config *cfg); /* host_of entries < world */
/* Carve `mem` (coll_hier_bytes) and copy cfg->host_of into it (NULL: rank r is host r). */
void coll_hier_carve(struct keel_node *n, uint8_t *mem, const struct keel_config *cfg);
/* The installed view's shape by host (computed once per view): true when it suits
 * KEEL_ALGO_HIER (>= 2 hosts, each with the same number >= 2 of members). */
bool coll_hier_view_ok(struct keel_node *n);
/* Fill op's hierarchy fields from the view's shape (coll_hier_view_ok returned true). */
void coll_hier_begin(const struct keel_node *n, struct keel_op *op);
uint32_t coll_hier_step_count(const struct keel_op *op);
void coll_hier_step(const struct keel_op *op, uint32_t t, struct step *s);

/* group_engine.c (group_int.h has the rest) */
struct keel_group;
void grp_progress_all(struct keel_node *n);
uint64_t grp_next_deadline_all(const struct keel_node *n);
void grp_on_install_all(struct keel_node *n);
bool grp_deliver(struct keel_node *n, uint32_t peer, const struct wire_header *h,
		 const uint8_t *payload);
bool grp_idle_all(const struct keel_node *n);

/* collectives.c */
/* A view was installed: finish the collectives that stand (complete everywhere, or brought by
 * the view), restart the next one;
 * when the view left this node out (`excluded`), fail the rest with KEEL_EEXCLUDED. */
void coll_on_install(struct keel_node *n, bool same_line, bool excluded);
/* For a view change: collectives of this epoch whose result this node has, and started. */
uint32_t coll_done_count(const struct keel_node *n);
uint32_t coll_pending(const struct keel_node *n);
/* Offer an in-order DATA datagram to the collectives. false: not consumable yet (hold it). */
/* compress.c: gradient AllReduces on the wire */
size_t cmp_bytes(uint32_t world, uint32_t mtu);
void cmp_carve(struct keel_node *n, uint8_t *mem);
void cmp_note_sent(struct keel_node *n, uint32_t peer, uint32_t op_id, uint64_t logical,
		   uint64_t wire);
/* At each begin: how this attempt sends to the ring's next member, `next_peer` */
void cmp_begin(struct keel_node *n, struct keel_op *op, uint32_t next_peer);
/* One fragment of step `s` from `src` (len bytes left in the step), encoded when it can be;
 * returns the f32 bytes it covered */
uint64_t cmp_send(struct keel_node *n, struct keel_op *op, const struct step *s, uint32_t peer,
		  struct wire_header *h, const uint8_t *src, uint64_t len);
/* A received fragment's f32 bytes in *len: 0 (as sent), 1 (encoded: widen it with cmp_widen),
 * or -EPROTO (an encoding that does not exist, an odd length) */
int cmp_logical_len(const struct wire_header *h, uint32_t *len);
const uint8_t *cmp_widen(struct keel_node *n, const struct wire_header *h, const uint8_t *payload);
/* The owner's chunk of the result, just reduced: rounded to the encoding its link sends */
void cmp_round_final(const struct keel_op *op, uint8_t *dst, uint64_t byte_off, size_t cnt);
/* The operation ended: on success the residuals it wrote become the caller's */
void cmp_finish(const struct keel_op *op, int status);

bool coll_deliver(struct keel_node *n, uint32_t peer, const struct wire_header *h,
		  const uint8_t *payload);
void coll_progress(struct keel_node *n);
uint64_t coll_next_deadline(const struct keel_node *n);

/* metrics.c: observations from the modules, and trace events to the caller's hook */
void metrics_observe(struct keel_node *n, enum keel_hist h, uint64_t ns);
void metrics_on_suspect(struct keel_node *n, uint32_t peer, uint64_t silent_ns);
void metrics_on_view(struct keel_node *n, uint32_t members);
void node_event(struct keel_node *n, struct keel_event *ev); /* fills t_ns if 0, epoch */

#endif
