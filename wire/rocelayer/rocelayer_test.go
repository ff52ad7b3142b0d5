package rocelayer_test

import (
	"bytes"
	"errors"
	"github.com/gorxe/gorxe/internal/pcaptest"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
	"github.com/gorxe/gorxe/wire/rocelayer"
)

// firstRoCEFrame returns the first Ethernet frame of a capture that carries
// UDP to port 4791.
func firstRoCEFrame(t testing.TB, path string) []byte {
	t.Helper()
	for _, data := range pcaptest.Read(t, path).Frames {
		pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		if udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP); ok && udp.DstPort == wire.UDPPort {
			return data
		}
	}
	t.Fatalf("%s: no RoCE frame", path)
	return nil
}

// The first RoCE packet of perftest-mtu1024.pcap, the first of ib_write_bw's
// 64 KiB WRITEs.
const (
	firstOpcode  = bth.RCRDMAWriteFirst
	firstQPN     = 0x11
	firstPSN     = 15111583
	firstPayload = 1024
	captureFile  = "../../testdata/rxe/perftest-mtu1024.pcap"
)

func checkFirst(t *testing.T, r *rocelayer.RoCEv2) {
	t.Helper()
	h := r.Packet.BTH
	if h.Opcode() != firstOpcode || h.DestQP() != firstQPN || h.PSN() != firstPSN {
		t.Errorf("BTH = %v qp %#x psn %d, want %v qp %#x psn %d", h.Opcode(), h.DestQP(), h.PSN(), firstOpcode, firstQPN, firstPSN)
	}
	if len(r.LayerPayload()) != firstPayload || len(r.Packet.Payload) != firstPayload {
		t.Errorf("payload %d bytes, want %d", len(r.LayerPayload()), firstPayload)
	}
	if len(r.LayerContents()) != bth.Len+reth.Len {
		t.Errorf("contents %d bytes, want BTH+RETH %d", len(r.LayerContents()), bth.Len+reth.Len)
	}
	if r.Packet.RETH == nil || r.Packet.RETH.DMALen() != 65536 {
		t.Errorf("RETH = %x, want DMA length 65536", []byte(r.Packet.RETH))
	}
	if r.NextLayerType() != gopacket.LayerTypePayload {
		t.Errorf("NextLayerType = %v, want Payload", r.NextLayerType())
	}
}

func TestNewPacketDecodesRxeFrame(t *testing.T) {
	frame := firstRoCEFrame(t, captureFile)
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatalf("decode error: %v", el.Error())
	}
	r, ok := pkt.Layer(rocelayer.LayerTypeRoCEv2).(*rocelayer.RoCEv2)
	if !ok {
		t.Fatalf("no RoCEv2 layer in %v", pkt)
	}
	checkFirst(t, r)
	app := pkt.ApplicationLayer()
	if app == nil || len(app.Payload()) != firstPayload {
		t.Errorf("application layer = %v, want %d bytes of payload", app, firstPayload)
	}
	if err := rocelayer.CheckICRC(pkt); err != nil {
		t.Errorf("CheckICRC: %v", err)
	}
	if got := r.String(); got != "RC_RDMA_WRITE_FIRST qp=0x000011 psn=15111583 ackreq=false" {
		t.Errorf("String() = %q", got)
	}
}

func TestDecodingLayerParser(t *testing.T) {
	frame := firstRoCEFrame(t, captureFile)
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		ip6     layers.IPv6
		udp     layers.UDP
		roce    rocelayer.RoCEv2
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &udp, &roce, &payload)
	var decoded []gopacket.LayerType
	if err := parser.DecodeLayers(frame, &decoded); err != nil {
		t.Fatalf("DecodeLayers: %v", err)
	}
	want := []gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, layers.LayerTypeUDP, rocelayer.LayerTypeRoCEv2, gopacket.LayerTypePayload}
	if len(decoded) != len(want) {
		t.Fatalf("decoded %v, want %v", decoded, want)
	}
	for i := range want {
		if decoded[i] != want[i] {
			t.Fatalf("decoded %v, want %v", decoded, want)
		}
	}
	checkFirst(t, &roce)
	if len(payload) != firstPayload {
		t.Errorf("payload layer %d bytes, want %d", len(payload), firstPayload)
	}
}

// udpFrame builds an Ethernet/IPv4/UDP frame to port 4791 around payload.
func udpFrame(t testing.TB, payload []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: 49152, DstPort: wire.UDPPort}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestMalformedIsDecodeFailure(t *testing.T) {
	frame := firstRoCEFrame(t, captureFile)
	roce := frame[wire.EthernetLen+wire.IPv4Len+wire.UDPLen:]
	badOpcode := bytes.Clone(roce[:bth.Len+wire.ICRCLen])
	badOpcode[0] = 0xff
	badTVer := bytes.Clone(roce[:bth.Len+wire.ICRCLen])
	badTVer[1] |= 0x0f
	cases := map[string][]byte{
		"short":      {0x06, 0x00, 0xff},
		"bad opcode": badOpcode,
		"bad tver":   badTVer,
		"no RETH":    roce[:bth.Len+wire.ICRCLen],
		"bad pad":    roce[:len(roce)-1],
	}
	// gopacket's UDP layer hands an empty payload to no decoder at all.
	if pkt := gopacket.NewPacket(udpFrame(t, nil), layers.LayerTypeEthernet, gopacket.Default); pkt.Layer(rocelayer.LayerTypeRoCEv2) != nil {
		t.Errorf("RoCEv2 layer decoded from an empty UDP payload")
	}
	for name, payload := range cases {
		t.Run(name, func(t *testing.T) {
			pkt := gopacket.NewPacket(udpFrame(t, payload), layers.LayerTypeEthernet, gopacket.Default)
			if pkt.Layer(rocelayer.LayerTypeRoCEv2) != nil {
				t.Errorf("RoCEv2 layer decoded from %x", payload)
			}
			el := pkt.ErrorLayer()
			if el == nil || el.LayerType() != gopacket.LayerTypeDecodeFailure {
				t.Fatalf("no DecodeFailure layer: %v", pkt)
			}
			var r rocelayer.RoCEv2
			if err := r.DecodeFromBytes(payload, gopacket.NilDecodeFeedback); err == nil {
				t.Errorf("DecodeFromBytes(%x) = nil", payload)
			}
		})
	}
}

