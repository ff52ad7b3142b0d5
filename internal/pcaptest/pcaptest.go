// Package pcaptest reads the capture files that gorxe's tests check
// against.
package pcaptest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Capture is a pcap file read into memory.
type Capture struct {
	Link   layers.LinkType
	Frames [][]byte
	Infos  []gopacket.CaptureInfo
}

// Read reads a pcap file whole, failing the test if it cannot.
func Read(t testing.TB, path string) Capture {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	c := Capture{Link: r.LinkType()}
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return c
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		c.Frames = append(c.Frames, data)
		c.Infos = append(c.Infos, ci)
	}
}

// RoCEv1 turns an untagged Ethernet frame holding an IPv4 RoCE v2 packet
// into the RoCE v1 frame a NIC would send for the same packet, as one
// given a RoCE v1 GID index does: EtherType 0x8915, a GRH (next header
// 0x1B, hop limit 64) with the addresses as IPv4-mapped GIDs, then the
// BTH and the rest, the ICRC left as it was.
func RoCEv1(f []byte) []byte {
	ip := f[14:]
	ihl := int(ip[0]&0x0f) * 4
	transport := ip[ihl+8:]
	grh := make([]byte, 40)
	grh[0] = 6 << 4
	binary.BigEndian.PutUint16(grh[4:], uint16(len(transport)))
	grh[6], grh[7] = 0x1b, 64
	for k, a := range [][]byte{ip[12:16], ip[16:20]} {
		gid := grh[8+16*k : 24+16*k]
		gid[10], gid[11] = 0xff, 0xff
		copy(gid[12:], a)
	}
	out := append(append(bytes.Clone(f[:12]), 0x89, 0x15), grh...)
	return append(out, transport...)
}
