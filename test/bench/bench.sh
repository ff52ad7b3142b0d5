#!/usr/bin/env bash
# Measures gorxe against the path it rides on, in one run, on this machine:
# two network namespaces joined by a veth pair (MTU 9000), and a bridge with
# two TAP devices. It prints each gorxe figure beside the raw figure of the
# same path and their ratio:
#
#   write_bw, read_bw  64 KiB messages, path MTU 4096, goodput in MB/s
#                      against raw UDP: 4096-byte datagrams, sendmmsg/recvmmsg;
#                      write_bw also against the same sent 15 at a time with
#                      UDP GSO and read joined (UDP_GRO), as gorxe's udp
#                      link sends and reads runs of packets,
#                      and with DCQCN (the default) against --cc none: what
#                      congestion control costs when nothing is marked (the
#                      median over CC_PAIRS pairs a round, 3 by default, of
#                      the ratio of the two runs of a pair, run back to
#                      back; single runs move by a fifth here)
#   write_lat          2-byte ping-pong round trip (2 x perftest's one-way
#                      t_typical) against a raw UDP ping-pong's median: one
#                      that sleeps in the Go runtime's poller; one that busy
#                      polls its socket, as gorxe's tools busy poll, on a
#                      socket outside the runtime's poller, as gorxe's udp
#                      link's; and one that busy polls and sends a 20-byte
#                      datagram behind each message, as a reliable
#                      connection sends the ACK of the message it answers
#                      (two datagrams each way)
#   write_lat -e       the same with both sides asleep on their CQs
#                      (perftest's -e: WRITE with immediate, CQ.Wait, no
#                      busy polling), against the raw ping-pong that
#                      sleeps in the Go runtime's poller, at the median
#                      and at the 99th percentile, and against the same
#                      with an ACK datagram each way
#   allocs/packet      heap allocations per packet in the gorxe client,
#                      over the whole run, and in the steady state: the
#                      difference from a run a tenth as long
#   raw AF_XDP         the path gorxe's xdp link rides on (test/bench/xskraw:
#                      internal/xsk's rings and internal/xdpprog's program,
#                      steering the RoCE port, with no RoCE work): 64-byte
#                      and 4096-byte Ethernet frames one way, the receiver
#                      busy polling, in packets/s and MB/s of whole
#                      frames, and 4170-byte ones, a RoCE packet's with a
#                      4096-byte payload, which take two descriptors each
#                      way where a 4096-byte frame is sent in one; and a
#                      64-byte frame's ping-pong, busy polling and asleep
#                      in poll(2)
#   gorxe over xdp     if this build has the xdp link (--link xdp --dev
#                      IFACE; otherwise a line says it is not available):
#                      send_bw -s 64 messages/s against raw AF_XDP 64-byte
#                      packets/s and against gorxe over udp; write_bw
#                      (64 KiB, MTU 4096) against raw AF_XDP 4096-byte
#                      frames (and, for information, 4170-byte ones) and
#                      gorxe over udp; write_lat against gorxe
#                      over udp and the raw AF_XDP ping-pong; each ratio
#                      the median of the rounds' (or latency sets') own.
#                      Issue 17's goals, printed beside them: at least 0.8
#                      of raw AF_XDP at both sizes, at least 1.5 times the
#                      udp link's small-message rate, write_lat at most
#                      the udp link's
#
# The veth pair has one queue each way, so that an AF_XDP socket on queue
# 0 sees every frame (XDP_ARGS adds flags to both xdp sides, such as
# "--queue all"). The XDP programs are attached only while a raw AF_XDP
# or xdp run lasts; the udp runs see a veth without one.
#
# Each throughput figure is the median of three rounds. The round trips
# move with the machine's weather from one second to the next (on a
# shared VM, by a half), so they are measured as LAT_PAIRS back-to-back
# sets a round, each the three raw ping-pongs and then gorxe's write_lat
# over both links; a latency ratio is the median of the sets' own ratios,
# so that gorxe is compared with the raw path of the same moment.
# Needs root (namespaces, TAP, XDP).
# Usage: sudo test/bench/bench.sh [SECONDS]   (SECONDS per raw throughput run)
# LAT_ONLY=1 measures the round trips alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
[ "$(id -u)" = 0 ] || { echo "bench.sh: needs root (network namespaces, veth, TAP)" >&2; exit 1; }
command -v jq >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null; }

