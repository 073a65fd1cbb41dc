/* The tools' shared command line (cli.h). A mistake on the command line ends the tool with
 * exit 2 here; nothing in it is ever a wrapped number or a silently ignored option. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keel/boot.h"
#include "keel/version.h"
#include "keel_git.h" /* KEEL_GIT_HASH, written by the Makefile into $(BUILD)/gen */

_Static_assert(CLI_EXIT_EXCLUDED == KEEL_EXIT_EXCLUDED, "one code for a rank left out");

void cli_version(FILE *f, const char *tool)
{
	fprintf(f, "%s (keel) %s (git %s)\n", tool, KEEL_VERSION, KEEL_GIT_HASH);
}

void cli_exit_codes(FILE *f, const char *extra)
{
	fprintf(f,
		"\nExit status:\n"
		"  %-3d success\n"
		"  %-3d failure\n"
		"  %-3d usage error: an unknown option, a missing or bad value, a missing file\n"
		"%s",
		CLI_EXIT_OK, CLI_EXIT_FAILURE, CLI_EXIT_USAGE, extra != NULL ? extra : "");
}

void cli_usage_error(const char *tool, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", tool);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(CLI_EXIT_USAGE);
}

void cli_bad_uint(const char *tool, const char *opt, const char *value, uint64_t min, uint64_t max)
{
	cli_usage_error(tool, "%s: '%s' is not a whole number in %llu..%llu", opt, value,
			(unsigned long long)min, (unsigned long long)max);
}

void cli_bad_real(const char *tool, const char *opt, const char *value, double min, double max)
{
	cli_usage_error(tool, "%s: '%s' is not a number in %.12g..%.12g", opt, value, min, max);
}

int cli_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');

	/* strtoull takes "-1" as 2^64-1 and skips blanks: only digits may come in */
	if (!(s[0] >= '0' && s[0] <= '9') ||
	    (hex && !((s[2] >= '0' && s[2] <= '9') || (s[2] >= 'a' && s[2] <= 'f') ||
		      (s[2] >= 'A' && s[2] <= 'F'))))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, hex ? 16 : 10);
	if (*end != '\0')
		return -EINVAL;
	if (errno == ERANGE || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int cli_parse_real(const char *s, double min, double max, double *out)
{
	char *end;

	if (s[0] == '\0' || s[0] == ' ' || s[0] == '\t')
		return -EINVAL;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end != '\0' || isnan(v))
		return -EINVAL;
	if (errno == ERANGE || !isfinite(v) || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

void cli_check_file(const char *tool, const char *opt, const char *path)
{
	if (access(path, R_OK) != 0)
		cli_usage_error(tool, "%s: %s: %s", opt, path, strerror(errno));
}

/* argv[i] against the table: the option, with *value pointing past '=' or at a short option's
 * glued value ("-n4"), NULL when none came with it. */
static const struct cli_opt *find(const struct cli *c, const char *a, const char **value)
{
	*value = NULL;
	for (uint32_t k = 0; k < c->opt_count; k++) {
		const struct cli_opt *o = &c->opts[k];
		size_t n = strlen(o->name);
		if (a[1] == '-' && strncmp(a + 2, o->name, n) == 0 &&
		    (a[2 + n] == '\0' || a[2 + n] == '=')) {
			*value = a[2 + n] == '=' ? a + 3 + n : NULL;
			return o;
		}
		if (a[1] != '-' && o->short_name != 0 && a[1] == o->short_name) {
			*value = a[2] != '\0' ? a + 2 : NULL;
			return o;
		}
	}
	return NULL;
}

/* The option as the user wrote it, without a value: for messages. */
static void name_as_written(struct cli *c, const char *a)
{
	size_t n = a[1] == '-' ? strcspn(a, "=") : 2;
	if (n >= sizeof(c->opt_text))
		n = sizeof(c->opt_text) - 1;
	memcpy(c->opt_text, a, n);
	c->opt_text[n] = '\0';
}

static void check_value(struct cli *c, const struct cli_opt *o)
{
	int rc = 0;

	if (o->kind == CLI_UINT) {
		rc = cli_parse_uint(c->value, o->min_u, o->max_u, &c->u);
		if (rc != 0)
			cli_bad_uint(c->tool, c->opt_text, c->value, o->min_u, o->max_u);
	} else if (o->kind == CLI_REAL) {
		rc = cli_parse_real(c->value, o->min_r, o->max_r, &c->r);
		if (rc != 0)
			cli_bad_real(c->tool, c->opt_text, c->value, o->min_r, o->max_r);
	} else if (o->kind == CLI_FILE) {
		cli_check_file(c->tool, c->opt_text, c->value);
	}
}

int cli_next(struct cli *c)
{
	if (c->next < 1)
		c->next = 1;
	if (c->next >= c->argc)
		return -1;
	const char *a = c->argv[c->next];
	if (strcmp(a, "--") == 0) {
		c->next++;
		return -1;
	}
	if (a[0] != '-' || a[1] == '\0')
		return -1; /* an operand (a lone "-" too) */
	if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
		c->usage(stdout);
		exit(CLI_EXIT_OK);
	}
	if (strcmp(a, "--version") == 0) {
		cli_version(stdout, c->tool);
		exit(CLI_EXIT_OK);
	}
	name_as_written(c, a);
	const struct cli_opt *o = find(c, a, &c->value);
	if (o == NULL)
		cli_usage_error(c->tool, "unknown option '%s' (see '%s --help')", c->opt_text,
				c->tool);
	c->next++;
	if (o->kind == CLI_FLAG && c->value != NULL)
		cli_usage_error(c->tool, "%s takes no value", c->opt_text);
	if (o->kind != CLI_FLAG && o->kind != CLI_OPT_TEXT && c->value == NULL) {
		if (c->next >= c->argc)
			cli_usage_error(c->tool, "%s needs a value", c->opt_text);
		c->value = c->argv[c->next++];
	}
	if (o->kind != CLI_FLAG)
		check_value(c, o);
	return (int)(o - c->opts);
}
