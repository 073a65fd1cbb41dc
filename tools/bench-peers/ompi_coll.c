/* ompi-coll: Open MPI's collectives and Send/Recv (f32; sums; root 0), timed the way
 * keel-bench --median times keel: each iteration alone, the slowest rank per iteration, the
 * median over iterations, and every result checked exactly. -o picks the operation:
 * allreduce (MPI_Allreduce), all_gather (MPI_Allgather), reduce_scatter
 * (MPI_Reduce_scatter_block), alltoall (MPI_Alltoall), pingpong (MPI_Send then MPI_Recv between
 * ranks 0 and 1: half the round trip), exchange (MPI_Sendrecv between ranks 0 and 1), reduce
 * (MPI_Reduce), broadcast (MPI_Bcast), barrier (MPI_Barrier). Peer benchmark for
 * tools/bench-peers.sh; never linked into keel.
 *   mpirun -n 2 ompi-coll [-o OP] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] */
#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "peer_common.h"

#define PROG "ompi-coll"
#define TAG  7

static void fail(const char *what, int code)
{
	fprintf(stderr, PROG ": %s failed (%d)\n", what, code);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

/* The MPI function a row names. */
static const char *mpi_name(enum peer_op op)
{
	static const char *const names[PEER_OP_COUNT] = {
	    "MPI_Allreduce", "MPI_Allgather", "MPI_Reduce_scatter_block",
	    "MPI_Alltoall",  "MPI_Send/Recv", "MPI_Sendrecv",
	    "MPI_Reduce",    "MPI_Bcast",     "MPI_Barrier"};
	return names[op];
}

/* Ranks 0 and 1: the ping (rank 0 sends) and its answer; the others take no part. */
static int pingpong(const float *in, float *out, int c, int rank)
{
	int peer = 1 - rank, rc = MPI_SUCCESS;
	if (rank == 0 && (rc = MPI_Send(in, c, MPI_FLOAT, peer, TAG, MPI_COMM_WORLD)) == 0)
		rc = MPI_Recv(out, c, MPI_FLOAT, peer, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	if (rank == 1 &&
	    (rc = MPI_Recv(out, c, MPI_FLOAT, peer, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE)) == 0)
		rc = MPI_Send(in, c, MPI_FLOAT, peer, TAG, MPI_COMM_WORLD);
	return rc;
}

/* One call of `op`: c is each rank's count (peer_shape_of). */
static int call(enum peer_op op, const float *in, float *out, int c, int rank)
{
	MPI_Comm w = MPI_COMM_WORLD;
	switch (op) {
	case PEER_ALLREDUCE:
		return MPI_Allreduce(in, out, c, MPI_FLOAT, MPI_SUM, w);
	case PEER_ALL_GATHER:
		return MPI_Allgather(in, c, MPI_FLOAT, out, c, MPI_FLOAT, w);
	case PEER_REDUCE_SCATTER:
		return MPI_Reduce_scatter_block(in, out, c, MPI_FLOAT, MPI_SUM, w);
	case PEER_ALLTOALL:
		return MPI_Alltoall(in, c, MPI_FLOAT, out, c, MPI_FLOAT, w);
	case PEER_PINGPONG:
		return pingpong(in, out, c, rank);
	case PEER_EXCHANGE:
		return rank > 1 ? MPI_SUCCESS
				: MPI_Sendrecv(in, c, MPI_FLOAT, 1 - rank, TAG, out, c, MPI_FLOAT,
					       1 - rank, TAG, w, MPI_STATUS_IGNORE);
	case PEER_REDUCE:
		return MPI_Reduce(in, out, c, MPI_FLOAT, MPI_SUM, 0, w);
	case PEER_BROADCAST: /* the root's data in `in`, every other rank's copy in `out` */
		return MPI_Bcast(rank == 0 ? (void *)in : out, c, MPI_FLOAT, 0, w);
	default:
		return MPI_Barrier(w);
	}
}

static void warm_up(const struct peer_opts *o, const float *in, float *out, int c, int rank)
{
	int rc;
	uint64_t w0 = peer_now_ns();
	for (uint32_t round = o->warmup;; round = o->warmup > 0 ? o->warmup : 1) {
		for (uint32_t i = 0; i < round; i++)
			if ((rc = call(o->op, in, out, c, rank)) != MPI_SUCCESS)
				fail("the call (warm-up)", rc);
		if (o->warmup_ms == 0)
			break;
		double ms = (double)(peer_now_ns() - w0) / 1e6, slowest_ms;
		if ((rc = MPI_Allreduce(&ms, &slowest_ms, 1, MPI_DOUBLE, MPI_MAX,
					MPI_COMM_WORLD)) != MPI_SUCCESS)
			fail("MPI_Allreduce (warm-up time)", rc);
		if (peer_warm_enough(o, slowest_ms))
			break;
	}
}

/* One size: warm-up, then `iters` timed calls; returns the median of the per-iteration maxima
 * across ranks (us) and counts wrong elements on every rank into *wrong (summed). */
static double run_size(const struct peer_opts *o, const struct peer_shape *s, float *in, float *out,
		       double *mine, double *slowest, long *wrong)
{
	int rank, size, rc, c = (int)s->count;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	peer_fill(in, s->send, (uint32_t)rank);
	warm_up(o, in, out, c, rank);
	peer_poison(out, s->recv); /* the check then sees what the timed calls wrote */
	MPI_Barrier(MPI_COMM_WORLD);
	for (uint32_t i = 0; i < o->iters; i++) {
		uint64_t t0 = peer_now_ns();
		rc = call(o->op, in, out, c, rank);
		mine[i] = (double)(peer_now_ns() - t0) / 1e3 / (o->op == PEER_PINGPONG ? 2 : 1);
		if (rc != MPI_SUCCESS)
			fail(mpi_name(o->op), rc);
	}
	/* Outside the timed loop: the slowest rank of each iteration. */
	if ((rc = MPI_Allreduce(mine, slowest, (int)o->iters, MPI_DOUBLE, MPI_MAX,
				MPI_COMM_WORLD)) != MPI_SUCCESS)
		fail("MPI_Allreduce of the times", rc);
	long bad = (long)peer_check_op(o->op, s, out, (uint32_t)rank, (uint32_t)size);
	if ((rc = MPI_Allreduce(&bad, wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD)) != MPI_SUCCESS)
		fail("MPI_Allreduce of the check", rc);
	return peer_median(slowest, o->iters);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	struct peer_opts o;
	if (peer_parse_opts(argc, argv, PROG, (1u << PEER_OP_COUNT) - 1, &o) != 0) {
		MPI_Finalize();
		return 2;
	}
	if ((o.op == PEER_PINGPONG || o.op == PEER_EXCHANGE) && size < 2) {
		fprintf(stderr, PROG ": %s needs 2 ranks or more\n", peer_op_name(o.op));
		MPI_Finalize();
		return 2;
	}
	size_t cap = (size_t)(o.max_bytes / sizeof(float)) + 1;
	float *in = malloc(cap * sizeof(float)), *out = malloc(cap * sizeof(float));
	double *mine = malloc(o.iters * sizeof(double)),
	       *slowest = malloc(o.iters * sizeof(double));
	if (in == NULL || out == NULL || mine == NULL || slowest == NULL)
		fail("malloc", -ENOMEM);
	if (rank == 0)
		peer_print_header(PROG, (uint32_t)size, &o);
	long wrong_total = 0;
	for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
		struct peer_shape s;
		peer_shape_of(o.op, bytes, (uint32_t)rank, (uint32_t)size, &s);
		long wrong = 0;
		double med = run_size(&o, &s, in, out, mine, slowest, &wrong);
		wrong_total += wrong;
		if (rank == 0)
			peer_print_row(s.bytes, s.bytes / sizeof(float), o.iters, med, slowest,
				       wrong, mpi_name(o.op));
		if (o.op == PEER_BARRIER)
			break; /* no sizes: one row */
	}
	if (rank == 0)
		peer_print_footer(wrong_total);
	free(in);
	free(out);
	free(mine);
	free(slowest);
	MPI_Finalize();
	return wrong_total == 0 ? 0 : 1;
}
