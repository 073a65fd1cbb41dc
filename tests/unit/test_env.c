/* Tests of the KEEL_* environment table (keel/env.h, runtime/boot/env_table.def): its rows, the
 * one parser (each type, each error, the one wording), the readers and the printed table. */
/* cmocka.h needs these first, in this order. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/env.h"

static char err[512];

/* Every variable of the table unset: each test starts from the defaults. */
static int env_clear(void **state)
{
	(void)state;
	for (size_t i = 0; keel_env_at(i) != NULL; i++)
		unsetenv(keel_env_at(i)->name);
	err[0] = '\0';
	return 0;
}

static const struct keel_env_var *var(const char *name)
{
	const struct keel_env_var *v = keel_env_find(name);
	assert_non_null(v);
	return v;
}

/* Parse `text` as `name`: expect -EINVAL and exactly `message`. */
static void expect_bad(const char *name, const char *text, const char *message)
{
	uint64_t x = 12345;
	err[0] = '\0';
	assert_int_equal(keel_env_parse(var(name), text, &x, err, sizeof(err)), -EINVAL);
	if (strcmp(err, message) != 0)
		print_error("got  '%s'\nwant '%s'\n", err, message);
	assert_string_equal(err, message);
	assert_int_equal(x, 12345); /* untouched */
}

static uint64_t expect_good(const char *name, const char *text)
{
	uint64_t x = 0;
	assert_int_equal(keel_env_parse(var(name), text, &x, err, sizeof(err)), 0);
	return x;
}

/* Names count the values of a "a|b|c" list. */
static uint64_t name_count(const char *values)
{
	uint64_t n = 1;
	for (const char *p = values; *p != '\0'; p++)
		n += *p == '|';
	return n;
}

static void test_env_table_rows(void **state)
{
	(void)state;
	size_t rows = 0;
	for (size_t i = 0; keel_env_at(i) != NULL; i++, rows++) {
		const struct keel_env_var *v = keel_env_at(i);
		assert_int_equal(strncmp(v->name, "KEEL_", 5), 0);
		assert_ptr_equal(keel_env_find(v->name), v); /* each name once */
		assert_true(v->lo <= v->hi);
		assert_non_null(v->unit);
		assert_true(v->meaning != NULL && v->meaning[0] != '\0');
		assert_true(v->programs != NULL && v->programs[0] != '\0');
		if (v->type == KEEL_ENV_ENUM) {
			assert_non_null(v->values);
			assert_true(v->dflt < name_count(v->values));
		} else if (v->type == KEEL_ENV_BOOL) {
			assert_true(v->dflt <= 1);
		} else if (v->type != KEEL_ENV_STRING && v->type != KEEL_ENV_PATH &&
			   v->dflt_text == NULL) {
			/* a default the table states is one it would accept */
			if (v->dflt < v->lo || v->dflt > v->hi)
				print_error("%s: default %s outside its range\n", v->name,
					    v->dflt_expr);
			assert_true(v->dflt >= v->lo && v->dflt <= v->hi);
		}
	}
	assert_true(rows >= 60);
	assert_null(keel_env_find("KEEL_NO_SUCH_THING"));
	assert_null(keel_env_at(rows));
}

static void test_env_parse_bool(void **state)
{
	(void)state;
	assert_int_equal(expect_good("KEEL_UDP_GSO", "0"), 0);
	assert_int_equal(expect_good("KEEL_UDP_GSO", "1"), 1);
	const char *bad[] = {"yes", "2", "", " 1", "1 ", "on", "01", "-1"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[128];
		snprintf(want, sizeof(want), "KEEL_UDP_GSO='%s': expected 0 (off) or 1 (on)",
			 bad[i]);
		expect_bad("KEEL_UDP_GSO", bad[i], want);
	}
}

static void test_env_parse_whole(void **state)
{
	(void)state;
	assert_int_equal(expect_good("KEEL_MISS_LIMIT", "1"), 1);
	assert_int_equal(expect_good("KEEL_MISS_LIMIT", "1000000"), 1000000);
	assert_int_equal(expect_good("KEEL_MISS_LIMIT", "007"), 7);
	assert_int_equal(expect_good("KEEL_JOB_ID", "4294967295"), 4294967295u);
	/* non-numeric, negative, signed, spaced, fractional, hexadecimal, out of range, and
	 * past 64 bits: never wrapped around */
	const char *bad[] = {"abc",
			     "-1",
			     "+5",
			     " 5",
			     "5 ",
			     "1.5",
			     "0x10",
			     "0",
			     "",
			     "1000001",
			     "18446744073709551616",
			     "99999999999999999999999"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[160];
		snprintf(want, sizeof(want),
			 "KEEL_MISS_LIMIT='%s': expected a whole number in 1..1000000 (heartbeat "
			 "intervals)",
			 bad[i]);
		expect_bad("KEEL_MISS_LIMIT", bad[i], want);
	}
	/* no unit: no parenthesis */
	expect_bad("KEEL_JOB_ID", "4294967296",
		   "KEEL_JOB_ID='4294967296': expected a whole number in 0..4294967295");
	/* a number whose range is not all its values: the reader checks the hole */
	expect_bad("KEEL_UDP_PIECES", "65508",
		   "KEEL_UDP_PIECES='65508': expected 0 (off), 1 (on) or a piece size in "
		   "576..65507 (bytes)");
}

