# Shell functions shared by the scripts that run Debian VMs with the
# kernel's soft-RoCE driver (rxe) and perftest: test/interop/interop.sh and
# test/bench/vm.sh. Sourced, not run; the caller is root and has set -e.

# vm_image SUITE: sets img to the directory of Debian SUITE's VM image
# ($GORXE_INTEROP_CACHE/SUITE, default test/interop/cache/SUITE, relative
# to the tree's root, which must be the working directory), installing
# qemu and debootstrap and building the image when missing. The image's
# init configures eth0 as 10.9.0.2/24 and fd09::2/64 (MTU 9000), adds
# rxe0 on it, mounts the 9p share tagged "share" on /mnt, runs /mnt/vm.sh
# with its output in /mnt/vm.out, writes rxe0's hw_counters to
# /mnt/counters.txt and powers off.
vm_image() {
	local suite=$1 cache=${GORXE_INTEROP_CACHE:-$PWD/test/interop/cache}
	img=$cache/$suite
	mkdir -p "$img"
	local need=""
	command -v qemu-system-x86_64 >/dev/null || need="$need qemu-system-x86"
	command -v debootstrap >/dev/null || need="$need debootstrap"
	command -v mkfs.ext4 >/dev/null || need="$need e2fsprogs"
	command -v tcpdump >/dev/null || need="$need tcpdump"
	if [ -n "$need" ]; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
	fi
	# The packages the image holds; an image built with others is built
	# again.
	local pkgs=rdma-core,ibverbs-utils,perftest,rdmacm-utils,iproute2,kmod,linux-image-amd64,procps,qperf
	[ -f "$img/rootfs.img" ] && [ "$(cat "$img/packages" 2>/dev/null)" = "$pkgs" ] && return 0

	local mirror
	mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$mirror" ] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
	rm -rf "$img/root"
	echo "building the $suite VM image (debootstrap from $mirror)"
	debootstrap --variant=minbase \
		--include="$pkgs" \
		"$suite" "$img/root" "$mirror" > "$img/debootstrap.log" 2>&1
	cat > "$img/root/sbin/gorxe-init" <<'INIT'
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
poweroff -f || echo o > /proc/sysrq-trigger # trixie's minbase has no poweroff
INIT
	chmod +x "$img/root/sbin/gorxe-init"
	cp "$img"/root/boot/vmlinuz-* "$img/vmlinuz"
	cp "$img"/root/boot/initrd.img-* "$img/initrd.img"
	mkfs.ext4 -q -F -d "$img/root" "$img/rootfs.img.tmp" 2G
	mv "$img/rootfs.img.tmp" "$img/rootfs.img"
	echo "$pkgs" > "$img/packages"
	rm -rf "$img/root"
}

# vm_boot NS TAP MAC SHARE LOG [TAP2 MAC2]: boots a 1-vCPU VM from $img
# (vm_image) in network namespace NS, its virtio NIC on the existing TAP
# device TAP with address MAC, SHARE as its 9p share, the console in LOG;
# the disk is a snapshot, so several VMs can share the image. With TAP2
# and MAC2 the VM has a second virtio NIC on TAP2 (eth1; the init leaves
# it down). It sets vm_pid to qemu's process and returns once the VM's
# init says VM READY. A VM not up after two minutes is stopped and booted
# once more (its console kept in LOG.1): an emulated boot has stalled
# after the firmware now and then. It fails after the second.
vm_boot() {
	local ns=$1 tap=$2 mac=$3 share=$4 log=$5 nic2=() try _
	[ -n "${6:-}" ] && nic2=(-netdev tap,id=n1,ifname="$6",script=no,downscript=no -device virtio-net-pci,netdev=n1,mac="$7")
	for try in 1 2; do
		vm_start
		for _ in $(seq 1 120); do grep -q "VM READY" "$log" && return 0; sleep 1; done
		kill "$vm_pid" 2>/dev/null || true
		wait "$vm_pid" 2>/dev/null || true
		[ $try = 1 ] && mv "$log" "$log.1" && echo "the VM did not come up in two minutes; booting it again (the first console: $log.1)" >&2
	done
	echo "the VM did not come up; see $log" >&2
	return 1
}

# vm_start: vm_boot's qemu, with vm_boot's variables.
vm_start() {
	ip netns exec "$ns" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 2048 -smp 1 \
		-kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
		-append "root=/dev/vda rw console=ttyS0 quiet net.ifnames=0 init=/sbin/gorxe-init" \
		-drive file="$img/rootfs.img",if=virtio,format=raw,snapshot=on \
		-netdev tap,id=n0,ifname="$tap",script=no,downscript=no \
		-device virtio-net-pci,netdev=n0,mac="$mac" "${nic2[@]}" \
		-virtfs local,path="$share",mount_tag=share,security_model=none \
		-nographic -no-reboot > "$log" 2>&1 &
	vm_pid=$!
}
