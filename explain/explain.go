package explain

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/gorxe/gorxe/internal/capture"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// Read explains the pcap or pcapng capture r. It reads the whole capture
// before it returns: what a later packet shows (a NAK naming a PSN the
// capture saw sent) changes what an earlier one is said to have done.
// Packets that do not parse, bad ICRCs and connections the capture holds
// only part of are explained, not errors; the error is a file that is not
// a capture, with no Report, or that cannot be read to its end (the
// Report then holds what came before).
func Read(r io.Reader) (*Report, error) {
	return ReadPort(r, wire.UDPPort)
}

// ReadPort is Read for a capture whose RoCE v2 packets go to UDP port
// port instead of 4791.
func ReadPort(r io.Reader, port uint16) (*Report, error) {
	var pkts []capture.Packet
	var keys []keySegment
	counts, err := capture.ReadOptions(r, capture.Options{Port: port, TCP: keySegments(&keys)}, func(p *capture.Packet) error {
		pkts = append(pkts, *p)
		return nil
	})
	var oerr *capture.OpenError
	if errors.As(err, &oerr) {
		return nil, err
	}
	m := newModel()
	m.mtus = shownMTUs(pkts)
	twice := capturedTwice(pkts)
	roles, sendOf := sightings(pkts, twice)
	n := 0
	for k := range pkts {
		for len(keys) > 0 && keys[0].before <= k {
			m.exchanged(keys[0])
			keys = keys[1:]
		}
		if j := twice[k]; j >= 0 {
			m.twice(&pkts[k], &pkts[j])
			n++
			continue
		}
		m.packet(&pkts[k], roles[k], sendOf[k])
	}
	m.finish()
	m.r.Counts = Counts{RoCE: counts.RoCE, Other: counts.Other, BadICRC: counts.BadICRC, Malformed: counts.Malformed,
		Cut: counts.Cut, Unread: counts.Unread, Twice: n, Elsewhere: counts.Elsewhere, V1: counts.V1}
	return m.r, err
}

// twiceWindow is how far apart two sightings of one packet on two
// interfaces of one host may be: the time it takes to cross from one to
// the other, microseconds.
const twiceWindow = time.Millisecond

// capturedTwice returns, for each packet, the index of the first
// sighting of the very same packet on another interface of the host the
// capture was taken on, or -1. tcpdump -i any sees a packet once on each
// interface it crosses (a VLAN and its parent, a bridge and its port, a
// tap device and the bridge), and its Linux cooked v2 header says which
// (capture.Packet.IfIndex). The later sightings have the same addresses,
// transport headers, payload and ICRC (which covers the IPv4 ID and the
// UDP ports), on an interface the packet has not been seen on yet, at
// most twiceWindow after the first. The same bytes again on the same
// interface are a packet sent again: a repeated ACK is byte for byte the
// first where the IPv4 ID is 0, as it is for unconnected UDP sockets.
// A capture whose frames do not name their interface shows no packet
// twice.
func capturedTwice(pkts []capture.Packet) []int {
	twice := make([]int, len(pkts))
	// A packet's identity: the ICRC, a CRC-32 of everything else that
	// matters, with the addresses, the BTH and the length beside it; two
	// different packets a millisecond apart do not share them.
	type identity struct {
		iface    int
		src, dst string
		bth      [12]byte
		n        int
		icrc     uint32
	}
	type sighting struct {
		first int          // the packet's first sighting
		on    map[int]bool // the interfaces it has been seen on
	}
	seen := map[identity]*sighting{}
	for k := range pkts {
		twice[k] = -1
		p := &pkts[k]
		if p.Err != nil || p.IfIndex == 0 {
			continue
		}
		t := p.P.Transport()
		id := identity{iface: p.Interface, src: p.Src, dst: p.Dst, n: len(t), icrc: p.P.ICRC()}
		copy(id.bth[:], t)
		if s := seen[id]; s != nil && !s.on[p.IfIndex] && p.Time-pkts[s.first].Time <= twiceWindow {
			twice[k] = s.first
			s.on[p.IfIndex] = true
			continue
		}
		seen[id] = &sighting{first: k, on: map[int]bool{p.IfIndex: true}}
	}
	return twice
}

