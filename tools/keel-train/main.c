/* keel-train: data-parallel training of a 64-32-10 MLP on the 8x8 digits over keel. Shards of
 * the data go to ranks by the partitioner; gradients are summed with one AllReduce per step;
 * a view change re-partitions over the survivors; a restarted rank gets the model from a live
 * member; a hard fault rolls every member back to the newest checkpoint they all have.
 *
 * With --tp T (2-D parallel: train_tp.h) the shards go to replicas of T ranks that split the
 * hidden layer; each gradient step runs the replica's AllGather and ReduceScatter and the
 * shard's data-parallel AllReduce first, then the same AllReduce as below, which here carries
 * no gradient but decides for everyone (whether the step counts, the state, the votes).
 * A replica that lost a member is out of the plan until it is whole again; its survivors keep
 * calling their data-parallel AllReduce (with nothing in it), so no other replica waits.
 *
 * Every collective this program runs has the same shape (one f64 SUM AllReduce of VEC_LEN):
 * a gradient step, a state transfer (only the donor contributes, so the sum is its state) and
 * a rollback vote differ only in what the ranks put in. A rank admitted while the survivors
 * have a collective pending (view.ops_resume) therefore always lines up: it calls the same
 * AllReduce with zeros and its "I need the state" flag, whatever the survivors were doing. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "keel/boot.h"
#include "keel/checkpoint.h"
#include "keel/partition.h"
#include "keel/straggler.h"
#include "plot.h"
#include "train_feed.h"
#include "train_model.h"
#include "train_tp.h"

#define RANKS_MAX  64u /* keel-train's own cap: per-rank flag slots in every vector */
#define SHARDS	   64u /* data shards the partitioner places (sample i is in shard i % SHARDS) */
#define EVENTS_MAX 16u
#define KEEP	   4u
#define TOOL	   "keel-train"
/* Option ranges (--help states them). */
#define EPOCHS_MAX     100000u
#define CKPT_EVERY_MAX 1000000000ull
#define STEP_MAX       1000000000000ull
#define BENCH_MIB_MAX  65536u
#define LR_MIN	       1e-9
#define LR_MAX	       100.0

/* The vector every collective reduces: payload, then scalars, then per-rank flags. */
enum {
	S_LOSS = TRAIN_PARAMS, /* GRAD: summed loss */
	S_CORRECT,	       /* GRAD: batch samples predicted right */
	S_SAMPLES,	       /* GRAD: samples contributed (must sum to the batch) */
	S_MARKER,	       /* STATE: 1 from the donor (0: the donor was lost, try again) */
	S_STEP,		       /* STATE: the donor's step */
	S_ROLLBACK,	       /* a member had a hard fault: roll back next */
	S_KIND,		       /* each synced member adds its kind: checks everyone agreed */
	S_SYNCED,	       /* synced members */
	S_AT,		       /* --tp: the sum of the synced members' steps (for those out) */
	S_REGROUP, /* --tp: a member's groups are gone or out of step: make them again */
	S_NEED,	   /* + rank: this rank needs the state (just restarted) */
	S_VOTED = S_NEED + RANKS_MAX, /* + rank: this rank voted (VOTE) */
	S_TIME = S_VOTED + RANKS_MAX, /* + rank: GRAD: its compute time for the step, seconds */
	VEC_LEN = S_TIME + RANKS_MAX,
};
_Static_assert(RANKS_MAX *KEEP <= TRAIN_PARAMS, "a rollback vote fits the payload");

enum kind { K_GRAD = 1, K_STATE = 2, K_VOTE = 3 };

struct opts {
	uint32_t epochs, batch;
	float lr;
	uint64_t seed;
	const char *data, *ckpt_dir, *dump;
	uint64_t ckpt_every;
	uint64_t fault_step; /* UINT64_MAX: none */
	uint32_t fault_rank;
	/* Faults at a training step, in the rank's first life (the demo; tests): --crash-at
	 * SIGKILLs the rank, --stall-at stops it (SIGSTOP) for stall_s seconds. */
	uint64_t crash_step, stall_step; /* UINT64_MAX: none */
	uint32_t crash_rank, stall_rank;
	double stall_s;
	bool reference, quiet;
	bool print_plans;   /* --print-plans: each rank prints its plan's digest at every view */
	uint64_t bench_mib; /* --bench-state: measure checkpoint and live-recovery paths */
	const char *plot;   /* --plot FILE.svg|png: the leader draws the curves at the end */
	/* --slow RANK:FACTOR[@STEP]: that rank computes FACTOR times slower from STEP on;
	 * --compute-us N: each sample's gradient costs N us more (a model heavier than this one,
	 * so that compute, not the network, sets the step time) */
	uint32_t slow_rank; /* UINT32_MAX: none */
	double slow_factor;
	uint64_t slow_step;
	double compute_us;
	bool no_repair; /* --no-repair: measure, never re-partition (the static split) */
	/* --shards FILE: train from the sharded binary file (written from --data if missing),
	 * each rank pre-loading its shards; --preload demand: read each when first needed */
	const char *shards;
	bool preload_ahead;
	bool cold; /* --cold: each rank drops the file from the page cache at each of its epochs */
	/* --compress: every collective is an f32 gradient AllReduce; gradient steps pass error
	 * feedback memory, so keel may send them as bf16/f16 (KEEL_COMPRESS decides) */
	bool compress;
	/* --tp T: ranks of a tensor-parallel replica (1: data parallel alone); --dp N: replicas,
	 * checked against the job's size (0: whatever it gives) */
	uint32_t tp, dp;
};

struct epoch_point { /* one epoch's end, as this rank saw it */
	double loss, accuracy;
	bool seen;
};

struct event { /* a failure seen by this rank */
	uint32_t rank;
	uint64_t step; /* this rank's step when it suspected the peer */
	uint64_t suspected_ns, last_heard_ns, view_ns, resumed_ns;
	uint32_t steps_lost;
};

struct trainer {
	struct keel_boot b;
	struct opts o;
	uint32_t rank, world;
	struct train_data *d;
	struct train_feed *feed; /* --shards: where the train rows come from (NULL: from d) */
	float w[TRAIN_PARAMS];
	double in[VEC_LEN], out[VEC_LEN];
	float in32[VEC_LEN], out32[VEC_LEN], feedback[2 * VEC_LEN]; /* --compress */
	uint64_t step, total_steps, spe;			    /* spe: steps per epoch */
	uint32_t *order;
	uint64_t order_epoch;
	struct keel_plan *plan;
	uint32_t plan_epoch, members[RANKS_MAX], member_count;
	/* The plan's workers: the members, or with --tp the first rank of each whole replica. */
	uint32_t workers[RANKS_MAX], worker_count;
	struct train_tp *tp; /* --tp > 1 */
	/* --tp: a rank whose replica lost a member is out (not synced, no state asked) until the
	 * replica is whole again; job_step is the others' step, its way to see the end */
	uint64_t job_step, out_step, back_step;
	uint32_t outs;
	bool ended_out;
	bool synced, rollback_pending;
	enum kind next;
	struct keel_ckpt *ck;
	/* figures */
	uint64_t t_start_ns, t_admitted_ns, t_synced_ns, steps_lost, rollbacks, samples_done;
	uint32_t exclusions; /* times the others went on without this rank (it was paused) */
	bool job_ended;	     /* training ended while this rank waited to be admitted back */
	uint64_t epoch_t0_ns, epoch_samples;
	double epoch_loss;
	struct epoch_point *curve; /* --plot: [epochs]; an epoch redone is written again */
	uint64_t rollback_to;
	struct event ev[EVENTS_MAX];
	uint32_t ev_count;
	uint64_t view_step[EVENTS_MAX]; /* --plot: this rank's step at each view it installed */
	uint32_t view_step_count;
	bool ev_open;	/* the latest event still waits for its next completed step */
	bool recording; /* failures are counted while training, not while ranks leave at the end */
	uint64_t heard_ns[RANKS_MAX]; /* when each peer was last heard, sampled after each poll */
	/* rejoins seen by the members: who, when their flag was first seen, when the state went */
	uint32_t rejoin_rank, rejoin_count;
	uint64_t rejoin_seen_ns, rejoin_done_ns, rejoin_step, synced_step;
	/* stragglers: every member feeds the same measured times to the same controller */
	struct keel_straggler strag;
	double strag_mem[3 * RANKS_MAX];
	uint32_t repairs;
	uint64_t after_repair_steps; /* steps since the last repair (or the start) ... */
	double after_repair_max_s;   /* ... and the slowest rank's compute over them */
};

static struct train_data g_data;
static struct train_feed g_feed;
static struct train_tp g_tp;

static void on_peer(void *ctx, uint32_t peer, enum keel_peer_state st, uint64_t now_ns)
{
	struct trainer *t = ctx;
	if (st != KEEL_PEER_SUSPECTED) /* DEAD without suspicion: a clean leave */
		return;
	for (uint32_t i = 0; i < t->ev_count; i++)
		if (t->ev[i].rank == peer && t->ev[i].resumed_ns == 0)
			return; /* the same failure, reported again (suspected, then dead) */
	if (t->ev_count == EVENTS_MAX || !t->synced || !t->recording)
		return;
	struct event *e = &t->ev[t->ev_count++];
	memset(e, 0, sizeof(*e));
	e->rank = peer;
	e->step = t->step;
	e->suspected_ns = now_ns;
	e->last_heard_ns = peer < RANKS_MAX ? t->heard_ns[peer] : 0;
	t->ev_open = true;
}

static void on_view(void *ctx, const struct keel_view *v, const uint32_t *m, uint64_t now_ns)
{
	struct trainer *t = ctx;
	(void)m;
	if (v->self_joined && t->t_admitted_ns == 0)
		t->t_admitted_ns = now_ns;
	if (t->recording && t->view_step_count < EVENTS_MAX)
		t->view_step[t->view_step_count++] = t->step;
	for (uint32_t i = 0; i < t->ev_count; i++)
		if (t->ev[i].view_ns == 0)
			t->ev[i].view_ns = now_ns;
}

static void tweak(struct keel_config *cfg, void *ctx)
{
	cfg->on_peer = on_peer;
	cfg->on_view = on_view;
	cfg->on_peer_ctx = cfg->on_view_ctx = ctx;
}

