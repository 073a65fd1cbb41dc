/* The keel transport over SimGrid: each datagram is one detached mailbox message charged its
 * real length (data datagrams times the configured scale) on the modelled network. A daemon
 * receiver actor per endpoint takes messages off the mailbox and queues them, so the node's
 * own actor never waits on a comm with a timeout (that cancels transfers in flight). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>
#include <simgrid/semaphore.h>

#include "actor_guard.h"
#include "comm_wait.h"
#include "sim_int.h"

/* One SimGrid message: a datagram, or a train of bulk datagrams to one peer (count > 1,
 * data = [length][bytes]... in send order, split again by the receiver actor). */
struct sim_msg {
	struct sim_msg *next;
	uint32_t src;
	uint32_t len;
	uint32_t count;
	uint8_t data[];
};

struct sim_inbox {
	struct sim_msg *head, *tail;
	uint32_t count;
	bool waiting; /* the node actor sleeps on sem */
	bool woken;   /* wake() was called since the node last waited */
	bool alive;
	bool stopped; /* the receiver has ended (sim_net_stop_receiver) */
	sg_sem_t sem;
	sg_mailbox_t mb;
	sg_host_t host;
};

struct sim_net {
	struct sim_net_config cfg;
	struct sim_inbox *in; /* [endpoints] */
	uint64_t messages, comms, bytes, drops;
};

struct sim_tp {
	struct keel_transport t;
	struct sim_net *net;
	uint32_t self;
	uint32_t *map; /* rank -> endpoint */
	uint32_t *rev; /* endpoint -> rank + 1, 0 when not in this world */
};

struct receiver_arg {
	struct sim_net *net;
	uint32_t e;
};

static const struct keel_transport_ops sim_ops;

uint64_t sim_now_ns(void)
{
	return (uint64_t)llround(simgrid_get_clock() * 1e9);
}

struct sim_net *sim_net_create(const struct sim_net_config *cfg, void *const *hosts)
{
	struct sim_net *net = calloc(1, sizeof(*net));
	char name[32];

	if (net == NULL)
		return NULL;
	net->cfg = *cfg;
	net->in = calloc(cfg->endpoints, sizeof(*net->in));
	if (net->in == NULL) {
		free(net);
		return NULL;
	}
	for (uint32_t e = 0; e < cfg->endpoints; e++) {
		snprintf(name, sizeof(name), "keel-%u", e);
		net->in[e].mb = sg_mailbox_by_name(name);
		net->in[e].sem = sg_sem_init(0);
		net->in[e].host = hosts[e];
	}
	return net;
}

static void inbox_clear(struct sim_inbox *ib)
{
	while (ib->head != NULL) {
		struct sim_msg *m = ib->head;
		ib->head = m->next;
		free(m);
	}
	ib->tail = NULL;
	ib->count = 0;
}

void sim_net_destroy(struct sim_net *net)
{
	if (net == NULL)
		return;
	for (uint32_t e = 0; e < net->cfg.endpoints; e++) {
		inbox_clear(&net->in[e]);
		sg_sem_destroy(net->in[e].sem);
	}
	free(net->in);
	free(net);
}

static void wake(struct sim_inbox *ib)
{
	ib->woken = true;
	if (ib->waiting) {
		ib->waiting = false;
		sg_sem_release(ib->sem);
	}
}

/* Gets kept posted at once (config rx_gets). One get would match the oldest message in the
 * mailbox, and a large datagram still in transfer would hold back every small one behind it
 * (heartbeats, acks): head-of-line blocking the real NIC does not have. A whole window of
 * data from one peer plus the control traffic around it must fit, or a heartbeat arriving
 * mid-transfer stalls the acks behind it (a ring AllReduce with a 256-datagram window ran
 * 22 % slow with 16), and scaled gradient datagrams (slow to transfer) must not hold back
 * heartbeats (with window + 2 a 24-rank training run saw 66 false suspicions). Runs without
 * data (heartbeat mode) keep window + 2: every wait registers on every posted get, and with
 * 18 instead of 4 a 1 024-node heartbeat run took 1.4 times as long. */
#define RX_GETS_DEFAULT 16u
#define STOP_LEN	UINT32_MAX