// twice adds the row of a packet the capture saw a second time, as the
// sighting first.
func (m *model) twice(cp, first *capture.Packet) {
	pk := Packet{Index: cp.Index, Time: cp.Time, Src: cp.Src, Dst: cp.Dst, Fields: cp.Fields(), Conn: -1, connSide: -1,
		Opcode: cp.P.BTH.Opcode().String(), DestQP: uint32(cp.P.BTH.DestQP()), PSN: uint32(cp.P.BTH.PSN()),
		Anomaly: "captured twice",
		Text: fmt.Sprintf("Packet %d again, byte for byte (ICRC too), %s later on another interface of the capturing host (index %d, then %d): tcpdump -i any sees a packet once on each interface it crosses (a VLAN and its parent, a bridge and its port). Left out of the model and the counts.",
			first.Index, seconds(cp.Time-first.Time), first.IfIndex, cp.IfIndex)}
	m.r.Packets = append(m.r.Packets, pk)
}

// sightingKey is what two sightings of one packet have in common: its
// addresses and its transport headers and payload (a switch may change
// the IP header's ECN field and checksum, which the ICRC does not cover).
func sightingKey(p *capture.Packet) string {
	return p.Src + ">" + p.Dst + ">" + string(p.P.Transport())
}

// role is what a sighting of a packet shows: it leaving its sender, it
// reaching its receiver, or, at a capture point between them, both.
type role uint8

const (
	both role = iota
	leaving
	arriving
)

// sightings finds, in a capture taken at both ends (a pcapng file with an
// interface per host, such as gorxe demo writes or mergecap makes of two
// hosts' captures), each packet's two sightings: on the interface of the
// host that sent it, leaving, and on the receiver's, arriving. A host's
// interface is the one its address is most often the source on. It
// returns each packet's role and, for an arriving one, the index of its
// leaving sighting (-1 otherwise). A packet seen leaving for an address
// whose host is captured but never seen arriving was lost on the way.
func sightings(pkts []capture.Packet, twice []int) ([]role, []int) {
	roles := make([]role, len(pkts))
	sendOf := make([]int, len(pkts))
	for k := range sendOf {
		sendOf[k] = -1
	}
	// A packet is seen first where it leaves: count, for each interface
	// and source address, the packets first seen there.
	first := map[[2]string]int{} // (interface, source) -> packets first seen there
	seen := map[string]bool{}
	multi := false
	for k := range pkts {
		p := &pkts[k]
		if p.Err != nil || twice[k] >= 0 {
			continue
		}
		multi = multi || p.Interface != pkts[0].Interface
		if key := sightingKey(p); !seen[key] {
			seen[key] = true
			first[[2]string{strconv.Itoa(p.Interface), p.Src}]++
		}
	}
	if !multi {
		return roles, sendOf
	}
	owner := map[string]string{} // address -> interface
	best := map[string]int{}
	for k, n := range first {
		if iface, addr := k[0], k[1]; n > best[addr] || n == best[addr] && iface < owner[addr] {
			owner[addr], best[addr] = iface, n
		}
	}
	waiting := map[string][]int{} // leaving sightings not yet seen arriving, by packet
	for k := range pkts {
		p := &pkts[k]
		if p.Err != nil || twice[k] >= 0 {
			continue
		}
		iface := strconv.Itoa(p.Interface)
		key := sightingKey(p)
		switch {
		case owner[p.Src] == iface:
			if _, captured := owner[p.Dst]; captured {
				roles[k] = leaving
				waiting[key] = append(waiting[key], k)
			}
		case owner[p.Dst] == iface:
			// The latest leaving of the same bytes: when a packet is
			// lost and sent again, what arrives is the second.
			if w := waiting[key]; len(w) > 0 {
				roles[k], sendOf[k] = arriving, w[len(w)-1]
				waiting[key] = w[:len(w)-1]
			}
		}
	}
	return roles, sendOf
}

