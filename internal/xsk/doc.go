// Package xsk is AF_XDP sockets in pure Go: a UMEM of packet frames
// shared with the kernel, and sockets bound to one queue of a network
// interface, each with its four rings (fill and RX to receive, TX and
// completion to send). An XDP program, loaded by someone else, redirects
// the packets a socket receives to it through an XSKMAP. gVisor splits
// its AF_XDP endpoint the same way: pkg/xdp for UMEM and rings, the link
// endpoint apart.
//
// # Frame sizes
//
// Linux (6.18 measured) takes frames (chunks) of 2048 to PAGE_SIZE bytes,
// powers of two in aligned mode; 8192 is refused (EINVAL) aligned,
// unaligned and on hugetlb pages alike. The kernel receives a packet at
// KernelHeadroom (256) bytes into a frame, so a 4096-byte frame holds a
// received packet of at most 3840 bytes, and a sent one of 4096. A RoCE
// packet with a 4096-byte path MTU payload is about 4170 bytes of
// Ethernet frame: it needs Config.MultiBuffer (XDP_USE_SG), which
// carries it in two descriptors, and an XDP program loaded with
// BPF_F_XDP_HAS_FRAGS.
//
// # Need-wakeup
//
// Sockets always bind with XDP_USE_NEED_WAKEUP. Transmit kicks the
// kernel with sendto only when the TX ring's flags ask for it, Fill and
// Receive wake the driver with recvfrom only when the fill ring's do. In
// copy mode the TX ring always asks (the kernel sends from within
// sendto), and the fill ring never does (only zero-copy drivers sleep).
//
// # Goroutines
//
// A socket's receive side and send side may run on two goroutines; a
// FrameStack belongs to one. Nothing on the data path allocates.
package xsk
