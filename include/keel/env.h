/* The KEEL_* environment variables (libkeel_boot.a): every one keel's programs read, defined
 * once in the start-up library's table (runtime/boot/env_table.def) with its type, range,
 * default, unit and meaning, and read only through these functions, which parse it one way and
 * word a bad value one way: KEEL_HEARTBEAT_US='abc': expected a whole number in 1..3600000000
 * (microseconds). `keel-run --help-env` prints the table; docs/reference/env.md is made from it.
 *
 * An unset variable, or one set to the empty string, takes its default; the empty string is a
 * bad value only for a text whose shortest length is 1. A bad value is an error, never
 * silently the default: the start-up (keel_boot_start, keel-sim) fails with the message. */
#ifndef KEEL_ENV_H
#define KEEL_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "keel/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

enum keel_env_type {
	KEEL_ENV_BOOL,	   /* 0 (off) or 1 (on) */
	KEEL_ENV_WHOLE,	   /* a whole number in lo..hi (decimal digits only), of `unit` */
	KEEL_ENV_DURATION, /* a whole number of `unit` (microseconds, milliseconds) in lo..hi */
	KEEL_ENV_ENUM,	   /* one of the names in `values` ("auto|ring|rd|hier") */
	KEEL_ENV_STRING,   /* text of lo..hi bytes */
	KEEL_ENV_PATH,	   /* a file name of lo..hi bytes */
};

/* One row of the table. */
struct keel_env_var {
	const char *name;
	enum keel_env_type type;
	uint64_t lo, hi;       /* numbers: the range; text: its length in bytes */
	uint64_t dflt;	       /* numbers and switches: the value; names: its index */
	const char *dflt_expr; /* dflt as written in the table (a named constant) */
	/* NULL; a note after the default when it starts with ',' or ':' ("doubled until a
	 * ring holds the window"); else the default in words, where no number says it */
	const char *dflt_text;
	const char *unit;     /* "microseconds", "bytes", ...; "" for none */
	const char *values;   /* names: "a|b|c"; numbers: the values allowed, when lo..hi
			       * is not all of them (the reader checks the rest); else NULL */
	const char *programs; /* who reads it: "boot" (keel_boot_start), "keel-sim", ... */
	const char *meaning;
};

/* The row of `name`, or NULL when keel reads no such variable. */
const struct keel_env_var *keel_env_find(const char *name);

/* Row `i` of the table, in its order; NULL from the row count on. */
const struct keel_env_var *keel_env_at(size_t i);

/* Parse `text` as variable `v` says: a number into *value (a name: its index into v->values).
 * Returns 0, or -EINVAL with "NAME='text': expected ..." in err (err may be NULL). */
KEEL_MUST_USE int keel_env_parse(const struct keel_env_var *v, const char *text, uint64_t *value,
				 char *err, size_t err_len);

/* The readers. `name` must be in the table, of the type each says (an assertion otherwise).
 * Each returns 1 with the value in *out when the variable is set, 0 with *out untouched when
 * it is unset or empty (the caller's value stands: the table's default, or what the caller
 * derived), or -EINVAL with the message in err when its value is bad. */
KEEL_MUST_USE int keel_env_uint(const char *name, uint64_t *out, char *err, size_t err_len);
KEEL_MUST_USE int keel_env_bool(const char *name, bool *out, char *err, size_t err_len);
KEEL_MUST_USE int keel_env_enum(const char *name, unsigned *index, char *err, size_t err_len);
/* *out points into the environment: valid until the variable is changed. */
KEEL_MUST_USE int keel_env_text(const char *name, const char **out, char *err, size_t err_len);

/* Whether `name` (in the table) is set to something other than its default's empty value. */
bool keel_env_is_set(const char *name);

/* Reject the value `name` is set to, in the table's wording: for what a range cannot say
 * (KEEL_UDP_PIECES' hole). Returns -EINVAL. */
int keel_env_reject(const char *name, char *err, size_t err_len);

/* Check every variable of the table that is set: 0, or the first bad one's -EINVAL and
 * message. keel_boot_start and keel-sim run it first, so that a variable read late (when a
 * transport stops) or only on some path fails at the start all the same. */
KEEL_MUST_USE int keel_env_check(char *err, size_t err_len);

/* Print the table to `out`: format "text" (keel-run --help-env) or "markdown"
 * (docs/reference/env.md). Returns 0, or -EINVAL for another format (nothing printed). */
KEEL_MUST_USE int keel_env_print(FILE *out, const char *format);

#ifdef __cplusplus
}
#endif

#endif
