/* The start-up library: environment -> transport -> rendezvous -> chaos -> node -> waiter. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "assert_int.h"
#include "boot_dpdk.h"
#include "boot_int.h"
#include "boot_metrics.h"
#include "boot_trace.h"
#include "boot_verbs.h"
#include "keel/boot.h"
#include "keel/transport_chaos.h"
#include "keel/transport_router.h"
#include "keel/transport_shm.h"
#include "keel/transport_udp.h"
#include "rendezvous.h"

/* The DPDK and verbs start-up live in those backends' archives. Referenced weakly, they are
 * there only when the program links the backend (pkg-config keel-dpdk / keel-verbs, which also
 * pass -u to pull them in): a UDP-only program needs no DPDK or verbs library at all. */
extern __typeof__(keel_boot_dpdk_start) keel_boot_dpdk_start __attribute__((weak));
extern __typeof__(keel_boot_dpdk_stop) keel_boot_dpdk_stop __attribute__((weak));
extern __typeof__(keel_boot_verbs_start) keel_boot_verbs_start __attribute__((weak));
extern __typeof__(keel_boot_verbs_stop) keel_boot_verbs_stop __attribute__((weak));
extern __typeof__(keel_boot_verbs_register) keel_boot_verbs_register __attribute__((weak));
extern __typeof__(keel_boot_verbs_unregister) keel_boot_verbs_unregister __attribute__((weak));
extern __typeof__(keel_boot_verbs_area_bytes) keel_boot_verbs_area_bytes __attribute__((weak));
extern __typeof__(keel_boot_verbs_register_area) keel_boot_verbs_register_area
    __attribute__((weak));

/* KEEL_RENDEZVOUS_TIMEOUT_MS: how long every step of the start that waits for the others may. */
static int rendezvous_timeout_ms(uint64_t *ms, char *err, size_t err_len)
{
	*ms = KEEL_RENDEZVOUS_TIMEOUT_MS_DEFAULT;
	return keel_env_uint("KEEL_RENDEZVOUS_TIMEOUT_MS", ms, err, err_len) < 0 ? -EINVAL : 0;
}

/* Ranks that outnumber the cores wait for a CPU behind each other: measured here, 4 ranks on
 * 2 cores moving 64 MiB saw single ranks unscheduled for 20-40 ms. Unless the user set
 * KEEL_HEARTBEAT_US, the interval grows with the oversubscription (docs/perf-history.md). */
static uint64_t default_heartbeat_ns(const struct keel_launch *l, uint64_t base_ns)
{
	if (!keel_posix_oversubscribed(l->local_world_size))
		return base_ns;
	long cpus = keel_posix_cpu_count();
	return base_ns * (uint64_t)((2 * (long)l->local_world_size + cpus - 1) / cpus);
}

/* The defaults' window and burst were set for KEEL_MTU_DEFAULT-byte datagrams. Smaller ones (a
 * 1500-byte link's 1 472) carry less each: unless KEEL_WINDOW or KEEL_BURST says otherwise,
 * both grow by the largest power of two that keeps as many bytes as the defaults, at most
 * DATAGRAM_SCALE_MAX. In namespaces over veth, 2 ranks at 1 472 bytes, window 256 and burst
 * 128 took 1 MiB in 535-546 us against 642-663 with 64 and 32; 512 and 256 were slower
 * (perf-history.md, "Kernel UDP: fewer pieces, wider checksums, bigger windows"). Datagrams cut
 * into pieces (PIECES_DATAGRAM_MAX, four times the default's bytes) take half the window:
 * twice the default's bytes in flight, as fast as the whole window in namespaces (2 ranks,
 * 64 KiB to 4 MiB), where a quarter of it was slower at 1 and 4 MiB. Over UDP only: the DPDK
 * port's mbuf pool is sized from the burst. */
#define DATAGRAM_SCALE_MAX 4u
_Static_assert(KEEL_WINDOW_DEFAULT *DATAGRAM_SCALE_MAX <= KEEL_WINDOW_MAX &&
		   KEEL_BURST_DEFAULT * DATAGRAM_SCALE_MAX <= KEEL_BURST_MAX,
	       "a scaled window or burst is still valid");

/* The window and burst keel_boot gives datagrams of `mtu` bytes, cut into pieces or not. */
static void datagram_defaults(uint32_t mtu, bool pieces, uint32_t *window, uint32_t *burst)
{
	uint32_t scale = 1;
	while (scale < DATAGRAM_SCALE_MAX && 2 * scale * mtu <= KEEL_MTU_DEFAULT)
		scale *= 2;
	*window = pieces ? KEEL_WINDOW_DEFAULT / 2 : KEEL_WINDOW_DEFAULT * scale;
	*burst = KEEL_BURST_DEFAULT * scale;
}

/* Window and burst for the datagram size cfg->mtu (cut into pieces or not), where they are
 * still what keel_boot gave them last (b->datagram_window and b->datagram_burst; at first,
 * keel_config_default's) and no variable chose them. Called again once the rendezvous has
 * agreed on another size (a rank on a 1500-byte link beside jumbo frames, or one that does
 * not cut): a window the program's tweak chose stays. */
static void scale_to_datagram(struct keel_boot *b, bool pieces)
{
	struct keel_config *cfg = &b->cfg;
	uint32_t window, burst;
	datagram_defaults(cfg->mtu, pieces, &window, &burst);
	if (!keel_env_is_set("KEEL_WINDOW") && cfg->window == b->datagram_window)
		cfg->window = window;
	if (!keel_env_is_set("KEEL_BURST") && cfg->burst == b->datagram_burst)
		cfg->burst = burst;
	b->datagram_window = window;
	b->datagram_burst = burst;
}

static int env_algo(struct keel_config *cfg, char *err, size_t err_len);
static int env_compress(struct keel_config *cfg, char *err, size_t err_len);

