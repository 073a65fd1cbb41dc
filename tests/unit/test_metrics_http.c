/* The /metrics HTTP server (keel/metrics_http.h) against real loopback TCP clients, with the
 * clock in the test's hands: what each request gets (200, 404, 405, 400, 431, 503, HEAD), and
 * how it cuts the clients that would hold it: half a request past the deadline, a head longer
 * than its buffer, a reader too slow for the response, idle connections filling every slot
 * (the oldest goes), a client that resets before its answer (no SIGPIPE). No seed: nothing
 * here is random. tests/integ/metrics.sh runs the same server inside live ranks. */
/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "keel/metrics_http.h"

#define SEC 1000000000ull

/* The text the fake render writes, and how it answers. */
static const char *g_text = "# HELP t_total A test.\n# TYPE t_total counter\nt_total 7\n";
static size_t g_big; /* when set: a text of this many bytes instead */
static int g_render_rc;
static uint32_t g_renders;

static int fake_render(void *ctx, char *buf, size_t cap, size_t *len)
{
	(void)ctx;
	g_renders++;
	if (g_render_rc != 0) {
		*len = cap + 100;
		return g_render_rc;
	}
	size_t n = g_big != 0 ? g_big : strlen(g_text);
	*len = n;
	if (n > cap)
		return -ENOSPC;
	if (g_big != 0)
		memset(buf, 'x', n);
	else
		memcpy(buf, g_text, n);
	return 0;
}

struct fix {
	struct keel_metrics_http *h;
	void *mem;
	uint16_t port;
	uint64_t now;
};

static void srv_open(struct fix *f, uint32_t slots, size_t body_max)
{
	char err[256] = "";
	int fd = -1;
	memset(f, 0, sizeof(*f));
	g_big = 0;
	g_render_rc = 0;
	g_renders = 0;
	assert_int_equal(keel_metrics_http_listen("127.0.0.1:0", 0, &fd, err, sizeof(err)), 0);
	struct keel_metrics_http_config c;
	keel_metrics_http_config_default(&c);
	c.listen_fd = fd;
	c.slots = slots;
	c.request_max = 256;
	c.body_max = body_max;
	c.render = fake_render;
	size_t sz = keel_metrics_http_storage_size(&c);
	assert_true(sz > body_max);
	f->mem = calloc(1, sz);
	assert_non_null(f->mem);
	assert_int_equal(keel_metrics_http_init(&f->h, f->mem, sz, &c), 0);
	f->port = keel_metrics_http_port(f->h);
	assert_true(f->port != 0);
	f->now = 1000 * SEC;
}

static void srv_close(struct fix *f)
{
	struct keel_metrics_http_stats st;
	keel_metrics_http_stats_get(f->h, &st);
	keel_metrics_http_fini(f->h);
	free(f->mem);
	/* every connection ended in exactly one way */
	assert_int_equal(st.accepted, st.refused + st.ok + st.bad_request + st.not_found +
					  st.bad_method + st.too_long + st.unavailable +
					  st.closed_early + st.timed_out + st.evicted + st.failed +
					  st.used);
}

