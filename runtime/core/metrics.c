/* Metrics: histograms the modules feed, trace events to the caller's hook, and the
 * Prometheus text rendering of everything the node counts. Numbers are written with integer
 * arithmetic (seconds from nanoseconds exactly), so nothing here depends on the C library's
 * float formatting or locale. */
#include <errno.h>
#include <string.h>

#include "node_int.h"
#include "text_out.h"

const uint64_t keel_hist_bounds_ns[KEEL_HIST_BUCKETS] = {
    1000ull,	   2500ull,	  5000ull,	 10000ull,	 25000ull,     50000ull,
    100000ull,	   250000ull,	  500000ull,	 1000000ull,	 2500000ull,   5000000ull,
    10000000ull,   25000000ull,	  50000000ull,	 100000000ull,	 250000000ull, 500000000ull,
    1000000000ull, 2500000000ull, 5000000000ull, 10000000000ull,
};

static const uint64_t size_class_max[KEEL_SIZE_CLASSES] = {
    4096ull, 65536ull, 1048576ull, 16777216ull, UINT64_MAX,
};
static const char *const size_class_label[KEEL_SIZE_CLASSES] = {
    "4KiB", "64KiB", "1MiB", "16MiB", "larger",
};

uint32_t keel_size_class(uint64_t bytes)
{
	uint32_t c = 0;
	while (bytes > size_class_max[c]) /* the last class is UINT64_MAX: bounded */
		c++;
	return c;
}

uint64_t keel_size_class_max(uint32_t size_class)
{
	return size_class < KEEL_SIZE_CLASSES ? size_class_max[size_class] : UINT64_MAX;
}

void metrics_observe(struct keel_node *n, enum keel_hist h, uint64_t ns)
{
	KEEL_ASSERT((unsigned)h < KEEL_HIST_COUNT);
	struct keel_histogram *hg = &n->hist[h];
	uint32_t b = 0;
	while (b < KEEL_HIST_BUCKETS && ns > keel_hist_bounds_ns[b])
		b++;
	hg->bucket[b]++;
	hg->count++;
	hg->sum_ns += ns;
}

int keel_metrics_observe(struct keel_node *node, enum keel_hist hist, uint64_t ns)
{
	if (node == NULL || (unsigned)hist >= KEEL_HIST_COUNT)
		return -EINVAL;
	metrics_observe(node, hist, ns);
	return 0;
}

int keel_histogram_get(const struct keel_node *node, enum keel_hist hist,
		       struct keel_histogram *out)
{
	if (node == NULL || out == NULL || (unsigned)hist >= KEEL_HIST_COUNT)
		return -EINVAL;
	*out = node->hist[hist];
	return 0;
}

void node_event(struct keel_node *n, struct keel_event *ev)
{
	if (n->cfg.on_event == NULL)
		return;
	if (ev->t_ns == 0)
		ev->t_ns = n->now_ns;
	ev->epoch = n->epoch;
	n->cfg.on_event(n->cfg.on_event_ctx, ev);
}

void metrics_on_suspect(struct keel_node *n, uint32_t peer, uint64_t silent_ns)
{
	metrics_observe(n, KEEL_HIST_DETECTION, silent_ns);
	if (n->first_suspect_ns == 0)
		n->first_suspect_ns = n->now_ns;
	struct keel_event ev = {.kind = KEEL_EV_SUSPECT, .peer = peer, .dur_ns = silent_ns};
	node_event(n, &ev);
}

/* A view installed: the time since this node first suspected someone is the view change it
 * waited for (a view without a suspicion here — a join, or another member's suspicion —
 * measures nothing). */
void metrics_on_view(struct keel_node *n, uint32_t members)
{
	uint64_t waited = 0;
	if (n->first_suspect_ns != 0 && n->now_ns >= n->first_suspect_ns) {
		waited = n->now_ns - n->first_suspect_ns;
		metrics_observe(n, KEEL_HIST_VIEW_CHANGE, waited);
	}
	n->first_suspect_ns = 0;
	struct keel_event ev = {
	    .kind = KEEL_EV_VIEW, .peer = members, .dur_ns = waited, .op = UINT32_MAX};
	node_event(n, &ev);
}

