/* keel-sim --plot: each run's results as gnuplot data (step times with failures and new views
 * marked, the CDF of detection times, a sweep's curve) and the script that draws them; gnuplot
 * is run by tools/common/plot.c. Parent process only: never touches SimGrid or a keel node. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"
#include "sim_int.h"

#define PANEL_W_PX  960u
#define PANEL_H_PX  340u
#define LABEL_MAX   96u
#define FAIL_RGB    "#d62728"
#define VIEW_RGB    "#2ca02c"
#define STEP_RGB    "#1f77b4"
#define SAMPLES_RGB "#ff7f0e"

struct sim_plot {
	struct plot p;
	/* data: steps and cdf, a block per run (gnuplot's `index`); sweep, a row per run */
	FILE *steps, *cdf, *sweep;
	FILE *marks; /* `set arrow` lines for the step panel */
	FILE *vars;  /* each block's title and colour, as gnuplot variables */
	char mode[16];
	char key[64]; /* the swept knob; "" for one run */
	uint32_t runs;
	uint32_t step_blocks, cdf_blocks;
	uint32_t failures, views;
	bool numeric;	     /* every sweep value is a number (else the x axis lists them) */
	uint32_t numbers;    /* sweep values read as numbers so far */
	double x_min, x_max; /* of those */
	bool first_slots;    /* the first run's step slots held several steps each */
	double best_x, young_daly_x; /* sim_plot_optimum; 0: not marked */
	double horizon_s;
};

static FILE *data_open(struct sim_plot *sp, const char *name, char *err, size_t err_len)
{
	FILE *f = plot_data(&sp->p, name);
	if (f == NULL)
		snprintf(err, err_len, "cannot write the plot's %s in %s: %s", name, sp->p.dir,
			 strerror(errno));
	return f;
}

int sim_plot_open(struct sim_plot **out, const char *path, const char *mode, const char *sweep_key,
		  char *err, size_t err_len)
{
	struct sim_plot *sp = calloc(1, sizeof(*sp));
	int rc;

	*out = NULL;
	if (sp == NULL) {
		snprintf(err, err_len, "--plot: out of memory");
		return -ENOMEM;
	}
	rc = plot_open(&sp->p, path, err, err_len);
	if (rc != 0) {
		free(sp);
		return rc;
	}
	snprintf(sp->mode, sizeof(sp->mode), "%s", mode);
	snprintf(sp->key, sizeof(sp->key), "%s", sweep_key != NULL ? sweep_key : "");
	sp->numeric = true;
	if ((sp->steps = data_open(sp, "steps.dat", err, err_len)) == NULL ||
	    (sp->cdf = data_open(sp, "cdf.dat", err, err_len)) == NULL ||
	    (sp->sweep = data_open(sp, "sweep.dat", err, err_len)) == NULL ||
	    (sp->marks = data_open(sp, "marks.gp", err, err_len)) == NULL ||
	    (sp->vars = data_open(sp, "vars.gp", err, err_len)) == NULL) {
		sim_plot_discard(sp);
		return -EIO;
	}
	*out = sp;
	return 0;
}

/* A block's legend and colour (its run's: the same run has the same colour in every panel). */
static void block_vars(struct sim_plot *sp, const char *kind, uint32_t block, const char *title)
{
	fprintf(sp->vars, "%s_title_%u = ", kind, block);
	plot_quote(sp->vars, title);
	fprintf(sp->vars, "\n%s_lc_%u = %u\n", kind, block, sp->runs);
}

/* A vertical line across the step panel: a failure (dashed) or a new view (dotted). */
static void mark(struct sim_plot *sp, double at_s, bool failure)
{
	fprintf(sp->marks, "set arrow from %.9g, graph 0 to %.9g, graph 1 nohead front lw 1.5 %s ",
		at_s, at_s, failure ? "dt 2" : "dt 3");
	if (sp->key[0] == '\0')
		fprintf(sp->marks, "lc rgb '%s'\n", failure ? FAIL_RGB : VIEW_RGB);
	else
		fprintf(sp->marks, "lc %u\n", sp->runs);
}

