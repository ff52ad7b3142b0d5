#!/usr/bin/env bash
# gorxe against the Linux kernel's soft-RoCE driver (rxe) and stock perftest,
# running in a qemu VM built from Debian's packages.
#
#   sudo test/interop/interop.sh            the quick matrix: every test, both
#                                           directions, both links, both MTUs,
#                                           IPv4 and IPv6
#   sudo test/interop/interop.sh --full     every test x direction x link x MTU,
#                                           IPv4, plus write and read over IPv6
#
# The VM image is built once (debootstrap, about 2 minutes) and cached in
# $GORXE_INTEROP_CACHE (default test/interop/cache). The host side is a
# network namespace with a bridge; the VM's virtio NIC and gorxe's TAP
# device join it, and gorxe's udp link uses the bridge's own address. Each
# case runs perftest in the VM and gorxe on the host, one as server and the
# other as client; it passes when both exit 0. Logs, the VM's rxe counters
# and perftest's output are left in $GORXE_INTEROP_CACHE/last/.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "interop.sh: needs root (debootstrap, qemu, TAP, namespaces)" >&2; exit 1; }
full=false
[ "${1:-}" = --full ] && full=true

cache=${GORXE_INTEROP_CACHE:-$PWD/test/interop/cache}
mkdir -p "$cache"
need=""
command -v qemu-system-x86_64 >/dev/null || need="$need qemu-system-x86"
command -v debootstrap >/dev/null || need="$need debootstrap"
command -v mkfs.ext4 >/dev/null || need="$need e2fsprogs"
if [ -n "$need" ]; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
fi

# The image: Debian bookworm with rdma-core, perftest and the kernel's rxe.
if [ ! -f "$cache/rootfs.img" ]; then
	mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$mirror" ] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
	rm -rf "$cache/root"
	echo "interop: building the VM image (debootstrap from $mirror)"
	debootstrap --variant=minbase \
		--include=rdma-core,ibverbs-utils,perftest,iproute2,kmod,linux-image-amd64,procps \
		bookworm "$cache/root" "$mirror" > "$cache/debootstrap.log" 2>&1
	cat > "$cache/root/sbin/gorxe-init" <<'EOF'
#!/bin/sh
# The VM's init: network, rxe, the shared folder, then the case script.
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
modprobe virtio_net
ip link set lo up
ip link set eth0 mtu 9000 up
ip addr add 10.9.0.2/24 dev eth0
ip addr add fd09::2/64 dev eth0 nodad
modprobe rdma_rxe
modprobe ib_uverbs
rdma link add rxe0 type rxe netdev eth0
modprobe 9pnet_virtio
modprobe 9p
mkdir -p /mnt
mount -t 9p -o trans=virtio,version=9p2000.L share /mnt
echo "VM READY"
sh /mnt/vm.sh > /mnt/vm.out 2>&1
for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "$(basename "$f") $(cat "$f")"; done > /mnt/counters.txt
echo "VM DONE"
poweroff -f
EOF
	chmod +x "$cache/root/sbin/gorxe-init"
	cp "$cache"/root/boot/vmlinuz-* "$cache/vmlinuz"
	cp "$cache"/root/boot/initrd.img-* "$cache/initrd.img"
	mkfs.ext4 -q -F -d "$cache/root" "$cache/rootfs.img.tmp" 2G
	mv "$cache/rootfs.img.tmp" "$cache/rootfs.img"
	rm -rf "$cache/root"
fi

go build -o "$cache/gorxe" ./cmd/gorxe
run=$cache/last
rm -rf "$run"; mkdir -p "$run/share"

# The cases: DIRECTION TEST LINK MTU IP. DIRECTION says who is the server:
# gorxe-server (perftest in the VM is the client) or rxe-server.
cases=()
tests=(write_bw read_bw send_bw atomic_bw:FETCH_AND_ADD atomic_bw:CMP_AND_SWAP write_lat read_lat send_lat)
if $full; then
	for dir in rxe-server gorxe-server; do for t in "${tests[@]}"; do for l in tap udp; do for m in 1024 4096; do
		cases+=("$dir $t $l $m 4")
	done; done; done; done
	for dir in rxe-server gorxe-server; do for t in write_bw read_bw; do for l in tap udp; do
		cases+=("$dir $t $l 1024 6")
	done; done; done
else
	i=0
	for dir in rxe-server gorxe-server; do for t in "${tests[@]}"; do
		l=$([ $((i % 2)) = 0 ] && echo tap || echo udp)
		m=$([ $((i / 2 % 2)) = 0 ] && echo 1024 || echo 4096)
		cases+=("$dir $t $l $m 4")
		i=$((i + 1))
	done; done
	cases+=("rxe-server write_bw tap 4096 6" "gorxe-server read_bw udp 1024 6")
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
ip -n $ns addr add 10.9.0.1/24 dev br0
ip -n $ns addr add fd09::1/64 dev br0 nodad
ip -n $ns link set br0 up
ip -n $ns tuntap add vmtap0 mode tap
ip -n $ns link set vmtap0 mtu 9000 master br0 up

