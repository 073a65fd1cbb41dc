/* keel-run: start N local ranks with the torchrun environment (like `torchrun --standalone`),
 * forward signals, stop the job when a rank fails, report every rank's end.
 * Each rank leads its own process group so that stopping it stops its children too; the
 * price is that a rank reading the terminal gets SIGTTIN (ranks should not read stdin). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "keel/boot.h"
#include "keel/env.h"
#include "keel/launch.h"
#include "keel/limits.h"
#include "keel/posix.h"
#include "keel/transport_shm.h"

#include "cli.h"

#define TOOL	     "keel-run"
#define EXIT_TIMEOUT 124
/* A rank's own exit status when the job's view left it out (boot.h: KEEL_EXIT_EXCLUDED). */
#define EXIT_EXCLUDED	 CLI_EXIT_EXCLUDED
#define GRACE_NS_DEFAULT 5000000000ull
/* --timeout, --grace, --kill, --pause: from 1 ms to about 115 days, far beyond any job, far
 * below overflow. */
#define SECONDS_MIN 1e-3
#define SECONDS_MAX 1e7

enum rank_state {
	RANK_IDLE = 0, /* not started (yet, or fork failed) */
	RANK_RUNNING,
	RANK_DONE,
};

/* One row per rank: what --kill RANK@S and --restart act on. */
struct rank_slot {
	pid_t pid; /* also its process group: each rank leads its own */
	enum rank_state state;
	int wstatus; /* from waitpid, valid when RANK_DONE */
	uint32_t restarts;
	uint64_t started_ns, ended_ns;
	bool killed_by_us;	/* its last life ended by --kill: not a failure */
	bool stopped;		/* --pause: SIGSTOPped now */
	uint64_t restart_at_ns; /* --restart: when to start it again; UINT64_MAX when not */
};

/* --kill RANK@SECONDS: SIGKILL that rank this long after keel-run started.
 * --pause RANK@SECONDS:DURATION: SIGSTOP it then, SIGCONT it DURATION later (a gray failure:
 * the process comes back with its old state). */
#define KILLS_MAX 64u
struct kill_entry {
	uint32_t rank;
	uint64_t at_ns;
	uint64_t pause_ns; /* 0: a kill */
	bool done, resumed;
};
/* A killed rank restarts this long after its death was noticed. */
#define RESTART_DELAY_NS 100000000ull

struct opts {
	uint32_t nproc;
	uint16_t master_port; /* 0: pick a free one */
	uint64_t timeout_ns;  /* 0: none */
	uint64_t grace_ns;    /* SIGTERM to SIGKILL */
	bool keep_going;
	bool restart; /* start a rank again when a signal killed it */
	bool no_key;  /* --no-key: no job key (unauthenticated traffic, e.g. to measure its cost) */
	struct kill_entry kills[KILLS_MAX];
	uint32_t kill_count;
	char **argv; /* the program and its arguments */
};

struct job {
	struct opts o;
	struct rank_slot ranks[KEEL_WORLD_MAX];
	uint32_t running;
	int first_fail; /* rank whose end decides the exit code; -1 while none failed */
	bool start_failed;
	bool stopping;
	bool timed_out;
	uint64_t deadline_ns; /* --timeout; UINT64_MAX when none */
	uint64_t kill_ns;     /* SIGKILL whatever still runs; UINT64_MAX when not stopping */
	uint32_t job_id;
	uint16_t master_port;
	uint16_t peer_port0; /* rank 0's UDP port in KEEL_PEERS */
	uint64_t start_ns;
	char peers[KEEL_WORLD_MAX * 22]; /* KEEL_PEERS when ranks may restart, else "" */
	int sfd;			 /* signalfd: SIGCHLD, SIGINT, SIGTERM, SIGHUP */
	/* The job's key, made by keel-run: a private directory and the file in it ("" when the
	 * key comes from keel-run's own environment, or this keel cannot use one). */
	char key_dir[PATH_MAX];
	char key_file[PATH_MAX + 16];
	pid_t owner; /* the keel-run process that made them and alone removes them; 0: none */
};

