// Package tcpdial connects to a TCP server that may not listen yet: the
// tools' exchanges (rc_pingpong's, perftest's, cmtime's) whose server is
// often started at the same moment as its client.
package tcpdial

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"
)

// Dial connects to addr with d, trying again every 100 ms for up to wait
// while the server refuses the connection. It returns the last
// attempt's error (one wrapping syscall.ECONNREFUSED when the server
// refused to the end), or ctx's when it ends first.
func Dial(ctx context.Context, d *net.Dialer, addr string, wait time.Duration) (net.Conn, error) {
	give := time.Now().Add(wait)
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(give) {
			return nil, err
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
