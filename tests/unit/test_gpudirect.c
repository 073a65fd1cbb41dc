/* GPUDirect RDMA of a device AllReduce's input: keel nodes over the verbs backend on the fake
 * device (tests/support/verbs_fake.c), each with a CPU stand-in device whose memory faults
 * when the host touches it (guarded_mem.h). The input is registered as a dma-buf, so its
 * datagrams go with the NIC reading it (the fake reads it through the memfd, as an importer
 * does) and nothing stages it: the stage's input half stays as it was. Also: the staged path
 * when nothing is registered, in place, or with a key; and a registration that goes
 * mid-operation (the device copies the unsent payloads to the host and they go whole). */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>

#include <cmocka.h>

#include "guarded_mem.h"
#include "keel/device_cpu.h"
#include "keel/keel.h"
#include "keel/transport_verbs.h"
#include "refcheck.h"
#include "verbs_fake.h"

#define WORLD_MAX 4u
#define SLOT	  4096u
#define ROUNDS	  200000u

struct rank {
	struct keel_transport *t;
	void *t_mem;
	struct keel_device dev;
	void *dev_mem;
	struct keel_node *node;
	void *node_mem;
	struct guarded_mem mem;	 /* d_in, then d_out */
	struct guarded_mem area; /* the device area peers write payloads into (area.fd >= 0) */
	bool area_on;
	uint8_t *d_in, *d_out, *d_in_w, *d_out_w;
	uint8_t *stage;
	size_t stage_bytes, bytes;
	struct keel_op *op;
	int status;
	bool registered;
	bool dead; /* never polled again: its NIC and device keep work it will never reap */
};

struct job {
	uint32_t world;
	uint64_t now_ns;
	bool keyed;
	enum keel_algo algo;
	const uint32_t *host_of; /* NULL: a host per rank */
	struct rank r[WORLD_MAX];
};

/* Per job (job_down resets them): what each rank's device says to nic_writes_visible, and an
 * operation bound short enough for a test that expects an error (0: keel's default). */
static int g_nic_rc[WORLD_MAX];
static uint64_t g_op_timeout_ns;

static void transports_up(struct job *j)
{
	verbs_fake_reset();
	fake.dmabuf = true;
	for (uint32_t r = 0; r < j->world; r++) {
		struct keel_verbs_config c;
		keel_verbs_config_default(&c);
		c.rank = r;
		c.world_size = j->world;
		c.slot_bytes = SLOT;
		c.slot_count = 16;
		c.send_max_bytes = 1024;
		c.inline_bytes = 64;
		size_t sz = keel_verbs_storage_size(&c);
		assert_true(sz > 0);
		j->r[r].t_mem = calloc(1, sz);
		assert_int_equal(keel_verbs_init(&j->r[r].t, j->r[r].t_mem, sz, &c), 0);
	}
	for (uint32_t r = 0; r < j->world; r++)
		for (uint32_t p = 0; p < j->world; p++) {
			if (p == r)
				continue;
			struct keel_verbs_addr a;
			keel_verbs_local_addr(j->r[p].t, &a);
			assert_int_equal(keel_verbs_connect(j->r[r].t, p, &a,
							    keel_verbs_local_qpn(j->r[p].t, r)),
					 0);
		}
}

static void nodes_up(struct job *j)
{
	for (uint32_t r = 0; r < j->world; r++) {
		struct rank *k = &j->r[r];
		struct keel_device_cpu_config dc;
		keel_device_cpu_config_default(&dc);
		dc.seed = 7 + r;
		dc.nic_writes_rc = g_nic_rc[r];
		size_t dsz = keel_device_cpu_storage_size(&dc);
		k->dev_mem = calloc(1, dsz);
		assert_int_equal(keel_device_cpu_init(&k->dev, k->dev_mem, dsz, &dc), 0);
		struct keel_config cfg;
		keel_config_default(&cfg);
		cfg.rank = r;
		cfg.world_size = j->world;
		cfg.job_id = 42;
		cfg.transport = k->t;
		cfg.heartbeat_ns = 1000000;
		cfg.join_timeout_ns = 1;
		cfg.device = &k->dev;
		cfg.device_chunk_bytes = 16384;
		cfg.algo = j->algo;
		cfg.host_of = j->host_of;
		if (g_op_timeout_ns != 0) {
			cfg.op_timeout_ns = g_op_timeout_ns;
			cfg.entry_timeout_ns = g_op_timeout_ns;
			cfg.soft_retries = 1;
		}
		if (j->keyed) {
			cfg.auth = true;
			memset(cfg.auth_key, 0x5a, sizeof(cfg.auth_key));
		}
		size_t sz = keel_storage_size(&cfg);
		assert_true(sz > 0);
		k->node_mem = calloc(1, sz);
		assert_int_equal(keel_init(&k->node, k->node_mem, sz, &cfg, j->now_ns), 0);
	}
}

