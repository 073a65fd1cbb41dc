/* Test scaffolding: N keel nodes in one process, each on its own UDP socket on 127.0.0.1
 * (optionally behind the chaos transport) or on the shared-memory transport, driven by one
 * manual clock. Real sockets, real
 * wire format; only time is injected, so runs are repeatable. */
#ifndef KEEL_TEST_CLUSTER_INT_H
#define KEEL_TEST_CLUSTER_INT_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keel/keel.h"
#include "keel/transport_chaos.h"
#include "keel/transport_shm.h"
#include "keel/transport_udp.h"

#define CLUSTER_MAX 40 /* above KEEL_FD_ALL_TO_ALL_MAX: ring monitoring is tested too */

struct cluster {
	uint32_t world;
	uint64_t now_ns;
	uint64_t step_ns; /* clock advance per round */
	struct keel_transport *udp[CLUSTER_MAX], *chaos[CLUSTER_MAX], *tp[CLUSTER_MAX];
	struct keel_node *node[CLUSTER_MAX];
	void *mem_udp[CLUSTER_MAX], *mem_chaos[CLUSTER_MAX], *mem_node[CLUSTER_MAX];
	struct keel_config cfg[CLUSTER_MAX];
	bool paused[CLUSTER_MAX]; /* not polled: a stopped or dead process */
	void *shm_region;	  /* cluster_init_shm: udp[] are shm transports in it */
};

/* Seed from SEED=n or the given default; printed so a failure replays. */
static inline uint64_t cluster_seed(uint64_t dflt)
{
	const char *s = getenv("SEED");
	uint64_t seed = s != NULL ? strtoull(s, NULL, 0) : dflt;
	printf("SEED=%" PRIu64 "\n", seed);
	fflush(stdout);
	return seed;
}

/* The nodes over the transports in c->tp. */
static inline int cluster_nodes_init(struct cluster *c, void (*tweak)(struct keel_config *cfg))
{
	for (uint32_t r = 0; r < c->world; r++) {
		struct keel_config *cfg = &c->cfg[r];
		keel_config_default(cfg);
		cfg->rank = r;
		cfg->world_size = c->world;
		cfg->job_id = 42;
		cfg->transport = c->tp[r];
		cfg->heartbeat_ns = 1000000;
		cfg->join_timeout_ns = 1; /* no start-up grace: tests time suspicion exactly */
		if (tweak != NULL)
			tweak(cfg);
		size_t sz = keel_storage_size(cfg);
		if (sz == 0)
			return -EINVAL;
		c->mem_node[r] = calloc(1, sz);
		int rc = keel_init(&c->node[r], c->mem_node[r], sz, cfg, c->now_ns);
		if (rc != 0)
			return rc;
	}
	return 0;
}

static inline void cluster_clock_init(struct cluster *c, uint32_t world)
{
	memset(c, 0, sizeof(*c));
	c->world = world;
	c->now_ns = 1000000000ull;
	c->step_ns = 10000;
}

/* c->udp[0 .. c->world): UDP transports on loopback wired to each other (mtu 0: the
 * default), also in c->tp. */
static inline int cluster_udp_init(struct cluster *c, uint32_t mtu)
{
	for (uint32_t r = 0; r < c->world; r++) {
		struct keel_udp_config u;
		keel_udp_config_default(&u);
		u.rank = r;
		u.world_size = c->world;
		if (mtu != 0)
			u.mtu = mtu;
		size_t sz = keel_udp_storage_size(&u);
		c->mem_udp[r] = calloc(1, sz);
		int rc = keel_udp_init(&c->udp[r], c->mem_udp[r], sz, &u);
		if (rc != 0)
			return rc;
		c->tp[r] = c->udp[r];
	}
	for (uint32_t r = 0; r < c->world; r++)
		for (uint32_t q = 0; q < c->world; q++) {
			struct sockaddr_storage a;
			socklen_t al = sizeof(a);
			if (keel_udp_local_addr(c->udp[q], &a, &al) != 0 ||
			    keel_udp_set_peer(c->udp[r], q, (struct sockaddr *)&a, al) != 0)
				return -EIO;
		}
	return 0;
}

/* Build `world` nodes. `tweak` may adjust each config; chaos_spec NULL means plain UDP. */
static inline int cluster_init(struct cluster *c, uint32_t world, const char *chaos_spec,
			       uint64_t seed, void (*tweak)(struct keel_config *cfg))
{
	cluster_clock_init(c, world);
	int urc = cluster_udp_init(c, 0);
	if (urc != 0)
		return urc;
	for (uint32_t r = 0; r < world; r++) {
		if (chaos_spec != NULL) {
			struct keel_chaos_config cc;
			keel_chaos_config_default(&cc);
			if (keel_chaos_parse(chaos_spec, &cc) != 0)
				return -EINVAL;
			cc.inner = c->udp[r];
			cc.seed = seed * 1000003u + r;
			size_t sz = keel_chaos_storage_size(&cc);
			c->mem_chaos[r] = calloc(1, sz);
			int rc = keel_chaos_init(&c->chaos[r], c->mem_chaos[r], sz, &cc);
			if (rc != 0)
				return rc;
			c->tp[r] = c->chaos[r];
		}
	}
	return cluster_nodes_init(c, tweak);
}

/* The same over the shared-memory transport (one region in this process's memory; rings
 * large enough for a reliable window of mtu-sized datagrams). The mtu is the one `tweak` sets
 * (KEEL_MTU_MAX if it leaves the default). */
