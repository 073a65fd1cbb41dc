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

/* Device memory the CPU must not touch: the program's view faults, work reaches the pages. */
struct guard {
	uint8_t *view, *work;
	size_t bytes;
};

struct cpu_dev {
	struct keel_device_cpu_config cfg;
	uint64_t rng, tick, queued;
	struct region regions[KEEL_DEVICE_CPU_REGIONS_MAX];
	struct guard guards[KEEL_DEVICE_CPU_GUARDS_MAX];
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
	       cfg->inflight_max <= KEEL_DEVICE_CPU_INFLIGHT_MAX &&
	       (cfg->nic_writes_rc == 0 || cfg->nic_writes_rc == -EOPNOTSUPP ||
		cfg->nic_writes_rc == -EIO);
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

static bool ranges_meet(uintptr_t x, size_t x_len, uintptr_t y, size_t y_len)
{
	return x < y + y_len && y < x + x_len;
}

/* Does [p, p + bytes) touch any registered region? ("device memory" must not) */
static bool touches_stage(const struct cpu_dev *d, const void *p, size_t bytes)
{
	for (uint32_t i = 0; i < KEEL_DEVICE_CPU_REGIONS_MAX; i++) {
		const struct region *g = &d->regions[i];
		if (g->base != NULL &&
		    ranges_meet((uintptr_t)p, bytes, (uintptr_t)g->base, g->bytes))
			return true;
	}
	return false;
}

/* The guard [p, p + bytes) lies in, or NULL when it meets none; *ok is false when it meets
 * one without lying wholly inside it. */
static const struct guard *guard_of(const struct cpu_dev *d, const void *p, size_t bytes, bool *ok)
{
	uintptr_t x = (uintptr_t)p;
	*ok = true;
	for (uint32_t i = 0; i < KEEL_DEVICE_CPU_GUARDS_MAX; i++) {
		const struct guard *g = &d->guards[i];
		uintptr_t v = (uintptr_t)g->view;
		if (g->view == NULL || !ranges_meet(x, bytes, v, g->bytes))
			continue;
		*ok = x >= v && bytes <= g->bytes && x - v <= g->bytes - bytes;
		return g;
	}
	return NULL;
}

static bool touches_guard(const struct cpu_dev *d, const void *p, size_t bytes)
{
	bool ok;
	return guard_of(d, p, bytes, &ok) != NULL;
}

static bool side_ok(const struct cpu_dev *d, const void *p, size_t bytes, bool host)
{
	if (host)
		return staged(d, p, bytes);
	bool ok;
	(void)guard_of(d, p, bytes, &ok);
	return ok && !touches_stage(d, p, bytes);
}

/* Where the stand-in itself reaches device memory: through the guard's working mapping. */
static void *reach(const struct cpu_dev *d, const void *p, size_t bytes)
{
	bool ok;
	const struct guard *g = guard_of(d, p, bytes, &ok);
	KEEL_ASSERT(ok); /* checked when the work was queued */
	return g == NULL ? (void *)(uintptr_t)p : g->work + ((const uint8_t *)p - g->view);
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
	/* a: the device buffer (dst itself, or the input) or the stage; b: the stage, or device
	 * memory the NIC wrote a received chunk into */
	bool a_ok = staged(d, r->a, bytes) || side_ok(d, r->a, bytes, false);
	bool b_ok = staged(d, r->b, bytes) || side_ok(d, r->b, bytes, false);
	if (!side_ok(d, r->dst, bytes, false) || !b_ok || !a_ok ||
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
		memmove(reach(d, w->dst, w->bytes), reach(d, w->src, w->bytes), w->bytes);
		d->stats.copies++;
		d->stats.bytes += w->bytes;
		return;
	}
	const struct keel_device_reduce *r = &w->r;
	size_t bytes = r->count * keel_dtype_size(r->dtype);
	void *dst = reach(d, r->dst, bytes);
	keel_reduce(dst, reach(d, r->a, bytes), reach(d, r->b, bytes), r->count, r->dtype, r->op);
	if (r->divisor > 1)
		keel_reduce_finish_avg(dst, r->count, r->dtype, r->divisor);
	if (r->mirror != NULL)
		memcpy(r->mirror, dst, bytes);
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

static bool cpu_ordered(void *state)
{
	const struct cpu_dev *d = state;
	return d != NULL && d->cfg.in_order;
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
	bool older = older_queued(d, w);
	if (older && d->cfg.in_order)
		return -EINPROGRESS;
	if (older)
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
	if (touches_guard(d, mem, bytes))
		return -EINVAL; /* device memory is not staging */
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

/* Does queued work read or write [p, p + bytes)? */
static bool work_touches(const struct cpu_dev *d, const uint8_t *p, size_t bytes)
{
	uintptr_t x = (uintptr_t)p;
	for (uint32_t i = 0; i < d->cfg.inflight_max; i++) {
		const struct work *w = &d->slots[i];
		if (w->kind == WORK_COPY && (ranges_meet((uintptr_t)w->dst, w->bytes, x, bytes) ||
					     ranges_meet((uintptr_t)w->src, w->bytes, x, bytes)))
			return true;
		if (w->kind == WORK_REDUCE) {
			size_t n = w->r.count * keel_dtype_size(w->r.dtype);
			if (ranges_meet((uintptr_t)w->r.dst, n, x, bytes) ||
			    ranges_meet((uintptr_t)w->r.a, n, x, bytes))
				return true;
		}
	}
	return false;
}

static struct cpu_dev *cpu_of(const struct keel_device *dev);

int keel_device_cpu_guard(const struct keel_device *dev, void *view, void *work, size_t bytes)
{
	struct cpu_dev *d = cpu_of(dev);
	if (d == NULL || view == NULL || work == NULL || bytes == 0 || view == work ||
	    (uintptr_t)view > UINTPTR_MAX - bytes)
		return -EINVAL;
	if (touches_guard(d, view, bytes) || touches_stage(d, view, bytes))
		return -EINVAL;
	for (uint32_t i = 0; i < KEEL_DEVICE_CPU_GUARDS_MAX; i++) {
		if (d->guards[i].view == NULL) {
			d->guards[i] = (struct guard){.view = view, .work = work, .bytes = bytes};
			return 0;
		}
	}
	return -ENOSPC;
}

int keel_device_cpu_unguard(const struct keel_device *dev, void *view)
{
	struct cpu_dev *d = cpu_of(dev);
	if (d == NULL || view == NULL)
		return -EINVAL;
	for (uint32_t i = 0; i < KEEL_DEVICE_CPU_GUARDS_MAX; i++) {
		struct guard *g = &d->guards[i];
		if (g->view != view)
			continue;
		if (work_touches(d, g->view, g->bytes))
			return -EBUSY;
		*g = (struct guard){0};
		return 0;
	}
	return -ENOENT;
}

static void cpu_fini(void *state)
{
	(void)state; /* caller memory; nothing held */
}

static int cpu_nic_writes_visible(void *state)
{
	struct cpu_dev *d = state;
	if (d == NULL)
		return -EINVAL;
	d->stats.nic_flushes++;
	return d->cfg.nic_writes_rc;
}

static const struct keel_device_ops cpu_ops = {
    .name = "cpu",
    .copy = cpu_copy,
    .reduce = cpu_reduce,
    .test = cpu_test,
    .host_register = cpu_register,
    .host_unregister = cpu_unregister,
    .fini = cpu_fini,
    .nic_writes_visible = cpu_nic_writes_visible,
    .ordered = cpu_ordered,
};

static struct cpu_dev *cpu_of(const struct keel_device *dev)
{
	return dev != NULL && dev->ops == &cpu_ops ? dev->state : NULL;
}

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
