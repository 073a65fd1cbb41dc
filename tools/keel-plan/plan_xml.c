/* SimGrid platform files (DTD v4.1) for keel-plan, read with expat as SimGrid reads them:
 * nested zones, hosts, clusters, cabinets, peers, links, routes and properties, with
 * SimGrid's own unit syntax. Tool code: allocates while parsing; never used by the runtime.
 *
 * The mapping to keel-plan's cluster model (groups of identical workers with rate, mem, bw,
 * lat):
 *   <host id speed core pstate>   one worker; rate = speed (of the current pstate) * cores
 *   <cluster> / <cabinet>         radical-many workers; rate = speed * cores; bw, lat of the
 *                                 private link each node has
 *   <peer id speed bw_in bw_out lat>  one worker; bw = the smaller of bw_in and bw_out
 *   <prop id="mem" value="80GB"/> inside a host, peer, cluster or cabinet: its memory
 *   <link>, <backbone>            remembered by id for the routes
 *   <route src dst><link_ctn/>    between two <host>s: each end's bw is the slowest link on
 *                                 its routes, its lat the longest route
 *   <zone> / <AS>, <router>, <config>, <platform>: structure only
 * What cannot be mapped (routes between zones, bypass routes, traces, disks, deployment,
 * non-flat cluster topologies, per-host links of a cluster) is listed in c->note with its
 * file:line and element; hosts whose routes are unknown get eth-100g. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "plan_parse.h"

#ifdef PLAN_HAVE_EXPAT
#include <expat.h>

struct xlink {
	char id[PLAN_NAME_MAX];
	double bw_Bps, lat_s;
};

struct xml {
	const char *name;
	XML_Parser parser;
	struct plan_cluster *c;
	char *err;
	size_t err_len;
	int rc;
	struct xlink *link;
	uint32_t link_count, link_cap;
	int owner; /* group a <prop> inside the open host/peer/cluster/cabinet applies to */
	bool in_route;
	int src, dst; /* groups of the open route's ends (-1: not a <host>) */
	double route_bw, route_lat;
};

static unsigned line_now(const struct xml *m)
{
	return (unsigned)XML_GetCurrentLineNumber(m->parser);
}

static int fail(struct xml *m, const char *field, const char *fmt, ...)
{
	if (m->rc != 0)
		return m->rc;
	int n = snprintf(m->err, m->err_len, "%s:%u: field '%s': ", m->name, line_now(m), field);
	if (n >= 0 && (size_t)n < m->err_len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(m->err + n, m->err_len - (size_t)n, fmt, ap);
		va_end(ap);
	}
	m->rc = -EINVAL;
	XML_StopParser(m->parser, XML_FALSE);
	return m->rc;
}

static void note(struct xml *m, const char *elem, const char *why)
{
	struct plan_cluster *c = m->c;
	if (c->note_count == PLAN_NOTES_MAX) {
		c->notes_dropped++;
		return;
	}
	snprintf(c->note[c->note_count++], sizeof(c->note[0]), "%s:%u: <%s>: %s", m->name,
		 line_now(m), elem, why);
}

static const char *attr(const char **at, const char *key)
{
	for (int i = 0; at[i] != NULL; i += 2)
		if (strcmp(at[i], key) == 0)
			return at[i + 1];
	return NULL;
}

static int need(struct xml *m, const char *elem, const char **at, const char *key, const char **out)
{
	*out = attr(at, key);
	if (*out == NULL)
		return fail(m, key, "<%s> needs %s=\"...\"", elem, key);
	return 0;
}

/* SimGrid's units (its xbt parse_units): a number, then a unit with an optional decimal
 * (k M G T P E Z Y) or binary (Ki Mi ... Yi) prefix; no unit means the base unit (SimGrid
 * warns). Speeds: f (decimal prefixes) or flops (kiloflops ... yottaflops). Bandwidths: Bps,
 * bps (bits). Times: w d h m s ms us ns ps. */