static void enqueue(struct sim_inbox *ib, struct sim_msg *m)
{
	m->next = NULL;
	if (ib->tail != NULL)
		ib->tail->next = m;
	else
		ib->head = m;
	ib->tail = m;
	ib->count++;
	wake(ib);
}

static uint32_t rx_gets(const struct sim_net *net)
{
	return net->cfg.rx_gets != 0 ? net->cfg.rx_gets : RX_GETS_DEFAULT;
}

/* Hands a message received for endpoint e to its node: one datagram, or a train's datagrams
 * one at a time, the node running between them as it would between separate messages
 * arriving together (it acks what it has each time: fewer acks would make the job look
 * faster than it is). Dropped when the node is down or its queue is full. */
static void deliver(struct sim_net *net, struct sim_inbox *ib, struct sim_msg *m)
{
	if (!ib->alive || ib->count + m->count > net->cfg.queue_max) {
		net->drops += m->count;
		free(m);
		return;
	}
	if (m->count == 1) {
		enqueue(ib, m);
		return;
	}
	for (uint32_t k = 0, off = 0; k < m->count; k++) {
		uint32_t len;
		memcpy(&len, m->data + off, 4);
		struct sim_msg *one = malloc(sizeof(*one) + len);
		if (one == NULL)
			abort();
		*one = (struct sim_msg){.src = m->src, .len = len, .count = 1};
		memcpy(one->data, m->data + off + 4, len);
		off += 4 + len;
		if (k > 0)
			sg_actor_yield();
		if (!ib->alive) {
			net->drops++;
			free(one);
			continue;
		}
		enqueue(ib, one);
	}
	free(m);
}

/* The receiver's gets still posted when its node ends: cancelled, not left to the end of the
 * simulation (a daemon killed there with a transfer in flight to it would destroy a running
 * comm, which SimGrid reports with a backtrace). A get that has finished meanwhile holds a
 * message nobody will read. */
static void receiver_cancel(sg_comm_t *comms, void **data, uint32_t count)
{
	sim_comm_cancel(comms, count);
	for (uint32_t i = 0; i < count; i++)
		free(data[i]);
}

static void receiver_main(int argc, char **argv)
{
	struct receiver_arg *a = sg_actor_self_get_data();
	struct sim_inbox *ib = &a->net->in[a->e];
	uint32_t gets = rx_gets(a->net);
	sg_comm_t *comms = calloc(gets, sizeof(*comms));
	void **data = calloc(gets, sizeof(*data));
	char name[32];
	if (comms == NULL || data == NULL)
		abort();
	(void)argc;
	(void)argv;
	/* A permanent receiver: transfers start when sent, not when a get is posted (otherwise
	 * every datagram would wait for the previous one, one latency each). */
	snprintf(name, sizeof(name), "keel-%u", a->e);
	sg_mailbox_set_receiver(name);
	for (uint32_t i = 0; i < gets; i++)
		comms[i] = sg_mailbox_get_async(ib->mb, &data[i]);
	while (!ib->stopped) {
		int failed = 0;
		ssize_t i = sim_comm_wait_any(comms, gets, &failed);
		if (i < 0)
			continue;
		struct sim_msg *m = failed ? NULL : data[i];
		data[i] = NULL;
		comms[i] = sg_mailbox_get_async(ib->mb, &data[i]);
		if (m == NULL)
			continue; /* a failed transfer (link or host down) */
		if (m->len == STOP_LEN) {
			ib->stopped = true;
			free(m);
		} else {
			deliver(a->net, ib, m);
		}
	}
	receiver_cancel(comms, data, gets);
	free(comms);
	free(data);
	wake(ib);
}

/* Called by endpoint e's node actor at its end: a stop message to its receiver, then wait
 * (dropping what arrives) until the receiver has ended. */
void sim_net_stop_receiver(struct sim_net *net, uint32_t e)
{
	struct sim_inbox *ib = &net->in[e];
	struct sim_msg *m = calloc(1, sizeof(*m));
	if (m == NULL)
		abort();
	m->len = STOP_LEN;
	m->count = 1;
	sg_comm_detach(sg_mailbox_put_init(ib->mb, m, 1), free);
	while (!ib->stopped) {
		inbox_clear(ib);
		ib->woken = false;
		ib->waiting = true;
		sg_sem_acquire(ib->sem);
		ib->waiting = false;
	}
	inbox_clear(ib);
}

