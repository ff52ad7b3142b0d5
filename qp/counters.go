package qp

// Counters are a QP's transport counters, named as Linux rxe's hardware
// counters (drivers/infiniband/sw/rxe/rxe_hw_counters.c), so a reader of
// /sys/class/infiniband/rxe0/ports/1/hw_counters knows them.
type Counters struct {
	SentPkts           uint64 // sent_pkts: packets this QP transmitted
	RcvdPkts           uint64 // rcvd_pkts: packets delivered to this QP
	DuplicateRequest   uint64 // duplicate_request: requests with an old PSN, answered again
	OutOfSeqRequest    uint64 // out_of_seq_request: requests past the expected PSN, dropped
	RcvdSeqErr         uint64 // rcvd_seq_err: PSN sequence error NAKs received
	RcvdRNRErr         uint64 // rcvd_rnr_err: RNR NAKs received
	SendRNRErr         uint64 // send_rnr_err: RNR NAKs sent, no receive posted
	CompleterRetryErr  uint64 // completer_retry_err: go-back-N retransmissions started
	RetryExceededErr   uint64 // retry_exceeded_err: retry_cnt exhausted
	RetryRNRExceeded   uint64 // retry_rnr_exceeded_err: rnr_retry exhausted
	AckDeferred        uint64 // ack_deferred: ACKs merged into a later ACK
	SendErr            uint64 // send_err: packets the link failed to send (the device's; a QP's is 0)
	RDMASends          uint64 // rdma_sends: SEND work requests completed, with an error too (rxe counts no WRITE, READ or atomic)
	RDMARecvs          uint64 // rdma_recvs: receive work requests completed successfully (a SEND's, or a WRITE with immediate's)
	RetransmitTimeouts uint64 // local ACK timeouts (not an rxe counter)
	TailProbes         uint64 // tail-loss probes sent (not an rxe counter)
	SpuriousProbes     uint64 // tail-loss probes found not needed: their packet was answered twice (not an rxe counter)
	SpuriousGoBacks    uint64 // go-backs after silence undone: a packet sent before them was answered first (not an rxe counter)
	QKeyViolations     uint64 // UD packets dropped for a wrong Q_Key (ibv_port_attr's qkey_viol_cntr)
	UDDropped          uint64 // UD messages dropped: no receive posted, or too long for it (not an rxe counter)
	OutOfBuffer        uint64 // out_of_buffer: UC messages dropped for want of a receive WQE (mlx5's name; rxe counts none)
	UCDroppedMsgs      uint64 // UC messages a responder dropped: a PSN gap, no receive WQE, a bad rkey or length (not an rxe counter)
}

// Add adds o's counts to c.
func (c *Counters) Add(o *Counters) {
	c.SentPkts += o.SentPkts
	c.RcvdPkts += o.RcvdPkts
	c.DuplicateRequest += o.DuplicateRequest
	c.OutOfSeqRequest += o.OutOfSeqRequest
	c.RcvdSeqErr += o.RcvdSeqErr
	c.RcvdRNRErr += o.RcvdRNRErr
	c.SendRNRErr += o.SendRNRErr
	c.CompleterRetryErr += o.CompleterRetryErr
	c.RetryExceededErr += o.RetryExceededErr
	c.RetryRNRExceeded += o.RetryRNRExceeded
	c.AckDeferred += o.AckDeferred
	c.SendErr += o.SendErr
	c.RDMASends += o.RDMASends
	c.RDMARecvs += o.RDMARecvs
	c.RetransmitTimeouts += o.RetransmitTimeouts
	c.TailProbes += o.TailProbes
	c.SpuriousProbes += o.SpuriousProbes
	c.SpuriousGoBacks += o.SpuriousGoBacks
	c.QKeyViolations += o.QKeyViolations
	c.UDDropped += o.UDDropped
	c.OutOfBuffer += o.OutOfBuffer
	c.UCDroppedMsgs += o.UCDroppedMsgs
}

// Named returns the counters as rxe names them, in rxe's order.
func (c *Counters) Named() []NamedCounter {
	return []NamedCounter{
		{"sent_pkts", c.SentPkts},
		{"rcvd_pkts", c.RcvdPkts},
		{"duplicate_request", c.DuplicateRequest},
		{"out_of_seq_request", c.OutOfSeqRequest},
		{"rcvd_rnr_err", c.RcvdRNRErr},
		{"send_rnr_err", c.SendRNRErr},
		{"rcvd_seq_err", c.RcvdSeqErr},
		{"ack_deferred", c.AckDeferred},
		{"retry_exceeded_err", c.RetryExceededErr},
		{"retry_rnr_exceeded_err", c.RetryRNRExceeded},
		{"completer_retry_err", c.CompleterRetryErr},
		{"send_err", c.SendErr},
		{"link_downed", 0}, // rxe counts its netdev going down; gorxe's links have no such event
		{"rdma_sends", c.RDMASends},
		{"rdma_recvs", c.RDMARecvs},
		{"retransmit_timeouts", c.RetransmitTimeouts},
		{"tail_probes", c.TailProbes},
		{"spurious_probes", c.SpuriousProbes},
		{"spurious_go_backs", c.SpuriousGoBacks},
		{"qkey_violations", c.QKeyViolations},
		{"ud_dropped", c.UDDropped},
		{"out_of_buffer", c.OutOfBuffer},
		{"uc_dropped_msgs", c.UCDroppedMsgs},
	}
}

// NamedCounter is one counter with its rxe name.
type NamedCounter struct {
	Name  string
	Value uint64
}
