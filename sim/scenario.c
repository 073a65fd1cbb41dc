/* Scenario knobs: one "key=value" setter shared by command-line flags, scenario files and
 * --sweep values, so every knob can be swept. Tool-side; never touches a keel node. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

void sim_scenario_default(struct sim_scenario *s)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->mode, sizeof(s->mode), "train");
	s->heartbeat_ns = 1000000;
	s->miss_limit = KEEL_MISS_LIMIT_DEFAULT;
	s->window = 0; /* 0: by world size and mode (run.c) */
	s->mtu = KEEL_MTU_DEFAULT;
	s->op_timeout_ns = KEEL_OP_TIMEOUT_NS_DEFAULT;
	s->join_timeout_ns = 100000000; /* simulated nodes start together: 100 ms */
	s->algo = KEEL_ALGO_AUTO;
	s->horizon_s = 10;
	/* A small GPT-style model: on 8 GPUs a step takes a fraction of a second, so that a
	 * run of a few simulated seconds makes steps (1.3 B took 8 s on 4 H100 + 4 A100). */
	s->model_params = 25e6;
	s->flops_per_sample = 0; /* from the model (sim_flops_per_sample) */
	s->batch = 512;
	s->mfu = 0.4;
	s->grad_scale = 0; /* 0: chosen so a ring step moves about two datagrams */
	s->trains = 1;	   /* bulk datagrams per SimGrid message (1: one each) */
	s->ckpt_every = 100;
	s->repair = true;
	s->ckpt_Bps = 2e9; /* local NVMe, per GPU */
	s->restart_s = 60;
	s->recovery = SIM_RECOVER_KEEL;
	s->allreduce_bytes = 1 << 20;
	s->repeat = 5;
	s->seed = 1;
	s->weibull_k = 1; /* exponential lifetimes */
}

double sim_flops_per_sample(const struct sim_scenario *s)
{
	if (s->flops_per_sample > 0)
		return s->flops_per_sample;
	return 6 * s->model_params * SIM_TOKENS_PER_SAMPLE;
}

static int parse_double(const char *v, double *out)
{
	char *end;
	double d = strtod(v, &end);
	if (end == v)
		return -EINVAL;
	/* unit suffixes for times and sizes */
	if (strcmp(end, "ns") == 0)
		d *= 1e-9;
	else if (strcmp(end, "us") == 0)
		d *= 1e-6;
	else if (strcmp(end, "ms") == 0)
		d *= 1e-3;
	else if (strcmp(end, "s") == 0 || strcmp(end, "") == 0)
		;
	else if (strcmp(end, "min") == 0)
		d *= 60;
	else if (strcmp(end, "h") == 0)
		d *= 3600;
	else if (strcmp(end, "K") == 0 || strcmp(end, "KiB") == 0)
		d *= 1024;
	else if (strcmp(end, "M") == 0 || strcmp(end, "MiB") == 0)
		d *= 1048576;
	else if (strcmp(end, "G") == 0 || strcmp(end, "GiB") == 0)
		d *= 1073741824;
	else if (strcmp(end, "B") == 0 && d >= 0)
		d *= 1e9; /* parameters: 1.3B */
	else
		return -EINVAL;
	*out = d;
	return d >= 0 && isfinite(d) ? 0 : -EINVAL;
}

int sim_value_number(const char *value, double *out)
{
	return parse_double(value, out);
}

/* Knobs kept as integers: a value past the type's range is refused (converting it would be
 * undefined behaviour, and a wrapped number in practice). */
static bool fits_u32(double d)
{
	return d >= 0 && d < 0x1p32;
}

static bool fits_u64(double d)
{
	return d >= 0 && d < 0x1p64;
}

/* A duration in nanoseconds: at least one (0 would mean "the default" to keel), and it fits. */
static bool ns_fits(double ns)
{
	return ns >= 1 && fits_u64(ns);
}

/* A text knob: refused when it does not fit, rather than cut short. */
static int set_text(char *dst, size_t cap, const char *key, const char *value, char *err,
		    size_t err_len)
{
	size_t n = strlen(value);
	if (n >= cap) {
		snprintf(err, err_len, "'%s' takes at most %zu characters", key, cap - 1);
		return -EINVAL;
	}
	memcpy(dst, value, n + 1);
	return 0;
}

/* A host or rank index of a fault. */
static int parse_index(const char *v, uint32_t *out)
{
	char *end;
	unsigned long i = strtoul(v, &end, 10);
	if (end == v || *end != '\0' || i > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)i;
	return 0;
}

