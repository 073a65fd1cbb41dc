/* Membership views over real sockets with a manual clock: a killed rank, a split (chaos
 * transport cuts), a coordinator that dies in the middle of a view change, a restarted rank,
 * and seeded random schedules of loss, delay, pauses and restarts. Every test checks the
 * protocol's promise from each node's view-change callback: one member set per epoch. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include "cluster_int.h"
#include "wire_int.h"

#define HB	   1000000ull
#define EPOCHS_MAX 256

static uint64_t g_seed;

/* Every view any node installed, by epoch: all must agree. */
static struct {
	bool seen[EPOCHS_MAX];
	uint64_t members[EPOCHS_MAX]; /* bitmask of ranks */
	uint32_t installs;
	bool conflict;
} g_views;

struct node_tag {
	uint32_t rank;
	uint64_t installed_ns; /* last install */
};
static struct node_tag g_tags[CLUSTER_MAX];

static void record_view(void *ctx, const struct keel_view *v, const uint32_t *members,
			uint64_t now_ns)
{
	struct node_tag *tag = ctx;
	uint64_t mask = 0;
	for (uint32_t i = 0; i < v->member_count; i++)
		mask |= 1ull << members[i];
	tag->installed_ns = now_ns;
	g_views.installs++;
	if (v->epoch >= EPOCHS_MAX)
		return;
	if (g_views.seen[v->epoch] && g_views.members[v->epoch] != mask) {
		print_error("epoch %u installed as %#llx and %#llx\n", v->epoch,
			    (unsigned long long)g_views.members[v->epoch],
			    (unsigned long long)mask);
		g_views.conflict = true;
	}
	g_views.seen[v->epoch] = true;
	g_views.members[v->epoch] = mask;
}

static void tweak_views(struct keel_config *cfg)
{
	g_tags[cfg->rank].rank = cfg->rank;
	cfg->on_view = record_view;
	cfg->on_view_ctx = &g_tags[cfg->rank];
	cfg->view_timeout_ns = 5 * HB;
}

static int setup(void **state)
{
	(void)state;
	memset(&g_views, 0, sizeof(g_views));
	memset(g_tags, 0, sizeof(g_tags));
	return 0;
}

static struct keel_view view_of(struct cluster *c, uint32_t r, uint64_t *mask)
{
	struct keel_view v;
	uint32_t members[CLUSTER_MAX];
	int n = keel_view_get(c->node[r], &v, members, CLUSTER_MAX);
	assert_true(n >= 0);
	*mask = 0;
	for (int i = 0; i < n; i++)
		*mask |= 1ull << members[i];
	return v;
}

/* Run until the running nodes agree on one view with `want` members, or rounds run out. */
static bool converge(struct cluster *c, uint64_t want, uint32_t rounds)
{
	for (uint32_t i = 0; i < rounds; i++) {
		bool same = true;
		uint32_t epoch = 0;
		for (uint32_t r = 0; r < c->world && same; r++) {
			if (c->paused[r])
				continue;
			uint64_t mask;
			struct keel_view v = view_of(c, r, &mask);
			same = mask == want && v.self_member && (epoch == 0 || v.epoch == epoch);
			epoch = v.epoch;
		}
		if (same)
			return true;
		cluster_round(c);
	}
	return false;
}

static void warm(struct cluster *c)
{
	c->step_ns = HB / 10;
	for (int i = 0; i < 30; i++)
		cluster_round(c);
}

static void test_membership_killed_rank_is_excluded_by_all(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 4, NULL, g_seed, tweak_views), 0);
	warm(&c);
	uint64_t t_kill = c.now_ns;
	c.paused[2] = true;
	assert_true(converge(&c, 0xbull, 20000));
	for (uint32_t r = 0; r < 4; r++) {
		if (r == 2)
			continue;
		uint64_t mask;
		struct keel_view v = view_of(&c, r, &mask);
		assert_int_equal(v.epoch, 2);
		/* suspected after 3 intervals, view installed within a few round trips more */
		assert_true(g_tags[r].installed_ns - t_kill <= 3 * HB + 2 * HB);
		struct keel_peer_info pi;
		assert_int_equal(keel_peer_get(c.node[r], 2, &pi), 0);
		assert_int_equal(pi.state, KEEL_PEER_DEAD);
		assert_false(pi.member);
	}
	assert_false(g_views.conflict);
	cluster_fini(&c);
}

static void tweak_ring(struct keel_config *cfg)
{
	tweak_views(cfg);
	cfg->window = 8; /* 36 nodes in one process: keep each node's buffers small */
	cfg->mtu = 2048;
}

