/* KEEL_TRACE=path: the node's trace events (keel/trace.h), kept in a ring and written as
 * Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and chrome://tracing open. One file
 * per rank ("%r" in the path becomes the rank; without it ".RANK" is appended when the job has
 * more than one rank). Times are microseconds since the Unix epoch, from the monotonic clock
 * plus an offset read once at start, so files from several ranks and hosts line up on one
 * timeline (hosts as well as their clocks agree, e.g. NTP). The file is the JSON Array Format:
 * written as events come, closed with "]" at keel_boot_stop; a rank killed mid-run leaves it
 * without the "]", which the format allows and Perfetto reads.
 * The ring is written out when it is three-quarters full, from the event hook (a write of a
 * few hundred kilobytes at most), and at the end; events are lost only if one hook call
 * overflows it, and then counted in the file's last record. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "boot_trace.h"
#include "fmt_int.h"
#include "keel/boot.h"
#include "keel/env.h"

#define TRACE_RING_EVENTS 4096u /* ~200 KB */

struct boot_trace {
	struct keel_trace_ring ring;
	struct keel_event ev[TRACE_RING_EVENTS];
	int fd;
	uint32_t rank;
	int64_t real_minus_mono_ns;
	uint64_t written;
	bool io_error; /* said once; events are then dropped */
	char path[4096];
	/* NVTX ranges of collectives, by op id (trace_nvtx.c); unused without NVTX */
	struct boot_nvtx nvtx;
};

static int64_t clock_offset_ns(void)
{
	struct timespec r, m;
	clock_gettime(CLOCK_REALTIME, &r);
	clock_gettime(CLOCK_MONOTONIC, &m);
	return ((int64_t)r.tv_sec - (int64_t)m.tv_sec) * 1000000000ll +
	       ((int64_t)r.tv_nsec - (int64_t)m.tv_nsec);
}

static void write_all(struct boot_trace *t, const char *s, size_t n)
{
	while (n > 0 && !t->io_error) {
		ssize_t w = write(t->fd, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			fprintf(stderr,
				"keel: rank %u: KEEL_TRACE %s: write failed: %s; tracing stops\n",
				t->rank, t->path, strerror(w < 0 ? errno : EIO));
			t->io_error = true;
			return;
		}
		s += w;
		n -= (size_t)w;
	}
}

/* Appending to a line by hand: a collective's end is written for every operation, and
 * snprintf made it ~13 000 instructions (callgrind); this is a few hundred. */
struct line {
	char *p, *end;
};

static void add(struct line *l, const char *s)
{
	while (*s != '\0' && l->p < l->end)
		*l->p++ = *s++;
}

static void add_u64(struct line *l, uint64_t v)
{
	char d[FMT_U64_MAX];
	unsigned n = fmt_u64(d, v);
	for (unsigned i = 0; i < n && l->p < l->end; i++)
		*l->p++ = d[i];
}

/* ns as microseconds with three decimals */
static void add_us(struct line *l, uint64_t ns)
{
	add_u64(l, ns / 1000);
	char frac[5] = {'.', (char)('0' + ns % 1000 / 100), (char)('0' + ns % 100 / 10),
			(char)('0' + ns % 10), '\0'};
	add(l, frac);
}

/* Microseconds since the epoch, from the node's monotonic ns. */
static void add_ts(struct line *l, const struct boot_trace *t, uint64_t mono_ns)
{
	int64_t real = (int64_t)mono_ns + t->real_minus_mono_ns;
	add_us(l, real < 0 ? 0 : (uint64_t)real);
}

enum { TID_COLL = 1, TID_MEMBERSHIP = 2, TID_CKPT = 3 };

static const char *algo_name(uint32_t a)
{
	switch (a) {
	case KEEL_ALGO_RING:
		return "ring";
	case KEEL_ALGO_RD:
		return "recursive doubling";
	case KEEL_ALGO_HIER:
		return "hierarchical";
	default:
		return "none";
	}
}

static int event_line(const struct boot_trace *t, const char *name, const char *cat, const char *ph,
		      int tid, uint64_t start, uint64_t dur, const char *args, char *o, size_t cap);

