/* The cluster model: GPU types and fabrics with sourced figures, the compact cluster
 * description ("48xH100:ib,16xA100:eth") and the SimGrid platform XML it becomes.
 * Tool-side: it writes a file; it never touches a keel node. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim_int.h"

/* Dense BF16 tensor throughput (no sparsity) and NVLink bandwidth per GPU from NVIDIA's
 * datasheets. NVLink figures are totals over both directions: halved for one direction. */
static const struct sim_gpu_type gpu_types[] = {
    {"V100", 125e12, 300e9 / 2, 0.35e-6,
     "NVIDIA V100 datasheet: 125 TFLOPS tensor (FP16), NVLink 2 300 GB/s"},
    {"A100", 312e12, 600e9 / 2, 0.35e-6,
     "NVIDIA A100 datasheet: 312 TFLOPS BF16 dense, NVLink 3 600 GB/s"},
    {"H100", 989e12, 900e9 / 2, 0.35e-6,
     "NVIDIA H100 SXM datasheet: 989 TFLOPS BF16 dense, NVLink 4 900 GB/s"},
};

/* One NIC per GPU (as in DGX A100/H100), per-direction line rate. Latencies are one-way,
 * host to host through one switch: InfiniBand ~1-2 us (NVIDIA ConnectX/Quantum figures, MPI
 * ping-pong ~1 us), Ethernet ~5-10 us (kernel UDP/TCP; RoCE is closer to IB). */
static const struct sim_fabric fabrics[] = {
    {"ib", 400e9 / 8, 1.5e-6, "NDR InfiniBand 400 Gb/s",
     "NVIDIA ConnectX-7 / Quantum-2 NDR: 400 Gb/s per port; ~1-2 us"},
    {"ndr", 400e9 / 8, 1.5e-6, "NDR InfiniBand 400 Gb/s",
     "NVIDIA ConnectX-7 / Quantum-2 NDR: 400 Gb/s per port; ~1-2 us"},
    {"hdr", 200e9 / 8, 1.5e-6, "HDR InfiniBand 200 Gb/s",
     "NVIDIA ConnectX-6 / Quantum HDR: 200 Gb/s per port; ~1-2 us"},
    {"eth", 100e9 / 8, 7e-6, "100 GbE", "IEEE 802.3 100GBASE; ~5-10 us through the kernel"},
    {"eth400", 400e9 / 8, 7e-6, "400 GbE", "IEEE 802.3bs 400GBASE; ~5-10 us"},
};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

const struct sim_gpu_type *sim_gpu_find(const char *name)
{
	for (size_t i = 0; i < COUNT_OF(gpu_types); i++)
		if (strcasecmp(name, gpu_types[i].name) == 0)
			return &gpu_types[i];
	return NULL;
}

const struct sim_fabric *sim_fabric_find(const char *name)
{
	for (size_t i = 0; i < COUNT_OF(fabrics); i++)
		if (strcasecmp(name, fabrics[i].name) == 0)
			return &fabrics[i];
	return NULL;
}

void sim_models_print(FILE *f)
{
	fprintf(f, "GPU types (host speed = dense BF16 peak; NVLink per direction):\n");
	for (size_t i = 0; i < COUNT_OF(gpu_types); i++)
		fprintf(f, "  %-5s %6.0f TFLOPS  NVLink %4.0f GB/s  [%s]\n", gpu_types[i].name,
			gpu_types[i].flops / 1e12, gpu_types[i].nvlink_Bps / 1e9,
			gpu_types[i].source);
	fprintf(f, "Fabrics (one NIC per GPU, per direction; one-way latency):\n");
	for (size_t i = 0; i < COUNT_OF(fabrics); i++)
		fprintf(f, "  %-6s %-24s %5.1f GB/s  %4.1f us  [%s]\n", fabrics[i].name,
			fabrics[i].label, fabrics[i].nic_Bps / 1e9, fabrics[i].lat_s * 1e6,
			fabrics[i].source);
}

static void names_list(char *out, size_t len, bool gpus)
{
	size_t n = gpus ? COUNT_OF(gpu_types) : COUNT_OF(fabrics);

	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		size_t used = strlen(out);
		snprintf(out + used, len - used, "%s%s", i ? ", " : "",
			 gpus ? gpu_types[i].name : fabrics[i].name);
	}
}

