/* /metrics over HTTP without a thread (libkeel_boot.a): a small HTTP/1.1 server on a
 * non-blocking listening socket that the program's own loop services, for Prometheus to scrape.
 * The start-up library runs one per rank when KEEL_METRICS_ADDR is set (keel/boot.h); a
 * program that starts its node itself can run one too:
 *
 *   int fd;
 *   keel_metrics_http_listen("127.0.0.1:9400", 0, &fd, err, sizeof(err));
 *   struct keel_metrics_http_config c;
 *   keel_metrics_http_config_default(&c);
 *   c.listen_fd = fd; c.body_max = 1 << 20; c.render = my_render; c.render_ctx = node;
 *   void *mem = calloc(1, keel_metrics_http_storage_size(&c));
 *   keel_metrics_http_init(&srv, mem, keel_metrics_http_storage_size(&c), &c);
 *   ... wait on keel_metrics_http_fd(srv) beside the transport's; when it is readable (or at
 *   keel_metrics_http_next_ns), keel_metrics_http_service(srv, now_ns) ...
 *
 * Bounded in every way: a fixed number of connection slots (a new connection evicts the
 * oldest one still reading its request when all are taken), a request head of at most
 * request_max bytes, a deadline per connection from accept to the last byte sent, one response
 * buffer rendered at most once per service call, and a fixed number of events and accepts per
 * call. It never blocks, never allocates (its memory is the caller's) and never raises SIGPIPE.
 * Every connection is closed after its response (Connection: close). */
#ifndef KEEL_METRICS_HTTP_H
#define KEEL_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

struct keel_metrics_http;

/* Connections held at once by default: a few scrapers and some room for strays. */
#define KEEL_METRICS_HTTP_SLOTS_DEFAULT 16u
#define KEEL_METRICS_HTTP_SLOTS_MAX	256u
/* A request head's bytes: Prometheus sends about 300 (its Accept header is the longest). */
#define KEEL_METRICS_HTTP_REQUEST_DEFAULT 2048u
#define KEEL_METRICS_HTTP_REQUEST_MIN	  64u
#define KEEL_METRICS_HTTP_REQUEST_MAX	  65536u
/* The largest body a server may be given room for: far above any world's metrics. */
#define KEEL_METRICS_HTTP_BODY_MAX (1ull << 30)
/* From accept to the last byte of the response: a scrape on loopback or a LAN takes
 * milliseconds; a client slower than this (half a request, then nothing; reading slowly) is
 * cut off. */
#define KEEL_METRICS_HTTP_DEADLINE_NS_DEFAULT 2000000000ull
/* Work per keel_metrics_http_service call: events taken from the epoll descriptor and
 * connections accepted. A flood of connections is drained over several calls, so the
 * caller's loop is never held up for long. */
#define KEEL_METRICS_HTTP_EVENTS_PER_CALL  32u
#define KEEL_METRICS_HTTP_ACCEPTS_PER_CALL 16u

/* Write the metrics text into buf (cap bytes). Set *len to the bytes the whole text takes;
 * return 0, or -ENOSPC when it is more than cap (the server then answers 503 saying so). */
typedef int (*keel_metrics_http_render_fn)(void *ctx, char *buf, size_t cap, size_t *len);

struct keel_metrics_http_config {
	int listen_fd;	      /* a listening TCP socket (keel_metrics_http_listen); the server
			       * owns it after a successful init and closes it in fini */
	uint32_t slots;	      /* connections held at once, 1..KEEL_METRICS_HTTP_SLOTS_MAX */
	uint32_t request_max; /* bytes of a request head, KEEL_METRICS_HTTP_REQUEST_MIN..MAX */
	size_t body_max;      /* bytes of the largest text render may write, 1..BODY_MAX */
	uint64_t deadline_ns; /* per connection, accept to last byte sent; > 0 */
	keel_metrics_http_render_fn render; /* called once per GET of /metrics */
	void *render_ctx;
};

/* What the server did, since init. Each connection ends in exactly one of: a response sent
 * whole (ok..unavailable), closed_early, timed_out, evicted or failed. */
