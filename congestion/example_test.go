package congestion_test

import (
	"fmt"
	"time"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/internal/monotime"
)

// A sender's QP with a reaction point, and the receiver's with a
// notification point, on a virtual clock: two marked packets, one CNP
// (the second mark is within 50 µs of the first), one cut, then recovery.
func Example() {
	p := congestion.Paper()
	rp, err := congestion.NewReactionPoint(congestion.Config{Params: p, LineRate: 40 * congestion.GbitPerSecond, Burst: 64 << 10})
	if err != nil {
		panic(err)
	}
	np, err := congestion.NewNotificationPoint(p)
	if err != nil {
		panic(err)
	}
	t0 := monotime.Time(time.Millisecond)
	at := func(us int) monotime.Time { return t0 + monotime.Time(us)*monotime.Time(time.Microsecond) }

	// The receiver gets two packets marked ECN CE.
	for _, us := range []int{0, 10} {
		if np.OnECNMarked(at(us)) {
			rp.OnCNP(at(us + 3)) // the CNP takes 3 µs back to the sender
		}
	}
	fmt.Println("after the CNP:", rp.Rate(), "may send:", rp.HasPacingBudget(at(3)))

	// The sender spends its first burst, and must wait for the next.
	rp.OnPacketSent(at(3), 64<<10)
	fmt.Println("next send in", time.Duration(rp.TimeUntilSend(at(3))-at(3)))

	// Fast recovery, one step per 55 µs of silence.
	for d := rp.Deadline(); d <= at(3+5*55); d = rp.Deadline() {
		rp.Advance(d)
		fmt.Println(time.Duration(d-at(0)), rp.Rate())
	}
	c, rc := np.Counters(), rp.Counters()
	c.Add(&rc)
	for _, n := range c.Named()[:4] {
		fmt.Println(n.Name, n.Value)
	}
	// Output:
	// after the CNP: 20Gb/s may send: true
	// next send in 26.215µs
	// 58µs 30Gb/s
	// 113µs 35Gb/s
	// 168µs 37.5Gb/s
	// 223µs 38.75Gb/s
	// 278µs 39.375Gb/s
	// np_cnp_sent 1
	// np_ecn_marked_roce_packets 2
	// rp_cnp_handled 1
	// rp_cnp_ignored 0
}
