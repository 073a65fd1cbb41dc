/* The tools' plots: a temporary directory holding the data and the script, gnuplot run on it,
 * the drawing moved into place only when gnuplot succeeded. Must never leave a partial plot
 * file, nor write anything to the caller's stdout (keel-sim prints CSV and JSON there). */
#include "plot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define SCRIPT_NAME    "plot.gp"
#define GNUPLOT	       "gnuplot"
#define INSTALL_HINT   "install gnuplot-nox (apt-get install gnuplot-nox)"
#define EXEC_FAILED_RC 127 /* the child could not exec gnuplot (the shell's convention) */

static const char *ext_of(enum plot_kind kind)
{
	return kind == PLOT_PNG ? "png" : "svg";
}

int plot_kind_of(const char *path, enum plot_kind *kind, char *err, size_t err_len)
{
	const char *slash = strrchr(path, '/');
	const char *dot = strrchr(slash != NULL ? slash + 1 : path, '.');

	if (dot != NULL && strcasecmp(dot, ".svg") == 0) {
		*kind = PLOT_SVG;
		return 0;
	}
	if (dot != NULL && strcasecmp(dot, ".png") == 0) {
		*kind = PLOT_PNG;
		return 0;
	}
	if (dot == NULL || dot[1] == '\0')
		snprintf(err, err_len,
			 "plot file '%s' has no extension: name it FILE.svg or FILE.png", path);
	else
		snprintf(err, err_len,
			 "plot file '%s': unknown extension '%s' (plots are FILE.svg or FILE.png)",
			 path, dot);
	return -EINVAL;
}

/* gnuplot in one of PATH's folders (execvp's own default when PATH is unset). */
static bool gnuplot_on_path(void)
{
	const char *path = getenv("PATH");
	char cand[PLOT_PATH_MAX];

	if (path == NULL)
		path = "/bin:/usr/bin";
	while (path != NULL) {
		const char *colon = strchr(path, ':');
		size_t len = colon != NULL ? (size_t)(colon - path) : strlen(path);
		struct stat st;
		int n = len == 0 ? snprintf(cand, sizeof(cand), "./%s", GNUPLOT)
				 : snprintf(cand, sizeof(cand), "%.*s/%s", (int)len, path, GNUPLOT);
		if (n > 0 && (size_t)n < sizeof(cand) && stat(cand, &st) == 0 &&
		    S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
			return true;
		path = colon != NULL ? colon + 1 : NULL;
	}
	return false;
}

/* The folder `path` will be written in: it must exist and take new files. */
static int dir_check(const char *path, char *err, size_t err_len)
{
	char dir[PLOT_PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct stat st;

	if (strlen(path) >= sizeof(dir) - 16) { /* room for the ".XXXXXX" of the copy */
		snprintf(err, err_len, "plot file name too long (%zu characters)", strlen(path));
		return -ENAMETOOLONG;
	}
	if (slash == NULL)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, err_len, "plot file '%s': folder '%s' does not exist", path, dir);
		return -ENOENT;
	}
	if (access(dir, W_OK | X_OK) != 0) {
		snprintf(err, err_len, "plot file '%s': cannot write in folder '%s'", path, dir);
		return -EACCES;
	}
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(err, err_len, "plot file '%s' is a folder", path);
		return -EISDIR;
	}
	return 0;
}

int plot_check(const char *path, char *err, size_t err_len)
{
	enum plot_kind kind;
	int rc = plot_kind_of(path, &kind, err, err_len);

	if (rc != 0)
		return rc;
	if (!gnuplot_on_path()) {
		snprintf(err, err_len, "--plot needs gnuplot, which is not on PATH: %s",
			 INSTALL_HINT);
		return -ENOENT;
	}
	return dir_check(path, err, err_len);
}

/* The terminal for the extension. pngcairo draws smoother lines than libgd's png; a gnuplot
 * built without cairo has only the latter, and the script picks what this one has. */
static void terminal_write(FILE *f, enum plot_kind kind, unsigned w, unsigned h)
{
	fprintf(f, "set encoding utf8\n");
	if (kind == PLOT_SVG) {
		fprintf(f,
			"set terminal svg size %u,%u noenhanced font 'sans,12' "
			"background rgb 'white'\n",
			w, h);
	} else {
		fprintf(f,
			"if (strstrt(GPVAL_TERMINALS, ' pngcairo ') > 0) {\n"
			"  set terminal pngcairo size %u,%u noenhanced font 'sans,10' "
			"background rgb 'white'\n"
			"} else {\n"
			"  set terminal png size %u,%u noenhanced background rgb 'white'\n"
			"}\n",
			w, h, w, h);
	}
	fprintf(f, "set output 'plot.%s'\n", ext_of(kind));
}

int plot_open(struct plot *p, const char *path, char *err, size_t err_len)
{
	const char *tmp = getenv("TMPDIR");
	int rc;

	memset(p, 0, sizeof(*p));
	rc = plot_check(path, err, err_len);
	if (rc != 0)
		return rc;
	(void)plot_kind_of(path, &p->kind, err, err_len);
	snprintf(p->out, sizeof(p->out), "%s", path);
	if (tmp == NULL || tmp[0] == '\0' || strlen(tmp) > PLOT_PATH_MAX / 2)
		tmp = "/tmp";
	snprintf(p->dir, sizeof(p->dir), "%s/keel-plot-XXXXXX", tmp);
	if (mkdtemp(p->dir) == NULL) {
		rc = -errno;
		snprintf(err, err_len, "cannot make a temporary folder in %s: %s", tmp,
			 strerror(-rc));
		p->dir[0] = '\0';
		return rc;
	}
	return 0;
}

