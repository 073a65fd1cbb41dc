/* The CPU stand-in device (keel/device_cpu.h): queued work takes effect only when it
 * finishes, a seeded number of test() calls later, in any order. It checks every address
 * against the registered staging, so a pipeline that reads an unstaged or unregistered byte
 * fails here as it would on a GPU. Never allocates: slots live in caller memory. */
#include <stdbool.h>
#include <string.h>

#include "assert_int.h"
#include "keel/device_cpu.h"
#include "keel/reduce.h"

enum work_kind { WORK_FREE = 0, WORK_COPY, WORK_REDUCE };

struct work {
	enum work_kind kind;
	uint32_t gen;	   /* the ticket's high bits: a stale ticket is refused */
	uint64_t queued;   /* order of queueing */
	uint64_t due_tick; /* finishes at or after this many test() calls */
	bool fails;
	/* a copy */
	void *dst;
	const void *src;
	size_t bytes;
	/* a reduction */
	struct keel_device_reduce r;
};

struct region {
	uint8_t *base;
	size_t bytes;
};

struct cpu_dev {
	struct keel_device_cpu_config cfg;
	uint64_t rng, tick, queued;
	struct region regions[KEEL_DEVICE_CPU_REGIONS_MAX];
	struct keel_device_cpu_stats stats;
	struct work *slots; /* inflight_max */
};

_Static_assert(KEEL_DEVICE_CPU_INFLIGHT_MAX <= 256, "a slot index fits a ticket's low byte");

void keel_device_cpu_config_default(struct keel_device_cpu_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	memset(cfg, 0, sizeof(*cfg));
	cfg->inflight_max = 64;
	cfg->delay_tests = 2;
	cfg->jitter_tests = 4;
	cfg->seed = 1;
}

static bool config_ok(const struct keel_device_cpu_config *cfg)
{
	return cfg != NULL && cfg->inflight_max >= 1 &&
	       cfg->inflight_max <= KEEL_DEVICE_CPU_INFLIGHT_MAX;
}

size_t keel_device_cpu_storage_size(const struct keel_device_cpu_config *cfg)
{
	if (!config_ok(cfg))
		return 0;
	return sizeof(struct cpu_dev) + cfg->inflight_max * sizeof(struct work);
}

static uint64_t next_rand(struct cpu_dev *d)
{
	/* xorshift64*: seeded, never zero */
	d->rng ^= d->rng >> 12;
	d->rng ^= d->rng << 25;
	d->rng ^= d->rng >> 27;
	return d->rng * 2685821657736338717ull;
}

/* Is [p, p + bytes) inside one registered region? */
static bool staged(const struct cpu_dev *d, const void *p, size_t bytes)
{
	const uint8_t *x = p;
	for (uint32_t i = 0; i < KEEL_DEVICE_CPU_REGIONS_MAX; i++) {
		const struct region *g = &d->regions[i];
		if (g->base != NULL && x >= g->base && bytes <= g->bytes &&
		    (size_t)(x - g->base) <= g->bytes - bytes)
			return true;
	}
	return false;
}

/* Does [p, p + bytes) touch any registered region? ("device memory" must not) */
static bool touches_stage(const struct cpu_dev *d, const void *p, size_t bytes)
{
	uintptr_t x = (uintptr_t)p;
	for (uint32_t i = 0; i < KEEL_DEVICE_CPU_REGIONS_MAX; i++) {
		const struct region *g = &d->regions[i];
		uintptr_t b = (uintptr_t)g->base;
		if (g->base != NULL && x < b + g->bytes && b < x + bytes)
			return true;
	}
	return false;
}

static bool side_ok(const struct cpu_dev *d, const void *p, size_t bytes, bool host)
{
	return host ? staged(d, p, bytes) : !touches_stage(d, p, bytes);
}

/* A free slot, filled with what every piece of work has; NULL when inflight_max are queued. */
static struct work *take_slot(struct cpu_dev *d, uint32_t *ticket)
{
	for (uint32_t i = 0; i < d->cfg.inflight_max; i++) {
		struct work *w = &d->slots[i];
		if (w->kind != WORK_FREE)
			continue;
		uint32_t gen = w->gen + 1;
		memset(w, 0, sizeof(*w));
		w->gen = gen & 0xffffffu;
		w->queued = ++d->queued;
		uint32_t jitter = d->cfg.jitter_tests;
		w->due_tick = d->tick + d->cfg.delay_tests +
			      (jitter != 0 ? next_rand(d) % (jitter + 1ull) : 0);
		w->fails = d->cfg.fail_at != 0 && w->queued == d->cfg.fail_at;
		*ticket = w->gen << 8 | i;
		if (++d->stats.used > d->stats.used_max)
			d->stats.used_max = d->stats.used;
		return w;
	}
	d->stats.refused_full++;
	return NULL;
}

static int cpu_copy(void *state, void *dst, const void *src, size_t bytes, enum keel_copy_dir dir,
		    uint32_t *ticket)
{
	struct cpu_dev *d = state;
	if (d == NULL || dst == NULL || src == NULL || bytes == 0 || ticket == NULL ||
	    (unsigned)dir >= KEEL_COPY_DIR_COUNT)
		return -EINVAL;
	if (!side_ok(d, dst, bytes, dir == KEEL_COPY_D2H) ||
	    !side_ok(d, src, bytes, dir == KEEL_COPY_H2D))
		return -EINVAL;
	struct work *w = take_slot(d, ticket);
	if (w == NULL)
		return -EAGAIN;
	w->kind = WORK_COPY;
	w->dst = dst;
	w->src = src;
	w->bytes = bytes;
	return 0;
}

