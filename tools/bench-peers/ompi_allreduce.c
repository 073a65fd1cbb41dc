/* ompi-allreduce: Open MPI's MPI_Allreduce (f32 sum), timed the way keel-bench --median times
 * keel: each iteration alone, the slowest rank per iteration, the median over iterations, and
 * the result checked exactly. Peer benchmark for tools/bench-peers.sh; never linked into keel.
 *   mpirun -n 2 ompi-allreduce [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] */
#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "peer_common.h"

static void fail(const char *what, int code)
{
	fprintf(stderr, "ompi-allreduce: %s failed (%d)\n", what, code);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

/* One size: warm-up, then `iters` timed calls; returns the median of the per-iteration maxima
 * across ranks (us) and counts wrong elements on every rank into *wrong (summed). */
static double run_size(const struct peer_opts *o, size_t count, float *in, float *out, double *mine,
		       double *slowest, uint32_t iters, long *wrong)
{
	int rank, size, rc;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	peer_fill(in, count, (uint32_t)rank);
	uint64_t w0 = peer_now_ns();
	for (uint32_t round = o->warmup;; round = o->warmup > 0 ? o->warmup : 1) {
		for (uint32_t i = 0; i < round; i++)
			if ((rc = MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM,
						MPI_COMM_WORLD)) != MPI_SUCCESS)
				fail("MPI_Allreduce (warm-up)", rc);
		if (o->warmup_ms == 0)
			break;
		double ms = (double)(peer_now_ns() - w0) / 1e6, slowest_ms;
		if ((rc = MPI_Allreduce(&ms, &slowest_ms, 1, MPI_DOUBLE, MPI_MAX,
					MPI_COMM_WORLD)) != MPI_SUCCESS)
			fail("MPI_Allreduce (warm-up time)", rc);
		if (peer_warm_enough(o, slowest_ms))
			break;
	}
	peer_poison(out, count); /* the check then sees what the timed calls wrote */
	MPI_Barrier(MPI_COMM_WORLD);
	for (uint32_t i = 0; i < iters; i++) {
		uint64_t t0 = peer_now_ns();
		rc = MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		mine[i] = (double)(peer_now_ns() - t0) / 1e3;
		if (rc != MPI_SUCCESS)
			fail("MPI_Allreduce", rc);
	}
	/* Outside the timed loop: the slowest rank of each iteration. */
	if ((rc = MPI_Allreduce(mine, slowest, (int)iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD)) !=
	    MPI_SUCCESS)
		fail("MPI_Allreduce of the times", rc);
	long bad = (long)peer_check(out, count, (uint32_t)size);
	if ((rc = MPI_Allreduce(&bad, wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD)) != MPI_SUCCESS)
		fail("MPI_Allreduce of the check", rc);
	return peer_median(slowest, iters);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	struct peer_opts o;
	if (peer_parse_opts(argc, argv, "ompi-allreduce", &o) != 0) {
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
		peer_print_header("ompi-allreduce", (uint32_t)size, &o);
	long wrong_total = 0;
	for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
		size_t count = (size_t)(bytes / sizeof(float));
		uint32_t iters = o.iters;
		long wrong = 0;
		double med = run_size(&o, count, in, out, mine, slowest, iters, &wrong);
		wrong_total += wrong;
		if (rank == 0)
			peer_print_row(bytes, count, iters, med, slowest, wrong, "MPI_Allreduce");
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
