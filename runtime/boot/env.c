/* The KEEL_* environment variables: env_table.def's rows, one parser, one wording for a bad
 * value, and the table printed for people. The only place keel reads a KEEL_ variable
 * (tests/integ/env_table.sh); it never writes the environment and allocates nothing. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "assert_int.h"
#include "boot_int.h"
#include "keel/boot.h"
#include "keel/env.h"
#include "keel/launch.h"
#include "keel/limits.h"
#include "keel/node.h"
#include "keel/posix.h"
#include "keel/transport_dpdk.h"
#include "keel/transport_shm.h"
#include "keel/transport_udp.h"
#include "keel/transport_verbs.h"

static const struct keel_env_var table[] = {
#define KEEL_ENV(name, type, lo, hi, dflt, dflt_text, unit, values, programs, meaning)             \
	{#name, KEEL_ENV_##type, (lo),	   (hi),   (dflt), #dflt, dflt_text,                       \
	 unit,	values,		 programs, meaning},
#include "env_table.def"
#undef KEEL_ENV
};
#define TABLE_COUNT (sizeof(table) / sizeof(table[0]))

/* A name's index is its enum's value: the readers' callers cast it. */
_Static_assert(KEEL_ALGO_AUTO == 0 && KEEL_ALGO_RING == 1 && KEEL_ALGO_RD == 2 &&
		   KEEL_ALGO_HIER == 3,
	       "KEEL_ALGO's names in enum keel_algo's order");
_Static_assert(KEEL_COMPRESS_AUTO == 0 && KEEL_COMPRESS_OFF == 1 && KEEL_COMPRESS_BF16 == 2 &&
		   KEEL_COMPRESS_F16 == 3,
	       "KEEL_COMPRESS's names in enum keel_compress's order");
_Static_assert(KEEL_MAC_AUTO == 0 && KEEL_MAC_AES256GCM == 1 && KEEL_MAC_CHACHA20POLY1305 == 2,
	       "KEEL_MAC's names in enum keel_mac's order");
_Static_assert(KEEL_WAIT_BUSY == 0 && KEEL_WAIT_ADAPTIVE == 1 && KEEL_WAIT_BLOCK == 2,
	       "KEEL_WAIT's names in enum keel_wait_mode's order");
_Static_assert(KEEL_DPDK_RX_BUSY == 0 && KEEL_DPDK_RX_SLEEP == 1 && KEEL_DPDK_RX_INTERRUPT == 2,
	       "KEEL_DPDK_RX's names in enum keel_dpdk_rx_mode's order");
_Static_assert(KEEL_VERBS_POLL_BUSY == 0 && KEEL_VERBS_POLL_EVENT == 1,
	       "KEEL_VERBS_POLL's names in enum keel_verbs_poll_mode's order");
/* KEEL_UDP_PIECES' values text says these numbers */
_Static_assert(KEEL_UDP_PIECES_MIN == 576 && KEEL_MTU_MAX == 65507, "KEEL_UDP_PIECES' text");

/* Longest piece of a value quoted back in a message. */
#define QUOTE_MAX 64

const struct keel_env_var *keel_env_find(const char *name)
{
	for (size_t i = 0; i < TABLE_COUNT; i++)
		if (strcmp(table[i].name, name) == 0)
			return &table[i];
	return NULL;
}

const struct keel_env_var *keel_env_at(size_t i)
{
	return i < TABLE_COUNT ? &table[i] : NULL;
}

/* The row of `name`, read as one of two types: anything else is the caller's mistake. */
static const struct keel_env_var *row(const char *name, enum keel_env_type a, enum keel_env_type b)
{
	const struct keel_env_var *v = keel_env_find(name);
	KEEL_ASSERT(v != NULL); /* a KEEL_ variable read without a row in env_table.def */
	KEEL_ASSERT(v->type == a || v->type == b);
	return v;
}

/* The value, or NULL where it counts as unset: unset, or empty unless the empty text is
 * itself out of range. */