/* Beyond the all-to-all limit a member beats only its ring successors, so the coordinator
 * never hears most members directly: the view change must still go through (it learns their
 * incarnations from their promises), and the members that become ring neighbours in the new
 * view must not suspect each other for the silence that was by design. */
static void test_membership_ring_monitoring_beyond_all_to_all_limit(void **state)
{
	(void)state;
	const uint32_t world = KEEL_FD_ALL_TO_ALL_MAX + 4, dead = 5;
	struct cluster c;
	assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak_ring), 0);
	warm(&c);
	uint64_t all = (1ull << world) - 1;
	assert_true(converge(&c, all, 100));
	c.paused[dead] = true;
	assert_true(converge(&c, all & ~(1ull << dead), 20000));
	for (int i = 0; i < 200; i++) /* some intervals on the new ring */
		cluster_round(&c);
	for (uint32_t r = 0; r < world; r++) {
		if (r == dead)
			continue;
		uint64_t mask;
		struct keel_view v = view_of(&c, r, &mask);
		assert_int_equal(v.epoch, 2); /* one change: no false alarm on the new ring */
		assert_int_equal(mask, all & ~(1ull << dead));
		struct keel_counters k;
		keel_counters_get(c.node[r], &k);
		assert_int_equal(k.false_suspicions, 0);
	}
	assert_false(g_views.conflict);
	cluster_fini(&c);
}

static int cut(struct cluster *c, uint32_t a, uint32_t b, bool on)
{
	int rc = keel_chaos_cut(c->chaos[a], b, on);
	return rc != 0 ? rc : keel_chaos_cut(c->chaos[b], a, on);
}

/* 7 ranks cut 4 | 3: the 4 install a view and go on, the 3 stop with KEEL_ENOQUORUM; after
 * healing the 3 rejoin and everyone ends in one view of 7. */
static void test_membership_split_minority_stops_then_rejoins(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 7, "loss=0", g_seed, tweak_views), 0);
	warm(&c);
	for (uint32_t a = 0; a < 4; a++)
		for (uint32_t b = 4; b < 7; b++)
			assert_int_equal(cut(&c, a, b, true), 0);
	assert_true(converge(&c, 0x0full, 20000) == false); /* the minority never agrees... */
	for (uint32_t r = 0; r < 4; r++) {		    /* ...but the majority did */
		uint64_t mask;
		struct keel_view v = view_of(&c, r, &mask);
		assert_int_equal(mask, 0x0full);
		assert_true(v.self_member);
	}
	for (uint32_t r = 4; r < 7; r++) {
		uint64_t dl, mask;
		assert_int_equal(keel_poll(c.node[r], c.now_ns, &dl), KEEL_ENOQUORUM);
		struct keel_view v = view_of(&c, r, &mask);
		assert_false(v.self_member);
		assert_int_equal(v.epoch, 1); /* nothing was installed on the minority side */
		float x = 1;
		struct keel_op *op;
		assert_int_equal(
		    keel_allreduce_start(c.node[r], &x, &x, 1, KEEL_F32, KEEL_SUM, &op), 0);
		assert_int_equal(keel_op_test(c.node[r], op), KEEL_ENOQUORUM);
	}
	for (uint32_t a = 0; a < 4; a++)
		for (uint32_t b = 4; b < 7; b++)
			assert_int_equal(cut(&c, a, b, false), 0);
	assert_true(converge(&c, 0x7full, 40000));
	assert_false(g_views.conflict);
	cluster_fini(&c);
}

/* The coordinator dies just after starting a view change; the next lowest rank takes over and
 * finishes it — adopting the value if a majority had accepted it — and no epoch gets two
 * different member sets. */
static void test_membership_coordinator_dies_mid_change(void **state)
{
	(void)state;
	for (uint32_t delay = 0; delay < 6; delay++) {
		setup(NULL);
		struct cluster c;
		assert_int_equal(cluster_init(&c, 5, NULL, g_seed + delay, tweak_views), 0);
		warm(&c);
		c.paused[4] = true; /* rank 4 dies: coordinator 0 starts a view change */
		struct keel_counters k;
		for (int i = 0; i < 40000; i++) {
			keel_counters_get(c.node[0], &k);
			if (k.view_proposals > 0)
				break;
			cluster_round(&c);
		}
		assert_true(k.view_proposals > 0);
		for (uint32_t i = 0; i < delay; i++) /* let the round get this far */
			cluster_round(&c);
		c.paused[0] = true; /* and the coordinator dies */
		assert_true(converge(&c, 0x0eull, 40000));
		assert_false(g_views.conflict);
		cluster_fini(&c);
	}
}

