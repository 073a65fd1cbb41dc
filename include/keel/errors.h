/* keel error codes: 0 is success, negative errno where one fits, keel's own below -1000.
 * Never a global errno; every code has a name in keel_strerror(). */
#ifndef KEEL_ERRORS_H
#define KEEL_ERRORS_H

#include <errno.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KEEL_MUST_USE __attribute__((warn_unused_result))
#else
#define KEEL_MUST_USE
#endif

/* keel's own codes, for failures no errno describes. */
enum keel_error {
	KEEL_EVIEWCHANGED = -1001, /* the view changed under an operation */
	KEEL_ENOQUORUM = -1002,	   /* this node is on the minority side of a split */
	/* -1003..-1005 are retired (never returned; kept unused so old logs still read right) */
	KEEL_ERENDEZVOUS = -1006, /* peers could not be found (rendezvous failed) */
	KEEL_ETRANSPORT = -1007,  /* the transport reported a fatal error */
	KEEL_EEXCLUDED = -1008,	  /* this node was excluded from the view while it was silent
				   * (paused, stalled or cut off): its state is behind the members' */
	KEEL_EMISMATCH = -1009,	  /* members started different collectives at the same place in
				   * their sequence (count, type or algorithm differ) */
	KEEL_EENDED = -1010,	  /* the job has ended: every other rank left, or none answered a
				   * rank waiting to be admitted (keel_boot_wait_member) */
	KEEL_EDEVICE = -1011,	  /* the device (GPU) failed a copy or a reduction */
	KEEL_EPEERGONE = -1012,	  /* the peer of a send or receive left the view (keel/group.h) */
};

/* Name and explanation of any code keel returns (0, -errno or KEEL_E*).
 * Never NULL; unknown codes give "unknown error". The string is static. */
const char *keel_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
