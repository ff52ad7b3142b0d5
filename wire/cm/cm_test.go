package cm_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/cm"
	"github.com/gorxe/gorxe/wire/mad"
)

// poke is bytes to write at a MAD offset: body offset n is MAD offset 24+n.
type poke struct {
	off int
	b   []byte
}

// handMAD builds a CM MAD byte by byte, independently of the package: the
// common header of a CM SEND with attribute ID attr and transaction ID
// tid, a zero body, then pokes.
func handMAD(attr uint16, tid uint64, pokes ...poke) []byte {
	b := make([]byte, 256)
	copy(b, []byte{
		0x01, 0x07, 0x02, 0x03, // base version 1, class CM, class version 2, method SEND
		0x00, 0x00, 0x00, 0x00, // status, class specific
	})
	binary.BigEndian.PutUint64(b[8:], tid)
	binary.BigEndian.PutUint16(b[16:], attr) // reserved 18..19 and attribute modifier 20..23 stay zero
	for _, p := range pokes {
		copy(b[p.off:], p.b)
	}
	return b
}

func zeros(n int) []byte { return make([]byte, n) }

var (
	ip1 = netip.MustParseAddr("10.0.0.1")
	ip2 = netip.MustParseAddr("10.0.0.2")
	ll1 = netip.MustParseAddr("fe80::5054:ff:fe12:3456")
	ll2 = netip.MustParseAddr("fe80::5054:ff:fe65:4321")
)

// reqCMA is the start of an rdma_cm REQ's private data: a cma_hdr from
// 10.0.0.1 port 49153 to 10.0.0.2, then "hello".
var reqCMA = concat(
	[]byte{0x00, 0x40, 0xc0, 0x01}, // cma version 0, IPv4, source port 49153
	zeros(12), []byte{10, 0, 0, 1}, // source address
	zeros(12), []byte{10, 0, 0, 2}, // destination address
	[]byte("hello"),
)

