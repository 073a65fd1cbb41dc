/* The cluster model: GPU types and fabrics from the shared presets (include/keel/partition.h,
 * plus `define` lines read by tools/common/plan_preset.c), the compact cluster description
 * ("48xH100:ib,16xA100:eth") and the SimGrid platform XML it becomes.
 * Tool-side: it writes a file; it never touches a keel node. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plan_preset.h"
#include "sim_int.h"

/* The user's definitions (--define, scenario `define` lines): read before the runs fork. */
static struct plan_presets defs;

int sim_define(const char *def, char *err, size_t err_len)
{
	char sub[512];
	if (plan_presets_define(&defs, def, sub, sizeof(sub)) != 0) {
		snprintf(err, err_len, "define '%s': %s", def, sub);
		return -EINVAL;
	}
	return 0;
}

void sim_define_reset(void)
{
	memset(&defs, 0, sizeof(defs));
}

void sim_models_print(FILE *f)
{
	fprintf(f, "Each GPU is a host whose speed is its dense BF16 peak, with its own scale-up "
		   "link to its server's switch\nand one NIC into its fabric (the link table).\n");
	plan_presets_print(&defs, f);
}

/* One item: COUNTxGPU[:FABRIC][/PER_NODE]. */
static int parse_item(const char *item, struct sim_group *g, char *err, size_t err_len)
{
	char buf[64], known[1024], *x, *fab, *per, *end;
	unsigned long count, per_node = 8;

	if (strlen(item) >= sizeof(buf)) {
		snprintf(err, err_len, "cluster item '%.20s...' is too long", item);
		return -EINVAL;
	}
	strcpy(buf, item);
	per = strchr(buf, '/');
	if (per != NULL) {
		*per++ = '\0';
		per_node = strtoul(per, &end, 10);
		if (*per == '\0' || *end != '\0' || per_node == 0 || per_node > 64) {
			snprintf(err, err_len,
				 "cluster item '%s': GPUs per node '%s' is not a number in 1..64",
				 item, per);
			return -EINVAL;
		}
	}
	fab = strchr(buf, ':');
	if (fab != NULL)
		*fab++ = '\0';
	x = strchr(buf, 'x');
	if (x == NULL || x == buf || !isdigit((unsigned char)buf[0])) {
		snprintf(err, err_len,
			 "cluster item '%s': expected COUNTxGPU[:FABRIC][/PER_NODE], e.g. "
			 "48xH100:ib",
			 item);
		return -EINVAL;
	}
	*x++ = '\0';
	count = strtoul(buf, &end, 10);
	if (*end != '\0' || count == 0 || count > SIM_HOSTS_MAX) {
		snprintf(err, err_len, "cluster item '%s': GPU count '%s' is not in 1..%u", item,
			 buf, SIM_HOSTS_MAX);
		return -EINVAL;
	}
	if (plan_gpu_find(&defs, x, &g->gpu, &g->own) < 0) {
		plan_gpu_names(&defs, known, sizeof(known));
		snprintf(err, err_len, "cluster item '%s': unknown GPU type '%s' (known: %s)", item,
			 x, known);
		return -EINVAL;
	}
	if (plan_link_find(&defs, fab != NULL ? fab : "ib", &g->fabric) < 0) {
		plan_link_names(&defs, known, sizeof(known));
		snprintf(err, err_len, "cluster item '%s': unknown fabric '%s' (known: %s)", item,
			 fab, known);
		return -EINVAL;
	}
	g->gpu_count = (uint32_t)count;
	g->per_node = (uint32_t)per_node;
	return 0;
}

int sim_cluster_parse(const char *spec, struct sim_cluster *c, char *err, size_t err_len)
{
	char buf[512];
	char *save = NULL;

	memset(c, 0, sizeof(*c));
	if (spec == NULL || spec[0] == '\0') {
		snprintf(err, err_len,
			 "cluster description is empty (e.g. 48xH100:ib,16xA100:eth)");
		return -EINVAL;
	}
	if (strlen(spec) >= sizeof(buf)) {
		snprintf(err, err_len, "cluster description longer than %zu characters",
			 sizeof(buf) - 1);
		return -EINVAL;
	}
	strcpy(buf, spec);
	for (char *item = strtok_r(buf, ",", &save); item != NULL;
	     item = strtok_r(NULL, ",", &save)) {
		if (c->group_count == SIM_GROUPS_MAX) {
			snprintf(err, err_len, "cluster description has more than %u groups",
				 SIM_GROUPS_MAX);
			return -EINVAL;
		}
		int rc = parse_item(item, &c->groups[c->group_count], err, err_len);
		if (rc != 0)
			return rc;
		c->gpu_count += c->groups[c->group_count].gpu_count;
		c->group_count++;
	}
	if (c->group_count == 0 || c->gpu_count > SIM_HOSTS_MAX) {
		snprintf(err, err_len, "cluster description '%s' names %s", spec,
			 c->group_count == 0 ? "no GPUs" : "more GPUs than 4096");
		return -EINVAL;
	}
	return 0;
}

