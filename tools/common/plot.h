/* The tools' plots (keel-sim --plot, keel-train --plot): data files and a gnuplot script in a
 * temporary directory, drawn by gnuplot (Debian: gnuplot-nox) into an SVG or a PNG. Tool code:
 * it allocates, forks and runs a program; the runtime never links it. */
#ifndef KEEL_TOOLS_PLOT_H
#define KEEL_TOOLS_PLOT_H

#include <stddef.h>
#include <stdio.h>

#define PLOT_PATH_MAX 4096u

enum plot_kind {
	PLOT_SVG = 1, /* FILE.svg: gnuplot's svg terminal */
	PLOT_PNG,     /* FILE.png: pngcairo, or png (libgd) where gnuplot lacks cairo */
};

/* One plot being made. Zero-initialised means none (plot_discard is then a no-op). */
struct plot {
	char dir[PLOT_PATH_MAX]; /* the temporary directory; "" when there is none */
	char out[PLOT_PATH_MAX]; /* where the finished plot goes */
	enum plot_kind kind;
	FILE *script; /* plot.gp in dir, from plot_script */
};

/* The kind `path`'s extension asks for (.svg or .png, any case); -EINVAL and a message naming
 * the extension otherwise. */
int plot_kind_of(const char *path, enum plot_kind *kind, char *err, size_t err_len);

/* Everything that can be known before the work that feeds the plot: the extension, gnuplot on
 * PATH, and a directory for `path` that exists and can be written. 0, or -EINVAL (extension),
 * -ENOENT (no gnuplot: the message says to install gnuplot-nox) or -EACCES/-ENOENT (the
 * directory), with a message in err. */
int plot_check(const char *path, char *err, size_t err_len);

/* Start a plot for `path` (plot_check first): makes the temporary directory. 0, or a
 * negative errno with a message; on failure nothing is left behind. */
int plot_open(struct plot *p, const char *path, char *err, size_t err_len);

/* The script, opened once its size is known: its first lines choose the terminal for the
 * extension, width_px x height_px, and its output file; the caller appends the rest. NULL on
 * failure (errno set). */
FILE *plot_script(struct plot *p, unsigned width_px, unsigned height_px);

/* Create data file `name` (a plain name: letters, digits, '.', '_' and '-') in the directory
 * for writing; the script names it as 'name' (gnuplot runs in the directory). NULL on
 * failure (errno set). The caller closes it before plot_render. */
FILE *plot_data(struct plot *p, const char *name);

/* Write `s` to `f` as a gnuplot single-quoted string (a quote in it doubled). */
void plot_quote(FILE *f, const char *s);

/* Close the script, run gnuplot on it and, when gnuplot exits 0 having drawn a non-empty file,
 * move that file to the plot's path in one rename (a failed run leaves no partial file and an
 * older file there untouched). The directory is removed in every case. 0, or -ENOENT
 * (gnuplot not found), -EIO (gnuplot failed; its own messages went to stderr) or the errno of
 * a failed copy, with a message in err. */
int plot_render(struct plot *p, char *err, size_t err_len);

/* Remove the directory and what is in it without drawing (a run failed). Safe twice. */
void plot_discard(struct plot *p);

#endif