static const char *given(const struct keel_env_var *v)
{
	const char *s = getenv(v->name);
	bool text = v->type == KEEL_ENV_STRING || v->type == KEEL_ENV_PATH;
	if (s == NULL || (*s == '\0' && !(text && v->lo > 0)))
		return NULL;
	return s;
}

/* What a good value of `v` is, for the message: "a whole number in 1..100 (percent)". */
static void describe(const struct keel_env_var *v, char *out, size_t cap)
{
	size_t n = 0;
	switch (v->type) {
	case KEEL_ENV_BOOL:
		snprintf(out, cap, "0 (off) or 1 (on)");
		return;
	case KEEL_ENV_WHOLE:
	case KEEL_ENV_DURATION:
		if (v->values != NULL)
			n = (size_t)snprintf(out, cap, "%s", v->values);
		else
			n = (size_t)snprintf(out, cap, "a whole number in %" PRIu64 "..%" PRIu64,
					     v->lo, v->hi);
		if (v->unit[0] != '\0' && n < cap)
			snprintf(out + n, cap - n, " (%s)", v->unit);
		return;
	case KEEL_ENV_ENUM: {
		const char *p = v->values;
		out[0] = '\0';
		while (*p != '\0' && n < cap) {
			size_t len = strcspn(p, "|");
			bool last = p[len] == '\0';
			n += (size_t)snprintf(out + n, cap - n, "%s%.*s",
					      n == 0 ? ""
					      : last ? " or "
						     : ", ",
					      (int)len, p);
			p += last ? len : len + 1;
		}
		return;
	}
	case KEEL_ENV_STRING:
	case KEEL_ENV_PATH:
		snprintf(out, cap, "%s of %" PRIu64 "..%" PRIu64 " bytes",
			 v->type == KEEL_ENV_PATH ? "a path" : "a text", v->lo, v->hi);
		return;
	}
	KEEL_ASSERT(false);
}

/* The one wording of a bad value. */
static int expected(const struct keel_env_var *v, const char *text, char *err, size_t err_len)
{
	char what[256];
	describe(v, what, sizeof(what));
	return keel_fail(err, err_len, -EINVAL, "%s='%.*s%s': expected %s", v->name, QUOTE_MAX,
			 text, strlen(text) > QUOTE_MAX ? "..." : "", what);
}

bool keel_parse_decimal(const char *s, size_t len, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > max)
		return false;
	*out = v;
	return true;
}

/* The index of `text` among "a|b|c", or -1. */
static int name_index(const char *values, const char *text)
{
	size_t want = strlen(text);
	for (int i = 0; *values != '\0'; i++) {
		size_t len = strcspn(values, "|");
		if (len == want && strncmp(values, text, len) == 0)
			return i;
		values += values[len] == '\0' ? len : len + 1;
	}
	return -1;
}

int keel_env_parse(const struct keel_env_var *v, const char *text, uint64_t *value, char *err,
		   size_t err_len)
{
	KEEL_ASSERT(v != NULL && text != NULL && value != NULL);
	uint64_t x = 0;
	switch (v->type) {
	case KEEL_ENV_BOOL:
		if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0)
			return expected(v, text, err, err_len);
		x = text[0] == '1';
		break;
	case KEEL_ENV_WHOLE:
	case KEEL_ENV_DURATION:
		if (!keel_parse_decimal(text, strlen(text), v->hi, &x) || x < v->lo)
			return expected(v, text, err, err_len);
		break;
	case KEEL_ENV_ENUM: {
		int i = name_index(v->values, text);
		if (i < 0)
			return expected(v, text, err, err_len);
		x = (uint64_t)i;
		break;
	}
	case KEEL_ENV_STRING:
	case KEEL_ENV_PATH:
		x = strlen(text);
		if (x < v->lo || x > v->hi)
			return expected(v, text, err, err_len);
		break;
	}
	*value = x;
	return 0;
}

/* Read `v`: 1 and *value when set, 0 when not, -EINVAL when bad. */
static int read_row(const struct keel_env_var *v, uint64_t *value, char *err, size_t err_len)
{
	const char *s = given(v);
	if (s == NULL)
		return 0;
	int rc = keel_env_parse(v, s, value, err, err_len);
	return rc != 0 ? rc : 1;
}

