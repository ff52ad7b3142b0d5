package rsocket

import (
	"errors"
	"io"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
)

// progress waits for completions and processes them, as rs_process_cq:
// one goroutine waits on the CQ while another waits for it on c.cond.
// c.mu is held on entry and on return.
func (c *Conn) progress() {
	c.updateCredits()
	if c.polling {
		c.cond.Wait()
		return
	}
	c.polling = true
	c.mu.Unlock()
	n, err := c.cq.Wait(c.ctx, c.wcs[:])
	c.mu.Lock()
	c.polling = false
	switch {
	case err == nil:
		c.process(c.wcs[:n])
	case c.ctx.Err() != nil:
		c.peerGone()
	default:
		c.fail(err)
	}
	c.updateCredits()
	c.cond.Broadcast()
}

// peerGone ends the connection once the peer's DREQ has come (c.ctx is
// done): what it sent before is queued, and is processed first; c.mu is
// held.
func (c *Conn) peerGone() {
	c.poll()
	c.connected, c.readable, c.writable = false, false, false
}

// poll processes the completions waiting, without waiting; c.mu is held.
func (c *Conn) poll() {
	if c.polling {
		return // the waiting goroutine processes them
	}
	for {
		n, err := c.cq.Poll(c.wcs[:])
		if err != nil {
			c.fail(err)
			return
		}
		if n == 0 {
			return
		}
		c.process(c.wcs[:n])
	}
}

// fail ends the connection with err; c.mu is held.
func (c *Conn) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	c.connected, c.readable, c.writable = false, false, false
}

// process is rs_poll_cq: receives carry data, credits and control
// messages; send completions return send buffer and queue room.
func (c *Conn) process(wcs []cq.WC) {
	reposts := 0
	for _, wc := range wcs {
		if wc.WRID == wridRecv {
			if wc.Status != cq.StatusSuccess {
				continue // flushed
			}
			reposts++
			if wc.Flags&cq.FlagWithImm == 0 {
				continue
			}
			op, data := wc.ImmData>>29, wc.ImmData&0x1FFFFFFF
			switch op {
			case opSGL:
				c.sseqComp = uint16(data)
			case opCtrl:
				switch data {
				case ctrlDisconnect:
					c.connected, c.readable, c.writable = false, false, false
				case ctrlShutdown:
					if c.writable {
						c.readable = false
					} else {
						c.connected, c.readable = false, false
					}
				}
			case opData:
				// A peer that claims more than the buffer holds breaks
				// the protocol: what it names cannot be in the buffer.
				if c.unread+data > c.o.RBufSize {
					c.fail(errors.New("rsocket: the peer wrote more than the receive buffer holds"))
					return
				}
				if data == 0 {
					// rsend sends no empty message; one would make Read
					// return nothing. It is read at once, its credit
					// given back.
					c.rseqNo++
					continue
				}
				c.unread += data
				c.rmsgs = append(c.rmsgs, rmsg{left: data})
			}
			continue
		}
		if wc.WRID == wridCtrl {
			c.ctrlMaxSeqno++
		} else { // a data write, its length
			c.sqeAvail++
			c.sbufBytesAvail += uint32(wc.WRID)
		}
		if wc.Status != cq.StatusSuccess && c.connected {
			c.fail(errors.New("rsocket: a write failed: " + wc.Status.String()))
		}
	}
	if !c.connected {
		return
	}
	for range reposts {
		if _, err := c.q.PostRecv([]qp.RecvWR{{WRID: wridRecv}}); err != nil {
			c.fail(err)
			return
		}
	}
}

// giveCredits is rs_give_credits: half the receive buffer is free, or
// half the credits are used, and a control message may go.
func (c *Conn) giveCredits() bool {
	return (c.rbufBytesAvail >= c.o.RBufSize/2 || int16(c.rseqNo-c.rseqComp) >= 0) &&
		c.ctrlSeqno != c.ctrlMaxSeqno && c.connected
}

// updateCredits sends the credits due, as rs_update_credits.
func (c *Conn) updateCredits() {
	if c.giveCredits() {
		c.sendCredits()
	}
}

