/* /metrics over HTTP, serviced from the caller's loop (keel/metrics_http.h): one epoll
 * descriptor over a listening socket and a fixed array of connection slots, in caller memory.
 * It must never block, allocate, or let a client hold the caller's loop or its slots for long. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "assert_int.h"
#include "keel/metrics_http.h"

/* Room before the body for the status line and headers, written once the body's length is
 * known: the response then goes out in one contiguous send. */
#define HEAD_RESERVE 256u
/* epoll data of the listening socket; a connection's is its generation << 32 | its slot. */
#define LISTEN_TAG UINT64_MAX
#define SLOT_NONE  UINT32_MAX
/* accept failing for want of descriptors (EMFILE...) leaves the listening socket readable:
 * stop watching it this long rather than wake the caller's loop over and over. */
#define ACCEPT_PAUSE_NS 100000000ull

_Static_assert(KEEL_METRICS_HTTP_BODY_MAX + HEAD_RESERVE < INT32_MAX, "SO_SNDBUF is an int");

enum slot_state { SLOT_FREE = 0, SLOT_READING, SLOT_QUEUED, SLOT_WRITING };

struct slot {
	int fd;
	enum slot_state state;
	uint32_t gen; /* bumped on each open: a stale event never reaches the next user */
	uint32_t got; /* request bytes read */
	uint64_t seq; /* READING: when it opened (eviction order); QUEUED: when it asked */
	uint64_t deadline_ns;
	bool head_only; /* HEAD: the headers of a GET, no body */
	size_t sent;	/* WRITING: response bytes sent */
	char *req;	/* request_max bytes */
};

struct keel_metrics_http {
	struct keel_metrics_http_config cfg;
	int epfd;
	uint16_t port;
	struct slot *slots;
	char *resp;	 /* HEAD_RESERVE + body_max + 1 bytes */
	uint32_t writer; /* the slot sending from resp, or SLOT_NONE */
	const char *out; /* the writer's response: out_len bytes within resp */
	size_t out_len;
	uint64_t seq;
	uint64_t accept_resume_ns; /* 0: the listening socket is watched */
	struct keel_metrics_http_stats st;
};

static size_t align8(size_t n)
{
	return (n + 7u) & ~(size_t)7u;
}

void keel_metrics_http_config_default(struct keel_metrics_http_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	memset(cfg, 0, sizeof(*cfg));
	cfg->listen_fd = -1;
	cfg->slots = KEEL_METRICS_HTTP_SLOTS_DEFAULT;
	cfg->request_max = KEEL_METRICS_HTTP_REQUEST_DEFAULT;
	cfg->deadline_ns = KEEL_METRICS_HTTP_DEADLINE_NS_DEFAULT;
}

/* ---- listening ---- */

/* "HOST:PORT" or "[V6]:PORT" into host and port; 0 or -EINVAL with a message. */
static int parse_addr(const char *addr, char *host, size_t host_len, uint32_t *port, char *err,
		      size_t err_len)
{
	const char *colon, *h = addr;
	size_t hl;
	if (addr[0] == '[') {
		const char *close = strchr(addr, ']');
		if (close == NULL || close[1] != ':')
			goto bad;
		h = addr + 1;
		hl = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(addr, ':');
		if (colon == NULL)
			goto bad;
		hl = (size_t)(colon - addr);
		if (memchr(addr, ':', hl) != NULL) {
			snprintf(err, err_len, "an IPv6 address goes in brackets, e.g. [::1]:9400");
			return -EINVAL;
		}
	}
	const char *p = colon + 1;
	size_t digits = strspn(p, "0123456789");
	if (hl == 0 || hl >= host_len || digits == 0 || digits > 5 || p[digits] != '\0')
		goto bad;
	*port = 0;
	for (size_t i = 0; i < digits; i++)
		*port = *port * 10 + (uint32_t)(p[i] - '0');
	if (*port > 65535)
		goto bad;
	memcpy(host, h, hl);
	host[hl] = '\0';
	return 0;
bad:
	snprintf(err, err_len, "expected HOST:PORT with PORT 0..65535, e.g. 127.0.0.1:9400");
	return -EINVAL;
}