int keel_env_uint(const char *name, uint64_t *out, char *err, size_t err_len)
{
	return read_row(row(name, KEEL_ENV_WHOLE, KEEL_ENV_DURATION), out, err, err_len);
}

int keel_env_bool(const char *name, bool *out, char *err, size_t err_len)
{
	uint64_t x = 0;
	int rc = read_row(row(name, KEEL_ENV_BOOL, KEEL_ENV_BOOL), &x, err, err_len);
	if (rc == 1)
		*out = x == 1;
	return rc;
}

int keel_env_enum(const char *name, unsigned *index, char *err, size_t err_len)
{
	uint64_t x = 0;
	int rc = read_row(row(name, KEEL_ENV_ENUM, KEEL_ENV_ENUM), &x, err, err_len);
	if (rc == 1)
		*index = (unsigned)x;
	return rc;
}

int keel_env_text(const char *name, const char **out, char *err, size_t err_len)
{
	const struct keel_env_var *v = row(name, KEEL_ENV_STRING, KEEL_ENV_PATH);
	uint64_t len;
	int rc = read_row(v, &len, err, err_len);
	if (rc == 1)
		*out = given(v);
	return rc;
}

bool keel_env_is_set(const char *name)
{
	const struct keel_env_var *v = keel_env_find(name);
	KEEL_ASSERT(v != NULL);
	return given(v) != NULL;
}

int keel_env_reject(const char *name, char *err, size_t err_len)
{
	const struct keel_env_var *v = keel_env_find(name);
	KEEL_ASSERT(v != NULL);
	const char *s = getenv(v->name);
	return expected(v, s != NULL ? s : "", err, err_len);
}

