/* A fake ibverbs device for tests/unit/test_verbs.c: every keel_ibv_* call of the backend lands
 * here (the test links transport_verbs.o without ibv_shim.o). QPs of all transports in the
 * process form one loopback "fabric": SEND, RDMA WRITE (with immediate) are executed at post
 * time, completions queued on the CQs. Hooks make calls fail the way a real NIC can. Test code
 * may allocate. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verbs_fake.h"

#define RING 4096u
#define MRS  64u

/* A completion channel: an eventfd that turns readable when an armed CQ gets a completion. */
struct fchan {
	struct ibv_comp_channel ch;
	struct ibv_cq *cq; /* the CQ whose event is pending */
	uint32_t events;
};
struct fcq {
	struct ibv_cq cq;
	struct ibv_wc wc[RING];
	uint32_t head, tail;
	struct fchan *chan;
	bool armed; /* one event on the next completion, as ibv_req_notify_cq promises */
};
struct frecv {
	uint64_t wr_id, addr;
	uint32_t len;
};
struct fqp {
	struct ibv_qp qp;
	struct frecv rq[RING];
	uint32_t head, tail;
	uint32_t dest;
	bool err; /* moved to IBV_QPS_ERR: work is flushed, nothing executed */
};

struct verbs_fake fake;
static struct fqp *qps[256];
static uint32_t qp_count, next_key = 100;
static struct ibv_device dev0;
static struct ibv_mr *mrs[MRS]; /* live registrations: every SGE's lkey is checked */
/* A dma-buf registration's own mapping of the buffer (NULL for host memory): the NIC reads
 * device memory through the dma-buf, never at the device address, which the CPU may not
 * touch (tests map it without access). */
static uint8_t *mr_maps[MRS];
static struct ibv_wc held[RING];
static struct ibv_cq *held_cq[RING];
static uint32_t held_n;

void verbs_fake_reset(void)
{
	memset(&fake, 0, sizeof(fake));
	fake.fail_post_send_at = -1;
	qp_count = 0;
	held_n = 0;
}

static void push(struct fcq *c, const struct ibv_wc *wc)
{
	if (c->tail - c->head < RING)
		c->wc[c->tail++ % RING] = *wc;
	if (c->armed && c->chan != NULL) {
		uint64_t one = 1;
		c->armed = false;
		c->chan->cq = &c->cq;
		c->chan->events++;
		(void)!write(c->chan->ch.fd, &one, sizeof(one));
	}
}

void verbs_fake_push_wc(struct ibv_cq *cq, const struct ibv_wc *wc)
{
	push((struct fcq *)cq, wc);
}

struct ibv_device **keel_ibv_get_device_list(int *num)
{
	static struct ibv_device *list[2];
	list[0] = &dev0;
	*num = 1;
	return list;
}
void keel_ibv_free_device_list(struct ibv_device **list)
{
	(void)list;
}
const char *keel_ibv_get_device_name(struct ibv_device *d)
{
	(void)d;
	return "fake0";
}
struct ibv_context *keel_ibv_open_device(struct ibv_device *d)
{
	struct ibv_context *c = calloc(1, sizeof(*c));
	c->device = d;
	c->async_fd = -1;
	return c;
}
int keel_ibv_close_device(struct ibv_context *c)
{
	free(c);
	return 0;
}
int keel_ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	(void)c;
	memset(a, 0, sizeof(*a));
	a->phys_port_cnt = 1;
	a->max_cqe = 65536;
	return 0;
}
int keel_ibv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
	(void)c;
	(void)port;
	memset(a, 0, sizeof(*a));
	a->state = IBV_PORT_ACTIVE;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	a->active_mtu = IBV_MTU_1024;
	return 0;
}
int keel_ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g,
		       uint32_t *type)
{
	(void)c;
	(void)port;
	memset(g, 0, sizeof(*g));
	if (index == 0) { /* link-local, RoCEv1: not the one to choose */
		g->raw[0] = 0xfe;
		g->raw[1] = 0x80;
		*type = IBV_GID_TYPE_ROCE_V1;
		return 0;
	}
	if (index == 1) {
		g->raw[10] = g->raw[11] = 0xff;
		g->raw[12] = 127;
		g->raw[15] = 1;
		*type = IBV_GID_TYPE_ROCE_V2;
		return 0;
	}
	return -EINVAL;
}
struct ibv_pd *keel_ibv_alloc_pd(struct ibv_context *c)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	pd->context = c;
	return pd;
}
int keel_ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	return 0;
}
struct ibv_mr *keel_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	(void)access;
	uint32_t i = 0;
	while (i < MRS && mrs[i] != NULL)
		i++;
	if (i == MRS || fake.fail_reg_mr) {
		errno = ENOMEM;
		return NULL;
	}
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	mr->lkey = mr->rkey = next_key++;
	mrs[i] = mr;
	fake.mrs++;
	return mr;
}
struct ibv_mr *keel_ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
				      int fd, int access)
{
	if (!fake.dmabuf) {
		errno = EOPNOTSUPP; /* as rdma-core says for a provider without dma-buf support */
		return NULL;
	}
	/* the importer's mapping first: a bad fd fails as rdma-core's would */
	void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
	if (map == MAP_FAILED)
		return NULL; /* errno from mmap (EBADF, EINVAL...) */
	struct ibv_mr *mr = keel_ibv_reg_mr(pd, (void *)(uintptr_t)iova, len, access);
	if (mr == NULL) {
		(void)munmap(map, len);
		return NULL;
	}
	for (uint32_t i = 0; i < MRS; i++)
		if (mrs[i] == mr)
			mr_maps[i] = map;
	return mr;
}
int keel_ibv_dereg_mr(struct ibv_mr *mr)
{
	for (uint32_t i = 0; i < MRS; i++)
		if (mrs[i] == mr) {
			if (mr_maps[i] != NULL)
				(void)munmap(mr_maps[i], mr->length);
			mrs[i] = NULL;
			mr_maps[i] = NULL;
		}
	fake.mrs--;
	free(mr);
	return 0;
}

