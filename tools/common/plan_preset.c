/* The tools' view of the hardware presets: the runtime's table plus user definitions, and the
 * quantity syntax. Shared by keel-plan and keel-sim so that both read `define` lines alike.
 * Tool code, but it never allocates: definitions live in the caller's struct plan_presets. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plan_preset.h"

struct unit {
	const char *s;
	double mult;
};

static const struct unit prefixes[] = {
    {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
    {"k", 1e3},	    {"K", 1e3},	       {"M", 1e6},	     {"G", 1e9},
    {"T", 1e12},    {"P", 1e15},       {"E", 1e18},	     {"", 1.0},
};
static const struct unit u_bytes[] = {{"", 1}, {"B", 1}, {NULL, 0}};
static const struct unit u_rate[] = {{"", 1},	     {"B/s", 1},     {"Bps", 1},
				     {"b/s", 0.125}, {"bps", 0.125}, {NULL, 0}};
static const struct unit u_flop[] = {{"", 1},	   {"f", 1},	{"F", 1},
				     {"flop", 1},  {"FLOP", 1}, {"flops", 1},
				     {"FLOPS", 1}, {"F/s", 1},	{NULL, 0}};
static const struct unit u_time[] = {{"", 1},	   {"s", 1},	  {"ms", 1e-3}, {"us", 1e-6},
				     {"ns", 1e-9}, {"ps", 1e-12}, {NULL, 0}};

static bool match_unit(const char *rest, const struct unit *base, double *mult)
{
	for (const struct unit *u = base; u->s != NULL; u++)
		if (strcmp(rest, u->s) == 0) {
			*mult = u->mult;
			return true;
		}
	return false;
}

int plan_parse_quantity(const char *s, char kind, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno != 0 || !isfinite(v) || v < 0)
		return -EINVAL;
	if (kind == 't') {
		double m;
		if (!match_unit(end, u_time, &m))
			return -EINVAL;
		*out = v * m;
		return 0;
	}
	const struct unit *base = kind == 'b' ? u_bytes : kind == 'r' ? u_rate : u_flop;
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		size_t pl = strlen(prefixes[i].s);
		double m;
		if (strncmp(end, prefixes[i].s, pl) == 0 && match_unit(end + pl, base, &m)) {
			*out = v * prefixes[i].mult * m;
			return 0;
		}
	}
	return -EINVAL;
}

static int bad(char *err, size_t err_len, const char *field, const char *fmt, ...)
{
	int n = snprintf(err, err_len, "field '%s': ", field);
	if (n >= 0 && (size_t)n < err_len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err + n, err_len - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

int plan_gpu_find(const struct plan_presets *p, const char *name, struct keel_gpu_preset *gpu,
		  struct keel_link_preset *own_link)
{
	for (uint32_t i = 0; p != NULL && i < p->gpu_count; i++) {
		const struct plan_def_gpu *d = &p->gpu[i];
		if (strcasecmp(name, d->name) != 0)
			continue;
		*gpu = (struct keel_gpu_preset){d->name, d->rate_flops, d->mem_bytes,
						KEEL_LINK_CUSTOM, "defined by the user"};
		int l = plan_link_find(p, d->link, own_link);
		if (l >= 0 && l < KEEL_LINK_COUNT)
			gpu->link = (enum keel_link)l;
		return KEEL_GPU_COUNT + (int)i;
	}
	int k = keel_gpu_preset_find(name);
	if (k < 0)
		return -ENOENT;
	*gpu = *keel_gpu_preset_get((enum keel_gpu)k);
	*own_link = *keel_link_preset_get(gpu->link);
	return k;
}

int plan_link_find(const struct plan_presets *p, const char *name, struct keel_link_preset *link)
{
	for (uint32_t i = 0; p != NULL && i < p->link_count; i++) {
		const struct plan_def_link *d = &p->link[i];
		if (strcasecmp(name, d->name) == 0) {
			*link = (struct keel_link_preset){d->name, d->bw_Bps, d->lat_s, d->name,
							  "defined by the user"};
			return KEEL_LINK_CUSTOM;
		}
	}
	int k = keel_link_preset_find(name);
	if (k < 0)
		return -ENOENT;
	*link = *keel_link_preset_get((enum keel_link)k);
	return k;
}

static void names_add(char *buf, size_t len, const char *name)
{
	size_t used = strlen(buf);
	if (used < len)
		snprintf(buf + used, len - used, "%s%s", used > 0 ? " " : "", name);
}

void plan_gpu_names(const struct plan_presets *p, char *buf, size_t len)
{
	buf[0] = '\0';
	for (int i = 0; i < KEEL_GPU_COUNT; i++)
		names_add(buf, len, keel_gpu_preset_get((enum keel_gpu)i)->name);
	for (uint32_t i = 0; p != NULL && i < p->gpu_count; i++)
		names_add(buf, len, p->gpu[i].name);
}

void plan_link_names(const struct plan_presets *p, char *buf, size_t len)
{
	buf[0] = '\0';
	for (int i = 0; i < KEEL_LINK_COUNT; i++)
		names_add(buf, len, keel_link_preset_get((enum keel_link)i)->name);
	for (uint32_t i = 0; p != NULL && i < p->link_count; i++)
		names_add(buf, len, p->link[i].name);
}

static int def_name(const struct plan_presets *p, const char *kind, const char *name, char *dst,
		    char *err, size_t err_len)
{
	struct keel_gpu_preset g;
	struct keel_link_preset l;
	size_t n = strlen(name);
	bool ok = n > 0 && n < PLAN_NAME_MAX;
	for (size_t i = 0; ok && i < n; i++)
		ok = isalnum((unsigned char)name[i]) || strchr("._-", name[i]) != NULL;
	if (!ok)
		return bad(err, err_len, "name",
			   "expected a %s name (letters, digits, '.', '_', '-'; under %u "
			   "characters), got '%s'",
			   kind, PLAN_NAME_MAX, name);
	if (plan_gpu_find(p, name, &g, &l) >= 0 || plan_link_find(p, name, &l) >= 0)
		return bad(err, err_len, "name",
			   "'%s' is already a preset or a definition; choose another name", name);
	strcpy(dst, name);
	return 0;
}

/* One key=value of a definition. */
static int def_field(struct plan_presets *p, bool gpu, char *tok, char *err, size_t err_len)
{
	char *eq = strchr(tok, '=');
	if (eq == NULL || eq == tok || eq[1] == '\0')
		return bad(err, err_len, tok, "expected key=value");
	*eq = '\0';
	const char *key = tok, *val = eq + 1;
	struct plan_def_gpu *g = &p->gpu[p->gpu_count];
	struct plan_def_link *l = &p->link[p->link_count];
	struct keel_link_preset lp;
	double v;
	if (gpu && strcmp(key, "rate") == 0) {
		if (plan_parse_quantity(val, 'f', &v) != 0 || !(v > 0))
			return bad(err, err_len, key, "expected FLOP/s > 0 (e.g. 500T), got '%s'",
				   val);
		g->rate_flops = v;
	} else if (gpu && strcmp(key, "mem") == 0) {
		if (plan_parse_quantity(val, 'b', &v) != 0 || v >= 1.8e19)
			return bad(err, err_len, key,
				   "expected a size in bytes (e.g. 96G), got '%s'", val);
		g->mem_bytes = (uint64_t)v;
	} else if (gpu && strcmp(key, "link") == 0) {
		if (plan_link_find(p, val, &lp) < 0) {
			char known[1024];
			plan_link_names(p, known, sizeof(known));
			return bad(err, err_len, key, "unknown link '%s' (known: %s)", val, known);
		}
		snprintf(g->link, sizeof(g->link), "%s", val);
	} else if (!gpu && strcmp(key, "bw") == 0) {
		if (plan_parse_quantity(val, 'r', &v) != 0 || !(v > 0))
			return bad(err, err_len, key,
				   "expected a bandwidth > 0 (e.g. 400Gbps, 50GB/s), got '%s'",
				   val);
		l->bw_Bps = v;
	} else if (!gpu && strcmp(key, "lat") == 0) {
		if (plan_parse_quantity(val, 't', &v) != 0)
			return bad(err, err_len, key, "expected a time (e.g. 2us), got '%s'", val);
		l->lat_s = v;
	} else {
		return bad(err, err_len, key, "unknown field for a %s (%s)", gpu ? "gpu" : "link",
			   gpu ? "rate mem link" : "bw lat");
	}
	return 0;
}

