// Package sim runs gorxe's own transport on a simulated RoCE fabric in
// virtual time, to show what DCQCN does: the experiments of the DCQCN
// paper (Zhu et al., SIGCOMM 2015) and of the simulators the field uses
// (Yibo Zhu's ns-3 RDMA model, HPCC's), with real gorxe devices as the
// hosts.
//
// Each host is an rnic.Device, with its real QPs (requester, responder,
// go-back-N) and its real DCQCN (package congestion's reaction and
// notification points), opened on a Loop: it starts no goroutine and
// runs inside events of the network's fabric.Clock, the same clock as the
// switches (package fabric: output-queued, RED/ECN marking on the
// instantaneous queue, tail drop, PFC, random loss). A Flow is a
// long-lived transfer, as ib_write_bw makes one: an RC connection that
// keeps Depth WRITEs of Size bytes posted. A Recorder samples each
// flow's delivered rate and its reaction point's state, and the watched
// queues.
//
// Everything runs on one goroutine in the Clock's order, so a run is a
// function of its Options alone: the same Options, seed included, give
// the same CSV byte for byte. The CPU a device spends costs no virtual
// time: the devices are infinitely fast NICs, and only the links and
// queues take time.
//
// Scenarios names the experiments; gorxe sim runs them from the command
// line and writes their CSV and plots.
package sim