static const char *const event_names[KEEL_EV_KIND_COUNT] = {
    [KEEL_EV_COLL_BEGIN] = "collective begin",
    [KEEL_EV_COLL_END] = "collective",
    [KEEL_EV_SUSPECT] = "suspect",
    [KEEL_EV_VIEW_ROUND] = "view round",
    [KEEL_EV_VIEW] = "view",
    [KEEL_EV_CKPT_WRITE] = "checkpoint write",
    [KEEL_EV_CKPT_RESTORE] = "checkpoint restore",
    [KEEL_EV_FALLBACK] = "transport fallback",
};

const char *keel_event_kind_name(uint32_t kind)
{
	return kind < KEEL_EV_KIND_COUNT ? event_names[kind] : "unknown";
}

/* ---- rendering ---- */

/* A label value: backslash, double quote and newline escaped, as the format asks. */
static void put_label_value(struct text_out *o, const char *v)
{
	for (const char *p = v; *p != '\0'; p++) {
		if (*p == '\\')
			text_puts(o, "\\\\");
		else if (*p == '"')
			text_puts(o, "\\\"");
		else if (*p == '\n')
			text_puts(o, "\\n");
		else
			text_put(o, p, 1);
	}
}

struct ctx {
	struct text_out *o;
	const struct keel_node *n;
	const char *job;
};

static void family(struct ctx *c, const char *name, const char *type, const char *help)
{
	text_puts(c->o, "# HELP ");
	text_puts(c->o, name);
	text_put(c->o, " ", 1);
	text_puts(c->o, help);
	text_puts(c->o, "\n# TYPE ");
	text_puts(c->o, name);
	text_put(c->o, " ", 1);
	text_puts(c->o, type);
	text_put(c->o, "\n", 1);
}

/* name{job="..",rank="N"[,extra]} — extra is "key=\"value\"" pairs already formatted, or a
 * peer number when peer != UINT32_MAX. */
static void series(struct ctx *c, const char *name, const char *suffix, const char *extra,
		   uint32_t peer)
{
	text_puts(c->o, name);
	text_puts(c->o, suffix);
	text_puts(c->o, "{job=\"");
	put_label_value(c->o, c->job);
	text_puts(c->o, "\",rank=\"");
	text_u64(c->o, c->n->self);
	text_put(c->o, "\"", 1);
	if (peer != UINT32_MAX) {
		text_puts(c->o, ",peer=\"");
		text_u64(c->o, peer);
		text_put(c->o, "\"", 1);
	}
	if (extra != NULL) {
		text_put(c->o, ",", 1);
		text_puts(c->o, extra);
	}
	text_puts(c->o, "} ");
}

static void value_line(struct ctx *c, const char *name, uint64_t v)
{
	series(c, name, "", NULL, UINT32_MAX);
	text_u64(c->o, v);
	text_put(c->o, "\n", 1);
}

static void counter(struct ctx *c, const char *name, const char *help, uint64_t v)
{
	family(c, name, "counter", help);
	value_line(c, name, v);
}

static void gauge(struct ctx *c, const char *name, const char *help, uint64_t v)
{
	family(c, name, "gauge", help);
	value_line(c, name, v);
}

static void histogram_series(struct ctx *c, const char *name, const char *extra,
			     const struct keel_histogram *h)
{
	uint64_t cum = 0;
	char le[64];
	for (uint32_t b = 0; b <= KEEL_HIST_BUCKETS; b++) {
		cum += h->bucket[b];
		/* the extra labels, then le="..." (last, as is usual), in a scratch buffer */
		struct text_out lo = {.buf = le, .cap = sizeof(le) - 1, .len = 0};
		if (extra != NULL) {
			text_puts(&lo, extra);
			text_put(&lo, ",", 1);
		}
		text_puts(&lo, "le=\"");
		if (b < KEEL_HIST_BUCKETS)
			text_seconds(&lo, keel_hist_bounds_ns[b]);
		else
			text_puts(&lo, "+Inf");
		text_put(&lo, "\"", 1);
		KEEL_ASSERT(lo.len < sizeof(le));
		le[lo.len] = '\0';
		series(c, name, "_bucket", le, UINT32_MAX);
		text_u64(c->o, cum);
		text_put(c->o, "\n", 1);
	}
	series(c, name, "_sum", extra, UINT32_MAX);
	text_seconds(c->o, h->sum_ns);
	text_put(c->o, "\n", 1);
	series(c, name, "_count", extra, UINT32_MAX);
	text_u64(c->o, h->count);
	text_put(c->o, "\n", 1);
}

