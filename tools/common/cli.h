/* The command line of every keel tool: one option table per tool, one parser, one wording for
 * every mistake and one set of exit codes. Tool-side only; the library never reads argv. */
#ifndef KEEL_TOOLS_CLI_H
#define KEEL_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes of every tool (their --help and man pages list them). */
#define CLI_EXIT_OK	  0
#define CLI_EXIT_FAILURE  1
#define CLI_EXIT_USAGE	  2
#define CLI_EXIT_EXCLUDED 75 /* keel/boot.h: KEEL_EXIT_EXCLUDED (EX_TEMPFAIL) */

enum cli_kind {
	CLI_FLAG,     /* no value */
	CLI_TEXT,     /* any text; the tool checks it */
	CLI_OPT_TEXT, /* text given only as --name=VALUE, optional: value NULL when absent */
	CLI_FILE,     /* a file to read: refused at once when it cannot be read */
	CLI_UINT,     /* a whole number in min_u..max_u (decimal, or 0x hex) */
	CLI_REAL,     /* a finite number in min_r..max_r */
};

/* One option: --name (and -s when short_name is not 0). */
struct cli_opt {
	const char *name; /* without the leading "--" */
	char short_name;
	enum cli_kind kind;
	uint64_t min_u, max_u; /* CLI_UINT */
	double min_r, max_r;   /* CLI_REAL */
};

/* The parser's state; set tool, opts, opt_count, usage, argc and argv, then call cli_next. */
struct cli {
	const char *tool; /* "keel-train": the first word of every message */
	const struct cli_opt *opts;
	uint32_t opt_count;
	void (*usage)(FILE *f); /* --help / -h print it to stdout */
	int argc;
	char **argv;
	int next; /* argv index cli_next looks at; 0 means 1 (argv[0] is the program) */
	/* The option just returned: as written ("--epochs", "-n"), its value and number. */
	char opt_text[64];
	const char *value;
	uint64_t u;
	double r;
};

/* The next option: its index in opts, or -1 when the options end (at "--", which is skipped,
 * at the first argument that is not an option, or at the end; c->next is then the index of
 * the first operand, argc when none). --help/-h print the usage and exit 0; --version prints
 * the version and exits 0. Every mistake (unknown option, missing value, a number out of its
 * range or not a number, a file that cannot be read) is said on stderr and exits 2. */
int cli_next(struct cli *c);

/* "TOOL (keel) 0.2.0 (git abc1234)". */
void cli_version(FILE *f, const char *tool);

/* The common end of every --help: the exit codes 0, 1 and 2, then `extra` (may be NULL):
 * whole lines, "  75  ...\n", for what this tool adds. */
void cli_exit_codes(FILE *f, const char *extra);

/* "TOOL: <message>" on stderr, then exit 2. */
__attribute__((format(printf, 2, 3))) _Noreturn void cli_usage_error(const char *tool,
								     const char *fmt, ...);

/* "TOOL: OPT: 'VALUE' is not a whole number in MIN..MAX", exit 2: for options a tool parses
 * itself (RANK@SECONDS, sizes with suffixes). */
_Noreturn void cli_bad_uint(const char *tool, const char *opt, const char *value, uint64_t min,
			    uint64_t max);
_Noreturn void cli_bad_real(const char *tool, const char *opt, const char *value, double min,
			    double max);

/* Parse whole numbers and reals alone: 0, or -EINVAL (not a number) / -ERANGE (outside). */
int cli_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int cli_parse_real(const char *s, double min, double max, double *out);

/* A file to read, before anything else: exits 2 with "TOOL: OPT: PATH: <strerror>". */
void cli_check_file(const char *tool, const char *opt, const char *path);

#endif
