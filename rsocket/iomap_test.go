package rsocket_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/gorxe/gorxe/rsocket"
)

// TestIOMap: riostream's transfers. The server maps memory; its entry
// reaches the client's table with the server's next Write; the client's
// IOWrite lands in the mapping, which the server reads; writes past the
// mapping stop there with ErrNoIOMap; the peer's table holds as many
// mappings as it offered, and an unmapped entry is free again.
func TestIOMap(t *testing.T) {
	client, server := pair(t, rsocket.Options{IOMapSize: 1})
	m, err := server.IOMap(8192, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.IOWrite([]byte("early"), 0); !errors.Is(err, rsocket.ErrNoIOMap) {
		t.Fatalf("IOWrite before the mapping reached the client: %v, want ErrNoIOMap", err)
	}
	if _, err := server.Write([]byte("x")); err != nil { // sends the entry first
		t.Fatal(err)
	}
	if _, err := io.ReadFull(client, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 8192)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if n, err := client.IOWrite(data, 0); n != len(data) || err != nil {
		t.Fatalf("IOWrite = %d, %v", n, err)
	}
	if n, err := client.IOWrite(data[:1000], 8000); n != 192 || !errors.Is(err, rsocket.ErrNoIOMap) {
		t.Fatalf("IOWrite past the mapping's end = %d, %v; want 192 and ErrNoIOMap", n, err)
	}
	if _, err := client.Write([]byte("done")); err != nil { // after the writes, in order
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8192)
	if _, err := m.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	want := append(data[:8000:8000], data[:192]...)
	if !bytes.Equal(got, want) {
		t.Fatal("the mapping does not hold what the client wrote")
	}
	if b, err := m.Peek(8191); err != nil || b != want[8191] {
		t.Fatalf("Peek = %d, %v; want %d", b, err, want[8191])
	}
	if _, err := server.IOMap(64, 0); !errors.Is(err, rsocket.ErrNoIOMap) {
		t.Fatalf("a second mapping in a table of one: %v, want ErrNoIOMap", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := server.IOMap(64, -1)
	if err != nil {
		t.Fatal(err)
	}
	if m2.Offset() <= 0 || m2.Len() != 64 {
		t.Fatalf("a mapping at its address: offset %#x, %d bytes", m2.Offset(), m2.Len())
	}
	// A peer that offers no table takes no mapping.
	c0, _ := pair(t, rsocket.Options{})
	if _, err := c0.IOMap(64, 0); !errors.Is(err, rsocket.ErrNoIOMap) {
		t.Fatalf("IOMap with a peer that offers no table: %v", err)
	}
}