/* The live registration with this lkey that holds all of the SGE, as its index, or -1. */
static int sge_mr(const struct ibv_sge *g)
{
	for (uint32_t i = 0; i < MRS; i++) {
		const struct ibv_mr *m = mrs[i];
		if (m != NULL && m->lkey == g->lkey && g->addr >= (uintptr_t)m->addr &&
		    g->addr + g->length <= (uintptr_t)m->addr + m->length)
			return (int)i;
	}
	return -1;
}

/* Where the NIC reads an SGE: through a dma-buf's mapping, or at its address. */
static const uint8_t *sge_bytes(const struct ibv_sge *g, int mr)
{
	if (mr >= 0 && mr_maps[mr] != NULL)
		return mr_maps[mr] + (g->addr - (uintptr_t)mrs[mr]->addr);
	return (const uint8_t *)(uintptr_t)g->addr;
}
/* Where an RDMA WRITE of `len` bytes at remote `addr` lands: inside the live registration
 * with that rkey (through a dma-buf's mapping, as a peer NIC writes device memory), or NULL,
 * a remote access error. */
static uint8_t *remote_bytes(uint32_t rkey, uint64_t addr, uint32_t len, bool *mapped)
{
	for (uint32_t i = 0; i < MRS; i++) {
		const struct ibv_mr *m = mrs[i];
		if (m == NULL || m->rkey != rkey || addr < (uintptr_t)m->addr ||
		    addr + len > (uintptr_t)m->addr + m->length)
			continue;
		*mapped = mr_maps[i] != NULL;
		if (*mapped)
			return mr_maps[i] + (addr - (uintptr_t)m->addr);
		return (uint8_t *)(uintptr_t)addr;
	}
	return NULL;
}

struct ibv_comp_channel *keel_ibv_create_comp_channel(struct ibv_context *c)
{
	struct fchan *f = calloc(1, sizeof(*f));
	f->ch.context = c;
	f->ch.fd = eventfd(0, EFD_NONBLOCK);
	return &f->ch;
}
int keel_ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	close(ch->fd);
	free(ch);
	return 0;
}
struct ibv_cq *keel_ibv_create_cq(struct ibv_context *c, int cqe, struct ibv_comp_channel *ch)
{
	struct fcq *f = calloc(1, sizeof(*f));
	f->chan = (struct fchan *)ch;
	f->cq.context = c;
	f->cq.cqe = cqe;
	return &f->cq;
}
int keel_ibv_destroy_cq(struct ibv_cq *cq)
{
	free(cq);
	return 0;
}
struct ibv_qp *keel_ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	if (fake.fail_create_qp || qp_count >= 256) {
		errno = ENOMEM;
		return NULL;
	}
	struct fqp *q = calloc(1, sizeof(*q));
	q->qp.pd = pd;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.qp_num = 0x100 + qp_count;
	qps[qp_count++] = q;
	return &q->qp;
}
int keel_ibv_destroy_qp(struct ibv_qp *qp)
{
	for (uint32_t i = 0; i < qp_count; i++)
		if (qps[i] == (struct fqp *)qp)
			qps[i] = NULL;
	free(qp);
	return 0;
}
int keel_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	if (mask & IBV_QP_DEST_QPN)
		((struct fqp *)qp)->dest = a->dest_qp_num;
	if ((mask & IBV_QP_STATE) && a->qp_state == IBV_QPS_ERR) {
		((struct fqp *)qp)->err = true;
		fake.qp_errors++;
	}
	return 0;
}

static struct fqp *find(uint32_t qpn)
{
	for (uint32_t i = 0; i < qp_count; i++)
		if (qps[i] != NULL && qps[i]->qp.qp_num == qpn && qpn != fake.dead_qpn)
			return qps[i];
	return NULL;
}

/* Execute one WR against the destination QP: its SGEs gathered in order, each checked against
 * the registrations unless the WR is inline (the provider copied it at post). */
