/* Actors whose SimGrid exceptions end the run with a message: an exception an actor's C code
 * cannot catch (a route SimGrid cannot compute, a failure nobody waited for) would otherwise
 * reach SimGrid's context wrapper, which prints a backtrace and aborts. */
#ifndef KEEL_SIM_ACTOR_GUARD_H
#define KEEL_SIM_ACTOR_GUARD_H

#include <simgrid/actor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the message names (the platform file, or the cluster); copied. */
void sim_actor_guard_name(const char *what);
/* Like sg_actor_start(actor, code, 0, NULL). An exception escaping code ends the process
 * (keel-sim's run child) with exit status 2 after one line on stderr, "keel-sim: WHAT: the
 * simulation stopped: EXCEPTION: MESSAGE": the simulation cannot go on, as SimGrid may have
 * left the activity that threw half made (killing the other actors would touch it). */
void sim_actor_start_guarded(sg_actor_t actor, void (*code)(int, char **));

#ifdef __cplusplus
}
#endif

#endif
