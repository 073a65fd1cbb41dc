/* Group operations (keel/group.h) under failures, 4 nodes on loopback UDP and a manual clock:
 * a rank killed (never polled again) during each operation and during a split, seeded (SEED=n
 * replays one trial; KEEL_TEST_TIER=long, or the binary run by hand, runs 50 trials per
 * operation, the fast tier 6), over the whole job, the job in reverse order, or two pairs
 * with the victim in one, on host or device buffers (CPU stand-in); Send/Recv to a dead peer;
 * a rank paused past the detector; loss underneath. What must hold: every survivor's request ends
 * within keel_op_bound_ns; the outcome is the same at every surviving member of a group; a result
 * reported as success is exact over the members reported; rank-indexed results are never
 * shifted (KEEL_EVIEWCHANGED instead); a group that held no dead rank is not disturbed. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster_group.h"
#include "cluster_int.h"
#include "keel/device_cpu.h"

#define WORLD	   4
#define FAIL_SPLIT GOP_COUNT  /* keel_group_split_start, in the kill trials beside the others */
#define HB	   1000000ull /* the cluster's heartbeat interval: 1 ms */

static uint64_t g_seed;
static bool g_seed_given;
static uint32_t g_miss_limit = KEEL_MISS_LIMIT_DEFAULT;
static bool g_devices; /* nodes built with a CPU stand-in device each */
static struct keel_device g_dev[WORLD];
static void *g_dev_mem[WORLD];

static void tweak(struct keel_config *cfg)
{
	cfg->mtu = 2048;
	/* bounds every wait: a member that never starts is given up after 200 ms, so that
	 * keel_op_bound_ns is about 2 s of the manual clock (200 000 rounds) */
	cfg->entry_timeout_ns = 200000000ull;
	cfg->miss_limit = g_miss_limit;
	if (g_devices) {
		cfg->device = &g_dev[cfg->rank];
		cfg->device_chunk_bytes = KEEL_DEVICE_CHUNK_MIN;
	}
}

static void devices_init(uint64_t seed)
{
	for (uint32_t r = 0; r < WORLD; r++) {
		struct keel_device_cpu_config dc;
		keel_device_cpu_config_default(&dc);
		dc.seed = seed * 131 + r + 1;
		size_t sz = keel_device_cpu_storage_size(&dc);
		g_dev_mem[r] = calloc(1, sz);
		assert_int_equal(keel_device_cpu_init(&g_dev[r], g_dev_mem[r], sz, &dc), 0);
	}
}

/* Whether the live ranks' devices have nothing queued once every request ended (work left
 * queued would land in a stage the next operation uses). A dead rank's device keeps what it
 * had queued: each is dropped whole. */
static bool devices_fini(const struct cluster *c)
{
	bool ok = true;
	for (uint32_t r = 0; r < WORLD; r++) {
		struct keel_device_cpu_stats st;
		keel_device_cpu_stats(&g_dev[r], &st);
		if (!c->paused[r] && st.used != 0) {
			print_error(
			    "rank %u: %u pieces of device work still queued after the end\n", r,
			    st.used);
			ok = false;
		}
		g_dev[r].ops->fini(g_dev[r].state);
		free(g_dev_mem[r]);
	}
	return ok;
}

/* Whether the long scenarios run: the long tier, "all", or the binary run by hand. */
static bool long_tier(void)
{
	const char *tier = getenv("KEEL_TEST_TIER");
	return tier == NULL || strcmp(tier, "long") == 0 || strcmp(tier, "all") == 0;
}

/* A scenario of the fast tier only (the long tier runs the trials alone). */
static bool fast_scenario_here(void)
{
	const char *tier = getenv("KEEL_TEST_TIER");
	return tier == NULL || strcmp(tier, "long") != 0;
}

static uint64_t rng_next(uint64_t *s)
{
	*s = grun_mix(*s + 0x9E3779B97F4A7C15ull);
	return *s;
}

static void split_start_all(struct cluster *c, struct keel_group *const *parent,
			    const uint32_t *color, const uint32_t *key, struct groups *out,
			    struct keel_req **reqs)
{
	memset(out, 0, sizeof(*out));
	for (uint32_t r = 0; r < c->world; r++) {
		reqs[r] = NULL;
		if (parent[r] == NULL || c->paused[r])
			continue;
		out->mem[r] = group_mem(c, r, &out->len);
		assert_int_equal(keel_group_split_start(parent[r], color[r], key[r], out->mem[r],
							out->len, &out->g[r], &reqs[r]),
				 0);
	}
}

static void groups_split(struct cluster *c, struct keel_group *const *parent, const uint32_t *color,
			 const uint32_t *key, struct groups *out)
{
	struct keel_req *reqs[CLUSTER_MAX];
	int rc[CLUSTER_MAX];
	split_start_all(c, parent, color, key, out, reqs);
	assert_int_equal(cluster_wait_reqs(c, reqs, rc, 1000000), 0);
	for (uint32_t r = 0; r < c->world; r++)
		if (parent[r] != NULL && !c->paused[r])
			assert_int_equal(rc[r], 0);
}

/* keel_group_free at every live rank (a dead rank's group may still hold its request); the
 * memory goes only once the nodes are gone (groups_mem_free, after cluster_fini). */
static void groups_release(struct cluster *c, struct groups *gs)
{
	for (uint32_t r = 0; r < c->world; r++)
		if (gs->g[r] != NULL && !c->paused[r])
			assert_int_equal(keel_group_free(gs->g[r]), 0);
}

