package explain

import (
	"fmt"
	"io"
	"time"

	"github.com/gorxe/gorxe/internal/capture"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// ErrNotCapture reports input that is neither pcap nor pcapng.
var ErrNotCapture = capture.ErrNotCapture

// Read explains the pcap or pcapng capture r. It reads the whole capture
// before it returns: what a later packet shows (a NAK naming a PSN the
// capture saw sent) changes what an earlier one is said to have done.
// Packets that do not parse, bad ICRCs and connections the capture holds
// only part of are explained, not errors; the error is a file that is not
// a capture or that cannot be read to its end (the Report then holds what
// came before).
func Read(r io.Reader) (*Report, error) {
	m := newModel()
	counts, err := capture.Read(r, m.packet)
	m.finish()
	m.r.Counts = Counts{RoCE: counts.RoCE, Other: counts.Other, BadICRC: counts.BadICRC, Malformed: counts.Malformed}
	return m.r, err
}

// model replays a capture's packets through both ends of each connection.
type model struct {
	r     *Report
	lanes map[string]bool
	flows map[flowKey]*flow
	conns []*conn
	// ud is the datagram traffic's connections, by the two QPs.
	ud map[[2]End]*conn
}

func newModel() *model {
	return &model{
		r:     &Report{Lanes: []string{}, Packets: []Packet{}, Conns: []Connection{}},
		lanes: make(map[string]bool),
		flows: make(map[flowKey]*flow),
		ud:    make(map[[2]End]*conn),
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

// packet explains one packet of the capture.
func (m *model) packet(cp *capture.Packet) error {
	m.lane(cp.Src)
	m.lane(cp.Dst)
	pk := Packet{Index: cp.Index, Time: cp.Time, Src: cp.Src, Dst: cp.Dst, Fields: cp.Fields(), Conn: -1}
	if cp.Err != nil {
		pk.Opcode = "MALFORMED"
		pk.Anomaly = "malformed"
		pk.Text = "Not a RoCE v2 packet gorxe can parse (" + cp.Err.Error() + "): a receiver drops it."
		m.r.Packets = append(m.r.Packets, pk)
		return nil
	}
	p := &cp.P
	op := p.BTH.Opcode()
	pk.Opcode = op.String()
	pk.DestQP = uint32(p.BTH.DestQP())
	pk.PSN = uint32(p.BTH.PSN())
	m.r.Packets = append(m.r.Packets, pk)
	i := len(m.r.Packets) - 1
	if cp.ICRCErr != nil {
		m.set(i, "bad icrc", "Its ICRC does not verify: the receiving NIC drops it silently and counts it, as if it had been lost.")
		return nil
	}
	switch {
	case op == bth.CNP:
		m.cnp(i, p)
	case op.Service() == bth.ServiceUD:
		m.datagram(i, p)
	case op.Service() == bth.ServiceRC || op.Service() == bth.ServiceUC:
		f := m.flow(cp, op.Service())
		f.conn.packet(m, i, f.side, p)
	default:
		m.set(i, "error", fmt.Sprintf("A %v packet: gorxe models RC, UC, UD and CNPs only.", op.Service()))
	}
	return nil
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
	if c := m.pair(f, &cp.P); c != nil {
		f.conn, f.side = c, 1
		c.flows[1] = f
		c.ends[0].QPN = uint32(k.dqp)
		c.ends[1].QPN = uint32(c.flows[0].key.dqp)
		m.r.Conns[c.idx].Ends = [2]End{c.ends[0].End, c.ends[1].End}
		return f
	}
	c := newConn(len(m.conns), svc, End{Addr: k.src}, End{Addr: k.dst, QPN: uint32(k.dqp)})
	c.flows[0] = f
	f.conn, f.side = c, 0
	m.conns = append(m.conns, c)
	m.r.Conns = append(m.r.Conns, Connection{Service: svc.String(), Ends: [2]End{c.ends[0].End, c.ends[1].End}})
	return f
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
		if c.flows[1] == nil && g.key.src == f.key.dst && g.key.dst == f.key.src {
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

// finish completes the report: the connections' summaries.
func (m *model) finish() {
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
