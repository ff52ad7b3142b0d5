#!/usr/bin/env bash
# gorxe beside the kernel's soft-RoCE driver (rxe), as a new user would try
# them: between the same two 1-vCPU Debian VMs (test/interop's image, under
# qemu's emulation), each test runs with stock perftest over rxe and then
# with gorxe's own tools over its udp link, on the same address and another
# UDP port (4792). It prints, per test, rxe's figure, gorxe's and their
# ratio: BW average for write_bw, read_bw and send_bw (65536-byte
# messages), t_typical and the 99th percentile for write_lat, read_lat and
# send_lat (2 bytes), all at path MTU 4096; and the retransmissions of each
# run, both sides summed: rxe's completer_retry_err (from its
# hw_counters), and gorxe's go-back-N retransmissions, tail-loss probes,
# local ACK timeouts and probes found spurious (gorxe --counters). Then the floor under a user
# process's latency in these VMs: a UDP ping-pong between two Go programs
# (test/bench/udpraw, sleeping in the runtime's poller), its median and
# 99th percentile round trip, and each read_lat's t_typical and p99 as
# ratios to them (a READ and its response are one datagram each way, as
# the ping-pong's are). Each latency run is captured on the bridge when
# the host has tcpdump, and split into each side's turnaround
# (test/bench/turnaround): the time from the peer's message passing the
# bridge to the answer passing it, which shows on which side a slow round
# trip spent its time. For every run it also prints each VM's CPU
# (busy, and the shares of user, system and softirq time, from /proc/stat)
# and the context switches the VM made, the two things that set a
# user-space transport's cost under the VMs' emulation against rxe's in
# the kernel. Each bandwidth run is captured too, for the time its
# server took to answer the first window: an answer later than the ACK
# timeout (67 ms) is what makes a requester resend in a lossless run.
# Nothing is meant to drop packets
# here, so a retransmission is spurious unless the VMs' UDP receive
# buffers overflowed: the run keeps their counters (net.N) to tell.
#
#   sudo test/bench/vm.sh            (make bench-vm)
#
# BW_ITERS (default 1000) and LAT_ITERS (default 2000) set -n; ROUNDS
# (default 1) repeats the whole sequence in the same VMs, and then prints
# each row's ratios side by side with their median; TESTS (default
# all six) names the tests to run; GORXE_BIN runs that gorxe binary (a
# static one) instead of one built from the tree, to compare two builds;
# GORXE_FLAGS are added to gorxe's command lines (a file named in them is
# in the VM's share, /mnt, left in the run's a/ and b/); GORXE_ENV sets
# gorxe's environment in the VMs (GORXE_ENV=GOMAXPROCS=2); GORXE_LINK=xdp
# runs gorxe over its xdp link on the VMs' eth0 (AF_XDP, an XDP program
# steering UDP 4792 to it) instead of its udp link, and GORXE_LINK=both
# runs each test over both, udp then xdp, the xdp rows marked "(xdp)";
# VM_SYSCTL sets kernel parameters in both VMs (sysctl -w: VM_SYSCTL=
# "net.core.busy_read=50"); VM_THP (always, madvise or never) sets the
# VMs' transparent huge pages (their Debian kernel's default is always). The
# xdp link takes a kernel with AF_XDP multi-buffer for the VMs' 9000-byte
# MTU: VM_SUITE=trixie (Linux 6.12) rather than the default bookworm (6.1). Under emulation
# the run takes about 5 minutes. Both VMs share the machine's CPUs with
# qemu's emulation of the other, so compare ratios from one run, not
# figures across runs. Each run's output, the VMs' consoles and the table
# are left in $GORXE_INTEROP_CACHE/bench-vm (default
# test/interop/cache/bench-vm).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "vm.sh: needs root (qemu, TAP, network namespaces)" >&2; exit 1; }
bw_iters=${BW_ITERS:-1000} lat_iters=${LAT_ITERS:-2000} rounds=${ROUNDS:-1}

. test/interop/lib.sh
vm_image "${VM_SUITE:-bookworm}" # sets img
run=${GORXE_INTEROP_CACHE:-$PWD/test/interop/cache}/bench-vm
rm -rf "$run"; mkdir -p "$run/a" "$run/b"
rev="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo +changes)" # what the binary is built from
# Static, as the VM's Debian need not have the host's C library.
if [ -n "${GORXE_BIN:-}" ]; then
	cp "$GORXE_BIN" "$run/gorxe"
	rev="$GORXE_BIN"