// model replays a capture's packets through both ends of each connection.
type model struct {
	r     *Report
	lanes map[string]bool
	flows map[flowKey]*flow
	conns []*conn
	// ud is the datagram traffic's connections, by the two QPs.
	ud map[[2]End]*conn
	// row is the report's packet for each leaving sighting, by its
	// index in the capture; arrived marks the rows seen arriving.
	row     map[int]int
	arrived map[int]bool
	// retx is what a retransmission's leaving said, for its arrival.
	retx map[int]string
	// cmArrivals is what a CM message's arrival tells its receiver, by
	// the row of its leaving.
	cmArrivals map[int]cmArrival
	// connected is the flows a CM handshake (REQ and REP) or perftest's
	// exchange has named and that have not sent yet, each with its
	// reverse: they are the two ends of a new connection, even when a
	// connection before it had the same addresses and QPNs.
	connected map[flowKey]flowKey
	// keyExchanges is perftest's exchanges, by TCP connection.
	keyExchanges map[[2]netip.AddrPort]*keyExchange
	// mtus is the path MTUs the capture's FIRST and MIDDLE packets show,
	// by source and destination address (shownMTUs).
	mtus map[[2]string][]shownMTU
}

// shownMTU is a path MTU that a FIRST or MIDDLE packet to QP dqp shows,
// its payload exactly one MTU (C9-92), at capture index at.
type shownMTU struct {
	at  int
	dqp bth.QPN
	mtu int
}

// shownMTUs returns the path MTUs the capture's RC and UC FIRST and
// MIDDLE packets show, by source and destination address, in capture
// order, each flow's only where it changes.
func shownMTUs(pkts []capture.Packet) map[[2]string][]shownMTU {
	mtus := make(map[[2]string][]shownMTU)
	last := make(map[flowKey]int)
	for k := range pkts {
		p := &pkts[k]
		if p.Err != nil || p.ICRCErr != nil || !p.PayloadCaptured() {
			continue
		}
		op := p.P.BTH.Opcode()
		if svc := op.Service(); svc != bth.ServiceRC && svc != bth.ServiceUC {
			continue
		}
		if _, pos := classify(op); (pos != wire.First && pos != wire.Middle) || len(p.P.Payload) == 0 {
			continue
		}
		f := flowKey{p.Src, p.Dst, p.P.BTH.DestQP()}
		if n := len(p.P.Payload); last[f] != n {
			last[f] = n
			a := [2]string{p.Src, p.Dst}
			mtus[a] = append(mtus[a], shownMTU{at: p.Index, dqp: f.dqp, mtu: n})
		}
	}
	return mtus
}

// mtuAhead returns the path MTU that the capture shows next, at its
// index at or later, for the connection c, or 0 when it shows none: from
// c's requests (a WRITE or SEND cut into packets) or its answers (a
// READ's responses), the latter to any QP of the requester's address
// while the requester's QPN is not known. A READ's span is reckoned with
// it before its responses come, where a guess would be wrong.
func (m *model) mtuAhead(c *conn, at int) int {
	f := c.flows[0]
	if f == nil {
		return 0
	}
	for k, key := range [2]flowKey{f.key, {f.key.dst, f.key.src, bth.QPN(c.ends[0].QPN)}} {
		for _, s := range m.mtus[[2]string{key.src, key.dst}] {
			if s.at >= at && (s.dqp == key.dqp || k == 1 && key.dqp == 0) {
				return s.mtu
			}
		}
	}
	return 0
}

func newModel() *model {
	return &model{
		r:       &Report{Lanes: []string{}, Packets: []Packet{}, Conns: []Connection{}},
		lanes:   make(map[string]bool),
		flows:   make(map[flowKey]*flow),
		ud:      make(map[[2]End]*conn),
		row:     make(map[int]int),
		arrived: make(map[int]bool),
		retx:    make(map[int]string),

		cmArrivals: make(map[int]cmArrival),
		connected:  make(map[flowKey]flowKey),

		keyExchanges: make(map[[2]netip.AddrPort]*keyExchange),
	}
}

// flowKey names the packets one address sends to one QP.
type flowKey struct {
	src, dst string
	dqp      bth.QPN
}

// flow is the packets one end of a connection sends to the other.
type flow struct {
	key  flowKey
	conn *conn
	side int // the sender's index in conn.ends
}

// lane adds addr to the lanes the first time it is seen.
func (m *model) lane(addr string) {
	if !m.lanes[addr] {
		m.lanes[addr] = true
		m.r.Lanes = append(m.r.Lanes, addr)
	}
}

