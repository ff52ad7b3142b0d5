// Package monotime is the one representation of time inside gorxe's
// device and queue pairs: an 8-byte count of nanoseconds on a monotonic
// clock, as quic-go's internal/monotime. Deadlines, round-trip samples and
// wake times are all Times, so no path converts between time.Time, Unix
// nanoseconds and durations since an epoch.
//
// A Clock reads time.Since its epoch, so under testing/synctest it runs on
// the bubble's fake clock like every other timer.
package monotime

import "time"

// Time is an instant, in nanoseconds since its Clock's epoch. The zero
// Time is "not set": an unarmed deadline.
type Time int64

// Add returns t+d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Sub returns the duration t-u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Before reports whether t is before u.
func (t Time) Before(u Time) bool { return t < u }

// After reports whether t is after u.
func (t Time) After(u Time) bool { return t > u }

// IsZero reports whether t is the zero Time, an unset deadline.
func (t Time) IsZero() bool { return t == 0 }

// SinceEpoch returns t as the time since its Clock's epoch: on a clock
// made by NewClockFrom, the time its source reported.
func (t Time) SinceEpoch() time.Duration { return time.Duration(t - 1) }

// Min returns the earlier of two deadlines, ignoring one that is not set.
func Min(a, b Time) Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a < b:
		return a
	}
	return b
}

// Clock reads the monotonic time since its creation, or another
// source's time (NewClockFrom).
type Clock struct {
	epoch time.Time
	since func() time.Duration // the time since the epoch, if not time.Since's
}

// NewClock returns a clock whose epoch is now.
func NewClock() *Clock { return &Clock{epoch: time.Now()} }

// NewClockFrom returns a clock that reads since, the time since an epoch
// of the caller's: a simulator's virtual time.
func NewClockFrom(since func() time.Duration) *Clock { return &Clock{since: since} }

// Now returns the time on c. It is never the zero Time: the epoch is one
// nanosecond after zero. One monotonic clock read (time.Since) costs about
// half of time.Now, which reads the wall clock too.
func (c *Clock) Now() Time {
	if c.since != nil {
		return Time(c.since()) + 1
	}
	return Time(time.Since(c.epoch)) + 1
}

// Until returns how long from now until t; negative when t has passed.
func (c *Clock) Until(t Time) time.Duration { return t.Sub(c.Now()) }