static void groups_mem_free(struct groups *gs)
{
	for (uint32_t r = 0; r < CLUSTER_MAX; r++)
		free(gs->mem[r]);
	memset(gs, 0, sizeof(*gs));
}

static uint32_t bound_rounds(const struct cluster *c, uint64_t ns)
{
	return (uint32_t)(ns / c->step_ns) + 1000;
}

/* Rounds until every live rank's view has `count` members (false if not within `rounds`). */
static bool views_settle(struct cluster *c, uint32_t count, uint32_t rounds)
{
	for (uint32_t i = 0; i < rounds; i++) {
		bool all = true;
		for (uint32_t r = 0; r < c->world && all; r++) {
			struct keel_view v;
			uint32_t m[CLUSTER_MAX];
			if (c->paused[r])
				continue;
			all = keel_view_get(c->node[r], &v, m, CLUSTER_MAX) >= 0 &&
			      v.member_count == count && v.self_member;
		}
		if (all)
			return true;
		cluster_round(c);
	}
	return false;
}

/* ---- one kill trial ---- */

/* How a trial's groups are made: the whole job; the job in reverse order (a split with keys
 * reversed: group ranks shift the other way); two pairs, the victim in the second. */
enum layout { LAYOUT_WORLD = 0, LAYOUT_REVERSED, LAYOUT_PAIRS };
static const char *const layout_names[] = {"world", "reversed world", "pairs [0 1] [2 3]"};

struct trial {
	uint64_t seed;
	int op; /* enum gop, or FAIL_SPLIT */
	enum layout layout;
	uint32_t victim, delay_rounds;
	bool never_starts; /* the victim dies before it starts the operation */
	bool device;	   /* buffers on each node's device (keel_group_use_device) */
	struct gop_spec s;
	/* what the survivors saw */
	int rc[CLUSTER_MAX];
	uint64_t end_ns[CLUSTER_MAX];
	struct keel_req_info info[CLUSTER_MAX];
	uint32_t ran[CLUSTER_MAX][CLUSTER_MAX];
	uint64_t t0, t_kill;
	int sample; /* a survivor of the victim's group, for the tally (-1: none) */
	bool mid;   /* some survivor's request was still running when the victim died */
};

struct tally {
	uint32_t trials, failed, mid, full, fewer, viewchanged, peergone;
};

static void trial_print(const struct trial *t)
{
	const char *name = t->op == FAIL_SPLIT ? "split" : gop_names[t->op];
	print_error("SEED=%" PRIu64 ": %s, %s, %s %zu, %s, root %u, %s buffers; rank %u killed %s "
		    "(after %u rounds)\n",
		    t->seed, name, layout_names[t->layout], keel_dtype_name(t->s.dt), t->s.count,
		    t->s.in_place ? "in place" : "out of place", t->s.root,
		    t->device ? "device" : "host", t->victim,
		    t->never_starts ? "before it started" : "while in it", t->delay_rounds);
}

static void trial_pick(struct trial *t, int op, uint64_t seed)
{
	uint64_t s = seed * 7919 + (uint64_t)op;
	memset(t, 0, sizeof(*t));
	t->seed = seed;
	t->op = op;
	t->layout = (enum layout)(seed % 3); /* consecutive seeds: every layout, */
	t->device = seed / 3 % 2 == 1;	     /* on host and on device buffers */
	t->victim = (uint32_t)(rng_next(&s) % WORLD);
	if (t->layout == LAYOUT_PAIRS)
		t->victim = 2 + t->victim % 2;
	t->never_starts = rng_next(&s) % 8 == 0;
	t->delay_rounds = (uint32_t)(rng_next(&s) % 12); /* most operations take 5 to 40 */
	const size_t counts[] = {1, 700, 2 * (2048 - 56) + 1, 20000, 60000};
	t->s.op = op == FAIL_SPLIT ? GOP_BARRIER : (enum gop)op;
	t->s.dt = (enum keel_dtype)(rng_next(&s) % KEEL_DTYPE_COUNT);
	t->s.redop = (enum keel_redop)(rng_next(&s) % KEEL_REDOP_COUNT);
	t->s.count = counts[rng_next(&s) % 5];
	t->s.in_place = gop_has_in_place(t->s.op) && rng_next(&s) % 2 == 0;
	t->s.root = (uint32_t)(rng_next(&s) % WORLD);
	t->s.null_others = rng_next(&s) % 2 == 0;
	t->s.salt = seed * 1000003u + (uint64_t)op;
}

/* The groups of a layout (built before anything dies). */
static void trial_groups(struct cluster *c, enum layout layout, struct groups *wg,
			 struct groups *tg, struct keel_group **use)
{
	groups_world(c, wg);
	uint32_t color[WORLD], key[WORLD];
	for (uint32_t r = 0; r < WORLD; r++) {
		color[r] = layout == LAYOUT_PAIRS ? r / 2 : 0;
		key[r] = layout == LAYOUT_REVERSED ? WORLD - r : 0;
	}
	memset(tg, 0, sizeof(*tg));
	if (layout != LAYOUT_WORLD)
		groups_split(c, wg->g, color, key, tg);
	for (uint32_t r = 0; r < WORLD; r++)
		use[r] = layout == LAYOUT_WORLD ? wg->g[r] : tg->g[r];
}

