package rsocket_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cm/cmtest"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rsocket"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// serve opens a server and a client device on an in-memory fabric, and
// listens on the server's with options o: the channel has the first
// connection accepted (nil if Accept failed). It returns the client's
// device and connection manager.
func serve(t *testing.T, o rsocket.Options) (*rnic.Device, *cm.Manager, <-chan *rsocket.Conn) {
	t.Helper()
	f := mem.NewFabric()
	_, sm := cmtest.Open(t, f, "10.0.0.2")
	dev, cmgr := cmtest.Open(t, f, "10.0.0.1")
	l, err := rsocket.Listen(sm, netip.Addr{}, 7471, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan *rsocket.Conn, 1)
	go func() {
		c, err := l.Accept(ctx(t))
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	return dev, cmgr, accepted
}

// pair connects a client and a server rsocket over an in-memory fabric.
func pair(t *testing.T, o rsocket.Options) (client, server *rsocket.Conn) {
	t.Helper()
	_, cmgr, accepted := serve(t, o)
	client, err := rsocket.Dial(ctx(t), cmgr, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{}, o)
	if err != nil {
		t.Fatal(err)
	}
	if server = <-accepted; server == nil {
		t.FailNow()
	}
	return client, server
}

// TestStream: bytes written on one side are read on the other, in order
// and whole, both ways at once, through buffers and credit windows much
// smaller than what crosses them (the receive buffer given back half at a
// time, the target SGL's slots in turn); a Close is an EOF to the peer.
func TestStream(t *testing.T) {
	for _, o := range []rsocket.Options{
		{},
		{RQSize: 16, SQSize: 16, RBufSize: 8192, SBufSize: 8192},
	} {
		client, server := pair(t, o)
		data := make([]byte, 3<<20)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		echoed := make(chan error, 1)
		go func() {
			// The server echoes everything back, in reads of odd sizes.
			buf := make([]byte, 7777)
			for {
				n, err := server.Read(buf)
				if err == io.EOF {
					echoed <- server.Close()
					return
				}
				if err != nil {
					echoed <- err
					return
				}
				if _, err := server.Write(buf[:n]); err != nil {
					echoed <- err
					return
				}
			}
		}()
		got := make(chan []byte, 1)
		go func() {
			b, err := io.ReadAll(io.LimitReader(client, int64(len(data))))
			if err != nil {
				t.Error(err)
			}
			got <- b
		}()
		for off := 0; off < len(data); {
			n := min(len(data)-off, 1+rng.IntN(200000))
			if _, err := client.Write(data[off : off+n]); err != nil {
				t.Fatal(err)
			}
			off += n
		}
		if b := <-got; !bytes.Equal(b, data) {
			t.Fatalf("options %+v: %d bytes came back, want the %d sent, the same", o, len(b), len(data))
		}
		if err := client.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-echoed; err != nil {
			t.Fatalf("the server: %v", err)
		}
	}
}
