package sim

import (
	"fmt"
	"time"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/link/mem/fabric"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// Flow is a long-lived transfer from one host to another, as ib_write_bw
// makes one: an RC connection whose requester keeps Depth WRITEs of Size
// bytes posted from Start until Stop, posting a new one as each
// completes.
type Flow struct {
	Name     string
	Src, Dst *Host
	Start    time.Duration
	Stop     time.Duration // zero: until the run ends
	Size     int           // bytes per WRITE
	Depth    int           // WRITEs outstanding

	id       uint32
	sq       *rnic.QP // Src's end
	rq       *rnic.QP // Dst's end
	posted   uint64
	done     uint64 // WRITEs completed
	doneB    uint64 // their bytes
	stopped  bool
	finished time.Duration // when the last WRITE completed after Stop
	wr       [1]qp.SendWR
}

// Defaults of a flow's WRITEs: perftest's ib_write_bw posts 128 of 64 KiB.
const (
	DefaultSize  = 64 << 10
	DefaultDepth = 16
)

// AddFlow connects src to dst and starts f at f.Start: its Src, Dst and
// Name say what it is, zero Size and Depth take the defaults.
func (n *Network) AddFlow(f *Flow) error {
	if f.Size == 0 {
		f.Size = DefaultSize
	}
	if f.Depth == 0 {
		f.Depth = DefaultDepth
	}
	if f.Size <= 0 || f.Size > hostBuffer || f.Depth <= 0 {
		return fmt.Errorf("sim: flow %s: size %d (1 to %d) or depth %d", f.Name, f.Size, hostBuffer, f.Depth)
	}
	if f.Stop != 0 && f.Stop <= f.Start {
		return fmt.Errorf("sim: flow %s stops at %v, not after its start at %v", f.Name, f.Stop, f.Start)
	}
	var err error
	if f.sq, f.rq, err = connect(f.Src, f.Dst, f.Depth); err != nil {
		return fmt.Errorf("sim: flow %s: %w", f.Name, err)
	}
	f.id = uint32(len(n.flows))
	n.flows = append(n.flows, f)
	f.Src.sending[f.id] = f
	n.clock.At(monotime.Time(f.Start)+1, fabric.HandlerFunc(func(monotime.Time, any) { f.post(); f.Src.poll() }), nil)
	if f.Stop != 0 {
		n.clock.At(monotime.Time(f.Stop)+1, fabric.HandlerFunc(func(monotime.Time, any) { f.stopped = true }), nil)
	}
	return nil
}

// post fills the send queue up to Depth WRITEs, unless the flow has stopped.
func (f *Flow) post() {
	for !f.stopped && f.posted-f.done < uint64(f.Depth) {
		off := int(f.posted) * f.Size % (hostBuffer - hostBuffer%f.Size)
		f.wr[0] = qp.SendWR{
			WRID:       uint64(f.id)<<32 | f.posted&0xffffffff,
			Opcode:     qp.WRRDMAWrite,
			Flags:      qp.SendSignaled,
			SGList:     []qp.SGE{{Addr: f.Src.mr.IOVA() + uint64(off), Length: uint32(f.Size), LKey: f.Src.mr.LKey()}},
			RemoteAddr: f.Dst.mr.IOVA() + uint64(off),
			RKey:       f.Dst.mr.RKey(),
		}
		if _, err := f.sq.PostSend(f.wr[:]); err != nil {
			f.Src.net.fail(fmt.Errorf("sim: flow %s: %w", f.Name, err))
			return
		}
		f.posted++
	}
}

// completed takes one of the flow's completions and posts the next WRITE.
func (f *Flow) completed(wc cq.WC) {
	if wc.Status != cq.StatusSuccess {
		f.Src.net.fail(fmt.Errorf("sim: flow %s: WRITE %d: %v", f.Name, uint32(wc.WRID), wc.Status))
		return
	}
	f.done++
	f.doneB += uint64(f.Size)
	if f.stopped && f.done == f.posted {
		f.finished = f.Src.net.Now()
	}
	f.post()
}

// Completed returns the bytes of the flow's WRITEs that have completed.
func (f *Flow) Completed() uint64 { return f.doneB }

// Congestion returns the state of the flow's reaction point and its
// sender's DCQCN counters.
func (f *Flow) Congestion() (congestion.State, congestion.Counters) { return f.sq.Congestion() }

// ReceiverCounters returns the DCQCN counters of the flow's receiving QP:
// its notification point's.
func (f *Flow) ReceiverCounters() congestion.Counters {
	_, c := f.rq.Congestion()
	return c
}

// Stats returns the sending QP's counters.
func (f *Flow) Stats() qp.Counters { return f.sq.Stats() }
