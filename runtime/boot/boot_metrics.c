/* KEEL_METRICS_ADDR: each rank serves /metrics (the node's, plus what the start-up library
 * sees: the router, the waiter, the HTTP server itself, the GPUs) from its own wait loop. It
 * allocates at start only, and never adds a thread or more than a bounded look per wake-up. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "assert_int.h"
#include "boot_int.h"
#include "boot_metrics.h"
#include "gpu_nvml.h"
#include "keel/boot.h"
#include "keel/env.h"
#include "keel/metrics_http.h"
#include "keel/transport_router.h"
#include "text_out.h"

/* How often the server is looked at (one epoll_wait, ~0.2 us here) from the waits:
 * - a blocking wait ended by its descriptor (the POSIX waiter's wake_fd): at once;
 * - with connections open (their deadlines, a request waiting for the buffer) or a rank that
 *   never blocks (KEEL_WAIT=busy): after every wait, at most every LOOK_NS, reading the clock;
 * - otherwise every LOOK_WAITS waits: a rank kept busy by its transport returns from its spin
 *   without blocking, so it is never woken by the descriptor, and must look now and then.
 * The common wait (no connection open, no scrape) then costs a counter: reading the clock after
 * every wait cost ~0.5 us per 8 B AllReduce of 2 ranks (docs/perf-history.md). */
#define LOOK_NS	   50000ull
#define LOOK_WAITS 64u
/* A busy-waiting rank never blocks, so the server's descriptor never ends its spin: its waits
 * are cut to this, so that an idle rank still answers a scrape soon. */
#define POLL_NS 10000000ull
/* Room for numbers to grow after the size was measured at start: any value is at most 27
 * characters (a u64, or seconds with 9 decimals, or a ratio with 6) and was at least 1. */
#define LINE_GROWTH_MAX 32u
#define BODY_SLACK	4096u
#define JOB_LABEL_MAX	128u

struct keel_boot_metrics {
	struct keel_boot *b;
	int listen_fd; /* until the server takes it */
	struct keel_metrics_http *srv;
	void *mem;
	struct keel_waiter inner;    /* the POSIX waiter */
	uint64_t look_ns;	     /* no look before this */
	uint32_t waits;		     /* since the last look */
	char addr[96];		     /* KEEL_METRICS_ADDR, for messages */
	uint64_t linger_ns;	     /* KEEL_METRICS_LINGER_MS: serve on after the program stops */
	char job_raw[JOB_LABEL_MAX]; /* the job label, for keel_metrics_render (it escapes) */
	char job[JOB_LABEL_MAX];     /* escaped, for the series added here */
	struct keel_nvml gpu;
	bool gpu_on;
};

/* ---- the text boot adds after keel_metrics_render's ---- */

/* The text so far, and what it reports on. */
struct out {
	struct text_out t;
	const struct keel_boot_metrics *m;
};

/* A percentage as a ratio: 45 is "0.45", 5 is "0.05", 50 is "0.5". */
static void put_ratio_pct(struct out *o, uint32_t pct)
{
	KEEL_ASSERT(pct <= 100);
	if (pct == 100 || pct == 0) {
		text_put(&o->t, pct == 0 ? "0" : "1", 1);
		return;
	}
	const char d[4] = {'0', '.', (char)('0' + pct / 10), (char)('0' + pct % 10)};
	text_put(&o->t, d, pct % 10 == 0 ? 3 : 4);
}

static void family(struct out *o, const char *name, const char *type, const char *help)
{
	text_puts(&o->t, "# HELP ");
	text_puts(&o->t, name);
	text_put(&o->t, " ", 1);
	text_puts(&o->t, help);
	text_puts(&o->t, "\n# TYPE ");
	text_puts(&o->t, name);
	text_put(&o->t, " ", 1);
	text_puts(&o->t, type);
	text_put(&o->t, "\n", 1);
}

/* name{job="..",rank="N"[,key="value"]} — the job label escaped at start. */
static void series(struct out *o, const char *name, const char *key, const char *value)
{
	text_puts(&o->t, name);
	text_puts(&o->t, "{job=\"");
	text_puts(&o->t, o->m->job);
	text_puts(&o->t, "\",rank=\"");
	text_u64(&o->t, o->m->b->launch.rank);
	text_put(&o->t, "\"", 1);
	if (key != NULL) {
		text_put(&o->t, ",", 1);
		text_puts(&o->t, key);
		text_puts(&o->t, "=\"");
		text_puts(&o->t, value);
		text_put(&o->t, "\"", 1);
	}
	text_puts(&o->t, "} ");
}