/* Device buffers of `count` elements (in place: one), registered as one dma-buf when
 * `dmabuf`, and a stage whose input half holds 0xee: whatever stages the input overwrites it. */
static void buffers_up(struct job *j, size_t count, enum keel_dtype dt, enum keel_redop op,
		       bool in_place, bool dmabuf)
{
	for (uint32_t r = 0; r < j->world; r++) {
		struct rank *k = &j->r[r];
		k->bytes = count * keel_dtype_size(dt);
		size_t span = (k->bytes + 4095) & ~(size_t)4095;
		assert_int_equal(guarded_mem_map(&k->mem, &k->dev, in_place ? span : 2 * span), 0);
		k->d_in = k->mem.view;
		k->d_in_w = k->mem.work;
		k->d_out = in_place ? k->d_in : k->d_in + span;
		k->d_out_w = in_place ? k->d_in_w : k->d_in_w + span;
		keel_check_fill(k->d_in_w, 0, count, r, dt, op);
		k->stage_bytes = keel_allreduce_device_stage_bytes(count, dt);
		k->stage = malloc(k->stage_bytes);
		memset(k->stage, 0xee, k->stage_bytes);
		assert_int_equal(k->dev.ops->host_register(k->dev.state, k->stage, k->stage_bytes),
				 0);
		k->registered = dmabuf;
		if (dmabuf) /* the memfd is the dma-buf; the view's offset 0 is its offset 0 */
			assert_int_equal(keel_verbs_register_dmabuf(k->t, k->mem.view, k->mem.bytes,
								    k->mem.fd, 0),
					 0);
	}
}

/* Each rank's device area, where the NIC writes what peers send from device memory: the
 * announcements reach every peer at once (the fake NIC runs each WR as it is posted). */
static void areas_up(struct job *j)
{
	for (uint32_t r = 0; r < j->world; r++) {
		struct rank *k = &j->r[r];
		size_t bytes = keel_verbs_device_area_bytes(k->t);
		assert_int_equal(bytes, (size_t)j->world * 16 * SLOT);
		assert_int_equal(guarded_mem_map(&k->area, &k->dev, bytes), 0);
		assert_int_equal(keel_verbs_register_device_area(k->t, k->area.view, k->area.bytes,
								 k->area.fd, 0),
				 0);
		k->area_on = true;
	}
}

static void start_all(struct job *j, size_t count, enum keel_dtype dt, enum keel_redop op)
{
	for (uint32_t r = 0; r < j->world; r++) {
		struct rank *k = &j->r[r];
		k->status = -EINPROGRESS;
		assert_int_equal(keel_allreduce_device_start(k->node, k->d_in, k->d_out, count, dt,
							     op, k->stage, k->stage_bytes, &k->op),
				 0);
	}
}

/* One round: every rank polls once, then tests its operation. A rank whose operation was
 * handed back writes its input at once, as a training step would: a datagram that still read
 * it would carry those bytes to a peer still running. */
static bool round_all(struct job *j)
{
	bool all = true;
	j->now_ns += 10000;
	for (uint32_t r = 0; r < j->world; r++) {
		struct rank *k = &j->r[r];
		uint64_t dl;
		assert_int_equal(keel_poll(k->node, j->now_ns, &dl), 0);
		if (k->status == -EINPROGRESS) {
			k->status = keel_op_test(k->node, k->op);
			if (k->status == 0 && k->d_in != k->d_out)
				memset(k->d_in_w, 0xff, k->bytes);
		}
		all = all && k->status != -EINPROGRESS;
	}
	return all;
}

static void run_to_end(struct job *j)
{
	uint32_t n = 0;
	while (!round_all(j))
		assert_true(++n < ROUNDS);
	for (uint32_t r = 0; r < j->world; r++)
		assert_int_equal(j->r[r].status, 0);
}

static void check_results(struct job *j, size_t count, enum keel_dtype dt, enum keel_redop op)
{
	uint8_t *ref = malloc(count * keel_dtype_size(dt) + 1);
	keel_check_reference(ref, 0, count, j->world, dt, op);
	for (uint32_t r = 0; r < j->world; r++)
		assert_int_equal(keel_check_wrong(j->r[r].d_out_w, ref, 0, count, dt), 0);
	free(ref);
}

