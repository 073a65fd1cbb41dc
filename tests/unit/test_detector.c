/* The failure detector with an injected clock: probes exactly after miss_limit intervals and
 * the silence margin, suspicion exactly after the last unanswered probe, none while any
 * message flows or a probe is answered, none on a lossy link, and none for the silence a
 * node's own pause caused. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster_int.h"

#define HB 1000000ull /* 1 ms */

static uint64_t g_seed;

static enum keel_peer_state state_of(struct cluster *c, uint32_t node, uint32_t peer)
{
	struct keel_peer_info pi;
	assert_int_equal(keel_peer_get(c->node[node], peer, &pi), 0);
	return pi.state;
}

/* In a 2-node world a suspected peer leaves no majority: keel_poll says KEEL_ENOQUORUM. */
static void poll_one(struct cluster *c, uint32_t r, uint64_t now)
{
	uint64_t dl;
	int rc = keel_poll(c->node[r], now, &dl);
	assert_true(rc == 0 || rc == KEEL_ENOQUORUM);
}

/* Node 1 beats once at t0 (its first beat: rank 1 of 2 beats half an interval after start)
 * and then stops. Node 0 hears it at t0; with no round trip measured yet the silence margin
 * is a quarter interval, so it probes node 1 at t0 + 3.25 intervals, again at 3.5 and 3.75,
 * and suspects it at t0 + 4 intervals — not one nanosecond earlier; the deadlines keel_poll
 * returns say when. */
static void test_detector_suspects_exactly_after_miss_limit(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, NULL), 0);
	uint64_t t0 = c.now_ns + HB / 2 + 100;
	poll_one(&c, 1, t0); /* node 1 sends its heartbeat */
	uint64_t dl;
	assert_int_equal(keel_poll(c.node[0], t0, &dl), 0); /* node 0 hears it at t0 */
	assert_true(dl <= t0 + HB);
	for (uint64_t t = t0 + HB / 2; t < t0 + 3 * HB; t += HB / 2) {
		poll_one(&c, 0, t);
		assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_ALIVE);
	}
	uint64_t probe_at = t0 + 3 * HB + HB / 4;
	assert_int_equal(keel_poll(c.node[0], probe_at - 1, &dl), 0);
	assert_int_equal(dl, probe_at); /* the caller is told to come back exactly then */
	struct keel_counters k;
	for (uint32_t i = 0; i < KEEL_PROBES_DEFAULT; i++) {
		assert_int_equal(keel_poll(c.node[0], probe_at + i * (HB / 4), &dl), 0);
		assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_ALIVE);
		assert_true(dl <= probe_at + (i + 1) * (HB / 4)); /* or its own next beat */
		keel_counters_get(c.node[0], &k);
		assert_int_equal(k.probes_sent, i + 1);
	}
	assert_int_equal(keel_poll(c.node[0], t0 + 4 * HB - 1, &dl), 0);
	assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_ALIVE);
	poll_one(&c, 0, t0 + 4 * HB);
	assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_SUSPECTED);
	assert_false(keel_peer_is_alive(c.node[0], 1));
	keel_counters_get(c.node[0], &k);
	assert_int_equal(k.suspicions, 1);
	assert_int_equal(k.false_suspicions, 0);
	assert_int_equal(k.probes_refuted, 0);
	/* It speaks again in the same incarnation: alive, and counted as a false suspicion. */
	poll_one(&c, 1, t0 + 4 * HB + 10);
	uint64_t t1 = t0 + 4 * HB + 20;
	poll_one(&c, 0, t1);
	assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_ALIVE);
	keel_counters_get(c.node[0], &k);
	assert_int_equal(k.false_suspicions, 1);
	/* Then silent for good: watched again from t1 (the walk over watched peers is not left
	 * to a deadline found while it was suspected), so suspected again after the same
	 * silence, probes and all. */
	uint64_t again = 0;
	for (uint64_t t = t1 + HB / 8; t <= t1 + 6 * HB && again == 0; t += HB / 8) {
		poll_one(&c, 0, t);
		if (state_of(&c, 0, 1) == KEEL_PEER_SUSPECTED)
			again = t;
	}
	assert_true(again >= t1 + 3 * HB && again <= t1 + 5 * HB);
	keel_counters_get(c.node[0], &k);
	assert_int_equal(k.suspicions, 2);
	assert_int_equal(k.probes_sent, 2 * KEEL_PROBES_DEFAULT);
	cluster_fini(&c);
}