/* A collective's args: bytes, algorithm, restarts, status, op id, epoch. */
static void coll_args(const struct keel_event *e, char *args, size_t cap)
{
	struct line a = {.p = args, .end = args + cap - 1};
	add(&a, "\"bytes\":");
	add_u64(&a, e->bytes);
	add(&a, ",\"algo\":\"");
	add(&a, algo_name(e->algo));
	add(&a, "\",\"restarts\":");
	add_u64(&a, e->restarts);
	add(&a, ",\"status\":\"");
	add(&a, e->status == 0 ? "ok" : keel_strerror(e->status));
	add(&a, "\",\"op\":");
	add_u64(&a, e->op);
	add(&a, ",\"epoch\":");
	add_u64(&a, e->epoch);
	*a.p = '\0';
}

/* One event as a JSON object (with a leading comma after the first); 0 when it shows nothing
 * (a collective's first begin: its end carries the whole span). */
static int event_json(const struct boot_trace *t, const struct keel_event *e, char *o, size_t cap)
{
	char name[96], args[256];
	const char *ph = "i", *cat = "membership";
	int tid = TID_MEMBERSHIP;
	uint64_t start = e->t_ns, dur = e->dur_ns;
	args[0] = '\0';
	switch (e->kind) {
	case KEEL_EV_COLL_BEGIN:
		if (e->restarts == 0)
			return 0;
		snprintf(name, sizeof(name), "restart %u of op %u", e->restarts, e->op);
		cat = "collective";
		tid = TID_COLL;
		break;
	case KEEL_EV_COLL_END:
		ph = "X";
		cat = "collective";
		tid = TID_COLL;
		memcpy(name, e->peer == UINT32_MAX ? "allreduce" : "broadcast", 10);
		coll_args(e, args, sizeof(args));
		break;
	case KEEL_EV_SUSPECT:
		snprintf(name, sizeof(name), "suspect rank %u", e->peer);
		snprintf(args, sizeof(args), "\"silent_us\":%" PRIu64 ",\"epoch\":%u",
			 e->dur_ns / 1000, e->epoch);
		break;
	case KEEL_EV_VIEW_ROUND:
		snprintf(name, sizeof(name), "view round %u", e->op);
		break;
	case KEEL_EV_VIEW:
		/* the span from this node's first suspicion to the view, when it had one */
		ph = dur != 0 ? "X" : "i";
		start = e->t_ns - dur;
		snprintf(name, sizeof(name), "view %u (%u members)", e->epoch, e->peer);
		break;
	case KEEL_EV_CKPT_WRITE:
	case KEEL_EV_CKPT_RESTORE:
		ph = dur != 0 ? "X" : "i";
		cat = "checkpoint";
		tid = TID_CKPT;
		snprintf(name, sizeof(name), "%s", keel_event_kind_name(e->kind));
		snprintf(args, sizeof(args), "\"bytes\":%" PRIu64, e->bytes);
		break;
	case KEEL_EV_FALLBACK:
		snprintf(name, sizeof(name), "transport fallback, rank %u", e->peer);
		break;
	default:
		return 0;
	}
	return event_line(t, name, cat, ph, tid, start, dur, args, o, cap);
}

/* The event's JSON object on one line (with a leading comma after the first); 0 if it did
 * not fit. */
static int event_line(const struct boot_trace *t, const char *name, const char *cat, const char *ph,
		      int tid, uint64_t start, uint64_t dur, const char *args, char *o, size_t cap)
{
	struct line l = {.p = o, .end = o + cap - 1};
	add(&l, t->written == 0 ? "{\"name\":\"" : ",{\"name\":\"");
	add(&l, name);
	add(&l, "\",\"cat\":\"");
	add(&l, cat);
	add(&l, "\",\"ph\":\"");
	add(&l, ph);
	add(&l, "\",\"ts\":");
	add_ts(&l, t, start);
	if (ph[0] == 'X') {
		add(&l, ",\"dur\":");
		add_us(&l, dur);
	}
	add(&l, ",\"pid\":");
	add_u64(&l, t->rank);
	add(&l, ",\"tid\":");
	add_u64(&l, (uint64_t)tid);
	add(&l, ph[0] == 'i' ? ",\"s\":\"t\",\"args\":{" : ",\"args\":{");
	add(&l, args);
	add(&l, "}}\n");
	return l.p < l.end ? (int)(l.p - o) : 0; /* a full line may have been cut: dropped */
}

