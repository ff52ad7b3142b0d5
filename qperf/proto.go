// Package qperf speaks the RDMA tests of qperf (github.com/linux-rdma/qperf)
// on a gorxe device: either side may be the stock tool on kernel rxe or a
// RoCE NIC, or gorxe.
//
// qperf's client connects to the server's TCP port 19765 and sends a
// request (qperf's REQ: the version, which must match to the minor, the
// test's index in qperf's table, and the test's parameters, each little
// endian). Both sides then open an RC QP: on RoCE with rdma_cm (-cm1), to
// a port the server chose and sent as four bytes; they trade their
// buffers' addresses and rkeys as 40-byte NODEs, agree to start with a
// "synchronization before test" each way, run for the test's time, and the
// server sends its counters (a 256-byte STAT) from which the client
// reckons and prints the figures. PROTOCOL.md has each message's layout.
// The TCP and UDP tests (tcp_bw ...) run between the two kernels instead,
// on a socket whose port the server sends in place of rdma_cm's.
package qperf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// qperf's version: a peer whose major or minor differs is refused, as
// qperf refuses it ("upgrade qperf on client from ...").
const (
	VerMajor = 0
	VerMinor = 4
	VerInc   = 11
)

// DefaultPort is qperf's TCP listen port (-lp).
const DefaultPort = 19765

// Sizes of qperf's messages on the TCP connection: sizeof the C structs,
// padding included (a NODE's 36 bytes of fields travel in 40, a STAT's
// 252 in 256).
const (
	reqLen  = 200
	verLen  = 6 // the version fields, read before the rest of a REQ
	nodeLen = 40
	statLen = 256
	confLen = 4 * strLen
	strLen  = 64 // STRSIZE
)

// Tests are qperf's test names in the order of its Tests table, whose
// index a request carries; built with RDMA, without XRC, as distributions
// build it.
var Tests = []string{
	"conf", "quit",
	"rds_bw", "rds_lat", "sctp_bw", "sctp_lat", "sdp_bw", "sdp_lat",
	"tcp_bw", "tcp_lat", "udp_bw", "udp_lat",
	"rc_bi_bw", "rc_bw", "rc_compare_swap_mr", "rc_fetch_add_mr", "rc_lat",
	"rc_rdma_read_bw", "rc_rdma_read_lat", "rc_rdma_write_bw", "rc_rdma_write_lat", "rc_rdma_write_poll_lat",
	"uc_bi_bw", "uc_bw", "uc_lat", "uc_rdma_write_bw", "uc_rdma_write_lat", "uc_rdma_write_poll_lat",
	"ud_bi_bw", "ud_bw", "ud_lat",
	"ver_rc_compare_swap", "ver_rc_fetch_add",
}

// testIndex returns the index of the test called name, or -1.
func testIndex(name string) int {
	for i, t := range Tests {
		if t == name {
			return i
		}
	}
	return -1
}

// Request is qperf's REQ: what the client asks the server to run, with
// the server's side of each parameter.
type Request struct {
	VerMaj, VerMin, VerInc uint16
	Index                  uint16 // into Tests
	AccessRecv             uint32 // touch the data received
	Affinity               uint32 // CPU to run on, plus one; 0 for any
	AltPort                uint32
	Flip                   uint32 // swap sender and receiver (socket tests)
	MsgSize                uint32
	MTUSize                uint32 // path MTU without rdma_cm
	NoMsgs                 uint32 // messages to send; 0 runs for Time
	PollMode               uint32 // poll the CQ rather than wait for events
	Port                   uint32 // the socket tests' port
	RdAtomic               uint32 // READs and atomics outstanding
	SL                     uint32
	SockBufSize            uint32
	SrcPathBits            uint32
	Time                   uint32 // seconds
	Timeout                uint32 // seconds a message may take
	UseCM                  uint32 // connect with rdma_cm
	ID                     string // the device (and port) to use
	StaticRate             string
}

// le writes and reads qperf's encoding: each integer little endian, in
// as many bytes as its C type has (enc_int, dec_int).
type le struct {
	b   []byte
	off int
}