static void line_u64(struct out *o, const char *name, const char *key, const char *value,
		     uint64_t v)
{
	series(o, name, key, value);
	text_u64(&o->t, v);
	text_put(&o->t, "\n", 1);
}

static void one(struct out *o, const char *name, const char *type, const char *help, uint64_t v)
{
	family(o, name, type, help);
	line_u64(o, name, NULL, NULL, v);
}

static void render_waiter(struct out *o)
{
	const struct keel_posix_waiter *w = &o->m->b->waiter;
	one(o, "keel_waiter_waits_total", "counter", "Waits between polls.", w->waits);
	one(o, "keel_waiter_blocks_total", "counter", "Waits that blocked in the kernel.",
	    w->blocks);
	family(o, "keel_waiter_wakeups_total", "counter",
	       "Waits ended by input, early (a signal, a capped block), or late (past the "
	       "deadline).");
	line_u64(o, "keel_waiter_wakeups_total", "reason", "input", w->wakeups_input);
	line_u64(o, "keel_waiter_wakeups_total", "reason", "early", w->wakeups_early);
	line_u64(o, "keel_waiter_wakeups_total", "reason", "late", w->wakeups_late);
	family(o, "keel_waiter_oversleep_seconds_total", "counter",
	       "Time blocking waits ran past their deadline, summed (a sign of CPU contention).");
	series(o, "keel_waiter_oversleep_seconds_total", NULL, NULL);
	text_seconds(&o->t, w->oversleep_ns_sum);
	text_put(&o->t, "\n", 1);
	family(o, "keel_waiter_oversleep_seconds_max", "gauge",
	       "The longest a blocking wait ran past its deadline.");
	series(o, "keel_waiter_oversleep_seconds_max", NULL, NULL);
	text_seconds(&o->t, w->oversleep_ns_max);
	text_put(&o->t, "\n", 1);
}

static void render_router(struct out *o)
{
	struct keel_router_stats st;
	static const char *const routes[] = {"shm", "udp"}; /* boot.c's start_auto order */
	keel_router_stats_get(o->m->b->router, &st);
	one(o, "keel_transport_fallbacks_total", "counter",
	    "Peers whose traffic left a failed route (shared memory) for the next (UDP).",
	    st.fallbacks);
	one(o, "keel_transport_unroutable_datagrams_total", "counter",
	    "Datagrams dropped for a peer no route reaches.", st.tx_unroutable);
	family(o, "keel_transport_route_datagrams_sent_total", "counter",
	       "Datagrams each route accepted.");
	for (uint32_t r = 0; r < 2; r++)
		line_u64(o, "keel_transport_route_datagrams_sent_total", "route", routes[r],
			 st.tx_datagrams[r]);
	family(o, "keel_transport_route_datagrams_received_total", "counter",
	       "Datagrams received on each route.");
	for (uint32_t r = 0; r < 2; r++)
		line_u64(o, "keel_transport_route_datagrams_received_total", "route", routes[r],
			 st.rx_datagrams[r]);
}

static void render_http(struct out *o)
{
	struct keel_metrics_http_stats st = {0}; /* none yet when sizing at start */
	if (o->m->srv != NULL)
		keel_metrics_http_stats_get(o->m->srv, &st);
	one(o, "keel_metrics_http_connections_total", "counter",
	    "Connections accepted by this /metrics endpoint.", st.accepted);
	one(o, "keel_metrics_http_connections", "gauge", "Connections open now.", st.used);
	static const char *const codes[] = {"200", "400", "404", "405", "431", "503"};
	const uint64_t by_code[] = {st.ok,	   st.bad_request, st.not_found,
				    st.bad_method, st.too_long,	   st.unavailable};
	family(o, "keel_metrics_http_responses_total", "counter",
	       "Responses sent whole, by status code.");
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		line_u64(o, "keel_metrics_http_responses_total", "code", codes[i], by_code[i]);
	static const char *const why[] = {"client_closed", "timeout", "evicted", "refused",
					  "error"};
	const uint64_t by_why[] = {st.closed_early, st.timed_out, st.evicted, st.refused,
				   st.failed};
	family(o, "keel_metrics_http_connections_dropped_total", "counter",
	       "Connections closed without a response: the client left, was too slow, was the "
	       "oldest idle one when the slots were full, found no slot, or hit a socket error.");
	for (size_t i = 0; i < sizeof(why) / sizeof(why[0]); i++)
		line_u64(o, "keel_metrics_http_connections_dropped_total", "reason", why[i],
			 by_why[i]);
}

