/* A data-parallel training loop on keel, to copy: start from the launcher's environment,
 * compute a gradient while keeping the node polled, AllReduce it, and go on when a peer dies.
 *   build: cc -O2 train_loop.c $(pkg-config --cflags --libs keel) -o train_loop
 *   run:   keel-run -n 3 ./train_loop [STEPS]   (or torchrun, srun, mpirun: keel/launch.h) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <keel/boot.h>

#define PARAMS 65536

static float params[PARAMS], grad[PARAMS], sum[PARAMS];

/* Stands for a forward and backward pass. A rank that stops polling looks dead to its peers,
 * so a long computation polls now and then (at least once per heartbeat interval). */
static int compute_gradient(struct keel_boot *b, uint32_t step)
{
	for (uint32_t i = 0; i < PARAMS; i++) {
		grad[i] = 0.001f * (float)((i + step + b->launch.rank) % 7) - 0.01f * params[i];
		if (i % 4096 == 0 && keel_boot_poll(b) != 0)
			return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	uint32_t steps = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 300;
	struct keel_boot b;
	char err[256];
	if (keel_boot_start(&b, NULL, NULL, err, sizeof(err)) != 0) {
		fprintf(stderr, "train_loop: %s\n", err);
		return 1;
	}
	uint32_t step, members = b.launch.world_size;
	for (step = 0; step < steps; step++) {
		struct keel_op *op;
		struct keel_op_info info;
		int rc = compute_gradient(&b, step);
		if (rc == 0)
			rc = keel_allreduce_start(b.node, grad, sum, PARAMS, KEEL_F32, KEEL_SUM,
						  &op);
		if (rc == 0)
			rc = keel_boot_wait(&b, op, &info, NULL, 0);
		if (rc !=
		    0) { /* e.g. KEEL_EEXCLUDED: this rank was cut off and the others went on */
			fprintf(stderr, "train_loop: rank %u step %u: %s\n", b.launch.rank, step,
				keel_strerror(rc));
			keel_boot_stop(&b, 0);
			return rc == KEEL_EEXCLUDED ? KEEL_EXIT_EXCLUDED : 1;
		}
		members = info.member_count; /* fewer after a peer died: average over them */
		for (uint32_t i = 0; i < PARAMS; i++)
			params[i] += sum[i] / (float)members;
	}
	uint32_t hash = 2166136261u; /* FNV-1a of the parameters: equal on every member */
	for (uint32_t i = 0; i < PARAMS; i++)
		for (uint32_t k = 0; k < 4; k++)
			hash = (hash ^ ((const uint8_t *)&params[i])[k]) * 16777619u;
	printf("train_loop: rank %u: %u steps, %u members at the end, parameters %08x\n",
	       b.launch.rank, step, members, hash);
	keel_boot_stop(&b, 1000000000ull); /* linger up to 1 s for the last acks, then leave */
	return 0;
}
