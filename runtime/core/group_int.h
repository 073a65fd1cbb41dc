/* Groups and their operations (keel/group.h): the private state shared by group.c (the API,
 * creation, split), group_plan.c (schedules), group_engine.c (progress, delivery, view
 * changes) and group_p2p.c (Send/Recv). Everything lives in the caller's group memory.
 *
 * Each group has its own ordered stream of collectives; only its frontier runs. A result is
 * reported once every member said it has its own (a DONE notice, cumulative), so that a view
 * change never finds one reported at one member and missing at another. At every view change
 * each member sends each other member a SYNC (where its frontier is, whether it holds the
 * result, and from which attempt; how far it read each peer's sends): with every member's
 * SYNC in, each decides alike whether the frontier stands, runs again, or fails. */
#ifndef KEEL_GROUP_INT_H
#define KEEL_GROUP_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "keel/group.h"
#include "node_int.h"

#define GRP_MAGIC 0x6b65656c67727031ull /* "keelgrp1" */

/* Group DATA datagrams (WIRE_FLAG_GROUP) begin their payload with this, little-endian. */
#define GRP_SUBHDR_BYTES 16u
enum grp_msg {
	GMSG_DATA = 1, /* a fragment of the frontier collective's step (header step, offset) */
	GMSG_DONE,     /* the sender holds the result of collectives [0, seq] of the group */
	GMSG_SYNC,     /* the sender's state at a view change (struct grp_sync) */
	GMSG_P2P,      /* a fragment of point-to-point message `seq` (aux: its tag) */
	GMSG_P2P_DONE,
	/* the sender has read messages [0, seq) this member sent it; aux 1:
	 * it refused the last of them (tag or size differ: KEEL_EMISMATCH) */
	GMSG_FAIL,    /* the sender found the collective seq - 1 mismatched (KEEL_EMISMATCH) */
	GMSG_P2P_RTR, /* the sender has posted seq receives from this member: it may send
		       * them (a message never waits at a receiver that did not post it, where
		       * it would hold up everything behind it from the same peer) */
};
struct grp_subhdr {
	uint64_t group;
	uint32_t seq;
	uint8_t msg;  /* enum grp_msg */
	uint8_t kind; /* DATA: enum gop_kind, for KEEL_EMISMATCH */
	uint16_t aux; /* after the 16 bytes, in DATA, DONE and P2P only (their sub-header is 20
		       * bytes): P2P, the message's tag; DATA, the operation's shape (grp_shape);
		       * DONE, the shape of the last collective it counts (and `kind` its kind) */
	uint32_t tag;
};
#define GRP_P2P_SUBHDR_BYTES 20u
static inline uint32_t grp_subhdr_len(uint8_t msg)
{
	return msg == GMSG_P2P || msg == GMSG_DATA || msg == GMSG_DONE ? GRP_P2P_SUBHDR_BYTES
								       : GRP_SUBHDR_BYTES;
}
#define GRP_HISTORY 8u /* outcomes of the last collectives a SYNC carries */
/* SYNC's body after the sub-header. */
struct grp_sync {
	uint32_t frontier;     /* collectives of the group this member reported */
	uint32_t result_epoch; /* it holds the frontier's result, computed in that epoch; 0: no */
	/* bit 0: its frontier may go on over the members now (input untouched in place; a
	 * rank-indexed one, or one whose root left, only where its members did not change);
	 * bit 1: it began it over other members than the group has now */
	uint8_t can_restart;
	uint32_t p2p_read; /* messages it has read whole from the receiver of this SYNC */
	uint64_t p2p_off;  /* bytes it read of the next one */
	uint64_t rx_bytes; /* bytes of its frontier it has from the receiver of this SYNC */
	int32_t ended[GRP_HISTORY]; /* ended[i]: the status of collective frontier - 8 + i */
	/* then the sender's members, one bit per job rank (world bits): members that missed a
	 * view (it skipped an epoch) learn whom the others dropped, and a rank the others
	 * dropped learns it is out */
};
/* after grp_sync's fields, how the last GRP_HISTORY collectives before `frontier` ended
 * (int32 each, oldest first): a member that ended the one another still decides gives it
 * its outcome */
#define GRP_SYNC_BYTES (29u + 4u * GRP_HISTORY) /* without the members' bits */

enum gop_kind {
	GK_ALLGATHER = 1,
	GK_REDUCE_SCATTER,
	GK_ALLREDUCE,
	GK_BROADCAST,
	GK_REDUCE,
	GK_GATHER,
	GK_SCATTER,
	GK_ALLTOALL,
	GK_BARRIER,
	GK_SPLIT, /* an AllGather of each member's split record */
	GK_P2P,
};

enum gop_state { GS_FREE = 0, GS_QUEUED, GS_RUNNING, GS_LOCAL_DONE, GS_DONE };

/* A step at this member: at most one send and one receive (group positions), or a local
 * contribution applied at its turn (recv_pos -1, action GA_LOCAL_*). */
