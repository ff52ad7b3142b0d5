package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// DefaultPort is rc_pingpong's TCP port (-p).
const DefaultPort = 18515

// DialRetry is how long Dial keeps trying while the server refuses the
// connection. rc_pingpong tries once; a server started at the same time
// as its client may not listen yet, and a retry is invisible to it.
const DialRetry = 5 * time.Second

// Dial connects to an rc_pingpong server at addr (host:port), as
// pp_client_exch_dest does, retrying refused connections for up to
// DialRetry.
func Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	give := time.Now().Add(DialRetry)
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(give) {
			return nil, fmt.Errorf("pingpong: connecting to %s: %w", addr, err)
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("pingpong: connecting to %s: %w", addr, ctx.Err())
		case <-t.C:
		}
	}
}

// Accept waits for one client on ln, as pp_server_exch_dest does, and
// closes ln: rc_pingpong serves one client and closes its listening
// socket once it has it.
func Accept(ctx context.Context, ln net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	c, err := ln.Accept()
	stop()
	ln.Close()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("pingpong: waiting for the client on %s: %w", ln.Addr(), err)
	}
	return c, nil
}

// ExchangeClient is the client's side of the exchange on c: it writes
// local's address message, reads the server's, writes Done. The server
// has connected its QP by the time its message arrives, so the client may
// connect its own and send at once. A message that does not parse is an
// error wrapping ErrMessage, after Done is written: rc_pingpong's client
// writes it before it looks at the message. ctx's end, or c's deadline,
// interrupts it.
func ExchangeClient(ctx context.Context, c net.Conn, local Dest) (Dest, error) {
	defer interruptOn(ctx, c)()
	m := local.Message()
	if _, err := c.Write(m[:]); err != nil {
		return Dest{}, ioError(ctx, "sending the local address", err)
	}
	var r [MessageLen]byte
	if _, err := io.ReadFull(c, r[:]); err != nil {
		return Dest{}, ioError(ctx, "reading the server's address", err)
	}
	if _, err := io.WriteString(c, Done); err != nil {
		return Dest{}, ioError(ctx, `writing "done"`, err)
	}
	return ParseMessage(r[:])
}

// ExchangeServer is the server's side of the exchange on c: it reads the
// client's address message, calls connect with it (rc_pingpong moves its
// QP to RTR and RTS there, before it answers), writes local's message and
// reads the client's Done. If connect fails, nothing is written: the
// client sees the connection close. ctx's end, or c's deadline, interrupts
// it.
func ExchangeServer(ctx context.Context, c net.Conn, local Dest, connect func(remote Dest) error) (Dest, error) {
	defer interruptOn(ctx, c)()
	var r [MessageLen]byte
	if _, err := io.ReadFull(c, r[:]); err != nil {
		return Dest{}, ioError(ctx, "reading the client's address", err)
	}
	remote, err := ParseMessage(r[:])
	if err != nil {
		return Dest{}, err
	}
	if err := connect(remote); err != nil {
		return remote, err
	}
	m := local.Message()
	if _, err := c.Write(m[:]); err != nil {
		return remote, ioError(ctx, "sending the local address", err)
	}
	var done [len(Done)]byte
	if _, err := io.ReadFull(c, done[:]); err != nil {
		return remote, ioError(ctx, `reading the client's "done"`, err)
	}
	if string(done[:]) != Done {
		return remote, fmt.Errorf(`%w: the client sent %q where "done\x00" belongs`, ErrMessage, done[:])
	}
	return remote, nil
}

// interruptOn makes c's blocked reads and writes return once ctx ends,
// until the function it returns is called.
func interruptOn(ctx context.Context, c net.Conn) func() {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	return func() { stop() }
}

// ioError says what failed: the step, and why, with ctx's cause when ctx
// ended it and "the peer closed the connection" for an EOF or a reset.
func ioError(ctx context.Context, step string, err error) error {
	switch {
	case ctx.Err() != nil:
		err = context.Cause(ctx)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("pingpong: %s: the peer closed the connection (%w)", step, err)
	}
	return fmt.Errorf("pingpong: %s: %w", step, err)
}
