/* Groups and their operations (keel/group.h) in one process: 2..5 nodes on loopback UDP and
 * on shared memory, a manual clock. Every operation x dtype x reduction x in/out of place x
 * sizes at the fragment edges, over the whole job and over split groups running at once,
 * results checked bit for bit (tests/support/cluster_group.h); group creation (world, split,
 * from_ranks) and rank mapping; every documented error. Failures: test_group_fail.c. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster_group.h"
#include "cluster_int.h"
#include "keel/device_cpu.h"

#define ROUNDS_MAX 2000000u /* 20 s of the manual clock: an operation that ends at all ends */

static uint64_t g_seed;
static uint32_t g_mtu = 1024;
static uint32_t g_ops_max = KEEL_OPS_DEFAULT;
static uint64_t g_entry_timeout_ns; /* 0: the default */
static bool g_waiter;  /* nodes built with the nested driver's waiter (blocking calls) */
static bool g_devices; /* nodes built with a CPU stand-in device each (g_dev) */
static struct keel_device g_dev[CLUSTER_MAX];
static void *g_dev_mem[CLUSTER_MAX];

/* ---- blocking calls in one thread ----
 * Each rank's blocking call waits with its waiter; the first wait of a rank's call starts the
 * next rank's call inside it, and the innermost waits poll every node and advance the clock.
 * So every rank is inside its blocking call at once, as in a job, and each returns once its
 * own operation ended (its caller's after it). */
struct nest {
	int (*call)(struct nest *nt, uint32_t r);
	void *arg;
	uint32_t order[CLUSTER_MAX], count, next;
	int rc[CLUSTER_MAX];
	uint64_t rounds, rounds_max;
};
static struct cluster *g_cl;
static struct nest *g_nest;

static uint64_t drive_now(void *ctx)
{
	(void)ctx;
	return g_cl->now_ns;
}

static void drive_wait(void *ctx, uint64_t deadline_ns)
{
	(void)ctx;
	(void)deadline_ns;
	struct nest *nt = g_nest;
	if (nt != NULL && nt->next < nt->count) {
		uint32_t q = nt->order[nt->next++];
		nt->rc[q] = nt->call(nt, q);
		return;
	}
	if (nt != NULL && ++nt->rounds > nt->rounds_max)
		fail_msg("a blocking call did not return within %" PRIu64 " rounds",
			 nt->rounds_max);
	cluster_round(g_cl);
}

/* Run nt->call at ranks order[0..count), each inside the previous one's wait. */
static void nest_run(struct cluster *c, struct nest *nt)
{
	g_cl = c;
	g_nest = nt;
	nt->next = 0;
	nt->rounds = 0;
	if (nt->rounds_max == 0)
		nt->rounds_max = ROUNDS_MAX;
	while (nt->next < nt->count) { /* a call that returned without waiting */
		uint32_t q = nt->order[nt->next++];
		nt->rc[q] = nt->call(nt, q);
	}
	g_nest = NULL;
}

static void nest_all(struct nest *nt, uint32_t world)
{
	nt->count = world;
	for (uint32_t r = 0; r < world; r++)
		nt->order[r] = r;
}

static void tweak(struct keel_config *cfg)
{
	cfg->mtu = g_mtu;
	cfg->op_timeout_ns = 5000000000ull;
	cfg->ops_max = g_ops_max;
	if (g_entry_timeout_ns != 0)
		cfg->entry_timeout_ns = g_entry_timeout_ns;
	if (g_devices) {
		cfg->device = &g_dev[cfg->rank];
		cfg->device_chunk_bytes = KEEL_DEVICE_CHUNK_MIN; /* many copies per operation */
	}
	if (g_waiter) {
		cfg->waiter.now_ns = drive_now;
		cfg->waiter.wait = drive_wait;
		cfg->waiter.ctx = &g_cl;
	}
}

/* Split parent[r] at every rank that has one, by color[r] and key[r]; waits and checks 0. */
static void groups_split(struct cluster *c, struct keel_group *const *parent, const uint32_t *color,
			 const uint32_t *key, struct groups *out)
{
	struct keel_req *reqs[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	memset(out, 0, sizeof(*out));
	for (uint32_t r = 0; r < c->world; r++) {
		if (parent[r] == NULL)
			continue;
		out->mem[r] = group_mem(c, r, &out->len);
		assert_int_equal(keel_group_split_start(parent[r], color[r], key[r], out->mem[r],
							out->len, &out->g[r], &reqs[r]),
				 0);
	}
	assert_int_equal(cluster_wait_reqs(c, reqs, rc, ROUNDS_MAX), 0);
	for (uint32_t r = 0; r < c->world; r++) {
		if (parent[r] == NULL)
			continue;
		if (rc[r] != 0)
			fail_msg("split at rank %u: %d (%s)", r, rc[r], keel_strerror(rc[r]));
		assert_true((out->g[r] == NULL) == (color[r] == KEEL_COLOR_NONE));
	}
}

static void groups_free(struct cluster *c, struct groups *gs)
{
	for (uint32_t r = 0; r < c->world; r++) {
		if (gs->g[r] != NULL)
			assert_int_equal(keel_group_free(gs->g[r]), 0);
		free(gs->mem[r]);
	}
	memset(gs, 0, sizeof(*gs));
}

/* Every member of each group sees the same id and the members `want` (job ranks, group
 * order); returns the id. */
static uint64_t check_group(struct keel_group *const *g, const uint32_t *want, uint32_t n,
			    uint32_t epoch)
{
	uint64_t id = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct keel_group_info info;
		uint32_t ranks[CLUSTER_MAX];
		struct keel_group *gi = g[want[i]];
		assert_non_null(gi);
		assert_int_equal(keel_group_info(gi, &info, ranks, CLUSTER_MAX), (int)n);
		assert_int_equal(info.size, n);
		assert_int_equal(info.rank, i);
		assert_int_equal(info.created_size, n);
		assert_true(info.self_member);
		assert_int_equal(info.epoch, epoch);
		if (!grun_same_members(ranks, want, n)) {
			print_error("member %u of the group sees ranks:", want[i]);
			for (uint32_t k = 0; k < n; k++)
				print_error(" %u (want %u)", ranks[k], want[k]);
			fail_msg("group membership differs");
		}
		for (uint32_t k = 0; k < n; k++)
			assert_int_equal(keel_group_rank_to_job(gi, k), want[k]);
		assert_int_equal(keel_group_rank_to_job(gi, n), UINT32_MAX);
		assert_int_equal(keel_group_rank_to_job(gi, UINT32_MAX), UINT32_MAX);
		if (i == 0)
			id = info.id;
		assert_true(info.id == id);
	}
	return id;
}

static uint32_t view_epoch(struct cluster *c, uint32_t r)
{
	struct keel_view v;
	uint32_t members[CLUSTER_MAX];
	assert_true(keel_view_get(c->node[r], &v, members, CLUSTER_MAX) > 0);
	return v.epoch;
}

/* ---- the matrix ---- */

static uint64_t g_salt = 1;
static uint64_t g_runs;

/* One run of `s` at every rank with a group; fails the test, after printing, if any member's
 * result is wrong. */
static void run_spec(struct cluster *c, struct keel_group *const *groups, struct gop_spec *s)
{
	s->salt = g_seed * 1000003u + g_salt++;
	uint32_t bad = grun_run(c, groups, s, ROUNDS_MAX);
	g_runs++;
	if (bad != 0)
		fail_msg("%u member(s) wrong: %s over %u ranks (SEED=%" PRIu64 ")", bad,
			 gop_names[s->op], c->world, g_seed);
}

/* `op` at every dtype (every reduction for the reductions), every size of keel_check_sizes
 * for a group of `n` (fragments of mtu - 56 bytes, as the collectives' data datagrams carry),
 * in place and out of place where group.h allows both; roots vary with the size, and members
 * other than the root pass NULL every other size. */
static void every_case(struct cluster *c, struct keel_group *const *groups, uint32_t n, enum gop op,
		       size_t large)
{
	for (int dt = 0; dt < KEEL_DTYPE_COUNT; dt++) {
		size_t sizes[KEEL_CHECK_SIZES];
		keel_check_sizes(sizes, n, (g_mtu - 56) / keel_dtype_size(dt), large);
		int redops = gop_is_reduction(op) ? KEEL_REDOP_COUNT : 1;
		for (int redop = 0; redop < redops; redop++)
			for (uint32_t k = 0; k < KEEL_CHECK_SIZES; k++) {
				struct gop_spec s = {.op = op,
						     .dt = dt,
						     .redop = redop,
						     .count = sizes[k],
						     .root = k * 7 + (uint32_t)dt,
						     .null_others = k % 2 == 1};
				/* reductions alternate, as test_allreduce.c does; the others
				 * run both ways at every size */
				if (!gop_has_in_place(op)) {
					run_spec(c, groups, &s);
				} else if (gop_is_reduction(op)) {
					s.in_place = (k + (uint32_t)redop) % 2 == 0;
					run_spec(c, groups, &s);
				} else {
					run_spec(c, groups, &s);
					s.in_place = true;
					run_spec(c, groups, &s);
				}
			}
	}
}

