/* Parsers for keel-plan's inputs: the cluster and workload text formats (documented at the top
 * plan_parse.c, docs/keel-plan.md) and SimGrid platform files (plan_xml.c, with expat). Tool
 * code: may allocate. */
#ifndef KEEL_PLAN_PARSE_H
#define KEEL_PLAN_PARSE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "keel/partition.h"
#include "keel/sched.h"
#include "plan_preset.h"

#define PLAN_GROUPS_MAX 256u
#define PLAN_ERR_MAX	512u
#define PLAN_NOTES_MAX	32u /* what a SimGrid platform had that keel-plan cannot map */

struct plan_group {
	char name[PLAN_NAME_MAX];
	char gpu[PLAN_NAME_MAX];  /* preset name, or "custom" / "simgrid" */
	uint32_t count, first;	  /* workers first .. first+count-1 */
	struct keel_worker proto; /* every worker of the group, but its id */
};

struct plan_cluster {
	uint32_t group_count;
	struct plan_group group[PLAN_GROUPS_MAX];
	uint32_t worker_count;
	struct keel_worker *worker;  /* worker.type = its group index */
	struct plan_presets presets; /* --define's definitions, then the file's */
	uint32_t note_count;	     /* notes kept; more may have been dropped */
	uint32_t notes_dropped;
	char note[PLAN_NOTES_MAX][160]; /* "file:line: <zoneRoute>: ..." */
};

struct plan_workload {
	bool has_shares;
	struct keel_shares_spec shares;
	struct keel_plan_policy policy;
	uint32_t item_count;
	struct keel_item *item;
	char (*item_name)[PLAN_NAME_MAX];
	uint32_t task_count;
	double *cost; /* [task_count * group_count]: seconds on a worker of that group */
	uint8_t *hint;
	uint32_t *hint_worker;
	char (*task_name)[PLAN_NAME_MAX];
	uint32_t edge_count;
	uint32_t (*edge)[2];
	double *edge_bytes;
};

/* Parse a cluster file (text format) or a SimGrid platform file. defs: definitions made
 * before (--define), or NULL. On failure returns -EINVAL (or -ENOMEM) and writes
 * "file:line: field 'name': ..." into err. A platform's elements that cannot be mapped to
 * workers are listed in c->note (file:line, element, why); they do not fail the parse. */
int plan_cluster_load(const char *path, const struct plan_presets *defs, struct plan_cluster *c,
		      char *err, size_t err_len);
int plan_cluster_load_xml(const char *path, const struct plan_presets *defs, struct plan_cluster *c,
			  char *err, size_t err_len);
/* Same, from memory; `name` is used in messages. */
int plan_cluster_parse(const char *name, const char *text, const struct plan_presets *defs,
		       struct plan_cluster *c, char *err, size_t err_len);
int plan_cluster_parse_xml(const char *name, const char *text, size_t len,
			   const struct plan_presets *defs, struct plan_cluster *c, char *err,
			   size_t err_len);
void plan_cluster_free(struct plan_cluster *c);

/* Shared by the two cluster parsers. Give each group its workers (ids 0.., type = group
 * index): -EINVAL without workers or with too many, -ENOMEM. */
int plan_cluster_expand(struct plan_cluster *c, char *err, size_t err_len);
/* Read a whole file, NUL-terminated (its length in *len when len is not NULL); NULL with
 * "path: why" in err. */
char *plan_slurp(const char *path, size_t *len, char *err, size_t err_len);

/* Parse a workload (shares, items, DAG tasks and edges) against a parsed cluster. */
int plan_workload_load(const char *path, const struct plan_cluster *c, struct plan_workload *w,
		       char *err, size_t err_len);
int plan_workload_parse(const char *name, const char *text, const struct plan_cluster *c,
			struct plan_workload *w, char *err, size_t err_len);
void plan_workload_free(struct plan_workload *w);

/* Worker display name: the group's name, with "-i" when the group has more than one. */
void plan_worker_name(const struct plan_cluster *c, uint32_t w, char *buf, size_t len);

#endif
