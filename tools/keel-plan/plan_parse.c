/* keel-plan's text formats. Tool code: allocates the parsed arrays; never used by the runtime.
 *
 * Both text formats are line based; '#' starts a comment; fields are key=value; numbers take an
 * optional prefix (k M G T P, or Ki Mi Gi Ti) and unit: bytes "80G" "80GB" "16GiB"; bandwidth
 * "50GB/s" "50GBps" "400Gbps" (b = bits); work and rate "989T" "989Tf" "1.5e12flop"; time
 * "5us" "2ms" "1s" (bare numbers are seconds). Errors name file:line and the field.
 *
 * Cluster file: one line per group of identical workers, and definitions of other parts.
 *   group NAME count=N gpu=PRESET [link=PRESET] [rate=FLOP/s] [mem=BYTES] [bw=BYTES/s]
 *         [lat=TIME] [load=0..1] [suspected=0|1]
 *   define gpu NAME rate=FLOP/s [mem=BYTES] [link=LINK]
 *   define link NAME bw=BYTES/s lat=TIME
 *   PRESET: the runtime's table (include/keel/partition.h; keel-plan --list-presets) or a
 *   definition made earlier in the file or with --define. Without gpu=, rate= is required.
 *   link defaults to the GPU's own link. Workers are named NAME-0 .. NAME-(N-1) (NAME alone
 *   when N is 1).
 *
 * Workload file: any of
 *   shares blocks=N split=8..16 block_work=FLOP [block_mem=BYTES]   divisible work
 *   item NAME work=FLOP [mem=BYTES] [key=N] [count=N]   indivisible items (count=N makes
 *                                                       NAME0..NAME(N-1))
 *   policy [skew_max=X] [load_max=X]                    repair thresholds
 *   task NAME (work=FLOP | cost=GROUP:TIME,GROUP:TIME...) [pin=W | prefer=W | avoid=W]
 *        work= runs work/rate on every worker; cost= lists run times per group (groups not
 *        listed cannot run the task). W is a worker name or index.
 *   edge FROM TO [data=BYTES]                           FROM must finish before TO starts
 *
 * SimGrid platform files: plan_xml.c. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "plan_parse.h"

#define TOKENS_MAX 64

struct ctx {
	const char *name;
	unsigned line;
	char *err;
	size_t err_len;
};

static int fail(struct ctx *x, const char *field, const char *fmt, ...)
{
	int n = snprintf(x->err, x->err_len, "%s:%u: field '%s': ", x->name, x->line, field);
	if (n >= 0 && (size_t)n < x->err_len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(x->err + n, x->err_len - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static int quantity(struct ctx *x, const char *field, const char *val, char kind, double *out)
{
	static const char *what[] = {"a size in bytes (e.g. 80G)", "a bandwidth (e.g. 50GB/s)",
				     "an amount of work (e.g. 1.5T)", "a time (e.g. 5us)"};
	int k = kind == 'b' ? 0 : kind == 'r' ? 1 : kind == 'f' ? 2 : 3;
	if (plan_parse_quantity(val, kind, out) != 0)
		return fail(x, field, "expected %s, got '%s'", what[k], val);
	return 0;
}

static int count_field(struct ctx *x, const char *field, const char *val, uint64_t max,
		       uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(val, &end, 10);
	if (end == val || *end != '\0' || errno != 0 || v == 0 || v > max || val[0] == '-')
		return fail(x, field, "expected a positive integer, got '%s'", val);
	*out = (uint32_t)v;
	return 0;
}

static int fraction(struct ctx *x, const char *field, const char *val, double lo, double hi,
		    double *out)
{
	char *end;
	double v = strtod(val, &end);
	if (end == val || *end != '\0' || !(v >= lo && v <= hi))
		return fail(x, field, "expected a number in %g..%g, got '%s'", lo, hi, val);
	*out = v;
	return 0;
}

/* Split a line into tokens in place; '#' ends it. */
static int tokenize(char *line, char **tok)
{
	int n = 0;
	char *hash = strchr(line, '#');
	if (hash != NULL)
		*hash = '\0';
	for (char *p = strtok(line, " \t\r"); p != NULL && n < TOKENS_MAX;
	     p = strtok(NULL, " \t\r"))
		tok[n++] = p;
	return n;
}