else
	CGO_ENABLED=0 go build -o "$run/gorxe" ./cmd/gorxe
fi
CGO_ENABLED=0 go build -o "$run/udpraw" ./test/bench/udpraw
go build -o "$run/turnaround" ./test/bench/turnaround # runs on the host
for v in a b; do cp "$run/gorxe" "$run/udpraw" "$run/$v/"; done

# The runs: IMPL TEST, rxe and gorxe one after the other for each test,
# then the floor under gorxe's latency: "raw pingpong", a UDP ping-pong
# between two Go processes that sleep in the runtime's poller
# (test/bench/udpraw), one 30-byte datagram each way, as a READ request
# and its response are. A user process's round trip over the VMs' UDP
# sockets costs that much before any transport runs, where rxe's runs in
# the kernel's softirq.
read -ra tests <<<"${TESTS:-write_bw read_bw send_bw write_lat read_lat send_lat}"
impls=(rxe gorxe)
[ "${GORXE_LINK:-udp}" = both ] && impls+=(gorxe-xdp)
runs=()
for _ in $(seq 1 "$rounds"); do
	for t in "${tests[@]}"; do
		for i in "${impls[@]}"; do runs+=("$i $t"); done
	done
	runs+=("raw pingpong")
done

# flags TEST: the flags both implementations get for TEST.
flags() {
	case $1 in
	*_bw) echo "-m 4096 -s 65536 -n $bw_iters" ;;
	*) echo "-m 4096 -s 2 -n $lat_iters" ;;
	esac
}

