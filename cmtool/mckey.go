package cmtool

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/gorxe/gorxe/cm"
)

// MckeyParams are librdmacm's mckey's options.
type MckeyParams struct {
	CMAToseParams      // -c, -C, -S (1, 10, 100)
	Sender        bool // -s: send to the group; else receive from it
	SendOnly      bool // -o: join as a send-only full member
	// Pause is how long the nodes wait between joining and sending or
	// receiving: mckey sleeps 3 s, "to give SM chance to configure
	// switches"; on Ethernet the host's joins (IGMP) take that time.
	Pause time.Duration
}

// DefaultMckeyParams returns mckey's defaults.
func DefaultMckeyParams() MckeyParams {
	return MckeyParams{CMAToseParams: DefaultCMAToseParams(), Pause: 3 * time.Second}
}

// Mckey is librdmacm's mckey (librdmacm/examples/mckey.c): each of
// Connections UD QPs joins the IPv4 multicast group with rdma_cm
// (cm.Manager.JoinMulticast, from the device's address local, or its
// first IPv4 one); after the pause a sender sends MessageCount messages
// of MessageSize bytes from each to the group (SEND with immediate, the
// immediate its QPN), and a receiver waits for as many on each. It prints
// what mckey prints and returns its status, 0 for success.
func Mckey(ctx context.Context, m *cm.Manager, group, local netip.Addr, p MckeyParams, stdout io.Writer) int {
	role := "server"
	if p.Sender {
		role = "client"
	}
	fmt.Fprintf(stdout, "mckey: starting %s\n", role)
	ret := mckey(ctx, m, group, local, p, stdout)
	fmt.Fprintln(stdout, "test complete")
	fmt.Fprintf(stdout, "return status %d\n", ret)
	return ret
}

func mckey(ctx context.Context, m *cm.Manager, group, local netip.Addr, p MckeyParams, stdout io.Writer) int {
	dev := m.Device()
	n := p.messages()
	fmt.Fprintln(stdout, "mckey: joining")
	var nodes []*udNode
	var joins []*cm.Multicast
	defer func() {
		for _, mc := range joins {
			if err := mc.Leave(); err != nil {
				fmt.Fprintf(stdout, "mckey: failure leaving: %v\n", err)
			}
		}
		for _, u := range nodes {
			u.qp.Destroy()
		}
	}()
	for range p.Connections {
		u, err := newUDNode(dev, p.CMAToseParams, p.Sender)
		if err != nil {
			fmt.Fprintf(stdout, "mckey: %v\n", err)
			return -1
		}
		nodes = append(nodes, u)
		mc, err := m.JoinMulticast(group, local, u.qp, p.SendOnly)
		if err != nil {
			fmt.Fprintf(stdout, "mckey: failure joining: %v\n", err)
			return -1
		}
		joins = append(joins, mc)
		// RoCE has no multicast LID, and rdma_cm's join sets SL 0.
		fmt.Fprintf(stdout, "mckey: joined dgid: %v mlid 0x0 sl 0\n", mc.AV.DGID)
		if u.ah, err = dev.CreateAH(u.pd, mc.AV); err != nil {
			fmt.Fprintf(stdout, "mckey: failure creating address handle: %v\n", err)
			return -1
		}
		u.remoteQPN, u.qkey = mc.QPN, mc.QKey
	}
	select {
	case <-ctx.Done():
		return -1
	case <-time.After(p.Pause):
	}
	if n == 0 {
		return 0
	}
	if p.Sender {
		fmt.Fprintln(stdout, "initiating data transfers")
		for _, u := range nodes {
			// Signaled, unlike mckey's, so that the QP is not destroyed
			// before its messages have left; it changes nothing on the
			// wire.
			if err := u.send(n, true); err != nil {
				fmt.Fprintln(stdout, err)
				return -1
			}
		}
	} else {
		fmt.Fprintln(stdout, "receiving data transfers")
	}
	var giveUp time.Duration // a receiver waits for the group's sender
	if p.Sender {
		giveUp = p.GiveUp
	}
	for _, u := range nodes {
		if err := u.poll(ctx, n, giveUp); err != nil {
			fmt.Fprintf(stdout, "mckey: failed polling CQ: %v\n", err)
			return -1
		}
	}
	fmt.Fprintln(stdout, "data transfers complete")
	return 0
}