/* May a survivor of a group that lost `victim` end so (group.h's rules)? */
static bool outcome_allowed(const struct trial *t, const struct gmember *m, int rc,
			    uint32_t member_count)
{
	bool root_dead = gop_is_rooted(t->s.op) && m->members[m->root] == t->victim;
	if (rc == 0 && member_count == m->n)
		return true; /* every survivor had its result before the death */
	if (rc == 0 && member_count == m->n - 1)
		return (t->s.op == GOP_ALLREDUCE || t->s.op == GOP_BARRIER ||
			((t->s.op == GOP_REDUCE || t->s.op == GOP_BROADCAST) && !root_dead));
	/* in place, an AllReduce whose input was written cannot run again; on device buffers
	 * the staged input stays, in place too (group.h) */
	if (rc == KEEL_EVIEWCHANGED)
		return gop_is_rank_indexed(t->s.op) || root_dead ||
		       (t->s.op == GOP_ALLREDUCE && t->s.in_place && !t->device);
	return false;
}

/* Does member m's batch have the victim as a peer? */
static bool p2p_involved(const struct trial *t, const struct gmember *m)
{
	for (uint32_t i = 0; i < m->item_count; i++)
		if (m->members[m->items[i].peer] == t->victim)
			return true;
	return false;
}

/* Were the members of m's group at the start, less the victim, what `ran` lists? */
static bool members_less_victim(const struct trial *t, const struct gmember *m, const uint32_t *ran,
				uint32_t count)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < m->n; i++) {
		if (m->members[i] == t->victim)
			continue;
		if (k >= count || ran[k] != m->members[i])
			return false;
		k++;
	}
	return k == count;
}

/* One survivor's ending of a collective or batch: in time, allowed, exact. */
static bool check_survivor(const struct trial *t, const struct grun *run, uint32_t r,
			   const struct keel_config *cfg)
{
	const struct gmember *m = &run->m[r];
	int rc = t->rc[r];
	uint32_t cnt = rc == 0 ? t->info[r].member_count : 0;
	bool lost = false;
	for (uint32_t i = 0; i < m->n; i++)
		lost |= m->members[i] == t->victim;
	if (t->end_ns[r] - t->t0 > keel_op_bound_ns(cfg)) {
		print_error("rank %u ended %.1f ms after the start: past keel_op_bound_ns (%.1f)\n",
			    r, (double)(t->end_ns[r] - t->t0) / 1e6,
			    (double)keel_op_bound_ns(cfg) / 1e6);
		return false;
	}
	bool ok;
	if (gop_is_p2p(t->s.op)) {
		bool inv = p2p_involved(t, m);
		ok = rc == 0 || (inv && rc == KEEL_EPEERGONE);
		if (rc == KEEL_EPEERGONE &&
		    t->end_ns[r] - t->t_kill > keel_recovery_bound_ns(cfg) + 2 * HB / 100) {
			print_error("rank %u: KEEL_EPEERGONE %.2f ms after the death, past "
				    "keel_recovery_bound_ns (%.2f)\n",
				    r, (double)(t->end_ns[r] - t->t_kill) / 1e6,
				    (double)keel_recovery_bound_ns(cfg) / 1e6);
			return false;
		}
		cnt = m->n; /* a batch names no members: its data is checked whole */
	} else if (!lost) {
		ok = rc == 0 && cnt == m->n; /* a group that held no dead rank: undisturbed */
	} else {
		ok = outcome_allowed(t, m, rc, cnt);
	}
	if (ok && rc == 0 && !gop_is_p2p(t->s.op))
		ok = cnt == m->n ? grun_same_members(t->ran[r], m->members, m->n)
				 : members_less_victim(t, m, t->ran[r], cnt);
	if (!ok) {
		print_error("rank %u (its group %s the victim) ended %d (%s) over %u members\n", r,
			    lost ? "held" : "did not hold", rc, keel_strerror(rc), cnt);
		return false;
	}
	if (rc != 0)
		return true;
	return grun_check(run, r, gop_is_p2p(t->s.op) ? m->members : t->ran[r], cnt);
}

/* The outcome is the same at every surviving member of a group (collectives; a batch is
 * between two members). */
static bool check_same(const struct trial *t, const struct grun *run, const struct cluster *c)
{
	for (uint32_t r = 0; r < c->world; r++)
		for (uint32_t q = r + 1; q < c->world; q++) {
			const struct gmember *a = &run->m[r], *b = &run->m[q];
			if (a->g == NULL || b->g == NULL || c->paused[r] || c->paused[q] ||
			    a->n != b->n || !grun_same_members(a->members, b->members, a->n))
				continue;
			bool same = t->rc[r] == t->rc[q];
			if (same && t->rc[r] == 0)
				same = t->info[r].member_count == t->info[q].member_count &&
				       t->info[r].epoch == t->info[q].epoch &&
				       grun_same_members(t->ran[r], t->ran[q],
							 t->info[r].member_count);
			if (!same) {
				print_error("ranks %u and %u of one group ended differently: %d "
					    "(%s, %u members, epoch %u) and %d (%s, %u members, "
					    "epoch %u)\n",
					    r, q, t->rc[r], keel_strerror(t->rc[r]),
					    t->info[r].member_count, t->info[r].epoch, t->rc[q],
					    keel_strerror(t->rc[q]), t->info[q].member_count,
					    t->info[q].epoch);
				return false;
			}
		}
	return true;
}

/* After the view dropped the victim: each survivor's group is its old members less the
 * victim, in the same order, same id; the step runs again on it, exact. */
