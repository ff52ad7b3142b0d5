#!/usr/bin/env bash
# How many instructions gorxe's own code spends per unit of work, counted
# by valgrind's callgrind: a figure that, unlike a time, does not move
# with the machine's load, so that two builds compare in one run each.
# Per round trip of write_lat (2-byte messages, the client, GOMAXPROCS=1
# as in a 1-vCPU VM) and per message of send_bw -s 64 (the client), over
# the udp link between two processes (127.0.0.1 and 127.0.0.2 in a network
# namespace of its own). Each is the difference between a run of N units
# and one of 3N, over 2N: start-up, the exchange and the report drop out.
# The server runs natively and answers at once; the client under
# callgrind runs about 50 times slower, so it finds the peer's packets
# waiting more often than it would, and send_bw's client gets about an
# ACK per message, where at full speed ACKs cover several. It counts user
# space only: the kernel's part of each system call is not in it.
#
#   sudo test/bench/instr.sh        (make bench-instr)   N=2000 TOP=25
#
# GORXE_BIN counts that binary instead of one built from the tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "instr.sh: needs root (a network namespace)" >&2; exit 1; }
if ! command -v valgrind >/dev/null; then
	echo "instr.sh: installing valgrind"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi
n=${N:-2000} top=${TOP:-25}
tmp=$(mktemp -d)
ns=gxinstr$$
trap 'ip netns pids $ns 2>/dev/null | xargs -r kill 2>/dev/null; ip netns del $ns 2>/dev/null || true; rm -rf "$tmp"' EXIT
rev="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo +changes)" # what the binary is built from
if [ -n "${GORXE_BIN:-}" ]; then cp "$GORXE_BIN" "$tmp/gorxe" && rev=$GORXE_BIN; else go build -o "$tmp/gorxe" ./cmd/gorxe; fi
go build -o "$tmp/instrdiff" ./test/bench/instrdiff
ip netns add $ns
ip -n $ns link set lo up
ip -n $ns addr add 127.0.0.2/8 dev lo

# profile TEST ITERS OUT FLAGS...: the client of TEST under callgrind,
# its summary in OUT.
profile() {
	local t=$1 iters=$2 out=$3
	shift 3
	ip netns exec $ns timeout 300 "$tmp/gorxe" "$t" --link udp --ip 127.0.0.1 -n "$iters" --give-up 60s "$@" >"$out.server" 2>&1 &
	local server=$!
	for _ in $(seq 1 50); do ip netns exec $ns ss -ltn | grep -q ':18515 ' && break; sleep 0.1; done
	# cpu.rdtscp=off: the runtime's cputicks reads the clock with RDTSCP
	# where the CPU has it, an instruction valgrind 3.19 (bookworm's) does
	# not know (SIGILL); without it the runtime uses RDTSC.
	ip netns exec $ns env GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off ${GOMAXPROCS_CLIENT:+GOMAXPROCS=$GOMAXPROCS_CLIENT} \
		timeout 600 valgrind --tool=callgrind --callgrind-out-file="$out.cg" \
		"$tmp/gorxe" "$t" --link udp --ip 127.0.0.2 -n "$iters" --give-up 60s "$@" 127.0.0.1 >"$out.client" 2>"$out.valgrind" ||
		{ echo "instr.sh: $t -n $iters under callgrind failed:" >&2; tail -n 5 "$out.client" "$out.valgrind" >&2; exit 1; }
	wait $server || { echo "instr.sh: the $t server failed:" >&2; tail -n 5 "$out.server" >&2; exit 1; }
	callgrind_annotate --auto=no --threshold=100 "$out.cg" >"$out"
}

echo "gorxe's instructions per unit of work, callgrind, user space only ($rev; N=$n)"
echo
echo "== write_lat -s 2 -e, client, per round trip (GOMAXPROCS=1)"
GOMAXPROCS_CLIENT=1 profile write_lat "$n" "$tmp/lat1" -e
GOMAXPROCS_CLIENT=1 profile write_lat $((3 * n)) "$tmp/lat3" -e
"$tmp/instrdiff" -units $((2 * n)) -top "$top" "$tmp/lat1" "$tmp/lat3"
echo
echo "== send_bw -s 64, client, per message"
profile send_bw $((10 * n)) "$tmp/bw1" -s 64
profile send_bw $((30 * n)) "$tmp/bw3" -s 64
"$tmp/instrdiff" -units $((20 * n)) -top "$top" "$tmp/bw1" "$tmp/bw3"