/* FNV-1a over what makes two runs' checkpoints interchangeable. */
static uint64_t config_hash(const struct opts *o)
{
	uint64_t h = 1469598103934665603ull;
	uint64_t parts[6] = {TRAIN_PARAMS, o->batch, o->seed, 0, SHARDS, o->tp};
	memcpy(&parts[3], &o->lr, sizeof(o->lr));
	const uint8_t *p = (const uint8_t *)parts;
	/* --tp 1 hashes what it always did; --tp T > 1 files hold one shard current */
	size_t len = o->tp > 1 ? sizeof(parts) : sizeof(parts) - sizeof(parts[5]);
	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* --tp: whether every rank of replica q is among the members. */
static bool replica_whole(const uint32_t *members, uint32_t count, uint32_t q, uint32_t tp)
{
	uint32_t found = 0;
	for (uint32_t i = 0; i < count; i++)
		found += members[i] / tp == q;
	return found == tp;
}

/* Shards to the members of the view, equal rates: LPT, balanced by count (64 shards hashed
 * over 4 ranks by rendezvous came out 21/13/16/14). Made afresh at each view, from the view
 * alone, so a restarted rank gets the plan the others have (every rank holds all the data:
 * nothing needs to stay put). Straggler repairs then re-weigh it by measured speed, at the
 * same step on every member. --tp: the workers are the whole replicas (a replica's members
 * compute the same samples), each named by its first rank. */
static int replan(struct trainer *t, const uint32_t *members, uint32_t count)
{
	struct keel_worker wk[RANKS_MAX];
	memcpy(t->members, members, count * sizeof(uint32_t));
	t->member_count = count;
	t->worker_count = 0;
	for (uint32_t i = 0; i < count; i++) /* --tp: whole replicas, named by their first rank */
		if (t->o.tp == 1 || (members[i] % t->o.tp == 0 &&
				     replica_whole(members, count, members[i] / t->o.tp, t->o.tp)))
			t->workers[t->worker_count++] = members[i];
	t->after_repair_steps = 0;
	t->after_repair_max_s = 0;
	if (t->worker_count == 0) /* --tp: no whole replica left (shards_lost says so) */
		return 0;
	return keel_straggler_plan_view(&t->strag, t->plan, t->workers, t->worker_count, wk);
}

static uint32_t shard_rank(const struct trainer *t, uint32_t shard)
{
	uint32_t w = keel_plan_owner(t->plan, shard);
	return w < t->worker_count ? t->workers[w] : UINT32_MAX;
}

/* --tp: whether replica q is in the plan (a whole replica of the view). */
static bool in_plan(const struct trainer *t, uint32_t q)
{
	for (uint32_t w = 0; w < t->worker_count; w++)
		if (t->workers[w] / t->o.tp == q)
			return true;
	return false;
}

static const uint32_t *batch_of(struct trainer *t, uint64_t step)
{
	uint64_t epoch = step / t->spe;
	if (epoch != t->order_epoch) {
		train_epoch_order(t->order, t->d->train_count, t->o.seed, epoch);
		t->order_epoch = epoch;
	}
	return t->order + (step % t->spe) * t->o.batch;
}

static void spin_until(uint64_t end_ns)
{
	while (keel_posix_now_ns() < end_ns)
		;
}

static bool owns_shard(void *ctx, uint32_t shard)
{
	const struct trainer *t = ctx;
	return shard_rank(t, shard) == t->rank;
}

/* Train sample ti's pixels and label: from d, or (--shards) from its shard's rows as the
 * pre-load executor read them, row ti / SHARDS of shard ti % SHARDS. */
static int sample_of(struct trainer *t, uint32_t ti, const float **x, uint8_t *y)
{
	if (t->feed == NULL) {
		*x = t->d->x[t->d->train[ti]];
		*y = t->d->y[t->d->train[ti]];
		return 0;
	}
	const float *px;
	const uint8_t *py;
	uint32_t rows;
	int rc = train_feed_rows(t->feed, t->step / t->spe, ti % SHARDS, &px, &py, &rows);
	if (rc != 0)
		return rc;
	uint32_t r = ti / SHARDS;
	if (r >= rows)
		return -EBADMSG; /* the file's table was checked at open: never expected */
	*x = px + (size_t)r * TRAIN_IN;
	*y = py[r];
	return 0;
}

/* This rank's part of the gradient of `step`: the batch samples whose shard it holds, and the
 * time it took (with --compute-us and --slow applied), which travels with the gradient. */
static int fill_grad(struct trainer *t)
{
	uint64_t t0 = keel_posix_now_ns();
	const uint32_t *b = batch_of(t, t->step);
	int erc =
	    t->feed != NULL && t->o.cold && t->step % t->spe == 0 ? train_feed_evict(t->feed) : 0;
	if (erc != 0) { /* the kernel will not: say so once, read from the cache */
		fprintf(stderr, "keel-train: rank %u: --cold: %s\n", t->rank, strerror(-erc));
		t->o.cold = false;
	}
	if (t->feed != NULL)
		train_feed_follow(t->feed, t->step / t->spe, owns_shard, t);
	for (uint32_t i = 0; i < t->o.batch; i++) {
		uint32_t ti = b[i];
		if (shard_rank(t, ti % SHARDS) != t->rank)
			continue;
		const float *x;
		uint8_t y;
		int rc = sample_of(t, ti, &x, &y);
		if (rc != 0)
			return rc;
		bool ok;
		t->in[S_LOSS] += train_model_grad(t->w, x, y, t->in, &ok);
		t->in[S_CORRECT] += ok;
		t->in[S_SAMPLES] += 1;
	}
	spin_until(t0 + (uint64_t)(t->in[S_SAMPLES] * t->o.compute_us * 1000.0));
	uint64_t took = keel_posix_now_ns() - t0;
	if (t->rank == t->o.slow_rank && t->step >= t->o.slow_step && t->o.slow_factor > 1) {
		took = (uint64_t)((double)took * t->o.slow_factor);
		spin_until(t0 + took);
	}
	/* The step's samples fall on the shards at random (about batch / SHARDS each): the time
	 * is scaled to this rank's expected count, so that the members' times compare speeds
	 * and not luck. No sample this step: not measured (0). */
	uint32_t owned = 0;
	for (uint32_t i = 0; i < SHARDS; i++)
		owned += shard_rank(t, i) == t->rank;
	double expected = (double)owned * t->o.batch / SHARDS, got = t->in[S_SAMPLES];
	t->in[S_TIME + t->rank] = got > 0 ? (double)took / 1e9 * expected / got : 0;
	return 0;
}

/* A hash of who holds which shard: every member prints it with each repair, so a test can
 * check they all hold the same plan. */
static uint64_t plan_digest(const struct trainer *t)
{
	uint64_t h = 1469598103934665603ull;
	for (uint32_t i = 0; i < SHARDS; i++) {
		h ^= shard_rank(t, i);
		h *= 1099511628211ull;
	}
	return h;
}

static void plan_print(const struct trainer *t)
{
	if (!t->o.print_plans)
		return;
	printf("rank %u: plan at epoch %u: %u members, plan %016" PRIx64 "\n", t->rank,
	       t->plan_epoch, t->member_count, plan_digest(t));
	fflush(stdout);
}

/* After a gradient step every member has the same times: the same controller decides the
 * same thing. A repair moves shards from the next step on. */
static void straggler_step(struct trainer *t)
{
	double time_s[RANKS_MAX], slowest = 0;
	for (uint32_t w = 0; w < t->member_count; w++) {
		time_s[w] = t->out[S_TIME + t->members[w]];
		slowest = fmax(slowest, time_s[w]);
	}
	t->after_repair_steps++;
	t->after_repair_max_s += slowest;
	struct keel_straggler_decision d;
	int rc = keel_straggler_step(&t->strag, t->plan, time_s, NULL, &d);
	if (rc != 0) {
		fprintf(stderr, "rank %u: straggler repair: %s\n", t->rank, keel_strerror(rc));
		return;
	}
	if (!d.repaired)
		return;
	t->repairs++;
	t->after_repair_steps = 0;
	t->after_repair_max_s = 0;
	printf("rank %u: repair at step %" PRIu64 ": compute skew %.2f; predicted step %.3f ms -> "
	       "%.3f ms; %u shards moved; plan %016" PRIx64 "\n",
	       t->rank, t->step, d.skew, d.before_s * 1e3, d.after_s * 1e3, d.moved,
	       plan_digest(t));
	fflush(stdout);
}

/* Who gives the state: the first member that does not need it (--tp: the first rank of the
 * first replica of the plan none of whose members needs it). */
static uint32_t donor_of(const struct trainer *t)
{
	for (uint32_t i = 0; t->tp == NULL && i < t->member_count; i++)
		if (t->out[S_NEED + t->members[i]] < 0.5)
			return t->members[i];
	for (uint32_t w = 0; t->tp != NULL && w < t->worker_count; w++) {
		bool need = false;
		for (uint32_t r = t->workers[w]; r < t->workers[w] + t->o.tp; r++)
			need |= t->out[S_NEED + r] > 0.5;
		if (!need)
			return t->workers[w];
	}
	return UINT32_MAX;
}

/* Whether this rank (not synced) asks for the state: --tp, only once its replica is whole. */
static bool needs_state(const struct trainer *t)
{
	return t->tp == NULL || in_plan(t, t->rank / t->o.tp);
}

/* A state round: the donor puts in its model; --tp: each member of the donor replica its
 * shard, its first member also W2, b2 and the step. S_MARKER counts them. */
static void fill_state(struct trainer *t)
{
	uint32_t d = donor_of(t), tp = t->o.tp, index = t->rank % tp;
	if (d == UINT32_MAX || d / tp != t->rank / tp)
		return;
	struct train_span sp[3] = {{0, TRAIN_PARAMS}, {0, 0}, {0, 0}};
	if (t->tp != NULL)
		train_tp_spans(tp, index, sp);
	for (uint32_t k = 0; k < (index == 0 ? 3u : 2u); k++)
		for (uint32_t i = sp[k].off; i < sp[k].off + sp[k].len; i++)
			t->in[i] = t->w[i];
	t->in[S_MARKER] = 1;
	if (index == 0)
		t->in[S_STEP] = (double)t->step;
}

/* --tp: this rank's part of a gradient step (train_tp_step: its replica's samples, if the
 * replica is in the plan), and what the deciding AllReduce needs of it: whether its shard's
 * data-parallel sum holds every sample of the batch. Run synced or not: the other members of
 * its groups run it too. */
static int fill_grad_tp(struct trainer *t)
{
	static const float *x[TRAIN_SAMPLES_MAX];
	static uint8_t y[TRAIN_SAMPLES_MAX];
	uint32_t q = t->rank / t->o.tp;
	bool plan = in_plan(t, q);
	struct train_tp_batch b = {
	    .tp = t->o.tp, .index = t->rank % t->o.tp, .cap = t->o.batch, .x = x, .y = y};
	const uint32_t *bt = batch_of(t, t->step);
	for (uint32_t i = 0; plan && i < t->o.batch; i++) {
		uint32_t ti = bt[i], r = shard_rank(t, ti % SHARDS);
		if (r == UINT32_MAX || r / t->o.tp != q)
			continue;
		x[b.n] = t->d->x[t->d->train[ti]];
		y[b.n++] = t->d->y[t->d->train[ti]];
	}
	int rc = train_tp_step(t->tp, t->w, &b, t->synced, plan);
	if (rc == -EINVAL || rc == -EBUSY || rc == KEEL_ETRANSPORT)
		return rc;
	t->in[S_SAMPLES] = rc == 0 && t->synced && plan &&
			   fabs(train_tp_sum(t->tp, TRAIN_TP_SAMPLES) - t->o.batch) < 0.5;
	return 0;
}

static int fill_input(struct trainer *t)
{
	int rc = 0;
	memset(t->in, 0, sizeof(t->in));
	if (t->tp != NULL && t->next == K_GRAD)
		rc = fill_grad_tp(t);
	if (!t->synced) {
		t->in[S_NEED + t->rank] = needs_state(t);
	} else if (t->next == K_GRAD) {
		if (t->tp == NULL)
			rc = fill_grad(t);
	} else if (t->next == K_STATE) {
		fill_state(t);
	} else if (t->ck != NULL) {
		float vote[RANKS_MAX * KEEP];
		int vrc = keel_ckpt_vote_fill(t->ck, t->rank, RANKS_MAX, vote, RANKS_MAX * KEEP);
		for (uint32_t i = 0; vrc == 0 && i < RANKS_MAX * KEEP; i++)
			t->in[i] = vote[i];
		t->in[S_VOTED + t->rank] = 1;
	} else {
		t->in[S_VOTED + t->rank] = 1; /* no checkpoints: votes for none */
	}
	if (t->synced) {
		t->in[S_KIND] = t->next;
		t->in[S_SYNCED] = 1;
		t->in[S_AT] = t->tp != NULL ? (double)t->step : 0;
	}
	t->in[S_REGROUP] = t->tp != NULL && t->tp->epoch == 0;
	t->in[S_ROLLBACK] = t->rollback_pending;
	return rc;
}

/* Sampled after every poll (the peer callback may not call into the node): a failure's
 * "last heard" is then at most one poll older than the truth. */
static void sample_heard(struct trainer *t)
{
	for (uint32_t r = 0; r < t->world; r++) {
		struct keel_peer_info pi;
		if (r != t->rank && keel_peer_get(t->b.node, r, &pi) == 0 &&
		    pi.state == KEEL_PEER_ALIVE && pi.last_heard_ns > t->heard_ns[r])
			t->heard_ns[r] = pi.last_heard_ns;
	}
}

/* --compress: the vector as f32, through a gradient AllReduce. Only a gradient step of a
 * synced rank passes its feedback memory: a state transfer and a rollback vote go f32 from
 * every member (exact), and so does a rank just admitted (zeros), whatever the others run.
 * The sample counts and flags are small integers, which bf16 and f16 hold exactly. */
static int start_op(struct trainer *t, struct keel_op **op)
{
	if (!t->o.compress)
		return keel_allreduce_start(t->b.node, t->in, t->out, VEC_LEN, KEEL_F64, KEEL_SUM,
					    op);
	for (uint32_t i = 0; i < VEC_LEN; i++)
		t->in32[i] = (float)t->in[i];
	float *fb = t->synced && t->next == K_GRAD ? t->feedback : NULL;
	return keel_allreduce_grad_start(t->b.node, t->in32, t->out32, VEC_LEN, KEEL_SUM, fb, op);
}

/* One collective: start, poll until done. */
static int run_op(struct trainer *t, struct keel_op_info *info, uint32_t *members)
{
	struct keel_op *op;
	int rc = start_op(t, &op);
	if (rc != 0)
		return rc;
	for (;;) {
		uint64_t next;
		keel_boot_serve(&t->b);
		int prc = keel_poll(t->b.node, keel_posix_now_ns(), &next);
		rc = keel_op_test_info(t->b.node, op, info, members, RANKS_MAX);
		if (rc != -EINPROGRESS)
			break;
		if (prc != 0 && prc != KEEL_ENOQUORUM)
			return prc;
		sample_heard(t);
		if (t->feed != NULL && (rc = train_feed_poll(t->feed)) < 0)
			return rc;
		t->b.cfg.waiter.wait(t->b.cfg.waiter.ctx, next);
	}
	for (uint32_t i = 0; rc == 0 && t->o.compress && i < VEC_LEN; i++)
		t->out[i] = t->out32[i];
	return rc;
}

/* --tp: a group request, waited for as run_op waits (train_tp_wait_fn). */
static int wait_req(void *ctx, struct keel_req *req, struct keel_req_info *info)
{
	struct trainer *t = ctx;
	uint32_t members[RANKS_MAX];
	for (;;) {
		uint64_t next;
		keel_boot_serve(&t->b);
		int prc = keel_poll(t->b.node, keel_posix_now_ns(), &next);
		int rc = keel_req_test_info(req, info, members, RANKS_MAX);
		if (rc != -EINPROGRESS)
			return rc;
		if (prc != 0 && prc != KEEL_ENOQUORUM)
			return prc;
		sample_heard(t);
		t->b.cfg.waiter.wait(t->b.cfg.waiter.ctx, next);
	}
}

/* The plan's first worker leads (--tp: the first rank of the first whole replica). */
static bool is_leader(const struct trainer *t)
{
	return t->worker_count > 0 && t->workers[0] == t->rank;
}

/* An epoch's end: its line (the leader), its point of the curve (--plot). */
static void epoch_end(struct trainer *t, uint64_t now)
{
	/* --tp: each member holds one shard current; the accuracy (and the end) needs them all */
	int arc = t->tp != NULL ? train_tp_assemble(t->tp, t->w) : 0;
	if (arc != 0)
		fprintf(stderr, "keel-train: rank %u: the model's shards at step %" PRIu64 ": %s\n",
			t->rank, t->step, keel_strerror(arc));
	double dt = (double)(now - t->epoch_t0_ns) / 1e9;
	bool log = is_leader(t) && !t->o.quiet;
	/* With --plot every rank keeps the curve: whoever leads at the end draws it. */
	double acc = log || t->curve != NULL
			 ? train_model_accuracy(t->w, t->d, t->d->test, t->d->test_count)
			 : 0;
	uint64_t epoch = t->step / t->spe;
	if (t->curve != NULL && epoch >= 1 && epoch <= t->o.epochs)
		t->curve[epoch - 1] =
		    (struct epoch_point){.loss = t->epoch_loss / (double)t->epoch_samples,
					 .accuracy = acc,
					 .seen = true};
	if (log) {
		printf("epoch %3" PRIu64 "/%u  loss %.4f  test acc %5.2f %%  view %u (%u ranks)"
		       "  %.0f samples/s\n",
		       t->step / t->spe, t->o.epochs, t->epoch_loss / (double)t->epoch_samples,
		       100 * acc, t->plan_epoch, t->member_count,
		       dt > 0 ? (double)t->epoch_samples / dt : 0.0);
		fflush(stdout);
	}
	t->epoch_t0_ns = now;
	t->epoch_samples = 0;
	t->epoch_loss = 0;
}

static void after_step(struct trainer *t, uint64_t now)
{
	t->epoch_loss += t->out[S_LOSS];
	t->epoch_samples += t->o.batch;
	t->samples_done += t->o.batch;
	if (t->ev_open) {
		for (uint32_t i = 0; i < t->ev_count; i++)
			if (t->ev[i].resumed_ns == 0)
				t->ev[i].resumed_ns = now;
		t->ev_open = false;
	}
	if (t->step % t->spe == 0)
		epoch_end(t, now);
	if (t->ck != NULL && t->step % t->o.ckpt_every == 0) {
		uint64_t t0 = keel_posix_now_ns();
		int rc = keel_ckpt_write(t->ck, t->step, t->plan_epoch, now);
		/* its time for keel_checkpoint_write_seconds and the trace */
		struct keel_event ev = {.kind = KEEL_EV_CKPT_WRITE,
					.t_ns = t0,
					.dur_ns = keel_posix_now_ns() - t0,
					.bytes = sizeof(t->w)};
		if (rc == 0)
			keel_boot_note(&t->b, &ev);
		if (rc != 0)
			fprintf(stderr, "rank %u: checkpoint at step %" PRIu64 ": %s\n", t->rank,
				t->step, keel_strerror(rc));
	}
}

/* Everyone voted: restore the newest step all voters have, or start over. */
static void do_rollback(struct trainer *t)
{
	uint32_t voters[RANKS_MAX], n = 0;
	for (uint32_t i = 0; i < t->member_count; i++)
		if (t->out[S_VOTED + t->members[i]] > 0.5)
			voters[n++] = t->members[i];
	float vote[RANKS_MAX * KEEP];
	for (uint32_t i = 0; i < RANKS_MAX * KEEP; i++)
		vote[i] = (float)t->out[i];
	uint64_t step = 0;
	int rc = n == 0 ? -ENOENT
			: keel_ckpt_vote_decide(vote, RANKS_MAX * KEEP, RANKS_MAX, KEEP, voters, n,
						&step);
	t->rollbacks++;
	t->rollback_pending = false;
	if (!t->synced)
		return; /* gets the state from a donor afterwards */
	uint64_t from = t->step;
	if (rc == 0 && t->ck != NULL) {
		struct keel_ckpt_report rep;
		uint64_t t0 = keel_posix_now_ns();
		rc = keel_ckpt_restore(t->ck, step, &rep);
		struct keel_event ev = {.kind = KEEL_EV_CKPT_RESTORE,
					.t_ns = t0,
					.dur_ns = keel_posix_now_ns() - t0,
					.bytes = sizeof(t->w)};
		if (rc == 0)
			keel_boot_note(&t->b, &ev);
		if (rc == 0 && rep.step != step)
			rc = -ENOENT;
	}
	if (rc != 0 && n > 0 && step != 0) {
		/* This rank lacks the agreed file after all: take the state from a donor. */
		t->synced = false;
	} else if (rc != 0) {
		train_model_init(t->w, t->o.seed);
		step = 0;
	}
	t->step = step;
	t->rollback_to = step;
	t->steps_lost += from > step ? from - step : 0;
	t->order_epoch = UINT64_MAX;
	printf("rank %u: hard fault: rolled back from step %" PRIu64 " to step %" PRIu64
	       " (%s, %u voters)\n",
	       t->rank, from, step, rc == 0 ? "checkpoint every voter has" : "no common checkpoint",
	       n);
	fflush(stdout);
}

/* The state a donor sent: this rank's model and step from now on. */
static void take_state(struct trainer *t, uint64_t now)
{
	for (uint32_t i = 0; i < TRAIN_PARAMS; i++)
		t->w[i] = (float)t->out[i];
	t->step = (uint64_t)t->out[S_STEP];
	t->order_epoch = UINT64_MAX;
	t->synced = true;
	t->t_synced_ns = now;
	t->synced_step = t->step;
	t->epoch_t0_ns = now;
	if (t->tp == NULL || t->outs == 0)
		return;
	t->back_step = t->step;
	printf("rank %u: replica %u whole again: back in the plan at step %" PRIu64
	       " with the model's shards from a live replica\n",
	       t->rank, t->rank / t->o.tp, t->step);
	fflush(stdout);
}

/* Whether the gradient step's result is every sample of the batch (--tp: every member of the
 * plan's replicas found its shard's data-parallel sum whole). */
static bool grad_whole(const struct trainer *t)
{
	if (t->tp == NULL)
		return fabs(t->out[S_SAMPLES] - t->o.batch) < 0.5;
	return t->worker_count > 0 &&
	       fabs(t->out[S_SAMPLES] - (double)t->o.tp * t->worker_count) < 0.5;
}

/* A whole gradient step: every member steps the same way (--tp: the parameters it holds, by
 * its shard's data-parallel sum; the loss for the epoch's line is in that sum too). */
static void apply_grad(struct trainer *t, uint64_t now)
{
	if (t->tp == NULL) {
		train_model_sgd(t->w, t->out, t->o.lr, t->o.batch);
	} else {
		train_tp_sgd(t->w, t->o.tp, t->rank % t->o.tp, t->tp->sum, t->o.lr, t->o.batch);
		t->out[S_LOSS] = train_tp_sum(t->tp, TRAIN_TP_LOSS);
		t->out[S_CORRECT] = train_tp_sum(t->tp, TRAIN_TP_HITS);
	}
	t->step++;
	after_step(t, now);
}

/* --tp, after each deciding AllReduce: the groups follow a new view (or a member's request);
 * a rank whose replica left the plan (a member left the view) steps out: the other replicas
 * train on without it, and its shard is stale from then on. The others' step tells it when
 * the training is over. */
static void tp_follow(struct trainer *t, uint32_t epoch, bool whole)
{
	if (epoch != t->tp->epoch || t->out[S_REGROUP] > 0.5) {
		int rc = train_tp_regroup(t->tp, epoch);
		if (rc != 0)
			fprintf(stderr,
				"keel-train: rank %u: groups on view %u: %s (made again "
				"after the next step)\n",
				t->rank, epoch, keel_strerror(rc));
	} else {
		train_tp_settle(t->tp); /* a round on the groups' view: the old ones can go */
	}
	if (t->out[S_SYNCED] > 0.5)
		t->job_step = (uint64_t)llround(t->out[S_AT] / t->out[S_SYNCED]) + whole;
	if (!t->synced || in_plan(t, t->rank / t->o.tp))
		return;
	struct keel_group_info gi = {0};
	int n = t->tp->tp_group != NULL ? keel_group_info(t->tp->tp_group, &gi, NULL, 0) : 0;
	t->synced = false;
	t->outs++;
	t->out_step = t->step;
	printf("rank %u: replica %u lost a member (its tensor-parallel group: %d of %u members, "
	       "last step's part: %s): out of the plan at step %" PRIu64
	       ", waiting for it to be whole again\n",
	       t->rank, t->rank / t->o.tp, n < 0 ? 0 : n, t->o.tp,
	       t->tp->part_rc == 0 ? "done" : keel_strerror(t->tp->part_rc), t->step);
	fflush(stdout);
}

/* Who asks for the state (NEED flags), with the rejoin's figures; whether anyone does. Ranks
 * that ask together (--tp: a replica's members) are one rejoin, named by the first. */
static bool note_needs(struct trainer *t, enum kind kind, bool marker, uint64_t now)
{
	uint32_t first = UINT32_MAX;
	for (uint32_t i = 0; i < t->member_count && first == UINT32_MAX; i++)
		if (t->out[S_NEED + t->members[i]] > 0.5)
			first = t->members[i];
	if (first == UINT32_MAX)
		return false;
	if (t->rejoin_seen_ns == 0 || t->rejoin_done_ns != 0) {
		t->rejoin_rank = first;
		t->rejoin_seen_ns = now;
		t->rejoin_done_ns = 0;
	}
	if (kind == K_STATE && marker) {
		t->rejoin_done_ns = now;
		t->rejoin_step = t->step;
		t->rejoin_count++;
	}
	return true;
}

/* Interpret the result of a collective; decide the next one (the same way on every rank). */
static void on_result(struct trainer *t, const struct keel_op_info *info, const uint32_t *members)
{
	uint64_t now = keel_posix_now_ns();
	bool changed = info->epoch != t->plan_epoch;
	if (changed) {
		int rc = replan(t, members, info->member_count);
		if (rc != 0)
			fprintf(stderr, "rank %u: plan: %s\n", t->rank, keel_strerror(rc));
		t->plan_epoch = info->epoch;
		plan_print(t);
	}
	double synced = t->out[S_SYNCED];
	enum kind kind = synced > 0.5 ? (enum kind)lround(t->out[S_KIND] / synced) : K_GRAD;
	bool agreed = synced < 0.5 || fabs(t->out[S_KIND] - (double)kind * synced) < 0.5;
	bool marker = fabs(t->out[S_MARKER] - t->o.tp) < 0.5; /* every donor member's part */
	bool rollback = t->out[S_ROLLBACK] > 0.5;
	if (!agreed) /* ranks ran different kinds: never expected; redo from a rollback */
		rollback = true;
	bool whole = kind == K_GRAD && agreed && !changed && !rollback && grad_whole(t);
	if (t->tp != NULL)
		tp_follow(t, info->epoch, whole);
	if (!t->synced && kind == K_STATE && marker && agreed && needs_state(t)) {
		take_state(t, now);
	} else if (t->synced && kind == K_GRAD && agreed) {
		if (whole) {
			apply_grad(t, now);
		} else {
			t->steps_lost++;
			if (t->ev_count > 0)
				t->ev[t->ev_count - 1].steps_lost++;
		}
	}
	/* Every member feeds every whole gradient step to its controller, synced or not (a rank
	 * getting the state still sees the results): their controllers stay alike. (--tp: no
	 * repairs; the times are not measured.) */
	if (whole && t->tp == NULL)
		straggler_step(t);
	if (kind == K_VOTE && agreed)
		do_rollback(t);
	bool need = note_needs(t, kind, marker, now);
	if (rollback && kind != K_VOTE)
		t->next = K_VOTE;
	else if (need && !(kind == K_STATE && marker))
		t->next = K_STATE;
	else
		t->next = K_GRAD;
}

static void hard_fault(struct trainer *t, int rc, const char *why)
{
	printf("rank %u: hard fault at step %" PRIu64 " (%s): asking every member to roll back\n",
	       t->rank, t->step, why != NULL ? why : keel_strerror(rc));
	fflush(stdout);
	t->rollback_pending = true;
}

/* Stop this process for `seconds`, as a scheduler stall or a swap storm would: a child wakes
 * it with SIGCONT (a stopped process cannot wake itself). */
static void stall_self(double seconds)
{
	pid_t parent = getpid(), waker = fork();
	if (waker == 0) {
		struct timespec ts = {(time_t)seconds,
				      (long)((seconds - (double)(time_t)seconds) * 1e9)};
		nanosleep(&ts, NULL);
		kill(parent, SIGCONT);
		_exit(0);
	}
	if (waker > 0) {
		raise(SIGSTOP);
		waitpid(waker, NULL, 0);
	}
}

/* --crash-at / --stall-at: at a step, not at a wall-clock time, so they land inside the
 * training on a machine of any speed. */
static void injected_faults(struct trainer *t)
{
	if (!t->synced || t->b.cfg.rejoin)
		return;
	if (t->rank == t->o.crash_rank && t->step == t->o.crash_step) {
		printf("rank %u: --crash-at: SIGKILL at step %" PRIu64 "\n", t->rank, t->step);
		fflush(stdout);
		raise(SIGKILL);
	}
	if (t->rank == t->o.stall_rank && t->step == t->o.stall_step) {
		t->o.stall_step = UINT64_MAX; /* once */
		printf("rank %u: --stall-at: stopped for %.1f s at step %" PRIu64 "\n", t->rank,
		       t->o.stall_s, t->step);
		fflush(stdout);
		stall_self(t->o.stall_s);
	}
}

/* --tp: no whole replica left in the view (each lost a member; with one replica, its only
 * one): some shard's only current copy died with its rank, and none can be trained. */
static bool shards_lost(const struct trainer *t)
{
	if (t->tp == NULL || t->worker_count > 0)
		return false;
	fprintf(stderr,
		"keel-train: rank %u: no replica of %u ranks is whole in view %u: a shard's last "
		"current copy is gone, the training cannot go on (a failure is survived while "
		"another replica is whole: run --dp 2 or more)\n",
		t->rank, t->o.tp, t->plan_epoch);
	return true;
}

/* Whether this rank trains on: synced, until the last step; not synced, until it has the state
 * (--tp: or until the others finish while its replica is out). */
static bool training_left(const struct trainer *t)
{
	if (t->synced)
		return t->step < t->total_steps;
	return t->tp == NULL || t->job_step < t->total_steps;
}

static int train_loop(struct trainer *t)
{
	struct keel_op_info info;
	uint32_t members[RANKS_MAX];
	while (training_left(t)) {
		injected_faults(t);
		int frc = fill_input(t);
		if (frc != 0) {
			fprintf(stderr, "keel-train: rank %u: input: %s\n", t->rank,
				t->feed != NULL && t->feed->err[0] ? t->feed->err : strerror(-frc));
			return frc;
		}
		bool fault_now = t->synced && t->next == K_GRAD && t->step == t->o.fault_step &&
				 t->rank == t->o.fault_rank;
		int rc = run_op(t, &info, members);
		if (rc == 0 && fault_now) {
			t->o.fault_step = UINT64_MAX; /* once */
			if (t->tp != NULL) /* its groups and its replica's pair follow the others */
				on_result(t, &info, members);
			hard_fault(t, 0, "forced by --fault-at");
			t->steps_lost++;
			continue; /* as if the result never came: the others went on */
		}
		if (rc == 0) {
			on_result(t, &info, members);
			if (shards_lost(t))
				return -ECANCELED; /* said why */
			continue;
		}
		if ((rc == KEEL_ENOQUORUM || rc == KEEL_EEXCLUDED) && t->tp != NULL)
			train_tp_drop(t->tp); /* made again on the view that takes it back */
		if (rc == KEEL_ENOQUORUM) {
			hard_fault(t, rc, NULL);
			if (keel_boot_wait_member(&t->b, 60ull * 1000000000ull) != 0)
				return rc;
			continue;
		}
		if (rc == KEEL_EVIEWCHANGED)
			continue;
		if (rc == KEEL_EEXCLUDED) {
			/* Paused past the detector: the others trained on without this rank. Come
			 * back like a restarted rank: admission, then the model from a member. */
			t->exclusions++;
			t->synced = false;
			t->t_admitted_ns = 0;
			printf("rank %u: excluded from the view at step %" PRIu64
			       " (silent too long: paused?); rejoining\n",
			       t->rank, t->step);
			fflush(stdout);
			rc = keel_boot_wait_member(&t->b, 60ull * 1000000000ull);
			if (rc == KEEL_EENDED) {
				t->job_ended = true;
				return 0;
			}
			if (rc != 0)
				return rc;
			continue;
		}
		if (rc == KEEL_ETRANSPORT || rc == -EINVAL || rc == -EBUSY)
			return rc;
		hard_fault(t, rc, NULL);
	}
	t->ended_out = !t->synced;
	return 0;
}

/* The same training in this one process, without keel: what "no failure" gives. */
static void reference_weights(struct trainer *t, float *w)
{
	static double grad[TRAIN_PARAMS];
	train_model_init(w, t->o.seed);
	for (uint64_t s = 0; s < t->total_steps; s++) {
		const uint32_t *b = batch_of(t, s);
		memset(grad, 0, sizeof(grad));
		for (uint32_t i = 0; i < t->o.batch; i++) {
			uint32_t x = t->d->train[b[i]];
			bool ok;
			(void)train_model_grad(w, t->d->x[x], t->d->y[x], grad, &ok);
		}
		train_model_sgd(w, grad, t->o.lr, t->o.batch);
	}
}

/* The slowest rank's compute per step since the last repair, against the ideal for the
 * measured speeds: all the work over the sum of the rates (the smoothed time per shard). */
static void straggler_summary(const struct trainer *t)
{
	if (t->o.slow_rank == UINT32_MAX && t->repairs == 0)
		return;
	double work = 0, rate = 0;
	for (uint32_t w = 0; w < t->strag.workers; w++) {
		struct keel_plan_load pl;
		if (keel_plan_worker_load(t->plan, w, &pl) != 0 || !(t->strag.spu[w] > 0))
			return;
		work += pl.work;
		rate += 1.0 / t->strag.spu[w];
	}
	double mean =
	    t->after_repair_steps > 0 ? t->after_repair_max_s / (double)t->after_repair_steps : 0;
	double ideal = rate > 0 ? work / rate : 0;
	printf(
	    "stragglers: %u repair%s%s; slowest rank's compute %.3f ms per step over the %" PRIu64
	    " steps since, ideal for the measured speeds %.3f ms (%.2fx)\n",
	    t->repairs, t->repairs == 1 ? "" : "s", t->o.no_repair ? " (--no-repair)" : "",
	    mean * 1e3, t->after_repair_steps, ideal * 1e3, ideal > 0 ? mean / ideal : 0.0);
}

static double ms(uint64_t a, uint64_t b)
{
	return b > a ? (double)(b - a) / 1e6 : 0.0;
}

/* A rank that came back (restarted, or readmitted after an exclusion): how it got the model. */
static void comeback_line(const struct trainer *t)
{
	/* A restarted rank that was later excluded too is still a restarted rank: say both. */
	if (t->t_admitted_ns != 0 && t->exclusions > 0 && !t->b.cfg.rejoin)
		printf(
		    "rank %u (excluded %u times, same life): readmitted; model (%zu bytes) from a "
		    "live member by live recovery %.1f ms after admission, at step %" PRIu64 "\n",
		    t->rank, t->exclusions, sizeof(t->w), ms(t->t_admitted_ns, t->t_synced_ns),
		    t->synced_step);
	else if (t->t_admitted_ns != 0 && t->exclusions > 0)
		printf(
		    "rank %u (restarted, life %u, then excluded %u times): readmitted; model "
		    "(%zu bytes) from a live member by live recovery %.1f ms after admission, at "
		    "step %" PRIu64 "\n",
		    t->rank, t->b.cfg.incarnation, t->exclusions, sizeof(t->w),
		    ms(t->t_admitted_ns, t->t_synced_ns), t->synced_step);
	else if (t->t_admitted_ns != 0)
		printf(
		    "rank %u (restarted, life %u): admitted %.0f ms after start; model (%zu bytes)"
		    " from a live member by live recovery %.1f ms after admission, at step %" PRIu64
		    "\n",
		    t->rank, t->b.cfg.incarnation, ms(t->t_start_ns, t->t_admitted_ns),
		    sizeof(t->w), ms(t->t_admitted_ns, t->t_synced_ns), t->synced_step);
}

/* --no-reference off: the same training in one process, and how far this one is from it. */
static void reference_lines(struct trainer *t, double acc)
{
	if (t->o.reference && t->feed != NULL && train_feed_read_all(t->feed, t->d) != 0) {
		printf("same training without failure: not computed (%s)\n", t->feed->err);
	} else if (t->o.reference) {
		static float ref[TRAIN_PARAMS];
		reference_weights(t, ref);
		double racc = train_model_accuracy(ref, t->d, t->d->test, t->d->test_count);
		double diff = 0;
		for (uint32_t i = 0; i < TRAIN_PARAMS; i++)
			diff = fmax(diff, fabs((double)ref[i] - t->w[i]));
		printf(
		    "same training without failure: %.2f %% (same seed, one process; largest weight"
		    " difference %.2g)\n",
		    100 * racc, diff);
		printf("difference:                    %+.2f points (%s 1 point)\n",
		       100 * (acc - racc), fabs(acc - racc) <= 0.01 ? "within" : "NOT within");
	}
}

static void summary(struct trainer *t)
{
	double acc = train_model_accuracy(t->w, t->d, t->d->test, t->d->test_count);
	if (t->job_ended) {
		printf("rank %u (excluded %u times): training had ended before it was admitted "
		       "back; nothing to do\n",
		       t->rank, t->exclusions);
		return;
	}
	if (t->ended_out) {
		printf("rank %u: training ended while replica %u was out of the plan (since step "
		       "%" PRIu64 "); its shard is stale, nothing to report\n",
		       t->rank, t->rank / t->o.tp, t->out_step);
		return;
	}
	comeback_line(t);
	if (!is_leader(t))
		return;
	printf("\n== keel-train summary (rank %u, %u ranks at the end, view %u)\n", t->rank,
	       t->member_count, t->plan_epoch);
	if (t->tp != NULL)
		printf("2-D parallel:                  %u replica%s of %u ranks in the plan at the "
		       "end (hidden layer split %u ways)\n",
		       t->worker_count, t->worker_count == 1 ? "" : "s", t->o.tp, t->o.tp);
	printf("final test accuracy:           %.2f %%\n", 100 * acc);
	reference_lines(t, acc);
	for (uint32_t i = 0; i < t->ev_count; i++) {
		const struct event *e = &t->ev[i];
		printf("failure %u: rank %u silent %.1f ms before it was suspected (detection); "
		       "new view %.1f ms later; next step done %.1f ms after detection; "
		       "steps redone %u\n",
		       i + 1, e->rank, ms(e->last_heard_ns, e->suspected_ns),
		       ms(e->suspected_ns, e->view_ns), ms(e->suspected_ns, e->resumed_ns),
		       e->steps_lost);
	}
	if (t->rejoin_count > 0)
		printf(
		    "rejoin: rank %u%s asked for the model and got it from a live %s over keel "
		    "(AllReduce with one contributor%s, CRC32C-checked datagrams) in %.1f ms, at "
		    "step %" PRIu64 "\n",
		    t->rejoin_rank, t->tp != NULL ? " (with its replica)" : "",
		    t->tp != NULL ? "replica" : "member",
		    t->tp != NULL ? " replica, each member its shard" : "",
		    ms(t->rejoin_seen_ns, t->rejoin_done_ns), t->rejoin_step);
	printf("steps lost (redone) in all:    %" PRIu64 "; rollbacks %" PRIu64 "\n", t->steps_lost,
	       t->rollbacks);
	straggler_summary(t);
	struct keel_counters k;
	keel_counters_get(t->b.node, &k);
	printf("keel: view changes %" PRIu64 ", suspicions %" PRIu64 " (false %" PRIu64
	       "), collectives restarted %" PRIu64 ", completed %" PRIu64 "\n",
	       k.view_changes, k.suspicions, k.false_suspicions, k.ops_restarted, k.ops_completed);
	if (t->o.compress)
		printf("compression (rank %u): %" PRIu64 " fragments compressed, %" PRIu64
		       " bytes saved, %" PRIu64 " bytes sent\n",
		       t->rank, k.compress_frags, k.compress_bytes_saved, k.tx_bytes);
}

/* --shards, --compress and --tp: every rank says how long its steps took; with --shards also
 * what it read, how long steps waited for it, and what shard moves cost it (for comparing
 * --preload ahead and demand, compression on and off); with --tp its groups' collectives. */
static void rank_summary(const struct trainer *t, uint64_t train_ns, uint64_t steps)
{
	if (t->tp != NULL)
		train_tp_print(t->tp, stdout);
	if (t->feed == NULL && !t->o.compress && t->tp == NULL)
		return;
	char input[512] = "";
	const struct train_feed_stats *st = t->feed != NULL ? &t->feed->stats : NULL;
	if (st != NULL)
		snprintf(input, sizeof(input),
			 "input from %s (%s, %s%s): %" PRIu64 " shard reads (%.1f KiB), %" PRIu64
			 " waits for a shard (%.2f ms in all); shard moves: %" PRIu64
			 " taken over, %" PRIu64 " reads cancelled, %" PRIu64 " discarded; ",
			 t->feed->path, keel_preload_engine_name(t->feed->pre),
			 t->feed->ahead ? "ahead" : "demand", t->o.cold ? ", cold" : "", st->reads,
			 (double)st->bytes / 1024.0, st->waits, (double)st->wait_ns / 1e6,
			 st->moved_in, st->cancelled, st->discarded);
	printf("rank %u: %s%" PRIu64 " steps in %.3f s (%.3f ms per step)\n", t->rank, input, steps,
	       (double)train_ns / 1e9, steps > 0 ? (double)train_ns / 1e6 / (double)steps : 0.0);
}

static int dump_weights(const struct trainer *t)
{
	FILE *f = fopen(t->o.dump, "wb");
	if (f == NULL)
		return -errno;
	size_t n = fwrite(t->w, sizeof(float), TRAIN_PARAMS, f);
	return fclose(f) == 0 && n == TRAIN_PARAMS ? 0 : -EIO;
}

/* --plot: the loss and accuracy of each epoch this rank saw end; a line where it suspected a
 * failed peer and one where it installed a new view (a death a transport reported, a leave or
 * a rejoin: no suspicion needed). */
static int curve_write(const struct trainer *t, struct plot *p)
{
	FILE *f = plot_data(p, "curve.dat");
	if (f == NULL)
		return -errno;
	fprintf(f, "# epoch loss test_accuracy_pct\n");
	for (uint32_t e = 0; e < t->o.epochs; e++)
		if (t->curve[e].seen)
			fprintf(f, "%u %.9g %.6g\n", e + 1, t->curve[e].loss,
				100 * t->curve[e].accuracy);
	int rc = ferror(f) ? -EIO : 0;
	return fclose(f) != 0 || rc != 0 ? -EIO : 0;
}

static int write_plot(const struct trainer *t, char *err, size_t err_len)
{
	struct plot p;
	int rc = plot_open(&p, t->o.plot, err, err_len);
	if (rc != 0)
		return rc;
	FILE *f = (rc = curve_write(t, &p)) == 0 ? plot_script(&p, 900, 480) : NULL;
	if (f == NULL) {
		rc = rc != 0 ? rc : -errno;
		snprintf(err, err_len, "cannot write the plot's data: %s", strerror(-rc));
		plot_discard(&p);
		return rc;
	}
	fprintf(f,
		"set title 'keel-train: %u ranks at the start, batch %u, lr %g; rank %u saw %u "
		"suspicion%s, %u new view%s'\n"
		"set xlabel 'epoch'\nset ylabel 'training loss (mean per sample)'\n"
		"set y2label 'test accuracy (%%)'\nset ytics nomirror\nset y2tics\n"
		"set yrange [0:*]\nset y2range [*:100]\nset xrange [0:%u]\nset grid\n"
		"set key below horizontal nobox height 1\n",
		t->world, t->o.batch, (double)t->o.lr, t->rank, t->ev_count,
		t->ev_count == 1 ? "" : "s", t->view_step_count, t->view_step_count == 1 ? "" : "s",
		t->o.epochs);
	for (uint32_t i = 0; i < t->ev_count + t->view_step_count; i++) {
		bool ev = i < t->ev_count;
		double at =
		    (double)(ev ? t->ev[i].step : t->view_step[i - t->ev_count]) / (double)t->spe;
		fprintf(f,
			"set arrow from %.6g, graph 0 to %.6g, graph 1 nohead front lw 1.5 %s lc "
			"rgb '%s'\n",
			at, at, ev ? "dt 2" : "dt 3", ev ? "#d62728" : "#2ca02c");
	}
	fprintf(f, "plot 'curve.dat' using 1:2 axes x1y1 with linespoints lw 2 pt 7 ps 0.6 lc "
		   "rgb '#1f77b4' title 'training loss', '' using 1:3 axes x1y2 with linespoints "
		   "lw 2 pt 5 ps 0.6 lc rgb '#2ca02c' title 'test accuracy'");
	if (t->ev_count > 0)
		fprintf(f, ", NaN with lines dt 2 lw 1.5 lc rgb '#d62728' title 'failure "
			   "suspected'");
	if (t->view_step_count > 0)
		fprintf(f, ", NaN with lines dt 3 lw 1.5 lc rgb '#2ca02c' title 'new view "
			   "installed'");
	fprintf(f, "\n");
	return plot_render(&p, err, err_len);
}

/* --bench-state MiB: checkpoint write/restore (page cache, O_DIRECT) on rank 0, then live
 * recovery of the same state from rank 0 to every rank with keel_broadcast. */
#define BENCH_SCRATCH (8u << 20)
static int bench_ckpt(struct trainer *t, uint8_t *state, size_t bytes, bool direct)
{
	static uint8_t mem[4096] __attribute__((aligned(64)));
	struct keel_ckpt_config c;
	keel_ckpt_config_default(&c);
	c.dir = t->o.ckpt_dir;
	c.keep = 1;
	c.direct = direct;
	c.interval_ns = 0;
	c.scratch = aligned_alloc(KEEL_CKPT_ALIGN, BENCH_SCRATCH);
	c.scratch_len = BENCH_SCRATCH;
	struct keel_ckpt *ck;
	int rc = keel_ckpt_init(&ck, mem, sizeof(mem), &c);
	if (rc == 0)
		rc = keel_ckpt_register(ck, "state", state, bytes);
	uint64_t t0 = keel_posix_now_ns();
	if (rc == 0)
		rc = keel_ckpt_write(ck, direct ? 2 : 1, 0, t0);
	uint64_t t1 = keel_posix_now_ns();
	char name[96];
	snprintf(name, sizeof(name), "%s/ckpt-%020d.keel", c.dir, direct ? 2 : 1);
	FILE *f = fopen(name, "rb"); /* drop the file's cached pages: restore reads the disk */
	if (f != NULL) {
		(void)posix_fadvise(fileno(f), 0, 0, POSIX_FADV_DONTNEED);
		fclose(f);
	}
	memset(state, 0, bytes);
	uint64_t t2 = keel_posix_now_ns();
	struct keel_ckpt_report rep;
	if (rc == 0)
		rc = keel_ckpt_restore(ck, UINT64_MAX, &rep);
	uint64_t t3 = keel_posix_now_ns();
	if (rc == 0)
		printf("checkpoint %s: %zu MiB write %.0f MB/s (%.0f ms, with fsync), restore %.0f "
		       "MB/s (%.0f ms, cold cache, CRC32C checked)\n",
		       direct ? "O_DIRECT  " : "page cache", bytes >> 20,
		       (double)bytes / ((double)(t1 - t0) / 1e3), ms(t0, t1),
		       (double)bytes / ((double)(t3 - t2) / 1e3), ms(t2, t3));
	else
		printf("checkpoint %s: %s\n", direct ? "O_DIRECT" : "page cache",
		       keel_strerror(rc));
	if (ck != NULL && rc != -EINVAL)
		keel_ckpt_fini(ck);
	free(c.scratch);
	return rc;
}

static int bench_state(struct trainer *t)
{
	size_t bytes = (size_t)t->o.bench_mib << 20;
	uint8_t *state = aligned_alloc(4096, bytes);
	if (state == NULL)
		return -ENOMEM;
	uint64_t s = 42;
	for (size_t i = 0; i < bytes / 8; i++) {
		uint64_t v = train_rng_next(&s);
		memcpy(state + i * 8, &v, 8);
	}
	int rc = 0;
	if (t->rank == 0 && t->o.ckpt_dir != NULL) {
		rc = bench_ckpt(t, state, bytes, false);
		int rc2 = bench_ckpt(t, state, bytes, true);
		(void)rc2;
		s = 42; /* restore the pattern the broadcast is checked against */
		for (size_t i = 0; i < bytes / 8; i++) {
			uint64_t v = train_rng_next(&s);
			memcpy(state + i * 8, &v, 8);
		}
	}
	if (t->world > 1) {
		if (t->rank != 0)
			memset(state, 0, bytes);
		uint64_t t0 = keel_posix_now_ns();
		rc = keel_broadcast(t->b.node, 0, state, bytes);
		uint64_t t1 = keel_posix_now_ns();
		s = 42;
		size_t wrong = 0;
		for (size_t i = 0; i < bytes / 8; i++) {
			uint64_t v = train_rng_next(&s), got;
			memcpy(&got, state + i * 8, 8);
			wrong += got != v;
		}
		printf("rank %u: live recovery (keel_broadcast from rank 0, %u ranks): %zu MiB in "
		       "%.0f ms = %.0f MB/s, %s, %zu words wrong\n",
		       t->rank, t->world, bytes >> 20, ms(t0, t1),
		       (double)bytes / ((double)(t1 - t0) / 1e3), keel_strerror(rc), wrong);
		if (wrong != 0 && rc == 0)
			rc = -EIO;
	}
	free(state);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: keel-train [--epochs N] [--batch B] [--lr X] [--seed S] [--data PATH]\n"
	    "                  [--ckpt-dir DIR] [--ckpt-every STEPS] [--fault-at RANK@STEP]\n"
	    "                  [--crash-at RANK@STEP] [--stall-at RANK@STEP:SECONDS]\n"
	    "                  [--no-reference] [--dump-weights FILE] [--quiet]\n"
	    "                  [--bench-state MIB] [--plot FILE.svg|FILE.png]\n"
	    "                  [--slow RANK:FACTOR[@STEP]] [--compute-us N] [--no-repair]\n"
	    "                  [--print-plans] [--shards FILE [--preload ahead|demand] [--cold]]\n"
	    "                  [--compress] [--tp T [--dp N]] [--help] [--version]\n"
	    "Data-parallel (or with --tp, 2-D parallel) training of a small MLP on the 8x8\n"
	    "digits over keel; run it under keel-run (or any launcher keel understands).\n"
	    "  --epochs N           epochs, 1..%u (default 30)\n"
	    "  --batch B            global batch, 1..%u samples (default 16; 256 at most with\n"
	    "                       --compress)\n"
	    "  --lr X               learning rate, %g..%g (default 0.2)\n"
	    "  --seed S             initial weights and sample order, 0..2^64-1 (default 1)\n"
	    "  --data PATH          the digits CSV (gzip'd), default %s\n"
	    "  --ckpt-dir DIR       checkpoints in DIR/rank<R> (made if missing)\n"
	    "  --ckpt-every STEPS   a checkpoint every STEPS steps, 1..%llu (default 100)\n"
	    "  --fault-at RANK@STEP that rank reports a hard fault at STEP: all roll back\n"
	    "  --crash-at RANK@STEP that rank SIGKILLs itself at STEP (first life)\n"
	    "  --stall-at RANK@STEP:SECONDS  that rank stops (SIGSTOP) at STEP for SECONDS,\n"
	    "                       0 < SECONDS < 3600 (RANK 0..%u, STEP 0..%llu everywhere)\n"
	    "  --no-reference       skip the same training in one process at the end\n"
	    "  --dump-weights FILE  the leader writes the final weights\n"
	    "  --quiet              fewer lines\n"
	    "  --bench-state MIB    instead of training: time checkpoints and live recovery of\n"
	    "                       MIB MiB, 1..%u\n"
	    "  --plot FILE          the leader draws loss and accuracy per epoch, failures\n"
	    "                       marked (.svg or .png; gnuplot)\n"
	    "  --slow RANK:FACTOR[@STEP]  that rank computes FACTOR (1..1000) times slower\n"
	    "                       (from STEP); when the slowest stays over twice the fastest\n"
	    "                       the members re-partition the shards by measured speed\n"
	    "  --compute-us N       each sample costs N us more, 0..1000000 (compute-bound steps)\n"
	    "  --no-repair          measure the stragglers, never re-partition\n"
	    "  --print-plans        every rank prints a digest of its plan at each view\n"
	    "  --shards FILE        train from FILE, the digits in shards (written from --data if\n"
	    "                       missing): each rank reads the shards it owns, the next\n"
	    "                       epoch's while computing this one\n"
	    "  --preload ahead|demand  with --shards: read ahead (default) or when first needed\n"
	    "  --cold               with --shards: drop FILE from the page cache every epoch\n"
	    "  --compress           gradients through keel's gradient AllReduce (f32, error\n"
	    "                       feedback): KEEL_COMPRESS=auto|bf16|f16|off decides\n"
	    "  --tp T               tensor parallel: replicas of T ranks (1, 2, 4, 8, 16 or 32;\n"
	    "                       default 1) split the hidden layer, AllGather forward and\n"
	    "                       ReduceScatter backward within one, AllReduce of each\n"
	    "                       shard across replicas; a replica that loses a rank is out\n"
	    "                       until it is back (not with --compress, --shards, --slow)\n"
	    "  --dp N               data parallel: N replicas, 1..%u; must be the ranks / T\n"
	    "                       (default: that)\n"
	    "  -h, --help           this text\n"
	    "  --version            keel's version and git hash\n"
	    "Environment: KEEL_* settings (keel-run --help-env, docs/reference/env.md).\n",
	    EPOCHS_MAX, TRAIN_SAMPLES_MAX, LR_MIN, LR_MAX, TRAIN_DIGITS_PATH,
	    (unsigned long long)CKPT_EVERY_MAX, RANKS_MAX - 1, (unsigned long long)STEP_MAX,
	    BENCH_MIB_MAX, RANKS_MAX);
	cli_exit_codes(f, "  (never 75: a rank left out of the view asks to be admitted again)\n");
}