// TestTruncatedPrefixes decodes every prefix of a real packet's UDP payload.
// The UDP length is all that says where a packet ends, so a prefix that keeps
// the headers and 4-byte alignment is a valid shorter packet; every other
// prefix fails cleanly, and none panics.
func TestTruncatedPrefixes(t *testing.T) {
	frame := firstRoCEFrame(t, captureFile)
	roce := frame[wire.EthernetLen+wire.IPv4Len+wire.UDPLen:]
	minLen := bth.Len + reth.Len + wire.ICRCLen
	for n := 0; n < len(roce); n++ {
		var r rocelayer.RoCEv2
		err := r.DecodeFromBytes(roce[:n], gopacket.NilDecodeFeedback)
		if valid := n >= minLen && n%4 == 0; valid != (err == nil) {
			t.Errorf("prefix of %d bytes of %d: err = %v", n, len(roce), err)
		}
		gopacket.NewPacket(udpFrame(t, roce[:n]), layers.LayerTypeEthernet, gopacket.Default)
	}
}

// TestSerializeRxeFrame serializes a decoded rxe frame layer by layer and
// gets the same bytes back once SetICRC has filled in the ICRC.
func TestSerializeRxeFrame(t *testing.T) {
	frame := firstRoCEFrame(t, captureFile)
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	var ls []gopacket.SerializableLayer
	for _, l := range pkt.Layers() {
		ls = append(ls, l.(gopacket.SerializableLayer))
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, ls...); err != nil {
		t.Fatal(err)
	}
	out := buf.Bytes()
	if err := rocelayer.SetICRC(out[wire.EthernetLen:]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, frame) {
		t.Errorf("serialized frame differs:\n got %x\nwant %x", out, frame)
	}
}

// TestSerializeNew builds a packet with New, whose payload needs pad bytes,
// and parses it back with the datapath parser.
func TestSerializeNew(t *testing.T) {
	h := wire.Headers{}
	h.BTH.Opcode = bth.RCRDMAWriteOnly
	h.BTH.PKey = bth.DefaultPKey
	h.BTH.DestQP = 0x1234
	h.BTH.PSN = 77
	h.BTH.AckReq = true
	h.RETH = reth.Fields{VA: 0x1000, RKey: 0xabcd, DMALen: 5}
	roce, err := rocelayer.New(&h)
	if err != nil {
		t.Fatal(err)
	}
	ip := &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: 49152, DstPort: wire.UDPPort}
	payload := []byte("hello")
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true}
	if err := gopacket.SerializeLayers(buf, opts, ip, udp, roce, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	var p wire.Packet
	if err := wire.ParseIP(&p, b); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckICRC(); !errors.Is(err, wire.ErrICRC) {
		t.Errorf("CheckICRC before SetICRC = %v, want ErrICRC", err)
	}
	if err := rocelayer.SetICRC(b); err != nil {
		t.Fatal(err)
	}
	if err := wire.ParseIP(&p, b); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckICRC(); err != nil {
		t.Errorf("CheckICRC: %v", err)
	}
	if got := p.Headers(); got.BTH.PadCnt != 3 || got.BTH.DestQP != 0x1234 || got.BTH.PSN != 77 || !got.BTH.AckReq || got.RETH != h.RETH {
		t.Errorf("headers = %+v", got)
	}
	if !bytes.Equal(p.Payload, payload) {
		t.Errorf("payload = %q, want %q", p.Payload, payload)
	}

	h.BTH.Opcode = bth.RCAcknowledge
	ack, err := rocelayer.New(&h)
	if err != nil {
		t.Fatal(err)
	}
	if err := gopacket.SerializeLayers(buf, opts, ip, udp, ack, gopacket.Payload(payload)); !errors.Is(err, wire.ErrPayload) {
		t.Errorf("ACK with payload: err = %v, want ErrPayload", err)
	}
	h.BTH.Opcode = 0x15 // reserved
	if _, err := rocelayer.New(&h); !errors.Is(err, wire.ErrOpcode) {
		t.Errorf("New(reserved opcode) err = %v, want ErrOpcode", err)
	}
}

// FuzzDecode feeds arbitrary UDP payloads to gopacket through the layer.
func FuzzDecode(f *testing.F) {
	frame := firstRoCEFrame(f, captureFile)
	f.Add(frame[wire.EthernetLen+wire.IPv4Len+wire.UDPLen:])
	f.Add([]byte{0x11, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1, 0x1f, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, payload []byte) {
		var r rocelayer.RoCEv2
		if r.DecodeFromBytes(payload, gopacket.NilDecodeFeedback) == nil {
			if n := len(r.LayerContents()) + len(r.LayerPayload()) + len(r.Packet.Pad) + wire.ICRCLen; n != len(payload) {
				t.Errorf("layer accounts for %d of %d bytes", n, len(payload))
			}
		}
		gopacket.NewPacket(payload, rocelayer.LayerTypeRoCEv2, gopacket.Default)
	})
}