static bool check_after(struct trial *t, struct grun *run, struct cluster *c,
			struct keel_group **use, const uint64_t *id)
{
	const struct keel_config *cfg = &c->cfg[0];
	if (!views_settle(c, WORLD - 1, bound_rounds(c, 4 * keel_recovery_bound_ns(cfg)))) {
		print_error("the survivors' views did not drop rank %u\n", t->victim);
		return false;
	}
	for (uint32_t r = 0; r < c->world; r++) {
		const struct gmember *m = &run->m[r];
		if (use[r] == NULL || c->paused[r])
			continue;
		struct keel_group_info gi;
		uint32_t ranks[CLUSTER_MAX];
		int n = keel_group_info(use[r], &gi, ranks, CLUSTER_MAX);
		bool lost = !members_less_victim(t, m, m->members, m->n);
		bool ok = n >= 0 && gi.size == (uint32_t)n && gi.id == id[r] &&
			  gi.created_size == m->n && gi.self_member && ranks[gi.rank] == r &&
			  (lost ? members_less_victim(t, m, ranks, gi.size)
				: grun_same_members(ranks, m->members, m->n));
		if (!ok) {
			print_error("rank %u: its group after the death: %d members (size %u, rank "
				    "%u, created %u, member %d, id %s)\n",
				    r, n, gi.size, gi.rank, gi.created_size, gi.self_member,
				    gi.id == id[r] ? "kept" : "changed");
			return false;
		}
	}
	struct gop_spec again = t->s;
	again.salt ^= 0xABCDEF;
	struct keel_group *live[CLUSTER_MAX] = {NULL};
	for (uint32_t r = 0; r < c->world; r++) {
		struct keel_group_info gi;
		/* a batch needs a peer: a group left with one member sits it out */
		if (use[r] != NULL && !c->paused[r] && keel_group_info(use[r], &gi, NULL, 0) > 0 &&
		    (gi.size > 1 || !gop_is_p2p(again.op)))
			live[r] = use[r];
	}
	const struct keel_device *devs[CLUSTER_MAX];
	for (uint32_t r = 0; r < WORLD; r++)
		devs[r] = &g_dev[r];
	uint32_t bad = grun_run_on(c, live, &again, bound_rounds(c, keel_op_bound_ns(cfg)),
				   t->device ? devs : NULL);
	if (bad != 0)
		print_error("the step run again on the survivors failed at %u of them\n", bad);
	return bad == 0;
}

/* Start t's operation at every member (the victim too unless it never starts), let it run
 * t->delay_rounds rounds, kill the victim, and wait for the survivors. */
static bool trial_collective(struct trial *t, struct cluster *c, struct keel_group **use)
{
	static struct grun run;
	const struct keel_config *cfg = &c->cfg[0];
	struct keel_req *reqs[CLUSTER_MAX] = {NULL};
	uint64_t id[CLUSTER_MAX] = {0};
	static struct gdev dv[CLUSTER_MAX];
	grun_setup(&run, c, use, &t->s);
	for (uint32_t r = 0; r < c->world; r++) {
		struct keel_group_info gi;
		assert_true(keel_group_info(use[r], &gi, NULL, 0) > 0);
		id[r] = gi.id;
		if (t->device)
			assert_int_equal(gdev_attach(&run, r, &dv[r], &g_dev[r]), 0);
	}
	if (t->never_starts)
		c->paused[t->victim] = true;
	t->t0 = c->now_ns;
	for (uint32_t r = 0; r < c->world; r++) {
		if (c->paused[r])
			continue;
		assert_int_equal(grun_start(&run, r), 0);
		reqs[r] = run.m[r].req;
	}
	/* the rounds before the death: what ends there is recorded as it ends */
	if (!t->never_starts)
		(void)cluster_wait_reqs_info(c, reqs, t->rc, t->info, t->ran, t->end_ns,
					     t->delay_rounds);
	c->paused[t->victim] = true;
	t->t_kill = t->never_starts ? t->t0 : c->now_ns;
	reqs[t->victim] = NULL;
	for (uint32_t r = 0; r < c->world; r++)
		t->mid |= reqs[r] != NULL; /* the death came while a survivor's was running */
	if (cluster_wait_reqs_info(c, reqs, t->rc, t->info, t->ran, t->end_ns,
				   bound_rounds(c, keel_op_bound_ns(cfg))) != 0) {
		for (uint32_t r = 0; r < c->world; r++)
			if (reqs[r] != NULL)
				print_error(
				    "rank %u: not ended %.1f ms after the start (bound %.1f)\n", r,
				    (double)(c->now_ns - t->t0) / 1e6,
				    (double)keel_op_bound_ns(cfg) / 1e6);
		return false; /* its buffers stay allocated: keel may still write them */
	}
	for (uint32_t r = 0; r < c->world && t->device; r++) {
		if (!c->paused[r]) {
			gdev_detach(&run, r,
				    &dv[r]); /* the device's bytes, checked as the host's */
			continue;
		}
		dv[r].mem.dev = NULL; /* the dead rank's device still holds its work */
		assert_int_equal(guarded_mem_unmap(&dv[r].mem), 0);
		free(dv[r].stage);
	}
	bool ok = true;
	t->sample = -1;
	for (uint32_t r = 0; r < c->world && ok; r++) {
		if (c->paused[r])
			continue;
		ok = check_survivor(t, &run, r, cfg);
		if (!members_less_victim(t, &run.m[r], run.m[r].members, run.m[r].n))
			t->sample = (int)r;
	}
	ok = ok && (gop_is_p2p(t->s.op) || check_same(t, &run, c));
	ok = ok && check_after(t, &run, c, use, id);
	grun_free(&run);
	return ok;
}

static uint32_t split_color(const struct trial *t, uint32_t r)
{
	return t->layout == LAYOUT_PAIRS ? 5 : r % 2;
}