/* Does the stage's input half still hold what buffers_up wrote (nothing staged it)? */
static bool input_unstaged(const struct rank *k)
{
	for (size_t i = 0; i < k->bytes; i++)
		if (k->stage[i] != 0xee)
			return false;
	return true;
}

static void job_down(struct job *j)
{
	for (uint32_t r = 0; r < j->world; r++) {
		struct rank *k = &j->r[r];
		keel_fini(k->node);
		if (k->dead) /* fini lets its registration go; its device is dropped whole */
			k->registered = false;
		if (k->dead)
			k->mem.dev = NULL;
		if (k->registered)
			assert_int_equal(keel_verbs_unregister(k->t, k->mem.view), 0);
		if (!k->dead)
			assert_int_equal(k->dev.ops->host_unregister(k->dev.state, k->stage), 0);
		assert_int_equal(guarded_mem_unmap(&k->mem), 0);
		free(k->stage);
		free(k->node_mem);
		k->t->ops->fini(k->t); /* lets the device area go */
		if (k->area_on && k->dead)
			k->area.dev = NULL;
		if (k->area_on)
			assert_int_equal(guarded_mem_unmap(&k->area), 0);
		free(k->t_mem);
		k->dev.ops->fini(k->dev.state);
		free(k->dev_mem);
	}
	fake.dmabuf = false;
	memset(g_nic_rc, 0, sizeof(g_nic_rc));
	g_op_timeout_ns = 0;
}

static void job_up_hosts(struct job *j, uint32_t world, bool keyed, enum keel_algo algo,
			 const uint32_t *host_of)
{
	memset(j, 0, sizeof(*j));
	j->world = world;
	j->keyed = keyed;
	j->algo = algo;
	j->host_of = host_of;
	j->now_ns = 1000000000ull;
	transports_up(j);
	nodes_up(j);
}

static void job_up_algo(struct job *j, uint32_t world, bool keyed, enum keel_algo algo)
{
	job_up_hosts(j, world, keyed, algo, NULL);
}

static void job_up(struct job *j, uint32_t world, bool keyed)
{
	job_up_algo(j, world, keyed, KEEL_ALGO_AUTO);
}

/* A whole operation: the job, its buffers, the AllReduce run to its end, results checked. */
static void job_run(struct job *j, uint32_t world, enum keel_algo algo, size_t count,
		    enum keel_dtype dt, enum keel_redop op, bool in_place, bool dmabuf)
{
	job_up_algo(j, world, false, algo);
	buffers_up(j, count, dt, op, in_place, dmabuf);
	start_all(j, count, dt, op);
	run_to_end(j);
	check_results(j, count, dt, op);
}

/* Every rank's input leaves from device memory, read by the NIC: no byte of it is staged,
 * every such datagram went zero copy, and the results are exact. 2 and 3 ranks (recursive
 * doubling and the ring, AUTO by size), several dtypes and sizes around fragment edges. */
static void test_gpudirect_input_not_staged(void **state)
{
	(void)state;
	static const struct {
		uint32_t world;
		size_t count;
		enum keel_dtype dt;
		enum keel_redop op;
	} cases[] = {
	    {2, 1, KEEL_F32, KEEL_SUM},
	    {2, 1010, KEEL_I32, KEEL_MAX},
	    {3, 3 * 1010 + 1, KEEL_F32, KEEL_SUM},
	    {3, 96 * 1024, KEEL_BF16, KEEL_AVG},
	    {4, 200000, KEEL_F64, KEEL_MIN},
	    {2, 300000, KEEL_U8, KEEL_SUM},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct job j;
		job_run(&j, cases[c].world, KEEL_ALGO_AUTO, cases[c].count, cases[c].dt,
			cases[c].op, false, true);
		uint64_t direct = 0;
		for (uint32_t r = 0; r < j.world; r++) {
			struct keel_counters ctr;
			struct keel_verbs_stats vs;
			keel_counters_get(j.r[r].node, &ctr);
			keel_verbs_stats_get(j.r[r].t, &vs);
			direct +=
			    ctr.device_direct_frags; /* a rank with no input to send sends none */
			assert_int_equal(ctr.device_copy_ins, 0);
			/* each went as a WR gathering from the registration, nothing else did */
			assert_int_equal(vs.tx_zero_copy, ctr.device_direct_frags);
			assert_int_equal(vs.tx_device_refused, 0);
			assert_true(input_unstaged(&j.r[r]));
		}
		assert_true(direct > 0);
		assert_true(fake.gathers > 0);
		job_down(&j);
	}
}