void sim_net_start_receiver(struct sim_net *net, uint32_t e)
{
	struct receiver_arg *a = malloc(sizeof(*a));
	char name[32];

	if (a == NULL)
		abort();
	a->net = net;
	a->e = e;
	snprintf(name, sizeof(name), "rx-%u", e);
	sg_actor_t act = sg_actor_init(name, net->in[e].host);
	sg_actor_set_data(act, a);
	sg_actor_set_stacksize(act, 64 * 1024);
	sim_actor_start_guarded(act, receiver_main);
	sg_actor_daemonize(act); /* `a` lives as long as the simulation: receivers are killed */
	net->in[e].alive = true;
}

void sim_net_set_alive(struct sim_net *net, uint32_t e, bool alive)
{
	net->in[e].alive = alive;
	if (!alive)
		inbox_clear(&net->in[e]);
}

bool sim_net_has_input(const struct sim_net *net, uint32_t e)
{
	return net->in[e].count > 0 || net->in[e].woken;
}

void sim_net_wake(struct sim_net *net, uint32_t e)
{
	wake(&net->in[e]);
}

/* Time never freezes: a deadline in the past returns at once, and the caller polls. */
void sim_net_wait(struct sim_net *net, uint32_t e, uint64_t deadline_ns)
{
	struct sim_inbox *ib = &net->in[e];
	uint64_t now = sim_now_ns();

	if (ib->count > 0 || ib->woken) {
		ib->woken = false;
		return;
	}
	if (deadline_ns <= now)
		return;
	ib->waiting = true;
	if (deadline_ns == UINT64_MAX)
		sg_sem_acquire(ib->sem);
	else /* +1 ns: the clock is a double; never wake a hair before the deadline */
		(void)sg_sem_acquire_timeout(ib->sem, (double)(deadline_ns - now + 1) * 1e-9);
	ib->waiting = false;
	ib->woken = false;
}

void sim_net_totals(const struct sim_net *net, uint64_t *messages, uint64_t *comms, uint64_t *bytes,
		    uint64_t *drops)
{
	*messages = net->messages;
	*comms = net->comms;
	*bytes = net->bytes;
	*drops = net->drops;
}

size_t sim_transport_storage_size(const struct sim_net *net, uint32_t world)
{
	return sizeof(struct sim_tp) + world * sizeof(uint32_t) +
	       net->cfg.endpoints * sizeof(uint32_t);
}

int sim_transport_init(struct keel_transport **out, void *mem, size_t mem_len, struct sim_net *net,
		       uint32_t self_endpoint, uint32_t rank, uint32_t world, const uint32_t *map,
		       uint32_t mtu)
{
	struct sim_tp *s = mem;

	*out = NULL;
	if (net == NULL || world == 0 || rank >= world || self_endpoint >= net->cfg.endpoints ||
	    map[rank] != self_endpoint)
		return -EINVAL;
	if (mem == NULL || mem_len < sim_transport_storage_size(net, world))
		return -ENOSPC;
	memset(mem, 0, sim_transport_storage_size(net, world));
	s->net = net;
	s->self = self_endpoint;
	s->map = (uint32_t *)(s + 1);
	s->rev = s->map + world;
	for (uint32_t r = 0; r < world; r++) {
		if (map[r] >= net->cfg.endpoints)
			return -EINVAL;
		s->map[r] = map[r];
		s->rev[map[r]] = r + 1;
	}
	s->t = (struct keel_transport){
	    .ops = &sim_ops,
	    .state = s,
	    .caps = 0, /* hosts die and links fail: the core's reliable layer stays on */
	    .mtu = mtu,
	    .rank = rank,
	    .world_size = world,
	};
	*out = &s->t;
	return 0;
}

/* Bulk: charged at scale, and no control traffic (heartbeats, acks, views stay one message
 * each, so their timing is the datagram's own). */
static bool bulk(const struct sim_net *net, const struct keel_datagram *d)
{
	return d->len > net->cfg.scale_min_len && (d->flags & KEEL_DGRAM_CONTROL) == 0;
}

static long charged_len(const struct sim_net *net, uint32_t len)
{
	return len > net->cfg.scale_min_len ? (long)len * (long)net->cfg.scale : (long)len;
}

