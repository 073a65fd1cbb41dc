/* The verbs backend against a fake device (tests/support/verbs_fake.c): two transports in one
 * process joined by the fake fabric. Covers the data path (inline SEND, SEND, WRITE_WITH_IMM),
 * credits, forged and stale immediates, a bad_wr in the middle of a chain, a retry-exceeded
 * completion, keepalives to a peer that died holding every slot, ENOMEM at QP creation, async
 * events and event-mode wakeups. The real device is exercised in the VM (tests/vm/). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>

#include <cmocka.h>

#include "guarded_mem.h"
#include "keel/transport_verbs.h"
#include "verbs_fake.h"

#define SLOTS 4u
#define SLOT  4096u

struct pair {
	struct keel_transport *t[2];
	void *mem[2];
};

static void cfg_of(struct keel_verbs_config *c, uint32_t rank)
{
	keel_verbs_config_default(c);
	c->rank = rank;
	c->world_size = 2;
	c->slot_bytes = SLOT;
	c->slot_count = SLOTS;
	c->send_max_bytes = 1024;
	c->inline_bytes = 64;
}

static void pair_up_mode(struct pair *p, enum keel_verbs_poll_mode mode)
{
	verbs_fake_reset();
	for (uint32_t r = 0; r < 2; r++) {
		struct keel_verbs_config c;
		cfg_of(&c, r);
		c.poll_mode = mode;
		size_t sz = keel_verbs_storage_size(&c);
		assert_true(sz > 0);
		p->mem[r] = calloc(1, sz);
		assert_int_equal(keel_verbs_init(&p->t[r], p->mem[r], sz, &c), 0);
		assert_int_equal(keel_verbs_gid_index(p->t[r]), 1); /* RoCEv2, IPv4-mapped */
	}
	for (uint32_t r = 0; r < 2; r++) {
		struct keel_verbs_addr a;
		keel_verbs_local_addr(p->t[1 - r], &a);
		assert_int_equal(
		    keel_verbs_connect(p->t[r], 1 - r, &a, keel_verbs_local_qpn(p->t[1 - r], r)),
		    0);
	}
}

static void pair_up(struct pair *p)
{
	pair_up_mode(p, KEEL_VERBS_POLL_BUSY);
}

static void pair_down(struct pair *p)
{
	for (uint32_t r = 0; r < 2; r++) {
		p->t[r]->ops->fini(p->t[r]);
		p->t[r]->ops->fini(p->t[r]); /* twice is safe */
		free(p->mem[r]);
	}
}

static int send_one(struct keel_transport *t, uint32_t peer, uint8_t *buf, uint32_t len)
{
	struct keel_datagram d = {.buf = buf, .len = len, .cap = len, .peer = peer};
	return t->ops->send_burst(t, 0, &d, 1);
}

static int recv_some(struct keel_transport *t, uint8_t (*bufs)[SLOT], struct keel_datagram *d,
		     uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		d[i] = (struct keel_datagram){.buf = bufs[i], .cap = SLOT};
	return t->ops->recv_burst(t, 0, d, n);
}

static void test_verbs_config(void **state)
{
	(void)state;
	struct keel_verbs_config c;
	cfg_of(&c, 0);
	c.slot_count = 3; /* not a power of two */
	assert_int_equal(keel_verbs_storage_size(&c), 0);
	cfg_of(&c, 2); /* rank >= world */
	assert_int_equal(keel_verbs_storage_size(&c), 0);
	struct keel_transport *t = (void *)1;
	uint8_t mem[64];
	assert_int_equal(keel_verbs_init(&t, mem, sizeof(mem), &c), -EINVAL);
	assert_null(t);
	cfg_of(&c, 0);
	assert_int_equal(keel_verbs_init(&t, mem, sizeof(mem), &c), -ENOSPC);
	c.timeout = 14;
	c.retry_cnt = 7;
	/* 8 tries x 4.096 us x 2^14 = 537 ms */
	assert_int_equal(keel_verbs_nic_detect_ns(&c) / 1000000, 536);
}