static void every_op(struct cluster *c, struct keel_group *const *groups, uint32_t n, size_t large)
{
	for (int op = 0; op < GOP_COUNT; op++)
		every_case(c, groups, n, op, large);
}

static void check_clean(struct cluster *c)
{
	for (uint32_t r = 0; r < c->world; r++) {
		struct keel_counters k;
		keel_counters_get(c->node[r], &k);
		assert_int_equal(k.drop_protocol, 0);
		assert_int_equal(k.drop_crc, 0);
		assert_int_equal(k.suspicions, 0);
	}
}

/* ---- tests ---- */

/* The group of the whole job: every member, in rank order, the same id everywhere, on the
 * installed view; rank mapping both ways. */
static void test_group_world_info(void **state)
{
	(void)state;
	for (uint32_t world = 2; world <= 5; world++) {
		struct cluster c;
		struct groups gs;
		assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak), 0);
		groups_world(&c, &gs);
		uint32_t all[CLUSTER_MAX];
		for (uint32_t r = 0; r < world; r++)
			all[r] = r;
		(void)check_group(gs.g, all, world, view_epoch(&c, 0));
		struct keel_group_info info;
		uint32_t ranks[CLUSTER_MAX];
		/* ranks may be NULL; too few places: -ENOSPC */
		assert_int_equal(keel_group_info(gs.g[0], &info, NULL, 0), (int)world);
		assert_int_equal(keel_group_info(gs.g[0], &info, ranks, world - 1), -ENOSPC);
		groups_free(&c, &gs);
		cluster_fini(&c);
	}
}

/* Every operation x dtype x reduction x size x in/out of place over the whole job, at 2..5
 * ranks on loopback UDP. */
static void test_group_every_op_udp(void **state)
{
	(void)state;
	g_runs = 0;
	for (uint32_t world = 2; world <= 5; world++) {
		struct cluster c;
		struct groups gs;
		assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak), 0);
		groups_world(&c, &gs);
		every_op(&c, gs.g, world, 5000);
		check_clean(&c);
		groups_free(&c, &gs);
		cluster_fini(&c);
	}
	print_message("%" PRIu64 " runs checked\n", g_runs);
}

/* The same over shared memory (reliable and ordered: nothing is ever resent). */
static void test_group_every_op_shm(void **state)
{
	(void)state;
	g_runs = 0;
	for (uint32_t world = 2; world <= 4; world++) {
		struct cluster c;
		struct groups gs;
		assert_int_equal(cluster_init_shm(&c, world, g_mtu, tweak), 0);
		groups_world(&c, &gs);
		every_op(&c, gs.g, world, 3000);
		check_clean(&c);
		for (uint32_t r = 0; r < world; r++) {
			struct keel_counters k;
			keel_counters_get(c.node[r], &k);
			assert_int_equal(k.retransmits, 0);
		}
		groups_free(&c, &gs);
		cluster_fini(&c);
	}
	print_message("%" PRIu64 " runs checked\n", g_runs);
}

/* Split by color r % 2 with keys that reverse the order: {..., 2, 0} and {..., 3, 1}, two
 * groups with ids of their own; every operation runs in both at once. */
static void test_group_split_two_groups_at_once(void **state)
{
	(void)state;
	g_runs = 0;
	for (uint32_t world = 4; world <= 5; world++) {
		struct cluster c;
		struct groups wg, sg;
		assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak), 0);
		groups_world(&c, &wg);
		uint32_t color[CLUSTER_MAX], key[CLUSTER_MAX];
		for (uint32_t r = 0; r < world; r++) {
			color[r] = r % 2;
			key[r] = 100 - r;
		}
		groups_split(&c, wg.g, color, key, &sg);
		uint32_t even[CLUSTER_MAX], odd[CLUSTER_MAX], ne = 0, no = 0;
		for (uint32_t r = world; r-- > 0;) {
			if (r % 2 == 0)
				even[ne++] = r;
			else
				odd[no++] = r;
		}
		uint32_t epoch = view_epoch(&c, 0);
		uint64_t ide = check_group(sg.g, even, ne, epoch);
		uint64_t ido = check_group(sg.g, odd, no, epoch);
		uint64_t idw = check_group(wg.g, (uint32_t[]){0, 1, 2, 3, 4}, world, epoch);
		assert_true(ide != ido && ide != idw && ido != idw);
		every_op(&c, sg.g, ne, 2000);
		/* the parent still works beside them */
		every_case(&c, wg.g, world, GOP_ALLGATHER, 2000);
		check_clean(&c);
		groups_free(&c, &sg);
		groups_free(&c, &wg);
		cluster_fini(&c);
	}
	print_message("%" PRIu64 " runs checked\n", g_runs);
}

/* KEEL_COLOR_NONE joins no group (out NULL, its memory untouched); equal keys keep the
 * parent's order; a color of one member makes a group of one, whose operations are its own
 * input. */
