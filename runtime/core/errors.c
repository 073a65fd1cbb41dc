/* keel_strerror: a static name and explanation for 0, every -errno keel returns and every
 * KEEL_E* code. Never calls libc strerror (not thread-safe, locale-dependent), never NULL. */
#include <errno.h>

#include "keel/errors.h"

/* "NAME: explanation", built from the symbol so the name can never drift from the value.
 * A switch rather than a table: the compiler rejects two names sharing one value. */
#define ERRNO_CASE(name, text)                                                                     \
	case -name:                                                                                \
		return #name ": " text
#define KEEL_CASE(name, text)                                                                      \
	case name:                                                                                 \
		return #name ": " text

/* keel's own codes sit below -1000, clear of every -errno (Linux errnos stay below 200), so a
 * value never names both. No runtime assertion here: every int is a valid argument (unknown
 * ones get "unknown error"), and what could go wrong in this table is caught at build time. */
_Static_assert(KEEL_EVIEWCHANGED < -1000 && KEEL_EPEERGONE < -1000, "keel codes below -1000");
_Static_assert(EHOSTUNREACH < 1000 && ENETUNREACH < 1000 && ESHUTDOWN < 1000, "errno range");

const char *keel_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";

		KEEL_CASE(KEEL_EVIEWCHANGED, "the view changed under the operation");
		KEEL_CASE(KEEL_ENOQUORUM, "no quorum: this node is on the minority side");
		KEEL_CASE(KEEL_ERENDEZVOUS, "rendezvous failed: peers could not be found");
		KEEL_CASE(KEEL_ETRANSPORT, "the transport reported a fatal error");
		KEEL_CASE(KEEL_EEXCLUDED,
			  "this node was excluded from the view while silent (paused "
			  "or cut off): rejoin and fetch state from view.donor");
		KEEL_CASE(KEEL_EMISMATCH, "members started different collectives (count, type or "
					  "algorithm differ) at the same place in their sequence");
		KEEL_CASE(KEEL_EENDED, "the job has ended: every other rank left, or none answered "
				       "this rank's request to be admitted");
		KEEL_CASE(KEEL_EDEVICE, "the device (GPU) failed a copy or a reduction: "
					"this rank's device is unusable");
		KEEL_CASE(KEEL_EPEERGONE, "the peer of a send or receive left the view (it "
					  "died, was excluded or left) before the transfer ended");

		/* Argument and capacity errors. */
		ERRNO_CASE(EINVAL, "invalid argument");
		ERRNO_CASE(ENOSPC, "no space left (a capacity is full)");
		ERRNO_CASE(ENOMEM, "not enough memory (caller storage too small)");
		ERRNO_CASE(ENOBUFS, "no buffer space available");
		ERRNO_CASE(EMSGSIZE, "message too long");
		ERRNO_CASE(ERANGE, "value out of range");
		ERRNO_CASE(EOVERFLOW, "value too large for its type");
		ERRNO_CASE(EFAULT, "bad address");
		ERRNO_CASE(ENOENT, "no such entry");
		ERRNO_CASE(EEXIST, "already exists");
		ERRNO_CASE(ENOTSUP, "operation not supported");
		ERRNO_CASE(ENOSYS, "function not implemented");
		ERRNO_CASE(EPERM, "operation not permitted");
		ERRNO_CASE(EACCES, "permission denied");
		ERRNO_CASE(ENODEV, "no such device");
		ERRNO_CASE(ENXIO, "no such device or address");
		ERRNO_CASE(EBADF, "bad file descriptor");

		/* Progress and state. */
		ERRNO_CASE(EAGAIN, "try again (resource temporarily unavailable)");
		ERRNO_CASE(EBUSY, "busy");
		ERRNO_CASE(EINPROGRESS, "operation in progress");
		ERRNO_CASE(EALREADY, "operation already in progress");
		ERRNO_CASE(ETIMEDOUT, "timed out");
		ERRNO_CASE(ECANCELED, "operation canceled");
		ERRNO_CASE(EINTR, "interrupted");
		ERRNO_CASE(ESHUTDOWN, "endpoint shut down");

		/* I/O and network. */
		ERRNO_CASE(EIO, "input/output error");
		ERRNO_CASE(EPROTO, "protocol error");
		ERRNO_CASE(EBADMSG, "bad message");
		ERRNO_CASE(ECONNREFUSED, "connection refused");
		ERRNO_CASE(ECONNRESET, "connection reset by peer");
		ERRNO_CASE(ECONNABORTED, "connection aborted");
		ERRNO_CASE(ENOTCONN, "not connected");
		ERRNO_CASE(EPIPE, "broken pipe");
		ERRNO_CASE(EADDRINUSE, "address already in use");
		ERRNO_CASE(EADDRNOTAVAIL, "address not available");
		ERRNO_CASE(ENETDOWN, "network is down");
		ERRNO_CASE(ENETUNREACH, "network unreachable");
		ERRNO_CASE(EHOSTUNREACH, "host unreachable");
	default:
		return "unknown error";
	}
}