static void steps_add(struct sim_plot *sp, const struct sim_result *r, const char *label)
{
	bool any = false, aggregated = false;

	for (uint32_t i = 0; i < SIM_STEP_SLOTS; i++) {
		any |= r->step_slots[i].count > 0;
		aggregated |= r->step_slots[i].count > 1;
	}
	if (!any)
		return;
	if (sp->step_blocks > 0)
		fprintf(sp->steps, "\n\n");
	fprintf(sp->steps, "# %s: end_s step_s (mean of the slot) step_s_max steps\n", label);
	for (uint32_t i = 0; i < SIM_STEP_SLOTS; i++) {
		const struct sim_step_slot *slot = &r->step_slots[i];
		if (slot->count > 0)
			fprintf(sp->steps, "%.9g %.9g %.9g %u\n", slot->end_s_sum / slot->count,
				slot->step_s_sum / slot->count, slot->step_s_max, slot->count);
	}
	if (sp->step_blocks == 0)
		sp->first_slots = aggregated;
	if (sp->key[0] != '\0')
		block_vars(sp, "step", sp->step_blocks, label);
	else
		block_vars(sp, "step", sp->step_blocks,
			   aggregated ? "time per step (mean over each 1/512 of the run)"
				      : "time per step (every step)");
	for (uint32_t i = 0; i < r->failure_count && i < SIM_FAILURES_MAX; i++) {
		mark(sp, r->failures[i].at_s, true);
		if (r->failures[i].view_at_s > 0) {
			mark(sp, r->failures[i].view_at_s, false);
			sp->views++;
		}
	}
	sp->step_blocks++;
}

static void cdf_add(struct sim_plot *sp, const struct sim_result *r, const char *label)
{
	char title[LABEL_MAX + 64];

	if (r->detect_cdf_count == 0)
		return;
	if (sp->cdf_blocks > 0)
		fprintf(sp->cdf, "\n\n");
	fprintf(sp->cdf, "# %s: detect_ms fraction\n%.9g 0\n", label, r->detect_cdf_s[0] * 1e3);
	for (uint32_t k = 0; k < r->detect_cdf_count && k < SIM_DETECT_CDF_MAX; k++)
		fprintf(sp->cdf, "%.9g %.9g\n", r->detect_cdf_s[k] * 1e3, r->detect_cdf_frac[k]);
	snprintf(title, sizeof(title), "%s%s%u detections of %u failure%s",
		 sp->key[0] != '\0' ? label : "", sp->key[0] != '\0' ? ": " : "", r->detect_count,
		 r->failure_count, r->failure_count == 1 ? "" : "s");
	block_vars(sp, "cdf", sp->cdf_blocks, title);
	sp->cdf_blocks++;
}

/* One row: the value as the x axis shows it (quoted), its number, then what is plotted. */
static void sweep_add(struct sim_plot *sp, const char *val, const struct sim_result *r)
{
	double x = 0;

	if (sim_value_number(val, &x) != 0 || !isfinite(x)) {
		sp->numeric = false;
		x = 0;
	} else {
		sp->x_min = sp->numbers == 0 || x < sp->x_min ? x : sp->x_min;
		sp->x_max = sp->numbers == 0 || x > sp->x_max ? x : sp->x_max;
		sp->numbers++;
	}
	fputc('"', sp->sweep);
	for (size_t i = 0; val[i] != '\0' && i < LABEL_MAX; i++)
		fputc(val[i] == '"' || (unsigned char)val[i] < ' ' ? '_' : val[i], sp->sweep);
	fprintf(sp->sweep, "\" %.9g %.9g %.9g %.9g %.9g %.9g %.9g\n", x, r->goodput * 100,
		r->detect_p50_s * 1e3, r->detect_max_s * 1e3, r->allreduce_s, r->allreduce_model_s,
		r->samples_per_s);
}

int sim_plot_add(struct sim_plot *sp, const char *sweep_val, const struct sim_result *r)
{
	char label[LABEL_MAX];

	sp->runs++;
	sp->failures += r->failure_count;
	if (r->sim_s > sp->horizon_s)
		sp->horizon_s = r->sim_s;
	snprintf(label, sizeof(label), "%s=%s", sp->key, sweep_val != NULL ? sweep_val : "");
	steps_add(sp, r, label);
	cdf_add(sp, r, label);
	if (sp->key[0] != '\0' && sweep_val != NULL)
		sweep_add(sp, sweep_val, r);
	return ferror(sp->steps) || ferror(sp->cdf) || ferror(sp->sweep) || ferror(sp->marks) ||
		       ferror(sp->vars)
		   ? -EIO
		   : 0;
}

