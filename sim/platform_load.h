/* C entry to sim/platform_load.cc: SimGrid's platform loader with its exceptions turned into
 * an error message, and what the engine made of a file. Call after simgrid_init, once. */
#ifndef KEEL_SIM_PLATFORM_LOAD_H
#define KEEL_SIM_PLATFORM_LOAD_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Load a platform file: 0, or -EINVAL with SimGrid's message ("Parse error at FILE:LINE:
 * ...") in err. */
int sim_platform_load(const char *path, char *err, size_t err_len);
/* The same for a user's file, which must first be readable ("platform file 'x': No such
 * file or directory"). */
int sim_platform_open(const char *path, char *err, size_t err_len);
/* Load it and print the engine's hosts and links: "platform FILE: N hosts, M links", then one
 * line per host (name, speed, cores) and per link (name, bandwidth, latency). */
int sim_platform_describe(const char *path, FILE *out, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
