#!/usr/bin/env bash
# gorxe against the Linux kernel's soft-RoCE driver (rxe) and stock perftest
# and ibv_rc_pingpong, running in a qemu VM built from Debian's packages.
#
#   sudo test/interop/interop.sh            the quick matrix (CI runs it): every
#                                           test, both directions, the tap and
#                                           udp links, both MTUs, every message
#                                           size, IPv4 and IPv6, and 1% loss;
#                                           rc_pingpong both ways over udp; and
#                                           the xdp link: write, read, send,
#                                           atomic and a latency test both ways,
#                                           and 1% loss both ways; UC (-c UC on
#                                           write_bw, send_bw, write_lat and
#                                           send_lat, and uc_pingpong), both ways;
#                                           UD (-c UD on send_bw and send_lat, and
#                                           ud_pingpong), both ways; rdma_cm:
#                                           librdmacm's rping (IPv4, IPv6, and a
#                                           REJ each way; a gorxe server typed
#                                           without an address, reached at its
#                                           IPv4 and its IPv6 address),
#                                           rdma_server/rdma_client,
#                                           rdma_xserver/rdma_xclient (RC),
#                                           ucmatose, udaddy (SIDR) and mckey
#                                           (multicast), both ways;
#                                           qperf's RC tests (-cm1), both ways;
#                                           ibv_srq_pingpong both ways; and
#                                           perftest -R (rdma_cm), also with
#                                           -c UD (SIDR), both ways
#   sudo test/interop/interop.sh --full     every test x direction x link x MTU
#                                           x message size over IPv4 (the xdp
#                                           link at 64 KiB), write and read over
#                                           IPv6, and 1% loss for write, read
#                                           and send, both ways
#   sudo test/interop/interop.sh --flags    perftest's flags that change a run,
#                                           as people type them (-D, -q, -b,
#                                           --run_infinitely, options after the
#                                           server's name, -s 4K, -o,
#                                           --write_with_imm where the VM's
#                                           perftest has it), both directions
#   sudo test/interop/interop.sh --only 3,13  only those cases of the quick
#                                           matrix (or of --full or --flags,
#                                           given first), numbered from 0 in
#                                           the order of the results table;
#                                           they keep their numbers
#   sudo test/interop/interop.sh --suite trixie   the VM from another Debian
#                                           release (default bookworm: perftest
#                                           6.06; trixie has a 6.2x perftest)
#
# GORXE_INTEROP_ITERS=N (5 or more) gives perftest's tests (both sides)
# -n N instead of the matrix's counts (not the timed runs, nor the
# pingpongs').
#
# The VM image is built once per Debian release (debootstrap, a few
# minutes) and cached in $GORXE_INTEROP_CACHE/RELEASE (default
# test/interop/cache). The host side is a
# network namespace with a bridge; the VM's virtio NIC and gorxe's TAP
# device join it, gorxe's udp link uses the bridge's own address, and its
# xdp link a veth whose other end is a port of the bridge. Each
# case runs perftest (or ibv_rc_pingpong) in the VM and gorxe on the host,
# one as server and the other as client; it passes when both exit 0 (and
# ibv_rc_pingpong's -c found no invalid data). A loss case has netem drop 1%
# of what the VM sends. Logs, perftest's output and a capture of every
# case (case.N.pcap, taken with tcpdump on the bridge, so it holds what the
# VM sent after netem dropped some, and all gorxe sent) are left in
# $GORXE_INTEROP_CACHE/last/, with rxe's hw_counters: for each case,
# counters.N.txt, a "name delta" line per counter of
# /sys/class/infiniband/rxe0/ports/1/hw_counters, the change from just
# before the VM's command of the case started to just after it ended (the
# VM dumps them to hw.N.before and hw.N.after in share/); and for each VM,
# counters.vmV.txt, their values when it powered off (cumulative over all
# the cases it ran). What the capture cannot show is in net.N.txt: the
# frames the bridge passed to the VM's TAP that qemu never took
# (vmtap0_tx_dropped, in the capture but not received by rxe), and, in a
# loss case, netem's count of what it dropped (netem_dropped: all the VM
# sent, RoCE, TCP and ARP alike; none of it in the capture).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "interop.sh: needs root (debootstrap, qemu, TAP, namespaces)" >&2; exit 1; }
full=false flags=false only="" suite=bookworm
while [ $# -gt 0 ]; do
	case $1 in
	--full) full=true ;;
	--flags) flags=true ;;
	--only) only=,$2,; shift ;;
	--suite) suite=$2; shift ;;
	*) echo "interop.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

cache=${GORXE_INTEROP_CACHE:-$PWD/test/interop/cache}
. test/interop/lib.sh
vm_image "$suite" # sets img; the image: Debian $suite with rdma-core, perftest and the kernel's rxe

go build -o "$cache/gorxe" ./cmd/gorxe
run=$cache/last
rm -rf "$run"; mkdir -p "$run/share"

# The cases: DIRECTION TEST LINK MTU IP SIZE LOSS [FLAGS]. DIRECTION says
# who is the server: gorxe-server (perftest in the VM is the client) or
# rxe-server. LINK is gorxe's: tap, udp or xdp. LOSS is the percentage of
# the VM's packets netem drops.
# FLAGS, with commas for spaces, are perftest flags both sides get, typed
# the same on both (perftest refuses a flag given twice: the VM's command
# has -d and -F already); "after" puts every option after the server's
# name.
cases=()
# flagcases: perftest's flags that change a run, each both ways over udp.
flagcases=(
	"write_bw 4 65536 -D,3" "send_bw 4 65536 -D,3" "write_lat 4 2 -D,3" "read_bw 4 65536 -D,3"
	"write_bw 4 65536 --run_infinitely,-D,2" "send_bw 4 65536 --run_infinitely,-D,2"
	"write_bw 4 65536 -q,4" "read_bw 4 65536 -q,4" "send_bw 4 65536 -q,4" "atomic_bw:FETCH_AND_ADD 4 8 -q,4"
	"write_bw 4 65536 -b" "read_bw 4 65536 -b" "send_bw 4 65536 -b" "write_bw 4 65536 -q,2,-b"
	"write_bw 4 65536 --report_gbits" "send_bw 4 65536 --report_gbits,-a"
	"write_bw 4 65536 after" "read_lat 4 64 after,-u,14" "write_bw 4 4K -u,16" "read_bw 4 65536 -o,4"
	"send_lat 4 1048576 -a"
)
# --write_with_imm came with perftest 6.20: not in bookworm's 6.06.
[ "$suite" != bookworm ] && flagcases+=("write_bw 4 65536 --write_with_imm" "write_lat 4 2 --write_with_imm" "write_lat 4 1048576 -a,--write_with_imm")
# rdma_cm (after the others, so that their numbers stay): -R on every
# test, with -q, -b and --tos; -z (the exchange over rdma_cm, the QPs
# connected from the keys).
flagcases+=(
	"write_bw 4 65536 -R" "read_bw 4 65536 -R" "send_bw 4 65536 -R" "atomic_bw:FETCH_AND_ADD 4 8 -R"
	"write_lat 4 64 -R" "read_lat 4 64 -R" "send_lat 4 64 -R" "atomic_lat:CMP_AND_SWAP 4 8 -R"
	"write_bw 4 65536 -R,-q,4" "send_bw 4 65536 -R,-b,-q,2" "read_bw 4 65536 -R,--tos,32" "write_bw 4 65536 -z" "send_lat 4 64 -z"
	"send_bw 4 1024 -R,-c,UD,-q,2" "send_lat 4 64 -R,-c,UD" "send_bw 4 1024 -R,-c,UD,-b,--tos,32"
)
# The rate limiter (SW by name; --rate_limit alone, HW, falls back to SW
# on RoCE), the verifier, the reports' extras, --latency_gap and -R's
# --retry_count (after the others, so that their numbers stay).
flagcases+=(
	"write_bw 4 65536 --rate_limit,1,--rate_limit_type,SW,--burst_size,16" "send_bw 4 65536 --rate_limit,10"
	"read_bw 4 65536 --rate_limit,100,--rate_units,M,--rate_limit_type,SW" "write_bw 4 65536 -w,1"
	"write_bw 4 65536 -b,--report-both" "send_bw 4 65536 -D,3,--cpu_util" "write_lat 4 2 --latency_gap,50"
	"write_bw 4 65536 -W,hw_counters/sent_pkts" "write_bw 4 65536 -R,--retry_count,3"
)
# --use-srq: the receiving side's QPs on one shared receive queue. The UD
# case has one QP: with -q 2 the SRQ holds receives for half the messages,
# and a perftest server whose reposting falls behind a fast sender loses
# some (rxe drops a UD message that finds no receive) and waits for them
# forever (seen against 6.06: 392 of 400). Then --recv_post_list (4096-byte
# messages: -n 200, a multiple of the list).
flagcases+=(
	"send_bw 4 65536 --use-srq,-q,4" "send_bw 4 65536 --use-srq,-b" "send_lat 4 64 --use-srq" "send_bw 4 1024 --use-srq,-c,UD"
	"send_bw 4 4096 --recv_post_list,8"
)
# --flow_label: each QP's UDP source port, from its label. perftest 6.24
# puts it in the address vector and rxe's RC QPs send from its port
# (58177 for 74565, trixie's capture); 6.06 ignores the flag, and rxe's
# UD QPs keep their QPN's port. One label: the VMs' perftests take no
# list.
flagcases+=("write_bw 4 65536 --flow_label,74565,-q,2" "send_bw 4 1024 --flow_label,7,-c,UD")
# --reversed: the sides swap their parts in the test (the side that
# listens sends), the exchange keeps its direction.
flagcases+=("write_bw 4 65536 --reversed" "send_bw 4 65536 --reversed" "read_bw 4 65536 --reversed,-q,2" "read_lat 4 64 --reversed")
if $flags; then
	for c in "${flagcases[@]}"; do
		set -- $c
		for dir in rxe-server gorxe-server; do cases+=("$dir $1 udp 1024 4 $3 0 $4"); done
	done