func concat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// vectors are hand-built MADs and the messages they carry. The first of
// each kind is the one an rdma_cm exchange over RoCE v2 IPv4 sends.
var vectors = []struct {
	name string
	mad  []byte
	tid  uint64
	msg  cm.Message
}{
	{
		name: "REQ rping",
		tid:  0x0000000b_1234abcd,
		mad: handMAD(0x0010, 0x0000000b_1234abcd,
			poke{24 + 0, []byte{0x12, 0x34, 0xab, 0xcd}},                          // local comm ID
			poke{24 + 8, []byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x06, 0x1c, 0x06}},  // service ID: TCP port 7174
			poke{24 + 16, []byte{0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56}}, // local CA GUID
			poke{24 + 28, []byte{0x00, 0x00, 0x00, 0x00}},                         // local Q_Key
			poke{24 + 32, []byte{0x00, 0x00, 0x11, 0x10}},                         // QPN 0x11, responder resources 16
			poke{24 + 36, []byte{0x00, 0x00, 0x00, 0x10}},                         // EECN 0, initiator depth 16
			poke{24 + 40, []byte{0x00, 0x00, 0x00, 20 << 3}},                      // remote EECN 0, remote CM timeout 20, RC, no flow control
			poke{24 + 44, []byte{0x12, 0x34, 0x56, 20<<3 | 7}},                    // PSN 0x123456, local CM timeout 20, retry 7
			poke{24 + 48, []byte{0xff, 0xff, 3<<4 | 7, 15 << 4}},                  // P_Key, MTU 1024, RNR retry 7; max CM retries 15
			poke{24 + 52, []byte{0xff, 0xff, 0xff, 0xff}},                         // permissive LIDs
			poke{24 + 56, concat(zeros(10), []byte{0xff, 0xff, 10, 0, 0, 1})},     // local GID ::ffff:10.0.0.1
			poke{24 + 72, concat(zeros(10), []byte{0xff, 0xff, 10, 0, 0, 2})},     // remote GID ::ffff:10.0.0.2
			poke{24 + 88, []byte{0x12, 0x34, 0x50, 0x03}},                         // flow label 0x12345, rate 3
			poke{24 + 92, []byte{0x0a, 0x40, 5 << 4, 14 << 3}},                    // traffic class, hop limit 64, SL 5, ACK timeout 14
			poke{24 + 140, reqCMA},                                                // private data
		),
		msg: &cm.REQ{
			LocalCommID: 0x1234abcd, ServiceID: 0x0000000001061c06, LocalCAGUID: 0x505400fffe123456,
			LocalQPN: 0x11, ResponderResources: 16, InitiatorDepth: 16, RemoteCMResponseTimeout: 20,
			TransportType: cm.TransportRC, StartingPSN: 0x123456, LocalCMResponseTimeout: 20, RetryCount: 7,
			PKey: 0xffff, PathMTU: wire.MTU1024, RNRRetryCount: 7, MaxCMRetries: 15,
			Primary: cm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: ip1, RemoteGID: ip2,
				FlowLabel: 0x12345, Rate: 3, TrafficClass: 0x0a, HopLimit: 64, SL: 5, LocalACKTimeout: 14},
			PrivateData: [92]byte(concat(reqCMA, zeros(92-len(reqCMA)))),
		},
	},
	{
		name: "REQ every flag, IPv6, alternate path",
		tid:  1,
		mad: handMAD(0x0010, 1,
			poke{24 + 0, []byte{0xff, 0xff, 0xff, 0xfe}},
			poke{24 + 28, []byte{0x80, 0x01, 0x00, 0x00}},              // Q_Key
			poke{24 + 36, []byte{0xab, 0xcd, 0xef, 0x00}},              // local EECN, initiator depth 0
			poke{24 + 40, []byte{0x12, 0x34, 0x56, 1<<3 | 1<<1 | 1}},   // remote EECN, timeout 1, UC, flow control
			poke{24 + 48, []byte{0x7f, 0xff, 5<<4 | 0x08, 0x08 | 1}},   // P_Key, MTU 4096 RDC; SRQ, ext 1
			poke{24 + 56, ll1.AsSlice()},                               // local GID
			poke{24 + 72, ll2.AsSlice()},                               // remote GID
			poke{24 + 94, []byte{0x08, 0x00}},                          // subnet local
			poke{24 + 96, []byte{0x00, 0x01, 0x00, 0x02}},              // alternate LIDs
			poke{24 + 100, ll2.AsSlice()},                              // alternate local GID
			poke{24 + 132, []byte{0xff, 0xff, 0xf0, 0x3f, 0xff, 0x01}}, // alternate flow label, rate, tclass, hop limit
			poke{24 + 138, []byte{0xf0 | 0x08, 31<<3 | 0x04}},          // alternate SL 15 subnet local, ACK timeout 31, SAP supported
			poke{24 + 231, []byte{0x5a}},                               // last private data byte
		),
		msg: &cm.REQ{
			LocalCommID: 0xfffffffe, LocalQKey: 0x80010000, LocalEECN: 0xabcdef, RemoteEECN: 0x123456,
			RemoteCMResponseTimeout: 1, TransportType: cm.TransportUC, EndToEndFlowControl: true,
			PKey: 0x7fff, PathMTU: wire.MTU4096, RDCExists: true, SRQ: true, ExtTransportType: cm.ExtTransportXRC,
			Primary: cm.Path{LocalGID: ll1, RemoteGID: ll2, SubnetLocal: true},
			Alternate: cm.Path{LocalLID: 1, RemoteLID: 2, LocalGID: ll2, FlowLabel: 0xfffff, Rate: 63,
				TrafficClass: 0xff, HopLimit: 1, SL: 15, SubnetLocal: true, LocalACKTimeout: 31},
			SAPSupported: true,
			PrivateData:  [92]byte(concat(zeros(91), []byte{0x5a})),
		},
	},
	{
		name: "REP",
		tid:  0x0000000b_1234abcd,
		mad: handMAD(0x0013, 0x0000000b_1234abcd,
			poke{24 + 0, []byte{0x87, 0x65, 0x43, 0x21}},                          // local comm ID
			poke{24 + 4, []byte{0x12, 0x34, 0xab, 0xcd}},                          // remote comm ID: the REQ's
			poke{24 + 8, []byte{0x00, 0x00, 0x00, 0x00}},                          // local Q_Key
			poke{24 + 12, []byte{0x00, 0x00, 0x12, 0x00}},                         // QPN 0x12
			poke{24 + 16, []byte{0x00, 0x00, 0x00, 0x00}},                         // EECN
			poke{24 + 20, []byte{0xab, 0xcd, 0xef, 0x00}},                         // PSN 0xabcdef
			poke{24 + 24, []byte{16, 16, 15<<3 | 3<<1 | 1, 7<<5 | 0x10}},          // resources, depth, ACK delay 15, failover 3, flow control; RNR 7, SRQ
			poke{24 + 28, []byte{0x50, 0x54, 0x00, 0xff, 0xfe, 0x65, 0x43, 0x21}}, // local CA GUID
			poke{24 + 36, []byte("rep data")},                                     // private data
		),
		msg: &cm.REP{
			LocalCommID: 0x87654321, RemoteCommID: 0x1234abcd, LocalQPN: 0x12, StartingPSN: 0xabcdef,
			ResponderResources: 16, InitiatorDepth: 16, TargetACKDelay: 15, FailoverAccepted: 3,
			EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x505400fffe654321,
			PrivateData: [196]byte(concat([]byte("rep data"), zeros(196-8))),
		},
	},
	{
		name: "RTU",
		tid:  0x0000000b_1234abcd,
		mad: handMAD(0x0014, 0x0000000b_1234abcd,
			poke{24 + 0, []byte{0x12, 0x34, 0xab, 0xcd, 0x87, 0x65, 0x43, 0x21}}, // local, remote comm ID
			poke{24 + 8 + 223, []byte{0x01}},                                     // last private data byte
		),
		msg: &cm.RTU{LocalCommID: 0x1234abcd, RemoteCommID: 0x87654321, PrivateData: [224]byte(concat(zeros(223), []byte{1}))},
	},
	{
		name: "REJ invalid service ID",
		tid:  7,
		mad: handMAD(0x0012, 7,
			poke{24 + 0, []byte{0x00, 0x00, 0x00, 0x00, 0x12, 0x34, 0xab, 0xcd}}, // local comm ID 0, remote: the REQ's
			poke{24 + 8, []byte{0 << 6, 0 << 1, 0x00, 0x08}},                     // message REQ, ARI length 0, reason 8
		),
		msg: &cm.REJ{RemoteCommID: 0x1234abcd, MsgRejected: cm.MsgREQ, Reason: cm.RejInvalidServiceID},
	},
	{
		name: "REJ consumer defined, with ARI",
		tid:  8,
		mad: handMAD(0x0012, 8,
			poke{24 + 0, []byte{0x87, 0x65, 0x43, 0x21, 0x12, 0x34, 0xab, 0xcd}},
			poke{24 + 8, []byte{1 << 6, 127 << 1, 0x00, 0x1c}}, // message REP, ARI length 127, reason 28
			poke{24 + 12, []byte{0xa1}},                        // ARI
			poke{24 + 83, []byte{0xa2, 0xb1}},                  // last ARI byte, first private data byte
			poke{24 + 231, []byte{0xb2}},                       // last private data byte
		),
		msg: &cm.REJ{
			LocalCommID: 0x87654321, RemoteCommID: 0x1234abcd, MsgRejected: cm.MsgREP, ARILength: 127,
			Reason:      cm.RejConsumerDefined,
			ARI:         [72]byte(concat([]byte{0xa1}, zeros(70), []byte{0xa2})),
			PrivateData: [148]byte(concat([]byte{0xb1}, zeros(146), []byte{0xb2})),
		},
	},
	{
		name: "MRA",
		tid:  9,
		mad: handMAD(0x0011, 9,
			poke{24 + 0, []byte{0x87, 0x65, 0x43, 0x21, 0x12, 0x34, 0xab, 0xcd}},
			poke{24 + 8, []byte{2 << 6, 24 << 3, 0xc1}}, // message other, service timeout 24, private data
			poke{24 + 231, []byte{0xc2}},
		),
		msg: &cm.MRA{
			LocalCommID: 0x87654321, RemoteCommID: 0x1234abcd, MsgMRAed: cm.MsgOther, ServiceTimeout: 24,
			PrivateData: [222]byte(concat([]byte{0xc1}, zeros(220), []byte{0xc2})),
		},
	},
	{
		name: "DREQ",
		tid:  10,
		mad: handMAD(0x0015, 10,
			poke{24 + 0, []byte{0x12, 0x34, 0xab, 0xcd, 0x87, 0x65, 0x43, 0x21}},
			poke{24 + 8, []byte{0x00, 0x00, 0x12, 0x00, 0xd1}}, // remote QPN 0x12, private data
		),
		msg: &cm.DREQ{LocalCommID: 0x1234abcd, RemoteCommID: 0x87654321, RemoteQPN: 0x12,
			PrivateData: [220]byte(concat([]byte{0xd1}, zeros(219)))},
	},
	{
		name: "DREP",
		tid:  10,
		mad: handMAD(0x0016, 10,
			poke{24 + 0, []byte{0x87, 0x65, 0x43, 0x21, 0x12, 0x34, 0xab, 0xcd, 0xe1}},
		),
		msg: &cm.DREP{LocalCommID: 0x87654321, RemoteCommID: 0x1234abcd,
			PrivateData: [224]byte(concat([]byte{0xe1}, zeros(223)))},
	},
	{
		name: "SIDR_REQ",
		tid:  11,
		mad: handMAD(0x0017, 11,
			poke{24 + 0, []byte{0x00, 0x00, 0x00, 0x2a}},                         // request ID
			poke{24 + 4, []byte{0xff, 0xff, 0x00, 0x00}},                         // P_Key, reserved
			poke{24 + 8, []byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x11, 0x48, 0x53}}, // service ID: UDP port 18515
			poke{24 + 16, reqCMA},                                                // private data
		),
		msg: &cm.SIDRREQ{RequestID: 42, PKey: 0xffff, ServiceID: 0x0000000001114853,
			PrivateData: [216]byte(concat(reqCMA, zeros(216-len(reqCMA))))},
	},
	{
		name: "SIDR_REP",
		tid:  11,
		mad: handMAD(0x0018, 11,
			poke{24 + 0, []byte{0x00, 0x00, 0x00, 0x2a}},                          // request ID
			poke{24 + 4, []byte{0x00, 0x48, 0x00, 0x00}},                          // status success, additional info length 72
			poke{24 + 8, []byte{0x00, 0x00, 0x13, 0x00}},                          // QPN 0x13
			poke{24 + 12, []byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x11, 0x48, 0x53}}, // service ID
			poke{24 + 20, []byte{0x01, 0x23, 0x45, 0x67}},                         // Q_Key, rdma_cm's RDMA_UDP_QKEY
			poke{24 + 24, []byte{0xf1}},                                           // additional information
			poke{24 + 95, []byte{0xf2, 0xf3}},                                     // its last byte, first private data byte
			poke{24 + 231, []byte{0xf4}},                                          // last private data byte
		),
		msg: &cm.SIDRREP{RequestID: 42, Status: cm.SIDRSuccess, AddInfoLength: 72, QPN: 0x13,
			ServiceID: 0x0000000001114853, QKey: 0x01234567,
			AddInfo:     [72]byte(concat([]byte{0xf1}, zeros(70), []byte{0xf2})),
			PrivateData: [136]byte(concat([]byte{0xf3}, zeros(134), []byte{0xf4}))},
	},
}

