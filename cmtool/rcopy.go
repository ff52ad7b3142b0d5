package cmtool

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/gorxe/gorxe/rsocket"
)

// RcopyPort is rcopy's default port (librdmacm/examples/rcopy.c).
const RcopyPort = 7427

// rcopy's messages, in the host's byte order (little-endian here: rcopy.c
// has "TODO: handle byte swapping"): struct msg_hdr is version (0),
// command, length (u16, the message's, header included), data (u32) and
// id (u64); an open carries the path behind it, NUL-terminated and padded
// to a multiple of 8 bytes; a write carries the file's size (u64), and
// then the file's bytes follow as a stream. Each is answered with a
// header whose command has 0x80 set and whose data is the status (0, or
// an errno).
const (
	rcopyHdrLen = 16

	rcopyOpen  = 1
	rcopyClose = 2
	rcopyWrite = 3
	rcopyResp  = 0x80
)

type rcopyHdr struct {
	command byte
	length  uint16
	data    uint32
	id      uint64
}

func (h rcopyHdr) append(b []byte) []byte {
	b = append(b, 0, h.command)
	b = binary.LittleEndian.AppendUint16(b, h.length)
	b = binary.LittleEndian.AppendUint32(b, h.data)
	return binary.LittleEndian.AppendUint64(b, h.id)
}

// readRcopyHdr is msg_recv_hdr: a header of version 0 and a length that
// holds it.
func readRcopyHdr(r io.Reader) (rcopyHdr, error) {
	var b [rcopyHdrLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return rcopyHdr{}, err
	}
	h := rcopyHdr{command: b[1], length: binary.LittleEndian.Uint16(b[2:]), data: binary.LittleEndian.Uint32(b[4:]), id: binary.LittleEndian.Uint64(b[8:])}
	if b[0] != 0 || h.length < rcopyHdrLen {
		return h, fmt.Errorf("invalid version %d or length %d", b[0], h.length)
	}
	return h, nil
}

// RcopyClient is rcopy's client: it copies the file src to dst on the
// server conn reaches (open, write, close), printing rcopy's progress and
// its figure to stdout.
func RcopyClient(conn io.ReadWriteCloser, src, dst string, stdout io.Writer) error {
	defer conn.Close()
	fmt.Fprint(stdout, "opening...")
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	padded := (len(dst) + 8) &^ 7 // the NUL, and up to a multiple of 8
	if rcopyHdrLen+padded > 0xFFFF {
		return fmt.Errorf("the destination's name is %d bytes long: rcopy's message takes 65535 in all", len(dst))
	}
	open := rcopyHdr{command: rcopyOpen, length: uint16(rcopyHdrLen + padded), data: unixMode(st.Mode())}.append(nil)
	open = append(open, dst...)
	open = append(open, make([]byte, padded-len(dst))...)
	if _, err := conn.Write(open); err != nil {
		return err
	}
	if err := rcopyResponse(conn, rcopyOpen); err != nil {
		return err
	}
	fmt.Fprint(stdout, "transferring")
	write := rcopyHdr{command: rcopyWrite, length: rcopyHdrLen + 8}.append(nil)
	write = binary.LittleEndian.AppendUint64(write, uint64(size))
	if _, err := conn.Write(write); err != nil {
		return err
	}
	fmt.Fprint(stdout, "...")
	start := time.Now()
	if _, err := io.CopyN(conn, f, size); err != nil {
		return err
	}
	werr := rcopyResponse(conn, rcopyWrite)
	took := time.Since(start)
	fmt.Fprint(stdout, "closing...")
	if _, err := conn.Write(rcopyHdr{command: rcopyClose, length: rcopyHdrLen}.append(nil)); err != nil {
		return err
	}
	if err := rcopyResponse(conn, rcopyClose); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "done")
	if werr != nil {
		return werr
	}
	usec := float64(took.Microseconds())
	fmt.Fprintf(stdout, "%d bytes in %.2f seconds = %.2f Gb/sec\n", size, usec/1e6, float64(size*8)/(1000*usec))
	return nil
}