static struct job job;

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: keel-run -n N [options] [--] PROGRAM [ARGS...]\n"
	    "Start N ranks of PROGRAM on this host with RANK, WORLD_SIZE, LOCAL_RANK,\n"
	    "LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT and KEEL_JOB_ID set.\n"
	    "\n"
	    "  -n, --nproc N        ranks to start, 1..%u (also --nproc-per-node)\n"
	    "  --master-port P      rendezvous port, 1..65535 (default: a free port)\n"
	    "  --timeout SECONDS    stop every rank after this long, %.12g..%.12g; exit 124\n"
	    "  --grace SECONDS      wait between SIGTERM and SIGKILL when stopping, %.12g..%.12g\n"
	    "                       (default 5)\n"
	    "  --keep-going         a failing rank does not stop the others\n"
	    "  --kill RANK@SECONDS  SIGKILL that rank this long after the start (repeatable;\n"
	    "                       not counted as a failure)\n"
	    "  --pause RANK@SECONDS:DURATION  SIGSTOP that rank at SECONDS, SIGCONT it DURATION\n"
	    "                       seconds later (repeatable; %u --kill and --pause in all)\n"
	    "  --restart            start a rank again when a signal killed it, or when it\n"
	    "                       exited %d (excluded from the view), as a new incarnation\n"
	    "                       (KEEL_INCARNATION, KEEL_REJOIN=1)\n"
	    "  --no-key             give the ranks no job key: their traffic is not authenticated\n"
	    "                       (by default a fresh key per job, KEEL_JOB_KEY_FILE)\n"
	    "  -h, --help           this text\n"
	    "  --version            keel's version and git hash\n"
	    "  --help-env[=markdown]  the KEEL_* environment variables the ranks read (every one:\n"
	    "                       type, range, default, meaning), as text or as Markdown\n"
	    "\n"
	    "SIGINT, SIGTERM and SIGHUP are passed to every rank. Each rank runs in its own\n"
	    "process group, so signals reach its children too. A rank that exits %d was left\n"
	    "out of the job's view (paused or cut off too long) and left cleanly: the others\n"
	    "go on without it; that is not a failure.\n"
	    "Environment: the ranks read KEEL_* settings (keel-run --help-env,\n"
	    "docs/reference/env.md); keel-run passes its own environment on.\n",
	    KEEL_WORLD_MAX, SECONDS_MIN, SECONDS_MAX, SECONDS_MIN, SECONDS_MAX, KILLS_MAX,
	    EXIT_EXCLUDED, EXIT_EXCLUDED);
	cli_exit_codes(
	    f, "  N    otherwise, the status of the first rank to fail (128+S when signal S\n"
	       "       killed it; 126/127 when PROGRAM cannot run / is not found)\n"
	       "  124  --timeout stopped the job\n"
	       "  (75 from a rank, excluded from the view, is not a failure: 0 if the\n"
	       "  others succeed)\n");
}

enum {
	OPT_NPROC,
	OPT_NPROC_PER_NODE, /* torchrun's name for it */
	OPT_MASTER_PORT,
	OPT_TIMEOUT,
	OPT_GRACE,
	OPT_KEEP_GOING,
	OPT_RESTART,
	OPT_NO_KEY,
	OPT_KILL,
	OPT_PAUSE,
	OPT_HELP_ENV,
	OPT_COUNT
};

