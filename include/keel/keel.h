/* keel: fault-tolerant runtime for distributed training. Includes the runtime's own API (16 of
 * the 32 headers); not the start-up library's (keel/boot.h, which includes this one), nor each
 * transport's or device's constructor (keel/transport_udp.h, device_cuda.h, ...): those are
 * included by name (docs/reference/api.md). */
#ifndef KEEL_KEEL_H
#define KEEL_KEEL_H

#include "keel/checkpoint.h"
#include "keel/collectives.h"
#include "keel/device.h"
#include "keel/errors.h"
#include "keel/group.h"
#include "keel/limits.h"
#include "keel/metrics.h"
#include "keel/node.h"
#include "keel/partition.h"
#include "keel/reduce.h"
#include "keel/sched.h"
#include "keel/straggler.h"
#include "keel/trace.h"
#include "keel/transport.h"
#include "keel/types.h"
#include "keel/version.h"

#endif