/* The option table's order is the switch's: OPT_x is its index. */
enum {
	OPT_EPOCHS,
	OPT_BATCH,
	OPT_LR,
	OPT_SEED,
	OPT_DATA,
	OPT_CKPT_DIR,
	OPT_CKPT_EVERY,
	OPT_FAULT_AT,
	OPT_DUMP,
	OPT_NO_REFERENCE,
	OPT_QUIET,
	OPT_BENCH_STATE,
	OPT_CRASH_AT,
	OPT_STALL_AT,
	OPT_PLOT,
	OPT_SLOW,
	OPT_COMPUTE_US,
	OPT_NO_REPAIR,
	OPT_PRINT_PLANS,
	OPT_SHARDS,
	OPT_PRELOAD,
	OPT_COLD,
	OPT_COMPRESS,
	OPT_TP,
	OPT_DP,
	OPT_COUNT
};

static const struct cli_opt options[OPT_COUNT] = {
    [OPT_EPOCHS] = {"epochs", 0, CLI_UINT, .min_u = 1, .max_u = EPOCHS_MAX},
    [OPT_BATCH] = {"batch", 0, CLI_UINT, .min_u = 1, .max_u = TRAIN_SAMPLES_MAX},
    [OPT_LR] = {"lr", 0, CLI_REAL, .min_r = LR_MIN, .max_r = LR_MAX},
    [OPT_SEED] = {"seed", 0, CLI_UINT, .min_u = 0, .max_u = UINT64_MAX},
    [OPT_DATA] = {"data", 0, CLI_FILE},
    [OPT_CKPT_DIR] = {"ckpt-dir", 0, CLI_TEXT},
    [OPT_CKPT_EVERY] = {"ckpt-every", 0, CLI_UINT, .min_u = 1, .max_u = CKPT_EVERY_MAX},
    [OPT_FAULT_AT] = {"fault-at", 0, CLI_TEXT},
    [OPT_DUMP] = {"dump-weights", 0, CLI_TEXT},
    [OPT_NO_REFERENCE] = {"no-reference", 0, CLI_FLAG},
    [OPT_QUIET] = {"quiet", 0, CLI_FLAG},
    [OPT_BENCH_STATE] = {"bench-state", 0, CLI_UINT, .min_u = 1, .max_u = BENCH_MIB_MAX},
    [OPT_CRASH_AT] = {"crash-at", 0, CLI_TEXT},
    [OPT_STALL_AT] = {"stall-at", 0, CLI_TEXT},
    [OPT_PLOT] = {"plot", 0, CLI_TEXT},
    [OPT_SLOW] = {"slow", 0, CLI_TEXT},
    [OPT_COMPUTE_US] = {"compute-us", 0, CLI_REAL, .min_r = 0, .max_r = 1e6},
    [OPT_NO_REPAIR] = {"no-repair", 0, CLI_FLAG},
    [OPT_PRINT_PLANS] = {"print-plans", 0, CLI_FLAG},
    [OPT_SHARDS] = {"shards", 0, CLI_TEXT},
    [OPT_PRELOAD] = {"preload", 0, CLI_TEXT},
    [OPT_COLD] = {"cold", 0, CLI_FLAG},
    [OPT_COMPRESS] = {"compress", 0, CLI_FLAG},
    [OPT_TP] = {"tp", 0, CLI_UINT, .min_u = 1, .max_u = TRAIN_TP_MAX},
    [OPT_DP] = {"dp", 0, CLI_UINT, .min_u = 1, .max_u = RANKS_MAX},
};

