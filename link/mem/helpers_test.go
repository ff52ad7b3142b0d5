package mem_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

var (
	addrA4 = netip.MustParseAddr("10.0.0.1")
	addrB4 = netip.MustParseAddr("10.0.0.2")
	addrA6 = netip.MustParseAddr("fd00::1")
	addrB6 = netip.MustParseAddr("fd00::2")
)

// pair attaches two links to a new fabric and closes them when the test
// ends.
func pair(t testing.TB, aAddr, bAddr netip.Addr) (a, b *mem.Link) {
	t.Helper()
	f := mem.NewFabric()
	a, err := f.NewLink(aAddr)
	if err != nil {
		t.Fatal(err)
	}
	b, err = f.NewLink(bAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// roce builds a RoCE v2 RC SEND ONLY packet with link.Headroom bytes of
// headroom. tc is the IPv4 TOS or IPv6 traffic class.
func roce(t testing.TB, src, dst netip.Addr, psn uint32, payload int, tc uint8) []byte {
	t.Helper()
	p := make([]byte, payload)
	for i := range p {
		p[i] = byte(int(psn) + i)
	}
	f := wire.Frame{
		IP:      wire.IPFields{Src: src, Dst: dst, TrafficClass: tc, HopLimit: 64, DontFrag: true, ID: uint16(psn)},
		SrcPort: 0xc000 | uint16(psn&0xfff), DstPort: wire.UDPPort,
		Headers: wire.Headers{BTH: bth.Fields{
			Opcode: bth.RCSendOnly, PKey: bth.DefaultPKey, DestQP: 0x12, PSN: bth.PSN(psn & bth.PSNMask),
		}},
		Payload: p,
	}
	buf, err := f.Append(make([]byte, link.Headroom, link.Headroom+f.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

// psnOf returns the PSN of a packet (without headroom) that parses.
func psnOf(t testing.TB, pkt []byte) uint32 {
	t.Helper()
	var p wire.Packet
	if err := wire.ParseIP(&p, pkt); err != nil {
		t.Fatalf("received packet does not parse: %v", err)
	}
	return uint32(p.BTH.PSN())
}

// setPSN rewrites the PSN of a packet built by roce (with headroom) and
// its ICRC, so one buffer can carry a long numbered stream.
func setPSN(buf []byte, psn uint32) {
	pkt := buf[link.Headroom:]
	ipLen := wire.IPv4Len
	if pkt[0]>>4 == 6 {
		ipLen = wire.IPv6Len
	}
	b := pkt[ipLen+wire.UDPLen:]
	b[9], b[10], b[11] = byte(psn>>16), byte(psn>>8), byte(psn)
	end := len(pkt) - wire.ICRCLen
	icrc := wire.ComputeICRC(pkt[:ipLen], pkt[ipLen:ipLen+wire.UDPLen], pkt[ipLen+wire.UDPLen:end])
	binary.LittleEndian.PutUint32(pkt[end:], icrc)
}

// receiver drains a link with reusable buffers.
type receiver struct {
	l     *mem.Link
	bufs  [][]byte
	sizes []int
}

func newReceiver(l *mem.Link) *receiver {
	r := &receiver{l: l, bufs: make([][]byte, link.BatchSize), sizes: make([]int, link.BatchSize)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, link.BufferSize)
	}
	return r
}

// take receives exactly n packets, bounded by a timeout, and returns
// copies of them without headroom.
func (r *receiver) take(t testing.TB, n int) [][]byte {
	t.Helper()
	var got [][]byte
	done := make(chan error, 1)
	go func() {
		for len(got) < n {
			k, err := r.l.Receive(r.bufs[:min(n-len(got), len(r.bufs))], r.sizes)
			if err != nil {
				done <- err
				return
			}
			for i := range k {
				got = append(got, bytes.Clone(r.bufs[i][link.Headroom:link.Headroom+r.sizes[i]]))
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
	case <-time.After(10 * time.Second):
		r.l.Close()
		<-done
		t.Fatalf("received %d of %d packets", len(got), n)
	}
	return got
}

// stream sends n numbered packets from a to b in batches of
// link.BatchSize, and after each batch receives what the fabric delivered,
// which for faults that do not delay is everything not dropped. Packet i
// has PSN i, payload+i%7 bytes of payload and traffic class tc(i) (0 if tc
// is nil). It returns the packets in arrival order, without headroom, and
// the packets sent, with headroom.
func stream(t testing.TB, a, b *mem.Link, n, payload int, tc func(i int) uint8) (got, sent [][]byte) {
	t.Helper()
	streamFunc(t, a, b, n, payload, tc, func(pkt []byte) { got = append(got, bytes.Clone(pkt)) }, &sent)
	return got, sent
}

// streamPSNs is stream for long runs, with every packet ECN-capable: it
// returns only the PSNs received.
func streamPSNs(t testing.TB, a, b *mem.Link, n int) []uint32 {
	t.Helper()
	out := make([]uint32, 0, n)
	ect0 := func(int) uint8 { return 2 }
	streamFunc(t, a, b, n, 0, ect0, func(pkt []byte) { out = append(out, psnOf(t, pkt)) }, nil)
	return out
}

func streamFunc(t testing.TB, a, b *mem.Link, n, payload int, tc func(i int) uint8, recv func([]byte), sent *[][]byte) {
	t.Helper()
	src, dst := a.Addrs()[0], b.Addrs()[0]
	type key struct {
		payload int
		tos     uint8
	}
	templates := make(map[key][]byte)
	r := newReceiver(b)
	batch := make([][]byte, link.BatchSize)
	delivered := a.Stats().Delivered
	for i := 0; i < n; i += link.BatchSize {
		batch = batch[:min(n-i, link.BatchSize)]
		for j := range batch {
			k := key{payload + (i+j)%7, 0}
			if tc != nil {
				k.tos = tc(i + j)
			}
			tmpl, ok := templates[k]
			if !ok {
				tmpl = roce(t, src, dst, 0, k.payload, k.tos)
				templates[k] = tmpl
			}
			batch[j] = append(batch[j][:0], tmpl...)
			setPSN(batch[j], uint32(i+j))
		}
		if err := a.Send(batch); err != nil {
			t.Fatal(err)
		}
		if sent != nil {
			for _, p := range batch {
				*sent = append(*sent, bytes.Clone(p))
			}
		}
		now := a.Stats().Delivered
		for want := int(now - delivered); want > 0; {
			k, err := b.Receive(r.bufs[:min(want, len(r.bufs))], r.sizes)
			if err != nil {
				t.Fatalf("Receive: %v", err)
			}
			for j := range k {
				recv(r.bufs[j][link.Headroom : link.Headroom+r.sizes[j]])
			}
			want -= k
		}
		delivered = now
	}
}

// psns returns the PSNs of packets.
func psns(t testing.TB, pkts [][]byte) []uint32 {
	t.Helper()
	out := make([]uint32, len(pkts))
	for i, p := range pkts {
		out[i] = psnOf(t, p)
	}
	return out
}
