/* keel-sim internals: the cluster model, the SimGrid transport and the scenario runner.
 * Tool-side glue: it may allocate; the keel nodes it drives run from memory it gives them.
 * Only the .c files in sim/ include SimGrid headers; this header names SimGrid types opaquely. */
#ifndef KEEL_SIM_INT_H
#define KEEL_SIM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "keel/keel.h"

/* ---- cluster model (platform.c) ---- */

#define SIM_GROUPS_MAX 16u
#define SIM_HOSTS_MAX  4096u

/* A group of GPUs of one kind. The figures are copies from the shared presets (runtime's
 * table, or a `define` line: tools/common/plan_preset.h). */
struct sim_group {
	struct keel_gpu_preset gpu;  /* host speed = gpu.rate_flops */
	struct keel_link_preset own; /* the GPU's scale-up link (NVLink, Infinity Fabric, PCIe) */
	struct keel_link_preset fabric; /* its NIC into the scale-out fabric */
	uint32_t gpu_count;
	uint32_t per_node;
};

struct sim_cluster {
	struct sim_group groups[SIM_GROUPS_MAX];
	uint32_t group_count;
	uint32_t gpu_count;
};

/* A GPU or link described by the user ("gpu NAME rate=... mem=... link=..." or "link NAME
 * bw=... lat=..."), usable in --cluster items after it. 0, or -EINVAL with a message. */
int sim_define(const char *def, char *err, size_t err_len);
/* Forget them (the scenario fuzz target parses many scenarios in one process). */
void sim_define_reset(void);
/* The presets and the user's definitions, with their sources (--list-models). */
void sim_models_print(FILE *f);
/* Parse "48xH100:ib,16xA100:eth/4". Returns 0, or -EINVAL with a message naming the
 * faulty item in err. */
int sim_cluster_parse(const char *spec, struct sim_cluster *c, char *err, size_t err_len);
/* Write the SimGrid platform XML of `c` to `f`. Hosts are gpu-NNNN, in group order; each
 * has a property "server" (its server's number): keel-sim gives the nodes host_of from it. */
int sim_cluster_write_xml(const struct sim_cluster *c, FILE *f);
/* ---- the scenario (scenario.c parses it, run.c plays it) ---- */

enum sim_recovery {
	SIM_RECOVER_KEEL = 0, /* survivors continue on a new view (in-memory state) */
	SIM_RECOVER_RESTART,  /* keel detects; the job restarts from its last checkpoint */
	SIM_RECOVER_TIMEOUT,  /* no detector: the collective times out, then restart */
};

/* --fidelity: full runs every step of every node in SimGrid; auto (mode train) leaps whole
 * steps at the measured period between events, and runs in full only from the start until the
 * steps are steady, and around each event (failures, pauses, slow-downs, link changes) and
 * its recovery until they are steady again. DEFAULT is auto for horizons over
 * SIM_FIDELITY_AUTO_ABOVE_S in mode train, full otherwise. */
enum sim_fidelity {
	SIM_FIDELITY_DEFAULT = 0,
	SIM_FIDELITY_FULL,
	SIM_FIDELITY_AUTO,
};
#define SIM_FIDELITY_AUTO_ABOVE_S 300.0

enum sim_fault_kind {
	SIM_FAULT_HOST_OFF = 0,
	SIM_FAULT_HOST_ON,
	SIM_FAULT_LINK_OFF,
	SIM_FAULT_LINK_ON,
	SIM_FAULT_SLOW,	  /* straggler: a host computes `factor` times slower from then on */
	SIM_FAULT_CUT,	  /* chaos partition between two ranks */
	SIM_FAULT_PAUSE,  /* a gray failure: the process stops computing and sending for
			   * `factor` seconds (SIGSTOP), then goes on with its state */
	SIM_FAULT_RESUME, /* the end of a PAUSE (added by the run, not parsed) */
};

#define SIM_FAULTS_MAX 256u

