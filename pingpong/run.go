package pingpong

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
)

// Work request IDs, rc_pingpong's PINGPONG_RECV_WRID and
// PINGPONG_SEND_WRID. They are also the bits of the pending mask that
// holds back the next send until both the last send and a receive have
// completed.
const (
	recvWRID = 1
	sendWRID = 2
)

// Params are a side's settings: rc_pingpong's flags that gorxe honours.
// DefaultParams returns rc_pingpong's defaults.
type Params struct {
	// Type is the QP's service: qp.TypeRC, as rc_pingpong; qp.TypeUC,
	// as uc_pingpong, whose run is the same with a UC QP; or qp.TypeUD,
	// as ud_pingpong (see NewSide and Connect for what UD changes). Zero
	// is RC.
	Type     qp.Type
	Size     int    // -s: bytes per message; with UD at most the port's MTU
	RxDepth  int    // -r: receives kept posted (refilled when one is left)
	Iters    int    // -n: messages each way
	MTU      qp.MTU // -m: path MTU; each side uses its own, nothing is negotiated (UD: unused, a UD QP has no path)
	Port     uint8  // -i: the device port; gorxe devices have port 1 only
	GIDIndex int    // -g: the device GID this side sends from and tells the peer; -1 for none, which RoCE cannot use
	// SL (-l) is the service level. A RoCE v2 packet has no field for it
	// (no LRH), and rxe ignores it: gorxe checks it is an SL (0..15) and
	// sends the same packets whatever it is.
	SL     uint8
	Events bool // -e: sleep on the CQ rather than busy poll
	// Check (-c, --chk): the client marks the first byte of each page of
	// its buffer with rc_pingpong's mark, which is 0 (it computes
	// i / page_size % sizeof(char)) over a buffer otherwise filled with
	// 0x7b. At the end, rc_pingpong's server checks the first byte of
	// each page of the last message it received; gorxe checks every byte
	// of it, on both sides (the client's last message is the server's
	// echo of its own), and reports the pages that differ.
	Check    bool
	PageSize int // the page of Check; os.Getpagesize() when zero
	// GiveUp bounds each wait of the run, for the peer's address and for
	// a completion: a side that waits longer fails. Zero waits forever,
	// as rc_pingpong does.
	GiveUp time.Duration
	// NumQP, when not zero, makes the run ibv_srq_pingpong's
	// (srq_pingpong.c; -q, whose default is DefaultNumQP): NumQP RC QPs
	// that receive from one shared receive queue of RxDepth WQEs, which
	// is refilled when no more than NumQP are left posted; MaxQP
	// addresses each way in the exchange, the first NumQP real and the
	// rest zero; each QP sends its next message once its last send and a
	// receive on it have completed, until Iters messages have gone in
	// all. Zero is rc_pingpong's one QP with a receive queue of its own.
	NumQP int
}

// MaxQP is how many address messages ibv_srq_pingpong writes each way,
// whatever -q says (its MAX_QP); NumQP must be less.
const MaxQP = 256

// DefaultNumQP is ibv_srq_pingpong's -q default.
const DefaultNumQP = 16

// DefaultParams returns rc_pingpong's defaults: 1000 messages of 4096
// bytes each way, 500 receives posted, path MTU 1024, port 1, no GID.
func DefaultParams() Params {
	return Params{Size: 4096, RxDepth: 500, Iters: 1000, MTU: qp.MTU1024, Port: 1, GIDIndex: -1}
}

// DefaultUDSize is ud_pingpong's default message size: 1024 bytes, which
// fits the MTU of a RoCE port on a 1500-byte Ethernet link (rdma-core
// 7ffa09b9c "Fix UD pingpong default message size to match default MTU").
const DefaultUDSize = 1024

// QKey is the Q_Key ud_pingpong gives its QP and puts in every send:
// 0x11111111.
const QKey = 0x11111111

// GRHLen is the room in front of every message a UD QP receives, which
// ud_pingpong's buffer keeps (size + 40): the GRH, or on RoCE v2 over
// IPv4 20 zero bytes and the IPv4 header.
const GRHLen = 40

// fill is the byte rc_pingpong fills its buffer with (memset 0x7b),
// and mark what -c puts at the start of each page on the client.
const (
	fill = 0x7b
	mark = 0
)

