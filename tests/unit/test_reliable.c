/* The reliable layer over the chaos transport: with 0 %, 1 % and 10 % loss, plus duplication,
 * reordering and delay, every datagram is delivered to the collectives exactly once and in
 * order, and the results stay bit-exact. Seeded: SEED=n replays a run. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster_int.h"
#include "refcheck.h"

static uint64_t g_seed;

static void small_mtu_ring(struct keel_config *cfg)
{
	cfg->mtu = 1024; /* many fragments per message */
	cfg->window = 16;
	cfg->algo = KEEL_ALGO_RING;
	cfg->miss_limit = 1000; /* heavy loss: this test is about delivery, not detection */
}

static void run_ops(struct cluster *c, uint32_t ops, size_t count)
{
	static float in[CLUSTER_MAX][40000], out[CLUSTER_MAX][40000], ref[40000];
	assert_true(count <= 40000);
	keel_check_reference(ref, 0, count, c->world, KEEL_F32, KEEL_SUM);
	for (uint32_t k = 0; k < ops; k++) {
		struct keel_op *h[CLUSTER_MAX] = {NULL};
		int rc[CLUSTER_MAX];
		for (uint32_t r = 0; r < c->world; r++) {
			keel_check_fill(in[r], 0, count, r, KEEL_F32, KEEL_SUM);
			assert_int_equal(keel_allreduce_start(c->node[r], in[r], out[r], count,
							      KEEL_F32, KEEL_SUM, &h[r]),
					 0);
		}
		assert_int_equal(cluster_wait_ops(c, h, rc, 5000000), 0);
		for (uint32_t r = 0; r < c->world; r++) {
			assert_int_equal(rc[r], 0);
			assert_int_equal(keel_check_wrong(out[r], ref, 0, count, KEEL_F32), 0);
		}
	}
}

/* After the operations, keep polling until every node's window is empty, then compare what
 * was sent with what was delivered. */
static void check_exactly_once(struct cluster *c, uint64_t sent_min, bool expect_repairs)
{
	for (int i = 0; i < 200000; i++) {
		bool idle = true;
		for (uint32_t r = 0; r < c->world; r++)
			idle = idle && keel_is_idle(c->node[r]);
		if (idle)
			break;
		cluster_round(c);
	}
	uint64_t sent = 0, delivered = 0, retransmits = 0, dups = 0;
	for (uint32_t r = 0; r < c->world; r++) {
		assert_true(keel_is_idle(c->node[r]));
		struct keel_counters k;
		keel_counters_get(c->node[r], &k);
		sent += k.data_sent;
		delivered += k.data_delivered;
		retransmits += k.retransmits;
		dups += k.drop_duplicate;
		assert_int_equal(k.drop_protocol,
				 0); /* every fragment came at its place in order */
		assert_int_equal(k.drop_crc, 0);
	}
	print_message("datagrams sent %llu, delivered %llu, retransmitted %llu, duplicates "
		      "dropped %llu\n",
		      (unsigned long long)sent, (unsigned long long)delivered,
		      (unsigned long long)retransmits, (unsigned long long)dups);
	assert_true(sent >= sent_min);
	assert_int_equal(delivered, sent); /* exactly once: none lost, none twice */
	if (expect_repairs) {
		assert_true(retransmits > 0);
		assert_true(dups > 0);
	}
}

static void loss_run(const char *spec, bool expect_repairs)
{
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, spec, g_seed, small_mtu_ring), 0);
	run_ops(&c, 6, 30011);
	check_exactly_once(&c, 3000, expect_repairs);
	cluster_fini(&c);
}

static void test_reliable_no_loss_with_dup_and_reorder(void **state)
{
	(void)state;
	loss_run("loss=0,dup=0.02,reorder=0.02,delay_us=20", false);
}

static void test_reliable_1pct_loss(void **state)
{
	(void)state;
	loss_run("loss=0.01,dup=0.01,reorder=0.02,delay_us=20", true);
}

/* Also: the holes were reported. Fast retransmits follow selective acks only, so an ack
 * built without its sack bits (rel_ack_fields) would leave every repair to the timer. */
static void test_reliable_10pct_loss(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, "loss=0.1,dup=0.02,reorder=0.05,delay_us=50", g_seed,
				      small_mtu_ring),
			 0);
	run_ops(&c, 6, 30011);
	check_exactly_once(&c, 3000, true);
	uint64_t fast = 0;
	for (uint32_t r = 0; r < c.world; r++) {
		struct keel_counters k;
		keel_counters_get(c.node[r], &k);
		fast += k.fast_retransmits;
	}
	assert_true(fast > 0);
	cluster_fini(&c);
}

/* A receiver that stops polling fills its sender's window; the sender holds at most a window
 * and resumes when the receiver does. Nothing is lost or delivered twice. */
static void test_reliable_window_bounds_a_stalled_receiver(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, small_mtu_ring), 0);
	static float buf[2][30000];
	struct keel_op *h[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(keel_allreduce_start(c.node[r], buf[r], buf[r], 30000, KEEL_F32,
						      KEEL_SUM, &h[r]),
				 0);
	c.paused[1] = true;
	for (int i = 0; i < 2000; i++)
		cluster_round(&c);
	struct keel_counters k;
	keel_counters_get(c.node[0], &k);
	assert_true(k.data_sent <= 16); /* one window, no more */
	c.paused[1] = false;
	assert_int_equal(cluster_wait_ops(&c, h, rc, 1000000), 0);
	assert_int_equal(rc[0], 0);
	assert_int_equal(rc[1], 0);
	check_exactly_once(&c, 200, true); /* the stalled window timed out and was resent */
	cluster_fini(&c);
}

int main(void)
{
	g_seed = cluster_seed(1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reliable_no_loss_with_dup_and_reorder),
	    cmocka_unit_test(test_reliable_1pct_loss),
	    cmocka_unit_test(test_reliable_10pct_loss),
	    cmocka_unit_test(test_reliable_window_bounds_a_stalled_receiver),
	};
	return cmocka_run_group_tests_name("reliable", tests, NULL, NULL);
}
