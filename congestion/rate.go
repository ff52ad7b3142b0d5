package congestion

import (
	"errors"
	"strconv"
	"strings"
)

// Rate is a data rate in bits per second, as NICs and switches quote
// them. DCQCN's rates (the current rate RC, the target rate RT, the
// increase steps R_AI and R_HAI, the floor) are all Rates.
type Rate uint64

// Common rates.
const (
	BitPerSecond  Rate = 1
	KbitPerSecond Rate = 1e3
	MbitPerSecond Rate = 1e6
	GbitPerSecond Rate = 1e9
)

// String formats r in the largest unit that keeps it exact to six
// decimals, as "40Gb/s", "39.84375Gb/s" or "5Mb/s".
func (r Rate) String() string {
	for _, u := range []struct {
		div  Rate
		name string
	}{{GbitPerSecond, "Gb/s"}, {MbitPerSecond, "Mb/s"}, {KbitPerSecond, "kb/s"}} {
		if r >= u.div && (r%u.div)*1e6%u.div == 0 {
			return strconv.FormatFloat(float64(r)/float64(u.div), 'f', -1, 64) + u.name
		}
	}
	return strconv.FormatUint(uint64(r), 10) + "b/s"
}

// errRateSyntax is ParseRate's error for text that is not a rate.
var errRateSyntax = errors.New("not a rate: want a number and a unit, as 40Gb/s or 5Mb/s")

// ParseRate parses a rate written as a number and a unit: b/s, kb/s,
// Mb/s, Gb/s (or bps, kbps, Mbps, Gbps). A bare number is in def, the
// unit its caller expects (NVIDIA's parameters are in Mb/s). The rate
// must come to a whole number of bits per second.
func ParseRate(s string, def Rate) (Rate, error) {
	num, unit := s, def
	for _, u := range []struct {
		suffix string
		unit   Rate
	}{
		{"Gb/s", GbitPerSecond}, {"Gbps", GbitPerSecond},
		{"Mb/s", MbitPerSecond}, {"Mbps", MbitPerSecond},
		{"kb/s", KbitPerSecond}, {"kbps", KbitPerSecond}, {"Kbps", KbitPerSecond},
		{"b/s", BitPerSecond}, {"bps", BitPerSecond},
	} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, unit = n, u.unit
			break
		}
	}
	num = strings.TrimSpace(num)
	if n, err := strconv.ParseUint(num, 10, 64); err == nil {
		if n > uint64(^Rate(0)/unit) {
			return 0, errors.New("rate " + s + " out of range")
		}
		return Rate(n) * unit, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, errRateSyntax
	}
	v := f * float64(unit)
	if v != float64(uint64(v)) || v >= 1<<63 {
		return 0, errors.New("rate " + s + " is not a whole number of bits per second")
	}
	return Rate(v), nil
}