static void histogram(struct ctx *c, const char *name, const char *help, enum keel_hist h)
{
	family(c, name, "histogram", help);
	histogram_series(c, name, NULL, &c->n->hist[h]);
}

/* Datagrams dropped, one series per reason. */
static void render_drops(struct ctx *c)
{
	const struct keel_counters *k = &c->n->ctr;
	static const struct {
		const char *reason;
		size_t off;
	} drops[] = {
	    {"truncated", offsetof(struct keel_counters, drop_truncated)},
	    {"magic", offsetof(struct keel_counters, drop_magic)},
	    {"version", offsetof(struct keel_counters, drop_version)},
	    {"type", offsetof(struct keel_counters, drop_type)},
	    {"length", offsetof(struct keel_counters, drop_length)},
	    {"crc", offsetof(struct keel_counters, drop_crc)},
	    {"auth", offsetof(struct keel_counters, drop_auth)},
	    {"replay", offsetof(struct keel_counters, drop_replay)},
	    {"job", offsetof(struct keel_counters, drop_job)},
	    {"epoch", offsetof(struct keel_counters, drop_epoch)},
	    {"source", offsetof(struct keel_counters, drop_source)},
	    {"destination", offsetof(struct keel_counters, drop_destination)},
	    {"duplicate", offsetof(struct keel_counters, drop_duplicate)},
	    {"window", offsetof(struct keel_counters, drop_window)},
	    {"no_stream", offsetof(struct keel_counters, drop_no_stream)},
	    {"stale", offsetof(struct keel_counters, drop_stale)},
	    {"device_later", offsetof(struct keel_counters, drop_device_later)},
	    {"protocol", offsetof(struct keel_counters, drop_protocol)},
	    {"view", offsetof(struct keel_counters, drop_view)},
	};
	family(c, "keel_datagrams_dropped_total", "counter",
	       "Datagrams received and dropped, by reason.");
	for (size_t i = 0; i < sizeof(drops) / sizeof(drops[0]); i++) {
		char extra[40];
		struct text_out lo = {.buf = extra, .cap = sizeof(extra) - 1, .len = 0};
		text_puts(&lo, "reason=\"");
		text_puts(&lo, drops[i].reason);
		text_put(&lo, "\"", 1);
		KEEL_ASSERT(lo.len < sizeof(extra));
		extra[lo.len] = '\0';
		uint64_t v;
		memcpy(&v, (const uint8_t *)k + drops[i].off, sizeof(v));
		series(c, "keel_datagrams_dropped_total", "", extra, UINT32_MAX);
		text_u64(c->o, v);
		text_put(c->o, "\n", 1);
	}
}

/* keel_counters as Prometheus counters: name, help, field. */
struct counter_row {
	const char *name, *help;
	size_t off;
};

static const struct counter_row traffic_rows[] = {
    {"keel_datagrams_received_total", "Datagrams received and accepted.",
     offsetof(struct keel_counters, rx_datagrams)},
    {"keel_datagrams_sent_total", "Datagrams handed to the transport.",
     offsetof(struct keel_counters, tx_datagrams)},
    {"keel_received_bytes_total", "Bytes of accepted datagrams, headers included.",
     offsetof(struct keel_counters, rx_bytes)},
    {"keel_sent_bytes_total", "Bytes of datagrams sent, headers included.",
     offsetof(struct keel_counters, tx_bytes)},
};

