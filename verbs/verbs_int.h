/* The ibv_* calls the verbs backend makes, behind one seam (verbs/ibv_shim.c forwards each to
 * rdma-core). Several are static inlines in <infiniband/verbs.h>, which -Wl,--wrap cannot
 * reach: going through keel_ibv_* lets the unit tests put a fake device behind the backend. */
#ifndef KEEL_VERBS_INT_H
#define KEEL_VERBS_INT_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

struct ibv_device **keel_ibv_get_device_list(int *num);
void keel_ibv_free_device_list(struct ibv_device **list);
const char *keel_ibv_get_device_name(struct ibv_device *dev);
struct ibv_context *keel_ibv_open_device(struct ibv_device *dev);
int keel_ibv_close_device(struct ibv_context *ctx);
int keel_ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr);
int keel_ibv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
/* gid and its type (IBV_GID_TYPE_*); -errno, -ENODATA for an empty entry. */
int keel_ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid,
		       uint32_t *type);
struct ibv_pd *keel_ibv_alloc_pd(struct ibv_context *ctx);
int keel_ibv_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *keel_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);
int keel_ibv_dereg_mr(struct ibv_mr *mr);
/* Device memory exported as a dma-buf (GPUDirect RDMA); NULL with errno EOPNOTSUPP where the
 * provider or the library cannot. iova: the address work requests name it by. */
struct ibv_mr *keel_ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
				      int fd, int access);
struct ibv_comp_channel *keel_ibv_create_comp_channel(struct ibv_context *ctx);
int keel_ibv_destroy_comp_channel(struct ibv_comp_channel *ch);
struct ibv_cq *keel_ibv_create_cq(struct ibv_context *ctx, int cqe, struct ibv_comp_channel *ch);
int keel_ibv_destroy_cq(struct ibv_cq *cq);
struct ibv_qp *keel_ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
int keel_ibv_destroy_qp(struct ibv_qp *qp);
int keel_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int keel_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int keel_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int keel_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int keel_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int keel_ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx);
void keel_ibv_ack_cq_events(struct ibv_cq *cq, unsigned n);
int keel_ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev);
void keel_ibv_ack_async_event(struct ibv_async_event *ev);

#endif
