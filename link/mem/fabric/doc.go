// Package fabric is a model of a RoCE switch in virtual time: the
// congestion point of DCQCN (Zhu et al., SIGCOMM 2015), for a simulator that
// runs gorxe's hosts on one clock.
//
// A Switch has N ports, each a full-duplex link to one host with a line
// rate and a propagation delay. A packet a host sends waits in its NIC's
// transmit queue, is serialized onto the link at the port's rate
// (bytes×8/rate), crosses it in the delay, and is routed by IP
// destination to an egress queue. Each egress queue holds at most
// Config.Buffer bytes and drops a packet that does not fit (tail drop).
// A packet leaving an egress queue is marked ECN CE with the RED
// probability of the bytes left queued behind it, as HPCC's ns-3 model
// marks at dequeue:
//
//	p(q) = 0                              q ≤ Kmin
//	     = Pmax·(q − Kmin)/(Kmax − Kmin)  Kmin < q ≤ Kmax
//	     = 1                              q > Kmax
//
// then serialized and delivered to its host a delay later. Only
// ECN-capable packets (ECT(0) or ECT(1)) are marked; the ICRC does not
// cover the ECN bits, but the IPv4 header checksum does, and is fixed.
//
// With PFC (IEEE 802.1Qbb, one priority) the switch counts the bytes
// each ingress port has queued in any egress queue; above XOFF it sends
// the port's host a pause frame, at or below XON a resume. A frame takes
// the link's delay to arrive; a paused host finishes the packet it is
// serializing and sends no more.
//
// Everything runs on a Clock: a queue of events ordered by (time,
// sequence), so equal times run first come, first served and a run
// depends only on its inputs and Config.Seed, the seed of the marker's
// random numbers. Config.Trace receives one line per event, the same
// bytes for the same run.
//
// # Real gorxe devices in virtual time
//
// RealTime runs a switch on the time package's clock and gives each port
// a link.Link, so that rnic devices, with their real QPs and their real
// DCQCN, talk through it. Inside a testing/synctest bubble that clock is
// the bubble's: it stands still while any goroutine in the bubble can
// run and jumps to the next timer when all are blocked. Every device
// timer (retransmission, pacing, DCQCN's) and every switch event then
// fires at its exact virtual time, and the CPU a device spends costs no
// virtual time at all: a 40 Gb/s port carries WRITEs at 39.5 Gb/s of
// virtual goodput, what its packets' headers leave of the line rate.
//
// The bubble runs the goroutines that are ready at one instant in no
// fixed order, so two devices sending at the same instant would reach
// the switch in either order. RealTime holds what is sent at an instant
// until the clock moves on, then puts it on the switch in the order of
// port, flow and sending; with that, a run with the same seed gives the
// same trace byte for byte (the tests run an incast of real devices
// through PFC twice and compare). What a device does inside one instant
// in an order of its own, such as two of its QPs' timers at the same
// nanosecond, is outside the switch's reach.
//
// Wall time is the price: each packet costs what gorxe's transport
// costs (building, ICRC, copies) plus a few switch events. Sixteen
// devices into one 100 Gb/s port simulate 0.03 to 0.04 s per wall second
// on this project's 2-core machine: 100 ms of them, DCQCN on or off, in
// under 3 s. Outside a bubble RealTime follows the wall clock, with the
// Go timers' resolution, and a run is not repeatable.
//
// A bubble needs a *testing.T (synctest.Test is all Go 1.26 has), so a
// command cannot run one. HostLink is the way without it: a device
// opened on a Loop (rnic.Config.Loop) starts no goroutine and takes its
// clock and its turns from the switch's Clock, and its link hands it
// packets on the Clock's goroutine. Everything then runs on one
// goroutine in the Clock's order, with no staging and no bubble, and
// faster: package sim runs its scenarios so, at about a third of a
// simulated second per wall second for a 40 Gb/s port on this project's
// 2-core machine.
package fabric