elif ! $full; then
	# The quick matrix keeps a few of them.
	cases+=("rxe-server write_bw udp 1024 4 65536 0 -D,3" "gorxe-server send_bw udp 1024 4 65536 0 -q,2,-b"
		"rxe-server read_bw udp 4096 4 65536 0 after,-q,2,--report_gbits" "gorxe-server write_bw udp 1024 4 4K 0")
fi
tests=(write_bw read_bw send_bw atomic_bw:FETCH_AND_ADD atomic_bw:CMP_AND_SWAP write_lat read_lat send_lat atomic_lat:CMP_AND_SWAP)
sizes=(1 64 4096 65536 1048576)
if $flags; then
	: # only flagcases
elif $full; then
	for dir in rxe-server gorxe-server; do for t in "${tests[@]}"; do for l in tap udp; do for m in 1024 4096; do
		if [[ ${t%%:*} == atomic_* ]]; then
			cases+=("$dir $t $l $m 4 8 0")
		else
			for s in "${sizes[@]}"; do cases+=("$dir $t $l $m 4 $s 0"); done
		fi
	done; done; done; done
	for dir in rxe-server gorxe-server; do for t in write_bw read_bw; do for l in tap udp; do
		cases+=("$dir $t $l 1024 6 65536 0")
	done; done; done
	for dir in rxe-server gorxe-server; do for t in write_bw read_bw send_bw; do for l in tap udp; do
		cases+=("$dir $t $l 4096 4 65536 1")
	done; done; done
else
	# Links and MTUs alternate, and sizes rotate, so that each appears
	# with each direction.
	i=0 k=0
	for dir in rxe-server gorxe-server; do for t in "${tests[@]}"; do
		l=$([ $((i % 2)) = 0 ] && echo tap || echo udp)
		m=$([ $((i / 2 % 2)) = 0 ] && echo 1024 || echo 4096)
		s=8
		if [[ ${t%%:*} != atomic_* ]]; then s=${sizes[$((k % 5))]}; k=$((k + 1)); fi
		cases+=("$dir $t $l $m 4 $s 0")
		i=$((i + 1))
	done; done
	cases+=("rxe-server write_bw tap 4096 6 65536 0" "gorxe-server read_bw udp 1024 6 4096 0")
	cases+=("rxe-server write_bw udp 4096 4 65536 1" "gorxe-server write_bw tap 1024 4 65536 1"
		"rxe-server read_bw tap 1024 4 65536 1" "gorxe-server read_bw udp 4096 4 65536 1"
		"rxe-server send_bw udp 1024 4 65536 1" "gorxe-server send_bw tap 4096 4 65536 1")
fi
# rdma-core's ibv_rc_pingpong (ibverbs-utils) against gorxe rc_pingpong,
# both ways, with -c: the default message size and a larger one.
$flags || cases+=("gorxe-server rc_pingpong udp 1024 4 4096 0" "rxe-server rc_pingpong udp 1024 4 4096 0"
	"gorxe-server rc_pingpong udp 4096 4 65536 0" "rxe-server rc_pingpong udp 4096 4 65536 0")
# The xdp link (AF_XDP on a veth whose other end is a port of the
# bridge), after the others so that their numbers stay.
if ! $flags && ! $full; then
	# Write, read, send, an atomic and a latency test in each
	# direction, the MTUs alternating, the sizes rotating, send_bw over
	# IPv6; then 1% loss both ways.
	i=0 k=0
	for dir in rxe-server gorxe-server; do
		for t in write_bw read_bw send_bw "$([ $dir = rxe-server ] && echo atomic_bw:FETCH_AND_ADD || echo atomic_bw:CMP_AND_SWAP)" \
			"$([ $dir = rxe-server ] && echo write_lat || echo read_lat)"; do
			m=$([ $((i % 2)) = 0 ] && echo 1024 || echo 4096)
			s=8
			if [[ ${t%%:*} != atomic_* ]]; then s=${sizes[$((k % 5))]}; k=$((k + 1)); fi
			ip=4; [ "$t" = send_bw ] && ip=6
			cases+=("$dir $t xdp $m $ip $s 0")
			i=$((i + 1))
		done
	done
	cases+=("rxe-server read_bw xdp 4096 4 65536 1" "gorxe-server write_bw xdp 1024 4 65536 1")
elif $full; then
	# The xdp link: every test both ways at both MTUs at 64 KiB, write
	# and read over IPv6, and the loss cases.
	for dir in rxe-server gorxe-server; do for t in "${tests[@]}"; do for m in 1024 4096; do
		s=65536; [[ ${t%%:*} == atomic_* ]] && s=8
		cases+=("$dir $t xdp $m 4 $s 0")
	done; done; done
	for dir in rxe-server gorxe-server; do for t in write_bw read_bw; do cases+=("$dir $t xdp 1024 6 65536 0"); done; done
	for dir in rxe-server gorxe-server; do for t in write_bw read_bw send_bw; do cases+=("$dir $t xdp 4096 4 65536 1"); done; done
fi
# UC queue pairs, after the others so that their numbers stay: perftest's
# -c UC on the four tests that take it, and ibv_uc_pingpong, both ways
# over udp. Small messages: UC does not retransmit what rxe under
# emulation might drop.
if ! $flags && ! $full; then
	for dir in rxe-server gorxe-server; do
		for t in write_bw send_bw; do cases+=("$dir $t udp 1024 4 4096 0 -c,UC"); done
		for t in write_lat send_lat; do cases+=("$dir $t udp 1024 4 64 0 -c,UC"); done
		cases+=("$dir uc_pingpong udp 1024 4 4096 0")
	done