static const char *const dec_prefix[] = {"k", "M", "G", "T", "P", "E", "Z", "Y"};
static const char *const bin_prefix[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"};
static const char *const word_prefix[] = {"kilo", "mega", "giga", "tera",
					  "peta", "exa",  "zeta", "yotta"};

static bool prefixed(const char *s, const char *unit, const char *const *pre, double step,
		     double *mult)
{
	double m = 1;
	if (strcmp(s, unit) == 0) {
		*mult = 1;
		return true;
	}
	for (int i = 0; i < 8; i++) {
		size_t pl = strlen(pre[i]);
		m *= step;
		if (strncmp(s, pre[i], pl) == 0 && strcmp(s + pl, unit) == 0) {
			*mult = m;
			return true;
		}
	}
	return false;
}

static bool sg_unit(const char *u, char kind, double *mult)
{
	static const struct {
		const char *s;
		double v;
	} times[] = {{"w", 604800}, {"d", 86400}, {"h", 3600},	{"m", 60},    {"s", 1},
		     {"ms", 1e-3},  {"us", 1e-6}, {"ns", 1e-9}, {"ps", 1e-12}};
	if (kind == 't') {
		for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++)
			if (strcmp(u, times[i].s) == 0)
				return *mult = times[i].v, true;
		return false;
	}
	if (kind == 'f')
		return prefixed(u, "f", dec_prefix, 1000, mult) ||
		       prefixed(u, "flops", word_prefix, 1000, mult);
	double bits = 1;
	const char *unit = "Bps";
	if (strlen(u) >= 3 && strcmp(u + strlen(u) - 3, "bps") == 0)
		bits = 0.125, unit = "bps";
	if (!prefixed(u, unit, dec_prefix, 1000, mult) &&
	    !prefixed(u, unit, bin_prefix, 1024, mult))
		return false;
	*mult *= bits;
	return true;
}

/* One value of kind 'f' speed, 'r' bandwidth, 't' time. */
static int sg_value(struct xml *m, const char *field, const char *val, char kind, double *out)
{
	static const char *what[] = {"a speed (e.g. 1Gf, 989Tf)",
				     "a bandwidth (e.g. 125MBps, "
				     "10Gbps)",
				     "a time (e.g. 50us)"};
	int k = kind == 'f' ? 0 : kind == 'r' ? 1 : 2;
	char *end;
	double mult = 1;
	errno = 0;
	double v = strtod(val, &end);
	if (end == val || errno != 0 || !isfinite(v) || v < 0 ||
	    (*end != '\0' && !sg_unit(end, kind, &mult)))
		return fail(m, field, "expected %s, got '%s'", what[k], val);
	*out = v * mult;
	return 0;
}

/* Element `index` of a list ("1Gf,500Mf": power states; "54Mbps;36Mbps": wifi rates). */
static int sg_list_value(struct xml *m, const char *field, const char *val, unsigned index,
			 char kind, double *out)
{
	char buf[128];
	const char *p = val;
	for (unsigned i = 0; i < index && p != NULL; i++) {
		p = strpbrk(p, ",;");
		p = p != NULL ? p + 1 : NULL;
	}
	if (p == NULL)
		return fail(m, field, "has no value number %u in '%s'", index, val);
	while (*p == ' ' || *p == '\t')
		p++;
	snprintf(buf, sizeof(buf), "%s", p);
	buf[strcspn(buf, ",;")] = '\0';
	for (size_t l = strlen(buf); l > 0 && (buf[l - 1] == ' ' || buf[l - 1] == '\t'); l--)
		buf[l - 1] = '\0';
	return sg_value(m, field, buf, kind, out);
}

static int group_new(struct xml *m, const char *id, uint32_t count, double rate)
{
	struct plan_cluster *c = m->c;
	if (c->group_count >= PLAN_GROUPS_MAX)
		return fail(m, "id", "more than %u hosts, peers, clusters and cabinets",
			    PLAN_GROUPS_MAX);
	struct plan_group *g = &c->group[c->group_count];
	memset(g, 0, sizeof(*g));
	snprintf(g->name, sizeof(g->name), "%.*s", (int)PLAN_NAME_MAX - 1, id);
	strcpy(g->gpu, "simgrid");
	g->count = count;
	g->proto.rate = rate;
	g->proto.link = KEEL_LINK_CUSTOM;
	return (int)c->group_count++;
}