func TestVectors(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			if len(v.mad) != mad.Len {
				t.Fatalf("vector is %d bytes", len(v.mad))
			}
			m, tid, err := cm.Decode(v.mad)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if tid != v.tid {
				t.Errorf("tid = %#x, want %#x", tid, v.tid)
			}
			if !reflect.DeepEqual(m, v.msg) {
				t.Errorf("Decode =\n%+v\nwant\n%+v", m, v.msg)
			}
			b := cm.Append(nil, v.tid, v.msg)
			if !bytes.Equal(b, v.mad) {
				t.Errorf("Append =\n% x\nwant\n% x", b, v.mad)
			}
			// Encode writes over whatever the buffer held.
			junk := bytes.Repeat([]byte{0xee}, mad.Len+4)
			cm.Encode(junk, v.tid, v.msg)
			if !bytes.Equal(junk[:mad.Len], v.mad) || !bytes.Equal(junk[mad.Len:], []byte{0xee, 0xee, 0xee, 0xee}) {
				t.Errorf("Encode over junk =\n% x\nwant\n% x", junk, v.mad)
			}
		})
	}
}

// TestKnownOffsets pins the fields the rest of gorxe and the kernel depend
// on at their MAD offsets, once more in plain sight.
func TestKnownOffsets(t *testing.T) {
	req := cm.Append(nil, 0, vectors[0].msg)
	rep := cm.Append(nil, 0, vectors[2].msg)
	rej := cm.Append(nil, 0, vectors[4].msg)
	sidr := cm.Append(nil, 0, vectors[9].msg)
	for _, c := range []struct {
		name string
		b    []byte
		off  int
		want []byte
	}{
		{"REQ attribute ID", req, 16, []byte{0x00, 0x10}},
		{"REQ local comm ID", req, 24, []byte{0x12, 0x34, 0xab, 0xcd}},
		{"REQ service ID", req, 32, []byte{0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x06}},
		{"REQ QPN and responder resources", req, 56, []byte{0x00, 0x00, 0x11, 0x10}},
		{"REQ PSN, CM timeout, retry count", req, 68, []byte{0x12, 0x34, 0x56, 0xa7}},
		{"REQ MTU and RNR retry", req, 74, []byte{0x37}},
		{"REQ primary local GID", req, 80, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}},
		{"REQ primary remote GID", req, 96, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2}},
		{"REQ private data", req, 164, []byte{0x00, 0x40, 0xc0, 0x01}},
		{"REP attribute ID", rep, 16, []byte{0x00, 0x13}},
		{"REP comm IDs", rep, 24, []byte{0x87, 0x65, 0x43, 0x21, 0x12, 0x34, 0xab, 0xcd}},
		{"REP QPN", rep, 36, []byte{0x00, 0x00, 0x12, 0x00}},
		{"REP PSN", rep, 44, []byte{0xab, 0xcd, 0xef, 0x00}},
		{"REP private data", rep, 60, []byte("rep data")},
		{"REJ reason", rej, 34, []byte{0x00, 0x08}},
		{"SIDR_REQ service ID", sidr, 32, []byte{0, 0, 0, 0, 0x01, 0x11, 0x48, 0x53}},
		{"SIDR_REQ private data", sidr, 40, []byte{0x00, 0x40, 0xc0, 0x01}},
	} {
		if got := c.b[c.off : c.off+len(c.want)]; !bytes.Equal(got, c.want) {
			t.Errorf("%s at MAD offset %d = % x, want % x", c.name, c.off, got, c.want)
		}
	}
}

