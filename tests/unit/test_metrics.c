/* Metrics and trace events on a live 3-node cluster over loopback UDP with an injected clock:
 * histograms land in the right buckets, a killed node shows as a detection, a view change and
 * peer_up 0, the rendered text follows the Prometheus format line by line (names, labels,
 * cumulative buckets), a small buffer says how much it needs, and the trace ring keeps the
 * newest events. (promtool checks the text of a live job over HTTP: the integration tests.) */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <errno.h>

#include "cluster_int.h"

static uint64_t g_seed;

/* Every event of every node, by rank (the hook's ctx is the rank's ring). */
static struct keel_trace_ring g_rings[3];
static struct keel_event g_events[3][256];

static void on_event(void *ctx, const struct keel_event *ev)
{
	keel_trace_ring_push(ctx, ev);
}

static void hook_events(struct keel_config *cfg)
{
	cfg->on_event = on_event;
	cfg->on_event_ctx = &g_rings[cfg->rank];
}

static void test_histogram_buckets(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, NULL), 0);
	struct keel_node *n = c.node[0];
	/* a bound is inclusive (le): 1000 ns is in the first bucket, 1001 in the second */
	assert_int_equal(keel_metrics_observe(n, KEEL_HIST_CKPT_WRITE, 1000), 0);
	assert_int_equal(keel_metrics_observe(n, KEEL_HIST_CKPT_WRITE, 1001), 0);
	assert_int_equal(keel_metrics_observe(n, KEEL_HIST_CKPT_WRITE, 10000000000ull), 0);
	assert_int_equal(keel_metrics_observe(n, KEEL_HIST_CKPT_WRITE, 10000000001ull), 0);
	assert_int_equal(keel_metrics_observe(n, KEEL_HIST_CKPT_WRITE, 0), 0);
	struct keel_histogram h;
	assert_int_equal(keel_histogram_get(n, KEEL_HIST_CKPT_WRITE, &h), 0);
	assert_int_equal(h.count, 5);
	assert_int_equal(h.sum_ns, 1000 + 1001 + 10000000000ull + 10000000001ull);
	assert_int_equal(h.bucket[0], 2);
	assert_int_equal(h.bucket[1], 1);
	assert_int_equal(h.bucket[KEEL_HIST_BUCKETS - 1], 1);
	assert_int_equal(h.bucket[KEEL_HIST_BUCKETS], 1);
	assert_int_equal(keel_metrics_observe(n, KEEL_HIST_COUNT, 1), -EINVAL);
	assert_int_equal(keel_histogram_get(n, (enum keel_hist) - 1, &h), -EINVAL);
	assert_int_equal(keel_metrics_observe(NULL, KEEL_HIST_CKPT_WRITE, 1), -EINVAL);
	/* size classes: bounds inclusive, the last open */
	assert_int_equal(keel_size_class(0), 0);
	assert_int_equal(keel_size_class(4096), 0);
	assert_int_equal(keel_size_class(4097), 1);
	assert_int_equal(keel_size_class(16u << 20), 3);
	assert_int_equal(keel_size_class((16u << 20) + 1), 4);
	assert_int_equal(keel_size_class(UINT64_MAX), KEEL_SIZE_CLASSES - 1);
	cluster_fini(&c);
}

/* The value of the series whose line starts with `prefix` (name and labels, up to the space),
 * as text; fails the test when there is none. */
static const char *series_value(const char *text, const char *prefix)
{
	size_t pl = strlen(prefix);
	for (const char *line = text; *line != '\0';) {
		const char *end = strchr(line, '\n');
		assert_non_null(end);
		if ((size_t)(end - line) > pl && strncmp(line, prefix, pl) == 0 && line[pl] == ' ')
			return line + pl + 1;
		line = end + 1;
	}
	print_error("no series %s\n", prefix);
	fail();
	return NULL;
}

static uint64_t series_u64(const char *text, const char *prefix)
{
	return strtoull(series_value(text, prefix), NULL, 10);
}

/* Each line: a HELP or TYPE comment naming a family, or name{labels} value with a valid name,
 * well-formed quoted labels and a number; a family's TYPE comes before its series. */
