/* keel: fault-tolerant runtime for distributed training. Includes every public header. */
#ifndef KEEL_KEEL_H
#define KEEL_KEEL_H

#include "keel/checkpoint.h"
#include "keel/collectives.h"
#include "keel/errors.h"
#include "keel/limits.h"
#include "keel/node.h"
#include "keel/partition.h"
#include "keel/sched.h"
#include "keel/transport.h"
#include "keel/types.h"

#endif
