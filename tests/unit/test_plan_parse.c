/* keel-plan's parsers: the cluster and workload text formats and SimGrid platform files parse
 * to the right workers, items and tasks; every malformed line is refused with file:line and
 * the field named. */
#include <math.h>
#include <stdio.h>
#include <string.h>

/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "plan_parse.h"

static char g_err[PLAN_ERR_MAX];

static void test_plan_parse_quantities(void **state)
{
	(void)state;
	double v;
	assert_int_equal(plan_parse_quantity("50GB/s", 'r', &v), 0);
	assert_true(v == 50e9);
	assert_int_equal(plan_parse_quantity("400Gbps", 'r', &v), 0);
	assert_true(v == 50e9);
	assert_int_equal(plan_parse_quantity("125MBps", 'r', &v), 0);
	assert_true(v == 125e6);
	assert_int_equal(plan_parse_quantity("16GiB", 'b', &v), 0);
	assert_true(v == 16.0 * 1073741824.0);
	assert_int_equal(plan_parse_quantity("80G", 'b', &v), 0);
	assert_true(v == 80e9);
	assert_int_equal(plan_parse_quantity("989Tf", 'f', &v), 0);
	assert_true(v == 989e12);
	assert_int_equal(plan_parse_quantity("1.5e12flop", 'f', &v), 0);
	assert_true(v == 1.5e12);
	assert_int_equal(plan_parse_quantity("5us", 't', &v), 0);
	assert_true(fabs(v - 5e-6) < 1e-18);
	assert_int_equal(plan_parse_quantity("2", 't', &v), 0);
	assert_true(v == 2);
	assert_int_equal(plan_parse_quantity("5 parsecs", 't', &v), -EINVAL);
	assert_int_equal(plan_parse_quantity("-1G", 'b', &v), -EINVAL);
	assert_int_equal(plan_parse_quantity("G", 'b', &v), -EINVAL);
	assert_int_equal(plan_parse_quantity("12Q", 'b', &v), -EINVAL);
}

static const char cluster_text[] = "# two groups\n"
				   "group h100 count=2 gpu=H100 link=ib-ndr\n"
				   "\n"
				   "group old gpu=V100-16 rate=100T mem=12G load=0.5 # overrides\n";

static void test_plan_parse_cluster(void **state)
{
	(void)state;
	struct plan_cluster c;
	assert_int_equal(plan_cluster_parse("c", cluster_text, NULL, &c, g_err, sizeof(g_err)), 0);
	assert_int_equal(c.worker_count, 3);
	assert_int_equal(c.group_count, 2);
	assert_true(c.worker[0].rate == 989e12);
	assert_true(c.worker[1].bw_Bps == 50e9);
	assert_int_equal(c.worker[1].type, 0);
	assert_true(c.worker[2].rate == 100e12);
	assert_true(c.worker[2].mem_bytes == 12000000000ull);
	assert_true(c.worker[2].load == 0.5);
	assert_true(c.worker[2].bw_Bps == 150e9); /* the V100's own NVLink 2 */
	char name[96];
	plan_worker_name(&c, 1, name, sizeof(name));
	assert_string_equal(name, "h100-1");
	plan_worker_name(&c, 2, name, sizeof(name));
	assert_string_equal(name, "old");
	plan_cluster_free(&c);
}

static void expect_error(const char *text, bool xml, const char *want)
{
	struct plan_cluster c;
	int rc = xml ? plan_cluster_parse_xml("f.xml", text, strlen(text), NULL, &c, g_err,
					      sizeof(g_err))
		     : plan_cluster_parse("mixed24.cluster", text, NULL, &c, g_err, sizeof(g_err));
	assert_int_equal(rc, -EINVAL);
	if (strstr(g_err, want) == NULL)
		fail_msg("got \"%s\", want \"%s\"", g_err, want);
}