/* speed (the pstate-th of the list: hosts and clusters only, as in SimGrid) times core. */
static int host_rate(struct xml *m, const char *elem, const char **at, double *rate)
{
	bool list_ok = strcmp(elem, "host") == 0 || strcmp(elem, "cluster") == 0;
	const char *speed, *core = attr(at, "core"), *pstate = attr(at, "pstate");
	unsigned long ps = 0, cores = 1;
	char *end;
	if (need(m, elem, at, "speed", &speed) != 0)
		return m->rc;
	if (core != NULL) {
		cores = strtoul(core, &end, 10);
		if (end == core || *end != '\0' || cores == 0 || cores > 1000000)
			return fail(m, "core", "expected a core count in 1..1000000, got '%s'",
				    core);
	}
	if (pstate != NULL) {
		ps = strtoul(pstate, &end, 10);
		if (end == pstate || *end != '\0' || ps > 64)
			return fail(m, "pstate", "expected a power state index, got '%s'", pstate);
	}
	if (!list_ok && strchr(speed, ',') != NULL)
		return fail(m, "speed", "<%s> takes one speed, not a list of power states: '%s'",
			    elem, speed);
	if (sg_list_value(m, "speed", speed, (unsigned)ps, 'f', rate) != 0)
		return m->rc;
	if (!(*rate > 0))
		return fail(m, "speed", "must be > 0, got '%s'", speed);
	*rate *= (double)cores;
	return 0;
}

static int el_host(struct xml *m, const char **at)
{
	const char *id;
	double rate;
	if (need(m, "host", at, "id", &id) != 0 || host_rate(m, "host", at, &rate) != 0)
		return m->rc;
	if (attr(at, "availability_file") != NULL || attr(at, "state_file") != NULL)
		note(m, "host", "availability/state traces not mapped (nominal speed used)");
	int g = group_new(m, id, 1, rate);
	if (g >= 0)
		m->owner = g;
	return g < 0 ? g : 0;
}

static int el_peer(struct xml *m, const char **at)
{
	const char *id, *in, *out, *lat = attr(at, "lat");
	double rate, bw_in, bw_out, lat_s = 0;
	if (need(m, "peer", at, "id", &id) != 0 || host_rate(m, "peer", at, &rate) != 0 ||
	    need(m, "peer", at, "bw_in", &in) != 0 || need(m, "peer", at, "bw_out", &out) != 0 ||
	    sg_value(m, "bw_in", in, 'r', &bw_in) != 0 ||
	    sg_value(m, "bw_out", out, 'r', &bw_out) != 0 ||
	    (lat != NULL && sg_value(m, "lat", lat, 't', &lat_s) != 0))
		return m->rc;
	if (!(bw_in > 0) || !(bw_out > 0))
		return fail(m, bw_in > 0 ? "bw_out" : "bw_in", "must be > 0");
	int g = group_new(m, id, 1, rate);
	if (g < 0)
		return g;
	m->c->group[g].proto.bw_Bps = fmin(bw_in, bw_out);
	m->c->group[g].proto.lat_s = lat_s;
	m->owner = g;
	return 0;
}

/* A leading integer, as C++'s std::stoi reads it (SimGrid parses radicals so): spaces, a
 * sign, digits; what follows is ignored. */
static bool leading_int(const char *p, long *out)
{
	char *end;
	errno = 0;
	*out = strtol(p, &end, 10);
	return end != p && errno == 0;
}

/* radical="0-7" or "0-3,8,10-11": how many hosts. Read as SimGrid reads it: pieces split at
 * ',', each a number or a range A-B. A range that ends before it starts is refused here
 * (SimGrid would make no host of it). */
