/* Where this process sits in the job, read from the launcher's environment (torchrun, Slurm,
 * Open MPI, or keel-run) and an optional static peer list. Part of the start-up library
 * (libkeel_boot.a, keel/boot.h); nothing here talks to the network. */
#ifndef KEEL_LAUNCH_H
#define KEEL_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/limits.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest host name or address in MASTER_ADDR or a KEEL_PEERS entry, terminator included. */
#define KEEL_LAUNCH_HOST_LEN 256u

struct keel_launch {
	uint32_t rank;
	uint32_t world_size; /* 1..KEEL_WORLD_MAX */
	uint32_t local_rank; /* rank among the ranks of this host */
	uint32_t local_world_size;
	/* KEEL_JOB_ID, else SLURM_JOB_ID: the same on every rank, and job_id_fixed is set.
	 * Neither set: rank 0's rendezvous picks a random one and hands it to every rank (which
	 * sets job_id_fixed); until then, and for good with KEEL_PEERS (no rendezvous), it is
	 * derived from the key when there is one, else 0. */
	uint32_t job_id;
	bool job_id_fixed;
	char master_addr[KEEL_LAUNCH_HOST_LEN]; /* "" when not set */
	uint16_t master_port;			/* 0 when not set */
	/* KEEL_PEERS ("host:port,[v6]:port,..."), or NULL. Points into the environment: valid
	 * while KEEL_PEERS is not changed. Entry i is where rank i's UDP socket listens. */
	const char *peers;
	const char *source; /* static: "torchrun", "slurm", "openmpi" or "single" */
	/* The job's secret key (KEEL_JOB_KEY_FILE or KEEL_JOB_KEY): the rendezvous proves it and
	 * keel_boot puts it in keel_config.auth_key. has_key false: nothing is authenticated. */
	bool has_key;
	uint8_t key[KEEL_AUTH_KEY_BYTES];
	const char *key_source; /* "KEEL_JOB_KEY_FILE" or "KEEL_JOB_KEY"; NULL without a key */
	/* Which machine this rank runs on: ranks with the same host_id can share memory (the
	 * rendezvous hands every rank's to every rank). From KEEL_HOST when set (a name: tests
	 * pretend to be several hosts on one machine), else this machine's host name and boot
	 * id. Never 0. With KEEL_PEERS, each rank's host is its entry's host as written
	 * instead, and KEEL_HOST is refused. */
	uint64_t host_id;
};

/* Fill `out` from the environment. Precedence (the first whose rank variable is set wins; a
 * launcher started by another one comes first, so mpirun in a Slurm job is read as Open MPI):
 *   torchrun / keel-run: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
 *   Open MPI:            OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
 *                        OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
 *   Slurm:               SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
 * plus MASTER_ADDR, MASTER_PORT, KEEL_PEERS, KEEL_JOB_ID and the job's key. With KEEL_PEERS the
 * world size is the number of entries (a world-size variable, if also set, must agree). Missing
 * local variables default to local_rank = rank and local_world_size = world_size. MASTER_ADDR and
 * MASTER_PORT are required when world_size > 1 and KEEL_PEERS is unset. The key (security.md),
 * at most one of: KEEL_JOB_KEY_FILE  a file holding 32 raw bytes, or 64 hex digits and an optional
 * newline; like ssh, a file that its group or others may read or write, or that another user owns
 * (root excepted), is refused KEEL_JOB_KEY       64 hex digits; note that the same user's other
 * processes can read a process's environment (/proc/PID/environ): prefer the file Errors (a message
 * naming the variable is written to err, which may be NULL): -ENOENT  no rank variable at all (the
 * tool may then run as a single rank: keel_launch_single) -EINVAL  a variable that is set but
 * missing its partners, not a number, out of range (world 0 or above KEEL_WORLD_MAX, rank >= world,
 * port 0 or above 65535), or values that disagree, or a malformed KEEL_PEERS; a key file that is
 * missing, unreadable, too open, of the wrong size or not hex; a KEEL_JOB_KEY that is not 64 hex
 * digits; both key variables set -ENOTSUP a key is given but this keel was built without libsodium
 * (it cannot prove or check one, and refuses to run unauthenticated when asked not to). */
KEEL_MUST_USE int keel_launch_from_env(struct keel_launch *out, char *err, size_t err_len);

/* Whether this keel can prove and check a job key (it was built with libsodium). Without it,
 * keel_launch_from_env refuses a key, and a launcher should not hand out one. */
bool keel_launch_auth_available(void);

/* A one-rank job: rank 0 of 1, no master, no peers, source "single". */
void keel_launch_single(struct keel_launch *out);

/* Check the syntax of a peer list and count its entries. Each entry is host:port or
 * [ipv6]:port (host not empty, at most KEEL_LAUNCH_HOST_LEN - 1 bytes, no ':' outside
 * brackets; port 1..65535); entries are separated by single commas, no spaces.
 * Errors: -EINVAL (message names the entry), including more than KEEL_WORLD_MAX entries. */
KEEL_MUST_USE int keel_peers_count(const char *list, uint32_t *count, char *err, size_t err_len);

/* Entry `index` of a peer list: host (brackets removed) into `host` (host_len bytes, at least
 * KEEL_LAUNCH_HOST_LEN recommended) and its port. Nothing is resolved.
 * Errors: -EINVAL (malformed entry, or host longer than host_len - 1), -ENOENT (index beyond
 * the list). */
KEEL_MUST_USE int keel_peers_entry(const char *list, uint32_t index, char *host, size_t host_len,
				   uint16_t *port, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
