// Package udp is a gorxe link over one kernel UDP socket bound to the RoCE
// v2 port: it needs no privilege, at the cost of the kernel writing the IP
// and UDP headers on send and hiding them on receive. Linux only.
//
// On send, the link reads each packet's destination from the IP and UDP
// headers the device wrote and hands the UDP payload (BTH through ICRC) to
// sendmmsg. The kernel writes the headers itself, so the ICRC the device
// computed holds only if the device built them as the kernel does:
//   - UDP source port: the socket's bound port. The link implements
//     link.SourcePorter so the device uses it.
//   - IPv4 Identification: 0. The socket is unconnected and sets
//     IP_PMTUDISC_DO, and the kernel then sends DF with ID 0 on every packet
//     (include/net/ip.h, ip_select_ident_segs); a connected socket or UDP GSO
//     would number the packets instead.
//
// On receive, recvmmsg reads each UDP payload straight into the caller's
// buffer behind room for the headers, and the link writes an IP and a UDP
// header in front of it from what the socket reports: the source address
// and port, and the TOS or traffic class byte (IP_RECVTOS,
// IPV6_RECVTCLASS), so ECN marks reach the device. The destination is the
// link's own address: the socket is bound to that unicast address, and
// the kernel hands it only datagrams sent to it. The IPv4 Identification
// the sender used is not reported, so the link has link.FlagNoIPv4ICRC;
// over IPv6 every field the ICRC covers is known and the ICRC is checked
// as usual.
//
// Several packets of one flow may arrive as one datagram: a sender's UDP
// GSO run on the same host, or a burst the NIC joined (GRO). The socket
// asks for them whole (UDP_GRO), and the link cuts them into the packets
// they hold, each with its own synthesized headers; Stats.Joined counts
// them (receive_linux.go).
//
// A link may have more addresses than its socket's (Config.Also), as a
// RoCE device has every address of its interface: each has a socket of
// its own, which Receive and Send use as they use the link's own, the
// sockets taking turns a batch at a time (also_linux.go).
//
// The socket is not one the Go runtime polls: a busy-polling program
// reads it with TryReceive, and the link waits in poll(2) itself when it
// must (package link/internal/pollfd says why).
package udp