/* `set WHAT '...'` with the formatted text quoted for gnuplot (a knob's name, a mode). */
__attribute__((format(printf, 3, 4))) static void title_set(FILE *f, const char *what,
							    const char *fmt, ...)
{
	char text[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	fprintf(f, "set %s ", what);
	plot_quote(f, text);
	fputc('\n', f);
}

/* Each panel starts from gnuplot's defaults for what an earlier one changed. Legends go under
 * the panel: inside, they hid a spike or a CDF's curve. */
static void panel_reset(FILE *f)
{
	fprintf(
	    f,
	    "unset arrow\nunset label\nunset logscale\nunset xtics\nset xtics\nset offsets "
	    "0,0,0,0\n"
	    "set autoscale\nset format '%%g'\nset key below horizontal nobox height 1\nset grid\n"
	    "unset y2tics\nunset y2label\nset ytics mirror\n");
}

static void steps_panel(const struct sim_plot *sp, FILE *f)
{
	bool one = sp->key[0] == '\0';

	panel_reset(f);
	fprintf(f,
		"set title 'Step time over simulated time: from the end of the step before, "
		"so failures, restarts and checkpoints show'\n"
		"set xlabel 'simulated time (s)'\nset ylabel 'step time (ms)'\n"
		"set xrange [0:%.9g]\nset yrange [0:*]\nload 'marks.gp'\n"
		"plot for [i=0:%u] 'steps.dat' index i using 1:($2*1e3) with fsteps lw 1.5 ",
		sp->horizon_s, sp->step_blocks - 1);
	if (one)
		fprintf(f, "lc rgb '%s' title value(sprintf('step_title_%%d', i))", STEP_RGB);
	else
		fprintf(f, "lc value(sprintf('step_lc_%%d', i)) "
			   "title value(sprintf('step_title_%%d', i))");
	/* One run whose slots hold several steps: the longest of each, so a spike stays seen. */
	if (one && sp->first_slots)
		fprintf(
		    f,
		    ", 'steps.dat' index 0 using 1:($3*1e3) with points pt 7 ps 0.3 lc rgb '%s' "
		    "title 'longest step in each 1/512'",
		    STEP_RGB);
	if (sp->failures > 0)
		fprintf(f, ", NaN with lines dt 2 lw 1.5 lc rgb '%s' title 'failure'",
			one ? FAIL_RGB : "black");
	if (sp->views > 0)
		fprintf(f, ", NaN with lines dt 3 lw 1.5 lc rgb '%s' title 'new view installed'",
			one ? VIEW_RGB : "black");
	fprintf(f, "\n");
}

static void cdf_panel(const struct sim_plot *sp, FILE *f)
{
	panel_reset(f);
	fprintf(f,
		"set title 'Detection times of each failure by each survivor (CDF)'\n"
		"set xlabel 'time from the failure until the survivor suspected it, or installed "
		"a view without it (ms)'\n"
		"set ylabel 'fraction of detections'\nset xrange [0:*]\nset yrange [0:1.05]\n"
		"set offsets 0, graph 0.04, 0, 0\n"
		"plot for [i=0:%u] 'cdf.dat' index i using 1:2 with steps lw 2 ",
		sp->cdf_blocks - 1);
	if (sp->key[0] == '\0')
		fprintf(f, "lc rgb '%s' ", FAIL_RGB);
	else
		fprintf(f, "lc value(sprintf('cdf_lc_%%d', i)) ");
	fprintf(f, "title value(sprintf('cdf_title_%%d', i))\n");
}

/* The sweep's x against what the mode is about: goodput when training (samples/s beside it:
 * keel-sim's goodput counts a step slowed by a failure as useful time), detection when only
 * heartbeating, the AllReduce time beside its model otherwise. */
void sim_plot_optimum(struct sim_plot *sp, double best, double young_daly)
{
	sp->best_x = best;
	sp->young_daly_x = young_daly;
}

/* The ckpt-every sweep's two marks: vertical lines at the best value and at Young/Daly's. */
static void optimum_marks(const struct sim_plot *sp, FILE *f)
{
	if (!sp->numeric)
		return;
	if (sp->best_x > 0)
		fprintf(
		    f,
		    "set arrow from %.9g, graph 0 to %.9g, graph 1 nohead lw 2 lc rgb '#2ca02c'\n"
		    "set label 'best of the sweep: %g' at %.9g, graph 0.95 left offset 0.5,0 "
		    "tc rgb '#2ca02c'\n",
		    sp->best_x, sp->best_x, sp->best_x, sp->best_x);
	if (sp->young_daly_x > 0 && (sp->young_daly_x < sp->x_min || sp->young_daly_x > sp->x_max))
		fprintf(f, "set xrange [%.9g:%.9g]\n", 0.8 * fmin(sp->x_min, sp->young_daly_x),
			1.25 * fmax(sp->x_max, sp->young_daly_x)); /* both lines in view */
	if (sp->young_daly_x > 0)
		fprintf(f,
			"set arrow from %.9g, graph 0 to %.9g, graph 1 nohead lw 2 dt 2 lc rgb "
			"'#d62728'\nset label 'Young/Daly: %.1f' at %.9g, graph 0.85 right offset "
			"-0.5,0 tc rgb '#d62728'\n",
			sp->young_daly_x, sp->young_daly_x, sp->young_daly_x, sp->young_daly_x);
}

static void sweep_panel(const struct sim_plot *sp, FILE *f)
{
	const char *x = sp->numeric ? "2" : "0";

	panel_reset(f);
	if (sp->numeric && sp->x_min > 0 && sp->x_max / sp->x_min >= 20)
		fprintf(f, "set logscale x\n");
	if (sp->numeric)
		fprintf(f, "set offsets graph 0.05, graph 0.05, 0, 0\n");
	else
		fprintf(f, "set xrange [-0.5:%u.5]\n", sp->runs - 1);
	title_set(f, "xlabel", "%s", sp->key);
	if (strcmp(sp->mode, "train") == 0) {
		title_set(f, "title", "Goodput against %s", sp->key);
		optimum_marks(sp, f);
		fprintf(
		    f,
		    "set ylabel 'goodput (%%)'\nset y2label 'samples/s'\nset ytics nomirror\n"
		    "set y2tics\n"
		    "plot 'sweep.dat' using %s:3:xtic(1) with linespoints lw 2 pt 7 lc rgb '%s' "
		    "title 'goodput (step time x steps / simulated time)', '' using %s:8 axes x1y2 "
		    "with linespoints lw 2 pt 5 dt 2 lc rgb '%s' title 'samples/s'\n",
		    x, STEP_RGB, x, SAMPLES_RGB);
	} else if (strcmp(sp->mode, "heartbeat") == 0) {
		title_set(f, "title", "Detection time against %s", sp->key);
		fprintf(f,
			"set ylabel 'detection time (ms)'\nset yrange [0:*]\n"
			"plot 'sweep.dat' using %s:4:xtic(1) with linespoints lw 2 pt 7 title "
			"'median', '' using %s:5 with linespoints lw 2 pt 5 title 'longest'\n",
			x, x);
	} else {
		title_set(f, "title", "AllReduce time against %s", sp->key);
		fprintf(f,
			"set ylabel 'time'\nset format y '%%.0s %%cs'\nset yrange [0:*]\n"
			"plot 'sweep.dat' using %s:6:xtic(1) with linespoints lw 2 pt 7 title "
			"'keel (mean)', '' using %s:7 with linespoints lw 2 pt 5 dt 2 title "
			"'ring model'\n",
			x, x);
	}
}

static int data_close(struct sim_plot *sp)
{
	FILE **files[] = {&sp->steps, &sp->cdf, &sp->sweep, &sp->marks, &sp->vars};
	int rc = 0;

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		if (*files[i] != NULL && fclose(*files[i]) != 0)
			rc = -EIO;
		*files[i] = NULL;
	}
	return rc;
}

