package mem_test

import (
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/linktest"
	"github.com/gorxe/gorxe/link/mem"
)

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name         string
		aAddr, bAddr netip.Addr
	}{
		{"IPv4", addrA4, addrB4},
		{"IPv6", addrA6, addrB6},
		{"IPv4Mapped", netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (a, b link.Link, aAddr, bAddr netip.Addr) {
				la, lb := pair(t, tc.aAddr, tc.bAddr)
				return la, lb, tc.aAddr, tc.bAddr
			})
		})
	}
}

// TestConformanceWithShaping runs the suite over links that schedule every
// packet, which must change nothing but timing.
func TestConformanceWithShaping(t *testing.T) {
	linktest.Run(t, func(t *testing.T) (a, b link.Link, aAddr, bAddr netip.Addr) {
		la, lb := pair(t, addrA4, addrB4)
		for _, l := range []*mem.Link{la, lb} {
			l.SetFaults(mem.Faults{Delay: 100 * time.Microsecond, Bandwidth: 1 << 30})
		}
		return la, lb, addrA4, addrB4
	})
}

func TestNewLinkErrors(t *testing.T) {
	f := mem.NewFabric()
	a, err := f.NewLink(addrA4, addrA6)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    mem.Config
		want error
	}{
		{"taken IPv4", mem.Config{Addrs: []netip.Addr{addrB4, addrA4}}, mem.ErrAddrInUse},
		{"taken IPv6", mem.Config{Addrs: []netip.Addr{addrA6}}, mem.ErrAddrInUse},
		{"taken as mapped", mem.Config{Addrs: []netip.Addr{netip.AddrFrom16(addrA4.As16())}}, mem.ErrAddrInUse},
		{"twice in one call", mem.Config{Addrs: []netip.Addr{addrB4, addrB4}}, mem.ErrAddrInUse},
		{"invalid", mem.Config{Addrs: []netip.Addr{{}}}, mem.ErrAddr},
		{"MTU too big", mem.Config{Addrs: []netip.Addr{addrB4}, MTU: link.MaxPacket + 1}, mem.ErrMTU},
		{"MTU negative", mem.Config{Addrs: []netip.Addr{addrB4}, MTU: -1}, mem.ErrMTU},
		{"queue negative", mem.Config{Addrs: []netip.Addr{addrB4}, QueueLen: -1}, mem.ErrQueueLen},
	} {
		if _, err := f.NewLinkConfig(tc.c); !errors.Is(err, tc.want) {
			t.Errorf("%s: NewLinkConfig = %v, want %v", tc.name, err, tc.want)
		}
	}
	// A failed attach leaves no address behind.
	b, err := f.NewLink(addrB4)
	if err != nil {
		t.Fatalf("address of a failed attach still taken: %v", err)
	}
	defer b.Close()
	if got := a.Addrs(); len(got) != 2 || got[0] != addrA4 || got[1] != addrA6 {
		t.Errorf("Addrs() = %v", got)
	}
	if a.MTU() != link.MaxPacket || a.Flags() != 0 {
		t.Errorf("MTU() = %d, Flags() = %v", a.MTU(), a.Flags())
	}
	// Close detaches the addresses.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); !errors.Is(err, link.ErrClosed) {
		t.Errorf("second Close = %v, want %v", err, link.ErrClosed)
	}
	c, err := f.NewLink(addrA4, addrA6)
	if err != nil {
		t.Fatalf("addresses of a closed link still taken: %v", err)
	}
	c.Close()
}