/* Per GPU; a GPU NVML cannot read now is left out of this scrape. */
static void render_gpus(struct out *o)
{
	static const char *const fams[][3] = {
	    {"keel_gpu_utilization_ratio", "gauge",
	     "Fraction of the driver's last sample period a kernel ran on the GPU (NVML)."},
	    {"keel_gpu_memory_used_bytes", "gauge", "GPU memory in use (NVML)."},
	    {"keel_gpu_memory_total_bytes", "gauge", "GPU memory in all (NVML)."},
	};
	struct keel_nvml_reading r[KEEL_NVML_GPUS_MAX];
	bool ok[KEEL_NVML_GPUS_MAX];
	const struct keel_nvml *g = &o->m->gpu;
	for (uint32_t i = 0; i < g->count; i++)
		ok[i] = keel_nvml_read(g, i, &r[i]);
	for (uint32_t f = 0; f < 3; f++) {
		family(o, fams[f][0], fams[f][1], fams[f][2]);
		for (uint32_t i = 0; i < g->count; i++) {
			char gpu[FMT_U64_MAX + 1];
			if (!ok[i])
				continue;
			gpu[fmt_u64(gpu, i)] = '\0';
			series(o, fams[f][0], "gpu", gpu);
			if (f == 0)
				put_ratio_pct(o, r[i].utilization_pct);
			else
				text_u64(&o->t,
					 f == 1 ? r[i].memory_used_bytes : r[i].memory_total_bytes);
			text_put(&o->t, "\n", 1);
		}
	}
}

/* The server's render callback: the node's text, then boot's. */
static int render(void *ctx, char *buf, size_t cap, size_t *len)
{
	const struct keel_boot_metrics *m = ctx;
	size_t core = 0;
	int rc = keel_metrics_render(m->b->node, m->job_raw, buf, cap, &core);
	if (rc != 0 && rc != -ENOSPC)
		return rc;
	struct out o = {.t = {.buf = buf, .cap = cap, .len = core}, .m = m};
	render_waiter(&o);
	if (m->b->router != NULL)
		render_router(&o);
	render_http(&o);
	if (m->gpu_on)
		render_gpus(&o);
	*len = o.t.len;
	return o.t.len <= cap ? 0 : -ENOSPC;
}

/* ---- start, wait, stop ---- */

/* The job label: KEEL_METRICS_JOB, else the job id; as given, and escaped as the text format
 * asks (backslash, double quote, newline). */
static int job_label(struct keel_boot_metrics *m, char *err, size_t err_len)
{
	const char *v = NULL;
	int set = keel_env_text("KEEL_METRICS_JOB", &v, err, err_len); /* at most 63 bytes */
	if (set < 0)
		return set;
	if (set == 0)
		snprintf(m->job_raw, sizeof(m->job_raw), "%u", m->b->launch.job_id);
	else if (strlen(v) <= JOB_LABEL_MAX / 2 - 1) /* escaped, it still fits */
		memcpy(m->job_raw, v, strlen(v) + 1);
	else /* the table allows more than the label holds */
		return keel_env_reject("KEEL_METRICS_JOB", err, err_len);
	size_t n = 0;
	for (const char *p = m->job_raw; *p != '\0'; p++) {
		const char *e = *p == '\\'   ? "\\\\"
				: *p == '"'  ? "\\\""
				: *p == '\n' ? "\\n"
					     : NULL;
		size_t el = e != NULL ? 2 : 1;
		KEEL_ASSERT(n + el < sizeof(m->job));
		memcpy(m->job + n, e != NULL ? e : p, el);
		n += el;
	}
	m->job[n] = '\0';
	return 0;
}