func (e *le) u16(v uint16) { binary.LittleEndian.PutUint16(e.b[e.off:], v); e.off += 2 }
func (e *le) u32(v uint32) { binary.LittleEndian.PutUint32(e.b[e.off:], v); e.off += 4 }
func (e *le) u64(v uint64) { binary.LittleEndian.PutUint64(e.b[e.off:], v); e.off += 8 }
func (e *le) str(s string, n int) {
	copy(e.b[e.off:e.off+n-1], s) // the last byte stays NUL
	e.off += n
}
func (e *le) get16() uint16 { v := binary.LittleEndian.Uint16(e.b[e.off:]); e.off += 2; return v }
func (e *le) get32() uint32 { v := binary.LittleEndian.Uint32(e.b[e.off:]); e.off += 4; return v }
func (e *le) get64() uint64 { v := binary.LittleEndian.Uint64(e.b[e.off:]); e.off += 8; return v }
func (e *le) getStr(n int) string {
	s := e.b[e.off : e.off+n]
	e.off += n
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s)
}

// u32s are the request's 32-bit fields in the order qperf encodes them.
func (r *Request) u32s() []*uint32 {
	return []*uint32{&r.AccessRecv, &r.Affinity, &r.AltPort, &r.Flip, &r.MsgSize, &r.MTUSize, &r.NoMsgs,
		&r.PollMode, &r.Port, &r.RdAtomic, &r.SL, &r.SockBufSize, &r.SrcPathBits, &r.Time, &r.Timeout, &r.UseCM}
}

// Marshal returns the request as qperf sends it: 200 bytes.
func (r *Request) Marshal() []byte {
	e := le{b: make([]byte, reqLen)}
	e.u16(r.VerMaj)
	e.u16(r.VerMin)
	e.u16(r.VerInc)
	e.u16(r.Index)
	for _, p := range r.u32s() {
		e.u32(*p)
	}
	e.str(r.ID, strLen)
	e.str(r.StaticRate, strLen)
	return e.b
}

// ErrVersion is the error of a request from a qperf of another version.
var ErrVersion = errors.New("qperf: version mismatch")

// parseVersion reads a request's first six bytes. A peer of another
// major or minor version is refused with qperf's words, naming the side
// to upgrade.
func parseVersion(b []byte, r *Request) error {
	e := le{b: b}
	r.VerMaj, r.VerMin, r.VerInc = e.get16(), e.get16(), e.get16()
	if r.VerMaj == VerMajor && r.VerMin == VerMinor {
		return nil
	}
	lo, hi, low := [3]uint16{VerMajor, VerMinor, VerInc}, [3]uint16{r.VerMaj, r.VerMin, r.VerInc}, "server"
	if lo[0] > hi[0] || lo[0] == hi[0] && lo[1] > hi[1] {
		lo, hi, low = hi, lo, "client"
	}
	return versionError(fmt.Sprintf("upgrade qperf on %s from %d.%d.%d to %d.%d.%d", low, lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]))
}

// versionError is ErrVersion with qperf's words.
type versionError string

func (e versionError) Error() string        { return string(e) }
func (e versionError) Is(target error) bool { return target == ErrVersion }

// parseData reads the rest of a request, the 194 bytes after the version.
func parseData(b []byte, r *Request) {
	e := le{b: b}
	r.Index = e.get16()
	for _, p := range r.u32s() {
		*p = e.get32()
	}
	r.ID = e.getStr(strLen)
	r.StaticRate = e.getStr(strLen)
}

// checkLen refuses a message of the wrong length: the parsers below read
// fixed offsets.
func checkLen(what string, b []byte, n int) error {
	if len(b) != n {
		return fmt.Errorf("qperf: a %s is %d bytes, not %d", what, n, len(b))
	}
	return nil
}

// ParseRequest reads a whole request.
func ParseRequest(b []byte) (Request, error) {
	var r Request
	if err := checkLen("request", b, reqLen); err != nil {
		return r, err
	}
	if err := parseVersion(b[:verLen], &r); err != nil {
		return r, err
	}
	parseData(b[verLen:], &r)
	return r, nil
}

