/* keel-bench's operations over groups, the arithmetic alone (bench_coll.h): names, nccl-tests'
 * counts and bus bandwidth factors, buffer layouts and expected results. No keel call here, so
 * tests/unit/test_bench_coll.c checks it without a job. */
#include "bench_coll.h"

#include <string.h>

#include "refcheck.h"

static const struct bench_coll_desc descs[BENCH_COLL_COUNT] = {
    [BENCH_ALLREDUCE] = {"allreduce",
			 {"out-of-place", "in-place"},
			 BENCH_BUSBW_ALLREDUCE,
			 true,
			 false,
			 false,
			 {1, 1}},
    [BENCH_ALL_GATHER] = {"all_gather",
			  {"out-of-place", "in-place"},
			  BENCH_BUSBW_GATHER,
			  false,
			  false,
			  true,
			  {1, 1}},
    [BENCH_REDUCE_SCATTER] = {"reduce_scatter",
			      {"out-of-place", "in-place"},
			      BENCH_BUSBW_GATHER,
			      true,
			      false,
			      true,
			      {1, 1}},
    /* keel's AllToAll is never in place (keel/group.h) */
    [BENCH_ALLTOALL] =
	{"alltoall", {"out-of-place", NULL}, BENCH_BUSBW_GATHER, false, false, true, {1, 1}},
    /* group ranks 0 and 1: half a round trip of a ping-pong, then both ways at once */
    [BENCH_SENDRECV] =
	{"sendrecv", {"ping-pong", "exchange"}, BENCH_BUSBW_ONE, false, false, false, {2, 1}},
    [BENCH_REDUCE] =
	{"reduce", {"out-of-place", "in-place"}, BENCH_BUSBW_ONE, true, true, false, {1, 1}},
    /* one buffer: the root's input is every member's output */
    [BENCH_BROADCAST] =
	{"broadcast", {NULL, "in-place"}, BENCH_BUSBW_ONE, false, true, false, {1, 1}},
    [BENCH_BARRIER] = {"barrier", {"barrier", NULL}, BENCH_BUSBW_NONE, false, false, false, {1, 1}},
};

int bench_coll_parse(const char *name)
{
	for (int c = 0; c < BENCH_COLL_COUNT; c++)
		if (strcmp(name, descs[c].name) == 0)
			return c;
	return -1;
}

const struct bench_coll_desc *bench_coll_desc(enum bench_coll c)
{
	return c < BENCH_COLL_COUNT ? &descs[c] : NULL;
}

double bench_coll_busbw_factor(enum bench_coll c, uint32_t members)
{
	double n = members > 0 ? members : 1;
	switch (descs[c].busbw) {
	case BENCH_BUSBW_ALLREDUCE:
		return 2.0 * (n - 1) / n;
	case BENCH_BUSBW_GATHER:
		return (n - 1) / n;
	case BENCH_BUSBW_ONE:
		return 1.0;
	default:
		return 0.0;
	}
}

size_t bench_coll_count(enum bench_coll c, uint64_t bytes, size_t elem_size, uint32_t members)
{
	if (c == BENCH_BARRIER || elem_size == 0)
		return 0;
	size_t count = (size_t)(bytes / elem_size);
	if (descs[c].split && members > 0)
		count = count / members * members;
	return count;
}

static void *at(void *buf, size_t elems, size_t elem_size)
{
	return (uint8_t *)buf + elems * elem_size;
}

void bench_coll_layout(const struct bench_coll_ctx *x, int half, void *in, void *out,
		       struct bench_coll_bufs *l)
{
	size_t c = x->member_count, es = keel_dtype_size(x->dtype), all = (size_t)x->members * c;
	bool ip = half == 1;
	*l = (struct bench_coll_bufs){.send = in, .recv = ip ? in : out, .fill = c, .result = c};
	switch (x->coll) {
	case BENCH_ALL_GATHER:
		l->send = ip ? at(in, (size_t)x->pos * c, es) : in;
		l->result = all;
		break;
	case BENCH_REDUCE_SCATTER:
		l->recv = ip ? at(in, (size_t)x->pos * c, es) : out;
		l->fill = all;
		break;
	case BENCH_ALLTOALL:
		l->recv = out; /* never in place */
		l->fill = l->result = all;
		break;
	case BENCH_SENDRECV:
		l->recv = out; /* both halves send `in` and receive into `out` */
		l->result = x->pos < 2 && x->members >= 2 ? c : 0;
		break;
	case BENCH_REDUCE:
		l->result = x->pos == x->root ? c : 0;
		break;
	case BENCH_BROADCAST:
		l->recv = in;
		l->fill = x->pos == x->root ? c : 0;
		break;
	case BENCH_BARRIER:
		*l = (struct bench_coll_bufs){0};
		break;
	default:
		break;
	}
}

void bench_coll_fill_input(const struct bench_coll_ctx *x, const struct bench_coll_bufs *l,
			   size_t begin, size_t end, uint32_t rank)
{
	end = end < l->fill ? end : l->fill;
	if (begin < end)
		keel_check_fill(l->send, begin, end, rank, x->dtype, x->op);
}

const void *bench_coll_expect(const struct bench_coll_ctx *x, void *ref, size_t begin, size_t end,
			      const uint32_t *members, uint32_t peer_rank)
{
	size_t c = x->member_count, es = keel_dtype_size(x->dtype);
	size_t base = x->coll == BENCH_REDUCE_SCATTER ? (size_t)x->pos * c : 0;
	switch (x->coll) {
	case BENCH_ALLREDUCE:
	case BENCH_REDUCE:
	case BENCH_REDUCE_SCATTER: /* this member's block of the reduction */
		keel_check_reference_members(ref, base + begin, base + end, members, x->members,
					     x->dtype, x->op);
		break;
	case BENCH_ALL_GATHER:
	case BENCH_ALLTOALL: /* block k from member k: its input's first, or this member's, block */
		for (size_t i = begin; i < end && c > 0; i++) {
			size_t from = i % c + (x->coll == BENCH_ALLTOALL ? (size_t)x->pos * c : 0);
			keel_check_store(ref, i, x->dtype,
					 keel_check_value(members[i / c], from, x->dtype, x->op));
		}
		break;
	case BENCH_BROADCAST:
		keel_check_fill(ref, begin, end, members[x->root], x->dtype, x->op);
		break;
	case BENCH_SENDRECV:
		keel_check_fill(ref, begin, end, peer_rank, x->dtype, x->op);
		break;
	default:
		break;
	}
	return at(ref, base, es);
}
