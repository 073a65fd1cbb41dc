/* The fake device behind tests/unit/test_verbs.c (see verbs_fake.c). */
#ifndef KEEL_VERBS_FAKE_H
#define KEEL_VERBS_FAKE_H

#include <stdbool.h>

#include "verbs_int.h"

struct verbs_fake {
	bool fail_create_qp;   /* ibv_create_qp returns NULL with ENOMEM */
	int fail_post_send_at; /* the n-th WR posted from now is the bad_wr (ENOMEM); -1 none */
	uint32_t posted;       /* WRs posted since reset */
	uint32_t writes;       /* of which plain RDMA WRITEs (credits, keepalives) */
	uint32_t dead_qpn;     /* a QP that no longer answers: RETRY_EXC completions */
	int async_pending;     /* deliver `async` on the next ibv_get_async_event */
	struct ibv_async_event async;
	/* called once from the next ibv_req_notify_cq, after arming: a completion that races
	 * the arming */
	void (*on_notify)(void *ctx);
	void *on_notify_ctx;
	bool dmabuf;	   /* ibv_reg_dmabuf_mr works (else EOPNOTSUPP, as on Soft-RoCE) */
	bool fail_reg_mr;  /* ibv_reg_mr returns NULL with ENOMEM */
	bool hold_send_wc; /* successful send completions wait for verbs_fake_release_send_wc */
	uint32_t gathers;  /* WRs executed with more than one SGE */
	uint32_t device_writes; /* RDMA WRITEs into a dma-buf registration (a device area) */
	uint32_t qp_errors;	/* QPs moved to the error state */
	int mrs;		/* registrations alive */
};
extern struct verbs_fake fake;

void verbs_fake_reset(void);
struct ibv_qp *verbs_fake_qp(uint32_t qpn);
void verbs_fake_push_wc(struct ibv_cq *cq, const struct ibv_wc *wc);
/* Complete the send work held by hold_send_wc, in order. */
void verbs_fake_release_send_wc(void);

#endif