static const struct cli_opt options[OPT_COUNT] = {
    [OPT_NPROC] = {"nproc", 'n', CLI_UINT, .min_u = 1, .max_u = KEEL_WORLD_MAX},
    [OPT_NPROC_PER_NODE] = {"nproc-per-node", 0, CLI_UINT, .min_u = 1, .max_u = KEEL_WORLD_MAX},
    [OPT_MASTER_PORT] = {"master-port", 0, CLI_UINT, .min_u = 1, .max_u = 65535},
    [OPT_TIMEOUT] = {"timeout", 0, CLI_REAL, .min_r = SECONDS_MIN, .max_r = SECONDS_MAX},
    [OPT_GRACE] = {"grace", 0, CLI_REAL, .min_r = SECONDS_MIN, .max_r = SECONDS_MAX},
    [OPT_KEEP_GOING] = {"keep-going", 0, CLI_FLAG},
    [OPT_RESTART] = {"restart", 0, CLI_FLAG},
    [OPT_NO_KEY] = {"no-key", 0, CLI_FLAG},
    [OPT_KILL] = {"kill", 0, CLI_TEXT},
    [OPT_PAUSE] = {"pause", 0, CLI_TEXT},
    [OPT_HELP_ENV] = {"help-env", 0, CLI_OPT_TEXT},
};

/* --kill RANK@SECONDS and --pause RANK@SECONDS:DURATION; a mistake exits 2 naming the form. */
static void parse_kill(struct opts *o, const char *v, bool pause)
{
	const char *opt = pause ? "--pause" : "--kill";
	const char *at = strchr(v, '@'), *colon = at != NULL ? strchr(at, ':') : NULL;
	char rank[16], when[32];
	uint64_t r;
	double at_s, for_s = 0;

	if (o->kill_count == KILLS_MAX)
		cli_usage_error(TOOL, "%s: --kill and --pause at most %u times in all", opt,
				KILLS_MAX);
	const char *when_end = pause ? colon : at != NULL ? at + strlen(at) : NULL;
	if (at == NULL || when_end == NULL || at == v || (size_t)(at - v) >= sizeof(rank) ||
	    (size_t)(when_end - at - 1) >= sizeof(when))
		when_end = NULL;
	if (when_end != NULL) {
		memcpy(rank, v, (size_t)(at - v));
		rank[at - v] = '\0';
		memcpy(when, at + 1, (size_t)(when_end - at - 1));
		when[when_end - at - 1] = '\0';
	}
	if (when_end == NULL || cli_parse_uint(rank, 0, KEEL_WORLD_MAX - 1, &r) != 0 ||
	    cli_parse_real(when, SECONDS_MIN, SECONDS_MAX, &at_s) != 0 ||
	    (pause && cli_parse_real(colon + 1, SECONDS_MIN, SECONDS_MAX, &for_s) != 0))
		cli_usage_error(
		    TOOL, "%s: '%s' is not RANK@SECONDS%s (RANK 0..%u, SECONDS %.12g..%.12g)", opt,
		    v, pause ? ":DURATION" : "", KEEL_WORLD_MAX - 1, SECONDS_MIN, SECONDS_MAX);
	o->kills[o->kill_count++] = (struct kill_entry){.rank = (uint32_t)r,
							.at_ns = (uint64_t)(at_s * 1e9),
							.pause_ns = (uint64_t)(for_s * 1e9)};
}

