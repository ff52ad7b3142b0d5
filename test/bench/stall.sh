#!/usr/bin/env bash
# What a stopped process does to gorxe's retransmissions: gorxe write_lat
# between two processes over the udp link (127.0.0.1 and 127.0.0.2 in a
# network namespace of its own), while one side is stopped (SIGSTOP) for
# STOP_MS milliseconds every 100 ms and then continued, as a host that does
# not schedule a process or a VM for a while does. Nothing is lost on the
# way, so every tail-loss probe and go-back is spurious.
#
# The side that was stopped finds its timers due when it runs again; the
# answers they wait for came during the stop and wait on its socket. Its
# timer worker reads the link before it runs timers that fire late
# (rnic's stallLate and Device.catchUp, counted as rx_batches_caught_up),
# so it should probe little. The other side saw its peer fall silent for
# STOP_MS, longer than its probe timeout: it probes and goes back, and
# then finds both answered twice (spurious_probes) and waits longer before
# it probes again, so only the first few stops draw them.
#
# For each round and each side stopped it prints both sides' tail probes,
# those found spurious, go-back-N retransmissions (completer_retry_err),
# caught-up batches, and the client's round trip. Root (a network
# namespace).
#
#   sudo test/bench/stall.sh      ROUNDS=3 ITERS=100000 STOP_MS=20 TEST=write_lat
#
# GORXE_BIN runs that binary instead of one built from the tree, to
# compare two builds.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "stall.sh: needs root (a network namespace)" >&2; exit 1; }
rounds=${ROUNDS:-3} iters=${ITERS:-100000} stop=${STOP_MS:-20} test=${TEST:-write_lat}
# pause SECONDS sleeps in the shell itself, by a read that times out on
# a pipe nothing writes: a stop timed by sleep(1) lasted 27 ms for 20 on
# this machine (its fork and exec), and 40 with an awk started in it.
exec {tick}<> <(:)
pause() { read -r -t "$1" -u "$tick" _ || true; }
stop_s=$(awk -v m="$stop" 'BEGIN { printf "%.3f", m / 1000 }')
tmp=$(mktemp -d)
ns=gxstall$$
trap 'ip netns del $ns 2>/dev/null || true; rm -rf "$tmp"' EXIT
if [ -n "${GORXE_BIN:-}" ]; then cp "$GORXE_BIN" "$tmp/gorxe"; else go build -o "$tmp/gorxe" ./cmd/gorxe; fi
ip netns add $ns
ip -n $ns link set lo up
ip -n $ns addr add 127.0.0.2/8 dev lo

# counter FILE NAME: NAME's value in gorxe's --counters output.
counter() { awk -v k="$2" '$1 == k {v = $2} END {print v + 0}' "$1"; }

# run VICTIM: one run with VICTIM (client or server) stopped now and then.
run() {
	local victim=$1 sp cp pid
	ip netns exec $ns "$tmp/gorxe" "$test" --link udp --ip 127.0.0.1 -p 18600 --counters -s 2 -n "$iters" > "$tmp/server" 2>&1 &
	sp=$!
	sleep 0.5
	ip netns exec $ns "$tmp/gorxe" "$test" --link udp --ip 127.0.0.2 -p 18600 --counters -s 2 -n "$iters" 127.0.0.1 > "$tmp/client" 2>&1 &
	cp=$!
	sleep 0.3
	pid=$cp
	[ "$victim" = server ] && pid=$sp
	while kill -0 $cp 2>/dev/null; do
		pause 0.1
		kill -STOP $pid 2>/dev/null || break
		pause "$stop_s"
		kill -CONT $pid 2>/dev/null || break
	done
	wait $cp
	wait $sp
	printf '%-8s' "$victim"
	for f in client server; do
		printf ' %8s %8s %8s %8s' "$(counter "$tmp/$f" tail_probes)" "$(counter "$tmp/$f" spurious_probes)" "$(counter "$tmp/$f" completer_retry_err)" "$(counter "$tmp/$f" rx_batches_caught_up)"
	done
	awk '/#bytes/ {h = 1; next} h && $1 ~ /^[0-9]+$/ { printf " %9s %9s %9s\n", $5, $8, $4; exit }' "$tmp/client"
}

echo "gorxe $test over udp, $iters round trips, one side stopped ${stop} ms every 100 ms ($(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg))"
printf '%-8s %35s %35s %29s\n' "" "client" "server" "round trip, usec"
printf '%-8s' stopped
for _ in client server; do printf ' %8s %8s %8s %8s' probes spurious go-backs caughtup; done
printf ' %9s %9s %9s\n' typical p99 max
for _ in $(seq "$rounds"); do
	run client
	run server
done