/* Every path of the data plane, in order, with credits running out and coming back. */
static void test_verbs_data_path_and_credits(void **state)
{
	(void)state;
	struct pair p;
	pair_up(&p);
	assert_true((p.t[0]->caps & KEEL_CAP_RELIABLE) && (p.t[0]->caps & KEEL_CAP_ORDERED));
	static uint8_t out[SLOT], in[8][SLOT];
	struct keel_datagram d[8];
	uint32_t sizes[] = {16, 900, 3000, SLOT}; /* inline SEND, SEND, WRITE_IMM, full slot */
	for (uint32_t round = 0; round < 5; round++) {
		for (uint32_t i = 0; i < 4; i++) {
			memset(out, (int)(round * 4 + i), sizes[i]);
			assert_int_equal(send_one(p.t[0], 1, out, sizes[i]), 1);
		}
		/* four messages sit in the peer's four slots: no credit left */
		assert_int_equal(send_one(p.t[0], 1, out, 16), 0);
		int got = recv_some(p.t[1], in, d, 8);
		assert_int_equal(got, 4);
		for (uint32_t i = 0; i < 4; i++) {
			assert_int_equal(d[i].len, sizes[i]);
			assert_int_equal(d[i].peer, 0);
			assert_int_equal(in[i][sizes[i] - 1], (uint8_t)(round * 4 + i));
		}
	}
	struct keel_verbs_stats s;
	keel_verbs_stats_get(p.t[0], &s);
	assert_true(s.tx_send_inline >= 5 && s.tx_write_imm >= 10 && s.tx_no_credit >= 5);
	keel_verbs_stats_get(p.t[1], &s);
	assert_int_equal(s.rx_delivered, 20);
	assert_true(s.tx_credit_writes >= 5);
	/* bad arguments */
	assert_int_equal(send_one(p.t[0], 0, out, 16), -EINVAL);       /* itself */
	assert_int_equal(send_one(p.t[0], 7, out, 16), -EINVAL);       /* no such rank */
	assert_int_equal(send_one(p.t[0], 1, out, SLOT + 8), -EINVAL); /* beyond mtu */
	pair_down(&p);
}

/* A forged immediate (wrong slot) and a stale one (right slot, old lap) are not trusted. */
static void forge(struct pair *p, uint32_t imm)
{
	static uint8_t junk[64];
	struct ibv_sge sge = {.addr = (uintptr_t)junk, .length = 64};
	struct ibv_send_wr wr = {.sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_INLINE, /* junk is not registered */
				 .imm_data = htonl(imm)},
			   *bad = NULL;
	struct ibv_qp *qp = verbs_fake_qp(keel_verbs_local_qpn(p->t[0], 1));
	assert_non_null(qp);
	assert_int_equal(keel_ibv_post_send(qp, &wr, &bad), 0);
}

static void test_verbs_forged_immediates_rejected(void **state)
{
	(void)state;
	uint32_t imms[] = {3u << 20 | 0,     /* slot 3 when slot 0 is next */
			   0u << 20 | 7,     /* slot 0 but lap 7 (stale or forged) */
			   4095u << 20 | 0}; /* beyond the slot count */
	for (uint32_t k = 0; k < 3; k++) {
		struct pair p;
		pair_up(&p);
		forge(&p, imms[k]);
		static uint8_t in[8][SLOT], out[64];
		struct keel_datagram d[8];
		assert_int_equal(recv_some(p.t[1], in, d, 8), 0);
		struct keel_verbs_stats s;
		keel_verbs_stats_get(p.t[1], &s);
		assert_int_equal(s.rx_bad_imm, 1);
		assert_true(keel_verbs_peer_failed(p.t[1], 0));
		/* nothing from that peer is delivered any more */
		assert_int_equal(send_one(p.t[0], 1, out, 32), 1);
		assert_int_equal(recv_some(p.t[1], in, d, 8), 0);
		pair_down(&p);
	}
}

static int send_two(struct keel_transport *t, uint32_t peer, uint8_t *head, uint32_t len,
		    const uint8_t *tail, uint32_t tail_len)
{
	struct keel_datagram d = {
	    .buf = head, .len = len, .peer = peer, .tail = tail, .tail_len = tail_len};
	return t->ops->send_burst(t, 0, &d, 1);
}

/* Send `total` bytes of a pattern as header + tail (cut at `cut`, the tail from `src`), and
 * check the peer gets them whole. */
/* Send src[0..total) as a header (its first `cut` bytes, copied) and a tail left where it
 * lies; `cpu` is where the test itself reads and writes those bytes (src itself for host
 * memory, the working mapping for device memory the CPU must not touch). */