static void flush(struct boot_trace *t)
{
	char chunk[16384];
	size_t used = 0;
	struct keel_event e;
	while (keel_trace_ring_take(&t->ring, &e, 1) == 1) {
		char line[768];
		int n = event_json(t, &e, line, sizeof(line));
		if (n == 0)
			continue;
		if (used + (size_t)n > sizeof(chunk)) {
			write_all(t, chunk, used);
			used = 0;
		}
		memcpy(chunk + used, line, (size_t)n);
		used += (size_t)n;
		t->written++;
	}
	write_all(t, chunk, used);
}

void boot_trace_event(void *ctx, const struct keel_event *ev)
{
	struct boot_trace *t = ctx;
	boot_nvtx_event(&t->nvtx, ev);
	/* a collective's first begin shows nothing in the file (its end has the span) */
	if (t->fd < 0 || t->io_error || (ev->kind == KEEL_EV_COLL_BEGIN && ev->restarts == 0))
		return;
	keel_trace_ring_push(&t->ring, ev);
	if (keel_trace_ring_count(&t->ring) >= TRACE_RING_EVENTS / 4 * 3)
		flush(t);
}

/* The file name for this rank: "%r" replaced, else ".RANK" appended when world > 1. */
static int trace_path(const char *spec, uint32_t rank, uint32_t world, char *out, size_t cap)
{
	const char *r = strstr(spec, "%r");
	int n = r != NULL   ? snprintf(out, cap, "%.*s%u%s", (int)(r - spec), spec, rank, r + 2)
		: world > 1 ? snprintf(out, cap, "%s.%u", spec, rank)
			    : snprintf(out, cap, "%s", spec);
	return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

int boot_trace_start(struct boot_trace **out, uint32_t rank, uint32_t world, char *err,
		     size_t err_len)
{
	*out = NULL;
	const char *spec = NULL;
	int set = keel_env_text("KEEL_TRACE", &spec, err, err_len);
	bool file = set == 1;
	if (set < 0 || (!file && !boot_nvtx_wanted()))
		return set < 0 ? set : 0;
	struct boot_trace *t = calloc(1, sizeof(*t));
	if (t == NULL)
		return -ENOMEM;
	t->fd = -1;
	t->rank = rank;
	t->real_minus_mono_ns = clock_offset_ns();
	boot_nvtx_init(&t->nvtx);
	int rc = keel_trace_ring_init(&t->ring, t->ev, TRACE_RING_EVENTS);
	KEEL_ASSERT(rc == 0);
	if (file) {
		if (trace_path(spec, rank, world, t->path, sizeof(t->path)) != 0) {
			free(t);
			return keel_fail(err, err_len, -ENAMETOOLONG,
					 "KEEL_TRACE=%s: path too long", spec);
		}
		t->fd = open(t->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (t->fd < 0) {
			rc = keel_fail(err, err_len, -errno, "KEEL_TRACE=%s: cannot create %s: %s",
				       spec, t->path, strerror(errno));
			free(t);
			return rc;
		}
		char head[256];
		int n = snprintf(head, sizeof(head),
				 "[{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":0,"
				 "\"args\":{\"name\":\"keel rank %u\"}}\n",
				 rank, rank);
		write_all(t, head, (size_t)n);
		static const char *const threads[] = {"", "collectives", "membership",
						      "checkpoints"};
		for (int i = TID_COLL; i <= TID_CKPT; i++) {
			n = snprintf(
			    head, sizeof(head),
			    ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%d,"
			    "\"args\":{\"name\":\"%s\"}}\n",
			    rank, i, threads[i]);
			write_all(t, head, (size_t)n);
		}
		t->written = 1; /* the metadata: later events take a leading comma */
	}
	*out = t;
	return 0;
}

void boot_trace_stop(struct boot_trace *t)
{
	if (t == NULL)
		return;
	if (t->fd >= 0) {
		flush(t);
		char tail[160];
		int n = snprintf(tail, sizeof(tail),
				 ",{\"name\":\"keel trace end\",\"ph\":\"M\",\"pid\":%u,\"tid\":0,"
				 "\"args\":{\"events_lost\":%" PRIu64 "}}\n]\n",
				 t->rank, t->ring.lost);
		write_all(t, tail, (size_t)n);
		close(t->fd);
	}
	boot_nvtx_fini(&t->nvtx);
	free(t);
}