static void test_group_split_color_none_key_ties_group_of_one(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg, sg;
	assert_int_equal(cluster_init(&c, 5, NULL, g_seed, tweak), 0);
	groups_world(&c, &wg);
	const uint32_t color[5] = {7, KEEL_COLOR_NONE, 9, 7, 7}, key[5] = {3, 0, 1, 3, 3};
	/* rank 1's memory: filled, and must stay so */
	size_t len;
	void *mem1 = group_mem(&c, 1, &len);
	memset(mem1, 0xC3, len);
	struct keel_req *reqs[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	memset(&sg, 0, sizeof(sg));
	for (uint32_t r = 0; r < 5; r++) {
		sg.mem[r] = r == 1 ? mem1 : group_mem(&c, r, &sg.len);
		sg.g[r] = (struct keel_group *)&sg; /* must be overwritten */
		assert_int_equal(keel_group_split_start(wg.g[r], color[r], key[r], sg.mem[r], len,
							&sg.g[r], &reqs[r]),
				 0);
	}
	assert_int_equal(cluster_wait_reqs(&c, reqs, rc, ROUNDS_MAX), 0);
	for (uint32_t r = 0; r < 5; r++)
		assert_int_equal(rc[r], 0);
	assert_null(sg.g[1]);
	for (size_t i = 0; i < len; i++)
		assert_int_equal(((uint8_t *)mem1)[i], 0xC3);
	uint32_t epoch = view_epoch(&c, 0);
	uint64_t ida = check_group(sg.g, (uint32_t[]){0, 3, 4}, 3, epoch);
	uint64_t idb = check_group(sg.g, (uint32_t[]){2}, 1, epoch);
	assert_true(ida != idb);
	struct keel_group *only[CLUSTER_MAX] = {NULL};
	only[2] = sg.g[2];
	for (int op = 0; op < GOP_COUNT; op++) {
		if (gop_is_p2p(op))
			continue; /* a group of one has no peer */
		struct gop_spec s = {.op = op, .dt = KEEL_F32, .redop = KEEL_AVG, .count = 1001};
		run_spec(&c, only, &s);
	}
	for (int op = 0; op < GOP_COUNT; op++) { /* both at once: ranks 0, 3, 4 and rank 2 */
		struct gop_spec s = {.op = op, .dt = KEEL_I64, .redop = KEEL_MAX, .count = 333};
		struct keel_group *both[CLUSTER_MAX] = {sg.g[0], NULL, sg.g[2], sg.g[3], sg.g[4]};
		if (gop_is_p2p(op))
			both[2] = NULL;
		run_spec(&c, both, &s);
	}
	groups_free(&c, &sg);
	groups_free(&c, &wg);
	cluster_fini(&c);
}

/* A split of a split: the parent [4 3 2 1 0] (keys reversed), split again by job rank parity
 * with equal keys, keeps the parent's order: [4 2 0] and [3 1]. Five ids, all distinct. */
static void test_group_split_of_a_split(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg, pg, cg;
	assert_int_equal(cluster_init(&c, 5, NULL, g_seed, tweak), 0);
	groups_world(&c, &wg);
	uint32_t color[5], key[5];
	for (uint32_t r = 0; r < 5; r++) {
		color[r] = 0;
		key[r] = 4 - r;
	}
	groups_split(&c, wg.g, color, key, &pg);
	for (uint32_t r = 0; r < 5; r++) {
		color[r] = r % 2;
		key[r] = 5;
	}
	groups_split(&c, pg.g, color, key, &cg);
	uint32_t epoch = view_epoch(&c, 0);
	uint64_t id[4] = {check_group(wg.g, (uint32_t[]){0, 1, 2, 3, 4}, 5, epoch),
			  check_group(pg.g, (uint32_t[]){4, 3, 2, 1, 0}, 5, epoch),
			  check_group(cg.g, (uint32_t[]){4, 2, 0}, 3, epoch),
			  check_group(cg.g, (uint32_t[]){3, 1}, 2, epoch)};
	for (int i = 0; i < 4; i++)
		for (int j = i + 1; j < 4; j++)
			assert_true(id[i] != id[j]);
	const enum gop some[] = {GOP_ALLGATHER, GOP_REDUCE_SCATTER, GOP_ALLTOALLV, GOP_GATHER,
				 GOP_P2P_RING};
	for (int k = 0; k < 5; k++) {
		struct gop_spec s = {.op = some[k],
				     .dt = KEEL_BF16,
				     .redop = KEEL_SUM,
				     .count = 2 * ((g_mtu - 56) / 2) + 1,
				     .root = 1};
		run_spec(&c, cg.g, &s);
		run_spec(&c, pg.g, &s);
	}
	groups_free(&c, &cg);
	groups_free(&c, &pg);
	groups_free(&c, &wg);
	cluster_fini(&c);
}

struct from_ranks_arg {
	struct keel_group **parent;
	const uint32_t *list[CLUSTER_MAX];
	uint32_t count[CLUSTER_MAX];
	struct groups *out;
};

static int call_from_ranks(struct nest *nt, uint32_t r)
{
	struct from_ranks_arg *a = nt->arg;
	return keel_group_from_ranks(a->parent[r], a->list[r], a->count[r], a->out->mem[r],
				     a->out->len, &a->out->g[r]);
}

static void from_ranks_all(struct cluster *c, struct keel_group **parent,
			   const uint32_t *const *lists, const uint32_t *counts, struct groups *out,
			   struct nest *nt)
{
	static struct from_ranks_arg a;
	memset(out, 0, sizeof(*out));
	memset(nt, 0, sizeof(*nt));
	a.parent = parent;
	a.out = out;
	for (uint32_t r = 0; r < c->world; r++) {
		a.list[r] = lists[r];
		a.count[r] = counts[r];
		out->mem[r] = group_mem(c, r, &out->len);
	}
	nt->call = call_from_ranks;
	nt->arg = &a;
	nest_all(nt, c->world);
	nest_run(c, nt);
}

/* A group from an explicit list, in the list's order; ranks not listed get NULL. A member
 * that passes another list gets KEEL_EMISMATCH, as does every other member; the parent goes
 * on. */
static void test_group_from_ranks(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg, fg;
	struct nest nt;
	g_waiter = true;
	assert_int_equal(cluster_init(&c, 4, NULL, g_seed, tweak), 0);
	g_waiter = false;
	g_cl = &c;
	groups_world(&c, &wg);
	const uint32_t list[3] = {3, 1, 0}, other[3] = {3, 0, 1};
	const uint32_t *lists[4] = {list, list, list, list}, counts[4] = {3, 3, 3, 3};
	from_ranks_all(&c, wg.g, lists, counts, &fg, &nt);
	for (uint32_t r = 0; r < 4; r++)
		if (nt.rc[r] != 0)
			fail_msg("from_ranks at rank %u: %d (%s)", r, nt.rc[r],
				 keel_strerror(nt.rc[r]));
	assert_null(fg.g[2]);
	(void)check_group(fg.g, list, 3, view_epoch(&c, 0));
	for (int op = 0; op < GOP_COUNT; op++) {
		struct gop_spec s = {
		    .op = op, .dt = KEEL_F16, .redop = KEEL_SUM, .count = 1500, .root = 2};
		run_spec(&c, fg.g, &s);
	}
	groups_free(&c, &fg);
	lists[1] = other;
	struct groups bad;
	from_ranks_all(&c, wg.g, lists, counts, &bad, &nt);
	for (uint32_t r = 0; r < 4; r++) {
		if (nt.rc[r] != KEEL_EMISMATCH)
			fail_msg("mismatching lists: rank %u got %d (%s), want KEEL_EMISMATCH", r,
				 nt.rc[r], keel_strerror(nt.rc[r]));
		free(bad.mem[r]);
	}
	struct gop_spec s = {.op = GOP_ALLGATHER, .dt = KEEL_I32, .count = 77};
	run_spec(&c, wg.g, &s);
	groups_free(&c, &wg);
	cluster_fini(&c);
}

/* Groups have streams of their own: ranks start the world's operation and their pair's in
 * opposite orders, and several operations of one group are pending at once; all end exact. */
static void test_group_streams_independent(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg, pg;
	assert_int_equal(cluster_init(&c, 4, NULL, g_seed, tweak), 0);
	groups_world(&c, &wg);
	const uint32_t color[4] = {0, 0, 1, 1}, key[4] = {0, 0, 0, 0};
	groups_split(&c, wg.g, color, key, &pg);
	static struct grun runs[4];
	struct gop_spec specs[4] = {
	    {.op = GOP_ALLREDUCE, .dt = KEEL_F32, .redop = KEEL_SUM, .count = 40000},
	    {.op = GOP_ALLGATHER, .dt = KEEL_F64, .count = 3000},
	    {.op = GOP_ALLTOALL, .dt = KEEL_U8, .count = 5000},
	    {.op = GOP_REDUCE_SCATTER, .dt = KEEL_I32, .redop = KEEL_MIN, .count = 2000},
	};
	/* runs 0 and 3 on the world group, 1 and 2 on the pairs */
	struct keel_group **on[4] = {wg.g, pg.g, pg.g, wg.g};
	for (int k = 0; k < 4; k++) {
		specs[k].salt = g_seed + 77 + (uint64_t)k;
		grun_setup(&runs[k], &c, on[k], &specs[k]);
	}
	/* ranks 0 and 2: world, pair, pair, world; ranks 1 and 3: pair, pair, world, world */
	const int order[2][4] = {{0, 1, 2, 3}, {1, 2, 0, 3}};
	for (uint32_t r = 0; r < 4; r++)
		for (int i = 0; i < 4; i++)
			assert_int_equal(grun_start(&runs[order[r % 2][i]], r), 0);
	for (int k = 0; k < 4; k++) {
		struct keel_req *reqs[CLUSTER_MAX] = {NULL};
		struct keel_req_info info[CLUSTER_MAX];
		static uint32_t ran[CLUSTER_MAX][CLUSTER_MAX];
		int rc[CLUSTER_MAX];
		for (uint32_t r = 0; r < 4; r++)
			reqs[r] = runs[k].m[r].req;
		assert_int_equal(cluster_wait_reqs_info(&c, reqs, rc, info, ran, NULL, ROUNDS_MAX),
				 0);
		for (uint32_t r = 0; r < 4; r++) {
			if (rc[r] != 0)
				fail_msg("%s at rank %u: %d (%s)", gop_names[specs[k].op], r, rc[r],
					 keel_strerror(rc[r]));
			assert_int_equal(info[r].member_count, runs[k].m[r].n);
			assert_true(grun_check(&runs[k], r, ran[r], info[r].member_count));
		}
		grun_free(&runs[k]);
	}
	check_clean(&c);
	groups_free(&c, &pg);
	groups_free(&c, &wg);
	cluster_fini(&c);
}

/* A barrier ends at no member before every member entered it. */
static void test_group_barrier_waits_for_every_member(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg;
	assert_int_equal(cluster_init(&c, 4, NULL, g_seed, tweak), 0);
	groups_world(&c, &wg);
	struct keel_req *reqs[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	for (uint32_t r = 0; r < 3; r++)
		assert_int_equal(keel_group_barrier_start(wg.g[r], &reqs[r]), 0);
	for (int i = 0; i < 3000; i++) { /* 30 ms: many heartbeats, no entry timeout */
		cluster_round(&c);
		for (uint32_t r = 0; r < 3; r++)
			assert_int_equal(keel_req_test(reqs[r]), -EINPROGRESS);
	}
	assert_int_equal(keel_group_barrier_start(wg.g[3], &reqs[3]), 0);
	assert_int_equal(cluster_wait_reqs(&c, reqs, rc, ROUNDS_MAX), 0);
	for (uint32_t r = 0; r < 4; r++)
		assert_int_equal(rc[r], 0);
	groups_free(&c, &wg);
	cluster_fini(&c);
}

static void fill_bytes(uint8_t *p, size_t len, uint32_t who)
{
	grun_pattern(p, len, who, g_seed);
}

/* Send/Recv are ordered per (group, peer): the n-th send to a peer meets its n-th receive
 * from this member, whatever batches they came in; the same two ranks in another group have a
 * stream of their own, used in another order relative to the first group's. Within one group,
 * collectives and Send/Recv share the way to each peer, so both sides issue them in the same
 * order (group.h), here Send/Recv, a collective, Send/Recv. */
static void test_group_p2p_ordered_per_group_and_peer(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg, pg;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak), 0);
	groups_world(&c, &wg);
	const uint32_t color[3] = {0, 0, 0}, key[3] = {0, 0, 0};
	groups_split(&c, wg.g, color, key, &pg); /* the same members, another group */
	static uint8_t s0[4][3000], s1[100], r2[5][3000];
	fill_bytes(s0[0], 10, 0);
	fill_bytes(s0[1], 3000, 1);
	fill_bytes(s0[3], 500, 3);
	fill_bytes(s1, 100, 9);
	memset(r2, 0xEE, sizeof(r2));
	struct keel_req *req[3][4] = {{NULL}};
	const struct keel_p2p b0w[2] = {{KEEL_P2P_SEND, 2, s0[0], 10, 1},
					{KEEL_P2P_SEND, 2, s0[1], 3000, 2}};
	const struct keel_p2p b0w2 = {KEEL_P2P_SEND, 2, s0[2], 0, 3};
	const struct keel_p2p b0p = {KEEL_P2P_SEND, 2, s0[3], 500, 1};
	const struct keel_p2p b1w = {KEEL_P2P_SEND, 2, s1, 100, 9};
	const struct keel_p2p b2p = {KEEL_P2P_RECV, 0, r2[3], 500, 1};
	/* rank 0's two sends of one batch meet receives of two batches */
	const struct keel_p2p b2w[3] = {{KEEL_P2P_RECV, 0, r2[0], 10, 1},
					{KEEL_P2P_RECV, 1, r2[4], 100, 9},
					{KEEL_P2P_RECV, 0, r2[1], 3000, 2}};
	const struct keel_p2p b2w2 = {KEEL_P2P_RECV, 0, r2[2], 0, 3};
	static float in[3][1000], out[3][1000];
	struct keel_req *ar[CLUSTER_MAX] = {NULL};
	for (uint32_t r = 0; r < 3; r++)
		keel_check_fill(in[r], 0, 1000, r, KEEL_F32, KEEL_SUM);
	/* rank 0: world sends, the collective, the pair's send, one more world send */
	assert_int_equal(keel_group_p2p_start(wg.g[0], b0w, 2, &req[0][0]), 0);
	assert_int_equal(
	    keel_group_allreduce_start(wg.g[0], in[0], out[0], 1000, KEEL_F32, KEEL_SUM, &ar[0]),
	    0);
	assert_int_equal(keel_group_p2p_start(pg.g[0], &b0p, 1, &req[0][1]), 0);
	assert_int_equal(keel_group_p2p_start(wg.g[0], &b0w2, 1, &req[0][2]), 0);
	/* rank 1: its send, then the collective */
	assert_int_equal(keel_group_p2p_start(wg.g[1], &b1w, 1, &req[1][0]), 0);
	assert_int_equal(
	    keel_group_allreduce_start(wg.g[1], in[1], out[1], 1000, KEEL_F32, KEEL_SUM, &ar[1]),
	    0);
	/* rank 2: the pair's receive first (rank 0 sends it third), then the world's receives in
	 * two batches, the collective, the last world receive */
	assert_int_equal(keel_group_p2p_start(pg.g[2], &b2p, 1, &req[2][0]), 0);
	assert_int_equal(keel_group_p2p_start(wg.g[2], b2w, 1, &req[2][1]), 0);
	assert_int_equal(keel_group_p2p_start(wg.g[2], b2w + 1, 2, &req[2][3]), 0);
	assert_int_equal(
	    keel_group_allreduce_start(wg.g[2], in[2], out[2], 1000, KEEL_F32, KEEL_SUM, &ar[2]),
	    0);
	assert_int_equal(keel_group_p2p_start(wg.g[2], &b2w2, 1, &req[2][2]), 0);
	int rc[CLUSTER_MAX];
	assert_int_equal(cluster_wait_reqs(&c, ar, rc, ROUNDS_MAX), 0);
	static float ref[1000];
	keel_check_reference(ref, 0, 1000, 3, KEEL_F32, KEEL_SUM);
	for (uint32_t r = 0; r < 3; r++) {
		assert_int_equal(rc[r], 0);
		assert_memory_equal(out[r], ref, sizeof(ref));
	}
	for (int k = 0; k < 4; k++) {
		struct keel_req *col[CLUSTER_MAX] = {req[0][k], req[1][k], req[2][k]};
		assert_int_equal(cluster_wait_reqs(&c, col, rc, ROUNDS_MAX), 0);
		for (uint32_t r = 0; r < 3; r++)
			if (req[r][k] != NULL && rc[r] != 0)
				fail_msg("batch %d at rank %u: %d (%s)", k, r, rc[r],
					 keel_strerror(rc[r]));
	}
	assert_memory_equal(r2[0], s0[0], 10);
	assert_memory_equal(r2[1], s0[1], 3000);
	assert_memory_equal(r2[3], s0[3], 500);
	assert_memory_equal(r2[4], s1, 100);
	assert_int_equal(r2[0][10], 0xEE); /* nothing past the 10 bytes */
	assert_int_equal(r2[2][0], 0xEE);  /* the empty message wrote nothing */
	groups_free(&c, &pg);
	groups_free(&c, &wg);
	cluster_fini(&c);
}