static void two_pieces_arrive_whole(struct pair *p, uint8_t *src, uint8_t *cpu, uint32_t total,
				    uint32_t cut)
{
	static uint8_t head[SLOT], in[8][SLOT];
	struct keel_datagram d[8];
	for (uint32_t i = 0; i < total; i++)
		cpu[i] = (uint8_t)(i * 7 + total + cut);
	memcpy(head, cpu, cut);
	assert_int_equal(send_two(p->t[0], 1, head, cut, src + cut, total - cut), 1);
	memset(head, 0xee, cut); /* sent: the header is the transport's now */
	assert_int_equal(recv_some(p->t[1], in, d, 8), 1);
	assert_int_equal(d[0].len, total);
	assert_memory_equal(in[0], cpu, total);
}

/* KEEL_CAP_GATHER: a header and a tail arrive as one datagram by every way a datagram goes
 * (inline SEND, SEND, WRITE_WITH_IMM, a full slot), at every kind of cut; with nothing
 * registered every tail is copied, none read by the NIC where it lies. */
static void test_verbs_two_pieces(void **state)
{
	(void)state;
	struct pair p;
	pair_up(&p);
	assert_true(p.t[0]->caps & KEEL_CAP_GATHER);
	static uint8_t src[SLOT];
	uint32_t sizes[] = {16, 64, 65, 900, 1024, 1025, 3000, SLOT};
	for (uint32_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t cuts[] = {1, 8, sizes[i] / 2, sizes[i] - 1, sizes[i]};
		for (uint32_t c = 0; c < 5; c++)
			two_pieces_arrive_whole(&p, src, src, sizes[i], cuts[c]);
	}
	struct keel_verbs_stats st;
	keel_verbs_stats_get(p.t[0], &st);
	assert_int_equal(st.tx_zero_copy, 0);
	assert_true(st.tx_send_inline > 0 && st.tx_send > st.tx_send_inline && st.tx_write_imm > 0);
	/* too long in all, or an empty piece given without bytes: refused whole */
	static uint8_t h[8];
	assert_int_equal(send_two(p.t[0], 1, h, 8, src, SLOT), -EINVAL);
	assert_int_equal(send_two(p.t[0], 1, h, 8, NULL, 4), -EINVAL);
	pair_down(&p);
}

/* A tail inside a registered region goes from where it lies (the fake checks every SGE against
 * the live registrations, so a tail named with the slots' key fails), one straddling its
 * edge is copied; the region cannot be let go while the NIC may still read it. */
static void test_verbs_registered_tails_zero_copy(void **state)
{
	(void)state;
	struct pair p;
	pair_up(&p);
	static uint8_t grad[4 * SLOT];
	int mrs = fake.mrs;
	assert_int_equal(keel_verbs_register(p.t[0], grad, 2 * SLOT), 0);
	assert_int_equal(fake.mrs, mrs + 1);
	/* SEND and WRITE_WITH_IMM from inside the region, both ends of it */
	two_pieces_arrive_whole(&p, grad, grad, 900, 40);
	two_pieces_arrive_whole(&p, grad, grad, 3000, 40);
	two_pieces_arrive_whole(&p, grad + SLOT, grad + SLOT, SLOT, 40);
	struct keel_verbs_stats st;
	keel_verbs_stats_get(p.t[0], &st);
	assert_int_equal(st.tx_zero_copy, 3);
	assert_int_equal(fake.gathers, 3);
	/* an inline datagram is copied by the provider; a tail past the region's end is copied,
	 * and so is one lying wholly above it (or below) */
	two_pieces_arrive_whole(&p, grad, grad, 32, 8);
	two_pieces_arrive_whole(&p, grad + 2 * SLOT - 100, grad + 2 * SLOT - 100, 3000, 40);
	two_pieces_arrive_whole(&p, grad + 2 * SLOT + 8, grad + 2 * SLOT + 8, 3000, 40);
	assert_int_equal(keel_verbs_unregister(p.t[0], grad), 0);
	assert_int_equal(keel_verbs_register(p.t[0], grad + SLOT, SLOT), 0);
	two_pieces_arrive_whole(&p, grad, grad, 900, 40);
	assert_int_equal(keel_verbs_unregister(p.t[0], grad + SLOT), 0);
	assert_int_equal(keel_verbs_register(p.t[0], grad, 2 * SLOT), 0);
	assert_false(keel_verbs_peer_failed(p.t[0], 1));
	keel_verbs_stats_get(p.t[0], &st);
	assert_int_equal(st.tx_zero_copy, 3);

	/* the NIC has not finished a send that reads it: not let go */
	fake.hold_send_wc = true;
	two_pieces_arrive_whole(&p, grad, grad, 3000, 40);
	assert_int_equal(keel_verbs_unregister(p.t[0], grad), -EBUSY);
	verbs_fake_release_send_wc();
	fake.hold_send_wc = false;
	assert_int_equal(keel_verbs_unregister(p.t[0], grad), 0);
	assert_int_equal(fake.mrs, mrs);
	assert_int_equal(keel_verbs_unregister(p.t[0], grad), -ENOENT);
	/* registered no more: copied again */
	two_pieces_arrive_whole(&p, grad, grad, 3000, 40);
	keel_verbs_stats_get(p.t[0], &st);
	assert_int_equal(st.tx_zero_copy, 4);
	pair_down(&p);
}