/* A rank restarts as a new incarnation: its old life is suspected at once (no need to wait for
 * silence), and it is admitted as a member, told it joined and where to fetch state. */
static void test_membership_restarted_rank_rejoins(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 4, NULL, g_seed, tweak_views), 0);
	warm(&c);
	struct keel_config cfg = c.cfg[3];
	cfg.incarnation = 2;
	cfg.rejoin = true;
	assert_int_equal(
	    keel_init(&c.node[3], c.mem_node[3], keel_storage_size(&cfg), &cfg, c.now_ns), 0);
	assert_true(converge(&c, 0xfull, 40000));
	uint64_t mask;
	struct keel_view v = view_of(&c, 3, &mask);
	assert_true(v.self_joined);
	assert_int_equal(v.joined_count, 1);
	assert_int_equal(v.donor, 0);
	struct keel_peer_info pi;
	assert_int_equal(keel_peer_get(c.node[0], 3, &pi), 0);
	assert_int_equal(pi.incarnation, 2);
	/* the data path works in the new view */
	float buf[4][64];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < 4; r++) {
		for (int i = 0; i < 64; i++)
			buf[r][i] = (float)r;
		assert_int_equal(keel_allreduce_start(c.node[r], buf[r], buf[r], 64, KEEL_F32,
						      KEEL_SUM, &ops[r]),
				 0);
	}
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 100000), 0);
	for (uint32_t r = 0; r < 4; r++) {
		assert_int_equal(rc[r], 0);
		assert_true(buf[r][5] == 6.0f);
	}
	assert_false(g_views.conflict);
	cluster_fini(&c);
}

/* Ranks 0 and 1 finish and leave (keel_leave), then stop; `waiter` (rank 2), outside the view,
 * must come to see them both as left and stay out of any view. */
static void others_leave_then_waiter_sees_it(struct cluster *c)
{
	for (uint32_t r = 0; r < 2; r++) {
		assert_true(keel_is_idle(c->node[r]));
		assert_int_equal(keel_leave(c->node[r], c->now_ns), 0);
		c->paused[r] = true;
	}
	c->paused[2] = false;
	for (int i = 0; i < 100; i++)
		cluster_round(c);
	uint64_t mask;
	struct keel_view v = view_of(c, 2, &mask);
	assert_false(v.self_member);
	for (uint32_t r = 0; r < 2; r++) {
		struct keel_peer_info pi;
		assert_int_equal(keel_peer_get(c->node[2], r, &pi), 0);
		assert_true(pi.left);
		assert_int_not_equal(pi.state, KEEL_PEER_ALIVE);
	}
}

/* The job ends while a restarted rank waits for admission: the members' keel_leave reaches it
 * (not only the members), so it sees every rank it could join as left instead of waiting for
 * a view change nobody is left to make. */
static void test_membership_joiner_told_members_left(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak_views), 0);
	warm(&c);
	c.paused[2] = true;
	assert_true(converge(&c, 0x3ull, 20000));
	struct keel_config cfg = c.cfg[2];
	cfg.incarnation = 2;
	cfg.rejoin = true;
	assert_int_equal(
	    keel_init(&c.node[2], c.mem_node[2], keel_storage_size(&cfg), &cfg, c.now_ns), 0);
	c.paused[2] = false;
	/* Until the members have heard the new life knocking (and not yet admitted it). */
	struct keel_peer_info pi = {0};
	for (int i = 0; i < 20000 && pi.incarnation != 2; i++) {
		cluster_round(&c);
		assert_int_equal(keel_peer_get(c.node[0], 2, &pi), 0);
	}
	assert_int_equal(pi.incarnation, 2);
	assert_false(pi.member);
	assert_int_equal(keel_peer_get(c.node[2], 0, &pi), 0);
	assert_false(pi.left);
	others_leave_then_waiter_sees_it(&c);
	assert_false(g_views.conflict);
	cluster_fini(&c);
}

/* An AllReduce of 64 floats (rank r gives r + 1) over the ranks in `mask`; every result must be
 * the sum over exactly the members its op reports. */