// TestReserved: decoding ignores every reserved bit, as the kernel's
// masked reads do, and encoding writes them zero. A body of all ones
// re-encodes as all ones less exactly the reserved bits of the IBTA
// tables, which proves each field's position and width too.
func TestReserved(t *testing.T) {
	type rsvd struct {
		from, to int  // body offsets [from, to)
		mask     byte // reserved bits in each byte
	}
	for _, c := range []struct {
		attr uint16
		rsvd []rsvd
	}{
		{0x0010, []rsvd{{4, 8, 0xff}, {24, 28, 0xff}, // REQ
			{90, 91, 0x0f}, {91, 92, 0xc0}, {94, 96, 0x07}, // primary path
			{134, 135, 0x0f}, {135, 136, 0xc0}, {138, 139, 0x07}, {139, 140, 0x03}}}, // alternate path
		{0x0011, []rsvd{{8, 9, 0x3f}, {9, 10, 0x07}}},                                    // MRA
		{0x0012, []rsvd{{8, 9, 0x3f}, {9, 10, 0x01}}},                                    // REJ
		{0x0013, []rsvd{{15, 16, 0xff}, {19, 20, 0xff}, {23, 24, 0xff}, {27, 28, 0x0f}}}, // REP
		{0x0014, nil},                                  // RTU
		{0x0015, []rsvd{{11, 12, 0xff}}},               // DREQ
		{0x0016, nil},                                  // DREP
		{0x0017, []rsvd{{6, 8, 0xff}}},                 // SIDR_REQ
		{0x0018, []rsvd{{6, 8, 0xff}, {11, 12, 0xff}}}, // SIDR_REP
	} {
		ones := handMAD(c.attr, 0, poke{24, bytes.Repeat([]byte{0xff}, 232)})
		// The header fields a CM ignores, garbage too.
		copy(ones[4:8], []byte{0xde, 0xad, 0xbe, 0xef})
		copy(ones[18:24], []byte{0xff, 0xff, 0x12, 0x34, 0x56, 0x78})
		m, tid, err := cm.Decode(ones)
		if err != nil {
			t.Fatalf("attribute %#04x: %v", c.attr, err)
		}
		want := handMAD(c.attr, tid, poke{24, bytes.Repeat([]byte{0xff}, 232)})
		for _, r := range c.rsvd {
			for i := r.from; i < r.to; i++ {
				want[24+i] &^= r.mask
			}
		}
		if got := cm.Append(nil, tid, m); !bytes.Equal(got, want) {
			t.Errorf("%v: all ones re-encode as\n% x\nwant\n% x", m.AttrID(), got, want)
		}
		// Clean reserved bits decode to the same message.
		if m2, _, _ := cm.Decode(want); !reflect.DeepEqual(m2, m) {
			t.Errorf("%v: reserved bits changed the decoded message", m.AttrID())
		}
	}
}