// Node is qperf's NODE: what each side tells the other of its QP and
// buffer. With rdma_cm only VAddr, RKey and RdAtomic mean anything.
type Node struct {
	VAddr    uint64
	LID      uint32
	QPN      uint32
	PSN      uint32
	SRQN     uint32
	RKey     uint32
	AltLID   uint32
	RdAtomic uint32
}

// Marshal returns the node as qperf sends it: 36 bytes of fields in 40.
func (n *Node) Marshal() []byte {
	e := le{b: make([]byte, nodeLen)}
	e.u64(n.VAddr)
	for _, v := range []uint32{n.LID, n.QPN, n.PSN, n.SRQN, n.RKey, n.AltLID, n.RdAtomic} {
		e.u32(v)
	}
	return e.b
}

// ParseNode reads a node.
func ParseNode(b []byte) (Node, error) {
	if err := checkLen("node", b, nodeLen); err != nil {
		return Node{}, err
	}
	e := le{b: b}
	n := Node{VAddr: e.get64()}
	for _, p := range []*uint32{&n.LID, &n.QPN, &n.PSN, &n.SRQN, &n.RKey, &n.AltLID, &n.RdAtomic} {
		*p = e.get32()
	}
	return n, nil
}

// The CPU times a STAT holds, as /proc/stat's "cpu" line has them after
// the real time (TIME_INDEX).
const (
	tReal = iota
	tUser
	tNice
	tKernel
	tIdle
	tIOWait
	tIRQ
	tSoftIRQ
	tSteal
	tN
)

// UStat counts one direction's traffic (qperf's USTAT).
type UStat struct {
	Bytes, Msgs, Errs uint64
}

func (u *UStat) add(o UStat) {
	u.Bytes += o.Bytes
	u.Msgs += o.Msgs
	u.Errs += o.Errs
}

// Stat is qperf's STAT: one side's counters and clock readings, which the
// server sends the client at the end of a test.
type Stat struct {
	CPUs, Ticks, MaxCQEs uint32
	Start, End           [tN]uint64 // clock ticks: real time, then CPU times
	S, R                 UStat      // this side's sends and receives
	RemS, RemR           UStat      // the other side's, as this side saw them
}

// Marshal returns the stat as qperf sends it: 252 bytes in 256.
func (s *Stat) Marshal() []byte {
	e := le{b: make([]byte, statLen)}
	e.u32(s.CPUs)
	e.u32(s.Ticks)
	e.u32(s.MaxCQEs)
	for _, v := range s.Start {
		e.u64(v)
	}
	for _, v := range s.End {
		e.u64(v)
	}
	for _, u := range []UStat{s.S, s.R, s.RemS, s.RemR} {
		e.u64(u.Bytes)
		e.u64(u.Msgs)
		e.u64(u.Errs)
	}
	return e.b
}

// ParseStat reads a stat.
func ParseStat(b []byte) (Stat, error) {
	if err := checkLen("stat", b, statLen); err != nil {
		return Stat{}, err
	}
	e := le{b: b}
	s := Stat{CPUs: e.get32(), Ticks: e.get32(), MaxCQEs: e.get32()}
	for i := range s.Start {
		s.Start[i] = e.get64()
	}
	for i := range s.End {
		s.End[i] = e.get64()
	}
	for _, u := range []*UStat{&s.S, &s.R, &s.RemS, &s.RemR} {
		u.Bytes, u.Msgs, u.Errs = e.get64(), e.get64(), e.get64()
	}
	return s, nil
}

// Conf is qperf's CONF, the answer to the conf test: four NUL-padded
// strings of 64 bytes.
type Conf struct {
	Node, CPU, OS, Qperf string
}

// Marshal returns the conf as qperf sends it.
func (c *Conf) Marshal() []byte {
	e := le{b: make([]byte, confLen)}
	for _, s := range []string{c.Node, c.CPU, c.OS, c.Qperf} {
		e.str(s, strLen)
	}
	return e.b
}

// ParseConf reads a conf.
func ParseConf(b []byte) (Conf, error) {
	if err := checkLen("conf", b, confLen); err != nil {
		return Conf{}, err
	}
	e := le{b: b}
	return Conf{Node: e.getStr(strLen), CPU: e.getStr(strLen), OS: e.getStr(strLen), Qperf: e.getStr(strLen)}, nil
}