/* A socket bound to ai and listening; -errno with a message naming host:port. */
static int open_listener(const struct addrinfo *ai, const char *host, uint32_t port, int *fd,
			 char *err, size_t err_len)
{
	int s = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0) {
		int rc = -errno;
		snprintf(err, err_len, "%s port %u: socket: %s", host, port, keel_strerror(rc));
		return rc;
	}
	int one = 1;
	(void)setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)); /* best effort */
	if (bind(s, ai->ai_addr, ai->ai_addrlen) != 0 || listen(s, SOMAXCONN) != 0) {
		int rc = -errno;
		close(s);
		if (rc == -EADDRINUSE)
			snprintf(err, err_len,
				 "%s port %u is in use (another process listens there)", host,
				 port);
		else if (rc == -EADDRNOTAVAIL)
			snprintf(err, err_len, "%s is not an address of this host", host);
		else
			snprintf(err, err_len, "%s port %u: %s", host, port, keel_strerror(rc));
		return rc;
	}
	*fd = s;
	return 0;
}

int keel_metrics_http_listen(const char *addr, uint32_t port_offset, int *fd, char *err,
			     size_t err_len)
{
	char host[256], service[8];
	uint32_t port;
	if (addr == NULL || fd == NULL || *addr == '\0') {
		snprintf(err, err_len, "no address: expected HOST:PORT, e.g. 127.0.0.1:9400");
		return -EINVAL;
	}
	int rc = parse_addr(addr, host, sizeof(host), &port, err, err_len);
	if (rc != 0)
		return rc;
	if ((port == 0 && port_offset != 0) || port_offset > 65535 - port) {
		snprintf(err, err_len, "port %u + %u is past 65535 (or 0 with an offset)", port,
			 port_offset);
		return -EINVAL;
	}
	port += port_offset;
	snprintf(service, sizeof(service), "%u", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	int grc = getaddrinfo(host, service, &hints, &ai);
	if (grc != 0 || ai == NULL) {
		snprintf(err, err_len, "cannot resolve %s: %s", host, gai_strerror(grc));
		return -ENOENT;
	}
	rc = open_listener(ai, host, port, fd, err, err_len);
	freeaddrinfo(ai);
	return rc;
}

/* ---- the server's memory ---- */

static bool config_ok(const struct keel_metrics_http_config *c)
{
	return c != NULL && c->listen_fd >= 0 && c->slots >= 1 &&
	       c->slots <= KEEL_METRICS_HTTP_SLOTS_MAX &&
	       c->request_max >= KEEL_METRICS_HTTP_REQUEST_MIN &&
	       c->request_max <= KEEL_METRICS_HTTP_REQUEST_MAX && c->body_max >= 1 &&
	       c->body_max <= KEEL_METRICS_HTTP_BODY_MAX && c->deadline_ns > 0 && c->render != NULL;
}

size_t keel_metrics_http_storage_size(const struct keel_metrics_http_config *cfg)
{
	if (!config_ok(cfg))
		return 0;
	return align8(sizeof(struct keel_metrics_http)) + align8(cfg->slots * sizeof(struct slot)) +
	       cfg->slots * align8(cfg->request_max) + HEAD_RESERVE + cfg->body_max + 1;
}

int keel_metrics_http_init(struct keel_metrics_http **out, void *mem, size_t mem_len,
			   const struct keel_metrics_http_config *cfg)
{
	size_t need = keel_metrics_http_storage_size(cfg);
	if (out == NULL || mem == NULL || need == 0 || mem_len < need || ((uintptr_t)mem & 7u))
		return -EINVAL;
	memset(mem, 0, need);
	struct keel_metrics_http *h = mem;
	char *p = (char *)mem + align8(sizeof(*h));
	h->cfg = *cfg;
	h->slots = (struct slot *)p;
	p += align8(cfg->slots * sizeof(struct slot));
	for (uint32_t i = 0; i < cfg->slots; i++) {
		h->slots[i].fd = -1;
		h->slots[i].req = p;
		p += align8(cfg->request_max);
	}
	h->resp = p;
	h->writer = SLOT_NONE;
	/* the caller's socket may be blocking: accept must never wait */
	int fl = fcntl(cfg->listen_fd, F_GETFL);
	if (fl < 0 || fcntl(cfg->listen_fd, F_SETFL, fl | O_NONBLOCK) != 0)
		return -errno;
	h->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (h->epfd < 0)
		return -errno;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = LISTEN_TAG};
	if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, cfg->listen_fd, &ev) != 0) {
		int rc = -errno;
		close(h->epfd);
		return rc;
	}
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	if (getsockname(cfg->listen_fd, (struct sockaddr *)&sa, &sl) == 0)
		h->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
							 : ((struct sockaddr_in *)&sa)->sin_port);
	*out = h;
	return 0;
}

