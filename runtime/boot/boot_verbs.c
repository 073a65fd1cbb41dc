/* The start-up library's verbs part: device, QPs, and the exchange of addresses and QPNs in
 * blob rounds over the rendezvous. Built only with the verbs backend and archived with it
 * (libkeel_verbs.a): a program that does not link verbs does not carry it. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot_int.h"
#include "boot_verbs.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "keel/env.h"
#include "keel/transport_verbs.h"
#include "rendezvous.h"

#define BLOB_KIND_ADDR 0x56u /* 'V': struct keel_verbs_addr, packed */
#define BLOB_KIND_QPN  0x51u /* 'Q': up to QPN_PER_BLOB QPNs, 4 bytes each */
#define ADDR_BLOB_LEN  44u
#define QPN_PER_BLOB   (KEEL_RENDEZVOUS_BLOB_MAX / 4u)

static struct keel_transport *verbs_tp;
static void *verbs_mem;

static void put32(uint8_t *p, uint32_t x)
{
	memcpy(p, &(uint32_t){htonl(x)}, 4);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t x;
	memcpy(&x, p, 4);
	return ntohl(x);
}

static void addr_to_blob(const struct keel_verbs_addr *a, struct keel_rendezvous_blob *b)
{
	memset(b, 0, sizeof(*b));
	b->kind = BLOB_KIND_ADDR;
	b->len = ADDR_BLOB_LEN;
	memcpy(b->data, a->gid, 16);
	put32(b->data + 16, (uint32_t)a->lid << 16 | (uint32_t)a->mtu << 8);
	put32(b->data + 20, a->rkey);
	put32(b->data + 24, (uint32_t)(a->base >> 32));
	put32(b->data + 28, (uint32_t)a->base);
	put32(b->data + 32, a->stride);
	put32(b->data + 36, a->slot_bytes);
	put32(b->data + 40, a->slot_count);
}

/* Untrusted: the kind and length must match. */
static bool addr_from_blob(const struct keel_rendezvous_blob *b, struct keel_verbs_addr *a)
{
	if (b->kind != BLOB_KIND_ADDR || b->len != ADDR_BLOB_LEN)
		return false;
	memset(a, 0, sizeof(*a));
	memcpy(a->gid, b->data, 16);
	uint32_t x = get32(b->data + 16);
	a->lid = (uint16_t)(x >> 16);
	a->mtu = (uint8_t)(x >> 8);
	a->rkey = get32(b->data + 20);
	a->base = (uint64_t)get32(b->data + 24) << 32 | get32(b->data + 28);
	a->stride = get32(b->data + 32);
	a->slot_bytes = get32(b->data + 36);
	a->slot_count = get32(b->data + 40);
	return true;
}

/* One blob round on MASTER_PORT + round (a fresh listener per round). */
static int round_trip(struct keel_launch *l, uint32_t round,
		      const struct keel_rendezvous_blob *mine, struct keel_rendezvous_blob *all,
		      struct sockaddr_storage *peers, uint64_t timeout_ns, char *err,
		      size_t err_len)
{
	struct keel_launch lr = *l;
	lr.peers = NULL; /* KEEL_PEERS: UDP ports, not a way to exchange QP numbers */
	if ((uint32_t)l->master_port + round > 65535)
		return keel_fail(err, err_len, -EINVAL, "MASTER_PORT + %u is past 65535", round);
	lr.master_port = (uint16_t)(l->master_port + round);
	struct sockaddr_in sin;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)(1 + l->rank % 60000)); /* unused: verbs has no UDP */
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int rc = keel_rendezvous_blob(&lr, (struct sockaddr *)&sin, sizeof(sin), mine, peers, all,
				      timeout_ns, err, err_len);
	/* The first round may settle the job id: later rounds, and the node, use it. */
	l->job_id = lr.job_id;
	l->job_id_fixed = lr.job_id_fixed;
	return rc;
}