/* Feed every non-empty line of `text`, split into tokens, to `line_fn` (counting lines in x for
 * error messages) until it fails. */
static int each_line(struct ctx *x, const char *text,
		     int (*line_fn)(struct ctx *x, char **tok, int n, void *arg), void *arg)
{
	char *copy = strdup(text);
	if (copy == NULL)
		return -ENOMEM;
	int rc = 0;
	char *save = NULL, *tok[TOKENS_MAX];
	for (char *line = copy; line != NULL && rc == 0; line = save) {
		save = strchr(line, '\n');
		if (save != NULL)
			*save++ = '\0';
		x->line++;
		int n = tokenize(line, tok);
		if (n > 0)
			rc = line_fn(x, tok, n, arg);
	}
	free(copy);
	return rc;
}

/* key=value: splits in place; returns the value or NULL. */
static char *kv(char *tok, char **key)
{
	char *eq = strchr(tok, '=');
	if (eq == NULL || eq == tok || eq[1] == '\0')
		return NULL;
	*eq = '\0';
	*key = tok;
	return eq + 1;
}

static int name_field(struct ctx *x, const char *field, const char *val, char *dst)
{
	if (strlen(val) >= PLAN_NAME_MAX || strchr(val, '=') != NULL)
		return fail(x, field, "expected a name (under %u characters, no '='), got '%s'",
			    PLAN_NAME_MAX, val);
	strcpy(dst, val);
	return 0;
}

static int group_field(struct ctx *x, const char *key, const char *val, struct plan_group *g,
		       bool *has_rate, const struct plan_presets *defs)
{
	struct keel_worker *w = &g->proto;
	struct keel_gpu_preset gp;
	struct keel_link_preset lp;
	char known[1024];
	double v;
	if (strcmp(key, "count") == 0)
		return count_field(x, key, val, KEEL_PLAN_WORKERS_MAX, &g->count);
	if (strcmp(key, "gpu") == 0) {
		if (plan_gpu_find(defs, val, &gp, &lp) < 0) {
			plan_gpu_names(defs, known, sizeof(known));
			return fail(x, key, "expected a GPU preset or a defined gpu (%s), got '%s'",
				    known, val);
		}
		w->rate = *has_rate ? w->rate : gp.rate_flops;
		w->mem_bytes = w->mem_bytes != 0 ? w->mem_bytes : gp.mem_bytes;
		if (w->bw_Bps == 0) {
			w->link = gp.link;
			w->bw_Bps = lp.bw_Bps;
			w->lat_s = lp.lat_s;
		}
		snprintf(g->gpu, sizeof(g->gpu), "%s", gp.name);
		return 0;
	}
	if (strcmp(key, "link") == 0) {
		int k = plan_link_find(defs, val, &lp);
		if (k < 0) {
			plan_link_names(defs, known, sizeof(known));
			return fail(x, key,
				    "expected a link preset or a defined link (%s), got '%s'",
				    known, val);
		}
		w->link = (enum keel_link)k;
		w->bw_Bps = lp.bw_Bps;
		w->lat_s = lp.lat_s;
		return 0;
	}
	if (strcmp(key, "rate") == 0) {
		*has_rate = true;
		int err = quantity(x, key, val, 'f', &w->rate);
		return err == 0 && !(w->rate > 0) ? fail(x, key, "must be > 0, got '%s'", val)
						  : err;
	}
	if (strcmp(key, "mem") == 0) {
		int err = quantity(x, key, val, 'b', &v);
		w->mem_bytes = (uint64_t)v;
		return err;
	}
	if (strcmp(key, "bw") == 0) {
		int err = quantity(x, key, val, 'r', &w->bw_Bps);
		return err == 0 && !(w->bw_Bps > 0) ? fail(x, key, "must be > 0, got '%s'", val)
						    : err;
	}
	if (strcmp(key, "lat") == 0)
		return quantity(x, key, val, 't', &w->lat_s);
	if (strcmp(key, "load") == 0)
		return fraction(x, key, val, 0, 1, &w->load);
	if (strcmp(key, "suspected") == 0) {
		if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0)
			return fail(x, key, "expected 0 or 1, got '%s'", val);
		w->suspected = val[0] == '1';
		return 0;
	}
	return fail(x, key, "unknown field (count gpu link rate mem bw lat load suspected)");
}

