package fabric

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// FlowHeader is the first line SampleFlows writes: the columns of its
// rows.
const FlowHeader = "time_ns,src,dst,bytes,rate_bps,cnps\n"

// flow is the traffic from one host to another, as the switch delivers it.
type flow struct {
	src, dst netip.Addr
	bytes    uint64 // IP bytes of data packets: all but ACKs and CNPs
	last     uint64 // bytes at the previous sample
	cnps     uint64 // CNPs from dst to src: congestion notifications for this flow
}

// flowTable counts what the switch delivers per (source, destination).
type flowTable struct {
	m     map[[2]netip.Addr]*flow
	order []*flow // sorted by (src, dst) when sampled
}

func (t *flowTable) get(src, dst netip.Addr) *flow {
	k := [2]netip.Addr{src, dst}
	f := t.m[k]
	if f == nil {
		f = &flow{src: src, dst: dst}
		t.m[k] = f
		t.order = append(t.order, f)
	}
	return f
}

// count classifies a delivered packet: a CNP counts for the flow it
// slows, the reverse of its own direction; an ACK counts for nothing;
// everything else is its flow's data.
func (t *flowTable) count(pkt []byte) {
	var src, dst netip.Addr
	var hdr int
	switch pkt[0] >> 4 {
	case 4:
		h := wire.IPv4(pkt)
		src, dst, hdr = h.Src(), h.Dst(), h.HeaderLen()
	case 6:
		h := wire.IPv6(pkt)
		src, dst, hdr = h.Src().Unmap(), h.Dst().Unmap(), wire.IPv6Len
	default:
		return
	}
	if b := hdr + wire.UDPLen; len(pkt) > b && binary.BigEndian.Uint16(pkt[hdr+2:]) == wire.UDPPort {
		switch bth.Opcode(pkt[b]) {
		case bth.CNP:
			t.get(dst, src).cnps++
			return
		case bth.RCAcknowledge, bth.RCAtomicAcknowledge:
			return
		}
	}
	t.get(src, dst).bytes += uint64(len(pkt))
}

// SampleFlows writes, at every interval from now until until, a CSV row
// per flow the switch has delivered packets of, in the order of source
// and destination address: the clock's time in nanoseconds, the source
// and destination, the IP bytes of its data packets delivered so far
// (all but ACKs and CNPs), its rate over the last interval in bits per
// second, and the CNPs delivered for it (from its destination to its
// source) so far. A flow is all the QPs from one host to another. It
// writes FlowHeader first; rows are buffered, the last flushed at until.
func (s *Switch) SampleFlows(w io.Writer, every time.Duration, until monotime.Time) error {
	if every <= 0 {
		return fmt.Errorf("%w: sampling interval %v", ErrConfig, every)
	}
	s.TrackFlows()
	fs := &flowSampler{s: s, w: bufio.NewWriter(w), every: every, until: until}
	if _, err := fs.w.WriteString(FlowHeader); err != nil {
		return err
	}
	s.clock.At(s.clock.Now().Add(every), fs, nil)
	return nil
}

type flowSampler struct {
	s     *Switch
	w     *bufio.Writer
	every time.Duration
	until monotime.Time
	line  []byte
}

// Handle writes the rows of one sample and schedules the next.
func (fs *flowSampler) Handle(now monotime.Time, _ any) {
	t := fs.s.flows
	slices.SortFunc(t.order, func(a, b *flow) int {
		if c := a.src.Compare(b.src); c != 0 {
			return c
		}
		return a.dst.Compare(b.dst)
	})
	for _, f := range t.order {
		b := strconv.AppendInt(fs.line[:0], int64(now), 10)
		b = append(b, ',')
		b = f.src.AppendTo(b)
		b = append(b, ',')
		b = f.dst.AppendTo(b)
		b = append(b, ',')
		b = strconv.AppendUint(b, f.bytes, 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, (f.bytes-f.last)*8*uint64(time.Second)/uint64(fs.every), 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, f.cnps, 10)
		b = append(b, '\n')
		fs.line = b
		fs.w.Write(b)
		f.last = f.bytes
	}
	if next := now.Add(fs.every); next <= fs.until {
		fs.s.clock.At(next, fs, nil)
		return
	}
	fs.w.Flush()
}

// TrackFlows has the switch count what it delivers per flow, for
// FlowCount, from now on.
func (s *Switch) TrackFlows() {
	if s.flows == nil {
		s.flows = &flowTable{m: make(map[[2]netip.Addr]*flow)}
	}
}

// FlowCount returns what the switch has delivered, since it began
// counting (TrackFlows, SampleFlows), of the traffic from src to dst:
// the IP bytes of its data packets (all but ACKs and CNPs), and the CNPs
// for it (from dst to src).
func (s *Switch) FlowCount(src, dst netip.Addr) (bytes, cnps uint64) {
	if s.flows == nil {
		return 0, 0
	}
	f := s.flows.m[[2]netip.Addr{src.Unmap(), dst.Unmap()}]
	if f == nil {
		return 0, 0
	}
	return f.bytes, f.cnps
}