/* A peer that fails holds nothing: its QP goes to the error state, so a region it was still
 * reading may be let go at once. */
static void test_verbs_failed_peer_releases_regions(void **state)
{
	(void)state;
	struct pair p;
	pair_up(&p);
	static uint8_t grad[2 * SLOT];
	assert_int_equal(keel_verbs_register(p.t[0], grad, sizeof(grad)), 0);
	fake.hold_send_wc = true;
	two_pieces_arrive_whole(&p, grad, grad, 3000, 40);
	assert_int_equal(keel_verbs_unregister(p.t[0], grad), -EBUSY);
	uint32_t errs = fake.qp_errors;
	/* the peer dies: the next send to it ends in a retry-exceeded completion */
	fake.dead_qpn = keel_verbs_local_qpn(p.t[1], 0);
	static uint8_t h[64];
	assert_int_equal(send_one(p.t[0], 1, h, sizeof(h)), 1);
	static uint8_t in[8][SLOT];
	struct keel_datagram d[8];
	(void)recv_some(p.t[0], in, d, 8);
	assert_true(keel_verbs_peer_failed(p.t[0], 1));
	assert_int_equal(fake.qp_errors, errs + 1);
	assert_int_equal(keel_verbs_unregister(p.t[0], grad), 0);
	fake.hold_send_wc = false;
	pair_down(&p);
}

/* What registration refuses, by name; dma-bufs where the provider cannot take them. */
static void test_verbs_register_errors(void **state)
{
	(void)state;
	struct pair p;
	pair_up(&p);
	static uint8_t mem[16][256];
	assert_int_equal(keel_verbs_register(p.t[0], NULL, 64), -EINVAL);
	assert_int_equal(keel_verbs_register(p.t[0], mem[0], 0), -EINVAL);
	assert_int_equal(keel_verbs_register(p.t[0], mem[0], 512), 0);
	assert_int_equal(keel_verbs_register(p.t[0], mem[1], 10), -EINVAL); /* overlaps */
	for (uint32_t i = 1; i < KEEL_VERBS_REGIONS_MAX; i++)
		assert_int_equal(keel_verbs_register(p.t[0], mem[2 + i], 100), 0);
	assert_int_equal(keel_verbs_register(p.t[0], mem[15], 100), -ENOSPC);
	assert_int_equal(keel_verbs_unregister(p.t[0], mem[0] + 1), -ENOENT);
	assert_int_equal(keel_verbs_unregister(p.t[0], mem[0]), 0);
	fake.fail_reg_mr = true;
	assert_int_equal(keel_verbs_register(p.t[0], mem[0], 100), -ENOMEM);
	fake.fail_reg_mr = false;
	/* Soft-RoCE and older providers: the caller stages instead */
	assert_int_equal(keel_verbs_register_dmabuf(p.t[0], mem[0], 100, 3, 0), -EOPNOTSUPP);
	assert_int_equal(keel_verbs_register_dmabuf(p.t[0], mem[0], 100, -1, 0), -EINVAL);
	/* not a verbs transport */
	struct keel_transport other = *p.t[0];
	static const struct keel_transport_ops other_ops = {.name = "other"};
	other.ops = &other_ops;
	assert_int_equal(keel_verbs_register(&other, mem[0], 100), -EINVAL);
	assert_int_equal(keel_verbs_unregister(&other, mem[0]), -EINVAL);
	/* fini lets go of what is still registered */
	int before = fake.mrs;
	pair_down(&p);
	assert_int_equal(fake.mrs, before - (KEEL_VERBS_REGIONS_MAX - 1) - 2);
}

