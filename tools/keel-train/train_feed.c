/* keel-train's sharded input (train_feed.h): the file's layout and checks, the per-epoch
 * slots that the pre-load executor fills, and the plan they follow. Reads only the header,
 * the test set and the shards the rank owns; never blocks but where a step needs rows that
 * have not arrived. */
#include "train_feed.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "keel/boot.h"

#define MAGIC	"KEELDIG1"
#define VERSION 1u

struct file_header { /* on disk, little-endian (as the machines that run keel) */
	char magic[8];
	uint32_t version, shards, features, train_count, test_count, align, header_crc, pad;
};
_Static_assert(sizeof(struct file_header) == 40, "no padding on disk");
_Static_assert(sizeof(struct feed_block) == 16, "no padding on disk");
_Static_assert(FEED_SHARDS_MAX < 256, "a shard fits the low byte of a read's tag");

static size_t table_bytes(uint32_t shards)
{
	return sizeof(struct file_header) + (shards + 1) * sizeof(struct feed_block);
}

static size_t align_up(size_t n)
{
	return (n + FEED_ALIGN - 1) / FEED_ALIGN * FEED_ALIGN;
}

static uint32_t shard_rows(uint32_t train_count, uint32_t shards, uint32_t s)
{
	return train_count > s ? (train_count - s + shards - 1) / shards : 0;
}

static uint32_t header_crc(const struct file_header *h, const struct feed_block *table)
{
	struct file_header c = *h;
	c.header_crc = 0;
	uLong crc = crc32(0, (const Bytef *)&c, sizeof(c));
	return (uint32_t)crc32(crc, (const Bytef *)table,
			       (uInt)((h->shards + 1) * sizeof(struct feed_block)));
}

/* Rows (sample numbers in d) as one block: the pixels of every row, then the labels. */
static void block_fill(uint8_t *out, const struct train_data *d, const uint32_t *sample,
		       uint32_t rows)
{
	for (uint32_t r = 0; r < rows; r++) {
		memcpy(out + (size_t)r * TRAIN_IN * 4, d->x[sample[r]], TRAIN_IN * 4);
		out[(size_t)rows * TRAIN_IN * 4 + r] = d->y[sample[r]];
	}
}

static size_t layout(struct file_header *h, struct feed_block *table, const struct train_data *d,
		     uint32_t shards)
{
	*h = (struct file_header){.version = VERSION,
				  .shards = shards,
				  .features = TRAIN_IN,
				  .train_count = d->train_count,
				  .test_count = d->test_count,
				  .align = FEED_ALIGN};
	memcpy(h->magic, MAGIC, 8);
	size_t at = align_up(table_bytes(shards));
	for (uint32_t s = 0; s <= shards; s++) {
		uint32_t rows = s < shards ? shard_rows(d->train_count, shards, s) : d->test_count;
		table[s] = (struct feed_block){.offset = at, .rows = rows};
		at = align_up(at + (size_t)rows * FEED_ROW_BYTES);
	}
	return at;
}