/* Wait for reqs (NULL: none at that rank); whether each ended with `want` (else printed). */
static bool ended_all(struct cluster *c, struct keel_req **reqs, int want, const char *what)
{
	int rc[CLUSTER_MAX];
	bool had[CLUSTER_MAX], ok = true;
	for (uint32_t r = 0; r < c->world; r++)
		had[r] = reqs[r] != NULL;
	/* past keel_op_bound_ns, when every operation has ended one way or another */
	uint32_t rounds = (uint32_t)(keel_op_bound_ns(&c->cfg[0]) / c->step_ns) + 1000;
	(void)cluster_wait_reqs(c, reqs, rc, rounds);
	for (uint32_t r = 0; r < c->world; r++)
		if (had[r] && reqs[r] != NULL) {
			print_error("%s: rank %u: not ended after %u rounds (keel_op_bound_ns)\n",
				    what, r, rounds);
			ok = false;
		} else if (had[r] && rc[r] != want) {
			print_error("%s: rank %u got %d (%s), want %d (%s)\n", what, r, rc[r],
				    keel_strerror(rc[r]), want, keel_strerror(want));
			ok = false;
		}
	return ok;
}

static void expect_all(struct cluster *c, struct keel_req **reqs, int want, const char *what)
{
	if (!ended_all(c, reqs, want, what))
		fail();
}

/* A send and a receive whose tags or byte counts differ both fail with KEEL_EMISMATCH, and
 * the next pair between them matches as before. */
static void test_group_p2p_mismatch(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, tweak), 0);
	groups_world(&c, &wg);
	static uint8_t sbuf[200], rbuf[200];
	fill_bytes(sbuf, sizeof(sbuf), 0);
	const uint32_t stag[3] = {5, 7, 8}, rtag[3] = {6, 7, 8};
	const size_t sbytes[3] = {64, 100, 150}, rbytes[3] = {64, 101, 150};
	const char *what[3] = {"tags 5 and 6", "100 bytes and 101", "a match after them"};
	uint32_t wrong = 0;
	for (int k = 0; k < 3; k++) {
		struct keel_req *reqs[CLUSTER_MAX] = {NULL};
		struct keel_p2p snd = {KEEL_P2P_SEND, 1, sbuf, sbytes[k], stag[k]};
		struct keel_p2p rcv = {KEEL_P2P_RECV, 0, rbuf, rbytes[k], rtag[k]};
		assert_int_equal(keel_group_p2p_start(wg.g[0], &snd, 1, &reqs[0]), 0);
		assert_int_equal(keel_group_p2p_start(wg.g[1], &rcv, 1, &reqs[1]), 0);
		wrong += !ended_all(&c, reqs, k < 2 ? KEEL_EMISMATCH : 0, what[k]);
	}
	if (wrong != 0)
		fail_msg("%u of 3 cases ended otherwise", wrong);
	assert_memory_equal(rbuf, sbuf, 150);
	groups_free(&c, &wg);
	cluster_fini(&c);
}

/* Members that start different operations at one place of the group's sequence (another
 * count, dtype, root, operation, or V counts that do not pair up) all get KEEL_EMISMATCH,
 * and the group goes on: the next operation is exact. */
