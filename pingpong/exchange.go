package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/gorxe/gorxe/internal/tcpdial"
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
	c, err := tcpdial.Dial(ctx, &net.Dialer{}, addr, DialRetry)
	if err != nil {
		return nil, fmt.Errorf("pingpong: connecting to %s: %w", addr, err)
	}
	return c, nil
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
	r, err := ExchangeClientN(ctx, c, []Dest{local}, 1)
	if err != nil {
		return Dest{}, err
	}
	return r[0], nil
}

// ExchangeClientN is ExchangeClient for n addresses each way, as
// srq_pingpong exchanges MaxQP: it writes locals' messages, then zero
// addresses up to n, reads n, writes Done, and returns the n read.
func ExchangeClientN(ctx context.Context, c net.Conn, locals []Dest, n int) ([]Dest, error) {
	defer interruptOn(ctx, c)()
	if err := writeAddresses(c, locals, n); err != nil {
		return nil, ioError(ctx, "sending the local address", err)
	}
	msgs := make([]byte, n*MessageLen)
	for i := range n {
		if _, err := io.ReadFull(c, msgs[i*MessageLen:(i+1)*MessageLen]); err != nil {
			return nil, ioError(ctx, "reading the server's address"+index(i, n), err)
		}
	}
	if _, err := io.WriteString(c, Done); err != nil {
		return nil, ioError(ctx, `writing "done"`, err)
	}
	return parseAddresses(msgs, n)
}

// ExchangeServer is the server's side of the exchange on c: it reads the
// client's address message, calls connect with it (rc_pingpong moves its
// QP to RTR and RTS there, before it answers), writes local's message and
// reads the client's Done. If connect fails, nothing is written: the
// client sees the connection close. ctx's end, or c's deadline, interrupts
// it.
func ExchangeServer(ctx context.Context, c net.Conn, local Dest, connect func(remote Dest) error) (Dest, error) {
	r, err := ExchangeServerN(ctx, c, []Dest{local}, 1, func(r []Dest) error { return connect(r[0]) })
	if len(r) == 0 {
		return Dest{}, err
	}
	return r[0], err
}

// ExchangeServerN is ExchangeServer for n addresses each way, as
// srq_pingpong exchanges MaxQP: it reads n, calls connect with them,
// writes locals' messages and zero addresses up to n, and reads Done.
func ExchangeServerN(ctx context.Context, c net.Conn, locals []Dest, n int, connect func(remotes []Dest) error) ([]Dest, error) {
	defer interruptOn(ctx, c)()
	msgs := make([]byte, n*MessageLen)
	for i := range n {
		if _, err := io.ReadFull(c, msgs[i*MessageLen:(i+1)*MessageLen]); err != nil {
			return nil, ioError(ctx, "reading the client's address"+index(i, n), err)
		}
	}
	remotes, err := parseAddresses(msgs, n)
	if err != nil {
		return nil, err
	}
	if err := connect(remotes); err != nil {
		return remotes, err
	}
	if err := writeAddresses(c, locals, n); err != nil {
		return remotes, ioError(ctx, "sending the local address", err)
	}
	var done [len(Done)]byte
	if _, err := io.ReadFull(c, done[:]); err != nil {
		return remotes, ioError(ctx, `reading the client's "done"`, err)
	}
	if string(done[:]) != Done {
		return remotes, fmt.Errorf(`%w: the client sent %q where "done\x00" belongs`, ErrMessage, done[:])
	}
	return remotes, nil
}

// writeAddresses writes the messages of locals, then of zero addresses
// up to n (srq_pingpong's my_dest is zeroed beyond num_qp), in one write.
func writeAddresses(c net.Conn, locals []Dest, n int) error {
	b := make([]byte, 0, n*MessageLen)
	for i := range n {
		var d Dest
		if i < len(locals) {
			d = locals[i]
		}
		m := d.Message()
		b = append(b, m[:]...)
	}
	_, err := c.Write(b)
	return err
}

// parseAddresses parses n address messages.
func parseAddresses(msgs []byte, n int) ([]Dest, error) {
	ds := make([]Dest, n)
	for i := range ds {
		d, err := ParseMessage(msgs[i*MessageLen : (i+1)*MessageLen])
		if err != nil {
			if n > 1 {
				err = fmt.Errorf("address %d: %w", i, err)
			}
			return nil, err
		}
		ds[i] = d
	}
	return ds, nil
}

// index returns " [i]" when n addresses are exchanged, to say which
// failed, as srq_pingpong does, and "" for one.
func index(i, n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(" [%d]", i)
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