/* A connected client; rcvbuf != 0 shrinks its receive buffer (and so its window) first. */
static int client_rcvbuf(const struct fix *f, int rcvbuf)
{
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(c >= 0);
	if (rcvbuf != 0)
		assert_int_equal(setsockopt(c, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(f->port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	return c;
}

static int client(const struct fix *f)
{
	return client_rcvbuf(f, 0);
}

static void say(int c, const char *s, size_t n)
{
	assert_int_equal(send(c, s, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Service the server (at f->now) until the client has read everything up to EOF, or it
 * stays silent for ~1 s. Returns the bytes read into out (NUL-terminated); -1 when the
 * connection was not closed. */
static ssize_t drain(struct fix *f, int c, char *out, size_t cap)
{
	size_t got = 0;
	for (int quiet = 0; quiet < 1000;) {
		(void)keel_metrics_http_service(f->h, f->now);
		struct pollfd p = {.fd = c, .events = POLLIN};
		if (poll(&p, 1, 1) <= 0) {
			quiet++;
			continue;
		}
		ssize_t n = recv(c, out + got, cap - 1 - got, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno == ECONNRESET)) {
			out[got] = '\0';
			return (ssize_t)got;
		}
		if (n > 0) {
			got += (size_t)n;
			assert_true(got < cap);
		}
	}
	out[got] = '\0';
	return -1;
}

/* One request on a new connection; its whole response in out. */
static void ask(struct fix *f, const char *req, char *out, size_t cap)
{
	int c = client(f);
	say(c, req, strlen(req));
	assert_true(drain(f, c, out, cap) >= 0);
	close(c);
}

static bool is_open(struct fix *f, int c)
{
	(void)keel_metrics_http_service(f->h, f->now);
	struct pollfd p = {.fd = c, .events = POLLIN};
	return poll(&p, 1, 20) == 0; /* nothing: no EOF, no response */
}

static struct keel_metrics_http_stats stats(const struct fix *f)
{
	struct keel_metrics_http_stats st;
	keel_metrics_http_stats_get(f->h, &st);
	return st;
}

static void test_metrics_http_get_ok(void **state)
{
	(void)state;
	struct fix f;
	char r[4096];
	srv_open(&f, 4, 1024);
	ask(&f,
	    "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain;version=0.0.4;q=0.5,*/*\r\n"
	    "X-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n",
	    r, sizeof(r));
	assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
	assert_non_null(
	    strstr(r, "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
	char cl[64];
	snprintf(cl, sizeof(cl), "\r\nContent-Length: %zu\r\n", strlen(g_text));
	assert_non_null(strstr(r, cl));
	assert_non_null(strstr(r, "\r\nConnection: close\r\n"));
	const char *body = strstr(r, "\r\n\r\n");
	assert_non_null(body);
	assert_string_equal(body + 4, g_text);
	/* a query string, HTTP/1.0 and bare LF line ends are fine too */
	ask(&f, "GET /metrics?name[]=x HTTP/1.0\nUser-Agent: t\n\n", r, sizeof(r));
	assert_non_null(strstr(r, "200 OK"));
	/* HEAD: the same headers, no body */
	ask(&f, "HEAD /metrics HTTP/1.1\r\n\r\n", r, sizeof(r));
	assert_non_null(strstr(r, cl));
	assert_string_equal(strstr(r, "\r\n\r\n") + 4, "");
	assert_int_equal(stats(&f).ok, 3);
	assert_int_equal(g_renders, 3);
	srv_close(&f);
}

static void test_metrics_http_not_found(void **state)
{
	(void)state;
	struct fix f;
	char r[4096];
	srv_open(&f, 4, 1024);
	ask(&f, "GET / HTTP/1.1\r\n\r\n", r, sizeof(r));
	assert_non_null(strstr(r, "HTTP/1.1 404 Not Found\r\n"));
	ask(&f, "GET /metricsx HTTP/1.1\r\n\r\n", r, sizeof(r));
	assert_non_null(strstr(r, "HTTP/1.1 404 Not Found\r\n"));
	assert_int_equal(stats(&f).not_found, 2);
	assert_int_equal(g_renders, 0);
	srv_close(&f);
}

static void test_metrics_http_bad_method(void **state)
{
	(void)state;
	struct fix f;
	char r[4096];
	srv_open(&f, 4, 1024);
	ask(&f, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", r, sizeof(r));
	assert_non_null(strstr(r, "HTTP/1.1 405 Method Not Allowed\r\n"));
	assert_non_null(strstr(r, "\r\nAllow: GET, HEAD\r\n"));
	ask(&f, "DELETE /x HTTP/1.1\r\n\r\n", r, sizeof(r));
	assert_non_null(strstr(r, " 405 "));
	assert_int_equal(stats(&f).bad_method, 2);
	srv_close(&f);
}

static void test_metrics_http_bad_request(void **state)
{
	(void)state;
	static const char *const garbage[] = {
	    "\x16\x03\x01\x02\x01\x01\xfc\x03\x03\r\n\r\n", /* a TLS hello, and more */
	    "GET /metrics\r\n\r\n",			    /* HTTP/0.9 */
	    "GET /metrics HTTP/2.0\r\n\r\n",
	    "GET  /metrics HTTP/1.1\r\n\r\n",
	    "GET metrics HTTP/1.1\r\n\r\n",
	    "GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
	    "GET /metrics HTTP/1.1\r\n folded: header\r\n\r\n",
	    "GET /metrics HTTP/1.1\r\nX: a\x01b\r\n\r\n",
	    "\r\n\r\n",
	};
	struct fix f;
	char r[4096];
	srv_open(&f, 4, 1024);
	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		ask(&f, garbage[i], r, sizeof(r));
		if (strstr(r, "HTTP/1.1 400 Bad Request\r\n") == NULL) {
			print_error("request %zu got: %.80s\n", i, r);
			fail();
		}
	}
	assert_int_equal(stats(&f).bad_request, sizeof(garbage) / sizeof(garbage[0]));
	assert_int_equal(g_renders, 0);
	srv_close(&f);
}

/* More than request_max bytes without the end of a head: 431, and the connection closes. */
static void test_metrics_http_too_long(void **state)
{
	(void)state;
	struct fix f;
	char r[4096], big[1000];
	srv_open(&f, 4, 1024);
	memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
	memset(big + 26, 'a', sizeof(big) - 26);
	int c = client(&f);
	/* the server stops reading at 256 bytes: the rest may be refused by a reset */
	(void)send(c, big, sizeof(big), MSG_NOSIGNAL);
	assert_true(drain(&f, c, r, sizeof(r)) >= 0);
	assert_non_null(strstr(r, " 431 "));
	close(c);
	assert_int_equal(stats(&f).too_long, 1);
	assert_int_equal(stats(&f).used, 0);
	srv_close(&f);
}

/* Half a request, then nothing: open until the deadline, then 408 and closed. */
static void test_metrics_http_half_request_times_out(void **state)
{
	(void)state;
	struct fix f;
	char r[4096];
	srv_open(&f, 4, 1024);
	uint64_t t0 = f.now;
	int c = client(&f);
	say(c, "GET /met", 8);
	assert_true(is_open(&f, c));
	assert_int_equal(keel_metrics_http_next_ns(f.h),
			 t0 + KEEL_METRICS_HTTP_DEADLINE_NS_DEFAULT);
	f.now = t0 + KEEL_METRICS_HTTP_DEADLINE_NS_DEFAULT - 1;
	assert_true(is_open(&f, c));
	f.now = t0 + KEEL_METRICS_HTTP_DEADLINE_NS_DEFAULT;
	assert_true(drain(&f, c, r, sizeof(r)) >= 0);
	assert_non_null(strstr(r, " 408 "));
	close(c);
	/* an idle connection (nothing sent) is cut the same way */
	c = client(&f);
	assert_true(is_open(&f, c));
	f.now += KEEL_METRICS_HTTP_DEADLINE_NS_DEFAULT;
	assert_true(drain(&f, c, r, sizeof(r)) >= 0);
	close(c);
	assert_int_equal(stats(&f).timed_out, 2);
	assert_int_equal(keel_metrics_http_next_ns(f.h), UINT64_MAX);
	srv_close(&f);
}

/* Every slot taken by idle connections: a new one takes the oldest's slot, so a scraper
 * always gets in; the others stay. */
static void test_metrics_http_evicts_oldest_idle(void **state)
{
	(void)state;
	struct fix f;
	char r[4096];
	srv_open(&f, 3, 1024);
	int idle[3];
	for (int i = 0; i < 3; i++) {
		idle[i] = client(&f);
		assert_true(is_open(&f, idle[i]));
		f.now += 1000;
	}
	say(idle[2], "GET /me", 7); /* half a request is idle too, but newer */
	assert_int_equal(stats(&f).used, 3);
	int c = client(&f);
	say(c, "GET /metrics HTTP/1.1\r\n\r\n", 25);
	assert_true(drain(&f, c, r, sizeof(r)) >= 0);
	assert_non_null(strstr(r, "200 OK"));
	close(c);
	assert_int_equal(drain(&f, idle[0], r, sizeof(r)), 0); /* the oldest: closed, no answer */
	assert_true(is_open(&f, idle[1]));
	assert_true(is_open(&f, idle[2]));
	assert_int_equal(stats(&f).evicted, 1);
	/* many more idle ones: each takes the oldest's slot; the slots stay bounded */
	int more[20];
	for (int i = 0; i < 20; i++) {
		more[i] = client(&f);
		(void)keel_metrics_http_service(f.h, f.now);
	}
	assert_int_equal(stats(&f).evicted, 1 + 19); /* the first took the scraper's freed slot */
	assert_int_equal(stats(&f).used_max, 3);
	ask(&f, "GET /metrics HTTP/1.1\r\n\r\n", r, sizeof(r));
	assert_non_null(strstr(r, "200 OK"));
	for (int i = 0; i < 20; i++)
		close(more[i]);
	for (int i = 0; i < 3; i++)
		close(idle[i]);
	srv_close(&f);
}

/* The text does not fit the buffer: 503, saying so. */
static void test_metrics_http_unavailable(void **state)
{
	(void)state;
	struct fix f;
	char r[4096];
	srv_open(&f, 4, 16);
	ask(&f, "GET /metrics HTTP/1.1\r\n\r\n", r, sizeof(r));
	assert_non_null(strstr(r, "HTTP/1.1 503 Service Unavailable\r\n"));
	assert_non_null(strstr(r, "more than the 16"));
	g_render_rc = -EIO;
	ask(&f, "GET /metrics HTTP/1.1\r\n\r\n", r, sizeof(r));
	assert_non_null(strstr(r, " 503 "));
	assert_int_equal(stats(&f).unavailable, 2);
	srv_close(&f);
}

/* A reader that takes nothing holds the response buffer until its deadline, no longer; the
 * request queued behind it is answered then. */
static void test_metrics_http_slow_reader_cut(void **state)
{
	(void)state;
	struct fix f;
	const size_t big = 16u << 20; /* more than both kernels' socket buffers */
	char *r = malloc(big + 4096);
	assert_non_null(r);
	srv_open(&f, 4, big);
	g_big = big;
	uint64_t t0 = f.now;
	int slow = client_rcvbuf(&f, 4096);
	say(slow, "GET /metrics HTTP/1.1\r\n\r\n", 25);
	(void)keel_metrics_http_service(f.h, f.now); /* accepted, and partly written */
	assert_int_equal(stats(&f).used, 1);
	f.now = t0 + SEC;
	int next = client(&f);
	say(next, "GET /metrics HTTP/1.1\r\n\r\n", 25);
	for (int i = 0; i < 10; i++)
		(void)keel_metrics_http_service(f.h, f.now);
	assert_int_equal(g_renders, 1); /* the second waits for the buffer */
	assert_int_equal(stats(&f).used, 2);
	f.now = t0 + KEEL_METRICS_HTTP_DEADLINE_NS_DEFAULT;
	(void)keel_metrics_http_service(f.h, f.now); /* the slow one is cut */
	assert_int_equal(stats(&f).timed_out, 1);
	ssize_t n = drain(&f, next, r, big + 4096);
	assert_true(n > (ssize_t)big);
	assert_int_equal(stats(&f).ok, 1);
	close(next);
	close(slow);
	free(r);
	srv_close(&f);
}

/* A client that resets the connection before reading its answer: the send fails, the process
 * lives (MSG_NOSIGNAL), the slot is free again. */
static void test_metrics_http_reset_no_sigpipe(void **state)
{
	(void)state;
	struct fix f;
	srv_open(&f, 4, 64u << 20);
	g_big = 64u << 20;
	for (int i = 0; i < 3; i++) {
		int c = client(&f);
		say(c, "GET /metrics HTTP/1.1\r\n\r\n", 25);
		(void)keel_metrics_http_service(f.h, f.now); /* accepted, being written */
		struct linger lg = {.l_onoff = 1, .l_linger = 0};
		assert_int_equal(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
		close(c); /* RST */
		for (int k = 0; k < 50 && stats(&f).used != 0; k++) {
			usleep(1000);
			(void)keel_metrics_http_service(f.h, f.now);
		}
	}
	assert_int_equal(stats(&f).used, 0);
	assert_int_equal(stats(&f).ok, 0);
	srv_close(&f);
}

static void test_metrics_http_listen_errors(void **state)
{
	(void)state;
	char err[256];
	int fd = -1;
	static const char *const bad[] = {
	    "",
	    "9400",
	    "127.0.0.1",
	    "127.0.0.1:",
	    ":9400",
	    "127.0.0.1:65536",
	    "127.0.0.1:94x",
	    "::1:9400",
	    "[::1]9400",
	    "127.0.0.1:123456",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(keel_metrics_http_listen(bad[i], 0, &fd, err, sizeof(err)),
				 -EINVAL);
		assert_true(strlen(err) > 0);
	}
	assert_int_equal(keel_metrics_http_listen("127.0.0.1:65535", 1, &fd, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(keel_metrics_http_listen("127.0.0.1:0", 3, &fd, err, sizeof(err)),
			 -EINVAL);
	/* a port in use: the error says so */
	struct fix f;
	srv_open(&f, 1, 64);
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", f.port - 2u);
	assert_int_equal(keel_metrics_http_listen(addr, 2, &fd, err, sizeof(err)), -EADDRINUSE);
	assert_non_null(strstr(err, "in use"));
	srv_close(&f);
	/* a bad config: no storage size, no init */
	struct keel_metrics_http_config c;
	keel_metrics_http_config_default(&c);
	assert_int_equal(keel_metrics_http_storage_size(&c), 0); /* no socket, no render */
	c.listen_fd = 0;
	c.render = fake_render;
	c.body_max = 10;
	assert_true(keel_metrics_http_storage_size(&c) > 0);
	c.slots = 0;
	assert_int_equal(keel_metrics_http_storage_size(&c), 0);
	struct keel_metrics_http *h;
	char mem[64];
	assert_int_equal(keel_metrics_http_init(&h, mem, sizeof(mem), &c), -EINVAL);
	keel_metrics_http_fini(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_metrics_http_get_ok),
	    cmocka_unit_test(test_metrics_http_not_found),
	    cmocka_unit_test(test_metrics_http_bad_method),
	    cmocka_unit_test(test_metrics_http_bad_request),
	    cmocka_unit_test(test_metrics_http_too_long),
	    cmocka_unit_test(test_metrics_http_half_request_times_out),
	    cmocka_unit_test(test_metrics_http_evicts_oldest_idle),
	    cmocka_unit_test(test_metrics_http_unavailable),
	    cmocka_unit_test(test_metrics_http_slow_reader_cut),
	    cmocka_unit_test(test_metrics_http_reset_no_sigpipe),
	    cmocka_unit_test(test_metrics_http_listen_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
