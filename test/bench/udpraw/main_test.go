package main

import (
	"net"
	"os"
	"testing"
	"time"
)

// TestPongExitsOnBye: a pong started with -bye answers a ping's run and
// exits when the ping says it is done, sleeping or busy polling, with
// ACKs or without.
func TestPongExitsOnBye(t *testing.T) {
	stdout := os.Stdout
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	os.Stdout = devnull // ping's JSON
	defer func() { os.Stdout = stdout }()
	for _, c := range []struct {
		name      string
		busy, ack bool
	}{{"sleeping", false, false}, {"busy", true, false}, {"ack", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			l, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.LocalAddr().String()
			l.Close()
			done := make(chan error, 1)
			go func() { done <- pong(addr, c.busy, c.ack, true) }()
			time.Sleep(50 * time.Millisecond) // pong binds
			if err := ping(addr, 30, 200, c.busy, c.ack); err != nil {
				t.Fatalf("ping: %v", err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pong: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("pong -bye still running 5 s after the ping's run ended")
			}
		})
	}
}