/* A ring sends its sums from device memory too: out of place every datagram of the
 * operation is read by the NIC, in place all but the input's (staged: a restart needs it).
 * The partial sums the all-gather writes again are written only once acknowledged. */
static void test_gpudirect_ring_sums_from_device(void **state)
{
	(void)state;
	const size_t count = 4 * 40000 + 3;
	for (int in_place = 0; in_place < 2; in_place++) {
		struct job j;
		job_run(&j, 4, KEEL_ALGO_RING, count, KEEL_F32, KEEL_SUM, in_place, true);
		for (uint32_t r = 0; r < j.world; r++) {
			struct keel_counters ctr;
			struct keel_verbs_stats vs;
			keel_counters_get(j.r[r].node, &ctr);
			keel_verbs_stats_get(j.r[r].t, &vs);
			assert_int_equal(vs.tx_zero_copy, ctr.device_direct_frags);
			if (in_place) {
				assert_true(ctr.device_direct_frags > 0);
				assert_true(ctr.device_direct_frags < ctr.data_sent);
				assert_false(input_unstaged(&j.r[r]));
			} else {
				assert_int_equal(ctr.device_direct_frags, ctr.data_sent);
				assert_true(input_unstaged(&j.r[r]));
			}
		}
		job_down(&j);
	}
}

/* The hierarchy (two hosts of two ranks) sends its input from device memory too, and
 * forwards its sums from the stage; three operations in turn on the same buffers each end
 * exact with none of their inputs staged. */
static void test_gpudirect_hierarchy_in_turn(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 1, 1};
	const size_t count = 4 * 9000 + 5;
	struct job j;
	job_up_hosts(&j, 4, false, KEEL_ALGO_HIER, hosts);
	buffers_up(&j, count, KEEL_I32, KEEL_SUM, false, true);
	for (int k = 0; k < 3; k++) { /* the same buffers, three times over */
		for (uint32_t r = 0; r < j.world; r++) {
			keel_check_fill(j.r[r].d_in_w, 0, count, r, KEEL_I32, KEEL_SUM);
			memset(j.r[r].stage, 0xee, j.r[r].stage_bytes);
		}
		start_all(&j, count, KEEL_I32, KEEL_SUM);
		run_to_end(&j);
		check_results(&j, count, KEEL_I32, KEEL_SUM);
		for (uint32_t r = 0; r < j.world; r++)
			assert_true(input_unstaged(&j.r[r]));
	}
	uint64_t direct = 0;
	for (uint32_t r = 0; r < j.world; r++) {
		struct keel_counters ctr;
		keel_counters_get(j.r[r].node, &ctr);
		direct += ctr.device_direct_frags;
		assert_true(ctr.device_direct_frags < ctr.data_sent); /* sums: from the stage */
	}
	assert_true(direct > 0);
	job_down(&j);
}

/* A rank dies mid-operation (it stops polling, as a killed process would), with device areas
 * (what peers send lands in device memory) or without: the others restart on the view
 * without it, and the restart writes the output and its mirror again
 * only once nothing reads them. The result is exact over the members it reports. */
static void test_gpudirect_rank_dies_mid_op(void **state)
{
	(void)state;
	const size_t count = 3 * 64 * 1024;
	for (uint32_t victim = 0; victim < 3; victim++) {
		struct job j;
		job_up_algo(&j, 3, false, KEEL_ALGO_RING);
		buffers_up(&j, count, KEEL_F32, KEEL_SUM, false, true);
		if (victim != 1)
			areas_up(&j); /* what peers send lands in device memory too */
		start_all(&j, count, KEEL_F32, KEEL_SUM);
		for (uint32_t i = 0; i < 3 + victim; i++)
			(void)round_all(&j);
		j.r[victim].dead = true;
		uint32_t n = 0;
		bool all = false;
		while (!all) {
			assert_true(++n < ROUNDS);
			j.now_ns += 10000;
			all = true;
			for (uint32_t r = 0; r < j.world; r++) {
				struct rank *k = &j.r[r];
				uint64_t dl;
				if (r == victim)
					continue; /* dead: never polled again */
				assert_int_equal(keel_poll(k->node, j.now_ns, &dl), 0);
				if (k->status == -EINPROGRESS) {
					struct keel_op_info info;
					uint32_t members[3];
					k->status =
					    keel_op_test_info(k->node, k->op, &info, members, 3);
					if (k->status == 0) {
						assert_int_equal(info.member_count, 2);
						assert_true(info.restarts > 0);
						uint8_t *ref = malloc(k->bytes);
						keel_check_reference_members(ref, 0, count, members,
									     2, KEEL_F32, KEEL_SUM);
						assert_int_equal(keel_check_wrong(k->d_out_w, ref,
										  0, count,
										  KEEL_F32),
								 0);
						free(ref);
					}
				}
				all = all && k->status != -EINPROGRESS;
			}
		}
		for (uint32_t r = 0; r < j.world; r++)
			assert_int_equal(j.r[r].status, r == victim ? -EINPROGRESS : 0);
		struct keel_counters ctr;
		keel_counters_get(j.r[(victim + 1) % 3].node, &ctr);
		assert_true(ctr.device_direct_frags > 0);
		job_down(&j);
	}
}