// rcopyResponse is msg_get_resp: the answer to cmd, its status an error
// when it is not 0.
func rcopyResponse(r io.Reader, cmd byte) error {
	h, err := readRcopyHdr(r)
	if err != nil {
		return err
	}
	if h.length != rcopyHdrLen || h.command != cmd|rcopyResp {
		return fmt.Errorf("invalid length %d or bad command response %x:%x", h.length, h.command, cmd|rcopyResp)
	}
	if h.data != 0 {
		return fmt.Errorf("the server answered with status %d (%v)", h.data, syscall.Errno(h.data))
	}
	return nil
}

// unixMode is a file's st_mode as rcopy sends it: its permission bits (a
// regular file's type bits too, which the server's open ignores).
func unixMode(m fs.FileMode) uint32 {
	mode := uint32(m.Perm()) | syscall.S_IFREG
	if m&fs.ModeSetuid != 0 {
		mode |= syscall.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		mode |= syscall.S_ISGID
	}
	return mode
}

// RcopyServer is rcopy's server: it takes one connection after another
// from l until ctx ends, and for each writes the files its client sends,
// where the client names them, printing rcopy's progress to stdout.
func RcopyServer(ctx context.Context, l *rsocket.Listener, stdout io.Writer) error {
	for {
		fmt.Fprint(stdout, "waiting for connection...")
		c, err := l.Accept(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "client: %v\n", c.RemoteAddr().Addr())
		rcopyServe(c, stdout)
		c.Close()
	}
}

// rcopyServe is server_process: commands until one fails or the client
// goes.
func rcopyServe(c io.ReadWriter, stdout io.Writer) {
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	answer := func(h rcopyHdr, status error) error {
		var data uint32
		if status != nil {
			data = uint32(syscall.EINVAL)
			if errno := syscall.Errno(0); errors.As(status, &errno) {
				data = uint32(errno)
			}
		}
		_, err := c.Write(rcopyHdr{command: h.command | rcopyResp, length: rcopyHdrLen, data: data, id: h.id}.append(nil))
		return cmp.Or(status, err)
	}
	for {
		h, err := readRcopyHdr(c)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintln(stdout, err)
			}
			return
		}
		switch h.command {
		case rcopyOpen:
			fmt.Fprint(stdout, "opening: ")
			var opened *os.File
			err = func() error {
				if f != nil {
					fmt.Fprintln(stdout, "cannot open another file")
					return syscall.EBUSY
				}
				path := make([]byte, int(h.length)-rcopyHdrLen)
				if _, err := io.ReadFull(c, path); err != nil {
					fmt.Fprintln(stdout, "error receiving path")
					return err
				}
				name, _, _ := strings.Cut(string(path), "\x00")
				fmt.Fprintf(stdout, "%s, ", name)
				var err error
				if opened, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, fs.FileMode(h.data&0o777)); err != nil {
					fmt.Fprintln(stdout, "unable to open destination file")
				}
				return err
			}()
			if opened != nil {
				f = opened
			}
			err = answer(h, err)
		case rcopyClose:
			fmt.Fprint(stdout, "closing...")
			err = answer(h, nil)
			if f != nil {
				f.Close()
				f = nil
			}
			fmt.Fprintln(stdout, "done")
		case rcopyWrite:
			fmt.Fprint(stdout, "transferring")
			err = func() error {
				if f == nil {
					fmt.Fprintln(stdout, "...file not opened")
					return syscall.EINVAL
				}
				if h.length != rcopyHdrLen+8 {
					fmt.Fprintf(stdout, "...invalid message length %d\n", h.length)
					return syscall.EINVAL
				}
				var b [8]byte
				if _, err := io.ReadFull(c, b[:]); err != nil {
					return err
				}
				size := int64(binary.LittleEndian.Uint64(b[:]))
				fmt.Fprintf(stdout, "...%d bytes...", size)
				// As rcopy maps the file from its start, whatever came before.
				if err := f.Truncate(size); err != nil {
					return err
				}
				if _, err := f.Seek(0, io.SeekStart); err != nil {
					return err
				}
				if _, err := io.CopyN(f, c, size); err != nil {
					fmt.Fprintln(stdout, "...error receiving data")
					return err
				}
				return nil
			}()
			err = answer(h, err)
		default:
			answer(h, syscall.EINVAL)
			err = syscall.EINVAL
		}
		if err != nil {
			return
		}
	}
}