FILE *plot_script(struct plot *p, unsigned width_px, unsigned height_px)
{
	char path[PLOT_PATH_MAX + 16];

	if (p->dir[0] == '\0' || p->script != NULL) {
		errno = EINVAL;
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/%s", p->dir, SCRIPT_NAME);
	p->script = fopen(path, "w");
	if (p->script != NULL)
		terminal_write(p->script, p->kind, width_px, height_px);
	return p->script;
}

FILE *plot_data(struct plot *p, const char *name)
{
	char path[PLOT_PATH_MAX + 64];
	size_t len = strlen(name);

	if (p->dir[0] == '\0' || len == 0 || len > 48 ||
	    strspn(name, "abcdefghijklmnopqrstuvwxyz"
			 "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
			 "0123456789._-") != len ||
	    name[0] == '.' || strcmp(name, SCRIPT_NAME) == 0) {
		errno = EINVAL;
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/%s", p->dir, name);
	return fopen(path, "w");
}

void plot_quote(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s != '\0'; s++) {
		if (*s == '\'')
			fputc('\'', f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

/* gnuplot on the script, in the directory, its stdout sent to stderr. Returns its wait status,
 * or -errno when it could not be started. */
static int gnuplot_run(const struct plot *p)
{
	int status = 0;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);
		if (chdir(p->dir) != 0 || devnull < 0 || dup2(devnull, 0) < 0 || dup2(2, 1) < 0)
			_exit(EXEC_FAILED_RC);
		execlp(GNUPLOT, GNUPLOT, SCRIPT_NAME, (char *)NULL);
		_exit(EXEC_FAILED_RC);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return status;
}

/* Copy `from` to a new file beside `to`, then rename it over `to`: whoever reads `to` sees
 * the old file or the whole new one. */
static int move_into_place(const char *from, const char *to, char *err, size_t err_len)
{
	char tmp[PLOT_PATH_MAX + 16], buf[1 << 16];
	int in = open(from, O_RDONLY), out = -1, rc = 0;
	mode_t mask = umask(0);

	umask(mask);
	snprintf(tmp, sizeof(tmp), "%s.XXXXXX", to);
	if (in < 0 || (out = mkstemp(tmp)) < 0 || fchmod(out, 0666 & ~mask) != 0)
		rc = -errno;
	for (ssize_t n = 1; rc == 0 && n > 0;) {
		errno = 0;
		n = read(in, buf, sizeof(buf));
		if (n < 0 || (n > 0 && write(out, buf, (size_t)n) != n))
			rc = errno != 0 ? -errno : -EIO;
	}
	if (out >= 0 && close(out) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, to) != 0)
		rc = -errno;
	if (rc != 0) {
		snprintf(err, err_len, "cannot write plot file '%s': %s", to, strerror(-rc));
		if (out >= 0)
			unlink(tmp);
	}
	if (in >= 0)
		close(in);
	return rc;
}

int plot_render(struct plot *p, char *err, size_t err_len)
{
	char drawn[PLOT_PATH_MAX + 16];
	struct stat st;
	int rc = 0, status;

	if (p->dir[0] == '\0' || p->script == NULL) {
		snprintf(err, err_len, "plot: no script to draw (plot_open, plot_script first)");
		plot_discard(p);
		return -EINVAL;
	}
	if (fclose(p->script) != 0)
		rc = -EIO;
	p->script = NULL;
	status = rc == 0 ? gnuplot_run(p) : rc;
	snprintf(drawn, sizeof(drawn), "%s/plot.%s", p->dir, ext_of(p->kind));
	if (status < 0) {
		rc = status;
		snprintf(err, err_len, "cannot run gnuplot: %s", strerror(-rc));
	} else if (WIFEXITED(status) && WEXITSTATUS(status) == EXEC_FAILED_RC) {
		rc = -ENOENT;
		snprintf(err, err_len, "gnuplot could not be started: %s", INSTALL_HINT);
	} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		rc = -EIO;
		snprintf(err, err_len, "gnuplot failed (%s %d) on the plot script; no plot written",
			 WIFEXITED(status) ? "exit status" : "signal",
			 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	} else if (stat(drawn, &st) != 0 || st.st_size == 0) {
		rc = -EIO;
		snprintf(err, err_len, "gnuplot exited 0 but drew nothing; no plot written");
	} else {
		rc = move_into_place(drawn, p->out, err, err_len);
	}
	plot_discard(p);
	return rc;
}

void plot_discard(struct plot *p)
{
	DIR *d;

	if (p->script != NULL)
		fclose(p->script);
	p->script = NULL;
	if (p->dir[0] == '\0')
		return;
	d = opendir(p->dir);
	for (struct dirent *e = d != NULL ? readdir(d) : NULL; e != NULL; e = readdir(d))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			(void)unlinkat(dirfd(d), e->d_name, 0);
	if (d != NULL)
		closedir(d);
	(void)rmdir(p->dir);
	p->dir[0] = '\0';
}