static int radical_count(struct xml *m, const char *val, uint32_t *out)
{
	char buf[256], *save = NULL;
	uint64_t n = 0;
	if (strlen(val) >= sizeof(buf))
		return fail(m, "radical", "longer than %zu characters", sizeof(buf) - 1);
	strcpy(buf, val);
	for (char *piece = strtok_r(buf, ",", &save); piece != NULL;
	     piece = strtok_r(NULL, ",", &save)) {
		char *dash = strchr(piece, '-');
		long a, b;
		if (dash != NULL)
			*dash = '\0';
		if (!leading_int(piece, &a) || (dash != NULL && strchr(dash + 1, '-') != NULL) ||
		    (dash != NULL ? !leading_int(dash + 1, &b) : (b = a, false)) || a < 0 || b < a)
			return fail(m, "radical", "expected ranges like 0-7 or 0-3,8, got '%s'",
				    val);
		n += (uint64_t)(b - a + 1);
	}
	if (n == 0 || n > KEEL_PLAN_WORKERS_MAX)
		return fail(m, "radical", "expected 1..%u hosts, got '%s'", KEEL_PLAN_WORKERS_MAX,
			    val);
	*out = (uint32_t)n;
	return 0;
}

/* <cluster> and <cabinet>: identical nodes, each with its private link. */
static int el_cluster(struct xml *m, const char *elem, const char **at)
{
	const char *id, *radical, *bw, *lat, *topo = attr(at, "topology");
	double rate, bw_Bps, lat_s;
	uint32_t n = 0;
	if (need(m, elem, at, "id", &id) != 0 || need(m, elem, at, "radical", &radical) != 0 ||
	    need(m, elem, at, "bw", &bw) != 0 || need(m, elem, at, "lat", &lat) != 0 ||
	    host_rate(m, elem, at, &rate) != 0 || radical_count(m, radical, &n) != 0 ||
	    sg_value(m, "bw", bw, 'r', &bw_Bps) != 0 || sg_value(m, "lat", lat, 't', &lat_s) != 0)
		return m->rc;
	if (!(bw_Bps > 0))
		return fail(m, "bw", "must be > 0, got '%s'", bw);
	if (topo != NULL && strcmp(topo, "FLAT") != 0)
		note(m, elem, "topology other than FLAT: each node keeps its own link's bw/lat");
	int g = group_new(m, id, n, rate);
	if (g < 0)
		return g;
	m->c->group[g].proto.bw_Bps = bw_Bps;
	m->c->group[g].proto.lat_s = lat_s;
	m->owner = g;
	return 0;
}

static int el_link(struct xml *m, const char *elem, const char **at)
{
	const char *id, *bw, *lat = attr(at, "latency");
	struct xlink l = {.lat_s = 0};
	if (need(m, elem, at, "id", &id) != 0 || need(m, elem, at, "bandwidth", &bw) != 0 ||
	    sg_list_value(m, "bandwidth", bw, 0, 'r', &l.bw_Bps) != 0 ||
	    (lat != NULL && sg_value(m, "latency", lat, 't', &l.lat_s) != 0))
		return m->rc;
	if (!(l.bw_Bps > 0))
		return fail(m, "bandwidth", "must be > 0, got '%s'", bw);
	snprintf(l.id, sizeof(l.id), "%.*s", (int)PLAN_NAME_MAX - 1, id);
	if (m->link_count == m->link_cap) {
		uint32_t cap = m->link_cap ? 2 * m->link_cap : 64;
		struct xlink *nl = realloc(m->link, cap * sizeof(*nl));
		if (nl == NULL)
			return m->rc = -ENOMEM;
		m->link = nl;
		m->link_cap = cap;
	}
	m->link[m->link_count++] = l;
	return 0;
}

static int group_named(const struct plan_cluster *c, const char *name)
{
	for (uint32_t g = 0; g < c->group_count; g++)
		if (c->group[g].count == 1 && strcmp(c->group[g].name, name) == 0)
			return (int)g;
	return -1;
}

static int el_route(struct xml *m, const char **at)
{
	const char *src, *dst;
	if (need(m, "route", at, "src", &src) != 0 || need(m, "route", at, "dst", &dst) != 0)
		return m->rc;
	m->src = group_named(m->c, src);
	m->dst = group_named(m->c, dst);
	m->route_bw = INFINITY;
	m->route_lat = 0;
	m->in_route = true;
	return 0;
}