static void test_detector_no_suspicion_while_beating(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 4, NULL, g_seed, NULL), 0);
	c.step_ns = HB / 4;
	for (int i = 0; i < 20000; i++) /* 5 s of manual time */
		cluster_round(&c);
	for (uint32_t r = 0; r < 4; r++) {
		struct keel_counters k;
		keel_counters_get(c.node[r], &k);
		assert_int_equal(k.suspicions, 0);
		assert_true(k.heartbeats_received >= 3 * 4900);
		for (uint32_t p = 0; p < 4; p++) {
			struct keel_peer_info pi;
			assert_int_equal(keel_peer_get(c.node[r], p, &pi), 0);
			if (p != r) /* heartbeat echoes measured the round trip */
				assert_true(pi.rtt_samples > 1000);
		}
	}
	cluster_fini(&c);
}

static void quiet_one(struct keel_config *cfg)
{
	if (cfg->rank == 1)
		cfg->heartbeat_ns = 3600000000000ull; /* node 1 beats once, at start, then never */
	cfg->algo = KEEL_ALGO_RING;
}

/* A peer whose own beats stop reaching us (here: it beats once an hour) but which is alive
 * answers the first probe: no suspicion, the refutation is counted, and it repeats every
 * time its silence runs out again. */
static void test_detector_probe_answered_is_no_suspicion(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, quiet_one), 0);
	c.step_ns = HB / 20;
	for (int i = 0; i < 20 * 40; i++) /* 40 intervals */
		cluster_round(&c);
	struct keel_counters k;
	keel_counters_get(c.node[0], &k);
	assert_int_equal(k.suspicions, 0);
	assert_true(k.probes_refuted >= 8); /* about one per 3.3 intervals of silence */
	assert_int_equal(k.probes_sent, k.probes_refuted); /* each answered at the first */
	assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_ALIVE);
	cluster_fini(&c);
}

static uint32_t g_probes;
static void lossy(struct keel_config *cfg)
{
	cfg->probes = g_probes;
}

/* A lossy link alone must not exclude anyone: 4 nodes, 5 % loss each way, 20 000 intervals.
 * Three beats in a row are lost about once in 8 000 intervals on each of the 12 links, so
 * without probes the detector suspects live peers (the control run proves this test can
 * fail); with the default probes, a suspicion needs every probe round trip lost too. */
static uint64_t lossy_run(uint32_t probes)
{
	struct cluster c;
	g_probes = probes;
	assert_int_equal(cluster_init(&c, 4, "loss=0.05", g_seed, lossy), 0);
	c.step_ns = HB / 4;
	for (int i = 0; i < 4 * 20000; i++)
		cluster_round(&c);
	uint64_t suspicions = 0;
	for (uint32_t r = 0; r < 4; r++) {
		struct keel_counters k;
		keel_counters_get(c.node[r], &k);
		suspicions += k.suspicions;
	}
	cluster_fini(&c);
	return suspicions;
}

static void test_detector_lossy_link_alone_excludes_nobody(void **state)
{
	(void)state;
	uint64_t without = lossy_run(0), with = lossy_run(KEEL_PROBES_DEFAULT);
	printf("detector: 5 %% loss, 20 000 intervals, 4 nodes: %" PRIu64
	       " suspicions without probes, %" PRIu64 " with %u\n",
	       without, with, KEEL_PROBES_DEFAULT);
	assert_true(without > 0);
	assert_int_equal(with, 0);
}

/* Any message counts: node 1 never heartbeats after start, but its AllReduce traffic keeps it
 * alive at node 0; once the traffic stops, node 0 suspects it within the limit. */