/* A provider that registers dma-bufs (mlx5 with a GPU's memory): tails in it go from where they
 * lie, named by the device address (the iova). The "device memory" faults when the CPU
 * touches it (guarded_mem.h); the fake NIC reads it through the dma-buf (the memfd), as an
 * importer does, so a transport that copied or inlined such a tail would crash here. */
static void test_verbs_dmabuf_tails(void **state)
{
	(void)state;
	struct pair p;
	pair_up(&p);
	fake.dmabuf = true;
	struct guarded_mem dev;
	assert_int_equal(guarded_mem_map(&dev, NULL, 2 * SLOT), 0);
	uint8_t *tail_lo = dev.view + 4096; /* registered from an offset into the dma-buf */
	assert_int_equal(keel_verbs_register_dmabuf(p.t[0], tail_lo, SLOT, dev.fd, 4096), 0);
	two_pieces_arrive_whole(&p, tail_lo, dev.work + 4096, 3000, 64);
	/* small enough to inline, but the CPU must not read device memory: gathered too */
	two_pieces_arrive_whole(&p, tail_lo, dev.work + 4096, 40, 8);
	struct keel_verbs_stats st;
	keel_verbs_stats_get(p.t[0], &st);
	assert_int_equal(st.tx_zero_copy, 2);
	assert_int_equal(keel_verbs_unregister(p.t[0], tail_lo), 0);
	/* a descriptor the provider cannot map as a dma-buf (a pipe) is refused with its errno */
	int pipe_fd[2];
	assert_int_equal(pipe(pipe_fd), 0);
	assert_int_equal(keel_verbs_register_dmabuf(p.t[0], tail_lo, SLOT, pipe_fd[0], 0), -EACCES);
	close(pipe_fd[0]);
	close(pipe_fd[1]);
	assert_int_equal(guarded_mem_unmap(&dev), 0);
	fake.dmabuf = false;
	pair_down(&p);
}

/* device_tail_ok says yes only for bytes inside one dma-buf registration, to a connected
 * peer; a datagram marked KEEL_DGRAM_DEVICE_TAIL whose tail lies anywhere else is refused
 * (counted), never copied by the CPU; what the QP delivers is marked LINK_CHECKED. */
static void test_verbs_device_tails(void **state)
{
	(void)state;
	struct pair p;
	pair_up(&p);
	fake.dmabuf = true;
	struct keel_transport *t = p.t[0];
	struct guarded_mem dev;
	assert_int_equal(guarded_mem_map(&dev, NULL, 2 * SLOT), 0);
	static uint8_t host[SLOT];
	assert_false(t->ops->device_tail_ok(t, 1, dev.view, 64)); /* nothing registered */
	assert_int_equal(keel_verbs_register_dmabuf(t, dev.view, SLOT, dev.fd, 0), 0);
	assert_int_equal(keel_verbs_register(t, host, SLOT), 0);
	assert_true(t->ops->device_tail_ok(t, 1, dev.view, SLOT));
	assert_true(t->ops->device_tail_ok(t, 1, dev.view + 100, 64));
	assert_false(t->ops->device_tail_ok(t, 1, dev.view + 100, SLOT)); /* runs past it */
	assert_false(t->ops->device_tail_ok(t, 1, host, 64));		  /* host memory */
	assert_false(t->ops->device_tail_ok(t, 0, dev.view, 64));	  /* itself */
	assert_false(t->ops->device_tail_ok(t, 2, dev.view, 64));	  /* no such rank */
	assert_false(t->ops->device_tail_ok(t, 1, dev.view, 0));
	static uint8_t head[64], in[8][SLOT];
	memset(head, 0x11, sizeof(head));
	struct keel_datagram d = {.buf = head,
				  .len = 64,
				  .tail = host,
				  .tail_len = 300,
				  .peer = 1,
				  .flags = KEEL_DGRAM_DEVICE_TAIL};
	assert_int_equal(t->ops->send_burst(t, 0, &d, 1), 0); /* refused, not copied */
	struct keel_verbs_stats st;
	keel_verbs_stats_get(t, &st);
	assert_true(st.tx_device_refused > 0); /* each try at it */
	d.tail = dev.view + 100;	       /* inside the dma-buf: the NIC reads it */
	memset(dev.work + 100, 0x77, 300);
	assert_int_equal(t->ops->send_burst(t, 0, &d, 1), 1);
	struct keel_datagram r[8];
	assert_int_equal(recv_some(p.t[1], in, r, 8), 1);
	assert_int_equal(r[0].len, 364);
	assert_true((r[0].flags & KEEL_DGRAM_LINK_CHECKED) != 0);
	assert_memory_equal(in[0] + 64, dev.work + 100, 300);
	assert_int_equal(keel_verbs_unregister(t, host), 0);
	assert_int_equal(keel_verbs_unregister(t, dev.view), 0);
	assert_false(t->ops->device_tail_ok(t, 1, dev.view, 64)); /* gone with its region */
	assert_int_equal(guarded_mem_unmap(&dev), 0);
	fake.dmabuf = false;
	pair_down(&p);
}