/* Topology, one DijkstraCache zone: each GPU reaches its server's NVSwitch over its own
 * NVLink (one link), and its fabric's switch through its own NIC (NIC link to a port, then
 * the switch), so a route inside a server (2 links) is always shorter than one through the
 * fabric (4). Fabrics of different classes meet at a gateway as fast as the faster NIC ×
 * 8: the NICs stay the bottleneck, as in a non-blocking fat tree. */
static void xml_gpu(FILE *f, const struct sim_group *g, uint32_t gpu, uint32_t server,
		    bool new_server)
{
	if (new_server)
		fprintf(f, " <router id=\"nvsw-%04u\"/>\n", server);
	fprintf(f,
		" <host id=\"gpu-%04u\" speed=\"%.6ef\"><prop id=\"gpu\" value=\"%s\"/><prop "
		"id=\"fabric\" value=\"%s\"/><prop id=\"server\" value=\"%u\"/></host>\n",
		gpu, g->gpu.rate_flops, g->gpu.name, g->fabric.name, server);
	fprintf(f, " <router id=\"port-%04u\"/>\n", gpu);
	fprintf(f,
		" <link id=\"nvl-%04u\" bandwidth=\"%.6eBps\" latency=\"%.6es\" "
		"sharing_policy=\"SPLITDUPLEX\"/>\n",
		gpu, g->own.bw_Bps, g->own.lat_s / 2);
	fprintf(f,
		" <link id=\"nic-%04u\" bandwidth=\"%.6eBps\" latency=\"%.6es\" "
		"sharing_policy=\"SPLITDUPLEX\"/>\n",
		gpu, g->fabric.bw_Bps, g->fabric.lat_s / 2);
}

static void xml_routes(FILE *f, const struct sim_group *g, uint32_t gpu, uint32_t server)
{
	fprintf(f,
		" <route src=\"gpu-%04u\" dst=\"nvsw-%04u\"><link_ctn id=\"nvl-%04u\" "
		"direction=\"UP\"/></route>\n",
		gpu, server, gpu);
	fprintf(f,
		" <route src=\"gpu-%04u\" dst=\"port-%04u\"><link_ctn id=\"nic-%04u\" "
		"direction=\"UP\"/></route>\n",
		gpu, gpu, gpu);
	fprintf(f, " <route src=\"port-%04u\" dst=\"sw-%s\"><link_ctn id=\"fabric-%s\"/></route>\n",
		gpu, g->fabric.name, g->fabric.name);
}

/* The distinct fabrics of `c`, in first-use order: indexes of the first group using each. */
static uint32_t fabrics_used(const struct sim_cluster *c, uint32_t *first_group)
{
	uint32_t n = 0;
	for (uint32_t gi = 0; gi < c->group_count; gi++) {
		bool seen = false;
		for (uint32_t k = 0; k < n && !seen; k++)
			seen = strcmp(c->groups[first_group[k]].fabric.name,
				      c->groups[gi].fabric.name) == 0;
		if (!seen)
			first_group[n++] = gi;
	}
	return n;
}

int sim_cluster_write_xml(const struct sim_cluster *c, FILE *f)
{
	uint32_t fab[SIM_GROUPS_MAX];
	uint32_t fab_count = fabrics_used(c, fab);
	double gw_Bps = 0;

	fprintf(f, "<?xml version='1.0'?>\n"
		   "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
		   "<platform version=\"4.1\">\n"
		   "<zone id=\"keel\" routing=\"DijkstraCache\">\n");
	for (uint32_t k = 0; k < fab_count; k++) {
		const struct keel_link_preset *l = &c->groups[fab[k]].fabric;
		/* The switch itself: non-blocking; its latency is in the NIC links. */
		fprintf(f,
			" <router id=\"sw-%s\"/>\n <link id=\"fabric-%s\" bandwidth=\"1e15Bps\" "
			"latency=\"0s\" sharing_policy=\"FATPIPE\"/>\n",
			l->name, l->name);
		if (l->bw_Bps * 8 > gw_Bps)
			gw_Bps = l->bw_Bps * 8;
	}
	for (uint32_t k = 1; k < fab_count; k++)
		fprintf(f, " <link id=\"gw-%s\" bandwidth=\"%.6eBps\" latency=\"1e-6s\"/>\n",
			c->groups[fab[k]].fabric.name, gw_Bps);
	/* Pass 0 declares hosts, routers and links; pass 1 the routes that use them. */
	for (int pass = 0; pass < 2; pass++) {
		uint32_t gpu = 0, server = 0;
		for (uint32_t gi = 0; gi < c->group_count; gi++) {
			const struct sim_group *g = &c->groups[gi];
			for (uint32_t i = 0; i < g->gpu_count; i++, gpu++) {
				if (i % g->per_node == 0 && (i > 0 || gi > 0))
					server++;
				if (pass == 0)
					xml_gpu(f, g, gpu, server, i % g->per_node == 0);
				else
					xml_routes(f, g, gpu, server);
			}
		}
	}
	for (uint32_t k = 1; k < fab_count; k++)
		fprintf(f,
			" <route src=\"sw-%s\" dst=\"sw-%s\"><link_ctn "
			"id=\"gw-%s\"/></route>\n",
			c->groups[fab[0]].fabric.name, c->groups[fab[k]].fabric.name,
			c->groups[fab[k]].fabric.name);
	fprintf(f, "</zone>\n</platform>\n");
	return ferror(f) ? -EIO : 0;
}