static void allreduce_exact(struct cluster *c, uint64_t mask)
{
	static float in[CLUSTER_MAX][64], buf[CLUSTER_MAX][64];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	float want = 0;
	for (uint32_t r = 0; r < c->world; r++) {
		if (!((mask >> r) & 1))
			continue;
		want += (float)(r + 1);
		for (int i = 0; i < 64; i++)
			in[r][i] = (float)(r + 1);
		assert_int_equal(keel_allreduce_start(c->node[r], in[r], buf[r], 64, KEEL_F32,
						      KEEL_SUM, &ops[r]),
				 0);
	}
	assert_int_equal(cluster_wait_ops(c, ops, rc, 100000), 0);
	for (uint32_t r = 0; r < c->world; r++) {
		if (!((mask >> r) & 1))
			continue;
		assert_int_equal(rc[r], 0);
		assert_true(buf[r][17] == want);
	}
}

/* A rank stopped (SIGSTOP, a long page-fault storm) with a collective in flight, then back
 * with its old state, epoch and incarnation — the coordinator or another rank. The others
 * finish on the smaller view without waiting for it; its old-epoch data is fenced and counted;
 * it learns it was left out from the first datagrams it exchanges, its collective fails with
 * KEEL_EEXCLUDED, and the next view change admits it again, as a restarted rank would be. */
static void paused_rank_is_excluded_then_readmitted(uint32_t world, uint32_t paused)
{
	struct cluster c;
	assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak_views), 0);
	warm(&c);
	uint64_t all = (1ull << world) - 1, rest = all & ~(1ull << paused);
	static float in[CLUSTER_MAX][64], buf[CLUSTER_MAX][64];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < world; r++) {
		for (int i = 0; i < 64; i++)
			in[r][i] = (float)(r + 1);
		/* out of place: a view change restarts it from the untouched input */
		assert_int_equal(
		    keel_allreduce_start(c.node[r], in[r], buf[r], 64, KEEL_F32, KEEL_SUM, &ops[r]),
		    0);
	}
	c.paused[paused] = true; /* stopped before its first datagram of that call left */
	struct keel_counters k;
	keel_counters_get(c.node[paused], &k);
	uint64_t queued = k.data_sent; /* 0 when its first step only receives */
	struct keel_op *waiting = ops[paused];
	ops[paused] = NULL;
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 100000), 0);
	float want = (float)(world * (world + 1) / 2 - (paused + 1));
	for (uint32_t r = 0; r < world; r++)
		if (r != paused) {
			assert_int_equal(rc[r], 0);
			assert_true(buf[r][3] == want);
		}
	assert_true(converge(&c, rest, 20000));
	struct keel_counters before[CLUSTER_MAX];
	for (uint32_t r = 0; r < world; r++)
		keel_counters_get(c.node[r], &before[r]);

	c.paused[paused] = false; /* back, with its old epoch and incarnation */
	int st = -EINPROGRESS;
	for (int i = 0; i < 20 * 10 && st == -EINPROGRESS; i++) {
		cluster_round(&c);
		st = keel_op_test(c.node[paused], waiting);
	}
	assert_int_equal(st, KEEL_EEXCLUDED); /* within 20 rounds of HB/10: two intervals */
	keel_counters_get(c.node[paused], &k);
	assert_int_equal(k.self_exclusions, 1);
	for (int i = 0; i < 10; i++)
		cluster_round(&c); /* what it sent in its last poll reaches the others */
	uint64_t fenced = 0;
	for (uint32_t r = 0; r < world; r++) {
		keel_counters_get(c.node[r], &k);
		fenced += k.drop_epoch - before[r].drop_epoch;
	}
	/* Its old-epoch data, queued for the transport when it stopped, does not leave: learning
	 * the new view resets its streams, which takes their datagrams out of the queue unsent
	 * (a reset slot's buffer may be written for the next stream before the flush). Control
	 * traffic of its last old-epoch poll may still reach the others: fenced there by epoch. */
	print_message("queued old-epoch data: %llu datagrams; fenced at the others: %llu\n",
		      (unsigned long long)queued, (unsigned long long)fenced);
	assert_true(converge(&c, all, 40000));
	uint64_t mask;
	struct keel_view v = view_of(&c, paused, &mask);
	assert_true(v.self_joined);
	assert_int_equal(v.joined_count, 1);
	assert_int_not_equal(v.donor, paused);
	allreduce_exact(&c, all);
	assert_false(g_views.conflict);
	cluster_fini(&c);
}

static void test_membership_paused_rank_excluded_then_readmitted(void **state)
{
	(void)state;
	paused_rank_is_excluded_then_readmitted(4, 2);
	setup(NULL);
	paused_rank_is_excluded_then_readmitted(5, 4);
	setup(NULL);
	paused_rank_is_excluded_then_readmitted(3, 1);
}