static void test_env_parse_duration(void **state)
{
	(void)state;
	assert_int_equal(expect_good("KEEL_HEARTBEAT_US", "250"), 250);
	expect_bad("KEEL_HEARTBEAT_US", "abc",
		   "KEEL_HEARTBEAT_US='abc': expected a whole number in 1..3600000000 "
		   "(microseconds)");
	expect_bad("KEEL_HEARTBEAT_US", "10ms",
		   "KEEL_HEARTBEAT_US='10ms': expected a whole number in 1..3600000000 "
		   "(microseconds)");
	expect_bad("KEEL_RENDEZVOUS_TIMEOUT_MS", "3600001",
		   "KEEL_RENDEZVOUS_TIMEOUT_MS='3600001': expected a whole number in 1..3600000 "
		   "(milliseconds)");
	expect_bad("KEEL_METRICS_LINGER_MS", "-5",
		   "KEEL_METRICS_LINGER_MS='-5': expected a whole number in 0..3600000 "
		   "(milliseconds)");
}

static void test_env_parse_enum(void **state)
{
	(void)state;
	assert_int_equal(expect_good("KEEL_ALGO", "auto"), 0);
	assert_int_equal(expect_good("KEEL_ALGO", "ring"), 1);
	assert_int_equal(expect_good("KEEL_ALGO", "rd"), 2);
	assert_int_equal(expect_good("KEEL_ALGO", "hier"), 3);
	assert_int_equal(expect_good("KEEL_VERBS_POLL", "event"), 1);
	expect_bad("KEEL_ALGO", "RING", "KEEL_ALGO='RING': expected auto, ring, rd or hier");
	expect_bad("KEEL_ALGO", "rin", "KEEL_ALGO='rin': expected auto, ring, rd or hier");
	expect_bad("KEEL_ALGO", "ringx", "KEEL_ALGO='ringx': expected auto, ring, rd or hier");
	expect_bad("KEEL_ALGO", "ring|rd", "KEEL_ALGO='ring|rd': expected auto, ring, rd or hier");
	expect_bad("KEEL_VERBS_POLL", "", "KEEL_VERBS_POLL='': expected busy or event");
	expect_bad("KEEL_TRANSPORT", "tcp",
		   "KEEL_TRANSPORT='tcp': expected auto, udp, shm, dpdk or verbs");
}

static void test_env_parse_text(void **state)
{
	(void)state;
	char name[300];
	assert_int_equal(expect_good("KEEL_HOST", "h0"), 2);
	memset(name, 'x', 255);
	name[255] = '\0';
	assert_int_equal(expect_good("KEEL_HOST", name), 255);
	expect_bad("KEEL_HOST", "", "KEEL_HOST='': expected a text of 1..255 bytes");
	name[255] = 'x';
	name[256] = '\0';
	/* a long value is quoted in part */
	expect_bad(
	    "KEEL_HOST", name,
	    "KEEL_HOST='xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...': "
	    "expected a text of 1..255 bytes");
	name[64] = '\0';
	expect_bad(
	    "KEEL_METRICS_JOB", name,
	    "KEEL_METRICS_JOB='xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'"
	    ": expected a text of 0..63 bytes");
	assert_int_equal(expect_good("KEEL_METRICS_JOB", ""), 0);
	/* a path */
	assert_int_equal(expect_good("KEEL_JOB_KEY_FILE", "/tmp/k"), 6);
	expect_bad("KEEL_JOB_KEY_FILE", "",
		   "KEEL_JOB_KEY_FILE='': expected a path of 1..4095 bytes");
}

/* err may be NULL: only the code says what happened. */
static void test_env_parse_no_err(void **state)
{
	(void)state;
	uint64_t x = 3;
	assert_int_equal(keel_env_parse(var("KEEL_PROBES"), "17", &x, NULL, 0), -EINVAL);
	assert_int_equal(keel_env_parse(var("KEEL_PROBES"), "16", &x, NULL, 0), 0);
	assert_int_equal(x, 16);
}

