/* Reads rank, world and rendezvous settings from the launcher's environment, and parses
 * KEEL_PEERS. Tools only; reads nothing but environment variables and never touches the net. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "assert_int.h"
#include "boot_int.h"
#include "keel/env.h"
#include "keel/launch.h"
#include "keel/limits.h"

/* Longest piece of user input quoted back in an error message. */
#define QUOTE_MAX 64

/* The variables of one launcher. The table is in precedence order: the launcher that started
 * this very process comes first, then the ones that may have started that launcher. */
struct env_source {
	const char *name;
	const char *rank, *world, *local_rank, *local_world;
	bool local_world_loose; /* an unreadable local_world counts as unset */
};

static const struct env_source sources[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", false},
    /* Before Slurm: mpirun run in a Slurm job (an sbatch script, or an srun step) hands every
     * rank the job's own SLURM_PROCID and SLURM_NTASKS (0 and the task count of the step that
     * ran mpirun, on every rank), while its OMPI_COMM_WORLD_* are the ranks' own. */
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", false},
    /* SLURM_NTASKS_PER_NODE may read "2(x3)" on uneven allocations: then it is ignored. */
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", true},
};
#define SOURCE_COUNT (sizeof(sources) / sizeof(sources[0]))

int keel_fail(char *err, size_t err_len, int code, const char *fmt, ...)
{
	va_list ap;

	if (err != NULL && err_len > 0) {
		va_start(ap, fmt);
		vsnprintf(err, err_len, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* Read launcher variable `name` (RANK, SLURM_NTASKS...: not keel's, so not in its table) as a
 * number in [min, max], with the table's parser and wording. *present says whether it is set.
 * Unset is not an error here; set but empty, non-numeric or out of range is. */
static int env_u32(const char *name, uint32_t min, uint32_t max, uint32_t *out, bool *present,
		   char *err, size_t err_len)
{
	const struct keel_env_var v = {
	    .name = name, .type = KEEL_ENV_WHOLE, .lo = min, .hi = max, .unit = ""};
	const char *s = getenv(name);
	uint64_t x;

	*present = s != NULL;
	if (s == NULL)
		return 0;
	int rc = keel_env_parse(&v, s, &x, err, err_len);
	if (rc == 0)
		*out = (uint32_t)x;
	return rc;
}

/* Parse one entry of a peer list: s[0..len). */
static int entry_parse(const char *s, size_t len, uint32_t index, char *host, size_t host_len,
		       uint16_t *port, char *err, size_t err_len)
{
	const char *host_start = s, *colon;
	size_t host_n;
	uint64_t p;

	if (len == 0)
		return keel_fail(err, err_len, -EINVAL, "KEEL_PEERS entry %u is empty", index);
	if (s[0] == '[') {
		const char *close = memchr(s, ']', len);

		if (close == NULL || close + 1 == s + len || close[1] != ':')
			return keel_fail(err, err_len, -EINVAL,
					 "KEEL_PEERS entry %u '%.*s': expected [ipv6-address]:port",
					 index, QUOTE_MAX, s);
		host_start = s + 1;
		host_n = (size_t)(close - host_start);
		colon = close + 1;
	} else {
		colon = memchr(s, ':', len);
		if (colon == NULL)
			return keel_fail(err, err_len, -EINVAL,
					 "KEEL_PEERS entry %u '%.*s' has no :port", index,
					 (int)(len < QUOTE_MAX ? len : QUOTE_MAX), s);
		if (memchr(colon + 1, ':', len - (size_t)(colon + 1 - s)) != NULL)
			return keel_fail(
			    err, err_len, -EINVAL,
			    "KEEL_PEERS entry %u '%.*s': write IPv6 addresses as [addr]:port",
			    index, (int)(len < QUOTE_MAX ? len : QUOTE_MAX), s);
		host_n = (size_t)(colon - s);
	}
	if (host_n == 0 || host_n >= host_len || host_n >= KEEL_LAUNCH_HOST_LEN)
		return keel_fail(
		    err, err_len, -EINVAL,
		    "KEEL_PEERS entry %u: host is empty or longer "
		    "than %zu bytes",
		    index, (host_len < KEEL_LAUNCH_HOST_LEN ? host_len : KEEL_LAUNCH_HOST_LEN) - 1);
	if (!keel_parse_decimal(colon + 1, len - (size_t)(colon + 1 - s), 65535, &p) || p == 0)
		return keel_fail(err, err_len, -EINVAL,
				 "KEEL_PEERS entry %u '%.*s': port must be 1..65535", index,
				 (int)(len < QUOTE_MAX ? len : QUOTE_MAX), s);
	memcpy(host, host_start, host_n);
	host[host_n] = '\0';
	*port = (uint16_t)p;
	return 0;
}

/* Find entry `index`: its start and length. Returns false when the list is shorter. The walk
 * is bounded by the list's length. */
static bool entry_find(const char *list, uint32_t index, const char **start, size_t *len)
{
	const char *s = list;

	for (uint32_t i = 0; i < index; i++) {
		s = strchr(s, ',');
		if (s == NULL)
			return false;
		s++;
	}
	*start = s;
	*len = strcspn(s, ",");
	return true;
}

int keel_peers_entry(const char *list, uint32_t index, char *host, size_t host_len, uint16_t *port,
		     char *err, size_t err_len)
{
	const char *s;
	size_t len;

	KEEL_ASSERT(list != NULL && host != NULL && host_len > 0 && port != NULL);
	if (!entry_find(list, index, &s, &len))
		return keel_fail(err, err_len, -ENOENT, "KEEL_PEERS has no entry %u", index);
	return entry_parse(s, len, index, host, host_len, port, err, err_len);
}

int keel_peers_count(const char *list, uint32_t *count, char *err, size_t err_len)
{
	char host[KEEL_LAUNCH_HOST_LEN];
	const char *s = list;
	uint16_t port;
	uint32_t n = 0;

	KEEL_ASSERT(list != NULL && count != NULL);
	if (list[0] == '\0')
		return keel_fail(err, err_len, -EINVAL, "KEEL_PEERS is empty");
	for (;;) {
		size_t len = strcspn(s, ",");
		int rc;

		if (n == KEEL_WORLD_MAX)
			return keel_fail(err, err_len, -EINVAL,
					 "KEEL_PEERS has more than %u entries", KEEL_WORLD_MAX);
		rc = entry_parse(s, len, n, host, sizeof(host), &port, err, err_len);
		if (rc != 0)
			return rc;
		n++;
		if (s[len] == '\0')
			break;
		s += len + 1;
	}
	*count = n;
	return 0;
}

void keel_launch_single(struct keel_launch *out)
{
	KEEL_ASSERT(out != NULL);
	memset(out, 0, sizeof(*out));
	out->world_size = 1;
	out->local_world_size = 1;
	out->source = "single";
	out->host_id = 1;
}

/* Rank, world and local values of one launcher whose rank variable is set. */
static int read_source(const struct env_source *src, struct keel_launch *out, char *err,
		       size_t err_len)
{
	bool has_rank, has_world, has_lrank, has_lworld;
	uint32_t peer_count = 0;
	int rc;

	rc = env_u32(src->rank, 0, KEEL_WORLD_MAX - 1, &out->rank, &has_rank, err, err_len);
	if (rc == 0)
		rc = env_u32(src->world, 1, KEEL_WORLD_MAX, &out->world_size, &has_world, err,
			     err_len);
	if (rc == 0)
		rc = env_u32(src->local_rank, 0, KEEL_WORLD_MAX - 1, &out->local_rank, &has_lrank,
			     err, err_len);
	if (rc == 0) {
		rc = env_u32(src->local_world, 1, KEEL_WORLD_MAX, &out->local_world_size,
			     &has_lworld, err, err_len);
		if (rc != 0 && src->local_world_loose) {
			rc = 0;
			has_lworld = false;
		}
	}
	if (rc != 0)
		return rc;
	KEEL_ASSERT(has_rank);
	if (out->peers != NULL) {
		rc = keel_peers_count(out->peers, &peer_count, err, err_len);
		if (rc != 0)
			return rc;
		if (has_world && out->world_size != peer_count)
			return keel_fail(err, err_len, -EINVAL,
					 "KEEL_PEERS has %u entries but %s=%u", peer_count,
					 src->world, out->world_size);
		out->world_size = peer_count;
	} else if (!has_world) {
		return keel_fail(err, err_len, -EINVAL,
				 "%s is set but %s is not (and no KEEL_PEERS)", src->rank,
				 src->world);
	}
	if (out->rank >= out->world_size)
		return keel_fail(err, err_len, -EINVAL, "%s=%u is not below the world size %u",
				 src->rank, out->rank, out->world_size);
	if (!has_lworld)
		out->local_world_size = out->world_size;
	if (!has_lrank)
		out->local_rank = out->rank < out->local_world_size ? out->rank : 0;
	if (out->local_rank >= out->local_world_size)
		return keel_fail(err, err_len, -EINVAL, "%s=%u is not below %s=%u", src->local_rank,
				 out->local_rank, src->local_world, out->local_world_size);
	if (out->local_world_size > out->world_size)
		return keel_fail(err, err_len, -EINVAL, "%s=%u is above the world size %u",
				 src->local_world, out->local_world_size, out->world_size);
	return 0;
}

static int read_master(struct keel_launch *out, char *err, size_t err_len)
{
	const char *addr = getenv("MASTER_ADDR");
	uint32_t port = 0;
	bool has_port;
	int rc;

	rc = env_u32("MASTER_PORT", 1, 65535, &port, &has_port, err, err_len);
	if (rc != 0)
		return rc;
	if (addr != NULL) {
		size_t n = strlen(addr);

		if (n == 0 || n >= sizeof(out->master_addr))
			return keel_fail(err, err_len, -EINVAL,
					 "MASTER_ADDR is empty or longer than %zu "
					 "bytes",
					 sizeof(out->master_addr) - 1);
		memcpy(out->master_addr, addr, n + 1);
	}
	out->master_port = (uint16_t)port;
	if (out->world_size == 1 || out->peers != NULL)
		return 0;
	if (addr == NULL || !has_port)
		return keel_fail(err, err_len, -EINVAL,
				 "%s is not set (rendezvous of %u ranks needs "
				 "MASTER_ADDR and MASTER_PORT, or KEEL_PEERS)",
				 addr == NULL ? "MASTER_ADDR" : "MASTER_PORT", out->world_size);
	return 0;
}

static int read_job_id(struct keel_launch *out, char *err, size_t err_len)
{
	uint64_t v;
	int set = keel_env_uint("KEEL_JOB_ID", &v, err, err_len); /* 0..UINT32_MAX */

	if (set < 0)
		return set;
	if (set == 1) {
		out->job_id = (uint32_t)v;
		out->job_id_fixed = true;
		return 0;
	}
	/* Every task of a Slurm job sees the same SLURM_JOB_ID; anything unreadable is ignored,
	 * since it only narrows which datagrams count as ours. */
	const char *s = getenv("SLURM_JOB_ID");
	if (s != NULL && keel_parse_decimal(s, strlen(s), UINT32_MAX, &v)) {
		out->job_id = (uint32_t)v;
		out->job_id_fixed = true;
	}
	return 0;
}

uint64_t keel_launch_host_hash(const char *space, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, 64 bits */
	for (const char *s = space; *s != '\0'; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	h = (h ^ 0xffu) * 0x100000001b3ull; /* "ab"+"c" and "a"+"bc" differ */
	for (const char *s = name; *s != '\0'; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h != 0 ? h : 1;
}

/* KEEL_HOST, else the host name and the kernel's boot id: two containers of one machine with
 * the same host name share a boot id, and may share /dev/shm; two machines given the same
 * name do not. */
static int read_host(struct keel_launch *out, char *err, size_t err_len)
{
	const char *s = NULL;
	char name[320] = "", boot_id[64] = "";
	int set = keel_env_text("KEEL_HOST", &s, err, err_len); /* 1..255 bytes */

	if (set < 0)
		return set;
	if (set == 1 && out->peers != NULL)
		return keel_fail(err, err_len, -EINVAL,
				 "KEEL_HOST=%.64s: with KEEL_PEERS each rank's host is its entry's "
				 "host; unset KEEL_HOST or use the TCP rendezvous (MASTER_ADDR)",
				 s);
	if (set == 1) {
		out->host_id = keel_launch_host_hash("KEEL_HOST", s);
		return 0;
	}
	if (gethostname(name, 256) != 0)
		name[0] = '\0';
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f != NULL) {
		if (fgets(boot_id, sizeof(boot_id), f) == NULL)
			boot_id[0] = '\0';
		fclose(f);
	}
	size_t n = strlen(name);
	snprintf(name + n, sizeof(name) - n, "/%s", boot_id);
	out->host_id = keel_launch_host_hash("machine", name);
	return 0;
}

int keel_launch_from_env(struct keel_launch *out, char *err, size_t err_len)
{
	const struct env_source *src = NULL;
	int rc;

	KEEL_ASSERT(out != NULL);
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < SOURCE_COUNT && src == NULL; i++)
		if (getenv(sources[i].rank) != NULL)
			src = &sources[i];
	if (src == NULL)
		return keel_fail(
		    err, err_len, -ENOENT,
		    "no rank in the environment: looked for RANK (torchrun, keel-run), "
		    "OMPI_COMM_WORLD_RANK (Open MPI) and SLURM_PROCID (Slurm)%s",
		    keel_env_is_set("KEEL_PEERS") ? "; KEEL_PEERS needs one of them too" : "");
	out->source = src->name;
	rc = keel_env_text("KEEL_PEERS", &out->peers, err, err_len);
	if (rc < 0)
		return rc;
	rc = read_source(src, out, err, err_len);
	if (rc == 0)
		rc = read_master(out, err, err_len);
	if (rc == 0)
		rc = read_job_id(out, err, err_len);
	if (rc == 0)
		rc = keel_launch_read_key(out, err, err_len);
	if (rc == 0)
		rc = read_host(out, err, err_len);
	return rc;
}