static const struct counter_row event_rows[] = {
    {"keel_retransmits_total", "Reliable datagrams sent again.",
     offsetof(struct keel_counters, retransmits)},
    {"keel_fast_retransmits_total", "Retransmissions on a selective ack's hole.",
     offsetof(struct keel_counters, fast_retransmits)},
    {"keel_tail_probes_total", "Retransmissions of the newest datagram after the acks stopped.",
     offsetof(struct keel_counters, tail_probes)},
    {"keel_transmit_blocked_total", "Datagrams the transport refused for now.",
     offsetof(struct keel_counters, tx_blocked)},
    {"keel_heartbeats_sent_total", "Heartbeats sent.",
     offsetof(struct keel_counters, heartbeats_sent)},
    {"keel_heartbeats_received_total", "Heartbeats received.",
     offsetof(struct keel_counters, heartbeats_received)},
    {"keel_probes_sent_total", "Direct probes of silent peers.",
     offsetof(struct keel_counters, probes_sent)},
    {"keel_suspicions_total", "Peers this node suspected.",
     offsetof(struct keel_counters, suspicions)},
    {"keel_false_suspicions_total", "Suspected peers heard from again before they were removed.",
     offsetof(struct keel_counters, false_suspicions)},
    {"keel_local_pauses_total",
     "Polls that came two or more heartbeat intervals after the previous one.",
     offsetof(struct keel_counters, local_pauses)},
    {"keel_view_changes_total", "Views installed after the first.",
     offsetof(struct keel_counters, view_changes)},
    {"keel_view_rounds_total", "View-change rounds this node started as coordinator.",
     offsetof(struct keel_counters, view_proposals)},
    {"keel_self_exclusions_total", "Views that left this node out after it was a member.",
     offsetof(struct keel_counters, self_exclusions)},
    {"keel_collectives_completed_total", "Collectives that ended with a result.",
     offsetof(struct keel_counters, ops_completed)},
    {"keel_collectives_failed_total", "Collectives that ended with an error.",
     offsetof(struct keel_counters, ops_failed)},
    {"keel_collectives_restarted_total", "Collective restarts on a new view.",
     offsetof(struct keel_counters, ops_restarted)},
    {"keel_collectives_adopted_total",
     "Collective results a view change brought from members that reported them early.",
     offsetof(struct keel_counters, ops_adopted)},
    {"keel_compressed_fragments_total", "Gradient fragments sent as bf16 or f16.",
     offsetof(struct keel_counters, compress_frags)},
    {"keel_compressed_bytes_saved_total",
     "Payload bytes compressed gradient fragments did not send.",
     offsetof(struct keel_counters, compress_bytes_saved)},
    {"keel_device_direct_fragments_total",
     "Datagrams whose payload the NIC read from device memory (GPUDirect RDMA).",
     offsetof(struct keel_counters, device_direct_frags)},
    {"keel_device_copy_ins_total",
     "Device payloads copied to the host because their way lost the NIC that read them.",
     offsetof(struct keel_counters, device_copy_ins)},
    {"keel_device_rx_fragments_total",
     "Received payloads the NIC wrote into device memory and the device used there.",
     offsetof(struct keel_counters, device_rx_frags)},
    {"keel_device_nic_flushes_total",
     "Flushes of a NIC's writes into device memory, at most one per received burst.",
     offsetof(struct keel_counters, device_nic_flushes)},
};

static void counter_rows(struct ctx *c, const struct counter_row *rows, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		uint64_t v;
		memcpy(&v, (const uint8_t *)&c->n->ctr + rows[i].off, sizeof(v));
		counter(c, rows[i].name, rows[i].help, v);
	}
}

static void render_counters(struct ctx *c)
{
	counter_rows(c, traffic_rows, sizeof(traffic_rows) / sizeof(traffic_rows[0]));
	render_drops(c);
	counter_rows(c, event_rows, sizeof(event_rows) / sizeof(event_rows[0]));
}

static void render_gauges(struct ctx *c)
{
	const struct keel_node *n = c->n;
	uint32_t alive = 0;
	uint64_t flight = 0, flight_bytes = 0;
	for (uint32_t r = 0; r < n->world; r++) {
		if (n->member && view_has(&n->view, r) && (r == n->self || fd_is_alive(n, r)))
			alive++;
		if (r == n->self)
			continue;
		const struct rel_peer *p = rel_peer_of(n, r);
		uint32_t in_flight = p->snd_nxt - p->snd_una;
		flight += in_flight;
		if (p->tx != NULL)
			for (uint32_t s = p->snd_una; s != p->snd_nxt; s++)
				flight_bytes += p->tx[s & (n->window - 1)].len;
	}
	gauge(c, "keel_view_epoch", "Epoch of the view this node installed.", n->view.epoch);
	gauge(c, "keel_view_members", "Members of that view.", n->view.count);
	gauge(c, "keel_members_alive",
	      "Members of that view this node sees alive, itself included.", alive);
	gauge(c, "keel_member", "1 when this node is in its view.", n->member ? 1 : 0);
	gauge(c, "keel_inflight_datagrams", "Reliable datagrams sent and not yet acknowledged.",
	      flight);
	gauge(c, "keel_inflight_bytes", "Bytes of those datagrams.", flight_bytes);
	gauge(c, "keel_window_datagrams", "Reliable window per peer, in datagrams.", n->window);
	uint64_t peers = n->view.count > 1 ? n->view.count - 1 : 1;
	family(c, "keel_window_occupancy_ratio", "gauge",
	       "In-flight datagrams over the windows of the view's other members.");
	series(c, "keel_window_occupancy_ratio", "", NULL, UINT32_MAX);
	text_frac(c->o, flight * 1000000ull / (peers * n->window), 1000000ull);
	text_put(c->o, "\n", 1);
}

