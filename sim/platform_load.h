/* C entry to sim/platform_load.cc: SimGrid's platform loader with its exceptions turned into
 * an error message, and what the engine made of a file. Call after simgrid_init, once. */
#ifndef KEEL_SIM_PLATFORM_LOAD_H
#define KEEL_SIM_PLATFORM_LOAD_H

#include <simgrid/forward.h>
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
/* Seal the loaded platform (SimGrid builds its routing then): 0, or -EINVAL with "WHAT:
 * SimGrid's reason" in err. */
int sim_platform_seal(const char *what, char *err, size_t err_len);
/* Ask SimGrid for the routes between the n hosts (sg_host_t) before any actor runs, so that
 * a route it cannot compute (a zone without gateways, no zoneRoute between two zones, a pair
 * a Full zone leaves without links, which SimGrid would abort on) is an error naming WHAT
 * and the two hosts, not an exception or abort in the middle of the run. Every ordered pair
 * when n <= all_pairs_max, else the ring's neighbours and every host against itself and
 * one host of each zone. 0, or -EINVAL with the message in err. */
int sim_routes_check(void *const *hosts, size_t n, size_t all_pairs_max, const char *what,
		     char *err, size_t err_len);

/* off(host) each time a host is turned off, by keel-sim or by the platform itself (a state
 * profile in the file): SimGrid then kills its actors. */
void sim_host_off_watch(void (*off)(sg_host_t host));

#ifdef __cplusplus
}
#endif

#endif