static void check_format(const char *text)
{
	char family[128] = "";
	uint32_t lines = 0;
	for (const char *line = text; *line != '\0'; lines++) {
		const char *end = strchr(line, '\n');
		assert_non_null(end);
		if (strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0) {
			const char *name = line + 7, *sp = strchr(name, ' ');
			assert_true(sp != NULL && sp < end && sp - name < (long)sizeof(family));
			if (line[2] == 'T') {
				memcpy(family, name, (size_t)(sp - name));
				family[sp - name] = '\0';
				const char *type = sp + 1;
				size_t tl = (size_t)(end - type);
				assert_true((tl == 7 && strncmp(type, "counter", 7) == 0) ||
					    (tl == 5 && strncmp(type, "gauge", 5) == 0) ||
					    (tl == 9 && strncmp(type, "histogram", 9) == 0));
			}
		} else {
			const char *p = line;
			assert_true(isalpha((unsigned char)*p) || *p == '_');
			while (isalnum((unsigned char)*p) || *p == '_' || *p == ':')
				p++;
			/* the series belongs to the family declared last */
			size_t fl = strlen(family);
			assert_true(fl > 0 && strncmp(line, family, fl) == 0);
			assert_int_equal(*p, '{');
			p++;
			while (*p != '}') {
				while (isalnum((unsigned char)*p) || *p == '_')
					p++;
				assert_int_equal(*p++, '=');
				assert_int_equal(*p++, '"');
				while (*p != '"') {
					assert_true(*p != '\n' && p < end);
					p += *p == '\\' ? 2 : 1;
				}
				p++;
				if (*p == ',')
					p++;
			}
			assert_int_equal(p[1], ' ');
			char *num_end;
			if (strncmp(p + 2, "+Inf", 4) != 0) {
				(void)strtod(p + 2, &num_end);
				assert_ptr_equal(num_end, end);
			}
		}
		line = end + 1;
	}
	assert_true(lines > 100);
}

/* A histogram's buckets are cumulative and its +Inf bucket equals its count. */
static void check_buckets(const char *text, const char *name, const char *labels)
{
	char prefix[256];
	uint64_t prev = 0;
	snprintf(prefix, sizeof(prefix), "%s_bucket{%s,le=\"+Inf\"}", name, labels);
	uint64_t inf = series_u64(text, prefix);
	snprintf(prefix, sizeof(prefix), "%s_count{%s}", name, labels);
	assert_int_equal(series_u64(text, prefix), inf);
	/* walk the bucket lines in order */
	snprintf(prefix, sizeof(prefix), "%s_bucket{%s,le=\"", name, labels);
	uint32_t seen = 0;
	for (const char *at = strstr(text, prefix); at != NULL; at = strstr(at + 1, prefix)) {
		const char *v = strchr(at, ' ') + 1;
		uint64_t cum = strtoull(v, NULL, 10);
		assert_true(cum >= prev);
		prev = cum;
		seen++;
	}
	assert_int_equal(seen, KEEL_HIST_BUCKETS + 1);
	assert_int_equal(prev, inf);
}

static char g_text[1 << 20];

