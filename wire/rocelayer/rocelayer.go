// Package rocelayer teaches gopacket (github.com/gopacket/gopacket) to decode
// RoCE v2: importing it registers LayerTypeRoCEv2 on UDP port 4791, so any
// gopacket program that imports it sees gorxe's packets, and kernel rxe's or
// a RoCE NIC's, as a RoCEv2 layer followed by the RDMA payload.
//
// The layer holds a wire.Packet parsed by wire.ParseUDPPayload: gorxe's
// datapath parser is the only one, and this package only adapts it to
// gopacket's interfaces.
package rocelayer

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// layerTypeNum is the number under which LayerTypeRoCEv2 is registered. It
// is the RoCE v2 port: gopacket reserves 0..999 for itself and 1000..1999 are
// the numbers other applications pick first, so 4791 is unlikely to collide.
const layerTypeNum = wire.UDPPort

// LayerTypeRoCEv2 is the gopacket layer type of a RoCE v2 packet: the UDP
// payload from the BTH through the ICRC.
var LayerTypeRoCEv2 = gopacket.RegisterLayerType(layerTypeNum, gopacket.LayerTypeMetadata{
	Name:    "RoCEv2",
	Decoder: gopacket.DecodeFunc(decodeRoCEv2),
})

func init() {
	layers.RegisterUDPPortLayerType(layers.UDPPort(wire.UDPPort), LayerTypeRoCEv2)
}

// RoCEv2 is a decoded RoCE v2 packet. Contents are the BTH and the extended
// headers, Payload the RDMA payload; the pad bytes and the ICRC that follow
// the payload are Packet.Pad and Packet.ICRC.
//
// Packet has no IP or UDP header, so Packet.CheckICRC cannot be used on it;
// see CheckICRC.
type RoCEv2 struct {
	layers.BaseLayer
	Packet wire.Packet
}

var (
	_ gopacket.Layer             = (*RoCEv2)(nil)
	_ gopacket.DecodingLayer     = (*RoCEv2)(nil)
	_ gopacket.SerializableLayer = (*RoCEv2)(nil)
)

// LayerType returns LayerTypeRoCEv2.
func (r *RoCEv2) LayerType() gopacket.LayerType { return LayerTypeRoCEv2 }

// CanDecode returns LayerTypeRoCEv2.
func (r *RoCEv2) CanDecode() gopacket.LayerClass { return LayerTypeRoCEv2 }

// NextLayerType returns gopacket.LayerTypePayload when the packet carries
// RDMA payload and gopacket.LayerTypeZero when it does not.
func (r *RoCEv2) NextLayerType() gopacket.LayerType {
	if len(r.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes parses data, a whole UDP payload, with wire.ParseUDPPayload.
// The layer keeps views into data. A packet cut short marks df truncated.
func (r *RoCEv2) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := wire.ParseUDPPayload(&r.Packet, data); err != nil {
		r.BaseLayer = layers.BaseLayer{}
		if errors.Is(err, wire.ErrTruncated) {
			df.SetTruncated()
		}
		return err
	}
	hdrLen := r.Packet.Info.HdrLen
	r.BaseLayer = layers.BaseLayer{Contents: data[:hdrLen:hdrLen], Payload: r.Packet.Payload}
	return nil
}

// decodeRoCEv2 is the gopacket.Decoder of LayerTypeRoCEv2.
func decodeRoCEv2(data []byte, p gopacket.PacketBuilder) error {
	r := &RoCEv2{}
	if err := r.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(r)
	if len(r.Payload) == 0 {
		return nil
	}
	return p.NextDecoder(gopacket.LayerTypePayload)
}

// String summarises the BTH, for example
// "RC_RDMA_WRITE_FIRST qp=0x000011 psn=3355957 ackreq=false".
func (r *RoCEv2) String() string {
	if r.Packet.Info == nil {
		return "RoCEv2 (not decoded)"
	}
	h := r.Packet.BTH
	return fmt.Sprintf("%v qp=%#06x psn=%d ackreq=%t", h.Opcode(), uint32(h.DestQP()), uint32(h.PSN()), h.AckReq())
}

// New returns a layer for building a packet with the transport headers h,
// for gopacket.SerializeLayers. The payload is the next layer (a
// gopacket.Payload), whose length SerializeTo writes into the pad count.
func New(h *wire.Headers) (*RoCEv2, error) {
	b, err := wire.AppendTransport(nil, h, nil)
	if err != nil {
		return nil, err
	}
	b = append(b, make([]byte, wire.ICRCLen)...)
	r := &RoCEv2{}
	if err := r.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
		return nil, err
	}
	return r, nil
}

// SerializeTo writes the layer's BTH and extended headers in front of the
// payload already in b, with the pad count the payload's length calls for,
// and appends the pad and an ICRC of zero.
//
// The ICRC covers the IP and UDP headers (IBTA Annex A17.3.3), which are
// serialized after this layer, so no SerializableLayer can compute it: once
// every layer is serialized, call SetICRC on the bytes from the IP header on.
// The UDP checksum covers the ICRC, so leave it zero, as RoCE v2 senders do
// (SerializeOptions.ComputeChecksums false), or compute it after SetICRC.
func (r *RoCEv2) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	info := r.Packet.Info
	if info == nil || len(r.Contents) != info.HdrLen {
		return errors.New("rocelayer: layer holds no decoded packet")
	}
	n := len(b.Bytes())
	if n > 0 && !info.Payload {
		return wire.ErrPayload
	}
	pad := wire.PadLen(n)
	hdr, err := b.PrependBytes(info.HdrLen)
	if err != nil {
		return err
	}
	copy(hdr, r.Contents)
	bth.Header(hdr).SetPadCnt(pad)
	trailer, err := b.AppendBytes(pad + wire.ICRCLen)
	if err != nil {
		return err
	}
	clear(trailer)
	return nil
}

// SetICRC computes the ICRC of the RoCE v2 packet in b, which starts with
// its IPv4 or IPv6 header, and writes it into the packet's last four bytes.
func SetICRC(b []byte) error {
	var p wire.Packet
	if err := wire.ParseIP(&p, b); err != nil {
		return err
	}
	icrc := wire.ComputeICRC(p.IP, p.UDP, p.Transport())
	udpEnd := len(p.IP) + int(binary.BigEndian.Uint16(p.UDP[4:]))
	binary.LittleEndian.PutUint32(b[udpEnd-wire.ICRCLen:], icrc)
	return nil
}

// CheckICRC checks the ICRC of the RoCE v2 layer in a gopacket.Packet against
// the packet's IPv4 or IPv6 and UDP layers. It returns wire.ErrNoIPHeader
// when the packet has no RoCE v2 layer below an IP and a UDP layer.
func CheckICRC(pkt gopacket.Packet) error {
	var ip, udp []byte
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.IPv4, *layers.IPv6:
			ip, udp = l.LayerContents(), nil
		case *layers.UDP:
			udp = l.LayerContents()
		case *RoCEv2:
			if len(ip) == 0 || len(udp) == 0 || l.Packet.Info == nil {
				return wire.ErrNoIPHeader
			}
			if wire.ComputeICRC(ip, udp, l.Packet.Transport()) != l.Packet.ICRC() {
				return wire.ErrICRC
			}
			return nil
		}
	}
	return wire.ErrNoIPHeader
}