static void set_option(struct opts *o, int id, const struct cli *c)
{
	switch (id) {
	case OPT_NPROC:
	case OPT_NPROC_PER_NODE:
		o->nproc = (uint32_t)c->u;
		break;
	case OPT_MASTER_PORT:
		o->master_port = (uint16_t)c->u;
		break;
	case OPT_TIMEOUT:
	case OPT_GRACE:
		*(id == OPT_TIMEOUT ? &o->timeout_ns : &o->grace_ns) = (uint64_t)(c->r * 1e9);
		break;
	case OPT_KEEP_GOING:
		o->keep_going = true;
		break;
	case OPT_RESTART:
		o->restart = true;
		break;
	case OPT_NO_KEY:
		o->no_key = true;
		break;
	case OPT_KILL:
	case OPT_PAUSE:
		parse_kill(o, c->value, id == OPT_PAUSE);
		break;
	case OPT_HELP_ENV:
		if (keel_env_print(stdout, c->value != NULL ? c->value : "text") != 0)
			cli_usage_error(TOOL, "--help-env=%s: expected text or markdown", c->value);
		exit(CLI_EXIT_OK);
	}
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	struct cli c = {.tool = TOOL,
			.opts = options,
			.opt_count = OPT_COUNT,
			.usage = usage,
			.argc = argc,
			.argv = argv};
	int id;

	o->grace_ns = GRACE_NS_DEFAULT;
	while ((id = cli_next(&c)) >= 0)
		set_option(o, id, &c);
	if (o->nproc == 0)
		cli_usage_error(TOOL, "-n N is required (see '%s --help')", TOOL);
	if (c.next >= argc)
		cli_usage_error(TOOL, "no program to run (see '%s --help')", TOOL);
	for (uint32_t k = 0; k < o->kill_count; k++)
		if (o->kills[k].rank >= o->nproc)
			cli_usage_error(TOOL, "--%s %u@...: there are only %u ranks",
					o->kills[k].pause_ns != 0 ? "pause" : "kill",
					o->kills[k].rank, o->nproc);
	o->argv = argv + c.next;
}

/* A free TCP (or UDP) port on 127.0.0.1: bind port 0 and read what the kernel chose. Rank 0
 * binds it again with SO_REUSEADDR a moment later; the gap is the same race torchrun
 * accepts. */
static int free_port_type(uint16_t *port, int type)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0)
		rc = -errno;
	close(fd);
	*port = ntohs(a.sin_port);
	return rc;
}

static int free_port(uint16_t *port)
{
	return free_port_type(port, SOCK_STREAM);
}

/* Ranks that may restart cannot meet at rank 0's rendezvous again (it is over by then):
 * give every rank a fixed UDP port in KEEL_PEERS instead. Ports are picked one after the
 * other while the earlier ones are still held, so they differ. */
static int pick_peer_ports(void)
{
	int fds[KEEL_WORLD_MAX];
	size_t off = 0;
	int rc = 0;
	uint32_t opened = 0;

	for (uint32_t r = 0; r < job.o.nproc && rc == 0; r++) {
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t len = sizeof(a);
		fds[r] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fds[r] < 0)
			return -errno;
		opened++;
		if (bind(fds[r], (struct sockaddr *)&a, sizeof(a)) != 0 ||
		    getsockname(fds[r], (struct sockaddr *)&a, &len) != 0)
			rc = -errno;
		off += (size_t)snprintf(job.peers + off, sizeof(job.peers) - off, "%s127.0.0.1:%u",
					r ? "," : "", ntohs(a.sin_port));
		if (r == 0)
			job.peer_port0 = ntohs(a.sin_port);
	}
	for (uint32_t r = 0; r < opened; r++)
		close(fds[r]);
	return rc;
}

static uint32_t random_job_id(void)
{
	uint32_t id = 0;

	if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
		id = (uint32_t)getpid() * 2654435761u ^ (uint32_t)keel_posix_now_ns();
	return id != 0 ? id : 1;
}

static void remove_job_key(void)
{
	if (job.owner == 0 || getpid() != job.owner)
		return; /* nothing made, or a child that got here by mistake */
	unlink(job.key_file);
	rmdir(job.key_dir);
}

/* 32 bytes from the kernel's generator, or -errno: never a weaker key. */
static int random_key(uint8_t *key, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = getrandom(key + done, len - done, 0);

		if (n < 0 && errno != EINTR)
			return -errno;
		done += n > 0 ? (size_t)n : 0;
	}
	return 0;
}