/* "T:HOST" or "T:HOST:X" (X: SLOW's factor, PAUSE's seconds) */
static int parse_fault(struct sim_scenario *s, enum sim_fault_kind kind, const char *v)
{
	struct sim_fault f = {.kind = kind, .factor = 1};
	char buf[128], *p, *q;

	if (s->fault_count == SIM_FAULTS_MAX || strlen(v) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, v);
	p = strchr(buf, ':');
	if (p == NULL)
		return -EINVAL;
	*p++ = '\0';
	if (parse_double(buf, &f.at_s) != 0)
		return -EINVAL;
	q = strchr(p, ':');
	if (q != NULL)
		*q++ = '\0';
	if (kind == SIM_FAULT_LINK_OFF || kind == SIM_FAULT_LINK_ON) {
		if (p[0] == '\0' || strlen(p) >= sizeof(f.link))
			return -EINVAL;
		strcpy(f.link, p);
	} else if (parse_index(p, &f.a) != 0) {
		return -EINVAL;
	}
	if (kind == SIM_FAULT_SLOW &&
	    (q == NULL || parse_double(q, &f.factor) != 0 || f.factor < 1))
		return -EINVAL;
	if (kind == SIM_FAULT_PAUSE &&
	    (q == NULL || parse_double(q, &f.factor) != 0 || !(f.factor > 0)))
		return -EINVAL;
	if (kind == SIM_FAULT_CUT && (q == NULL || parse_index(q, &f.b) != 0))
		return -EINVAL;
	s->faults[s->fault_count++] = f;
	return 0;
}

/* "keel", "restart", "timeout" or "timeout=SECONDS". */
static int set_recovery(struct sim_scenario *s, const char *value)
{
	double d;

	if (strcmp(value, "keel") == 0) {
		s->recovery = SIM_RECOVER_KEEL;
	} else if (strcmp(value, "restart") == 0) {
		s->recovery = SIM_RECOVER_RESTART;
	} else if (strncmp(value, "timeout", 7) == 0) {
		s->recovery = SIM_RECOVER_TIMEOUT;
		s->op_timeout_ns = 600000000000ull; /* PyTorch's NCCL default: 10 min */
		if (value[7] == '=' && parse_double(value + 8, &d) == 0 && ns_fits(d * 1e9))
			s->op_timeout_ns = (uint64_t)(d * 1e9);
		else if (value[7] != '\0')
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	return 0;
}

/* The knobs that take a number; -EINVAL for another key or a value out of its range. */
static int set_number(struct sim_scenario *s, const char *key, double d)
{
	if (strcmp(key, "heartbeat") == 0 && d > 0 && ns_fits(d * 1e9 + 0.5))
		s->heartbeat_ns = (uint64_t)(d * 1e9 + 0.5);
	else if (strcmp(key, "miss-limit") == 0 && d >= 1 && fits_u32(d))
		s->miss_limit = (uint32_t)d;
	else if (strcmp(key, "window") == 0 && fits_u32(d))
		s->window = (uint32_t)d;
	else if (strcmp(key, "mtu") == 0 && d >= KEEL_MTU_MIN && d <= KEEL_MTU_MAX)
		s->mtu = (uint32_t)d;
	else if (strcmp(key, "op-timeout") == 0 && ns_fits(d * 1e9))
		s->op_timeout_ns = (uint64_t)(d * 1e9);
	else if (strcmp(key, "ranks") == 0 && d <= SIM_HOSTS_MAX)
		s->ranks = (uint32_t)d;
	else if (strcmp(key, "horizon") == 0 && d > 0)
		s->horizon_s = d;
	else if (strcmp(key, "model") == 0 && d >= 1)
		s->model_params = d;
	else if (strcmp(key, "flops-per-sample") == 0 && d > 0)
		s->flops_per_sample = d;
	else if (strcmp(key, "batch") == 0 && d >= 1 && fits_u32(d))
		s->batch = (uint32_t)d;
	else if (strcmp(key, "mfu") == 0 && d > 0 && d <= 1)
		s->mfu = d;
	else if (strcmp(key, "grad-scale") == 0 && fits_u32(d))
		s->grad_scale = (uint32_t)d;
	else if (strcmp(key, "trains") == 0 && d >= 1 && d <= SIM_TRAIN_MAX)
		s->trains = (uint32_t)d;
	else if (strcmp(key, "ckpt-every") == 0 && fits_u32(d))
		s->ckpt_every = (uint32_t)d;
	else if (strcmp(key, "ckpt-bw") == 0 && d > 0)
		s->ckpt_Bps = d;
	else if (strcmp(key, "restart") == 0)
		s->restart_s = d;
	else if (strcmp(key, "bytes") == 0 && fits_u64(d))
		s->allreduce_bytes = (uint64_t)d;
	else if (strcmp(key, "repeat") == 0 && d >= 1 && fits_u32(d))
		s->repeat = (uint32_t)d;
	else if (strcmp(key, "mtbf") == 0 && d >= 0)
		s->mtbf_s = d;
	else if (strcmp(key, "mtbf-server") == 0 && d >= 0)
		s->mtbf_server_s = d;
	else if (strcmp(key, "weibull") == 0 && d > 0 && d <= 20)
		s->weibull_k = d;
	else if (strcmp(key, "mttr") == 0 && d >= 0)
		s->mttr_s = d;
	else if (strcmp(key, "seed") == 0 && fits_u64(d))
		s->seed = (uint64_t)d;
	else
		return -EINVAL;
	return 0;
}

/* The knobs that name where the run happens (cluster, platform file, definitions, chaos):
 * 0, or -EINVAL with their own message; -ENOENT for another key. */
static int set_place(struct sim_scenario *s, const char *key, const char *value, char *err,
		     size_t err_len)
{
	int rc;
	if (strcmp(key, "cluster") == 0) {
		struct sim_cluster c;
		rc = sim_cluster_parse(value, &c, err, err_len);
		if (rc == 0)
			rc = set_text(s->cluster_spec, sizeof(s->cluster_spec), key, value, err,
				      err_len);
		if (rc == 0)
			s->platform_file[0] = '\0';
		return rc;
	}
	if (strcmp(key, "platform") == 0) {
		rc = set_text(s->platform_file, sizeof(s->platform_file), key, value, err, err_len);
		if (rc == 0)
			s->cluster_spec[0] = '\0';
		return rc;
	}
	if (strcmp(key, "define") == 0)
		return sim_define(value, err, err_len);
	if (strcmp(key, "chaos") == 0)
		return set_text(s->chaos, sizeof(s->chaos), key, value, err, err_len);
	return -ENOENT;
}

/* The fault knobs' kinds, by key; -1 for another key. */
static int fault_kind(const char *key)
{
	static const struct {
		const char *key;
		enum sim_fault_kind kind;
	} kinds[] = {
	    {"fail", SIM_FAULT_HOST_OFF},     {"recover", SIM_FAULT_HOST_ON},
	    {"link-off", SIM_FAULT_LINK_OFF}, {"link-on", SIM_FAULT_LINK_ON},
	    {"slow", SIM_FAULT_SLOW},	      {"cut", SIM_FAULT_CUT},
	    {"pause", SIM_FAULT_PAUSE},
	};
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strcmp(key, kinds[i].key) == 0)
			return (int)kinds[i].kind;
	return -1;
}