/* "A<sep>B": A copied into head, B returned; NULL when sep is missing or A empty or too long. */
static const char *split(const char *v, char sep, char *head, size_t cap)
{
	const char *at = strchr(v, sep);
	if (at == NULL || at == v || (size_t)(at - v) >= cap)
		return NULL;
	memcpy(head, v, (size_t)(at - v));
	head[at - v] = '\0';
	return at + 1;
}

/* RANK@STEP (--fault-at, --crash-at), and --stall-at's RANK@STEP:SECONDS. */
static void rank_at_step(const char *opt, const char *v, uint32_t *rank, uint64_t *step,
			 double *seconds)
{
	char r[24], st[24];
	uint64_t rk = 0;
	const char *rest = split(v, '@', r, sizeof(r)), *secs = NULL;
	if (rest != NULL && seconds != NULL && (secs = split(rest, ':', st, sizeof(st))) != NULL)
		rest = st;
	if (rest == NULL || (seconds != NULL && secs == NULL) ||
	    cli_parse_uint(r, 0, RANKS_MAX - 1, &rk) != 0 ||
	    cli_parse_uint(rest, 0, STEP_MAX, step) != 0 ||
	    (secs != NULL &&
	     (cli_parse_real(secs, 0, 3600, seconds) != 0 || *seconds <= 0 || *seconds >= 3600)))
		cli_usage_error(TOOL, "%s: '%s' is not RANK@STEP%s (RANK 0..%u, STEP 0..%llu%s)",
				opt, v, seconds != NULL ? ":SECONDS" : "", RANKS_MAX - 1,
				(unsigned long long)STEP_MAX,
				seconds != NULL ? ", 0 < SECONDS < 3600" : "");
	*rank = (uint32_t)rk;
}