static int group_line(struct ctx *x, char **tok, int n, struct plan_cluster *c)
{
	if (n < 2)
		return fail(x, "name", "expected a group name after 'group'");
	if (c->group_count >= PLAN_GROUPS_MAX)
		return fail(x, "group", "more than %u groups", PLAN_GROUPS_MAX);
	struct plan_group *g = &c->group[c->group_count];
	memset(g, 0, sizeof(*g));
	g->count = 1;
	strcpy(g->gpu, "custom");
	if (name_field(x, "name", tok[1], g->name) != 0)
		return -EINVAL;
	for (uint32_t i = 0; i < c->group_count; i++)
		if (strcmp(c->group[i].name, g->name) == 0)
			return fail(x, "name", "group '%s' defined twice", g->name);
	bool has_rate = false;
	for (int i = 2; i < n; i++) {
		char *key, *val = kv(tok[i], &key);
		if (val == NULL)
			return fail(x, tok[i], "expected key=value");
		if (group_field(x, key, val, g, &has_rate, &c->presets) != 0)
			return -EINVAL;
	}
	if (!(g->proto.rate > 0))
		return fail(x, "rate", "group '%s' needs gpu= or rate=", g->name);
	if (g->proto.bw_Bps == 0) {
		const struct keel_link_preset *lp = keel_link_preset_get(KEEL_LINK_ETH_100G);
		g->proto.link = KEEL_LINK_ETH_100G;
		g->proto.bw_Bps = lp->bw_Bps;
		g->proto.lat_s = lp->lat_s;
	}
	c->group_count++;
	return 0;
}

/* Give every group its workers: ids 0.., type = group index. */
int plan_cluster_expand(struct plan_cluster *c, char *err, size_t err_len)
{
	uint64_t total = 0;
	for (uint32_t g = 0; g < c->group_count; g++)
		total += c->group[g].count;
	if (total == 0 || total > KEEL_PLAN_WORKERS_MAX) {
		snprintf(err, err_len, "the cluster has %llu workers (1..%u)",
			 (unsigned long long)total, KEEL_PLAN_WORKERS_MAX);
		return -EINVAL;
	}
	c->worker = calloc(total, sizeof(*c->worker));
	if (c->worker == NULL)
		return -ENOMEM;
	uint32_t k = 0;
	for (uint32_t g = 0; g < c->group_count; g++) {
		c->group[g].first = k;
		for (uint32_t i = 0; i < c->group[g].count; i++, k++) {
			c->worker[k] = c->group[g].proto;
			c->worker[k].id = k;
			c->worker[k].type = g;
		}
	}
	c->worker_count = k;
	return 0;
}

/* "define gpu ..." / "define link ...": the rest of the line, rejoined. */
static int define_line(struct ctx *x, char **tok, int n, struct plan_cluster *c)
{
	char def[512] = "", sub[PLAN_ERR_MAX];
	for (int i = 1; i < n; i++) {
		size_t used = strlen(def);
		snprintf(def + used, sizeof(def) - used, "%s%s", i > 1 ? " " : "", tok[i]);
	}
	if (plan_presets_define(&c->presets, def, sub, sizeof(sub)) != 0) {
		snprintf(x->err, x->err_len, "%s:%u: %s", x->name, x->line, sub);
		return -EINVAL;
	}
	return 0;
}

static int cluster_line(struct ctx *x, char **tok, int n, void *arg)
{
	if (strcmp(tok[0], "define") == 0)
		return define_line(x, tok, n, arg);
	if (strcmp(tok[0], "group") != 0)
		return fail(x, "kind", "expected 'group' or 'define', got '%s'", tok[0]);
	return group_line(x, tok, n, arg);
}