static void test_plan_parse_cluster_errors(void **state)
{
	(void)state;
	expect_error("group a gpu=H100\n\ngroup b count=x gpu=H100\n", false,
		     "mixed24.cluster:3: field 'count': expected a positive integer, got 'x'");
	expect_error("group a count=0 gpu=H100\n", false, ":1: field 'count'");
	expect_error("group a gpu=P100\n", false, ":1: field 'gpu': expected a GPU preset");
	expect_error("group a gpu=H100 link=smoke\n", false, ":1: field 'link'");
	expect_error("group a gpu=H100 mem=lots\n", false, ":1: field 'mem': expected a size");
	expect_error("group a gpu=H100 bw=fast\n", false, ":1: field 'bw'");
	expect_error("group a gpu=H100 lat=5 parsecs\n", false, ":1: field 'parsecs'");
	expect_error("group a gpu=H100 load=1.5\n", false, ":1: field 'load'");
	expect_error("group a gpu=H100 colour=red\n", false, ":1: field 'colour': unknown field");
	expect_error("group a count=2\n", false, ":1: field 'rate': group 'a' needs gpu= or rate=");
	expect_error("group a gpu=H100\ngroup a gpu=H100\n", false, ":2: field 'name'");
	expect_error("gruop a gpu=H100\n", false,
		     ":1: field 'kind': expected 'group' or 'define', got 'gruop'");
	expect_error("define gpu X9 mem=96G\n", false, ":1: field 'rate': gpu 'X9' needs rate=");
	expect_error("define gpu X9 rate=fast\n", false,
		     ":1: field 'rate': expected FLOP/s > 0 (e.g. 500T), got 'fast'");
	expect_error("define gpu H100 rate=1T\n", false, ":1: field 'name': 'H100' is already");
	expect_error("define gpu a/b rate=1T\n", false, ":1: field 'name': expected a gpu name");
	expect_error("define gpu X9 rate=1T link=smoke\n", false,
		     ":1: field 'link': unknown link 'smoke'");
	expect_error("define link f bw=1G\n", false, ":1: field 'lat': link 'f' needs bw=");
	expect_error("define link f bw=0 lat=1us\n", false, ":1: field 'bw': expected a bandwidth");
	expect_error("define gpu X9 rate=1T colour=red\n", false,
		     ":1: field 'colour': unknown field for a gpu");
	expect_error("define tpu X9 rate=1T\n", false, ":1: field 'define': expected 'gpu NAME");
	expect_error("group a gpu=X9\ndefine gpu X9 rate=1T\n", false,
		     ":1: field 'gpu': expected a GPU preset or a defined gpu");
	expect_error("# nothing\n", false, "field 'group': no groups");
	expect_error("group a gpu=H100 suspected=maybe\n", false, ":1: field 'suspected'");
}

static const char xml_text[] =
    "<?xml version='1.0'?>\n"
    "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
    "<platform version=\"4.1\">\n"
    "<!-- a comment\n spanning lines -->\n"
    "<zone id=\"z\" routing=\"Full\">\n"
    "  <host id=\"a\" speed=\"1Gf,500Mf\" core=\"4\"><prop id=\"mem\" value=\"8GB\"/></host>\n"
    "  <host id=\"b\" speed=\"2Gf\"/>\n"
    "  <link id=\"l1\" bandwidth=\"125MBps\" latency=\"50us\"/>\n"
    "  <link id=\"l2\" bandwidth=\"1GBps\" latency=\"10us\"/>\n"
    "  <route src=\"a\" dst=\"b\"><link_ctn id=\"l1\"/><link_ctn id=\"l2\"/></route>\n"
    "</zone>\n"
    "<cluster id=\"c\" prefix=\"c-\" suffix=\"\" radical=\"0-3,8\" speed=\"1Tf\" bw=\"10Gbps\"\n"
    "         lat=\"5us\"/>\n"
    "</platform>\n";