static int env_config(struct keel_config *cfg, uint32_t *mtu, char *err, size_t err_len)
{
	/* ranges and wording from the table (keel/env.h); unset, v keeps the config's value */
	uint64_t v;
	bool bad = false;
	v = cfg->heartbeat_ns / 1000;
	bad |= keel_env_uint("KEEL_HEARTBEAT_US", &v, err, err_len) < 0;
	cfg->heartbeat_ns = v * 1000;
	v = cfg->miss_limit;
	bad |= keel_env_uint("KEEL_MISS_LIMIT", &v, err, err_len) < 0;
	cfg->miss_limit = (uint32_t)v;
	v = *mtu;
	bad |= keel_env_uint("KEEL_MTU", &v, err, err_len) < 0;
	*mtu = (uint32_t)v;
	cfg->mtu = *mtu;
	v = cfg->window;
	bad |= keel_env_uint("KEEL_WINDOW", &v, err, err_len) < 0;
	cfg->window = (uint32_t)v;
	v = cfg->streams;
	bad |= keel_env_uint("KEEL_STREAMS", &v, err, err_len) < 0;
	cfg->streams = (uint32_t)v;
	v = cfg->burst;
	bad |= keel_env_uint("KEEL_BURST", &v, err, err_len) < 0;
	cfg->burst = (uint32_t)v;
	v = cfg->op_timeout_ns / 1000000; /* 0: derived from the detector */
	bad |= keel_env_uint("KEEL_OP_TIMEOUT_MS", &v, err, err_len) < 0;
	cfg->op_timeout_ns = v * 1000000;
	v = cfg->entry_timeout_ns / 1000000;
	bad |= keel_env_uint("KEEL_ENTRY_TIMEOUT_MS", &v, err, err_len) < 0;
	cfg->entry_timeout_ns = v * 1000000;
	v = cfg->probes;
	bad |= keel_env_uint("KEEL_PROBES", &v, err, err_len) < 0;
	cfg->probes = (uint32_t)v;
	/* a restarted process: keel-run --restart (or the user's launcher) says which life */
	v = cfg->incarnation;
	bad |= keel_env_uint("KEEL_INCARNATION", &v, err, err_len) < 0;
	cfg->incarnation = (uint32_t)v;
	bad |= keel_env_bool("KEEL_REJOIN", &cfg->rejoin, err, err_len) < 0;
	v = cfg->view_timeout_ns / 1000;
	bad |= keel_env_uint("KEEL_VIEW_TIMEOUT_US", &v, err, err_len) < 0;
	cfg->view_timeout_ns = v * 1000;
	v = cfg->eager_result_bytes;
	bad |= keel_env_uint("KEEL_EAGER_RESULT_BYTES", &v, err, err_len) < 0;
	cfg->eager_result_bytes = (uint32_t)v;
	if (bad)
		return -EINVAL;
	return env_algo(cfg, err, err_len) != 0 || env_compress(cfg, err, err_len) != 0 ? -EINVAL
											: 0;
}

/* KEEL_COMPRESS=auto|off|bf16|f16 and KEEL_COMPRESS_UTIL (percent): gradient AllReduces. */
static int env_compress(struct keel_config *cfg, char *err, size_t err_len)
{
	uint64_t v = cfg->compress_util_pct;
	unsigned i = cfg->compress;
	if (keel_env_uint("KEEL_COMPRESS_UTIL", &v, err, err_len) < 0 ||
	    keel_env_enum("KEEL_COMPRESS", &i, err, err_len) < 0)
		return -EINVAL;
	cfg->compress_util_pct = (uint32_t)v;
	cfg->compress = (enum keel_compress)i; /* the table's names in enum order */
	return 0;
}

static int env_algo(struct keel_config *cfg, char *err, size_t err_len)
{
	unsigned i = cfg->algo;
	if (keel_env_enum("KEEL_ALGO", &i, err, err_len) < 0)
		return -EINVAL;
	cfg->algo = (enum keel_algo)i; /* the table's names in enum order */
	return 0;
}

/* Where this rank's UDP socket binds: KEEL_BIND, else this rank's KEEL_PEERS entry (its
 * address if numeric, every address otherwise, and its port), else 127.0.0.1 on any port. */
static int bind_address(struct keel_boot *b, char *host, size_t host_len, uint16_t *port, char *err,
			size_t err_len)
{
	const char *bind = NULL;
	int set = keel_env_text("KEEL_BIND", &bind, err, err_len);
	if (set < 0)
		return set;
	snprintf(host, host_len, "%s", set == 1 ? bind : "127.0.0.1");
	*port = 0;
	if (b->launch.peers == NULL)
		return 0;
	char entry[KEEL_LAUNCH_HOST_LEN];
	int rc = keel_peers_entry(b->launch.peers, b->launch.rank, entry, sizeof(entry), port, err,
				  err_len);
	if (rc != 0 || set == 1)
		return rc;
	struct in6_addr any;
	bool numeric =
	    inet_pton(AF_INET, entry, &any) == 1 || inet_pton(AF_INET6, entry, &any) == 1;
	snprintf(host, host_len, "%s", numeric ? entry : "0.0.0.0");
	return 0;
}

static bool is_loopback(const char *host)
{
	return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0;
}

/* A datagram that fits one packet of the link `host` is on, at most KEEL_MTU_DEFAULT; that
 * default where the link is unknown; never below what a view of `world` ranks needs. Every
 * rank must use the same size (a longer datagram is dropped by a receiver with smaller
 * buffers): where links differ, set KEEL_MTU. */
static uint32_t default_link_mtu(const char *host, uint32_t world)
{
	uint32_t header, link = keel_boot_link_mtu(host, &header);
	uint32_t view = keel_view_mtu_min(world), mtu;

	if (link <= header || link - header < KEEL_MTU_MIN)
		return KEEL_MTU_DEFAULT > view ? KEEL_MTU_DEFAULT : view;
	mtu = link - header < KEEL_MTU_DEFAULT ? link - header : KEEL_MTU_DEFAULT;
	/* A view must fit one datagram: past ~215 ranks on a 1500-byte link, datagrams grow
	 * beyond a packet again (the kernel fragments them; coalescing is then refused). */
	return mtu > view ? mtu : view;
}

/* Datagrams cut into pieces hold up to four times the default's bytes. Each datagram costs the
 * core its share of a header, a CRC and an ack, and the transport a join: in namespaces over
 * 1500-byte veths, 2 ranks took 0.87-0.96 of the time of 8 784-byte datagrams from 256 KiB to
 * 4 MiB, and 4 ranks less at 64 KiB and 4 MiB. Five and six times were slower again, and one
 * lost piece costs the whole datagram (docs/perf-history.md, "Larger datagrams in pieces"). */
#define PIECES_DATAGRAM_MAX (4u * KEEL_MTU_DEFAULT)
/* A datagram is at most 64 pieces (keel_udp_config.piece_bytes): pieces of KEEL_UDP_PIECES_MIN
 * bytes carry PIECES_DATAGRAM_MAX. Links of smaller packets get no pieces. */
_Static_assert(PIECES_DATAGRAM_MAX <= KEEL_MTU_MAX &&
		   64u * (KEEL_UDP_PIECES_MIN - KEEL_UDP_PIECE_HDR_BYTES) >= PIECES_DATAGRAM_MAX,
	       "datagrams in pieces are datagrams of at most 64 pieces");

/* The datagram size pieces of `piece` bytes make: as many whole pieces as PIECES_DATAGRAM_MAX
 * holds, so a full datagram leaves in pieces that are all full. */
static uint32_t pieces_mtu(uint32_t piece)
{
	uint32_t chunk = piece - KEEL_UDP_PIECE_HDR_BYTES;
	return PIECES_DATAGRAM_MAX / chunk * chunk;
}

/* KEEL_UDP_PIECES: whether datagrams larger than the link's packet go over UDP as pieces, and
 * of what size (b->piece_bytes; 0: not cut). `link` is the datagram size the link takes
 * (KEEL_MTU_MAX on loopback, where nothing needs cutting unless a size is given). Datagrams
 * then take pieces_mtu(piece) bytes. */
