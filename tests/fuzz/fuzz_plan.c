/* libFuzzer entry point over keel-plan's readers, which take files a user wrote or a cluster
 * manager generated: the cluster format, SimGrid platform XML (expat), workload files and
 * `define` lines. Bad input is an error naming its place, never a crash, a leak or a read past
 * the text. The first byte picks the reader; the rest is the text.
 * Built and run by `make fuzz` (mk/fuzz.mk); `make test` runs a smoke of it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan_parse.h"
#include "plan_preset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A small cluster for the workload reader to place onto. */
static const char *const cluster_text = "group a count=2 gpu=H100\ngroup b count=1 gpu=A100-80\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	char *text = malloc(size); /* the readers take NUL-terminated text: size - 1 bytes + NUL */
	if (text == NULL)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	static struct plan_presets defs;
	memset(&defs, 0, sizeof(defs));
	struct plan_cluster c;
	struct plan_workload w;
	char err[512];
	switch (data[0] % 4) {
	case 0:
		if (plan_cluster_parse("fuzz", text, &defs, &c, err, sizeof(err)) == 0)
			plan_cluster_free(&c);
		break;
	case 1:
		if (plan_cluster_parse_xml("fuzz", text, size - 1, &defs, &c, err, sizeof(err)) ==
		    0)
			plan_cluster_free(&c);
		break;
	case 2:
		if (plan_cluster_parse("base", cluster_text, &defs, &c, err, sizeof(err)) != 0)
			__builtin_trap(); /* the harness's own cluster must parse */
		if (plan_workload_parse("fuzz", text, &c, &w, err, sizeof(err)) == 0)
			plan_workload_free(&w);
		plan_cluster_free(&c);
		break;
	default:
		(void)plan_presets_define(&defs, text, err, sizeof(err));
		break;
	}
	free(text);
	return 0;
}