// Validate reports settings that cannot work, before anything is set up.
func (p *Params) Validate() error {
	switch {
	case p.Size < 0 || p.Size > qp.MaxMsgSize:
		return fmt.Errorf("pingpong: size %d: want 0 to %d bytes", p.Size, qp.MaxMsgSize)
	case p.RxDepth < 1 || p.RxDepth > qp.MaxWR:
		// rc_pingpong takes -r 0, and then posts no receive: the peer's
		// first send waits for one forever.
		return fmt.Errorf("pingpong: rx depth %d: want 1 to %d receives", p.RxDepth, qp.MaxWR)
	case p.Iters < 0:
		return fmt.Errorf("pingpong: %d iterations", p.Iters)
	case p.MTU.Bytes() == 0:
		return fmt.Errorf("pingpong: path MTU %d: want 256, 512, 1024, 2048 or 4096", p.MTU)
	case p.Port != 1:
		return fmt.Errorf("pingpong: IB port %d: a gorxe device has one port, 1", p.Port)
	case p.SL > 15:
		return fmt.Errorf("pingpong: SL %d: want 0 to 15", p.SL)
	case p.GiveUp < 0:
		return fmt.Errorf("pingpong: give-up time %v", p.GiveUp)
	case p.Type != 0 && p.Type != qp.TypeRC && p.Type != qp.TypeUC && p.Type != qp.TypeUD:
		return fmt.Errorf("pingpong: QP type %d: want RC, UC or UD", p.Type)
	case p.NumQP < 0, p.NumQP > 0 && p.Type != 0 && p.Type != qp.TypeRC:
		return fmt.Errorf("pingpong: %d QPs of type %d: srq_pingpong runs one or more RC QPs", p.NumQP, p.Type)
	case p.NumQP > p.RxDepth:
		return fmt.Errorf("pingpong: rx_depth %d is too small for %d QPs -- must have at least one receive per QP", p.RxDepth, p.NumQP)
	case p.NumQP >= MaxQP:
		return fmt.Errorf("pingpong: num_qp %d must be less than %d", p.NumQP, MaxQP)
	case p.GIDIndex < 0:
		// rc_pingpong then sends a zero GID and connects without a
		// GRH, which no RoCE device can: rxe fails to move its QP to
		// RTR. gorxe says so before it starts.
		return errors.New("pingpong: no GID index: RoCE needs one (-g); a gorxe device's GIDs are its link's addresses, index 0 first")
	}
	return nil
}

// Side is one end of a ping-pong: a QP in INIT with its receives posted
// and its buffer registered, as pp_init_ctx leaves it, and the address it
// tells its peer; with Params.NumQP, NumQP QPs sharing one SRQ.
type Side struct {
	dev *rnic.Device
	p   Params
	// buf is the registered memory: the receive area, then the send
	// buffer when it is apart (NumQP).
	buf []byte
	// recv is what each receive takes: the message, or with UD the
	// GRH area and then the message.
	recv []byte
	// off is where the message starts in recv: GRHLen with UD, else 0.
	off int
	// send is the message each send carries: recv's, or with NumQP a
	// buffer of its own at the end of buf.
	send   []byte
	pd     *mr.PD
	mr     *mr.MR
	cq     *cq.CQ
	srq    *rnic.SRQ  // with NumQP: the queue the QPs receive from
	qps    []*rnic.QP // one, or NumQP
	locals []Dest     // each QP's address
	routs  int        // receives posted and not yet completed

	// UD: the address handle to the peer and its QPN, set by Connect.
	ah     *qp.AH
	remote bth.QPN
}

