/* Checkpoints: registered caller buffers to an atomically renamed file per step, CRC32C per
 * section, last K kept, newest verifying one restored. Never allocates (directory scans use
 * getdents64 on a stack buffer, not opendir) and never reads a clock; it blocks only in I/O. */
#include "keel/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "assert_int.h"
#include "crc32c_int.h"

#define MAGIC	       "KEELCKPT"
#define NAME_PREFIX    "ckpt-"
#define NAME_SUFFIX    ".keel"
#define TMP_SUFFIX     ".tmp"
#define STEP_DIGITS    20u
#define FILE_NAME_LEN  (5u + STEP_DIGITS + 5u) /* ckpt-<20 digits>.keel */
#define CANDIDATES_MAX (2u * KEEL_CKPT_KEEP_MAX)
#define SECTION_BYTES  48u
#define SECTIONS_AT    64u
#define DENTS_BYTES    4096u

_Static_assert(SECTIONS_AT + KEEL_CKPT_SECTIONS_MAX * SECTION_BYTES <= KEEL_CKPT_HEADER_BYTES,
	       "section table must fit the header block");
_Static_assert(KEEL_CKPT_SCRATCH_MIN % KEEL_CKPT_ALIGN == 0, "scratch is whole blocks");

struct section {
	char name[KEEL_CKPT_NAME_MAX];
	void *buf;
	size_t bytes;
};

struct keel_ckpt {
	int dirfd;
	char dir[KEEL_CKPT_DIR_MAX];
	struct keel_ckpt_config cfg;
	uint32_t section_count;
	bool due_started;
	uint64_t last_step, last_ns;
	uint64_t cand[CANDIDATES_MAX]; /* scan result: steps, newest first */
	struct section sec[];	       /* cfg.sections_max */
};

/* What a header says, decoded. */
struct header {
	uint64_t step, config_hash, total_bytes;
	uint32_t epoch, section_count;
	uint64_t offset[KEEL_CKPT_SECTIONS_MAX], bytes[KEEL_CKPT_SECTIONS_MAX];
	uint32_t crc[KEEL_CKPT_SECTIONS_MAX];
};