static inline int cluster_init_shm(struct cluster *c, uint32_t world, uint32_t mtu,
				   void (*tweak)(struct keel_config *cfg))
{
	struct keel_shm_config sc;
	char name[KEEL_SHM_NAME_MAX];
	cluster_clock_init(c, world);
	snprintf(name, sizeof(name), "/keel-cluster-%d-%p", (int)getpid(), (void *)c);
	keel_shm_config_default(&sc);
	sc.world_size = world;
	sc.name = name;
	sc.mtu = mtu;
	sc.reliable = true; /* the default: KEEL_CAP_RELIABLE, as keel-run jobs get it */
	while (sc.ring_bytes < (KEEL_WINDOW_DEFAULT + 2) * (mtu + 16))
		sc.ring_bytes *= 2;
	sc.region_len = keel_shm_region_size(&sc);
	sc.region = aligned_alloc(64, (sc.region_len + 63) & ~(size_t)63);
	if (sc.region_len == 0 || sc.region == NULL)
		return -EINVAL;
	memset(sc.region, 0, sc.region_len);
	c->shm_region = sc.region;
	for (uint32_t r = 0; r < world; r++) {
		sc.rank = r;
		size_t sz = keel_shm_storage_size(&sc);
		c->mem_udp[r] = calloc(1, sz);
		int rc = keel_shm_init(&c->udp[r], c->mem_udp[r], sz, &sc);
		if (rc != 0)
			return rc;
		c->tp[r] = c->udp[r];
	}
	for (uint32_t r = 0; r < world; r++)
		if (keel_shm_attach(c->udp[r]) != 0)
			return -EIO;
	return cluster_nodes_init(c, tweak);
}

static inline void cluster_fini(struct cluster *c)
{
	for (uint32_t r = 0; r < c->world; r++) {
		if (c->node[r] != NULL)
			keel_fini(c->node[r]);
		if (c->chaos[r] != NULL && c->chaos[r]->ops->fini != NULL)
			c->chaos[r]->ops->fini(c->chaos[r]);
		if (c->udp[r] != NULL && c->udp[r]->ops->fini != NULL)
			c->udp[r]->ops->fini(c->udp[r]);
		free(c->mem_node[r]);
		free(c->mem_chaos[r]);
		free(c->mem_udp[r]);
	}
	free(c->shm_region);
	memset(c, 0, sizeof(*c));
}

/* Poll every running node once at the current time, then advance the clock. */
static inline void cluster_round(struct cluster *c)
{
	for (uint32_t r = 0; r < c->world; r++) {
		if (c->paused[r])
			continue;
		uint64_t dl;
		int rc = keel_poll(c->node[r], c->now_ns, &dl);
		(void)rc;
	}
	c->now_ns += c->step_ns;
}

/* Poll until every op in ops[] (one per rank, NULL for ranks not taking part) is done, or
 * rounds_max rounds pass. Statuses go to rc[], and what keel_op_test_info says of each op to
 * info[] (may be NULL); returns 0 if all finished. */
static inline int cluster_wait_ops_info(struct cluster *c, struct keel_op **ops, int *rc,
					struct keel_op_info *info, uint32_t rounds_max)
{
	bool done[CLUSTER_MAX] = {false};
	for (uint32_t round = 0; round < rounds_max; round++) {
		uint32_t left = 0;
		for (uint32_t r = 0; r < c->world; r++) {
			if (ops[r] == NULL || done[r])
				continue;
			int st = keel_op_test_info(c->node[r], ops[r],
						   info != NULL ? &info[r] : NULL, NULL, 0);
			if (st == -EINPROGRESS) {
				left++;
				continue;
			}
			rc[r] = st;
			done[r] = true;
		}
		if (left == 0)
			return 0;
		cluster_round(c);
	}
	return -ETIMEDOUT;
}

static inline int cluster_wait_ops(struct cluster *c, struct keel_op **ops, int *rc,
				   uint32_t rounds_max)
{
	return cluster_wait_ops_info(c, ops, rc, NULL, rounds_max);
}

/* The same for group requests (keel/group.h): poll until every request in reqs[] (one per
 * rank; NULL for ranks not taking part, and paused ranks, whose process is stopped, are not
 * looked at) has ended, or rounds_max rounds pass. Statuses go to rc[]; what
 * keel_req_test_info says of each to info[] and members[] (each may be NULL); the clock when
 * each was seen ended to end_ns[] (may be NULL). Ended requests are set to NULL in reqs[] (they
 * are released). Returns 0 if all ended. */
static inline int cluster_wait_reqs_info(struct cluster *c, struct keel_req **reqs, int *rc,
					 struct keel_req_info *info,
					 uint32_t (*members)[CLUSTER_MAX], uint64_t *end_ns,
					 uint32_t rounds_max)
{
	for (uint32_t round = 0; round < rounds_max; round++) {
		uint32_t left = 0;
		for (uint32_t r = 0; r < c->world; r++) {
			if (reqs[r] == NULL || c->paused[r])
				continue;
			int st = keel_req_test_info(reqs[r], info != NULL ? &info[r] : NULL,
						    members != NULL ? members[r] : NULL,
						    members != NULL ? CLUSTER_MAX : 0);
			if (st == -EINPROGRESS) {
				left++;
				continue;
			}
			rc[r] = st;
			reqs[r] = NULL;
			if (end_ns != NULL)
				end_ns[r] = c->now_ns;
		}
		if (left == 0)
			return 0;
		cluster_round(c);
	}
	return -ETIMEDOUT;
}

static inline int cluster_wait_reqs(struct cluster *c, struct keel_req **reqs, int *rc,
				    uint32_t rounds_max)
{
	return cluster_wait_reqs_info(c, reqs, rc, NULL, NULL, NULL, rounds_max);
}

#endif
