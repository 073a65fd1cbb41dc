/* Forwarding of every ibv_* call the verbs backend makes (see verbs_int.h). Thin on purpose:
 * conventions are converted in transport_verbs.c, not here. Never allocates itself. */
#include <errno.h>

#include "verbs_int.h"

struct ibv_device **keel_ibv_get_device_list(int *num)
{
	return ibv_get_device_list(num);
}

void keel_ibv_free_device_list(struct ibv_device **list)
{
	ibv_free_device_list(list);
}

const char *keel_ibv_get_device_name(struct ibv_device *dev)
{
	return ibv_get_device_name(dev);
}

struct ibv_context *keel_ibv_open_device(struct ibv_device *dev)
{
	return ibv_open_device(dev);
}

int keel_ibv_close_device(struct ibv_context *ctx)
{
	return ibv_close_device(ctx);
}

int keel_ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	return ibv_query_device(ctx, attr);
}

int keel_ibv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return ibv_query_port(ctx, port, attr);
}

int keel_ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid,
		       uint32_t *type)
{
	struct ibv_gid_entry e;
	int rc = ibv_query_gid_ex(ctx, port, (uint32_t)index, &e, 0);
	if (rc != 0)
		return rc > 0 ? -rc : -EIO;
	*gid = e.gid;
	*type = e.gid_type;
	return 0;
}

struct ibv_pd *keel_ibv_alloc_pd(struct ibv_context *ctx)
{
	return ibv_alloc_pd(ctx);
}

int keel_ibv_dealloc_pd(struct ibv_pd *pd)
{
	return ibv_dealloc_pd(pd);
}

struct ibv_mr *keel_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return ibv_reg_mr(pd, addr, len, access);
}

struct ibv_mr *keel_ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
				      int fd, int access)
{
	return ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access);
}

int keel_ibv_dereg_mr(struct ibv_mr *mr)
{
	return ibv_dereg_mr(mr);
}

struct ibv_comp_channel *keel_ibv_create_comp_channel(struct ibv_context *ctx)
{
	return ibv_create_comp_channel(ctx);
}

int keel_ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	return ibv_destroy_comp_channel(ch);
}

struct ibv_cq *keel_ibv_create_cq(struct ibv_context *ctx, int cqe, struct ibv_comp_channel *ch)
{
	return ibv_create_cq(ctx, cqe, NULL, ch, 0);
}

int keel_ibv_destroy_cq(struct ibv_cq *cq)
{
	return ibv_destroy_cq(cq);
}

struct ibv_qp *keel_ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return ibv_create_qp(pd, attr);
}

int keel_ibv_destroy_qp(struct ibv_qp *qp)
{
	return ibv_destroy_qp(qp);
}

int keel_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	return ibv_modify_qp(qp, attr, mask);
}

int keel_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}

int keel_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return ibv_post_recv(qp, wr, bad);
}

int keel_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, n, wc);
}

int keel_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return ibv_req_notify_cq(cq, solicited_only);
}

int keel_ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
	return ibv_get_cq_event(ch, cq, ctx);
}

void keel_ibv_ack_cq_events(struct ibv_cq *cq, unsigned n)
{
	ibv_ack_cq_events(cq, n);
}

int keel_ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	return ibv_get_async_event(ctx, ev);
}

void keel_ibv_ack_async_event(struct ibv_async_event *ev)
{
	ibv_ack_async_event(ev);
}
