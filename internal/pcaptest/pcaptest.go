// Package pcaptest reads the capture files that gorxe's tests check
// against.
package pcaptest

import (
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