static void test_group_mismatched_collectives(void **state)
{
	(void)state;
	static uint8_t in[3][4096], out[3][4096];
	/* the V forms read their arrays until they end: one set per member, kept */
	static size_t cnt[3] = {4, 4, 4}, dsp[3] = {0, 8, 16}, vcnt[3][3], sc[3][3];
	uint32_t wrong = 0;
	for (int k = 0; k < 8; k++) {
		/* a fresh job for each: a case that hangs leaves the others their own; a member
		 * that waits for a match is given up after 1 s, not 60 */
		struct cluster c;
		struct groups wg;
		g_entry_timeout_ns = 1000000000ull;
		assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak), 0);
		g_entry_timeout_ns = 0;
		groups_world(&c, &wg);
		struct keel_req *reqs[CLUSTER_MAX] = {NULL};
		const char *what = "";
		for (uint32_t r = 0; r < 3; r++) {
			struct keel_group *g = wg.g[r];
			bool odd = r == 1; /* the member that disagrees */
			for (int i = 0; i < 3; i++) {
				vcnt[r][i] = i == 2 && odd ? 5 : 4;
				/* member 1 sends member 0 five elements where 0 expects 4 */
				sc[r][i] = i == 0 && odd ? 5 : 4;
			}
			int st = -1;
			switch (k) {
			case 0:
				what = "allgather of 8 and 16 elements";
				st = keel_group_allgather_start(g, in[r], out[r], odd ? 16 : 8,
								KEEL_F32, &reqs[r]);
				break;
			case 1:
				what = "allreduce of f32 and i32";
				st = keel_group_allreduce_start(g, in[r], out[r], 8,
								odd ? KEEL_I32 : KEEL_F32, KEEL_SUM,
								&reqs[r]);
				break;
			case 2:
				what = "broadcast from roots 0 and 2";
				st = keel_group_broadcast_start(g, odd ? 2 : 0, out[r], 64,
								&reqs[r]);
				break;
			case 3:
				what = "allgather and alltoall";
				st = odd ? keel_group_alltoall_start(g, in[r], out[r], 4, KEEL_F32,
								     &reqs[r])
					 : keel_group_allgather_start(g, in[r], out[r], 4, KEEL_F32,
								      &reqs[r]);
				break;
			case 4:
				what = "allgatherv with other counts";
				st = keel_group_allgatherv_start(g, in[r], out[r], vcnt[r], dsp,
								 KEEL_U8, &reqs[r]);
				break;
			case 5:
				what = "reduce_scatterv with other counts";
				st = keel_group_reduce_scatterv_start(g, in[r], out[r], vcnt[r],
								      KEEL_I32, KEEL_SUM, &reqs[r]);
				break;
			case 6:
				what = "alltoallv whose counts do not pair up";
				st = keel_group_alltoallv_start(g, in[r], sc[r], dsp, out[r], cnt,
								dsp, KEEL_U8, &reqs[r]);
				break;
			default:
				what = "gather to roots 0 and 1";
				st = keel_group_gather_start(g, in[r], out[r], 4, KEEL_F32,
							     odd ? 1 : 0, &reqs[r]);
				break;
			}
			assert_int_equal(st, 0);
		}
		wrong += !ended_all(&c, reqs, KEEL_EMISMATCH, what);
		bool pending = false;
		for (uint32_t r = 0; r < 3; r++)
			pending |= reqs[r] != NULL;
		if (pending)
			continue; /* the job is left as it is: keel may still write its buffers */
		struct gop_spec s = {
		    .op = GOP_ALLREDUCE, .dt = KEEL_I32, .redop = KEEL_SUM, .count = 100};
		run_spec(&c, wg.g, &s); /* the group goes on */
		groups_free(&c, &wg);
		cluster_fini(&c);
	}
	if (wrong != 0)
		fail_msg("%u of 8 mismatches not reported as KEEL_EMISMATCH everywhere", wrong);
}

/* Group creation's argument errors. */
static void bad_group_arguments(struct cluster *c, struct groups *wg)
{
	struct keel_node *n = c->node[0];
	struct keel_group *g = NULL, *out = NULL;
	struct keel_req *req = NULL;
	size_t len = keel_group_size(n);
	uint8_t *mem = aligned_alloc(64, (len + 127) & ~(size_t)63);
	assert_int_equal(keel_group_world(NULL, mem, len, &g), -EINVAL);
	assert_int_equal(keel_group_world(n, NULL, len, &g), -EINVAL);
	assert_int_equal(keel_group_world(n, mem + 4, len, &g), -EINVAL); /* not 8-aligned */
	assert_int_equal(keel_group_world(n, mem, len, NULL), -EINVAL);
	assert_int_equal(keel_group_world(n, mem, len - 1, &g), -ENOSPC);
	struct keel_group *p = wg->g[0];
	assert_int_equal(keel_group_split_start(NULL, 0, 0, mem, len, &out, &req), -EINVAL);
	assert_int_equal(keel_group_split_start(p, 0, 0, NULL, len, &out, &req), -EINVAL);
	assert_int_equal(keel_group_split_start(p, 0, 0, mem + 4, len, &out, &req), -EINVAL);
	assert_int_equal(keel_group_split_start(p, 0, 0, mem, len, NULL, &req), -EINVAL);
	assert_int_equal(keel_group_split_start(p, 0, 0, mem, len, &out, NULL), -EINVAL);
	/* group.h gives split -EINVAL for bad arguments; memory too small is -ENOSPC wherever
	 * else keel says it (keel_group_world, keel_init) */
	assert_int_equal(keel_group_split_start(p, 0, 0, mem, len - 8, &out, &req), -ENOSPC);
	free(mem);
}

/* The collectives' and Send/Recv's argument errors at start. */
static void bad_op_arguments(struct keel_group *g)
{
	static float b[4096];
	float *s = b, *r = b + 1024;
	struct keel_req *q;
	size_t cnt[2] = {4, 4}, dsp[2] = {0, 4}, ovl[2] = {0, 2};
	assert_int_equal(keel_group_allgather_start(g, NULL, r, 4, KEEL_F32, &q), -EINVAL);
	assert_int_equal(keel_group_allgather_start(g, s, NULL, 4, KEEL_F32, &q), -EINVAL);
	assert_int_equal(keel_group_allgather_start(g, s, r, 4, KEEL_DTYPE_COUNT, &q), -EINVAL);
	assert_int_equal(keel_group_allgather_start(g, s, r, 4, KEEL_F32, NULL), -EINVAL);
	assert_int_equal(keel_group_allgather_start(NULL, s, r, 4, KEEL_F32, &q), -EINVAL);
	/* overlapping, and not at its own block (rank 0: r + 0) */
	assert_int_equal(keel_group_allgather_start(g, r + 1, r, 4, KEEL_F32, &q), -EINVAL);
	assert_int_equal(keel_group_allgatherv_start(g, s, r, NULL, dsp, KEEL_F32, &q), -EINVAL);
	assert_int_equal(keel_group_allgatherv_start(g, s, r, cnt, NULL, KEEL_F32, &q), -EINVAL);
	assert_int_equal(keel_group_allgatherv_start(g, s, r, cnt, ovl, KEEL_F32, &q), -EINVAL);
	assert_int_equal(
	    keel_group_reduce_scatter_start(g, s, r, 4, KEEL_F32, KEEL_REDOP_COUNT, &q), -EINVAL);
	assert_int_equal(keel_group_reduce_scatter_start(g, s, s + 1, 4, KEEL_F32, KEEL_SUM, &q),
			 -EINVAL);
	assert_int_equal(keel_group_reduce_scatterv_start(g, s, r, NULL, KEEL_F32, KEEL_SUM, &q),
			 -EINVAL);
	assert_int_equal(keel_group_allreduce_start(g, s, r, 4, KEEL_F32, KEEL_REDOP_COUNT, &q),
			 -EINVAL);
	assert_int_equal(keel_group_allreduce_start(g, s, s + 1, 4, KEEL_F32, KEEL_SUM, &q),
			 -EINVAL);
	assert_int_equal(keel_group_broadcast_start(g, 2, s, 16, &q), -EINVAL); /* root */
	assert_int_equal(keel_group_broadcast_start(g, 0, NULL, 16, &q), -EINVAL);
	assert_int_equal(keel_group_reduce_start(g, s, r, 4, KEEL_F32, KEEL_SUM, 2, &q), -EINVAL);
	assert_int_equal(keel_group_reduce_start(g, s, NULL, 4, KEEL_F32, KEEL_SUM, 0, &q),
			 -EINVAL); /* the root needs recv */
	assert_int_equal(keel_group_gather_start(g, s, r, 4, KEEL_F32, 2, &q), -EINVAL);
	assert_int_equal(keel_group_gather_start(g, s, NULL, 4, KEEL_F32, 0, &q), -EINVAL);
	assert_int_equal(keel_group_scatter_start(g, s, r, 4, KEEL_F32, 2, &q), -EINVAL);
	assert_int_equal(keel_group_scatter_start(g, NULL, r, 4, KEEL_F32, 0, &q), -EINVAL);
	assert_int_equal(keel_group_alltoall_start(g, s, s, 4, KEEL_F32, &q), -EINVAL);
	assert_int_equal(keel_group_alltoall_start(g, s, s + 2, 4, KEEL_F32, &q), -EINVAL);
	assert_int_equal(keel_group_alltoallv_start(g, s, NULL, dsp, r, cnt, dsp, KEEL_F32, &q),
			 -EINVAL);
	assert_int_equal(keel_group_alltoallv_start(g, s, cnt, dsp, r, cnt, NULL, KEEL_F32, &q),
			 -EINVAL);
	assert_int_equal(keel_group_barrier_start(g, NULL), -EINVAL);
	assert_int_equal(keel_group_barrier_start(NULL, &q), -EINVAL);
	struct keel_p2p items[KEEL_P2P_BATCH_MAX + 1];
	for (uint32_t i = 0; i <= KEEL_P2P_BATCH_MAX; i++)
		items[i] = (struct keel_p2p){KEEL_P2P_SEND, 1, s, 4, i};
	assert_int_equal(keel_group_p2p_start(g, items, KEEL_P2P_BATCH_MAX + 1, &q), -EINVAL);
	assert_int_equal(keel_group_p2p_start(g, NULL, 1, &q), -EINVAL);
	assert_int_equal(keel_group_p2p_start(g, items, 1, NULL), -EINVAL);
	items[0].peer = 2; /* a group of 2 */
	assert_int_equal(keel_group_p2p_start(g, items, 1, &q), -EINVAL);
	items[0].peer = 1;
	items[0].kind = (enum keel_p2p_kind)7;
	assert_int_equal(keel_group_p2p_start(g, items, 1, &q), -EINVAL);
	items[0].kind = KEEL_P2P_RECV;
	items[0].buf = NULL;
	assert_int_equal(keel_group_p2p_start(g, items, 1, &q), -EINVAL);
	/* blocking forms without a waiter refuse rather than spin without a clock */
	assert_int_equal(keel_group_allreduce(g, s, r, 4, KEEL_F32, KEEL_SUM), -EINVAL);
	assert_int_equal(keel_group_barrier(g), -EINVAL);
	assert_int_equal(keel_group_send(g, 1, s, 16, 1), -EINVAL);
	assert_int_equal(keel_group_recv(g, 1, r, 16, 1), -EINVAL);
}

