/* The scenario runner: one SimGrid actor per keel node (plus its receiver and a compute
 * worker), a controller that injects faults, and the measurements keel-sim reports.
 * The nodes are the real runtime (libkeel.a) on memory allocated here; nothing of the protocol
 * is reimplemented. Membership: until the core installs views after a failure, survivors meet
 * at an oracle barrier (RECOVERY below) and restart their nodes on the surviving set. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/link.h>
#include <simgrid/semaphore.h>

#include "actor_guard.h"
#include "keel/env.h"
#include "keel/transport_chaos.h"
#include "platform_load.h"
#include "refcheck.h"
#include "sim_int.h"

#define NODE_STACK_BYTES (256 * 1024)
/* Polls in a row that ask to be called again at once; far beyond any real backlog. */
#define SPIN_LIMIT 10000000u
#define RECOVER	   1 /* poll_until: a new generation was installed */
#define EPOCHS_MAX 1024
/* A user's platform up to this many ranks has every route asked for before the run (65 536
 * lookups); a larger one its ring and one host per zone (platform_load.h). */
#define SIM_ROUTES_ALL_PAIRS_MAX 256u

struct node {
	uint32_t e; /* endpoint = host index */
	bool alive, done;
	/* the keel node of the current generation */
	uint32_t gen, rank, world;
	void *arena, *tp_mem, *chaos_mem;
	size_t arena_len;
	struct keel_node *kn;
	struct keel_transport *tp, *chaos;
	double *suspect_s;  /* [endpoints]: first suspicion of each endpoint this generation */
	bool *via_view;	    /* [endpoints]: learnt from a view, not from its own detector (ring
			     * monitoring: it did not watch that endpoint) */
	double *excluded_s; /* [endpoints]: first view this generation installed without it */
	/* compute worker (and a joiner's weights transfer: work_sleep_s) */
	sg_sem_t work_sem;
	double work_flops, work_sleep_s;
	bool work_busy;
	double slow;
	sg_actor_t actor, worker; /* --pause suspends both */
	bool paused;		  /* stopped by --pause now */
	bool was_paused;	  /* ever: its exclusions were expected */
	/* accumulated counters of finished generations */
	uint64_t false_suspicions, self_exclusions;
	uint64_t ar_ops, ar_wrong, ar_failed, ar_hier;
	uint8_t *in, *out, *ref;
	float *feedback; /* --compress: the gradient's residuals, 2 x buf_count floats */
	size_t buf_count;
	uint64_t compress_frags, compress_bytes_saved; /* finished generations */
	/* the core's view of this generation */
	uint32_t view_epoch, view_members, view_index;
	bool view_shrunk;     /* a view without a member of the previous one was installed */
	uint32_t *op_members; /* [endpoints]: what the last AllReduce reduced over */
	struct keel_op_info op_info;
	/* straggler repair: this rank's plan and controller, its last step's compute time, and
	 * a hash of the members of its previous AllReduce (plans must agree from the second
	 * step over the same members on) */
	struct sim_straggler strag;
	bool strag_on;
	double compute_s;
	uint64_t prev_members_sig;
	/* multi-fidelity: the keel node's clock is SimGrid's less the time this node leapt, so
	 * that a leap is no silence to keel; its steps in the view epoch of its last one
	 * (job_steps_sync) */
	uint64_t clock_off_ns;
	uint32_t step_epoch;
	uint64_t epoch_steps;
	/* every collective it completed in view op_epoch (steps, state transfers, those resumed
	 * by a joiner): each is at the same place of every member's sequence, so this names a
	 * moment every member of a view agrees on, whatever each one counts as a step */
	uint32_t op_epoch;
	uint64_t epoch_ops;
	bool left_out; /* excluded from a view (KEEL_EEXCLUDED): its step count is behind */
	/* The job's accountant: the lowest rank among the members of its last step, so the
	 * steps are counted (and leaps planned) once, whichever ranks have died. */
	bool acct;
	/* repairs: lives so far (the incarnation is life + 1); this life rejoins a running job
	 * (keel) or waits for the next relaunch (restart modes); its entry in the result's
	 * rejoin list */
	uint32_t life;
	bool rejoin, relaunch;
	bool admitted, admit_wait; /* a rejoining life: a view took it in; rejoin_admit waits */
	double life_start_s;	   /* failures before it are not this life's to detect */
	uint32_t rejoin_idx;
};

/* The job's step count when a view's steps began, per generation and epoch (a small table
 * by epoch: only the current views' are looked up). */
#define EPOCH_BASES 64u
struct epoch_base {
	uint32_t gen_1; /* generation + 1: 0 is an empty entry */
	uint32_t epoch;
	uint64_t steps;
};

struct failure_rec {
	double at_s;
	uint32_t host;
	enum sim_cause cause;
	uint32_t gen; /* generation it hit */
	double first_arrive_s, release_s, step_start_s;
	double
	    view_s; /* the last survivor's first view without the failed host (a later view,
		     * for another failure, also lacks it: that one is not this failure's cost) */
	double first_suspect_s;
	uint64_t steps_lost;
	bool collected; /* its detection samples taken (the host was repaired) */
};

static struct {
	const struct sim_scenario *s;
	struct sim_result *r;
	struct sim_net *net;
	sg_host_t *hosts;
	uint32_t n; /* endpoints = ranks */
	struct node *nodes;
	/* the current generation (oracle membership) */
	uint32_t gen;
	uint32_t *map; /* rank -> endpoint */
	uint32_t members;
	/* Servers: each endpoint's (the platform's "server" property, else its own index), and
	 * host_of for the current generation's ranks (the lowest rank on the same server);
	 * host_first (2n entries): the lowest rank seen on each server. */
	uint32_t *server, *host_of, *host_first;
	uint32_t host_of_gen; /* generation host_of was built for, + 1 (0: none yet) */
	uint64_t view_sig;
	uint64_t epoch_sig[EPOCHS_MAX]; /* first member set seen per epoch, this generation */
	uint32_t epoch_max;
	/* recovery barrier */
	uint32_t arrived;
	bool pending;
	double restart_until_s;
	/* training progress */
	uint64_t steps, ckpt_steps;
	double step_time_sum;
	uint64_t step_time_count;
	double last_step_end_s;
	bool step_ended; /* last_step_end_s is a step's (the first step is timed from its start) */
	/* failures */
	struct failure_rec fail[SIM_FAILURES_MAX];
	uint32_t fail_count;
	double *detect; /* detection samples */
	uint32_t detect_count, detect_cap;
	double max_lat_s;
	double horizon_s;
	struct sim_fault *faults;
	uint32_t fault_n, fault_cap;
	uint64_t
	    repair_steps_after; /* the accountant's steps since the last repair, and their time */
	double repair_time_after;
	uint32_t scale; /* each data datagram stands for this many */
	uint32_t window, mtu;
	uint32_t fault_next;	     /* the controller's next fault to apply */
	uint32_t ctl_host, ctl_tick; /* where the controller runs; its next progress tick */
	struct epoch_base epoch_base[EPOCH_BASES];
	/* multi-fidelity (--fidelity auto): the accountant's steady-state window, and the leap it
	 * planned: every node of generation `gen` leaps after its collective number `step` of view
	 * `epoch` */
	bool ff_on;
	struct sim_ff ff;
	struct {
		uint32_t gen, epoch;
		uint64_t step;
		struct sim_ff_skip skip;
	} leap;
	bool debug; /* KEEL_SIM_DEBUG */
} W;

static int straggler_setup(struct node *nd); /* per generation, in node_setup */

/* The nodes' heartbeat interval: the scenario's, or, for timeout recovery (no failure
 * detector: only the collective's own timeout notices a death), one beat a second. */
static uint64_t node_heartbeat_ns(void)
{
	return W.s->recovery == SIM_RECOVER_TIMEOUT ? 1000000000ull : W.s->heartbeat_ns;
}

/* The node's keel clock: SimGrid's less what it leapt. */
static uint64_t keel_now_ns(const struct node *nd)
{
	return sim_now_ns() - nd->clock_off_ns;
}

/* A time from the node's keel clock as simulated (job) time, in seconds. */
static double job_s(const struct node *nd, uint64_t keel_ns)
{
	return (double)(keel_ns + nd->clock_off_ns) * 1e-9;
}

static uint64_t ns_of(double s)
{
	return (uint64_t)llround(s * 1e9);
}

/* ---- membership stand-in ---- */

static uint64_t view_signature(const struct node *nd)
{
	struct keel_view v;
	uint32_t members[SIM_HOSTS_MAX];
	int cnt = keel_view_get(nd->kn, &v, members, SIM_HOSTS_MAX);
	uint64_t h = 1469598103934665603ull; /* FNV-1a over epoch and member endpoints */

	if (cnt < 0)
		return 0;
	h = (h ^ v.epoch) * 1099511628211ull;
	for (int i = 0; i < cnt; i++)
		h = (h ^ W.map[members[i]]) * 1099511628211ull;
	return (h ^ W.gen) * 1099511628211ull;
}

/* Every survivor's keel_view_get, compared with the first one read in this generation.
 * Today the core's view is the whole world at epoch 1; when it installs views itself,
 * compare after each install (a view-change callback) instead of per generation. */
static void view_compare(const struct node *nd)
{
	uint64_t sig = view_signature(nd);
	if (W.view_sig == 0)
		W.view_sig = sig;
	else if (sig != W.view_sig)
		W.r->views_agree = false;
}

/* A failure nd's detector and views answer for: of its generation, in its life, and not yet
 * accounted at its host's repair. */
static bool failure_is_current(const struct node *nd, const struct failure_rec *f)
{
	return f->gen == nd->gen && !f->collected && f->at_s >= nd->life_start_s;
}

/* The core installed a view: every node that installs epoch e must install the same members,
 * and the time the last survivor drops a failed host is the failure's view-change time. */
