/* Hardware presets as the tools see them: the runtime's one table (include/keel/partition.h)
 * plus the parts a user describes with `define gpu NAME ...` / `define link NAME ...` (on the
 * command line of keel-plan and keel-sim, in cluster and scenario files), and the quantity
 * syntax both tools read ("989T", "80G", "400Gbps", "5us"). Tool code: no expat, no SimGrid. */
#ifndef KEEL_PLAN_PRESET_H
#define KEEL_PLAN_PRESET_H

#include <stdint.h>
#include <stdio.h>

#include "keel/partition.h"

#define PLAN_NAME_MAX 64u
#define PLAN_DEFS_MAX 32u /* user-defined GPUs, and links, each */

struct plan_def_gpu {
	char name[PLAN_NAME_MAX];
	double rate_flops;
	uint64_t mem_bytes; /* 0: no cap */
	char link[PLAN_NAME_MAX];
};

struct plan_def_link {
	char name[PLAN_NAME_MAX];
	double bw_Bps, lat_s;
};

/* The user's definitions; zero-initialised means none. Plain data: copying it is fine. */
struct plan_presets {
	uint32_t gpu_count, link_count;
	struct plan_def_gpu gpu[PLAN_DEFS_MAX];
	struct plan_def_link link[PLAN_DEFS_MAX];
};

/* Parse a value with an optional SI/binary prefix and unit. kind: 'b' bytes, 'r' bytes/s
 * (b/s and bps are bits), 'f' FLOP or FLOP/s, 't' time in seconds. 0 or -EINVAL. */
int plan_parse_quantity(const char *s, char kind, double *out);

/* Add one definition, `def` without the word "define":
 *   gpu NAME rate=FLOP/s [mem=BYTES] [link=LINK]     (link defaults to pcie5)
 *   link NAME bw=BYTES/s lat=TIME
 * NAME: letters, digits, '.', '_', '-'; not a preset, alias or earlier definition. Returns 0,
 * or -EINVAL with "field 'x': what is wrong" in err (the caller adds file:line). */
int plan_presets_define(struct plan_presets *p, const char *def, char *err, size_t err_len);

/* Look a GPU up: a definition first, then the runtime's table (aliases included). Fills *gpu
 * (its name points into p or the table) and *own_link, the GPU's scale-up link. Returns the
 * enum keel_gpu value, KEEL_GPU_COUNT + i for the i-th definition, or -ENOENT. p may be NULL. */
int plan_gpu_find(const struct plan_presets *p, const char *name, struct keel_gpu_preset *gpu,
		  struct keel_link_preset *own_link);
/* The same for links: returns the enum keel_link value, KEEL_LINK_CUSTOM for a definition, or
 * -ENOENT. */
int plan_link_find(const struct plan_presets *p, const char *name, struct keel_link_preset *link);

/* Every known name, space separated, for error messages ("V100-16 ... MI300X mygpu"). */
void plan_gpu_names(const struct plan_presets *p, char *buf, size_t len);
void plan_link_names(const struct plan_presets *p, char *buf, size_t len);

/* The tables with their sources, for --list-presets. */
void plan_presets_print(const struct plan_presets *p, FILE *f);

#endif
