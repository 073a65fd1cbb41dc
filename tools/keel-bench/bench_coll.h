/* keel-bench's operations over groups (keel/group.h): which there are, how nccl-tests counts
 * their sizes and bus bandwidth, where each call's buffers lie, one call of each, and the
 * exact check of its result against the members it reports. The table itself is main.c's. */
#ifndef KEEL_BENCH_COLL_H
#define KEEL_BENCH_COLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/boot.h"
#include "keel/group.h"
#include "keel/types.h"

enum bench_coll {
	BENCH_ALLREDUCE = 0,
	BENCH_ALL_GATHER,
	BENCH_REDUCE_SCATTER,
	BENCH_ALLTOALL,
	BENCH_SENDRECV,
	BENCH_REDUCE,
	BENCH_BROADCAST,
	BENCH_BARRIER,
	BENCH_COLL_COUNT
};

/* nccl-tests' bus bandwidth factors (its doc/PERFORMANCE.md), n the members. */
enum bench_busbw {
	BENCH_BUSBW_ALLREDUCE, /* 2(n-1)/n */
	BENCH_BUSBW_GATHER,    /* (n-1)/n: all_gather, reduce_scatter, alltoall */
	BENCH_BUSBW_ONE,       /* 1: broadcast, reduce, sendrecv */
	BENCH_BUSBW_NONE,      /* barrier: no bytes */
};

/* What the table says of an operation. Each row has two halves; half[h] NULL: not run (its
 * columns say N/A). */
struct bench_coll_desc {
	const char *name; /* the subcommand */
	const char *half[2];
	enum bench_busbw busbw;
	bool reduces;	      /* takes --op */
	bool rooted;	      /* takes --root */
	bool split;	      /* the row's count is every member's together: count / n each */
	uint32_t time_div[2]; /* the table's time is the measured call's over this (ping-pong: 2) */
};

/* The operation called `name`, or -1. */
int bench_coll_parse(const char *name);
const struct bench_coll_desc *bench_coll_desc(enum bench_coll c);
double bench_coll_busbw_factor(enum bench_coll c, uint32_t members);
/* The row's count (elements) for `bytes`, as nccl-tests rounds it: a split operation's is a
 * multiple of the members. Barrier: 0. */
size_t bench_coll_count(enum bench_coll c, uint64_t bytes, size_t elem_size, uint32_t members);

/* One call's setting: what every member agrees on, and where this member stands. */
struct bench_coll_ctx {
	enum bench_coll coll;
	enum keel_dtype dtype;
	enum keel_redop op;
	size_t member_count; /* elements each member contributes (the row's count / n if split) */
	uint32_t members;    /* group members now */
	uint32_t pos;	     /* this member's group rank */
	uint32_t root;	     /* group rank of the root (rooted operations) */
};

/* Where one call's data lie, in the caller's `in` and `out` (each large enough for the row).
 * send/recv: the call's arguments; fill: the elements of this member's input (at send),
 * result: the elements the call writes here and the check compares (at recv; 0 where it
 * writes nothing, as a reduce's non-root). Broadcast: send == recv, the one buffer. */
struct bench_coll_bufs {
	void *send, *recv;
	size_t fill, result;
};
void bench_coll_layout(const struct bench_coll_ctx *x, int half, void *in, void *out,
		       struct bench_coll_bufs *l);

/* Value i of a member's input, written into send[i] for i in [begin, end) of l->fill by
 * bench_coll_fill_input (`rank`: the member's job rank; broadcast: only the root's counts,
 * the others get the poison below). */
void bench_coll_fill_input(const struct bench_coll_ctx *x, const struct bench_coll_bufs *l,
			   size_t begin, size_t end, uint32_t rank);
/* The bytes a result starts as, so that an element left unwritten never passes the check:
 * 0xa5, no integer any reduction of the check's inputs gives in any dtype. */
#define BENCH_POISON 0xa5
/* The expected result, elements [begin, end) of l->result, into ref: ref holds the row's
 * largest buffer. members: the job ranks the call reports it ran over, in group order, with
 * x->members and x->pos set from them; peer_rank: sendrecv's peer (job rank). Returns where
 * in ref the expected result starts (compare recv[i] with it[i]). */
const void *bench_coll_expect(const struct bench_coll_ctx *x, void *ref, size_t begin, size_t end,
			      const uint32_t *members, uint32_t peer_rank);

/* ---- the calls (bench_coll.c) ---- */

/* One rank's groups: the job's, and with --group G the one of its split (G consecutive ranks
 * each); calls go to `group`. */
struct bench_group {
	void *world_mem, *split_mem;
	struct keel_group *world, *group;
	struct bench_coll_ctx x; /* coll, dtype, op and the root asked for; the rest per call */
	uint32_t created;	 /* members when the group was made */
	uint32_t peer_gone;	 /* sendrecv calls that ended with KEEL_EPEERGONE (not run again) */
	bool pair_broken;	 /* sendrecv: the pair lost its peer; idle until the next row */
};

/* Make the groups (size 0: the job's alone). 0, or the error (-EINVAL: size does not divide
 * the job, said in err). */
int bench_group_open(struct bench_group *g, struct keel_boot *b, uint32_t size, char *err,
		     size_t err_len);
void bench_group_close(struct bench_group *g);
/* The group's members now (count, and this member's group rank). */
void bench_group_now(const struct bench_group *g, uint32_t *members, uint32_t *pos);

/* One call of the row's operation, `count` the row's count; run again (as the API asks)
 * after KEEL_EVIEWCHANGED. 0 or its error. The timed loops use it. */
int bench_coll_run(struct bench_group *g, int half, void *in, void *out, size_t count);

/* What a checked call came to. */
struct bench_coll_verdict {
	size_t wrong;	/* elements that differ from the expected result */
	bool smaller;	/* it ran over fewer members than the group was made with */
	bool peer_gone; /* sendrecv: ended with KEEL_EPEERGONE (an error, not a result) */
};
/* Fill this member's input, run the call, compare its result (in pieces, polling between
 * them: a rank that stops polling looks dead). 0, or the call's error. ref: as `out`. */
int bench_coll_check(struct bench_group *g, struct keel_boot *b, int half, void *in, void *out,
		     void *ref, size_t count, struct bench_coll_verdict *v);

#endif
