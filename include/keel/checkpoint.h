/* keel checkpoints: the application's state buffers written atomically to a directory (temporary
 * file, fsync, rename, fsync of the directory), with a versioned header and a CRC32C per
 * section; the last K kept; the newest one that verifies restored, each rejected one reported
 * with its reason. Never allocates: the state and the I/O scratch are the caller's. Never reads
 * a clock: time arrives as now_ns. It does block in file system calls (that is its job). */
#ifndef KEEL_CHECKPOINT_H
#define KEEL_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Format and capacities. */
#define KEEL_CKPT_VERSION      1u
#define KEEL_CKPT_HEADER_BYTES 4096u /* one block: sections start block-aligned */
#define KEEL_CKPT_ALIGN	       4096u /* O_DIRECT alignment of scratch, offsets and sizes */
#define KEEL_CKPT_SECTIONS_MAX 32u   /* fits the header block with room to spare */
#define KEEL_CKPT_NAME_MAX     16u   /* section name bytes, NUL included */
#define KEEL_CKPT_KEEP_MAX     64u   /* checkpoints kept (K) */
#define KEEL_CKPT_KEEP_DEFAULT 3u
#define KEEL_CKPT_REJECTED_MAX 16u  /* rejected files a report lists (more are counted) */
#define KEEL_CKPT_DIR_MAX      256u /* directory path bytes, NUL included */
#define KEEL_CKPT_SCRATCH_MIN  (64u * 1024u)
/* Interval by time, default 15 min: a 10-30 min cadence suits large jobs (a checkpoint's cost
 * against the work a failure loses); any positive interval is accepted, 0 = off. */
#define KEEL_CKPT_INTERVAL_NS_DEFAULT (15ull * 60u * 1000000000ull)

struct keel_ckpt_config {
	const char *dir;	 /* existing directory (copied; < KEEL_CKPT_DIR_MAX bytes) */
	uint64_t config_hash;	 /* the application's config: a file with another one is refused */
	uint32_t sections_max;	 /* 1..KEEL_CKPT_SECTIONS_MAX */
	uint32_t keep;		 /* K: checkpoints kept, 1..KEEL_CKPT_KEEP_MAX */
	uint64_t interval_ns;	 /* 0: off; else due this long after the last checkpoint */
	uint64_t interval_steps; /* 0: off */
	bool direct;		 /* O_DIRECT reads and writes (NVMe); scratch must be aligned */
	/* I/O scratch, caller memory: at least KEEL_CKPT_SCRATCH_MIN bytes, a multiple of
	 * KEEL_CKPT_ALIGN, KEEL_CKPT_ALIGN-aligned. Holds the header and, with O_DIRECT, the
	 * data on its way to and from the file; larger is faster with O_DIRECT. */
	void *scratch;
	size_t scratch_len;
};

/* Defaults: keep 3, interval 15 min, no step interval, no O_DIRECT, 8 sections. */
void keel_ckpt_config_default(struct keel_ckpt_config *cfg);

struct keel_ckpt;

/* Bytes keel_ckpt_init needs for `cfg` (without the scratch), or 0 if cfg is invalid. */
size_t keel_ckpt_storage_size(const struct keel_ckpt_config *cfg);

/* Build a checkpointer in `mem` (>= storage_size bytes, 8-byte aligned). Removes temporary
 * files a crashed writer left in the directory. Never allocates.
 * Errors: -EINVAL (cfg out of range, scratch misaligned or short, dir too long), -ENOSPC
 * (mem_len too small), -ENOTDIR / -ENOENT / -EACCES (the directory cannot be opened). */
KEEL_MUST_USE int keel_ckpt_init(struct keel_ckpt **out, void *mem, size_t mem_len,
				 const struct keel_ckpt_config *cfg);

/* Close the directory; the caller owns `mem` again. Safe after a failed init (ck NULL). */
void keel_ckpt_fini(struct keel_ckpt *ck);

/* Register a state buffer (caller memory, must stay valid while the checkpointer is used) as
 * section `name` (1..15 bytes, unique). Sections are written and restored in registration
 * order; a file whose section names or sizes differ is rejected (KEEL_CKPT_LAYOUT).
 * Errors: -EINVAL (bad name, duplicate, NULL buffer with bytes > 0), -ENOSPC (sections_max
 * already registered). */
KEEL_MUST_USE int keel_ckpt_register(struct keel_ckpt *ck, const char *name, void *buf,
				     size_t bytes);

/* Is a checkpoint due at `step` / `now_ns`? True when interval_steps steps or interval_ns
 * passed since the last keel_ckpt_write (or since the first call of this function). */