// sendCredits is rs_send_credits: the peer may send up to rseqNo+RQSize;
// with half the receive buffer free, the write names that half too, in
// the next slot of the peer's target SGL.
func (c *Conn) sendCredits() {
	c.ctrlSeqno++
	c.rseqComp = c.rseqNo + c.o.RQSize/2
	imm := msg(opSGL, uint32(c.rseqNo)+uint32(c.o.RQSize))
	wr := qp.SendWR{WRID: wridCtrl, Opcode: qp.WRRDMAWriteWithImm, ImmData: imm}
	half := c.o.RBufSize / 2
	if c.rbufBytesAvail >= half {
		wr.Flags = qp.SendInline
		wr.Inline = encodeSGE(sge{addr: c.rmr.IOVA() + uint64(c.rbufFreeOffset), key: uint32(c.rmr.RKey()), length: half})
		wr.RemoteAddr, wr.RKey = c.remoteSGL.addr+uint64(c.remoteSGE*sgeLen), mr.Key(c.remoteSGL.key)
		c.rbufBytesAvail -= half
		c.rbufFreeOffset += half
		if c.rbufFreeOffset >= c.o.RBufSize {
			c.rbufFreeOffset = 0
		}
		if c.remoteSGE++; uint32(c.remoteSGE) == c.remoteSGL.length {
			c.remoteSGE = 0
		}
	}
	if _, err := c.q.PostSend([]qp.SendWR{wr}); err != nil {
		c.fail(err)
	}
}

// canSend is rs_can_send: room in the send queue and buffer, a credit,
// and room in the peer's current target buffer.
func (c *Conn) canSend() bool {
	return c.sqeAvail > 0 && c.sbufBytesAvail >= sndLowat && c.sseqNo != c.sseqComp &&
		c.target(c.targetSGE).length != 0
}

// Write sends p, as rsend: in writes of growing size (2 KiB up to 64
// KiB), each within the peer's current buffer, waiting for credits and
// buffer room as needed. It returns how much it sent, all of p unless
// the connection ended.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.poll()
	if err := c.sendIOMaps(); err != nil {
		return 0, err
	}
	sent, olen := 0, uint32(olapStart)
	for sent < len(p) {
		c.poll()
		if err := c.awaitSend(); err != nil {
			return sent, err
		}
		t := c.target(c.targetSGE)
		n := min(nextTransfer(uint32(len(p)-sent), &olen), c.sbufBytesAvail, t.length)
		if err := c.writeData(p[sent:sent+int(n)], t); err != nil {
			c.fail(err)
			return sent, err
		}
		sent += int(n)
	}
	return sent, nil
}

// awaitSend waits until a message may go (rs_can_send) and returns nil,
// or the connection's error if it ends first; c.mu is held.
func (c *Conn) awaitSend() error {
	for !c.canSend() && c.writable {
		c.progress()
	}
	if !c.writable {
		return c.endErr(io.ErrClosedPipe)
	}
	return nil
}

// nextTransfer returns how much of left the next write of rsend's or
// riowrite's takes: all of it, or olen, which doubles from 2 KiB up to
// 64 KiB from one write to the next.
func nextTransfer(left uint32, olen *uint32) uint32 {
	if left <= *olen {
		return left
	}
	n := *olen
	if *olen < maxTransfer {
		*olen <<= 1
	}
	return n
}

// writeData is rs_write_data: the target SGE is moved past the write
// before it is posted, and the write goes from the send buffer's ring.
func (c *Conn) writeData(b []byte, t sge) error {
	n := uint32(len(b))
	c.sseqNo++
	c.sqeAvail--
	c.sbufBytesAvail -= n
	next := t
	next.addr += uint64(n)
	next.length -= n
	c.putTarget(c.targetSGE, next)
	if next.length == 0 {
		if c.targetSGE++; c.targetSGE == sglSize {
			c.targetSGE = 0
		}
	}
	wr := qp.SendWR{WRID: uint64(n), Opcode: qp.WRRDMAWriteWithImm, ImmData: msg(opData, n),
		RemoteAddr: t.addr, RKey: mr.Key(t.key)}
	return c.post(&wr, b)
}

