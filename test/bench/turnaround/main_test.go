package main

import (
	"slices"
	"testing"
	"time"
)

// TestSplitter: each side's turnaround runs from the other side's first
// message to its own first after it; a side's further messages in a row
// (a resend, a multi-packet message) neither start nor end one.
func TestSplitter(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	s := splitter{last: -1}
	for _, m := range []struct{ side, us int }{
		{clientSide, 0},   // the first READ: no turnaround yet
		{server, 100},     // the server's answer: 100
		{clientSide, 130}, // the client's next: 30
		{clientSide, 900}, // a resend of it: nothing
		{server, 1000},    // the answer: 870, from the first copy
		{server, 1001},    // its second packet: nothing
		{clientSide, 1041},
	} {
		s.add(m.side, at(m.us))
	}
	us := time.Microsecond
	if want := []time.Duration{30 * us, 41 * us}; !slices.Equal(s.turns[clientSide], want) {
		t.Errorf("client turnarounds %v, want %v", s.turns[clientSide], want)
	}
	if want := []time.Duration{100 * us, 870 * us}; !slices.Equal(s.turns[server], want) {
		t.Errorf("server turnarounds %v, want %v", s.turns[server], want)
	}
}

// TestFirstAnswer: the server's first packet counts from the client's
// first, with the client packets before it; a server packet before the
// client's first (a stray from before the run) and everything after the
// answer change nothing.
func TestFirstAnswer(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var f firstAnswer
	for _, m := range []struct{ side, ms int }{
		{server, 1},
		{clientSide, 10}, {clientSide, 20}, {clientSide, 40},
		{server, 95},
		{clientSide, 96}, {server, 97},
	} {
		f.add(m.side, at(m.ms))
	}
	if !f.answered || f.wait != 85*time.Millisecond || f.before != 3 {
		t.Errorf("first answer %v after %d client packets (answered %v), want 85ms after 3", f.wait, f.before, f.answered)
	}
	var none firstAnswer
	none.add(clientSide, at(1))
	if none.answered {
		t.Error("a capture with no server packet answered")
	}
}
