package cmtool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gorxe/gorxe/rsocket"
)

// riostreamRun is riostream's run_test (librdmacm/examples/riostream.c):
// each side maps a transfer's worth of memory at offset 0 (riomap); 16
// bytes each way with rsend and rrecv, the client first, carry the two
// mappings to the peers' tables; then each round the client riowrites
// count transfers into the server's mapping, the last with the round's
// marker in its last byte, and the server, once it sees the marker in
// its memory, writes as many back, with the next marker. With -T v the
// last transfer of each round carries format_buf's sequence, which the
// receiver checks.
func riostreamRun(s io.ReadWriter, client bool, t rstreamTest, v *verifier, stdout io.Writer) error {
	c, ok := s.(*rsocket.Conn)
	if !ok {
		return errors.New("riostream runs over rsockets only")
	}
	m, err := c.IOMap(t.size, 0)
	if err != nil {
		return fmt.Errorf("riomap: %w", err)
	}
	defer m.Close() // riounmap
	// The byte watched starts at -1, so that the first marker, 0, is news;
	// and so does the one sent, which in riostream is the same memory:
	// the transfers before a round's last carry it.
	if _, err := m.WriteAt([]byte{0xFF}, int64(t.size-1)); err != nil {
		return err
	}
	buf := make([]byte, max(t.size, 16))
	buf[t.size-1] = 0xFF
	sync := func(send bool) error {
		if send {
			if _, err := c.Write(buf[:16]); err != nil {
				return fmt.Errorf("rsend: %w", err)
			}
			return nil
		}
		if _, err := io.ReadFull(c, buf[:16]); err != nil {
			return fmt.Errorf("rrecv: %w", err)
		}
		return nil
	}
	if err := sync(client); err != nil {
		return err
	}
	if err := sync(!client); err != nil {
		return err
	}
	var marker byte
	var got []byte // what a round brought, to verify
	if v.on {
		got = make([]byte, t.size)
	}
	send := func() error {
		for range t.count - 1 {
			if err := riowrite(c, buf[:t.size]); err != nil {
				return err
			}
		}
		buf[t.size-1] = marker
		marker++
		if v.on {
			v.format(buf[:t.size-1])
		}
		return riowrite(c, buf[:t.size])
	}
	recv := func() error {
		want := marker
		marker++
		if err := m.Wait(context.Background(), int64(t.size-1), want); err != nil {
			return fmt.Errorf("waiting for the peer's transfer: %w", err)
		}
		if !v.on {
			return nil
		}
		got := got[:t.size-1]
		if _, err := m.ReadAt(got, 0); err != nil {
			return err
		}
		return v.check(got)
	}
	start := time.Now()
	for range t.iterations {
		first, second := recv, send
		if client {
			first, second = send, recv
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
	}
	t.show(time.Since(start), stdout)
	return nil
}

// riowrite is riostream's send_xfer: p to the peer's offset 0, in as
// many riowrites as it takes.
func riowrite(c *rsocket.Conn, p []byte) error {
	for off := 0; off < len(p); {
		n, err := c.IOWrite(p[off:], int64(off))
		off += n
		if err != nil {
			return fmt.Errorf("riowrite: %w", err)
		}
	}
	return nil
}