static void put32(uint8_t *p, uint32_t v)
{
	for (unsigned i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
	for (unsigned i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (unsigned i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}
static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static uint64_t align_up(uint64_t v)
{
	return (v + KEEL_CKPT_ALIGN - 1) / KEEL_CKPT_ALIGN * KEEL_CKPT_ALIGN;
}

void keel_ckpt_config_default(struct keel_ckpt_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	memset(cfg, 0, sizeof(*cfg));
	cfg->sections_max = 8;
	cfg->keep = KEEL_CKPT_KEEP_DEFAULT;
	cfg->interval_ns = KEEL_CKPT_INTERVAL_NS_DEFAULT;
}

static bool config_valid(const struct keel_ckpt_config *cfg)
{
	if (cfg == NULL || cfg->dir == NULL || strlen(cfg->dir) == 0 ||
	    strlen(cfg->dir) >= KEEL_CKPT_DIR_MAX)
		return false;
	if (cfg->sections_max == 0 || cfg->sections_max > KEEL_CKPT_SECTIONS_MAX)
		return false;
	if (cfg->keep == 0 || cfg->keep > KEEL_CKPT_KEEP_MAX)
		return false;
	if (cfg->scratch == NULL || cfg->scratch_len < KEEL_CKPT_SCRATCH_MIN ||
	    cfg->scratch_len % KEEL_CKPT_ALIGN != 0 ||
	    (uintptr_t)cfg->scratch % KEEL_CKPT_ALIGN != 0)
		return false;
	return true;
}

size_t keel_ckpt_storage_size(const struct keel_ckpt_config *cfg)
{
	if (!config_valid(cfg))
		return 0;
	return sizeof(struct keel_ckpt) + (size_t)cfg->sections_max * sizeof(struct section);
}

/* File names: ckpt-<step, 20 digits>.keel, and the same + .tmp while being written. */
static void file_name(char *out, size_t len, uint64_t step, bool tmp)
{
	int n = snprintf(out, len, NAME_PREFIX "%020llu" NAME_SUFFIX "%s", (unsigned long long)step,
			 tmp ? TMP_SUFFIX : "");
	KEEL_ASSERT(n > 0 && (size_t)n < len);
}

/* 1: a checkpoint name (step set), 2: a temporary one, 0: anything else. */
static int parse_name(const char *name, uint64_t *step)
{
	size_t len = strlen(name);
	if (len < FILE_NAME_LEN || strncmp(name, NAME_PREFIX, 5) != 0 ||
	    strncmp(name + 5 + STEP_DIGITS, NAME_SUFFIX, 5) != 0)
		return 0;
	uint64_t v = 0;
	for (unsigned i = 0; i < STEP_DIGITS; i++) {
		char c = name[5 + i];
		if (c < '0' || c > '9')
			return 0;
		v = v * 10 + (uint64_t)(c - '0');
	}
	*step = v;
	if (len == FILE_NAME_LEN)
		return 1;
	return strcmp(name + FILE_NAME_LEN, TMP_SUFFIX) == 0 ? 2 : 0;
}

/* Call fn(ck, name, kind, step, arg) for every checkpoint-like entry of the directory. */
typedef void (*entry_fn)(struct keel_ckpt *ck, const char *name, int kind, uint64_t step,
			 void *arg);
static int scan_dir(struct keel_ckpt *ck, entry_fn fn, void *arg)
{
	_Alignas(8) char buf[DENTS_BYTES];
	if (lseek(ck->dirfd, 0, SEEK_SET) < 0)
		return -errno;
	for (;;) { /* bounded by the directory's size: getdents64 returns 0 at its end */
		ssize_t n = getdents64(ck->dirfd, buf, sizeof(buf));
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		for (ssize_t off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(void *)(buf + off);
			uint64_t step = 0;
			int kind = parse_name(d->d_name, &step);
			if (kind != 0)
				fn(ck, d->d_name, kind, step, arg);
			off += d->d_reclen;
		}
	}
}

static void unlink_tmp(struct keel_ckpt *ck, const char *name, int kind, uint64_t step, void *arg)
{
	(void)step;
	(void)arg;
	if (kind == 2)
		(void)unlinkat(ck->dirfd, name, 0);
}

int keel_ckpt_init(struct keel_ckpt **out, void *mem, size_t mem_len,
		   const struct keel_ckpt_config *cfg)
{
	KEEL_ASSERT(out != NULL);
	size_t need = keel_ckpt_storage_size(cfg);
	if (need == 0 || mem == NULL || (uintptr_t)mem % 8 != 0)
		return -EINVAL;
	if (mem_len < need)
		return -ENOSPC;
	struct keel_ckpt *ck = mem;
	memset(ck, 0, need);
	ck->cfg = *cfg;
	memcpy(ck->dir, cfg->dir, strlen(cfg->dir) + 1);
	ck->cfg.dir = ck->dir;
	ck->dirfd = open(ck->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ck->dirfd < 0)
		return -errno;
	int rc = scan_dir(ck, unlink_tmp, NULL);
	if (rc != 0) {
		close(ck->dirfd);
		return rc;
	}
	*out = ck;
	return 0;
}

void keel_ckpt_fini(struct keel_ckpt *ck)
{
	if (ck != NULL && ck->dirfd >= 0) {
		close(ck->dirfd);
		ck->dirfd = -1;
	}
}

int keel_ckpt_register(struct keel_ckpt *ck, const char *name, void *buf, size_t bytes)
{
	KEEL_ASSERT(ck != NULL);
	if (name == NULL || strlen(name) == 0 || strlen(name) >= KEEL_CKPT_NAME_MAX ||
	    (buf == NULL && bytes > 0))
		return -EINVAL;
	for (uint32_t i = 0; i < ck->section_count; i++)
		if (strcmp(ck->sec[i].name, name) == 0)
			return -EINVAL;
	if (ck->section_count == ck->cfg.sections_max)
		return -ENOSPC;
	struct section *s = &ck->sec[ck->section_count++];
	memset(s->name, 0, sizeof(s->name));
	memcpy(s->name, name, strlen(name));
	s->buf = buf;
	s->bytes = bytes;
	return 0;
}

bool keel_ckpt_due(struct keel_ckpt *ck, uint64_t step, uint64_t now_ns)
{
	KEEL_ASSERT(ck != NULL);
	if (!ck->due_started) {
		ck->due_started = true;
		ck->last_step = step;
		ck->last_ns = now_ns;
		return false;
	}
	/* differences, not sums: any interval up to UINT64_MAX is valid and cannot overflow */
	if (ck->cfg.interval_steps != 0 && step >= ck->last_step &&
	    step - ck->last_step >= ck->cfg.interval_steps)
		return true;
	return ck->cfg.interval_ns != 0 && now_ns >= ck->last_ns &&
	       now_ns - ck->last_ns >= ck->cfg.interval_ns;
}

/* Full-length pwrite/pread, retrying short transfers and EINTR. */
static int write_all(int fd, const void *p, size_t len, uint64_t off)
{
	const uint8_t *b = p;
	while (len > 0) { /* each pass moves >= 1 byte or fails */
		ssize_t n = pwrite(fd, b, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		b += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Returns bytes read (short only at end of file) or -errno. */
static ssize_t read_full(int fd, void *p, size_t len, uint64_t off)
{
	uint8_t *b = p;
	size_t got = 0;
	while (got < len) {
		ssize_t n = pread(fd, b + got, len - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* One section's data at `off` (block aligned), padded to a block; returns its CRC32C. */
static int write_section(struct keel_ckpt *ck, int fd, const struct section *s, uint64_t off,
			 uint32_t *crc)
{
	*crc = crc32c(0, s->buf, s->bytes);
	if (!ck->cfg.direct)
		return s->bytes == 0 ? 0 : write_all(fd, s->buf, s->bytes, off);
	/* O_DIRECT: through the aligned scratch, whole blocks. */
	const uint8_t *src = s->buf;
	for (size_t done = 0; done < s->bytes;) {
		size_t n = s->bytes - done;
		if (n > ck->cfg.scratch_len)
			n = ck->cfg.scratch_len;
		size_t padded = (size_t)align_up(n);
		memcpy(ck->cfg.scratch, src + done, n);
		memset((uint8_t *)ck->cfg.scratch + n, 0, padded - n);
		int rc = write_all(fd, ck->cfg.scratch, padded, off + done);
		if (rc != 0)
			return rc;
		done += n;
	}
	return 0;
}

static void encode_header(struct keel_ckpt *ck, const struct header *h)
{
	uint8_t *p = ck->cfg.scratch;
	memset(p, 0, KEEL_CKPT_HEADER_BYTES);
	memcpy(p, MAGIC, 8);
	put32(p + 8, KEEL_CKPT_VERSION);
	put64(p + 16, h->step);
	put32(p + 24, h->epoch);
	put32(p + 28, h->section_count);
	put64(p + 32, h->config_hash);
	put64(p + 40, h->total_bytes);
	for (uint32_t i = 0; i < h->section_count; i++) {
		uint8_t *e = p + SECTIONS_AT + i * SECTION_BYTES;
		memcpy(e, ck->sec[i].name, KEEL_CKPT_NAME_MAX);
		put64(e + 16, h->offset[i]);
		put64(e + 24, h->bytes[i]);
		put32(e + 32, h->crc[i]);
	}
	put32(p + 12, crc32c(0, p, KEEL_CKPT_HEADER_BYTES));
}

/* Sections, then the header, then fsync: the file is complete before it gets its name. */
static int write_file(struct keel_ckpt *ck, int fd, uint64_t step, uint32_t epoch)
{
	struct header h;
	memset(&h, 0, sizeof(h));
	h.step = step;
	h.epoch = epoch;
	h.config_hash = ck->cfg.config_hash;
	h.section_count = ck->section_count;
	uint64_t off = KEEL_CKPT_HEADER_BYTES;
	for (uint32_t i = 0; i < ck->section_count; i++) {
		h.offset[i] = off;
		h.bytes[i] = ck->sec[i].bytes;
		int rc = write_section(ck, fd, &ck->sec[i], off, &h.crc[i]);
		if (rc != 0)
			return rc;
		off += align_up(ck->sec[i].bytes);
	}
	h.total_bytes = off;
	encode_header(ck, &h);
	int rc = write_all(fd, ck->cfg.scratch, KEEL_CKPT_HEADER_BYTES, 0);
	if (rc == 0 && !ck->cfg.direct && ftruncate(fd, (off_t)off) != 0)
		rc = -errno;
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	return rc;
}

/* Keep the newest `keep` steps in cand[] (sorted, newest first). */
struct topk {
	uint32_t count, cap;
	uint64_t oldest_kept;
	uint32_t total;
};
static void collect(struct keel_ckpt *ck, const char *name, int kind, uint64_t step, void *arg)
{
	(void)name;
	struct topk *t = arg;
	if (kind != 1)
		return;
	t->total++;
	uint32_t i = t->count < t->cap ? t->count : t->cap - 1;
	if (t->count == t->cap && step <= ck->cand[i])
		return;
	while (i > 0 && ck->cand[i - 1] < step) { /* insertion, bounded by cap */
		ck->cand[i] = ck->cand[i - 1];
		i--;
	}
	ck->cand[i] = step;
	if (t->count < t->cap)
		t->count++;
}

static void prune_old(struct keel_ckpt *ck, const char *name, int kind, uint64_t step, void *arg)
{
	const struct topk *t = arg;
	if (kind == 1 && step < t->oldest_kept)
		(void)unlinkat(ck->dirfd, name, 0);
}

static int scan_newest(struct keel_ckpt *ck, uint32_t cap, struct topk *t)
{
	KEEL_ASSERT(cap >= 1 && cap <= CANDIDATES_MAX);
	memset(t, 0, sizeof(*t));
	t->cap = cap;
	return scan_dir(ck, collect, t);
}

int keel_ckpt_write(struct keel_ckpt *ck, uint64_t step, uint32_t epoch, uint64_t now_ns)
{
	KEEL_ASSERT(ck != NULL && ck->dirfd >= 0);
	char tmp[64], fin[64];
	file_name(tmp, sizeof(tmp), step, true);
	file_name(fin, sizeof(fin), step, false);
	int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (ck->cfg.direct ? O_DIRECT : 0);
	int fd = openat(ck->dirfd, tmp, flags, 0644);
	if (fd < 0)
		return -errno;
	int rc = write_file(ck, fd, step, epoch);
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat(ck->dirfd, tmp, ck->dirfd, fin) != 0)
		rc = -errno;
	if (rc != 0) {
		(void)unlinkat(ck->dirfd, tmp, 0);
		return rc;
	}
	if (fsync(ck->dirfd) != 0)
		return -errno;
	ck->due_started = true;
	ck->last_step = step;
	ck->last_ns = now_ns;
	struct topk t;
	rc = scan_newest(ck, ck->cfg.keep, &t);
	if (rc == 0 && t.total > ck->cfg.keep) {
		t.oldest_kept = ck->cand[t.count - 1];
		rc = scan_dir(ck, prune_old, &t);
	}
	return rc;
}

const char *keel_ckpt_reason_str(enum keel_ckpt_reason r)
{
	switch (r) {
	case KEEL_CKPT_OK:
		return "ok";
	case KEEL_CKPT_IO:
		return "cannot be read";
	case KEEL_CKPT_TRUNCATED:
		return "truncated (shorter than its header says)";
	case KEEL_CKPT_BAD_MAGIC:
		return "not a keel checkpoint (bad magic)";
	case KEEL_CKPT_BAD_VERSION:
		return "written by another format version";
	case KEEL_CKPT_HEADER_CRC:
		return "header fails its CRC32C";
	case KEEL_CKPT_SECTION_CRC:
		return "a section fails its CRC32C";
	case KEEL_CKPT_CONFIG_HASH:
		return "written by a different config (config hash differs)";
	case KEEL_CKPT_LAYOUT:
		return "sections differ from the registered ones";
	case KEEL_CKPT_NOT_WANTED:
		return "newer than the step asked for";
	}
	return "unknown reason";
}

/* Read and check the header of an open file; fills h, returns a reason. */
static enum keel_ckpt_reason check_header(struct keel_ckpt *ck, int fd, struct header *h,
					  struct keel_ckpt_rejected *why)
{
	uint8_t *p = ck->cfg.scratch;
	ssize_t n = read_full(fd, p, KEEL_CKPT_HEADER_BYTES, 0);
	if (n < 0)
		return KEEL_CKPT_IO;
	if (n < (ssize_t)KEEL_CKPT_HEADER_BYTES)
		return KEEL_CKPT_TRUNCATED;
	if (memcmp(p, MAGIC, 8) != 0)
		return KEEL_CKPT_BAD_MAGIC;
	if (get32(p + 8) != KEEL_CKPT_VERSION)
		return KEEL_CKPT_BAD_VERSION;
	uint32_t crc = get32(p + 12);
	put32(p + 12, 0);
	if (crc32c(0, p, KEEL_CKPT_HEADER_BYTES) != crc)
		return KEEL_CKPT_HEADER_CRC;
	h->step = get64(p + 16);
	h->epoch = get32(p + 24);
	h->section_count = get32(p + 28);
	h->config_hash = get64(p + 32);
	h->total_bytes = get64(p + 40);
	struct stat st;
	if (fstat(fd, &st) != 0)
		return KEEL_CKPT_IO;
	if ((uint64_t)st.st_size < h->total_bytes)
		return KEEL_CKPT_TRUNCATED;
	if (h->config_hash != ck->cfg.config_hash) {
		why->config_hash = h->config_hash;
		return KEEL_CKPT_CONFIG_HASH;
	}
	if (h->section_count != ck->section_count)
		return KEEL_CKPT_LAYOUT;
	uint64_t off = KEEL_CKPT_HEADER_BYTES;
	for (uint32_t i = 0; i < h->section_count; i++) {
		const uint8_t *e = p + SECTIONS_AT + i * SECTION_BYTES;
		h->offset[i] = get64(e + 16);
		h->bytes[i] = get64(e + 24);
		h->crc[i] = get32(e + 32);
		if (memcmp(e, ck->sec[i].name, KEEL_CKPT_NAME_MAX) != 0 ||
		    h->bytes[i] != ck->sec[i].bytes || h->offset[i] != off) {
			why->section = i;
			return KEEL_CKPT_LAYOUT;
		}
		off += align_up(h->bytes[i]);
	}
	return off == h->total_bytes ? KEEL_CKPT_OK : KEEL_CKPT_LAYOUT;
}

/* Read one section into its buffer and check its CRC. */
static enum keel_ckpt_reason read_section(struct keel_ckpt *ck, int fd, const struct section *s,
					  uint64_t off, uint32_t crc_want)
{
	uint32_t crc = 0;
	uint8_t *dst = s->buf;
	if (!ck->cfg.direct) {
		ssize_t n = read_full(fd, dst, s->bytes, off);
		if (n < 0)
			return KEEL_CKPT_IO;
		if ((size_t)n < s->bytes)
			return KEEL_CKPT_TRUNCATED;
		crc = crc32c(0, dst, s->bytes);
	} else {
		for (size_t done = 0; done < s->bytes;) {
			size_t want = s->bytes - done;
			if (want > ck->cfg.scratch_len)
				want = ck->cfg.scratch_len;
			size_t padded = (size_t)align_up(want);
			ssize_t n = read_full(fd, ck->cfg.scratch, padded, off + done);
			if (n < 0)
				return KEEL_CKPT_IO;
			if ((size_t)n < want)
				return KEEL_CKPT_TRUNCATED;
			memcpy(dst + done, ck->cfg.scratch, want);
			crc = crc32c(crc, dst + done, want);
			done += want;
		}
	}
	return crc == crc_want ? KEEL_CKPT_OK : KEEL_CKPT_SECTION_CRC;
}

/* Open, check and (when `load`) read one checkpoint file. */
static enum keel_ckpt_reason try_file(struct keel_ckpt *ck, uint64_t step, bool load,
				      struct header *h, struct keel_ckpt_rejected *why)
{
	char name[64];
	file_name(name, sizeof(name), step, false);
	int fd = openat(ck->dirfd, name, O_RDONLY | O_CLOEXEC | (ck->cfg.direct ? O_DIRECT : 0));
	if (fd < 0)
		return KEEL_CKPT_IO;
	enum keel_ckpt_reason r = check_header(ck, fd, h, why);
	for (uint32_t i = 0; load && r == KEEL_CKPT_OK && i < h->section_count; i++) {
		r = read_section(ck, fd, &ck->sec[i], h->offset[i], h->crc[i]);
		why->section = i;
	}
	close(fd);
	return r;
}

static void note_rejected(struct keel_ckpt_report *rep, const struct keel_ckpt_rejected *why)
{
	if (rep->rejected_count < KEEL_CKPT_REJECTED_MAX)
		rep->rejected[rep->rejected_count] = *why;
	rep->rejected_count++;
}

int keel_ckpt_restore(struct keel_ckpt *ck, uint64_t step_max, struct keel_ckpt_report *rep)
{
	KEEL_ASSERT(ck != NULL && ck->dirfd >= 0);
	struct keel_ckpt_report local;
	if (rep == NULL)
		rep = &local;
	memset(rep, 0, sizeof(*rep));
	struct topk t;
	int rc = scan_newest(ck, CANDIDATES_MAX, &t);
	if (rc != 0)
		return rc;
	rep->candidates = t.count;
	for (uint32_t i = 0; i < t.count; i++) {
		struct keel_ckpt_rejected why = {.step = ck->cand[i]};
		struct header h;
		why.reason = ck->cand[i] > step_max ? KEEL_CKPT_NOT_WANTED
						    : try_file(ck, ck->cand[i], true, &h, &why);
		if (why.reason != KEEL_CKPT_OK) {
			note_rejected(rep, &why);
			continue;
		}
		rep->step = h.step;
		rep->epoch = h.epoch;
		for (uint32_t s = 0; s < h.section_count; s++)
			rep->bytes += h.bytes[s];
		return 0;
	}
	return -ENOENT;
}

int keel_ckpt_list(struct keel_ckpt *ck, uint64_t *steps, uint32_t cap)
{
	KEEL_ASSERT(ck != NULL && (steps != NULL || cap == 0));
	struct topk t;
	int rc = scan_newest(ck, CANDIDATES_MAX, &t);
	if (rc != 0)
		return rc;
	uint32_t n = 0;
	for (uint32_t i = 0; i < t.count && n < cap; i++) {
		struct keel_ckpt_rejected why = {.step = ck->cand[i]};
		struct header h;
		if (try_file(ck, ck->cand[i], false, &h, &why) == KEEL_CKPT_OK)
			steps[n++] = ck->cand[i];
	}
	return (int)n;
}

#define VOTE_STEP_MAX (1ull << 24) /* steps + 1 must be exact in f32 */

size_t keel_ckpt_vote_count(uint32_t world_size, uint32_t keep)
{
	return (size_t)world_size * keep;
}

int keel_ckpt_vote_fill(struct keel_ckpt *ck, uint32_t rank, uint32_t world_size, float *vote,
			size_t count)
{
	KEEL_ASSERT(ck != NULL && vote != NULL);
	uint32_t keep = ck->cfg.keep;
	if (rank >= world_size || count < keel_ckpt_vote_count(world_size, keep))
		return -EINVAL;
	memset(vote, 0, count * sizeof(float));
	uint64_t steps[KEEL_CKPT_KEEP_MAX];
	int n = keel_ckpt_list(ck, steps, keep);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		if (steps[i] + 1 >= VOTE_STEP_MAX)
			return -EINVAL;
		vote[(size_t)rank * keep + (size_t)i] = (float)(steps[i] + 1);
	}
	return 0;
}

static bool vote_has(const float *row, uint32_t keep, float want)
{
	for (uint32_t i = 0; i < keep; i++)
		if (row[i] == want)
			return true;
	return false;
}

int keel_ckpt_vote_decide(const float *sum, size_t count, uint32_t world_size, uint32_t keep,
			  const uint32_t *voters, uint32_t voter_count, uint64_t *step)
{
	if (sum == NULL || voters == NULL || step == NULL || voter_count == 0 || keep == 0 ||
	    count < keel_ckpt_vote_count(world_size, keep))
		return -EINVAL;
	for (uint32_t v = 0; v < voter_count; v++)
		if (voters[v] >= world_size)
			return -EINVAL;
	/* Candidates: the first voter's steps, newest first; keep the newest all others have. */
	const float *first = sum + (size_t)voters[0] * keep;
	float best = 0;
	for (uint32_t i = 0; i < keep; i++) {
		float c = first[i];
		if (c < 1 || c <= best)
			continue;
		bool all = true;
		for (uint32_t v = 1; v < voter_count && all; v++)
			all = vote_has(sum + (size_t)voters[v] * keep, keep, c);
		if (all)
			best = c;
	}
	if (best < 1)
		return -ENOENT;
	*step = (uint64_t)best - 1;
	return 0;
}