int keel_boot_metrics_open(struct keel_boot *b, char *err, size_t err_len)
{
	const char *addr = NULL;
	uint64_t linger_ms = 0;
	int set = keel_env_text("KEEL_METRICS_ADDR", &addr, err, err_len);
	if (set <= 0)
		return set;
	if (keel_env_uint("KEEL_METRICS_LINGER_MS", &linger_ms, err, err_len) < 0)
		return -EINVAL;
	struct keel_boot_metrics *m = calloc(1, sizeof(*m));
	if (m == NULL)
		return -ENOMEM;
	m->b = b;
	m->listen_fd = -1;
	snprintf(m->addr, sizeof(m->addr), "%s", addr);
	b->metrics = m;
	m->linger_ns = linger_ms * 1000000ull;
	char why[200];
	int rc =
	    keel_metrics_http_listen(addr, b->launch.local_rank, &m->listen_fd, why, sizeof(why));
	if (rc != 0)
		return keel_fail(err, err_len, rc,
				 "KEEL_METRICS_ADDR=%.64s: %s (rank %u serves on PORT + its local "
				 "rank, %u)",
				 addr, why, b->launch.rank, b->launch.local_rank);
	return 0;
}

static void look(struct keel_boot_metrics *m, uint64_t now_ns)
{
	m->waits = 0;
	if (m->srv == NULL || now_ns < m->look_ns)
		return;
	m->look_ns = now_ns + LOOK_NS;
	(void)keel_metrics_http_service(m->srv, now_ns);
}

/* The wait's deadline, cut by the server's (a connection to cut, a request waiting for the
 * buffer) and, for a rank that never blocks, by POLL_NS. */
static uint64_t deadline_with_server(struct keel_boot_metrics *m, uint64_t deadline_ns)
{
	uint64_t next = keel_metrics_http_next_ns(m->srv);
	if (m->b->waiter.mode == KEEL_WAIT_BUSY) {
		uint64_t cap = m->inner.now_ns(m->inner.ctx) + POLL_NS;
		next = next < cap ? next : cap;
	}
	next = next > m->look_ns ? next : m->look_ns;
	return next < deadline_ns ? next : deadline_ns;
}

/* A pass of a poll loop, waiting or not: every LOOK_WAITS passes, a look at the server (a
 * rank whose collectives end without a wait, their results reported early and the data
 * already in, would otherwise answer no scrape). */
static void pass(struct keel_boot_metrics *m)
{
	if (++m->waits >= LOOK_WAITS)
		look(m, m->inner.now_ns(m->inner.ctx));
}

/* keel_allreduce and its kind read the clock before each poll: a pass. */
static uint64_t wrapped_now_ns(void *ctx)
{
	struct keel_boot_metrics *m = ctx;
	uint64_t now = m->inner.now_ns(m->inner.ctx);
	if (++m->waits >= LOOK_WAITS)
		look(m, now);
	return now;
}

void keel_boot_serve(struct keel_boot *b)
{
	if (b->metrics != NULL)
		pass(b->metrics);
}

/* The POSIX waiter (its blocking also ended by the server's descriptor), then a look at the
 * server when one is due (LOOK_NS above). */
static void wait_and_serve(void *ctx, uint64_t deadline_ns)
{
	struct keel_boot_metrics *m = ctx;
	const struct keel_posix_waiter *w = &m->b->waiter;
	if (m->srv == NULL) {
		m->inner.wait(m->inner.ctx, deadline_ns);
		return;
	}
	bool timed = w->mode == KEEL_WAIT_BUSY || keel_metrics_http_next_ns(m->srv) != UINT64_MAX;
	if (timed)
		deadline_ns = deadline_with_server(m, deadline_ns);
	uint64_t woken = w->wakeups_wake_fd;
	m->inner.wait(m->inner.ctx, deadline_ns);
	if (timed || w->wakeups_wake_fd != woken || ++m->waits >= LOOK_WAITS)
		look(m, m->inner.now_ns(m->inner.ctx));
}

void keel_boot_metrics_wrap(struct keel_boot *b)
{
	struct keel_boot_metrics *m = b->metrics;
	if (m == NULL)
		return;
	m->inner = b->cfg.waiter;
	b->cfg.waiter =
	    (struct keel_waiter){.now_ns = wrapped_now_ns, .wait = wait_and_serve, .ctx = m};
}