static void test_plan_parse_simgrid_platform(void **state)
{
	(void)state;
	struct plan_cluster c;
	int rc = plan_cluster_parse_xml("p.xml", xml_text, strlen(xml_text), NULL, &c, g_err,
					sizeof(g_err));
	if (rc != 0)
		fail_msg("%s", g_err);
	assert_int_equal(c.group_count, 3);
	assert_int_equal(c.worker_count, 7);
	assert_true(c.worker[0].rate == 4e9);
	assert_true(c.worker[0].mem_bytes == 8000000000ull);
	assert_true(c.worker[0].bw_Bps == 125e6);
	assert_true(fabs(c.worker[1].lat_s - 60e-6) < 1e-12);
	assert_true(c.worker[2].rate == 1e12);
	assert_true(c.worker[6].bw_Bps == 1.25e9);
	plan_cluster_free(&c);
}

static void test_plan_parse_simgrid_errors(void **state)
{
	(void)state;
	expect_error("<platform>\n\n  <host id=\"a\"/>\n</platform>\n", true,
		     "f.xml:3: field 'speed': <host> needs speed=");
	expect_error("<platform>\n<host id=\"a\" speed=\"fast\"/>\n</platform>", true,
		     "f.xml:2: field 'speed': expected a speed (e.g. 1Gf, 989Tf), got 'fast'");
	expect_error("<platform>\n<host id=\"a\"\n speed=\"1Gf\" core=\"0\"/>\n</platform>", true,
		     "f.xml:2: field 'core'");
	expect_error("<platform><host id=\"a\" speed=\"1Gflops\"/></platform>", true,
		     "f.xml:1: field 'speed'"); /* SimGrid: Gf or gigaflops, never Gflops */
	expect_error("<platform><link id=\"l\" bandwidth=\"1KBps\"/></platform>", true,
		     "f.xml:1: field 'bandwidth'"); /* SimGrid's decimal kilo is k */
	expect_error("<platform><peer id=\"p\" speed=\"1Gf,2Gf\" bw_in=\"1Bps\" "
		     "bw_out=\"1Bps\"/></platform>",
		     true, "field 'speed': <peer> takes one speed");
	expect_error("<platform><host id=\"a\" speed=\"1Gf\" pstate=\"2\"/></platform>", true,
		     "field 'speed': has no value number 2");
	expect_error("<platform><hots id=\"a\"/></platform>", true,
		     "f.xml:1: field 'hots': <hots> is not an element of SimGrid's platform DTD");
	expect_error("<cluster id=\"c\" prefix=\"\" suffix=\"\" radical=\"7-3\" speed=\"1Gf\" "
		     "bw=\"1GBps\" lat=\"1us\"/>",
		     true, "f.xml:1: field 'radical'");
	expect_error("<platform><host id=\"a\" speed=\"1Gf\"/>\n<route src=\"a\" dst=\"a\">\n"
		     "<link_ctn id=\"nope\"/></route></platform>",
		     true, "f.xml:3: field 'id': no <link id=\"nope\">");
	expect_error("<host id=\"a\" speed=\"1Gf\"", true, "f.xml:1: not well-formed XML");
	expect_error("<platform>\n<zone id=\"z\">\n</zon>", true,
		     "f.xml:3: not well-formed XML: mismatched tag");
	expect_error("<zone id=\"z\"/>", true, "no <host>, <peer>, <cluster> or <cabinet>");
}

/* SimGrid's own units and the elements beyond hosts and clusters. */
static const char xml_more[] =
    "<?xml version = '1.0'?>\n"
    "<platform version = \"4.1\">\n"
    "<zone id=\"w\" routing=\"Floyd\">\n"
    " <zone id=\"v\" routing=\"Vivaldi\">\n"
    "  <peer id=\"p\" speed=\"2gigaflops\" bw_in=\"8Mbps\" bw_out=\"2MiBps\" lat=\"1m\"/>\n"
    " </zone>\n"
    " <zone id=\"r\" routing=\"Cluster\">\n"
    "  <cabinet id=\"cb\" prefix=\"x\" suffix=\"\" radical=\"1-8\" speed=\"1kf\" "
    "bw=\"1GiBps\" lat=\"100ns\"/>\n"
    "  <backbone id=\"bb\" bandwidth=\"10Gbps\" latency=\"1us\"/>\n"
    " </zone>\n"
    " <host id=\"h\" speed=\"4Gf,1Gf\" pstate=\"1\" core=\"2\"/>\n"
    " <zoneRoute src=\"v\" dst=\"r\" gw_src=\"p\" gw_dst=\"cb\"/>\n"
    "</zone>\n"
    "</platform>\n";