/* --algo and --compress: one of a few words. */
static int set_algo_compress(struct sim_scenario *s, const char *key, const char *value)
{
	if (strcmp(key, "algo") == 0) {
		s->algo = strcmp(value, "ring") == 0   ? KEEL_ALGO_RING
			  : strcmp(value, "rd") == 0   ? KEEL_ALGO_RD
			  : strcmp(value, "hier") == 0 ? KEEL_ALGO_HIER
						       : KEEL_ALGO_AUTO;
		return strcmp(value, "ring") && strcmp(value, "rd") && strcmp(value, "hier") &&
			       strcmp(value, "auto")
			   ? -EINVAL
			   : 0;
	}
	static const char *const names[] = {"auto", "off", "bf16", "f16"};
	s->grad = strcmp(value, "none") != 0;
	int rc = s->grad ? -EINVAL : 0;
	for (uint32_t i = 0; i < 4; i++)
		if (strcmp(value, names[i]) == 0) {
			s->compress = (enum keel_compress)i;
			rc = 0;
		}
	return rc;
}

/* The knobs that take a word: 0, -EINVAL for a bad value, -ENOENT for another key. */
static int set_word(struct sim_scenario *s, const char *key, const char *value)
{
	if (strcmp(key, "mode") == 0) {
		if (strcmp(value, "train") != 0 && strcmp(value, "heartbeat") != 0 &&
		    strcmp(value, "allreduce") != 0)
			return -EINVAL;
		snprintf(s->mode, sizeof(s->mode), "%s", value);
		return 0;
	}
	if (strcmp(key, "recovery") == 0)
		return set_recovery(s, value);
	if (strcmp(key, "algo") == 0 || strcmp(key, "compress") == 0)
		return set_algo_compress(s, key, value);
	if (strcmp(key, "check") == 0) {
		s->check = strcmp(value, "0") != 0 && strcmp(value, "no") != 0;
		return 0;
	}
	if (strcmp(key, "fidelity") == 0) {
		s->fidelity = strcmp(value, "full") == 0   ? SIM_FIDELITY_FULL
			      : strcmp(value, "auto") == 0 ? SIM_FIDELITY_AUTO
							   : SIM_FIDELITY_DEFAULT;
		return s->fidelity == SIM_FIDELITY_DEFAULT ? -EINVAL : 0;
	}
	if (strcmp(key, "repair") == 0) {
		s->repair = strcmp(value, "on") == 0;
		return s->repair || strcmp(value, "off") == 0 ? 0 : -EINVAL;
	}
	return -ENOENT;
}

