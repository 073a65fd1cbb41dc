/* The pre-load executor (keel/preload.h): byte ranges of files read into caller buffers by
 * io_uring (liburing), or by pread where io_uring is missing, driven by the caller's poll
 * loop; never a thread. Requests, files and the submission order live in caller memory;
 * liburing maps its rings at init only. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef KEEL_HAVE_URING
#include <liburing.h>
#endif

#include "assert_int.h"
#include "keel/preload.h"

/* One io_uring read at most this long: its length is 32 bits; the rest is resubmitted. */
#define READ_PIECE_MAX (1u << 30)

enum req_state { REQ_FREE = 0, REQ_QUEUED, REQ_INFLIGHT, REQ_CANCEL_INFLIGHT };

struct req {
	enum req_state state;
	uint32_t gen; /* bumped when freed: a stale FIFO entry is skipped */
	uint32_t file;
	uint64_t offset;
	uint8_t *buf;
	size_t len, got;
	uint64_t tag;
	keel_preload_done_fn done;
	void *ctx;
};

struct pfile {
	int fd;
	bool open;
};

struct keel_preload {
	struct keel_preload_config cfg;
	bool uring;
#ifdef KEEL_HAVE_URING
	struct io_uring ring;
#endif
	uint32_t inflight, pending;
	struct req *reqs;
	struct pfile *files;
	uint64_t *fifo; /* request index | gen << 32, in submission order */
	uint32_t fifo_mask, fifo_head, fifo_tail;
	struct keel_preload_stats stats;
};

void keel_preload_config_default(struct keel_preload_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	*cfg = (struct keel_preload_config){
	    .reads_max = 256, .inflight_max = 16, .files_max = 8, .engine = KEEL_PRELOAD_AUTO};
}

static bool config_ok(const struct keel_preload_config *c)
{
	return c != NULL && c->reads_max >= 1 && c->reads_max <= KEEL_PRELOAD_READS_MAX &&
	       c->inflight_max >= 1 && c->inflight_max <= c->reads_max && c->files_max >= 1 &&
	       c->files_max <= KEEL_PRELOAD_FILES_MAX && (unsigned)c->engine <= KEEL_PRELOAD_PREAD;
}

static uint32_t fifo_slots(const struct keel_preload_config *c)
{
	uint32_t n = 1;
	while (n < c->reads_max)
		n *= 2;
	return n;
}

size_t keel_preload_storage_size(const struct keel_preload_config *cfg)
{
	if (!config_ok(cfg))
		return 0;
	return sizeof(struct keel_preload) + cfg->reads_max * sizeof(struct req) +
	       cfg->files_max * sizeof(struct pfile) + fifo_slots(cfg) * sizeof(uint64_t);
}

static int ring_init(struct keel_preload *p)
{
#ifdef KEEL_HAVE_URING
	int rc = io_uring_queue_init(p->cfg.inflight_max, &p->ring, 0);
	if (rc == 0) {
		p->uring = true;
		return 0;
	}
	return p->cfg.engine == KEEL_PRELOAD_URING ? rc : 0; /* AUTO: pread */
#else
	return p->cfg.engine == KEEL_PRELOAD_URING ? -ENOTSUP : 0;
#endif
}

int keel_preload_init(struct keel_preload **out, void *mem, size_t mem_len,
		      const struct keel_preload_config *cfg)
{
	if (out == NULL || !config_ok(cfg))
		return -EINVAL;
	*out = NULL;
	size_t need = keel_preload_storage_size(cfg);
	if (mem == NULL || mem_len < need)
		return -ENOSPC;
	memset(mem, 0, need);
	struct keel_preload *p = mem;
	p->cfg = *cfg;
	p->reqs = (struct req *)(p + 1);
	p->files = (struct pfile *)(p->reqs + cfg->reads_max);
	p->fifo = (uint64_t *)(p->files + cfg->files_max);
	p->fifo_mask = fifo_slots(cfg) - 1;
	if (cfg->engine != KEEL_PRELOAD_PREAD) {
		int rc = ring_init(p);
		if (rc != 0)
			return rc;
	}
	*out = p;
	return 0;
}

const char *keel_preload_engine_name(const struct keel_preload *p)
{
	KEEL_ASSERT(p != NULL);
	return p->uring ? "io_uring" : "pread";
}

int keel_preload_open(struct keel_preload *p, const char *path, uint32_t *file)
{
	if (p == NULL || path == NULL || file == NULL)
		return -EINVAL;
	for (uint32_t i = 0; i < p->cfg.files_max; i++) {
		if (p->files[i].open)
			continue;
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		p->files[i] = (struct pfile){.fd = fd, .open = true};
		*file = i;
		return 0;
	}
	return -ENOSPC;
}