int keel_metrics_http_fd(const struct keel_metrics_http *h)
{
	KEEL_ASSERT(h != NULL);
	return h->epfd;
}

uint16_t keel_metrics_http_port(const struct keel_metrics_http *h)
{
	KEEL_ASSERT(h != NULL);
	return h->port;
}

void keel_metrics_http_stats_get(const struct keel_metrics_http *h,
				 struct keel_metrics_http_stats *out)
{
	KEEL_ASSERT(h != NULL && out != NULL);
	*out = h->st;
}

/* ---- connections ---- */

static void slot_close(struct keel_metrics_http *h, struct slot *s, uint64_t *why)
{
	KEEL_ASSERT(s->state != SLOT_FREE && s->fd >= 0);
	/* removed by hand: a forked child holding the socket would keep it registered */
	(void)epoll_ctl(h->epfd, EPOLL_CTL_DEL, s->fd, NULL);
	close(s->fd);
	if (h->writer == (uint32_t)(s - h->slots))
		h->writer = SLOT_NONE;
	s->fd = -1;
	s->state = SLOT_FREE;
	KEEL_ASSERT(h->st.used > 0);
	h->st.used--;
	if (why != NULL)
		(*why)++;
}

static void watch(struct keel_metrics_http *h, struct slot *s, uint32_t events)
{
	struct epoll_event ev = {.events = events,
				 .data.u64 = (uint64_t)s->gen << 32 | (uint64_t)(s - h->slots)};
	(void)epoll_ctl(h->epfd, EPOLL_CTL_MOD, s->fd, &ev); /* fails only on a closed fd */
}

static const char *reason_of(int code)
{
	switch (code) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 431:
		return "Request Header Fields Too Large";
	default:
		return "Service Unavailable";
	}
}

/* A short error response in one send: a client that cannot take a few hundred bytes at once is
 * not worth waiting for. True when it went out whole. */
