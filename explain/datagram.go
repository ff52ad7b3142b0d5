package explain

import (
	"fmt"

	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/cm"
)

// datagram explains a UD SEND: a CM message when it goes to QP 1, and
// otherwise a datagram of an application's UD QPs.
func (m *model) datagram(i int, p *wire.Packet) {
	pk := m.pkt(i)
	if p.DETH == nil {
		m.set(i, "malformed", "A UD packet without a DETH.")
		return
	}
	a := End{Addr: pk.Src, QPN: uint32(p.DETH.SrcQP())}
	b := End{Addr: pk.Dst, QPN: pk.DestQP}
	key := [2]End{a, b}
	if b.Addr < a.Addr || b.Addr == a.Addr && b.QPN < a.QPN {
		key = [2]End{b, a}
	}
	c := m.ud[key]
	if c == nil {
		svc := "UD"
		switch {
		case a.QPN == 1 && b.QPN == 1:
			svc = "CM"
		case bth.QPN(b.QPN) == bth.MulticastQPN:
			svc = "UD multicast"
		}
		c = newConn(len(m.conns), bth.ServiceUD, a, b)
		c.tids = make(map[cmKey]cmSent)
		c.reqs = make(map[uint64]bth.QPN)
		c.heard = make(map[cmKey]cmHeard)
		m.ud[key] = c
		m.conns = append(m.conns, c)
		m.r.Conns = append(m.r.Conns, Connection{Service: svc, Ends: [2]End{a, b}})
	}
	side := 0
	if c.ends[0].End != a {
		side = 1
	}
	pk.Conn = c.idx
	if c.first < 0 {
		c.first = pk.Time
	}
	c.last = pk.Time
	c.sum.Packets[side]++
	if b.QPN == 1 {
		pk.Text = c.cmMessage(m, i, side, p)
		return
	}
	c.sum.Messages[side]++
	c.sum.Bytes[side] += int64(len(p.Payload))
	if bth.QPN(b.QPN) == bth.MulticastQPN {
		if !p.Dst().Unmap().IsMulticast() {
			m.set(i, "malformed", fmt.Sprintf("UD SEND to the multicast QP (0xffffff) at %s, which is no multicast group: no QP receives it (IBTA §10.5.2.5).", pk.Dst))
			return
		}
		pk.Text = fmt.Sprintf("UD SEND of %d bytes from QP %#x to the multicast QP (0xffffff) of group %s with Q_Key %#x: every QP attached to the group on each host that joined it (IGMP or MLD) gets a copy, into a posted receive of its own if the Q_Key is its own, behind a GRH naming the sender and the group; no ACK, no retry, and at most one MTU (IBTA §10.5.2.5).",
			len(p.Payload), a.QPN, pk.Dst, p.DETH.QKey())
		return
	}
	pk.Text = fmt.Sprintf("UD SEND of %d bytes from QP %#x to QP %#x with Q_Key %#x: a datagram, delivered to the next posted receive if the Q_Key matches, with a GRH of the sender's address in front; no ACK, no retry, and at most one MTU.",
		len(p.Payload), a.QPN, b.QPN, p.DETH.QKey())
}

// cmKey names a CM message to find its retransmissions: by its
// transaction, its type and the side that sends it. For heard, attr is
// empty and side is the receiver.
type cmKey struct {
	tid  uint64
	attr string
	side int
}

// cmSent is where a CM message was sent first and last: rows of the
// report.
type cmSent struct{ first, last int }

// cmHeard is a CM message a side received: its row, whether it was a
// repeat, and where in the capture it arrived (the sighting's index).
type cmHeard struct {
	row, at int
	repeat  bool
	msg     string // its name
}

// cmArrival is what an arriving sighting of a CM message needs to tell
// its receiver it came.
type cmArrival struct {
	c   *conn
	key cmKey
	h   cmHeard
}

