/* Waiting on a set of SimGrid comms without aborting when one of them fails, and dropping
 * the ones no longer wanted. */
#ifndef KEEL_SIM_COMM_WAIT_H
#define KEEL_SIM_COMM_WAIT_H

#include <simgrid/comm.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Like sg_comm_wait_any: the index of a comm that ended, whose reference is released (the
 * others stay the caller's). *failed is 1 when that comm failed (a host or link went down
 * mid-transfer) instead of finishing; -1 when none could be named. */
ssize_t sim_comm_wait_any(sg_comm_t *comms, size_t count, int *failed);
/* Cancel comms that are no longer wanted and release the caller's references: a comm in
 * transfer is dropped, one that has finished stays finished. */
void sim_comm_cancel(sg_comm_t *comms, size_t count);

#ifdef __cplusplus
}
#endif

#endif