// TestMasking: a field wider than its wire field is cut to its width and
// does not spill into its neighbours.
func TestMasking(t *testing.T) {
	wide := &cm.REQ{LocalQPN: 0xff123456, StartingPSN: 0xff654321, LocalEECN: 0xffffffff,
		RemoteCMResponseTimeout: 0xff, TransportType: 0xff, RetryCount: 0xff, LocalCMResponseTimeout: 0xff,
		PathMTU: 0xff, RNRRetryCount: 0xff, MaxCMRetries: 0xff, ExtTransportType: 0xff,
		Primary: cm.Path{FlowLabel: 0xffffffff, Rate: 0xff, SL: 0xff, LocalACKTimeout: 0xff}}
	got, _, err := cm.Decode(cm.Append(nil, 0, wide))
	if err != nil {
		t.Fatal(err)
	}
	want := &cm.REQ{LocalQPN: 0x123456, StartingPSN: 0x654321, LocalEECN: 0xffffff,
		RemoteCMResponseTimeout: 31, TransportType: 3, RetryCount: 7, LocalCMResponseTimeout: 31,
		PathMTU: 15, RNRRetryCount: 7, MaxCMRetries: 15, ExtTransportType: 7,
		Primary: cm.Path{FlowLabel: 0xfffff, Rate: 63, SL: 15, LocalACKTimeout: 31}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("wide REQ decodes as\n%+v\nwant\n%+v", got, want)
	}
	rep, _, _ := cm.Decode(cm.Append(nil, 0, &cm.REP{TargetACKDelay: 0xff, FailoverAccepted: 0xff, RNRRetryCount: 0xff}))
	if want := (&cm.REP{TargetACKDelay: 31, FailoverAccepted: 3, RNRRetryCount: 7}); !reflect.DeepEqual(rep, want) {
		t.Errorf("wide REP decodes as %+v, want %+v", rep, want)
	}
	rej, _, _ := cm.Decode(cm.Append(nil, 0, &cm.REJ{MsgRejected: 0xff, ARILength: 0xff}))
	if want := (&cm.REJ{MsgRejected: 3, ARILength: 127}); !reflect.DeepEqual(rej, want) {
		t.Errorf("wide REJ decodes as %+v, want %+v", rej, want)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := vectors[0].mad
	for n := range mad.Len {
		if _, _, err := cm.Decode(good[:n]); !errors.Is(err, mad.ErrShort) {
			t.Fatalf("Decode of %d bytes: %v, want mad.ErrShort", n, err)
		}
	}
	// Bytes after the MAD are not part of it.
	if m, _, err := cm.Decode(append(bytes.Clone(good), 0xff)); err != nil || !reflect.DeepEqual(m, vectors[0].msg) {
		t.Errorf("Decode with a trailing byte: %v, %v", m, err)
	}
	for _, c := range []struct {
		name string
		off  int
		b    []byte
		want error
	}{
		{"base version 2", 0, []byte{2}, mad.ErrBaseVersion},
		{"class SA", 1, []byte{0x03}, cm.ErrNotCM},
		{"class version 1", 2, []byte{1}, cm.ErrNotCM},
		{"method GET", 3, []byte{0x01}, cm.ErrMethod},
		{"method SEND with the response bit", 3, []byte{0x83}, cm.ErrMethod},
		{"attribute 0", 16, []byte{0x00, 0x00}, cm.ErrAttrID},
		{"attribute ClassPortInfo", 16, []byte{0x00, 0x01}, cm.ErrAttrID},
		{"attribute 0x000f", 16, []byte{0x00, 0x0f}, cm.ErrAttrID},
		{"attribute LAP", 16, []byte{0x00, 0x19}, cm.ErrAttrID},
		{"attribute APR", 16, []byte{0x00, 0x1a}, cm.ErrAttrID},
		{"attribute 0x1010", 16, []byte{0x10, 0x10}, cm.ErrAttrID},
	} {
		b := bytes.Clone(good)
		copy(b[c.off:], c.b)
		if m, _, err := cm.Decode(b); !errors.Is(err, c.want) || m != nil {
			t.Errorf("%s: %v, %v; want %v", c.name, m, err, c.want)
		}
	}
}

func TestString(t *testing.T) {
	for i, want := range []string{
		"REQ comm_id=0x1234abcd service_id=0x0000000001061c06 qpn=0x000011 psn=0x123456 mtu=1024 transport=RC " +
			"resp_res=16 init_depth=16 qkey=0x0 pkey=0xffff retry=7 rnr_retry=7 srq=false cm_timeout=20/20 " +
			"max_cm_retries=15 ca_guid=0x505400fffe123456 gid=10.0.0.1->10.0.0.2 lid=0xffff->0xffff " +
			"flow_label=0x12345 rate=3 tclass=10 hop_limit=64 sl=5 subnet_local=false ack_timeout=14 " +
			"cma src=10.0.0.1:49153 dst=10.0.0.2",
		"REQ comm_id=0xfffffffe service_id=0x0000000000000000 qpn=0x000000 psn=0x000000 mtu=4096 transport=UC " +
			"resp_res=0 init_depth=0 qkey=0x80010000 pkey=0x7fff retry=0 rnr_retry=0 srq=true cm_timeout=1/0 " +
			"max_cm_retries=0 ca_guid=0x0000000000000000 gid=fe80::5054:ff:fe12:3456->fe80::5054:ff:fe65:4321 " +
			"lid=0x0->0x0 flow_label=0x0 rate=0 tclass=0 hop_limit=0 sl=0 subnet_local=true ack_timeout=0",
		"REP comm_id=0x87654321 remote_comm_id=0x1234abcd qpn=0x000012 psn=0xabcdef resp_res=16 init_depth=16 " +
			"qkey=0x0 rnr_retry=7 srq=true target_ack_delay=15 failover=3 flow_control=true ca_guid=0x505400fffe654321",
		"RTU comm_id=0x1234abcd remote_comm_id=0x87654321",
		"REJ comm_id=0x0 remote_comm_id=0x1234abcd msg=REQ reason=8 (invalid service ID) ari_len=0",
		"REJ comm_id=0x87654321 remote_comm_id=0x1234abcd msg=REP reason=28 (consumer defined) ari_len=127",
		"MRA comm_id=0x87654321 remote_comm_id=0x1234abcd msg=other service_timeout=24",
		"DREQ comm_id=0x1234abcd remote_comm_id=0x87654321 remote_qpn=0x000012",
		"DREP comm_id=0x87654321 remote_comm_id=0x1234abcd",
		"SIDR_REQ request_id=0x2a service_id=0x0000000001114853 pkey=0xffff cma src=10.0.0.1:49153 dst=10.0.0.2",
		"SIDR_REP request_id=0x2a status=0 (success) service_id=0x0000000001114853 qpn=0x000013 qkey=0x1234567",
	} {
		if got := vectors[i].msg.String(); got != want {
			t.Errorf("%s String =\n%s\nwant\n%s", vectors[i].name, got, want)
		}
		if strings.Contains(want, "\n") {
			t.Errorf("%s String is more than one line", vectors[i].name)
		}
	}
}

func TestEnumStrings(t *testing.T) {
	for _, c := range []struct {
		s    interface{ String() string }
		want string
	}{
		{cm.RejNoQP, "no QP"},
		{cm.RejTimeout, "timeout"},
		{cm.RejInvalidServiceID, "invalid service ID"},
		{cm.RejStaleConn, "stale connection"},
		{cm.RejInvalidGID, "invalid GID"},
		{cm.RejConsumerDefined, "consumer defined"},
		{cm.RejVendorOptionNotSupported, "vendor option not supported"},
		{cm.RejReason(34), "reason 34"},
		{cm.RejReason(0), "reason 0"},
		{cm.MsgType(3), "msg(3)"},
		{cm.SIDRUnsupportedVersion, "unsupported version"},
		{cm.SIDRStatus(6), "status(6)"},
	} {
		if got := c.s.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.s, got, c.want)
		}
	}
	// Reason codes are Linux's enum ib_cm_rej_reason.
	for r, n := range map[cm.RejReason]uint16{
		cm.RejNoQP: 1, cm.RejTimeout: 4, cm.RejInvalidServiceID: 8, cm.RejStaleConn: 10,
		cm.RejInvalidGID: 12, cm.RejInvalidMTU: 26, cm.RejConsumerDefined: 28,
		cm.RejDuplicateLocalCommID: 30, cm.RejVendorOptionNotSupported: 35,
	} {
		if uint16(r) != n {
			t.Errorf("%v = %d, want %d", r, uint16(r), n)
		}
	}
}