/* Once per process: why a job on a host without NVIDIA's driver has no keel_gpu_ series. */
static void gpus_open(struct keel_boot_metrics *m)
{
	static atomic_flag said = ATOMIC_FLAG_INIT;
	char why[256];
	m->gpu_on = keel_nvml_open(&m->gpu, why, sizeof(why)) == 0;
	if (!m->gpu_on && !atomic_flag_test_and_set(&said))
		fprintf(stderr, "keel: metrics without GPU series: %s\n", why);
}

/* The response buffer: the text as it is now, with room for every value to grow to its
 * widest (the series themselves are fixed once the node runs), and for GPUs that NVML
 * could not read at start. */
static int body_size(struct keel_boot_metrics *m, size_t *body_max)
{
	size_t len = 0;
	int rc = render(m, NULL, 0, &len);
	if (rc != -ENOSPC && rc != 0)
		return rc;
	size_t cap = len + BODY_SLACK; /* a GPU's reading may widen in between */
	char *text = malloc(cap);
	if (text == NULL)
		return -ENOMEM;
	rc = render(m, text, cap, &len);
	size_t lines = 0;
	for (size_t i = 0; rc == 0 && i < len; i++)
		lines += text[i] == '\n';
	free(text);
	*body_max = len + lines * LINE_GROWTH_MAX + m->gpu.count * 3 * 256 + BODY_SLACK;
	return rc;
}

int keel_boot_metrics_start(struct keel_boot *b, char *err, size_t err_len)
{
	struct keel_boot_metrics *m = b->metrics;
	if (m == NULL)
		return 0;
	KEEL_ASSERT(b->node != NULL && m->listen_fd >= 0);
	int rc = job_label(m, err, err_len);
	if (rc != 0)
		return rc;
	gpus_open(m);
	struct keel_metrics_http_config c;
	keel_metrics_http_config_default(&c);
	c.listen_fd = m->listen_fd;
	c.render = render;
	c.render_ctx = m;
	rc = body_size(m, &c.body_max);
	size_t sz = rc == 0 ? keel_metrics_http_storage_size(&c) : 0;
	m->mem = sz != 0 ? calloc(1, sz) : NULL;
	if (m->mem == NULL)
		return keel_fail(err, err_len, rc != 0 ? rc : -ENOMEM,
				 "KEEL_METRICS_ADDR=%.64s: no memory for the metrics text",
				 m->addr);
	rc = keel_metrics_http_init(&m->srv, m->mem, sz, &c);
	if (rc != 0)
		return keel_fail(err, err_len, rc, "KEEL_METRICS_ADDR=%.64s: %s", m->addr,
				 keel_strerror(rc));
	m->listen_fd = -1; /* the server's now */
	/* A blocked rank wakes for a scrape; a spinning one looks when its spin ends. */
	keel_posix_waiter_set_wake_fd(&b->waiter, keel_metrics_http_fd(m->srv));
	return 0;
}

void keel_boot_metrics_poll(struct keel_boot *b)
{
	if (b->metrics != NULL)
		look(b->metrics, keel_posix_now_ns());
}

void keel_boot_metrics_linger(struct keel_boot *b)
{
	struct keel_boot_metrics *m = b->metrics;
	if (m == NULL || m->srv == NULL || m->linger_ns == 0 || b->node == NULL)
		return;
	uint64_t end = keel_posix_now_ns() + m->linger_ns;
	for (uint64_t now; (now = keel_posix_now_ns()) < end;) {
		uint64_t next;
		int rc = keel_poll(b->node, now, &next);
		if (rc != 0 && rc != KEEL_ENOQUORUM && rc != KEEL_EEXCLUDED)
			break; /* the transport failed: nothing more to report */
		keel_boot_serve(b);
		b->cfg.waiter.wait(b->cfg.waiter.ctx, next < end ? next : end);
	}
}

void keel_boot_metrics_stop(struct keel_boot *b)
{
	struct keel_boot_metrics *m = b->metrics;
	if (m == NULL)
		return;
	keel_metrics_http_fini(m->srv); /* closes the listening socket too */
	if (m->srv == NULL && m->listen_fd >= 0)
		close(m->listen_fd);
	/* the waiter keeps no closed descriptor: a later wait would poll a reused number */
	keel_posix_waiter_set_wake_fd(&b->waiter, -1);
	if (b->cfg.waiter.ctx == m)
		b->cfg.waiter = m->inner;
	if (m->gpu_on)
		keel_nvml_close(&m->gpu);
	free(m->mem);
	free(m);
	b->metrics = NULL;
}
