package congestion

// Counters are DCQCN's counters, named as mlx5 names its hardware
// counters (/sys/class/infiniband/mlx5_*/ports/1/hw_counters), so that a
// user who looks there for congestion knows them. A reaction point fills
// the rp_ ones, a notification point the np_ ones; a device adds up its
// QPs' with Add.
type Counters struct {
	NPCNPSent              uint64 // np_cnp_sent: CNPs the NP decided to send
	NPECNMarkedRoCEPackets uint64 // np_ecn_marked_roce_packets: packets that arrived with ECN CE
	RPCNPHandled           uint64 // rp_cnp_handled: CNPs the RP reacted to
	RPCNPIgnored           uint64 // rp_cnp_ignored: CNPs that came with congestion control off
	RateDecreases          uint64 // rate cuts (not an mlx5 counter)
	TimerIncreases         uint64 // rate-increase timer expiries (not an mlx5 counter)
	ByteIncreases          uint64 // byte-counter rate-increase events (not an mlx5 counter)
	NPMarksCoalesced       uint64 // marked packets within min_time_between_cnps of a CNP, given none of their own (not an mlx5 counter)
}

// Add adds o's counts to c.
func (c *Counters) Add(o *Counters) {
	c.NPCNPSent += o.NPCNPSent
	c.NPECNMarkedRoCEPackets += o.NPECNMarkedRoCEPackets
	c.RPCNPHandled += o.RPCNPHandled
	c.RPCNPIgnored += o.RPCNPIgnored
	c.RateDecreases += o.RateDecreases
	c.TimerIncreases += o.TimerIncreases
	c.ByteIncreases += o.ByteIncreases
	c.NPMarksCoalesced += o.NPMarksCoalesced
}

// NamedCounter is one counter with its name.
type NamedCounter struct {
	Name  string
	Value uint64
}

// Named returns the counters by name, mlx5's first in mlx5's order, then
// gorxe's own.
func (c *Counters) Named() []NamedCounter {
	return []NamedCounter{
		{"np_cnp_sent", c.NPCNPSent},
		{"np_ecn_marked_roce_packets", c.NPECNMarkedRoCEPackets},
		{"rp_cnp_handled", c.RPCNPHandled},
		{"rp_cnp_ignored", c.RPCNPIgnored},
		{"rp_rate_decreases", c.RateDecreases},
		{"rp_timer_increases", c.TimerIncreases},
		{"rp_byte_increases", c.ByteIncreases},
		{"np_marks_coalesced", c.NPMarksCoalesced},
	}
}
