// Package pingpong speaks rdma-core's ibv_rc_pingpong
// (libibverbs/examples/rc_pingpong.c): its out-of-band exchange on TCP
// 18515, a 52-byte "LID:QPN:PSN:GID" message each way and the client's
// "done", and its run, RC SENDs bounced between two QPs, with the lines it
// prints. Either side runs on a gorxe device against the other side run
// by stock ibv_rc_pingpong on kernel rxe or a real RoCE NIC. With
// Params.Type qp.TypeUC it speaks ibv_uc_pingpong (uc_pingpong.c), which
// is the same exchange and run over UC QPs; with qp.TypeUD,
// ibv_ud_pingpong (ud_pingpong.c): the same exchange, the QPN being the UD
// QP's, and the same run with UD SENDs through an address handle to the
// peer, Q_Key 0x11111111, messages of at most the MTU received behind a
// 40-byte GRH area. With Params.NumQP it speaks ibv_srq_pingpong
// (srq_pingpong.c): NumQP RC QPs on each side receiving from one shared
// receive queue, and MaxQP (256) address messages each way, the ones
// beyond NumQP zero.
//
// PROTOCOL.md beside this file describes the exchange and the run, with
// references to the C source.
package pingpong
