#!/usr/bin/env bash
# The main job (make demo): data-parallel training of a small network on the handwritten
# digits, 4 local ranks over keel; rank 2 is SIGKILLed a few seconds in and restarted. The
# survivors notice, re-partition the data and go on; the restarted rank gets the model from a
# live member; the run ends with the accuracy of the same training without failure beside it.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUN="$BUILD/bin/keel-run"
TRAIN="$BUILD/bin/keel-train"
CKPT=$(mktemp -d /tmp/keel-demo-ckpt.XXXXXX)
trap 'rm -rf "$CKPT"' EXIT
cat <<'TXT'
== keel demo: data-parallel training that survives a killed rank
   4 ranks (keel-run -n 4) train a 64-32-10 network on 1 438 handwritten 8x8 digits
   (359 held out for testing). Each step, each rank computes gradients on the data shards the
   partitioner gave it, and keel sums them with AllReduce over UDP. Heartbeats every 10 ms.
   At 2 s, keel-run kills rank 2 with SIGKILL, then starts it again (--restart).
   Watch for: the survivors detecting the failure within tens of ms and going on with 3 ranks
   (view 2), rank 2 coming back and being sent the model by a live member (view 3), and the
   final accuracy matching the run without failure. Checkpoints go to a temporary directory.
TXT
echo
KEEL_HEARTBEAT_US=10000 "$RUN" -n 4 --timeout 55 --restart --kill 2@2 -- \
	"$TRAIN" --epochs 60 --batch 8 --lr 0.1 --ckpt-dir "$CKPT" --ckpt-every 500
