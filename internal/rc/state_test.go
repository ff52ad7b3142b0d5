package rc

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire/bth"
)

// fakePort is a Port that records what a QP transmits, on a manual
// clock that only advance moves.
type fakePort struct {
	mrs       *mr.Table
	sent      [][]byte
	now       monotime.Time
	scheduled int // Schedule calls
}

func (p *fakePort) MRs() *mr.Table                              { return p.mrs }
func (p *fakePort) NewBuffer() []byte                           { return make([]byte, 9100) }
func (p *fakePort) TxOffset() int                               { return 80 }
func (p *fakePort) Finish(tx *TxDesc, buf []byte, n int) []byte { return buf[80 : 80+n] }
func (p *fakePort) Send(pkts [][]byte) {
	for _, b := range pkts {
		p.sent = append(p.sent, append([]byte(nil), b...))
	}
}
func (p *fakePort) FreeBuffer(buf []byte)            {}
func (p *fakePort) Schedule(r Runner)                { p.scheduled++ }
func (p *fakePort) Timer(r Runner, at monotime.Time) {}
func (p *fakePort) Now() monotime.Time               { return p.now + 1 }
func (p *fakePort) advance(d time.Duration)          { p.now = p.now.Add(d) }

func newTestQP(t *testing.T) (*QP, *cq.CQ) {
	t.Helper()
	port := &fakePort{mrs: mr.NewTable()}
	c, err := cq.New(64)
	if err != nil {
		t.Fatal(err)
	}
	q, err := New(port, 0x11, qp.InitAttr{
		Type: qp.TypeRC, PD: port.mrs.AllocPD(), SendCQ: c, RecvCQ: c,
		Cap: qp.Cap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64},
	})
	if err != nil {
		t.Fatal(err)
	}
	return q, c
}

var (
	initAttr = qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: mr.RemoteWrite}
	initMask = qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags
	rtrAttr  = qp.Attr{State: qp.StateRTR, PathMTU: qp.MTU1024, DestQPNum: 0x12, RQPSN: 1, MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AV: qp.AddressVector{DGID: netip.MustParseAddr("::ffff:10.0.0.2")}}
	rtrMask = qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
	rtsAttr = qp.Attr{State: qp.StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
	rtsMask = qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
)

func TestStateMachine(t *testing.T) {
	q, _ := newTestQP(t)
	steps := []struct {
		attr qp.Attr
		mask qp.AttrMask
		want qp.State
	}{
		{initAttr, initMask, qp.StateInit},
		{rtrAttr, rtrMask, qp.StateRTR},
		{rtsAttr, rtsMask, qp.StateRTS},
		{qp.Attr{State: qp.StateSQD}, qp.AttrState, qp.StateSQD},
		{qp.Attr{State: qp.StateRTS}, qp.AttrState, qp.StateRTS},
		{qp.Attr{State: qp.StateErr}, qp.AttrState, qp.StateErr},
		{qp.Attr{State: qp.StateReset}, qp.AttrState, qp.StateReset},
		{initAttr, initMask, qp.StateInit},
	}
	for i, s := range steps {
		if err := q.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("step %d to %v: %v", i, s.want, err)
		}
		if got := q.State(); got != s.want {
			t.Fatalf("step %d: state %v, want %v", i, got, s.want)
		}
	}
	if a := q.Query(); a.PathMTU != qp.MTU256 || a.DestQPNum != 0 {
		t.Fatalf("RESET kept attributes: %+v", a)
	}
}

func TestIllegalTransitions(t *testing.T) {
	tests := []struct {
		name  string
		from  []func(q *QP) error
		attr  qp.Attr
		mask  qp.AttrMask
		isErr error
	}{
		{"RESET to RTR", nil, rtrAttr, rtrMask, qp.ErrState},
		{"RESET to RTS", nil, rtsAttr, rtsMask, qp.ErrState},
		{"INIT without port", nil, initAttr, initMask &^ qp.AttrPort, qp.ErrAttr},
		{"INIT with an RTR attribute", nil, initAttr, initMask | qp.AttrPathMTU, qp.ErrAttr},
		{"RTR without dest QPN", []func(q *QP) error{toInit}, rtrAttr, rtrMask &^ qp.AttrDestQPN, qp.ErrAttr},
		{"RTR with MTU 6", []func(q *QP) error{toInit}, withMTU(rtrAttr, 6), rtrMask, qp.ErrAttr},
		{"RTR with a 25-bit dest QPN", []func(q *QP) error{toInit}, withDest(rtrAttr, 1<<24), rtrMask, qp.ErrAttr},
		{"RTS without retry_cnt", []func(q *QP) error{toInit, toRTR}, rtsAttr, rtsMask &^ qp.AttrRetryCnt, qp.ErrAttr},
		{"RTS with retry_cnt 8", []func(q *QP) error{toInit, toRTR}, withRetry(rtsAttr, 8), rtsMask, qp.ErrAttr},
		{"RTS with timeout 32", []func(q *QP) error{toInit, toRTR}, withTimeout(rtsAttr, 32), rtsMask, qp.ErrAttr},
		{"INIT to RTS", []func(q *QP) error{toInit}, rtsAttr, rtsMask, qp.ErrState},
		{"wrong current state", []func(q *QP) error{toInit}, qp.Attr{State: qp.StateInit, CurState: qp.StateRTS}, qp.AttrState | qp.AttrCurState, qp.ErrState},
		{"ERR to RTS", []func(q *QP) error{toErr}, rtsAttr, rtsMask, qp.ErrState},
	}
	for _, tt := range tests {
		q, _ := newTestQP(t)
		for _, f := range tt.from {
			if err := f(q); err != nil {
				t.Fatalf("%s: setup: %v", tt.name, err)
			}
		}
		before := q.Query()
		err := q.Modify(&tt.attr, tt.mask)
		if !errors.Is(err, tt.isErr) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.isErr)
		}
		if after := q.Query(); after != before {
			t.Errorf("%s: a refused Modify changed the QP:\n%+v\n%+v", tt.name, before, after)
		}
	}
}