static void on_view(void *ctx, const struct keel_view *v, const uint32_t *members, uint64_t now_ns)
{
	struct node *nd = ctx;
	uint64_t h = 1469598103934665603ull;
	bool has_failed[SIM_FAILURES_MAX] = {false};
	double at_s = job_s(nd, now_ns);

	if (W.debug)
		fprintf(stderr, "%.6f: node %u installs epoch %u (%u members, self %d)\n", at_s,
			nd->e, v->epoch, v->member_count, v->self_member);
	if (v->member_count > 0 && members[0] == nd->rank && nd->gen == W.gen)
		sim_ff_reset(&W.ff); /* a new view: steady again only once measured again */
	if (v->member_count < nd->view_members)
		nd->view_shrunk = true;
	if (v->self_member && nd->rejoin && !nd->admitted) {
		nd->admitted = true;
		if (nd->rejoin_idx < SIM_REJOINS_MAX)
			W.r->rejoins[nd->rejoin_idx].admitted_s =
			    at_s - W.r->rejoins[nd->rejoin_idx].at_s;
		sim_net_wake(W.net, nd->e); /* rejoin_admit is waiting for this */
	}
	nd->view_epoch = v->epoch;
	nd->view_members = v->member_count;
	for (uint32_t i = 0; i < v->member_count; i++) {
		uint32_t e = W.map[members[i]];
		if (members[i] == nd->rank)
			nd->view_index = i;
		h = (h ^ e) * 1099511628211ull;
		for (uint32_t f = 0; f < W.fail_count; f++)
			has_failed[f] |= W.fail[f].host == e;
	}
	h = (h ^ v->epoch) * 1099511628211ull;
	if (v->epoch < EPOCHS_MAX) {
		if (W.epoch_sig[v->epoch] == 0)
			W.epoch_sig[v->epoch] = h;
		else if (W.epoch_sig[v->epoch] != h)
			W.r->views_agree = false;
	}
	if (v->epoch > W.epoch_max)
		W.epoch_max = v->epoch;
	/* A survivor that learns of a death from the new view (before its own detector fired)
	 * has detected it then. (Not a failure before this node's life began, nor one whose host
	 * was repaired since: that one is accounted.) */
	for (uint32_t f = 0; f < W.fail_count; f++)
		if (!has_failed[f] && failure_is_current(nd, &W.fail[f]) &&
		    nd->suspect_s[W.fail[f].host] < 0) {
			nd->suspect_s[W.fail[f].host] = at_s;
			nd->via_view[W.fail[f].host] = true;
		}
	/* (not the paused process itself: it installs that view only once it is back) */
	for (uint32_t f = 0; f < W.fail_count; f++) {
		uint32_t host = W.fail[f].host;
		if (has_failed[f] || !failure_is_current(nd, &W.fail[f]) || host == nd->e ||
		    nd->excluded_s[host] >= 0)
			continue;
		nd->excluded_s[host] = at_s;
		if (nd->excluded_s[host] > W.fail[f].view_s)
			W.fail[f].view_s = nd->excluded_s[host];
	}
}

static void on_peer(void *ctx, uint32_t peer, enum keel_peer_state st, uint64_t now_ns)
{
	struct node *nd = ctx;
	if (st != KEEL_PEER_SUSPECTED || peer >= nd->world)
		return;
	uint32_t e = W.map[peer];
	double at_s = job_s(nd, now_ns);
	if (W.debug && W.nodes[e].alive)
		fprintf(stderr, "%.6f: node %u suspects %u (gen %u)\n", at_s, nd->e, e, nd->gen);
	if (nd->suspect_s[e] < 0)
		nd->suspect_s[e] = at_s;
	for (uint32_t f = 0; f < W.fail_count; f++)
		if (W.fail[f].host == e && failure_is_current(nd, &W.fail[f]) &&
		    (W.fail[f].first_suspect_s == 0 || at_s < W.fail[f].first_suspect_s))
			W.fail[f].first_suspect_s = at_s;
	if (W.nodes[e].alive && !W.nodes[e].paused)
		nd->false_suspicions++; /* suspected while its host was up and running */
}

/* What a generation's core counted that outlives it. */
static void counters_keep(struct node *nd)
{
	struct keel_counters k;
	keel_counters_get(nd->kn, &k);
	nd->self_exclusions += k.self_exclusions;
	nd->compress_frags += k.compress_frags;
	nd->compress_bytes_saved += k.compress_bytes_saved;
}

static void node_teardown(struct node *nd)
{
	if (nd->kn != NULL) {
		counters_keep(nd);
		keel_fini(nd->kn);
	}
	nd->kn = NULL;
	nd->tp = nd->chaos = NULL;
}

/* host_of for this generation's ranks: ranks on one server share the lowest one's number. */
static const uint32_t *host_map(void)
{
	if (W.host_of_gen == W.gen + 1)
		return W.host_of;
	for (uint32_t e = 0; e < 2 * W.n; e++)
		W.host_first[e] = UINT32_MAX;
	for (uint32_t r = 0; r < W.members; r++) {
		uint32_t s = W.server[W.map[r]];
		if (W.host_first[s] == UINT32_MAX)
			W.host_first[s] = r;
		W.host_of[r] = W.host_first[s];
	}
	W.host_of_gen = W.gen + 1;
	return W.host_of;
}

/* The node's transport for this generation, under --chaos's when asked for. */
static int node_transport(struct node *nd, uint32_t rank, char *err, size_t err_len)
{
	const struct sim_scenario *s = W.s;
	int rc = sim_transport_init(&nd->tp, nd->tp_mem, sim_transport_storage_size(W.net, W.n),
				    W.net, nd->e, rank, W.members, W.map, W.mtu);
	if (rc != 0) {
		snprintf(err, err_len, "sim transport: %s", keel_strerror(rc));
		return rc;
	}
	if (s->chaos[0] == '\0')
		return 0;
	struct keel_chaos_config cc;
	keel_chaos_config_default(&cc);
	cc.inner = nd->tp;
	if (keel_chaos_parse(s->chaos, &cc) != 0)
		return -EINVAL;
	cc.seed = cc.seed * 1000003u + s->seed * 7919u + nd->e + 1;
	if (nd->chaos_mem == NULL)
		nd->chaos_mem = malloc(keel_chaos_storage_size(&cc));
	return keel_chaos_init(&nd->chaos, nd->chaos_mem, keel_chaos_storage_size(&cc), &cc);
}

/* The keel configuration of the node's life in this generation. */
static void node_config(struct node *nd, uint32_t rank, struct keel_config *cfg)
{
	const struct sim_scenario *s = W.s;
	keel_config_default(cfg);
	cfg->rank = rank;
	cfg->world_size = W.members;
	cfg->job_id = 1000 + W.gen; /* datagrams of an older generation are fenced off */
	cfg->window = W.window;
	/* Large worlds lend window buffers from a pool: a node talks to a few peers at a time
	 * (ring steps, recursive-doubling partners), not to all of them. */
	cfg->streams = W.n > 64 ? 8 : 0;
	cfg->mtu = W.mtu;
	cfg->heartbeat_ns = node_heartbeat_ns();
	cfg->miss_limit = s->miss_limit;
	cfg->op_timeout_ns = s->op_timeout_ns;
	cfg->join_timeout_ns = s->join_timeout_ns;
	cfg->algo = s->algo;
	cfg->compress = s->compress;
	cfg->host_of = host_map();
	if (W.scale > 1) /* a scaled datagram is slow to serialise: learn the RTT first */
		cfg->rto_initial_ns = cfg->rto_max_ns;
	/* An element here stands for `scale` of the modelled job's: results are reported early
	 * (eager_result_bytes) where the modelled sizes would be. */
	cfg->eager_result_bytes = KEEL_EAGER_RESULT_BYTES_DEFAULT / W.scale;
	if (s->recovery == SIM_RECOVER_TIMEOUT)
		cfg->miss_limit = 1000000; /* no failure detector (node_heartbeat_ns) */
	cfg->transport = nd->chaos != NULL ? nd->chaos : nd->tp;
	cfg->on_peer = on_peer;
	cfg->on_peer_ctx = nd;
	cfg->on_view = on_view;
	cfg->on_view_ctx = nd;
	cfg->incarnation = nd->life + 1; /* each life of a process a new one */
	cfg->rejoin = nd->rejoin;
}

/* The node's keel instance, in an arena grown to what the configuration needs. */
static int node_keel_init(struct node *nd, const struct keel_config *cfg, char *err, size_t err_len)
{
	size_t need = keel_storage_size(cfg);
	if (need == 0) {
		snprintf(err, err_len, "keel config rejected (window %u, mtu %u, world %u)",
			 cfg->window, cfg->mtu, cfg->world_size);
		return -EINVAL;
	}
	if (need > nd->arena_len) {
		free(nd->arena);
		nd->arena = malloc(need);
		nd->arena_len = nd->arena != NULL ? need : 0;
	}
	int rc = keel_init(&nd->kn, nd->arena, nd->arena_len, cfg, keel_now_ns(nd));
	if (rc != 0)
		snprintf(err, err_len, "keel_init: %s", keel_strerror(rc));
	return rc;
}

/* Endpoint nd->e's node in the current generation: its rank, transport, straggler state and
 * keel instance, with this generation's records reset. */
static int node_setup(struct node *nd, char *err, size_t err_len)
{
	struct keel_config cfg;
	uint32_t rank = UINT32_MAX;

	for (uint32_t r = 0; r < W.members; r++)
		if (W.map[r] == nd->e)
			rank = r;
	if (rank == UINT32_MAX)
		return -ENOENT;
	nd->gen = W.gen;
	nd->rank = rank;
	nd->world = W.members;
	for (uint32_t e = 0; e < W.n; e++) {
		nd->suspect_s[e] = -1;
		nd->via_view[e] = false;
		nd->excluded_s[e] = -1;
	}
	int rc = node_transport(nd, rank, err, err_len);
	if (rc != 0)
		return rc;
	node_config(nd, rank, &cfg);
	nd->view_epoch = 1;
	nd->view_members = W.members;
	nd->view_index = rank;
	nd->view_shrunk = false;
	nd->step_epoch = nd->op_epoch = 0;
	nd->epoch_steps = nd->epoch_ops = 0;
	if (rank == 0)
		sim_ff_reset(&W.ff); /* a new generation */
	rc = straggler_setup(nd);
	if (rc != 0) {
		snprintf(err, err_len, "straggler repair: %s", keel_strerror(rc));
		return rc;
	}
	return node_keel_init(nd, &cfg, err, err_len);
}

/* A survivor reports the failure it noticed and waits, still polling its node (it is alive,
 * and must not look dead to peers still in the collective), until every live node has
 * arrived; the last one installs the next generation on the live hosts. */
static void recovery_try_release(void);
static void node_start(struct node *nd, bool rejoin);

static void recovery_arrive(struct node *nd)
{
	double now = simgrid_get_clock();
	struct failure_rec *f = W.fail_count > 0 ? &W.fail[W.fail_count - 1] : NULL;

	(void)nd;
	if (!W.pending) {
		W.pending = true;
		W.arrived = 0;
		if (f != NULL)
			f->first_arrive_s = now;
	}
	W.arrived++;
	recovery_try_release();
}

static void recovery_try_release(void)
{
	double now = simgrid_get_clock();
	struct failure_rec *f = W.fail_count > 0 ? &W.fail[W.fail_count - 1] : NULL;
	uint32_t live = 0;

	for (uint32_t e = 0; e < W.n; e++)
		live += W.nodes[e].alive;
	if (!W.pending || W.arrived < live)
		return;
	/* Every survivor is here: the new view is the live hosts, in endpoint order, with those
	 * repaired since the last launch. */
	W.pending = false;
	W.members = 0;
	for (uint32_t e = 0; e < W.n; e++) {
		W.nodes[e].alive |= W.nodes[e].relaunch;
		if (W.nodes[e].alive)
			W.map[W.members++] = e;
	}
	W.gen++;
	W.view_sig = 0;
	memset(W.epoch_sig, 0, sizeof(W.epoch_sig));
	if (f != NULL)
		f->release_s = now;
	if (W.s->recovery != SIM_RECOVER_KEEL) {
		W.restart_until_s = now + W.s->restart_s;
		if (f != NULL)
			f->steps_lost = W.steps - W.ckpt_steps;
		W.steps = W.ckpt_steps; /* roll back to the last checkpoint */
	}
	for (uint32_t e = 0; e < W.n; e++) {
		if (W.nodes[e].relaunch)
			node_start(&W.nodes[e], false);
		else if (W.nodes[e].alive)
			sim_net_wake(W.net, e);
	}
}