bool keel_ckpt_due(struct keel_ckpt *ck, uint64_t step, uint64_t now_ns);

/* Write every section with `step`, view `epoch` and the config hash: to a temporary file,
 * fsync, rename to its final name, fsync the directory; then delete all but the `keep`
 * newest. A crash at any point leaves the previous checkpoints valid.
 * Errors: -errno of the failing system call (-ENOSPC, -EIO, ...); the temporary file is
 * removed and the previous checkpoints are untouched. */
KEEL_MUST_USE int keel_ckpt_write(struct keel_ckpt *ck, uint64_t step, uint32_t epoch,
				  uint64_t now_ns);

/* Why a checkpoint file was not used. */
enum keel_ckpt_reason {
	KEEL_CKPT_OK = 0,
	KEEL_CKPT_IO,	       /* open/read failed */
	KEEL_CKPT_TRUNCATED,   /* shorter than its header says (or than a header) */
	KEEL_CKPT_BAD_MAGIC,   /* not a keel checkpoint */
	KEEL_CKPT_BAD_VERSION, /* written by another format version */
	KEEL_CKPT_HEADER_CRC,  /* header fails its CRC32C */
	KEEL_CKPT_SECTION_CRC, /* a section fails its CRC32C */
	KEEL_CKPT_CONFIG_HASH, /* written by a different config */
	KEEL_CKPT_LAYOUT,      /* sections differ from those registered (names, sizes, count) */
	KEEL_CKPT_NOT_WANTED,  /* newer than the step asked for (keel_ckpt_restore step_max) */
};
const char *keel_ckpt_reason_str(enum keel_ckpt_reason r);

struct keel_ckpt_rejected {
	uint64_t step; /* from the file name */
	enum keel_ckpt_reason reason;
	uint32_t section;     /* SECTION_CRC / LAYOUT: which section */
	uint64_t config_hash; /* CONFIG_HASH: what the file has */
};

struct keel_ckpt_report {
	uint64_t step; /* restored */
	uint32_t epoch;
	uint64_t bytes; /* state bytes restored */
	uint32_t candidates;
	uint32_t rejected_count; /* all rejected; the first KEEL_CKPT_REJECTED_MAX are listed */
	struct keel_ckpt_rejected rejected[KEEL_CKPT_REJECTED_MAX];
};

/* Restore the newest checkpoint with step <= step_max (UINT64_MAX: any) that verifies,
 * trying older ones in turn; `rep` (may be NULL) says what was restored and why each newer
 * file was rejected. Reads straight into the registered buffers: after a failure their
 * contents are unspecified (a later success overwrites them entirely).
 * Errors: -ENOENT (no checkpoint verifies; rep lists why), -errno of the directory scan. */
KEEL_MUST_USE int keel_ckpt_restore(struct keel_ckpt *ck, uint64_t step_max,
				    struct keel_ckpt_report *rep);

/* Steps of the checkpoint files in the directory whose headers verify (config hash, layout,
 * header CRC, length; sections are checked by restore), newest first, at most `cap`.
 * Returns how many were written, or -errno. */
KEEL_MUST_USE int keel_ckpt_list(struct keel_ckpt *ck, uint64_t *steps, uint32_t cap);

/* Agreeing on a rollback step: the newest step every voter has. Each member fills its vote
 * with keel_ckpt_vote_fill (a vector of world_size * keep float slots, steps + 1, 0 = none),
 * the members sum the votes (keel_allreduce KEEL_F32 KEEL_SUM: slots are disjoint, so the
 * sum is every vote side by side), then each calls keel_ckpt_vote_decide on the sum with the
 * ranks that voted: all get the same answer. Steps must stay below 2^24 (exact in f32). */
size_t keel_ckpt_vote_count(uint32_t world_size, uint32_t keep);
/* Errors: -EINVAL (rank >= world, count too small, a step >= 2^24), or keel_ckpt_list's. */
KEEL_MUST_USE int keel_ckpt_vote_fill(struct keel_ckpt *ck, uint32_t rank, uint32_t world_size,
				      float *vote, size_t count);
/* The newest step present in the vote of every rank of voters[0..voter_count).
 * Errors: -ENOENT (no common step), -EINVAL (bad arguments). */
KEEL_MUST_USE int keel_ckpt_vote_decide(const float *sum, size_t count, uint32_t world_size,
					uint32_t keep, const uint32_t *voters, uint32_t voter_count,
					uint64_t *step);

#ifdef __cplusplus
}
#endif

#endif
