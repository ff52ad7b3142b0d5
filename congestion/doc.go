// Package congestion is DCQCN, the congestion control RoCE v2 runs with
// (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
// SIGCOMM 2015), as two event-driven types with the clock injected: a
// ReactionPoint per sending QP and a NotificationPoint per receiving QP.
// It imports nothing of gorxe but its time type; the transport plugs it
// in.
//
// # The three points
//
// RoCE networks are usually lossless (PFC pauses a link rather than drop),
// so a flow cannot learn of congestion from loss as TCP does. DCQCN splits
// the job in three:
//
//	sender NIC (RP) ──data──▶ switch (CP) ──data, ECN CE──▶ receiver NIC (NP)
//	      ▲                                                        │
//	      └────────────────────── CNP (BTH opcode 0x81) ◀──────────┘
//
// Each has its part:
//
//   - The congestion point (CP) is a switch's egress queue. It marks
//     packets ECN CE with a probability that grows with the queue (RED:
//     0 below Kmin, up to Pmax at Kmax, 1 above).
//   - The notification point (NP) is the receiving NIC. For a QP whose
//     packets arrive marked it sends a congestion notification packet
//     (CNP) back to the sending QP, at most one per interval.
//   - The reaction point (RP) is the sending NIC. It keeps a rate per QP
//     and paces the QP's packets to it. A CNP cuts the rate; silence lets
//     it climb back.
//
// # The reaction point
//
// The RP keeps a current rate RC, a target rate RT (where it was before
// the cut, roughly) and α, its estimate of how congested the path is.
//
// A cut sets RT = RC and RC = RC·(1 − α/2): at α = 1 it halves the rate.
// α itself moves like DCTCP's: α = (1 − g)·α + g with a CNP, (1 − g)·α
// every K without one. A path that sends CNPs often keeps α near 1 and
// cuts hard; a rare CNP finds α small and cuts little.
//
// Recovery is QCN's. A timer (every T) and a byte counter (every B bytes
// sent) each count increase events since the last cut. For the first F of
// either kind (fast recovery) RC moves halfway back to RT:
// RC = (RT + RC)/2. After F, additive increase also raises the target,
// RT += R_AI; once both have passed F, hyper increase raises it faster,
// by R_HAI per event. A flow starts at the line rate: DCQCN has no slow
// start.
//
// # Two variants
//
// Paper returns the paper's parameters; ConnectX returns what NVIDIA's
// firmware runs (ConnectX-4 and later), which differs in nearly every
// constant and in a few rules:
//
//	                         paper                   ConnectX firmware
//	α update                 on every CNP, and a     every dce_tcp_rtt (1 µs): up by g if
//	                         decay after K = 55 µs   a CNP came in the period, else down
//	g                        1/256                   5/1024 (dce_tcp_g 1019)
//	α arithmetic             real                    10-bit fixed point, floored
//	cuts                     one per CNP             at most one per rate_reduce_monitor_period (4 µs)
//	RT at a cut              always RT = RC          only if the rate rose since the last cut
//	T, B                     55 µs, 10 MB            300 µs, 2 MB (rpg_byte_reset 32767 × 64 B)
//	F                        5                       1 (rpg_threshold)
//	R_AI, R_HAI              40, 200 Mb/s (at 40G)   5, 50 Mb/s
//	hyper increase           RT += i·R_HAI           RT += R_HAI
//	NP interval              50 µs                   min_time_between_cnps (0 to 4 µs)
//
// The firmware's NP answers marks far more often than the paper's and its
// RP makes up for it by cutting at most once per monitor period. Params
// names every parameter as NVIDIA does (mlxconfig, sysfs, mlx5 debugfs),
// with the paper's symbol in its doc comment; each can be overridden,
// and Set takes them in NVIDIA's units.
//
// # Time
//
// Nothing here reads a clock or starts a goroutine. Every event comes
// with the time it happened (a monotime.Time), and every call first runs,
// in time order, the timers that expired before it: α's period, the rate
// increase timer, a cut waiting for its monitor period to end. The state
// after a call is the same whether the caller looked in every microsecond
// or only now. A real NIC calls in only when it has something to send or
// a CNP arrives; a simulator with a virtual clock can call Advance at
// every Deadline to see the rate's exact course.
//
// # Pacing
//
// The RP's decision is quic-go's: HasPacingBudget(now) says whether the
// QP may send now; TimeUntilSend(now) says when it next may. Below the
// line rate a token bucket holds the QP to RC, and a sender it stops is
// woken when a whole burst (Config.Burst bytes) is due, not for each
// packet, so that a software NIC pays for one timer per burst. At the
// line rate nothing is paced.
//
// # Choices where the sources differ
//
//   - The increase stage is decided on the counts before the event: with
//     T and BC the events of each kind since the last cut, hyper if
//     min(T, BC) > F, additive if max(T, BC) ≥ F, else fast recovery (as
//     isekai's model of the firmware). With F = 5 this gives the paper's
//     five fast recovery steps (uet-htsim agrees; ns3-rdma gives four).
//   - A cut uses α before the CNP's own update (the paper's order, and
//     uet-htsim's; ns3-rdma updates α first).
//   - In the ConnectX variant a CNP outside a monitor period cuts at once
//     with α = initial_alpha_value, as dcqcn.md's 50049 Mb/s vector
//     implies; isekai and HPCC's model run the period as a free-running
//     grid from the first CNP, which delays the first cut.
//   - (RC + RT)/2 rounds up, so that RC reaches RT; isekai floors, and
//     its RC stops 1 Mb/s short of the line.
//   - The timers and the byte counter start with the first CNP.
//   - The NP's deferred CNP at the end of an interval is the paper's rule
//     (uet-htsim); NVIDIA documents none, so the ConnectX variant drops
//     marks within its interval.
//
// # Counters
//
// Counters are named as mlx5 names its hardware counters: np_cnp_sent,
// np_ecn_marked_roce_packets, rp_cnp_handled, rp_cnp_ignored. The zero
// ReactionPoint and NotificationPoint are congestion control off: the
// first counts every CNP as ignored, the second sends none.
package congestion
