// Command xskraw measures the path gorxe's xdp link rides on, with nothing
// of gorxe in it: whole Ethernet/IPv4/UDP frames moved through the same
// AF_XDP rings (internal/xsk) and the same XDP program (internal/xdpprog,
// steering UDP to the RoCE port into the socket of the frame's RX queue)
// that the link uses, with no RoCE work. test/bench/bench.sh runs it
// beside gorxe over xdp and prints gorxe's figures as ratios to it, as it
// does with udpraw for the udp link.
//
//	xskraw sink  -dev vb -d 5s                                 receive, then print JSON
//	xskraw blast -dev va -to 10.77.0.2 -mac MAC -size 64 -d 6s send as fast as possible
//	xskraw pong  -dev vb                                       echo frames back
//	xskraw ping  -dev va -to 10.77.0.2 -mac MAC -n 5000        round trips, then print JSON
//	xskraw ping|pong ... -busy                                 spin on the RX ring instead of sleeping in poll(2)
//
// -size is the length of the Ethernet frame, headers included and the
// FCS not: 64 is the smallest Ethernet frame, 4096 a whole UMEM frame
// (sent in one descriptor, received in two: 3840 bytes fit a received
// frame), 4170 the size of a RoCE v2 packet with a 4096-byte path MTU
// payload (two descriptors each way). -to and -mac are the peer's IPv4
// address and MAC; the source MAC and address are -dev's own. Frames go
// to UDP port -port (4791, RoCE v2's, which the XDP program redirects).
//
// Each side binds one AF_XDP socket to queue -queue (0) of -dev, in copy
// or zero-copy mode as the driver allows, with XDP_USE_SG (-sg) as gorxe's
// link needs for 4170-byte frames. A sender on a veth sends on its queue,
// which the peer receives on the same queue; other drivers spread frames
// over their queues by hash, so give the receiving interface one RX queue
// (ethtool -L) or none but -queue will see them. The receiving sides
// (sink, pong, ping) load and attach the XDP program (driver mode if the
// driver has it, -xdp-mode) for as long as they run; the kernel removes
// it when they exit.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/internal/xdpprog"
	"github.com/gorxe/gorxe/internal/xsk"
	"github.com/gorxe/gorxe/wire"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: xskraw sink|blast|pong|ping [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var o options
	fs.StringVar(&o.dev, "dev", "", "the network interface")
	fs.IntVar(&o.queue, "queue", 0, "the interface's queue to bind")
	fs.StringVar(&o.to, "to", "", "blast, ping: the peer's IPv4 address")
	fs.StringVar(&o.mac, "mac", "", "blast, ping: the peer's MAC address")
	port := fs.Uint("port", xdpprog.DefaultPort, "UDP destination port, which the XDP program redirects")
	fs.IntVar(&o.size, "size", 64, "blast, ping: Ethernet frame length in bytes, headers included, FCS not")
	fs.DurationVar(&o.dur, "d", 5*time.Second, "how long to run (sink: this long from the first frame)")
	fs.DurationVar(&o.wait, "wait", 10*time.Second, "sink: fail if no frame arrives for this long at the start")
	fs.IntVar(&o.n, "n", 5000, "ping: round trips measured (after 100 more that warm up)")
	fs.IntVar(&o.batch, "batch", 64, "descriptors per Transmit and Receive")
	fs.BoolVar(&o.busy, "busy", false, "sink, ping, pong: spin on the RX ring instead of sleeping in poll(2) when it is empty")
	fs.BoolVar(&o.sg, "sg", true, "bind with XDP_USE_SG (multi-buffer), as gorxe's xdp link")
	mode := fs.String("xdp-mode", "auto", "where the XDP program runs: auto (driver if the driver has XDP), driver or generic")
	fs.Parse(os.Args[2:])
	o.port = uint16(*port)
	switch *mode {
	case "auto":
		o.mode = xdpprog.ModeAuto
	case "driver":
		o.mode = xdpprog.ModeDriver
	case "generic":
		o.mode = xdpprog.ModeGeneric
	default:
		fmt.Fprintf(os.Stderr, "xskraw: -xdp-mode %s: want auto, driver or generic\n", *mode)
		os.Exit(2)
	}
	if *port == 0 || *port > 65535 || o.dev == "" || o.batch < xsk.MaxFrags {
		fmt.Fprintf(os.Stderr, "xskraw: need -dev, a UDP -port and a -batch of at least %d\n", xsk.MaxFrags)
		os.Exit(2)
	}
	var res map[string]any
	var err error
	switch os.Args[1] {
	case "sink":
		res, err = sink(&o)
	case "blast":
		res, err = blast(&o)
	case "pong":
		err = pong(&o)
	case "ping":
		res, err = ping(&o)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "xskraw:", err)
		os.Exit(1)
	}
	if res != nil {
		json.NewEncoder(os.Stdout).Encode(res)
	}
}