/* Each documented argument error, at start, at rank 0 alone; none of them takes a place in
 * the group's sequence: the next operation of every member matches and is exact. */
static void test_group_bad_arguments(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, tweak), 0);
	groups_world(&c, &wg);
	assert_true(keel_group_size(c.node[0]) > 0);
	bad_group_arguments(&c, &wg);
	bad_op_arguments(wg.g[0]);
	for (int op = 0; op < GOP_COUNT; op++) {
		struct gop_spec s = {.op = op, .dt = KEEL_F32, .redop = KEEL_SUM, .count = 100};
		run_spec(&c, wg.g, &s);
	}
	groups_free(&c, &wg);
	cluster_fini(&c);
}

struct list_arg {
	struct keel_group *parent;
	const uint32_t *list;
	uint32_t count;
	void *mem;
	size_t len;
	struct keel_group *out;
};

static int call_from_list(struct nest *nt, uint32_t r)
{
	struct list_arg *a = nt->arg;
	(void)r;
	return keel_group_from_ranks(a->parent, a->list, a->count, a->mem, a->len, &a->out);
}

/* keel_group_from_ranks' argument errors: told at once, at the caller alone, with a waiter
 * (without one every blocking call says -EINVAL whatever its arguments). */
static void test_group_from_ranks_bad_arguments(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg, pg;
	g_waiter = true;
	assert_int_equal(cluster_init(&c, 4, NULL, g_seed, tweak), 0);
	g_waiter = false;
	g_cl = &c;
	groups_world(&c, &wg);
	const uint32_t color[4] = {0, 1, 0, 1}, key[4] = {0, 0, 0, 0};
	groups_split(&c, wg.g, color, key, &pg); /* rank 0's: [0 2] */
	const uint32_t dup[2] = {1, 1}, far[2] = {0, 4}, outside[2] = {0, 1}, ok[2] = {2, 0};
	struct {
		struct keel_group *parent;
		const uint32_t *list;
		uint32_t count;
		const char *what;
	} cases[] = {
	    {wg.g[0], dup, 2, "a rank twice"},
	    {wg.g[0], far, 2, "a rank past the job"},
	    {pg.g[0], outside, 2, "a rank not in the parent"},
	    {wg.g[0], NULL, 2, "NULL ranks"},
	    {wg.g[0], ok, 0, "no ranks"},
	    {NULL, ok, 2, "NULL parent"},
	};
	static struct list_arg a;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct nest nt = {
		    .call = call_from_list, .arg = &a, .count = 1, .rounds_max = 100000};
		a = (struct list_arg){
		    cases[k].parent, cases[k].list, cases[k].count, NULL, 0, NULL};
		a.mem = group_mem(&c, 0, &a.len);
		nest_run(&c, &nt);
		if (nt.rc[0] != -EINVAL)
			fail_msg("from_ranks with %s: %d (%s), want -EINVAL", cases[k].what,
				 nt.rc[0], keel_strerror(nt.rc[0]));
		free(a.mem);
	}
	struct gop_spec s = {.op = GOP_ALLGATHER, .dt = KEEL_I32, .count = 10};
	run_spec(&c, wg.g, &s); /* nothing took a place in the sequence */
	run_spec(&c, pg.g, &s);
	groups_free(&c, &pg);
	groups_free(&c, &wg);
	cluster_fini(&c);
}

/* ops_max operations of one group pending: the next start says -EBUSY (another group of the
 * same node still starts), and the group cannot be freed (-EBUSY) until they ended; its
 * memory then makes a new group. */
static void test_group_busy_and_free(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg, pg;
	g_ops_max = 2;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, tweak), 0);
	g_ops_max = KEEL_OPS_DEFAULT;
	groups_world(&c, &wg);
	const uint32_t color[2] = {0, 0}, key[2] = {0, 0};
	groups_split(&c, wg.g, color, key, &pg);
	static float in[2][3][8], out[2][3][8];
	struct keel_req *reqs[3][CLUSTER_MAX] = {{NULL}};
	for (int k = 0; k < 3; k++)
		for (uint32_t i = 0; i < 8; i++) {
			in[0][k][i] = (float)(k * 10 + i);
			in[1][k][i] = (float)(k * 100 + i);
		}
	for (int k = 0; k < 2; k++)
		assert_int_equal(keel_group_allreduce_start(wg.g[0], in[0][k], out[0][k], 8,
							    KEEL_F32, KEEL_SUM, &reqs[k][0]),
				 0);
	struct keel_req *extra;
	assert_int_equal(
	    keel_group_allreduce_start(wg.g[0], in[0][2], out[0][2], 8, KEEL_F32, KEEL_SUM, &extra),
	    -EBUSY);
	assert_int_equal(keel_group_barrier_start(wg.g[0], &extra), -EBUSY);
	assert_int_equal(keel_group_free(wg.g[0]), -EBUSY);
	assert_int_equal(keel_group_allreduce_start(pg.g[0], in[0][2], out[0][2], 8, KEEL_F32,
						    KEEL_SUM, &reqs[2][0]),
			 0);
	for (int k = 0; k < 3; k++)
		assert_int_equal(keel_group_allreduce_start(k < 2 ? wg.g[1] : pg.g[1], in[1][k],
							    out[1][k], 8, KEEL_F32, KEEL_SUM,
							    &reqs[k][1]),
				 0);
	for (int k = 0; k < 3; k++) {
		int rc[CLUSTER_MAX];
		assert_int_equal(cluster_wait_reqs(&c, reqs[k], rc, ROUNDS_MAX), 0);
		for (uint32_t r = 0; r < 2; r++) {
			assert_int_equal(rc[r], 0);
			for (uint32_t i = 0; i < 8; i++)
				assert_true(out[r][k][i] == (float)(k * 110 + 2 * i));
		}
	}
	groups_free(&c, &pg);
	/* freed: the same memory makes the world group again */
	for (uint32_t r = 0; r < 2; r++) {
		assert_int_equal(keel_group_free(wg.g[r]), 0);
		assert_int_equal(keel_group_world(c.node[r], wg.mem[r], wg.len, &wg.g[r]), 0);
	}
	struct gop_spec s = {.op = GOP_ALLTOALL, .dt = KEEL_F64, .count = 300};
	run_spec(&c, wg.g, &s);
	groups_free(&c, &wg);
	cluster_fini(&c);
}

static int call_grun(struct nest *nt, uint32_t r)
{
	return grun_call_blocking(nt->arg, r);
}

struct split_arg {
	struct keel_group **parent;
	struct groups *out;
};

static int call_split(struct nest *nt, uint32_t r)
{
	struct split_arg *a = nt->arg;
	return keel_group_split(a->parent[r], r == 1 ? KEEL_COLOR_NONE : 3, 10 - r, a->out->mem[r],
				a->out->len, &a->out->g[r]);
}

struct sendrecv_arg {
	struct keel_group **g;
	uint8_t *buf[2];
	size_t bytes;
};

static int call_sendrecv(struct nest *nt, uint32_t r)
{
	struct sendrecv_arg *a = nt->arg;
	/* the group is [2 0]: rank 2 is its rank 0, rank 0 its rank 1 */
	if (r == 2)
		return keel_group_send(a->g[2], 1, a->buf[0], a->bytes, 44);
	return keel_group_recv(a->g[0], 0, a->buf[1], a->bytes, 44);
}

/* The blocking forms, every member inside its call at once: each operation (start and
 * keel_req_wait where there is none), keel_group_split, keel_group_send and recv. */
