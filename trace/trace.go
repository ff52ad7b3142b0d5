// Package trace defines the transport events a gorxe device reports as
// they happen: queue pair state changes, the NAKs its responders send and
// its requesters receive, go-back-N retransmissions, timers firing,
// duplicate requests, receive-not-ready waits, congestion notifications and
// rate changes. They are typed values, not formatted text, in the spirit of
// QUIC's qlog: a program matches on Kind and reads the fields; String
// renders the line gorxe's --trace prints; AppendJSON the JSON Lines record
// that "gorxe demo --events" writes and that "gorxe explain" and its ladder
// diagrams set beside what a capture shows.
//
// An Event is a plain value with no pointers but its strings, which are
// constants at every call site but the rare error's: a device on a loss
// path reports events without allocating.
package trace

import (
	"fmt"
	"strconv"
	"time"
)

// Kind says what happened.
type Kind uint8

// The kinds of event. The comment after each names the fields it sets.
const (
	_ Kind = iota

	// State: the QP moved From -> To (Reason says why when it was not a
	// Modify: a failed work request, a NAK its responder sent, a CQ
	// overrun).
	State

	// Responder events: what a QP does with the requests it receives.

	// NAKSent: the responder refuses the request at PSN with Syndrome
	// (a PSN sequence error when PSN is past Expected, whose NAK names
	// Expected); Reason gives the rule.
	NAKSent
	// RNRNAKSent: no receive is posted for the SEND at PSN; the requester
	// is told to wait Wait.
	RNRNAKSent
	// Duplicate: the request at PSN was executed already (PSN is before
	// Expected); Reason says what the responder does: a READ is replayed
	// from its saved state, an atomic answered with its saved result,
	// anything else acknowledged again.
	Duplicate
	// Dropped: a packet at PSN was dropped without an answer; Reason says
	// why (a UC gap, a bad Q_Key, a ghost response...). On a UC QP it is
	// a message that is dropped: the one the packet belongs to, or the
	// one in progress when the packet, a FIRST or ONLY, came before its
	// LAST.
	Dropped
	// CNPSent: a packet at PSN arrived marked ECN CE and the notification
	// point sent a CNP to the QP DestQP.
	CNPSent

	// Requester events: what a QP does about the answers to its requests.

	// NAKReceived: the peer NAKed PSN with Syndrome.
	NAKReceived
	// RNRNAKReceived: the peer has no receive for PSN; the requester waits
	// Wait before it sends PSN again.
	RNRNAKReceived
	// ImpliedNAK: an answer for a later request (a READ response, an
	// atomic ACK, an ACK past PSN) shows the answers from PSN were lost.
	ImpliedNAK
	// GoBack: the requester sends again from PSN, go-back-N; Reason says
	// what made it, one of the GoBack reasons below. It follows the event
	// of its cause (NAKReceived, ImpliedNAK, Timeout, RNRWaitOver) but
	// for a probe left unanswered, whose second timeout has no event of
	// its own.
	GoBack
	// Timeout: the local ACK timer fired with PSN the oldest unacknowledged.
	Timeout
	// Probe: with no ACK for Wait, the requester resends its last packet,
	// PSN, to learn what the responder has (a tail-loss probe). With a
	// Reason (ProbeConfirm) and no Wait, an answer sent it, not a timer.
	Probe
	// ProbeSpurious: the probe with PSN was not needed: its packet was
	// answered twice, so the first answer was late, not lost. Probes wait
	// at least Wait from now on.
	ProbeSpurious
	// GoBackUndone: during the recovery from a local ACK timeout or an
	// unanswered probe, the responder answered PSN, which the requester
	// had sent before it went back and not since: the packets sent
	// before are arriving, and sending resumes at Expected, after the
	// last of them.
	GoBackUndone
	// RNRWaitOver: the RNR wait ended; sending resumes from PSN.
	RNRWaitOver
	// WRFailed: the work request WRID (Opcode) completed with Status, an
	// rdma-core status name; Reason adds the cause when there is one.
	WRFailed
	// CNPReceived: the reaction point received a CNP; Rate is the QP's
	// rate after it (unchanged when Reason says why it was not cut). A
	// CNP for a QP that does not exist is the device's, with the QP it
	// names.
	CNPReceived
	// RateChange: DCQCN moved the QP's rate to Rate (TargetRate, Alpha).
	RateChange

	// Error: something went wrong that is none of the above (a packet
	// or a CNP that could not be built); Reason says what.
	Error

	kinds
)