tmp=$(mktemp -d)
A=gxbenchA$$ B=gxbenchB$$ BR=gxbenchBR$$
cleanup() {
	pkill -f "$tmp/" 2>/dev/null || true
	ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; ip netns del $BR 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/gorxe" ./cmd/gorxe
go build -o "$tmp/udpraw" ./test/bench/udpraw
go build -o "$tmp/xskraw" ./test/bench/xskraw

ip netns add $A; ip netns add $B; ip netns add $BR
for n in $A $B $BR; do ip -n $n link set lo up; done
ip link add va netns $A mtu 9000 numtxqueues 1 numrxqueues 1 type veth peer name vb netns $B mtu 9000 numtxqueues 1 numrxqueues 1
ip -n $A addr add 10.77.0.1/24 dev va; ip -n $A link set va up
ip -n $B addr add 10.77.0.2/24 dev vb; ip -n $B link set vb up
ip -n $BR link add br0 mtu 9000 type bridge; ip -n $BR link set br0 up
inA() { ip netns exec $A "$@"; }
inB() { ip netns exec $B "$@"; }
vb_mac=$(ip -n $B -j link show vb | jq -r '.[0].address')

# raw_blast [-gso N]: MB/s of 4096-byte datagrams sent for secs seconds;
# with -gso the sink reads them as the sender joined them (UDP_GRO), as
# gorxe's udp link reads a peer's runs.
raw_blast() {
	local sinkflags=()
	[ "${1:-}" = -gso ] && sinkflags=(-gro)
	inB "$tmp/udpraw" sink -addr 10.77.0.2:9000 -d "${secs}s" "${sinkflags[@]}" > "$tmp/sink.json" &
	sleep 0.3
	inA "$tmp/udpraw" blast -addr 10.77.0.2:9000 -size 4096 ${1:+"$@"} -d "$((secs + 1))s"
	wait
	jq .MBps "$tmp/sink.json"
}
# raw_ping [-busy] [-ack]: the median and 99th percentile round trips of
# 5000 2-byte ping-pongs.
raw_ping() {
	# Not through inB: $! of a backgrounded function is its subshell,
	# and killing that would leave pong holding the port.
	ip netns exec $B "$tmp/udpraw" pong "$@" -addr 10.77.0.2:9001 & local pong=$!
	sleep 0.3
	inA "$tmp/udpraw" ping "$@" -addr 10.77.0.2:9001 -size 2 -n 5000 | jq -r '"\(.rtt_median_us) \(.rtt_p99_us)"'
	kill $pong; wait $pong 2>/dev/null || true
}

# xsk_blast SIZE: packets/s and MB/s (whole frames) of SIZE-byte
# Ethernet frames sent through AF_XDP for secs seconds, the receiver
# busy polling.
xsk_blast() {
	ip netns exec $B "$tmp/xskraw" sink -dev vb -busy -d "${secs}s" > "$tmp/xsink.json" & local sink=$!
	sleep 0.5
	inA "$tmp/xskraw" blast -dev va -to 10.77.0.2 -mac "$vb_mac" -size "$1" -d "$((secs + 1))s" > /dev/null
	wait $sink
	jq -r '"\(.kpps * 1000) \(.MBps)"' "$tmp/xsink.json"
}
# xsk_ping [-busy]: the median and 99th percentile round trips of 5000
# ping-pongs of a 64-byte frame through AF_XDP, and round trips per second.
xsk_ping() {
	ip netns exec $B "$tmp/xskraw" pong -dev vb "$@" & local pong=$!
	sleep 0.3
	inA "$tmp/xskraw" ping -dev va -to 10.77.0.2 -mac "$vb_mac" -size 64 -n 5000 "$@" |
		jq -r '"\(.rtt_median_us) \(.rtt_p99_us) \(.round_trips_per_s)"'
	kill $pong; wait $pong 2>/dev/null || true
}

# gorxe over a link: run TEST with ARGS as server in $2 and client in $3.
iters_bw=$((secs * 2000))
gorxe_pair() { # link test srvns clins srvargs... -- cliargs...
	local test=$1 sns=$2 cns=$3; shift 3
	local srv=() cli=(); while [ "$1" != -- ]; do srv+=("$1"); shift; done; shift; cli=("$@")
	ip netns exec $sns "$tmp/gorxe" $test "${srv[@]}" > "$tmp/srv.json" &
	local spid=$!
	sleep 0.3
	ip netns exec $cns "$tmp/gorxe" $test "${cli[@]}" > "$tmp/cli.json"
	wait $spid
	cat "$tmp/cli.json"
}
bw_args=(-s 65536 -m 4096 --json)
udp() { gorxe_pair $1 $B $A --link udp --ip 10.77.0.2 "${@:2}" -- --link udp --ip 10.77.0.1 "${@:2}" 10.77.0.2; }
tap() { gorxe_pair $1 $BR $BR --link tap --bridge br0 --link-mtu 9000 --ip 10.78.0.2/24 "${@:2}" -- \
	--link tap --bridge br0 --link-mtu 9000 --ip 10.78.0.1/24 "${@:2}" 127.0.0.1; }
read -ra xdp_extra <<<"${XDP_ARGS:-}"
xdp() { gorxe_pair $1 $B $A --link xdp --dev vb "${xdp_extra[@]}" "${@:2}" -- --link xdp --dev va "${xdp_extra[@]}" "${@:2}" 10.77.0.2; }
# send_bw of 64-byte messages for a message rate: timed (-D), as a
# count long enough on the fastest link would take too long on the others.
msg_args=(-s 64 -D 3 --json)

# Whether AF_XDP works here (a short raw ping-pong), and whether this
# build of gorxe has the xdp link: one without it refuses --link xdp, or
# --dev, at once; one with it fails on the interface that does not exist.
have_xsk=1 have_xdp=
ip netns exec $B "$tmp/xskraw" pong -dev vb & pong=$!
sleep 0.3
if ! why=$(inA "$tmp/xskraw" ping -dev va -to 10.77.0.2 -mac "$vb_mac" -n 10 -wait 5s 2>&1 >/dev/null); then
	have_xsk=
	echo "raw AF_XDP not measured: $why"
fi
kill $pong; wait $pong 2>/dev/null || true
if [ -n "$have_xsk" ]; then
	out=$(inA timeout 10 "$tmp/gorxe" write_bw --link xdp --dev gxbench-none --give-up 2s 10.77.0.2 2>&1 || true)
	if grep -qE "want mem, udp or tap|unrecognized option '--dev'" <<<"$out"; then
		echo "gorxe over xdp: xdp link not available in this build; measuring raw AF_XDP only"
	else
		have_xdp=1
	fi
fi

# Three rounds, each measuring everything in turn, as whatever else the
# machine does moves single runs (the hypervisor's steal time among it).
# res keeps the last round's JSON, for the allocation counts; all keeps
# every figure, and pair.* every latency set's ratios.
pairs=${LAT_PAIRS:-3}
declare -A res all
for round in 1 2 3; do
	for _ in $(seq $pairs); do
		read -r raw raw99 <<<"$(raw_ping)"
		read -r busy _ <<<"$(raw_ping -busy)"
		read -r ack _ <<<"$(raw_ping -busy -ack)"
		read -r sack sack99 <<<"$(raw_ping -ack)"
		all[sack.rtt]+=" $sack" all[sack.p99]+=" $sack99"
		all[raw.rtt]+=" $raw" all[raw.p99]+=" $raw99" all[busy.rtt]+=" $busy" all[ack.rtt]+=" $ack"
		if [ -n "$have_xsk" ]; then
			read -r xsk xsk99 _ <<<"$(xsk_ping)"
			read -r xskbusy _ xskrate <<<"$(xsk_ping -busy)"
			all[xsk.rtt]+=" $xsk" all[xsk.p99]+=" $xsk99" all[xskbusy.rtt]+=" $xskbusy" all[xskbusy.rate]+=" $xskrate"
		fi
		for l in udp tap; do
			res[$l.lat]=$($l write_lat -s 2 -n 5000 --json)
			rtt=$(jq '.t_typical_us * 2' <<<"${res[$l.lat]}")
			all[$l.lat]+=" $rtt"
			[ $l != udp ] || udp_rtt=$rtt
			for b in raw busy ack; do
				all[pair.$l.$b]+=" $(awk -v a="$rtt" -v b="${!b}" 'BEGIN { print a / b }')"
			done
			ev=$($l write_lat -s 2 -n 5000 -e --json)
			read -r evrtt ev99 <<<"$(jq -r '"\(.t_typical_us * 2) \(.p99_us * 2)"' <<<"$ev")"
			all[$l.ev]+=" $evrtt" all[$l.ev99]+=" $ev99"
			all[pair.$l.ev]+=" $(awk -v a="$evrtt" -v b="$raw" 'BEGIN { print a / b }')"
			all[pair.$l.ev99]+=" $(awk -v a="$ev99" -v b="$raw99" 'BEGIN { print a / b }')"
			all[pair.$l.sack]+=" $(awk -v a="$evrtt" -v b="$sack" 'BEGIN { print a / b }')"
			all[pair.$l.sack99]+=" $(awk -v a="$ev99" -v b="$sack99" 'BEGIN { print a / b }')"
		done
		if [ -n "$have_xdp" ]; then
			res[xdp.lat]=$(xdp write_lat -s 2 -n 5000 --json)
			rtt=$(jq '.t_typical_us * 2' <<<"${res[xdp.lat]}")
			all[xdp.lat]+=" $rtt"
			all[pair.xdp.udplat]+=" $(awk -v a="$rtt" -v b="$udp_rtt" 'BEGIN { print a / b }')"
			all[pair.xdp.xskbusy]+=" $(awk -v a="$rtt" -v b="$xskbusy" 'BEGIN { print a / b }')"
			all[pair.xdp.xsk]+=" $(awk -v a="$rtt" -v b="$xsk" 'BEGIN { print a / b }')"
		fi
	done
	[ -z "${LAT_ONLY:-}" ] || continue
	all[raw.bw]+=" $(raw_blast)"
	all[gso.bw]+=" $(raw_blast -gso 15)"
	for l in udp tap; do
		res[$l.read]=$($l read_bw "${bw_args[@]}" -n $iters_bw)
		res[$l.write]=$($l write_bw "${bw_args[@]}" -n $iters_bw)
		w=$(jq .bw_avg_MBps <<<"${res[$l.write]}")
		all[$l.write]+=" $w"
		cc=$w
		for ((k = 0; k < ${CC_PAIRS:-3}; k++)); do
			[ $k = 0 ] || cc=$($l write_bw "${bw_args[@]}" -n $iters_bw | jq .bw_avg_MBps)
			nocc=$($l write_bw "${bw_args[@]}" -n $iters_bw --cc none | jq .bw_avg_MBps)
			all[$l.nocc]+=" $nocc"
			all[pair.$l.cc]+=" $(awk -v a="$cc" -v b="$nocc" 'BEGIN { print a / b }')"
		done
		all[$l.read]+=" $(jq .bw_avg_MBps <<<"${res[$l.read]}")"
		[ $l != udp ] || udp_w=$w
	done
	# The raw AF_XDP rows, and gorxe's small-message rate over udp and
	# xdp; xdp's ratios are each round's, to the raw figures and the
	# udp link's of the same round.
	udp_msg=$(udp send_bw "${msg_args[@]}" | jq '.msg_rate_Mpps * 1e6')
	all[udp.msg]+=" $udp_msg"
	[ -n "$have_xsk" ] || continue
	read -r xsk64 _ <<<"$(xsk_blast 64)"
	read -r xsk4k xsk4kMB <<<"$(xsk_blast 4096)"
	read -r xskroce xskroceMB <<<"$(xsk_blast 4170)"
	all[xsk64.pps]+=" $xsk64" all[xsk4k.pps]+=" $xsk4k" all[xsk4k.bw]+=" $xsk4kMB"
	all[xskroce.pps]+=" $xskroce" all[xskroce.bw]+=" $xskroceMB"
	xsk_how=$(jq -r '"\(.xdp_mode)-mode XDP, \(if .zero_copy then "zero-copy" else "copy" end) sockets"' "$tmp/xsink.json")
	[ -n "$have_xdp" ] || continue
	m=$(xdp send_bw "${msg_args[@]}" | jq '.msg_rate_Mpps * 1e6')
	res[xdp.write]=$(xdp write_bw "${bw_args[@]}" -n $iters_bw)
	w=$(jq .bw_avg_MBps <<<"${res[xdp.write]}")
	all[xdp.msg]+=" $m" all[xdp.write]+=" $w"
	all[pair.xdp.raw64]+=" $(awk -v a="$m" -v b="$xsk64" 'BEGIN { print a / b }')"
	all[pair.xdp.udpmsg]+=" $(awk -v a="$m" -v b="$udp_msg" 'BEGIN { print a / b }')"
	all[pair.xdp.raw4k]+=" $(awk -v a="$w" -v b="$xsk4kMB" 'BEGIN { print a / b }')"
	all[pair.xdp.rawroce]+=" $(awk -v a="$w" -v b="$xskroceMB" 'BEGIN { print a / b }')"
	all[pair.xdp.udpw]+=" $(awk -v a="$w" -v b="$udp_w" 'BEGIN { print a / b }')"
done
if [ -n "${LAT_ONLY:-}" ]; then
	med() { printf '%s\n' ${all[$1]} | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
	echo
	echo "round trips only, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg) at the end; every figure ($pairs sets a round):"
	for k in raw.rtt raw.p99 sack.rtt sack.p99 busy.rtt ack.rtt xsk.rtt xsk.p99 xskbusy.rtt xskbusy.rate udp.lat tap.lat xdp.lat udp.ev udp.ev99 tap.ev tap.ev99; do
		[ -z "${all[$k]:-}" ] || echo "  $k:${all[$k]}"
	done
	printf '%-44s %8s %8s\n' "median of the sets' ratios" udp tap
	printf '%-44s %8.2f %8.2f\n' "write_lat / busy raw ping-pong" "$(med pair.udp.busy)" "$(med pair.tap.busy)"
	printf '%-44s %8.2f %8.2f\n' "write_lat -e / sleeping raw, median" "$(med pair.udp.ev)" "$(med pair.tap.ev)"
	printf '%-44s %8.2f %8.2f\n' "write_lat -e / sleeping raw, p99" "$(med pair.udp.ev99)" "$(med pair.tap.ev99)"
	printf '%-44s %8.2f %8.2f\n' "write_lat -e / sleeping raw with ACKs, median" "$(med pair.udp.sack)" "$(med pair.tap.sack)"
	printf '%-44s %8.2f %8.2f\n' "write_lat -e / sleeping raw with ACKs, p99" "$(med pair.udp.sack99)" "$(med pair.tap.sack99)"
	if [ -n "$have_xdp" ]; then
		printf '%-44s %8.2f  (goal: at most 1)\n' "xdp write_lat / udp write_lat" "$(med pair.xdp.udplat)"
		printf '%-44s %8.2f\n' "xdp write_lat / busy raw AF_XDP ping-pong" "$(med pair.xdp.xskbusy)"
	elif [ -n "$have_xsk" ]; then
		echo "gorxe over xdp: xdp link not available in this build"
	fi
	exit 0
fi
# The allocation counts of a run include its fixed cost (set-up, the
# first packets); the steady state is the difference between the last
# round's runs and runs a tenth as long, per packet of difference.
declare -A short
for l in udp tap; do
	short[$l.write]=$($l write_bw "${bw_args[@]}" -n $((iters_bw / 10)))
	short[$l.read]=$($l read_bw "${bw_args[@]}" -n $((iters_bw / 10)))
	short[$l.lat]=$($l write_lat -s 2 -n 500 --json)
done
steady() { jq -n --argjson a "${res[$1]}" --argjson b "${short[$1]}" '($a.allocs - $b.allocs) / ($a.packets - $b.packets)'; }

# med prints the median of a figure's values (the lower middle one of an
# even count).
med() { printf '%s\n' ${all[$1]} | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
raw_bw=$(med raw.bw) gso_bw=$(med gso.bw) raw_rtt=$(med raw.rtt) raw_p99=$(med raw.p99) busy_rtt=$(med busy.rtt) ack_rtt=$(med ack.rtt)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
pratio() { printf '%.2f' "$(med pair.$1.$2)"; }
echo
echo "gorxe against the raw path, $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d" " -f1-3 /proc/loadavg) at the end"
echo "raw UDP, 4096-byte datagrams, sendmmsg/recvmmsg: $(printf %.0f $raw_bw) MB/s; sent 15 at a time with UDP GSO: $(printf %.0f $gso_bw) MB/s"
echo "raw UDP ping-pong median: $(printf %.1f $raw_rtt) us sleeping in the poller, $(printf %.1f $busy_rtt) us busy polling, $(printf %.1f $ack_rtt) us busy polling with an ACK datagram each way"
echo "every figure (throughput: one a round; round trips: $pairs sets a round):"
for k in raw.bw gso.bw udp.write udp.nocc udp.read tap.write tap.nocc tap.read raw.rtt raw.p99 sack.rtt sack.p99 busy.rtt ack.rtt udp.lat tap.lat udp.ev udp.ev99 tap.ev tap.ev99 \
	xsk64.pps xsk4k.pps xsk4k.bw xskroce.pps xskroce.bw xsk.rtt xsk.p99 xskbusy.rtt xskbusy.rate udp.msg xdp.msg xdp.write xdp.lat; do
	[ -z "${all[$k]:-}" ] || echo "  $k:${all[$k]}"
done
echo "throughput: medians of three rounds; write_lat: median round trip, and the median of each set's ratio to the raw ping-pong of the same set:"
printf '%-28s %12s %12s %8s %12s %8s\n' measure raw "gorxe udp" ratio "gorxe tap" ratio
for m in write read; do
	u=$(med udp.$m) t=$(med tap.$m)
	printf '%-28s %12.0f %12.0f %8s %12.0f %8s\n' "${m}_bw MB/s (64 KiB, MTU 4096)" "$raw_bw" "$u" "$(ratio $u $raw_bw)" "$t" "$(ratio $t $raw_bw)"
done
u=$(med udp.write)
printf '%-28s %12.0f %12.0f %8s\n' "  against raw UDP with GSO" "$gso_bw" "$u" "$(ratio $u $gso_bw)"
# DCQCN's cost, unmarked: the median of the pairs' ratios of write_bw
# (DCQCN on, the default) to the --cc none run right after it.
un=$(med udp.nocc) tn=$(med tap.nocc)
printf '%-28s %12s %12.0f %8s %12.0f %8s\n' "  --cc none: dcqcn/none" - "$un" "$(pratio udp cc)" "$tn" "$(pratio tap cc)"
u=$(med udp.lat) t=$(med tap.lat)
printf '%-28s %12.1f %12.1f %8s %12.1f %8s\n' "write_lat round trip us" "$raw_rtt" "$u" "$(pratio udp raw)" "$t" "$(pratio tap raw)"
printf '%-28s %12.1f %12.1f %8s %12.1f %8s\n' "  against busy-polling raw" "$busy_rtt" "$u" "$(pratio udp busy)" "$t" "$(pratio tap busy)"
printf '%-28s %12.1f %12.1f %8s %12.1f %8s\n' "  ... with an ACK each way" "$ack_rtt" "$u" "$(pratio udp ack)" "$t" "$(pratio tap ack)"
u=$(med udp.ev) t=$(med tap.ev)
printf '%-28s %12.1f %12.1f %8s %12.1f %8s\n' "write_lat -e (sleeping) us" "$raw_rtt" "$u" "$(pratio udp ev)" "$t" "$(pratio tap ev)"
u=$(med udp.ev99) t=$(med tap.ev99)
printf '%-28s %12.1f %12.1f %8s %12.1f %8s\n' "  99th percentile us" "$raw_p99" "$u" "$(pratio udp ev99)" "$t" "$(pratio tap ev99)"
u=$(med udp.ev) t=$(med tap.ev) r=$(med sack.rtt)
printf '%-28s %12.1f %12.1f %8s %12.1f %8s\n' "  ... raw with ACKs each way" "$r" "$u" "$(pratio udp sack)" "$t" "$(pratio tap sack)"
u=$(med udp.ev99) t=$(med tap.ev99) r=$(med sack.p99)
printf '%-28s %12.1f %12.1f %8s %12.1f %8s\n' "  ... its 99th percentile" "$r" "$u" "$(pratio udp sack99)" "$t" "$(pratio tap sack99)"
for m in write read lat; do
	printf '%-28s %12s %12.3f %8s %12.3f\n' "allocs/packet ($m), run" - "$(jq .allocs_per_packet <<<"${res[udp.$m]}")" "" "$(jq .allocs_per_packet <<<"${res[tap.$m]}")"
	printf '%-28s %12s %12.4f %8s %12.4f\n' "  steady state" - "$(steady udp.$m)" "" "$(steady tap.$m)"
done

# gorxe over xdp against raw AF_XDP and gorxe over udp (issue 17).
echo
if [ -z "$have_xsk" ]; then
	echo "raw AF_XDP and gorxe over xdp: not measured (AF_XDP did not work here, above)"
	printf 'gorxe udp send_bw -s 64: %.0f msg/s\n' "$(med udp.msg)"
	exit 0
fi
echo "raw AF_XDP (xskraw: internal/xsk, internal/xdpprog; $xsk_how), receiver busy polling:"
printf '  64-byte frames %.0f packets/s; 4096-byte frames %.0f packets/s, %.0f MB/s; 4170-byte frames %.0f packets/s, %.0f MB/s\n' \
	"$(med xsk64.pps)" "$(med xsk4k.pps)" "$(med xsk4k.bw)" "$(med xskroce.pps)" "$(med xskroce.bw)"
printf '  ping-pong of a 64-byte frame, median: %.1f us busy polling (%.0f round trips/s), %.1f us asleep in poll(2), p99 %.1f us\n' \
	"$(med xskbusy.rtt)" "$(med xskbusy.rate)" "$(med xsk.rtt)" "$(med xsk.p99)"
if [ -z "$have_xdp" ]; then
	printf 'gorxe over xdp: xdp link not available in this build (gorxe over udp, send_bw -s 64: %.0f msg/s)\n' "$(med udp.msg)"
	exit 0
fi
echo "gorxe over xdp: medians; ratios are the medians of each round's (write_lat: each set's) own:"
printf '%-34s %12s %12s %8s %6s %12s %8s %6s\n' measure "raw AF_XDP" "gorxe xdp" ratio goal "gorxe udp" xdp/udp goal
printf '%-34s %12.0f %12.0f %8s %6s %12.0f %8s %6s\n' "send_bw -s 64 msg/s (raw: pkts/s)" "$(med xsk64.pps)" "$(med xdp.msg)" "$(pratio xdp raw64)" ">=0.8" "$(med udp.msg)" "$(pratio xdp udpmsg)" ">=1.5"
printf '%-34s %12.0f %12.0f %8s %6s %12.0f %8s %6s\n' "write_bw MB/s (64 KiB, MTU 4096)" "$(med xsk4k.bw)" "$(med xdp.write)" "$(pratio xdp raw4k)" ">=0.8" "$(med udp.write)" "$(pratio xdp udpw)" -
printf '%-34s %12.0f %12s %8s\n' "  against raw 4170-byte frames" "$(med xskroce.bw)" "" "$(pratio xdp rawroce)"
printf '%-34s %12.1f %12.1f %8s %6s %12.1f %8s %6s\n' "write_lat round trip us (busy raw)" "$(med xskbusy.rtt)" "$(med xdp.lat)" "$(pratio xdp xskbusy)" - "$(med udp.lat)" "$(pratio xdp udplat)" "<=1"
printf '%-34s %12.1f %12s %8s\n' "  against raw asleep in poll(2)" "$(med xsk.rtt)" "" "$(pratio xdp xsk)"
printf '%-34s %12s %12.3f\n' "allocs/packet (write_bw), run" - "$(jq .allocs_per_packet <<<"${res[xdp.write]}")"
