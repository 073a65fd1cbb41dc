#!/usr/bin/env bash
# /metrics over HTTP on live ranks (KEEL_METRICS_ADDR=HOST:PORT; each rank on PORT + its local
# rank), through the client in metrics_client.py:
#   (a) promtool accepts each rank's text of a 3-rank job, GPU series included (a stand-in
#       libnvidia-ml.so.1, tests/support/nvml_fake.c); a port in use or a bad address stops the
#       start naming the variable; NVML that fails says why, once;
#   (b) a real Prometheus, started here on loopback, scrapes a 3-rank keel-train whose rank 2 is
#       killed: through its query API, each survivor's keel_view_epoch went up, and
#       keel_detection_seconds_count reached 1 on a survivor;
#   (c) garbage, half and over-long requests and 1000 idle connections against every rank while
#       keel-bench checks AllReduce results: results exact, no suspicion, and the endpoint
#       answers a proper GET throughout.
# Skips (exit 77) without promtool and prometheus (Debian package prometheus), python3 or the
# digits data set (python3-sklearn). About 40 s.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
RUN=$BIN/keel-run
BENCH=$BIN/keel-bench
TRAIN=$BIN/keel-train
NVML=$BUILD/tests/nvml
CLIENT=(python3 tests/integ/metrics_client.py)
require_cmd promtool prometheus python3
require_digits
must_be_built "$RUN" "$BENCH" "$TRAIN" "$NVML/libnvidia-ml.so.1"