int plan_cluster_parse(const char *name, const char *text, const struct plan_presets *defs,
		       struct plan_cluster *c, char *err, size_t err_len)
{
	memset(c, 0, sizeof(*c));
	if (defs != NULL)
		c->presets = *defs;
	struct ctx x = {name, 0, err, err_len};
	int rc = each_line(&x, text, cluster_line, c);
	if (rc == 0 && c->group_count == 0)
		rc = fail(&x, "group", "no groups in the cluster");
	if (rc == 0)
		rc = plan_cluster_expand(c, err, err_len);
	if (rc != 0)
		plan_cluster_free(c);
	return rc;
}

void plan_cluster_free(struct plan_cluster *c)
{
	free(c->worker);
	c->worker = NULL;
	c->worker_count = 0;
}

void plan_worker_name(const struct plan_cluster *c, uint32_t w, char *buf, size_t len)
{
	const struct plan_group *g = &c->group[c->worker[w].type];
	if (g->count == 1)
		snprintf(buf, len, "%s", g->name);
	else
		snprintf(buf, len, "%s-%u", g->name, w - g->first);
}

char *plan_slurp(const char *path, size_t *len_out, char *err, size_t err_len)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		snprintf(err, err_len, "%s: %s", path, strerror(errno));
		return NULL;
	}
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap + 1);
	while (buf != NULL) {
		len += fread(buf + len, 1, cap - len, f);
		if (len < cap)
			break;
		char *nb = realloc(buf, 2 * cap + 1);
		if (nb == NULL) {
			free(buf);
			buf = NULL;
			break;
		}
		buf = nb;
		cap *= 2;
	}
	fclose(f);
	if (buf == NULL)
		snprintf(err, err_len, "%s: out of memory", path);
	else
		buf[len] = '\0';
	if (buf != NULL && len_out != NULL)
		*len_out = len;
	return buf;
}

int plan_cluster_load(const char *path, const struct plan_presets *defs, struct plan_cluster *c,
		      char *err, size_t err_len)
{
	char *text = plan_slurp(path, NULL, err, err_len);
	if (text == NULL)
		return -EINVAL;
	int rc = plan_cluster_parse(path, text, defs, c, err, err_len);
	free(text);
	return rc;
}

/* Growable arrays for the workload (tool code). */
static int grow(void **p, uint32_t n, size_t elem)
{
	if (n != 0 && (n < 16 || (n & (n - 1)) != 0))
		return 0; /* capacity: 16, then doubled whenever n reaches a power of two */
	void *q = realloc(*p, (n == 0 ? 16 : 2 * (size_t)n) * elem);
	if (q == NULL)
		return -ENOMEM;
	*p = q;
	return 0;
}

static int shares_line(struct ctx *x, char **tok, int n, struct plan_workload *w)
{
	struct keel_shares_spec *s = &w->shares;
	*s = (struct keel_shares_spec){.split = KEEL_PLAN_SPLIT_MAX};
	bool has_blocks = false, has_work = false;
	for (int i = 1; i < n; i++) {
		char *key, *val = kv(tok[i], &key);
		double v;
		int rc = 0;
		if (val == NULL)
			return fail(x, tok[i], "expected key=value");
		if (strcmp(key, "blocks") == 0) {
			rc = count_field(x, key, val, KEEL_PLAN_ITEMS_MAX, &s->blocks);
			has_blocks = true;
		} else if (strcmp(key, "split") == 0) {
			rc = count_field(x, key, val, UINT32_MAX, &s->split);
			if (rc == 0 &&
			    (s->split < KEEL_PLAN_SPLIT_MIN || s->split > KEEL_PLAN_SPLIT_MAX))
				rc = fail(x, key, "expected %u..%u, got '%s'", KEEL_PLAN_SPLIT_MIN,
					  KEEL_PLAN_SPLIT_MAX, val);
		} else if (strcmp(key, "block_work") == 0) {
			rc = quantity(x, key, val, 'f', &s->block_work);
			has_work = true;
		} else if (strcmp(key, "block_mem") == 0) {
			rc = quantity(x, key, val, 'b', &v);
			s->block_bytes = (uint64_t)v;
		} else {
			rc = fail(x, key, "unknown field (blocks split block_work block_mem)");
		}
		if (rc != 0)
			return rc;
	}
	if (!has_blocks)
		return fail(x, "blocks", "missing");
	if (!has_work)
		return fail(x, "block_work", "missing");
	w->has_shares = true;
	return 0;
}

