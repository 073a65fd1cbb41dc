/* keel-train's input from a sharded binary file: the digits written once by shard, and each
 * rank reading only the shards it owns, one epoch ahead, through the pre-load executor
 * (keel/preload.h) driven from the training loop's polls; a shard's rows reach the model
 * through an Arrow record batch (keel/arrow.h) over the read buffer, never copied. When the
 * plan moves shards, reads of shards this rank no longer owns are cancelled and the new owner
 * reads them.
 *
 * The file: a header (magic "KEELDIG1", version, counts) and a table of blocks, one per train
 * shard and one for the test set, each with its rows and a CRC-32; then the blocks, 64-byte
 * aligned, each the rows' 64 f32 pixels then their u8 labels (columns, as Arrow wants them).
 * Train sample ti (an index into the train split) is row ti / shards of shard ti % shards. */
#ifndef KEEL_TRAIN_FEED_H
#define KEEL_TRAIN_FEED_H

#include <stdbool.h>
#include <stdint.h>

#include "keel/arrow.h"
#include "keel/preload.h"
#include "train_model.h"

#define FEED_SHARDS_MAX 64u
#define FEED_ROWS_MAX	64u /* rows of one train shard (the digits over 64 shards: 23) */
#define FEED_ROW_BYTES	(TRAIN_IN * 4u + 1u)
#define FEED_ALIGN	64u
#define FEED_BLOCK_MAX	((FEED_ROWS_MAX * FEED_ROW_BYTES + FEED_ALIGN - 1) / FEED_ALIGN * FEED_ALIGN)
#define FEED_WAIT_NS	(30ull * 1000000000ull) /* a read not done by then: the disk is gone */

enum feed_slot_state { SLOT_EMPTY = 0, SLOT_LOADING, SLOT_CANCELLING, SLOT_READY, SLOT_FAILED };

struct train_feed;

/* One shard of one epoch, in memory or on its way. */
struct feed_slot {
	struct train_feed *feed;
	enum feed_slot_state state;
	uint64_t epoch;
	uint32_t shard;
	int status; /* SLOT_FAILED: why */
	struct keel_arrow_batch batch;
	/* SLOT_READY: the rows, as keel_arrow_column_find found them in the batch on arrival */
	const float *x;
	const uint8_t *y;
	uint32_t rows;
	uint8_t buf[FEED_BLOCK_MAX] __attribute__((aligned(FEED_ALIGN)));
};

struct feed_block {
	uint64_t offset;
	uint32_t rows, crc;
};

struct train_feed_stats {
	uint64_t reads, bytes; /* shard reads that arrived and were checked */
	uint64_t cancelled;    /* reads stopped because the shard moved (or the epoch went back) */
	uint64_t discarded;    /* reads that arrived for a shard moved away meanwhile */
	uint64_t moved_in;     /* shards this rank took over from another rank */
	uint64_t waits, wait_ns; /* times a step found its shard not read yet, and how long */
};

/* Whether this rank owns `shard` now (the partitioner's plan). */
typedef bool (*feed_owns_fn)(void *ctx, uint32_t shard);

struct train_feed {
	struct keel_preload *pre;
	uint32_t file;
	bool ahead;   /* read the next epoch's shards during this one (false: when first needed) */
	int cache_fd; /* for train_feed_evict: the executor's own descriptor is its business */
	const char *path;
	uint32_t shards, train_count, test_count;
	struct feed_block block[FEED_SHARDS_MAX + 1]; /* [shards]: the test set */
	bool owned[FEED_SHARDS_MAX], followed;
	struct feed_slot slot[2][FEED_SHARDS_MAX]; /* [epoch % 2][shard] */
	struct train_feed_stats stats;
	char err[256]; /* the first read failure, in words */
	uint8_t pre_mem[64 << 10] __attribute__((aligned(64)));
	uint8_t scratch[TRAIN_SAMPLES_MAX * FEED_ROW_BYTES] __attribute__((aligned(FEED_ALIGN)));
};

/* Write d (loaded from the CSV) to `path` in shards: to a temporary file beside it, then
 * renamed, so ranks that write it at once leave one whole file. Errors: the -errno of the
 * file system, -EINVAL (shards out of 1..FEED_SHARDS_MAX); err says what failed. */
int train_feed_write(const char *path, const struct train_data *d, uint32_t shards, char *err,
		     size_t err_len);

/* Open `path`, check its header and table against `shards`, read the test set into d (d's
 * counts and split set; its train rows left zero: those come from the shards). Errors:
 * -ENOENT..., -EINVAL (not a keel-train shard file, or written for other shards or
 * features), -ERANGE (shorter than its table says: truncated), -EBADMSG (a checksum failed),
 * -ENOTSUP (no pre-load executor). err names the file and the problem. */
int train_feed_open(struct train_feed *f, const char *path, uint32_t shards, bool ahead,
		    struct train_data *d, char *err, size_t err_len);

/* Follow the plan at `epoch`: drop and cancel reads of shards this rank no longer owns (or of
 * an epoch no longer next), queue the owned shards of `epoch` and, ahead, of epoch + 1. */
void train_feed_follow(struct train_feed *f, uint64_t epoch, feed_owns_fn owns, void *ctx);

/* Drive the reads (beside keel_poll). Returns the reads that ended, or a negative error. */
int train_feed_poll(struct train_feed *f);

/* The rows of `shard` in `epoch` (owned by this rank: train_feed_follow made it so), waiting
 * for the read if it has not arrived; *x has rows * TRAIN_IN floats, *y rows labels, both in
 * the read buffer, found through its Arrow batch. Errors: the read's (-ENODATA: the file was
 * truncated; -EIO...), -EBADMSG (the block fails its checksum), -ETIMEDOUT (FEED_WAIT_NS);
 * f->err says which shard of which file. */
int train_feed_rows(struct train_feed *f, uint64_t epoch, uint32_t shard, const float **x,
		    const uint8_t **y, uint32_t *rows);

/* Ask the kernel to drop the file from its page cache (POSIX_FADV_DONTNEED), so that the
 * next reads come from the disk, as those of a data set larger than memory would. Errors:
 * the -errno of posix_fadvise. */
int train_feed_evict(struct train_feed *f);

/* Read every train shard into d, in place of the CSV (for the no-failure reference). */
int train_feed_read_all(struct train_feed *f, struct train_data *d);

void train_feed_close(struct train_feed *f);

#endif