static void test_detector_any_message_counts(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, quiet_one), 0);
	c.step_ns = HB / 10;
	static float buf[2][4096];
	for (int iter = 0; iter < 400; iter++) { /* back-to-back ops for >= 5 intervals */
		struct keel_op *ops[CLUSTER_MAX] = {NULL};
		int rc[CLUSTER_MAX];
		for (uint32_t r = 0; r < 2; r++)
			assert_int_equal(keel_allreduce_start(c.node[r], buf[r], buf[r], 4096,
							      KEEL_F32, KEEL_SUM, &ops[r]),
					 0);
		assert_int_equal(cluster_wait_ops(&c, ops, rc, 10000), 0);
		assert_int_equal(rc[0], 0);
	}
	assert_true(c.now_ns - 1000000000ull > 5 * HB);
	assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_ALIVE);
	/* Traffic stopped: node 1's last word is a delayed ack (<= ack_delay_ns after the last
	 * data), then silence; probed after 3 intervals and the margin. It answers the probe
	 * (it is alive, only quiet), so node 0 suspects nothing. */
	for (int i = 0; i < 45; i++)
		cluster_round(&c);
	struct keel_counters k;
	keel_counters_get(c.node[0], &k);
	assert_int_equal(k.probes_refuted, 1);
	assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_ALIVE);
	c.paused[1] = true; /* now it really stops: suspected within 4.75 intervals */
	for (int i = 0; i < 48 && state_of(&c, 0, 1) == KEEL_PEER_ALIVE; i++)
		cluster_round(&c);
	assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_SUSPECTED);
	cluster_fini(&c);
}

/* Node 0 and node 1 both stop for 20 intervals (a whole host paused). When node 0 resumes,
 * it does not blame node 1 for silence it was not listening to; it re-listens first. */
static void test_detector_own_pause_is_not_blamed_on_peers(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, NULL), 0);
	c.step_ns = HB / 4;
	for (int i = 0; i < 40; i++)
		cluster_round(&c);
	c.now_ns += 20 * HB; /* nobody polled: both were paused */
	for (int i = 0; i < 40; i++)
		cluster_round(&c);
	for (uint32_t r = 0; r < 2; r++) {
		struct keel_counters k;
		keel_counters_get(c.node[r], &k);
		assert_int_equal(k.suspicions, 0);
		assert_int_equal(k.local_pauses, 1);
	}
	/* A peer that really died during the pause is still found, within the limit after
	 * the node resumed listening. */
	c.paused[1] = true;
	uint64_t t_dead = c.now_ns;
	c.now_ns += 20 * HB;
	while (state_of(&c, 0, 1) == KEEL_PEER_ALIVE && c.now_ns < t_dead + 100 * HB)
		cluster_round(&c);
	assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_SUSPECTED);
	/* (miss_limit + 1) intervals at most with the margin, then 3 probes a quarter apart */
	assert_true(c.now_ns <= t_dead + 20 * HB + 4 * HB + 3 * (HB / 4) + c.step_ns);
	cluster_fini(&c);
}

static void default_grace(struct keel_config *cfg)
{
	cfg->join_timeout_ns = KEEL_JOIN_TIMEOUT_NS_DEFAULT;
}

/* Start-up grace: a peer heard once and then silent (or never heard) is not probed within
 * join_timeout_ns of init; it is probed exactly when the grace ends, and suspected when its
 * probes go unanswered. */
static void test_detector_startup_grace(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, default_grace), 0);
	uint64_t t0 = c.now_ns, join = KEEL_JOIN_TIMEOUT_NS_DEFAULT, dl;
	poll_one(&c, 1, t0); /* node 1 speaks once; node 2 never does */
	for (uint64_t t = t0; t < t0 + join; t += HB / 2)
		poll_one(&c, 0, t);
	assert_int_equal(keel_poll(c.node[0], t0 + join - 1, &dl), 0);
	assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_ALIVE);
	assert_int_equal(state_of(&c, 0, 2), KEEL_PEER_ALIVE);
	assert_int_equal(dl, t0 + join);
	poll_one(&c, 0, t0 + join);
	struct keel_counters k;
	keel_counters_get(c.node[0], &k);
	assert_int_equal(k.probes_sent, 2);
	assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_ALIVE);
	for (uint64_t q = 1; q < 3; q++) {
		poll_one(&c, 0, t0 + join + q * (HB / 4));
		assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_ALIVE);
	}
	poll_one(&c, 0, t0 + join + 3 * (HB / 4));
	assert_int_equal(state_of(&c, 0, 1), KEEL_PEER_SUSPECTED);
	assert_int_equal(state_of(&c, 0, 2), KEEL_PEER_SUSPECTED);
	cluster_fini(&c);
}