# perftest's flags and gorxe's, for a case.
args() { # test size iters
	local t=${1%%:*} a=${1#*:}
	case $t in
	atomic_bw) echo "-n 200 -A $a" ;;
	*_lat) echo "-n 200 -s 64" ;;
	send_bw) echo "-n 200 -s 4096" ;;
	*) echo "-n 100 -s 65536" ;;
	esac
}

# The VM's script: every case's perftest, in order, each after the
# previous one's gorxe side is done (the host writes go.N to let case N
# start, so servers are up before clients connect).
{
	echo 'gid6=$(for n in $(seq 0 31); do [ "$(cat /sys/class/infiniband/rxe0/ports/1/gids/$n 2>/dev/null)" = "fd09:0000:0000:0000:0000:0000:0000:0002" ] && [ "$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$n 2>/dev/null)" = "RoCE v2" ] && echo $n && break; done)'
	n=0
	for c in "${cases[@]}"; do
		set -- $c
		dir=$1 t=$2 m=$4 ip=$5
		gid='-x 1'; [ "$ip" = 6 ] && gid='-x $gid6'
		peer=""; [ "$dir" = gorxe-server ] && peer=10.9.0.1
		echo "while [ ! -f /mnt/go.$n ]; do sleep 0.2; done"
		[ "$dir" = gorxe-server ] && echo "sleep 2 # gorxe's server must be listening"
		echo "echo '=== case $n: ib_${t%%:*} $(args "$t") -m $m'"
		echo "timeout 120 ib_${t%%:*} -d rxe0 $gid -F -m $m $(args "$t") $peer; echo \"=== exit $n \$?\""
		n=$((n + 1))
	done
} > "$run/share/vm.sh"

ip netns exec $ns qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 768 -smp 1 \
	-kernel "$cache/vmlinuz" -initrd "$cache/initrd.img" \
	-append "root=/dev/vda rw console=ttyS0 quiet net.ifnames=0 init=/sbin/gorxe-init" \
	-drive file="$cache/rootfs.img",if=virtio,format=raw,snapshot=on \
	-netdev tap,id=n0,ifname=vmtap0,script=no,downscript=no \
	-device virtio-net-pci,netdev=n0,mac=52:54:00:00:00:02 \
	-virtfs local,path="$run/share",mount_tag=share,security_model=none \
	-nographic -no-reboot > "$run/vm.log" 2>&1 &
for _ in $(seq 1 120); do grep -q "VM READY" "$run/vm.log" && break; sleep 1; done
grep -q "VM READY" "$run/vm.log" || { echo "interop: the VM did not come up; see $run/vm.log" >&2; exit 1; }

results=()
n=0
for c in "${cases[@]}"; do
	set -- $c
	dir=$1 t=$2 l=$3 m=$4 ip=$5
	case $l/$ip in
	tap/4) link="--link tap --bridge br0 --link-mtu 9000 --tap gxi$n --ip 10.9.0.5/24" ;;
	tap/6) link="--link tap --bridge br0 --link-mtu 9000 --tap gxi$n --ip fd09::5/64" ;;
	udp/4) link="--link udp --ip 10.9.0.1" ;;
	udp/6) link="--link udp --ip fd09::1" ;;
	esac
	peer=""; [ "$dir" = rxe-server ] && peer=10.9.0.2
	touch "$run/share/go.$n"
	[ "$dir" = rxe-server ] && sleep 2 # perftest's server must be listening
	set +e
	ip netns exec $ns timeout 150 "$cache/gorxe" ${t%%:*} $link -m $m $(args "$t") --give-up 30s $peer > "$run/gorxe.$n.out" 2>&1
	g=$?
	set -e
	for _ in $(seq 1 100); do grep -q "=== exit $n " "$run/share/vm.out" 2>/dev/null && break; sleep 0.3; done
	p=$(sed -n "s/^=== exit $n \([0-9]*\)$/\1/p" "$run/share/vm.out" 2>/dev/null)
	verdict=pass; { [ "$g" = 0 ] && [ "${p:-x}" = 0 ]; } || verdict=FAIL
	results+=("$(printf '%-4s %-13s %-24s %-4s %-5s IPv%s  gorxe=%s perftest=%s' "$verdict" "$dir" "$t" "$l" "$m" "$ip" "$g" "${p:-?}")")
	echo "${results[-1]}"
	n=$((n + 1))
done
touch "$run/share/go.$n"
for _ in $(seq 1 60); do grep -q "VM DONE" "$run/vm.log" && break; sleep 1; done

echo
echo "gorxe against kernel rxe + perftest $(grep -m1 -o 'perftest [0-9.]*' "$cache/debootstrap.log" 2>/dev/null || echo '(Debian bookworm)')"
printf '%s\n' "${results[@]}"
fails=$(printf '%s\n' "${results[@]}" | grep -c '^FAIL' || true)
echo "${#results[@]} cases, $((${#results[@]} - fails)) passed, $fails failed"
[ "$fails" = 0 ]