type options struct {
	dev       string
	queue     int
	to, mac   string
	port      uint16
	size      int
	dur, wait time.Duration
	n, batch  int
	busy, sg  bool
	mode      xdpprog.Mode
	sport     uint16
	peerMAC   net.HardwareAddr
	peerIP    netip.Addr
}

// side is one end: an AF_XDP socket on its own UMEM, whose frames are
// split between the fill ring's stack and the sender's, and the XDP
// program if it receives.
type side struct {
	mac     net.HardwareAddr
	ip      netip.Addr
	mtu     int
	umem    *xsk.UMEM
	sock    *xsk.Socket
	prog    *xdpprog.Program
	att     xdpprog.Attachment
	rx, tx  *xsk.FrameStack
	descs   []xsk.Desc // to transmit
	recv    []xsk.Desc // received
	pending int        // descriptors on the TX ring not yet completed
}

// open opens o.dev's side. A side that receives gets half the UMEM's
// frames in its fill ring and the XDP program attached; one that only
// sends keeps every frame for sending.
func open(o *options, receive bool) (*side, error) {
	ifi, err := net.InterfaceByName(o.dev)
	if err != nil {
		return nil, err
	}
	s := &side{mac: ifi.HardwareAddr, mtu: ifi.MTU, descs: make([]xsk.Desc, 0, o.batch), recv: make([]xsk.Desc, o.batch)}
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			s.ip = p.Addr()
			break
		}
	}
	if !s.ip.IsValid() || len(s.mac) != 6 {
		return nil, fmt.Errorf("%s: want an Ethernet interface with an IPv4 address", o.dev)
	}
	if s.umem, err = xsk.NewUMEM(xsk.UMEMConfig{}); err != nil {
		return nil, err
	}
	fail := func(err error) (*side, error) {
		s.close()
		return nil, err
	}
	// The kernel frees a queue a moment after its last socket closes:
	// right after another run, give it that moment.
	for give := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s.sock, err = xsk.Open(s.umem, ifi.Index, o.queue, xsk.Config{MultiBuffer: o.sg})
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(give) {
			break
		}
	}
	if err != nil {
		return fail(fmt.Errorf("AF_XDP socket on %s queue %d: %w", o.dev, o.queue, err))
	}
	all := s.umem.FreeFrames()
	if !receive {
		s.tx = all
		return s, nil
	}
	s.rx = all.Split(all.Len() / 2)
	s.tx = all
	if _, err := s.sock.FillFrom(s.rx, s.rx.Len()); err != nil {
		return fail(err)
	}
	if s.prog, err = xdpprog.Load(xdpprog.Config{Port: o.port, Queues: o.queue + 1, Frags: true}); err != nil {
		return fail(err)
	}
	if err := s.prog.Register(o.queue, s.sock.FD()); err != nil {
		return fail(err)
	}
	// The same for the XDP hook, which the last run's program may still
	// hold for a moment.
	for give := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s.att, err = s.prog.Attach(ifi.Index, o.mode)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(give) {
			break
		}
	}
	if err != nil {
		return fail(err)
	}
	return s, nil
}

func (s *side) close() {
	if s.prog != nil {
		s.prog.Close()
	}
	if s.umem != nil {
		s.umem.Close() // closes the socket too
	}
}

// info adds what describes the side's sockets and program to res.
func (s *side) info(res map[string]any) {
	res["zero_copy"] = s.sock.ZeroCopy()
	if s.prog != nil {
		res["xdp_mode"] = s.att.Mode.String()
		if ps, err := s.prog.Stats(); err == nil {
			res["xdp_redirected"], res["xdp_passed_no_socket"] = ps.Redirected, ps.PassedNoSocket
		}
	}
	if st, err := s.sock.Stats(); err == nil {
		for _, c := range st.Named() {
			if c.Value != 0 {
				res[c.Name] = c.Value
			}
		}
	}
}

