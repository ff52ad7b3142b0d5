package scene

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/gorxe/gorxe/explain"
	"github.com/gorxe/gorxe/internal/capture"
	"github.com/gorxe/gorxe/internal/wrap"
	"github.com/gorxe/gorxe/trace"
)

// DefaultSeed is the seed a scene plays with unless told otherwise.
const DefaultSeed = 1

// Result is what a scene played: its capture, the devices' events, the
// program's account and the capture explained.
type Result struct {
	Scene  *Scene
	Seed   uint64
	Pcap   []byte        // pcapng: interface 0 is A's NIC, 1 B's; raw IP, nanosecond timestamps
	Events []trace.Event // both devices', in the order they happened
	Log    []string      // what the program did and checked, stamped with the time
	Report *explain.Report
	// Err is why the scene's checks failed, if they did; the rest of the
	// result shows how it got there.
	Err error
}

// Play plays the scene with seed. The error is one of setting the stage
// up; a scene whose checks fail returns its Result with Err set.
func (s *Scene) Play(seed uint64) (*Result, error) {
	psnA := s.setup.psnA
	st0 := newRand(seed)
	if psnA == 0 {
		psnA = randPSN(st0)
	}
	psnB := randPSN(st0)
	st, err := newStage(seed, s.setup.cc, s.setup.cm, psnA, psnB, s.setup.conn)
	if err != nil {
		return nil, err
	}
	st.rng = st0
	if s.setup.cm {
		st.say("A's QP %#x and B's QP %#x are in RESET: the connection managers, on each NIC's QP 1, will connect them", uint32(st.A.QP.Num()), uint32(st.B.QP.Num()))
	} else {
		st.say("A's QP %#x and B's QP %#x are connected (RTS); A sends from PSN %d, B from PSN %d", uint32(st.A.QP.Num()), uint32(st.B.QP.Num()), st.A.PSN, st.B.PSN)
	}
	res := &Result{Scene: s, Seed: seed}
	res.Err = s.play(st)
	if res.Err == nil {
		res.Err = st.err
	}
	st.idle(time.Millisecond) // what is still in flight lands, in the capture and the events
	st.close()
	if err := st.pcap.Flush(); err != nil {
		return nil, err
	}
	res.Pcap = st.capture.Bytes()
	res.Events = st.events
	res.Log = st.log
	r, err := explain.Read(bytes.NewReader(res.Pcap))
	if err != nil {
		return nil, fmt.Errorf("explaining the scene's own capture: %w", err)
	}
	// The report's times run from its first packet; the devices' from
	// the stage's start.
	for _, e := range res.Events {
		e.Time -= max(st.first, 0)
		r.Events = append(r.Events, e)
	}
	r.Devices = map[string]string{"A": st.A.Addr.String(), "B": st.B.Addr.String()}
	res.Report = r
	return res, nil
}

// WriteText writes the result as "gorxe demo SCENE" prints it: what the
// scene teaches, the program's account, the capture explained and the
// devices' events.
func (r *Result) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	s := r.Scene
	fmt.Fprintf(bw, "gorxe demo %s (seed %d): %s\n\n%s\n\nThe program, on two gorxe NICs, A (10.0.0.1) and B (10.0.0.2), on a simulated switch (10 Gb/s, 5 µs links):\n", s.Name, r.Seed, s.Title, wrap.Text(s.Teaches, 100, 0))
	for _, l := range r.Log {
		fmt.Fprintf(bw, "  %s\n", l)
	}
	fmt.Fprintf(bw, "\nThe packets as they left each NIC, explained (gorxe explain):\n")
	if err := explain.WriteText(bw, r.Report); err != nil {
		return err
	}
	fmt.Fprintf(bw, "\nThe devices' transport events (--trace):\n")
	for _, e := range r.Events {
		fmt.Fprintf(bw, "  %10s  %s qp %#x: %v\n", capture.Seconds(e.Time), e.Device, e.QP, e)
	}
	if r.Err != nil {
		fmt.Fprintf(bw, "\nFAILED: %v\n", r.Err)
	}
	return bw.Flush()
}

// WriteEvents writes the devices' events as JSON Lines.
func (r *Result) WriteEvents(w io.Writer) error {
	bw := bufio.NewWriter(w)
	var b []byte
	for _, e := range r.Events {
		b = e.AppendJSON(b[:0])
		b = append(b, '\n')
		bw.Write(b)
	}
	return bw.Flush()
}