/* Each survivor's new group: its color's members of the parent, by key (10 - job rank: job
 * ranks descending), the victim left out; the same id at each. */
static bool check_split_groups(const struct trial *t, struct cluster *c,
			       struct keel_group *const *parent, struct keel_group *const *ng)
{
	for (uint32_t r = 0; r < c->world; r++) {
		if (parent[r] == NULL || c->paused[r])
			continue;
		uint32_t pm[CLUSTER_MAX], want[CLUSTER_MAX], ranks[CLUSTER_MAX], k = 0;
		struct keel_group_info pi, gi;
		int pn = keel_group_info(parent[r], &pi, pm, CLUSTER_MAX);
		for (uint32_t j = WORLD; j-- > 0;)
			for (int i = 0; i < pn; i++)
				if (pm[i] == j && split_color(t, j) == split_color(t, r))
					want[k++] = j;
		int n = ng[r] != NULL ? keel_group_info(ng[r], &gi, ranks, CLUSTER_MAX) : -1;
		if (n != (int)k || !grun_same_members(ranks, want, k)) {
			print_error("rank %u: its new group has %d members, want %u:", r, n, k);
			for (int i = 0; i < n; i++)
				print_error(" %u", ranks[i]);
			print_error("\n");
			return false;
		}
		struct keel_group_info first;
		assert_true(keel_group_info(ng[want[0]], &first, NULL, 0) > 0);
		if (first.id != gi.id) {
			print_error("ranks %u and %u of one new group: different ids\n", r,
				    want[0]);
			return false;
		}
	}
	return true;
}

/* A split with a member killed during it: every survivor of the parent ends the same way,
 * 0 or KEEL_EVIEWCHANGED (then a split again over the survivors succeeds); the new groups
 * are right and their operations exact. */
static bool trial_split(struct trial *t, struct cluster *c, struct keel_group **use,
			struct groups *ng, struct groups *again)
{
	const struct keel_config *cfg = &c->cfg[0];
	struct keel_req *reqs[CLUSTER_MAX];
	uint32_t color[WORLD], key[WORLD];
	bool ok = true;
	for (uint32_t r = 0; r < WORLD; r++) {
		color[r] = split_color(t, r);
		key[r] = 10 - r;
	}
	if (t->never_starts)
		c->paused[t->victim] = true;
	t->t0 = c->now_ns;
	split_start_all(c, use, color, key, ng, reqs);
	if (!t->never_starts)
		(void)cluster_wait_reqs_info(c, reqs, t->rc, NULL, NULL, t->end_ns,
					     t->delay_rounds);
	c->paused[t->victim] = true;
	reqs[t->victim] = NULL;
	for (uint32_t r = 0; r < c->world; r++)
		t->mid |= reqs[r] != NULL;
	if (cluster_wait_reqs_info(c, reqs, t->rc, NULL, NULL, t->end_ns,
				   bound_rounds(c, keel_op_bound_ns(cfg))) != 0) {
		print_error("a split did not end within keel_op_bound_ns\n");
		return false;
	}
	bool redo = false;
	for (uint32_t r = 0; r < WORLD && ok; r++) {
		if (c->paused[r])
			continue;
		ok = t->end_ns[r] - t->t0 <= keel_op_bound_ns(cfg) &&
		     (t->rc[r] == 0 || t->rc[r] == KEEL_EVIEWCHANGED);
		redo |= t->rc[r] != 0;
		if (!ok)
			print_error("rank %u: split ended %d (%s) after %.1f ms\n", r, t->rc[r],
				    keel_strerror(t->rc[r]), (double)(t->end_ns[r] - t->t0) / 1e6);
	}
	static struct grun parent_run;
	struct gop_spec none = {.op = GOP_BARRIER};
	grun_setup(&parent_run, c, use, &none); /* for its members' lists */
	ok = ok && check_same(t, &parent_run, c);
	grun_free(&parent_run);
	ok = ok && views_settle(c, WORLD - 1, bound_rounds(c, 4 * keel_recovery_bound_ns(cfg)));
	struct groups *made = ng;
	if (ok && redo) { /* KEEL_EVIEWCHANGED: the parent has its new membership; again */
		groups_split(c, use, color, key, again);
		made = again;
	}
	ok = ok && check_split_groups(t, c, use, made->g);
	struct gop_spec s = {.op = GOP_ALLREDUCE,
			     .dt = t->s.dt,
			     .redop = t->s.redop,
			     .count = t->s.count,
			     .salt = t->s.salt};
	ok = ok && grun_run(c, made->g, &s, bound_rounds(c, keel_op_bound_ns(cfg))) == 0;
	groups_release(c, ng);
	groups_release(c, again);
	return ok;
}