static void test_membership_paused_coordinator_excluded_then_readmitted(void **state)
{
	(void)state;
	paused_rank_is_excluded_then_readmitted(4, 0);
	setup(NULL);
	paused_rank_is_excluded_then_readmitted(3, 0);
}

/* The job ends while a rank is paused: the others leave; when it resumes it finds itself
 * left out and every rank it could rejoin gone, instead of waiting to be admitted by nobody. */
static void test_membership_paused_rank_told_the_others_left(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak_views), 0);
	warm(&c);
	c.paused[2] = true;
	assert_true(converge(&c, 0x3ull, 20000));
	others_leave_then_waiter_sees_it(&c); /* rank 2 resumes only after they left */
	struct keel_counters k;
	keel_counters_get(c.node[2], &k);
	assert_int_equal(k.self_exclusions, 1);
	cluster_fini(&c);
}

/* Excluded while no collective was pending (between two steps of the host program): the
 * next collective it starts says so, once; after readmission collectives work again. */
static void test_membership_excluded_between_collectives_told_at_next_start(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 4, NULL, g_seed, tweak_views), 0);
	warm(&c);
	c.paused[3] = true;
	assert_true(converge(&c, 0x7ull, 20000));
	c.paused[3] = false;
	assert_true(converge(&c, 0xfull, 40000));
	float x = 1, y;
	struct keel_op *op;
	assert_int_equal(keel_allreduce_start(c.node[3], &x, &y, 1, KEEL_F32, KEEL_SUM, &op),
			 KEEL_EEXCLUDED);
	assert_int_equal(keel_broadcast_start(c.node[3], 0, &x, sizeof(x), &op), 0);
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	float b[4] = {7, 0, 0, 0};
	ops[3] = op;
	for (uint32_t r = 0; r < 3; r++)
		assert_int_equal(keel_broadcast_start(c.node[r], 0, &b[r], sizeof(float), &ops[r]),
				 0);
	x = 0;
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 100000), 0);
	for (uint32_t r = 0; r < 4; r++)
		assert_int_equal(rc[r], 0);
	assert_true(x == 7.0f && b[2] == 7.0f);
	allreduce_exact(&c, 0xf);
	cluster_fini(&c);
}

/* Broadcast from the donor: how a node that joined gets the state. */
static void test_membership_broadcast_brings_state(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak_views), 0);
	warm(&c);
	enum { BYTES = 300000 };
	static uint8_t buf[3][BYTES];
	for (uint32_t i = 0; i < BYTES; i++)
		buf[1][i] = (uint8_t)(i * 7 + 3);
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < 3; r++)
		assert_int_equal(keel_broadcast_start(c.node[r], 1, buf[r], BYTES, &ops[r]), 0);
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 100000), 0);
	for (uint32_t r = 0; r < 3; r++) {
		assert_int_equal(rc[r], 0);
		assert_memory_equal(buf[r], buf[1], BYTES);
	}
	struct keel_op *op;
	assert_int_equal(keel_broadcast_start(c.node[0], 7, buf[0], 8, &op), -EINVAL);
	cluster_fini(&c);
}

/* A broadcast whose root dies before it ran: the root's bytes are gone, so every survivor
 * fails it with KEEL_EVIEWCHANGED (and can run it again from a live root), none returns 0
 * with another member's buffer. */
static void test_membership_broadcast_root_dies(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak_views), 0);
	warm(&c);
	uint64_t root_bytes = 0x5151515151515151ull, got[2] = {1, 2};
	c.paused[2] = true; /* the root stops for good: the others exclude it */
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(
		    keel_broadcast_start(c.node[r], 2, &got[r], sizeof(got[r]), &ops[r]), 0);
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 100000), 0);
	for (uint32_t r = 0; r < 2; r++) {
		assert_int_equal(rc[r], KEEL_EVIEWCHANGED);
		assert_true(got[r] != root_bytes);
	}
	/* Run again from a live root: it works on the new view. */
	got[0] = root_bytes;
	got[1] = 0;
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(
		    keel_broadcast_start(c.node[r], 0, &got[r], sizeof(got[r]), &ops[r]), 0);
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 100000), 0);
	assert_int_equal(rc[0], 0);
	assert_int_equal(rc[1], 0);
	assert_true(got[1] == root_bytes);
	cluster_fini(&c);
}