enum gstep_action { GA_NONE = 0, GA_COPY, GA_REDUCE, GA_LOCAL_COPY, GA_LOCAL_REDUCE };
struct gstep {
	int32_t send_pos;
	bool send_out; /* from the output (what earlier steps received), else the input */
	uint64_t send_off, send_len;
	int32_t recv_pos;
	enum gstep_action action;
	uint64_t recv_off, recv_len; /* into the output; LOCAL: from the input at recv_off too */
	bool final;		     /* KEEL_AVG divides once this region is complete */
	bool recv_after_send;	     /* the receive overwrites what this step sends: after it */
};

struct p2p_item {
	struct keel_p2p p;
	uint32_t peer_rank; /* job rank */
	uint32_t seq;	    /* message number between the two, this direction */
	uint64_t off;	    /* bytes sent (send) or read (recv) */
	int status;	    /* 1: pending, 0: done, < 0: failed */
};

struct keel_req {
	struct keel_group *g;
	enum gop_state state;
	enum gop_kind kind;
	int status;
	uint32_t seq; /* in the group's stream (collectives) */
	uint32_t restarts;
	uint32_t epoch;	 /* the view it (re)began on: its attempt */
	bool in_written; /* in place, and a receive wrote over the input: no restart */
	enum keel_group_algo algo;
	uint64_t start_ns; /* the caller started it */
	uint64_t progress_ns;
	/* arguments */
	const uint8_t *in;
	uint8_t *out;
	uint64_t count; /* elements per member block (AllGather...) or in all (AllReduce) */
	enum keel_dtype dtype;
	enum keel_redop redop;
	uint32_t esize;
	uint32_t root_rank; /* job rank of the root, UINT32_MAX: none */
	const size_t *counts, *displs, *rcounts, *rdispls; /* V forms, NULL otherwise */
	/* the run, over the group's members when it began */
	uint32_t w, me, root_pos;
	uint32_t step_count, send_step, recv_step;
	uint64_t send_off, recv_off;
	uint32_t done_epoch, done_count; /* what the result was computed over */
	uint32_t *members;		 /* done_count ranks (the group's memory) */
	/* device buffers (group_device.c): the caller's, staged through the group's stage;
	 * dev_phase: 0 input not staged, 1 staging, 2 staged, 3 copying the output back, 4 done */
	bool dev;
	uint8_t dev_phase;
	const uint8_t *d_in;
	uint8_t *d_out;
	uint64_t in_bytes, out_bytes, dev_queued;
	uint32_t dev_region; /* the output's piece being copied back (V forms: a block) */
	uint32_t dev_nt;
	uint32_t dev_tickets[KEEL_DEVICE_INFLIGHT_MAX];
	/* split: this member's record and where the new group goes */
	uint32_t split_rec[4];
	void *split_mem;
	size_t split_len;
	struct keel_group **split_out;
	const uint32_t *list; /* from_ranks: the list, count in split_rec[3] */
	/* point to point */
	uint32_t item_count;
	struct p2p_item items[KEEL_P2P_BATCH_MAX];
};

/* What this member knows of another member of a group, by job rank. */
struct gpeer {
	uint32_t done;	      /* collectives it holds the result of (DONE, this epoch) */
	bool synced;	      /* its SYNC of this epoch came */
	struct grp_sync sync; /* ...saying this */
	bool sync_owed;	      /* ours to it is not sent yet */
	bool done_owed;	      /* our DONE count is not sent yet */
	bool p2p_done_owed;
	bool out_owed;	    /* not a member any more, but it may think it is: tell it (a SYNC) */
	bool fail_owed;	    /* our FAIL (the group's fail_seq) is not sent yet */
	uint32_t failed_at; /* its FAIL: it failed collective failed_at - 1 (0: none) */
	uint8_t done_kind;  /* what its last DONE said of the collective it counts last */
	uint32_t done_shape;
	uint32_t p2p_tx;   /* messages to it assigned */
	uint32_t p2p_sent; /* messages to it sent whole (the next to send) */
	uint32_t p2p_acked;
	uint32_t p2p_rtr;	/* receives it posted from us (RTR): messages we may send */
	uint32_t p2p_rx_posted; /* receives from it posted */
	bool rtr_owed;		/* our count of posted receives is not sent yet */
	bool refused_last;	/* the message just read was refused (KEEL_EMISMATCH) */
	uint32_t p2p_read;	/* messages from it read whole */
	uint64_t p2p_read_off;
	uint32_t inc; /* its incarnation when it joined the group */
};

