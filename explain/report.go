package explain

import (
	"time"

	"github.com/gorxe/gorxe/trace"
)

// Report is what explain makes of a capture: every RoCE packet with its
// sentence, the connections they belong to, and the events it inferred.
// Its JSON encoding is what "gorxe explain --json" prints and what the
// ladder diagram (WriteHTML) embeds.
type Report struct {
	// Lanes are the endpoints, one per IP address that sent or received
	// a RoCE packet, in the order they first appear.
	Lanes   []string     `json:"lanes"`
	Packets []Packet     `json:"packets"`
	Conns   []Connection `json:"connections"`
	// Events are the transport events of the devices that made the
	// capture, when they are known (gorxe demo records them); explain
	// infers its own, per packet, in Packet.Events.
	Events []trace.Event `json:"device_events,omitempty"`
	// Devices gives the address of each device Events names, so that the
	// ladder diagram can put a device's events on its lane: its QP numbers
	// alone may not tell which end it is (two devices both have QP 0x11).
	Devices map[string]string `json:"devices,omitempty"`
	// Counts are decode's: RoCE packets, other frames, bad ICRCs,
	// malformed packets.
	Counts Counts `json:"counts"`
}

// Counts are the capture's frames by kind.
type Counts struct {
	RoCE      int `json:"roce_packets"`
	Other     int `json:"other_frames"`
	BadICRC   int `json:"bad_icrc"`
	Malformed int `json:"malformed"`
	Cut       int `json:"cut_short,omitempty"`  // cut short by the capture's snap length, headers read
	Unread    int `json:"cut_unread,omitempty"` // cut too short to read
	// Twice are the packets the capture saw a second time (on a second
	// interface), left out of the model.
	Twice int `json:"captured_twice,omitempty"`
	// Elsewhere counts, by UDP port, the RoCE v2 packets the capture has
	// on other ports than the one read (another --roce-port's).
	Elsewhere map[uint16]int `json:"roce_elsewhere,omitempty"`
	// V1 counts the RoCE v1 frames (EtherType 0x8915) among the other
	// frames: the model reads RoCE v2 only.
	V1 int `json:"roce_v1_frames,omitempty"`
}

// Packet is one RoCE packet of the capture and what it did.
type Packet struct {
	Index  int           `json:"index"` // 1-based among the capture's RoCE packets, as decode numbers them
	Time   time.Duration `json:"time"`  // since the capture's first frame
	Src    string        `json:"src"`   // source address: a lane
	Dst    string        `json:"dst"`
	Opcode string        `json:"opcode"` // as decode names it: "RC_RDMA_WRITE_FIRST", "CNP"
	DestQP uint32        `json:"dest_qp"`
	PSN    uint32        `json:"psn"`
	// Fields is the rest of decode's line for the packet: flags, the
	// extended headers, payload length, ICRC.
	Fields string `json:"fields"`
	// Conn is the index in Report.Conns of the connection the packet
	// belongs to, or -1.
	Conn int `json:"conn"`
	// Text is the packet explained, in one or two plain sentences.
	Text string `json:"text"`
	// Anomaly is empty for a packet that is part of a transfer going as
	// it should, and otherwise a short tag: "nak", "rnr", "retransmission",
	// "out of sequence", "duplicate", "lost", "timeout", "cnp", "error",
	// "bad icrc", "malformed", "cut" (the capture kept too little of it to
	// read it), "captured twice" (a second sighting of a packet at one
	// capture point, left out of the model). The ladder's "next anomaly" jumps between
	// them.
	Anomaly string `json:"anomaly,omitempty"`
	// Lost says the capture shows the packet sent and the peer's answers
	// show it never arrived.
	Lost bool `json:"lost,omitempty"`
	// Events are what the packet made the sender or the receiver do, as
	// a device's trace would report it (Time is the packet's).
	Events []trace.Event `json:"events,omitempty"`
	// After is the state of the connection's two ends after the packet:
	// the sender's side first.
	After []EndState `json:"after,omitempty"`

	connSide int  // the sender's index in its connection's ends
	leaving  bool // a leaving sighting of a capture at both ends
}

// EndState is one end of a connection, as the model sees it after a
// packet.
type EndState struct {
	End string `json:"end"` // "10.0.0.1 QP 0x11"
	// RequesterKnown says the end has sent a request, so that its
	// requester's fields mean something; ResponderKnown that it has been
	// sent one, for its responder's.
	RequesterKnown bool `json:"requester_known"`
	ResponderKnown bool `json:"responder_known"`
	// Requester: what the end has sent and what is acknowledged.
	NextPSN     uint32 `json:"next_psn"`    // the PSN of the next new request packet
	Unacked     uint32 `json:"unacked"`     // the oldest PSN not acknowledged
	Outstanding int    `json:"outstanding"` // request packets sent and not acknowledged
	Reads       int    `json:"reads"`       // READs and atomics waiting for their answer
	Recovery    string `json:"recovery,omitempty"`
	// Responder: what the end expects and has completed.
	ExpectedPSN uint32 `json:"expected_psn"`
	MSN         uint32 `json:"msn"`
	NAKState    string `json:"nak_state,omitempty"` // "sequence error NAK sent, waiting for PSN 12"
}

// Connection is one RC, UC or UD conversation: two QPs, each at an
// address, and what passed between them.
type Connection struct {
	Service string  `json:"service"` // "RC", "UC", "UD", "UD multicast", "CM"
	Ends    [2]End  `json:"ends"`
	Summary Summary `json:"summary"`
}

// End is one QP: its address and number (0 when the capture never shows
// a packet addressed to it).
type End struct {
	Addr string `json:"addr"`
	QPN  uint32 `json:"qpn"`
}

// Summary counts a connection's traffic for each of its ends, as a
// sender.
type Summary struct {
	Packets         [2]int            `json:"packets"`
	Messages        [2]int            `json:"messages"` // requests completed by the peer
	Bytes           [2]int64          `json:"bytes"`    // payload of first transmissions
	Retransmissions [2]int            `json:"retransmissions"`
	NAKs            [2]map[string]int `json:"naks"` // by syndrome
	RNRNAKs         [2]int            `json:"rnr_naks"`
	Timeouts        [2]int            `json:"timeouts"` // inferred from a resend after silence
	CNPs            [2]int            `json:"cnps"`
	Duration        time.Duration     `json:"duration"`
	Goodput         [2]float64        `json:"goodput"` // bits per second of first-transmission payload
}