/* Why a host went down. */
enum sim_cause {
	SIM_CAUSE_FAULT = 0, /* --fail at a given time */
	SIM_CAUSE_GPU,	     /* a lifetime drawn from --mtbf (per GPU) */
	SIM_CAUSE_SERVER,    /* a lifetime drawn from --mtbf-server: every GPU of the server */
	SIM_CAUSE_PAUSE,     /* --pause: stopped, not dead */
};
const char *sim_cause_name(enum sim_cause cause);

struct sim_fault {
	enum sim_fault_kind kind;
	enum sim_cause cause;
	double at_s;
	uint32_t a, b; /* host (or rank) indexes; b for CUT */
	double factor;
	char link[64]; /* LINK_OFF/ON: a link name */
};

struct sim_scenario {
	/* platform */
	char cluster_spec[256];
	char platform_file[256];
	uint32_t ranks; /* 0: every host */
	/* keel knobs */
	uint64_t heartbeat_ns;
	uint32_t miss_limit;
	uint32_t window;
	uint32_t mtu;
	uint64_t op_timeout_ns;
	uint64_t join_timeout_ns;
	enum keel_algo algo;
	/* workload */
	char mode[16]; /* "train", "heartbeat", "allreduce" */
	double horizon_s;
	double model_params;	 /* parameters; gradient = 4 bytes each (f32) */
	double flops_per_sample; /* forward + backward; 0: sim_flops_per_sample's default */
	uint32_t batch;		 /* global batch, samples per step */
	double mfu;		 /* model FLOPs utilisation applied to peak speed */
	uint32_t grad_scale;	 /* each data datagram stands for this many */
	uint32_t trains;	 /* bulk datagrams to one peer per SimGrid message (1: one each) */
	uint32_t ckpt_every;	 /* steps; 0: never */
	double ckpt_Bps;	 /* checkpoint write bandwidth per GPU */
	double restart_s;	 /* relaunch + rendezvous + load, restart modes */
	enum sim_recovery recovery;
	uint64_t allreduce_bytes; /* mode allreduce */
	uint32_t repeat;	  /* mode allreduce: timed repetitions */
	bool check;		  /* compare every AllReduce result with the reference */
	bool repair; /* mode train: straggler repair by keel's controller (--repair on|off) */
	/* --compress off|auto|bf16|f16: gradients through keel_allreduce_grad_start with error
	 * feedback, keel_config.compress set so; none (the default): plain AllReduces */
	bool grad;
	enum keel_compress compress;
	/* faults */
	struct sim_fault faults[SIM_FAULTS_MAX];
	uint32_t fault_count;
	/* Random failures, one lifetime per GPU (mtbf_s) and per server (mtbf_server_s: all its
	 * GPUs at once), exponential (weibull_k 1) or Weibull of shape weibull_k, with that mean;
	 * 0: none. A failed host stays down. */
	double mtbf_s, mtbf_server_s, weibull_k;
	/* Repairs: a failed GPU or server comes back after a time drawn with this mean
	 * (exponential; 0: never), then draws a new lifetime. A repaired GPU's process rejoins:
	 * with keel's recovery at once (a new incarnation, admitted by a view change, weights
	 * from a live member); with restart or timeout at the job's next relaunch. */
	double mttr_s;
	char chaos[128];
	uint64_t seed;
	enum sim_fidelity fidelity;
	/* output */
	bool progress;
};

void sim_scenario_default(struct sim_scenario *s);
/* A sample's forward and backward FLOPs: --flops-per-sample, else those of a GPT-style model
 * of --model parameters on SIM_TOKENS_PER_SAMPLE tokens (6 FLOPs per parameter and token). */
#define SIM_TOKENS_PER_SAMPLE 2048
double sim_flops_per_sample(const struct sim_scenario *s);
/* Apply "key=value" (flags without the leading dashes, scenario-file lines and --sweep values
 * all come here). Returns 0 or -EINVAL with a message. */
int sim_scenario_set(struct sim_scenario *s, const char *key, const char *value, char *err,
		     size_t err_len);
