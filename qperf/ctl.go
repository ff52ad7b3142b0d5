package qperf

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The synchronization messages, sent each way around a test.
const (
	syncBefore = "synchronization before test"
	syncAfter  = "synchronization after test"
)

// errorTimeout is how long a side waits for the peer to take its error
// message, and to send the whole of one (qperf's ERROR_TIMEOUT).
const errorTimeout = 3 * time.Second

// ctl is the TCP connection between a client and a server: messages of
// fixed sizes each way, each within the request's timeout, and an error
// as qperf sends one: a byte of urgent data, '?', then the message and
// the end of the stream.
type ctl struct {
	c       *net.TCPConn
	timeout time.Duration
	peer    string // "server" or "client": who the other side is
}

func newCtl(c *net.TCPConn, timeoutSec uint32, peer string) *ctl {
	// The peer's error flag stays in the stream, where atUrgent finds it.
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_OOBINLINE, 1) })
	}
	return &ctl{c: c, timeout: time.Duration(max(timeoutSec, 1)) * time.Second, peer: peer}
}

// send writes b, what is named item, within the timeout.
func (c *ctl) send(b []byte, item string) error {
	c.c.SetWriteDeadline(time.Now().Add(c.timeout))
	if _, err := c.c.Write(b); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("failed to send %s: timed out", item)
		}
		return fmt.Errorf("failed to send %s: %w", item, err)
	}
	return nil
}

// recv reads n bytes, what is named item, within the timeout. When the
// peer has sent an error instead, the error is the peer's message,
// "server: ..." as qperf prints it.
func (c *ctl) recv(n int, item string) ([]byte, error) {
	c.c.SetReadDeadline(time.Now().Add(c.timeout))
	if c.atUrgent() {
		return nil, c.remoteError(nil)
	}
	b := make([]byte, n)
	got, err := io.ReadFull(c.c, b)
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, fmt.Errorf("failed to receive %s: timed out", item)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		if got > 0 && b[0] == '?' {
			return nil, c.remoteError(b[:got])
		}
		return nil, fmt.Errorf("failed to receive %s: %s not responding", item, c.peer)
	}
	return nil, fmt.Errorf("failed to receive %s: %w", item, err)
}

// atUrgent waits for data and reports whether it starts at the urgent
// mark: the peer sent qperf's error flag, which SO_OOBINLINE keeps in the
// stream, in front of its message.
func (c *ctl) atUrgent() bool {
	rc, err := c.c.SyscallConn()
	if err != nil {
		return false
	}
	at := false
	rc.Read(func(fd uintptr) bool {
		var one [1]byte
		_, _, err := unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK)
		if err == unix.EAGAIN {
			return false
		}
		mark, err := unix.IoctlGetInt(int(fd), unix.SIOCATMARK)
		at = err == nil && mark == 1 && one[0] == '?'
		return true
	})
	return at
}

// remoteError reads the rest of an error the peer sent, after got, the
// bytes of it already read.
func (c *ctl) remoteError(got []byte) error {
	c.c.SetReadDeadline(time.Now().Add(errorTimeout))
	rest, _ := io.ReadAll(io.LimitReader(c.c, 256))
	msg := strings.TrimRight(strings.TrimPrefix(string(append(got, rest...)), "?"), "\n\x00")
	return &PeerError{Peer: c.peer, Msg: msg}
}

// PeerError is an error the other side reported and sent.
type PeerError struct {
	Peer string // "server" or "client"
	Msg  string
}

func (e *PeerError) Error() string { return e.Peer + ": " + e.Msg }

// sendError tells the peer of err as qperf does: urgent '?', the message,
// the end of the stream, and a wait of up to three seconds for the peer
// to close its side.
func (c *ctl) sendError(err error) {
	rc, e := c.c.SyscallConn()
	if e == nil {
		rc.Control(func(fd uintptr) {
			unix.Sendto(int(fd), []byte("?"), unix.MSG_OOB, nil)
		})
	}
	c.c.SetWriteDeadline(time.Now().Add(errorTimeout))
	c.c.Write([]byte(err.Error()))
	c.c.CloseWrite()
	c.c.SetReadDeadline(time.Now().Add(errorTimeout))
	io.Copy(io.Discard, c.c)
}

// sync sends msg and waits for the peer's.
func (c *ctl) sync(msg string) error {
	if err := c.send([]byte(msg), msg); err != nil {
		return err
	}
	return c.recvSync(msg)
}

// recvSync waits for the peer's msg.
func (c *ctl) recvSync(msg string) error {
	b, err := c.recv(len(msg), msg)
	if err != nil {
		return err
	}
	if string(b) != msg {
		return fmt.Errorf("synchronize %s failure: data does not match", msg)
	}
	return nil
}

func (c *ctl) close() error { return c.c.Close() }