/* --slow RANK:FACTOR[@STEP] */
static void parse_slow(struct opts *o, const char *v)
{
	char r[24], f[32];
	uint64_t rk = 0;
	const char *rest = split(v, ':', r, sizeof(r)), *step = NULL;
	if (rest != NULL && (step = split(rest, '@', f, sizeof(f))) != NULL)
		rest = f;
	if (rest == NULL || cli_parse_uint(r, 0, RANKS_MAX - 1, &rk) != 0 ||
	    cli_parse_real(rest, 1, 1000, &o->slow_factor) != 0 ||
	    (step != NULL && cli_parse_uint(step, 0, STEP_MAX, &o->slow_step) != 0))
		cli_usage_error(TOOL,
				"--slow: '%s' is not RANK:FACTOR[@STEP] (RANK 0..%u, FACTOR "
				"1..1000, STEP 0..%llu)",
				v, RANKS_MAX - 1, (unsigned long long)STEP_MAX);
	o->slow_rank = (uint32_t)rk;
}

/* The options that take text in a form of their own. */
static void parse_text_opt(struct opts *o, int id, const char *v)
{
	char err[PLOT_PATH_MAX + 256];
	switch (id) {
	case OPT_PLOT: /* checked now (gnuplot, extension, folder), not after the training */
		if (plot_check(v, err, sizeof(err)) != 0)
			cli_usage_error(TOOL, "--plot: %s", err);
		o->plot = v;
		break;
	case OPT_SLOW:
		parse_slow(o, v);
		break;
	case OPT_PRELOAD:
		if (strcmp(v, "ahead") != 0 && strcmp(v, "demand") != 0)
			cli_usage_error(TOOL, "--preload: '%s' is not ahead or demand", v);
		o->preload_ahead = strcmp(v, "ahead") == 0;
		break;
	case OPT_FAULT_AT:
		rank_at_step("--fault-at", v, &o->fault_rank, &o->fault_step, NULL);
		break;
	case OPT_CRASH_AT:
		rank_at_step("--crash-at", v, &o->crash_rank, &o->crash_step, NULL);
		break;
	case OPT_STALL_AT:
		rank_at_step("--stall-at", v, &o->stall_rank, &o->stall_step, &o->stall_s);
		break;
	}
}