static bool trial_run(struct trial *t, struct tally *tally)
{
	struct cluster c;
	struct groups wg, tg, ng = {0}, again = {0};
	struct keel_group *use[CLUSTER_MAX] = {NULL};
	if (t->device)
		devices_init(t->seed);
	g_devices = t->device;
	assert_int_equal(cluster_init(&c, WORLD, NULL, t->seed, tweak), 0);
	g_devices = false;
	for (int i = 0; i < 20; i++) /* everyone has heard everyone */
		cluster_round(&c);
	trial_groups(&c, t->layout, &wg, &tg, use);
	t->sample = -1;
	bool ok = t->op == FAIL_SPLIT ? trial_split(t, &c, use, &ng, &again)
				      : trial_collective(t, &c, use);
	if (ok && t->device) /* before cluster_fini: the nodes may still own work */
		ok = devices_fini(&c);
	tally->trials++;
	tally->mid += t->mid;
	if (!ok) {
		tally->failed++;
		trial_print(t);
	} else if (t->op == FAIL_SPLIT) {
		int rc = t->rc[t->layout == LAYOUT_PAIRS ? t->victim ^ 1 : (t->victim + 1) % WORLD];
		tally->full += rc == 0;
		tally->viewchanged += rc == KEEL_EVIEWCHANGED;
	} else if (t->sample >= 0) {
		int rc = t->rc[t->sample];
		bool p2p = gop_is_p2p(t->s.op); /* a batch names no members */
		tally->full += rc == 0 && p2p;
		tally->full +=
		    rc == 0 && !p2p &&
		    t->info[t->sample].member_count == (t->layout == LAYOUT_PAIRS ? 2u : WORLD);
		tally->fewer +=
		    rc == 0 && !p2p &&
		    t->info[t->sample].member_count < (t->layout == LAYOUT_PAIRS ? 2u : WORLD);
		tally->viewchanged += rc == KEEL_EVIEWCHANGED;
		tally->peergone += rc == KEEL_EPEERGONE;
	}
	if (ok) { /* a failed trial's groups may hold requests keel still runs */
		groups_release(&c, &tg);
		groups_release(&c, &wg);
	}
	cluster_fini(&c);
	groups_mem_free(&ng);
	groups_mem_free(&again);
	groups_mem_free(&tg);
	groups_mem_free(&wg);
	return ok;
}

/* Kill trials of one operation: 6 in the fast tier (seeds 1..6: each layout on host and device
 * buffers), 50 in the long one; SEED=n runs trial n alone (TRIALS=k: k trials from it). */
static void test_kill_during(void **state)
{
	int op = *(const int *)*state;
	uint32_t trials = g_seed_given ? 1 : long_tier() ? 50 : 6;
	if (getenv("TRIALS") != NULL)
		trials = (uint32_t)strtoul(getenv("TRIALS"), NULL, 0);
	struct tally tally = {0};
	static struct trial t;
	for (uint32_t i = 0; i < trials; i++) {
		trial_pick(&t, op, g_seed + i);
		(void)trial_run(&t, &tally);
	}
	print_message("%s: %u trials (%u deaths mid-operation), %u failed; at the victim's group: "
		      "%u complete over every member, %u over the survivors, %u KEEL_EVIEWCHANGED, "
		      "%u KEEL_EPEERGONE\n",
		      op == FAIL_SPLIT ? "split" : gop_names[op], tally.trials, tally.mid,
		      tally.failed, tally.full, tally.fewer, tally.viewchanged, tally.peergone);
	if (tally.failed != 0)
		fail_msg("%u of %u trials failed (each printed with its SEED)", tally.failed,
			 tally.trials);
}

/* Send/Recv whose peer dies: KEEL_EPEERGONE within keel_recovery_bound_ns of the death,
 * never a hang; a transfer between two live members across that view change goes on, exact.
 * Then a peer dead before the batch starts: the same, addressed by its group rank on the
 * group that already shifted past the first death. */
