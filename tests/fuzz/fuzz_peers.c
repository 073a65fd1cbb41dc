/* libFuzzer entry point over the KEEL_PEERS reader (host:port and [v6]:port lists a launcher
 * script or a user writes): any text is counted or refused with a message, every entry it
 * counted can be read back, and nothing is read past the text.
 * Built and run by `make fuzz` (mk/fuzz.mk); `make test` runs a smoke of it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keel/launch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *list = malloc(size + 1);
	if (list == NULL)
		return 0;
	memcpy(list, data, size);
	list[size] = '\0';
	char err[256], host[KEEL_LAUNCH_HOST_LEN];
	uint16_t port;
	uint32_t count = 0;
	if (keel_peers_count(list, &count, err, sizeof(err)) == 0) {
		for (uint32_t i = 0; i < count; i++)
			if (keel_peers_entry(list, i, host, sizeof(host), &port, err,
					     sizeof(err)) != 0)
				__builtin_trap(); /* counted, so it must read back */
		if (keel_peers_entry(list, count, host, sizeof(host), &port, err, sizeof(err)) !=
		    -ENOENT)
			__builtin_trap(); /* one past the end is "no such entry" */
	}
	free(list);
	return 0;
}