static void test_metrics_live_cluster(void **state)
{
	(void)state;
	for (uint32_t r = 0; r < 3; r++)
		assert_int_equal(keel_trace_ring_init(&g_rings[r], g_events[r], 256), 0);
	struct cluster c;
	assert_int_equal(cluster_init(&c, 3, NULL, g_seed, hook_events), 0);
	static float buf[3][100000];
	struct keel_op *ops[CLUSTER_MAX] = {NULL};
	int rc[CLUSTER_MAX];
	/* one small AllReduce and one of 400 000 bytes (the 1 MiB class) */
	const uint64_t counts[2] = {100, 100000};
	for (int k = 0; k < 2; k++) {
		for (uint32_t r = 0; r < 3; r++)
			assert_int_equal(keel_allreduce_start(c.node[r], buf[r], buf[r], counts[k],
							      KEEL_F32, KEEL_SUM, &ops[r]),
					 0);
		assert_int_equal(cluster_wait_ops(&c, ops, rc, 100000), 0);
		for (uint32_t r = 0; r < 3; r++)
			assert_int_equal(rc[r], 0);
	}
	for (int i = 0; i < 1000; i++) /* 10 ms: heartbeats measure round trips */
		cluster_round(&c);
	uint64_t killed_ns = c.now_ns;
	c.paused[2] = true;
	for (int i = 0; i < 3000; i++) /* 30 ms: suspected, and a view without it */
		cluster_round(&c);

	struct keel_view v;
	uint32_t members[3];
	assert_int_equal(keel_view_get(c.node[0], &v, members, 3), 2);
	assert_int_equal(v.epoch, 2);
	struct keel_histogram h;
	assert_int_equal(keel_histogram_get(c.node[0], KEEL_HIST_ALLREDUCE + 0, &h), 0);
	assert_int_equal(h.count, 1);
	assert_int_equal(keel_histogram_get(c.node[0], KEEL_HIST_ALLREDUCE + 2, &h), 0);
	assert_int_equal(h.count, 1);
	assert_int_equal(keel_histogram_get(c.node[0], KEEL_HIST_HEARTBEAT_RTT, &h), 0);
	assert_true(h.count > 5);
	/* detection: one observation, at least miss_limit intervals of silence, and no more
	 * than the detector's bound */
	assert_int_equal(keel_histogram_get(c.node[0], KEEL_HIST_DETECTION, &h), 0);
	assert_int_equal(h.count, 1);
	assert_true(h.sum_ns >= c.cfg[0].miss_limit * c.cfg[0].heartbeat_ns);
	assert_true(h.sum_ns <= keel_detect_bound_ns(&c.cfg[0]));
	assert_true(h.sum_ns <= c.now_ns - killed_ns + c.cfg[0].heartbeat_ns);
	assert_int_equal(keel_histogram_get(c.node[0], KEEL_HIST_VIEW_CHANGE, &h), 0);
	assert_int_equal(h.count, 1);
	assert_true(h.sum_ns > 0 && h.sum_ns < 20000000ull);

	/* trace events at rank 0: two collectives begun and ended (sizes, a known algorithm,
	 * status 0), the suspicion of rank 2, the first view and the view of epoch 2 */
	struct keel_event ev[256];
	uint32_t k = keel_trace_ring_take(&g_rings[0], ev, 256);
	uint32_t begins = 0, ends = 0, suspects = 0, views = 0;
	for (uint32_t i = 0; i < k; i++) {
		if (ev[i].kind == KEEL_EV_COLL_BEGIN)
			begins++;
		if (ev[i].kind == KEEL_EV_COLL_END) {
			assert_int_equal(ev[i].bytes, counts[ends] * 4);
			assert_int_equal(ev[i].status, 0);
			assert_true(ev[i].algo == KEEL_ALGO_RD || ev[i].algo == KEEL_ALGO_RING);
			assert_true(ev[i].dur_ns > 0);
			ends++;
		}
		if (ev[i].kind == KEEL_EV_SUSPECT) {
			assert_int_equal(ev[i].peer, 2);
			assert_true(ev[i].t_ns > killed_ns);
			suspects++;
		}
		if (ev[i].kind == KEEL_EV_VIEW && ev[i].epoch == 2) {
			assert_int_equal(ev[i].peer, 2); /* members */
			assert_true(ev[i].dur_ns > 0);
			views++;
		}
	}
	assert_int_equal(begins, 2);
	assert_int_equal(ends, 2);
	assert_int_equal(suspects, 1);
	assert_int_equal(views, 1);
	assert_int_equal(g_rings[0].lost, 0);

	/* the text: labels escaped, values as the node has them */
	size_t len = 0;
	const char *job = "tr\"ain\\1\n";
	assert_int_equal(keel_metrics_render(c.node[0], job, g_text, sizeof(g_text), &len), 0);
	assert_int_equal(strlen(g_text), len);
	check_format(g_text);
	const char *L = "{job=\"tr\\\"ain\\\\1\\n\",rank=\"0\"";
	char p[256];
	/* name, extra labels, value */
	static const struct {
		const char *name, *extra;
		uint64_t value;
	} want_series[] = {
	    {"keel_view_epoch", "", 2},
	    {"keel_members_alive", "", 2},
	    {"keel_peer_up", ",peer=\"2\"", 0},
	    {"keel_peer_up", ",peer=\"1\"", 1},
	    {"keel_suspicions_total", "", 1},
	    {"keel_detection_seconds_count", "", 1},
	    {"keel_allreduce_seconds_count", ",size_class=\"1MiB\"", 1},
	    {"keel_allreduce_seconds_count", ",size_class=\"larger\"", 0},
	    {"keel_datagrams_dropped_total", ",reason=\"crc\"", 0},
	};
	for (size_t i = 0; i < sizeof(want_series) / sizeof(want_series[0]); i++) {
		snprintf(p, sizeof(p), "%s%s%s}", want_series[i].name, L, want_series[i].extra);
		assert_int_equal(series_u64(g_text, p), want_series[i].value);
	}
	struct keel_counters kc;
	keel_counters_get(c.node[0], &kc);
	snprintf(p, sizeof(p), "keel_sent_bytes_total%s}", L);
	assert_int_equal(series_u64(g_text, p), kc.tx_bytes);
	assert_true(kc.tx_bytes > 400000 && kc.rx_bytes > 400000);
	/* the seconds are exact decimals of the nanoseconds */
	assert_int_equal(keel_histogram_get(c.node[0], KEEL_HIST_DETECTION, &h), 0);
	snprintf(p, sizeof(p), "keel_detection_seconds_sum%s}", L);
	char want[32];
	snprintf(want, sizeof(want), "%" PRIu64 ".%09" PRIu64, (uint64_t)(h.sum_ns / 1000000000ull),
		 (uint64_t)(h.sum_ns % 1000000000ull));
	while (want[strlen(want) - 1] == '0') /* trailing zeros dropped */
		want[strlen(want) - 1] = '\0';
	const char *got = series_value(g_text, p);
	assert_int_equal(strncmp(got, want, strlen(want)), 0);
	assert_int_equal(got[strlen(want)], '\n');
	check_buckets(g_text, "keel_detection_seconds", L + 1);
	char lc[160];
	snprintf(lc, sizeof(lc), "%s,size_class=\"4KiB\"", L + 1);
	check_buckets(g_text, "keel_allreduce_seconds", lc);
	cluster_fini(&c);
}