#define SIM_SCENARIO_LINE_MAX 511u
/* Apply a scenario's text, `len` bytes named `name` in messages: one "key = value" or
 * "key value" per line ('#' starts a comment, a line holds at most SIM_SCENARIO_LINE_MAX
 * characters). Returns 0, or -EINVAL with a message naming the line. No SimGrid in it. */
int sim_scenario_parse(struct sim_scenario *s, const char *name, const char *text, size_t len,
		       char *err, size_t err_len);
/* The same for the file at `path`. */
int sim_scenario_load(struct sim_scenario *s, const char *path, char *err, size_t err_len);

/* ---- multi-fidelity (fidelity.c: the arithmetic; run.c: the leaps) ---- */

/* Steady means at least this many steps, covering at least SIM_FF_HEARTBEATS heartbeat
 * intervals (so the control traffic's share of a step is measured), whose older and newer
 * halves' mean periods agree within SIM_FF_TOL; a leap is at least SIM_FF_STEPS_MIN steps and
 * ends SIM_FF_GUARD_STEPS steps plus two detection bounds before the next event. */
#define SIM_FF_STEPS_MIN   16u
#define SIM_FF_HEARTBEATS  4.0
#define SIM_FF_TOL	   0.002
#define SIM_FF_GUARD_STEPS 3.0
/* A leap of k steps at a mean of n periods of range r may drift k x r / n from the full run's
 * steps; it is kept within this fraction of a step (a longer leap waits for more steps, or,
 * with the window full, leaps this far and measures again). Half a step: where a failure lands
 * in its step is uncertain after a leap anyway (docs/keel-sim.md), and a stricter bound kept
 * 64 mixed GPUs in full for 8 s instead of 1.6 s before their first leap. */
#define SIM_FF_PHASE_TOL  0.5
#define SIM_FF_WINDOW_MAX 256u

/* The job's most recent step periods since the last event (its accountant's: run.c). */
struct sim_ff {
	double period_s[SIM_FF_WINDOW_MAX];
	uint32_t head, count;
};
void sim_ff_reset(struct sim_ff *ff);
void sim_ff_add(struct sim_ff *ff, double period_s);
/* Are the held periods steady (above)? Then true, with the run of periods it judged by: how
 * many, their mean and their range (a bound on the mean's error is range / n a step). */
struct sim_ff_stats {
	uint32_t n;
	double mean_s, range_s;
};
bool sim_ff_steady(const struct sim_ff *ff, uint32_t steps_min, double span_min_s, double tol,
		   struct sim_ff_stats *st);

/* A leap: this many whole steps of period_s, with the checkpoints among them, lasting dur_s. */
struct sim_ff_skip {
	uint64_t steps;
	uint32_t ckpts;
	double period_s, dur_s;
};
/* The most whole steps of period_s that fit in room_s, a checkpoint of ckpt_write_s after
 * every ckpt_every-th step counted from steps_done (0: none); steps 0 when fewer than
 * steps_min fit. */
void sim_ff_plan(struct sim_ff_skip *out, double room_s, double period_s, uint64_t steps_done,
		 uint32_t ckpt_every, double ckpt_write_s, uint64_t steps_min);

/* ---- results (run.c fills, report.c prints) ---- */

#define SIM_FAILURES_MAX 64u
#define SIM_REJOINS_MAX	 64u

/* A repaired GPU coming back (--recover, --mttr). */
struct sim_rejoin {
	double at_s; /* repaired */
	uint32_t host;
	double admitted_s; /* repair to the view that admitted it (restart modes: to its node's
			    * start in the relaunched job); 0: not before the end */
	double synced_s;   /* admission to the weights received from a live member (keel) */
};

struct sim_failure_cost {
	double at_s;
	uint32_t host, server;
	enum sim_cause cause;
	/* It struck while an earlier failure's detection, view change or restart was under way
	 * (the GPUs of one server fail together): only what it added beyond that is charged, and
	 * no restart, rollback or redo of its own. UINT32_MAX: it did not (the index otherwise). */
	uint32_t within;
	double detect_s; /* failure to the first survivor's suspicion (restart modes: to the
			  * first survivor giving up on it, or its collective's timeout) */
	double view_s;	 /* first detection to the new view on every survivor */
	double repartition_s;
	double restart_s;  /* relaunch, restart modes */
	double rollback_s; /* steps recomputed after a restart from a checkpoint */
	double redo_s;	   /* work of the step in flight, lost */
	double view_at_s;  /* when the last survivor installed a view without it (restart modes:
			    * when the last survivor gave up and the relaunch began); 0: never */
};