int sim_plot_render(struct sim_plot *sp, char *err, size_t err_len)
{
	bool sweep = sp->key[0] != '\0' && sp->runs > 0, steps = sp->step_blocks > 0;
	bool cdf = sp->cdf_blocks > 0 && (sp->failures >= 2 || sweep || !steps);
	unsigned panels = (unsigned)steps + (unsigned)cdf + (unsigned)sweep;
	char layout[48];
	FILE *f = NULL;
	int rc = data_close(sp);

	if (rc != 0)
		snprintf(err, err_len, "cannot write the plot's data in %s", sp->p.dir);
	else if (panels == 0)
		snprintf(err, err_len,
			 "nothing to plot: no training step, no detected failure and no sweep "
			 "(--mode train records steps; --fail or --mtbf makes failures)");
	else if ((f = plot_script(&sp->p, PANEL_W_PX, PANEL_H_PX * panels)) == NULL)
		snprintf(err, err_len, "cannot write the plot's script in %s: %s", sp->p.dir,
			 strerror(errno));
	if (f == NULL) {
		sim_plot_discard(sp);
		return rc != 0 ? rc : panels == 0 ? -ENODATA : -EIO;
	}
	fprintf(f, "load 'vars.gp'\n");
	snprintf(layout, sizeof(layout), "multiplot layout %u,1 title", panels);
	if (sweep)
		title_set(f, layout, "keel-sim, %s mode: %u runs over %s", sp->mode, sp->runs,
			  sp->key);
	else
		title_set(f, layout, "keel-sim, %s mode: one run, %u failure%s", sp->mode,
			  sp->failures, sp->failures == 1 ? "" : "s");
	if (steps)
		steps_panel(sp, f);
	if (cdf)
		cdf_panel(sp, f);
	if (sweep)
		sweep_panel(sp, f);
	fprintf(f, "unset multiplot\n");
	rc = plot_render(&sp->p, err, err_len);
	free(sp);
	return rc;
}

void sim_plot_discard(struct sim_plot *sp)
{
	if (sp == NULL)
		return;
	(void)data_close(sp);
	plot_discard(&sp->p);
	free(sp);
}