// queue copies frame into free TX frames, in as many descriptors as it
// takes, and queues them for flush. It reports false, queueing nothing,
// if the batch or the free frames have no room for the whole frame.
func (s *side) queue(frame []byte) bool {
	fs := int(s.umem.FrameSize())
	need := (len(frame) + fs - 1) / fs
	if len(s.descs)+need > cap(s.descs) || s.tx.Len() < need {
		return false
	}
	for off := 0; off < len(frame); off += fs {
		addr, _ := s.tx.Pop()
		n := copy(s.umem.Frame(addr), frame[off:])
		d := xsk.Desc{Addr: addr, Len: uint32(n)}
		if off+n < len(frame) {
			d.Options = xsk.OptionMore
		}
		s.descs = append(s.descs, d)
	}
	return true
}

// flush puts what queue queued on the TX ring, as much as fits, and
// returns the number of whole packets it put.
func (s *side) flush() (int, error) {
	n, err := s.sock.Transmit(s.descs)
	if err != nil {
		return 0, err
	}
	pkts := 0
	for _, d := range s.descs[:n] {
		if !d.More() {
			pkts++
		}
	}
	s.pending += n
	s.descs = append(s.descs[:0], s.descs[n:]...)
	return pkts, nil
}

// complete takes sent frames back.
func (s *side) complete() error {
	n, err := s.sock.CompleteTo(s.tx)
	s.pending -= n
	return err
}

// receive takes up to len(s.recv) descriptors off the RX ring, calls pkt
// with the bytes of each whole packet that arrived (its first descriptor's,
// and the packet's length), and gives the frames back to the fill ring. If
// nothing has arrived it waits: spinning with busy, else in poll(2) for at
// most wait.
func (s *side) receive(busy bool, wait time.Duration, pkt func(d []xsk.Desc, length int)) (int, error) {
	n, err := s.sock.Receive(s.recv)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		if !busy {
			_, err = s.sock.Wait(wait)
		}
		return 0, err
	}
	first, length := 0, 0
	for i, d := range s.recv[:n] {
		length += int(d.Len)
		if d.More() {
			continue
		}
		pkt(s.recv[first:i+1], length)
		first, length = i+1, 0
	}
	for _, d := range s.recv[:n] {
		s.rx.Push(d.Addr)
	}
	_, err = s.sock.FillFrom(s.rx, s.rx.Len())
	return n, err
}

// Offsets in an untagged Ethernet frame carrying IPv4 (IHL 5) and UDP.
const (
	ethDst, ethSrc, ethType = 0, 6, 12
	ipStart                 = 14
	ipSrc, ipDst            = ipStart + 12, ipStart + 16
	udpStart                = ipStart + 20
	payloadStart            = udpStart + 8
	seqLen                  = 8 // a ping's sequence number, at payloadStart
)

// frame returns an Ethernet/IPv4/UDP frame of size bytes from s to the
// peer in o, with a valid IPv4 header checksum, DF set and no UDP
// checksum (allowed over IPv4).
func (s *side) frame(o *options, size int) ([]byte, error) {
	if size < payloadStart+seqLen || size-ipStart > s.mtu {
		return nil, fmt.Errorf("-size %d: want %d to %d bytes (the interface's MTU %d plus the Ethernet header)",
			size, payloadStart+seqLen, s.mtu+ipStart, s.mtu)
	}
	b := make([]byte, size)
	copy(b[ethDst:], o.peerMAC)
	copy(b[ethSrc:], s.mac)
	binary.BigEndian.PutUint16(b[ethType:], 0x0800)
	ip := b[ipStart:udpStart]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(size-ipStart))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8], ip[9] = 64, 17                      // TTL, UDP
	src, dst := s.ip.As4(), o.peerIP.As4()
	copy(b[ipSrc:], src[:])
	copy(b[ipDst:], dst[:])
	binary.BigEndian.PutUint16(ip[10:], wire.IPv4Checksum(ip))
	udp := b[udpStart:payloadStart]
	binary.BigEndian.PutUint16(udp[0:], o.sport)
	binary.BigEndian.PutUint16(udp[2:], o.port)
	binary.BigEndian.PutUint16(udp[4:], uint16(size-udpStart))
	return b, nil
}