/* Staged without GPUDirect, out of place, a ring stages only the chunk it sends from its
 * input (the kernels read the rest in device memory): one world-th of the input per rank,
 * where all of it was staged before. */
static void test_gpudirect_staged_ring_stages_its_chunk_only(void **state)
{
	(void)state;
	const size_t count = 3 * 20000;
	struct job j;
	job_run(&j, 3, KEEL_ALGO_RING, count, KEEL_F32, KEEL_SUM, false, false);
	for (uint32_t r = 0; r < j.world; r++) {
		const struct rank *k = &j.r[r];
		size_t lo = k->bytes, hi = 0;
		for (size_t i = 0; i < k->bytes; i++)
			if (k->stage[i] != 0xee) {
				lo = i < lo ? i : lo;
				hi = i + 1;
			}
		assert_true(hi > lo);			    /* it staged its chunk */
		assert_true(hi - lo <= k->bytes / j.world); /* and nothing else */
	}
	job_down(&j);
}

/* Where the NIC cannot read the input, it is staged as before (out of place, what is sent of
 * it): nothing registered, in place (all of it: a restart needs the staged copy), or a job
 * with a key (the CPU MACs every byte). */
static void test_gpudirect_staged_when_not_possible(void **state)
{
	(void)state;
	static const struct {
		bool dmabuf, in_place, keyed;
	} cases[] = {{false, false, false}, {true, true, false}, {true, false, true}};
	const size_t count = 3 * 5000 + 7;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct job j;
		job_up(&j, 3, cases[c].keyed);
		buffers_up(&j, count, KEEL_F32, KEEL_SUM, cases[c].in_place, cases[c].dmabuf);
		start_all(&j, count, KEEL_F32, KEEL_SUM);
		run_to_end(&j);
		check_results(&j, count, KEEL_F32, KEEL_SUM);
		uint32_t staged = 0; /* out of place a rank stages only what it sends */
		for (uint32_t r = 0; r < j.world; r++) {
			struct keel_counters ctr;
			keel_counters_get(j.r[r].node, &ctr);
			assert_int_equal(ctr.device_direct_frags, 0);
			staged += !input_unstaged(&j.r[r]);
		}
		assert_true(cases[c].in_place ? staged == j.world : staged > 0);
		job_down(&j);
	}
}

/* The registration goes while rank 0's payloads wait for credits: the device copies each
 * to the host (its home in the stage) and it goes whole, with its CRC. Exact results, and
 * the operation is handed back only once nothing reads its input any more. */
static void test_gpudirect_registration_lost_mid_op(void **state)
{
	(void)state;
	const size_t count = 3 * 64 * 1024; /* 256 KiB a chunk: far more than 16 credits */
	struct job j;
	job_up(&j, 3, false);
	buffers_up(&j, count, KEEL_F32, KEEL_SUM, false, true);
	start_all(&j, count, KEEL_F32, KEEL_SUM);
	uint64_t dl;
	j.now_ns += 10000;
	assert_int_equal(keel_poll(j.r[0].node, j.now_ns, &dl), 0);
	struct keel_counters ctr;
	struct keel_verbs_stats vs;
	keel_counters_get(j.r[0].node, &ctr);
	keel_verbs_stats_get(j.r[0].t, &vs);
	assert_true(ctr.device_direct_frags > vs.tx_zero_copy); /* some wait for credits */
	assert_int_equal(keel_verbs_unregister(j.r[0].t, j.r[0].mem.view), 0);
	j.r[0].registered = false;
	run_to_end(&j);
	check_results(&j, count, KEEL_F32, KEEL_SUM);
	keel_counters_get(j.r[0].node, &ctr);
	assert_true(ctr.device_copy_ins > 0);
	keel_verbs_stats_get(j.r[0].t, &vs);
	assert_int_equal(vs.tx_zero_copy + ctr.device_copy_ins, ctr.device_direct_frags);
	job_down(&j);
}