static int exchange(struct keel_launch *l, uint64_t timeout_ns, char *err, size_t err_len)
{
	uint32_t w = l->world_size;
	struct keel_verbs_addr *addrs = calloc(w, sizeof(*addrs));
	struct keel_rendezvous_blob *all = calloc(w, sizeof(*all));
	uint32_t *qpn = calloc(w, sizeof(*qpn)); /* each peer's QPN towards us */
	struct sockaddr_storage *peers = calloc(w, sizeof(*peers));
	int rc = addrs && all && qpn && peers ? 0 : -ENOMEM;
	struct keel_verbs_addr self;
	struct keel_rendezvous_blob mine;
	keel_verbs_local_addr(verbs_tp, &self);
	addr_to_blob(&self, &mine);
	if (rc == 0)
		rc = round_trip(l, 0, &mine, all, peers, timeout_ns, err, err_len);
	for (uint32_t r = 0; rc == 0 && r < w; r++)
		if (!addr_from_blob(&all[r], &addrs[r]))
			rc = keel_fail(
			    err, err_len, KEEL_ERENDEZVOUS,
			    "rank %u announced no verbs address (not KEEL_TRANSPORT=verbs?)", r);
	for (uint32_t round = 1; rc == 0 && (round - 1) * QPN_PER_BLOB < w; round++) {
		uint32_t first = (round - 1) * QPN_PER_BLOB;
		uint32_t n = w - first < QPN_PER_BLOB ? w - first : QPN_PER_BLOB;
		memset(&mine, 0, sizeof(mine));
		mine.kind = BLOB_KIND_QPN;
		mine.len = (uint8_t)(4 * n);
		for (uint32_t i = 0; i < n; i++)
			put32(mine.data + 4 * i, keel_verbs_local_qpn(verbs_tp, first + i));
		rc = round_trip(l, round, &mine, all, peers, timeout_ns, err, err_len);
		/* rank r's blob entry for us (l->rank) is in the round holding our index */
		if (rc == 0 && l->rank >= first && l->rank < first + n)
			for (uint32_t r = 0; r < w; r++) {
				if (all[r].kind != BLOB_KIND_QPN || all[r].len != 4 * n)
					rc = keel_fail(err, err_len, KEEL_ERENDEZVOUS,
						       "rank %u sent a bad QPN table", r);
				else
					qpn[r] = get32(all[r].data + 4 * (l->rank - first));
			}
	}
	for (uint32_t r = 0; rc == 0 && r < w; r++) {
		if (r == l->rank)
			continue;
		rc = keel_verbs_connect(verbs_tp, r, &addrs[r], qpn[r]);
		if (rc != 0)
			keel_fail(err, err_len, rc, "connecting the QP to rank %u: %s", r,
				  keel_strerror(rc));
	}
	free(addrs);
	free(all);
	free(qpn);
	free(peers);
	return rc;
}

/* The KEEL_VERBS_* variables (keel/env.h: ranges and wording from its table). */
static int env_config(struct keel_verbs_config *c, char *err, size_t err_len)
{
	uint64_t port = 0, gid = 0, slots = c->slot_count, tmo = c->timeout, retry = c->retry_cnt;
	unsigned poll = c->poll_mode;
	int gid_set = 0;
	if (keel_env_uint("KEEL_VERBS_PORT", &port, err, err_len) < 0 ||
	    (gid_set = keel_env_uint("KEEL_VERBS_GID", &gid, err, err_len)) < 0 ||
	    keel_env_uint("KEEL_VERBS_SLOTS", &slots, err, err_len) < 0 ||
	    keel_env_uint("KEEL_VERBS_TIMEOUT", &tmo, err, err_len) < 0 ||
	    keel_env_uint("KEEL_VERBS_RETRY", &retry, err, err_len) < 0 ||
	    keel_env_text("KEEL_VERBS_DEVICE", &c->device, err, err_len) < 0 ||
	    keel_env_enum("KEEL_VERBS_POLL", &poll, err, err_len) < 0) /* names in enum order */
		return -EINVAL;
	c->port = (uint8_t)port;
	c->gid_index = gid_set == 1 ? (int)gid : -1;
	c->slot_count = (uint32_t)slots;
	c->timeout = (uint8_t)tmo;
	c->retry_cnt = (uint8_t)retry;
	c->poll_mode = (enum keel_verbs_poll_mode)poll;
	/* a busy-polled CQ has no fd to wake a sleeping waiter: spin unless told otherwise */
	if (c->poll_mode == KEEL_VERBS_POLL_BUSY)
		setenv("KEEL_WAIT", "busy", 0);
	return 0;
}