static int udp_pieces(struct keel_boot *b, bool mtu_chosen, uint32_t link, char *err,
		      size_t err_len)
{
	uint64_t bytes = 1; /* the table's default: pieces of the link's packet size */
	b->piece_bytes = 0;
	if (keel_env_uint("KEEL_UDP_PIECES", &bytes, err, err_len) < 0)
		return -EINVAL;
	if (bytes > 1 && bytes < KEEL_UDP_PIECES_MIN) /* the hole the table's range cannot say */
		return keel_env_reject("KEEL_UDP_PIECES", err, err_len);
	if (bytes == 0 || mtu_chosen)
		return 0;
	uint32_t piece = bytes == 1 ? link : (uint32_t)bytes;
	/* worth it where at least two pieces make a datagram; a link below IPv4's smallest
	 * datagram (576) sends datagrams of its own size, as without pieces */
	if (piece >= KEEL_UDP_PIECES_MIN && piece < KEEL_MTU_DEFAULT &&
	    pieces_mtu(piece) >= 2 * piece) {
		b->piece_bytes = piece;
		b->cfg.mtu = pieces_mtu(piece);
	}
	return 0;
}

static int start_udp(struct keel_boot *b, const char *host, uint16_t port, char *err,
		     size_t err_len)
{
	struct keel_udp_config u;
	keel_udp_config_default(&u);
	u.rank = b->launch.rank;
	u.world_size = b->launch.world_size;
	/* with pieces, the job may agree on a smaller piece and so on another datagram size:
	 * pieces_mtu never exceeds PIECES_DATAGRAM_MAX */
	u.mtu = b->piece_bytes != 0 ? PIECES_DATAGRAM_MAX : b->cfg.mtu;
	u.piece_bytes = b->piece_bytes;
	u.burst = b->cfg.burst;
	u.bind_host = host;
	u.bind_port = port;
	if (keel_env_bool("KEEL_UDP_GSO", &u.gso, err, err_len) < 0 ||
	    keel_env_bool("KEEL_UDP_STAGE", &u.stage_runs, err, err_len) < 0)
		return -EINVAL;
	size_t sz = keel_udp_storage_size(&u);
	b->mem_udp = sz != 0 ? calloc(1, sz) : NULL;
	int rc = b->mem_udp == NULL ? -EINVAL : keel_udp_init(&b->udp, b->mem_udp, sz, &u);
	if (rc != 0) {
		snprintf(err, err_len, "UDP transport on %s port %u: %s", host, port,
			 keel_strerror(rc));
		return rc;
	}
	b->tp = b->udp;
	return 0;
}

/* A rank drops a datagram longer than it can take, and the sender would send it again for
 * ever: the job uses the smallest size any rank announced (hosts on links of different
 * MTUs). A size a rank chose (KEEL_MTU) is kept or refused, never lowered: every rank stops
 * with the same message naming both ranks. */
static int agree_mtu(struct keel_boot *b, const struct keel_rendezvous_blob *blobs, char *err,
		     size_t err_len)
{
	uint32_t world = b->launch.world_size, low = 0;
	for (uint32_t r = 0; r < world; r++) {
		if (blobs[r].mtu < KEEL_MTU_MIN || blobs[r].mtu > KEEL_MTU_MAX) {
			snprintf(err, err_len,
				 "rank %u announced a datagram size of %u bytes, outside %u..%u", r,
				 blobs[r].mtu, KEEL_MTU_MIN, KEEL_MTU_MAX);
			return -EPROTO;
		}
		if (blobs[r].mtu < blobs[low].mtu)
			low = r;
	}
	for (uint32_t r = 0; r < world; r++)
		if (blobs[r].mtu_set && blobs[r].mtu > blobs[low].mtu) {
			snprintf(
			    err, err_len,
			    "rank %u set datagrams of %u bytes (KEEL_MTU), but rank %u takes at "
			    "most %u (%s): set the same KEEL_MTU on every rank, or leave it unset "
			    "and the job takes the smallest size its ranks' links carry",
			    r, blobs[r].mtu, low, blobs[low].mtu,
			    blobs[low].mtu_set ? "its KEEL_MTU" : "its link");
			return -EINVAL;
		}
	bool pieces = true; /* this rank's own blob too: b->piece_bytes != 0 */
	for (uint32_t r = 0; r < world; r++)
		pieces = pieces && blobs[r].pieces;
	KEEL_ASSERT(blobs[low].mtu <= b->cfg.mtu);
	if (pieces) {
		/* every rank cuts and joins: pieces of the smallest link (blob_get: at least
		 * KEEL_MTU_MIN, which the transport takes), datagrams of their size */
		KEEL_ASSERT(b->piece_bytes != 0 && blobs[low].mtu <= b->piece_bytes);
		b->piece_bytes = blobs[low].mtu;
		b->cfg.mtu = pieces_mtu(b->piece_bytes);
		int rc = keel_udp_set_piece_bytes(b->udp, b->piece_bytes);
		if (rc != 0)
			snprintf(err, err_len, "rank %u announced pieces of %u bytes: %s", low,
				 b->piece_bytes, keel_strerror(rc));
		return rc;
	}
	b->cfg.mtu = blobs[low].mtu; /* the transports take up to their own; peers send this */
	if (b->piece_bytes != 0) {   /* a rank that does not cut: nobody does */
		b->piece_bytes = 0;
		int rc = keel_udp_set_piece_bytes(b->udp, 0);
		KEEL_ASSERT(rc == 0); /* made with pieces, so it takes 0 */
	}
	return 0;
}

static int rendezvous(struct keel_boot *b, char *err, size_t err_len)
{
	uint64_t timeout_ms;
	int rc = rendezvous_timeout_ms(&timeout_ms, err, err_len);
	if (rc != 0)
		return rc;
	struct sockaddr_storage self;
	socklen_t self_len = sizeof(self);
	rc = keel_udp_local_addr(b->udp, &self, &self_len);
	if (rc != 0)
		return rc;
	uint32_t world = b->launch.world_size;
	struct sockaddr_storage *peers = calloc(world, sizeof(*peers));
	struct keel_rendezvous_blob *blobs = calloc(world, sizeof(*blobs));
	b->host_of = calloc(world, sizeof(*b->host_of));
	b->peer_offers = calloc(world, sizeof(*b->peer_offers));
	if (peers == NULL || blobs == NULL || b->host_of == NULL || b->peer_offers == NULL) {
		free(peers);
		free(blobs);
		return -ENOMEM;
	}
	/* with pieces a rank announces its link's packet: the job cuts at the smallest */
	struct keel_rendezvous_blob mine = {.offers = b->offers,
					    .mtu =
						b->piece_bytes != 0 ? b->piece_bytes : b->cfg.mtu,
					    .mtu_set = b->mtu_set,
					    .pieces = b->piece_bytes != 0};
	rc = keel_rendezvous_blob(&b->launch, (struct sockaddr *)&self, self_len, &mine, peers,
				  blobs, timeout_ms * 1000000ull, err, err_len);
	/* Hosts by their first rank: the same numbering on every rank. */
	for (uint32_t r = 0; rc == 0 && r < world; r++) {
		/* KEEL_PEERS exchanges nothing: every rank is taken to run as this one does */
		b->peer_offers[r] = b->launch.peers != NULL ? b->offers : blobs[r].offers;
		b->host_of[r] = r;
		for (uint32_t q = 0; q < r; q++)
			if (blobs[q].host == blobs[r].host) {
				b->host_of[r] = b->host_of[q];
				break;
			}
	}
	/* KEEL_PEERS exchanges nothing: each rank keeps its own size (docs/guide/transports.md) */
	if (rc == 0 && b->launch.peers == NULL)
		rc = agree_mtu(b, blobs, err, err_len);
	if (rc == 0 && b->datagram_window != 0) /* the agreed size may differ from ours */
		scale_to_datagram(b, b->piece_bytes != 0);
	free(blobs);
	/* The UDP port of this host's first rank: bound by that rank while the job runs, so no
	 * other running job on this host names its region with it. */
	if (rc == 0) {
		const struct sockaddr_storage *first = &peers[b->host_of[b->launch.rank]];
		b->host_port = ntohs(first->ss_family == AF_INET6
					 ? ((const struct sockaddr_in6 *)first)->sin6_port
					 : ((const struct sockaddr_in *)first)->sin_port);
	}
	for (uint32_t r = 0; rc == 0 && r < world; r++) {
		socklen_t len = peers[r].ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
							       : sizeof(struct sockaddr_in);
		rc = keel_udp_set_peer(b->udp, r, (struct sockaddr *)&peers[r], len);
		if (rc != 0)
			snprintf(err, err_len, "peer %u address rejected: %s", r,
				 keel_strerror(rc));
	}
	free(peers);
	return rc;
}