static void test_group_blocking_forms(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg, sg;
	g_waiter = true;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak), 0);
	g_waiter = false;
	g_cl = &c;
	groups_world(&c, &wg);
	static struct grun run;
	for (int op = 0; op < GOP_COUNT; op++) {
		struct gop_spec s = {.op = op,
				     .dt = KEEL_F32,
				     .redop = KEEL_PROD,
				     .count = 2222,
				     .root = 1,
				     .salt = g_seed + (uint64_t)op};
		struct nest nt = {.call = call_grun, .arg = &run};
		nest_all(&nt, 3);
		grun_setup(&run, &c, wg.g, &s);
		nest_run(&c, &nt);
		const uint32_t all[3] = {0, 1, 2};
		for (uint32_t r = 0; r < 3; r++) {
			if (nt.rc[r] != 0)
				fail_msg("blocking %s at rank %u: %d (%s)", gop_names[op], r,
					 nt.rc[r], keel_strerror(nt.rc[r]));
			assert_true(grun_check(&run, r, all, 3));
		}
		grun_free(&run);
	}
	static struct split_arg sa;
	sa = (struct split_arg){wg.g, &sg};
	memset(&sg, 0, sizeof(sg));
	for (uint32_t r = 0; r < 3; r++)
		sg.mem[r] = group_mem(&c, r, &sg.len);
	struct nest nt = {.call = call_split, .arg = &sa};
	nest_all(&nt, 3);
	nest_run(&c, &nt);
	for (uint32_t r = 0; r < 3; r++)
		assert_int_equal(nt.rc[r], 0);
	assert_null(sg.g[1]);
	(void)check_group(sg.g, (uint32_t[]){2, 0}, 2, view_epoch(&c, 0));
	static uint8_t sbuf[5000], rbuf[5000];
	fill_bytes(sbuf, sizeof(sbuf), 2);
	static struct sendrecv_arg ra;
	ra = (struct sendrecv_arg){sg.g, {sbuf, rbuf}, sizeof(sbuf)};
	nt = (struct nest){.call = call_sendrecv, .arg = &ra, .order = {0, 2}, .count = 2};
	nest_run(&c, &nt);
	assert_int_equal(nt.rc[0], 0);
	assert_int_equal(nt.rc[2], 0);
	assert_memory_equal(rbuf, sbuf, sizeof(sbuf));
	groups_free(&c, &sg);
	groups_free(&c, &wg);
	cluster_fini(&c);
}

/* Count 0 moves nothing and may pass NULL buffers, but is still an operation of the group:
 * it ends (0) once every member started it. */
static void test_group_count_zero_null_buffers(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak), 0);
	groups_world(&c, &wg);
	const size_t z[3] = {0, 0, 0};
	const struct keel_p2p ring[3][2] = {
	    {{KEEL_P2P_RECV, 2, NULL, 0, 1}, {KEEL_P2P_SEND, 1, NULL, 0, 1}},
	    {{KEEL_P2P_RECV, 0, NULL, 0, 1}, {KEEL_P2P_SEND, 2, NULL, 0, 1}},
	    {{KEEL_P2P_RECV, 1, NULL, 0, 1}, {KEEL_P2P_SEND, 0, NULL, 0, 1}}};
	for (int op = 0; op < GOP_COUNT; op++) {
		struct keel_req *reqs[CLUSTER_MAX] = {NULL};
		for (uint32_t r = 0; r < 3; r++) {
			struct keel_group *g = wg.g[r];
			struct keel_req **q = &reqs[r];
			int st;
			switch (op) {
			case GOP_ALLGATHER:
				st = keel_group_allgather_start(g, NULL, NULL, 0, KEEL_F32, q);
				break;
			case GOP_ALLGATHERV:
				st = keel_group_allgatherv_start(g, NULL, NULL, z, z, KEEL_F32, q);
				break;
			case GOP_REDUCE_SCATTER:
				st = keel_group_reduce_scatter_start(g, NULL, NULL, 0, KEEL_F32,
								     KEEL_SUM, q);
				break;
			case GOP_REDUCE_SCATTERV:
				st = keel_group_reduce_scatterv_start(g, NULL, NULL, z, KEEL_F32,
								      KEEL_SUM, q);
				break;
			case GOP_ALLREDUCE:
				st = keel_group_allreduce_start(g, NULL, NULL, 0, KEEL_F32,
								KEEL_SUM, q);
				break;
			case GOP_BROADCAST:
				st = keel_group_broadcast_start(g, 1, NULL, 0, q);
				break;
			case GOP_REDUCE:
				st = keel_group_reduce_start(g, NULL, NULL, 0, KEEL_F32, KEEL_SUM,
							     1, q);
				break;
			case GOP_GATHER:
				st = keel_group_gather_start(g, NULL, NULL, 0, KEEL_F32, 1, q);
				break;
			case GOP_SCATTER:
				st = keel_group_scatter_start(g, NULL, NULL, 0, KEEL_F32, 1, q);
				break;
			case GOP_ALLTOALL:
				st = keel_group_alltoall_start(g, NULL, NULL, 0, KEEL_F32, q);
				break;
			case GOP_ALLTOALLV:
				st = keel_group_alltoallv_start(g, NULL, z, z, NULL, z, z, KEEL_F32,
								q);
				break;
			case GOP_BARRIER:
				st = keel_group_barrier_start(g, q);
				break;
			default:
				st = keel_group_p2p_start(g, ring[r], 2, q);
				break;
			}
			if (st != 0)
				fail_msg(
				    "%s of 0 elements, NULL buffers, at rank %u: start %d (%s)",
				    gop_names[op], r, st, keel_strerror(st));
		}
		expect_all(&c, reqs, 0, gop_names[op]);
	}
	groups_free(&c, &wg);
	cluster_fini(&c);
}

/* keel_req_test_info with too few places for the members: -ENOSPC, and the request is kept
 * until asked with enough; then it is released. keel_req_wait without a waiter: -EINVAL. */
static void test_group_req_info_and_wait(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, tweak), 0);
	groups_world(&c, &wg);
	static int32_t in[3][16], out[3][16];
	struct keel_req *reqs[CLUSTER_MAX] = {NULL};
	for (uint32_t r = 0; r < 3; r++) {
		for (int i = 0; i < 16; i++)
			in[r][i] = (int32_t)(r * 100) + i;
		assert_int_equal(keel_group_allreduce_start(wg.g[r], in[r], out[r], 16, KEEL_I32,
							    KEEL_SUM, &reqs[r]),
				 0);
	}
	assert_int_equal(keel_req_wait(reqs[0], NULL), -EINVAL); /* no waiter configured */
	uint32_t members[3] = {9, 9, 9};
	struct keel_req_info info;
	int st = -EINPROGRESS;
	for (int i = 0; i < 100000 && st == -EINPROGRESS; i++) {
		cluster_round(&c);
		st = keel_req_test_info(reqs[0], &info, members, 2);
	}
	assert_int_equal(st, -ENOSPC);
	assert_int_equal(keel_req_test_info(reqs[0], &info, members, 2), -ENOSPC); /* kept */
	assert_int_equal(keel_req_test_info(reqs[0], &info, members, 3), 0);
	assert_int_equal(info.member_count, 3);
	assert_int_equal(info.epoch, view_epoch(&c, 0));
	assert_int_equal(info.restarts, 0);
	assert_int_equal(info.algo, KEEL_GALGO_DIRECT); /* small, in a group of 3 */
	for (uint32_t r = 0; r < 3; r++)
		assert_int_equal(members[r], r);
	reqs[0] = NULL;
	int rc[CLUSTER_MAX];
	assert_int_equal(cluster_wait_reqs(&c, reqs, rc, ROUNDS_MAX), 0);
	for (uint32_t r = 0; r < 3; r++) {
		if (r > 0)
			assert_int_equal(rc[r], 0);
		for (int i = 0; i < 16; i++)
			assert_int_equal(out[r][i], 300 + 3 * i);
	}
	groups_free(&c, &wg);
	cluster_fini(&c);
}

/* CPU stand-ins (keel/device_cpu.h) for ranks 0..world-1: work finishes late and out of
 * order (seeded). */
static void devices_init(uint32_t world)
{
	for (uint32_t r = 0; r < world; r++) {
		struct keel_device_cpu_config dc;
		keel_device_cpu_config_default(&dc);
		dc.seed = g_seed * 131 + r + 1;
		size_t sz = keel_device_cpu_storage_size(&dc);
		assert_true(sz > 0);
		g_dev_mem[r] = calloc(1, sz);
		assert_int_equal(keel_device_cpu_init(&g_dev[r], g_dev_mem[r], sz, &dc), 0);
	}
}

static void devices_fini(uint32_t world)
{
	for (uint32_t r = 0; r < world; r++) {
		struct keel_device_cpu_stats st;
		keel_device_cpu_stats(&g_dev[r], &st);
		assert_int_equal(st.used, 0); /* nothing left queued */
		g_dev[r].ops->fini(g_dev[r].state);
		free(g_dev_mem[r]);
	}
}

/* Every operation on device buffers (keel_group_use_device) of a CPU stand-in whose work
 * finishes late and out of order, in chunks of KEEL_DEVICE_CHUNK_MIN: every dtype and
 * reduction, the boundary sizes, in and out of place, over the whole job and over split
 * groups at once; exact, nothing written outside the results, the devices' queues empty. */