/* Per peer: every rank but this one (a rank outside the view reads up = 0). */
static void render_peers(struct ctx *c)
{
	const struct keel_node *n = c->n;
	static const char *const fams[][3] = {
	    {"keel_peer_up", "gauge", "1 when the peer is in the view and not suspected."},
	    {"keel_peer_rtt_seconds", "gauge", "Smoothed heartbeat round trip to the peer."},
	    {"keel_peer_datagrams_sent_total", "counter",
	     "Reliable datagrams sent to the peer for the first time."},
	    {"keel_peer_retransmits_total", "counter", "Datagrams sent to the peer again."},
	    {"keel_peer_loss_ratio", "gauge",
	     "Retransmissions over first transmissions to the peer, since start."},
	    {"keel_peer_suspicions_total", "counter", "Times this node suspected the peer."},
	};
	for (size_t f = 0; f < sizeof(fams) / sizeof(fams[0]); f++) {
		family(c, fams[f][0], fams[f][1], fams[f][2]);
		for (uint32_t r = 0; r < n->world; r++) {
			if (r == n->self)
				continue;
			const struct fd_peer *fp = fd_peer_of(n, r);
			const struct rel_peer *rp = rel_peer_of(n, r);
			series(c, fams[f][0], "", NULL, r);
			switch (f) {
			case 0:
				text_u64(c->o, n->member && view_has(&n->view, r) &&
						       fp->state == KEEL_PEER_ALIVE
						   ? 1
						   : 0);
				break;
			case 1:
				text_seconds(c->o, fp->hb_srtt_ns);
				break;
			case 2:
				text_u64(c->o, rp->data_sent);
				break;
			case 3:
				text_u64(c->o, rp->retransmits);
				break;
			case 4:
				text_frac(c->o,
					  rp->data_sent == 0
					      ? 0
					      : rp->retransmits * 1000000ull / rp->data_sent,
					  1000000ull);
				break;
			default:
				text_u64(c->o, fp->suspicions);
				break;
			}
			text_put(c->o, "\n", 1);
		}
	}
}

static void render_histograms(struct ctx *c)
{
	histogram(c, "keel_heartbeat_rtt_seconds", "Heartbeat round trips, every peer.",
		  KEEL_HIST_HEARTBEAT_RTT);
	histogram(c, "keel_detection_seconds",
		  "Time from a peer's last datagram to this node suspecting it.",
		  KEEL_HIST_DETECTION);
	histogram(c, "keel_view_change_seconds",
		  "Time from this node's first suspicion to the next view installed.",
		  KEEL_HIST_VIEW_CHANGE);
	histogram(c, "keel_checkpoint_write_seconds", "Checkpoint writes.", KEEL_HIST_CKPT_WRITE);
	family(c, "keel_allreduce_seconds", "histogram",
	       "AllReduce from its start to its result, by size class (largest size in it).");
	for (uint32_t s = 0; s < KEEL_SIZE_CLASSES; s++) {
		char extra[32];
		struct text_out lo = {.buf = extra, .cap = sizeof(extra) - 1, .len = 0};
		text_puts(&lo, "size_class=\"");
		text_puts(&lo, size_class_label[s]);
		text_put(&lo, "\"", 1);
		KEEL_ASSERT(lo.len < sizeof(extra));
		extra[lo.len] = '\0';
		histogram_series(c, "keel_allreduce_seconds", extra,
				 &c->n->hist[KEEL_HIST_ALLREDUCE + s]);
	}
}

int keel_metrics_render(const struct keel_node *node, const char *job, char *buf, size_t cap,
			size_t *len)
{
	if (node == NULL || job == NULL || len == NULL || (buf == NULL && cap != 0))
		return -EINVAL;
	struct text_out o = {.buf = buf, .cap = cap, .len = 0};
	struct ctx c = {.o = &o, .n = node, .job = job};
	render_counters(&c);
	render_gauges(&c);
	render_peers(&c);
	render_histograms(&c);
	*len = o.len;
	if (o.len < cap)
		buf[o.len] = '\0';
	return o.len <= cap ? 0 : -ENOSPC;
}