/* Poll the node and wait until: `op` completes (its result in *op_rc), the worker finishes
 * (compute), `until_ns`, the horizon, or a new generation. Returns 0, RECOVER, or the
 * node's fatal error. */
static int poll_until(struct node *nd, struct keel_op *op, int *op_rc, bool compute,
		      uint64_t until_ns)
{
	uint64_t horizon = ns_of(W.horizon_s);
	uint32_t spins = 0;

	for (;;) {
		uint64_t now = sim_now_ns(), dl;
		if (nd->gen != W.gen)
			return RECOVER;
		if (nd->admit_wait && nd->admitted)
			return 0;
		int rc = keel_poll(nd->kn, now - nd->clock_off_ns, &dl);
		if (rc != 0)
			return rc;
		if (dl != UINT64_MAX)
			dl += nd->clock_off_ns; /* keel's deadline on SimGrid's clock */
		if (op != NULL) {
			rc = keel_op_test_info(nd->kn, op, &nd->op_info, nd->op_members, W.n);
			if (rc != -EINPROGRESS) {
				*op_rc = rc;
				return 0;
			}
		}
		if (compute && !nd->work_busy)
			return 0;
		if (now >= until_ns || now >= horizon)
			return 0;
		if (dl > until_ns)
			dl = until_ns;
		if (dl > horizon)
			dl = horizon;
		if (dl <= now && ++spins > SPIN_LIMIT) {
			fprintf(stderr, "keel-sim: node %u polls without time advancing\n", nd->e);
			abort();
		}
		if (dl > now)
			spins = 0;
		sim_net_wait(W.net, nd->e, dl);
	}
}

static bool horizon_reached(void)
{
	return simgrid_get_clock() >= W.horizon_s - 1e-12;
}

/* ---- compute worker: long executions must not stop the node from polling ---- */

static void worker_main(int argc, char **argv)
{
	struct node *nd = sg_actor_self_get_data();
	(void)argc;
	(void)argv;
	for (;;) {
		sg_sem_acquire(nd->work_sem);
		if (nd->work_sleep_s > 0)
			sg_actor_sleep_for(nd->work_sleep_s);
		else
			sg_actor_execute(nd->work_flops);
		nd->work_sleep_s = 0;
		nd->work_busy = false;
		sim_net_wake(W.net, nd->e);
	}
	/* never reached: the worker is a daemon, killed at the end */
}

static sg_actor_t spawn(const char *prefix, uint32_t e, xbt_main_func_t fn, void *data, bool daemon)
{
	char name[32];
	snprintf(name, sizeof(name), "%s-%u", prefix, e);
	sg_actor_t a = sg_actor_init(name, W.hosts[e]);
	sg_actor_set_data(a, data);
	sg_actor_set_stacksize(a, NODE_STACK_BYTES);
	sim_actor_start_guarded(a, fn);
	if (daemon)
		sg_actor_daemonize(a);
	return a;
}

/* ---- one AllReduce, checked like tests/integ/allreduce_check.c ---- */

/* `extra` floats after the gradient's `count` (straggler_slots) travel with it, unchecked. */
static int allreduce_once(struct node *nd, size_t count, size_t extra, int *op_rc)
{
	struct keel_op *op = NULL;
	int rc;

	if (W.s->check)
		keel_check_fill(nd->in, 0, count, nd->rank, KEEL_F32, KEEL_SUM);
	rc = W.s->grad ? keel_allreduce_grad_start(nd->kn, (const float *)nd->in, (float *)nd->out,
						   count + extra, KEEL_SUM, nd->feedback, &op)
		       : keel_allreduce_start(nd->kn, nd->in, nd->out, count + extra, KEEL_F32,
					      KEEL_SUM, &op);
	if (rc != 0) {
		*op_rc = rc;
		return 0;
	}
	*op_rc = -EINPROGRESS;
	/* timeout recovery models NCCL's watchdog: a collective pending op_timeout aborts the
	 * job (keel's own op timeout would instead retry it on a new view) */
	uint64_t watchdog =
	    W.s->recovery == SIM_RECOVER_TIMEOUT ? sim_now_ns() + W.s->op_timeout_ns : UINT64_MAX;
	rc = poll_until(nd, op, op_rc, false, watchdog);
	if (rc == 0 && *op_rc == -EINPROGRESS && !horizon_reached() && sim_now_ns() >= watchdog)
		*op_rc = -ETIMEDOUT;
	if (rc != 0 || *op_rc == -EINPROGRESS)
		return rc; /* a new generation (the op dies with its node), or the horizon */
	nd->ar_ops++;
	if (*op_rc == 0 && nd->op_info.epoch != nd->op_epoch) {
		nd->op_epoch = nd->op_info.epoch;
		nd->epoch_ops = 0;
	}
	nd->epoch_ops += *op_rc == 0;
	if (*op_rc != 0) {
		if (W.debug)
			fprintf(stderr, "%.6f: node %u: AllReduce failed: %s\n",
				simgrid_get_clock(), nd->e, keel_strerror(*op_rc));
		nd->ar_failed++;
		return 0;
	}
	nd->ar_hier += nd->op_info.algo == KEEL_ALGO_HIER;
	if (W.s->check) {
		keel_check_reference_members(nd->ref, 0, count, nd->op_members,
					     nd->op_info.member_count, KEEL_F32, KEEL_SUM);
		if (keel_check_wrong(nd->out, nd->ref, 0, count, KEEL_F32) != 0)
			nd->ar_wrong++;
	}
	return 0;
}

static void buffers_ensure(struct node *nd, size_t count)
{
	if (count <= nd->buf_count)
		return;
	free(nd->in);
	free(nd->out);
	free(nd->ref);
	free(nd->feedback);
	nd->in = calloc(count, 4);
	nd->out = calloc(count, 4);
	nd->ref = calloc(count, 4);
	nd->feedback = W.s->grad ? calloc(keel_grad_feedback_len(count), 4) : NULL;
	if (nd->in == NULL || nd->out == NULL || nd->ref == NULL ||
	    (W.s->grad && nd->feedback == NULL))
		abort();
	nd->buf_count = count;
}

/* ---- detection samples ---- */

static void detect_add(double v)
{
	if (W.detect_count == W.detect_cap) {
		W.detect_cap = W.detect_cap ? 2 * W.detect_cap : 1024;
		W.detect = realloc(W.detect, W.detect_cap * sizeof(double));
		if (W.detect == NULL)
			abort();
	}
	W.detect[W.detect_count++] = v;
}

/* At the end of a generation (or of the run): how long each survivor took to suspect each
 * host that failed during it. With all-to-all monitoring every survivor watches every peer;
 * beyond KEEL_FD_ALL_TO_ALL_MAX only ring neighbours do, so only they are expected to. */
/* The core's own bounds for its config, plus the slowest route a heartbeat takes: detection by
 * a watcher, and (for a survivor that learns of the failure from the new view) recovery. */
static double detect_bound_s(bool via_view)
{
	struct keel_config cfg;
	keel_config_default(&cfg);
	cfg.heartbeat_ns = W.s->heartbeat_ns;
	cfg.miss_limit = W.s->miss_limit;
	uint64_t b = via_view ? keel_recovery_bound_ns(&cfg) : keel_detect_bound_ns(&cfg);
	return (double)b * 1e-9 + W.max_lat_s;
}

/* nd's detection of failure f, if it watched it, as of now. */
static void detect_sample(const struct node *nd, const struct failure_rec *f, double now)
{
	if (!failure_is_current(nd, f) || f->host == nd->e || W.s->recovery == SIM_RECOVER_TIMEOUT)
		return;
	double at = nd->suspect_s[f->host];
	double bound = detect_bound_s(nd->via_view[f->host]);
	if (at >= 0) {
		detect_add(at - f->at_s);
		if (at - f->at_s > bound + 1e-6)
			W.r->detect_late++;
	} else if (nd->world <= KEEL_FD_ALL_TO_ALL_MAX && now >= f->at_s + bound + 1e-6) {
		W.r->undetected++;
	}
}

static void detect_collect(struct node *nd)
{
	for (uint32_t i = 0; i < W.fail_count; i++)
		detect_sample(nd, &W.fail[i], simgrid_get_clock());
}

/* Host e was repaired: every node's detection of its failures so far is taken now, and
 * forgotten, so that its next failure is timed afresh. */
static void detect_forget(uint32_t e)
{
	for (uint32_t m = 0; m < W.n; m++) {
		struct node *nd = &W.nodes[m];
		if (m == e || nd->suspect_s == NULL)
			continue;
		for (uint32_t i = 0; i < W.fail_count; i++)
			if (W.fail[i].host == e && nd->alive)
				detect_sample(nd, &W.fail[i], simgrid_get_clock());
		nd->suspect_s[e] = -1;
		nd->via_view[e] = false;
		nd->excluded_s[e] = -1;
	}
	for (uint32_t i = 0; i < W.fail_count; i++)
		W.fail[i].collected |= W.fail[i].host == e;
}

/* ---- the node actor ---- */

static size_t grad_count(void)
{
	double c = W.s->model_params / (double)W.scale;
	return c < 1 ? 1 : (size_t)c;
}

/* This rank's share of the global batch: its shards in its plan (straggler repair), else an
 * even split. The plan starts even too: keel measures speeds, it is not told them. */
static double samples_of(const struct node *nd)
{
	if (nd->strag_on)
		return (double)W.s->batch * sim_straggler_share(&nd->strag, nd->rank);
	uint32_t n = nd->view_members ? nd->view_members : nd->world;
	uint32_t base = W.s->batch / n, extra = W.s->batch % n;
	return (double)base + (nd->view_index < extra ? 1.0 : 0.0);
}

/* ---- straggler repair: the times and plan digests travel with the step's gradient ---- */

/* Slots per rank after the gradient: its compute time, then a 24-bit digest of its plan. A
 * float holds the digest exactly, and a sum of one value and zeros is exact in any order, so
 * every member reads the same bits. With --compress keel may round any value to bf16's 8
 * significant bits: the digest then goes as three bytes, each exact. */
static uint32_t digest_slots(void)
{
	return W.s->grad ? 3 : 1;
}

static size_t straggler_slots(const struct node *nd)
{
	return nd->strag_on ? (1 + digest_slots()) * (size_t)nd->world : 0;
}

static uint32_t plan_digest24(const struct sim_straggler *st)
{
	uint64_t h = 1469598103934665603ull;
	for (uint32_t w = 0; w < st->count; w++)
		h = (h ^ st->ranks[w]) * 1099511628211ull;
	for (uint32_t i = 0; i < st->shards; i++)
		h = (h ^ keel_plan_owner(st->plan, i)) * 1099511628211ull;
	return (uint32_t)(h ^ (h >> 24) ^ (h >> 48)) & 0xffffffu;
}

static void straggler_fill(struct node *nd, size_t count)
{
	float *slot = (float *)nd->in + count;
	memset(slot, 0, straggler_slots(nd) * sizeof(float));
	slot[nd->rank] = (float)nd->compute_s;
	uint32_t d = plan_digest24(&nd->strag), ds = digest_slots();
	for (uint32_t k = 0; k < ds; k++)
		slot[nd->world + nd->rank * ds + k] = (float)(ds == 1 ? d : (d >> (8 * k)) & 0xffu);
}