// NewSide sets up a side on dev: a buffer of p.Size bytes filled with
// 0x7b and registered for local write, one CQ of p.RxDepth+1 entries for
// both queues, an RC (or p.Type) QP with room for one send and p.RxDepth receives,
// moved to INIT (port p.Port, P_Key index 0, no remote access), and
// p.RxDepth receives posted. Its first PSN is random, as rc_pingpong's
// lrand48() & 0xffffff.
//
// A UD side is ud_pingpong's pp_init_ctx: the message may be no longer
// than the port's MTU ("Requested size larger than port MTU"); the buffer
// holds GRHLen bytes more, in front, so that each receive, of the whole
// buffer, has room for the GRH; the QP goes to INIT with the Q_Key QKey
// instead of access flags.
//
// With p.NumQP it is srq_pingpong's pp_init_ctx: a CQ of
// p.RxDepth+p.NumQP entries, an SRQ of p.RxDepth WQEs of one SGE, and
// p.NumQP RC QPs with room for one send each, receiving from it, with a
// random PSN each; the sends have a buffer of their own.
func NewSide(dev *rnic.Device, p Params) (*Side, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	gids := dev.GIDs()
	if p.GIDIndex >= len(gids) {
		return nil, fmt.Errorf("pingpong: can't read sgid of index %d: %s has %d GIDs (%v)", p.GIDIndex, dev.Name(), len(gids), gids)
	}
	ud := p.Type == qp.TypeUD
	switch max := dev.MTU(); {
	case ud && p.Size > max.Bytes():
		return nil, fmt.Errorf("pingpong: Requested size larger than port MTU (%d)", max.Bytes())
	case !ud && p.MTU > max:
		return nil, fmt.Errorf("pingpong: path MTU %d is more than %s's link carries (%d)", p.MTU.Bytes(), dev.Name(), max.Bytes())
	}
	if p.PageSize <= 0 {
		p.PageSize = os.Getpagesize()
	}
	s := &Side{dev: dev, p: p}
	if ud {
		s.off = GRHLen
	}
	// srq_pingpong sends from the buffer its receives land in, as
	// rc_pingpong does; but where rc_pingpong's one QP never sends while
	// a message arrives, srq_pingpong's QPs do, each on its own, and a
	// QP's send would read what another QP's receive writes. gorxe gives
	// the sends a buffer of their own after the receive buffer, filled
	// alike: the bytes on the wire are the same, and only the server
	// checks what it received (-c), as srq_pingpong.
	n := s.off + p.Size
	if p.NumQP > 0 {
		n += p.Size
	}
	s.buf = make([]byte, n)
	for i := range s.buf {
		s.buf[i] = fill
	}
	s.recv, s.send = s.buf[:s.off+p.Size], s.buf[n-p.Size:]
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	var err error
	s.pd = dev.AllocPD()
	if s.mr, err = dev.RegMR(s.pd, s.buf, mr.LocalWrite); err != nil {
		return nil, fmt.Errorf("pingpong: couldn't register MR: %w", err)
	}
	if s.cq, err = dev.CreateCQ(p.RxDepth + max(p.NumQP, 1)); err != nil {
		return nil, fmt.Errorf("pingpong: couldn't create CQ: %w", err)
	}
	ia := qp.InitAttr{
		Type: cmp.Or(p.Type, qp.TypeRC), PD: s.pd, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: uint32(p.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1},
	}
	if p.NumQP > 0 {
		if s.srq, err = dev.CreateSRQ(s.pd, qp.SRQAttr{MaxWR: uint32(p.RxDepth), MaxSGE: 1}); err != nil {
			return nil, fmt.Errorf("pingpong: couldn't create SRQ: %w", err)
		}
		ia.SRQ, ia.Cap.MaxRecvWR, ia.Cap.MaxRecvSGE = s.srq, 0, 0
	}
	for i := range max(p.NumQP, 1) {
		q, err := dev.CreateQP(ia)
		if err != nil {
			return nil, fmt.Errorf("pingpong: couldn't create QP%s: %w", s.qpIndex(i), err)
		}
		s.qps = append(s.qps, q)
	}
	init, mask := qp.Attr{State: qp.StateInit, PKeyIndex: 0, Port: p.Port}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags
	if ud {
		init.QKey, mask = QKey, mask&^qp.AttrAccessFlags|qp.AttrQKey
	}
	for i, q := range s.qps {
		if err := q.Modify(&init, mask); err != nil {
			return nil, fmt.Errorf("pingpong: failed to modify QP%s to INIT: %w", s.qpIndex(i), err)
		}
	}
	if err := s.postRecv(p.RxDepth); err != nil {
		return nil, err
	}
	for _, q := range s.qps {
		s.locals = append(s.locals, Dest{QPN: q.Num(), PSN: bth.PSN(rand.Uint32() & bth.PSNMask), GID: gids[p.GIDIndex].As16()})
	}
	ok = true
	return s, nil
}

// qpIndex returns "[i]" when the side has several QPs, as srq_pingpong
// names them in its messages ("QP[3]"), and "" otherwise.
func (s *Side) qpIndex(i int) string {
	if s.p.NumQP == 0 {
		return ""
	}
	return "[" + strconv.Itoa(i) + "]"
}