int keel_env_check(char *err, size_t err_len)
{
	for (size_t i = 0; i < TABLE_COUNT; i++) {
		uint64_t x;
		int rc = read_row(&table[i], &x, err, err_len);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ---- the table for people: keel-run --help-env, docs/reference/env.md ---- */

static const char *type_name(enum keel_env_type t)
{
	static const char *const names[] = {"bool", "whole number", "duration",
					    "enum", "string",	    "path"};
	KEEL_ASSERT((size_t)t < sizeof(names) / sizeof(names[0]));
	return names[t];
}

/* "1..3600000000 microseconds", "auto, ring, rd or hier", "1..255 bytes" */
static void values_cell(const struct keel_env_var *v, char *out, size_t cap)
{
	if (v->type == KEEL_ENV_BOOL || v->type == KEEL_ENV_ENUM) {
		describe(v, out, cap);
		return;
	}
	int n = v->values != NULL ? snprintf(out, cap, "%s", v->values)
				  : snprintf(out, cap, "%" PRIu64 "..%" PRIu64, v->lo, v->hi);
	const char *unit =
	    v->type == KEEL_ENV_STRING || v->type == KEEL_ENV_PATH ? "bytes" : v->unit;
	if (unit[0] != '\0' && n > 0 && (size_t)n < cap)
		snprintf(out + n, cap - n, " %s", unit);
}

/* The default: its value and the constant it comes from, then the table's note; or the
 * table's words where no number says it. */
static void default_cell(const struct keel_env_var *v, char *out, size_t cap)
{
	bool text = v->type == KEEL_ENV_STRING || v->type == KEEL_ENV_PATH;
	bool note = v->dflt_text != NULL && strchr(",:", v->dflt_text[0]) != NULL;
	int n;
	if (v->dflt_text != NULL && !note) {
		n = snprintf(out, cap, "%s", v->dflt_text);
	} else if (text) {
		n = snprintf(out, cap, "unset");
	} else if (v->type == KEEL_ENV_ENUM) {
		const char *p = v->values;
		for (uint64_t i = 0; i < v->dflt && *p != '\0'; i++)
			p += strcspn(p, "|") + (p[strcspn(p, "|")] != '\0');
		n = snprintf(out, cap, "%.*s", (int)strcspn(p, "|"), p);
	} else {
		bool literal = strspn(v->dflt_expr, "0123456789") == strlen(v->dflt_expr);
		n = snprintf(out, cap, literal ? "%" PRIu64 : "%" PRIu64 " (%s)", v->dflt,
			     v->dflt_expr);
	}
	if (note && n > 0 && (size_t)n < cap)
		snprintf(out + n, cap - (size_t)n, "%s", v->dflt_text);
}

/* `text` from column `indent`, broken at spaces before `width` columns. */
static void print_wrapped(FILE *out, int indent, int width, const char *text)
{
	while (*text != '\0') {
		int room = width - indent, len = (int)strlen(text);
		if (len > room) {
			len = room;
			while (len > 0 && text[len] != ' ')
				len--;
			if (len == 0) /* one word longer than the line */
				len = (int)strcspn(text, " ");
		}
		fprintf(out, "%*s%.*s\n", indent, "", len, text);
		text += len;
		while (*text == ' ')
			text++;
	}
}

static void print_text(FILE *out)
{
	fprintf(out, "keel's environment variables. Unset or empty: the default; a bad value stops "
		     "the start.\n\"boot\": every program started by keel_boot_start (keel-bench, "
		     "keel-train, a training binary).\n");
	for (size_t i = 0; i < TABLE_COUNT; i++) {
		const struct keel_env_var *v = &table[i];
		char values[256], dflt[256], line[700];
		values_cell(v, values, sizeof(values));
		default_cell(v, dflt, sizeof(dflt));
		snprintf(line, sizeof(line), "%s: %s; default %s; read by %s.", type_name(v->type),
			 values, dflt, v->programs);
		fprintf(out, "\n%s\n", v->name);
		print_wrapped(out, 4, 80, line);
		print_wrapped(out, 4, 80, v->meaning);
	}
}

/* A table cell: '|' would end it. */
static void print_cell(FILE *out, const char *s)
{
	fputs("| ", out);
	for (; *s != '\0'; s++)
		fputs(*s == '|' ? "\\|" : (char[]){*s, '\0'}, out);
	fputc(' ', out);
}

static void print_markdown(FILE *out)
{
	fprintf(
	    out,
	    "# Environment variables\n\n"
	    "<!-- Generated from runtime/boot/env_table.def by `keel-run --help-env=markdown`"
	    " (`make env-doc`): edit the table, not this file. -->\n\n"
	    "Every `KEEL_*` variable keel's programs read. An unset variable, or one set to the "
	    "empty string, takes its default (the empty string is itself a bad value for a text "
	    "whose shortest length is 1). A bad value stops the start with one message and a "
	    "failure exit, never falls back to the default: for example\n"
	    "`KEEL_HEARTBEAT_US='abc': expected a whole number in 1..3600000000 "
	    "(microseconds)`.\n\n"
	    "*Read by* \"boot\" means every program that starts a rank with `keel_boot_start` "
	    "(keel-bench, keel-train, a training binary linking `libkeel_boot.a`): it checks "
	    "every variable of this table when it starts, so a bad value stops it even where this "
	    "run would not use the variable. \"boot, dpdk\" and \"boot, verbs\" are used under "
	    "that transport, in "
	    "programs linked with its backend. `keel-run --help-env` prints the same table.\n\n"
	    "| Variable | Type | Values | Default | Read by | Meaning |\n"
	    "| --- | --- | --- | --- | --- | --- |\n");
	for (size_t i = 0; i < TABLE_COUNT; i++) {
		const struct keel_env_var *v = &table[i];
		char name[80], values[256], dflt[256];
		snprintf(name, sizeof(name), "`%s`", v->name);
		values_cell(v, values, sizeof(values));
		default_cell(v, dflt, sizeof(dflt));
		print_cell(out, name);
		print_cell(out, type_name(v->type));
		print_cell(out, values);
		print_cell(out, dflt);
		print_cell(out, v->programs);
		print_cell(out, v->meaning);
		fputs("|\n", out);
	}
}

int keel_env_print(FILE *out, const char *format)
{
	if (strcmp(format, "text") == 0)
		print_text(out);
	else if (strcmp(format, "markdown") == 0)
		print_markdown(out);
	else
		return -EINVAL;
	return 0;
}
