#!/usr/bin/env bash
# tests/integ/lib.sh itself, through small scripts that source it as the tests do: skip exits
# 77 and fail 1 with their message; the exit status survives the EXIT trap; the script runs from
# the repository root with BUILD from the environment; at exit (a normal one, a failure, set -e
# stopping the script, SIGTERM) the on_exit commands run last first, background jobs are
# stopped (one that ignores SIGTERM too), the temporary folder goes; and, as root, the network
# namespaces of ns_make carry traffic between them and are all gone after.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
tmpdir_make tmp
fail=0
LIB=$PWD/tests/integ/lib.sh

# case NAME BODY: a script sourcing lib.sh, run from / ; its output in $tmp/NAME.out, status in rc
case_run() {
	local name=$1
	printf '#!/usr/bin/env bash\nset -uo pipefail\n. %q\n%s\n' "$LIB" "$2" >"$tmp/$name.sh"
	rc=0
	(cd / && BUILD=${3:-build} timeout 30 bash "$tmp/$name.sh") >"$tmp/$name.out" 2>&1 || rc=$?
}
expect() { # NAME RC PATTERN: the case exited RC and printed a line matching PATTERN
	if [ "$rc" != "$2" ] || { [ -n "$3" ] && ! grep -q -- "$3" "$tmp/$1.out"; }; then
		bad "$1: exit $rc (expected $2), output: $(head -c 400 "$tmp/$1.out")"
	else
		echo "lib_check: $1: exit $rc${3:+, $(grep -m1 -- "$3" "$tmp/$1.out")}"
	fi
}

case_run skip 'skip "no widget here"; echo after'
expect skip 77 '^skip: SKIP: no widget here$'
grep -q after "$tmp/skip.out" && bad "skip: went on after skip"
case_run fail 'fail "it broke"'
expect fail 1 '^fail: FAIL: it broke$'
case_run bad 'fail=0; bad one; bad two; echo "fail=$fail"; exit $fail'
expect bad 1 '^fail=1$'
case_run status 'on_exit "true"; exit 5'
expect status 5 ''
case_run cmd 'require_cmd sh gnuplot-that-is-not'
expect cmd 77 'gnuplot-that-is-not not found (Debian package gnuplot-that-is-not)'
case_run built 'require_built "$BIN/keel-nothing"'
expect built 77 "SKIP: build/bin/keel-nothing not built (make all tests)"
case_run sim 'require_built "$BIN/keel-sim"' /nonexistent
expect sim 77 "keel-sim not built (SimGrid missing: install libsimgrid-dev)"
case_run must 'must_be_built "$BUILD/libkeel.a"' /nonexistent
expect must 1 "FAIL: /nonexistent/libkeel.a missing: build first"
case_run paths 'echo "pwd=$PWD build=$BUILD bin=$BIN test=$TEST"; [ -f tests/integ/lib.sh ]' other
expect paths 0 "^pwd=$PWD build=other bin=other/bin test=paths$"
case_run seed 'seed_init 42; SEED=; unset SEED; seed_init; [ "$SEED" -ge 0 ]'
expect seed 0 '^SEED=42$'

# Cleanup: a folder, two on_exit commands (last first), a job that ignores SIGTERM and one
# that does not; under each way a script ends.
for how in normal fail errexit signal; do
	case $how in
	normal) end='exit 0' want=0 ;;
	fail) end='fail "on purpose"' want=1 ;;
	errexit) end='set -e; false; echo not here' want=1 ;;
	signal) end='kill -TERM $$; sleep 5' want=143 ;;
	esac
	case_run "cleanup-$how" "tmpdir_make t; echo \"tmp=\$t\"; : >\"\$t/x\"
on_exit 'echo first registered'; on_exit 'echo second registered'
sleep 60 & echo \"job=\$!\"
sh -c 'trap \"\" TERM; exec sleep 60' & echo \"deaf=\$!\"
$end"
	expect "cleanup-$how" $want '^second registered$'
	order=$(grep registered "$tmp/cleanup-$how.out" | tr '\n' ' ')
	[ "$order" = "second registered first registered " ] || bad "cleanup-$how: on_exit order: $order"
	t=$(sed -n 's/^tmp=//p' "$tmp/cleanup-$how.out")
	[ -n "$t" ] && [ ! -e "$t" ] || bad "cleanup-$how: temporary folder '$t' left"
	for p in $(sed -n 's/^\(job\|deaf\)=//p' "$tmp/cleanup-$how.out"); do
		! kill -0 "$p" 2>/dev/null || { bad "cleanup-$how: job $p still runs"; kill -9 "$p"; }
	done
done

# Namespaces: two ranks reach each other over the bridge, a pulled cable stops that, nothing
# is left after; a second script at the same time gets names of its own.
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v python3 >/dev/null; then
	case_run netns 'ns_make 2
tmpdir_make t
# rank 1 listens on TCP; rank 0 connects over the bridge, then again with the cable pulled
ns_exec 1 timeout 10 python3 -c "import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((\"\", 7000)); s.listen(1); c, a = s.accept()
print(\"from\", a[0], c.recv(16).decode().strip(), flush=True)" >"$t/server" &
for _ in $(seq 50); do
	ns_exec 0 bash -c "echo hello >/dev/tcp/$(ns_addr 1)/7000" 2>/dev/null && break
	sleep 0.1
done
wait $!
cat "$t/server"
ns_link 1 down
ns_exec 0 timeout 2 bash -c "echo hello >/dev/tcp/$(ns_addr 1)/7000" 2>/dev/null || echo "cable pulled"
echo "names: $(ns_name 0) $(ns_if 0) $(ns_port 0) $NS_BR"
ip netns list | grep -c "^$NS_P" | sed "s/^/made: /"'
	expect netns 0 '^from 10.77.0.1 hello$'
	grep -q '^cable pulled$' "$tmp/netns.out" || bad "netns: ns_link down did not cut the link"
	grep -q '^made: 3$' "$tmp/netns.out" || bad "netns: expected 3 namespaces: $(cat "$tmp/netns.out")"
	p=$(sed -n 's/^names: \([^ ]*\)n0 .*/\1/p' "$tmp/netns.out")
	[ -n "$p" ] && ! ip netns list | grep -q "^$p" || bad "netns: namespaces $p* left behind"
else
	echo "lib_check: namespaces not checked (needs root, iproute2 and python3)"
fi

[ $fail = 0 ] && echo "lib_check: passed"
exit $fail