static void test_group_fail_p2p_dead_peer(void **state)
{
	(void)state;
	if (!fast_scenario_here())
		skip();
	struct cluster c;
	struct groups wg;
	assert_int_equal(cluster_init(&c, WORLD, NULL, g_seed, tweak), 0);
	for (int i = 0; i < 20; i++)
		cluster_round(&c);
	groups_world(&c, &wg);
	const struct keel_config *cfg = &c.cfg[0];
	enum { A = 2000000, B = 3000000 }; /* many rounds' worth: the death lands mid-transfer */
	static uint8_t buf[WORLD][2][B];
	for (uint32_t r = 0; r < WORLD; r++)
		grun_pattern(buf[r][0], B, r, g_seed);
	const struct keel_p2p items[WORLD][2] = {
	    {{KEEL_P2P_RECV, 2, buf[0][1], A, 1}, {KEEL_P2P_SEND, 2, buf[0][0], A, 2}},
	    {{KEEL_P2P_SEND, 3, buf[1][0], B, 7}, {KEEL_P2P_RECV, 3, buf[1][1], B, 8}},
	    {{KEEL_P2P_SEND, 0, buf[2][0], A, 1}, {KEEL_P2P_RECV, 0, buf[2][1], A, 2}},
	    {{KEEL_P2P_RECV, 1, buf[3][1], B, 7}, {KEEL_P2P_SEND, 1, buf[3][0], B, 8}},
	};
	struct keel_req *reqs[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	uint64_t end[CLUSTER_MAX];
	for (uint32_t r = 0; r < WORLD; r++)
		assert_int_equal(keel_group_p2p_start(wg.g[r], items[r], 2, &reqs[r]), 0);
	cluster_round(&c);
	assert_int_equal(keel_req_test(reqs[0]), -EINPROGRESS); /* mid-transfer */
	c.paused[2] = true;
	uint64_t t_kill = c.now_ns;
	assert_int_equal(cluster_wait_reqs_info(&c, reqs, rc, NULL, NULL, end,
						bound_rounds(&c, keel_op_bound_ns(cfg))),
			 0);
	assert_int_equal(rc[0], KEEL_EPEERGONE);
	print_message("KEEL_EPEERGONE %.2f ms after the death (keel_recovery_bound_ns %.2f)\n",
		      (double)(end[0] - t_kill) / 1e6, (double)keel_recovery_bound_ns(cfg) / 1e6);
	assert_true(end[0] - t_kill <= keel_recovery_bound_ns(cfg) + 2 * c.step_ns);
	assert_int_equal(rc[1], 0);
	assert_int_equal(rc[3], 0);
	assert_memory_equal(buf[3][1], buf[1][0], B);
	assert_memory_equal(buf[1][1], buf[3][0], B);
	assert_true(views_settle(&c, 3, bound_rounds(&c, 4 * keel_recovery_bound_ns(cfg))));
	assert_int_equal(keel_group_rank_to_job(wg.g[0], 2), 3); /* [0 1 3] now */
	c.paused[3] = true; /* dead before anything is addressed to it */
	t_kill = c.now_ns;
	const struct keel_p2p to3[2] = {{KEEL_P2P_RECV, 2, buf[0][1], 64, 3},
					{KEEL_P2P_SEND, 2, buf[1][0], 64, 3}};
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(keel_group_p2p_start(wg.g[r], &to3[r], 1, &reqs[r]), 0);
	assert_int_equal(cluster_wait_reqs_info(&c, reqs, rc, NULL, NULL, end,
						bound_rounds(&c, keel_op_bound_ns(cfg))),
			 0);
	for (uint32_t r = 0; r < 2; r++) {
		assert_int_equal(rc[r], KEEL_EPEERGONE);
		assert_true(end[r] - t_kill <= keel_recovery_bound_ns(cfg) + 2 * c.step_ns);
	}
	groups_release(&c, &wg);
	cluster_fini(&c);
	groups_mem_free(&wg);
}

/* A rank paused (not polled) during an operation, past the detector, then polled again: the
 * others end as for a death and go on; its own request ends KEEL_EEXCLUDED, its group says it
 * is no member, and operations it starts on it say KEEL_EEXCLUDED. Once it is admitted again,
 * a new world group holds everyone. */
static void pause_run(enum gop op, uint32_t p)
{
	struct cluster c;
	struct groups wg, ng;
	static struct grun run;
	static struct trial t;
	assert_int_equal(cluster_init(&c, WORLD, NULL, g_seed, tweak), 0);
	for (int i = 0; i < 20; i++)
		cluster_round(&c);
	groups_world(&c, &wg);
	const struct keel_config *cfg = &c.cfg[0];
	memset(&t, 0, sizeof(t));
	t.seed = g_seed;
	t.op = op;
	t.victim = p;
	t.s = (struct gop_spec){
	    .op = op, .dt = KEEL_F32, .redop = KEEL_SUM, .count = 100000, .salt = g_seed + op};
	grun_setup(&run, &c, wg.g, &t.s);
	struct keel_req *reqs[CLUSTER_MAX] = {NULL};
	t.t0 = c.now_ns;
	for (uint32_t r = 0; r < WORLD; r++) {
		assert_int_equal(grun_start(&run, r), 0);
		reqs[r] = run.m[r].req;
	}
	struct keel_req *paused_req = reqs[p];
	for (int i = 0; i < (op == GOP_BARRIER ? 0 : 3); i++) /* a barrier ends in a few */
		cluster_round(&c);
	assert_int_equal(keel_req_test(paused_req), -EINPROGRESS); /* paused inside it */
	c.paused[p] = true;
	t.t_kill = c.now_ns;
	reqs[p] = NULL;
	assert_int_equal(cluster_wait_reqs_info(&c, reqs, t.rc, t.info, t.ran, t.end_ns,
						bound_rounds(&c, keel_op_bound_ns(cfg))),
			 0);
	for (uint32_t r = 0; r < WORLD; r++)
		if (r != p && !check_survivor(&t, &run, r, cfg))
			fail_msg("%s: a survivor of the pause of rank %u", gop_names[op], p);
	assert_true(gop_is_p2p(op) || check_same(&t, &run, &c));
	assert_true(views_settle(&c, 3, bound_rounds(&c, 4 * keel_recovery_bound_ns(cfg))));
	c.paused[p] = false; /* back, with its old state */
	int st = -EINPROGRESS;
	for (int i = 0; i < 2000 && st == -EINPROGRESS; i++) { /* two heartbeat intervals */
		cluster_round(&c);
		st = keel_req_test(paused_req);
	}
	if (st != KEEL_EEXCLUDED)
		fail_msg("%s: the paused rank %u's request ended %d (%s), want KEEL_EEXCLUDED",
			 gop_names[op], p, st, keel_strerror(st));
	struct keel_group_info gi;
	assert_true(keel_group_info(wg.g[p], &gi, NULL, 0) >= 0);
	assert_false(gi.self_member);
	struct keel_req *q;
	assert_int_equal(keel_group_barrier_start(wg.g[p], &q), KEEL_EEXCLUDED);
	struct keel_view v;
	uint32_t vm[CLUSTER_MAX];
	assert_true(keel_view_get(c.node[p], &v, vm, CLUSTER_MAX) >= 0);
	assert_false(v.self_member); /* not admitted again yet: no world group to make */
	struct keel_group *g;
	size_t len;
	void *mem = group_mem(&c, p, &len);
	assert_int_equal(keel_group_world(c.node[p], mem, len, &g), KEEL_EEXCLUDED);
	free(mem);
	/* the others go on, on their group of 3, while it is admitted again */
	struct keel_group *live[CLUSTER_MAX] = {NULL};
	for (uint32_t r = 0; r < WORLD; r++)
		live[r] = r == p ? NULL : wg.g[r];
	struct gop_spec again = t.s;
	again.salt++;
	assert_int_equal(grun_run(&c, live, &again, bound_rounds(&c, keel_op_bound_ns(cfg))), 0);
	grun_free(&run);
	assert_true(views_settle(&c, WORLD, bound_rounds(&c, 8 * keel_recovery_bound_ns(cfg))));
	groups_world(&c, &ng);
	again.op = GOP_ALLGATHER;
	again.salt++;
	assert_int_equal(grun_run(&c, ng.g, &again, bound_rounds(&c, keel_op_bound_ns(cfg))), 0);
	groups_release(&c, &ng);
	groups_release(&c, &wg);
	cluster_fini(&c);
	groups_mem_free(&ng);
	groups_mem_free(&wg);
}

static void test_group_fail_pause_excluded(void **state)
{
	(void)state;
	if (!fast_scenario_here())
		skip();
	const enum gop ops[] = {GOP_ALLREDUCE, GOP_ALLGATHER, GOP_BARRIER,
				GOP_BROADCAST, GOP_ALLTOALLV, GOP_P2P_RING};
	for (uint32_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
		pause_run(ops[k], 1 + k % 3);
}

static void tweak_loss(struct keel_config *cfg)
{
	tweak(cfg);
	cfg->miss_limit = 12; /* at 10 % loss, 3 lost heartbeats in a row are common */
}

/* Loss, duplication, reordering and delay underneath every operation: results exact, over the
 * whole job and over two pairs at once. */
static void loss_run(const char *spec, uint32_t sizes_count)
{
	struct cluster c;
	struct groups wg, pg;
	assert_int_equal(cluster_init(&c, WORLD, spec, g_seed, tweak_loss), 0);
	groups_world(&c, &wg);
	const uint32_t color[WORLD] = {0, 0, 1, 1}, key[WORLD] = {1, 0, 0, 1};
	groups_split(&c, wg.g, color, key, &pg);
	const enum keel_dtype dts[] = {KEEL_F32, KEEL_BF16, KEEL_I64, KEEL_U8};
	uint64_t runs = 0;
	for (int op = 0; op < GOP_COUNT; op++)
		for (int d = 0; d < 4; d++) {
			size_t frag = (2048 - 56) / keel_dtype_size(dts[d]);
			const size_t sizes[4] = {1, frag + 1, 3 * frag - 1, 20000};
			for (uint32_t k = 0; k < sizes_count; k++) {
				struct gop_spec s = {.op = op,
						     .dt = dts[d],
						     .redop = (enum keel_redop)((d + k) % 5),
						     .count = sizes[k],
						     .root = k,
						     .in_place = gop_has_in_place(op) && k % 2 == 1,
						     .salt = g_seed * 31 + runs};
				uint32_t bad = grun_run(&c, k % 2 ? pg.g : wg.g, &s, 2000000);
				runs++;
				if (bad != 0)
					fail_msg("%s under '%s': %u member(s) wrong (SEED=%" PRIu64
						 ")",
						 gop_names[op], spec, bad, g_seed);
			}
		}
	uint64_t lost = 0;
	for (uint32_t r = 0; r < WORLD; r++) {
		struct keel_counters k;
		keel_counters_get(c.node[r], &k);
		assert_int_equal(k.drop_protocol, 0);
		lost += k.retransmits;
	}
	print_message("'%s': %" PRIu64 " runs exact, %" PRIu64 " datagrams resent\n", spec, runs,
		      lost);
	groups_release(&c, &pg);
	groups_release(&c, &wg);
	cluster_fini(&c);
	groups_mem_free(&pg);
	groups_mem_free(&wg);
}

static void test_group_fail_loss(void **state)
{
	(void)state;
	if (!fast_scenario_here())
		skip();
	loss_run("loss=0.05,dup=0.01,reorder=0.02,delay_us=30", 4);
	loss_run("loss=0.1,dup=0.02,reorder=0.05,delay_us=50", 2);
}

static const int kill_ops[GOP_COUNT + 1] = {
    GOP_ALLGATHER, GOP_ALLGATHERV, GOP_REDUCE_SCATTER, GOP_REDUCE_SCATTERV, GOP_ALLREDUCE,
    GOP_BROADCAST, GOP_REDUCE,	   GOP_GATHER,	       GOP_SCATTER,	    GOP_ALLTOALL,
    GOP_ALLTOALLV, GOP_BARRIER,	   GOP_P2P_RING,       GOP_P2P_PAIRS,	    FAIL_SPLIT,
};

int main(void)
{
	g_seed_given = getenv("SEED") != NULL;
	g_seed = cluster_seed(1);
	static char names[GOP_COUNT + 1][64];
	struct CMUnitTest tests[GOP_COUNT + 4];
	uint32_t n = 0;
	for (uint32_t k = 0; k <= GOP_COUNT; k++) {
		snprintf(names[k], sizeof(names[k]), "test_group_fail_kill_during_%s",
			 kill_ops[k] == FAIL_SPLIT ? "split" : gop_names[kill_ops[k]]);
		tests[n++] = (struct CMUnitTest){.name = names[k],
						 .test_func = test_kill_during,
						 .initial_state = (void *)&kill_ops[k]};
	}
	tests[n++] = (struct CMUnitTest){.name = "test_group_fail_p2p_dead_peer",
					 .test_func = test_group_fail_p2p_dead_peer};
	tests[n++] = (struct CMUnitTest){.name = "test_group_fail_pause_excluded",
					 .test_func = test_group_fail_pause_excluded};
	tests[n++] =
	    (struct CMUnitTest){.name = "test_group_fail_loss", .test_func = test_group_fail_loss};
	return _cmocka_run_group_tests("group_fail", tests, n, NULL, NULL);
}