/* Step times over simulated time, for plots, in bounded memory: the horizon is cut into
 * SIM_STEP_SLOTS equal slots and each keeps the steps that ended in it. A slot as long as
 * a step or shorter holds at most one: the series is then every step exactly. A step's time
 * runs from the previous step's end (the first one's: from its start), so it includes a
 * failed attempt, a recovery, a restart or a checkpoint write before it. */
#define SIM_STEP_SLOTS 512u
struct sim_step_slot {
	double end_s_sum;  /* the steps' end times, summed */
	double step_s_sum; /* their times, summed */
	double step_s_max;
	uint32_t count;
};

/* The distribution of detection times (each survivor's suspicion of each failure), kept as at
 * most SIM_DETECT_CDF_MAX points of its CDF: every sample when there are that few, else
 * evenly spaced order statistics (first and last included). */
#define SIM_DETECT_CDF_MAX 256u
#define SIM_LEAPS_MAX	   512u

struct sim_result {
	char label[64];
	uint32_t ranks;
	double sim_s;
	uint64_t steps;
	double samples_per_s;
	double step_s;	/* mean step time without failures */
	double goodput; /* useful training time / simulated time */
	uint32_t failure_count;
	struct sim_failure_cost failures[SIM_FAILURES_MAX];
	uint32_t rejoin_count; /* all; the first SIM_REJOINS_MAX are listed */
	struct sim_rejoin rejoins[SIM_REJOINS_MAX];
	uint32_t detect_count;
	double detect_p50_s, detect_p99_s, detect_max_s;
	double detect_cdf_s[SIM_DETECT_CDF_MAX];    /* ascending */
	double detect_cdf_frac[SIM_DETECT_CDF_MAX]; /* the fraction of samples <= it */
	uint32_t detect_cdf_count;
	struct sim_step_slot step_slots[SIM_STEP_SLOTS]; /* mode train */
	double detect_bound_s; /* miss_limit x heartbeat + largest one-way latency */
	uint64_t detect_late;  /* detections slower than the bound */
	uint64_t false_suspicions;
	uint64_t live_excluded; /* views that left out a live process, as it learnt (pauses) */
	uint64_t undetected;	/* watcher that never suspected a failed peer */
	bool views_agree;
	uint32_t view_epochs;
	uint64_t allreduce_ops, allreduce_wrong, allreduce_failed;
	uint64_t allreduce_hier; /* of the ops, those computed by KEEL_ALGO_HIER */
	/* Straggler repair (mode train): repairs as the accountant decided them, the first one's
	 * simulated time and its step (the job's count), the mean step after the last one, and
	 * steps at which a member's plan differed from another's (each member sends its plan's
	 * digest with the step's gradient; two steps in a row over the same members must agree). */
	bool repair_on;
	uint32_t repairs;
	double repair_first_at_s;
	uint64_t repair_first_step;
	double repair_before_s, repair_after_s; /* the last repair's predicted step compute */
	double step_s_after_repair;
	double compute_s_ideal; /* a step's compute split by the GPUs' speeds at the end */
	uint64_t plans_disagree;
	double allreduce_s;	  /* mode allreduce: mean time of one */
	double allreduce_model_s; /* 2(n-1)(alpha + S/(n beta)) */
	double alpha_s, beta_Bps;
	double grad_allreduce_s; /* mode train: the ring model's time for one step's gradient */
	double compute_s_min, compute_s_max; /* one step's compute, fastest and slowest GPU */
	uint32_t servers;		     /* distinct servers among the hosts */
	uint64_t messages, bytes;
	uint64_t comms; /* SimGrid messages that carried them (trains: fewer) */
	uint64_t compress_frags, compress_bytes_saved; /* --compress: all nodes, scaled bytes */
	uint64_t rx_queue_drops;
	uint32_t grad_scale;
	/* multi-fidelity: the mode the run used, and the spans it leapt (the accountant's view;
	 * every rank leaps the same length from its own end of the same step). The rest ran in
	 * full. */
	enum sim_fidelity fidelity;
	uint32_t leap_count; /* all of them; the first SIM_LEAPS_MAX are listed */
	double leap_from_s[SIM_LEAPS_MAX], leap_to_s[SIM_LEAPS_MAX];
	double leapt_s;
	uint64_t leapt_steps;
	double wall_s;
	long rss_kb;
	bool deadlock;
	bool setup_failed; /* a node could not start (its error is on stderr) */
};

