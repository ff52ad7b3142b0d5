package rsocket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
)

// rsockets' I/O-mapped transfers (riomap, riowrite, riounmap), as
// riostream runs them:
//
//   - Each side offers the other a table of mappings, target_iomap_size
//     entries (rs_conn_data's byte 7, in rsockets' 8-bit scale) of struct
//     rs_iomap (u64 offset, then an rs_sge: u64 address, u32 rkey, u32
//     length; 24 bytes, little-endian), right after its target SGL in the
//     same registered buffer.
//   - riomap registers memory for remote writes and gives it an offset;
//     the next rsend or riowrite writes its rs_iomap into the peer's table
//     at the mapping's index, as an RDMA WRITE with immediate (operation
//     6, IOMAP_SGL, with the index), which takes a credit.
//   - riowrite sends bytes to an offset of the peer's: plain RDMA WRITEs
//     (no immediate, no credit, nothing the peer's CPU sees) into the
//     memory of the peer's mapping that holds the offset. The peer learns
//     of them by watching its memory.
//   - riounmap deregisters the memory and frees the index; the peer is not
//     told.

// iomapLen is struct rs_iomap's size.
const iomapLen = 24

// valueToScale and scaleToValue are rsocket.c's rs_value_to_scale and
// rs_scale_to_value in 8 bits: values up to 128 as they are, larger ones
// as a multiple of 256.
func valueToScale(v int) int {
	if v <= 1<<7 {
		return v
	}
	return 1<<7 | v>>8
}

func scaleToValue(v int) int {
	if v <= 1<<7 {
		return v
	}
	return (v &^ (1 << 7)) << 8
}

// ErrNoIOMap is IOWrite's error for an offset no mapping of the peer's
// holds, and IOMap's when the peer's table has no free entry.
var ErrNoIOMap = errors.New("rsocket: no I/O mapping")

// IOMap is memory the peer may write with IOWrite, at offsets from
// Offset on (riomap with PROT_WRITE). The program reads what arrived with
// ReadAt or Peek: the memory is the device's to write, not a slice to
// read while packets land in it.
type IOMap struct {
	c      *Conn
	mr     *mr.MR
	offset int64
	index  int // in the peer's table
}

// IOMap registers size bytes for the peer's IOWrites at offset (riomap;
// an offset of -1 maps at the memory's address) and returns the mapping.
// Its entry goes to the peer's table with the next Write or IOWrite, as
// rsockets sends it. It fails with ErrNoIOMap when the peer's table (its
// IOMapSize) has no free entry.
func (c *Conn) IOMap(size int, offset int64) (*IOMap, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	index := -1
	for i, m := range c.iomaps {
		if m == nil {
			index = i
			break
		}
	}
	if index < 0 {
		return nil, fmt.Errorf("%w: the peer's table has %d entries, all in use", ErrNoIOMap, len(c.iomaps))
	}
	region, err := c.dev.RegMR(c.pd, make([]byte, size), mr.LocalWrite|mr.RemoteWrite)
	if err != nil {
		return nil, err
	}
	if offset == -1 {
		offset = int64(region.IOVA())
	}
	m := &IOMap{c: c, mr: region, offset: offset, index: index}
	c.iomaps[index] = m
	c.iomapQueue = append(c.iomapQueue, m)
	return m, nil
}

// Offset returns the offset the peer's IOWrites name the mapping's first
// byte by.
func (m *IOMap) Offset() int64 { return m.offset }

// Len returns the mapping's size.
func (m *IOMap) Len() int { return int(m.mr.Len()) }

// ReadAt reads the mapping's bytes from off (relative to its start).
func (m *IOMap) ReadAt(p []byte, off int64) (int, error) {
	return m.access(m.mr.ReadAt, p, off)
}

// WriteAt writes the mapping's bytes from off, as the program writes its
// own memory.
func (m *IOMap) WriteAt(p []byte, off int64) (int, error) {
	return m.access(m.mr.WriteAt, p, off)
}

// Peek reads the byte at off as a program polling the memory does: never
// in the middle of a packet's placement (mr.MR.Peek).
func (m *IOMap) Peek(off int64) (byte, error) {
	var b [1]byte
	_, err := m.access(m.mr.Peek, b[:], off)
	return b[0], err
}