static int write_all(const char *tmp, const uint8_t *img, size_t len)
{
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -errno;
	size_t done = 0;
	int rc = 0;
	while (rc == 0 && done < len) {
		ssize_t n = write(fd, img + done, len - done);
		if (n < 0 && errno != EINTR)
			rc = -errno;
		done += n > 0 ? (size_t)n : 0;
	}
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

int train_feed_write(const char *path, const struct train_data *d, uint32_t shards, char *err,
		     size_t err_len)
{
	static struct feed_block table[FEED_SHARDS_MAX + 1];
	static uint32_t sample[TRAIN_SAMPLES_MAX];
	if (shards == 0 || shards > FEED_SHARDS_MAX ||
	    shard_rows(d->train_count, shards, 0) > FEED_ROWS_MAX) {
		snprintf(err, err_len, "%s: %u shards: expected 1..%u, at most %u rows each", path,
			 shards, FEED_SHARDS_MAX, FEED_ROWS_MAX);
		return -EINVAL;
	}
	struct file_header h;
	size_t len = layout(&h, table, d, shards);
	uint8_t *img = calloc(1, len);
	if (img == NULL) {
		snprintf(err, err_len, "%s: no memory for %zu bytes", path, len);
		return -ENOMEM;
	}
	for (uint32_t s = 0; s <= shards; s++) {
		uint32_t rows = table[s].rows;
		for (uint32_t r = 0; r < rows; r++)
			sample[r] = s < shards ? d->train[s + r * shards] : d->test[r];
		block_fill(img + table[s].offset, d, sample, rows);
		table[s].crc = (uint32_t)crc32(0, img + table[s].offset,
					       (uInt)((size_t)rows * FEED_ROW_BYTES));
	}
	h.header_crc = header_crc(&h, table);
	memcpy(img, &h, sizeof(h));
	memcpy(img + sizeof(h), table, (shards + 1) * sizeof(struct feed_block));
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
	int rc = write_all(tmp, img, len);
	free(img);
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	if (rc != 0) {
		(void)unlink(tmp);
		snprintf(err, err_len, "cannot write %s: %s", path, strerror(-rc));
	}
	return rc;
}

/* ---- reads ----------------------------------------------------------------------------- */

struct sync_read {
	int status;
	bool done;
};

static void sync_done(void *ctx, uint64_t tag, int status, size_t got)
{
	struct sync_read *s = ctx;
	(void)tag;
	(void)got;
	s->status = status;
	s->done = true;
}

/* A read the caller waits for (the header, the test set, the reference's shards). */
static int read_wait(struct train_feed *f, uint64_t offset, void *buf, size_t len)
{
	struct sync_read s = {0};
	int rc = keel_preload_read(f->pre, f->file, offset, buf, len, UINT64_MAX, sync_done, &s);
	uint64_t end = keel_posix_now_ns() + FEED_WAIT_NS;
	while (rc == 0 && !s.done) {
		rc = keel_preload_poll(f->pre);
		rc = rc < 0 ? rc : keel_posix_now_ns() > end ? -ETIMEDOUT : 0;
	}
	return rc != 0 ? rc : s.status;
}

static int block_check(const struct train_feed *f, uint32_t s, const uint8_t *buf)
{
	size_t len = (size_t)f->block[s].rows * FEED_ROW_BYTES;
	return (uint32_t)crc32(0, buf, (uInt)len) == f->block[s].crc ? 0 : -EBADMSG;
}

static int header_check(struct train_feed *f, const struct file_header *h, uint32_t shards,
			char *err, size_t err_len)
{
	if (memcmp(h->magic, MAGIC, 8) != 0 || h->version != VERSION) {
		snprintf(err, err_len, "%s: not a keel-train shard file (magic or version)",
			 f->path);
		return -EINVAL;
	}
	if (h->shards != shards || h->features != TRAIN_IN || h->align != FEED_ALIGN ||
	    h->train_count + (uint64_t)h->test_count > TRAIN_SAMPLES_MAX ||
	    shard_rows(h->train_count, shards, 0) > FEED_ROWS_MAX) {
		snprintf(err, err_len,
			 "%s: written for %u shards, %u features, %u + %u samples; this keel-train "
			 "needs %u shards of %u features: write it again (delete it)",
			 f->path, h->shards, h->features, h->train_count, h->test_count, shards,
			 TRAIN_IN);
		return -EINVAL;
	}
	return 0;
}

static int table_check(struct train_feed *f, const struct file_header *h, char *err, size_t err_len)
{
	if (header_crc(h, f->block) != h->header_crc) {
		snprintf(err, err_len, "%s: its header fails its checksum (corrupt)", f->path);
		return -EBADMSG;
	}
	uint64_t at = align_up(table_bytes(h->shards));
	for (uint32_t s = 0; s <= h->shards; s++) {
		uint32_t want =
		    s < h->shards ? shard_rows(h->train_count, h->shards, s) : h->test_count;
		if (f->block[s].rows != want || f->block[s].offset < at) {
			snprintf(err, err_len,
				 "%s: block %u has %u rows at %" PRIu64
				 " (expected %u, from %" PRIu64 ")",
				 f->path, s, f->block[s].rows, f->block[s].offset, want, at);
			return -EINVAL;
		}
		at = f->block[s].offset + (uint64_t)want * FEED_ROW_BYTES;
	}
	return 0;
}

static int open_checked(struct train_feed *f, uint32_t shards, char *err, size_t err_len)
{
	struct file_header h;
	int rc = read_wait(f, 0, &h, sizeof(h));
	if (rc == 0)
		rc = header_check(f, &h, shards, err, err_len);
	if (rc == 0)
		rc = read_wait(f, sizeof(h), f->block, (shards + 1) * sizeof(struct feed_block));
	if (rc == 0)
		rc = table_check(f, &h, err, err_len);
	if (rc == -ERANGE || rc == -ENODATA)
		snprintf(err, err_len,
			 "%s: shorter than its header and table: truncated, or not a "
			 "keel-train shard file",
			 f->path);
	if (rc == 0) {
		f->shards = shards;
		f->train_count = h.train_count;
		f->test_count = h.test_count;
	}
	return rc;
}

/* The test set, into d's rows of the test samples. */
static int test_set_read(struct train_feed *f, struct train_data *d, char *err, size_t err_len)
{
	d->count = f->train_count + f->test_count;
	train_data_split(d);
	if (d->train_count != f->train_count || d->test_count != f->test_count) {
		snprintf(err, err_len, "%s: %u train / %u test samples is not keel-train's split",
			 f->path, f->train_count, f->test_count);
		return -EINVAL;
	}
	const struct feed_block *b = &f->block[f->shards];
	int rc = read_wait(f, b->offset, f->scratch, (size_t)b->rows * FEED_ROW_BYTES);
	if (rc == 0)
		rc = block_check(f, f->shards, f->scratch);
	if (rc != 0) {
		snprintf(err, err_len, "%s: reading the test set: %s", f->path,
			 rc == -EBADMSG	 ? "fails its checksum (corrupt)"
			 : rc == -ERANGE ? "beyond the end of the file (truncated)"
					 : strerror(-rc));
		return rc;
	}
	for (uint32_t r = 0; r < b->rows; r++) {
		memcpy(d->x[d->test[r]], f->scratch + (size_t)r * TRAIN_IN * 4, TRAIN_IN * 4);
		d->y[d->test[r]] = f->scratch[(size_t)b->rows * TRAIN_IN * 4 + r];
	}
	return 0;
}

int train_feed_open(struct train_feed *f, const char *path, uint32_t shards, bool ahead,
		    struct train_data *d, char *err, size_t err_len)
{
	memset(f, 0, sizeof(*f));
	f->path = path;
	f->cache_fd = -1;
	f->ahead = ahead;
	if (shards == 0 || shards > FEED_SHARDS_MAX) {
		snprintf(err, err_len, "%s: %u shards: expected 1..%u", path, shards,
			 FEED_SHARDS_MAX);
		return -EINVAL;
	}
	struct keel_preload_config pc;
	keel_preload_config_default(&pc);
	pc.inflight_max = 32; /* two epochs' shards of a rank at once */
	pc.files_max = 1;
	int rc = keel_preload_init(&f->pre, f->pre_mem, sizeof(f->pre_mem), &pc);
	if (rc != 0) {
		snprintf(err, err_len, "pre-load executor: %s", keel_strerror(rc));
		return rc;
	}
	rc = keel_preload_open(f->pre, path, &f->file);
	if (rc != 0)
		snprintf(err, err_len, "cannot open %s: %s", path, strerror(-rc));
	if (rc == 0 && (f->cache_fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		rc = -errno;
	if (rc == 0)
		rc = open_checked(f, shards, err, err_len);
	if (rc == 0)
		rc = test_set_read(f, d, err, err_len);
	for (uint32_t p = 0; p < 2; p++)
		for (uint32_t s = 0; s < FEED_SHARDS_MAX; s++)
			f->slot[p][s] = (struct feed_slot){.feed = f, .shard = s};
	if (rc != 0)
		train_feed_close(f);
	return rc;
}

int train_feed_evict(struct train_feed *f)
{
	return -posix_fadvise(f->cache_fd, 0, 0, POSIX_FADV_DONTNEED);
}

void train_feed_close(struct train_feed *f)
{
	if (f->cache_fd >= 0)
		(void)close(f->cache_fd);
	f->cache_fd = -1;
	if (f->pre != NULL)
		keel_preload_fini(f->pre);
	f->pre = NULL;
}

/* ---- slots: one shard of one epoch ------------------------------------------------------ */

static uint64_t tag_of(uint64_t epoch, uint32_t shard)
{
	return epoch << 8 | shard;
}

static void fail(struct train_feed *f, struct feed_slot *sl, int status)
{
	sl->state = SLOT_FAILED;
	sl->status = status;
	snprintf(f->err, sizeof(f->err), "%s: shard %u (epoch %" PRIu64 "): %s", f->path, sl->shard,
		 sl->epoch,
		 status == -EBADMSG ? "fails its checksum (the file changed or is corrupt)"
		 : status == -ENODATA || status == -ERANGE
		     ? "the file ends inside it (truncated after it was opened)"
		     : strerror(-status));
}

/* The rows go to the model through the batch, as a consumer of any Arrow producer would take
 * them: found once, when the read arrives, then kept with the slot. */
static int rows_find(struct feed_slot *sl)
{
	const void *px, *py;
	int64_t n, m;
	int rc = keel_arrow_column_find(&sl->batch.schema, &sl->batch.array, "pixels", KEEL_F32,
					TRAIN_IN, &px, &n, NULL, 0);
	if (rc == 0)
		rc = keel_arrow_column_find(&sl->batch.schema, &sl->batch.array, "label", KEEL_U8,
					    1, &py, &m, NULL, 0);
	if (rc != 0)
		return rc;
	sl->x = px;
	sl->y = py;
	sl->rows = (uint32_t)n;
	return 0;
}

/* The executor's callback: check the block and describe it as an Arrow batch. */
static void slot_done(void *ctx, uint64_t tag, int status, size_t got)
{
	struct feed_slot *sl = ctx;
	struct train_feed *f = sl->feed;
	(void)tag;
	(void)got;
	if (status == -ECANCELED) {
		f->stats.cancelled++;
		sl->state = SLOT_EMPTY;
		return;
	}
	if (status == 0)
		status = block_check(f, sl->shard, sl->buf);
	uint32_t rows = f->block[sl->shard].rows;
	struct keel_arrow_column cols[2] = {
	    {.name = "pixels", .dtype = KEEL_F32, .width = TRAIN_IN, .data = sl->buf},
	    {.name = "label",
	     .dtype = KEEL_U8,
	     .width = 1,
	     .data = sl->buf + (size_t)rows * TRAIN_IN * 4}};
	if (status == 0)
		status = keel_arrow_export(&sl->batch, cols, 2, rows, NULL, 0);
	if (status == 0)
		status = rows_find(sl);
	if (status != 0) {
		fail(f, sl, status);
		return;
	}
	f->stats.reads++;
	f->stats.bytes += (uint64_t)rows * FEED_ROW_BYTES;
	sl->state = SLOT_READY;
}

static int slot_queue(struct train_feed *f, struct feed_slot *sl, uint64_t epoch)
{
	const struct feed_block *b = &f->block[sl->shard];
	sl->epoch = epoch;
	sl->state = SLOT_LOADING;
	int rc =
	    keel_preload_read(f->pre, f->file, b->offset, sl->buf, (size_t)b->rows * FEED_ROW_BYTES,
			      tag_of(epoch, sl->shard), slot_done, sl);
	if (rc == -ENOSPC) {
		sl->state = SLOT_EMPTY; /* the queue is full: queued again at the next follow */
		return 0;
	}
	if (rc != 0)
		fail(f, sl, rc);
	return rc;
}

/* The executor asks, for each queued read, whether to keep it. */
static bool keep_read(void *ctx, uint64_t tag)
{
	struct train_feed *f = ctx;
	const struct feed_slot *sl = &f->slot[(tag >> 8) % 2][tag & 0xff];
	return sl->state != SLOT_CANCELLING;
}

/* What slot `sl` should hold now: `epoch` if this rank owns the shard and wants that epoch
 * (the next one only when reading ahead), else nothing. Returns whether a read is to be
 * cancelled. A read that arrived for a shard moved away since is counted as discarded. */
static bool slot_align(struct train_feed *f, struct feed_slot *sl, uint64_t epoch, bool owned,
		       bool want)
{
	bool right = owned && want && sl->epoch == epoch;
	if (sl->state == SLOT_LOADING && !right) {
		sl->state = SLOT_CANCELLING;
		return true;
	}
	if (sl->state == SLOT_READY && !right) {
		f->stats.discarded += !owned && sl->epoch >= epoch;
		sl->state = SLOT_EMPTY;
	}
	if (sl->state == SLOT_EMPTY && owned && want && f->ahead)
		(void)slot_queue(f, sl, epoch);
	return false;
}

void train_feed_follow(struct train_feed *f, uint64_t epoch, feed_owns_fn owns, void *ctx)
{
	bool cancel = false;
	for (uint32_t s = 0; s < f->shards; s++) {
		bool owned = owns(ctx, s);
		f->stats.moved_in += owned && f->followed && !f->owned[s];
		f->owned[s] = owned;
		cancel |= slot_align(f, &f->slot[epoch % 2][s], epoch, owned, true);
		cancel |= slot_align(f, &f->slot[(epoch + 1) % 2][s], epoch + 1, owned, f->ahead);
	}
	f->followed = true;
	if (cancel)
		(void)keel_preload_retain(f->pre, keep_read, f);
}

int train_feed_poll(struct train_feed *f)
{
	return keel_preload_poll(f->pre);
}

int train_feed_rows(struct train_feed *f, uint64_t epoch, uint32_t shard, const float **x,
		    const uint8_t **y, uint32_t *rows)
{
	struct feed_slot *sl = &f->slot[epoch % 2][shard];
	uint64_t t0 = 0, end = 0;
	while (sl->state != SLOT_READY || sl->epoch != epoch) {
		if (t0 == 0) {
			t0 = keel_posix_now_ns();
			end = t0 + FEED_WAIT_NS;
			f->stats.waits++;
		}
		if (sl->state == SLOT_FAILED)
			return sl->status;
		if (sl->state == SLOT_READY || (sl->state == SLOT_LOADING && sl->epoch != epoch)) {
			sl->state = sl->state == SLOT_READY ? SLOT_EMPTY : SLOT_CANCELLING;
			(void)keel_preload_retain(f->pre, keep_read, f);
		}
		if (sl->state == SLOT_EMPTY && slot_queue(f, sl, epoch) != 0)
			return sl->status;
		int rc = keel_preload_poll(f->pre);
		if (rc < 0)
			return rc;
		if (keel_posix_now_ns() > end) {
			snprintf(f->err, sizeof(f->err), "%s: shard %u not read after %llu s",
				 f->path, shard, FEED_WAIT_NS / 1000000000ull);
			return -ETIMEDOUT;
		}
	}
	if (t0 != 0)
		f->stats.wait_ns += keel_posix_now_ns() - t0;
	*x = sl->x;
	*y = sl->y;
	*rows = sl->rows;
	return 0;
}

int train_feed_read_all(struct train_feed *f, struct train_data *d)
{
	for (uint32_t s = 0; s < f->shards; s++) {
		const struct feed_block *b = &f->block[s];
		int rc = read_wait(f, b->offset, f->scratch, (size_t)b->rows * FEED_ROW_BYTES);
		if (rc == 0)
			rc = block_check(f, s, f->scratch);
		if (rc != 0) {
			snprintf(f->err, sizeof(f->err), "%s: shard %u: %s", f->path, s,
				 rc == -EBADMSG ? "fails its checksum" : strerror(-rc));
			return rc;
		}
		for (uint32_t r = 0; r < b->rows; r++) {
			uint32_t sample = d->train[s + r * f->shards];
			memcpy(d->x[sample], f->scratch + (size_t)r * TRAIN_IN * 4, TRAIN_IN * 4);
			d->y[sample] = f->scratch[(size_t)b->rows * TRAIN_IN * 4 + r];
		}
	}
	return 0;
}