int sim_scenario_set(struct sim_scenario *s, const char *key, const char *value, char *err,
		     size_t err_len)
{
	double d = 0;
	int rc = set_place(s, key, value, err, err_len);
	if (rc != -ENOENT)
		return rc;
	int kind = fault_kind(key);
	if (kind >= 0)
		rc = parse_fault(s, (enum sim_fault_kind)kind, value);
	else
		rc = set_word(s, key, value);
	if (rc == -ENOENT)
		rc = parse_double(value, &d) == 0 ? set_number(s, key, d) : -EINVAL;
	if (rc != 0)
		snprintf(err, err_len, "bad value '%s' for '%s' (see keel-sim --help)", value, key);
	return rc;
}

/* One line of a scenario (NUL-terminated, its newline gone); blank and comment lines pass. */
static int scenario_line(struct sim_scenario *s, const char *name, unsigned no, char *line,
			 char *err, size_t err_len)
{
	char *hash = strchr(line, '#'), *key, *val, *save = NULL;

	if (hash != NULL)
		*hash = '\0';
	key = strtok_r(line, " \t=\r\n", &save);
	if (key == NULL)
		return 0;
	/* "define gpu NAME rate=..." keeps the rest of its line. */
	val = strcmp(key, "define") == 0 ? save : strtok_r(NULL, " \t=\r\n", &save);
	if (val != NULL)
		val[strcspn(val, "\r\n")] = '\0';
	if (val != NULL && val[0] == '\0')
		val = NULL;
	if (val == NULL) {
		snprintf(err, err_len, "scenario '%s' line %u: '%s' has no value", name, no, key);
		return -EINVAL;
	}
	char sub[256];
	if (sim_scenario_set(s, key, val, sub, sizeof(sub)) != 0) {
		snprintf(err, err_len, "scenario '%s' line %u: %s", name, no, sub);
		return -EINVAL;
	}
	return 0;
}

int sim_scenario_parse(struct sim_scenario *s, const char *name, const char *text, size_t len,
		       char *err, size_t err_len)
{
	unsigned no = 0;

	for (size_t at = 0; at < len;) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t n = nl != NULL ? (size_t)(nl - (text + at)) : len - at;
		char line[SIM_SCENARIO_LINE_MAX + 1];

		no++;
		if (n > SIM_SCENARIO_LINE_MAX) {
			snprintf(err, err_len, "scenario '%s' line %u: longer than %u characters",
				 name, no, SIM_SCENARIO_LINE_MAX);
			return -EINVAL;
		}
		/* a NUL byte ends the line's text, as it did when lines were read with fgets */
		memcpy(line, text + at, n);
		line[n] = '\0';
		at += n + (nl != NULL);
		int rc = scenario_line(s, name, no, line, err, err_len);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* The whole file, then sim_scenario_parse (a pipe works too: read until its end). */
int sim_scenario_load(struct sim_scenario *s, const char *path, char *err, size_t err_len)
{
	FILE *f = fopen(path, "r");
	char *text = NULL;
	size_t len = 0, cap = 0;
	int rc;

	if (f == NULL) {
		snprintf(err, err_len, "scenario '%s': %s", path, strerror(errno));
		return -EINVAL;
	}
	for (;;) {
		if (len == cap) {
			size_t want = cap * 2 + 4096;
			char *more = realloc(text, want);
			if (more == NULL)
				break; /* len == cap: reported below */
			text = more;
			cap = want;
		}
		size_t got = fread(text + len, 1, cap - len, f);
		len += got;
		if (got == 0)
			break;
	}
	if (ferror(f) || len == cap) {
		snprintf(err, err_len, "scenario '%s': %s", path,
			 ferror(f) ? "read error" : strerror(ENOMEM));
		rc = -EINVAL;
	} else {
		rc = sim_scenario_parse(s, path, text, len, err, err_len);
	}
	fclose(f);
	free(text);
	return rc;
}