// isOurs reports whether the start of a received frame is an IPv4 UDP
// datagram to port.
func isOurs(b []byte, port uint16) bool {
	return len(b) >= payloadStart && binary.BigEndian.Uint16(b[ethType:]) == 0x0800 && b[ipStart] == 0x45 &&
		b[ipStart+9] == 17 && binary.BigEndian.Uint16(b[udpStart+2:]) == port
}

// peer parses -to and -mac.
func (o *options) peer() error {
	var err error
	if o.peerIP, err = netip.ParseAddr(o.to); err != nil || !o.peerIP.Is4() {
		return fmt.Errorf("-to %q: want the peer's IPv4 address", o.to)
	}
	if o.peerMAC, err = net.ParseMAC(o.mac); err != nil || len(o.peerMAC) != 6 {
		return fmt.Errorf("-mac %q: want the peer's Ethernet address", o.mac)
	}
	o.sport = 49152
	return nil
}

// sink counts the frames that arrive for o.dur from the first one.
func sink(o *options) (map[string]any, error) {
	s, err := open(o, true)
	if err != nil {
		return nil, err
	}
	defer s.close()
	var pkts, bytes, size int64
	count := func(d []xsk.Desc, length int) {
		if size == 0 && isOurs(s.umem.Bytes(d[0]), o.port) {
			size = int64(length)
		}
		pkts++
		bytes += int64(length)
	}
	// Wait for the first frame: the sender starts after us.
	give := time.Now().Add(o.wait)
	for pkts == 0 {
		if _, err := s.receive(o.busy, 10*time.Millisecond, count); err != nil {
			return nil, err
		}
		if pkts == 0 && time.Now().After(give) {
			res := map[string]any{}
			s.info(res)
			return nil, fmt.Errorf("no frame arrived in %v (%v)", o.wait, res)
		}
	}
	start := time.Now()
	pkts, bytes = 0, 0 // from the first batch on: time starts with it
	end := start.Add(o.dur)
	for {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		if _, err := s.receive(o.busy, min(end.Sub(now), 10*time.Millisecond), count); err != nil {
			return nil, err
		}
	}
	el := o.dur.Seconds()
	res := map[string]any{
		"mode": "sink", "frame_bytes": size, "packets": pkts, "bytes": bytes, "seconds": el,
		"kpps": float64(pkts) / el / 1e3, "Mpps": float64(pkts) / el / 1e6,
		// Frame bytes, headers included: at one size, MBps is
		// proportional to packets per second, as gorxe's write_bw bytes
		// are at one path MTU. payload_MBps is the UDP payload's, as
		// udpraw's MBps.
		"MBps":         float64(bytes) / el / (1 << 20),
		"payload_MBps": float64(bytes-pkts*payloadStart) / el / (1 << 20),
	}
	s.info(res)
	return res, nil
}

// blast sends o.size-byte frames to the peer as fast as the rings take
// them, for o.dur.
func blast(o *options) (map[string]any, error) {
	if err := o.peer(); err != nil {
		return nil, err
	}
	s, err := open(o, false)
	if err != nil {
		return nil, err
	}
	defer s.close()
	f, err := s.frame(o, o.size)
	if err != nil {
		return nil, err
	}
	var sent, seq uint64
	start := time.Now()
	end := start.Add(o.dur)
	for i := 0; ; i++ {
		if i%64 == 0 && time.Now().After(end) {
			break
		}
		if err := s.complete(); err != nil {
			return nil, err
		}
		for {
			// A sequence number in each frame, as a link writes a
			// header per packet.
			binary.BigEndian.PutUint64(f[payloadStart:], seq)
			if !s.queue(f) {
				break
			}
			seq++
		}
		n, err := s.flush()
		if err != nil {
			return nil, err
		}
		sent += uint64(n)
	}
	el := time.Since(start).Seconds()
	res := map[string]any{"mode": "blast", "frame_bytes": o.size, "packets": sent, "seconds": el, "kpps": float64(sent) / el / 1e3}
	s.info(res)
	return res, nil
}

