package perftest

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire/bth"
)

// UD (-c UD), as perftest runs send_bw and send_lat on it: every QP goes
// to INIT with the Q_Key QKey, to RTR with nothing more and to RTS with
// its PSN (ctx_modify_qp_to_init, _rtr, _rts), and gets an address handle
// to the GID of the peer's key message, through which each SEND goes to
// the QPN of the peer's QP of the same index with the Q_Key QKey
// (ctx_set_send_wqes). Each receive has GRHLen bytes more than the
// message, for the GRH the message arrives behind (SIZE(UD, size, 1)).

// QKey is perftest's DEF_QKEY, the Q_Key of every UD QP and send.
const QKey = 0x11111111

// GRHLen is perftest's UD_ADDITION: the room for the GRH in front of each
// message a UD QP receives.
const GRHLen = 40

// ErrUDSize is perftest's refusal of a message size given with -s that is
// larger than the MTU both sides agreed on (check_mtu).
var ErrUDSize = errors.New("Max message size in UD cannot be greater than MTU")

// FitUD applies perftest's check_mtu rule for UD to p, whose MTU is the
// one both sides agreed on: a message larger than the MTU is refused if
// -s asked for it, and otherwise (perftest's default size, or -a) cut to
// the MTU, which perftest says on stderr with the two lines note returns.
// With -a the sizes then run from 2 to the MTU (Sizes).
func (p *Params) FitUD() (note string, err error) {
	mtu := p.MTU.Bytes()
	if !p.datagram() || p.Size <= mtu {
		return "", nil
	}
	if !p.AllSize && !p.sizeDefaulted {
		return "", fmt.Errorf("perftest: %w (-s %d, MTU %d)", ErrUDSize, p.Size, mtu)
	}
	p.Size = mtu
	return fmt.Sprintf(" Max msg size in UD is MTU %d\n Changing to this MTU\n", mtu), nil
}

// connectUD moves QP i of s through INIT, RTR and RTS with perftest's UD
// attributes and makes its address handle to the peer at gid, whose QP
// of the same index is remoteQPN: the source GID sgid, hop limit 64 (on
// RoCE the kernel puts the route's in the GRH, whatever perftest asks:
// 64), the traffic class of --tclass and the flow label of --flow_label.
func (s *Side) connectUD(p *Params, i int, psn bth.PSN, remoteQPN bth.QPN, gid netip.Addr, sgid uint8) error {
	if err := s.readyUD(i, psn, QKey); err != nil {
		return err
	}
	ah, err := s.Dev.CreateAH(s.PD, qp.AddressVector{DGID: gid, SGIDIndex: sgid, HopLimit: 64, TrafficClass: p.TrafficClass, FlowLabel: p.flowLabel(i)})
	if err != nil {
		return fmt.Errorf("perftest: Failed to create AH: %w", err)
	}
	l := s.qps[i]
	l.ah, l.remoteQPN, l.remoteQKey = ah, remoteQPN, QKey
	return nil
}

// readyUD moves UD QP i of s through INIT (with qkey), RTR and RTS (with
// psn).
func (s *Side) readyUD(i int, psn bth.PSN, qkey uint32) error {
	l := s.qps[i]
	steps := []struct {
		attr qp.Attr
		mask qp.AttrMask
	}{
		{qp.Attr{State: qp.StateInit, Port: 1, QKey: qkey}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey},
		{qp.Attr{State: qp.StateRTR}, qp.AttrState},
		{qp.Attr{State: qp.StateRTS, SQPSN: psn}, qp.AttrState | qp.AttrSQPSN},
	}
	for _, st := range steps {
		if err := l.qp.Modify(&st.attr, st.mask); err != nil {
			return fmt.Errorf("perftest: UD QP %#x to %v: %w", uint32(l.qp.Num()), st.attr.State, err)
		}
	}
	return nil
}

// addressUD makes wr a UD send to QP i's peer, when the side's QPs are UD.
func (s *Side) addressUD(wr *qp.SendWR, i int) {
	if l := s.qps[i]; l.ah != nil {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = l.ah, l.remoteQPN, l.remoteQKey
	}
}