static void dump(struct cluster *c)
{
	for (uint32_t r = 0; r < c->world; r++) {
		uint64_t mask;
		struct keel_view v = view_of(c, r, &mask);
		struct keel_counters k;
		keel_counters_get(c->node[r], &k);
		print_error("node %u: epoch %u members %#llx member %d noquorum-entries %llu "
			    "proposals %llu views %llu suspicions %llu\n",
			    r, v.epoch, (unsigned long long)mask, v.self_member,
			    (unsigned long long)k.noquorum_entries,
			    (unsigned long long)k.view_proposals,
			    (unsigned long long)k.view_changes, (unsigned long long)k.suspicions);
	}
}

/* When a majority of the view restarts before the others could exclude their old lives, the
 * votes of that view are gone: the survivors stop with KEEL_ENOQUORUM instead of deciding a
 * view alone (safety before liveness; an operator or a checkpoint restart resolves it). */
static void test_membership_majority_restart_stops(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak_views), 0);
	warm(&c);
	for (uint32_t r = 1; r < 3; r++) {
		struct keel_config cfg = c.cfg[r];
		cfg.incarnation = 2;
		cfg.rejoin = true;
		assert_int_equal(
		    keel_init(&c.node[r], c.mem_node[r], keel_storage_size(&cfg), &cfg, c.now_ns),
		    0);
	}
	for (int i = 0; i < 2000; i++)
		cluster_round(&c);
	uint64_t dl, mask;
	assert_int_equal(keel_poll(c.node[0], c.now_ns, &dl), KEEL_ENOQUORUM);
	struct keel_view v = view_of(&c, 0, &mask);
	assert_int_equal(v.epoch, 1);
	assert_false(v.self_member);
	assert_false(g_views.conflict);
	cluster_fini(&c);
}

/* Seeded random schedules: loss, duplication, reordering and delay under the membership
 * messages, ranks that pause (a false suspicion, then a rejoin) or restart. Whatever happens,
 * no epoch gets two member sets, and once the faults stop everyone converges. */
static void test_membership_random_schedules_keep_one_view_per_epoch(void **state)
{
	(void)state;
	/* SEED=n replays schedule n alone; RUNS=k explores k schedules from SEED (40 by default) */
	const char *env_runs = getenv("RUNS");
	uint32_t runs = env_runs != NULL	 ? (uint32_t)strtoul(env_runs, NULL, 10)
			: getenv("SEED") != NULL ? 1
						 : 40;
	for (uint32_t run = 0; run < runs; run++) {
		uint64_t seed = g_seed + run;
		setup(NULL);
		uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
		struct cluster c;
		uint32_t world = 3 + (uint32_t)(seed % 2);
		assert_int_equal(cluster_init(&c, world,
					      "loss=0.05,dup=0.02,reorder=0.05,delay_us=300", seed,
					      tweak_views),
				 0);
		warm(&c);
		for (int event = 0; event < 6; event++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			uint32_t r = (uint32_t)(x % world);
			uint32_t kind = (uint32_t)((x >> 8) % 3);
			if (kind == 0) { /* pause (a long stall: suspected, then back) */
				c.paused[r] = true;
				for (uint32_t i = 0; i < (uint32_t)((x >> 16) % 80); i++)
					cluster_round(&c);
				c.paused[r] = false;
			} else if (kind == 1) {
				/* Restart as a new incarnation — one at a time: a restarted rank's
				 * old life took its votes with it, and when a majority of a view
				 * loses its votes at once the cluster stops rather than risk two
				 * views (see test_membership_majority_restart_stops). */
				if (!converge(&c, (1ull << world) - 1, 200000) && (dump(&c), true))
					fail_msg("SEED=%llu: no convergence before a restart",
						 (unsigned long long)seed);
				struct keel_config cfg = c.cfg[r];
				cfg.incarnation = c.cfg[r].incarnation + 1 + (uint32_t)event;
				cfg.rejoin = true;
				c.cfg[r].incarnation = cfg.incarnation;
				assert_int_equal(keel_init(&c.node[r], c.mem_node[r],
							   keel_storage_size(&cfg), &cfg, c.now_ns),
						 0);
				/* and it is back before anything else happens */
				if (!converge(&c, (1ull << world) - 1, 200000) && (dump(&c), true))
					fail_msg("SEED=%llu: restarted rank not admitted",
						 (unsigned long long)seed);
			}
			for (uint32_t i = 0; i < (uint32_t)((x >> 24) % 60); i++)
				cluster_round(&c);
		}
		uint64_t all = (1ull << world) - 1;
		if (!converge(&c, all, 200000)) {
			dump(&c);
			fail_msg("SEED=%llu: no convergence", (unsigned long long)seed);
		}
		if (g_views.conflict)
			fail_msg("SEED=%llu: two views for one epoch", (unsigned long long)seed);
		cluster_fini(&c);
	}
}