static bool send_small(struct slot *s, int code, const char *body)
{
	char msg[512];
	int n = snprintf(msg, sizeof(msg),
			 "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
			 "Content-Length: %zu\r\n%sConnection: close\r\n\r\n%s",
			 code, reason_of(code), strlen(body),
			 code == 405 ? "Allow: GET, HEAD\r\n" : "", body);
	KEEL_ASSERT(n > 0 && (size_t)n < sizeof(msg));
	return send(s->fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n;
}

/* send_small, then close; `counter` counts it when it went out whole, else it failed. */
static void answer_close(struct keel_metrics_http *h, struct slot *s, int code, const char *body,
			 uint64_t *counter)
{
	slot_close(h, s, send_small(s, code, body) ? counter : &h->st.failed);
}

/* tchar of RFC 9110: the characters of a method or a header name. */
static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* The header lines from p up to the empty line that ends the head: "name: value" each, no
 * control characters but tab, lines ending in CRLF or LF. */
static bool headers_ok(const unsigned char *p, const unsigned char *end)
{
	while (p < end) {
		const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			return false;
		const unsigned char *le = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
		if (le == p)
			return true; /* the empty line */
		const unsigned char *q = p;
		while (q < le && is_tchar(*q))
			q++;
		if (q == p || q == le || *q != ':')
			return false;
		for (; q < le; q++)
			if ((*q < 0x20 && *q != '\t') || *q == 0x7f)
				return false;
		p = nl + 1;
	}
	return false;
}

/* The status a request head (r, n bytes, through its empty line) gets: 200 for GET or HEAD of
 * /metrics (with or without a query), 404 for another path, 405 for another method, 400 for
 * anything that is not an HTTP/1.x request in origin form. */
static int classify(const char *req, size_t n, bool *head_only)
{
	const unsigned char *r = (const unsigned char *)req;
	const unsigned char *nl = memchr(r, '\n', n);
	KEEL_ASSERT(nl != NULL); /* the head ends with an empty line */
	size_t line = (size_t)(nl - r), i = 0;
	if (line > 0 && r[line - 1] == '\r')
		line--;
	while (i < line && is_tchar(r[i]))
		i++;
	size_t method_len = i;
	if (method_len == 0 || i >= line || r[i] != ' ')
		return 400;
	size_t t0 = ++i;
	while (i < line && r[i] > ' ' && r[i] < 0x7f)
		i++;
	size_t target_len = i - t0;
	if (target_len == 0 || r[t0] != '/' || i >= line || r[i] != ' ')
		return 400;
	i++;
	if (line - i != 8 || memcmp(r + i, "HTTP/1.", 7) != 0 ||
	    (r[i + 7] != '0' && r[i + 7] != '1'))
		return 400;
	if (!headers_ok(nl + 1, r + n))
		return 400;
	bool get = method_len == 3 && memcmp(r, "GET", 3) == 0;
	*head_only = method_len == 4 && memcmp(r, "HEAD", 4) == 0;
	if (!get && !*head_only)
		return 405;
	bool metrics = target_len >= 8 && memcmp(r + t0, "/metrics", 8) == 0 &&
		       (target_len == 8 || r[t0 + 8] == '?');
	return metrics ? 200 : 404;
}

/* Where the head ends (just past its empty line) within the first got bytes, or 0. */
static size_t head_end(const char *r, size_t got)
{
	for (size_t i = 0; i + 1 < got; i++) {
		if (r[i] != '\n')
			continue;
		if (r[i + 1] == '\n')
			return i + 2;
		if (i + 2 < got && r[i + 1] == '\r' && r[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

/* What came in on a reading connection: one recv, then the request if its head is whole. */
static void on_readable(struct keel_metrics_http *h, struct slot *s)
{
	KEEL_ASSERT(s->state == SLOT_READING);
	ssize_t n = recv(s->fd, s->req + s->got, h->cfg.request_max - s->got, MSG_DONTWAIT);
	if (n == 0) {
		slot_close(h, s, &h->st.closed_early);
		return;
	}
	if (n < 0) {
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			slot_close(h, s, &h->st.failed);
		return;
	}
	s->got += (uint32_t)n;
	size_t end = head_end(s->req, s->got);
	if (end == 0) {
		if (s->got == h->cfg.request_max)
			answer_close(h, s, 431, "request head too long\n", &h->st.too_long);
		return;
	}
	int code = classify(s->req, end, &s->head_only);
	if (code == 200) {
		s->state = SLOT_QUEUED; /* until the response buffer is free */
		s->seq = ++h->seq;
		watch(h, s, 0); /* further bytes are ignored; hang-ups and errors still come */
	} else if (code == 404) {
		answer_close(h, s, 404, "not found: this server serves /metrics\n",
			     &h->st.not_found);
	} else if (code == 405) {
		answer_close(h, s, 405, "method not allowed: use GET\n", &h->st.bad_method);
	} else {
		answer_close(h, s, 400, "bad request: expected an HTTP/1.x request head\n",
			     &h->st.bad_request);
	}
}

static void write_some(struct keel_metrics_http *h, struct slot *s)
{
	KEEL_ASSERT(s->state == SLOT_WRITING && h->writer == (uint32_t)(s - h->slots));
	ssize_t n =
	    send(s->fd, h->out + s->sent, h->out_len - s->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n > 0)
		s->sent += (size_t)n;
	if (s->sent == h->out_len)
		slot_close(h, s, &h->st.ok);
	else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		slot_close(h, s, &h->st.failed);
}

/* Render into the response buffer for the oldest queued request and start sending it. */
static void respond(struct keel_metrics_http *h, struct slot *s)
{
	KEEL_ASSERT(h->writer == SLOT_NONE && s->state == SLOT_QUEUED);
	char *body = h->resp + HEAD_RESERVE;
	size_t len = 0;
	int rc = h->cfg.render(h->cfg.render_ctx, body, h->cfg.body_max, &len);
	if (rc != 0 || len > h->cfg.body_max) {
		char why[200];
		if (rc == -ENOSPC || (rc == 0 && len > h->cfg.body_max))
			snprintf(why, sizeof(why),
				 "metrics unavailable: the text takes %zu bytes, more than the %zu "
				 "this server set aside at start\n",
				 len, h->cfg.body_max);
		else
			snprintf(why, sizeof(why), "metrics unavailable: %s\n", keel_strerror(rc));
		answer_close(h, s, 503, why, &h->st.unavailable);
		return;
	}
	char head[HEAD_RESERVE];
	int hl = snprintf(head, sizeof(head),
			  "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; "
			  "charset=utf-8\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
			  len);
	KEEL_ASSERT(hl > 0 && (size_t)hl < sizeof(head));
	memcpy(body - hl, head, (size_t)hl);
	h->out = body - hl;
	h->out_len = (size_t)hl + (s->head_only ? 0 : len);
	h->writer = (uint32_t)(s - h->slots);
	s->state = SLOT_WRITING;
	s->sent = 0;
	watch(h, s, EPOLLOUT);
	write_some(h, s);
}

/* The slot a new connection takes: a free one, else the oldest still reading (idle or half a
 * request: a scraper's request comes whole at once), else none. */
static struct slot *slot_for_new(struct keel_metrics_http *h)
{
	struct slot *oldest = NULL;
	for (uint32_t i = 0; i < h->cfg.slots; i++) {
		struct slot *s = &h->slots[i];
		if (s->state == SLOT_FREE)
			return s;
		if (s->state == SLOT_READING && (oldest == NULL || s->seq < oldest->seq))
			oldest = s;
	}
	if (oldest != NULL)
		slot_close(h, oldest, &h->st.evicted);
	return oldest;
}

static void open_slot(struct keel_metrics_http *h, struct slot *s, int fd, uint64_t now_ns)
{
	KEEL_ASSERT(s->state == SLOT_FREE);
	/* room for a whole response in the kernel: one send, even to a client slow to read */
	int sndbuf = (int)(HEAD_RESERVE + h->cfg.body_max);
	/* the kernel caps it (net.core.wmem_max): a longer response goes out over several calls */
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	s->fd = fd;
	s->gen++;
	s->state = SLOT_READING;
	s->got = 0;
	s->seq = ++h->seq;
	s->deadline_ns = now_ns + h->cfg.deadline_ns;
	s->head_only = false;
	h->st.accepted++;
	if (++h->st.used > h->st.used_max)
		h->st.used_max = h->st.used;
	struct epoll_event ev = {.events = EPOLLIN,
				 .data.u64 = (uint64_t)s->gen << 32 | (uint64_t)(s - h->slots)};
	if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		slot_close(h, s, &h->st.failed);
		return;
	}
	on_readable(h, s); /* the request often came with the connection */
}

static uint32_t accept_some(struct keel_metrics_http *h, uint64_t now_ns)
{
	uint32_t done = 0;
	for (uint32_t k = 0; k < KEEL_METRICS_HTTP_ACCEPTS_PER_CALL; k++) {
		int fd = accept4(h->cfg.listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == ECONNABORTED || errno == EINTR)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				struct epoll_event ev = {.events = 0, .data.u64 = LISTEN_TAG};
				(void)epoll_ctl(h->epfd, EPOLL_CTL_MOD, h->cfg.listen_fd, &ev);
				h->accept_resume_ns = now_ns + ACCEPT_PAUSE_NS;
			}
			break; /* EAGAIN: none left */
		}
		done++;
		struct slot *s = slot_for_new(h);
		if (s == NULL) {
			h->st.accepted++;
			h->st.refused++;
			close(fd);
			continue;
		}
		open_slot(h, s, fd, now_ns);
	}
	return done;
}

static void on_event(struct keel_metrics_http *h, uint64_t tag, uint32_t events)
{
	uint32_t i = (uint32_t)tag;
	if (i >= h->cfg.slots)
		return;
	struct slot *s = &h->slots[i];
	if (s->state == SLOT_FREE || s->gen != (uint32_t)(tag >> 32))
		return; /* closed earlier in this call */
	if (s->state == SLOT_READING)
		on_readable(h, s);
	else if (s->state == SLOT_WRITING)
		write_some(h, s);
	else if (events & (EPOLLERR | EPOLLHUP))
		slot_close(h, s, &h->st.failed); /* queued, and the client is gone */
}

/* Cut every connection past its deadline; a reader hears 408 if its socket takes it. */
static void expire(struct keel_metrics_http *h, uint64_t now_ns)
{
	for (uint32_t i = 0; i < h->cfg.slots; i++) {
		struct slot *s = &h->slots[i];
		if (s->state == SLOT_FREE || now_ns < s->deadline_ns)
			continue;
		if (s->state == SLOT_READING)
			(void)send_small(s, 408, "request timeout\n"); /* best effort */
		slot_close(h, s, &h->st.timed_out);
	}
}

static struct slot *oldest_queued(struct keel_metrics_http *h)
{
	struct slot *q = NULL;
	for (uint32_t i = 0; i < h->cfg.slots; i++) {
		struct slot *s = &h->slots[i];
		if (s->state == SLOT_QUEUED && (q == NULL || s->seq < q->seq))
			q = s;
	}
	return q;
}

uint64_t keel_metrics_http_next_ns(const struct keel_metrics_http *h)
{
	KEEL_ASSERT(h != NULL);
	uint64_t next = h->accept_resume_ns != 0 ? h->accept_resume_ns : UINT64_MAX;
	if (h->st.used == 0)
		return next; /* the common case, on every wait of the caller's loop: no scan */
	for (uint32_t i = 0; i < h->cfg.slots; i++) {
		const struct slot *s = &h->slots[i];
		if (s->state == SLOT_QUEUED && h->writer == SLOT_NONE)
			return 0;
		if (s->state != SLOT_FREE && s->deadline_ns < next)
			next = s->deadline_ns;
	}
	return next;
}

uint32_t keel_metrics_http_service(struct keel_metrics_http *h, uint64_t now_ns)
{
	KEEL_ASSERT(h != NULL);
	struct epoll_event ev[KEEL_METRICS_HTTP_EVENTS_PER_CALL];
	int n = epoll_wait(h->epfd, ev, KEEL_METRICS_HTTP_EVENTS_PER_CALL, 0);
	bool listener = false;
	uint32_t done = 0;
	for (int i = 0; i < n; i++) {
		if (ev[i].data.u64 == LISTEN_TAG) {
			listener = true;
			continue;
		}
		on_event(h, ev[i].data.u64, ev[i].events);
		done++;
	}
	if (h->accept_resume_ns != 0 && now_ns >= h->accept_resume_ns) {
		struct epoll_event lev = {.events = EPOLLIN, .data.u64 = LISTEN_TAG};
		(void)epoll_ctl(h->epfd, EPOLL_CTL_MOD, h->cfg.listen_fd, &lev);
		h->accept_resume_ns = 0;
		listener = true;
	}
	if (listener)
		done += accept_some(h, now_ns);
	expire(h, now_ns);
	struct slot *q = h->writer == SLOT_NONE ? oldest_queued(h) : NULL;
	if (q != NULL) {
		respond(h, q);
		done++;
	}
	return done;
}

void keel_metrics_http_fini(struct keel_metrics_http *h)
{
	if (h == NULL)
		return;
	for (uint32_t i = 0; i < h->cfg.slots; i++)
		if (h->slots[i].state != SLOT_FREE)
			slot_close(h, &h->slots[i], NULL);
	if (h->cfg.listen_fd >= 0)
		close(h->cfg.listen_fd);
	if (h->epfd >= 0)
		close(h->epfd);
	h->cfg.listen_fd = h->epfd = -1;
}