static int policy_line(struct ctx *x, char **tok, int n, struct plan_workload *w)
{
	for (int i = 1; i < n; i++) {
		char *key, *val = kv(tok[i], &key);
		int rc;
		if (val == NULL)
			return fail(x, tok[i], "expected key=value");
		if (strcmp(key, "skew_max") == 0)
			rc = fraction(x, key, val, 1, 1e9, &w->policy.skew_max);
		else if (strcmp(key, "load_max") == 0)
			rc = fraction(x, key, val, 0, 1, &w->policy.load_max);
		else
			rc = fail(x, key, "unknown field (skew_max load_max)");
		if (rc != 0)
			return rc;
	}
	return 0;
}

static int add_item(struct plan_workload *w, const char *name, const struct keel_item *it)
{
	if (grow((void **)&w->item, w->item_count, sizeof(*w->item)) != 0 ||
	    grow((void **)&w->item_name, w->item_count, sizeof(*w->item_name)) != 0)
		return -ENOMEM;
	w->item[w->item_count] = *it;
	snprintf(w->item_name[w->item_count], PLAN_NAME_MAX, "%.*s", (int)PLAN_NAME_MAX - 1, name);
	w->item_count++;
	return 0;
}

static int item_line(struct ctx *x, char **tok, int n, struct plan_workload *w)
{
	char name[PLAN_NAME_MAX];
	if (n < 2 || name_field(x, "name", tok[1], name) != 0)
		return n < 2 ? fail(x, "name", "expected an item name after 'item'") : -EINVAL;
	struct keel_item it = {.key = w->item_count};
	uint32_t count = 1;
	bool has_work = false;
	for (int i = 2; i < n; i++) {
		char *key, *val = kv(tok[i], &key), *end;
		double v;
		int rc = 0;
		if (val == NULL)
			return fail(x, tok[i], "expected key=value");
		if (strcmp(key, "work") == 0) {
			rc = quantity(x, key, val, 'f', &it.work);
			has_work = true;
		} else if (strcmp(key, "mem") == 0) {
			rc = quantity(x, key, val, 'b', &v);
			it.mem_bytes = (uint64_t)v;
		} else if (strcmp(key, "key") == 0) {
			it.key = strtoull(val, &end, 0);
			if (*end != '\0' || end == val)
				rc = fail(x, key, "expected an integer, got '%s'", val);
		} else if (strcmp(key, "count") == 0) {
			rc = count_field(x, key, val, KEEL_PLAN_ITEMS_MAX, &count);
		} else {
			rc = fail(x, key, "unknown field (work mem key count)");
		}
		if (rc != 0)
			return rc;
	}
	if (!has_work)
		return fail(x, "work", "missing");
	for (uint32_t k = 0; k < count; k++) {
		char full[PLAN_NAME_MAX + 16];
		snprintf(full, sizeof(full), count > 1 ? "%s%u" : "%s", name, k);
		struct keel_item one = it;
		one.key = count > 1 ? w->item_count : it.key;
		if (w->item_count >= KEEL_PLAN_ITEMS_MAX)
			return fail(x, "count", "more than %u items", KEEL_PLAN_ITEMS_MAX);
		if (add_item(w, full, &one) != 0)
			return -ENOMEM;
	}
	return 0;
}

