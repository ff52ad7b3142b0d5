// Package xdpprog is gorxe's XDP program and its lifecycle: the filter that
// sends RoCE v2 frames to AF_XDP sockets and leaves every other frame to the
// kernel.
//
// The program is built in Go with cilium/ebpf's asm package when it is
// loaded, so there is no C, no clang and no committed object file, and the
// RoCE port is a constant of the instructions. For each frame it parses
//
//	Ethernet [one 802.1Q tag] -> IPv4 (IHL 5, not a fragment) -> UDP
//	                          -> IPv6 (next header UDP)        -> UDP
//
// and, if the UDP destination port is the RoCE port, returns
// bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS): the frame goes to
// the AF_XDP socket registered for the queue it arrived on, or to the kernel
// when that queue has none. Everything else is XDP_PASS: ARP, neighbour
// discovery, the TCP connection exchange, ssh, and also frames the program
// does not look into (see below). Redirected frames never reach the kernel's
// stack, so tcpdump on the interface does not show them.
//
// What the program does not parse, it passes to the kernel:
//
//   - IPv4 with options (IHL > 5) and IPv4 fragments (MF set or a non-zero
//     offset): RoCE v2 packets are never fragmented and rxe sends no
//     options; a non-first fragment has no UDP header to look at.
//   - IPv6 with extension headers between the IPv6 header and UDP.
//   - Stacked VLAN tags, and a tag with TPID 0x88A8 (802.1ad, QinQ): a
//     service tag is the provider network's, which a host normally never
//     sees; the kernel's vlan devices deal with one if it does. A single
//     802.1Q tag (TPID 0x8100) is accepted with any VLAN ID, including 0 (a
//     priority tag, as PFC setups send RoCE), and the redirected frame keeps
//     it. A NIC that strips tags in hardware (rx-vlan-offload) hands XDP the
//     frame without the tag.
//
// The program does not look at addresses: gorxe's link checks that a frame
// is for one of its addresses, as the kernel would.
//
// Every access to the packet is checked against data_end; a frame that ends
// inside a header the program needs is passed to the kernel, which drops it.
//
// The program counts what it does in a per-CPU array (see Stats): frames
// redirected, RoCE frames passed because their queue had no socket, frames
// passed as not RoCE, and malformed frames passed. Counting costs about 2 ns
// a frame (BenchmarkProgram compares the program with and without it).
//
// # Attaching
//
// Program.Attach uses a BPF link (BPF_LINK_CREATE), so the program is
// detached when the last file descriptor of the link is closed, which the
// kernel does when gorxe exits for any reason, including SIGKILL. BPF links
// for XDP need Linux 5.9; on older kernels Attach fails with an error that
// says so, and gorxe's udp and tap links remain. The package does not fall
// back to attaching over netlink, because a program attached that way stays
// on the interface after a crash, with its map of sockets empty, until
// someone removes it by hand.
//
// An interface has one XDP program per mode, and driver and generic mode
// exclude each other (net/core/dev.c, dev_xdp_attach). What Attach's BPF
// link gets from the kernel when the hook is taken, measured on veth pairs
// on Linux 6.18:
//
//	hook held by          attach in the same mode   in the other mode
//	another BPF link      EBUSY                     EEXIST
//	netlink (ip link)     EBUSY                     EEXIST
//
// An attach over netlink gets the same over a BPF link. A program attached
// over netlink is removed with `ip link set dev IFACE xdpdrv off` (or
// xdpgeneric); one held by a BPF link cannot be removed that way (EBUSY)
// and goes only when its holder exits. Attach's error says which of the two
// holds the hook when it can list the BPF links, which needs CAP_SYS_ADMIN.
//
// # Capabilities
//
// Loading needs CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN; on kernels
// before 5.8, which have no CAP_BPF, CAP_SYS_ADMIN): without CAP_BPF even
// the counters' array is refused, and the XSKMAP needs CAP_NET_ADMIN.
// Attaching a loaded program with a BPF link needs no capability of its
// own on Linux 6.18. An error from the kernel is returned as one line that
// says what to do, and wraps the errno (errors.Is(err, unix.EPERM) and so
// on).
package xdpprog