/* Once per process, however many nodes it starts: the one line about running without a key. */
static void warn_unauthenticated(const struct keel_launch *l)
{
	static atomic_flag warned = ATOMIC_FLAG_INIT;

	if (atomic_flag_test_and_set(&warned))
		return;
	fprintf(stderr,
		"keel: warning: no job key, so traffic between ranks is not authenticated "
		"(anyone who can reach this job's ports can join it or forge its messages)%s; "
		"give every rank the same key with KEEL_JOB_KEY_FILE (keel-run makes one per job; "
		"docs/guide/security.md)\n",
		l->peers != NULL && !l->job_id_fixed ? " and its job id is 0 (set KEEL_JOB_ID)"
						     : "");
}

/* The key (keel_launch_from_env read it) into the node's config, and KEEL_MAC. */
static int auth_config(struct keel_boot *b, char *err, size_t err_len)
{
	unsigned mac = b->cfg.mac;
	if (keel_env_enum("KEEL_MAC", &mac, err, err_len) < 0)
		return -EINVAL;
	b->cfg.mac = (enum keel_mac)mac; /* the table's names in enum order */
	if (b->launch.has_key) {
		b->cfg.auth = true;
		memcpy(b->cfg.auth_key, b->launch.key, sizeof(b->cfg.auth_key));
	} else if (b->launch.world_size > 1) {
		warn_unauthenticated(&b->launch);
	}
	return 0;
}

/* KEEL_TRANSPORT: auto (default), udp, shm, dpdk or verbs (keel-bench --transport sets it),
 * in the order of the table's names. */
enum tp_choice { TP_AUTO, TP_UDP, TP_SHM, TP_DPDK, TP_VERBS };

static int transport_choice(enum tp_choice *c, char *err, size_t err_len)
{
	unsigned i = TP_AUTO;
	if (keel_env_enum("KEEL_TRANSPORT", &i, err, err_len) < 0)
		return -EINVAL;
	*c = (enum tp_choice)i;
	return 0;
}

void keel_boot_shm_name(uint32_t job_id, uint16_t port, uint32_t first_rank, char *name,
			size_t name_len)
{
	snprintf(name, name_len, "/keel-%u-%u-%u", job_id, port, first_rank);
}

/* Every rank has initialised its inbound rings: the others' shm_init may still be under way
 * when the rendezvous ends, and a record written before it would be reset away. */
static int shm_attach_wait(struct keel_boot *b, uint64_t timeout_ms, char *err, size_t err_len)
{
	uint64_t end = keel_posix_now_ns() + timeout_ms * 1000000ull;
	const struct timespec ms = {0, 1000000};
	int rc;

	while ((rc = keel_shm_attach(b->shm)) == -EAGAIN && keel_posix_now_ns() < end)
		nanosleep(&ms, NULL);
	if (rc != 0)
		snprintf(err, err_len,
			 "KEEL_TRANSPORT=shm: not every rank mapped its rings within %llu ms "
			 "(%s)",
			 (unsigned long long)timeout_ms, keel_strerror(rc));
	return rc;
}

/* A ring holds the node's whole reliable window and some control traffic, so reliable data
 * never meets a full ring (transport_shm.h). */
static uint64_t shm_ring_kb_default(const struct keel_config *cfg)
{
	uint64_t need = (uint64_t)(cfg->window + 2) * (((cfg->mtu + 7u) & ~7u) + 8u);
	uint64_t ring = KEEL_SHM_RING_BYTES_DEFAULT;

	while (ring < need && ring < KEEL_SHM_RING_BYTES_MAX)
		ring *= 2;
	return ring / 1024;
}

/* After the UDP rendezvous (it settled the job id, proved the key and gathered the ranks):
 * the region of this host's ranks (local[0..count), in rank order, this one among them),
 * mapped by each. */
static int start_shm(struct keel_boot *b, const uint32_t *local, uint32_t count, bool wait_all,
		     char *err, size_t err_len)
{
	char name[KEEL_SHM_NAME_MAX];
	uint64_t timeout_ms, ring_kb = shm_ring_kb_default(&b->cfg);
	bool reliable = true;
	struct keel_shm_config c;
	keel_shm_config_default(&c);
	int rc = rendezvous_timeout_ms(&timeout_ms, err, err_len);
	if (rc == 0)
		rc = keel_env_uint("KEEL_SHM_RING_KB", &ring_kb, err, err_len) < 0 ? -EINVAL : 0;
	if (rc == 0 && (keel_env_bool("KEEL_SHM_RELIABLE", &reliable, err, err_len) < 0 ||
			keel_env_bool("KEEL_SHM_STAGE", &c.stage_runs, err, err_len) < 0))
		rc = -EINVAL;
	if (rc != 0)
		return rc;
	uint32_t self = 0;
	while (local[self] != b->launch.rank)
		self++;
	keel_boot_shm_name(b->launch.job_id, b->host_port, local[0], name, sizeof(name));
	c.rank = self;
	c.world_size = count;
	c.name = name;
	c.mtu = b->cfg.mtu;
	c.ring_bytes = (uint32_t)(ring_kb * 1024);
	c.reliable = reliable;
	size_t sz = keel_shm_storage_size(&c);
	b->mem_shm = sz != 0 ? calloc(1, sz) : NULL;
	rc = b->mem_shm == NULL ? -EINVAL : keel_shm_init(&b->shm, b->mem_shm, sz, &c);
	if (rc == -EACCES)
		return keel_fail(err, err_len, rc,
				 "KEEL_TRANSPORT=shm: region /dev/shm%s belongs to another user or "
				 "may be opened by others (its rings carry no CRC or MAC, so only "
				 "this user may write them): remove it (rm /dev/shm%s) and start "
				 "the job again",
				 name, name);
	if (rc != 0)
		return keel_fail(err, err_len, rc,
				 "KEEL_TRANSPORT=shm: region %s (%u ranks, KEEL_SHM_RING_KB=%llu, "
				 "a power of two of at least twice the mtu): %s",
				 name, c.world_size, (unsigned long long)ring_kb,
				 keel_strerror(rc));
	/* Under the router (a peer's rings not mapped yet: UDP carries its traffic meanwhile)
	 * only a job that met at the rendezvous waits: its ranks are all alive. With KEEL_PEERS
	 * a rank may not be started yet, or never. */
	if (!wait_all)
		return 0;
	rc = shm_attach_wait(b, timeout_ms, err, err_len);
	if (rc != 0)
		return rc;
	/* Every local rank has mapped the region. Without KEEL_PEERS no rank can come back
	 * (a restarted one could not meet at rank 0's rendezvous): nobody needs the name, and
	 * it leaves nothing in /dev/shm. With it, keel-run removes it when the job ends. */
	if (b->launch.peers == NULL) {
		rc = keel_shm_unlink(name);
		(void)rc; /* another local rank removed it first */
	}
	return 0;
}