static void test_plan_parse_simgrid_more(void **state)
{
	(void)state;
	struct plan_cluster c;
	int rc = plan_cluster_parse_xml("m.xml", xml_more, strlen(xml_more), NULL, &c, g_err,
					sizeof(g_err));
	if (rc != 0)
		fail_msg("%s", g_err);
	assert_int_equal(c.group_count, 3);
	assert_int_equal(c.worker_count, 10);
	assert_true(c.worker[0].rate == 2e9);
	assert_true(c.worker[0].bw_Bps == 1e6); /* min(8 Mb/s, 2 MiB/s) */
	assert_true(c.worker[0].lat_s == 60);	/* "m" is a minute in SimGrid */
	assert_true(c.worker[1].rate == 1e3);
	assert_true(c.worker[1].bw_Bps == 1073741824.0);
	assert_true(fabs(c.worker[1].lat_s - 100e-9) < 1e-18);
	assert_true(c.worker[9].rate == 2e9); /* pstate 1 (1 Gf) x 2 cores */
	assert_int_equal(c.note_count, 1);
	if (strstr(c.note[0], "m.xml:12: <zoneRoute>") == NULL)
		fail_msg("note: %s", c.note[0]);
	plan_cluster_free(&c);
}

/* define lines: in the file and before it (--define), used by groups. */
static void test_plan_parse_define(void **state)
{
	(void)state;
	struct plan_cluster c;
	struct plan_presets defs;
	memset(&defs, 0, sizeof(defs));
	assert_int_equal(
	    plan_presets_define(&defs, "link fab bw=800Gbps lat=3us", g_err, sizeof(g_err)), 0);
	const char *text = "define gpu X9 rate=500T mem=96G link=nvlink5\n"
			   "group a count=2 gpu=X9\n"
			   "group b gpu=x9 link=fab\n"
			   "group c gpu=B200 link=roce-400g\n"
			   "group d gpu=A100 link=ib\n";
	int rc = plan_cluster_parse("d.cluster", text, &defs, &c, g_err, sizeof(g_err));
	if (rc != 0)
		fail_msg("%s", g_err);
	assert_int_equal(c.worker_count, 5);
	assert_true(c.worker[0].rate == 500e12 && c.worker[0].mem_bytes == 96000000000ull);
	assert_true(c.worker[0].bw_Bps == 900e9); /* NVLink 5 per direction */
	assert_int_equal(c.worker[0].link, KEEL_LINK_NVLINK5);
	assert_true(c.worker[2].bw_Bps == 100e9 && c.worker[2].lat_s == 3e-6);
	assert_int_equal(c.worker[2].link, KEEL_LINK_CUSTOM);
	assert_true(c.worker[3].rate == 2250e12 && c.worker[3].bw_Bps == 50e9);
	assert_true(c.worker[4].mem_bytes == 80000000000ull && c.worker[4].bw_Bps == 50e9);
	assert_string_equal(c.group[0].gpu, "X9");
	plan_cluster_free(&c);
}

static void expect_wl_error(const char *text, const char *want)
{
	struct plan_cluster c;
	struct plan_workload w;
	assert_int_equal(plan_cluster_parse("c", cluster_text, NULL, &c, g_err, sizeof(g_err)), 0);
	assert_int_equal(plan_workload_parse("w.workload", text, &c, &w, g_err, sizeof(g_err)),
			 -EINVAL);
	if (strstr(g_err, want) == NULL)
		fail_msg("got \"%s\", want \"%s\"", g_err, want);
	plan_cluster_free(&c);
}