static void test_env_readers(void **state)
{
	(void)state;
	uint64_t n = 77;
	bool on = true;
	unsigned idx = 9;
	const char *text = "before";

	/* unset: 0, and the caller's value stands */
	assert_int_equal(keel_env_uint("KEEL_MISS_LIMIT", &n, err, sizeof(err)), 0);
	assert_int_equal(keel_env_bool("KEEL_UDP_GSO", &on, err, sizeof(err)), 0);
	assert_int_equal(keel_env_enum("KEEL_ALGO", &idx, err, sizeof(err)), 0);
	assert_int_equal(keel_env_text("KEEL_TRACE", &text, err, sizeof(err)), 0);
	assert_true(n == 77 && on && idx == 9 && strcmp(text, "before") == 0);
	assert_false(keel_env_is_set("KEEL_MISS_LIMIT"));
	/* empty: as unset */
	setenv("KEEL_MISS_LIMIT", "", 1);
	assert_int_equal(keel_env_uint("KEEL_MISS_LIMIT", &n, err, sizeof(err)), 0);
	assert_false(keel_env_is_set("KEEL_MISS_LIMIT"));
	assert_int_equal(n, 77);
	/* set: 1 and the value */
	setenv("KEEL_MISS_LIMIT", "5", 1);
	setenv("KEEL_UDP_GSO", "0", 1);
	setenv("KEEL_ALGO", "hier", 1);
	setenv("KEEL_TRACE", "/tmp/t.json", 1);
	assert_int_equal(keel_env_uint("KEEL_MISS_LIMIT", &n, err, sizeof(err)), 1);
	assert_int_equal(keel_env_bool("KEEL_UDP_GSO", &on, err, sizeof(err)), 1);
	assert_int_equal(keel_env_enum("KEEL_ALGO", &idx, err, sizeof(err)), 1);
	assert_int_equal(keel_env_text("KEEL_TRACE", &text, err, sizeof(err)), 1);
	assert_true(n == 5 && !on && idx == 3 && strcmp(text, "/tmp/t.json") == 0);
	assert_true(keel_env_is_set("KEEL_MISS_LIMIT"));
	/* bad: -EINVAL, the message, the value untouched */
	setenv("KEEL_MISS_LIMIT", "0", 1);
	assert_int_equal(keel_env_uint("KEEL_MISS_LIMIT", &n, err, sizeof(err)), -EINVAL);
	assert_int_equal(n, 5);
	assert_string_equal(err, "KEEL_MISS_LIMIT='0': expected a whole number in 1..1000000 "
				 "(heartbeat intervals)");
	/* a text whose shortest length is 1: empty is set, and bad */
	setenv("KEEL_HOST", "", 1);
	assert_true(keel_env_is_set("KEEL_HOST"));
	assert_int_equal(keel_env_text("KEEL_HOST", &text, err, sizeof(err)), -EINVAL);
	/* what a range cannot say, in the same words */
	setenv("KEEL_UDP_PIECES", "100", 1);
	assert_int_equal(keel_env_reject("KEEL_UDP_PIECES", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "KEEL_UDP_PIECES='100': expected 0 (off), 1 (on) or a piece "
				 "size in 576..65507 (bytes)");
}

static void test_env_check(void **state)
{
	(void)state;
	assert_int_equal(keel_env_check(err, sizeof(err)), 0);
	setenv("KEEL_WINDOW", "64", 1);
	setenv("KEEL_DPDK_STATS", "yes", 1); /* read only when DPDK stops: checked at start */
	assert_int_equal(keel_env_check(err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "KEEL_DPDK_STATS='yes': expected 0 (off) or 1 (on)");
	setenv("KEEL_DPDK_STATS", "1", 1);
	assert_int_equal(keel_env_check(err, sizeof(err)), 0);
}

/* The printed table names every variable; markdown as a table. */
static void test_env_print(void **state)
{
	(void)state;
	static char buf[1 << 17];
	const char *formats[] = {"text", "markdown"};
	for (size_t f = 0; f < 2; f++) {
		FILE *out = fmemopen(buf, sizeof(buf), "w");
		assert_non_null(out);
		assert_int_equal(keel_env_print(out, formats[f]), 0);
		assert_int_equal(fclose(out), 0);
		for (size_t i = 0; keel_env_at(i) != NULL; i++)
			assert_non_null(strstr(buf, keel_env_at(i)->name));
	}
	assert_non_null(strstr(buf, "| `KEEL_HEARTBEAT_US` | duration | 1..3600000000 "
				    "microseconds | 10000 (KEEL_HEARTBEAT_NS_DEFAULT / 1000) |"));
	assert_non_null(strstr(buf, "| `KEEL_ALGO` | enum | auto, ring, rd or hier | auto |"));
	assert_non_null(strstr(buf, "| 30000 (KEEL_RENDEZVOUS_TIMEOUT_MS_DEFAULT) |"));
	FILE *out = fmemopen(buf, sizeof(buf), "w");
	assert_non_null(out);
	assert_int_equal(keel_env_print(out, "html"), -EINVAL);
	assert_int_equal(ftell(out), 0); /* nothing printed */
	fclose(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_env_table_rows, env_clear),
	    cmocka_unit_test_setup(test_env_parse_bool, env_clear),
	    cmocka_unit_test_setup(test_env_parse_whole, env_clear),
	    cmocka_unit_test_setup(test_env_parse_duration, env_clear),
	    cmocka_unit_test_setup(test_env_parse_enum, env_clear),
	    cmocka_unit_test_setup(test_env_parse_text, env_clear),
	    cmocka_unit_test_setup(test_env_parse_no_err, env_clear),
	    cmocka_unit_test_setup(test_env_readers, env_clear),
	    cmocka_unit_test_setup(test_env_check, env_clear),
	    cmocka_unit_test_setup(test_env_print, env_clear),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