/* How many datagrams from d[0] go as one train: bulk ones to the same peer, in a row. */
static uint32_t train_length(const struct sim_net *net, const struct keel_datagram *d,
			     uint32_t count, uint32_t mtu)
{
	uint32_t n = 1;
	if (net->cfg.train_max <= 1 || !bulk(net, &d[0]))
		return 1;
	while (n < count && n < net->cfg.train_max && d[n].peer == d[0].peer && d[n].len <= mtu &&
	       bulk(net, &d[n]))
		n++;
	return n;
}

/* --trains N (config train_max): bulk datagrams sent in one burst to one peer travel as one
 * SimGrid message charged their summed length. Datagrams that leave together share the link
 * and arrive together either way, and one message costs SimGrid far less than N. What
 * changes: SimGrid shares a contended link per message, so a sender of many datagrams got
 * more of it than one of few; with trains each burst is one share. Step times moved by up to
 * 2 % against per datagram, either way (tests/integ/sim_trains.sh, docs/perf-history.md). Off by
 * default. */
static int sim_send_burst(struct keel_transport *t, uint64_t now_ns, const struct keel_datagram *d,
			  uint32_t count)
{
	struct sim_tp *s = t->state;
	struct sim_net *net = s->net;

	(void)now_ns;
	for (uint32_t i = 0; i < count;) {
		if (d[i].peer >= t->world_size || d[i].len > t->mtu)
			return i > 0 ? (int)i : -EINVAL;
		uint32_t n = train_length(net, &d[i], count - i, t->mtu);
		uint32_t dst = s->map[d[i].peer];
		if (!net->in[dst].alive || !sg_host_is_on(net->in[dst].host)) {
			net->drops += n; /* a dead host loses what is sent to it */
			i += n;
			continue;
		}
		size_t bytes = n == 1 ? d[i].len : 0;
		for (uint32_t k = 0; n > 1 && k < n; k++)
			bytes += 4u + d[i + k].len;
		struct sim_msg *m = malloc(sizeof(*m) + bytes);
		if (m == NULL)
			return i > 0 ? (int)i : KEEL_ETRANSPORT;
		*m = (struct sim_msg){.src = s->self, .len = (uint32_t)bytes, .count = n};
		long charged = 0;
		uint8_t *p = m->data;
		for (uint32_t k = 0; k < n; k++) {
			const struct keel_datagram *g = &d[i + k];
			if (n > 1) {
				memcpy(p, &g->len, 4);
				p += 4;
			}
			memcpy(p, g->buf, g->len);
			p += g->len;
			charged += charged_len(net, g->len);
		}
		net->messages += n;
		net->comms++;
		net->bytes += (uint64_t)charged;
		sg_comm_detach(sg_mailbox_put_init(net->in[dst].mb, m, charged), free);
		i += n;
	}
	return (int)count;
}

static int sim_recv_burst(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
			  uint32_t count_max)
{
	struct sim_tp *s = t->state;
	struct sim_inbox *ib = &s->net->in[s->self];
	uint32_t n = 0;

	(void)now_ns;
	/* Bounded by the queue length, which only the receiver actor grows (not while we run). */
	while (n < count_max && ib->head != NULL) {
		struct sim_msg *m = ib->head;
		ib->head = m->next;
		if (ib->head == NULL)
			ib->tail = NULL;
		ib->count--;
		uint32_t rank1 = s->rev[m->src];
		if (rank1 == 0 || m->len > d[n].cap) {
			s->net->drops++; /* another world's sender, or a datagram too long */
			free(m);
			continue;
		}
		memcpy(d[n].buf, m->data, m->len);
		d[n].len = m->len;
		d[n].peer = rank1 - 1;
		free(m);
		n++;
	}
	return (int)n;
}

static uint64_t sim_next_deadline_ns(struct keel_transport *t)
{
	(void)t;
	return UINT64_MAX;
}

static int sim_wait_fd(struct keel_transport *t)
{
	(void)t;
	return -1;
}

static const struct keel_transport_ops sim_ops = {
    .name = "sim",
    .send_burst = sim_send_burst,
    .recv_burst = sim_recv_burst,
    .next_deadline_ns = sim_next_deadline_ns,
    .wait_fd = sim_wait_fd,
    .fini = NULL,
};
