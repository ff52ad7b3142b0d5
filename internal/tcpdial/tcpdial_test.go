package tcpdial

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestDial: a server that starts listening while the client is refused
// is reached; one that never listens is given up on after the wait, with
// the refusal; a ctx that ends stops the retries.
func TestDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // refused until it listens again
	listening := make(chan net.Listener, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
		}
		listening <- l
	}()
	c, err := Dial(context.Background(), &net.Dialer{}, addr, 5*time.Second)
	if err != nil {
		t.Fatalf("a server that listens late: %v", err)
	}
	c.Close()
	if l := <-listening; l != nil {
		l.Close()
	}
	if _, err := Dial(context.Background(), &net.Dialer{}, addr, 200*time.Millisecond); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a server that never listens: %v, want ECONNREFUSED", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, &net.Dialer{}, addr, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a ctx that ends: %v, want its error", err)
	}
}