var kindNames = [kinds]string{
	State:          "state",
	NAKSent:        "nak_sent",
	RNRNAKSent:     "rnr_nak_sent",
	Duplicate:      "duplicate",
	Dropped:        "dropped",
	CNPSent:        "cnp_sent",
	NAKReceived:    "nak_received",
	RNRNAKReceived: "rnr_nak_received",
	ImpliedNAK:     "implied_nak",
	GoBack:         "go_back",
	Timeout:        "timeout",
	Probe:          "probe",
	ProbeSpurious:  "probe_spurious",
	GoBackUndone:   "go_back_undone",
	RNRWaitOver:    "rnr_wait_over",
	WRFailed:       "wr_failed",
	CNPReceived:    "cnp_received",
	RateChange:     "rate_change",
	Error:          "error",
}

// The syndromes of NAKSent and NAKReceived: the NAK codes (IBTA Vol 1
// Table 45) as the IBTA and rdma-core name them.
const (
	PSNSequenceError       = "PSN sequence error"
	InvalidRequest         = "invalid request"
	RemoteAccessError      = "remote access error"
	RemoteOperationalError = "remote operational error"
	InvalidRDRequest       = "invalid RD request"
)

// The reasons of GoBack: what sent the requester back.
const (
	GoBackNAK        = "NAK"              // a PSN sequence error NAK
	GoBackTimeout    = "timeout"          // the local ACK timer
	GoBackRNR        = "RNR wait over"    // the end of the wait an RNR NAK asked for
	GoBackImpliedNAK = "implied NAK"      // an answer to a later request
	GoBackProbe      = "probe unanswered" // a tail-loss probe's second timeout
)

// ProbeConfirm is the reason of a Probe sent when the responder answered
// one of the few packets resent after a timeout: the answer may be the
// resend's or the original's, and the probe's answer tells which.
const ProbeConfirm = "a resend answered: are the packets sent before it arriving?"

// The reasons of Duplicate: what the responder does with the request.
const (
	DuplicateReplayed = "replayed from the saved READ state" // a READ
	DuplicateAnswered = "answered with the saved result"     // an atomic
	DuplicateAcked    = "acknowledged again"                 // a SEND or an RDMA WRITE
)

