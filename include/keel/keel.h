/* keel: fault-tolerant runtime for distributed training. Includes every header of the runtime
 * (libkeel.a); the start-up library (libkeel_boot.a) is keel/boot.h, and each backend has its
 * own header (keel/transport_udp.h, transport_chaos.h, transport_dpdk.h, transport_verbs.h). */
#ifndef KEEL_KEEL_H
#define KEEL_KEEL_H

#include "keel/checkpoint.h"
#include "keel/collectives.h"
#include "keel/device.h"
#include "keel/errors.h"
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
