// Package pingpong speaks rdma-core's ibv_rc_pingpong
// (libibverbs/examples/rc_pingpong.c): its out-of-band exchange on TCP
// 18515, a 52-byte "LID:QPN:PSN:GID" message each way and the client's
// "done", and its run, RC SENDs bounced between two QPs, with the lines it
// prints. Either side runs on a gorxe device against the other side run
// by stock ibv_rc_pingpong on kernel rxe or a real RoCE NIC. With
// Params.Type qp.TypeUC it speaks ibv_uc_pingpong (uc_pingpong.c), which
// is the same exchange and run over UC QPs. With Params.NumQP it speaks
// ibv_srq_pingpong (srq_pingpong.c): NumQP RC QPs on each side receiving
// from one shared receive queue, and MaxQP (256) address messages each
// way, the ones beyond NumQP zero.
//
// PROTOCOL.md beside this file describes the exchange and the run, with
// references to the C source.
package pingpong