func TestNoRouteAndTooBig(t *testing.T) {
	f := mem.NewFabric()
	a, err := f.NewLinkConfig(mem.Config{Addrs: []netip.Addr{addrA4}, MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := f.NewLink(addrB4)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	fits := roce(t, addrA4, addrB4, 1, 1500-44, 0) // 44 bytes of IPv4, UDP, BTH and ICRC
	bufs := [][]byte{
		roce(t, addrA4, netip.MustParseAddr("10.0.0.9"), 0, 10, 0), // no route
		make([]byte, link.Headroom+40),                             // version 0: not IP
		make([]byte, link.Headroom-1),                              // no room for headroom
		append(make([]byte, link.Headroom), 0x45, 0),               // truncated IPv4 header
		roce(t, addrA4, addrB4, 2, 1500, 0),                        // too big
		fits,
	}
	if err := a.Send(bufs); err != nil {
		t.Fatalf("Send of bad packets: %v", err)
	}
	got := newReceiver(b).take(t, 1)
	if len(got[0]) != 1500 {
		t.Errorf("received %d bytes, want 1500", len(got[0]))
	}
	want := mem.Stats{Sent: 6, Delivered: 1, NoRoute: 4, TooBig: 1}
	if s := a.Stats(); s != want {
		t.Errorf("Stats() = %+v, want %+v", s, want)
	}

	// A link that closes takes its route with it.
	b.Close()
	if err := a.Send(bufs[5:]); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.NoRoute != 5 {
		t.Errorf("NoRoute after the peer closed = %d, want 5", s.NoRoute)
	}
}

func TestOverflow(t *testing.T) {
	f := mem.NewFabric()
	a, err := f.NewLink(addrA4)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := f.NewLinkConfig(mem.Config{Addrs: []netip.Addr{addrB4}, QueueLen: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var bufs [][]byte
	for i := range 25 {
		bufs = append(bufs, roce(t, addrA4, addrB4, uint32(i), 16, 0))
	}
	if err := a.Send(bufs); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Delivered != 10 || s.Overflow != 15 {
		t.Errorf("Delivered %d, Overflow %d; want 10, 15", s.Delivered, s.Overflow)
	}
	got := psns(t, newReceiver(b).take(t, 10))
	for i, psn := range got {
		if psn != uint32(i) {
			t.Fatalf("received PSNs %v, want the first ten", got)
		}
	}
	if s := b.Stats(); s.Received != 10 {
		t.Errorf("Received = %d, want 10", s.Received)
	}
}

func TestLoopback(t *testing.T) {
	f := mem.NewFabric()
	a, err := f.NewLink(addrA4, addrB4)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Send([][]byte{roce(t, addrA4, addrB4, 9, 8, 0)}); err != nil {
		t.Fatal(err)
	}
	if got := psns(t, newReceiver(a).take(t, 1)); got[0] != 9 {
		t.Errorf("PSN %d, want 9", got[0])
	}
}

// TestMulticast: a packet sent to a group reaches each member, the sender
// too when it is one, once however many times it joined; one to a group
// without members is unroutable; a link leaves at its last LeaveGroup,
// and when it closes.
func TestMulticast(t *testing.T) {
	f := mem.NewFabric()
	var ls [3]*mem.Link
	for i, addr := range []netip.Addr{addrA4, addrB4, netip.MustParseAddr("10.0.0.3")} {
		l, err := f.NewLink(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls[i] = l
	}
	a, b, c := ls[0], ls[1], ls[2]
	group := netip.MustParseAddr("239.0.0.1")
	if err := a.JoinGroup(addrB4); err == nil {
		t.Error("joined a unicast address")
	}
	if err := a.LeaveGroup(group); err == nil {
		t.Error("left a group not joined")
	}
	for _, l := range []*mem.Link{a, b, b} {
		if err := l.JoinGroup(group); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Send([][]byte{roce(t, addrA4, group, 1, 8, 0)}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*mem.Link{a, b} {
		if got := psns(t, newReceiver(l).take(t, 1)); got[0] != 1 {
			t.Errorf("PSN %d, want 1", got[0])
		}
	}
	if err := b.LeaveGroup(group); err != nil {
		t.Fatal(err)
	}
	if err := a.LeaveGroup(group); err != nil {
		t.Fatal(err)
	}
	if err := a.Send([][]byte{roce(t, addrA4, group, 2, 8, 0), roce(t, addrA4, netip.MustParseAddr("239.0.0.2"), 3, 8, 0)}); err != nil {
		t.Fatal(err)
	}
	if got := psns(t, newReceiver(b).take(t, 1)); got[0] != 2 {
		t.Errorf("b, joined twice and left once: PSN %d, want 2", got[0])
	}
	if s := a.Stats(); s.Delivered != 3 || s.NoRoute != 1 {
		t.Errorf("Delivered %d, NoRoute %d; want 3 (two copies, then one) and 1", s.Delivered, s.NoRoute)
	}
	b.Close()
	if err := a.Send([][]byte{roce(t, addrA4, group, 4, 8, 0)}); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.NoRoute != 2 || c.Stats().Received != 0 {
		t.Errorf("after the last member closed: NoRoute %d, want 2; the link that never joined received %d", s.NoRoute, c.Stats().Received)
	}
}

// TestNoGoroutineLeak closes links while packets are delayed, paced and
// held for reordering, and checks that no goroutine outlives them.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	f := mem.NewFabric()
	var links []*mem.Link
	for i := range 4 {
		l, err := f.NewLink(netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}))
		if err != nil {
			t.Fatal(err)
		}
		links = append(links, l)
	}
	links[0].SetFaults(mem.Faults{Delay: time.Hour})
	links[1].SetFaults(mem.Faults{Bandwidth: 1000})
	links[2].SetFaults(mem.Faults{Reorder: 1000})
	links[3].SetFaults(mem.Faults{Delay: time.Millisecond, Reorder: 4, Bandwidth: 1e6})
	for i, l := range links {
		dst := links[(i+1)%len(links)].Addrs()[0]
		var bufs [][]byte
		for j := range 64 {
			bufs = append(bufs, roce(t, l.Addrs()[0], dst, uint32(j), 1000, 0))
		}
		if err := l.Send(bufs); err != nil {
			t.Fatal(err)
		}
	}
	if runtime.NumGoroutine() <= before {
		t.Errorf("no scheduler goroutines started")
	}
	for _, l := range links {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	waitGoroutines(t, before)
}

// waitGoroutines waits briefly for the goroutine count to fall to n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	var got int
	for range 100 {
		if got = runtime.NumGoroutine(); got <= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	buf := make([]byte, 1<<16)
	t.Fatalf("%d goroutines after Close, %d before\n%s", got, n, buf[:runtime.Stack(buf, true)])
}

// TestConcurrent sends from several goroutines while another changes the
// faults and one receives, for the race detector.
func TestConcurrent(t *testing.T) {
	before := runtime.NumGoroutine()
	a, b := pair(t, addrA4, addrB4)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			bufs := [][]byte{roce(t, addrA4, addrB4, uint32(g), 64, 2), roce(t, addrA4, addrB4, uint32(g), 64, 2)}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := a.Send(bufs); err != nil {
					return
				}
			}
		})
	}
	wg.Go(func() {
		faults := []mem.Faults{
			{Drop: 0.1, Seed: 1},
			{Reorder: 8, Duplicate: 0.1, Filter: func([]byte) bool { return true }},
			{Delay: 50 * time.Microsecond, Bandwidth: 1e8, ECN: 0.5, Corrupt: 0.1},
			{DropEvery: 3, DropFunc: func(_ []byte, seq uint64) bool { return seq%5 == 0 }},
			{},
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			a.SetFaults(faults[i%len(faults)])
			_ = a.Faults()
			_ = a.Stats()
			time.Sleep(100 * time.Microsecond)
		}
	})
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		r := newReceiver(b)
		for {
			if _, err := b.Receive(r.bufs, r.sizes); err != nil {
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	a.Close()
	b.Close()
	<-recvDone
	s := a.Stats()
	if s.Sent == 0 || s.Delivered == 0 || b.Stats().Received == 0 {
		t.Errorf("no traffic: %+v", s)
	}
	waitGoroutines(t, before)
}

// TestLineRate: a link's rate is what its Bandwidth fault caps it at, in
// bits per second, and unknown (0) when nothing caps it.
func TestLineRate(t *testing.T) {
	la, _ := pair(t, addrA4, addrB4)
	var _ link.LineRater = la
	if r := la.LineRate(); r != 0 {
		t.Fatalf("an uncapped link reports %d b/s, want 0 (unknown)", r)
	}
	la.SetFaults(mem.Faults{Bandwidth: 125_000_000})
	if r := la.LineRate(); r != 1_000_000_000 {
		t.Fatalf("a link capped at 125 MB/s reports %d b/s, want 1e9", r)
	}
}