/* A chain of four to one peer whose third WR is the bad_wr: two accepted, the rest offered
 * again later arrives in order. */
static void test_verbs_bad_wr_mid_chain(void **state)
{
	(void)state;
	struct pair p;
	pair_up(&p);
	static uint8_t out[4][64], in[8][SLOT];
	struct keel_datagram d[4], r[8];
	for (uint32_t i = 0; i < 4; i++) {
		memset(out[i], (int)i + 1, 64);
		d[i] = (struct keel_datagram){.buf = out[i], .len = 64, .cap = 64, .peer = 1};
	}
	fake.posted = 0;
	fake.fail_post_send_at = 2;
	assert_int_equal(p.t[0]->ops->send_burst(p.t[0], 0, d, 4), 2);
	fake.fail_post_send_at = -1;
	assert_int_equal(p.t[0]->ops->send_burst(p.t[0], 0, d + 2, 2), 2);
	assert_int_equal(recv_some(p.t[1], in, r, 8), 4);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(in[i][0], i + 1);
	struct keel_verbs_stats s;
	keel_verbs_stats_get(p.t[0], &s);
	assert_int_equal(s.tx_bad_wr, 1);
	assert_false(keel_verbs_peer_failed(p.t[0], 1)); /* a full queue is not a failure */
	pair_down(&p);
}

/* The peer stops answering: IBV_WC_RETRY_EXC_ERR marks it failed; sends to it are accepted
 * and dropped (it falls silent for the detector), never an error for the whole transport. */
static void test_verbs_retry_exceeded(void **state)
{
	(void)state;
	struct pair p;
	pair_up(&p);
	static uint8_t out[64], in[8][SLOT];
	struct keel_datagram r[8];
	fake.dead_qpn = keel_verbs_local_qpn(p.t[1], 0);
	assert_int_equal(send_one(p.t[0], 1, out, 64), 1);
	assert_int_equal(recv_some(p.t[0], in, r, 8), 0);
	assert_true(keel_verbs_peer_failed(p.t[0], 1));
	struct keel_verbs_stats s;
	keel_verbs_stats_get(p.t[0], &s);
	assert_int_equal(s.wc_retry_exc, 1);
	assert_int_equal(send_one(p.t[0], 1, out, 64), 1);
	keel_verbs_stats_get(p.t[0], &s);
	assert_int_equal(s.tx_dropped_failed, 1);
	pair_down(&p);
}

static int recv_at(struct keel_transport *t, uint64_t now_ns)
{
	static uint8_t in[8][SLOT];
	struct keel_datagram d[8];
	for (uint32_t i = 0; i < 8; i++)
		d[i] = (struct keel_datagram){.buf = in[i], .cap = SLOT};
	return t->ops->recv_burst(t, now_ns, d, 8);
}

/* An empty burst: forgets the last burst's wait for credits (its own short poll deadline). */
static void no_send(struct keel_transport *t, uint64_t now_ns)
{
	struct keel_datagram d = {0};
	assert_int_equal(t->ops->send_burst(t, now_ns, &d, 0), 0);
}

static void fill_peer(struct keel_transport *t, uint64_t now_ns)
{
	static uint8_t out[64];
	struct keel_datagram d = {.buf = out, .len = 64, .cap = 64, .peer = 1};
	for (uint32_t i = 0; i < SLOTS; i++)
		assert_int_equal(t->ops->send_burst(t, now_ns, &d, 1), 1);
	assert_int_equal(t->ops->send_burst(t, now_ns, &d, 1), 0); /* no credit left */
}