int plan_presets_define(struct plan_presets *p, const char *def, char *err, size_t err_len)
{
	char buf[512], *save = NULL;
	if (strlen(def) >= sizeof(buf))
		return bad(err, err_len, "define", "longer than %zu characters", sizeof(buf) - 1);
	strcpy(buf, def);
	char *kind = strtok_r(buf, " \t\r\n", &save), *name = strtok_r(NULL, " \t\r\n", &save);
	bool gpu = kind != NULL && strcmp(kind, "gpu") == 0;
	if (kind == NULL || (!gpu && strcmp(kind, "link") != 0))
		return bad(err, err_len, "define",
			   "expected 'gpu NAME rate=...' or 'link NAME bw=... "
			   "lat=...', got '%s'",
			   def);
	if ((gpu ? p->gpu_count : p->link_count) >= PLAN_DEFS_MAX)
		return bad(err, err_len, "define", "more than %u %s definitions", PLAN_DEFS_MAX,
			   kind);
	if (name == NULL)
		return bad(err, err_len, "name", "'define %s' needs a name", kind);
	struct plan_def_gpu *g = &p->gpu[p->gpu_count];
	struct plan_def_link *l = &p->link[p->link_count];
	memset(g, 0, sizeof(*g));
	memset(l, 0, sizeof(*l));
	l->lat_s = -1;
	strcpy(g->link, "pcie5");
	if (def_name(p, kind, name, gpu ? g->name : l->name, err, err_len) != 0)
		return -EINVAL;
	for (char *tok = strtok_r(NULL, " \t\r\n", &save); tok != NULL;
	     tok = strtok_r(NULL, " \t\r\n", &save))
		if (def_field(p, gpu, tok, err, err_len) != 0)
			return -EINVAL;
	if (gpu && !(g->rate_flops > 0))
		return bad(err, err_len, "rate", "gpu '%s' needs rate= (FLOP/s, e.g. 500T)", name);
	if (!gpu && (!(l->bw_Bps > 0) || l->lat_s < 0))
		return bad(err, err_len, l->bw_Bps > 0 ? "lat" : "bw",
			   "link '%s' needs bw= (e.g. 400Gbps) and lat= (e.g. 2us)", name);
	if (gpu)
		p->gpu_count++;
	else
		p->link_count++;
	return 0;
}