static uint64_t members_sig(const uint32_t *m, uint32_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (uint32_t i = 0; i < n; i++)
		h = (h ^ m[i]) * 1099511628211ull;
	return (h ^ n) * 1099511628211ull;
}

/* After a step's AllReduce: check that the members planned alike, then feed the controller
 * the times every member got. The accountant records the repairs. */
static void straggler_after_step(struct node *nd, size_t count)
{
	const float *slot = (const float *)nd->out + count;
	uint32_t n = nd->op_info.member_count;
	uint64_t sig = members_sig(nd->op_members, n);
	if (sig == nd->prev_members_sig && nd->rank == nd->op_members[0]) {
		uint32_t ds = digest_slots();
		const float *first = slot + nd->world + nd->op_members[0] * ds;
		for (uint32_t i = 1; i < n; i++)
			if (memcmp(slot + nd->world + nd->op_members[i] * ds, first,
				   ds * sizeof(float)) != 0) {
				W.r->plans_disagree++;
				break;
			}
	}
	nd->prev_members_sig = sig;
	struct keel_straggler_decision d;
	int rc = sim_straggler_step(&nd->strag, nd->op_members, n, slot, &d);
	if (rc != 0) {
		fprintf(stderr, "keel-sim: node %u: straggler repair: %s (repair off)\n", nd->e,
			keel_strerror(rc));
		nd->strag_on = false;
		return;
	}
	if (!d.repaired || !nd->acct)
		return;
	if (W.r->repairs++ == 0) {
		W.r->repair_first_at_s = simgrid_get_clock();
		W.r->repair_first_step = W.steps;
	}
	W.r->repair_before_s = d.before_s;
	W.r->repair_after_s = d.after_s;
	W.repair_steps_after = 0;
	W.repair_time_after = 0;
	sim_ff_reset(&W.ff); /* a new plan: its steps are measured afresh */
}

static int straggler_setup(struct node *nd)
{
	nd->strag_on =
	    W.s->repair && strcmp(W.s->mode, "train") == 0 && W.members <= SIM_STRAGGLER_RANKS_MAX;
	nd->compute_s = 0;
	nd->prev_members_sig = 0;
	sim_straggler_free(&nd->strag);
	if (!nd->strag_on)
		return 0;
	return sim_straggler_init(&nd->strag, W.members);
}

static int regen(struct node *nd)
{
	char err[256] = "";
	detect_collect(nd);
	node_teardown(nd);
	if (W.restart_until_s > simgrid_get_clock()) /* the job relaunches: no node meanwhile */
		sg_actor_sleep_until(W.restart_until_s < W.horizon_s ? W.restart_until_s
								     : W.horizon_s);
	if (horizon_reached())
		return RECOVER; /* the run ends during the restart */
	int rc = node_setup(nd, err, sizeof(err));
	if (rc != 0)
		fprintf(stderr, "keel-sim: node %u: %s\n", nd->e, err);
	return rc;
}

/* Every step into its slot of the plotted series: the time since the previous step ended, so
 * what a failure, a restart or a checkpoint cost shows where it happened. */
static void step_slot_add(double start_s, double end_s)
{
	double at = end_s / W.horizon_s * SIM_STEP_SLOTS;
	uint32_t i = at < SIM_STEP_SLOTS - 1 ? (uint32_t)at : SIM_STEP_SLOTS - 1;
	struct sim_step_slot *slot = &W.r->step_slots[i];

	slot->end_s_sum += end_s;
	slot->step_s_sum += end_s - start_s;
	if (end_s - start_s > slot->step_s_max)
		slot->step_s_max = end_s - start_s;
	slot->count++;
}

/* One step of the accountant (struct node: acct) ending at end_s, begun at start_s (its compute's
 * start), into the job's accounting; `measured` feeds the steady-state window too. */
static void step_account(double start_s, double end_s, bool measured)
{
	step_slot_add(W.step_ended ? W.last_step_end_s : start_s, end_s);
	W.step_ended = true;
	W.steps++;
	W.last_step_end_s = end_s;
	if (!W.pending) {
		W.step_time_sum += end_s - start_s;
		W.step_time_count++;
		if (W.r->repairs > 0) {
			W.repair_steps_after++;
			W.repair_time_after += end_s - start_s;
		}
		if (measured)
			sim_ff_add(&W.ff, end_s - start_s);
	}
}

static void train_step_record(const struct node *nd, double start_s)
{
	if (nd->acct)
		step_account(start_s, simgrid_get_clock(), true);
}

/* Sharded model state: bf16 weights, fp32 master weights and two Adam moments, 16 bytes per
 * parameter (ZeRO's accounting), split evenly over the view. */
static double ckpt_write_s(const struct node *nd)
{
	return W.s->model_params * 16.0 / nd->view_members / W.s->ckpt_Bps;
}

/* ---- multi-fidelity: leaps over steady steps ---- */

/* Every node that will leap is alive, running, and on the accountant's view of this
 * generation. */
static bool leap_all_steady(const struct node *acct)
{
	for (uint32_t e = 0; e < W.n; e++) {
		const struct node *nd = &W.nodes[e];
		if (!nd->alive || nd->done)
			continue;
		if (nd->paused || nd->left_out || nd->gen != W.gen ||
		    nd->view_epoch != acct->view_epoch)
			return false;
	}
	return true;
}

/* The accountant, after its step n of a view (its job_steps done): when the steps are steady, plan
 * a leap for every node from the end of step n+1 to a guard before the next event or the horizon.
 * Nobody can end step n+1 before this: it needs the accountant's part of it. */
static void leap_plan(const struct node *nd, uint64_t job_steps)
{
	double now = simgrid_get_clock();
	double hb_s = (double)node_heartbeat_ns() * 1e-9;
	struct sim_ff_stats st;
	if (!W.ff_on || !nd->acct || W.pending || W.restart_until_s > now ||
	    !sim_ff_steady(&W.ff, SIM_FF_STEPS_MIN, SIM_FF_HEARTBEATS * hb_s, SIM_FF_TOL, &st) ||
	    !leap_all_steady(nd))
		return;
	double mean = st.mean_s;
	uint32_t every = W.s->ckpt_every;
	uint64_t done = job_steps + 1; /* the leap starts after step n+1 and its checkpoint */
	double write_s = ckpt_write_s(nd);
	double start = now + mean + (every != 0 && done % every == 0 ? write_s : 0);
	double next = W.fault_next < W.fault_n ? W.faults[W.fault_next].at_s : INFINITY;
	double guard = SIM_FF_GUARD_STEPS * mean;
	double end = fmin(next - guard - 2 * detect_bound_s(true), W.horizon_s - guard);
	/* The drift bound: a leap longer than the spread of the periods allows waits for more
	 * steps, or, with the window full, goes only that far. */
	double drift_room =
	    st.range_s > 0 ? SIM_FF_PHASE_TOL * st.n / st.range_s * mean * mean : INFINITY;
	if (drift_room < end - start && W.ff.count < SIM_FF_WINDOW_MAX)
		return;
	struct sim_ff_skip skip;
	sim_ff_plan(&skip, fmin(end - start, drift_room), mean, done, every, write_s,
		    SIM_FF_STEPS_MIN);
	if (skip.steps == 0)
		return;
	W.leap.gen = nd->gen;
	W.leap.epoch = nd->op_epoch;
	W.leap.step = nd->epoch_ops + 1;
	W.leap.skip = skip;
}

/* The accountant accounts a leap's steps and checkpoints as the full run would have, step by step.
 */
static void leap_account(const struct node *nd, uint64_t job_steps)
{
	const struct sim_ff_skip *k = &W.leap.skip;
	double t = simgrid_get_clock(), from = t, period = k->period_s;
	uint32_t every = W.s->ckpt_every;

	for (uint64_t i = 1; i <= k->steps; i++) {
		step_account(t, t + period, false);
		t += period;
		if (every != 0 && (job_steps + i) % every == 0) {
			t += ckpt_write_s(nd);
			W.ckpt_steps = W.steps;
		}
	}
	if (W.r->leap_count < SIM_LEAPS_MAX) {
		W.r->leap_from_s[W.r->leap_count] = from;
		W.r->leap_to_s[W.r->leap_count] = from + k->dur_s;
	}
	if (W.debug)
		fprintf(stderr, "%.6f: leap of %llu steps (%u checkpoints) at %.9f s, %.6f s\n",
			from, (unsigned long long)k->steps, k->ckpts, period, k->dur_s);
	W.r->leap_count++;
	W.r->leapt_s += k->dur_s;
	W.r->leapt_steps += k->steps;
	sim_ff_reset(&W.ff);
}

/* At the end of a step (its checkpoint written): the planned leap, if this is its collective.
 * The node sleeps through it in SimGrid without polling, while its keel clock stops for the
 * leap's whole heartbeat intervals: to keel less than one interval passed, to the job dur_s
 * did. */
static void leap_maybe(struct node *nd, uint64_t *job_steps)
{
	const struct sim_ff_skip *k = &W.leap.skip;
	if (k->steps == 0 || W.leap.gen != nd->gen || W.leap.epoch != nd->op_epoch ||
	    W.leap.step != nd->epoch_ops)
		return;
	double to = simgrid_get_clock() + k->dur_s;
	if (to >= W.horizon_s)
		return; /* never planned so; the horizon's steps run in full */
	if (nd->acct)
		leap_account(nd, *job_steps);
	uint64_t before = sim_now_ns();
	sg_actor_sleep_until(to);
	/* The keel clock stops for whole heartbeat intervals and runs on through the rest, so
	 * heartbeats keep their phase in job time: when a peer dies between two steps, its
	 * silence is measured from its last beat as in a full run. */
	uint64_t hb = node_heartbeat_ns();
	nd->clock_off_ns += (sim_now_ns() - before) / hb * hb;
	*job_steps += k->steps;
}

/* After a step of view `epoch` (its epoch_steps-th): the job's step count before it, in
 * *steps. Every member checkpoints after the same steps, as a real job does (it counts steps
 * globally); a rank readmitted after being left out missed steps, and takes the count the
 * members had when the view it came back in began, as it takes its state from a donor. */
static void job_steps_sync(struct node *nd, uint64_t *steps, bool new_epoch)
{
	struct epoch_base *b = &W.epoch_base[nd->step_epoch % EPOCH_BASES];
	bool known = b->gen_1 == nd->gen + 1 && b->epoch == nd->step_epoch;
	if (new_epoch && !nd->left_out && !known) {
		*b = (struct epoch_base){
		    .gen_1 = nd->gen + 1, .epoch = nd->step_epoch, .steps = *steps};
		known = true;
	}
	if (nd->left_out && known) {
		*steps = b->steps + nd->epoch_steps - 1;
		nd->left_out = false;
	}
}

/* After a step's AllReduce completed on this node (op_rc 0) or failed without a relaunch:
 * the job's accounting, its step count, the straggler controller, the checkpoint due and a
 * leap. Returns 0, RECOVER (a new generation during the checkpoint) or the node's error. */