// String returns the kind's name in the JSON encoding, such as "nak_sent".
func (k Kind) String() string {
	if k < kinds && kindNames[k] != "" {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind returns the Kind named s, as String names it.
func ParseKind(s string) (Kind, bool) {
	for k, n := range kindNames {
		if n == s && n != "" {
			return Kind(k), true
		}
	}
	return 0, false
}

// MarshalText encodes k as its name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText decodes a name String returns.
func (k *Kind) UnmarshalText(b []byte) error {
	v, ok := ParseKind(string(b))
	if !ok {
		return fmt.Errorf("trace: unknown event kind %q", b)
	}
	*k = v
	return nil
}

// Event is one thing that happened in a device. Which fields a Kind sets
// is listed with it; the rest are zero.
type Event struct {
	Time   time.Duration `json:"time"`             // on the device's clock, since it opened
	Device string        `json:"device,omitempty"` // the device's name
	QP     uint32        `json:"qp"`               // the QP it happened to
	Kind   Kind          `json:"kind"`

	PSN      uint32 `json:"psn"`      // the packet it is about (most kinds)
	Expected uint32 `json:"expected"` // the responder's expected PSN (NAKSent, Duplicate)
	DestQP   uint32 `json:"dest_qp"`  // the QP a CNP goes to (CNPSent)

	From     string `json:"from,omitempty"` // states, as qp.State names them (State)
	To       string `json:"to,omitempty"`
	Syndrome string `json:"syndrome,omitempty"` // a NAK's: PSNSequenceError, InvalidRequest...
	Opcode   string `json:"opcode,omitempty"`   // the packet's or work request's opcode
	WRID     uint64 `json:"wr_id"`
	Status   string `json:"status,omitempty"` // a work completion status (WRFailed)

	Wait       time.Duration `json:"wait"`        // RNRNAKSent, RNRNAKReceived, Probe
	Rate       float64       `json:"rate"`        // bits per second (CNPReceived, RateChange)
	TargetRate float64       `json:"target_rate"` // bits per second
	Alpha      float64       `json:"alpha"`

	Reason string `json:"reason,omitempty"` // why, in a phrase
}

// has reports whether the kind sets the field f.
func (k Kind) has(f field) bool { return kindFields[k]&f != 0 }

type field uint16

const (
	fPSN field = 1 << iota
	fExpected
	fDestQP
	fStates
	fSyndrome
	fOpcode
	fWRID
	fStatus
	fWait
	fRate
)

var kindFields = [kinds]field{
	State:          fStates,
	NAKSent:        fPSN | fExpected | fSyndrome | fOpcode,
	RNRNAKSent:     fPSN | fWait | fOpcode,
	Duplicate:      fPSN | fExpected | fOpcode,
	Dropped:        fPSN | fOpcode,
	CNPSent:        fPSN | fDestQP,
	NAKReceived:    fPSN | fSyndrome,
	RNRNAKReceived: fPSN | fWait,
	ImpliedNAK:     fPSN | fWRID,
	GoBack:         fPSN,
	Timeout:        fPSN,
	Probe:          fPSN | fWait,
	ProbeSpurious:  fPSN | fWait,
	GoBackUndone:   fPSN | fExpected,
	RNRWaitOver:    fPSN,
	WRFailed:       fWRID | fOpcode | fStatus,
	CNPReceived:    fRate,
	RateChange:     fRate,
}

// String renders the event as --trace prints it, after the device and QP:
// "NAK PSN sequence error for RC_SEND_ONLY PSN 12, expected 10".
func (e Event) String() string {
	var b []byte
	b = e.appendText(b)
	return string(b)
}

func (e Event) appendText(b []byte) []byte {
	psn := func(b []byte) []byte { return strconv.AppendUint(b, uint64(e.PSN), 10) }
	switch e.Kind {
	case State:
		b = append(b, "state "...)
		b = append(b, e.From...)
		b = append(b, " -> "...)
		b = append(b, e.To...)
	case NAKSent:
		b = append(b, "NAK "...)
		b = append(b, e.Syndrome...)
		b = append(b, " for "...)
		b = appendOp(b, e.Opcode)
		b = append(b, "PSN "...)
		b = psn(b)
		if e.Expected != e.PSN {
			b = append(b, ", expected "...)
			b = strconv.AppendUint(b, uint64(e.Expected), 10)
		}
	case RNRNAKSent:
		b = append(b, "RNR NAK for "...)
		b = appendOp(b, e.Opcode)
		b = append(b, "PSN "...)
		b = psn(b)
		b = append(b, ": no receive posted, timer "...)
		b = append(b, e.Wait.String()...)
	case Duplicate:
		b = append(b, "duplicate "...)
		b = appendOp(b, e.Opcode)
		b = append(b, "PSN "...)
		b = psn(b)
		b = append(b, ", expected "...)
		b = strconv.AppendUint(b, uint64(e.Expected), 10)
	case Dropped:
		b = append(b, "dropped "...)
		b = appendOp(b, e.Opcode)
		b = append(b, "PSN "...)
		b = psn(b)
	case CNPSent:
		b = append(b, "ECN CE at PSN "...)
		b = psn(b)
		b = append(b, ": CNP to QP 0x"...)
		b = strconv.AppendUint(b, uint64(e.DestQP), 16)
	case NAKReceived:
		b = append(b, "NAK "...)
		b = append(b, e.Syndrome...)
		b = append(b, " received at PSN "...)
		b = psn(b)
	case RNRNAKReceived:
		b = append(b, "RNR NAK at PSN "...)
		b = psn(b)
		b = append(b, ": peer has no receive posted, wait "...)
		b = append(b, e.Wait.String()...)
	case ImpliedNAK:
		b = append(b, "implied NAK: answers to work request "...)
		b = strconv.AppendUint(b, e.WRID, 10)
		b = append(b, " lost from PSN "...)
		b = psn(b)
	case GoBack:
		b = append(b, "go back to PSN "...)
		b = psn(b)
	case Timeout:
		b = append(b, "local ACK timeout at PSN "...)
		b = psn(b)
	case Probe:
		if e.Reason == "" {
			b = append(b, "no ACK for "...)
			b = append(b, e.Wait.String()...)
			b = append(b, ": "...)
		}
		b = append(b, "probing with PSN "...)
		b = psn(b)
	case ProbeSpurious:
		b = append(b, "probe with PSN "...)
		b = psn(b)
		b = append(b, " was not needed (answered twice): probes now wait "...)
		b = append(b, e.Wait.String()...)
	case GoBackUndone:
		b = append(b, "go-back undone: PSN "...)
		b = psn(b)
		b = append(b, " answered before it was sent again; resuming at PSN "...)
		b = strconv.AppendUint(b, uint64(e.Expected), 10)
	case RNRWaitOver:
		b = append(b, "RNR wait over, resending from PSN "...)
		b = psn(b)
	case WRFailed:
		b = append(b, "work request "...)
		b = strconv.AppendUint(b, e.WRID, 10)
		b = append(b, " ("...)
		b = append(b, e.Opcode...)
		b = append(b, ") failed: "...)
		b = append(b, e.Status...)
	case CNPReceived:
		b = appendRates(append(b, "CNP received: "...), &e)
	case RateChange:
		b = appendRates(append(b, "DCQCN "...), &e)
	case Error:
		b = append(b, "error"...)
	default:
		b = append(b, e.Kind.String()...)
	}
	if e.Reason != "" {
		b = append(b, ": "...)
		b = append(b, e.Reason...)
	}
	return b
}

func appendOp(b []byte, op string) []byte {
	if op == "" {
		return b
	}
	b = append(b, op...)
	return append(b, ' ')
}

// appendRates appends DCQCN's state after a CNP or a rate change: "rate
// R, target T, alpha A".
func appendRates(b []byte, e *Event) []byte {
	b = append(b, "rate "...)
	b = appendRate(b, e.Rate)
	b = append(b, ", target "...)
	b = appendRate(b, e.TargetRate)
	b = append(b, ", alpha "...)
	return strconv.AppendFloat(b, e.Alpha, 'f', 3, 64)
}

// appendRate writes bits per second as Gb/s or Mb/s.
func appendRate(b []byte, bps float64) []byte {
	switch {
	case bps >= 1e9:
		b = strconv.AppendFloat(b, bps/1e9, 'f', 2, 64)
		return append(b, " Gb/s"...)
	default:
		b = strconv.AppendFloat(b, bps/1e6, 'f', 2, 64)
		return append(b, " Mb/s"...)
	}
}

// AppendJSON appends the event as one JSON object, without a newline,
// with only the fields its Kind sets: a line of a JSON Lines trace.
//
//	{"time":12345,"device":"A","qp":17,"kind":"nak_sent","psn":12,"expected":10,"syndrome":"PSN sequence error"}
//
// Time and Wait are nanoseconds; Rate and TargetRate bits per second.
func (e Event) AppendJSON(b []byte) []byte {
	b = append(b, `{"time":`...)
	b = strconv.AppendInt(b, int64(e.Time), 10)
	if e.Device != "" {
		b = append(b, `,"device":`...)
		b = appendString(b, e.Device)
	}
	b = append(b, `,"qp":`...)
	b = strconv.AppendUint(b, uint64(e.QP), 10)
	b = append(b, `,"kind":"`...)
	b = append(b, e.Kind.String()...)
	b = append(b, '"')
	k := e.Kind
	if k.has(fPSN) {
		b = append(b, `,"psn":`...)
		b = strconv.AppendUint(b, uint64(e.PSN), 10)
	}
	if k.has(fExpected) {
		b = append(b, `,"expected":`...)
		b = strconv.AppendUint(b, uint64(e.Expected), 10)
	}
	if k.has(fDestQP) {
		b = append(b, `,"dest_qp":`...)
		b = strconv.AppendUint(b, uint64(e.DestQP), 10)
	}
	if k.has(fStates) {
		b = append(b, `,"from":`...)
		b = appendString(b, e.From)
		b = append(b, `,"to":`...)
		b = appendString(b, e.To)
	}
	if k.has(fSyndrome) && e.Syndrome != "" {
		b = append(b, `,"syndrome":`...)
		b = appendString(b, e.Syndrome)
	}
	if k.has(fOpcode) && e.Opcode != "" {
		b = append(b, `,"opcode":`...)
		b = appendString(b, e.Opcode)
	}
	if k.has(fWRID) {
		b = append(b, `,"wr_id":`...)
		b = strconv.AppendUint(b, e.WRID, 10)
	}
	if k.has(fStatus) {
		b = append(b, `,"status":`...)
		b = appendString(b, e.Status)
	}
	if k.has(fWait) {
		b = append(b, `,"wait":`...)
		b = strconv.AppendInt(b, int64(e.Wait), 10)
	}
	if k.has(fRate) {
		b = append(b, `,"rate":`...)
		b = strconv.AppendFloat(b, e.Rate, 'g', -1, 64)
		b = append(b, `,"target_rate":`...)
		b = strconv.AppendFloat(b, e.TargetRate, 'g', -1, 64)
		b = append(b, `,"alpha":`...)
		b = strconv.AppendFloat(b, e.Alpha, 'g', -1, 64)
	}
	if e.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, e.Reason)
	}
	return append(b, '}')
}

// MarshalJSON encodes the event as AppendJSON does.
func (e Event) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil), nil }

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