fi
# The connection manager: librdmacm's rping (rdmacm-utils) against gorxe
# rping, both ways, IPv4 and IPv6, 100 pings checked (-V) and printed
# (-v); and a connection to a port nobody listens on (rping-rej), which
# the side without a listener rejects (REJ, reason 8) within seconds.
if ! $flags && ! $full; then
	for dir in rxe-server gorxe-server; do
		cases+=("$dir rping udp 1024 4 64 0" "$dir rping udp 1024 6 4000 0" "$dir rping-rej udp 1024 4 64 0")
	done
	# librdmacm's rdma_server/rdma_client (one 16-byte SEND each way) and
	# ucmatose (two connections, ten 100-byte SENDs each way on each).
	for dir in rxe-server gorxe-server; do
		cases+=("$dir rdma_cm udp 1024 4 16 0" "$dir ucmatose udp 1024 4 100 0")
	done
	# udaddy: UD QPs found with SIDR (rdma_cm's UDP port space).
	for dir in rxe-server gorxe-server; do cases+=("$dir udaddy udp 1024 4 100 0"); done
fi
# UD queue pairs: perftest's -c UD on send_bw and send_lat, and
# ibv_ud_pingpong (-c), both ways over udp, messages of at most the MTU.
if ! $flags && ! $full; then
	for dir in rxe-server gorxe-server; do
		cases+=("$dir send_bw udp 1024 4 1024 0 -c,UD" "$dir send_lat udp 1024 4 64 0 -c,UD" "$dir ud_pingpong udp 1024 4 1024 0")
	done
fi
# Shared receive queues: rdma-core's ibv_srq_pingpong against gorxe
# srq_pingpong, both ways over udp: 16 QPs a side (-q's default) on one
# SRQ, 256 addresses each way, -c (the server checks).
if ! $flags && ! $full; then
	for dir in rxe-server gorxe-server; do cases+=("$dir srq_pingpong udp 1024 4 4096 0"); done
fi
# perftest -R: the exchange and the test QPs over rdma_cm.
if ! $flags && ! $full; then
	cases+=("rxe-server write_bw udp 1024 4 65536 0 -R" "gorxe-server send_bw udp 1024 4 65536 0 -R,-q,2"
		"rxe-server read_lat udp 1024 4 64 0 -R" "gorxe-server atomic_bw:FETCH_AND_ADD udp 1024 4 8 0 -R")
fi
# perftest -R with -c UD: the UD QPs resolved with SIDR in rdma_cm's UDP
# port space (Q_Key 0x01234567); with send_lat and -b the client sends its
# QPN to the server over UD.
if ! $flags && ! $full; then
	for dir in rxe-server gorxe-server; do
		cases+=("$dir send_bw udp 1024 4 1024 0 -R,-c,UD,-q,2" "$dir send_lat udp 1024 4 64 0 -R,-c,UD"
			"$dir send_bw udp 1024 4 1024 0 -R,-c,UD,-b")
	done
fi
# qperf's RC tests over rdma_cm (-cm1), and two of its socket tests, stock
# qperf against gorxe qperf, both ways, 2 s each; the client's quit then
# ends the server. Last, so that the numbers of the cases before them stay.
if ! $flags && ! $full; then
	for dir in rxe-server gorxe-server; do
		for t in rc_bw rc_rdma_write_bw rc_rdma_read_lat rc_rdma_write_poll_lat ver_rc_compare_swap tcp_lat udp_bw; do
			cases+=("$dir qperf:$t udp 1024 4 0 0")
		done
	done
fi
# librdmacm's mckey: UD SENDs to an IPv4 multicast group that rdma_cm
# joined (IGMP), both ways over udp: the receiver has two QPs in the
# group, and each gets every one of the sender's messages. Stock mckey
# posts its sends unsignaled and destroys its QP at once, and rxe 6.12
# sent only the first of ten before the QP went: it sends one. After
# qperf's, so that the numbers before them stay.
if ! $flags && ! $full; then
	for dir in rxe-server gorxe-server; do cases+=("$dir mckey udp 1024 4 100 0"); done
	# librdmacm's rdma_xserver/rdma_xclient over RC (their -c r): one
	# 16-byte SEND from the client, the server's REP carrying its SRQ
	# number (0), then both disconnect.
	for dir in rxe-server gorxe-server; do cases+=("$dir rdma_x udp 1024 4 16 0"); done
	# librdmacm's cmtime: 10 connections made and ended, timed. Since
	# rdma-core 52 (trixie) the two sides sync over TCP through a warm-up,
	# a test with QPs and one without (REQs naming made-up QP numbers),
	# and both exit; before (bookworm) the client makes its connections
	# once and the server serves until it is stopped.
	for dir in rxe-server gorxe-server; do cases+=("$dir cmtime udp 1024 4 0 0"); done
	# librdmacm's rstream: a byte stream over rsockets, RDMA WRITEs with
	# immediate into the peer's buffer and credits back, the data
	# verified (-T v): 64 KiB transfers, 100 each way, 4 rounds (the
	# buffers' halves given back many times), and 64-byte ping-pongs,
	# 2000 rounds (credits alone, zero-length writes).
	for dir in rxe-server gorxe-server; do cases+=("$dir rstream:65536,100,4 udp 1024 4 65536 0" "$dir rstream:64,1,2000 udp 1024 4 64 0"); done
	# librdmacm's riostream: rstream's transfers as riowrites, plain RDMA
	# WRITEs into memory each side maps (riomap) and names in the peer's
	# iomap table, the round's last marked in its last byte, which the
	# peer watches; the same sizes.
	for dir in rxe-server gorxe-server; do cases+=("$dir riostream:65536,100,4 udp 1024 4 65536 0" "$dir riostream:64,1,2000 udp 1024 4 64 0"); done
	# librdmacm's rcopy: a file of 3000001 random bytes copied over
	# rsockets to the other side's server, which writes it where the
	# client names it, in the share; the host compares the two.
	for dir in rxe-server gorxe-server; do cases+=("$dir rcopy udp 1024 4 3000001 0"); done
	# librdmacm's udpong (datagram rsockets) is not here: the stock one
	# cannot run on rxe, even against itself in the VM (rconnect fails
	# with ENOENT, rdma-core 44 and 56), so gorxe's is tested against
	# itself (test/rping_test.go).
	# perftest's --reversed, both ways: the side that listens sends.
	cases+=("gorxe-server write_bw udp 1024 4 65536 0 --reversed" "rxe-server send_bw udp 1024 4 65536 0 --reversed")
	# Link-local GIDs (IP column "fe80"): -x 0 on both sides, each side's
	# default GID, fe80:: from its MAC, over the tap link, whose table is
	# laid out as rxe's (0 link-local, 1 --ip), and the xdp link, whose
	# GIDs are gxx0's.
	cases+=("rxe-server write_bw tap 1024 ll 65536 0" "gorxe-server send_lat tap 4096 ll 64 0" "rxe-server read_bw xdp 4096 ll 65536 0")
	# A gorxe rping server typed without an address (rping-any) listens on
	# every address of the interface the default route leaves by (br0),
	# as rdma_cm does on rxe0's: the VM's rping reaches it at 10.9.0.1,
	# the udp link's first address, and at fd09::1, one of its further
	# sockets (udp.Config.Also).
	cases+=("gorxe-server rping-any udp 1024 4 64 0" "gorxe-server rping-any udp 1024 6 4000 0")
	# The same for rdma_server (reached at 10.9.0.1) and ucmatose's
	# server (at fd09::1), typed without --ip.
	cases+=("gorxe-server rdma_cm-any udp 1024 4 16 0" "gorxe-server ucmatose-any udp 1024 6 100 0")
	# And perftest's servers typed without --ip (IP column "any"): over
	# rdma_cm (-R), and over the TCP exchange, where the key message
	# carries the GID gorxe chose (br0's 10.9.0.1); the VM's client
	# reaches it at 10.9.0.1.
	cases+=("gorxe-server write_bw udp 1024 any 65536 0 -R" "gorxe-server send_lat udp 1024 any 64 0")
	# Both sides asleep on their CQs (-e): gorxe's answer and the ACK
	# behind it leave as one UDP GSO datagram (link.Joiner), which the
	# host's or the VM's kernel cuts for rxe.
	for dir in rxe-server gorxe-server; do cases+=("$dir send_lat udp 1024 4 64 0 -e"); done
