package scene

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
	cmwire "github.com/gorxe/gorxe/wire/cm"
)

// cmPort is the port B's rdma_cm listener takes (rping's default).
const cmPort = 7174

// now is a ctx that is done: the connection manager's calls take what is
// there without waiting, as a program on a Loop makes them.
var now = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// decided reports whether c's handshake has ended, and how.
func decided(c *cm.Conn) (bool, error) {
	err := c.Established(now)
	if errors.Is(err, context.Canceled) {
		return false, nil
	}
	return true, err
}

// firstMAD returns a drop function true for the first CM message of
// type T a host sends.
func firstMAD[T cmwire.Message]() func(*wire.Packet) bool {
	done := false
	return func(p *wire.Packet) bool {
		if done || p.DETH == nil {
			return false
		}
		msg, _, err := cmwire.Decode(p.Payload)
		if _, ok := msg.(T); !ok || err != nil {
			return false
		}
		done = true
		return true
	}
}

func cmLostREP(st *Stage) error {
	a, b := st.A, st.B
	l, err := b.CM.Listen(b.Addr, cmPort)
	if err != nil {
		return err
	}
	b.link.drop = firstMAD[*cmwire.REP]()
	st.say("B listens on port %d (rdma_listen); A connects to it (rdma_connect) with its QP %#x; the fabric will drop B's first REP", cmPort, uint32(a.QP.Num()))
	ca, err := a.CM.Connect(netip.AddrPortFrom(b.Addr, cmPort), cm.ConnParams{QP: a.QP, Access: access, MTU: mtu})
	if err != nil {
		return err
	}
	var req *cm.Request
	st.run(time.Second, func() bool {
		req, _ = l.Accept(now)
		return req != nil
	})
	if req == nil {
		return fmt.Errorf("B's listener has no request from A")
	}
	st.say("B's listener has A's request (RDMA_CM_EVENT_CONNECT_REQUEST); B accepts it (rdma_accept) with its QP %#x and a receive posted", uint32(b.QP.Num()))
	cb, err := req.Accept(cm.ConnParams{QP: b.QP, Access: access, MTU: mtu,
		Receives: []qp.RecvWR{{WRID: 1, SGList: b.sge(0, 4096)}}})
	if err != nil {
		return err
	}
	var errA, errB error
	doneA, doneB := false, false
	st.run(time.Minute, func() bool {
		if !doneA {
			if doneA, errA = decided(ca); doneA {
				st.say("A: RDMA_CM_EVENT_ESTABLISHED (%v)", orOK(errA))
			}
		}
		if !doneB {
			if doneB, errB = decided(cb); doneB {
				st.say("B: RDMA_CM_EVENT_ESTABLISHED (%v)", orOK(errB))
			}
		}
		return doneA && doneB
	})
	if !doneA || !doneB || errA != nil || errB != nil {
		return fmt.Errorf("the handshake did not complete: A %v %v, B %v %v", doneA, errA, doneB, errB)
	}
	sa, sb := a.CM.Stats(), b.CM.Stats()
	if err := st.check(sa.Retransmitted == 1, "A's CM timer sent the REQ again once, B's the REP %d time(s); the REP was answered, the RTU was the end", sb.Retransmitted); err != nil {
		return err
	}
	qa, qb := a.QP.Query(), b.QP.Query()
	if err := st.check(qa.State == qp.StateRTS && qb.State == qp.StateRTS && qa.DestQPNum == b.QP.Num() && qb.DestQPNum == a.QP.Num() && qa.SQPSN == qb.RQPSN && qb.SQPSN == qa.RQPSN,
		"both QPs are in RTS, each one's destination QP the other, each one's first PSN (A %d, B %d) the PSN the other expects", qa.SQPSN, qb.SQPSN); err != nil {
		return err
	}
	st.fill(a.Buf[:4096])
	if _, err := st.sendOK(a, qp.SendWR{WRID: 1, Opcode: qp.WRSend, SGList: a.sge(0, 4096)}); err != nil {
		return err
	}
	rwc, ok := st.wait(b.RCQ, time.Second)
	if !ok {
		return fmt.Errorf("B: no receive completion")
	}
	st.say("B's receive CQ: %v", rwc)
	return st.check(bytes.Equal(a.Buf[:4096], b.Buf[:4096]), "the SEND's 4096 bytes are in B's receive buffer")
}

// orOK names a handshake's outcome.
func orOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
