/* The pre-load executor (start-up library, libkeel_boot.a): reads exact byte ranges of local
 * files into caller buffers ahead of time, with io_uring where the kernel allows it (pread
 * otherwise), a bounded number of reads in flight, no thread: the caller's poll loop drives
 * it with keel_preload_poll, beside keel_poll. Each read ends in a callback, once. */
#ifndef KEEL_PRELOAD_H
#define KEEL_PRELOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KEEL_PRELOAD_READS_MAX 4096u /* reads queued at once */
#define KEEL_PRELOAD_FILES_MAX 64u   /* files open at once */

enum keel_preload_engine {
	KEEL_PRELOAD_AUTO = 0, /* io_uring when built with liburing and the kernel allows it */
	KEEL_PRELOAD_URING,    /* io_uring or init fails (-ENOTSUP) */
	KEEL_PRELOAD_PREAD,    /* pread from keel_preload_poll: blocks the loop for each read */
};

struct keel_preload_config {
	uint32_t reads_max;    /* reads queued and not yet completed, 1..KEEL_PRELOAD_READS_MAX */
	uint32_t inflight_max; /* of those, at the kernel at once (1..reads_max; io_uring queue) */
	uint32_t files_max;    /* 1..KEEL_PRELOAD_FILES_MAX */
	enum keel_preload_engine engine;
};

/* reads_max 256, inflight_max 16, files_max 8, AUTO. */
void keel_preload_config_default(struct keel_preload_config *cfg);

/* How a read ended: 0 (every byte of the range is in the buffer), -ENODATA (the file ended
 * before the range did: it was truncated after the read was queued; `got` bytes arrived),
 * -EIO or another -errno of the kernel's, -ECANCELED (keel_preload_cancel or _retain: do not
 * use the buffer). */
typedef void (*keel_preload_done_fn)(void *ctx, uint64_t tag, int status, size_t got);

struct keel_preload;

size_t keel_preload_storage_size(const struct keel_preload_config *cfg);
/* Errors: -EINVAL (a bound out of range), -ENOSPC (mem too small), -ENOTSUP (engine URING
 * without io_uring), or the kernel's -errno for io_uring_queue_init. liburing maps its rings
 * here, at init only. */
KEEL_MUST_USE int keel_preload_init(struct keel_preload **out, void *mem, size_t mem_len,
				    const struct keel_preload_config *cfg);
/* "io_uring" or "pread": the engine init chose. */
const char *keel_preload_engine_name(const struct keel_preload *p);

/* Open `path` read-only; *file names it in keel_preload_read. Errors: -ENOSPC (files_max
 * open), the -errno of open/fstat (-ENOENT, -EACCES...). */
KEEL_MUST_USE int keel_preload_open(struct keel_preload *p, const char *path, uint32_t *file);
/* Close it; reads of it still queued end with -ECANCELED at the next poll. */
KEEL_MUST_USE int keel_preload_close(struct keel_preload *p, uint32_t file);

/* Queue a read of bytes [offset, offset + len) of `file` into buf (len > 0, buf valid until
 * the callback). `tag` is the caller's (e.g. a shard number): keel_preload_retain cancels by
 * it. Never blocks. Errors: -EINVAL (bad file, NULL, len 0), -ERANGE (a regular file shorter
 * than offset + len: named now, not at the read; a file that says 0 bytes, as procfs files
 * do, is read as it comes), -ENOSPC (reads_max queued). */
KEEL_MUST_USE int keel_preload_read(struct keel_preload *p, uint32_t file, uint64_t offset,
				    void *buf, size_t len, uint64_t tag, keel_preload_done_fn done,
				    void *ctx);

/* Submit queued reads (up to inflight_max at the kernel), reap finished ones, call their
 * callbacks. Never blocks with io_uring; with pread it reads up to inflight_max ranges.
 * Returns how many reads ended (callbacks called), or the -errno of io_uring_submit. */
KEEL_MUST_USE int keel_preload_poll(struct keel_preload *p);

/* Cancel every queued read whose tag `owned` says this rank no longer owns (the partitioner
 * moved the shard): a read not yet at the kernel ends with -ECANCELED now, one in flight when
 * the kernel gives it back. Returns how many were cancelled. The new owner queues its own. */
uint32_t keel_preload_retain(struct keel_preload *p, bool (*owned)(void *ctx, uint64_t tag),
			     void *ctx);

/* Reads queued and not yet ended (0: idle). */
uint32_t keel_preload_pending(const struct keel_preload *p);

struct keel_preload_stats {
	uint64_t reads, bytes;	    /* ended with 0 */
	uint64_t failed, cancelled; /* ended otherwise */
	uint64_t resubmits;	    /* partial reads continued */
	uint32_t inflight_max_seen;
};
void keel_preload_stats_get(const struct keel_preload *p, struct keel_preload_stats *out);

/* Wait for what is in flight (cancelled reads included: the kernel may still write their
 * buffers), then close every file and the ring. Safe after a failed init. */
void keel_preload_fini(struct keel_preload *p);

#ifdef __cplusplus
}
#endif

#endif
