package wire_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/gorxe/gorxe/wire"
)

// The fuzz targets are seeded with real rxe packets and gorxe-built ones.
// Run each for a minute with, for example:
//
//	go test ./wire -run '^$' -fuzz '^FuzzParseIP$' -fuzztime 60s
//	go test ./wire -run '^$' -fuzz '^FuzzParseUDPPayload$' -fuzztime 60s
//	go test ./wire -run '^$' -fuzz '^FuzzParseFrame$' -fuzztime 60s
//
// (make fuzz runs all of them.)

func addSeeds(f *testing.F, strip int) {
	for _, pkt := range samplePackets(f) {
		if strip == 0 {
			f.Add(pkt)
		}
	}
	for i, frame := range rocePackets(f, "../testdata/rxe/perftest-mtu4096-mixed.pcap") {
		if i%5 != 0 {
			continue
		}
		switch strip {
		case -1:
			f.Add(frame)
		case 0:
			f.Add(frame[wire.EthernetLen:])
		default:
			f.Add(frame[strip:])
		}
	}
}

// FuzzParseIP: parsing never panics, the two ICRC checks agree, and a packet
// that parses builds back into the same bytes, which parse into the same
// fields.
func FuzzParseIP(f *testing.F) {
	addSeeds(f, 0)
	f.Fuzz(func(t *testing.T, b []byte) {
		var p wire.Packet
		if err := wire.ParseIP(&p, b); err != nil {
			return
		}
		before := append([]byte(nil), b...)
		if copied, inPlace := p.CheckICRC(), p.CheckICRCInPlace(); copied != inPlace {
			t.Fatalf("CheckICRC = %v, CheckICRCInPlace = %v", copied, inPlace)
		}
		if !bytes.Equal(b, before) {
			t.Fatalf("CheckICRCInPlace changed the packet\nbefore %x\nafter  %x", before, b)
		}
		fr, err := p.Frame()
		if err != nil {
			t.Fatalf("Frame of a parsed packet: %v", err)
		}
		built, err := fr.Append(nil)
		if err != nil {
			t.Fatalf("Append of a parsed packet: %v", err)
		}
		if len(built) != fr.Len() {
			t.Fatalf("Append wrote %d bytes, Len says %d", len(built), fr.Len())
		}
		var q wire.Packet
		if err := wire.ParseIP(&q, built); err != nil {
			t.Fatalf("rebuilt packet does not parse: %v\n%x", err, built)
		}
		if err := q.CheckICRCInPlace(); err != nil {
			t.Fatalf("rebuilt packet: %v", err)
		}
		fq, _ := q.Frame()
		if !reflect.DeepEqual(normalize(fr), normalize(fq)) {
			t.Fatalf("round trip changed fields\nbefore %+v\nafter  %+v", fr, fq)
		}
		// A packet whose reserved bits, pad bytes and checksums are those a
		// builder writes rebuilds byte for byte.
		built2, _ := fq.Append(nil)
		if !bytes.Equal(built, built2) {
			t.Fatalf("second rebuild differs\n%x\n%x", built, built2)
		}
	})
}

// normalize prepares a Frame for comparison: a nil and an empty payload
// are the same.
func normalize(f wire.Frame) wire.Frame {
	if len(f.Payload) == 0 {
		f.Payload = nil
	}
	return f
}

// FuzzParseUDPPayload: parsing a UDP payload never panics, and its views
// stay inside the input.
func FuzzParseUDPPayload(f *testing.F) {
	addSeeds(f, wire.EthernetLen+wire.IPv4Len+wire.UDPLen)
	f.Fuzz(func(t *testing.T, b []byte) {
		var p wire.Packet
		if err := wire.ParseUDPPayload(&p, b); err != nil {
			return
		}
		if got := len(p.Transport()) + wire.ICRCLen; got != len(b) {
			t.Fatalf("transport+ICRC is %d bytes of %d", got, len(b))
		}
		if len(p.Pad) != p.BTH.PadCnt() || p.Info.HdrLen+len(p.Payload)+len(p.Pad) != len(p.Transport()) {
			t.Fatalf("header %d + payload %d + pad %d (PadCnt %d) != transport %d",
				p.Info.HdrLen, len(p.Payload), len(p.Pad), p.BTH.PadCnt(), len(p.Transport()))
		}
		h := p.Headers()
		if h.TransportLen(len(p.Payload)) != len(p.Transport()) {
			t.Fatalf("TransportLen %d, parsed %d", h.TransportLen(len(p.Payload)), len(p.Transport()))
		}
		rebuilt, err := wire.AppendTransport(nil, &h, p.Payload)
		if err != nil {
			t.Fatalf("parsed headers do not build: %v", err)
		}
		var q wire.Packet
		if err := wire.ParseUDPPayload(&q, append(rebuilt, 0, 0, 0, 0)); err != nil {
			t.Fatalf("rebuilt transport does not parse: %v", err)
		}
		if !reflect.DeepEqual(q.Headers(), h) || !bytes.Equal(q.Payload, p.Payload) {
			t.Fatalf("round trip changed the headers or payload")
		}
	})
}

// FuzzParseFrame: Ethernet framing never panics either.
func FuzzParseFrame(f *testing.F) {
	addSeeds(f, -1)
	f.Fuzz(func(t *testing.T, b []byte) {
		var p wire.Packet
		if err := wire.ParseFrame(&p, b); err != nil {
			return
		}
		if len(p.Eth)+len(p.IP)+len(p.UDP)+len(p.Transport())+wire.ICRCLen > len(b) {
			t.Fatalf("views exceed the frame")
		}
	})
}