fi
# rstream's own tests, verified: latency then bandwidth on a second
# connection, 64 B to 1 MiB. About 100 s each in bookworm's VM (130 to
# 150 in trixie's), so in the full matrix only. riostream's are not
# here: its 64_lat alone (100000 round trips, the stock side spinning on
# its memory on the VM's one CPU) took 130 s against gorxe.
if $full; then
	for dir in rxe-server gorxe-server; do cases+=("$dir rstream:default udp 1024 4 0 0"); done
fi
# --only takes the other cases out and leaves these their numbers, so that
# case.N.pcap, counters.N.txt and gorxe.N.out are named as in the full
# list.
if [ -n "$only" ]; then
	for i in "${!cases[@]}"; do [[ $only == *,$i,* ]] || unset "cases[$i]"; done
fi

ns=gxinterop$$
cleanup() {
	pkill -f "$cache/gorxe" 2>/dev/null || true
	pkill -f "qemu-system-x86_64.*$run" 2>/dev/null || true
	ip netns del $ns 2>/dev/null || true
}
trap cleanup EXIT
ip netns add $ns
ip -n $ns link set lo up
ip -n $ns link add br0 mtu 9000 type bridge
# A fixed MAC: a bridge otherwise takes the lowest of its ports', and changes
# it when a gorxe TAP with a lower one comes and goes, leaving the VM with a
# stale ARP entry for 10.9.0.1 (the udp link's address).
ip -n $ns link set br0 address 02:00:0a:09:00:01
ip -n $ns addr add 10.9.0.1/24 dev br0
ip -n $ns addr add fd09::1/64 dev br0 nodad
ip -n $ns link set br0 up
ip -n $ns tuntap add vmtap0 mode tap
ip -n $ns link set vmtap0 mtu 9000 master br0 up
# The xdp link's interface: a veth, gxx0, with the host's addresses
# 10.9.0.3 and fd09::3; its other end is a port of br0. veth has one
# queue each way unless told; two make the link's default (--queue all)
# bind two sockets, with flows spread over them by the bridge's transmit
# hash. A fixed MAC, as the bridge's: the VM keeps its neighbour entries.
ip -n $ns link add gxx0 address 02:00:0a:09:00:03 mtu 9000 numtxqueues 2 numrxqueues 2 type veth \
	peer name gxx0br mtu 9000 numtxqueues 2 numrxqueues 2
ip -n $ns link set gxx0br master br0 up
ip -n $ns addr add 10.9.0.3/24 dev gxx0
ip -n $ns addr add fd09::3/64 dev gxx0 nodad
ip -n $ns link set gxx0 up
# br0 and gxx0 are both on 10.9.0.0/24, and by default Linux answers ARP
# for any of its addresses on any interface: the VM's request for
# 10.9.0.3 would be answered by br0 too, and for 10.9.0.1 by gxx0. Each
# answers for its own only (IPv6's neighbour discovery does so anyway),
# and asks from its own address.
ip netns exec $ns sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
# The default route leaves by br0, as a host's by its main interface: a
# gorxe server typed without an address takes that interface's addresses
# (rping-any, rdma_cm-any, ucmatose-any, and perftest's in the IP column
# "any"). Nothing is sent beyond 10.9.0.0/24 and fd09::/64.
ip -n $ns route add default dev br0

# perftest's flags and gorxe's, for a case: few iterations of large
# messages, as rxe under emulation moves some 16 MB/s. rc_pingpong's at
# its default size (4096) leave -s out, and check the buffers (-c).
# GORXE_INTEROP_ITERS sets perftest's -n (both sides') for every case that
# has one, e.g. for small captures of the loss cases.
args() { # test size [flags]
	local t=${1%%:*} a=${1#*:} n=200 bytes=$2 s=$2
	case $s in *K) bytes=$((${s%K} * 1024)) ;; esac
	[ "$bytes" -ge 65536 ] && n=50
	[ "$bytes" -ge 1048576 ] && n=20
	[ -n "${GORXE_INTEROP_ITERS:-}" ] && n=$GORXE_INTEROP_ITERS
	case ,${3:-}, in *,-D,*) n="" ;; esac # a timed run: no -n
	case $t in
	atomic_bw | atomic_lat) echo "${n:+-n $n} -A $a" ;;
	rc_pingpong | srq_pingpong) [ "$s" = 4096 ] && echo "-n 200 -c" || echo "-n 200 -c -s $s" ;;
	uc_pingpong) [ "$s" = 4096 ] && echo "-n 200" || echo "-n 200 -s $s" ;; # ibv_uc_pingpong has no -c
	ud_pingpong) [ "$s" = 1024 ] && echo "-n 200 -c" || echo "-n 200 -c -s $s" ;;
	*) echo "${n:+-n $n} -s $s" ;;
	esac
}

# flagsof FLAGS: a case's perftest flags, without "after" (printf: echo
# would take a lone -e for an option of its own).
flagsof() { local f=${1:-}; f=${f//after/}; printf "%s\n" "${f//,/ }"; }

# infinite FLAGS: whether the case runs --run_infinitely: its client is
# stopped after 8 s, and passes with two reports or more printed; its
# server then ends by itself, or runs on (perftest's send_bw server prints
# zeros until stopped) and is stopped 14 s after it started.
infinite() { case ,${1:-}, in *,--run_infinitely,*) return 0 ;; esac; return 1; }

# cmdline PEER OPTIONS FLAGS: the options and the peer's name in the order
# the case types them.
cmdline() {
	case ,${3:-}, in
	*,after,*) echo "$1 $2" ;;
	*) echo "$2 $1" ;;
	esac
}

# reports FILE: how many result lines a perftest table in FILE has.
reports() { grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+' "$1" 2>/dev/null || true; }

# cmcase TEST: whether a case runs one of librdmacm's tools, which
# connect with rdma_cm and take options of their own. TOOL-any is TOOL's
# case with gorxe's server typed without an address (host_cm).
cmcase() { case ${1%-any} in rping | rping-rej | rdma_cm | rdma_x | ucmatose | udaddy | mckey | cmtime | rstream:* | riostream:* | rcopy | qperf:*) return 0 ;; esac; return 1; }

# listener TEST LINK FLAGS: how the host tells that its gorxe server takes
# clients, for the VM's client to start then rather than 2 s on: "tcp" (a
# TCP listener in the namespace: perftest's exchange, the pingpongs',
# qperf's), "udp" (the udp link's socket on the RoCE port: gorxe's rdma_cm
# listens a moment after its link binds), or "" (no sign to read: a tap
# link's rdma_cm, and mckey, whose receiver must have joined its group).
listener() {
	case $1 in qperf:*) echo tcp; return ;; mckey) return ;; esac
	if cmcase "$1" || [[ ,$3, == *,-R,* || ,$3, == *,-z,* ]]; then
		[ "$2" = udp ] && echo udp
		return
	fi
	echo tcp
}