// access runs op (one of the region's copies) on p at off, relative to
// the mapping's start: io.EOF for a range outside the mapping.
func (m *IOMap) access(op func(iova uint64, p []byte) error, p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(m.mr.Len()) {
		return 0, io.EOF
	}
	if err := op(m.mr.IOVA()+uint64(off), p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// spinTime is how long Wait polls the device before it sleeps: far
// longer than a round trip, as perftest's latency tests spin.
const spinTime = 5 * time.Millisecond

// Wait returns once the byte at off is want, as riostream watches the
// last byte of its buffer for a round's marker: it polls the device for a
// while (a program that spins on memory a NIC writes), then sleeps until
// the next write into the mapping. It returns the connection's error, or
// io.EOF, if the connection ends first, and ctx's if ctx does.
func (m *IOMap) Wait(ctx context.Context, off int64, want byte) error {
	c, dev := m.c, m.c.dev
	start := time.Now()
	spinning := true
	for turns := 0; ; turns++ {
		seen := m.mr.Writes() // before the look: a write after it changes the count
		b, err := m.Peek(off)
		if err != nil {
			return err
		}
		if b == want {
			return nil
		}
		if spinning && turns%16 == 15 && time.Since(start) > spinTime {
			spinning = false
			dev.Flush() // nobody polls now: send the ACKs Poll left
		}
		if spinning {
			if !dev.CanPoll() {
				runtime.Gosched()
			} else if !dev.Poll() && turns%32 == 31 {
				runtime.Gosched()
			}
			continue
		}
		if err := c.Err(); err != nil {
			// The peer's writes complete before it disconnects, so its
			// last may have landed since the look above: look again.
			if b, perr := m.Peek(off); perr == nil && b == want {
				return nil
			}
			return err
		}
		// The peer's DREQ ends the sleep too; the next turn's Err says so.
		wctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(c.ctx, cancel)
		m.mr.WaitWrite(wctx, seen)
		stop()
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Close unmaps the memory (riounmap): it is deregistered, and the entry
// in the peer's table is free for the next IOMap. The peer is not told;
// its writes to the mapping fail from now on.
func (m *IOMap) Close() error {
	c := m.c
	c.mu.Lock()
	if m.index < len(c.iomaps) && c.iomaps[m.index] == m {
		c.iomaps[m.index] = nil
	}
	for i, q := range c.iomapQueue {
		if q == m {
			c.iomapQueue = append(c.iomapQueue[:i], c.iomapQueue[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	return m.mr.Deregister()
}

// sendIOMaps writes the mappings not yet sent into the peer's table
// (rs_send_iomaps), each taking a credit; c.mu is held.
func (c *Conn) sendIOMaps() error {
	for len(c.iomapQueue) > 0 {
		if err := c.awaitSend(); err != nil {
			return err
		}
		m := c.iomapQueue[0]
		c.iomapQueue = c.iomapQueue[1:]
		b := make([]byte, iomapLen)
		binary.LittleEndian.PutUint64(b[0:], uint64(m.offset))
		binary.LittleEndian.PutUint64(b[8:], m.mr.IOVA())
		binary.LittleEndian.PutUint32(b[16:], uint32(m.mr.RKey()))
		binary.LittleEndian.PutUint32(b[20:], uint32(m.mr.Len()))
		c.sseqNo++
		c.sqeAvail--
		c.sbufBytesAvail -= iomapLen
		wr := qp.SendWR{WRID: iomapLen, Opcode: qp.WRRDMAWriteWithImm, ImmData: msg(opIOMapSGL, uint32(m.index)),
			RemoteAddr: c.remoteIOMap.addr + uint64(m.index)*iomapLen, RKey: mr.Key(c.remoteIOMap.key)}
		if err := c.post(&wr, b); err != nil {
			c.fail(err)
			return err
		}
	}
	return nil
}

// peerIOMap finds the peer's mapping that holds offset in this side's
// table (rs_find_iomap).
func (c *Conn) peerIOMap(offset int64) (off int64, s sge, ok bool) {
	var b [iomapLen]byte
	for i := range int(c.o.IOMapSize) {
		c.tmr.Peek(c.tmr.IOVA()+uint64(sglSize*sgeLen+i*iomapLen), b[:])
		off := int64(binary.LittleEndian.Uint64(b[0:]))
		s := sge{addr: binary.LittleEndian.Uint64(b[8:]), key: binary.LittleEndian.Uint32(b[16:]), length: binary.LittleEndian.Uint32(b[20:])}
		if offset >= off && offset < off+int64(s.length) {
			return off, s, true
		}
	}
	return 0, sge{}, false
}

// IOWrite writes p to the peer's memory at offset (riowrite): into the
// mapping of the peer's that holds it, as plain RDMA WRITEs the peer's
// program does not see but in its memory, in transfers of growing size
// (2 KiB up to 64 KiB) through the send buffer. It returns how much it
// wrote: all of p, or less with ErrNoIOMap where no mapping of the
// peer's holds the next byte, or the connection's error.
func (c *Conn) IOWrite(p []byte, offset int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.poll()
	if err := c.sendIOMaps(); err != nil {
		return 0, err
	}
	sent, olen := 0, uint32(olapStart)
	var base int64
	var to sge
	for sent < len(p) {
		if to.length == 0 || offset >= base+int64(to.length) {
			var ok bool
			if base, to, ok = c.peerIOMap(offset); !ok {
				return sent, fmt.Errorf("%w of the peer's holds offset %d", ErrNoIOMap, offset)
			}
		}
		if err := c.awaitSend(); err != nil {
			return sent, err
		}
		n := min(nextTransfer(uint32(len(p)-sent), &olen), c.sbufBytesAvail, uint32(base+int64(to.length)-offset))
		c.sqeAvail--
		c.sbufBytesAvail -= n
		wr := qp.SendWR{WRID: uint64(n), Opcode: qp.WRRDMAWrite, RemoteAddr: to.addr + uint64(offset-base), RKey: mr.Key(to.key)}
		if err := c.post(&wr, p[sent:sent+int(n)]); err != nil {
			c.fail(err)
			return sent, err
		}
		sent += int(n)
		offset += int64(n)
	}
	return sent, nil
}

// Err returns nil while the connection is up, and otherwise why it is
// not: the error that ended it, or io.EOF once the peer disconnected or
// Close was called. It processes the completions waiting, as a program
// that watches I/O-mapped memory needs to learn that the peer is gone.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		c.peerGone() // a DREQ with no disconnect message before it
	} else {
		c.poll()
	}
	if c.connected {
		return nil
	}
	return c.endErr(io.EOF)
}
