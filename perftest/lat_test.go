package perftest

import (
	"context"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
)

// A write_lat server must answer the peer's whole WRITE, not its first
// packet. The peer here is as strict as perftest: it waits for exactly the
// next value in its poll byte, and it sends its message in two WRITEs, the
// poll byte in the second, with a pause between them. A server that
// answered early would write its next value during the pause.
func TestWriteLatAnswersTheWholeWrite(t *testing.T) {
	p := Params{Test: WriteLat, Iters: 2, Size: 4 * 1024, MTU: qp.MTU1024, GiveUp: 10 * time.Second}
	client, server, closeAll, err := localPair(&p, mem.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	ctx, stop := p.watch(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { _, err := writeLat(ctx, server, &p, false); served <- err }()

	var seen uint64
	if err := waitWrite(ctx, client, &p, &seen, 1); err != nil {
		t.Fatal(err)
	}
	half := p.Size / 2
	write := func(off, n int) {
		t.Helper()
		sge := []qp.SGE{{Addr: client.MR.IOVA() + uint64(client.slot(1)+off), Length: uint32(n), LKey: client.MR.LKey()}}
		wr := qp.SendWR{Opcode: qp.WRRDMAWrite, SGList: sge, RemoteAddr: client.RemoteAddr + uint64(off), RKey: client.RemoteKey}
		if err := post(client, wr); err != nil {
			t.Fatal(err)
		}
		if err := reap(ctx, client, &p); err != nil {
			t.Fatal(err)
		}
	}
	client.Buf[client.slot(1)+p.Size-1] = 1
	write(0, half)
	time.Sleep(50 * time.Millisecond)
	if b := client.pollByte(); b != 1 {
		t.Fatalf("the server wrote %d after the first half of the client's message", b)
	}
	write(half, p.Size-half)
	if err := waitWrite(ctx, client, &p, &seen, 2); err != nil {
		t.Fatal(err)
	}
	client.Buf[client.slot(1)+p.Size-1] = 2
	write(0, p.Size)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