static int step_end(struct node *nd, double start, int op_rc, size_t count, uint64_t *job_steps)
{
	nd->acct = op_rc == 0 && nd->op_info.member_count > 0 && nd->op_members[0] == nd->rank;
	train_step_record(nd, start);
	bool new_epoch = op_rc == 0 && nd->op_info.epoch != nd->step_epoch;
	if (new_epoch) {
		nd->step_epoch = nd->op_info.epoch;
		nd->epoch_steps = 0;
	}
	nd->epoch_steps += op_rc == 0;
	if (op_rc == 0)
		job_steps_sync(nd, job_steps, new_epoch);
	if (nd->strag_on && op_rc == 0)
		straggler_after_step(nd, count); /* a repair moves shards from the next step */
	(*job_steps)++;
	uint32_t every = W.s->ckpt_every;
	if (every != 0 && *job_steps % every == 0) {
		int rc = poll_until(nd, NULL, NULL, false, sim_now_ns() + ns_of(ckpt_write_s(nd)));
		if (rc != 0)
			return rc;
		if (nd->acct && !horizon_reached())
			W.ckpt_steps = W.steps;
	}
	leap_maybe(nd, job_steps);
	leap_plan(nd, *job_steps);
	return 0;
}

/* The weights a joiner needs, from the view's donor: the model's f32 copy over the route
 * between them, at its bandwidth (the transfer is not a keel collective, so it cannot put the
 * members' sequence out of line). The joiner's worker waits it out while the node polls, so
 * the joiner answers heartbeats meanwhile; the members' next step waits for it. */
static int weights_fetch(struct node *nd, uint32_t donor_rank)
{
	uint32_t from = donor_rank < W.members ? W.map[donor_rank] : nd->e;
	double bw = from != nd->e ? sg_host_get_route_bandwidth(W.hosts[from], W.hosts[nd->e]) : 0;
	double lat = from != nd->e ? sg_host_get_route_latency(W.hosts[from], W.hosts[nd->e]) : 0;
	if (!(bw > 0))
		return 0;
	nd->work_sleep_s = lat + W.s->model_params * 4.0 / bw;
	nd->work_busy = true;
	sg_sem_release(nd->work_sem);
	return poll_until(nd, NULL, NULL, true, UINT64_MAX);
}

/* A repaired GPU's process, started with a new incarnation outside any view: wait until a
 * view admits it, take part in the collectives the members had in flight (they restart with
 * it), then get the weights. Returns 0, or non-zero when the run ends first. */
static int rejoin_admit(struct node *nd, size_t count, uint64_t *job_steps)
{
	struct sim_rejoin *rj =
	    nd->rejoin_idx < SIM_REJOINS_MAX ? &W.r->rejoins[nd->rejoin_idx] : NULL;
	struct keel_view v;
	for (nd->admit_wait = true;;) {
		int rc = poll_until(nd, NULL, NULL, false, sim_now_ns() + node_heartbeat_ns());
		if (rc != 0 || horizon_reached()) {
			nd->admit_wait = false;
			return rc != 0 ? rc : RECOVER;
		}
		if (keel_view_get(nd->kn, &v, nd->op_members, W.n) >= 0 && v.self_member)
			break;
	}
	nd->admit_wait = false;
	double admitted = simgrid_get_clock(); /* on_view noted it in rj->admitted_s */
	for (uint32_t i = 0; i < v.ops_resume; i++) {
		int op_rc = 0;
		double start = simgrid_get_clock();
		nd->compute_s = 0;
		if (nd->strag_on)
			straggler_fill(nd, count);
		int rc = allreduce_once(nd, count, straggler_slots(nd), &op_rc);
		if (rc == 0 && op_rc != -EINPROGRESS)
			rc = step_end(nd, start, op_rc, count, job_steps);
		if (rc != 0 || horizon_reached())
			return rc != 0 ? rc : RECOVER;
	}
	int rc = weights_fetch(nd, v.donor);
	if (rc != 0 || horizon_reached())
		return rc != 0 ? rc : RECOVER;
	if (rj != NULL)
		rj->synced_s = simgrid_get_clock() - admitted;
	nd->rejoin = false;
	return 0;
}

static void node_train(struct node *nd)
{
	const struct sim_scenario *s = W.s;
	size_t count = grad_count();
	uint64_t job_steps = 0;

	buffers_ensure(nd, count + 4 * (size_t)W.n); /* room for straggler_slots */
	if (nd->rejoin && rejoin_admit(nd, count, &job_steps) != 0)
		return;
	while (!horizon_reached()) {
		int rc = 0, op_rc = 0;
		if (nd->work_busy) /* compute left from before a recovery */
			rc = poll_until(nd, NULL, NULL, true, UINT64_MAX);
		double start = simgrid_get_clock();
		if (rc == 0) {
			nd->work_flops =
			    samples_of(nd) * sim_flops_per_sample(s) / s->mfu * nd->slow;
			nd->work_busy = true;
			sg_sem_release(nd->work_sem);
			rc = poll_until(nd, NULL, NULL, true, UINT64_MAX);
			nd->compute_s = simgrid_get_clock() - start; /* what this rank measured */
		}
		if (rc == 0 && !horizon_reached() && nd->strag_on)
			straggler_fill(nd, count);
		if (rc == 0 && !horizon_reached())
			rc = allreduce_once(nd, count, straggler_slots(nd), &op_rc);
		/* keel: the core restarts the collective on the new view and training goes on.
		 * restart/timeout: a lost member (or the collective's timeout) restarts the job. */
		bool restart = s->recovery != SIM_RECOVER_KEEL &&
			       ((op_rc != 0 && op_rc != -EINPROGRESS) || nd->view_shrunk);
		if (rc == 0 && op_rc != 0 && op_rc != -EINPROGRESS && !restart) {
			nd->left_out |= op_rc == KEEL_EEXCLUDED;
			continue; /* a failed step (counted); the next one runs on the new view */
		}
		if (rc == 0 && restart) {
			recovery_arrive(nd);
			rc = poll_until(nd, NULL, NULL, false, UINT64_MAX);
		}
		if (rc == 0 && !horizon_reached())
			rc = step_end(nd, start, op_rc, count, &job_steps);
		if (rc == RECOVER) {
			if (regen(nd) != 0)
				return;
			continue;
		}
		if (rc != 0 || horizon_reached())
			return;
	}
}

/* Fidelity runs: every rank starts repetition k at the same simulated time. */
static double *ar_end_s;

static double ar_spacing_s(void)
{
	double model = W.r->allreduce_model_s;
	return model * 20 + 2e-3;
}

static void node_allreduce(struct node *nd)
{
	size_t count = W.s->allreduce_bytes / 4;
	buffers_ensure(nd, count ? count : 1);
	for (uint32_t k = 0; k < W.s->repeat; k++) {
		double start = 1e-3 + k * ar_spacing_s();
		int op_rc = 0;
		if (poll_until(nd, NULL, NULL, false, ns_of(start)) != 0)
			return;
		if (allreduce_once(nd, count, 0, &op_rc) != 0 || op_rc != 0)
			return;
		double end = simgrid_get_clock() - start;
		if (end > ar_end_s[k])
			ar_end_s[k] = end;
	}
}

static void node_main(int argc, char **argv)
{
	struct node *nd = sg_actor_self_get_data();
	char err[256] = "";
	(void)argc;
	(void)argv;
	if (W.restart_until_s >
	    simgrid_get_clock()) /* started for a relaunch: it takes this long */
		sg_actor_sleep_until(fmin(W.restart_until_s, W.horizon_s));
	if (horizon_reached()) {
		nd->done = true;
		return;
	}
	if (node_setup(nd, err, sizeof(err)) != 0) {
		fprintf(stderr, "keel-sim: node %u: %s\n", nd->e, err);
		W.r->setup_failed = true;
		nd->done = true;
		return;
	}
	if (nd->life > 0 && !nd->rejoin && nd->rejoin_idx < SIM_REJOINS_MAX) /* relaunched */
		W.r->rejoins[nd->rejoin_idx].admitted_s =
		    simgrid_get_clock() - W.r->rejoins[nd->rejoin_idx].at_s;
	if (strcmp(W.s->mode, "train") == 0)
		node_train(nd);
	else if (strcmp(W.s->mode, "allreduce") == 0)
		node_allreduce(nd);
	else
		(void)poll_until(nd, NULL, NULL, false, UINT64_MAX);
	if (nd->gen == W.gen && nd->kn != NULL)
		view_compare(nd); /* every survivor ends on the same view */
	detect_collect(nd);
	if (nd->kn != NULL)
		counters_keep(nd);
	if (W.debug && nd->kn != NULL) {
		struct keel_counters k;
		keel_counters_get(nd->kn, &k);
		fprintf(
		    stderr,
		    "node %u: tx %llu rx %llu data %llu retransmits %llu acks %llu hb %llu "
		    "blocked %llu drops win %llu dup %llu epoch %llu | proposals %llu restarted "
		    "%llu failed %llu\n",
		    nd->e, (unsigned long long)k.tx_datagrams, (unsigned long long)k.rx_datagrams,
		    (unsigned long long)k.data_sent, (unsigned long long)k.retransmits,
		    (unsigned long long)k.acks_sent, (unsigned long long)k.heartbeats_sent,
		    (unsigned long long)k.tx_blocked, (unsigned long long)k.drop_window,
		    (unsigned long long)k.drop_duplicate, (unsigned long long)k.drop_epoch,
		    (unsigned long long)k.view_proposals, (unsigned long long)k.ops_restarted,
		    (unsigned long long)k.ops_failed);
	}
	sim_net_stop_receiver(W.net, nd->e);
	nd->done = true;
}

/* ---- faults ---- */