/* ---- a COMMIT's proof ---- */

/* What a COMMIT's value says of a result it carries (a collective some members reported
 * early): the frontier, and with `flag` the length field `stated` and `bytes` bytes after it
 * (`field` false: the value ends before the length field). */
struct carried {
	uint32_t frontier;
	bool flag, field;
	uint32_t stated, bytes;
};

/* A COMMIT to node 0 of a 3-rank job, sent from `src`'s own socket (the transport knows it as
 * that rank): deciding ballot, acceptor bits, a value of epoch `epoch` with `members`, and
 * what `res` says of a result (NULL: none). */
static void send_commit_carrying(struct cluster *c, uint32_t src, uint32_t epoch, uint64_t ballot,
				 uint8_t acceptors, uint8_t members, const struct carried *res)
{
	uint8_t buf[2048] = {0};
	uint8_t *p = buf + WIRE_HEADER_SIZE;
	p[0] = 5; /* VM_COMMIT */
	wire_put32(p + 4, epoch);
	wire_put64(p + 8, ballot);
	p[16] = acceptors;
	uint8_t *v = p + 17;
	uint32_t count = 0;
	wire_put32(v, epoch);
	wire_put32(v + 12, 0); /* donor: rank 0 */
	for (uint32_t r = 0; r < 3; r++) {
		if ((members & (1u << r)) == 0)
			continue;
		wire_put16(v + 24 + 6 * count, (uint16_t)r);
		wire_put32(v + 24 + 6 * count + 2, 1); /* incarnation */
		count++;
	}
	wire_put32(v + 20, count);
	uint32_t len = 17 + 24 + 6 * count;
	if (res != NULL) {
		wire_put32(v + 16, res->frontier);
		wire_put32(v + 4, res->flag ? 1u : 0u); /* VIEW_RESULT */
		if (res->field) {
			wire_put32(buf + WIRE_HEADER_SIZE + len, res->stated);
			memset(buf + WIRE_HEADER_SIZE + len + 4, 0x5a, res->bytes);
			len += 4 + res->bytes;
		}
	}
	struct wire_header h = {.magic = WIRE_MAGIC,
				.version = WIRE_VERSION,
				.type = WIRE_VIEW,
				.job_id = 42,
				.epoch = 1,
				.src = (uint16_t)src,
				.dst = 0,
				.payload_len = len};
	wire_encode(buf, &h);
	struct sockaddr_storage a0;
	socklen_t l0 = sizeof(a0);
	assert_int_equal(keel_udp_local_addr(c->udp[0], &a0, &l0), 0);
	int fd = c->udp[src]->ops->wait_fd(c->udp[src]);
	size_t total = WIRE_HEADER_SIZE + len;
	assert_int_equal(sendto(fd, buf, total, 0, (struct sockaddr *)&a0, l0), (ssize_t)total);
	uint64_t dl;
	assert_int_equal(keel_poll(c->node[0], c->now_ns, &dl), 0);
}

static void send_commit_to_0(struct cluster *c, uint32_t src, uint32_t epoch, uint64_t ballot,
			     uint8_t acceptors, uint8_t members)
{
	send_commit_carrying(c, src, epoch, ballot, acceptors, members, NULL);
}

static uint32_t epoch_of_0(const struct cluster *c)
{
	struct keel_view v;
	assert_int_equal(keel_view_get(c->node[0], &v, NULL, 0), 0);
	return v.epoch;
}

/* Without a key nothing stops a forger who knows the protocol (the last case); what the proof
 * rules do stop is a COMMIT inconsistent with what the receiver knows: no ballot (the forged
 * COMMIT of the attack that installed {0} everywhere), no acceptors, acceptors outside the
 * view, a sender that neither coordinated nor belongs, an acceptance the receiver never gave. */
