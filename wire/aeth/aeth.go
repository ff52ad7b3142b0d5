// Package aeth reads and writes the ACK Extended Transport Header that a
// responder sends in ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE and the first and last
// RDMA READ responses (IBTA Vol 1 §9.3.5, §9.7.5.1).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|0|Typ|  Value  |          Message Sequence Number              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The syndrome byte is a 2-bit type and a 5-bit value (Table 42):
//
//	Typ 00  ACK      value = credit count (Table 44; 31 = no credit limit)
//	Typ 01  RNR NAK  value = RNR timer (Table 45)
//	Typ 11  NAK      value = NAK code: 0 PSN sequence error, 1 invalid
//	                 request, 2 remote access error, 3 remote operational
//	                 error, 4 invalid RD request
package aeth

import (
	"encoding/binary"
	"strconv"
	"time"
)

// Len is the length of an AETH in bytes.
const Len = 4

// MSN is a 24-bit message sequence number: how many request messages the
// responder has completed, modulo 2^24.
type MSN uint32

// MSNMask keeps the 24 bits that an MSN occupies on the wire.
const MSNMask = 0x00ffffff

// Syndrome is the AETH syndrome byte.
type Syndrome uint8

// Type is the kind of acknowledgement a syndrome carries.
type Type uint8

// The syndrome types of IBTA Vol 1 Table 42.
const (
	TypeACK      Type = 0
	TypeRNRNAK   Type = 1
	TypeReserved Type = 2
	TypeNAK      Type = 3
)

// NAKCode is the value of a NAK syndrome.
type NAKCode uint8

// The NAK codes of IBTA Vol 1 Table 43.
const (
	NAKPSNSequenceError NAKCode = 0
	NAKInvalidRequest   NAKCode = 1
	NAKRemoteAccess     NAKCode = 2
	NAKRemoteOperation  NAKCode = 3
	NAKInvalidRDRequest NAKCode = 4
)

// String returns the NAK code's name as the IBTA gives it.
func (c NAKCode) String() string {
	switch c {
	case NAKPSNSequenceError:
		return "PSN_SEQ_ERROR"
	case NAKInvalidRequest:
		return "INVALID_REQUEST"
	case NAKRemoteAccess:
		return "REMOTE_ACCESS_ERROR"
	case NAKRemoteOperation:
		return "REMOTE_OPERATIONAL_ERROR"
	case NAKInvalidRDRequest:
		return "INVALID_RD_REQUEST"
	}
	return "NAK_CODE_" + strconv.Itoa(int(c))
}

// UnlimitedCredits is the ACK credit count that means the responder does no
// end-to-end flow control. Linux rxe sends it in every ACK.
const UnlimitedCredits = 31

// ACK returns an ACK syndrome with the given credit count (0..31).
func ACK(creditCount uint8) Syndrome { return Syndrome(creditCount & 0x1f) }

// RNRNAK returns an RNR NAK syndrome with the given RNR timer.
func RNRNAK(t RNRTimer) Syndrome { return Syndrome(0x20 | uint8(t)&0x1f) }

// NAK returns a NAK syndrome with the given code.
func NAK(c NAKCode) Syndrome { return Syndrome(0x60 | uint8(c)&0x1f) }

// Type returns the syndrome's type.
func (s Syndrome) Type() Type { return Type(s>>5) & 0x3 }

// Value returns the low five bits: a credit count, an RNR timer or a NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1f }

// CreditCount returns the credit count of an ACK syndrome.
func (s Syndrome) CreditCount() uint8 { return s.Value() }

// RNRTimer returns the timer of an RNR NAK syndrome.
func (s Syndrome) RNRTimer() RNRTimer { return RNRTimer(s.Value()) }

// NAKCode returns the code of a NAK syndrome.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.Value()) }

// String describes the syndrome, for example "ACK credits=31",
// "RNR_NAK timer=0.64ms" or "NAK REMOTE_ACCESS_ERROR".
func (s Syndrome) String() string {
	switch s.Type() {
	case TypeACK:
		return "ACK credits=" + strconv.Itoa(int(s.CreditCount()))
	case TypeRNRNAK:
		return "RNR_NAK timer=" + s.RNRTimer().String()
	case TypeNAK:
		return "NAK " + s.NAKCode().String()
	}
	return "RESERVED_0x" + strconv.FormatUint(uint64(s), 16)
}

// creditTable maps an ACK credit count to the number of receive credits it
// encodes (IBTA Vol 1 Table 44).
var creditTable = [31]uint16{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
	768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// Credits returns the number of receive WQEs an ACK's credit count grants,
// and false for count 31, which means no credit limit.
func (s Syndrome) Credits() (int, bool) {
	if s.CreditCount() == UnlimitedCredits {
		return 0, false
	}
	return int(creditTable[s.CreditCount()]), true
}

// RNRTimer is the 5-bit encoded time a requester waits after an RNR NAK
// before it retries (IBTA Vol 1 Table 45); ibv_modify_qp's min_rnr_timer.
type RNRTimer uint8

// rnrTable is Table 45 in microseconds: 0 is the longest, 655.36 ms.
var rnrTable = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280,
	1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440,
	81920, 122880, 163840, 245760, 327680, 491520,
}

// Duration returns how long the timer asks the requester to wait.
func (t RNRTimer) Duration() time.Duration {
	return time.Duration(rnrTable[t&0x1f]) * time.Microsecond
}

// String returns the duration in milliseconds, for example "0.64ms".
func (t RNRTimer) String() string {
	return strconv.FormatFloat(float64(rnrTable[t&0x1f])/1000, 'f', -1, 64) + "ms"
}

// Header is a view of an AETH. Its methods need at least Len bytes.
type Header []byte

// Syndrome returns the syndrome byte.
func (h Header) Syndrome() Syndrome { return Syndrome(h[0]) }

// MSN returns the message sequence number.
func (h Header) MSN() MSN { return MSN(binary.BigEndian.Uint32(h) & MSNMask) }

// Fields holds the AETH's fields.
type Fields struct {
	Syndrome Syndrome
	MSN      MSN
}

// Fields returns the header's fields.
func (h Header) Fields() Fields { return Fields{Syndrome: h.Syndrome(), MSN: h.MSN()} }

// Encode writes f into the header.
func (h Header) Encode(f *Fields) {
	binary.BigEndian.PutUint32(h, uint32(f.MSN)&MSNMask|uint32(f.Syndrome)<<24)
}