static enum ibv_wc_status execute(struct fqp *d, const struct ibv_send_wr *wr)
{
	static uint8_t msg[1u << 20];
	uint32_t len = 0;
	for (int i = 0; i < wr->num_sge; i++) {
		const struct ibv_sge *g = &wr->sg_list[i];
		bool inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
		int mr = inl ? -1 : sge_mr(g);
		if ((!inl && mr < 0) || g->length > sizeof(msg) - len)
			return IBV_WC_LOC_PROT_ERR;
		/* inline: the provider copied it at post, from the address (host memory only) */
		memcpy(msg + len, sge_bytes(g, mr), g->length);
		len += g->length;
	}
	fake.gathers += wr->num_sge > 1;
	struct ibv_wc wc = {.status = IBV_WC_SUCCESS,
			    .wc_flags = IBV_WC_WITH_IMM,
			    .imm_data = wr->imm_data,
			    .byte_len = len};
	if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
		bool mapped = false;
		uint8_t *at = remote_bytes(wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, len, &mapped);
		if (at == NULL)
			return IBV_WC_REM_ACCESS_ERR;
		memcpy(at, msg, len);
		fake.device_writes += mapped;
	}
	if (wr->opcode == IBV_WR_RDMA_WRITE)
		return IBV_WC_SUCCESS;
	if (d->head == d->tail)
		return IBV_WC_RETRY_EXC_ERR; /* receiver not ready: a real NIC would RNR-retry */
	struct frecv *r = &d->rq[d->head++ % RING];
	if (wr->opcode == IBV_WR_SEND_WITH_IMM) {
		memcpy((void *)(uintptr_t)r->addr, msg, len);
		wc.opcode = IBV_WC_RECV;
	} else {
		wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
	}
	wc.wr_id = r->wr_id;
	push((struct fcq *)d->qp.recv_cq, &wc);
	return IBV_WC_SUCCESS;
}

void verbs_fake_release_send_wc(void)
{
	for (uint32_t i = 0; i < held_n; i++)
		push((struct fcq *)held_cq[i], &held[i]);
	held_n = 0;
}

struct ibv_qp *verbs_fake_qp(uint32_t qpn)
{
	struct fqp *q = find(qpn);
	return q != NULL ? &q->qp : NULL;
}

int keel_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fqp *q = (struct fqp *)qp;
	for (int i = 0; wr != NULL; wr = wr->next, i++) {
		fake.posted++;
		fake.writes += wr->opcode == IBV_WR_RDMA_WRITE;
		if (fake.fail_post_send_at >= 0 &&
		    fake.posted - 1 == (uint32_t)fake.fail_post_send_at) {
			*bad = wr;
			return ENOMEM;
		}
		struct fqp *d = find(q->dest);
		enum ibv_wc_status st = q->err	    ? IBV_WC_WR_FLUSH_ERR
					: d == NULL ? IBV_WC_RETRY_EXC_ERR
						    : execute(d, wr);
		if (st != IBV_WC_SUCCESS || (wr->send_flags & IBV_SEND_SIGNALED)) {
			struct ibv_wc wc = {
			    .wr_id = wr->wr_id, .status = st, .opcode = IBV_WC_SEND};
			if (fake.hold_send_wc && st == IBV_WC_SUCCESS && held_n < RING) {
				held[held_n] = wc; /* the NIC has not finished it yet */
				held_cq[held_n++] = q->qp.send_cq;
			} else {
				push((struct fcq *)q->qp.send_cq, &wc);
			}
		}
	}
	return 0;
}
int keel_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fqp *q = (struct fqp *)qp;
	(void)bad;
	for (; wr != NULL; wr = wr->next)
		q->rq[q->tail++ % RING] =
		    (struct frecv){wr->wr_id, wr->sg_list->addr, wr->sg_list->length};
	return 0;
}
int keel_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct fcq *c = (struct fcq *)cq;
	int got = 0;
	while (got < n && c->head != c->tail)
		wc[got++] = c->wc[c->head++ % RING];
	return got;
}
int keel_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	(void)solicited_only;
	((struct fcq *)cq)->armed = true;
	if (fake.on_notify != NULL) {
		void (*fn)(void *) = fake.on_notify;
		fake.on_notify = NULL; /* once */
		fn(fake.on_notify_ctx);
	}
	return 0;
}
int keel_ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
	struct fchan *f = (struct fchan *)ch;
	uint64_t n;
	if (f->events == 0) {
		errno = EAGAIN;
		return -1;
	}
	f->events--;
	if (f->events == 0)
		(void)!read(ch->fd, &n, sizeof(n));
	*cq = f->cq;
	*ctx = NULL;
	return 0;
}
void keel_ibv_ack_cq_events(struct ibv_cq *cq, unsigned n)
{
	(void)cq;
	(void)n;
}
int keel_ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev)
{
	(void)c;
	if (fake.async_pending == 0) {
		errno = EAGAIN;
		return -1;
	}
	fake.async_pending = 0;
	*ev = fake.async;
	return 0;
}
void keel_ibv_ack_async_event(struct ibv_async_event *ev)
{
	(void)ev;
}