static void test_metrics_render_buffer_sizes(void **state)
{
	(void)state;
	struct cluster c;
	assert_int_equal(cluster_init(&c, 2, NULL, g_seed, NULL), 0);
	size_t need = 0, len = 0;
	/* a size query: no buffer */
	assert_int_equal(keel_metrics_render(c.node[0], "j", NULL, 0, &need), -ENOSPC);
	assert_true(need > 1000);
	static char small[64];
	memset(small, 'x', sizeof(small));
	assert_int_equal(keel_metrics_render(c.node[0], "j", small, 10, &len), -ENOSPC);
	assert_int_equal(len, need);
	assert_int_equal(small[10], 'x'); /* nothing written past cap */
	assert_int_equal(strncmp(small, "# HELP kee", 10), 0);
	/* exactly the text: fits, without the NUL */
	assert_int_equal(keel_metrics_render(c.node[0], "j", g_text, need, &len), 0);
	assert_int_equal(len, need);
	assert_int_equal(keel_metrics_render(c.node[0], "j", g_text, need + 1, &len), 0);
	assert_int_equal(strlen(g_text), need);
	assert_int_equal(keel_metrics_render(NULL, "j", g_text, need, &len), -EINVAL);
	assert_int_equal(keel_metrics_render(c.node[0], NULL, g_text, need, &len), -EINVAL);
	assert_int_equal(keel_metrics_render(c.node[0], "j", g_text, need, NULL), -EINVAL);
	assert_int_equal(keel_metrics_render(c.node[0], "j", NULL, 10, &len), -EINVAL);
	cluster_fini(&c);
}

static void test_trace_ring(void **state)
{
	(void)state;
	struct keel_trace_ring r;
	struct keel_event ev[4], out[8];
	assert_int_equal(keel_trace_ring_init(&r, ev, 3), -EINVAL);
	assert_int_equal(keel_trace_ring_init(&r, ev, 1), -EINVAL);
	assert_int_equal(keel_trace_ring_init(&r, NULL, 4), -EINVAL);
	assert_int_equal(keel_trace_ring_init(&r, ev, 4), 0);
	for (uint32_t i = 0; i < 6; i++) {
		struct keel_event e = {.t_ns = i + 1, .kind = KEEL_EV_SUSPECT};
		keel_trace_ring_push(&r, &e);
	}
	assert_int_equal(keel_trace_ring_count(&r), 4);
	assert_int_equal(r.lost, 2);
	assert_int_equal(keel_trace_ring_take(&r, out, 3), 3);
	assert_int_equal(out[0].t_ns, 3); /* the oldest two were overwritten */
	assert_int_equal(out[2].t_ns, 5);
	assert_int_equal(keel_trace_ring_take(&r, out, 8), 1);
	assert_int_equal(out[0].t_ns, 6);
	assert_int_equal(keel_trace_ring_take(&r, out, 8), 0);
	assert_string_equal(keel_event_kind_name(KEEL_EV_SUSPECT), "suspect");
	assert_string_equal(keel_event_kind_name(99), "unknown");
}

int main(void)
{
	g_seed = cluster_seed(1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_histogram_buckets),
	    cmocka_unit_test(test_metrics_live_cluster),
	    cmocka_unit_test(test_metrics_render_buffer_sizes),
	    cmocka_unit_test(test_trace_ring),
	};
	return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