# listening N KIND: touches listening.N in the share once the host's gorxe
# server shows the sign of KIND (listener), or after 2 s; the VM's client
# waits for it, 2 s at most.
listening() {
	local n=$1 kind=$2 _
	for _ in $(seq 1 40); do
		case $kind in
		tcp) ip netns exec $ns ss -Hltn | grep -q . && break ;;
		udp) ip netns exec $ns ss -Hlun "sport = :4791" | grep -q . && { sleep 0.2; break; } ;;
		*) sleep 2; break ;;
		esac
		sleep 0.05
	done
	touch "$run/share/listening.$n"
}

# rstreamargs TEST: rstream's (or riostream's) options for an
# rstream:SIZE,COUNT,ITERS (riostream:...) case.
rstreamargs() {
	local a=${1#*:}
	if [ "$a" = default ]; then
		echo "-T v"
		return
	fi
	IFS=, read -r size count iters <<<"$a"
	echo "-S $size -C $count -I $iters -T v"
}

# vm_cm DIRECTION TEST IP SIZE: the VM's command for an rdma_cm case. As
# server it listens on its own address (rping-rej: nothing listens, and
# the VM waits); as client it connects to gorxe's, or (rping-rej) to a
# port gorxe's connection manager has no listener on.
vm_cm() {
	local own=10.9.0.2 gx=10.9.0.1
	[ "$3" = 6 ] && own=fd09::2 gx=fd09::1
	case $1/${2%-any} in
	rxe-server/rping) echo "rping -s -a $own -v -S $4" ;;
	gorxe-server/rping) echo "rping -c -a $gx -C 100 -v -V -S $4" ;;
	rxe-server/rping-rej) echo "sleep 8" ;;
	gorxe-server/rping-rej) echo "rping -c -a $gx -p 7175 -C 1" ;;
	rxe-server/rdma_cm) echo "rdma_server" ;;
	gorxe-server/rdma_cm) echo "rdma_client -s $gx" ;;
	rxe-server/rdma_x) echo "rdma_xserver -c r" ;;
	gorxe-server/rdma_x) echo "rdma_xclient -s $gx -c r" ;;
	rxe-server/ucmatose) echo "ucmatose -c 2 -S $4" ;;
	gorxe-server/ucmatose) echo "ucmatose -s $gx -c 2 -S $4" ;;
	rxe-server/udaddy) echo "udaddy -c 2 -S $4" ;;
	gorxe-server/udaddy) echo "udaddy -s $gx -c 2 -S $4" ;;
	rxe-server/mckey) echo "mckey -m 239.0.9.1 -b $own -c 2 -S $4" ;;
	gorxe-server/mckey) echo "mckey -m 239.0.9.1 -b $own -s -C 1 -S $4" ;;
	rxe-server/qperf:*) echo "qperf" ;;
	gorxe-server/qperf:*) echo "qperf $gx -cm1 -t 2 ${2#qperf:} quit" ;;
	rxe-server/cmtime) echo "timeout -s INT 15 cmtime -b $own -c 10" ;; # before rdma-core 52 it serves on
	gorxe-server/cmtime) echo "cmtime -s $gx -c 10" ;;
	rxe-server/rcopy) echo "timeout -s INT 12 rcopy" ;; # it serves until stopped
	gorxe-server/rcopy) echo "rcopy /tmp/rcopy.src.$n $gx:$run/share/rcopy.dst.$n" ;;
	rxe-server/rstream:* | rxe-server/riostream:*) echo "${2%%:*} -b $own $(rstreamargs "$2")" ;;
	gorxe-server/rstream:* | gorxe-server/riostream:*) echo "${2%%:*} -s $gx $(rstreamargs "$2")" ;;
	esac
}

# host_cm DIRECTION TEST IP SIZE: gorxe's command line (after the binary)
# for an rdma_cm case. A TOOL-any server is given no address (-a, --ip):
# it listens on every address of br0's.
host_cm() {
	local own=10.9.0.1 vm=10.9.0.2
	[ "$3" = 6 ] && own=fd09::1 vm=fd09::2
	local a="-a $own" ip="--ip $own" # a gorxe server's address
	[[ $2 == *-any ]] && a="" ip=""
	case $1/${2%-any} in
	rxe-server/rping) echo "rping -c -a $vm -C 100 -v -V -S $4 --ip $own" ;;
	gorxe-server/rping) echo "rping -s $a -v -S $4" ;;
	rxe-server/rping-rej) echo "rping -c -a $vm -C 1 --ip $own" ;;
	gorxe-server/rping-rej) echo "rping -s $a" ;;
	rxe-server/rdma_cm) echo "rdma_client -s $vm --ip $own" ;;
	gorxe-server/rdma_cm) echo "rdma_server $ip" ;;
	rxe-server/rdma_x) echo "rdma_xclient -s $vm -c r --ip $own" ;;
	gorxe-server/rdma_x) echo "rdma_xserver $ip" ;;
	rxe-server/ucmatose) echo "ucmatose -s $vm -c 2 -S $4 --ip $own" ;;
	gorxe-server/ucmatose) echo "ucmatose -c 2 -S $4 $ip" ;;
	rxe-server/udaddy) echo "udaddy -s $vm -c 2 -S $4 --ip $own" ;;
	gorxe-server/udaddy) echo "udaddy -c 2 -S $4 $ip" ;;
	rxe-server/mckey) echo "mckey -m 239.0.9.1 -s -S $4 --ip $own" ;;
	gorxe-server/mckey) echo "mckey -m 239.0.9.1 -c 2 -C 1 -S $4 $ip" ;;
	rxe-server/qperf:*) echo "qperf $vm -cm1 -t 2 ${2#qperf:} quit" ;;
	gorxe-server/qperf:*) echo "qperf" ;;
	rxe-server/cmtime) echo "cmtime -s $vm -c 10 --ip $own" ;;
	gorxe-server/cmtime) echo "cmtime -b $own -c 10" ;;
	rxe-server/rcopy) echo "rcopy $run/share/rcopy.src.$n $vm:/tmp/rcopy.dst.$n --ip $own" ;;
	gorxe-server/rcopy) echo "rcopy $ip" ;;
	rxe-server/rstream:* | rxe-server/riostream:*) echo "${2%%:*} -s $vm $(rstreamargs "$2") --ip $own" ;;
	gorxe-server/rstream:* | gorxe-server/riostream:*) echo "${2%%:*} -b $own $(rstreamargs "$2")" ;;
	esac
}

# vmcmd TEST: the command the VM runs for a test, before its flags.
vmcmd() {
	case ${1%%:*} in
	rc_pingpong) echo "ibv_rc_pingpong -d rxe0" ;;
	uc_pingpong) echo "ibv_uc_pingpong -d rxe0" ;;
	ud_pingpong) echo "ibv_ud_pingpong -d rxe0" ;;
	srq_pingpong) echo "ibv_srq_pingpong -d rxe0" ;;
	*) echo "ib_${1%%:*} -d rxe0 -F" ;;
	esac
}

# caseline VERDICT CASE TEXT: a case's line in the table, TEXT after the
# columns that describe the case.
caseline() {
	set -- "$1" "$3" ${cases[$2]} # VERDICT TEXT DIRECTION TEST LINK MTU IP SIZE LOSS [FLAGS]
	local lossnote="" fl=${10:-} ipcol="IPv$7"
	[ "$9" != 0 ] && lossnote="loss $9%"
	[ "$7" = ll ] && ipcol=fe80 # link-local, GID 0 on both sides
	[ "$7" = any ] && ipcol=any # gorxe's server given no address; IPv4
	printf '%-4s %-13s %-24s %-4s %-5s %-4s %8s %-8s %s' "$1" "$3" "$4" "$5" "$6" "$ipcol" "$8" "$lossnote" "${fl:+${fl//,/ }  }$2"
}

# vm_answers: whether the VM's kernel still answers ping on the bridge.
vm_answers() { ip netns exec $ns ping -c 3 -i 0.5 -W 2 -q 10.9.0.2 > /dev/null 2>&1; }