static int cpu_reduce(void *state, const struct keel_device_reduce *r, uint32_t *ticket)
{
	struct cpu_dev *d = state;
	if (d == NULL || r == NULL || ticket == NULL || r->dst == NULL || r->a == NULL ||
	    r->b == NULL || r->count == 0 || (unsigned)r->dtype >= KEEL_DTYPE_COUNT ||
	    (unsigned)r->op >= KEEL_REDOP_COUNT || r->count > SIZE_MAX / 8)
		return -EINVAL;
	size_t bytes = r->count * keel_dtype_size(r->dtype);
	bool a_host = r->a != r->dst;
	if (!side_ok(d, r->dst, bytes, false) || !side_ok(d, r->b, bytes, true) ||
	    (a_host && !staged(d, r->a, bytes) && touches_stage(d, r->a, bytes)) ||
	    (r->mirror != NULL && !side_ok(d, r->mirror, bytes, true)))
		return -EINVAL;
	struct work *w = take_slot(d, ticket);
	if (w == NULL)
		return -EAGAIN;
	w->kind = WORK_REDUCE;
	w->r = *r;
	return 0;
}

/* The work takes effect: as a GPU would leave memory once its event has fired. */
static void run_work(struct cpu_dev *d, struct work *w)
{
	KEEL_ASSERT(w->kind == WORK_COPY || w->kind == WORK_REDUCE);
	if (w->kind == WORK_COPY) {
		memmove(w->dst, w->src, w->bytes);
		d->stats.copies++;
		d->stats.bytes += w->bytes;
		return;
	}
	const struct keel_device_reduce *r = &w->r;
	size_t bytes = r->count * keel_dtype_size(r->dtype);
	keel_reduce(r->dst, r->a, r->b, r->count, r->dtype, r->op);
	if (r->divisor > 1)
		keel_reduce_finish_avg(r->dst, r->count, r->dtype, r->divisor);
	if (r->mirror != NULL)
		memcpy(r->mirror, r->dst, bytes);
	d->stats.reductions++;
	d->stats.bytes += bytes;
}

/* Is older work than w still queued? (w then finishes out of order) */
static bool older_queued(const struct cpu_dev *d, const struct work *w)
{
	for (uint32_t i = 0; i < d->cfg.inflight_max; i++)
		if (d->slots[i].kind != WORK_FREE && d->slots[i].queued < w->queued)
			return true;
	return false;
}

static int cpu_test(void *state, uint32_t ticket)
{
	struct cpu_dev *d = state;
	uint32_t slot = ticket & 0xffu;
	if (d == NULL || slot >= d->cfg.inflight_max)
		return -EINVAL;
	struct work *w = &d->slots[slot];
	if (w->kind == WORK_FREE || w->gen != ticket >> 8)
		return -EINVAL; /* released already, or never queued */
	d->tick++;
	if (d->tick < w->due_tick)
		return -EINPROGRESS;
	if (older_queued(d, w))
		d->stats.finished_out_of_order++;
	int rc = 0;
	if (w->fails) {
		d->stats.failed++;
		rc = -EIO;
	} else {
		run_work(d, w);
	}
	w->kind = WORK_FREE;
	KEEL_ASSERT(d->stats.used > 0);
	d->stats.used--;
	return rc;
}

static int cpu_register(void *state, void *mem, size_t bytes)
{
	struct cpu_dev *d = state;
	if (d == NULL || mem == NULL || bytes == 0)
		return -EINVAL;
	if (touches_stage(d, mem, bytes))
		return -EINVAL; /* registered already (CUDA: cudaErrorHostMemoryAlreadyRegistered)
				 */
	for (uint32_t i = 0; i < KEEL_DEVICE_CPU_REGIONS_MAX; i++) {
		if (d->regions[i].base == NULL) {
			d->regions[i] = (struct region){.base = mem, .bytes = bytes};
			return 0;
		}
	}
	return -ENOMEM;
}

static int cpu_unregister(void *state, void *mem)
{
	struct cpu_dev *d = state;
	if (d == NULL || mem == NULL)
		return -EINVAL;
	for (uint32_t i = 0; i < KEEL_DEVICE_CPU_REGIONS_MAX; i++) {
		if (d->regions[i].base == mem) {
			d->regions[i] = (struct region){0};
			return 0;
		}
	}
	return -EINVAL;
}

static void cpu_fini(void *state)
{
	(void)state; /* caller memory; nothing held */
}

static const struct keel_device_ops cpu_ops = {
    .name = "cpu",
    .copy = cpu_copy,
    .reduce = cpu_reduce,
    .test = cpu_test,
    .host_register = cpu_register,
    .host_unregister = cpu_unregister,
    .fini = cpu_fini,
};

int keel_device_cpu_init(struct keel_device *dev, void *mem, size_t mem_len,
			 const struct keel_device_cpu_config *cfg)
{
	if (dev == NULL || !config_ok(cfg))
		return -EINVAL;
	size_t need = keel_device_cpu_storage_size(cfg);
	if (mem == NULL || mem_len < need)
		return -ENOSPC;
	memset(mem, 0, need);
	struct cpu_dev *d = mem;
	d->cfg = *cfg;
	d->rng = cfg->seed != 0 ? cfg->seed : 1;
	d->slots = (struct work *)(d + 1);
	dev->ops = &cpu_ops;
	dev->state = d;
	return 0;
}

void keel_device_cpu_stats(const struct keel_device *dev, struct keel_device_cpu_stats *out)
{
	KEEL_ASSERT(dev != NULL && dev->ops == &cpu_ops && out != NULL);
	const struct cpu_dev *d = dev->state;
	*out = d->stats;
}
