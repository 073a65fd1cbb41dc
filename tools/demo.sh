#!/usr/bin/env bash
# The main job (make demo): data-parallel training of a small network on the handwritten
# digits, 4 local ranks over keel; rank 2 is SIGKILLed at training step 1500 and restarted,
# rank 1 stops (SIGSTOP) for half a second at step 4000. The faults come at training steps,
# not at wall-clock times, so they land inside the training on a machine of any speed. The
# survivors notice, re-partition the data and go on; the restarted rank gets the model from a
# live member; the run ends with the accuracy of the same training without failure beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUN="$BUILD/bin/keel-run"
TRAIN="$BUILD/bin/keel-train"
CKPT=$(mktemp -d /tmp/keel-demo-ckpt.XXXXXX)
trap 'rm -rf "$CKPT"' EXIT
cat <<'TXT'
== keel demo: data-parallel training that survives a killed rank and a paused one
   4 ranks (keel-run -n 4) train a 64-32-10 network on 1 438 handwritten 8x8 digits
   (359 held out for testing). Each step, each rank computes gradients on the data shards the
   partitioner gave it, and keel sums them with AllReduce over UDP. Heartbeats every 10 ms.
   At step 1500 (of 10 740), rank 2 is killed with SIGKILL; keel-run starts it again.
   At step 4000, rank 1 stops (SIGSTOP) for 0.5 s: a gray failure, as a swap storm or a
   stop-the-world pause would; it comes back with its old state, learns the others excluded
   it, rejoins and takes the model from a live member.
   Watch for: the survivors detecting each failure within tens of ms and going on with 3
   ranks, ranks 1 and 2 coming back and being sent the model by a live member, and the
   final accuracy matching the run without failure. Checkpoints go to a temporary directory.
TXT
echo
KEEL_HEARTBEAT_US=10000 "$RUN" -n 4 --timeout 120 --restart -- \
	"$TRAIN" --epochs 60 --batch 8 --lr 0.1 --ckpt-dir "$CKPT" --ckpt-every 500 \
	--crash-at 2@1500 --stall-at 1@4000:0.5