func toInit(q *QP) error { return q.Modify(&initAttr, initMask) }
func toRTR(q *QP) error  { return q.Modify(&rtrAttr, rtrMask) }
func toErr(q *QP) error  { return q.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState) }

func withMTU(a qp.Attr, m qp.MTU) qp.Attr    { a.PathMTU = m; return a }
func withDest(a qp.Attr, d bth.QPN) qp.Attr  { a.DestQPNum = d; return a }
func withRetry(a qp.Attr, r uint8) qp.Attr   { a.RetryCnt = r; return a }
func withTimeout(a qp.Attr, v uint8) qp.Attr { a.Timeout = v; return a }

func TestPostingRules(t *testing.T) {
	q, c := newTestQP(t)
	if _, err := q.PostSend([]qp.SendWR{{Opcode: qp.WRSend}}); !errors.Is(err, qp.ErrNotPosting) {
		t.Fatalf("post_send in RESET: %v", err)
	}
	if _, err := q.PostRecv([]qp.RecvWR{{}}); !errors.Is(err, qp.ErrNotPosting) {
		t.Fatalf("post_recv in RESET: %v", err)
	}
	for _, f := range []func(*QP) error{toInit, toRTR} {
		if err := f(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Modify(&rtsAttr, rtsMask); err != nil {
		t.Fatal(err)
	}
	bad := []qp.SendWR{
		{Opcode: 42},
		{Opcode: qp.WRSend, SGList: make([]qp.SGE, 3)},
		{Opcode: qp.WRSend, Flags: qp.SendInline, Inline: make([]byte, 65)},
		{Opcode: qp.WRAtomicFetchAndAdd, SGList: []qp.SGE{{Length: 4}}},
		{Opcode: qp.WRAtomicCmpAndSwp, SGList: []qp.SGE{{Length: 8}}, RemoteAddr: 4},
		{Opcode: qp.WRRDMARead, Flags: qp.SendInline},
	}
	for i, wr := range bad {
		if n, err := q.PostSend([]qp.SendWR{wr}); !errors.Is(err, qp.ErrBadWR) || n != 0 {
			t.Errorf("bad WR %d: n=%d err=%v", i, n, err)
		}
	}
	// Nine requests on an eight-deep queue: the ninth is refused, and its
	// index says so.
	wrs := make([]qp.SendWR, 9)
	for i := range wrs {
		wrs[i] = qp.SendWR{WRID: uint64(i), Opcode: qp.WRSend, Flags: qp.SendInline, Inline: []byte("x")}
	}
	if n, err := q.PostSend(wrs); n != 8 || !errors.Is(err, qp.ErrQueueFull) {
		t.Fatalf("posted %d, err %v; want 8 and ErrQueueFull", n, err)
	}
	// Moving to ERR flushes all eight.
	if err := toErr(q); err != nil {
		t.Fatal(err)
	}
	var wcs [16]cq.WC
	n, _ := c.Poll(wcs[:])
	if n != 8 {
		t.Fatalf("%d flushed completions, want 8", n)
	}
	for i, wc := range wcs[:n] {
		if wc.Status != cq.StatusWRFlushErr || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	// In ERR, new requests complete at once, flushed.
	if _, err := q.PostRecv([]qp.RecvWR{{WRID: 99}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Poll(wcs[:]); n != 1 || wcs[0].WRID != 99 || wcs[0].Status != cq.StatusWRFlushErr {
		t.Fatalf("post_recv in ERR: %v", wcs[:n])
	}
}

func TestMTU(t *testing.T) {
	for m, want := range map[qp.MTU]int{qp.MTU256: 256, qp.MTU512: 512, qp.MTU1024: 1024, qp.MTU2048: 2048, qp.MTU4096: 4096, 0: 0, 6: 0} {
		if m.Bytes() != want {
			t.Errorf("MTU %d = %d bytes, want %d", m, m.Bytes(), want)
		}
		if want != 0 && qp.MTUFromBytes(want) != m {
			t.Errorf("MTUFromBytes(%d) = %d", want, qp.MTUFromBytes(want))
		}
	}
}