// Local returns the address this side tells its peer: its first QP's.
func (s *Side) Local() Dest { return s.locals[0] }

// Locals returns the addresses of each of the side's QPs.
func (s *Side) Locals() []Dest { return slices.Clone(s.locals) }

// Close destroys the side's QPs, SRQ, CQ and memory region.
func (s *Side) Close() {
	s.dev.Flush()
	for _, q := range s.qps {
		q.Destroy()
	}
	if s.srq != nil {
		s.srq.Destroy()
	}
	if s.cq != nil {
		s.cq.Close()
	}
	if s.mr != nil {
		s.mr.Deregister()
	}
}

// postRecv posts n receives of recv (with UD, the GRH area and the
// message), to the SRQ if the side has one.
func (s *Side) postRecv(n int) error {
	sge := []qp.SGE{{Addr: s.mr.IOVA(), Length: uint32(len(s.recv)), LKey: s.mr.LKey()}}
	wrs := make([]qp.RecvWR, n)
	for i := range wrs {
		wrs[i] = qp.RecvWR{WRID: recvWRID, SGList: sge}
	}
	post := s.qps[0].PostRecv
	if s.srq != nil {
		post = s.srq.PostRecv
	}
	k, err := post(wrs)
	s.routs += k
	if err != nil {
		return fmt.Errorf("pingpong: couldn't post receive (%d): %w", s.routs, err)
	}
	return nil
}

// postSend posts one signaled SEND of the message in send on QP i;
// with UD, to the peer's QPN through the address handle with the Q_Key
// QKey.
func (s *Side) postSend(i int) error {
	wr := qp.SendWR{
		WRID: sendWRID, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		// send ends buf in every layout.
		SGList: []qp.SGE{{Addr: s.mr.IOVA() + uint64(len(s.buf)-len(s.send)), Length: uint32(len(s.send)), LKey: s.mr.LKey()}},
	}
	if s.ah != nil {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ah, s.remote, QKey
	}
	_, err := s.qps[i].PostSend([]qp.SendWR{wr})
	if err != nil {
		return fmt.Errorf("pingpong: couldn't post send: %w", err)
	}
	return nil
}

// Connect moves the QP to RTR and RTS towards remote with rc_pingpong's
// attributes (pp_connect_ctx): the path MTU of p.MTU, max_dest_rd_atomic
// 1, min_rnr_timer 12 (0.64 ms); a GRH to the peer's GID from p.GIDIndex;
// then timeout 14 (67 ms), retry_cnt 7, rnr_retry 7 (forever) and
// max_rd_atomic 1. A UC QP takes uc_pingpong's, which are those less the
// ones only RC has: the path, the QPN and the PSNs.
//
// rc_pingpong asks for hop limit 1, but on RoCE the kernel replaces it
// with the route's (ib_resolve_unicast_gid_dmac in
// drivers/infiniband/core/verbs.c): rxe sends its packets with TTL 64.
// Connect leaves gorxe's default, 64, to send what rxe sends.
//
// rc_pingpong puts a GRH on the path only when the peer's GID has a
// non-zero interface ID (its last 8 bytes); RoCE cannot go without one,
// so Connect refuses such a peer.
//
// A UD QP is ud_pingpong's pp_connect_ctx: RTR with no attribute but the
// state, RTS with its PSN, and an address handle to the peer's GID from
// p.GIDIndex, hop limit 64 (ud_pingpong's since rdma-core v61; before,
// 1, which the kernel replaced with the route's, 64, as for RC), which
// every send then names with the peer's QPN.
func (s *Side) Connect(remote Dest) error { return s.ConnectAll([]Dest{remote}) }

