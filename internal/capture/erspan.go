package capture

import (
	"errors"
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// ERSPAN Type III is how switches (and Linux's erspan devices with
// erversion 2) mirror traffic to a collector over GRE, protocol 0x22EB.
// gopacket decodes Type II only; this teaches it Type III, so that a
// capture taken on the collector shows the mirrored RoCE packets. The
// header (draft-foschiano-erspan, section 4.3) is 12 bytes:
//
//	Ver(4)=2 VLAN(12) | COS(3) BSO(2) T(1) Session ID(10)
//	Timestamp(32)
//	SGT(16) | P(1) FT(5) Hw ID(6) D(1) Gra(2) O(1)
//
// and an 8-byte platform-specific subheader follows when O is set. FT
// says what was mirrored: 0 an Ethernet frame, 2 an IP packet.
const ethernetTypeERSPAN3 layers.EthernetType = 0x22eb

// layerTypeERSPAN3 is registered beside wire/rocelayer's RoCEv2 (4791),
// well away from gopacket's own numbers.
var layerTypeERSPAN3 = gopacket.RegisterLayerType(4793, gopacket.LayerTypeMetadata{
	Name:    "ERSPANIII",
	Decoder: gopacket.DecodeFunc(decodeERSPAN3),
})

func init() {
	layers.EthernetTypeMetadata[ethernetTypeERSPAN3] = layers.EnumMetadata{
		DecodeWith: gopacket.DecodeFunc(decodeERSPAN3), Name: "ERSPAN Type III", LayerType: layerTypeERSPAN3,
	}
}

// erspan3 is a decoded ERSPAN Type III header.
type erspan3 struct {
	layers.BaseLayer
	Session   uint16
	FrameType uint8
	Truncated bool // T: the switch cut the mirrored packet short
}

func (e *erspan3) LayerType() gopacket.LayerType { return layerTypeERSPAN3 }

const (
	erspan3Len          = 12
	erspan3SubheaderLen = 8
	erspan3Ethernet     = 0 // FT: the mirrored packet is an Ethernet frame
	erspan3IP           = 2 // FT: the mirrored packet is an IP packet
)

func decodeERSPAN3(data []byte, p gopacket.PacketBuilder) error {
	if len(data) < erspan3Len {
		p.SetTruncated()
		return errors.New("ERSPAN Type III header too short")
	}
	if v := data[0] >> 4; v != 2 {
		return fmt.Errorf("ERSPAN version %d under GRE protocol 0x22EB, where Type III (version 2) belongs", v)
	}
	n := erspan3Len
	if data[11]&1 != 0 {
		n += erspan3SubheaderLen
		if len(data) < n {
			p.SetTruncated()
			return errors.New("ERSPAN Type III platform-specific subheader too short")
		}
	}
	e := &erspan3{
		BaseLayer: layers.BaseLayer{Contents: data[:n], Payload: data[n:]},
		Session:   uint16(data[2]&0x03)<<8 | uint16(data[3]),
		FrameType: data[10] >> 2 & 0x1f,
		Truncated: data[2]&0x04 != 0,
	}
	p.AddLayer(e)
	switch e.FrameType {
	case erspan3Ethernet:
		return p.NextDecoder(layers.LayerTypeEthernet)
	case erspan3IP:
		if len(e.Payload) > 0 && e.Payload[0]>>4 == 6 {
			return p.NextDecoder(layers.LayerTypeIPv6)
		}
		return p.NextDecoder(layers.LayerTypeIPv4)
	}
	return fmt.Errorf("ERSPAN Type III frame type %d (0 is Ethernet, 2 IP)", e.FrameType)
}