int keel_preload_close(struct keel_preload *p, uint32_t file)
{
	if (p == NULL || file >= p->cfg.files_max || !p->files[file].open)
		return -EINVAL;
	/* An io_uring read in flight holds its own reference to the file: closing is safe. */
	close(p->files[file].fd);
	p->files[file].open = false;
	return 0;
}

static void fifo_push(struct keel_preload *p, uint32_t idx)
{
	KEEL_ASSERT(p->fifo_tail - p->fifo_head <= p->fifo_mask);
	p->fifo[p->fifo_tail++ & p->fifo_mask] = idx | (uint64_t)p->reqs[idx].gen << 32;
}

/* The read ends: its slot is free before the callback, which may queue the next one. */
static void finish(struct keel_preload *p, struct req *r, int status)
{
	KEEL_ASSERT(r->state != REQ_FREE && p->pending > 0);
	struct req done = *r;
	r->state = REQ_FREE;
	r->gen++;
	p->pending--;
	if (status == 0) {
		p->stats.reads++;
		p->stats.bytes += done.got;
	} else if (status == -ECANCELED) {
		p->stats.cancelled++;
	} else {
		p->stats.failed++;
	}
	if (done.done != NULL)
		done.done(done.ctx, done.tag, status, done.got);
}

int keel_preload_read(struct keel_preload *p, uint32_t file, uint64_t offset, void *buf, size_t len,
		      uint64_t tag, keel_preload_done_fn done, void *ctx)
{
	if (p == NULL || file >= p->cfg.files_max || !p->files[file].open || buf == NULL ||
	    len == 0 || offset > UINT64_MAX - len)
		return -EINVAL;
	struct stat st;
	if (fstat(p->files[file].fd, &st) != 0)
		return -errno;
	/* Regular files know their size: a range outside one is the caller's mistake, said now.
	 * Others, and files that say 0 bytes (procfs and sysfs report 0 for files they fill on
	 * read), are read as they come: an empty one ends -ENODATA. */
	if (S_ISREG(st.st_mode) && st.st_size > 0 && offset + len > (uint64_t)st.st_size)
		return -ERANGE;
	if (p->pending == p->cfg.reads_max)
		return -ENOSPC;
	for (uint32_t i = 0; i < p->cfg.reads_max; i++) {
		struct req *r = &p->reqs[i];
		if (r->state != REQ_FREE)
			continue;
		uint32_t gen = r->gen;
		*r = (struct req){.state = REQ_QUEUED,
				  .gen = gen,
				  .file = file,
				  .offset = offset,
				  .buf = buf,
				  .len = len,
				  .tag = tag,
				  .done = done,
				  .ctx = ctx};
		p->pending++;
		fifo_push(p, i);
		return 0;
	}
	KEEL_ASSERT(false); /* pending < reads_max: a slot is free */
	return -ENOSPC;
}

/* What the kernel said of one piece: the whole range, more to read, or the end. */
static bool piece_done(struct keel_preload *p, struct req *r, long res)
{
	if (r->state == REQ_CANCEL_INFLIGHT) {
		finish(p, r, -ECANCELED);
	} else if (res < 0) {
		finish(p, r, (int)res);
	} else if (res == 0) {
		finish(p, r, -ENODATA); /* end of file before the end of the range */
	} else {
		r->got += (size_t)res;
		KEEL_ASSERT(r->got <= r->len);
		if (r->got == r->len) {
			finish(p, r, 0);
			return true;
		}
		r->state = REQ_QUEUED; /* a short read: the rest goes again */
		p->stats.resubmits++;
		fifo_push(p, (uint32_t)(r - p->reqs));
		return false;
	}
	return true;
}

/* pread until the range is in, the file ends or the kernel fails. */
static void read_now(struct keel_preload *p, struct req *r)
{
	int fd = p->files[r->file].fd;
	for (;;) {
		ssize_t n =
		    pread(fd, r->buf + r->got, r->len - r->got, (off_t)(r->offset + r->got));
		if (n < 0 && errno == EINTR)
			continue;
		r->state = REQ_INFLIGHT;
		if (piece_done(p, r, n < 0 ? -errno : (long)n))
			return;
		/* short but not the end: piece_done queued the rest; read it here at once */
		KEEL_ASSERT(r->state == REQ_QUEUED);
		p->fifo_tail--;
	}
}