# vmscript ROLE ADDR: the script VM ROLE (server or client) runs, with
# eth0 at ADDR. Each run N starts when the host creates go.N in its share;
# the server's says ready.N once it listens. For rxe's runs it saves rxe0's
# hw_counters before and after (rxe.N.before, rxe.N.after).
vmscript() {
	local role=$1 addr=$2 n impl t cmd peer="" port link
	[ "$role" = client ] && peer=10.9.0.2
	cat <<-EOF
	echo "=== versions: perftest \$(dpkg-query -W -f='\${Version}' perftest), rdma-core \$(dpkg-query -W -f='\${Version}' rdma-core), kernel \$(uname -r), \$(nproc) CPU"
	if [ $addr != 10.9.0.2 ]; then
		ip addr del 10.9.0.2/24 dev eth0; ip addr del fd09::2/64 dev eth0
		ip addr add $addr/24 dev eth0
	fi
	# rxe's RoCE v2 GID of $addr.
	want=0000:0000:0000:0000:0000:ffff:$(printf '%02x%02x:%02x%02x' ${addr//./ })
	for _ in \$(seq 1 50); do
		gid=\$(for n in \$(seq 0 31); do [ "\$(cat /sys/class/infiniband/rxe0/ports/1/gids/\$n 2>/dev/null)" = \$want ] && [ "\$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/\$n 2>/dev/null)" = "RoCE v2" ] && echo \$n && break; done)
		[ -n "\$gid" ] && break; sleep 0.1
	done
	echo "=== rxe GID index \$gid"
	# The programs run from the VM's own disk, as a user's would: run from
	# the 9p share, each page of their code would be read from the host the
	# first time it runs, under emulation, inside the first run's first
	# round trips.
	cp /mnt/gorxe /mnt/udpraw /usr/local/bin/
	${VM_THP:+echo $VM_THP > /sys/kernel/mm/transparent_hugepage/enabled; echo "=== THP \$(cat /sys/kernel/mm/transparent_hugepage/enabled)"}
	${VM_SYSCTL:+sysctl -w $VM_SYSCTL}
	counters() { for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "\$(basename \$f) \$(cat \$f)"; done; }
	EOF
	for n in "${!runs[@]}"; do
		set -- ${runs[$n]}
		impl=$1 t=$2
		if [ "$impl" = raw ]; then
			port=9001
			if [ "$role" = server ]; then
				cmd="/usr/local/bin/udpraw pong -bye -addr $addr:$port"
			else
				cmd="/usr/local/bin/udpraw ping -addr $peer:$port -size 30 -n $lat_iters"
			fi
		elif [ "$impl" = rxe ]; then
			port=18515
			cmd="ib_$t -d rxe0 -x \$gid -F -p $port $(flags "$t")"
		else
			port=18516
			link="--link udp --ip $addr"
			[ "${GORXE_LINK:-udp}" = xdp ] || [ "$impl" = gorxe-xdp ] && link="--link xdp --dev eth0"
			cmd="env ${GORXE_ENV:-} /usr/local/bin/gorxe $t $link --roce-port 4792 -p $port --give-up 30s --counters $(flags "$t") ${GORXE_FLAGS:-}"
		fi
		echo "while [ ! -f /mnt/go.$n ]; do sleep 0.1; done"
		echo "echo '=== run $n: $impl $t'"
		echo "grep -E '^(cpu|ctxt) ' /proc/stat > /mnt/stat.$n.before"
		[ "$impl" = rxe ] && echo "counters > /mnt/rxe.$n.before"
		if [ "$role" = server ]; then
			echo "timeout 300 $cmd > /mnt/out.$n 2>&1 & pid=\$!"
			echo "for _ in \$(seq 1 300); do ss -ltnun | grep -q ':$port ' && break; sleep 0.1; done; touch /mnt/ready.$n"
			# The ping-pong's server (pong -bye) ends when its client says
			# it is done: a loop that looked for the host's word ten times a
			# second took the one vCPU from it during the run.
			echo "wait \$pid; echo \"=== exit $n \$?\""
		else
			echo "timeout 300 $cmd $peer > /mnt/out.$n 2>&1; echo \"=== exit $n \$?\""
		fi
		echo "grep -E '^(cpu|ctxt) ' /proc/stat > /mnt/stat.$n.after"
		[ "$impl" = rxe ] && echo "counters > /mnt/rxe.$n.after"
		# Where packets were dropped, if they were: the VM's UDP and NIC.
		echo "{ grep Udp: /proc/net/snmp; ip -s link show eth0; } > /mnt/net.$n"
	done
	echo "while [ ! -f /mnt/go.end ]; do sleep 0.2; done"
}
vmscript server 10.9.0.2 > "$run/a/vm.sh"
vmscript client 10.9.0.3 > "$run/b/vm.sh"

ns=gxbenchvm$$
qemus=()
cleanup() {
	for p in "${qemus[@]}"; do kill "$p" 2>/dev/null || true; done
	ip netns del $ns 2>/dev/null || true
}
trap cleanup EXIT
ip netns add $ns
ip -n $ns link set lo up
ip -n $ns link add br0 mtu 9000 type bridge
ip -n $ns addr add 10.9.0.1/24 dev br0
ip -n $ns link set br0 up
for v in a b; do
	ip -n $ns tuntap add tap$v mode tap
	ip -n $ns link set tap$v mtu 9000 master br0 up
done
vm_boot $ns tapa 52:54:00:00:00:02 "$run/a" "$run/console.a.log" & boota=$!
vm_boot $ns tapb 52:54:00:00:00:03 "$run/b" "$run/console.b.log" & bootb=$!
wait $boota && wait $bootb || { echo "vm.sh: a VM did not come up" >&2; exit 1; }
# vm_boot ran in a subshell: find its qemu by the console's path.
for v in a b; do qemus+=("$(pgrep -f "qemu-system-x86_64.*path=$run/$v," | head -1)"); done

# waitfor FILE PATTERN SECONDS: waits until FILE has a line matching PATTERN.
waitfor() {
	local i
	for i in $(seq 1 $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
	return 1
}
for n in "${!runs[@]}"; do
	# Each run of a transport is captured on the bridge (the headers
	# only), for each side's turnaround in a latency run and the server's
	# first answer in a bandwidth run (test/bench/turnaround); in
	# immediate mode, or the packets of the last buffer's timeout would be
	# lost when it is stopped.
	cap=""
	if [[ ${runs[$n]} != raw* ]] && command -v tcpdump >/dev/null; then
		ip netns exec $ns tcpdump -Z root --immediate-mode -i br0 -s 80 -U -w "$run/cap.$n.pcap" 'udp port 4791 or udp port 4792' 2>/dev/null &
		cap=$!
		# It writes the file's header once it listens: a short run
		# started before that would go uncaptured.
		for _ in $(seq 1 50); do [ -s "$run/cap.$n.pcap" ] && break; sleep 0.1; done
	fi
	touch "$run/a/go.$n"
	for _ in $(seq 1 600); do [ -f "$run/a/ready.$n" ] && break; sleep 0.1; done
	touch "$run/b/go.$n"
	waitfor "$run/b/vm.out" "^=== exit $n " 330 || echo "vm.sh: run $n (${runs[$n]}): the client did not finish" >&2
	waitfor "$run/a/vm.out" "^=== exit $n " 30 || echo "vm.sh: run $n (${runs[$n]}): the server did not finish" >&2
	ip -n $ns -s link show > "$run/host-net.$n" # the TAP devices' drops
	if [ -n "$cap" ]; then
		sleep 0.2
		kill "$cap" 2>/dev/null || true
		wait "$cap" 2>/dev/null || true
	fi
	echo "run $n: ${runs[$n]}: client exit $(sed -n "s/^=== exit $n //p" "$run/b/vm.out"), server exit $(sed -n "s/^=== exit $n //p" "$run/a/vm.out")"
done
touch "$run/a/go.end" "$run/b/go.end"
waitfor "$run/console.a.log" "VM DONE" 30 || true
waitfor "$run/console.b.log" "VM DONE" 30 || true

# result N: the figures of run N from the client's output: the BW average,
# or t_typical and the 99th percentile.
result() {
	awk '/#bytes/ {h = 1; next} h && $1 ~ /^[0-9]+$/ {
		if (NF >= 9) print $5, $8; else print $4; exit }' "$run/b/out.$1"
}
# rawresult N: the median and 99th percentile round trip of ping-pong run N.
rawresult() {
	sed -n 's/.*"rtt_median_us":\([0-9.]*\).*"rtt_p99_us":\([0-9.]*\).*/\1 \2/p' "$run/b/out.$1"
}
# counter FILE NAME: the value of NAME in a NAME VALUE file, 0 if absent.
counter() { awk -v k="$2" '$1 == k {v = $2} END {print v + 0}' "$1" 2>/dev/null || echo 0; }
# retx N: run N's retransmissions, both sides.
retx() {
	local impl=${runs[$1]%% *} v s=0 r=0 p=0 to=0 sp=0
	if [ "$impl" = rxe ]; then
		for v in a b; do
			s=$((s + $(counter "$run/$v/rxe.$1.after" completer_retry_err) - $(counter "$run/$v/rxe.$1.before" completer_retry_err)))
		done
		echo "$s"
	else
		for v in a b; do
			r=$((r + $(counter "$run/$v/out.$1" completer_retry_err)))
			p=$((p + $(counter "$run/$v/out.$1" tail_probes)))
			to=$((to + $(counter "$run/$v/out.$1" retransmit_timeouts)))
			sp=$((sp + $(counter "$run/$v/out.$1" spurious_probes)))
		done
		echo "$r/$p/$to/$sp"
	fi
}
# cpuuse V N: VM V's CPU during run N, from its /proc/stat before and
# after: busy% (user%/system%/softirq%), user counting nice, system irq,
# and the context switches the VM made.
cpuuse() {
	cat "$run/$1/stat.$2.before" "$run/$1/stat.$2.after" 2>/dev/null | awk '
		$1 == "cpu" { c++; for (i = 2; i <= 9; i++) v[c, i] = $i }
		$1 == "ctxt" { x[++k] = $2 }
		END {
			if (c != 2) { print "-"; exit }
			for (i = 2; i <= 9; i++) { d[i] = v[2, i] - v[1, i]; t += d[i] }
			if (t <= 0) { print "-"; exit }
			u = d[2] + d[3]; s = d[4] + d[7]; q = d[8]
			printf "%.0f (%.0f/%.0f/%.0f) %d cs", 100 * (t - d[5] - d[6]) / t, 100 * u / t, 100 * s / t, 100 * q / t, x[2] - x[1]
		}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", b / a; else print "-" }'; }

{
	echo "gorxe beside kernel rxe between two 1-vCPU VMs ($(sed -n 's/^=== versions: //p' "$run/a/vm.out"); $(date -u +%Y-%m-%d), $rev)"
	echo "bw: 65536 B x $bw_iters, BW average MB/s; lat: 2 B x $lat_iters, usec; path MTU 4096"
	echo "retransmissions, both sides: rxe completer_retry_err; gorxe go-back-N/tail probes/ACK timeouts/probes found spurious"
	printf '%-22s %10s %10s %10s %8s %10s\n' test rxe gorxe gorxe/rxe "rxe retx" "gorxe retx"
	lx=(- -) lg=(- -)
	declare -A rs=() # each row's gorxe/rxe ratios, a round's each
	labels=()
	row() { # row LABEL RATIO: remembers RATIO under LABEL
		[ -n "${rs[$1]+x}" ] || labels+=("$1")
		rs[$1]+=" $2"
	}
	k=${#impls[@]}
	for ((n = 0; n < ${#runs[@]}; n += k)); do
		t=${runs[$n]#* }
		if [ "$t" = pingpong ]; then
			# gorxe's and rxe's read_lat against the ping-pong of the
			# same round: a READ and its response are one datagram each
			# way, as the ping-pong's are.
			w=($(rawresult $n) - -)
			printf '%-22s %21s\n' "pingpong median" "${w[0]}" "pingpong p99" "${w[1]}"
			printf '%-22s %10s %10s\n' "read_lat / ping-pong" "$(ratio "${w[0]}" "${lx[0]}")/$(ratio "${w[1]}" "${lx[1]}")" "$(ratio "${w[0]}" "${lg[0]}")/$(ratio "${w[1]}" "${lg[1]}")"
			n=$((n - k + 1)) # a run on its own
			continue
		fi
		x=($(result $n) - -)
		for ((j = 1; j < k; j++)); do
			g=($(result $((n + j))) - -) tag=""
			[ $j = 1 ] || tag=" (xdp)"
			[ "$t$tag" = read_lat ] && lx=("${x[@]}") lg=("${g[@]}")
			if [[ $t == *_bw ]]; then
				printf '%-22s %10s %10s %10s %8s %10s\n' "$t BW$tag" "${x[0]}" "${g[0]}" "$(ratio "${x[0]}" "${g[0]}")" "$(retx $n)" "$(retx $((n + j)))"
				row "$t BW$tag" "$(ratio "${x[0]}" "${g[0]}")"
			else
				printf '%-22s %10s %10s %10s %8s %10s\n' "$t t_typical$tag" "${x[0]}" "${g[0]}" "$(ratio "${x[0]}" "${g[0]}")" "$(retx $n)" "$(retx $((n + j)))"
				printf '%-22s %10s %10s %10s\n' "$t p99$tag" "${x[1]}" "${g[1]}" "$(ratio "${x[1]}" "${g[1]}")"
				row "$t t_typical$tag" "$(ratio "${x[0]}" "${g[0]}")"
				row "$t p99$tag" "$(ratio "${x[1]}" "${g[1]}")"
			fi
		done
	done
	# With several rounds, each row's ratios side by side and their
	# median: one round's figures move by half with the host's load.
	if [ "$rounds" -gt 1 ]; then
		echo "gorxe/rxe over the $rounds rounds: each round's, and the median"
		for l in "${labels[@]}"; do
			printf '%-22s %s  median %s\n' "$l" "${rs[$l]# }" "$(tr ' ' '\n' <<<"${rs[$l]}" | grep -E '^[0-9.]+$' | sort -n |
				awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')"
		done
	fi
	# Where each VM's one CPU went during each run: busy (%) and, of the
	# run's time, user, system and softirq (%): whether a side was short
	# of CPU, and whether it spent it in a user process or in the kernel.
	echo "CPU during each run, % of the VM's one CPU: busy (user/system/softirq), and context switches; client, server"
	for ((n = 0; n < ${#runs[@]}; n++)); do
		printf '%-22s %-30s %s\n' "${runs[$n]#* } ${runs[$n]%% *}" "$(cpuuse b $n)" "$(cpuuse a $n)"
	done
	# Where the round trips went: each side's turnaround at the bridge;
	# and how long each bandwidth run's server took to answer its first
	# window, the wait that outlasts an ACK timeout if any does.
	for kind in lat bw; do
		heading="turnaround at the bridge, usec p50/p99/count over 2 ms: client, server" mode=-short
		[ $kind = bw ] && heading="first window at the bridge: the server's first packet, ms after the client's first / client packets before it" mode=-first
		for ((n = 0; n < ${#runs[@]}; n++)); do
			[ -f "$run/cap.$n.pcap" ] && [[ ${runs[$n]} == *_$kind ]] || continue
			[ -n "$heading" ] && echo "$heading" && heading=""
			set -- ${runs[$n]}
			port=4792
			[ "$1" = rxe ] && port=4791
			printf '%-22s %s\n' "$2 $1" "$("$run/turnaround" $mode -port $port -client 10.9.0.3 "$run/cap.$n.pcap" 2>&1)"
		done
	done
} | tee "$run/table.txt"