static int el_link_ctn(struct xml *m, const char **at)
{
	const char *id;
	if (!m->in_route)
		return 0; /* inside a zoneRoute or bypass route: noted there */
	if (need(m, "link_ctn", at, "id", &id) != 0)
		return m->rc;
	for (uint32_t i = 0; i < m->link_count; i++)
		if (strcmp(m->link[i].id, id) == 0) {
			m->route_bw = fmin(m->route_bw, m->link[i].bw_Bps);
			m->route_lat += m->link[i].lat_s;
			return 0;
		}
	return fail(m, "id", "no <link id=\"%s\"> before this route", id);
}

static void route_end(struct xml *m)
{
	int ends[2] = {m->src, m->dst};
	m->in_route = false;
	if (!isfinite(m->route_bw))
		return;
	for (int i = 0; i < 2; i++) {
		if (ends[i] < 0)
			continue;
		struct keel_worker *w = &m->c->group[ends[i]].proto;
		w->bw_Bps = w->bw_Bps > 0 ? fmin(w->bw_Bps, m->route_bw) : m->route_bw;
		w->lat_s = fmax(w->lat_s, m->route_lat);
	}
}

static int el_prop(struct xml *m, const char **at)
{
	const char *id = attr(at, "id"), *val = attr(at, "value");
	double v;
	if (m->owner < 0 || id == NULL || val == NULL || strcmp(id, "mem") != 0)
		return 0; /* other properties mean nothing to the planner */
	if (plan_parse_quantity(val, 'b', &v) != 0 || v >= 1.8e19)
		return fail(m, "mem", "expected a size in bytes (e.g. 80GB), got '%s'", val);
	m->c->group[m->owner].proto.mem_bytes = (uint64_t)v;
	return 0;
}

/* Elements that hold no worker and change no worker's figures. */
static const char *const structure[] = {"platform", "zone",	"AS",	      "router", "config",
					"random",   "argument", "model_prop", "gpu",	NULL};

/* Elements SimGrid knows that keel-plan's model has no place for, and why. */
static const struct {
	const char *elem, *why;
} unmapped[] = {
    {"zoneRoute", "route between zones: its links do not change a worker's bw/lat"},
    {"ASroute", "route between zones: its links do not change a worker's bw/lat"},
    {"bypassRoute", "bypass route not mapped"},
    {"bypassZoneRoute", "bypass route not mapped"},
    {"bypassASroute", "bypass route not mapped"},
    {"host_link", "per-host link of a cluster not mapped (the cluster's bw/lat are used)"},
    {"trace", "traces not mapped (nominal figures used)"},
    {"trace_connect", "traces not mapped (nominal figures used)"},
    {"disk", "disks not mapped"},
    {"storage", "storage not mapped"},
    {"storage_type", "storage not mapped"},
    {"mount", "storage not mapped"},
    {"include", "included files are not read"},
    {"actor", "deployment, not platform: ignored"},
    {"process", "deployment, not platform: ignored"},
};

static int element(struct xml *m, const char *el, const char **at)
{
	if (strcmp(el, "host") == 0)
		return el_host(m, at);
	if (strcmp(el, "peer") == 0)
		return el_peer(m, at);
	if (strcmp(el, "cluster") == 0 || strcmp(el, "cabinet") == 0)
		return el_cluster(m, el, at);
	if (strcmp(el, "link") == 0 || strcmp(el, "backbone") == 0)
		return el_link(m, el, at);
	if (strcmp(el, "route") == 0)
		return el_route(m, at);
	if (strcmp(el, "link_ctn") == 0)
		return el_link_ctn(m, at);
	if (strcmp(el, "prop") == 0)
		return el_prop(m, at);
	for (int i = 0; structure[i] != NULL; i++)
		if (strcmp(el, structure[i]) == 0)
			return 0;
	for (size_t i = 0; i < sizeof(unmapped) / sizeof(unmapped[0]); i++)
		if (strcmp(el, unmapped[i].elem) == 0) {
			note(m, el, unmapped[i].why);
			return 0;
		}
	return fail(m, el, "<%s> is not an element of SimGrid's platform DTD (v4.1)", el);
}