/* A fresh key for this job, as 64 hex digits in a 0600 file in a new 0700 directory. */
static int make_job_key(void)
{
	const char *tmp = getenv("TMPDIR");
	uint8_t key[KEEL_AUTH_KEY_BYTES];
	char hex[2 * KEEL_AUTH_KEY_BYTES + 2];
	int fd, rc;

	if ((size_t)snprintf(job.key_dir, sizeof(job.key_dir), "%s/keel-run.XXXXXX",
			     tmp != NULL && *tmp != '\0' ? tmp : "/tmp") >= sizeof(job.key_dir)) {
		snprintf(job.key_dir, sizeof(job.key_dir), "$TMPDIR (too long a path)");
		return -ENAMETOOLONG;
	}
	if (mkdtemp(job.key_dir) == NULL) /* mode 0700 */
		return -errno;
	job.owner = getpid();
	atexit(remove_job_key);
	snprintf(job.key_file, sizeof(job.key_file), "%s/job.key", job.key_dir);
	rc = random_key(key, sizeof(key));
	for (size_t i = 0; rc == 0 && i < sizeof(key); i++)
		snprintf(hex + 2 * i, 3, "%02x", key[i]);
	hex[2 * KEEL_AUTH_KEY_BYTES] = '\n';
	fd = rc == 0
		 ? open(job.key_file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)
		 : -1;
	if (rc == 0 && fd < 0)
		rc = -errno;
	if (rc == 0 && write(fd, hex, sizeof(hex) - 1) != (ssize_t)sizeof(hex) - 1)
		rc = -EIO;
	if (fd >= 0)
		close(fd);
	explicit_bzero(key, sizeof(key));
	explicit_bzero(hex, sizeof(hex));
	return rc;
}

static void set_env_u32(const char *name, uint32_t v)
{
	char buf[16];

	snprintf(buf, sizeof(buf), "%u", v);
	if (setenv(name, buf, 1) != 0)
		_exit(127);
}

/* In the child: environment, signals, then exec. Never returns. */
static _Noreturn void child_exec(uint32_t rank, pid_t parent, const sigset_t *old_mask)
{
	int e;

	setpgid(0, 0);
	/* If keel-run dies without cleaning up (SIGKILL), take the rank down with it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0UL, 0UL, 0UL);
	if (getppid() != parent)
		_exit(127);
	set_env_u32("RANK", rank);
	set_env_u32("WORLD_SIZE", job.o.nproc);
	set_env_u32("LOCAL_RANK", rank);
	set_env_u32("LOCAL_WORLD_SIZE", job.o.nproc);
	set_env_u32("MASTER_PORT", job.master_port);
	set_env_u32("KEEL_JOB_ID", job.job_id);
	set_env_u32("KEEL_INCARNATION", job.ranks[rank].restarts + 1);
	if (job.ranks[rank].restarts > 0 && setenv("KEEL_REJOIN", "1", 1) != 0)
		_exit(127);
	if (job.peers[0] != '\0' && setenv("KEEL_PEERS", job.peers, 1) != 0)
		_exit(127);
	if (job.key_file[0] != '\0' && setenv("KEEL_JOB_KEY_FILE", job.key_file, 1) != 0)
		_exit(127);
	if (setenv("MASTER_ADDR", "127.0.0.1", 1) != 0)
		_exit(127);
	sigprocmask(SIG_SETMASK, old_mask, NULL);
	execvp(job.o.argv[0], job.o.argv);
	e = errno;
	fprintf(stderr, "keel-run: rank %u: cannot run '%s': %s\n", rank, job.o.argv[0],
		strerror(e));
	_exit(e == ENOENT ? 127 : 126);
}

static void signal_ranks(int sig)
{
	for (uint32_t r = 0; r < job.o.nproc; r++) {
		struct rank_slot *s = &job.ranks[r];
		if (s->state != RANK_RUNNING)
			continue;
		kill(-s->pid, sig);
		if (s->stopped) { /* --pause: a stopped process acts on SIGTERM only once resumed */
			kill(-s->pid, SIGCONT);
			s->stopped = false;
		}
	}
}

/* Begin stopping: `sig` now, SIGKILL after the grace period. */
static void stop_all(int sig)
{
	uint64_t now_ns = keel_posix_now_ns();

	signal_ranks(sig);
	if (!job.stopping)
		job.kill_ns = now_ns + job.o.grace_ns;
	job.stopping = true;
}