/* Poll every rank until each has given back every payload the NIC wrote into its device
 * area (the last device work pops at the polls after the operation ended). */
static void areas_settle(struct job *j)
{
	for (uint32_t n = 0; n < 1000; n++) {
		bool held = false;
		for (uint32_t r = 0; r < j->world; r++) {
			struct keel_verbs_stats vs;
			keel_verbs_stats_get(j->r[r].t, &vs);
			held = held || vs.rx_device != vs.rx_released;
		}
		if (!held)
			return;
		(void)round_all(j);
	}
	fail_msg("a payload in a device area was never given back");
}

/* Payloads sent from device memory land in the receiver's device memory too (GPUDirect RDMA
 * both ways): the kernels read them where the NIC wrote them, and each is given back once
 * its device work is done. Exact results for the ring out of place (nothing on the host but
 * headers), recursive doubling and the hierarchy (sums forwarded from the mirror, written by
 * the kernels that read the received chunks in device memory), and a ring where rank 0
 * registered its input alone: its sums go from the stage, and the all-gather's copies it
 * receives in device memory go to its mirror first. In place, the next step's data comes
 * early and must wait: the NIC still reads the sums in device memory but lands them in host
 * memory, where the window holds them, and nothing is sent again (in a device area 44 of one
 * rank's 89 were). */
static void test_gpudirect_received_into_device(void **state)
{
	(void)state;
	static const uint32_t hosts[] = {0, 0, 1, 1};
	static const struct {
		uint32_t world;
		enum keel_algo algo;
		size_t count;
		enum keel_dtype dt;
		enum keel_redop op;
		bool in_place, input_only_at_0;
	} cases[] = {
	    {3, KEEL_ALGO_RING, 3 * 20000 + 1, KEEL_F32, KEEL_SUM, false, false},
	    {4, KEEL_ALGO_RING, 4 * 9000, KEEL_I32, KEEL_MAX, true, false},
	    {2, KEEL_ALGO_RD, 50000, KEEL_BF16, KEEL_AVG, false, false},
	    {4, KEEL_ALGO_RD, 30001, KEEL_F64, KEEL_MIN, false, false},
	    {4, KEEL_ALGO_HIER, 4 * 7000 + 3, KEEL_I32, KEEL_SUM, false, false},
	    {3, KEEL_ALGO_RING, 3 * 20000, KEEL_U8, KEEL_SUM, false, true},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct job j;
		job_up_hosts(&j, cases[c].world, false, cases[c].algo,
			     cases[c].algo == KEEL_ALGO_HIER ? hosts : NULL);
		buffers_up(&j, cases[c].count, cases[c].dt, cases[c].op, cases[c].in_place, true);
		if (cases[c].input_only_at_0) {
			struct rank *k = &j.r[0];
			assert_int_equal(keel_verbs_unregister(k->t, k->mem.view), 0);
			assert_int_equal(keel_verbs_register_dmabuf(k->t, k->d_in,
								    (size_t)(k->d_out - k->d_in),
								    k->mem.fd, 0),
					 0);
		}
		areas_up(&j);
		start_all(&j, cases[c].count, cases[c].dt, cases[c].op);
		run_to_end(&j);
		check_results(&j, cases[c].count, cases[c].dt, cases[c].op);
		areas_settle(&j);
		uint64_t used = 0;
		for (uint32_t r = 0; r < j.world; r++) {
			struct keel_counters ctr;
			struct keel_verbs_stats vs;
			keel_counters_get(j.r[r].node, &ctr);
			keel_verbs_stats_get(j.r[r].t, &vs);
			/* what the device used came from the area; the rest was dropped for later
			 */
			assert_true(ctr.device_rx_frags <= vs.rx_device);
			assert_int_equal(vs.rx_bad_release, 0);
			/* a flush before the device read any of them: one per burst that held
			 * some, so at least one and never more than the payloads */
			struct keel_device_cpu_stats ds;
			keel_device_cpu_stats(&j.r[r].dev, &ds);
			assert_int_equal(ds.nic_flushes, ctr.device_nic_flushes);
			assert_true(vs.rx_device == 0 || ctr.device_nic_flushes >= 1);
			assert_true(ctr.device_nic_flushes <= vs.rx_device);
			used += ctr.device_rx_frags;
			if (cases[c].algo == KEEL_ALGO_RING && !cases[c].in_place &&
			    !cases[c].input_only_at_0) /* every payload: sent and received direct */
				assert_int_equal(vs.tx_device_writes, ctr.device_direct_frags);
			if (cases[c].in_place) {
				/* the NIC read the sums in device memory and wrote them into host
				 * memory, where an early one waits in the window: none sent again
				 */
				assert_true(ctr.device_direct_frags > 0);
				assert_int_equal(vs.tx_device_writes, 0);
				assert_int_equal(vs.rx_device, 0);
				assert_int_equal(ctr.drop_device_later, 0);
				assert_int_equal(ctr.retransmits, 0);
			}
		}
		assert_true(cases[c].in_place || used > 0);
		assert_true(cases[c].in_place || fake.device_writes > 0);
		if (cases[c].input_only_at_0)
			j.r[0].registered = true; /* its input's registration: let go by job_down */
		job_down(&j);
	}
}