// cmMessage explains a MAD of the communication manager on QP 1.
func (c *conn) cmMessage(m *model, i, side int, p *wire.Packet) string {
	msg, tid, err := cm.Decode(p.Payload)
	if err != nil {
		return fmt.Sprintf("A MAD to QP 1 (the General Services QP) that is not a CM message gorxe reads: %v.", err)
	}
	pk := m.pkt(i)
	k := cmKey{tid, fmt.Sprintf("%T", msg), side}
	sent, repeat := c.tids[k]
	// The receiver hears it when its arrival is seen, in a capture at
	// both ends; or else, as far as the capture can tell, now.
	a := cmArrival{c: c, key: cmKey{tid: tid, side: 1 - side}, h: cmHeard{row: i, at: pk.Index, repeat: repeat, msg: cmName(msg)}}
	if pk.leaving {
		m.cmArrivals[i] = a
	} else {
		c.heard[a.key] = a.h
	}
	if repeat {
		c.sum.Retransmissions[side]++
		pk.Anomaly = "retransmission"
		prev := m.pkt(sent.last).Index
		sent.last = i
		c.tids[k] = sent
		if h, ok := c.heard[cmKey{tid: tid, side: side}]; ok && h.repeat && h.at > prev {
			return fmt.Sprintf("The same %s again (transaction %#x, first at packet %d), in answer to the %s that came again (packet %d): a CM answers a duplicate with the answer it gave, and does nothing twice.",
				cmName(msg), tid, m.pkt(sent.first).Index, h.msg, m.pkt(h.row).Index)
		}
		return fmt.Sprintf("The same %s again (transaction %#x, first at packet %d): MADs travel as UD datagrams with no transport retry, so the CM resends after its response timeout when no answer came.",
			cmName(msg), tid, m.pkt(sent.first).Index)
	}
	c.tids[k] = cmSent{i, i}
	c.sum.Messages[side]++
	switch v := msg.(type) {
	case *cm.REQ:
		c.reqs[tid] = v.LocalQPN
		return fmt.Sprintf("CM REQ: asks to connect QP %#x to the service %#x, path MTU %v; its starting PSN, %d, is the first PSN the QP will expect, which the passive side sends from. The passive side answers REP to accept or REJ to refuse.",
			uint32(v.LocalQPN), v.ServiceID, v.PathMTU, uint32(v.StartingPSN))
	case *cm.REP:
		if aq, ok := c.reqs[tid]; ok {
			m.connectQPs(pk.Dst, aq, pk.Src, v.LocalQPN)
		}
		return fmt.Sprintf("CM REP: accepts, naming its QP %#x and the first PSN it expects, %d, which the active side sends from; its QP is ready to receive (RTR). The active side moves its QP to RTS and answers RTU.",
			uint32(v.LocalQPN), uint32(v.StartingPSN))
	case *cm.RTU:
		return "CM RTU (ready to use): the active side's QP is in RTS. The passive side moves its QP to RTS: the connection is up."
	case *cm.REJ:
		return fmt.Sprintf("CM REJ: the connection is refused (%v); both sides free it.", v)
	case *cm.MRA:
		return "CM MRA (message receipt acknowledgement): the sender got the message and needs longer than the timeout to answer: the peer waits instead of resending."
	case *cm.DREQ:
		return "CM DREQ: asks to disconnect; the sender's QP goes to the error state, flushing what is posted. The peer answers DREP."
	case *cm.DREP:
		return "CM DREP: the disconnection is acknowledged; both QPs are done."
	case *cm.SIDRREQ:
		return fmt.Sprintf("CM SIDR_REQ: asks which UD QP and Q_Key serve the service %#x.", v.ServiceID)
	case *cm.SIDRREP:
		return fmt.Sprintf("CM SIDR_REP: %v.", v)
	}
	return fmt.Sprintf("CM %s.", cmName(msg))
}

// cmName names a CM message by its type: "REQ", "REP"...
func cmName(msg cm.Message) string {
	s := fmt.Sprintf("%T", msg)
	if j := len("*cm."); len(s) > j {
		return s[j:]
	}
	return s
}

// cnp explains a RoCE v2 congestion notification packet.
func (m *model) cnp(i int, p *wire.Packet) {
	pk := m.pkt(i)
	pk.Anomaly = "cnp"
	rp := fmt.Sprintf("%s QP %#x", pk.Dst, pk.DestQP)
	if c, side := m.cnpConn(pk); c != nil {
		pk.Conn = c.idx
		c.sum.CNPs[side]++
		np := c.ends[side]
		m.event(i, trace.Event{Kind: trace.CNPSent, QP: np.QPN, DestQP: pk.DestQP})
		m.event(i, trace.Event{Kind: trace.CNPReceived, QP: pk.DestQP})
		m.after(i, c, side)
	}
	pk.Text = fmt.Sprintf("CNP (congestion notification): %s saw a packet from %s arrive marked ECN CE, and tells that QP to slow down. %s's NIC, DCQCN's reaction point, cuts the QP's rate and raises its estimate of congestion (alpha); the NP sends at most one CNP per QP per interval.",
		pk.Src, rp, pk.Dst)
}

// cnpConn finds the connection a CNP belongs to, and the side of its
// sender, the notification point: the one whose packets from the QP the
// CNP names (the reaction point) go to the CNP's sender. It may be the
// CNP that first shows the reaction point's QPN, when the notification
// point has sent nothing before it.
func (m *model) cnpConn(pk *Packet) (*conn, int) {
	if f := m.flows[flowKey{pk.Src, pk.Dst, bth.QPN(pk.DestQP)}]; f != nil {
		return f.conn, f.side
	}
	for _, c := range m.conns {
		f := c.flows[0]
		if f != nil && c.flows[1] == nil && f.key.src == pk.Dst && f.key.dst == pk.Src && (c.ends[0].QPN == 0 || c.ends[0].QPN == pk.DestQP) {
			c.ends[0].QPN = pk.DestQP
			return c, 1
		}
	}
	return nil, 0
}
