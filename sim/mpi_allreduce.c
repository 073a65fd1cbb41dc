/* The independent side of keel-sim's fidelity check: an MPI program that times
 * MPI_Allreduce of `bytes` (floats, sum) under SMPI. Run with smpirun and
 * --cfg=smpi/allreduce:lr (a logical ring) on the platform keel-sim generated. Prints the mean
 * of `repeat` calls after one warm-up, from rank 0, in seconds. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	long bytes = argc > 1 ? atol(argv[1]) : 1 << 20;
	int repeat = argc > 2 ? atoi(argv[2]) : 3, rank = 0;
	int count = (int)(bytes / 4);
	float *in = calloc((size_t)count + 1, 4), *out = calloc((size_t)count + 1, 4);
	double sum = 0;

	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	for (int k = 0; k <= repeat; k++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		double dt = MPI_Wtime() - t0, worst = 0;
		MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		if (k > 0)
			sum += worst;
	}
	if (rank == 0)
		printf("%.9f\n", sum / repeat);
	free(in);
	free(out);
	MPI_Finalize();
	return 0;
}