static void test_membership_commit_needs_its_proof(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, NULL), 0);
	uint64_t ballot_1 = (1ull << 16) | 1; /* round 1 of coordinator 1 */
	struct {
		uint32_t src, epoch;
		uint64_t ballot;
		uint8_t acceptors, members;
	} refused[] = {
	    {1, 2, 0, 0x6, 0x1},	  /* no ballot */
	    {1, 101, 0, 0x6, 0x1},	  /* no ballot, far ahead */
	    {1, 2, ballot_1, 0x0, 0x3},	  /* nobody accepted */
	    {1, 2, ballot_1, 0x8, 0x3},	  /* an acceptor beyond the world */
	    {2, 2, ballot_1, 0x6, 0x3},	  /* 2 neither coordinated ballot_1 nor is in {0,1} */
	    {1, 2, ballot_1, 0x3, 0x3},	  /* claims node 0 accepted: it never did */
	    {1, 101, ballot_1, 0x0, 0x1}, /* far ahead, nobody accepted */
	};
	struct keel_counters k;
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		keel_counters_get(c.node[0], &k);
		uint64_t before = k.drop_view;
		send_commit_to_0(&c, refused[i].src, refused[i].epoch, refused[i].ballot,
				 refused[i].acceptors, refused[i].members);
		keel_counters_get(c.node[0], &k);
		assert_int_equal(k.drop_view, before + 1);
		assert_int_equal(epoch_of_0(&c), 1);
	}
	/* consistent with everything node 0 knows: installed (only a key stops this one) */
	send_commit_to_0(&c, 1, 2, ballot_1, 0x6, 0x7);
	assert_int_equal(epoch_of_0(&c), 2);
	cluster_fini(&c);
}

/* A value that says it carries a result must carry one that fits: flagged without its length,
 * of length 0, longer than any a view carries (KEEL_EAGER_RESULT_MAX), longer than the bytes
 * that follow, or for no collective (frontier 0). Each is dropped (drop_view) and nothing is
 * installed; a well-formed one is installed (node 0 runs nothing, so it adopts nothing). */
static void test_membership_commit_result_checked(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, NULL), 0);
	uint64_t ballot_1 = (1ull << 16) | 1;
	const struct carried refused[] = {
	    {.frontier = 1, .flag = true, .field = false},
	    {.frontier = 1, .flag = true, .field = true, .stated = 0, .bytes = 0},
	    {.frontier = 1, .flag = true, .field = true, .stated = 1032, .bytes = 1032},
	    {.frontier = 1, .flag = true, .field = true, .stated = 8, .bytes = 4},
	    {.frontier = 0, .flag = true, .field = true, .stated = 8, .bytes = 8},
	};
	struct keel_counters k;
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		keel_counters_get(c.node[0], &k);
		uint64_t before = k.drop_view;
		send_commit_carrying(&c, 1, 2, ballot_1, 0x6, 0x7, &refused[i]);
		keel_counters_get(c.node[0], &k);
		assert_int_equal(k.drop_view, before + 1);
		assert_int_equal(epoch_of_0(&c), 1);
	}
	const struct carried good = {
	    .frontier = 1, .flag = true, .field = true, .stated = 8, .bytes = 8};
	send_commit_carrying(&c, 1, 2, ballot_1, 0x6, 0x7, &good);
	assert_int_equal(epoch_of_0(&c), 2);
	keel_counters_get(c.node[0], &k);
	assert_int_equal(k.ops_adopted, 0);
	cluster_fini(&c);
}

int main(void)
{
	g_seed = cluster_seed(1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_membership_killed_rank_is_excluded_by_all, setup),
	    cmocka_unit_test_setup(test_membership_ring_monitoring_beyond_all_to_all_limit, setup),
	    cmocka_unit_test_setup(test_membership_split_minority_stops_then_rejoins, setup),
	    cmocka_unit_test_setup(test_membership_coordinator_dies_mid_change, setup),
	    cmocka_unit_test_setup(test_membership_restarted_rank_rejoins, setup),
	    cmocka_unit_test_setup(test_membership_joiner_told_members_left, setup),
	    cmocka_unit_test_setup(test_membership_paused_rank_excluded_then_readmitted, setup),
	    cmocka_unit_test_setup(test_membership_paused_coordinator_excluded_then_readmitted,
				   setup),
	    cmocka_unit_test_setup(test_membership_excluded_between_collectives_told_at_next_start,
				   setup),
	    cmocka_unit_test_setup(test_membership_paused_rank_told_the_others_left, setup),
	    cmocka_unit_test_setup(test_membership_broadcast_brings_state, setup),
	    cmocka_unit_test_setup(test_membership_broadcast_root_dies, setup),
	    cmocka_unit_test_setup(test_membership_majority_restart_stops, setup),
	    cmocka_unit_test_setup(test_membership_random_schedules_keep_one_view_per_epoch, setup),
	    cmocka_unit_test_setup(test_membership_commit_needs_its_proof, setup),
	    cmocka_unit_test_setup(test_membership_commit_result_checked, setup),
	};
	return cmocka_run_group_tests_name("membership", tests, NULL, NULL);
}