/* The next queued request, or NULL; stale entries (ended or cancelled since) are dropped. */
static struct req *fifo_pop(struct keel_preload *p)
{
	while (p->fifo_head != p->fifo_tail) {
		uint64_t e = p->fifo[p->fifo_head++ & p->fifo_mask];
		struct req *r = &p->reqs[(uint32_t)e];
		if (r->state == REQ_QUEUED && r->gen == (uint32_t)(e >> 32))
			return r;
	}
	return NULL;
}

#ifdef KEEL_HAVE_URING
static uint32_t reap(struct keel_preload *p)
{
	uint32_t ended = 0;
	struct io_uring_cqe *cqe;
	while (p->inflight > 0 && io_uring_peek_cqe(&p->ring, &cqe) == 0) {
		struct req *r = &p->reqs[(uint32_t)io_uring_cqe_get_data64(cqe)];
		long res = cqe->res;
		io_uring_cqe_seen(&p->ring, cqe);
		p->inflight--;
		ended += piece_done(p, r, res) ? 1u : 0u;
	}
	return ended;
}

static int submit(struct keel_preload *p, uint32_t *ended)
{
	uint32_t prepared = 0;
	while (p->inflight < p->cfg.inflight_max) {
		struct req *r = fifo_pop(p);
		if (r == NULL)
			break;
		if (!p->files[r->file].open) {
			finish(p, r, -ECANCELED);
			(*ended)++;
			continue;
		}
		struct io_uring_sqe *sqe = io_uring_get_sqe(&p->ring);
		KEEL_ASSERT(sqe != NULL); /* the ring has inflight_max entries */
		size_t piece = r->len - r->got < READ_PIECE_MAX ? r->len - r->got : READ_PIECE_MAX;
		io_uring_prep_read(sqe, p->files[r->file].fd, r->buf + r->got, (unsigned)piece,
				   r->offset + r->got);
		io_uring_sqe_set_data64(sqe, (uint64_t)(r - p->reqs));
		r->state = REQ_INFLIGHT;
		p->inflight++;
		prepared++;
	}
	if (p->inflight > p->stats.inflight_max_seen)
		p->stats.inflight_max_seen = p->inflight;
	int rc = prepared != 0 ? io_uring_submit(&p->ring) : 0;
	return rc < 0 ? rc : 0;
}
#endif

int keel_preload_poll(struct keel_preload *p)
{
	if (p == NULL)
		return -EINVAL;
	uint32_t ended = 0;
#ifdef KEEL_HAVE_URING
	if (p->uring) {
		ended += reap(p);
		int rc = submit(p, &ended);
		return rc < 0 ? rc : (int)ended;
	}
#endif
	for (uint32_t k = 0; k < p->cfg.inflight_max; k++) {
		struct req *r = fifo_pop(p);
		if (r == NULL)
			break;
		if (!p->files[r->file].open)
			finish(p, r, -ECANCELED);
		else
			read_now(p, r);
		ended++;
	}
	return (int)ended;
}

uint32_t keel_preload_retain(struct keel_preload *p, bool (*owned)(void *ctx, uint64_t tag),
			     void *ctx)
{
	KEEL_ASSERT(p != NULL && owned != NULL);
	uint32_t cancelled = 0;
	for (uint32_t i = 0; i < p->cfg.reads_max; i++) {
		struct req *r = &p->reqs[i];
		if ((r->state != REQ_QUEUED && r->state != REQ_INFLIGHT) || owned(ctx, r->tag))
			continue;
		cancelled++;
		if (r->state == REQ_INFLIGHT)
			r->state =
			    REQ_CANCEL_INFLIGHT; /* the kernel may still write: wait for it */
		else
			finish(p, r, -ECANCELED);
	}
	return cancelled;
}

uint32_t keel_preload_pending(const struct keel_preload *p)
{
	KEEL_ASSERT(p != NULL);
	return p->pending;
}

void keel_preload_stats_get(const struct keel_preload *p, struct keel_preload_stats *out)
{
	KEEL_ASSERT(p != NULL && out != NULL);
	*out = p->stats;
}

void keel_preload_fini(struct keel_preload *p)
{
	if (p == NULL)
		return;
#ifdef KEEL_HAVE_URING
	if (p->uring) {
		struct io_uring_cqe *cqe;
		/* The kernel writes buffers until it hands the read back: wait for each. */
		while (p->inflight > 0 && io_uring_wait_cqe(&p->ring, &cqe) == 0) {
			io_uring_cqe_seen(&p->ring, cqe);
			p->inflight--;
		}
		io_uring_queue_exit(&p->ring);
		p->uring = false;
	}
#endif
	for (uint32_t i = 0; i < p->cfg.files_max; i++) {
		if (p->files[i].open)
			close(p->files[i].fd);
		p->files[i].open = false;
	}
}