static void test_group_device_every_op(void **state)
{
	(void)state;
	g_runs = 0;
	uint32_t wrong[GOP_COUNT] = {0}, failed = 0; /* every operation gets its say */
	for (uint32_t world = 2; world <= 4; world++) {
		struct cluster c;
		struct groups wg, sg;
		const struct keel_device *devs[CLUSTER_MAX];
		devices_init(world);
		g_devices = true;
		assert_int_equal(cluster_init(&c, world, NULL, g_seed, tweak), 0);
		g_devices = false;
		for (uint32_t r = 0; r < world; r++)
			devs[r] = &g_dev[r];
		groups_world(&c, &wg);
		uint32_t color[CLUSTER_MAX], key[CLUSTER_MAX];
		for (uint32_t r = 0; r < world; r++) {
			color[r] = r % 2;
			key[r] = world - r;
		}
		groups_split(&c, wg.g, color, key, &sg);
		for (int op = 0; op < GOP_COUNT; op++)
			for (int dt = 0; dt < KEEL_DTYPE_COUNT; dt++) {
				size_t sizes[KEEL_CHECK_SIZES];
				keel_check_sizes(sizes, world, (g_mtu - 56) / keel_dtype_size(dt),
						 3000);
				for (uint32_t k = 0; k < KEEL_CHECK_SIZES; k++) {
					struct gop_spec s = {
					    .op = op,
					    .dt = dt,
					    .redop = (enum keel_redop)((k + (uint32_t)dt) % 5),
					    .count = sizes[k],
					    .root = k,
					    .in_place = gop_has_in_place(op) && k % 2 == 0,
					    .null_others = k % 3 == 0,
					    .salt = g_seed * 1000003u + g_salt++};
					/* the split groups on odd sizes, if they have peers */
					bool split = k % 2 == 1 && (world == 4 || !gop_is_p2p(op));
					uint32_t bad = grun_run_on(&c, split ? sg.g : wg.g, &s,
								   ROUNDS_MAX, devs);
					g_runs++;
					wrong[op] += bad != 0;
				}
			}
		groups_free(&c, &sg);
		groups_free(&c, &wg);
		cluster_fini(&c);
		devices_fini(world);
	}
	print_message("%" PRIu64 " runs checked\n", g_runs);
	for (int op = 0; op < GOP_COUNT; op++)
		if (wrong[op] != 0) {
			print_error("device buffers: %s wrong in %u runs\n", gop_names[op],
				    wrong[op]);
			failed++;
		}
	if (failed != 0)
		fail_msg("%u operations wrong on device buffers", failed);
}

/* keel_group_use_device's errors: a node without a device, a stage not 64-byte aligned, an
 * operation pending (-EBUSY); a stage too small for an operation: its start says -ENOSPC and
 * nothing takes a place in the sequence. */
static void test_group_device_errors(void **state)
{
	(void)state;
	struct cluster c;
	struct groups wg;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, tweak), 0); /* no device */
	groups_world(&c, &wg);
	static uint8_t stage[4096] __attribute__((aligned(64)));
	assert_int_equal(keel_group_use_device(wg.g[0], stage, sizeof(stage)), -EINVAL);
	assert_int_equal(keel_group_use_device(NULL, stage, sizeof(stage)), -EINVAL);
	groups_free(&c, &wg);
	cluster_fini(&c);
	devices_init(2);
	g_devices = true;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, tweak), 0);
	g_devices = false;
	groups_world(&c, &wg);
	assert_int_equal(keel_group_use_device(wg.g[0], stage + 8, 1024), -EINVAL);
	struct keel_req *reqs[CLUSTER_MAX] = {NULL};
	assert_int_equal(keel_group_barrier_start(wg.g[0], &reqs[0]), 0);
	assert_int_equal(keel_group_use_device(wg.g[0], stage, sizeof(stage)), -EBUSY);
	assert_int_equal(keel_group_barrier_start(wg.g[1], &reqs[1]), 0);
	expect_all(&c, reqs, 0, "barrier");
	for (uint32_t r = 0; r < 2; r++) {
		assert_int_equal(g_dev[r].ops->host_register(g_dev[r].state, stage, sizeof(stage)),
				 0);
		assert_int_equal(keel_group_use_device(wg.g[r], stage, sizeof(stage)), 0);
	}
	static float big[2048]; /* 8 KiB in and out: more than the stage holds */
	struct keel_req *q;
	assert_int_equal(
	    keel_group_allreduce_start(wg.g[0], big, big + 1024, 1024, KEEL_F32, KEEL_SUM, &q),
	    -ENOSPC);
	for (uint32_t r = 0; r < 2; r++) {
		assert_int_equal(keel_group_use_device(wg.g[r], NULL, 0), 0);
		assert_int_equal(g_dev[r].ops->host_unregister(g_dev[r].state, stage), 0);
	}
	struct gop_spec s = {.op = GOP_ALLGATHER, .dt = KEEL_F32, .count = 100};
	run_spec(&c, wg.g, &s); /* the refused start took no place in the sequence */
	groups_free(&c, &wg);
	cluster_fini(&c);
	devices_fini(2);
}

/* The algorithm each operation reports (keel_req_info.algo), as group.h says it is chosen:
 * small AllGather and AllReduce by recursive doubling in groups of a power of two from 8 (and
 * a small in-place AllReduce in any power of two), else direct out of place and a ring in
 * place; large ones (above rd_max_bytes) and large Broadcasts by a ring; the pairwise and
 * rooted ones direct. */
static void test_group_algo_choice(void **state)
{
	(void)state;
	const size_t small = 4, large = KEEL_RD_MAX_BYTES_DEFAULT / 4 + 1; /* f32 */
	uint32_t wrong = 0;
	const struct {
		uint32_t world;
		enum gop op;
		size_t count;
		bool in_place;
		enum keel_group_algo algo;
	} cases[] = {
	    {8, GOP_ALLGATHER, small, false, KEEL_GALGO_RD},
	    {8, GOP_ALLGATHER, large, false, KEEL_GALGO_RING},
	    {8, GOP_ALLGATHERV, small, false, KEEL_GALGO_DIRECT},
	    {8, GOP_ALLREDUCE, small, false, KEEL_GALGO_RD},
	    {8, GOP_ALLREDUCE, large, false, KEEL_GALGO_RING},
	    {4, GOP_ALLGATHER, small, false, KEEL_GALGO_DIRECT},
	    {4, GOP_ALLREDUCE, small, false, KEEL_GALGO_DIRECT},
	    {4, GOP_ALLREDUCE, small, true, KEEL_GALGO_RD},
	    {4, GOP_ALLREDUCE, large, true, KEEL_GALGO_RING},
	    {3, GOP_ALLREDUCE, small, true, KEEL_GALGO_RING}, /* direct would overwrite it */
	    {4, GOP_BROADCAST, small, false, KEEL_GALGO_DIRECT},
	    {4, GOP_BROADCAST, large, false, KEEL_GALGO_RING},
	    {4, GOP_REDUCE_SCATTER, large, false, KEEL_GALGO_DIRECT},
	    {4, GOP_ALLTOALL, large, false, KEEL_GALGO_DIRECT},
	    {4, GOP_GATHER, small, false, KEEL_GALGO_DIRECT},
	    {4, GOP_SCATTER, small, false, KEEL_GALGO_DIRECT},
	    {4, GOP_REDUCE, large, false, KEEL_GALGO_DIRECT},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct cluster c;
		struct groups wg;
		g_mtu = KEEL_MTU_DEFAULT;
		assert_int_equal(cluster_init(&c, cases[k].world, NULL, g_seed, tweak), 0);
		g_mtu = 1024;
		groups_world(&c, &wg);
		struct gop_spec s = {.op = cases[k].op,
				     .dt = KEEL_F32,
				     .redop = KEEL_SUM,
				     .count = cases[k].count,
				     .in_place = cases[k].in_place,
				     .root = 1,
				     .check_algo = true,
				     .algo = cases[k].algo,
				     .salt = g_seed + k};
		wrong += grun_run(&c, wg.g, &s, ROUNDS_MAX) != 0;
		groups_free(&c, &wg);
		cluster_fini(&c);
	}
	if (wrong != 0)
		fail_msg("%u cases ran otherwise", wrong);
}

int main(void)
{
	g_seed = cluster_seed(1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_group_world_info),
	    cmocka_unit_test(test_group_bad_arguments),
	    cmocka_unit_test(test_group_count_zero_null_buffers),
	    cmocka_unit_test(test_group_req_info_and_wait),
	    cmocka_unit_test(test_group_barrier_waits_for_every_member),
	    cmocka_unit_test(test_group_busy_and_free),
	    cmocka_unit_test(test_group_mismatched_collectives),
	    cmocka_unit_test(test_group_p2p_mismatch),
	    cmocka_unit_test(test_group_p2p_ordered_per_group_and_peer),
	    cmocka_unit_test(test_group_split_color_none_key_ties_group_of_one),
	    cmocka_unit_test(test_group_split_of_a_split),
	    cmocka_unit_test(test_group_from_ranks),
	    cmocka_unit_test(test_group_from_ranks_bad_arguments),
	    cmocka_unit_test(test_group_streams_independent),
	    cmocka_unit_test(test_group_blocking_forms),
	    cmocka_unit_test(test_group_every_op_udp),
	    cmocka_unit_test(test_group_every_op_shm),
	    cmocka_unit_test(test_group_split_two_groups_at_once),
	    cmocka_unit_test(test_group_algo_choice),
	    cmocka_unit_test(test_group_device_errors),
	    cmocka_unit_test(test_group_device_every_op),
	};
	return cmocka_run_group_tests_name("group", tests, NULL, NULL);
}
