package qp

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/mr"
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
	q, err := New(port, 0x11, InitAttr{
		Type: TypeRC, PD: port.mrs.AllocPD(), SendCQ: c, RecvCQ: c,
		Cap: Cap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64},
	})
	if err != nil {
		t.Fatal(err)
	}
	return q, c
}

var (
	initAttr = Attr{State: StateInit, Port: 1, AccessFlags: mr.RemoteWrite}
	initMask = AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags
	rtrAttr  = Attr{State: StateRTR, PathMTU: MTU1024, DestQPNum: 0x12, RQPSN: 1, MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AV: AddressVector{DGID: netip.MustParseAddr("::ffff:10.0.0.2")}}
	rtrMask = AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
	rtsAttr = Attr{State: StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
	rtsMask = AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
)

func TestStateMachine(t *testing.T) {
	q, _ := newTestQP(t)
	steps := []struct {
		attr Attr
		mask AttrMask
		want State
	}{
		{initAttr, initMask, StateInit},
		{rtrAttr, rtrMask, StateRTR},
		{rtsAttr, rtsMask, StateRTS},
		{Attr{State: StateSQD}, AttrState, StateSQD},
		{Attr{State: StateRTS}, AttrState, StateRTS},
		{Attr{State: StateErr}, AttrState, StateErr},
		{Attr{State: StateReset}, AttrState, StateReset},
		{initAttr, initMask, StateInit},
	}
	for i, s := range steps {
		if err := q.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("step %d to %v: %v", i, s.want, err)
		}
		if got := q.State(); got != s.want {
			t.Fatalf("step %d: state %v, want %v", i, got, s.want)
		}
	}
	if a := q.Query(); a.PathMTU != MTU256 || a.DestQPNum != 0 {
		t.Fatalf("RESET kept attributes: %+v", a)
	}
}

func TestIllegalTransitions(t *testing.T) {
	tests := []struct {
		name  string
		from  []func(q *QP) error
		attr  Attr
		mask  AttrMask
		isErr error
	}{
		{"RESET to RTR", nil, rtrAttr, rtrMask, ErrState},
		{"RESET to RTS", nil, rtsAttr, rtsMask, ErrState},
		{"INIT without port", nil, initAttr, initMask &^ AttrPort, ErrAttr},
		{"INIT with an RTR attribute", nil, initAttr, initMask | AttrPathMTU, ErrAttr},
		{"RTR without dest QPN", []func(q *QP) error{toInit}, rtrAttr, rtrMask &^ AttrDestQPN, ErrAttr},
		{"RTR with MTU 6", []func(q *QP) error{toInit}, withMTU(rtrAttr, 6), rtrMask, ErrAttr},
		{"RTR with a 25-bit dest QPN", []func(q *QP) error{toInit}, withDest(rtrAttr, 1<<24), rtrMask, ErrAttr},
		{"RTS without retry_cnt", []func(q *QP) error{toInit, toRTR}, rtsAttr, rtsMask &^ AttrRetryCnt, ErrAttr},
		{"RTS with retry_cnt 8", []func(q *QP) error{toInit, toRTR}, withRetry(rtsAttr, 8), rtsMask, ErrAttr},
		{"RTS with timeout 32", []func(q *QP) error{toInit, toRTR}, withTimeout(rtsAttr, 32), rtsMask, ErrAttr},
		{"INIT to RTS", []func(q *QP) error{toInit}, rtsAttr, rtsMask, ErrState},
		{"wrong current state", []func(q *QP) error{toInit}, Attr{State: StateInit, CurState: StateRTS}, AttrState | AttrCurState, ErrState},
		{"ERR to RTS", []func(q *QP) error{toErr}, rtsAttr, rtsMask, ErrState},
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
func toErr(q *QP) error  { return q.Modify(&Attr{State: StateErr}, AttrState) }

func withMTU(a Attr, m MTU) Attr       { a.PathMTU = m; return a }
func withDest(a Attr, d bth.QPN) Attr  { a.DestQPNum = d; return a }
func withRetry(a Attr, r uint8) Attr   { a.RetryCnt = r; return a }
func withTimeout(a Attr, v uint8) Attr { a.Timeout = v; return a }

func TestPostingRules(t *testing.T) {
	q, c := newTestQP(t)
	if _, err := q.PostSend([]SendWR{{Opcode: WRSend}}); !errors.Is(err, ErrNotPosting) {
		t.Fatalf("post_send in RESET: %v", err)
	}
	if _, err := q.PostRecv([]RecvWR{{}}); !errors.Is(err, ErrNotPosting) {
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
	bad := []SendWR{
		{Opcode: 42},
		{Opcode: WRSend, SGList: make([]SGE, 3)},
		{Opcode: WRSend, Flags: SendInline, Inline: make([]byte, 65)},
		{Opcode: WRAtomicFetchAndAdd, SGList: []SGE{{Length: 4}}},
		{Opcode: WRAtomicCmpAndSwp, SGList: []SGE{{Length: 8}}, RemoteAddr: 4},
		{Opcode: WRRDMARead, Flags: SendInline},
	}
	for i, wr := range bad {
		if n, err := q.PostSend([]SendWR{wr}); !errors.Is(err, ErrBadWR) || n != 0 {
			t.Errorf("bad WR %d: n=%d err=%v", i, n, err)
		}
	}
	// Nine requests on an eight-deep queue: the ninth is refused, and its
	// index says so.
	wrs := make([]SendWR, 9)
	for i := range wrs {
		wrs[i] = SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendInline, Inline: []byte("x")}
	}
	if n, err := q.PostSend(wrs); n != 8 || !errors.Is(err, ErrQueueFull) {
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
	if _, err := q.PostRecv([]RecvWR{{WRID: 99}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Poll(wcs[:]); n != 1 || wcs[0].WRID != 99 || wcs[0].Status != cq.StatusWRFlushErr {
		t.Fatalf("post_recv in ERR: %v", wcs[:n])
	}
}

func TestMTU(t *testing.T) {
	for m, want := range map[MTU]int{MTU256: 256, MTU512: 512, MTU1024: 1024, MTU2048: 2048, MTU4096: 4096, 0: 0, 6: 0} {
		if m.Bytes() != want {
			t.Errorf("MTU %d = %d bytes, want %d", m, m.Bytes(), want)
		}
		if want != 0 && MTUFromBytes(want) != m {
			t.Errorf("MTUFromBytes(%d) = %d", want, MTUFromBytes(want))
		}
	}
}
