package congestion

import (
	"testing"

	"github.com/gorxe/gorxe/internal/monotime"
)

// benchSend is a sender's per-packet work at 100 Gb/s, a 4 KiB packet
// every 328 ns while the pacer lets it: ask, send, count; a CNP every
// cnpEvery of virtual time, if not zero, keeps the flow congested.
func benchSend(b *testing.B, r *ReactionPoint, now, cnpEvery monotime.Time) {
	b.ReportAllocs()
	nextCNP := now
	for b.Loop() {
		now += 328
		if cnpEvery != 0 && now >= nextCNP {
			r.OnCNP(now)
			nextCNP = now + cnpEvery
		}
		if r.HasPacingBudget(now) {
			r.OnPacketSent(now, 4096)
		} else {
			now = r.TimeUntilSend(now)
		}
	}
}

// BenchmarkPerPacketLineRate: no congestion, the pacer lets all through.
func BenchmarkPerPacketLineRate(b *testing.B) {
	benchSend(b, newRP(b, ConnectX(), 100*GbitPerSecond), epoch, 0)
}

// BenchmarkPerPacketRecovered: at the line rate again after a cut; the
// timers and the byte counter run, changing nothing.
func BenchmarkPerPacketRecovered(b *testing.B) {
	r := newRP(b, ConnectX(), 100*GbitPerSecond)
	r.OnCNP(epoch)
	start := epoch + 100_000_000
	r.Advance(start)
	if r.Rate() != 100*GbitPerSecond {
		b.Fatal("not recovered")
	}
	benchSend(b, r, start, 0)
}

// BenchmarkPerPacketPaced: congested, a CNP every 100 µs, paced in
// bursts, with all the timers and the byte counter at work.
func BenchmarkPerPacketPaced(b *testing.B) {
	for _, prof := range []Params{Paper(), ConnectX()} {
		b.Run(prof.Variant.String(), func(b *testing.B) {
			benchSend(b, newRP(b, prof, 100*GbitPerSecond), epoch, 100_000)
		})
	}
}

func BenchmarkOnCNP(b *testing.B) {
	r := newRP(b, ConnectX(), 100*GbitPerSecond)
	b.ReportAllocs()
	now := epoch
	for b.Loop() {
		now += 1000
		r.OnCNP(now)
	}
}

func BenchmarkOnECNMarked(b *testing.B) {
	n, _ := NewNotificationPoint(ConnectX())
	b.ReportAllocs()
	now := epoch
	for b.Loop() {
		now += 100
		n.OnECNMarked(now)
	}
}