/* KEEL_TRANSPORT=shm: every rank on this host, the UDP socket closed once the region is up. */
static int start_shm_only(struct keel_boot *b, char *err, size_t err_len)
{
	uint32_t world = b->launch.world_size;
	for (uint32_t r = 0; r < world; r++)
		if (b->host_of[r] != b->host_of[b->launch.rank])
			return keel_fail(err, err_len, -EINVAL,
					 "KEEL_TRANSPORT=shm: all %u ranks must run on one host "
					 "(rank %u is on another; KEEL_TRANSPORT=auto uses shared "
					 "memory where it can and UDP elsewhere)",
					 world, r);
	uint32_t *all = malloc(world * sizeof(*all));
	if (all == NULL)
		return -ENOMEM;
	for (uint32_t r = 0; r < world; r++)
		all[r] = r;
	int rc = start_shm(b, all, world, true, err, err_len);
	free(all);
	if (rc != 0)
		return rc;
	b->udp->ops->fini(b->udp); /* stays allocated; keel_boot_stop finis it again (a no-op) */
	b->tp = b->shm;
	return 0;
}

/* Said once per peer and route, from keel_poll: the job goes on over the next route. */
static void say_fallback(void *ctx, uint32_t peer, uint32_t from, uint32_t to, int err)
{
	struct keel_boot *b = ctx;
	static const char *const route_names[] = {"shared memory", "UDP"};
	struct keel_event ev = {
	    .kind = KEEL_EV_FALLBACK, .t_ns = keel_posix_now_ns(), .peer = peer};
	keel_boot_note(b, &ev);
	fprintf(stderr, "keel: rank %u: %s can no longer reach rank %u (%s); %s\n", b->launch.rank,
		route_names[from < 2 ? from : 1], peer, err != 0 ? keel_strerror(err) : "peer lost",
		to == KEEL_ROUTER_NONE ? "no other way is left: it will be suspected"
				       : "its traffic goes over UDP now");
}

/* KEEL_TRANSPORT=auto: shared memory to the ranks on this host, UDP to the others (and to
 * them too, should shared memory fail). A rank alone on its host uses UDP only. */
static int start_auto(struct keel_boot *b, char *err, size_t err_len)
{
	uint32_t world = b->launch.world_size, count = 0;
	uint32_t *local = malloc(world * sizeof(*local));
	if (local == NULL)
		return -ENOMEM;
	for (uint32_t r = 0; r < world; r++) /* this host's ranks that map its region */
		if (b->host_of[r] == b->host_of[b->launch.rank] &&
		    (b->peer_offers[r] & KEEL_RV_OFFER_SHM))
			local[count++] = r;
	int rc = count >= 2 ? start_shm(b, local, count, b->launch.peers == NULL, err, err_len) : 0;
	if (rc != 0) { /* best effort: UDP reaches every peer */
		fprintf(stderr,
			"keel: rank %u: no shared memory with the %u ranks on this host (%s); "
			"UDP carries all traffic\n",
			b->launch.rank, count - 1, err);
		if (b->shm != NULL)
			b->shm->ops->fini(b->shm);
		b->shm = NULL;
		free(b->mem_shm);
		b->mem_shm = NULL;
		err[0] = '\0';
		count = rc = 0;
	}
	if (rc == 0 && count >= 2) {
		struct keel_router_config rc_cfg = {
		    .rank = b->launch.rank,
		    .world_size = world,
		    .routes = 2,
		    .route = {{.t = b->shm, .ranks = local}, {.t = b->udp}},
		    .on_fallback = say_fallback,
		    .on_fallback_ctx = b,
		};
		size_t sz = keel_router_storage_size(&rc_cfg);
		b->mem_router = sz != 0 ? calloc(1, sz) : NULL;
		rc = b->mem_router == NULL
			 ? -ENOMEM
			 : keel_router_init(&b->router, b->mem_router, sz, &rc_cfg);
		if (rc != 0)
			rc = keel_fail(err, err_len, rc, "router transport: %s", keel_strerror(rc));
		else
			b->tp = b->router;
	}
	free(local);
	return rc;
}

/* The verbs device (boot_verbs.c does QPs and the QPN exchange). Its slots carry
 * the node's datagrams: KEEL_MTU if set, else 64 KiB slots. */
static int start_verbs(struct keel_boot *b, char *err, size_t err_len)
{
	uint64_t timeout_ms;
	int rc = rendezvous_timeout_ms(&timeout_ms, err, err_len);
	bool mtu = keel_env_is_set("KEEL_MTU");
	if (rc == 0 && keel_boot_verbs_start == NULL)
		return keel_fail(err, err_len, -ENOTSUP,
				 "KEEL_TRANSPORT=verbs: this program is not linked with the verbs "
				 "backend (link with `pkg-config --libs keel-verbs`; building keel "
				 "needs libibverbs-dev)");
	if (rc == 0)
		rc = keel_boot_verbs_start(&b->launch, mtu ? b->cfg.mtu : 0,
					   timeout_ms * 1000000ull, &b->tp, err, err_len);
	if (rc == 0)
		b->cfg.mtu = b->tp->mtu;
	return rc;
}

/* The DPDK port (boot_dpdk.c does EAL, addresses and rendezvous). The node's
 * datagrams must fit the port: its mtu becomes the node's. */
static int start_dpdk(struct keel_boot *b, char *err, size_t err_len)
{
	uint64_t timeout_ms;
	int rc = rendezvous_timeout_ms(&timeout_ms, err, err_len);
	bool mtu = keel_env_is_set("KEEL_MTU");
	if (rc == 0 && keel_boot_dpdk_start == NULL)
		return keel_fail(err, err_len, -ENOTSUP,
				 "KEEL_TRANSPORT=dpdk: this program is not linked with the DPDK "
				 "backend (link with `pkg-config --libs keel-dpdk`; building keel "
				 "needs libdpdk-dev)");
	if (rc == 0)
		rc = keel_boot_dpdk_start(&b->launch, mtu ? b->cfg.mtu : 0, b->cfg.burst,
					  timeout_ms * 1000000ull, &b->tp, err, err_len);
	if (rc == 0)
		b->cfg.mtu =
		    b->tp->mtu; /* KEEL_MTU if set (the port must carry it), else the port's */
	return rc;
}