# session N CASE...: boots VM number N and runs the given cases (indices
# into cases) in it, setting line[CASE] and failed[CASE]. The VM's script
# runs each case's perftest in order, each after the previous one's gorxe
# side is done (the host writes go.CASE to let it start, so that servers
# are up before clients connect, and go.end to stop).
declare -A line failed
dead=false # the last session's VM stopped answering ping
session() {
	local vm=$1; shift
	local list=("$@") n i=0
	dead=false
	rm -f "$run/share"/go.* "$run/share"/started.* "$run/share"/listening.* "$run/share"/hw.* "$run/share"/netem.* "$run/share/vm.out"
	{
		echo 'echo "=== versions: perftest $(dpkg-query -W -f="\${Version}" perftest) ($(ib_write_bw --version 2>&1 | head -1)), rdma-core $(dpkg-query -W -f="\${Version}" rdma-core), kernel $(uname -r)"'
		# rxe's counters, "name value" a line, in two processes: a loop
		# of basename and cat took the emulated CPU a second a call.
		echo 'hw() { grep -H . /sys/class/infiniband/rxe0/ports/1/hw_counters/* | sed "s|.*/||; s/:/ /"; }'
		echo 'gid6=$(for n in $(seq 0 31); do [ "$(cat /sys/class/infiniband/rxe0/ports/1/gids/$n 2>/dev/null)" = "fd09:0000:0000:0000:0000:0000:0000:0002" ] && [ "$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$n 2>/dev/null)" = "RoCE v2" ] && echo $n && break; done)'
		for n in "${list[@]}"; do
			set -- ${cases[$n]}
			local dir=$1 t=$2 l=$3 m=$4 ip=$5 size=$6 loss=$7 fl=${8:-}
			local x=-x; [[ $t == *_pingpong ]] && x=-g
			local mtu="-m $m"; [ "$t" = ud_pingpong ] && mtu="" # ibv_ud_pingpong has no -m
			local gid="$x 1"; [ "$ip" = 6 ] && gid="$x \$gid6"
			[ "$ip" = ll ] && gid="$x 0" # eth0's default GID
			local peer=""; [ "$dir" = gorxe-server ] && peer=$([ "$l" = xdp ] && echo 10.9.0.3 || echo 10.9.0.1)
			local stop="timeout -k 10 120"
			if infinite "$fl"; then
				stop="timeout -k 10 -s INT 8" # the client
				[ "$dir" = rxe-server ] && stop="timeout -k 10 -s INT 14"
			fi
			# rstream's own tests take about 100 s in bookworm's VM and
			# 130 to 150 in trixie's, slower.
			[ "$t" = rstream:default ] && stop="timeout -k 10 300"
			local opts="$(cmdline "$peer" "$gid $mtu $(args "$t" "$size" "$fl") $(flagsof "$fl")" "$fl")"
			local vmc="$(vmcmd "$t") $opts"
			cmcase "$t" && vmc=$(vm_cm "$dir" "$t" "$ip" "$size")
			echo "while [ ! -f /mnt/go.$n ]; do sleep 0.2; done"
			# rcopy maps its files, which the share's (9p) cannot be:
			# they go through the VM's /tmp.
			[ "$t" = rcopy ] && echo "cp /mnt/rcopy.src.$n /tmp/ 2>/dev/null"
			[ "$loss" != 0 ] && echo "tc qdisc add dev eth0 root netem loss $loss%"
			# gorxe's server must be listening: the host says when it is.
			[ "$dir" = gorxe-server ] && echo "i=0; while [ ! -f /mnt/listening.$n ] && [ \$i -lt 20 ]; do sleep 0.1; i=\$((i+1)); done"
			echo "echo \"=== case $n: $vmc (\$(grep MemAvailable /proc/meminfo))\""
			# rxe's counters just before and just after the command
			# (the host writes their difference to counters.N.txt),
			# and what netem dropped, of all the VM sent (net.N.txt).
			# The newline ends a last line a stopped perftest left open.
			local after="hw > /mnt/hw.$n.after"
			[ "$loss" != 0 ] && after="$after; tc -s qdisc show dev eth0 | sed -n 's/.*(dropped \([0-9]*\),.*/netem_dropped \1/p' > /mnt/netem.$n"
			[ "$t" = rcopy ] && after="$after; cp /tmp/rcopy.dst.$n /mnt/ 2>/dev/null"
			echo "hw > /mnt/hw.$n.before"
			echo "touch /mnt/started.$n" # the host's client waits for this
			# and for this, 2 s at most: the VM's server listening, on a
			# TCP port (perftest, the pingpongs, qperf) or in rdma_cm.
			[ "$dir" = rxe-server ] && echo "(i=0; while [ \$i -lt 20 ]; do if ss -Hltn 2>/dev/null | grep -q . || rdma res show cm_id 2>/dev/null | grep -q LISTEN; then touch /mnt/listening.$n; break; fi; sleep 0.1; i=\$((i+1)); done) &"
			echo "$stop $vmc; rc=\$?; $after; echo; echo \"=== exit $n \$rc\""
			[ "$loss" != 0 ] && echo "tc qdisc del dev eth0 root"
		done
		echo "while [ ! -f /mnt/go.end ]; do sleep 0.2; done"
	} > "$run/share/vm.sh"

	local log=$run/vm.$vm.log
	vm_boot $ns vmtap0 52:54:00:00:00:02 "$run/share" "$log" || exit 1
	local qemu=$vm_pid

	for n in "${list[@]}"; do
		set -- ${cases[$n]}
		local dir=$1 t=$2 l=$3 m=$4 ip=$5 size=$6 loss=$7 fl=${8:-} link
		case $l/$ip in
		tap/4) link="--link tap --bridge br0 --link-mtu 9000 --tap gxi$n --ip 10.9.0.5/24" ;;
		tap/6) link="--link tap --bridge br0 --link-mtu 9000 --tap gxi$n --ip fd09::5/64" ;;
		tap/ll) link="--link tap --bridge br0 --link-mtu 9000 --tap gxi$n --ip 10.9.0.5/24 -x 0" ;;
		udp/4) link="--link udp --ip 10.9.0.1" ;;
		udp/6) link="--link udp --ip fd09::1" ;;
		udp/any) link="--link udp" ;; # br0's addresses, the default route's
		# The xdp link's GIDs are gxx0's; --counters leaves the sockets'
		# and the XDP program's counters in gorxe.N.out.
		xdp/4) link="--link xdp --dev gxx0 --counters" ;;
		xdp/6) link="--link xdp --dev gxx0 --ipv6 --counters" ;;
		xdp/ll) link="--link xdp --dev gxx0 --counters -x 0" ;;
		esac
		local peer=""; [ "$dir" = rxe-server ] && peer=10.9.0.2
		# Immediate mode rings hold whole frames of the largest size
		# (br0 offloads: 64 KiB), 32 in tcpdump's default 2 MiB, and a
		# burst of more than that lost packets from the capture (not
		# from the wire); 128 MiB hold 2000. tcpdump's count of what it
		# captured and the kernel dropped is in case.N.tcpdump.
		ip netns exec $ns tcpdump -i br0 -s 0 -B 131072 --immediate-mode -U -w "$run/case.$n.pcap" udp port 4791 > "$run/case.$n.tcpdump" 2>&1 &
		local dump=$!
		for _ in $(seq 1 25); do grep -q "listening on" "$run/case.$n.tcpdump" && break; sleep 0.02; done
		local tapdrop0
		tapdrop0=$(ip netns exec $ns cat /sys/class/net/vmtap0/statistics/tx_dropped)
		[ "$t" = rcopy ] && head -c "$size" /dev/urandom > "$run/share/rcopy.src.$n"
		touch "$run/share/go.$n"
		if [ "$dir" = rxe-server ]; then
			# The VM's server must be listening. The VM sees go.N within
			# 0.2 s and reads rxe's counters before it starts the
			# server, which on a loaded host took more than 2 s: wait for
			# the VM to start it, then until it listens, 2 s at most (a
			# client too early gets REJ 28 from rdma_cm, or no answer).
			for _ in $(seq 1 150); do [ -f "$run/share/started.$n" ] && break; sleep 0.2; done
			for _ in $(seq 1 20); do [ -f "$run/share/listening.$n" ] && break; sleep 0.1; done
		fi
		[ "$dir" = gorxe-server ] && [ "$loss" != 0 ] && sleep 1 # netem goes on first
		local ready=""
		if [ "$dir" = gorxe-server ]; then
			listening "$n" "$(listener "$t" "$l" "$fl")" &
			ready=$!
		fi
		set +e
		# rc_pingpong's -g as on rxe: br0's table, and the tap link
		# device's, have the default GID (fe80:: from the MAC) at 0 and
		# 10.9.0.1 at 1.
		local gidx=""; [[ $t == *_pingpong ]] && gidx="-g 1"
		local mtu="-m $m"; [ "$t" = ud_pingpong ] && mtu=""
		local stop="timeout -k 10 150"
		if infinite "$fl"; then
			stop="timeout -k 10 -s INT 8" # the client
			[ "$dir" = gorxe-server ] && stop="timeout -k 10 -s INT 14"
		fi
		[ "$t" = rstream:default ] && stop="timeout -k 10 330" # the VM's, 300, runs out first
		if cmcase "$t"; then
			[ "$t/$dir" = rping-rej/gorxe-server ] && stop="timeout -k 10 20" # it listens on, unasked
			[ "$t/$dir" = cmtime/gorxe-server ] && stop="timeout -k 10 20" # an older cmtime's client syncs nothing
			[ "$t/$dir" = rcopy/gorxe-server ] && stop="timeout -k 10 -s INT 10" # it serves until stopped
			ip netns exec $ns $stop "$cache/gorxe" $(host_cm "$dir" "$t" "$ip" "$size") > "$run/gorxe.$n.out" 2>&1
		else
			ip netns exec $ns $stop "$cache/gorxe" ${t%%:*} $(cmdline "$peer" "$link $gidx $mtu $(args "$t" "$size" "$fl") $(flagsof "$fl") --give-up 30s" "$fl") > "$run/gorxe.$n.out" 2>&1
		fi
		local g=$?
		set -e
		[ -n "$ready" ] && wait $ready 2>/dev/null || true
		for _ in $(seq 1 300); do grep -q "=== exit $n " "$run/share/vm.out" 2>/dev/null && break; sleep 0.1; done
		sleep 0.5; kill $dump 2>/dev/null || true
		wait $dump 2>/dev/null || true
		# rxe's hw_counters: each one's change during the case (not
		# lifespan, the directory's cache time in ms, not a counter).
		if [ -f "$run/share/hw.$n.before" ] && [ -f "$run/share/hw.$n.after" ]; then
			awk 'NR == FNR { b[$1] = $2; next } $1 != "lifespan" { print $1, $2 - b[$1] }' \
				"$run/share/hw.$n.before" "$run/share/hw.$n.after" > "$run/counters.$n.txt"
		fi
		# What the capture holds and the peer never got: frames the
		# bridge gave the VM's TAP that qemu did not take (the TAP's
		# queue was full); and, in a loss case, what netem dropped of
		# all the VM sent (RoCE, and TCP and ARP), which the capture
		# does not hold.
		{
			echo "vmtap0_tx_dropped $(($(ip netns exec $ns cat /sys/class/net/vmtap0/statistics/tx_dropped) - tapdrop0))"
			cat "$run/share/netem.$n" 2>/dev/null || true
		} > "$run/net.$n.txt"
		local p verdict=pass note=""
		p=$(sed -n "s/^=== exit $n \([0-9]*\)$/\1/p" "$run/share/vm.out" 2>/dev/null)
		if infinite "$fl"; then
			# The client runs until it is stopped (status 124, its
			# reports printed); the server then ends by itself, with 0
			# or perftest's 1 for a client that went away, or is
			# stopped (124).
			local cs=$g cout="$run/gorxe.$n.out" ss=${p:-x}
			if [ "$dir" = gorxe-server ]; then
				cs=${p:-x} ss=$g
				sed -n "/^=== case $n:/,/^=== exit $n /p" "$run/share/vm.out" > "$run/perftest.$n.out"
				cout="$run/perftest.$n.out"
			fi
			{ [ "$cs" = 124 ] && [ "$(reports "$cout")" -ge 2 ] && { [ "$ss" = 0 ] || [ "$ss" = 1 ] || [ "$ss" = 124 ]; }; } || verdict=FAIL
		elif [ "$t" = rping-rej ]; then
			# The side that dialled fails with the REJ's reason 8
			# ("invalid service ID"), within seconds; gorxe's server
			# listens on until stopped (124).
			local vmout
			vmout=$(sed -n "/^=== case $n:/,/^=== exit $n /p" "$run/share/vm.out")
			if [ "$dir" = rxe-server ]; then
				{ [ "$g" = 1 ] && grep -q "invalid service ID (8)" "$run/gorxe.$n.out"; } || verdict=FAIL
			else
				{ [ "$g" = 124 ] && [ "${p:-0}" != 0 ] && grep -q "REJECTED, error 8" <<<"$vmout"; } || verdict=FAIL
			fi
		elif [ "$t" = rcopy ]; then
			# The client copies the file and exits 0, its figure
			# printed; the server serves on until it is stopped (124);
			# the copy is the file, byte for byte.
			local cs=$g ss=${p:-x} cout="$run/gorxe.$n.out"
			if [ "$dir" = gorxe-server ]; then
				cs=${p:-x} ss=$g
				sed -n "/^=== case $n:/,/^=== exit $n /p" "$run/share/vm.out" > "$run/rcopy.$n.out"
				cout="$run/rcopy.$n.out"
			fi
			{ [ "$cs" = 0 ] && [ "$ss" = 124 ] && grep -q "^$size bytes in " "$cout" && cmp -s "$run/share/rcopy.src.$n" "$run/share/rcopy.dst.$n"; } || verdict=FAIL
		elif [ "$t" = cmtime ]; then
			# A client that printed the test without QPs synced with
			# its server (rdma-core 52 and later, and gorxe): both
			# exit 0, the server having printed its tests. One of an
			# older cmtime's dialect made its connections once (its
			# table's "connect" row), and its server served on until
			# it was stopped (124); every connection must have been
			# made ("event: ..., error" says one was not).
			local cout sout cs=$g ss=${p:-x}
			cout=$(cat "$run/gorxe.$n.out") sout=$(sed -n "/^=== case $n:/,/^=== exit $n /p" "$run/share/vm.out")
			if [ "$dir" = gorxe-server ]; then
				cs=${p:-x} ss=$g sout=$cout cout=$(sed -n "/^=== case $n:/,/^=== exit $n /p" "$run/share/vm.out")
			fi
			if grep -q "^Connect (10) test - no QPs" <<<"$cout"; then
				{ [ "$cs" = 0 ] && [ "$ss" = 0 ] && grep -q "^Accept (10) test - no QPs" <<<"$sout"; } || verdict=FAIL
			else
				{ [ "$cs" = 0 ] && [ "$ss" = 124 ] && grep -qE "^connect +:" <<<"$cout" && ! grep -q "error" <<<"$cout"; } || verdict=FAIL
			fi
		else
			{ [ "$g" = 0 ] && [ "${p:-x}" = 0 ]; } || verdict=FAIL
		fi
		# The C programs' last lines say how they ended, on both sides.
		local end=""
		case ${t%-any} in rdma_cm | rdma_x) end="end 0" ;; ucmatose | udaddy | mckey) end="return status 0" ;; esac
		if [ -n "$end" ] && [ $verdict = pass ]; then
			local ends
			ends=$(cat "$run/gorxe.$n.out" <(sed -n "/^=== case $n:/,/^=== exit $n /p" "$run/share/vm.out") | grep -c "$end" || true)
			[ "$ends" = 2 ] || verdict=FAIL note=" ($ends lines with '$end', want one each side)"
		fi
		# rping prints a line a ping (-v) on each side.
		if [ "${t%-any}" = rping ] && [ $verdict = pass ]; then
			local pings
			pings=$(cat "$run/gorxe.$n.out" <(sed -n "/^=== case $n:/,/^=== exit $n /p" "$run/share/vm.out") | grep -c "ping data: rdma-ping-" || true)
			[ "$pings" = 200 ] || verdict=FAIL note=" ($pings ping lines, want 100 each side)"
		fi
		# rstream (and riostream) prints a line a test on both sides: its
		# custom test's, or its eight (64_lat ... 1m_bw).
		if [[ $t == rstream:* || $t == riostream:* ]] && [ $verdict = pass ]; then
			local rows want=2
			[ "${t#*:}" = default ] && want=16
			rows=$(cat "$run/gorxe.$n.out" <(sed -n "/^=== case $n:/,/^=== exit $n /p" "$run/share/vm.out") | grep -cE '^(custom|[0-9]+[km]?_(lat|bw)) +[0-9.]+[km]? +[0-9.]+k? +[0-9.]+k? ' || true)
			[ "$rows" = "$want" ] || verdict=FAIL note=" ($rows lines of tests, want $((want / 2)) each side)"
		fi
		# qperf's client prints the test's figure, once.
		if [[ $t == qperf:* ]] && [ $verdict = pass ]; then
			local figs
			figs=$(cat "$run/gorxe.$n.out" <(sed -n "/^=== case $n:/,/^=== exit $n /p" "$run/share/vm.out") | grep -cE '^    (bw|send_bw|latency|msg_rate) +=  +[0-9]' || true)
			[ "$figs" = 1 ] || verdict=FAIL note=" ($figs lines with the test's figure, want the client's one)"
		fi
		# perftest's and gorxe's tables of the same run have the same
		# columns in the same units (perftest 6.2x says MiB for the MB
		# it has always meant, 2^20 bytes).
		local gh ph
		gh=$(grep -m1 '^ #bytes' "$run/gorxe.$n.out" | sed 's/MiB/MB/g' | tr -s ' \t' ' ' || true)
		ph=$(sed -n "/^=== case $n:/,/^=== exit $n /p" "$run/share/vm.out" | grep -m1 '^ #bytes' | sed 's/MiB/MB/g' | tr -s ' \t' ' ' || true)
		if [ -n "$gh" ] && [ -n "$ph" ] && [ "$gh" != "$ph" ]; then
			verdict=FAIL note=" (table columns differ: gorxe '$gh', perftest '$ph')"
		fi
		# ibv_rc_pingpong (and ibv_srq_pingpong's server) report bad
		# data (-c) and exit 0 all the same.
		if [[ $t == [ru][cd]_pingpong || $t == srq_pingpong ]] && sed -n "/^=== case $n:/,/^=== exit $n /p" "$run/share/vm.out" | grep -q "invalid data"; then
			verdict=FAIL note=" (ibv_$t: invalid data)"
		fi
		failed[$n]=$([ $verdict = FAIL ] && echo 1 || echo 0)
		[ "$vm" != 1 ] && note="$note (VM $vm)"
		local tool=perftest; [[ $t == *_pingpong ]] && tool=ibv_$t
		cmcase "$t" && tool=$(vm_cm "$dir" "$t" "$ip" "$size" | sed 's/^timeout -s INT [0-9]* //' | cut -d' ' -f1)
		line[$n]=$(caseline $verdict $n "gorxe=$g $tool=${p:-?}$note")
		echo "${line[$n]}"
		i=$((i + 1))
		# A case that failed because the VM's NIC stopped (see below)
		# leaves the VM unreachable, and every case after it would fail
		# the same way: those are not run in this VM.
		if [ $verdict = FAIL ] && ! vm_answers; then
			dead=true
			echo "interop: after case $n the VM no longer answers ping; the $((${#list[@]} - i)) cases after it are not run in this VM"
			for k in "${list[@]:i}"; do
				failed[$k]=1
				line[$k]=$(caseline FAIL $k "not run: the VM stopped answering")
			done
			break
		fi
	done
	touch "$run/share/go.end"
	$dead || for _ in $(seq 1 60); do grep -q "VM DONE" "$log" && break; sleep 1; done
	kill $qemu 2>/dev/null || true # gone already if it powered off
	wait $qemu 2>/dev/null || true
	versions=$(sed -n 's/^=== versions: //p' "$run/share/vm.out")
	cp "$run/share/vm.out" "$run/vm.$vm.out"
	cp "$run/share/counters.txt" "$run/counters.vm$vm.txt" 2>/dev/null || true
}