static void XMLCALL on_start(void *arg, const XML_Char *el, const XML_Char **at)
{
	struct xml *m = arg;
	if (m->rc == 0 && element(m, el, at) != 0 && m->rc == 0)
		m->rc = -EINVAL;
	if (m->rc != 0)
		XML_StopParser(m->parser, XML_FALSE);
}

static void XMLCALL on_end(void *arg, const XML_Char *el)
{
	struct xml *m = arg;
	if (strcmp(el, "route") == 0 && m->in_route)
		route_end(m);
	if (strcmp(el, "host") == 0 || strcmp(el, "peer") == 0 || strcmp(el, "cluster") == 0 ||
	    strcmp(el, "cabinet") == 0)
		m->owner = -1;
}

static int parse(struct xml *m, const char *text, size_t len)
{
	m->parser = XML_ParserCreate(NULL);
	if (m->parser == NULL)
		return -ENOMEM;
	XML_SetUserData(m->parser, m);
	XML_SetElementHandler(m->parser, on_start, on_end);
	if (XML_Parse(m->parser, text, (int)len, XML_TRUE) == XML_STATUS_ERROR && m->rc == 0) {
		snprintf(m->err, m->err_len, "%s:%u: not well-formed XML: %s", m->name,
			 (unsigned)XML_GetErrorLineNumber(m->parser),
			 XML_ErrorString(XML_GetErrorCode(m->parser)));
		m->rc = -EINVAL;
	}
	XML_ParserFree(m->parser);
	return m->rc;
}

int plan_cluster_parse_xml(const char *name, const char *text, size_t len,
			   const struct plan_presets *defs, struct plan_cluster *c, char *err,
			   size_t err_len)
{
	memset(c, 0, sizeof(*c));
	if (defs != NULL)
		c->presets = *defs;
	struct xml m = {.name = name, .c = c, .err = err, .err_len = err_len, .owner = -1};
	int rc = len > (size_t)INT32_MAX ? -EFBIG : parse(&m, text, len);
	free(m.link);
	if (rc == -EFBIG)
		snprintf(err, err_len, "%s: larger than 2 GiB", name);
	if (rc == 0 && c->group_count == 0) {
		snprintf(err, err_len,
			 "%s: no <host>, <peer>, <cluster> or <cabinet> in the platform", name);
		rc = -EINVAL;
	}
	const struct keel_link_preset *eth = keel_link_preset_get(KEEL_LINK_ETH_100G);
	for (uint32_t g = 0; rc == 0 && g < c->group_count; g++) {
		struct keel_worker *w = &c->group[g].proto;
		if (w->bw_Bps == 0) { /* no route mentions it */
			w->link = KEEL_LINK_ETH_100G;
			w->bw_Bps = eth->bw_Bps;
			w->lat_s = eth->lat_s;
		}
	}
	if (rc == 0)
		rc = plan_cluster_expand(c, err, err_len);
	if (rc != 0)
		plan_cluster_free(c);
	return rc;
}

#else /* !PLAN_HAVE_EXPAT */

int plan_cluster_parse_xml(const char *name, const char *text, size_t len,
			   const struct plan_presets *defs, struct plan_cluster *c, char *err,
			   size_t err_len)
{
	(void)text;
	(void)len;
	(void)defs;
	memset(c, 0, sizeof(*c));
	snprintf(err, err_len,
		 "%s: keel-plan was built without expat, so it cannot read SimGrid XML (install "
		 "libexpat1-dev and rebuild)",
		 name);
	return -ENOTSUP;
}

#endif

int plan_cluster_load_xml(const char *path, const struct plan_presets *defs, struct plan_cluster *c,
			  char *err, size_t err_len)
{
	size_t len = 0;
	char *text = plan_slurp(path, &len, err, err_len);
	if (text == NULL) {
		memset(c, 0, sizeof(*c));
		return -EINVAL;
	}
	int rc = plan_cluster_parse_xml(path, text, len, defs, c, err, err_len);
	free(text);
	return rc;
}