/* Play one scenario; argc/argv carry SimGrid's own --cfg= options. Returns 0, or -EINVAL
 * with a message (bad platform, too few hosts). */
int sim_run(const struct sim_scenario *s, struct sim_result *r, int *argc, char **argv, char *err,
	    size_t err_len);

/* --sweep ckpt-every=...: the best value (highest goodput) and, beside it, Young and Daly's
 * first-order optimum sqrt(2 x delta x M), said on stderr (sim/ckpt_optimum.c). */
struct sim_ckpt_advice {
	bool have;
	double best_every, best_goodput, step_s, sim_s;
	uint32_t ranks, servers, failures;
	double delta_s, mtbf_job_s, yd_s, yd_steps;
};
void sim_ckpt_track(struct sim_ckpt_advice *a, const char *val, const struct sim_result *r);
void sim_ckpt_young_daly(struct sim_ckpt_advice *a, const struct sim_scenario *s);

void sim_report_header(FILE *f, const char *format, const char *sweep_key);
/* A training run that made no step: a warning on f naming the horizon, the step time the
 * models predict and what to change (nothing when steps were made, or in other modes). */
void sim_progress_warn(FILE *f, const struct sim_scenario *s, const struct sim_result *r);
const char *sim_fidelity_name(enum sim_fidelity f);
/* The spans a run simulated in full (the complement of its leaps), as CSV ('c': "a-b;c-d"),
 * JSON ('j': [[a, b], ...]) or text ('t'). */
void sim_full_spans_print(FILE *f, const struct sim_result *r, char style);
void sim_report_row(FILE *f, const char *format, const char *sweep_key, const char *sweep_val,
		    const struct sim_result *r, bool first, bool last);

/* ---- --plot (plots.c; tools/common/plot.c runs gnuplot) ---- */

/* The number in a knob's value, in the scenario's units ("1ms" is 0.001, "1h" 3600, "4M"
 * 4194304): a sweep's x axis. 0, or -EINVAL when it is not one ("keel", "8xH100:ib"). */
int sim_value_number(const char *value, double *out);

struct sim_plot; /* the data of every run so far, in a temporary folder */

/* Start the plot `path` (FILE.svg or FILE.png) of runs in `mode`, swept over `sweep_key`
 * (NULL: one run). 0, or a negative errno with a message (bad extension, no gnuplot, the
 * folder); on failure *out is NULL and nothing is left behind. */
int sim_plot_open(struct sim_plot **out, const char *path, const char *mode, const char *sweep_key,
		  char *err, size_t err_len);
/* Add one run's results (its sweep value, NULL for a single run). 0 or -EIO. */
int sim_plot_add(struct sim_plot *sp, const char *sweep_val, const struct sim_result *r);
/* Draw what was added into the plot's path and free sp. 0, or a negative errno with a
 * message (nothing to draw, gnuplot failed); no file is left on failure. */
int sim_plot_render(struct sim_plot *sp, char *err, size_t err_len);
/* A sweep of ckpt-every: mark the best value and Young/Daly's (in steps; 0: none). */
void sim_plot_optimum(struct sim_plot *sp, double best, double young_daly);
/* Free sp and its temporary folder without drawing; NULL is fine. */
void sim_plot_discard(struct sim_plot *sp);

/* ---- straggler repair (straggler_sim.c): keel's planner and controller per simulated rank */

