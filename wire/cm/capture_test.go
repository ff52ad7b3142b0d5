package cm_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/internal/pcaptest"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/cm"
	"github.com/gorxe/gorxe/wire/mad"
)

// TestKernelCapture decodes the CM MADs two kernel rxe devices exchanged
// for perftest -R (two connections on port 18515, each torn down by a
// different side): the messages come in the handshake's order with
// matching communication IDs, rdma_cm's header names the peers, and each
// encodes back to the bytes the kernel sent.
func TestKernelCapture(t *testing.T) {
	var msgs []cm.Message
	for _, f := range pcaptest.Read(t, "../../testdata/rxe/perftest-mtu4096-mixed.pcap").Frames {
		var p wire.Packet
		if wire.ParseFrame(&p, f) != nil || p.DETH == nil || p.BTH.DestQP() != 1 {
			continue
		}
		m, tid, err := cm.Decode(p.Payload)
		if err != nil {
			t.Fatalf("MAD %d: %v", len(msgs), err)
		}
		if again := cm.Append(nil, tid, m); !bytes.Equal(again, p.Payload[:mad.Len]) {
			t.Fatalf("%v encodes to\n% x\nnot the kernel's\n% x", m, again, p.Payload[:mad.Len])
		}
		msgs = append(msgs, m)
	}
	want := []string{"REQ", "REP", "RTU", "REQ", "REP", "RTU", "DREQ", "DREP", "DREQ", "DREP"}
	if len(msgs) != len(want) {
		t.Fatalf("%d CM messages, want %d", len(msgs), len(want))
	}
	for i, m := range msgs {
		if got := m.AttrID().String(); got != want[i] {
			t.Fatalf("message %d is %s, want %s", i, got, want[i])
		}
	}
	for i := 0; i < 6; i += 3 {
		req, rep, rtu := msgs[i].(*cm.REQ), msgs[i+1].(*cm.REP), msgs[i+2].(*cm.RTU)
		if rep.RemoteCommID != req.LocalCommID || rtu.LocalCommID != req.LocalCommID || rtu.RemoteCommID != rep.LocalCommID {
			t.Fatalf("handshake %d: comm IDs REQ %#x, REP %#x->%#x, RTU %#x->%#x", i/3, req.LocalCommID, rep.LocalCommID, rep.RemoteCommID, rtu.LocalCommID, rtu.RemoteCommID)
		}
		if req.ServiceID != cm.ServiceID(cm.PortSpaceTCP, 18515) || req.TransportType != cm.TransportRC || req.PathMTU != wire.MTU4096 {
			t.Fatalf("REQ %v: want perftest's service ID, RC, MTU 4096", req)
		}
		hdr, err := cm.ParseCMAHeader(req.PrivateData[:])
		if err != nil || hdr.Src != netip.MustParseAddr("10.9.0.3") || hdr.Dst != netip.MustParseAddr("10.9.0.2") ||
			req.Primary.LocalGID != hdr.Src || req.Primary.RemoteGID != hdr.Dst {
			t.Fatalf("REQ %v: rdma_cm header %v (%v)", req, hdr, err)
		}
	}
}
