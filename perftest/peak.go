package perftest

import "time"

// peakMeter finds a bandwidth test's peak as perftest's print_report_bw
// defines it: the shortest time per message between a post and a later
// completion. perftest stamps every post (tposted, at the count of
// messages posted before it, over all QPs) and every completion
// (tcompleted, at the count completed with it, less one), and takes, over
// every post i and completion j >= i, the least (tcompleted[j] -
// tposted[i]) / (j - i + 1). Messages i to j were all posted after
// tposted[i] and had all completed by tcompleted[j], so the peak can
// never exceed what the wire carried, however many QPs run and however
// the completions bunch up in the CQ.
//
// perftest tries every pair; this finds the same least ratio in n log n
// (see least): a test of many QPs posts hundreds of thousands of messages.
type peakMeter struct {
	start       time.Time
	posts, done []stamp
}

// stamp is one post or completion: the message count it stands at and
// when, since the meter's start.
type stamp struct {
	n int
	t time.Duration
}

// newPeakMeter returns a meter for a run of n messages, posted postList
// at a time and completed about cqMod at a time: room for their stamps.
func newPeakMeter(n, postList, cqMod int, start time.Time) *peakMeter {
	return &peakMeter{start: start, posts: make([]stamp, 0, n/max(postList, 1)+1), done: make([]stamp, 0, n/max(cqMod, 1)+1)}
}

// posted records a post of the messages from number i on (perftest's
// tposted[totscnt], taken before the post).
func (m *peakMeter) posted(i int, now time.Time) {
	m.posts = append(m.posts, stamp{i, now.Sub(m.start)})
}

// completed records that the first n messages have completed (perftest's
// tcompleted[totccnt-1]).
func (m *peakMeter) completed(n int, now time.Time) {
	m.done = append(m.done, stamp{n, now.Sub(m.start)})
}

// mbps returns the peak in MB/s (2^20 bytes) of size-byte messages, or
// 0 when no completion followed a post.
func (m *peakMeter) mbps(size int) float64 {
	per, ok := least(m.posts, m.done)
	if !ok {
		return 0
	}
	if per <= 0 {
		// Stamps closer than the clock resolves: perftest divides by
		// zero cycles too; report no more than the average does.
		return 0
	}
	return float64(size) / per.Seconds() / (1 << 20)
}

// least returns the least (c.t - p.t) / (c.n - p.n) over every post p and
// completion c with p.n < c.n, both lists in increasing order of n (and
// of t). It is the least slope from a post's point (n, t) up to a later
// completion's: for each completion, the post that gives it lies on the
// upper convex hull of the posts before it, where the slope to the
// completion falls and then rises, so a binary search finds it.
func least(posts, done []stamp) (time.Duration, bool) {
	var hull []stamp
	best, found := time.Duration(0), false
	slope := func(p, c stamp) float64 { return float64(c.t-p.t) / float64(c.n-p.n) }
	i := 0
	for _, c := range done {
		for ; i < len(posts) && posts[i].n < c.n; i++ {
			p := posts[i]
			// Keep the hull upper: drop its last point while it lies
			// on or under the line from the one before it to p.
			for len(hull) >= 2 {
				a, b := hull[len(hull)-2], hull[len(hull)-1]
				if float64(b.n-a.n)*float64(p.t-a.t)-float64(b.t-a.t)*float64(p.n-a.n) < 0 {
					break
				}
				hull = hull[:len(hull)-1]
			}
			hull = append(hull, p)
		}
		if len(hull) == 0 {
			continue
		}
		lo, hi := 0, len(hull)-1
		for lo < hi {
			mid := (lo + hi) / 2
			if slope(hull[mid+1], c) < slope(hull[mid], c) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		if s := time.Duration(slope(hull[lo], c)); !found || s < best {
			best, found = s, true
		}
	}
	return best, found
}