static int start_chaos(struct keel_boot *b, char *err, size_t err_len)
{
	const char *spec = NULL;
	int set = keel_env_text("KEEL_CHAOS", &spec, err, err_len);
	if (set <= 0)
		return set;
	struct keel_chaos_config cc;
	keel_chaos_config_default(&cc);
	cc.seed = 1;
	if (keel_chaos_parse(spec, &cc) != 0) {
		snprintf(err, err_len,
			 "KEEL_CHAOS=%s: expected e.g. loss=0.01,dup=0.001,reorder=0.01,"
			 "delay_us=50,seed=7",
			 spec);
		return -EINVAL;
	}
	cc.inner = b->tp;			       /* UDP or DPDK */
	cc.seed = cc.seed * 1000003u + b->launch.rank; /* distinct streams per rank, replayable */
	size_t sz = keel_chaos_storage_size(&cc);
	b->mem_chaos = sz != 0 ? calloc(1, sz) : NULL;
	int rc = b->mem_chaos == NULL ? -EINVAL : keel_chaos_init(&b->chaos, b->mem_chaos, sz, &cc);
	if (rc != 0) {
		snprintf(err, err_len, "chaos transport: %s", keel_strerror(rc));
		return rc;
	}
	b->tp = b->chaos;
	return 0;
}

/* Ranks that outnumber their CPUs get no plain spin (it keeps the peer they wait for off the
 * CPU), so each wait was a wake-up: 40-60 us each on a VM, 160-250 us per small AllReduce at 4
 * ranks on 2 cores. By default they now spin briefly with a yield each turn, catching the
 * answer without a wake-up (with shared memory, rx_ready is a load): 17-21 us. But a yielding
 * spinner still delays the peer whose timer fires: 4 ranks on 2 cores, a kill's new view came
 * 1.7-3.5 ms later at the median with 250 us and 1 ms heartbeats (and false suspicions rose),
 * 2-4 ms later with 5 ms heartbeats, and no later with 10 and 40 ms (docs/perf-history.md). So the
 * default yields only when the heartbeat interval is at least YIELD_HEARTBEAT_MIN_NS (the
 * default interval for oversubscribed ranks is 30 ms and up) and KEEL_SPIN_US is unset;
 * KEEL_SPIN_YIELD=0|1 decides instead. */
#define YIELD_HEARTBEAT_MIN_NS 10000000ull
#define YIELD_SPIN_NS	       20000ull /* 50 us measured slower at 4 ranks on 2 cores */

static int spin_yield_choose(struct keel_boot *b, enum keel_wait_mode mode, uint64_t *spin_ns,
			     char *err, size_t err_len)
{
	bool spin_set = keel_env_is_set("KEEL_SPIN_US");
	bool yield = false;
	int set = keel_env_bool("KEEL_SPIN_YIELD", &yield, err, err_len);
	if (set < 0)
		return set;
	if (set > 0) {
		yield = yield && mode != KEEL_WAIT_BLOCK;
	} else {
		yield = mode == KEEL_WAIT_ADAPTIVE &&
			keel_posix_oversubscribed(b->launch.local_world_size) && !spin_set &&
			b->cfg.heartbeat_ns >= YIELD_HEARTBEAT_MIN_NS;
	}
	if (yield && mode == KEEL_WAIT_ADAPTIVE && *spin_ns == 0)
		*spin_ns = YIELD_SPIN_NS;
	keel_posix_waiter_set_spin_yield(&b->waiter, yield);
	return 0;
}

static int start_node(struct keel_boot *b, char *err, size_t err_len)
{
	enum keel_wait_mode mode;
	uint64_t spin_ns;
	/* the ranks on this host as the launch found them, under any launcher's name for it:
	 * the count default_heartbeat_ns uses too */
	int rc = keel_posix_wait_mode_from_env(b->launch.local_world_size, &mode, &spin_ns, err,
					       err_len);
	uint64_t rt = 0; /* a SCHED_RR priority; 0: off */
	if (rc == 0)
		rc = keel_env_uint("KEEL_RT", &rt, err, err_len) < 0 ? -EINVAL : 0;
	if (rc != 0)
		return rc;
	if (rt != 0) {
		int prc = keel_posix_realtime((int)rt);
		if (prc != 0)
			fprintf(stderr,
				"keel: KEEL_RT=%u: cannot enter SCHED_RR: %s (continuing)\n",
				(unsigned)rt, keel_strerror(prc));
	}
	int fd = b->tp->ops->wait_fd != NULL ? b->tp->ops->wait_fd(b->tp) : -1;
	int fds[KEEL_POSIX_WAIT_FDS_MAX];
	uint32_t nfds = b->tp == b->router && b->router != NULL
			    ? keel_router_wait_fds(b->router, fds, KEEL_POSIX_WAIT_FDS_MAX)
			    : 0;
	keel_posix_waiter_init(&b->waiter, nfds != 0 ? fds[0] : fd, mode, spin_ns);
	for (uint32_t i = 1; i < nfds; i++) { /* the routes' own: no epoll hop on each wake-up */
		rc = keel_posix_waiter_add_fd(&b->waiter, fds[i]);
		KEEL_ASSERT(rc == 0); /* nfds <= KEEL_POSIX_WAIT_FDS_MAX */
	}
	keel_posix_waiter_set_transport(&b->waiter, b->tp);
	rc = spin_yield_choose(b, mode, &b->waiter.spin_ns, err, err_len);
	if (rc != 0)
		return rc;
	keel_posix_timer_slack_min();
	b->cfg.transport = b->tp;
	b->cfg.waiter = keel_posix_waiter_get(&b->waiter);
	keel_boot_metrics_wrap(b);	  /* KEEL_METRICS_ADDR: every wait serves /metrics too */
	b->cfg.job_id = b->launch.job_id; /* settled now: the rendezvous may have picked it */
	b->cfg.host_of = b->host_of;	  /* hierarchical AllReduce by host; NULL with dpdk/verbs */
	b->mem_node_len = keel_storage_size(&b->cfg);
	if (b->mem_node_len == 0) {
		snprintf(err, err_len,
			 "invalid keel configuration (window must be a power of two, "
			 "mtu within %u..%u)",
			 KEEL_MTU_MIN, KEEL_MTU_MAX);
		return -EINVAL;
	}
	b->mem_node = calloc(1, b->mem_node_len);
	if (b->mem_node == NULL)
		return -ENOMEM;
	rc = keel_init(&b->node, b->mem_node, b->mem_node_len, &b->cfg, keel_posix_now_ns());
	if (rc != 0) {
		snprintf(err, err_len, "keel_init: %s", keel_strerror(rc));
		return rc;
	}
	/* Over verbs the NIC also reads what keel sends from its own memory (an in-place
	 * input's restart copy) where it lies; the other transports copy: nothing is done. */
	int reg = keel_boot_register(b, b->mem_node, b->mem_node_len);
	if (reg != 0)
		fprintf(stderr,
			"keel: rank %u: node memory not registered with the NIC (%s): "
			"payloads sent from it are copied\n",
			b->launch.rank, keel_strerror(reg));
	return 0;
}

/* KEEL_TRACE and NVTX: the node's events go to the trace unless the program has a hook. */
static int start_trace(struct keel_boot *b, char *err, size_t err_len)
{
	if (b->cfg.on_event != NULL)
		return 0;
	int rc = boot_trace_start(&b->trace, b->launch.rank, b->launch.world_size, err, err_len);
	if (rc == 0 && b->trace != NULL) {
		b->cfg.on_event = boot_trace_event;
		b->cfg.on_event_ctx = b->trace;
	}
	return rc;
}

