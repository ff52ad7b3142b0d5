// Package fabric is a model of a RoCE switch in virtual time: the
// congestion point of DCQCN (SIGCOMM 2015 §3.1), for a simulator that
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
package fabric