func TestPrivateDataLengths(t *testing.T) {
	// Each message's fields end where its private data starts, and its
	// private data where the MAD ends (ib_cm.h, enum ib_cm_data_size).
	for _, c := range []struct {
		name      string
		start, n  int
		arrayLen  int
		constSize int
	}{
		{"REQ", 140, 92, len(cm.REQ{}.PrivateData), cm.REQPrivateDataLen},
		{"REP", 36, 196, len(cm.REP{}.PrivateData), cm.REPPrivateDataLen},
		{"RTU", 8, 224, len(cm.RTU{}.PrivateData), cm.RTUPrivateDataLen},
		{"REJ", 84, 148, len(cm.REJ{}.PrivateData), cm.REJPrivateDataLen},
		{"MRA", 10, 222, len(cm.MRA{}.PrivateData), cm.MRAPrivateDataLen},
		{"DREQ", 12, 220, len(cm.DREQ{}.PrivateData), cm.DREQPrivateDataLen},
		{"DREP", 8, 224, len(cm.DREP{}.PrivateData), cm.DREPPrivateDataLen},
		{"SIDR_REQ", 16, 216, len(cm.SIDRREQ{}.PrivateData), cm.SIDRREQPrivateDataLen},
		{"SIDR_REP", 96, 136, len(cm.SIDRREP{}.PrivateData), cm.SIDRREPPrivateDataLen},
	} {
		if c.start+c.n != cm.BodyLen || c.arrayLen != c.n || c.constSize != c.n {
			t.Errorf("%s: private data at %d, %d bytes (array %d, const %d); body is %d",
				c.name, c.start, c.n, c.arrayLen, c.constSize, cm.BodyLen)
		}
	}
}