// ConnectAll connects each of the side's QPs, as Connect, to the
// address of the same index in remotes, which has at least as many. As
// srq_pingpong's pp_connect_ctx, every QP's GRH goes to the first
// address's GID. An address with QPN 0 is one the peer left empty: it
// runs fewer QPs than this side, and ConnectAll refuses it, where
// srq_pingpong would connect to QP 0 and wait.
func (s *Side) ConnectAll(remotes []Dest) error {
	if len(remotes) < len(s.qps) {
		return fmt.Errorf("pingpong: %d peer addresses for %d QPs", len(remotes), len(s.qps))
	}
	gid := remotes[0].GID
	var zero [8]byte
	if [8]byte(gid[8:]) == zero {
		return fmt.Errorf("pingpong: the peer's GID %s has no interface ID, so it wants no GRH, which RoCE cannot do without: run it with -g", FormatGID(gid))
	}
	dgid := netip.AddrFrom16(gid)
	sgid := netip.AddrFrom16(s.locals[0].GID)
	if dgid.Is4In6() != sgid.Is4In6() {
		return fmt.Errorf("pingpong: the peer's GID %s and this side's %s (index %d) are not of one IP version", FormatGID(gid), FormatGID(s.locals[0].GID), s.p.GIDIndex)
	}
	if s.p.Type == qp.TypeUD {
		return s.connectUD(remotes[0], dgid) // ud_pingpong runs one QP (Validate)
	}
	for i, q := range s.qps {
		remote := remotes[i]
		if remote.QPN == 0 {
			return fmt.Errorf("pingpong: the peer's address %d is empty: it runs fewer QPs than this side's %d (-q)", i, len(s.qps))
		}
		rtr := qp.Attr{
			State: qp.StateRTR, PathMTU: s.p.MTU, DestQPNum: remote.QPN, RQPSN: remote.PSN,
			AV: qp.AddressVector{DGID: dgid, SGIDIndex: uint8(s.p.GIDIndex)},
		}
		rtrMask := qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
		rts := qp.Attr{State: qp.StateRTS, SQPSN: s.locals[i].PSN}
		rtsMask := qp.AttrState | qp.AttrSQPSN
		if s.p.Type != qp.TypeUC {
			rtr.MaxDestRdAtomic, rtr.MinRNRTimer = 1, 12
			rtrMask |= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
			rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = 14, 7, 7, 1
			rtsMask |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
		}
		if err := q.Modify(&rtr, rtrMask); err != nil {
			return fmt.Errorf("pingpong: failed to modify QP%s to RTR: %w", s.qpIndex(i), err)
		}
		if err := q.Modify(&rts, rtsMask); err != nil {
			return fmt.Errorf("pingpong: failed to modify QP%s to RTS: %w", s.qpIndex(i), err)
		}
	}
	return nil
}

// connectUD is Connect for a UD side's one QP.
func (s *Side) connectUD(remote Dest, dgid netip.Addr) error {
	q := s.qps[0]
	if err := q.Modify(&qp.Attr{State: qp.StateRTR}, qp.AttrState); err != nil {
		return fmt.Errorf("pingpong: Failed to modify QP to RTR: %w", err)
	}
	if err := q.Modify(&qp.Attr{State: qp.StateRTS, SQPSN: s.locals[0].PSN}, qp.AttrState|qp.AttrSQPSN); err != nil {
		return fmt.Errorf("pingpong: Failed to modify QP to RTS: %w", err)
	}
	ah, err := s.dev.CreateAH(s.pd, qp.AddressVector{DGID: dgid, SGIDIndex: uint8(s.p.GIDIndex), HopLimit: 64})
	if err != nil {
		return fmt.Errorf("pingpong: Failed to create AH: %w", err)
	}
	s.ah, s.remote = ah, remote.QPN
	return nil
}

// ErrStalled is returned when a wait outlasts Params.GiveUp.
var ErrStalled = errors.New("pingpong: no progress")