void keel_boot_note(struct keel_boot *b, const struct keel_event *ev)
{
	if (ev->kind == KEEL_EV_CKPT_WRITE && b->node != NULL) {
		int rc = keel_metrics_observe(b->node, KEEL_HIST_CKPT_WRITE, ev->dur_ns);
		KEEL_ASSERT(rc == 0);
	}
	if (b->trace == NULL)
		return;
	struct keel_event e = *ev;
	if (b->node != NULL) {
		struct keel_view v;
		if (keel_view_get(b->node, &v, NULL, 0) == 0)
			e.epoch = v.epoch;
	}
	boot_trace_event(b->trace, &e);
}

/* The node's datagram size and the job's default settings (env_config). On loopback nothing
 * fragments a 64 KiB datagram, and each datagram costs a share of a syscall, a checksum and an
 * ack: carry as much per datagram as UDP allows. On a real network, as much as one packet of
 * the link carries (no IP fragmentation), up to jumbo frames (KEEL_MTU_DEFAULT), or larger
 * datagrams cut into such packets by the UDP transport (udp_pieces); runs of them are
 * coalesced per send and receive. *link_mtu: the size the link alone gives. */
static int datagram_size(struct keel_boot *b, const char *host, bool on_udp, uint32_t *link_mtu,
			 char *err, size_t err_len)
{
	uint32_t mtu =
	    is_loopback(host) ? KEEL_MTU_MAX : default_link_mtu(host, b->launch.world_size);
	*link_mtu = mtu;
	int rc = env_config(&b->cfg, &mtu, err, err_len);
	b->mtu_set = keel_env_is_set("KEEL_MTU"); /* datagram_size_chosen adds the tweak */
	if (rc == 0 && on_udp)
		rc = udp_pieces(b, b->mtu_set, mtu, err, err_len);
	return rc;
}

/* After the program's tweak: was the size chosen (KEEL_MTU or the tweak), not taken from the
 * link? Then the rendezvous holds every rank to it (mtu_set), and nothing is cut: the link's
 * packets the program may fragment, as it asked. */
static void datagram_size_chosen(struct keel_boot *b, uint32_t link_mtu)
{
	b->mtu_set = b->mtu_set ||
		     b->cfg.mtu != (b->piece_bytes != 0 ? pieces_mtu(b->piece_bytes) : link_mtu);
	if (b->mtu_set)
		b->piece_bytes = 0;
}

int keel_boot_start(struct keel_boot *b, void (*tweak)(struct keel_config *cfg, void *ctx),
		    void *ctx, char *err, size_t err_len)
{
	memset(b, 0, sizeof(*b));
	/* the whole table first: also variables read late (at stop) or on another path */
	int rc = keel_env_check(err, err_len);
	rc = rc != 0 ? rc : keel_launch_from_env(&b->launch, err, err_len);
	if (rc == -ENOENT) {
		keel_launch_single(&b->launch);
		rc = 0;
	}
	if (rc != 0)
		return rc;
	keel_config_default(&b->cfg);
	b->cfg.heartbeat_ns = default_heartbeat_ns(&b->launch, b->cfg.heartbeat_ns);
	b->cfg.rank = b->launch.rank;
	b->cfg.world_size = b->launch.world_size;
	char host[KEEL_LAUNCH_HOST_LEN];
	uint16_t port;
	rc = bind_address(b, host, sizeof(host), &port, err, err_len);
	if (rc != 0)
		return rc;
	enum tp_choice tp = TP_AUTO;
	rc = transport_choice(&tp, err, err_len);
	bool on_udp = tp != TP_DPDK && tp != TP_VERBS; /* its socket serves the rendezvous */
	uint32_t link_mtu = 0;
	if (rc == 0)
		rc = datagram_size(b, host, on_udp, &link_mtu, err, err_len);
	/* acks wait for the next collective's data, and a silent flight's tail is probed, only
	 * where no rank waits for a core (keel_config.acks_ride, tail_probe) */
	bool cores = !keel_posix_oversubscribed(b->launch.local_world_size);
	b->cfg.acks_ride = b->cfg.tail_probe = cores;
	if (rc == 0 && keel_env_bool("KEEL_ACKS_RIDE", &b->cfg.acks_ride, err, err_len) < 0)
		rc = -EINVAL;
	if (rc == 0 && keel_env_bool("KEEL_TAIL_PROBE", &b->cfg.tail_probe, err, err_len) < 0)
		rc = -EINVAL;
	if (rc == 0 && on_udp) {
		b->datagram_window = KEEL_WINDOW_DEFAULT; /* keel_config_default's */
		b->datagram_burst = KEEL_BURST_DEFAULT;
		scale_to_datagram(b, b->piece_bytes != 0);
	}
	if (rc == 0)
		rc = auth_config(b, err, err_len);
	if (rc == 0 && tweak != NULL)
		tweak(&b->cfg, ctx);
	datagram_size_chosen(b, link_mtu);
	if (rc == 0) /* KEEL_METRICS_ADDR: a bad address fails here, before the rendezvous */
		rc = keel_boot_metrics_open(b, err, err_len);
	b->offers = tp == TP_AUTO || tp == TP_SHM ? KEEL_RV_OFFER_SHM : 0;
	if (rc == 0 && tp == TP_DPDK)
		rc = start_dpdk(b, err, err_len);
	if (rc == 0 && tp == TP_VERBS)
		rc = start_verbs(b, err, err_len);
	if (rc == 0 && on_udp)
		rc = start_udp(b, host, port, err, err_len);
	if (rc == 0 && on_udp)
		rc = rendezvous(b, err, err_len);
	if (rc == 0 && tp == TP_SHM)
		rc = start_shm_only(b, err, err_len);
	if (rc == 0 && tp == TP_AUTO)
		rc = start_auto(b, err, err_len);
	if (rc == 0)
		rc = start_chaos(b, err, err_len);
	if (rc == 0)
		rc = start_trace(b, err, err_len);
	if (rc == 0)
		rc = start_node(b, err, err_len);
	if (rc == 0)
		rc = keel_boot_metrics_start(b, err, err_len);
	if (rc != 0)
		keel_boot_stop(b, 0);
	return rc;
}

int keel_boot_run_until(struct keel_boot *b, uint64_t deadline_ns)
{
	for (;;) {
		uint64_t now = keel_posix_now_ns(), next;
		int rc = keel_poll(b->node, now, &next);
		if (rc != 0)
			return rc;
		if (now >= deadline_ns)
			return 0;
		b->cfg.waiter.wait(b->cfg.waiter.ctx, next < deadline_ns ? next : deadline_ns);
	}
}

int keel_boot_wait(struct keel_boot *b, struct keel_op *op, struct keel_op_info *info,
		   uint32_t *members, uint32_t members_cap)
{
	for (;;) { /* every collective ends within keel_op_bound_ns */
		uint64_t next;
		keel_boot_serve(b);
		int prc = keel_poll(b->node, keel_posix_now_ns(), &next);
		int rc = keel_op_test_info(b->node, op, info, members, members_cap);
		if (rc != -EINPROGRESS)
			return rc;
		if (prc == 0 || prc == KEEL_ENOQUORUM)
			b->cfg.waiter.wait(b->cfg.waiter.ctx, next);
	}
}