/* Each rank plans this many equal shards at least (8 per rank above it): an equal share is
 * then 1/32 of the batch at 8 ranks, fine enough for a 4x slower GPU's quarter. */
#define SIM_STRAGGLER_SHARDS_MIN 256u
/* Above this many ranks repair is off (said once): every rank plans its own copy with LPT,
 * O(shards x ranks) per plan, which at 1 024 ranks would cost more than the simulation. */
#define SIM_STRAGGLER_RANKS_MAX 128u

struct sim_straggler {
	struct keel_plan *plan;
	struct keel_straggler strag;
	void *plan_mem;
	double *strag_mem;
	uint32_t shards;
	uint32_t *ranks; /* plan worker -> rank */
	uint32_t count, cap;
	struct keel_worker *wk; /* scratch for a new view's workers */
	double *time_s;		/* scratch: this step's times by plan worker */
};

/* Plan and controller for views of up to `world` ranks, the first plan over all of them. */
int sim_straggler_init(struct sim_straggler *st, uint32_t world);
void sim_straggler_free(struct sim_straggler *st);
/* A fresh plan over `ranks` (a view), equal rates; the controller forgets what it measured. */
int sim_straggler_replan(struct sim_straggler *st, const uint32_t *ranks, uint32_t count);
/* Rank's share of the batch in the current plan (0 when it is not in it). */
double sim_straggler_share(const struct sim_straggler *st, uint32_t rank);
/* One step's compute times (indexed by rank) of the members an AllReduce reduced over: a
 * different member set replans instead (d says nothing happened). */
int sim_straggler_step(struct sim_straggler *st, const uint32_t *ranks, uint32_t count,
		       const float *time_by_rank, struct keel_straggler_decision *d);

/* ---- the transport over SimGrid mailboxes (transport_sim.c) ---- */

struct sim_net;	  /* every endpoint's mailbox and inbox */
struct sim_inbox; /* what one endpoint's receiver actor has queued */

struct sim_net_config {
	uint32_t endpoints;
	uint32_t queue_max;	/* datagrams an inbox holds; more are dropped (a full socket) */
	uint32_t scale;		/* data datagrams are charged len * scale bytes */
	uint32_t scale_min_len; /* datagrams up to this long (control) are charged len */
	uint32_t rx_gets;	/* gets each receiver keeps posted (0: 16); see transport_sim.c */
	uint32_t train_max;	/* bulk datagrams to one peer in one SimGrid message (0, 1: one) */
};
#define SIM_TRAIN_MAX 1024u

struct sim_net *sim_net_create(const struct sim_net_config *cfg, void *const *hosts);
void sim_net_destroy(struct sim_net *net);
/* Start endpoint e's receiver (a daemon actor on its host). */
void sim_net_start_receiver(struct sim_net *net, uint32_t e);
void sim_net_stop_receiver(struct sim_net *net, uint32_t e);
/* Is an endpoint reachable (its host on, its receiver running)? Sends to others are lost. */
void sim_net_set_alive(struct sim_net *net, uint32_t e, bool alive);
/* Block the calling actor until endpoint e has input, `wake` is called, or `deadline_ns`. */
void sim_net_wait(struct sim_net *net, uint32_t e, uint64_t deadline_ns);
void sim_net_wake(struct sim_net *net, uint32_t e);
bool sim_net_has_input(const struct sim_net *net, uint32_t e);
void sim_net_totals(const struct sim_net *net, uint64_t *messages, uint64_t *comms, uint64_t *bytes,
		    uint64_t *drops);
uint64_t sim_now_ns(void);

/* A keel transport for endpoint `self`: keel ranks 0..world-1 map to endpoints by `map`
 * (copied). mem: sim_transport_storage_size(world) bytes. */
size_t sim_transport_storage_size(const struct sim_net *net, uint32_t world);
int sim_transport_init(struct keel_transport **out, void *mem, size_t mem_len, struct sim_net *net,
		       uint32_t self_endpoint, uint32_t rank, uint32_t world, const uint32_t *map,
		       uint32_t mtu);

#endif