// post sends wr with b as its payload: inline if it is small enough, else
// from the send buffer's ring, in one SGE or two where it wraps. Its
// completion gives back the ring's bytes (uint32(wr.WRID) of them, the
// payload's length) and the send queue entry.
func (c *Conn) post(wr *qp.SendWR, b []byte) error {
	n := uint32(len(b))
	if n <= c.o.Inline {
		wr.Flags, wr.Inline = qp.SendInline, b
	} else {
		first := min(n, c.o.SBufSize-c.sbufHead)
		copy(c.sbuf[c.sbufHead:], b[:first])
		wr.SGList = []qp.SGE{{Addr: c.smr.IOVA() + uint64(c.sbufHead), Length: first, LKey: c.smr.LKey()}}
		if first < n {
			copy(c.sbuf, b[first:])
			wr.SGList = append(wr.SGList, qp.SGE{Addr: c.smr.IOVA(), Length: n - first, LKey: c.smr.LKey()})
		}
		c.sbufHead = (c.sbufHead + n) % c.o.SBufSize
	}
	_, err := c.q.PostSend([]qp.SendWR{*wr})
	return err
}

// Read reads what has arrived into p, as rrecv: it waits for the first
// byte, and returns io.EOF once the peer has disconnected or shut its
// writing down and everything it sent has been read.
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		c.poll()
		if len(c.rmsgs) > 0 {
			break
		}
		if !c.readable {
			return 0, c.endErr(io.EOF)
		}
		c.progress()
	}
	read := 0
	for read < len(p) && len(c.rmsgs) > 0 {
		m := &c.rmsgs[0]
		n := min(uint32(len(p)-read), m.left)
		m.left -= n
		c.unread -= n
		if m.left == 0 {
			c.rseqNo++
			c.rmsgs = c.rmsgs[1:]
		}
		for n > 0 {
			k := min(n, c.o.RBufSize-c.rbufOffset)
			c.rmr.ReadAt(c.rmr.IOVA()+uint64(c.rbufOffset), p[read:read+int(k)])
			read += int(k)
			n -= k
			c.rbufBytesAvail += k
			if c.rbufOffset += k; c.rbufOffset == c.o.RBufSize {
				c.rbufOffset = 0
			}
		}
	}
	c.updateCredits()
	return read, nil
}

// endErr is the error a Read or Write of an ended connection returns:
// what failed it, or eof.
func (c *Conn) endErr(eof error) error {
	if c.err != nil && !errors.Is(c.err, cq.ErrClosed) {
		return c.err
	}
	return eof
}

// Close sends a disconnect to the peer, waits for its sends to complete,
// and ends the connection (rclose: the peer gets a DREQ).
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.connected {
		c.readable, c.writable = false, false
		for c.ctrlSeqno == c.ctrlMaxSeqno && c.connected {
			c.progress()
		}
		if c.connected {
			c.postCtrl(ctrlDisconnect)
		}
		// rs_conn_all_sends_done: every data write and control
		// message completed.
		for c.connected && int(c.ctrlMaxSeqno-c.ctrlSeqno)+c.sqeAvail != int(c.o.SQSize) {
			c.progress()
		}
		c.connected = false // no keepalive goes now
	}
	maps := c.iomaps
	c.iomaps, c.iomapQueue = nil, nil
	c.mu.Unlock()
	c.cancel()
	err := c.conn.Close()
	for _, m := range maps { // rs_free_iomappings
		if m != nil {
			m.mr.Deregister()
		}
	}
	return err
}

// postCtrl sends the control message ctrl (a zero-length WRITE with
// immediate, operation 7); c.mu is held and a control message may go.
func (c *Conn) postCtrl(ctrl uint32) {
	c.ctrlSeqno++
	if _, err := c.q.PostSend([]qp.SendWR{{WRID: wridCtrl, Opcode: qp.WRRDMAWriteWithImm, ImmData: msg(opCtrl, ctrl)}}); err != nil {
		c.fail(err)
	}
}