static int start_rank(uint32_t rank, const sigset_t *old_mask)
{
	struct rank_slot *s = &job.ranks[rank];
	pid_t parent = getpid();
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0)
		child_exec(rank, parent, old_mask);
	/* Both sides set the group, so kill(-pid) works whichever runs first. */
	setpgid(pid, pid);
	s->pid = pid;
	s->state = RANK_RUNNING;
	s->started_ns = keel_posix_now_ns();
	s->killed_by_us = false;
	s->stopped = false;
	s->restart_at_ns = UINT64_MAX;
	job.running++;
	return 0;
}

static void describe(uint32_t rank, int wstatus, char *buf, size_t len)
{
	if (WIFEXITED(wstatus))
		snprintf(buf, len, "rank %u exited with status %d", rank, WEXITSTATUS(wstatus));
	else if (WIFSIGNALED(wstatus))
		snprintf(buf, len, "rank %u killed by signal %d (%s)", rank, WTERMSIG(wstatus),
			 strsignal(WTERMSIG(wstatus)));
	else
		snprintf(buf, len, "rank %u ended with wait status 0x%x", rank, wstatus);
}

static void rank_ended(uint32_t rank, int wstatus)
{
	struct rank_slot *s = &job.ranks[rank];
	char what[128];

	s->state = RANK_DONE;
	s->wstatus = wstatus;
	s->ended_ns = keel_posix_now_ns();
	job.running--;
	if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
		return;
	bool excluded = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == EXIT_EXCLUDED;
	if ((WIFSIGNALED(wstatus) || excluded) && job.o.restart && !job.stopping) {
		describe(rank, wstatus, what, sizeof(what));
		fprintf(stderr, "keel-run: %s%s; restarting it (--restart)\n", what,
			excluded ? " (excluded from the view)" : "");
		s->restart_at_ns = s->ended_ns + RESTART_DELAY_NS;
		return;
	}
	if (excluded) {
		fprintf(stderr,
			"keel-run: rank %u was excluded from the view and left; the others "
			"go on without it\n",
			rank);
		return;
	}
	if (s->killed_by_us)
		return; /* --kill without --restart: meant to stay dead */
	if (job.first_fail < 0)
		job.first_fail = (int)rank;
	if (job.o.keep_going || job.stopping)
		return;
	describe(rank, wstatus, what, sizeof(what));
	fprintf(stderr, "keel-run: %s; stopping the other ranks\n", what);
	stop_all(SIGTERM);
}

static void reap(void)
{
	for (;;) {
		int wstatus;
		pid_t pid = waitpid(-1, &wstatus, WNOHANG);

		if (pid <= 0)
			return;
		for (uint32_t r = 0; r < job.o.nproc; r++) {
			if (job.ranks[r].state == RANK_RUNNING && job.ranks[r].pid == pid) {
				rank_ended(r, wstatus);
				break;
			}
		}
	}
}

static void on_signals(void)
{
	struct signalfd_siginfo si[16];
	ssize_t n = read(job.sfd, si, sizeof(si));

	for (ssize_t i = 0; i < n / (ssize_t)sizeof(si[0]); i++) {
		int sig = (int)si[i].ssi_signo;

		if (sig == SIGCHLD)
			continue; /* reap() below catches every child, coalesced or not */
		fprintf(stderr, "keel-run: got %s; passing it to the ranks\n", strsignal(sig));
		stop_all(sig);
	}
	reap();
}

static uint32_t pending_restarts(void)
{
	uint32_t n = 0;
	for (uint32_t r = 0; r < job.o.nproc && !job.stopping; r++)
		n += job.ranks[r].restart_at_ns != UINT64_MAX && job.ranks[r].state == RANK_DONE;
	return n;
}