int keel_boot_verbs_start(struct keel_launch *l, uint32_t mtu, uint64_t rendezvous_timeout_ns,
			  struct keel_transport **out, char *err, size_t err_len)
{
	struct keel_verbs_config c;
	*out = NULL;
	/* KEEL_PEERS names UDP ports, which verbs does not use (keel-run sets it with --kill
	 * too): QP numbers always go through the rendezvous. A restarted rank would need a
	 * fresh exchange with every survivor, which no rendezvous offers once the job runs. */
	if (l->world_size > 1 && (l->master_addr[0] == '\0' || l->master_port == 0))
		return keel_fail(err, err_len, -EINVAL,
				 "KEEL_TRANSPORT=verbs needs the rendezvous (MASTER_ADDR and "
				 "MASTER_PORT) to exchange QP numbers%s",
				 l->peers != NULL ? "; KEEL_PEERS alone is not enough" : "");
	bool rejoin = false;
	if (keel_env_bool("KEEL_REJOIN", &rejoin, err, err_len) < 0)
		return -EINVAL;
	if (rejoin)
		return keel_fail(err, err_len, -EOPNOTSUPP,
				 "KEEL_TRANSPORT=verbs: a restarted rank cannot rejoin (its QPs "
				 "need an exchange with every survivor); use udp or dpdk");
	keel_verbs_config_default(&c);
	c.rank = l->rank;
	c.world_size = l->world_size;
	if (mtu != 0)
		c.slot_bytes = (mtu + 7u) & ~7u;
	int rc = env_config(&c, err, err_len);
	if (rc != 0)
		return rc;
	size_t sz = keel_verbs_storage_size(&c);
	verbs_mem = sz != 0 ? calloc(1, sz) : NULL;
	rc = sz == 0 ? -EINVAL : verbs_mem == NULL ? -ENOMEM : 0;
	if (rc == 0)
		rc = keel_verbs_init(&verbs_tp, verbs_mem, sz, &c);
	if (rc != 0) {
		keel_boot_verbs_stop();
		return keel_fail(err, err_len, rc, "verbs transport (device %s): %s",
				 c.device != NULL && *c.device ? c.device : "first active",
				 keel_strerror(rc));
	}
	rc = l->world_size > 1 ? exchange(l, rendezvous_timeout_ns, err, err_len) : 0;
	if (rc != 0) {
		keel_boot_verbs_stop();
		return rc;
	}
	*out = verbs_tp;
	return 0;
}

int keel_boot_verbs_register(const void *addr, size_t len, int dmabuf_fd, uint64_t offset)
{
	if (verbs_tp == NULL)
		return 1;
	return dmabuf_fd >= 0 ? keel_verbs_register_dmabuf(verbs_tp, addr, len, dmabuf_fd, offset)
			      : keel_verbs_register(verbs_tp, addr, len);
}

size_t keel_boot_verbs_area_bytes(void)
{
	return verbs_tp == NULL ? 0 : keel_verbs_device_area_bytes(verbs_tp);
}

int keel_boot_verbs_register_area(void *addr, size_t len, int fd, uint64_t offset)
{
	return verbs_tp == NULL ? 1
				: keel_verbs_register_device_area(verbs_tp, addr, len, fd, offset);
}

int keel_boot_verbs_unregister(const void *addr)
{
	return verbs_tp == NULL ? 1 : keel_verbs_unregister(verbs_tp, addr);
}

void keel_boot_verbs_stop(void)
{
	bool stats = false;
	if (verbs_tp != NULL) {
		/* a bad value failed keel_boot_start (keel_env_check) */
		if (keel_env_bool("KEEL_VERBS_STATS", &stats, NULL, 0) == 1 && stats) {
			struct keel_verbs_stats s;
			keel_verbs_stats_get(verbs_tp, &s);
			fprintf(
			    stderr,
			    "keel-verbs: rank %u device %s gid %d send %llu inline %llu "
			    "write_imm %llu zero_copy %llu credit_writes %llu keepalive_writes "
			    "%llu posts %llu "
			    "rx_send %llu "
			    "rx_write_imm %llu delivered %llu no_credit %llu no_room %llu "
			    "bad_wr %llu bad_imm %llu wc_errors %llu retry_exc %llu "
			    "async %llu peers_failed %llu first_fail_at %.3f inline_max %u\n",
			    verbs_tp->rank, keel_verbs_device_name(verbs_tp),
			    keel_verbs_gid_index(verbs_tp), (unsigned long long)s.tx_send,
			    (unsigned long long)s.tx_send_inline,
			    (unsigned long long)s.tx_write_imm, (unsigned long long)s.tx_zero_copy,
			    (unsigned long long)s.tx_credit_writes,
			    (unsigned long long)s.tx_keepalive_writes,
			    (unsigned long long)s.tx_posts, (unsigned long long)s.rx_send,
			    (unsigned long long)s.rx_write_imm, (unsigned long long)s.rx_delivered,
			    (unsigned long long)s.tx_no_credit, (unsigned long long)s.tx_no_room,
			    (unsigned long long)s.tx_bad_wr, (unsigned long long)s.rx_bad_imm,
			    (unsigned long long)s.wc_errors, (unsigned long long)s.wc_retry_exc,
			    (unsigned long long)s.async_events, (unsigned long long)s.peers_failed,
			    (double)s.first_fail_ns / 1e9, s.inline_max);
		}
		verbs_tp->ops->fini(verbs_tp);
	}
	verbs_tp = NULL;
	free(verbs_mem);
	verbs_mem = NULL;
}