/* A clean exit (keel_leave) is not a failure: the peer is DEAD at once, nobody counts a
 * suspicion, and only an operation the leaver did not finish fails. */
static void test_detector_leave_is_not_a_suspicion(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, NULL), 0);
	float buf[3][100] = {{0}};
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < 3; r++)
		assert_int_equal(keel_allreduce_start(c.node[r], buf[r], buf[r], 100, KEEL_F32,
						      KEEL_SUM, &ops[r]),
				 0);
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 10000), 0);
	/* idle once acks have settled and the others said they finished it too (a result
	 * reported early is not yet one they have) */
	int settle = 0;
	while (!keel_is_idle(c.node[2]) && settle++ < 1000)
		cluster_round(&c);
	print_message("idle after %d rounds\n", settle);
	assert_true(keel_is_idle(c.node[2]));
	assert_int_equal(keel_leave(c.node[2], c.now_ns), 0);
	c.paused[2] = true;
	cluster_round(&c);
	assert_int_equal(state_of(&c, 0, 2), KEEL_PEER_DEAD);
	assert_int_equal(state_of(&c, 1, 2), KEEL_PEER_DEAD);
	for (int i = 0; i < 1000; i++) /* 10 ms: well past the 3 ms limit */
		cluster_round(&c);
	struct keel_counters k;
	keel_counters_get(c.node[0], &k);
	assert_int_equal(k.suspicions, 0);
	assert_int_equal(k.view_changes, 1);
	/* the survivors went on in a view without it */
	struct keel_view v;
	uint32_t members[3];
	assert_int_equal(keel_view_get(c.node[1], &v, members, 3), 2);
	assert_int_equal(v.epoch, 2);
	assert_int_equal(members[0], 0);
	assert_int_equal(members[1], 1);
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(keel_allreduce_start(c.node[r], buf[r], buf[r], 100, KEEL_F32,
						      KEEL_SUM, &ops[r]),
				 0);
	ops[2] = NULL;
	assert_int_equal(cluster_wait_ops(&c, ops, rc, 10000), 0);
	assert_int_equal(rc[0], 0);
	assert_int_equal(rc[1], 0);
	cluster_fini(&c);
}

static void test_detector_peer_queries_reject_bad_rank(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, NULL), 0);
	struct keel_peer_info pi;
	assert_int_equal(keel_peer_get(c.node[0], 2, &pi), -EINVAL);
	assert_int_equal(keel_peer_get(c.node[0], 0, &pi), 0);
	assert_int_equal(pi.state, KEEL_PEER_SELF);
	assert_false(keel_peer_is_alive(c.node[0], 7));
	cluster_fini(&c);
}

int main(void)
{
	g_seed = cluster_seed(1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_detector_suspects_exactly_after_miss_limit),
	    cmocka_unit_test(test_detector_no_suspicion_while_beating),
	    cmocka_unit_test(test_detector_any_message_counts),
	    cmocka_unit_test(test_detector_probe_answered_is_no_suspicion),
	    cmocka_unit_test(test_detector_lossy_link_alone_excludes_nobody),
	    cmocka_unit_test(test_detector_own_pause_is_not_blamed_on_peers),
	    cmocka_unit_test(test_detector_startup_grace),
	    cmocka_unit_test(test_detector_leave_is_not_a_suspicion),
	    cmocka_unit_test(test_detector_peer_queries_reject_bad_rank),
	};
	return cmocka_run_group_tests_name("detector", tests, NULL, NULL);
}