static uint64_t rng_next(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int fault_cmp(const void *a, const void *b)
{
	const struct sim_fault *x = a, *y = b;
	if (x->at_s != y->at_s)
		return x->at_s < y->at_s ? -1 : 1;
	return x->a < y->a ? -1 : x->a > y->a;
}

static void links_scale(const char *name, bool off)
{
	static double saved[SIM_FAULTS_MAX * 2];
	static char saved_name[SIM_FAULTS_MAX * 2][80];
	static uint32_t saved_count;
	sg_link_t *links = sg_link_list();
	size_t n = sg_link_count(), len = strlen(name);

	for (size_t i = 0; i < n; i++) {
		const char *ln = sg_link_get_name(links[i]);
		if (strncmp(ln, name, len) != 0 || (ln[len] != '\0' && ln[len] != '_'))
			continue;
		if (off && saved_count < SIM_FAULTS_MAX * 2) {
			snprintf(saved_name[saved_count], sizeof(saved_name[0]), "%s", ln);
			saved[saved_count++] = sg_link_get_bandwidth(links[i]);
			sg_link_set_bandwidth(links[i], 1.0); /* nothing gets through in time */
		} else if (!off) {
			for (uint32_t k = 0; k < saved_count; k++)
				if (strcmp(saved_name[k], ln) == 0)
					sg_link_set_bandwidth(links[i], saved[k]);
		}
	}
	free(links);
}

static void failure_record(uint32_t h, enum sim_cause cause)
{
	if (W.fail_count < SIM_FAILURES_MAX) {
		struct failure_rec *f = &W.fail[W.fail_count++];
		memset(f, 0, sizeof(*f));
		f->at_s = simgrid_get_clock();
		f->host = h;
		f->cause = cause;
		f->gen = W.gen;
		f->step_start_s = W.last_step_end_s;
	}
}

static void host_off(uint32_t h, enum sim_cause cause)
{
	struct node *nd = &W.nodes[h];
	if (!nd->alive)
		return; /* already down (its server failed before it, or it before its server) */
	failure_record(h, cause);
	nd->alive = false;
	sim_net_set_alive(W.net, h, false);
	sg_host_turn_off(W.hosts[h]);
	recovery_try_release(); /* the others may all be waiting for this one */
}

/* A host the platform file's state profile turns off (keel-sim's own faults mark the node dead
 * first): a failure like --fail's, at that time; SimGrid has killed its actors. Its return
 * is not followed (SimGrid does not restart them; --recover would). */
static void host_off_by_platform(sg_host_t host)
{
	for (uint32_t e = 0; e < W.n; e++) {
		struct node *nd = &W.nodes[e];
		if (W.hosts[e] != host || !nd->alive || nd->done)
			continue;
		failure_record(e, SIM_CAUSE_FAULT);
		nd->alive = false;
		sim_net_set_alive(W.net, e, false);
		recovery_try_release(); /* the others may all be waiting for this one */
	}
}

/* SIGSTOP and SIGCONT: the node and its compute stop where they are; datagrams for it queue
 * at its receiver as in a socket buffer. Its failure is costed like a death's (detection,
 * view), its readmission later restarts the collectives once more. */
static void host_pause(uint32_t h, bool stop)
{
	struct node *nd = &W.nodes[h];
	if (!nd->alive || nd->done || nd->paused == stop)
		return;
	nd->paused = stop;
	if (stop) {
		nd->was_paused = true;
		failure_record(h, SIM_CAUSE_PAUSE);
		sg_actor_suspend(nd->actor);
		if (nd->worker != NULL)
			sg_actor_suspend(nd->worker);
		return;
	}
	sg_actor_resume(nd->actor);
	if (nd->worker != NULL)
		sg_actor_resume(nd->worker);
	sim_net_wake(W.net, h);
}

/* A node's actors on its host: its receiver, the node, and in mode train its compute worker. */
static void node_actors_start(struct node *nd)
{
	sim_net_start_receiver(W.net, nd->e);
	nd->actor = spawn("node", nd->e, node_main, nd, false);
	if (strcmp(W.s->mode, "train") == 0)
		nd->worker = spawn("gpu", nd->e, worker_main, nd, true);
}

/* A later life of nd's process (a repair): a new keel node on the same host, which rejoins the
 * running job (keel) or is part of the relaunched one (restart modes). */
static void node_start(struct node *nd, bool rejoin)
{
	nd->life++;
	nd->life_start_s = simgrid_get_clock();
	nd->rejoin = rejoin;
	nd->relaunch = false;
	nd->alive = true;
	nd->done = nd->paused = false;
	nd->kn = NULL; /* the last life's node went with its actor; its memory is reused */
	nd->tp = nd->chaos = NULL;
	nd->left_out = true; /* its step count comes from the members it joins */
	nd->acct = nd->admitted = false;
	nd->work_busy = false;
	nd->work_sem = sg_sem_init(0);
	for (uint32_t e = 0; e < W.n; e++) /* keel's clock as the others have it */
		if (e != nd->e && W.nodes[e].alive && !W.nodes[e].done)
			nd->clock_off_ns = W.nodes[e].clock_off_ns;
	node_actors_start(nd);
}

/* A failed host is repaired (--recover, --mttr): its process comes back. */
static void host_repair(uint32_t e)
{
	struct node *nd = &W.nodes[e];
	if (nd->alive || nd->relaunch)
		return; /* never failed (or its server's repair came first), or already waiting */
	sg_host_turn_on(W.hosts[e]);
	detect_forget(e);
	nd->rejoin_idx = W.r->rejoin_count;
	if (W.r->rejoin_count < SIM_REJOINS_MAX)
		W.r->rejoins[W.r->rejoin_count] =
		    (struct sim_rejoin){.at_s = simgrid_get_clock(), .host = e};
	W.r->rejoin_count++;
	if (W.s->recovery == SIM_RECOVER_KEEL)
		node_start(nd, true);
	else
		nd->relaunch = true; /* with the job's next relaunch (recovery_try_release) */
}

static void fault_apply(const struct sim_fault *f)
{
	switch (f->kind) {
	case SIM_FAULT_PAUSE:
	case SIM_FAULT_RESUME:
		host_pause(f->a, f->kind == SIM_FAULT_PAUSE);
		break;
	case SIM_FAULT_HOST_OFF:
		host_off(f->a, f->cause);
		break;
	case SIM_FAULT_HOST_ON:
		host_repair(f->a);
		break;
	case SIM_FAULT_LINK_OFF:
	case SIM_FAULT_LINK_ON:
		links_scale(f->link, f->kind == SIM_FAULT_LINK_OFF);
		break;
	case SIM_FAULT_SLOW:
		W.nodes[f->a].slow = f->factor;
		break;
	case SIM_FAULT_CUT: {
		struct node *x = &W.nodes[f->a], *y = &W.nodes[f->b];
		if (x->chaos != NULL && y->chaos != NULL && x->gen == W.gen && y->gen == W.gen) {
			if (keel_chaos_cut(x->chaos, y->rank, true) != 0 ||
			    keel_chaos_cut(y->chaos, x->rank, true) != 0)
				fprintf(stderr, "keel-sim: cut %u:%u refused\n", f->a, f->b);
		}
		break;
	}
	}
}

static void controller_main(int argc, char **argv);

/* The controller plays the faults from a host of the platform; before a fault turns that host
 * off, it hands on to a live one (its successor goes on from W.fault_next, W.ctl_tick). With
 * every host down there is nothing left to control. */
static void controller_start(void)
{
	for (uint32_t i = 1; i <= W.n; i++) {
		uint32_t e = (W.ctl_host + i) % W.n;
		if (!W.nodes[e].alive || (e == W.ctl_host && i != W.n))
			continue;
		if (e == W.ctl_host)
			return; /* every other host is down, and this one goes next */
		W.ctl_host = e;
		sg_actor_t ctl = sg_actor_init("controller", W.hosts[e]);
		sim_actor_start_guarded(ctl, controller_main);
		sg_actor_daemonize(ctl);
		return;
	}
}

static void controller_main(int argc, char **argv)
{
	const struct sim_scenario *s = W.s;
	struct sim_fault *faults = W.faults;
	uint32_t count = W.fault_n;
	double tick = W.horizon_s / 10;
	(void)argc;
	(void)argv;
	for (; W.ctl_tick <= 10; W.ctl_tick++) {
		double t = W.ctl_tick * tick;
		while (W.fault_next < count && faults[W.fault_next].at_s <= t) {
			sg_actor_sleep_until(faults[W.fault_next].at_s);
			sim_ff_reset(&W.ff); /* anything may change from here: measure again */
			const struct sim_fault *f = &faults[W.fault_next++];
			if (f->kind == SIM_FAULT_HOST_OFF && f->a == W.ctl_host &&
			    W.nodes[f->a].alive) {
				W.fault_next--;
				controller_start(); /* the successor applies it */
				return;
			}
			fault_apply(f);
		}
		sg_actor_sleep_until(t);
		if (s->progress)
			fprintf(stderr, "keel-sim: %.1f / %.1f simulated s, %llu steps\n", t,
				W.horizon_s, (unsigned long long)W.steps);
	}
}

/* ---- the run ---- */

/* Failures whose recovery overlaps an earlier one's share that time: each is charged only what
 * it adds past the recovery already under way, so that the sums are the job's time lost (8
 * GPUs of a server failing at once cost one detection and one view change, not eight). */
static void overlap_trim(struct sim_result *r)
{
	double covered_s = -1; /* the end of the latest recovery window so far */
	uint32_t owner = UINT32_MAX;
	for (uint32_t i = 0; i < r->failure_count && i < SIM_FAILURES_MAX; i++) {
		struct sim_failure_cost *c = &r->failures[i];
		double detect_end = c->at_s + c->detect_s, view_end = detect_end + c->view_s;
		double end = view_end + c->restart_s;
		c->within = UINT32_MAX;
		if (c->at_s < covered_s) {
			double from_view = fmax(covered_s, detect_end);
			c->detect_s = detect_end > covered_s ? detect_end - covered_s : 0;
			c->view_s = view_end > from_view ? view_end - from_view : 0;
			c->restart_s = c->rollback_s = c->redo_s = 0;
			c->within = owner;
		}
		if (end > covered_s) {
			covered_s = end;
			owner = c->within != UINT32_MAX ? c->within : i;
		}
	}
}

/* A host's server: the "server" property keel-sim's platforms give every GPU (a user's file
 * may too), a number below the host count; a host without one (or with another value) is a
 * server of its own, numbered from n up. */
static uint32_t host_server(uint32_t e)
{
	const char *v = sg_host_get_property_value(W.hosts[e], "server");
	char *end = NULL;
	unsigned long num = v != NULL ? strtoul(v, &end, 10) : 0;
	bool ok = v != NULL && *v != '\0' && *end == '\0' && num < W.n;
	return ok ? (uint32_t)num : W.n + e;
}

/* A lifetime with mean `mean_s`: Weibull of shape k (k = 1: exponential), whose scale is
 * mean / Gamma(1 + 1/k). Shapes below 1 give infant mortality, above 1 wear-out. */
static double lifetime_s(uint64_t *rng, double mean_s, double k)
{
	double u = ((double)(rng_next(rng) >> 11) + 0.5) / 9007199254740992.0;
	return mean_s / tgamma(1.0 + 1.0 / k) * pow(-log(u), 1.0 / k);
}

static int fault_add(const struct sim_fault *f)
{
	if (W.fault_n == W.fault_cap) {
		uint32_t cap = W.fault_cap ? 2 * W.fault_cap : 64;
		struct sim_fault *grown = realloc(W.faults, cap * sizeof(*grown));
		if (grown == NULL)
			return -ENOMEM;
		W.faults = grown;
		W.fault_cap = cap;
	}
	W.faults[W.fault_n++] = *f;
	return 0;
}

/* Host e fails at t (and, with a repair time, comes back at t + repair_s), within the horizon.
 */
static int host_dies(uint32_t e, double t, enum sim_cause cause, double repair_s)
{
	int rc = 0;
	if (t < W.horizon_s)
		rc = fault_add(&(struct sim_fault){
		    .kind = SIM_FAULT_HOST_OFF, .cause = cause, .at_s = t, .a = e});
	if (rc == 0 && repair_s > 0 && t + repair_s < W.horizon_s)
		rc = fault_add(&(struct sim_fault){
		    .kind = SIM_FAULT_HOST_ON, .cause = cause, .at_s = t + repair_s, .a = e});
	return rc;
}

/* One GPU's or server's failures (and repairs) up to the horizon: lifetimes of mean mtbf_s,
 * each failure repaired after an exponential time of mean mttr (then a new lifetime); only the
 * first without --mttr. */
static int lifetimes(const struct sim_scenario *s, uint64_t *rng, uint32_t server, uint32_t e,
		     double mtbf_s, enum sim_cause cause)
{
	for (double t = 0; t < W.horizon_s;) {
		t += lifetime_s(rng, mtbf_s, s->weibull_k);
		double repair_s = s->mttr_s > 0 ? lifetime_s(rng, s->mttr_s, 1.0) : 0;
		for (uint32_t h = 0; h < W.n; h++) {
			bool hit = cause == SIM_CAUSE_SERVER ? host_server(h) == server : h == e;
			if (hit && host_dies(h, t, cause, repair_s) != 0)
				return -ENOMEM;
		}
		if (repair_s == 0)
			break;
		t += repair_s;
	}
	return 0;
}

/* Random failures, lifetimes per GPU (--mtbf), then per server (--mtbf-server), which takes
 * all its GPUs down at once; whichever comes first ends a GPU. With --mttr the failed come back
 * and fail again. Drawn in host order, then server order, from the run's seed: the same seed
 * gives the same failures. */
static int random_failures(const struct sim_scenario *s, uint64_t *rng)
{
	for (uint32_t e = 0; s->mtbf_s > 0 && e < W.n; e++)
		if (lifetimes(s, rng, 0, e, s->mtbf_s, SIM_CAUSE_GPU) != 0)
			return -ENOMEM;
	for (uint32_t sv = 0; s->mtbf_server_s > 0 && sv < 2 * W.n; sv++) {
		bool any = false;
		for (uint32_t e = 0; e < W.n && !any; e++)
			any = host_server(e) == sv;
		if (any && lifetimes(s, rng, sv, 0, s->mtbf_server_s, SIM_CAUSE_SERVER) != 0)
			return -ENOMEM;
	}
	return 0;
}

static int faults_build(const struct sim_scenario *s, char *err, size_t err_len)
{
	uint64_t rng = s->seed * 0x2545f4914f6cdd1dull + 17;

	for (uint32_t i = 0; i < s->fault_count; i++) {
		const struct sim_fault *f = &s->faults[i];
		if (f->a >= W.n || (f->kind == SIM_FAULT_CUT && f->b >= W.n)) {
			snprintf(err, err_len, "fault at %.3f s names host %u; hosts are 0..%u",
				 f->at_s, f->kind == SIM_FAULT_CUT ? f->b : f->a, W.n - 1);
			return -EINVAL;
		}
		if (f->kind == SIM_FAULT_CUT && s->chaos[0] == '\0') {
			snprintf(err, err_len,
				 "cut=%u:%u needs the chaos transport (--chaos seed=1)", f->a,
				 f->b);
			return -EINVAL;
		}
		if (fault_add(f) != 0 ||
		    (f->kind == SIM_FAULT_PAUSE &&
		     fault_add(&(struct sim_fault){
			 .kind = SIM_FAULT_RESUME, .at_s = f->at_s + f->factor, .a = f->a}) != 0))
			return -ENOMEM;
	}
	if (random_failures(s, &rng) != 0)
		return -ENOMEM;
	if (W.fault_n > 0)
		qsort(W.faults, W.fault_n, sizeof(*W.faults), fault_cmp);
	return 0;
}

/* The generated platform of a --cluster description: hosts gpu-NNNN in group order. */
static int cluster_load(const struct sim_scenario *s, char *err, size_t err_len)
{
	char path[] = "/tmp/keel-sim-XXXXXX";
	struct sim_cluster c;
	int rc = sim_cluster_parse(s->cluster_spec, &c, err, err_len);
	if (rc != 0)
		return rc;
	int fd = mkstemp(path);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (f == NULL) {
		snprintf(err, err_len, "cannot write a platform file in /tmp");
		return -EIO;
	}
	rc = sim_cluster_write_xml(&c, f);
	fclose(f);
	if (rc == 0)
		rc = sim_platform_load(path, err, err_len);
	unlink(path);
	if (rc != 0)
		return rc;
	W.n = s->ranks ? s->ranks : c.gpu_count;
	if (W.n > c.gpu_count) {
		snprintf(err, err_len, "%u ranks asked, the cluster has %u GPUs", W.n, c.gpu_count);
		return -EINVAL;
	}
	W.hosts = calloc(W.n, sizeof(*W.hosts));
	for (uint32_t i = 0; i < W.n; i++) {
		char name[32];
		snprintf(name, sizeof(name), "gpu-%04u", i);
		W.hosts[i] = sg_host_by_name(name);
	}
	return 0;
}

/* A user's platform: SimGrid reads it, then the engine says which hosts it made (whatever
 * the file used: hosts, clusters, cabinets, peers, nested zones). */
static int platform_load(const struct sim_scenario *s, char *err, size_t err_len)
{
	if (s->cluster_spec[0] != '\0')
		return cluster_load(s, err, err_len);
	int rc = sim_platform_open(s->platform_file, err, err_len);
	if (rc != 0)
		return rc;
	size_t count = sg_host_count();
	if (count == 0) { /* sg_host_list would abort */
		snprintf(err, err_len, "platform file '%s' has 0 hosts", s->platform_file);
		return -EINVAL;
	}
	sg_host_t *list = sg_host_list();
	W.n = s->ranks ? s->ranks : (uint32_t)count;
	if (count < W.n || W.n == 0 || W.n > SIM_HOSTS_MAX) {
		snprintf(err, err_len, "platform file '%s' has %zu hosts, %u ranks asked (1..%u)",
			 s->platform_file, count, W.n, SIM_HOSTS_MAX);
		free(list);
		return -EINVAL;
	}
	W.hosts = calloc(W.n, sizeof(*W.hosts));
	memcpy(W.hosts, list, W.n * sizeof(*W.hosts));
	free(list);
	return 0;
}

/* Each endpoint's server (host_server), kept for the run. */
static void servers_read(void)
{
	for (uint32_t e = 0; e < W.n; e++)
		W.server[e] = host_server(e);
}

/* The smallest datagram size the core accepts for this world (its views travel in one). */
static uint32_t mtu_smallest(uint32_t world, uint32_t window)
{
	struct keel_transport t = {.mtu = KEEL_MTU_MAX, .rank = 0, .world_size = world};
	struct keel_transport_ops ops = {.name = "probe"};
	struct keel_config cfg;

	t.ops = &ops;
	keel_config_default(&cfg);
	cfg.world_size = world;
	cfg.window = window;
	cfg.transport = &t;
	for (uint32_t mtu = KEEL_MTU_MIN; mtu < KEEL_MTU_MAX; mtu *= 2) {
		cfg.mtu = mtu;
		if (keel_storage_size(&cfg) != 0)
			return mtu;
	}
	return KEEL_MTU_DEFAULT;
}

/* The ring's per-step latency and bandwidth: the slowest neighbour route. */
static void ring_model(void)
{
	double alpha = 0, beta = 0;
	for (uint32_t i = 0; i < W.n; i++) {
		sg_host_t a = W.hosts[i], b = W.hosts[(i + 1) % W.n];
		if (W.n == 1)
			break;
		double lat = sg_host_get_route_latency(a, b),
		       bw = sg_host_get_route_bandwidth(a, b);
		alpha = lat > alpha ? lat : alpha;
		beta = beta == 0 || bw < beta ? bw : beta;
		W.max_lat_s = lat > W.max_lat_s ? lat : W.max_lat_s;
	}
	/* Detection bound: the slowest route between any two ranks (first and last are the
	 * furthest apart in generated platforms). */
	if (W.n > 1) {
		double l = sg_host_get_route_latency(W.hosts[0], W.hosts[W.n - 1]);
		W.max_lat_s = l > W.max_lat_s ? l : W.max_lat_s;
	}
	double S = (double)W.s->allreduce_bytes, n = W.n;
	W.r->alpha_s = alpha;
	W.r->beta_Bps = beta;
	W.r->allreduce_model_s = beta > 0 ? 2 * (n - 1) * (alpha + S / (n * beta)) : 0;
	double grad = W.s->model_params * 4; /* f32 */
	W.r->grad_allreduce_s = beta > 0 ? 2 * (n - 1) * (alpha + grad / (n * beta)) : 0;
}

static void compute_span(void)
{
	double lo = 0, hi = 0;
	for (uint32_t e = 0; e < W.n; e++) {
		double share = (double)(W.s->batch / W.n) + (e < W.s->batch % W.n);
		double t =
		    share * sim_flops_per_sample(W.s) / W.s->mfu / sg_host_get_speed(W.hosts[e]);
		lo = e == 0 || t < lo ? t : lo;
		hi = t > hi ? t : hi;
	}
	W.r->compute_s_min = lo;
	W.r->compute_s_max = hi;
}

/* One step's compute with the batch split in proportion to each live GPU's speed as it is at
 * the end (after --slow): what a perfect re-partition would give. */
static double compute_ideal_s(void)
{
	double capacity = 0;
	for (uint32_t e = 0; e < W.n; e++)
		if (W.nodes[e].alive)
			capacity += sg_host_get_speed(W.hosts[e]) / W.nodes[e].slow;
	return capacity > 0 ? W.s->batch * sim_flops_per_sample(W.s) / W.s->mfu / capacity : 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The CDF of the sorted detection samples in at most SIM_DETECT_CDF_MAX points. */
static void detect_cdf(struct sim_result *r)
{
	uint32_t n = W.detect_count;
	uint32_t points = n < SIM_DETECT_CDF_MAX ? n : SIM_DETECT_CDF_MAX;

	for (uint32_t k = 0; k < points; k++) {
		size_t i = points == n ? k : (size_t)((double)k * (n - 1) / (points - 1) + 0.5);
		r->detect_cdf_s[k] = W.detect[i];
		r->detect_cdf_frac[k] = (double)(i + 1) / n;
	}
	r->detect_cdf_count = points;
}

/* Each failure's cost, from what the nodes recorded of it. */
static void failure_costs(const struct sim_scenario *s, struct sim_result *r)
{
	for (uint32_t i = 0; i < W.fail_count; i++) {
		const struct failure_rec *f = &W.fail[i];
		struct sim_failure_cost *c = &r->failures[i];
		c->at_s = f->at_s;
		c->host = f->host;
		c->server = W.server[f->host];
		c->cause = f->cause;
		if (f->release_s > 0) { /* restart modes: the job noticed, then relaunched */
			c->detect_s = f->first_arrive_s - f->at_s;
			c->view_s = f->release_s - f->first_arrive_s;
		} else if (f->first_suspect_s > 0) { /* keel: the core's detector and view */
			c->detect_s = f->first_suspect_s - f->at_s;
			c->view_s =
			    f->view_s > f->first_suspect_s ? f->view_s - f->first_suspect_s : 0;
		}
		c->view_at_s = f->release_s > 0 ? f->release_s : f->view_s;
		c->repartition_s = 0; /* a plan is made in-process in microseconds: not charged */
		c->restart_s =
		    s->recovery != SIM_RECOVER_KEEL && f->release_s > 0 ? s->restart_s : 0;
		c->rollback_s = (double)f->steps_lost * r->step_s;
		c->redo_s = f->step_start_s > 0 && f->at_s > f->step_start_s
				? f->at_s - f->step_start_s
				: 0;
	}
}

static void results(const struct sim_scenario *s, struct sim_result *r)
{
	r->ranks = W.n;
	r->sim_s = simgrid_get_clock();
	r->steps = W.steps;
	r->samples_per_s = W.steps * (double)s->batch / W.horizon_s;
	r->step_s = W.step_time_count ? W.step_time_sum / W.step_time_count : 0;
	r->goodput = r->step_s * (double)W.steps / W.horizon_s;
	r->failure_count = W.fail_count;
	r->detect_bound_s = detect_bound_s(false);
	for (uint32_t e = 0; e < W.n; e++) {
		bool first = true;
		for (uint32_t q = 0; q < e && first; q++)
			first = W.server[q] != W.server[e];
		r->servers += first;
	}
	failure_costs(s, r);
	overlap_trim(r);
	r->step_s_after_repair =
	    W.repair_steps_after > 0 ? W.repair_time_after / (double)W.repair_steps_after : 0;
	r->compute_s_ideal = compute_ideal_s();
	r->repair_on = s->repair && strcmp(s->mode, "train") == 0 && W.n <= SIM_STRAGGLER_RANKS_MAX;
	r->detect_count = W.detect_count;
	if (W.detect_count > 0) {
		qsort(W.detect, W.detect_count, sizeof(double), cmp_double);
		r->detect_p50_s = W.detect[(W.detect_count - 1) / 2];
		r->detect_p99_s = W.detect[(size_t)((W.detect_count - 1) * 0.99)];
		r->detect_max_s = W.detect[W.detect_count - 1];
		detect_cdf(r);
	}
	r->view_epochs = W.epoch_max > 0 ? W.epoch_max : 1;
	for (uint32_t e = 0; e < W.n; e++) {
		struct node *nd = &W.nodes[e];
		r->false_suspicions += nd->false_suspicions;
		r->live_excluded += nd->self_exclusions;
		r->allreduce_ops += nd->ar_ops;
		r->allreduce_wrong += nd->ar_wrong;
		r->allreduce_failed += nd->ar_failed;
		r->allreduce_hier += nd->ar_hier;
		r->compress_frags += nd->compress_frags;
		r->compress_bytes_saved += nd->compress_bytes_saved * W.scale;
		if (nd->alive && !nd->done)
			r->deadlock = true;
	}
	if (strcmp(s->mode, "allreduce") == 0 && s->repeat > 0) {
		uint32_t first = s->repeat > 1 ? 1 : 0; /* the first one learns the RTT */
		double sum = 0;
		for (uint32_t k = first; k < s->repeat; k++)
			sum += ar_end_s[k];
		r->allreduce_s = sum / (s->repeat - first);
	}
	sim_net_totals(W.net, &r->messages, &r->comms, &r->bytes, &r->rx_queue_drops);
}

/* Refused combinations, and the fidelity the run will use. */
static int run_options(const struct sim_scenario *s, struct sim_result *r, char *err,
		       size_t err_len)
{
	if (keel_env_bool("KEEL_SIM_DEBUG", &W.debug, err, err_len) < 0 ||
	    keel_env_check(err, err_len) != 0)
		return -EINVAL;
	if (s->grad && s->check) {
		snprintf(err, err_len,
			 "--check 1 compares every result exactly, and --compress "
			 "rounds them: use --compress none with --check");
		return -EINVAL;
	}
	bool train = strcmp(s->mode, "train") == 0;
	r->fidelity = s->fidelity;
	if (r->fidelity == SIM_FIDELITY_DEFAULT)
		r->fidelity = train && s->horizon_s > SIM_FIDELITY_AUTO_ABOVE_S ? SIM_FIDELITY_AUTO
										: SIM_FIDELITY_FULL;
	if (r->fidelity == SIM_FIDELITY_AUTO && !train) {
		snprintf(err, err_len,
			 "--fidelity auto leaps over training steps: it needs --mode train (mode "
			 "%s runs in full)",
			 s->mode);
		return -EINVAL;
	}
	W.ff_on = r->fidelity == SIM_FIDELITY_AUTO;
	r->views_agree = true;
	return 0;
}

/* What the run's messages call its platform: the user's file, or the cluster keel-sim wrote. */
static void platform_name(const struct sim_scenario *s, char *name, size_t len)
{
	if (s->cluster_spec[0] != '\0')
		snprintf(name, len, "cluster '%s'", s->cluster_spec);
	else
		snprintf(name, len, "platform file '%s'", s->platform_file);
}

/* The platform loaded and sealed, its routes asked for before any actor runs (SimGrid's
 * exceptions become errors here, not aborts mid-run), faults and models built on it. */
static int platform_ready(const struct sim_scenario *s, int *argc, char **argv, char *err,
			  size_t err_len)
{
	char name[300];
	simgrid_init(argc, argv);
	int rc = platform_load(s, err, err_len);
	if (rc != 0)
		return rc;
	for (uint32_t i = 0; i < W.n; i++)
		if (W.hosts[i] == NULL) {
			snprintf(err, err_len, "host %u missing from the platform", i);
			return -EINVAL;
		}
	rc = faults_build(s, err, err_len);
	if (rc != 0)
		return rc;
	platform_name(s, name, sizeof(name));
	rc = sim_platform_seal(name, err, err_len); /* routes exist only from then on */
	if (rc != 0)
		return rc;
	/* A generated cluster is one zone of known routes: its ring and one host suffice. */
	size_t all_pairs = s->cluster_spec[0] != '\0' ? 0 : SIM_ROUTES_ALL_PAIRS_MAX;
	rc = sim_routes_check((void *const *)W.hosts, W.n, all_pairs, name, err, err_len);
	if (rc != 0)
		return rc;
	for (uint32_t i = 0; i < W.n; i++)
		if (!sg_host_is_on(W.hosts[i])) { /* no actor can start there */
			snprintf(err, err_len,
				 "%s: host '%s' is off when the run starts (its state profile): "
				 "faults are keel-sim's to play (--fail, --mtbf)",
				 name, sg_host_get_name(W.hosts[i]));
			return -EINVAL;
		}
	sim_actor_guard_name(name);
	ring_model();
	compute_span();
	return 0;
}

/* Datagram scale, window and MTU for the world's size and the mode. */
static void transport_shape(const struct sim_scenario *s, struct sim_result *r)
{
	W.scale = s->grad_scale;
	if (strcmp(s->mode, "train") != 0)
		W.scale = 1;
	else if (W.scale == 0) { /* about two datagrams per rank and ring step */
		double per = s->model_params * 4 / W.n / (double)(s->mtu - 64) / 2;
		W.scale = per > 1 ? (uint32_t)per : 1;
	}
	r->grad_scale = W.scale;
	/* Window: 256 covers 50 GB/s x (RTT + ack delay); memory is world x window x mtu x 2
	 * per node, so large worlds get less, and heartbeat-only runs the least. */
	W.mtu = s->mtu;
	W.window = s->window;
	if (W.window == 0)
		W.window = W.n <= 64 ? 256 : W.n <= 256 ? 16 : 4;
	if (W.scale > 1 && s->window == 0)
		W.window = 4; /* scaled datagrams: a few in flight already fill the pipe */
	if (strcmp(s->mode, "heartbeat") == 0 && s->window == 0) {
		W.window = 2;
		W.mtu = mtu_smallest(W.n, W.window); /* a view must fit one datagram */
	}
}

/* The simulated network and the world's tables (generation 0: rank e on endpoint e). */
static int world_alloc(const struct sim_scenario *s, char *err, size_t err_len)
{
	bool heartbeat = strcmp(s->mode, "heartbeat") == 0;
	struct sim_net_config nc = {
	    .endpoints = W.n,
	    .queue_max = 65536,
	    .scale = W.scale,
	    .scale_min_len = 1024,
	    /* a window of data and control beside it; heartbeat runs carry no data
	       (transport_sim.c) */
	    .rx_gets = W.window + (heartbeat ? 2 : 16),
	    .train_max = s->trains,
	};
	W.net = sim_net_create(&nc, (void *const *)W.hosts);
	W.nodes = calloc(W.n, sizeof(*W.nodes));
	W.map = calloc(W.n, sizeof(*W.map));
	W.server = calloc(W.n, sizeof(*W.server));
	W.host_of = calloc(W.n, sizeof(*W.host_of));
	W.host_first = calloc(2 * (size_t)W.n, sizeof(*W.host_first));
	ar_end_s = calloc(s->repeat + 1, sizeof(double));
	if (W.net == NULL || W.nodes == NULL || W.map == NULL || ar_end_s == NULL ||
	    W.server == NULL || W.host_of == NULL || W.host_first == NULL)
		return -ENOMEM;
	W.members = W.n;
	for (uint32_t e = 0; e < W.n; e++)
		W.map[e] = e;
	servers_read();
	if (s->chaos[0] != '\0') {
		struct keel_chaos_config cc;
		keel_chaos_config_default(&cc);
		if (keel_chaos_parse(s->chaos, &cc) != 0) {
			snprintf(err, err_len,
				 "chaos '%s': not loss=,dup=,reorder=,delay_us=,seed=", s->chaos);
			return -EINVAL;
		}
	}
	return 0;
}

/* Every node's tables, then its actors (node, receiver, worker). */
static int nodes_start(void)
{
	for (uint32_t e = 0; e < W.n; e++) {
		struct node *nd = &W.nodes[e];
		nd->e = e;
		nd->alive = true;
		nd->slow = 1.0;
		nd->suspect_s = calloc(W.n, sizeof(double));
		nd->via_view = calloc(W.n, sizeof(bool));
		nd->excluded_s = calloc(W.n, sizeof(double));
		nd->op_members = calloc(W.n, sizeof(uint32_t));
		nd->tp_mem = malloc(sim_transport_storage_size(W.net, W.n));
		nd->work_sem = sg_sem_init(0);
		if (nd->suspect_s == NULL || nd->via_view == NULL || nd->excluded_s == NULL ||
		    nd->op_members == NULL || nd->tp_mem == NULL)
			return -ENOMEM;
		node_actors_start(nd);
	}
	return 0;
}

int sim_run(const struct sim_scenario *s, struct sim_result *r, int *argc, char **argv, char *err,
	    size_t err_len)
{
	struct timespec t0, t1;

	memset(&W, 0, sizeof(W));
	W.s = s;
	W.r = r;
	W.horizon_s = s->horizon_s;
	int rc = run_options(s, r, err, err_len);
	if (rc != 0)
		return rc;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = platform_ready(s, argc, argv, err, err_len);
	if (rc != 0)
		return rc;
	transport_shape(s, r);
	rc = world_alloc(s, err, err_len);
	if (rc == 0)
		rc = nodes_start();
	if (rc != 0)
		return rc;
	W.ctl_tick = 1;
	W.ctl_host = W.n - 1; /* controller_start begins with host 0 */
	controller_start();
	sim_host_off_watch(host_off_by_platform);
	simgrid_run();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	results(s, r);
	r->wall_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	r->rss_kb = ru.ru_maxrss;
	return 0;
}
