package bth

import "strconv"

// Opcode is the BTH OpCode (IBTA Vol 1 §9.2, Table 38). The top three bits
// name the transport service (RC 000, UC 001, RD 010, UD 011, CNP 100) and
// the low five bits the operation.
type Opcode uint8

// Reliable Connected opcodes (IBTA Vol 1 Table 38; FLUSH and ATOMIC_WRITE
// from the 2020 Memory Placement Extensions, as in Linux include/rdma/ib_pack.h).
const (
	RCSendFirst              Opcode = 0x00
	RCSendMiddle             Opcode = 0x01
	RCSendLast               Opcode = 0x02
	RCSendLastWithImm        Opcode = 0x03
	RCSendOnly               Opcode = 0x04
	RCSendOnlyWithImm        Opcode = 0x05
	RCRDMAWriteFirst         Opcode = 0x06
	RCRDMAWriteMiddle        Opcode = 0x07
	RCRDMAWriteLast          Opcode = 0x08
	RCRDMAWriteLastWithImm   Opcode = 0x09
	RCRDMAWriteOnly          Opcode = 0x0a
	RCRDMAWriteOnlyWithImm   Opcode = 0x0b
	RCRDMAReadRequest        Opcode = 0x0c
	RCRDMAReadResponseFirst  Opcode = 0x0d
	RCRDMAReadResponseMiddle Opcode = 0x0e
	RCRDMAReadResponseLast   Opcode = 0x0f
	RCRDMAReadResponseOnly   Opcode = 0x10
	RCAcknowledge            Opcode = 0x11
	RCAtomicAcknowledge      Opcode = 0x12
	RCCompareSwap            Opcode = 0x13
	RCFetchAdd               Opcode = 0x14
	RCSendLastWithInvalidate Opcode = 0x16
	RCSendOnlyWithInvalidate Opcode = 0x17
	RCFlush                  Opcode = 0x1c
	RCAtomicWrite            Opcode = 0x1d
	UCSendFirst              Opcode = 0x20
	UCSendMiddle             Opcode = 0x21
	UCSendLast               Opcode = 0x22
	UCSendLastWithImm        Opcode = 0x23
	UCSendOnly               Opcode = 0x24
	UCSendOnlyWithImm        Opcode = 0x25
	UCRDMAWriteFirst         Opcode = 0x26
	UCRDMAWriteMiddle        Opcode = 0x27
	UCRDMAWriteLast          Opcode = 0x28
	UCRDMAWriteLastWithImm   Opcode = 0x29
	UCRDMAWriteOnly          Opcode = 0x2a
	UCRDMAWriteOnlyWithImm   Opcode = 0x2b
	UDSendOnly               Opcode = 0x64
	UDSendOnlyWithImm        Opcode = 0x65
	CNP                      Opcode = 0x81 // RoCE v2 Congestion Notification Packet (Annex A17.9.3)
)

// Service is the transport service an opcode belongs to: its top three bits.
type Service uint8

// The transport services of IBTA Vol 1 Table 38.
const (
	ServiceRC  Service = 0 // Reliable Connected
	ServiceUC  Service = 1 // Unreliable Connected
	ServiceRD  Service = 2 // Reliable Datagram
	ServiceUD  Service = 3 // Unreliable Datagram
	ServiceCNP Service = 4 // Congestion notification (0x80 IB CNP, 0x81 RoCE v2 CNP)
	ServiceXRC Service = 5 // Extended Reliable Connected
)

// Service returns the transport service of o.
func (o Opcode) Service() Service { return Service(o >> 5) }

// String returns the service's short name, "RC", "UC" and so on.
func (s Service) String() string {
	switch s {
	case ServiceRC:
		return "RC"
	case ServiceUC:
		return "UC"
	case ServiceRD:
		return "RD"
	case ServiceUD:
		return "UD"
	case ServiceCNP:
		return "CNP"
	case ServiceXRC:
		return "XRC"
	}
	return "SERVICE_" + strconv.Itoa(int(s))
}

// opNames holds the name of each operation within a service, indexed by the
// low five bits of the opcode. The names are the IB_OPCODE_ suffixes used by
// the Linux kernel (include/rdma/ib_pack.h).
var opNames = [32]string{
	0x00: "SEND_FIRST",
	0x01: "SEND_MIDDLE",
	0x02: "SEND_LAST",
	0x03: "SEND_LAST_WITH_IMMEDIATE",
	0x04: "SEND_ONLY",
	0x05: "SEND_ONLY_WITH_IMMEDIATE",
	0x06: "RDMA_WRITE_FIRST",
	0x07: "RDMA_WRITE_MIDDLE",
	0x08: "RDMA_WRITE_LAST",
	0x09: "RDMA_WRITE_LAST_WITH_IMMEDIATE",
	0x0a: "RDMA_WRITE_ONLY",
	0x0b: "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
	0x0c: "RDMA_READ_REQUEST",
	0x0d: "RDMA_READ_RESPONSE_FIRST",
	0x0e: "RDMA_READ_RESPONSE_MIDDLE",
	0x0f: "RDMA_READ_RESPONSE_LAST",
	0x10: "RDMA_READ_RESPONSE_ONLY",
	0x11: "ACKNOWLEDGE",
	0x12: "ATOMIC_ACKNOWLEDGE",
	0x13: "COMPARE_SWAP",
	0x14: "FETCH_ADD",
	0x15: "RESYNC",
	0x16: "SEND_LAST_WITH_INVALIDATE",
	0x17: "SEND_ONLY_WITH_INVALIDATE",
	0x1c: "FLUSH",
	0x1d: "ATOMIC_WRITE",
}

// Known reports whether o is an opcode that gorxe can parse: every RC, UC
// and UD opcode the IBTA defines, and the RoCE v2 CNP.
func (o Opcode) Known() bool {
	op := o & 0x1f
	switch o.Service() {
	case ServiceRC:
		return op <= 0x14 || op == 0x16 || op == 0x17 || op == 0x1c || op == 0x1d
	case ServiceUC:
		return op <= 0x0b
	case ServiceUD:
		return op == 0x04 || op == 0x05
	}
	return o == CNP
}

// String returns the opcode's name as the kernel spells it without the
// IB_OPCODE_ prefix, for example "RC_RDMA_WRITE_FIRST" or "CNP"; RD's and
// XRC's, which gorxe does not parse, as well ("XRC_SEND_ONLY"). Another
// opcode gorxe does not parse is shown as its number, "OPCODE_0x55".
// The names are made once, so that String allocates nothing: the
// transport's events name the opcodes of the packets they are about.
func (o Opcode) String() string { return opcodeNames[o] }

// opcodeNames holds String's answer for every opcode.
var opcodeNames = func() (names [256]string) {
	for i := range names {
		switch o := Opcode(i); {
		case o == CNP:
			names[i] = "CNP"
		case o.Known() || o.Service() == ServiceRD && opNames[o&0x1f] != "" && o&0x1f <= 0x15,
			o.Service() == ServiceXRC && (o&0x1f <= 0x14 || o&0x1f == 0x16 || o&0x1f == 0x17):
			// RD's and XRC's opcodes are named although gorxe does not
			// parse them, for a capture that has them.
			names[i] = o.Service().String() + "_" + opNames[o&0x1f]
		default:
			names[i] = "OPCODE_0x" + strconv.FormatUint(uint64(o), 16)
		}
	}
	return names
}()
