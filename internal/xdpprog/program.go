package xdpprog

import (
	"encoding/binary"

	"github.com/cilium/ebpf/asm"
)

// DefaultPort is the UDP destination port of RoCE v2 (IBTA Vol 1 Annex A17.2).
const DefaultPort = 4791

// XDP actions (enum xdp_action in include/uapi/linux/bpf.h).
const (
	xdpPass     = 2
	xdpRedirect = 4
)

// struct xdp_md, the program's context (include/uapi/linux/bpf.h).
const (
	mdData         = 0
	mdDataEnd      = 4
	mdRxQueueIndex = 16
)

// Indexes of the counters in the per-CPU array (see Stats).
const (
	statRedirected = iota
	statNoSocket
	statPassed
	statMalformed
	numStats
)

// Header offsets from the start of the frame, for an untagged frame; a
// tagged frame's are 4 bytes later, which the program handles by moving its
// data pointer.
//
//	Ethernet  0: dst(6) src(6) type(2)                    14 bytes
//	802.1Q   12: TPID 0x8100(2) TCI(2), then type(2)       +4 bytes
//	IPv4     14: ver/IHL(1) .. flags/frag offset @20 .. protocol @23   20 bytes
//	IPv6     14: ver/class/flow(4) length(2) next header @20 ..        40 bytes
//	UDP      34 (IPv4) or 54 (IPv6): sport(2) dport(2) length(2) sum(2)
const (
	ethLen      = 14
	ethType     = 12
	vlanLen     = 4
	vlanType    = 16 // the EtherType after the tag
	ip4VerIHL   = ethLen + 0
	ip4FragOff  = ethLen + 6
	ip4Protocol = ethLen + 9
	ip4End      = ethLen + 20
	ip6Version  = ethLen + 0
	ip6Next     = ethLen + 6
	ip6End      = ethLen + 40
	udpDstPort  = 2
	udpLen      = 8

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86DD
	etherTypeVLAN = 0x8100
	protoUDP      = 17
	ip4FragMask   = 0x3fff // MF and the fragment offset; DF is allowed
)

// half returns the value a 16-bit load of the big-endian field v reads on
// this host, so that the program compares fields without swapping them.
func half(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.NativeEndian.Uint16(b[:]))
}

// instructions returns the program for RoCE v2 frames to UDP port port,
// redirecting to the XSKMAP xsks and counting in the per-CPU array
// counters. With counters < 0 it counts nothing (for the benchmark that
// measures what counting costs).
func instructions(port uint16, xsks, counters int) asm.Instructions {
	const (
		ctx   = asm.R1
		data  = asm.R2 // moved 4 bytes on by a VLAN tag
		end   = asm.R3
		bound = asm.R4
		val   = asm.R5
		stat  = asm.R6 // callee-saved across the helper calls
		ret   = asm.R7
	)
	// need jumps to malformed unless the frame has n bytes from data.
	need := func(n int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(bound, data),
			asm.Add.Imm(bound, n),
			asm.JGT.Reg(bound, end, "malformed"),
		}
	}
	var p asm.Instructions
	add := func(ins ...asm.Instruction) { p = append(p, ins...) }
	addAll := func(is ...asm.Instructions) {
		for _, i := range is {
			p = append(p, i...)
		}
	}

	// Ethernet, and one 802.1Q tag.
	add(
		asm.LoadMem(data, ctx, mdData, asm.Word),
		asm.LoadMem(end, ctx, mdDataEnd, asm.Word),
	)
	addAll(need(ethLen))
	add(
		asm.LoadMem(val, data, ethType, asm.Half),
		asm.JNE.Imm(val, half(etherTypeVLAN), "l3"),
	)
	addAll(need(ethLen + vlanLen))
	add(
		asm.LoadMem(val, data, vlanType, asm.Half),
		asm.Add.Imm(data, vlanLen),
		asm.JEq.Imm(val, half(etherTypeIPv4), "ipv4").WithSymbol("l3"),
		asm.JNE.Imm(val, half(etherTypeIPv6), "pass"),
	)

	// IPv6: version 6, next header UDP, UDP to the port.
	addAll(need(ip6End))
	add(
		asm.LoadMem(val, data, ip6Version, asm.Byte),
		asm.And.Imm(val, 0xf0),
		asm.JNE.Imm(val, 0x60, "malformed"),
		asm.LoadMem(val, data, ip6Next, asm.Byte),
		asm.JNE.Imm(val, protoUDP, "pass"),
	)
	addAll(need(ip6End + udpLen))
	add(
		asm.LoadMem(val, data, ip6End+udpDstPort, asm.Half),
		asm.JNE.Imm(val, half(port), "pass"),
		asm.Ja.Label("redirect"),
	)

	// IPv4: version 4 with a 20-byte header (0x45; 0x40 to 0x44 is
	// malformed, 0x46 to 0x4f has options), not a fragment, protocol UDP,
	// UDP to the port.
	add(asm.Mov.Reg(bound, data).WithSymbol("ipv4"))
	add(
		asm.Add.Imm(bound, ip4End),
		asm.JGT.Reg(bound, end, "malformed"),
		asm.LoadMem(val, data, ip4VerIHL, asm.Byte),
		asm.JEq.Imm(val, 0x45, "ipv4ok"),
		asm.JLT.Imm(val, 0x45, "malformed"),
		asm.JGT.Imm(val, 0x4f, "malformed"),
		asm.Ja.Label("pass"),
		asm.LoadMem(val, data, ip4FragOff, asm.Half).WithSymbol("ipv4ok"),
		asm.And.Imm(val, half(ip4FragMask)),
		asm.JNE.Imm(val, 0, "pass"),
		asm.LoadMem(val, data, ip4Protocol, asm.Byte),
		asm.JNE.Imm(val, protoUDP, "pass"),
	)
	addAll(need(ip4End + udpLen))
	add(
		asm.LoadMem(val, data, ip4End+udpDstPort, asm.Half),
		asm.JNE.Imm(val, half(port), "pass"),
	)

	// return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS): the
	// low bits of the flags are the action when the queue has no socket.
	add(
		asm.LoadMem(asm.R2, ctx, mdRxQueueIndex, asm.Word).WithSymbol("redirect"),
		asm.LoadMapPtr(asm.R1, xsks),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
	)
	if counters < 0 {
		add(
			asm.Return(),
			asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
			asm.Return(),
			asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("malformed"),
			asm.Return(),
		)
		return p
	}
	add(
		asm.Mov.Reg(ret, asm.R0),
		asm.Mov.Imm(stat, statRedirected),
		asm.JEq.Imm(asm.R0, xdpRedirect, "count"),
		asm.Mov.Imm(stat, statNoSocket),
		asm.Ja.Label("count"),

		asm.Mov.Imm(stat, statPassed).WithSymbol("pass"),
		asm.Mov.Imm(ret, xdpPass),
		asm.Ja.Label("count"),

		asm.Mov.Imm(stat, statMalformed).WithSymbol("malformed"),
		asm.Mov.Imm(ret, xdpPass),

		// (*bpf_map_lookup_elem(&counters, &stat))++; the array is
		// per-CPU, so a plain add is enough.
		asm.StoreMem(asm.RFP, -4, stat, asm.Word).WithSymbol("count"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, counters),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R0, ret).WithSymbol("exit"),
		asm.Return(),
	)
	return p
}
