/* Parsers for keel-plan's inputs: the cluster and workload text formats (documented at the top
 * of plan_parse.c and in README) and SimGrid platform files. Tool code: may allocate. */
#ifndef KEEL_PLAN_PARSE_H
#define KEEL_PLAN_PARSE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "keel/partition.h"
#include "keel/sched.h"

#define PLAN_GROUPS_MAX 256u
#define PLAN_NAME_MAX	64u
#define PLAN_ERR_MAX	512u

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
	struct keel_worker *worker; /* worker.type = its group index */
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

/* Parse a value with an optional SI/binary prefix and unit. kind: 'b' bytes, 'r' bytes/s
 * (b/s and bps are bits), 'f' FLOP or FLOP/s, 't' time in seconds. 0 or -EINVAL. */
int plan_parse_quantity(const char *s, char kind, double *out);

/* Parse a cluster file (text format) or a SimGrid platform file. On failure returns -EINVAL
 * (or -ENOMEM) and writes "file:line: field 'name': ..." into err. */
int plan_cluster_load(const char *path, struct plan_cluster *c, char *err, size_t err_len);
int plan_cluster_load_xml(const char *path, struct plan_cluster *c, char *err, size_t err_len);
/* Same, from memory; `name` is used in messages. */
int plan_cluster_parse(const char *name, const char *text, struct plan_cluster *c, char *err,
		       size_t err_len);
int plan_cluster_parse_xml(const char *name, const char *text, struct plan_cluster *c, char *err,
			   size_t err_len);
void plan_cluster_free(struct plan_cluster *c);

/* Parse a workload (shares, items, DAG tasks and edges) against a parsed cluster. */
int plan_workload_load(const char *path, const struct plan_cluster *c, struct plan_workload *w,
		       char *err, size_t err_len);
int plan_workload_parse(const char *name, const char *text, const struct plan_cluster *c,
			struct plan_workload *w, char *err, size_t err_len);
void plan_workload_free(struct plan_workload *w);

/* Worker display name: the group's name, with "-i" when the group has more than one. */
void plan_worker_name(const struct plan_cluster *c, uint32_t w, char *buf, size_t len);

#endif