/* One item: COUNTxGPU[:FABRIC][/PER_NODE]. */
static int parse_item(const char *item, struct sim_group *g, char *err, size_t err_len)
{
	char buf[64], known[128], *x, *fab, *per, *end;
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
	g->gpu = sim_gpu_find(x);
	if (g->gpu == NULL) {
		names_list(known, sizeof(known), true);
		snprintf(err, err_len, "cluster item '%s': unknown GPU type '%s' (known: %s)", item,
			 x, known);
		return -EINVAL;
	}
	g->fabric = sim_fabric_find(fab != NULL ? fab : "ib");
	if (g->fabric == NULL) {
		names_list(known, sizeof(known), false);
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
		gpu, g->gpu->flops, g->gpu->name, g->fabric->name, server);
	fprintf(f, " <router id=\"port-%04u\"/>\n", gpu);
	fprintf(f,
		" <link id=\"nvl-%04u\" bandwidth=\"%.6eBps\" latency=\"%.6es\" "
		"sharing_policy=\"SPLITDUPLEX\"/>\n",
		gpu, g->gpu->nvlink_Bps, g->gpu->nvlink_lat_s);
	fprintf(f,
		" <link id=\"nic-%04u\" bandwidth=\"%.6eBps\" latency=\"%.6es\" "
		"sharing_policy=\"SPLITDUPLEX\"/>\n",
		gpu, g->fabric->nic_Bps, g->fabric->lat_s / 2);
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
		gpu, g->fabric->name, g->fabric->name);
}

int sim_cluster_write_xml(const struct sim_cluster *c, FILE *f)
{
	bool used[COUNT_OF(fabrics)] = {false};
	const char *first = NULL;
	double gw_Bps = 0;

	fprintf(f, "<?xml version='1.0'?>\n"
		   "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
		   "<platform version=\"4.1\">\n"
		   "<zone id=\"keel\" routing=\"DijkstraCache\">\n");
	for (uint32_t gi = 0; gi < c->group_count; gi++)
		used[c->groups[gi].fabric - fabrics] = true;
	for (size_t fi = 0; fi < COUNT_OF(fabrics); fi++) {
		if (!used[fi])
			continue;
		/* The switch itself: non-blocking; its latency is in the NIC links. */
		fprintf(f,
			" <router id=\"sw-%s\"/>\n <link id=\"fabric-%s\" bandwidth=\"1e15Bps\" "
			"latency=\"0s\" sharing_policy=\"FATPIPE\"/>\n",
			fabrics[fi].name, fabrics[fi].name);
		if (fabrics[fi].nic_Bps * 8 > gw_Bps)
			gw_Bps = fabrics[fi].nic_Bps * 8;
	}
	for (size_t fi = 0; fi < COUNT_OF(fabrics); fi++) {
		if (!used[fi])
			continue;
		if (first == NULL)
			first = fabrics[fi].name;
		else
			fprintf(f,
				" <link id=\"gw-%s\" bandwidth=\"%.6eBps\" latency=\"1e-6s\"/>\n",
				fabrics[fi].name, gw_Bps);
	}
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
	for (size_t fi = 0; fi < COUNT_OF(fabrics); fi++) {
		if (!used[fi])
			continue;
		if (strcmp(first, fabrics[fi].name) != 0)
			fprintf(f,
				" <route src=\"sw-%s\" dst=\"sw-%s\"><link_ctn "
				"id=\"gw-%s\"/></route>\n",
				first, fabrics[fi].name, fabrics[fi].name);
	}
	fprintf(f, "</zone>\n</platform>\n");
	return ferror(f) ? -EIO : 0;
}

int sim_platform_check(const char *path, uint32_t hosts_min, char *err, size_t err_len)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	uint32_t hosts = 0;
	bool platform = false;

	if (f == NULL) {
		snprintf(err, err_len, "platform file '%s': %s", path, strerror(errno));
		return -EINVAL;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strstr(line, "<platform") != NULL)
			platform = true;
		for (const char *p = line; (p = strstr(p, "<host ")) != NULL; p++)
			hosts++;
		for (const char *p = line; (p = strstr(p, "<cluster ")) != NULL; p++)
			hosts = hosts < hosts_min ? hosts_min : hosts; /* counted by SimGrid */
	}
	fclose(f);
	if (!platform) {
		snprintf(err, err_len,
			 "platform file '%s': no <platform> element (not SimGrid XML)", path);
		return -EINVAL;
	}
	if (hosts < hosts_min || hosts == 0) {
		snprintf(err, err_len, "platform file '%s': %u <host> elements, need %u", path,
			 hosts, hosts_min ? hosts_min : 1);
		return -EINVAL;
	}
	return 0;
}