// pong sends every frame to o.port back where it came from, until killed.
func pong(o *options) error {
	s, err := open(o, true)
	if err != nil {
		return err
	}
	defer s.close()
	var buf []byte
	answer := func(d []xsk.Desc, length int) {
		if !isOurs(s.umem.Bytes(d[0]), o.port) {
			return
		}
		// Copy the packet, as a link builds its answer in frames of its
		// own, and turn it around.
		buf = buf[:0]
		for _, x := range d {
			buf = append(buf, s.umem.Bytes(x)...)
		}
		swap(buf[ethDst:ethSrc], buf[ethSrc:ethType])
		swap(buf[ipSrc:ipDst], buf[ipDst:ipDst+4])
		// The UDP ports stay: the destination is the port the XDP
		// program redirects, as every RoCE v2 packet's is both ways.
		if !s.queue(buf) {
			s.complete()
			s.queue(buf) // or drop it, as a full ring would
		}
	}
	for {
		n, err := s.receive(o.busy, 100*time.Millisecond, answer)
		if err != nil {
			return err
		}
		if n > 0 || len(s.descs) > 0 {
			if _, err := s.flush(); err != nil {
				return err
			}
		}
		if s.pending > 0 {
			if err := s.complete(); err != nil {
				return err
			}
		}
	}
}

func swap(a, b []byte) {
	for i := range a {
		a[i], b[i] = b[i], a[i]
	}
}

// ping sends one frame at a time and waits for it to come back, o.n
// times after 100 that warm up, and returns the round trips' median,
// 99th percentile and minimum and the round trips per second.
func ping(o *options) (map[string]any, error) {
	if err := o.peer(); err != nil {
		return nil, err
	}
	s, err := open(o, true)
	if err != nil {
		return nil, err
	}
	defer s.close()
	f, err := s.frame(o, o.size)
	if err != nil {
		return nil, err
	}
	const warm = 100
	var want uint64
	got := false
	match := func(d []xsk.Desc, length int) {
		b := s.umem.Bytes(d[0])
		if length == o.size && isOurs(b, o.port) && len(b) >= payloadStart+seqLen && binary.BigEndian.Uint64(b[payloadStart:]) == want {
			got = true
		}
	}
	send := func() error {
		binary.BigEndian.PutUint64(f[payloadStart:], want)
		for !s.queue(f) {
			if err := s.complete(); err != nil {
				return err
			}
		}
		for len(s.descs) > 0 {
			if _, err := s.flush(); err != nil {
				return err
			}
		}
		return nil
	}
	rtts := make([]float64, 0, o.n)
	var measured time.Time
	// The first round trips also wait for the pong side to be ready:
	// a frame sent before its program is attached is lost, and sent
	// again.
	give := time.Now().Add(o.wait)
	for i := 0; i < warm+o.n; i++ {
		if i == warm {
			measured = time.Now()
		}
		want, got = uint64(i), false
		t0 := time.Now()
		if err := send(); err != nil {
			return nil, err
		}
		resend := t0.Add(100 * time.Millisecond)
		for !got {
			if _, err := s.receive(o.busy, 10*time.Millisecond, match); err != nil {
				return nil, err
			}
			if got {
				break
			}
			if now := time.Now(); now.After(resend) {
				if i >= warm || now.After(give) {
					res := map[string]any{}
					s.info(res)
					return nil, fmt.Errorf("round trip %d: no answer (%v)", i, res)
				}
				if err := send(); err != nil {
					return nil, err
				}
				resend = now.Add(100 * time.Millisecond)
			}
		}
		if i >= warm {
			rtts = append(rtts, float64(time.Since(t0))/1e3)
		}
		if s.pending > 0 {
			if err := s.complete(); err != nil {
				return nil, err
			}
		}
	}
	el := time.Since(measured).Seconds()
	slices.Sort(rtts)
	res := map[string]any{
		"mode": "ping", "frame_bytes": o.size, "n": o.n, "busy": o.busy,
		"rtt_median_us": rtts[len(rtts)/2], "rtt_min_us": rtts[0], "rtt_p99_us": rtts[len(rtts)*99/100],
		"round_trips_per_s": float64(o.n) / el,
	}
	s.info(res)
	return res, nil
}