session 1 "${!cases[@]}"
# Under emulation the VM's virtio NIC has been seen to stop transmitting
# for good, sometimes with its kernel's NETDEV WATCHDOG ("transmit queue 0
# timed out") and sometimes silently, in the middle of rxe's burst of a
# message: the capture on the bridge just ends, the VM no longer answers
# ARP or ping, and its perftest cannot reach the host over TCP. That is
# the emulator's fault, not a verdict on gorxe or rxe: the cases that
# failed, and those not run, then run again in a fresh VM, and their lines
# say so. Any other failure stands.
retry=()
for n in "${!cases[@]}"; do [ "${failed[$n]}" = 1 ] && retry+=("$n"); done
if [ ${#retry[@]} -gt 0 ] && { $dead || grep -q "NETDEV WATCHDOG" "$run/vm.1.log"; }; then
	echo "interop: the VM's NIC stopped transmitting ($($dead && echo "the VM stopped answering ping" || echo "NETDEV WATCHDOG in $run/vm.1.log")); running the ${#retry[@]} failed cases again in a fresh VM (the first VM's output, capture and counters of each stay in $run as gorxe.N.vm1.out, case.N.vm1.pcap, counters.N.vm1.txt and net.N.vm1.txt)"
	for n in "${retry[@]}"; do
		for f in "$run/gorxe.$n.out" "$run/case.$n.pcap" "$run/counters.$n.txt" "$run/net.$n.txt"; do
			[ -f "$f" ] && mv "$f" "${f%.*}.vm1.${f##*.}"
		done
	done
	session 2 "${retry[@]}"
fi

echo
echo "gorxe against kernel rxe and stock perftest (Debian $suite: $versions)${GORXE_INTEROP_ITERS:+, perftest -n $GORXE_INTEROP_ITERS (GORXE_INTEROP_ITERS)}"
fails=0
for n in "${!cases[@]}"; do
	echo "${line[$n]}"
	[ "${failed[$n]}" = 1 ] && fails=$((fails + 1))
done
echo "${#cases[@]} cases, $((${#cases[@]} - fails)) passed, $fails failed"

# gorxe explain reads every case's capture and must agree with what rxe
# counted in it (explain/rxe_test.go: NAKs, go-back runs, duplicates).
explained=0
if GORXE_INTEROP_RUN="$run" go test -count=1 -run TestRxeLossCounters ./explain > "$run/explain-check.out" 2>&1; then
	echo "gorxe explain agrees with rxe's hw_counters in every case's capture"
else
	explained=1
	echo "gorxe explain disagrees with rxe's hw_counters (details in $run/explain-check.out):"
	grep -E -- '--- FAIL|rxe_test.go' "$run/explain-check.out" | head -20
fi
[ "$fails" = 0 ] && [ "$explained" = 0 ]