/* A rank whose device area received a payload sent from device memory while it runs an
 * AllReduce on host buffers: the sender runs a device AllReduce there, another collective;
 * KEEL_EMISMATCH says so (the CPU never reads the payload). */
static void test_gpudirect_device_payload_to_host_op(void **state)
{
	(void)state;
	const size_t count = 2 * 20000;
	struct job j;
	job_up_algo(&j, 2, false, KEEL_ALGO_RING);
	buffers_up(&j, count, KEEL_F32, KEEL_SUM, false, true);
	areas_up(&j);
	float *host_in = calloc(count, sizeof(float)), *host_out = calloc(count, sizeof(float));
	struct rank *k0 = &j.r[0], *k1 = &j.r[1];
	assert_int_equal(
	    keel_allreduce_start(k0->node, host_in, host_out, count, KEEL_F32, KEEL_SUM, &k0->op),
	    0);
	assert_int_equal(keel_allreduce_device_start(k1->node, k1->d_in, k1->d_out, count, KEEL_F32,
						     KEEL_SUM, k1->stage, k1->stage_bytes, &k1->op),
			 0);
	k0->status = k1->status = -EINPROGRESS;
	for (uint32_t n = 0; k0->status == -EINPROGRESS; n++) {
		assert_true(n < ROUNDS);
		j.now_ns += 10000;
		uint64_t dl;
		assert_int_equal(keel_poll(k0->node, j.now_ns, &dl), 0);
		assert_int_equal(keel_poll(k1->node, j.now_ns, &dl), 0);
		k0->status = keel_op_test(k0->node, k0->op);
	}
	assert_int_equal(k0->status, KEEL_EMISMATCH);
	struct keel_verbs_stats vs;
	keel_verbs_stats_get(k0->t, &vs);
	assert_true(vs.rx_device > 0);
	k1->dead = true; /* its operation never ends: dropped with its device */
	job_down(&j);
	free(host_in);
	free(host_out);
}

/* Rank 1's device fails to make the NIC's writes visible (nic_writes_visible: -EIO): the
 * payload it was for goes back unread and unacknowledged, rank 1's call ends with
 * KEEL_EDEVICE, its peer's with an error within the operation's bound. Nothing hangs: the
 * peer, in a new epoch by then, sends device payloads rank 1 takes for a later operation and
 * can neither hold nor acknowledge; its failed call has the device copy them to the host
 * (keel_op_test would otherwise wait for their acknowledgements forever). No slot stays
 * held. */
static void test_gpudirect_nic_flush_fails(void **state)
{
	(void)state;
	const size_t count = 2 * 20000;
	g_nic_rc[1] = -EIO;
	g_op_timeout_ns = 20000000;
	struct job j;
	job_up_algo(&j, 2, false, KEEL_ALGO_RING);
	buffers_up(&j, count, KEEL_F32, KEEL_SUM, false, true);
	areas_up(&j);
	start_all(&j, count, KEEL_F32, KEEL_SUM);
	for (uint32_t n = 0; !round_all(&j); n++)
		assert_true(n < ROUNDS);
	assert_int_equal(j.r[1].status, KEEL_EDEVICE);
	assert_true(j.r[0].status != 0);
	struct keel_counters ctr;
	keel_counters_get(j.r[1].node, &ctr);
	assert_int_equal(ctr.device_rx_frags, 0); /* the device never read one */
	assert_true(ctr.device_nic_flushes >= 1 && ctr.drop_device_later >= 1);
	struct keel_device_cpu_stats ds;
	keel_device_cpu_stats(&j.r[1].dev, &ds);
	assert_int_equal(ds.nic_flushes, ctr.device_nic_flushes);
	/* rank 0's failed call had its unacknowledged device payloads copied to the host */
	keel_counters_get(j.r[0].node, &ctr);
	assert_true(ctr.device_copy_ins > 0);
	areas_settle(&j);
	job_down(&j);
}