static void test_plan_parse_workload(void **state)
{
	(void)state;
	struct plan_cluster c;
	struct plan_workload w;
	assert_int_equal(plan_cluster_parse("c", cluster_text, NULL, &c, g_err, sizeof(g_err)), 0);
	const char *text = "shares blocks=4 split=8 block_work=2T block_mem=1G\n"
			   "policy skew_max=3 load_max=0.9\n"
			   "item emb work=40T mem=12G count=3\n"
			   "item head work=1T key=99\n"
			   "task a work=989T pin=h100-1\n"
			   "task b cost=old:2s,h100:500ms avoid=2\n"
			   "edge a b data=1G\n";
	int rc = plan_workload_parse("w", text, &c, &w, g_err, sizeof(g_err));
	if (rc != 0)
		fail_msg("%s", g_err);
	assert_true(w.has_shares);
	assert_int_equal(w.shares.blocks, 4);
	assert_int_equal(w.shares.split, 8);
	assert_true(w.shares.block_bytes == 1000000000ull);
	assert_true(w.policy.skew_max == 3 && w.policy.load_max == 0.9);
	assert_int_equal(w.item_count, 4);
	assert_string_equal(w.item_name[2], "emb2");
	assert_int_equal(w.item[3].key, 99);
	assert_int_equal(w.task_count, 2);
	assert_true(w.cost[0] == 1.0);	       /* 989 TFLOP on an H100 */
	assert_true(w.cost[1] == 989.0 / 100); /* on the 100 TFLOP/s group */
	assert_int_equal(w.hint[0], KEEL_SCHED_PIN);
	assert_int_equal(w.hint_worker[0], 1);
	assert_true(w.cost[2] == 0.5 && w.cost[3] == 2.0);
	assert_int_equal(w.hint[1], KEEL_SCHED_AVOID);
	assert_int_equal(w.edge_count, 1);
	assert_true(w.edge_bytes[0] == 1e9);
	plan_workload_free(&w);
	plan_cluster_free(&c);
}

static void test_plan_parse_workload_errors(void **state)
{
	(void)state;
	expect_wl_error("shares split=8 block_work=1T\n", "w.workload:1: field 'blocks': missing");
	expect_wl_error("shares blocks=4 split=20 block_work=1T\n",
			"w.workload:1: field 'split': expected 8..16, got '20'");
	expect_wl_error("shares blocks=4\n", ":1: field 'block_work': missing");
	expect_wl_error("\nitem x work=1T mem=12Q\n", "w.workload:2: field 'mem': expected a size");
	expect_wl_error("item x mem=1G\n", ":1: field 'work': missing");
	expect_wl_error("item x work=1T count=-2\n", ":1: field 'count'");
	expect_wl_error("policy skew_max=0.5\n", ":1: field 'skew_max'");
	expect_wl_error("task a cost=gpu9:1\n", ":1: field 'cost': no group named 'gpu9'");
	expect_wl_error("task a cost=old\n", ":1: field 'cost': expected GROUP:TIME");
	expect_wl_error("task a work=1T pin=h100-7\n", ":1: field 'pin': expected a worker name");
	expect_wl_error("task a\n", ":1: field 'work': task 'a' needs work= or cost=");
	expect_wl_error("task a work=1\ntask a work=1\n", ":2: field 'name': task 'a' defined");
	expect_wl_error("task a work=1\nedge a b\n", ":2: field 'to': no task named 'b'");
	expect_wl_error("task a work=1\nedge a a\n", ":2: field 'to'");
	expect_wl_error("task a work=1\ntask b work=1\nedge a b size=1\n", ":3: field 'size'");
	expect_wl_error("frobnicate\n", ":1: field 'kind': expected shares, item, policy");
	expect_wl_error("# empty\n", "no shares, items or tasks");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_plan_parse_quantities),
	    cmocka_unit_test(test_plan_parse_cluster),
	    cmocka_unit_test(test_plan_parse_cluster_errors),
	    cmocka_unit_test(test_plan_parse_simgrid_platform),
	    cmocka_unit_test(test_plan_parse_simgrid_errors),
	    cmocka_unit_test(test_plan_parse_simgrid_more),
	    cmocka_unit_test(test_plan_parse_define),
	    cmocka_unit_test(test_plan_parse_workload),
	    cmocka_unit_test(test_plan_parse_workload_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