struct keel_metrics_http_stats {
	uint64_t accepted;
	uint64_t refused;	 /* accepted then closed at once: every slot busy, none reading */
	uint64_t ok;		 /* 200: GET or HEAD of /metrics */
	uint64_t bad_request;	 /* 400: not an HTTP/1.x request head */
	uint64_t not_found;	 /* 404: another path */
	uint64_t bad_method;	 /* 405: another method */
	uint64_t too_long;	 /* 431: no end of head within request_max bytes */
	uint64_t unavailable;	 /* 503: the text did not fit body_max */
	uint64_t closed_early;	 /* the client closed before a whole request head */
	uint64_t timed_out;	 /* past the deadline (408 sent, best effort, if still reading) */
	uint64_t evicted;	 /* the oldest reading connection, closed to take a new one */
	uint64_t failed;	 /* a socket error (reset, or a response the socket refused) */
	uint32_t used, used_max; /* slots in use now, and at most */
};

void keel_metrics_http_config_default(struct keel_metrics_http_config *cfg);

/* Parse `addr`, "HOST:PORT" or "[IPV6]:PORT" (HOST an address or a name, resolved now; PORT
 * 0..65535, 0 for any free port, which port_offset must then be 0 for), and listen on PORT +
 * port_offset with a non-blocking, close-on-exec TCP socket (SO_REUSEADDR: a restarted process
 * takes its port back while old connections linger in TIME_WAIT). On success *fd is the
 * socket (the caller's until keel_metrics_http_init takes it). Errors, with a message in err
 * saying what is wrong (host and port for the socket's): -EINVAL (malformed, or PORT +
 * port_offset past 65535), -EADDRINUSE (another process listens there), -EADDRNOTAVAIL (not an
 * address of this host), -ENOENT (a name that does not resolve), or another -errno from
 * socket, bind or listen. */
KEEL_MUST_USE int keel_metrics_http_listen(const char *addr, uint32_t port_offset, int *fd,
					   char *err, size_t err_len);

/* Bytes of caller memory a server with this config needs (slots, request buffers, the
 * response buffer); 0 for an invalid config. */
size_t keel_metrics_http_storage_size(const struct keel_metrics_http_config *cfg);

/* Carve the server out of mem (8-byte aligned, at least storage_size bytes) and register the
 * listening socket with a new epoll descriptor. Errors: -EINVAL (bad config or memory; the
 * caller keeps listen_fd), -errno from epoll_create1 or epoll_ctl (likewise). Never allocates.
 * keel_metrics_http_fini is safe on NULL, so a failed init needs no cleanup of the server. */
KEEL_MUST_USE int keel_metrics_http_init(struct keel_metrics_http **out, void *mem, size_t mem_len,
					 const struct keel_metrics_http_config *cfg);

/* The descriptor to wait on for readability: the epoll descriptor over the listening socket and
 * every connection. Owned by the server. */
int keel_metrics_http_fd(const struct keel_metrics_http *h);

/* The port the server listens on (useful after listening on port 0). */
uint16_t keel_metrics_http_port(const struct keel_metrics_http *h);

/* When the server must be serviced even if its descriptor stays quiet: the earliest connection
 * deadline, or 0 when a request waits for the response buffer (as soon as possible);
 * UINT64_MAX when no connection is open. Same clock as now_ns. */
uint64_t keel_metrics_http_next_ns(const struct keel_metrics_http *h);

/* Do what is ready, without blocking: at most KEEL_METRICS_HTTP_EVENTS_PER_CALL socket events,
 * KEEL_METRICS_HTTP_ACCEPTS_PER_CALL new connections and one render; cut the connections past
 * their deadline. now_ns is any monotonic clock (keel_posix_now_ns), the same on every call.
 * Returns how many events and connections it handled (0: nothing was ready). */
uint32_t keel_metrics_http_service(struct keel_metrics_http *h, uint64_t now_ns);

void keel_metrics_http_stats_get(const struct keel_metrics_http *h,
				 struct keel_metrics_http_stats *out);

/* Close every connection, the listening socket and the epoll descriptor. The memory stays the
 * caller's. Safe on NULL. */
void keel_metrics_http_fini(struct keel_metrics_http *h);

#ifdef __cplusplus
}
#endif

#endif