/* A peer that dies holding all our slots leaves nothing outstanding at the NIC: a keepalive
 * credit write, once per ACK timeout while the peer holds our messages and gets no other post,
 * gives the NIC something to retry; its retry-exceeded completion marks the peer failed. */
static void test_verbs_keepalive_detects_dead_peer(void **state)
{
	(void)state;
	const uint64_t ka = 4096ull << 14; /* the ACK timeout of the default config: 67 ms */
	struct pair p;
	pair_up(&p);
	struct keel_transport *a = p.t[0];
	struct keel_verbs_stats s;
	fill_peer(a, 0);
	/* not before a whole period without a post to the peer; the sleeper is told when */
	fake.writes = 0;
	assert_int_equal(recv_at(a, ka / 2), 0);
	assert_int_equal(fake.writes, 0);
	no_send(a, ka / 2);
	assert_int_equal(a->ops->next_deadline_ns(a), ka); /* a period after the last post */
	/* a live peer: the rewrite of an unchanged credit word is harmless to it */
	assert_int_equal(recv_at(a, 2 * ka), 0);
	assert_int_equal(fake.writes, 1);
	assert_int_equal(recv_at(a, 2 * ka + ka / 2), 0); /* rate-limited */
	assert_int_equal(fake.writes, 1);
	keel_verbs_stats_get(a, &s);
	assert_int_equal(s.tx_keepalive_writes, 1);
	assert_false(keel_verbs_peer_failed(a, 1));
	assert_int_equal(recv_at(p.t[1], 2 * ka), (int)SLOTS); /* credits come back */
	keel_verbs_stats_get(p.t[1], &s);
	assert_int_equal(s.rx_bad_credit, 0);
	assert_false(keel_verbs_peer_failed(p.t[1], 0));
	/* everything consumed: nothing to keep alive, and no wakeup asked for it */
	fake.writes = 0;
	assert_int_equal(recv_at(a, 10 * ka), 0);
	assert_int_equal(recv_at(a, 20 * ka), 0);
	assert_int_equal(fake.writes, 0);
	no_send(a, 20 * ka);
	assert_int_equal(a->ops->next_deadline_ns(a), UINT64_MAX);
	/* full again, then the peer dies: the keepalive's RETRY_EXC fails it */
	fill_peer(a, 30 * ka);
	fake.dead_qpn = keel_verbs_local_qpn(p.t[1], 0);
	assert_int_equal(recv_at(a, 30 * ka + ka / 2), 0);
	assert_false(keel_verbs_peer_failed(a, 1));
	for (int i = 0; i < 2; i++)
		assert_int_equal(recv_at(a, 31 * ka + (uint64_t)i), 0);
	assert_true(keel_verbs_peer_failed(a, 1));
	keel_verbs_stats_get(a, &s);
	assert_int_equal(s.tx_keepalive_writes, 2);
	assert_int_equal(s.wc_retry_exc, 1);
	assert_int_equal(s.peers_failed, 1);
	/* a failed peer gets no more keepalives */
	fake.writes = 0;
	assert_int_equal(recv_at(a, 40 * ka), 0);
	assert_int_equal(fake.writes, 0);
	pair_down(&p);
}

static void test_verbs_create_qp_enomem(void **state)
{
	(void)state;
	verbs_fake_reset();
	fake.fail_create_qp = true;
	struct keel_verbs_config c;
	cfg_of(&c, 0);
	size_t sz = keel_verbs_storage_size(&c);
	void *mem = calloc(1, sz);
	struct keel_transport *t = (void *)1;
	assert_int_equal(keel_verbs_init(&t, mem, sz, &c), -ENOMEM);
	assert_null(t);
	free(mem);
}

/* A fatal device event takes the transport down: KEEL_ETRANSPORT, not a hang. */
static void test_verbs_device_fatal(void **state)
{
	(void)state;
	struct pair p;
	pair_up(&p);
	static uint8_t in[8][SLOT];
	struct keel_datagram r[8];
	fake.async.event_type = IBV_EVENT_DEVICE_FATAL;
	fake.async_pending = 1;
	int rc = 0;
	for (int i = 0; i < 128 && rc == 0; i++)
		rc = recv_some(p.t[0], in, r, 8);
	assert_int_equal(rc, KEEL_ETRANSPORT);
	pair_down(&p);
}