// packet explains one sighting of a packet: its k-th in the capture.
// An arriving sighting adds to the row of its leaving one (send, its
// capture index) what the packet did to its receiver.
func (m *model) packet(cp *capture.Packet, ro role, send int) {
	if ro == arriving {
		i := m.row[send]
		m.arrived[i] = true
		pk := m.pkt(i)
		if a, ok := m.cmArrivals[i]; ok {
			a.h.at = cp.Index
			a.c.heard[a.key] = a.h
		}
		if pk.Conn >= 0 && pk.connSide >= 0 {
			c := m.conns[pk.Conn]
			c.packet(m, i, pk.connSide, &cp.P, ro)
		}
		return
	}
	m.lane(cp.Src)
	m.lane(cp.Dst)
	pk := Packet{Index: cp.Index, Time: cp.Time, Src: cp.Src, Dst: cp.Dst, Fields: cp.Fields(), Conn: -1, connSide: -1}
	if errors.Is(cp.Err, capture.ErrCutShort) {
		pk.Opcode = "CUT"
		pk.Anomaly = "cut"
		pk.Text = "The capture kept too little of this packet to read it (" + cp.Err.Error() + "); it says nothing of what the packet was or what its receiver did. Capture with a larger snap length (tcpdump -s 0) to see it."
		m.r.Packets = append(m.r.Packets, pk)
		return
	}
	if cp.Err != nil {
		pk.Opcode = "MALFORMED"
		pk.Anomaly = "malformed"
		pk.Text = "Not a RoCE v2 packet gorxe can parse (" + cp.Err.Error() + "): a receiver drops it."
		if errors.Is(cp.Err, wire.ErrOpcode) {
			// XRC's, say: rxe drops it, a NIC that has the service may not.
			pk.Text = "A packet whose opcode gorxe does not read (" + cp.Err.Error() + "): rxe drops it; a NIC that has its service may take it, which this explanation cannot follow."
		}
		m.r.Packets = append(m.r.Packets, pk)
		return
	}
	p := &cp.P
	op := p.BTH.Opcode()
	pk.Opcode = op.String()
	pk.DestQP = uint32(p.BTH.DestQP())
	pk.PSN = uint32(p.BTH.PSN())
	pk.leaving = ro == leaving
	m.r.Packets = append(m.r.Packets, pk)
	i := len(m.r.Packets) - 1
	m.row[cp.Index-1] = i
	if cp.ICRCErr != nil {
		m.set(i, "bad icrc", "Its ICRC does not verify: the receiving NIC drops it silently and counts it, as if it had been lost.")
		return
	}
	if op.Service() == bth.ServiceUD && p.BTH.DestQP() == 1 && !cp.PayloadCaptured() {
		m.set(i, "cut", "A MAD to QP 1 (the General Services QP) whose body the capture's snap length cut off: which CM message it is cannot be read.")
		return
	}
	switch {
	case op == bth.CNP:
		m.cnp(i, p)
	case op.Service() == bth.ServiceUD:
		m.datagram(i, p)
	case op.Service() == bth.ServiceRC || op.Service() == bth.ServiceUC:
		f := m.flow(cp, op.Service())
		m.pkt(i).connSide = f.side
		f.conn.packet(m, i, f.side, p, ro)
	default:
		m.set(i, "error", fmt.Sprintf("A %v packet: gorxe models RC, UC, UD and CNPs only.", op.Service()))
	}
}

// pkt returns the report's packet i.
func (m *model) pkt(i int) *Packet { return &m.r.Packets[i] }

// set gives packet i its anomaly tag and text.
func (m *model) set(i int, anomaly, text string) {
	p := m.pkt(i)
	p.Anomaly, p.Text = anomaly, text
}

// flow returns the flow of cp, pairing it with the reverse flow of a
// connection the first time it is seen.
func (m *model) flow(cp *capture.Packet, svc bth.Service) *flow {
	k := flowKey{cp.Src, cp.Dst, cp.P.BTH.DestQP()}
	if f := m.flows[k]; f != nil {
		return f
	}
	f := &flow{key: k}
	m.flows[k] = f
	if rev, ok := m.connected[k]; ok {
		// The first packet of one end of a connection a CM handshake or
		// perftest's exchange named.
		delete(m.connected, k)
		if g := m.flows[rev]; g != nil && g.conn.flows[1] == nil {
			return m.join(g.conn, f)
		}
		return m.newConn(f, svc, uint32(rev.dqp))
	}
	if c := m.pair(f, &cp.P); c != nil {
		return m.join(c, f)
	}
	return m.newConn(f, svc, 0)
}