/* A device that can neither order nor flush a NIC's writes gets no device area
 * (keel_boot_register_device_area asks keel_device_takes_nic_writes); one that flushes, or
 * fails only now, may have one. */
static void test_gpudirect_device_takes_nic_writes(void **state)
{
	(void)state;
	static const int rcs[] = {0, -EOPNOTSUPP, -EIO};
	assert_false(keel_device_takes_nic_writes(NULL));
	for (size_t i = 0; i < sizeof(rcs) / sizeof(rcs[0]); i++) {
		struct keel_device_cpu_config dc;
		keel_device_cpu_config_default(&dc);
		dc.nic_writes_rc = rcs[i];
		size_t sz = keel_device_cpu_storage_size(&dc);
		void *mem = calloc(1, sz);
		struct keel_device dev;
		assert_int_equal(keel_device_cpu_init(&dev, mem, sz, &dc), 0);
		assert_int_equal(keel_device_takes_nic_writes(&dev), rcs[i] != -EOPNOTSUPP);
		dev.ops->fini(dev.state);
		free(mem);
	}
	struct keel_device_cpu_config bad;
	keel_device_cpu_config_default(&bad);
	bad.nic_writes_rc = -EINVAL; /* not one a device gives: refused by name */
	assert_int_equal(keel_device_cpu_storage_size(&bad), 0);
}

/* keel_verbs_register_device_area's errors, each named: too short, no fd, misaligned, not a
 * verbs transport, twice, and a provider without dma-bufs. */
static void test_gpudirect_device_area_errors(void **state)
{
	(void)state;
	struct job j;
	job_up(&j, 2, false);
	struct rank *k = &j.r[0];
	size_t bytes = keel_verbs_device_area_bytes(k->t);
	assert_int_equal(guarded_mem_map(&k->area, &k->dev, bytes), 0);
	k->area_on = true;
	void *a = k->area.view;
	assert_int_equal(keel_verbs_register_device_area(k->t, a, bytes - 1, k->area.fd, 0),
			 -EINVAL);
	assert_int_equal(keel_verbs_register_device_area(k->t, a, bytes, -1, 0), -EINVAL);
	assert_int_equal(keel_verbs_register_device_area(k->t, NULL, bytes, k->area.fd, 0),
			 -EINVAL);
	assert_int_equal(
	    keel_verbs_register_device_area(k->t, (uint8_t *)a + 8, bytes, k->area.fd, 0), -EINVAL);
	assert_int_equal(keel_verbs_register_device_area(NULL, a, bytes, k->area.fd, 0), -EINVAL);
	fake.dmabuf = false;
	assert_int_equal(keel_verbs_register_device_area(k->t, a, bytes, k->area.fd, 0),
			 -EOPNOTSUPP);
	fake.dmabuf = true;
	assert_int_equal(keel_verbs_register_device_area(k->t, a, bytes, k->area.fd, 0), 0);
	assert_int_equal(keel_verbs_register_device_area(k->t, a, bytes, k->area.fd, 0), -EEXIST);
	/* a payload it never handed out: counted, nothing freed */
	k->t->ops->rx_release(k->t, 1, a);
	struct keel_verbs_stats vs;
	keel_verbs_stats_get(k->t, &vs);
	assert_int_equal(vs.rx_bad_release, 1);
	for (uint32_t r = 0; r < j.world; r++) { /* job_down's buffers */
		assert_int_equal(guarded_mem_map(&j.r[r].mem, &j.r[r].dev, 4096), 0);
		j.r[r].stage = malloc(64);
		assert_int_equal(j.r[r].dev.ops->host_register(j.r[r].dev.state, j.r[r].stage, 64),
				 0);
	}
	job_down(&j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gpudirect_input_not_staged),
	    cmocka_unit_test(test_gpudirect_ring_sums_from_device),
	    cmocka_unit_test(test_gpudirect_hierarchy_in_turn),
	    cmocka_unit_test(test_gpudirect_rank_dies_mid_op),
	    cmocka_unit_test(test_gpudirect_staged_when_not_possible),
	    cmocka_unit_test(test_gpudirect_staged_ring_stages_its_chunk_only),
	    cmocka_unit_test(test_gpudirect_registration_lost_mid_op),
	    cmocka_unit_test(test_gpudirect_received_into_device),
	    cmocka_unit_test(test_gpudirect_device_payload_to_host_op),
	    cmocka_unit_test(test_gpudirect_device_area_errors),
	    cmocka_unit_test(test_gpudirect_nic_flush_fails),
	    cmocka_unit_test(test_gpudirect_device_takes_nic_writes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