/* Poll an idle transport until it may sleep (a few calls: completions of its own credit writes
 * come first); nothing is delivered on the way. */
static void settle(struct keel_transport *a, uint8_t (*bufs)[SLOT], struct keel_datagram *d)
{
	for (int i = 0; i < 4 && a->ops->next_deadline_ns(a) != UINT64_MAX; i++)
		assert_int_equal(recv_some(a, bufs, d, 4), 0);
	assert_int_equal(a->ops->next_deadline_ns(a), UINT64_MAX);
}

static void send_from_1(void *ctx)
{
	struct pair *p = ctx;
	uint8_t msg[16] = {7};
	assert_int_equal(send_one(p->t[1], 0, msg, sizeof(msg)), 1);
}

/* Event mode: a caller that sleeps on wait_fd until next_deadline must never sleep through a
 * completion. An event disarms the channel: until recv_burst re-arms it, next_deadline is
 * "now"; a completion that lands between the last poll and the arming is delivered at once. */
static void test_verbs_event_mode_wakeups(void **state)
{
	(void)state;
	struct pair p;
	pair_up_mode(&p, KEEL_VERBS_POLL_EVENT);
	struct keel_transport *a = p.t[0];
	static uint8_t bufs[4][SLOT];
	struct keel_datagram d[4];
	uint8_t msg[16] = {1};
	int fd = a->ops->wait_fd(a);
	assert_true(fd >= 0);
	assert_int_equal(recv_some(a, bufs, d, 4), 0); /* empty: arms the channel */
	settle(a, bufs, d);			       /* then it may sleep */
	assert_int_equal(send_one(p.t[1], 0, msg, sizeof(msg)), 1);
	assert_int_equal(recv_some(a, bufs, d, 4), 1); /* the event, then the datagram */
	/* the channel is spent: a second completion raises no event, so no sleeping now */
	assert_int_equal(send_one(p.t[1], 0, msg, sizeof(msg)), 1);
	assert_true(a->ops->next_deadline_ns(a) != UINT64_MAX);
	assert_int_equal(recv_some(a, bufs, d, 4), 1);
	settle(a, bufs, d); /* re-armed */
	/* more ready than the caller takes: the rest is pending, so no sleeping either */
	for (int i = 0; i < 3; i++)
		assert_int_equal(send_one(p.t[1], 0, msg, sizeof(msg)), 1);
	assert_int_equal(recv_some(a, bufs, d, 1), 1);
	assert_true(a->ops->next_deadline_ns(a) != UINT64_MAX);
	assert_int_equal(recv_some(a, bufs, d, 4), 2);
	/* a completion racing the arming: found by the look after it, and delivered */
	int got = 0;
	for (int i = 0; i < 4 && got == 0; i++) {
		fake.on_notify = send_from_1; /* runs at the next arming only */
		fake.on_notify_ctx = &p;
		got = recv_some(a, bufs, d, 4);
		assert_true(got == 0 || fake.on_notify == NULL); /* got it in the same call */
	}
	fake.on_notify = NULL;
	assert_int_equal(got, 1);
	assert_int_equal(d[0].buf[0], 7);
	pair_down(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_verbs_config),
	    cmocka_unit_test(test_verbs_event_mode_wakeups),
	    cmocka_unit_test(test_verbs_data_path_and_credits),
	    cmocka_unit_test(test_verbs_two_pieces),
	    cmocka_unit_test(test_verbs_registered_tails_zero_copy),
	    cmocka_unit_test(test_verbs_failed_peer_releases_regions),
	    cmocka_unit_test(test_verbs_register_errors),
	    cmocka_unit_test(test_verbs_dmabuf_tails),
	    cmocka_unit_test(test_verbs_device_tails),
	    cmocka_unit_test(test_verbs_forged_immediates_rejected),
	    cmocka_unit_test(test_verbs_bad_wr_mid_chain),
	    cmocka_unit_test(test_verbs_retry_exceeded),
	    cmocka_unit_test(test_verbs_keepalive_detects_dead_peer),
	    cmocka_unit_test(test_verbs_create_qp_enomem),
	    cmocka_unit_test(test_verbs_device_fatal),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