// join makes f the second flow of c, its reverse.
func (m *model) join(c *conn, f *flow) *flow {
	f.conn, f.side = c, 1
	c.flows[1] = f
	c.ends[0].QPN = uint32(f.key.dqp)
	c.ends[1].QPN = uint32(c.flows[0].key.dqp)
	m.r.Conns[c.idx].Ends = [2]End{c.ends[0].End, c.ends[1].End}
	return f
}

// newConn starts a connection whose first flow is f, from the QP srcQPN
// when it is known (0 when not).
func (m *model) newConn(f *flow, svc bth.Service, srcQPN uint32) *flow {
	k := f.key
	c := newConn(len(m.conns), svc, End{Addr: k.src, QPN: srcQPN}, End{Addr: k.dst, QPN: uint32(k.dqp)})
	c.flows[0] = f
	f.conn, f.side = c, 0
	m.conns = append(m.conns, c)
	m.r.Conns = append(m.r.Conns, Connection{Service: svc.String(), Ends: [2]End{c.ends[0].End, c.ends[1].End}})
	return f
}

// connectQPs records a connection that what set it up names (a CM
// handshake's REQ and REP, perftest's key messages): the active side's
// QP aq at active, the passive side's pq at passive. Their packets to
// each other start a new connection, its ends paired as named, even when
// an older connection has the same QPNs (a program that opens a new
// device for each connection numbers its QPs alike each time).
func (m *model) connectQPs(active string, aq bth.QPN, passive string, pq bth.QPN) {
	toPassive, toActive := flowKey{active, passive, pq}, flowKey{passive, active, aq}
	delete(m.flows, toPassive)
	delete(m.flows, toActive)
	m.connected[toPassive] = toActive
	m.connected[toActive] = toPassive
}

// pair finds the connection whose first flow is the reverse of f: the
// packets f's destination QP sends to the address f comes from. With
// more than one candidate (several QPs between the same two hosts), an
// answer's PSN picks the one whose requests it answers, and otherwise the
// oldest unpaired one.
func (m *model) pair(f *flow, p *wire.Packet) *conn {
	var cands []*conn
	for _, c := range m.conns {
		g := c.flows[0]
		if g != nil && c.flows[1] == nil && g.key.src == f.key.dst && g.key.dst == f.key.src {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	if op := p.BTH.Opcode(); isResponse(op) {
		psn := uint32(p.BTH.PSN())
		for _, c := range cands {
			if c.ends[0].req.sentPSN(psn) {
				return c
			}
		}
	}
	return cands[0]
}

// finish completes the report: the packets that left and never arrived,
// and the connections' summaries.
func (m *model) finish() {
	for i := range m.r.Packets {
		pk := m.pkt(i)
		if pk.Conn >= 0 && pk.connSide >= 0 {
			// The sender's QPN may have come to light after its events.
			for k := range pk.Events {
				if pk.Events[k].QP == 0 {
					pk.Events[k].QP = m.conns[pk.Conn].ends[pk.connSide].QPN
				}
			}
		}
		if pk.leaving && !m.arrived[i] {
			pk.Lost = true
			pk.Anomaly = "lost"
			pk.Text += " It never arrived: the capture at the receiver does not show it."
		}
	}
	for _, c := range m.conns {
		m.r.Conns[c.idx].Ends = [2]End{c.ends[0].End, c.ends[1].End}
		m.r.Conns[c.idx].Summary = c.summary()
	}
}

// after records both ends' state after packet i, the sender's first.
func (m *model) after(i int, c *conn, sender int) {
	m.pkt(i).After = []EndState{c.ends[sender].state(), c.ends[1-sender].state()}
}

// event adds an inferred event to packet i.
func (m *model) event(i int, e trace.Event) {
	p := m.pkt(i)
	e.Time = p.Time
	p.Events = append(p.Events, e)
}

// seconds formats a duration for a sentence: "67 ms", "1.2 s", "840 µs".
func seconds(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%d µs", d.Microseconds())
	}
}