/* --kill and --restart, when their time comes. */
static void run_kills_and_restarts(uint64_t now_ns, const sigset_t *old_mask)
{
	for (uint32_t k = 0; k < job.o.kill_count; k++) {
		struct kill_entry *e = &job.o.kills[k];
		struct rank_slot *s = &job.ranks[e->rank];
		if (e->done && !e->resumed && now_ns >= job.start_ns + e->at_ns + e->pause_ns) {
			e->resumed = true;
			if (s->state == RANK_RUNNING && s->stopped) {
				fprintf(stderr, "keel-run: resuming rank %u\n", e->rank);
				kill(-s->pid, SIGCONT);
				s->stopped = false;
			}
		}
		if (e->done || now_ns < job.start_ns + e->at_ns)
			continue;
		e->done = true;
		e->resumed = e->pause_ns == 0;
		if (s->state != RANK_RUNNING || job.stopping)
			continue;
		if (e->pause_ns != 0) {
			fprintf(stderr,
				"keel-run: pausing rank %u for %.3g s (--pause %u@%.3g:%.3g)\n",
				e->rank, (double)e->pause_ns / 1e9, e->rank, (double)e->at_ns / 1e9,
				(double)e->pause_ns / 1e9);
			s->stopped = true;
			kill(-s->pid, SIGSTOP);
			continue;
		}
		fprintf(stderr, "keel-run: killing rank %u (--kill %u@%.3g)\n", e->rank, e->rank,
			(double)e->at_ns / 1e9);
		s->killed_by_us = true;
		kill(-s->pid, SIGKILL);
	}
	for (uint32_t r = 0; r < job.o.nproc; r++) {
		struct rank_slot *s = &job.ranks[r];
		if (s->state != RANK_DONE || s->restart_at_ns > now_ns || job.stopping)
			continue;
		s->restarts++;
		int rc = start_rank(r, old_mask);
		if (rc != 0) {
			fprintf(stderr, "keel-run: cannot restart rank %u: %s\n", r, strerror(-rc));
			s->restart_at_ns = UINT64_MAX;
			job.start_failed = true;
		}
	}
}

static uint64_t next_kill_or_restart_ns(void)
{
	uint64_t next = UINT64_MAX;
	for (uint32_t k = 0; k < job.o.kill_count; k++) {
		const struct kill_entry *e = &job.o.kills[k];
		uint64_t at = job.start_ns + e->at_ns + (e->done ? e->pause_ns : 0);
		if ((!e->done || !e->resumed) && at < next)
			next = at;
	}
	for (uint32_t r = 0; r < job.o.nproc; r++)
		if (job.ranks[r].state == RANK_DONE && job.ranks[r].restart_at_ns < next)
			next = job.ranks[r].restart_at_ns;
	return next;
}

static void check_timers(void)
{
	uint64_t now_ns = keel_posix_now_ns();

	if (now_ns >= job.deadline_ns && !job.timed_out) {
		job.timed_out = true;
		fprintf(stderr, "keel-run: timeout after %.3g s; stopping all ranks\n",
			(double)job.o.timeout_ns / 1e9);
		stop_all(SIGTERM);
	}
	if (now_ns >= job.kill_ns) {
		signal_ranks(SIGKILL);
		job.kill_ns = UINT64_MAX;
	}
}

