package cm_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rnic/rnictest"
	wcm "github.com/gorxe/gorxe/wire/cm"
	"github.com/gorxe/gorxe/wire/deth"
	"github.com/gorxe/gorxe/wire/mad"
)

// FuzzLiveQP1 sends arbitrary MADs, and CM messages built from arbitrary
// bytes, to the QP 1 of a host that listens and holds an established
// connection; the manager must drop or answer each without a panic, and
// the connection must stay up and carry data after them.
func FuzzLiveQP1(f *testing.F) {
	for _, m := range []wcm.Message{
		&wcm.REQ{ServiceID: wcm.ServiceID(wcm.PortSpaceTCP, 7174)}, &wcm.REP{}, &wcm.RTU{}, &wcm.REJ{}, &wcm.MRA{},
		&wcm.DREQ{}, &wcm.DREP{}, &wcm.SIDRREQ{}, &wcm.SIDRREP{},
	} {
		f.Add(wcm.Append(nil, 1, m))
	}
	f.Add(make([]byte, mad.Len))

	fab := mem.NewFabric()
	a, b := newHost(f, fab, "10.0.0.1", quick), newHost(f, fab, "10.0.0.2", quick)
	ca, cb := connect(f, a, b)
	// A third device sends the fuzzer's MADs from a UD QP of its own.
	x := newUDSender(f, fab, "10.0.0.3")
	dst := b.dev.GIDs()[0]
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > mad.Len {
			in = in[:mad.Len]
		}
		msg := append(in[:len(in):len(in)], make([]byte, mad.Len-len(in))...)
		x.send(t, dst, msg)
		x.send(t, dst, forceCM(msg))
		// The connection still carries a WRITE.
		checkWrite(t, a, b, ca, cb)
	})
}

// forceCM makes b a CM MAD (base version 1, class 0x07, version 2,
// method SEND) with b's attribute ID folded onto the nine CM messages, so
// that the fuzzer reaches the message handlers.
func forceCM(b []byte) []byte {
	out := append([]byte(nil), b...)
	out[0], out[1], out[2], out[3] = 1, 0x07, 2, 0x03
	out[16], out[17] = 0, 0x10+out[17]%9
	return out
}

type udSender struct {
	dev *rnic.Device
	pd  *mr.PD
	cq  *cq.CQ
	qp  *rnic.QP
	ahs map[netip.Addr]*qp.AH
}

func newUDSender(t testing.TB, f *mem.Fabric, addr string) *udSender {
	t.Helper()
	return udSenderOn(t, rnictest.Open(t, f, addr))
}

// udSenderOn makes a UD QP on dev that sends raw MADs to QP 1s, from
// dev's address.
func udSenderOn(t testing.TB, dev *rnic.Device) *udSender {
	t.Helper()
	s := &udSender{dev: dev, pd: dev.AllocPD(), ahs: map[netip.Addr]*qp.AH{}}
	var err error
	if s.cq, err = dev.CreateCQ(16); err != nil {
		t.Fatal(err)
	}
	if s.qp, err = dev.CreateQP(qp.InitAttr{Type: qp.TypeUD, PD: s.pd, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 1, MaxInlineData: mad.Len}}); err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		a    qp.Attr
		mask qp.AttrMask
	}{
		{qp.Attr{State: qp.StateInit, Port: 1, QKey: deth.GSIQKey}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey}, // a Q_Key with the high bit set sends the QP's own
		{qp.Attr{State: qp.StateRTR}, qp.AttrState},
		{qp.Attr{State: qp.StateRTS}, qp.AttrState | qp.AttrSQPSN},
	} {
		if err := s.qp.Modify(&st.a, st.mask); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *udSender) send(t testing.TB, dst netip.Addr, b []byte) {
	ah := s.ahs[dst]
	if ah == nil {
		var err error
		if ah, err = s.dev.CreateAH(s.pd, qp.AddressVector{DGID: dst, HopLimit: 64}); err != nil {
			t.Fatal(err)
		}
		s.ahs[dst] = ah
	}
	wr := qp.SendWR{Opcode: qp.WRSend, Flags: qp.SendInline, Inline: b, AH: ah, RemoteQPN: rnic.GSIQPN, RemoteQKey: deth.GSIQKey}
	if _, err := s.qp.PostSend([]qp.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
}

// checkWrite has a's side of the connection WRITE to b's and waits for
// it: the connection is up and carries data.
func checkWrite(t testing.TB, a, b *host, ca, cb *cm.Conn) {
	t.Helper()
	select {
	case <-ca.Disconnected():
		t.Fatal("a stray MAD ended the connection")
	case <-cb.Disconnected():
		t.Fatal("a stray MAD ended the connection")
	default:
	}
	seq := a.buf[0] + 1
	a.buf[0] = seq
	wr := qp.SendWR{WRID: uint64(seq), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey(),
		SGList: []qp.SGE{{Addr: a.mr.IOVA(), Length: 1, LKey: a.mr.LKey()}}}
	if _, err := ca.QP().PostSend([]qp.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	var wc [1]cq.WC
	if n, err := a.cq.Wait(ctxFor(t, 5*time.Second), wc[:]); n != 1 || err != nil || wc[0].Status != cq.StatusSuccess {
		t.Fatalf("WRITE after stray MADs: %v %v", wc[0], err)
	}
	b.mr.Writes()
	if !bytes.Equal(b.buf[:1], []byte{seq}) {
		t.Fatal("the WRITE did not land")
	}
}