static int worker_ref(struct ctx *x, const char *field, const char *val,
		      const struct plan_cluster *c, uint32_t *out)
{
	char *end, buf[PLAN_NAME_MAX + 16];
	unsigned long v = strtoul(val, &end, 10);
	if (end != val && *end == '\0' && v < c->worker_count) {
		*out = (uint32_t)v;
		return 0;
	}
	for (uint32_t k = 0; k < c->worker_count; k++) {
		plan_worker_name(c, k, buf, sizeof(buf));
		if (strcmp(buf, val) == 0) {
			*out = k;
			return 0;
		}
	}
	return fail(x, field, "expected a worker name or index, got '%s'", val);
}

static int cost_list(struct ctx *x, char *val, const struct plan_cluster *c, double *cost)
{
	for (uint32_t g = 0; g < c->group_count; g++)
		cost[g] = INFINITY;
	for (char *p = strtok(val, ","); p != NULL; p = strtok(NULL, ",")) {
		char *colon = strchr(p, ':');
		uint32_t g = 0;
		if (colon == NULL)
			return fail(x, "cost", "expected GROUP:TIME, got '%s'", p);
		*colon = '\0';
		while (g < c->group_count && strcmp(c->group[g].name, p) != 0)
			g++;
		if (g == c->group_count)
			return fail(x, "cost", "no group named '%s' in the cluster", p);
		if (quantity(x, "cost", colon + 1, 't', &cost[g]) != 0)
			return -EINVAL;
	}
	return 0;
}

static int task_field(struct ctx *x, char *key, char *val, const struct plan_cluster *c,
		      struct plan_workload *w, double *cost, bool *has_cost)
{
	uint32_t t = w->task_count;
	static const char *hints[] = {"pin", "prefer", "avoid"};
	for (int h = 0; h < 3; h++) {
		if (strcmp(key, hints[h]) != 0)
			continue;
		w->hint[t] = (uint8_t)(KEEL_SCHED_PIN + h);
		return worker_ref(x, key, val, c, &w->hint_worker[t]);
	}
	if (strcmp(key, "work") == 0) {
		double work;
		if (quantity(x, key, val, 'f', &work) != 0)
			return -EINVAL;
		for (uint32_t g = 0; g < c->group_count; g++)
			cost[g] = work / c->group[g].proto.rate;
		*has_cost = true;
		return 0;
	}
	if (strcmp(key, "cost") == 0) {
		*has_cost = true;
		return cost_list(x, val, c, cost);
	}
	return fail(x, key, "unknown field (work cost pin prefer avoid)");
}

static int task_line(struct ctx *x, char **tok, int n, const struct plan_cluster *c,
		     struct plan_workload *w)
{
	uint32_t t = w->task_count, groups = c->group_count;
	if (n < 2)
		return fail(x, "name", "expected a task name after 'task'");
	if (t >= KEEL_SCHED_TASKS_MAX)
		return fail(x, "task", "more than %u tasks", KEEL_SCHED_TASKS_MAX);
	if (grow((void **)&w->hint, t, sizeof(*w->hint)) != 0 ||
	    grow((void **)&w->hint_worker, t, sizeof(*w->hint_worker)) != 0 ||
	    grow((void **)&w->task_name, t, sizeof(*w->task_name)) != 0 ||
	    grow((void **)&w->cost, t, groups * sizeof(*w->cost)) != 0)
		return -ENOMEM;
	if (name_field(x, "name", tok[1], w->task_name[t]) != 0)
		return -EINVAL;
	for (uint32_t k = 0; k < t; k++)
		if (strcmp(w->task_name[k], tok[1]) == 0)
			return fail(x, "name", "task '%s' defined twice", tok[1]);
	w->hint[t] = KEEL_SCHED_ANY;
	w->hint_worker[t] = 0;
	bool has_cost = false;
	for (int i = 2; i < n; i++) {
		char *key, *val = kv(tok[i], &key);
		if (val == NULL)
			return fail(x, tok[i], "expected key=value");
		if (task_field(x, key, val, c, w, &w->cost[(size_t)t * groups], &has_cost) != 0)
			return -EINVAL;
	}
	if (!has_cost)
		return fail(x, "work", "task '%s' needs work= or cost=", tok[1]);
	w->task_count++;
	return 0;
}