static int poll_ms(void)
{
	uint64_t next_ns = job.deadline_ns < job.kill_ns ? job.deadline_ns : job.kill_ns;
	uint64_t now_ns = keel_posix_now_ns(), ms;
	if (next_kill_or_restart_ns() < next_ns)
		next_ns = next_kill_or_restart_ns();

	if (next_ns == UINT64_MAX)
		return -1;
	if (next_ns <= now_ns)
		return 0;
	ms = (next_ns - now_ns + 999999u) / 1000000u;
	return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

static int exit_code(void)
{
	char what[128];
	int code = 0;

	for (uint32_t r = 0; r < job.o.nproc; r++) {
		if (job.ranks[r].state != RANK_DONE) {
			fprintf(stderr, "keel-run: rank %u was not started\n", r);
			continue;
		}
		describe(r, job.ranks[r].wstatus, what, sizeof(what));
		fprintf(stderr, "keel-run: %s\n", what);
	}
	if (job.timed_out)
		return EXIT_TIMEOUT;
	if (job.first_fail >= 0) {
		int w = job.ranks[job.first_fail].wstatus;

		code = WIFEXITED(w) ? WEXITSTATUS(w) : WIFSIGNALED(w) ? 128 + WTERMSIG(w) : 1;
	}
	return code == 0 && job.start_failed ? 1 : code;
}

static int setup(sigset_t *old_mask)
{
	sigset_t mask;
	int rc;

	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &mask, old_mask) != 0)
		return -errno;
	job.sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (job.sfd < 0)
		return -errno;
	job.master_port = job.o.master_port;
	if (job.master_port == 0) {
		rc = free_port(&job.master_port);
		if (rc != 0)
			return rc;
	}
	job.job_id = random_job_id();
	/* The same key for every life of every rank: the file lives as long as keel-run. */
	if (job.o.no_key) {
		unsetenv("KEEL_JOB_KEY_FILE");
		unsetenv("KEEL_JOB_KEY");
	} else if (!keel_env_is_set("KEEL_JOB_KEY_FILE") && !keel_env_is_set("KEEL_JOB_KEY") &&
		   keel_launch_auth_available()) {
		rc = make_job_key();
		if (rc != 0) {
			fprintf(stderr, "keel-run: cannot make the job's key in %s: %s\n",
				job.key_dir, strerror(-rc));
			return rc;
		}
	}
	job.start_ns = keel_posix_now_ns();
	if (job.o.restart || job.o.kill_count > 0) {
		rc = pick_peer_ports();
		if (rc != 0)
			return rc;
	}
	job.first_fail = -1;
	job.kill_ns = UINT64_MAX;
	job.deadline_ns = UINT64_MAX;
	if (job.o.timeout_ns != 0)
		job.deadline_ns = keel_posix_now_ns() + job.o.timeout_ns;
	return 0;
}

/* With KEEL_PEERS (--restart) the ranks leave their shared-memory region named, so that a
 * restarted rank finds it; once every rank has ended, nobody needs it. The ranks are on one
 * host: the region is named after rank 0 and its port. */
static void shm_cleanup(void)
{
	char name[KEEL_SHM_NAME_MAX];

	if (job.peers[0] != '\0') {
		keel_boot_shm_name(job.job_id, job.peer_port0, 0, name, sizeof(name));
		int rc = keel_shm_unlink(name);
		if (rc != 0 && rc != -ENOENT)
			fprintf(stderr, "keel-run: cannot remove the shared-memory region %s: %s\n",
				name, strerror(-rc));
	}
}

int main(int argc, char **argv)
{
	sigset_t old_mask;
	int rc;

	parse_args(argc, argv, &job.o);
	rc = setup(&old_mask);
	if (rc != 0) {
		fprintf(stderr, "keel-run: setup failed: %s\n", strerror(-rc));
		return 1;
	}
	for (uint32_t r = 0; r < job.o.nproc; r++) {
		rc = start_rank(r, &old_mask);
		if (rc != 0) {
			fprintf(stderr, "keel-run: cannot start rank %u: %s; stopping the others\n",
				r, strerror(-rc));
			job.start_failed = true;
			stop_all(SIGTERM);
			break;
		}
	}
	/* Bounded by the ranks: each turn either reaps one, handles a signal or a timer, and
	 * the kill timer ends every rank after the grace period once stopping. */
	while (job.running > 0 || pending_restarts() > 0) {
		struct pollfd p = {.fd = job.sfd, .events = POLLIN};
		int n = poll(&p, 1, poll_ms());

		if (n > 0)
			on_signals();
		check_timers();
		run_kills_and_restarts(keel_posix_now_ns(), &old_mask);
	}
	shm_cleanup();
	return exit_code();
}