struct keel_group {
	uint64_t magic;
	uint64_t id;
	struct keel_node *node;
	struct keel_group *next; /* the node's list of groups */
	uint32_t size, self_pos, created_size, epoch;
	bool member;
	bool syncing;	 /* a view change: the frontier waits for every member's SYNC */
	uint32_t splits; /* world groups made in this epoch (keel_group_world's ids) */
	uint8_t *stage;	 /* keel_group_use_device: NULL for host buffers */
	size_t stage_bytes;
	/* The frontier's bytes from each member, and to each the bytes it already has (a
	 * resume after a view change that took no member: sends skip those), by job rank. */
	uint64_t *rx_bytes, *tx_skip;
	uint32_t *created; /* created_size members at creation, in order (world entries) */
	uint32_t *ranks;   /* size members' job ranks, in group order (world entries) */
	uint32_t *scratch; /* split records: world x 4 */
	struct gpeer *peers;
	struct keel_req *ops; /* ops_max collectives, a ring */
	uint32_t *op_members; /* ops_max x world */
	uint32_t next_seq, run_seq, next_slot, run_slot, ops_max;
	uint32_t local_done;	    /* collectives this member holds the result of */
	uint32_t fail_seq;	    /* the collective it found mismatched, + 1 (0: none) */
	int32_t ended[GRP_HISTORY]; /* how collective s ended, at s % GRP_HISTORY */
	uint8_t done_kind; /* the kind and shape of collective local_done - 1 (our DONE says) */
	uint32_t done_shape;
	struct keel_req *p2p; /* ops_max batches */
};

/* group.c */
int grp_check(const struct keel_group *g, struct keel_req **req); /* 0, -EINVAL, EEXCLUDED */
/* A new collective in the group's stream (NULL: ops_max pending); grp_advance starts it. */
struct keel_req *grp_req_new(struct keel_group *g, enum gop_kind kind, const void *send, void *recv,
			     size_t count, enum keel_dtype dt, enum keel_redop op);
/* Take back the request just made (its start failed). */
void grp_req_cancel(struct keel_group *g, struct keel_req *r);
/* A split (list_hash: from_ranks' list, the same at every member, else 0). */
int grp_split_start(struct keel_group *parent, uint32_t color, uint32_t key, uint32_t list_hash,
		    void *mem, size_t len, struct keel_group **out, struct keel_req **req);
void grp_finish(struct keel_group *g, struct keel_req *r, int status);
uint32_t grp_pos_of(const struct keel_group *g, uint32_t rank); /* UINT32_MAX: none */
/* Queue a reliable group datagram to job rank `peer`: sub-header, then body (blen) and data
 * (dlen) at step/offset of a message of total bytes. false: its window is full. */
bool grp_send(struct keel_node *n, uint32_t peer, const struct grp_subhdr *sh, uint16_t step,
	      uint32_t offset, uint32_t total, const void *body, uint32_t blen, const void *data,
	      uint32_t dlen);

/* group_plan.c */
uint32_t grp_step_count(const struct keel_req *r);
void grp_step(const struct keel_req *r, uint32_t t, struct gstep *s);
/* Local copies done at a begin (own block into the output). */
void grp_plan_begin(struct keel_req *r, enum keel_group_algo algo);
bool grp_kind_indexed(enum gop_kind k);

/* group_device.c */
/* At start: the request's buffers are device memory; lay its host run out in the stage.
 * -ENOSPC when the stage is too small. */
int grp_dev_prepare(struct keel_group *g, struct keel_req *r);
/* Stage the input (before a begin) / copy the output back (before DONE): true once done;
 * false while the device works (or it failed: the request was finished with KEEL_EDEVICE). */
bool grp_dev_stage_in(struct keel_group *g, struct keel_req *r);
bool grp_dev_copy_out(struct keel_group *g, struct keel_req *r);
/* Wait for every piece of device work of `r` (a restart must not rewrite the stage under
 * a copy); true when none is left. */
bool grp_dev_drain(struct keel_group *g, struct keel_req *r);

/* group_engine.c */
/* A group just made: SYNCs its members sent before it existed here, of this epoch. */
void grp_take_early_syncs(struct keel_group *g);
/* (grp_progress_all, grp_deliver and the node's other hooks: node_int.h) */
void grp_advance(struct keel_group *g);

/* group_p2p.c */
void grp_p2p_progress(struct keel_group *g);
bool grp_p2p_deliver(struct keel_group *g, uint32_t peer, const struct wire_header *h,
		     const struct grp_subhdr *sh, const uint8_t *data, uint32_t len);
void grp_p2p_on_done(struct keel_group *g, uint32_t peer, uint32_t read, bool refused);
/* A view change: items whose peer left fail; the others wait for the peer's SYNC. */
void grp_p2p_on_view(struct keel_group *g);
void grp_p2p_on_sync(struct keel_group *g, uint32_t peer, const struct grp_sync *s);
bool grp_p2p_pending(const struct keel_group *g);
int grp_p2p_launch(struct keel_group *g, const struct keel_p2p *items, uint32_t count,
		   struct keel_req **req);

/* The group's size when `g` is a live group, else 0 (argument checks). */
static inline uint32_t valid_size(const struct keel_group *g)
{
	return g != NULL && g->magic == GRP_MAGIC ? g->size : 0;
}

#endif