static void parse_opt(struct opts *o, int id, const struct cli *c)
{
	switch (id) {
	case OPT_EPOCHS:
		o->epochs = (uint32_t)c->u;
		break;
	case OPT_BATCH:
		o->batch = (uint32_t)c->u;
		break;
	case OPT_LR:
		o->lr = (float)c->r;
		break;
	case OPT_SEED:
		o->seed = c->u;
		break;
	case OPT_CKPT_EVERY:
		o->ckpt_every = c->u;
		break;
	case OPT_BENCH_STATE:
		o->bench_mib = c->u;
		break;
	case OPT_COMPUTE_US:
		o->compute_us = c->r;
		break;
	case OPT_TP:
		o->tp = (uint32_t)c->u;
		if (TRAIN_HIDDEN % o->tp != 0)
			cli_usage_error(
			    TOOL,
			    "--tp: %u does not divide the hidden layer's %u units (1, 2, "
			    "4, 8, 16 or 32)",
			    o->tp, TRAIN_HIDDEN);
		break;
	case OPT_DP:
		o->dp = (uint32_t)c->u;
		break;
	case OPT_DATA:
	case OPT_CKPT_DIR:
	case OPT_DUMP:
	case OPT_SHARDS:
		*(id == OPT_DATA       ? &o->data
		  : id == OPT_CKPT_DIR ? &o->ckpt_dir
		  : id == OPT_DUMP     ? &o->dump
				       : &o->shards) = c->value;
		break;
	case OPT_NO_REFERENCE:
		o->reference = false;
		break;
	case OPT_QUIET:
		o->quiet = true;
		break;
	case OPT_NO_REPAIR:
		o->no_repair = true;
		break;
	case OPT_PRINT_PLANS:
		o->print_plans = true;
		break;
	case OPT_COLD:
		o->cold = true;
		break;
	case OPT_COMPRESS:
		o->compress = true;
		break;
	default:
		parse_text_opt(o, id, c->value);
	}
}