// PingPong runs the messages on a connected side, client or server, and
// measures from the client's first send (or the server's start of
// waiting) to the side's last completion. As rc_pingpong: the client
// sends first; each side posts its next send once its previous send and a
// receive have both completed, until it has sent p.Iters; it stops when
// it has sent and received p.Iters messages; it refills its receives when
// only one is left posted. A completion with an error status ends the
// run with rc_pingpong's words for it. With p.NumQP, as srq_pingpong:
// the client sends first on every QP; each QP keeps its own pending
// mask, the completion's QP number saying whose it is; the SRQ is
// refilled when no more than p.NumQP receives are left; p.Iters counts
// the messages of all QPs.
func (s *Side) PingPong(ctx context.Context, client bool) (*Result, error) {
	pending := make([]int, len(s.qps))
	for i := range pending {
		pending[i] = recvWRID
	}
	if s.p.Check && (client || s.srq != nil) {
		// The client's mark. srq_pingpong's server echoes it, sending
		// the buffer its receives land in; gorxe's sends from a buffer
		// of its own (NewSide), which therefore carries the mark too:
		// a stock client that checks, and sends back what it received,
		// finds it there.
		for i := 0; i < len(s.send); i += s.p.PageSize {
			s.send[i] = mark
		}
	}
	if client {
		for i := range s.qps {
			if err := s.postSend(i); err != nil {
				return nil, err
			}
			pending[i] |= sendWRID
		}
	}
	refill := max(s.p.NumQP, 1)
	// rc_pingpong polls two completions at a time, srq_pingpong as many
	// as its CQ holds.
	wcs := make([]cq.WC, 2)
	if s.p.NumQP > 0 {
		wcs = make([]cq.WC, s.p.NumQP+s.p.RxDepth)
	}
	start := time.Now()
	rcnt, scnt := 0, 0
	for rcnt < s.p.Iters || scnt < s.p.Iters {
		n, err := s.wait(ctx, wcs)
		if err != nil {
			return nil, err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != cq.StatusSuccess {
				return nil, fmt.Errorf("pingpong: Failed status %s (%d) for wr_id %d", wc.Status, int(wc.Status), int(wc.WRID))
			}
			i := slices.IndexFunc(s.qps, func(q *rnic.QP) bool { return uint32(q.Num()) == wc.QPNum })
			if i < 0 {
				return nil, fmt.Errorf("pingpong: Couldn't find QPN %06x", wc.QPNum)
			}
			switch wc.WRID {
			case sendWRID:
				scnt++
			case recvWRID:
				s.routs--
				if s.routs <= refill {
					if err := s.postRecv(s.p.RxDepth - s.routs); err != nil {
						return nil, err
					}
				}
				rcnt++
			default:
				return nil, fmt.Errorf("pingpong: Completion for unknown wr_id %d", int(wc.WRID))
			}
			pending[i] &^= int(wc.WRID)
			if scnt < s.p.Iters && pending[i] == 0 {
				if err := s.postSend(i); err != nil {
					return nil, err
				}
				pending[i] = recvWRID | sendWRID
			}
		}
	}
	r := &Result{Local: s.locals[0], Size: s.p.Size, Iters: s.p.Iters, Elapsed: time.Since(start)}
	switch {
	case !s.p.Check:
	case s.p.NumQP == 0:
		r.BadPages = s.badPages()
	case !client:
		// srq_pingpong's server checks the buffer after its last
		// completion, while messages its peer sent beyond the count
		// may still arrive (each QP sends while the count of sends
		// that completed is short). gorxe stops its QPs first, so that
		// none writes while it reads: the ACKs owed go out, then the
		// QPs move to ERR, which takes and releases each QP's lock.
		s.dev.Flush()
		for _, q := range s.qps {
			q.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState)
		}
		r.BadPages = s.badPages()
	}
	return r, nil
}

// badPages returns the pages of the buffer that differ from what the
// client's -c puts in its own.
func (s *Side) badPages() []int {
	var bad []int
	msg := s.recv[s.off:]
	for i := 0; i < len(msg); i += s.p.PageSize {
		page := msg[i:min(i+s.p.PageSize, len(msg))]
		ok := page[0] == mark
		for _, b := range page[1:] {
			ok = ok && b == fill
		}
		if !ok {
			bad = append(bad, i/s.p.PageSize)
		}
	}
	return bad
}

// Busy-poll limits: how long a side that does not sleep on events polls
// before it sleeps on the CQ after all (rc_pingpong never does; gorxe's
// device goroutines need the CPU it would keep), and, on a link that
// cannot be polled, how many turns it yields before it sleeps.
const (
	spinTime = 5 * time.Millisecond
	spins    = 8
)