tmpdir_make tmp
pids=()
fail() { # with the end of every log (not lib.sh's fail)
	echo "metrics: FAIL: $*"
	for f in "$tmp"/*.log; do
		[ -f "$f" ] && { echo "--- $f:"; tail -n 20 "$f"; }
	done
	exit 1
}
# value SERIES FILE: the value of the line starting with SERIES (name{labels}), or "none"
value() { awk -v s="$1" 'index($0, s) == 1 { print $NF; found = 1; exit } END { if (!found) print "none" }' "$2"; }

# ---- (a) promtool on every rank; start-up errors ----
P=$("${CLIENT[@]}" ports 3)
# a job label that needs escaping: a double quote and a backslash
KEEL_METRICS_ADDR=127.0.0.1:$P KEEL_METRICS_JOB='train "a\b' LD_LIBRARY_PATH=$NVML \
	timeout 30 "$RUN" -n 3 --no-key -- \
	"$BENCH" heartbeat --seconds 4 >"$tmp/a.log" 2>&1 &
pids+=($!)
"${CLIENT[@]}" wait "$P" $((P + 1)) $((P + 2)) || fail "(a) the ranks do not serve /metrics"
for r in 0 1 2; do
	f=$tmp/a$r.txt
	"${CLIENT[@]}" get $((P + r)) "$f" || fail "(a) GET /metrics of rank $r"
	promtool check metrics <"$f" || fail "(a) promtool rejects rank $r's text"
	for s in keel_view_epoch keel_waiter_waits_total keel_transport_fallbacks_total \
		keel_metrics_http_connections_total "keel_peer_up{"; do
		grep -q "^$s" "$f" || fail "(a) rank $r: no $s"
	done
	lbl='job="train \"a\\b",rank="' # the label as the text format escapes it
	for s in keel_view_epoch keel_waiter_waits_total; do # the node's, and boot's
		grep -qF "$s{$lbl$r\"} " "$f" || fail "(a) rank $r: $s without its escaped job label"
	done
	[ "$(value "keel_gpu_utilization_ratio{job=" "$f")" = 0.45 ] &&
		grep -q "^keel_gpu_utilization_ratio{.*,gpu=\"1\"} 1$" "$f" &&
		grep -q "^keel_gpu_memory_total_bytes{.*,gpu=\"0\"} 85899345920$" "$f" &&
		grep -q "^keel_gpu_memory_used_bytes{.*,gpu=\"1\"} 2147483648$" "$f" ||
		fail "(a) rank $r: GPU series missing or wrong"
done
echo "metrics: (a) promtool accepts the text of ranks 0..2 ($(wc -l <"$tmp/a0.txt") lines each)"
# rank 0's port is taken: a rank started on it fails, naming the variable
if KEEL_METRICS_ADDR=127.0.0.1:$P timeout 10 "$BENCH" allreduce -b 8 -e 8 -n 1 -w 0 >"$tmp/inuse.log" 2>&1; then
	fail "(a) a rank started on a port in use"
fi
grep -q "KEEL_METRICS_ADDR=127.0.0.1:$P: 127.0.0.1 port $P is in use" "$tmp/inuse.log" ||
	fail "(a) the port in use is not named"
wait "${pids[0]}" || fail "(a) the job failed"
if KEEL_METRICS_ADDR=localhost:9x timeout 10 "$BENCH" allreduce -b 8 -e 8 -n 1 -w 0 >"$tmp/bad.log" 2>&1; then
	fail "(a) a rank started with a bad KEEL_METRICS_ADDR"
fi
grep -q "KEEL_METRICS_ADDR=localhost:9x: expected HOST:PORT" "$tmp/bad.log" ||
	fail "(a) the bad address is not named"
if KEEL_METRICS_ADDR=127.0.0.1:$P KEEL_METRICS_LINGER_MS=2s timeout 10 "$BENCH" allreduce -b 8 -e 8 \
	-n 1 -w 0 >"$tmp/badlinger.log" 2>&1; then
	fail "(a) a rank started with a bad KEEL_METRICS_LINGER_MS"
fi
grep -q "KEEL_METRICS_LINGER_MS='2s': expected a whole number in 0..3600000 (milliseconds)" "$tmp/badlinger.log" ||
	fail "(a) the bad linger is not named"
# With a linger the rank answers after its program is done: here, after keel-bench printed.
KEEL_METRICS_ADDR=127.0.0.1:$P KEEL_METRICS_LINGER_MS=3000 timeout 20 "$BENCH" allreduce -b 8 -e 8 \
	-n 1 -w 0 >"$tmp/linger.log" 2>&1 &
lpid=$!
pids+=($lpid)
for _ in $(seq 50); do grep -q "Avg bus bandwidth" "$tmp/linger.log" && break; sleep 0.1; done
grep -q "Avg bus bandwidth" "$tmp/linger.log" || fail "(a) the lingering rank did not finish its run"
"${CLIENT[@]}" get "$P" "$tmp/linger.txt" || fail "(a) no /metrics while the rank lingers"
grep -q '^keel_view_epoch' "$tmp/linger.txt" || fail "(a) the lingering rank's text lacks the view"
wait "$lpid" || fail "(a) the lingering rank failed"
KEEL_METRICS_ADDR=127.0.0.1:$P LD_LIBRARY_PATH=$NVML KEEL_NVML_FAKE_FAIL=1 timeout 10 \
	"$BENCH" allreduce -b 8 -e 8 -n 1 -w 0 >"$tmp/nvml.log" 2>&1 || fail "(a) a rank whose NVML fails"
[ "$(grep -c "metrics without GPU series: nvmlInit_v2: Driver Not Loaded" "$tmp/nvml.log")" = 1 ] ||
	fail "(a) NVML's failure is not said once"
# No NVML library at all (no NVIDIA driver, as on a machine without a GPU): said once too.
if ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so.1'; then
	KEEL_METRICS_ADDR=127.0.0.1:$P timeout 10 "$BENCH" allreduce -b 8 -e 8 -n 1 -w 0 \
		>"$tmp/nonvml.log" 2>&1 || fail "(a) a rank without NVML"
	[ "$(grep -c "metrics without GPU series: .*(no NVIDIA driver here)" "$tmp/nonvml.log")" = 1 ] ||
		fail "(a) a missing NVML is not said once"
fi
echo "metrics: (a) a port in use and a bad address stop the start; NVML's failure and absence are said once"

# ---- (b) Prometheus scrapes a job that loses a rank ----
P=$("${CLIENT[@]}" ports 3)
Q=$("${CLIENT[@]}" ports 1)
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: keel
    static_configs:
      - targets: ['127.0.0.1:$P', '127.0.0.1:$((P + 1))', '127.0.0.1:$((P + 2))']
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
	--web.listen-address="127.0.0.1:$Q" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
prom=$!
pids+=($prom)
"${CLIENT[@]}" prom-ready "$Q" || fail "(b) Prometheus did not start"
"${CLIENT[@]}" prom-scraping "$Q" 3 || fail "(b) Prometheus does not scrape"
# The survivors linger 2.5 s (2.5 scrape intervals) after training: the kill at 3.0 s may come
# shortly before the end, and without it a survivor was sometimes not scraped again after the
# new view (one run in three here).
KEEL_METRICS_ADDR=127.0.0.1:$P KEEL_METRICS_LINGER_MS=2500 run_ranks 3 50 \
	--kill 2@3.0 -- \
	"$TRAIN" --epochs 400 --batch 8 --lr 0.1 --quiet >"$tmp/train.log" 2>&1 ||
	fail "(b) keel-train failed"
grep -q 'rank 2 killed by signal 9' "$tmp/train.log" || fail "(b) rank 2 was not killed"
query() { "${CLIENT[@]}" query "$Q" "$1" >"$tmp/q.txt" || fail "(b) query $1"; }
# survivors: ranks 0 and 1, their instances. Each installed the new view; the detection is
# counted by whichever suspected rank 2 itself (a survivor may get the view from the other
# before its own detector fires), so at least one of them.
at_least() { # instance value threshold: true when the instance's value is >= threshold
	local v
	v=$(awk -v i="$1" '$1 == i { print $2 }' "$tmp/q.txt")
	[ -n "$v" ] && awk -v v="$v" -v t="$2" 'BEGIN { exit !(v >= t) }'
}
query "max_over_time(keel_view_epoch[5m]) - min_over_time(keel_view_epoch[5m])"
for r in 0 1; do
	at_least "127.0.0.1:$((P + r))" 1 ||
		fail "(b) rank $r's keel_view_epoch did not rise: $(cat "$tmp/q.txt")"
done
query "max_over_time(keel_detection_seconds_count[5m])"
detected=""
for r in 0 1; do
	if at_least "127.0.0.1:$((P + r))" 1; then detected="$detected $r"; fi
done
[ -n "$detected" ] || fail "(b) no survivor counted a detection: $(cat "$tmp/q.txt")"
query 'count_over_time(up{job="keel"}[5m])'
echo "metrics: (b) Prometheus saw both survivors' view epoch rise, and the detection counted" \
	"by rank(s)$detected (scrapes of the 3 targets: $(awk '{ printf "%s ", $2 }' "$tmp/q.txt"))"
kill "$prom"
wait "$prom" 2>/dev/null || true

# ---- (c) attacks on the endpoint while AllReduce runs ----
P=$("${CLIENT[@]}" ports 3)
KEEL_METRICS_ADDR=127.0.0.1:$P timeout 60 "$RUN" -n 3 --timeout 50 -- \
	"$BENCH" allreduce -b 8 -e 1M -n 2000 --check >"$tmp/bench.log" 2>&1 &
bench=$!
pids+=($bench)
"${CLIENT[@]}" wait "$P" $((P + 1)) $((P + 2)) || fail "(c) the ranks do not serve /metrics"
"${CLIENT[@]}" flood 4 "$tmp" "$P" $((P + 1)) $((P + 2)) || fail "(c) the flood"
for r in 0 1 2; do
	f=$tmp/flood-$((P + r)).txt
	for s in keel_suspicions_total keel_false_suspicions_total keel_collectives_failed_total; do
		[ "$(value "$s{" "$f")" = 0 ] || fail "(c) rank $r: $s is $(value "$s{" "$f")"
	done
	ev=$(value 'keel_metrics_http_connections_dropped_total{job=' <(grep 'reason="evicted"' "$f"))
	[ "$ev" != none ] && [ "$ev" -gt 0 ] || fail "(c) rank $r evicted no idle connection"
done
wait "$bench" || fail "(c) keel-bench failed"
grep -q 'Out of bounds values : 0 OK' "$tmp/bench.log" || fail "(c) wrong AllReduce results"
grep -q 'suspicions 0,' "$tmp/bench.log" || fail "(c) a suspicion during the flood"
echo "metrics: (c) AllReduce exact and no suspicion under the flood; the endpoint kept answering"
echo "metrics: ok"