/* Returns only when every option is valid: a mistake exits 2 (cli.h). */
static void parse_opts(struct opts *o, int argc, char **argv)
{
	*o = (struct opts){.epochs = 30,
			   .batch = 16,
			   .lr = 0.2f,
			   .seed = 1,
			   .ckpt_every = 100,
			   .data = TRAIN_DIGITS_PATH,
			   .fault_step = UINT64_MAX,
			   .crash_step = UINT64_MAX,
			   .stall_step = UINT64_MAX,
			   .slow_rank = UINT32_MAX,
			   .preload_ahead = true,
			   .reference = true,
			   .tp = 1};
	struct cli c = {.tool = TOOL,
			.opts = options,
			.opt_count = OPT_COUNT,
			.usage = usage,
			.argc = argc,
			.argv = argv};
	int id;
	while ((id = cli_next(&c)) >= 0)
		parse_opt(o, id, &c);
	if (c.next < argc)
		cli_usage_error(TOOL, "unexpected argument '%s' (see '%s --help')", argv[c.next],
				TOOL);
	if (o->compress && o->batch > 256)
		cli_usage_error(TOOL,
				"--batch: %u is more than 256 with --compress (the sample counts "
				"travel in the vector keel may round to bf16, which holds integers "
				"exactly up to 256)",
				o->batch);
	/* The 2-D mode reads the data set whole, sums in f64 and does not re-plan by speed. */
	const char *alone = o->compress			 ? "--compress"
			    : o->shards != NULL		 ? "--shards"
			    : o->slow_rank != UINT32_MAX ? "--slow"
							 : NULL;
	if (o->tp > 1 && alone != NULL)
		cli_usage_error(TOOL, "--tp %u: %s works with --tp 1 only", o->tp, alone);
}

/* Per-rank checkpoint directory DIR/rank<r>, created if missing. */
static int open_ckpt(struct trainer *t, char *dir, size_t dir_len)
{
	static uint8_t mem[8192] __attribute__((aligned(64)));
	static uint8_t scratch[256 << 10] __attribute__((aligned(KEEL_CKPT_ALIGN)));
	(void)mkdir(t->o.ckpt_dir, 0755);
	snprintf(dir, dir_len, "%s/rank%u", t->o.ckpt_dir, t->rank);
	(void)mkdir(dir, 0755);
	struct keel_ckpt_config c;
	keel_ckpt_config_default(&c);
	c.dir = dir;
	c.config_hash = config_hash(&t->o);
	c.keep = KEEP;
	c.interval_ns = 0;
	c.interval_steps = t->o.ckpt_every;
	c.scratch = scratch;
	c.scratch_len = sizeof(scratch);
	int rc = keel_ckpt_init(&t->ck, mem, sizeof(mem), &c);
	if (rc == 0)
		rc = keel_ckpt_register(t->ck, "weights", t->w, sizeof(t->w));
	return rc;
}