void plan_presets_print(const struct plan_presets *p, FILE *f)
{
	struct keel_gpu_preset g;
	struct keel_link_preset own, l;
	fprintf(f, "GPUs (dense BF16 peak, memory, own scale-up link):\n");
	for (int i = 0; i < KEEL_GPU_COUNT + (p != NULL ? (int)p->gpu_count : 0); i++) {
		const char *name = i < KEEL_GPU_COUNT ? keel_gpu_preset_get((enum keel_gpu)i)->name
						      : p->gpu[i - KEEL_GPU_COUNT].name;
		if (plan_gpu_find(p, name, &g, &own) < 0)
			continue;
		fprintf(f, "  %-8s %7.1f TFLOPS %5.0f GB  %-9s [%s]\n", g.name, g.rate_flops / 1e12,
			(double)g.mem_bytes / 1e9, own.name, g.source);
	}
	fprintf(f, "Links (per direction; one-way latency, an estimate):\n");
	for (int i = 0; i < KEEL_LINK_COUNT + (p != NULL ? (int)p->link_count : 0); i++) {
		const char *name = i < KEEL_LINK_COUNT
				       ? keel_link_preset_get((enum keel_link)i)->name
				       : p->link[i - KEEL_LINK_COUNT].name;
		if (plan_link_find(p, name, &l) < 0)
			continue;
		fprintf(f, "  %-9s %7.3f GB/s %5.2f us  %s [%s]\n", l.name, l.bw_Bps / 1e9,
			l.lat_s * 1e6, l.label, l.source);
	}
}