bool keel_boot_others_left(const struct keel_boot *b)
{
	bool any_left = false;
	for (uint32_t r = 0; r < b->launch.world_size; r++) {
		struct keel_peer_info pi;
		if (r == b->launch.rank || keel_peer_get(b->node, r, &pi) != 0)
			continue;
		if (pi.left)
			any_left = true;
		else if (pi.state == KEEL_PEER_ALIVE)
			return false;
	}
	return any_left;
}

/* Has this process heard any other rank at all (in this life)? */
static bool heard_anyone(const struct keel_boot *b)
{
	for (uint32_t r = 0; r < b->launch.world_size; r++) {
		struct keel_peer_info pi;
		if (r != b->launch.rank && keel_peer_get(b->node, r, &pi) == 0 &&
		    pi.incarnation != 0)
			return true;
	}
	return false;
}

int keel_boot_wait_member(struct keel_boot *b, uint64_t timeout_ns)
{
	uint64_t start = keel_posix_now_ns();
	uint64_t end = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
	uint64_t quiet_ns =
	    20 * b->cfg.heartbeat_ns > 1000000000ull ? 20 * b->cfg.heartbeat_ns : 1000000000ull;
	for (;;) {
		struct keel_view v;
		if (keel_view_get(b->node, &v, NULL, 0) == 0 && v.self_member)
			return 0;
		if (keel_boot_others_left(b))
			return KEEL_EENDED;
		uint64_t now = keel_posix_now_ns(), next;
		/* A process that never heard anyone came after the end (an excluded rank that
		 * heard the members before may be cut off for a while: it keeps trying). */
		if (now - start >= quiet_ns && !heard_anyone(b))
			return KEEL_EENDED;
		if (now >= end)
			return -ETIMEDOUT;
		int rc = keel_poll(b->node, now, &next);
		if (rc != 0 && rc != KEEL_ENOQUORUM)
			return rc;
		b->cfg.waiter.wait(b->cfg.waiter.ctx, next < end ? next : end);
	}
}

int keel_boot_poll(struct keel_boot *b)
{
	uint64_t next;
	keel_boot_metrics_poll(b);
	return keel_poll(b->node, keel_posix_now_ns(), &next);
}

void keel_boot_stop(struct keel_boot *b, uint64_t linger_ns)
{
	/* Stay until peers have acknowledged everything we sent (a lost last datagram would
	 * otherwise leave a peer waiting for it), at most linger_ns. */
	keel_boot_metrics_linger(b); /* KEEL_METRICS_LINGER_MS: the end, for a scraper */
	uint64_t end = keel_posix_now_ns() + linger_ns;
	while (b->node != NULL && linger_ns != 0 && !keel_is_idle(b->node) &&
	       keel_posix_now_ns() < end) {
		uint64_t next;
		if (keel_poll(b->node, keel_posix_now_ns(), &next) != 0)
			break;
		b->cfg.waiter.wait(b->cfg.waiter.ctx, next < end ? next : end);
	}
	if (b->node != NULL) {
		int rc = keel_leave(b->node, keel_posix_now_ns());
		(void)rc; /* leaving anyway: peers that miss it notice the silence */
		keel_fini(b->node);
	}
	boot_trace_stop(b->trace); /* after the node's last events */
	b->trace = NULL;
	b->cfg.on_event = NULL;
	keel_boot_metrics_stop(b); /* after the linger above, which still serves /metrics */
	if (b->chaos != NULL && b->chaos->ops->fini != NULL)
		b->chaos->ops->fini(b->chaos);
	if (b->router != NULL)
		b->router->ops->fini(b->router); /* before its routes */
	/* The region's name stays: a restarted rank must find it; keel-run removes it. */
	if (b->shm != NULL)
		b->shm->ops->fini(b->shm);
	if (b->udp != NULL && b->udp->ops->fini != NULL)
		b->udp->ops->fini(b->udp);
	if (keel_boot_dpdk_stop != NULL)
		keel_boot_dpdk_stop(); /* no-op unless KEEL_TRANSPORT=dpdk started it */
	if (keel_boot_verbs_stop != NULL)
		keel_boot_verbs_stop(); /* no-op unless KEEL_TRANSPORT=verbs started it */
	free(b->mem_node);
	free(b->mem_chaos);
	free(b->mem_udp);
	free(b->mem_shm);
	free(b->mem_router);
	free(b->host_of);
	free(b->peer_offers);
	/* The node is gone: no copy of the key needs to outlive it. */
	explicit_bzero(b->cfg.auth_key, sizeof(b->cfg.auth_key));
	explicit_bzero(b->launch.key, sizeof(b->launch.key));
	b->node = NULL;
	b->chaos = b->udp = b->tp = b->shm = b->router = NULL;
	b->mem_node = b->mem_chaos = b->mem_udp = b->mem_shm = b->mem_router = NULL;
	b->host_of = NULL;
	b->peer_offers = NULL;
}

/* Only verbs reads from caller memory in place; the others copy, so nothing is registered. */
static int boot_register(const struct keel_boot *b, const void *addr, size_t len, int fd,
			 uint64_t offset)
{
	if (b == NULL || addr == NULL || len == 0)
		return -EINVAL;
	int rc =
	    keel_boot_verbs_register != NULL ? keel_boot_verbs_register(addr, len, fd, offset) : 1;
	if (rc == 1) /* verbs not started */
		return fd >= 0 ? -EOPNOTSUPP : 0;
	return rc;
}

int keel_boot_register(struct keel_boot *b, const void *addr, size_t len)
{
	return boot_register(b, addr, len, -1, 0);
}

int keel_boot_register_dmabuf(struct keel_boot *b, const void *addr, size_t len, int fd,
			      uint64_t offset)
{
	return fd < 0 ? -EINVAL : boot_register(b, addr, len, fd, offset);
}

size_t keel_boot_device_area_bytes(const struct keel_boot *b)
{
	return b != NULL && keel_boot_verbs_area_bytes != NULL ? keel_boot_verbs_area_bytes() : 0;
}

int keel_boot_register_device_area(struct keel_boot *b, void *addr, size_t len, int fd,
				   uint64_t offset)
{
	if (b == NULL || addr == NULL || len == 0 || fd < 0)
		return -EINVAL;
	/* a GPU that can neither order nor flush what the NIC writes there would let its
	 * kernels read older bytes: no device area for it (the sender's NIC stages instead) */
	if (b->cfg.device != NULL && !keel_device_takes_nic_writes(b->cfg.device))
		return -EOPNOTSUPP;
	int rc = keel_boot_verbs_register_area != NULL
		     ? keel_boot_verbs_register_area(addr, len, fd, offset)
		     : 1;
	return rc == 1 ? -EOPNOTSUPP : rc;
}

int keel_boot_unregister(struct keel_boot *b, const void *addr)
{
	if (b == NULL || addr == NULL)
		return -EINVAL;
	int rc = keel_boot_verbs_unregister != NULL ? keel_boot_verbs_unregister(addr) : 1;
	return rc == 1 ? 0 : rc;
}