/* --shards: write the file from the CSV if it is not there yet, then read from it only the
 * header and the test set (the train rows come shard by shard, as this rank owns them). */
static int input_open(struct trainer *t, char *err, size_t err_len)
{
	int rc = 0;
	if (access(t->o.shards, F_OK) != 0) {
		rc = train_data_load(&g_data, t->o.data, err, err_len);
		if (rc == 0)
			rc = train_feed_write(t->o.shards, &g_data, SHARDS, err, err_len);
		if (rc == 0 && t->rank == 0 && !t->o.quiet)
			printf("keel-train: wrote %s: %u shards of the digits from %s\n",
			       t->o.shards, SHARDS, t->o.data);
		memset(&g_data, 0, sizeof(g_data)); /* the training reads the file, not this */
	}
	if (rc == 0)
		rc = train_feed_open(&g_feed, t->o.shards, SHARDS, t->o.preload_ahead, &g_data, err,
				     err_len);
	if (rc == 0)
		t->feed = &g_feed;
	return rc;
}

static int start(struct trainer *t, char *err, size_t err_len)
{
	static uint8_t plan_mem[1 << 16] __attribute__((aligned(64)));
	static uint32_t order[TRAIN_SAMPLES_MAX];
	int rc = t->o.shards != NULL ? input_open(t, err, err_len)
				     : train_data_load(&g_data, t->o.data, err, err_len);
	if (rc != 0)
		return rc;
	t->d = &g_data;
	t->order = order;
	t->order_epoch = UINT64_MAX;
	t->spe = g_data.train_count / t->o.batch;
	if (t->spe == 0)
		return -EINVAL;
	t->total_steps = t->spe * t->o.epochs;
	if (t->o.plot != NULL && (t->curve = calloc(t->o.epochs, sizeof(*t->curve))) == NULL) {
		snprintf(err, err_len, "--plot: no memory for %u epochs", t->o.epochs);
		return -ENOMEM;
	}
	struct keel_straggler_config sc;
	keel_straggler_config_default(&sc);
	sc.time_floor_s = 100e-6; /* this model's own compute (~10 us a step) is noise */
	if (t->o.no_repair)
		sc.persist_steps = UINT32_MAX; /* measures, never decides */
	rc = keel_straggler_init(&t->strag, t->strag_mem, 3 * RANKS_MAX, RANKS_MAX, &sc);
	if (rc != 0) {
		snprintf(err, err_len, "straggler controller: %s", keel_strerror(rc));
		return rc;
	}
	struct keel_plan_config pc = {.workers_max = RANKS_MAX, .items_max = SHARDS};
	rc = keel_plan_init(&t->plan, plan_mem, sizeof(plan_mem), &pc);
	struct keel_item items[SHARDS];
	for (uint32_t i = 0; rc == 0 && i < SHARDS; i++)
		items[i] = (struct keel_item){.work = 1.0, .key = i};
	if (rc == 0)
		rc = keel_plan_set_items(t->plan, items, SHARDS);
	if (rc != 0) {
		snprintf(err, err_len, "partition planner: %s", keel_strerror(rc));
		return rc;
	}
	train_model_init(t->w, t->o.seed);
	return 0;
}

/* The data, the planner, the checkpoints and (a restarted rank) admission: -1 to train, or the
 * exit code, after saying why. */
static int prepare(struct trainer *t)
{
	char err[512] = "", dir[KEEL_CKPT_DIR_MAX];
	int rc = start(t, err, sizeof(err));
	if (rc == 0 && t->o.ckpt_dir != NULL && (rc = open_ckpt(t, dir, sizeof(dir))) != 0)
		snprintf(err, sizeof(err), "checkpoints in %s/rank%u: %s", t->o.ckpt_dir, t->rank,
			 keel_strerror(rc));
	if (rc != 0) {
		fprintf(stderr, "keel-train: rank %u: %s\n", t->rank, err);
		keel_boot_stop(&t->b, 0);
		return CLI_EXIT_FAILURE;
	}
	t->synced = !t->b.cfg.rejoin;
	t->next = K_GRAD;
	if (!t->b.cfg.rejoin || (rc = keel_boot_wait_member(&t->b, 60ull * 1000000000ull)) == 0)
		return -1;
	if (rc == KEEL_EENDED) /* a restarted rank whose job ended first: nothing to do */
		printf("rank %u (restarted, life %u): training had ended before it was "
		       "admitted back (%s); nothing to do\n",
		       t->rank, t->b.cfg.incarnation, keel_strerror(rc));
	else
		fprintf(stderr, "keel-train: rank %u: never admitted back: %s\n", t->rank,
			keel_strerror(rc));
	keel_boot_stop(&t->b, 0);
	return rc == KEEL_EENDED ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
}

/* --tp and --dp against the job's size (whole replicas, and --dp of them when given), then the
 * 2-D mode's memory: -1 to go on, or the exit code, after saying why. */
static int tp_start(struct trainer *t)
{
	uint32_t tp = t->o.tp, dp = t->world / tp;
	const char *err = NULL;
	char msg[160];
	if (t->world % tp != 0) {
		snprintf(msg, sizeof(msg), "--tp %u: %u rank%s not make whole replicas of %u", tp,
			 t->world, t->world == 1 ? " does" : "s do", tp);
		err = msg;
	} else if (t->o.dp != 0 && t->o.dp != dp) {
		snprintf(msg, sizeof(msg),
			 "--dp %u: %u rank%s at --tp %u make%s %u replica%s, not %u", t->o.dp,
			 t->world, t->world == 1 ? "" : "s", tp, t->world == 1 ? "s" : "", dp,
			 dp == 1 ? "" : "s", t->o.dp);
		err = msg;
	}
	int rc = err == NULL && tp > 1
		     ? train_tp_init(&g_tp, t->b.node, tp, t->rank, t->o.batch, wait_req, t)
		     : 0;
	if (err == NULL && rc == 0) {
		t->tp = tp > 1 ? &g_tp : NULL;
		return -1;
	}
	if (err != NULL)
		fprintf(stderr, "keel-train: %s\n", err);
	else
		fprintf(stderr, "keel-train: rank %u: --tp: %s\n", t->rank, strerror(-rc));
	keel_boot_stop(&t->b, 0);
	return err != NULL ? CLI_EXIT_USAGE : CLI_EXIT_FAILURE;
}

/* The plan of the first view, the opening line and the step-0 checkpoint. */
static void first_view(struct trainer *t)
{
	struct keel_view v;
	uint32_t members[KEEL_WORLD_MAX];
	int n = keel_view_get(t->b.node, &v, members, KEEL_WORLD_MAX);
	if (n > 0 && replan(t, members, (uint32_t)n) == 0) {
		t->plan_epoch = v.epoch;
		plan_print(t);
	}
	/* --tp: the groups of the first view (a restarted rank makes them with the others, on
	 * the view that admits it) */
	int grc = t->tp != NULL && !t->b.cfg.rejoin ? train_tp_regroup(t->tp, v.epoch) : 0;
	if (grc != 0)
		fprintf(stderr, "keel-train: rank %u: groups on view %u: %s\n", t->rank, v.epoch,
			keel_strerror(grc));
	char layout[96] = "";
	if (t->tp != NULL)
		snprintf(layout, sizeof(layout), " (%u replicas of %u: --tp %u --dp %u)",
			 t->world / t->o.tp, t->o.tp, t->o.tp, t->world / t->o.tp);
	if (t->rank == 0 && !t->o.quiet)
		printf("keel-train: %u ranks%s, %u train / %u test digits, batch %u, %" PRIu64
		       " steps per epoch, %u epochs, %u shards placed by the partitioner\n",
		       t->world, layout, g_data.train_count, g_data.test_count, t->o.batch, t->spe,
		       t->o.epochs, SHARDS);
	if (t->ck != NULL && t->synced && keel_ckpt_write(t->ck, 0, v.epoch, t->t_start_ns) != 0)
		fprintf(stderr, "keel-train: rank %u: first checkpoint failed\n", t->rank);
}

/* After the training: the summaries, --dump-weights and --plot. Returns the exit code. */
static int finish(struct trainer *t, int rc, uint64_t train_ns, uint64_t step0)
{
	char err[512] = "";
	if (rc != 0 && rc != -ECANCELED) /* ECANCELED: the loop said why */
		fprintf(stderr, "keel-train: rank %u: %s\n", t->rank, keel_strerror(rc));
	else if (rc == 0)
		summary(t);
	if (rc == 0 && !t->job_ended)
		rank_summary(t, t->b.cfg.rejoin ? keel_posix_now_ns() - t->t_synced_ns : train_ns,
			     t->step - (t->b.cfg.rejoin ? t->synced_step : step0));
	if (rc == 0 && t->o.dump != NULL && is_leader(t) && dump_weights(t) != 0)
		fprintf(stderr, "keel-train: cannot write %s\n", t->o.dump);
	if (rc == 0 && t->o.plot != NULL && is_leader(t) && !t->job_ended) {
		rc = write_plot(t, err, sizeof(err));
		if (rc != 0)
			fprintf(stderr, "keel-train: %s\n", err);
		else
			printf("keel-train: plot written to %s\n", t->o.plot);
	}
	fflush(stdout);
	if (t->tp != NULL) /* its groups, while the node they belong to is there */
		train_tp_fini(t->tp);
	keel_boot_stop(&t->b, 2000000000ull);
	if (t->ck != NULL)
		keel_ckpt_fini(t->ck);
	if (t->feed != NULL)
		train_feed_close(t->feed);
	return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
}

int main(int argc, char **argv)
{
	static struct trainer tr;
	struct trainer *t = &tr;
	char err[512] = "";
	parse_opts(&t->o, argc, argv);
	t->t_start_ns = keel_posix_now_ns();
	int rc = keel_boot_start(&t->b, tweak, t, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "keel-train: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	t->rank = t->b.launch.rank;
	t->world = t->b.cfg.world_size;
	if (t->world > RANKS_MAX) {
		fprintf(stderr, "keel-train: at most %u ranks\n", RANKS_MAX);
		return CLI_EXIT_FAILURE;
	}
	if (t->o.bench_mib != 0) {
		rc = bench_state(t);
		keel_boot_stop(&t->b, 2000000000ull);
		return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
	}
	int code = tp_start(t);
	if (code >= 0)
		return code;
	code = prepare(t);
	if (code >= 0)
		return code;
	first_view(t);
	t->epoch_t0_ns = keel_posix_now_ns();
	fflush(stdout);
	t->recording = true;
	uint64_t train_t0 = keel_posix_now_ns(), step0 = t->step;
	rc = train_loop(t);
	t->recording = false;
	return finish(t, rc, keel_posix_now_ns() - train_t0, step0);
}
