#!/usr/bin/env bash
# KEEL_TRACE: keel-train on 3 ranks with checkpoints, rank 2 SIGKILLed at 3.0 s (after the
# detector's 2 s start-up grace, so that the suspicion comes within ~50 ms). Each sample costs
# 40 us more (--compute-us), so training lasts past the kill however fast keel's collectives
# are (~18 000 steps of 8 samples: 5.7 s of compute alone; once they got faster, a quiet
# machine finished before 3 s and the survivors had no failure to trace). Each
# survivor's file must be a JSON array of trace events with the fields Perfetto reads (name,
# ph, ts, pid, tid; dur on complete events), holding its AllReduce spans (bytes, algorithm),
# the suspicion of rank 2, the view of 2 members, and checkpoint writes; the killed rank's file
# must read once closed with "]" (the format allows the missing bracket); the ranks' clocks
# must agree (their first collective within 50 ms of each other). A path that cannot be
# created must stop the start with an error naming KEEL_TRACE.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
TRAIN=$BIN/keel-train
BENCH=$BIN/keel-bench
must_be_built "$BIN/keel-run" "$TRAIN" "$BENCH"
require_digits
require_cmd python3
tmpdir_make tmp

KEEL_TRACE="$tmp/rank%r.json" KEEL_HEARTBEAT_US=10000 run_ranks 3 80 \
	--kill 2@3.0 -- "$TRAIN" --epochs 100 --batch 8 --lr 0.1 --compute-us 40 \
	--ckpt-dir "$tmp/ckpt" --quiet >"$tmp/log" 2>&1 || { cat "$tmp/log"; echo "trace: keel-train failed"; exit 1; }

completed=$(sed -n 's/^keel: view changes.*, completed \([0-9]*\)$/\1/p' "$tmp/log")
[ -n "$completed" ] || { cat "$tmp/log"; echo "trace: no count of completed collectives"; exit 1; }
python3 - "$tmp" "$completed" <<'EOF'
import json, sys
d = sys.argv[1]
completed = int(sys.argv[2])
firsts = {}
suspects = []
for rank in (0, 1, 2):
    text = open(f"{d}/rank{rank}.json").read()
    if rank == 2:
        assert not text.rstrip().endswith("]"), "the killed rank's file was closed"
        text = text.rstrip().rstrip(",") + "]"
    ev = json.loads(text)
    assert isinstance(ev, list) and len(ev) > 4, f"rank {rank}: no events"
    for e in ev:
        for k in ("name", "ph", "pid", "tid"):
            assert k in e, f"rank {rank}: event without {k}: {e}"
        assert e["pid"] == rank, e
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and e["ts"] > 1.5e15, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
    ar = [e for e in ev if e["name"] == "allreduce"]
    assert len(ar) > 50, f"rank {rank}: {len(ar)} allreduce spans"
    assert all(e["ph"] == "X" and e["args"]["bytes"] > 0 and
               e["args"]["algo"] in ("ring", "recursive doubling", "hierarchical")
               for e in ar), ar[0]
    firsts[rank] = min(e["ts"] for e in ar)
    if rank == 0:  # every collective it completed is in its file, the last ones too
        ok = sum(1 for e in ar if e["args"]["status"] == "ok")
        assert ok == completed, f"rank 0: {ok} allreduce spans, {completed} completed"
    if rank == 2:
        continue
    # Each survivor suspects rank 2 itself, unless the coordinator's round (on the other
    # survivor's report) came first; the view of 2 members comes at both.
    sus = [e for e in ev if e["name"] == "suspect rank 2"]
    suspects.extend(sus)
    assert len(sus) <= 1 and all(30000 <= e["args"]["silent_us"] <= 500000 for e in sus), sus
    views = [e for e in ev if e["name"].startswith("view ") and "(2 members)" in e["name"]]
    assert len(views) == 1, views
    ck = [e for e in ev if e["name"] == "checkpoint write"]
    assert len(ck) > 0 and all(e["ph"] == "X" and e["args"]["bytes"] > 0 for e in ck), ck
    assert ev[-1]["name"] == "keel trace end" and ev[-1]["args"]["events_lost"] == 0, ev[-1]
    print(f"trace: rank {rank}: {len(ev)} events, {len(ar)} allreduce, "
          f"{len(ck)} checkpoint writes, suspicion and view of 2 members")
assert len(suspects) >= 1, "no survivor suspected rank 2"
print("trace: rank 2 suspected after %s us of silence" %
      ", ".join(str(e["args"]["silent_us"]) for e in suspects))
spread_us = max(firsts.values()) - min(firsts.values())
assert spread_us < 50000, f"first collectives {spread_us:.0f} us apart: clocks not aligned"
print(f"trace: first collectives within {spread_us:.0f} us across ranks")
EOF

# An unusable path: the start fails and says which variable.
if KEEL_TRACE="$tmp/no/such/dir/t.json" "$BENCH" allreduce -b 8 -e 8 -n 1 >"$tmp/bad" 2>&1; then
	echo "trace: keel-bench started with an unusable KEEL_TRACE"; exit 1
fi
grep -q 'KEEL_TRACE=.*cannot create' "$tmp/bad" ||
	{ cat "$tmp/bad"; echo "trace: no error naming KEEL_TRACE"; exit 1; }
echo "trace: an unusable KEEL_TRACE stops the start with: $(grep -o 'KEEL_TRACE=.*' "$tmp/bad" | head -1)"
echo "trace: passed"