// wait returns the next completions: with p.Events it sleeps on the CQ;
// otherwise it polls the CQ, and the device's link, for up to spinTime
// first. Each wait gives up after p.GiveUp.
func (s *Side) wait(ctx context.Context, dst []cq.WC) (int, error) {
	if !s.p.Events {
		var start time.Time
		for turn := 1; ; turn++ {
			if n, err := s.cq.Poll(dst); n > 0 || err != nil {
				return n, err
			}
			if !s.dev.CanPoll() {
				if turn > spins {
					break
				}
				runtime.Gosched()
				continue
			}
			if turn%16 == 0 {
				if start.IsZero() {
					start = time.Now()
				} else if time.Since(start) > spinTime {
					s.dev.Flush() // nobody polls now: send what Poll left owed
					break
				}
			}
			if !s.dev.Poll() && turn%32 == 0 && runtime.GOMAXPROCS(0) == 1 {
				runtime.Gosched()
			}
		}
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if s.p.GiveUp > 0 {
		wctx, cancel = context.WithTimeoutCause(ctx, s.p.GiveUp, fmt.Errorf("%w: nothing completed for %v", ErrStalled, s.p.GiveUp))
	}
	defer cancel()
	n, err := s.cq.Wait(wctx, dst)
	if err != nil && wctx.Err() != nil {
		return 0, context.Cause(wctx)
	}
	return n, err
}

// Client runs the client's side of rc_pingpong on dev against the server
// at addr (host:port), writing to out what rc_pingpong prints: the local
// address, the remote address, then (Result.WriteReport) the result.
// The client connects its QP after the exchange and sends first. With
// p.NumQP it is srq_pingpong's client: an address line for each QP.
func Client(ctx context.Context, dev *rnic.Device, p Params, addr string, out io.Writer) (*Result, error) {
	return run(ctx, dev, p, out, func(ctx context.Context) (net.Conn, error) { return Dial(ctx, addr) },
		func(ctx context.Context, c net.Conn, s *Side) ([]Dest, error) {
			return ExchangeClientN(ctx, c, s.locals, s.exchanged())
		}, true)
}

// Server runs the server's side of rc_pingpong on dev for the one client
// that connects to ln, which it closes, writing to out what rc_pingpong
// prints. The server connects its QP before it answers the client.
func Server(ctx context.Context, dev *rnic.Device, p Params, ln net.Listener, out io.Writer) (*Result, error) {
	return run(ctx, dev, p, out, func(ctx context.Context) (net.Conn, error) { return Accept(ctx, ln) }, serverExchange, false)
}

// ServerConn is Server for a client already accepted on c, which it
// closes: for a server that must see the connection before it knows its
// address (the address the client reached says which of the host's GIDs
// to use).
func ServerConn(ctx context.Context, dev *rnic.Device, p Params, c net.Conn, out io.Writer) (*Result, error) {
	defer c.Close() // also when the side cannot be set up
	return run(ctx, dev, p, out, func(context.Context) (net.Conn, error) { return c, nil }, serverExchange, false)
}

func serverExchange(ctx context.Context, c net.Conn, s *Side) ([]Dest, error) {
	return ExchangeServerN(ctx, c, s.locals, s.exchanged(), s.ConnectAll)
}

// exchanged returns how many addresses go each way: rc_pingpong's one,
// or srq_pingpong's MaxQP.
func (s *Side) exchanged() int {
	if s.p.NumQP > 0 {
		return MaxQP
	}
	return 1
}

// run is Client and Server: set up, print the local addresses, exchange,
// print the remote addresses (as many as the side has QPs), (client)
// connect, ping-pong, print the result.
func run(ctx context.Context, dev *rnic.Device, p Params, out io.Writer,
	dial func(context.Context) (net.Conn, error),
	exchange func(context.Context, net.Conn, *Side) ([]Dest, error), client bool) (*Result, error) {
	s, err := NewSide(dev, p)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	local := WriteAddress
	if p.Type == qp.TypeUD {
		local = writeUDLocalAddress
	}
	for _, l := range s.locals {
		if err := local(out, "local", l); err != nil {
			return nil, err
		}
	}
	c, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	if p.GiveUp > 0 {
		c.SetDeadline(time.Now().Add(p.GiveUp))
	}
	remotes, err := exchange(ctx, c, s)
	c.Close()
	if err != nil {
		return nil, err
	}
	for _, r := range remotes[:len(s.qps)] {
		if err := WriteAddress(out, "remote", r); err != nil {
			return nil, err
		}
	}
	if client {
		if err := s.ConnectAll(remotes); err != nil {
			return nil, err
		}
	}
	r, err := s.PingPong(ctx, client)
	if err != nil {
		return nil, err
	}
	r.Remote = remotes[0]
	if err := r.WriteReport(out); err != nil {
		return r, err
	}
	return r, r.WriteBadPages(out)
}
