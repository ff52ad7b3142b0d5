package explain

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"testing"
	"time"
)

// FuzzExplain feeds explain captures of random packets, and real captures
// mutated: neither reading them nor writing the text, JSON or HTML report
// may panic or hang, whatever the packets say.
func FuzzExplain(f *testing.F) {
	for _, path := range []string{"../testdata/rxe/perftest-mtu1024.pcap", "../testdata/interop/gorxe-server-read_bw-udp-mtu1024.pcap", "../testdata/interop/cm/rdma_cm-rxe-server.pcap", "../testdata/interop/loss/case.25.pcap"} {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:min(len(b), 64<<10)])
	}
	f.Add(rawCapture([]byte{0x45}))
	f.Fuzz(func(t *testing.T, b []byte) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			r, _ := Read(bytes.NewReader(b))
			if r != nil {
				WriteText(io.Discard, r)
				WriteJSON(io.Discard, r)
				WriteHTML(io.Discard, r, "fuzz")
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("explain hangs")
		}
	})
}

// rawCapture returns a pcap of raw IP frames, each of pkts.
func rawCapture(pkts ...[]byte) []byte {
	var b bytes.Buffer
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 65536)
	binary.LittleEndian.PutUint32(hdr[20:], 101) // LINKTYPE_RAW
	b.Write(hdr)
	for _, p := range pkts {
		rec := make([]byte, 16)
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(p)))
		binary.LittleEndian.PutUint32(rec[12:], uint32(len(p)))
		b.Write(rec)
		b.Write(p)
	}
	return b.Bytes()
}
