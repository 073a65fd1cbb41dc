/* libFuzzer entry point over keel-sim's scenario reader (sim/scenario.c, with the cluster
 * specs and `define` lines it hands on to sim/platform.c and keel-plan's presets), built
 * without SimGrid. Any text is applied or refused with a message, never a crash or a read past
 * it; what it accepts stays within the knobs' documented bounds (a kept cluster spec parses
 * again, every fault is whole), and the same text gives the same scenario twice.
 * The first byte picks the way in: bit 0 set, the rest is one knob as a flag or a --sweep
 * value gives it (key, a newline, then the value); else bit 7 set, every line is such a knob
 * ("key=value"), and a refusal does not stop the next (so one input reaches many refusals);
 * else the rest is a scenario file's text.
 * Built and run by `make fuzz` (mk/fuzz.mk); `make test` runs a smoke of it. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct sim_scenario g_a, g_b;

static void fail(const char *why, const char *what)
{
	fprintf(stderr, "fuzz_scenario: %s: %s\n", why, what);
	abort();
}

static void check_string(const char *s, size_t cap, const char *which)
{
	if (memchr(s, '\0', cap) == NULL)
		fail("a string without its end", which);
}

/* What run.c relies on in a scenario the reader accepted. */
static void check_scenario(const struct sim_scenario *s)
{
	check_string(s->cluster_spec, sizeof(s->cluster_spec), "cluster");
	check_string(s->platform_file, sizeof(s->platform_file), "platform");
	check_string(s->mode, sizeof(s->mode), "mode");
	check_string(s->chaos, sizeof(s->chaos), "chaos");
	struct sim_cluster c;
	char err[512];
	if (s->cluster_spec[0] != '\0' && sim_cluster_parse(s->cluster_spec, &c, err, sizeof(err)))
		fail("a kept cluster spec does not parse again", err);
	if (strcmp(s->mode, "train") && strcmp(s->mode, "heartbeat") &&
	    strcmp(s->mode, "allreduce"))
		fail("no such mode", s->mode);
	if (s->heartbeat_ns == 0 || s->miss_limit == 0 || s->mtu < KEEL_MTU_MIN ||
	    s->mtu > KEEL_MTU_MAX || s->ranks > SIM_HOSTS_MAX)
		fail("a knob out of its bounds", "heartbeat, miss-limit, mtu or ranks");
	double reals[] = {s->horizon_s, s->model_params, s->flops_per_sample, s->mfu, s->ckpt_Bps,
			  s->restart_s, s->mtbf_s};
	for (size_t i = 0; i < sizeof(reals) / sizeof(reals[0]); i++)
		if (!isfinite(reals[i]) || reals[i] < 0)
			fail("a quantity that is infinite or negative", "horizon, model, ...");
	if (s->fault_count > SIM_FAULTS_MAX)
		fail("more faults than fit", "fault_count");
	for (uint32_t i = 0; i < s->fault_count; i++) {
		const struct sim_fault *f = &s->faults[i];
		check_string(f->link, sizeof(f->link), "fault link");
		if (f->kind > SIM_FAULT_PAUSE || !(f->at_s >= 0) || !isfinite(f->at_s) ||
		    !isfinite(f->factor))
			fail("a fault of no kind, or not at a finite time", "faults");
		if ((f->kind == SIM_FAULT_SLOW && !(f->factor >= 1)) ||
		    (f->kind == SIM_FAULT_PAUSE && !(f->factor > 0)))
			fail("a slowdown below 1 or a pause of no length", "faults");
	}
}

/* Faults rewritten member by member: a struct copy may carry its padding along, which the
 * comparison of two readings must not see. */
static void clean_faults(struct sim_scenario *s)
{
	for (uint32_t i = 0; i < s->fault_count && i < SIM_FAULTS_MAX; i++) {
		const struct sim_fault *f = &s->faults[i];
		struct sim_fault c;
		memset(&c, 0, sizeof(c));
		c.kind = f->kind;
		c.at_s = f->at_s;
		c.a = f->a;
		c.b = f->b;
		c.factor = f->factor;
		memcpy(c.link, f->link, sizeof(c.link));
		memcpy(&s->faults[i], &c, sizeof(c));
	}
}

static void check_refusal(int rc, const char *err, size_t err_len)
{
	check_string(err, err_len, "the message");
	if (rc != -EINVAL || err[0] == '\0')
		fail("refused without -EINVAL and a message", err);
}

/* Each line "key=value" (or a key alone) set on its own; refusals are checked and passed. */
static void apply_lines(struct sim_scenario *s, const char *text, size_t len)
{
	static char line[4096 + 1];
	char err[512];
	for (size_t at = 0; at < len;) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t n = nl != NULL ? (size_t)(nl - (text + at)) : len - at;
		memcpy(line, text + at, n < sizeof(line) ? n : sizeof(line) - 1);
		line[n < sizeof(line) ? n : sizeof(line) - 1] = '\0';
		at += n + 1;
		char *eq = strchr(line, '=');
		if (eq != NULL)
			*eq = '\0';
		memset(err, 0x55, sizeof(err));
		int rc = sim_scenario_set(s, line, eq != NULL ? eq + 1 : "", err, sizeof(err));
		if (rc != 0)
			check_refusal(rc, err, sizeof(err));
	}
}

/* One way in, from defaults and no definitions: the text's return code and message. */
static int apply(struct sim_scenario *s, uint8_t how, const char *text, size_t len, char *err,
		 size_t err_len)
{
	sim_define_reset();
	sim_scenario_default(s);
	if (!(how & 1u) && (how & 0x80u)) {
		apply_lines(s, text, len);
		return 0;
	}
	if (!(how & 1u))
		return sim_scenario_parse(s, "fuzz", text, len, err, err_len);
	/* the text is NUL-terminated one byte past len (LLVMFuzzerTestOneInput) */
	const char *nl = memchr(text, '\n', len);
	if (nl == NULL)
		return sim_scenario_set(s, text, "", err, err_len);
	char key[256];
	size_t n = (size_t)(nl - text) < sizeof(key) ? (size_t)(nl - text) : sizeof(key) - 1;
	memcpy(key, text, n);
	key[n] = '\0';
	return sim_scenario_set(s, key, nl + 1, err, err_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t len = size - 1;
	char *text = malloc(len + 1); /* exactly sized: ASan sees a read past the end */
	if (text == NULL)
		return 0;
	memcpy(text, data + 1, len);
	text[len] = '\0';
	char err_a[512], err_b[512];
	memset(err_a, 0x55, sizeof(err_a));
	int rc = apply(&g_a, data[0], text, len, err_a, sizeof(err_a));
	if (rc != 0)
		check_refusal(rc, err_a, sizeof(err_a));
	else
		check_scenario(&g_a);
	/* Deterministic: nothing of the last text (a definition, a fault) is left behind. */
	int rc_b = apply(&g_b, data[0], text, len, err_b, sizeof(err_b));
	clean_faults(&g_a);
	clean_faults(&g_b);
	if (rc_b != rc || memcmp(&g_a, &g_b, sizeof(g_a)) != 0 ||
	    (rc != 0 && strcmp(err_a, err_b) != 0))
		fail("the same text read twice gave two scenarios", err_a);
	free(text);
	return 0;
}