static int task_ref(struct ctx *x, const char *field, const char *val,
		    const struct plan_workload *w, uint32_t *out)
{
	for (uint32_t k = 0; k < w->task_count; k++)
		if (strcmp(w->task_name[k], val) == 0) {
			*out = k;
			return 0;
		}
	return fail(x, field, "no task named '%s' above this line", val);
}

static int edge_line(struct ctx *x, char **tok, int n, struct plan_workload *w)
{
	uint32_t e = w->edge_count, from = 0, to = 0;
	if (n < 3)
		return fail(x, n < 2 ? "from" : "to", "expected 'edge FROM TO [data=BYTES]'");
	if (task_ref(x, "from", tok[1], w, &from) != 0 || task_ref(x, "to", tok[2], w, &to) != 0)
		return -EINVAL;
	if (from == to)
		return fail(x, "to", "an edge from '%s' to itself", tok[1]);
	if (grow((void **)&w->edge, e, sizeof(*w->edge)) != 0 ||
	    grow((void **)&w->edge_bytes, e, sizeof(*w->edge_bytes)) != 0)
		return -ENOMEM;
	w->edge[e][0] = from;
	w->edge[e][1] = to;
	w->edge_bytes[e] = 0;
	for (int i = 3; i < n; i++) {
		char *key, *val = kv(tok[i], &key);
		if (val == NULL)
			return fail(x, tok[i], "expected key=value");
		if (strcmp(key, "data") != 0)
			return fail(x, key, "unknown field (data)");
		if (quantity(x, key, val, 'b', &w->edge_bytes[e]) != 0)
			return -EINVAL;
	}
	w->edge_count++;
	return 0;
}

static int workload_line(struct ctx *x, char **tok, int n, const struct plan_cluster *c,
			 struct plan_workload *w)
{
	if (strcmp(tok[0], "shares") == 0)
		return shares_line(x, tok, n, w);
	if (strcmp(tok[0], "item") == 0)
		return item_line(x, tok, n, w);
	if (strcmp(tok[0], "policy") == 0)
		return policy_line(x, tok, n, w);
	if (strcmp(tok[0], "task") == 0)
		return task_line(x, tok, n, c, w);
	if (strcmp(tok[0], "edge") == 0)
		return edge_line(x, tok, n, w);
	return fail(x, "kind", "expected shares, item, policy, task or edge, got '%s'", tok[0]);
}

struct workload_arg {
	const struct plan_cluster *c;
	struct plan_workload *w;
};

static int workload_line_arg(struct ctx *x, char **tok, int n, void *arg)
{
	struct workload_arg *a = arg;
	return workload_line(x, tok, n, a->c, a->w);
}

int plan_workload_parse(const char *name, const char *text, const struct plan_cluster *c,
			struct plan_workload *w, char *err, size_t err_len)
{
	memset(w, 0, sizeof(*w));
	struct ctx x = {name, 0, err, err_len};
	struct workload_arg a = {c, w};
	int rc = each_line(&x, text, workload_line_arg, &a);
	if (rc == 0 && !w->has_shares && w->item_count == 0 && w->task_count == 0) {
		x.line = 0;
		rc = fail(&x, "kind", "no shares, items or tasks in the workload");
	}
	if (rc != 0)
		plan_workload_free(w);
	return rc;
}

int plan_workload_load(const char *path, const struct plan_cluster *c, struct plan_workload *w,
		       char *err, size_t err_len)
{
	char *text = plan_slurp(path, NULL, err, err_len);
	if (text == NULL)
		return -EINVAL;
	int rc = plan_workload_parse(path, text, c, w, err, err_len);
	free(text);
	return rc;
}

void plan_workload_free(struct plan_workload *w)
{
	free(w->item);
	free(w->item_name);
	free(w->cost);
	free(w->hint);
	free(w->hint_worker);
	free(w->task_name);
	free(w->edge);
	free(w->edge_bytes);
	memset(w, 0, sizeof(*w));
}
