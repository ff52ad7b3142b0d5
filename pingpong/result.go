package pingpong

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// Result is what one side of a run measured, as rc_pingpong reports it.
type Result struct {
	Local, Remote Dest
	Size          int           // bytes in each message
	Iters         int           // messages each way
	Elapsed       time.Duration // from the first send to the last completion
	// BadPages lists, with Params.Check, the pages of the received
	// message that differ from what the client sent (see Params.Check);
	// nil when all arrived intact.
	BadPages []int
}

// Bytes returns the bytes the run moved both ways: size x iters x 2.
func (r *Result) Bytes() int64 { return int64(r.Size) * int64(r.Iters) * 2 }

// usec returns the elapsed time as rc_pingpong holds it: whole
// microseconds (gettimeofday) in a C float.
func (r *Result) usec() float32 { return float32(r.Elapsed.Microseconds()) }

// Seconds returns the elapsed time in seconds, as printed.
func (r *Result) Seconds() float64 { return float64(r.usec()) / 1e6 }

// MbitPerSec returns the bandwidth both ways, bytes x 8 / microseconds.
func (r *Result) MbitPerSec() float64 { return float64(r.Bytes()) * 8 / float64(r.usec()) }

// UsecPerIter returns the microseconds per round trip. rc_pingpong
// divides a float by an unsigned int, in single precision.
func (r *Result) UsecPerIter() float64 { return float64(r.usec() / float32(r.Iters)) }

// WriteReport writes the two lines rc_pingpong prints at the end:
//
//	8192000 bytes in 0.01 seconds = 5308.71 Mbit/sec
//	1000 iters in 0.01 seconds = 12.35 usec/iter
func (r *Result) WriteReport(w io.Writer) error {
	_, err := fmt.Fprintf(w, "%d bytes in %s seconds = %s Mbit/sec\n%d iters in %s seconds = %s usec/iter\n",
		r.Bytes(), cfloat(r.Seconds()), cfloat(r.MbitPerSec()),
		r.Iters, cfloat(r.Seconds()), cfloat(r.UsecPerIter()))
	return err
}

// WriteBadPages writes rc_pingpong's line for each page in
// r.BadPages: "invalid data in page N".
func (r *Result) WriteBadPages(w io.Writer) error {
	for _, p := range r.BadPages {
		if _, err := fmt.Fprintf(w, "invalid data in page %d\n", p); err != nil {
			return err
		}
	}
	return nil
}

// cfloat formats v as glibc's printf("%.2f") does: Go's %.2f rounds the
// same exact binary value the same way, but spells infinities and NaNs
// "+Inf" and "NaN" where glibc writes "inf" and "nan" (with the sign bit,
// "-nan": the NaN an x86 division 0/0 makes).
func cfloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case math.IsNaN(v) && math.Signbit(v):
		return "-nan"
	case math.IsNaN(v):
		return "nan"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// WriteAddress writes rc_pingpong's line for a side's address, which
// says "local" or "remote":
//
//	local address:  LID 0x0000, QPN 0x000011, PSN 0x3a5e21, GID ::ffff:10.9.0.1
func WriteAddress(w io.Writer, which string, d Dest) error {
	return writeAddress(w, which, ",", d)
}

// writeUDLocalAddress is WriteAddress as ud_pingpong prints its local
// address, with a colon before the GID where the remote line has a comma:
//
//	local address:  LID 0x0000, QPN 0x000011, PSN 0x3a5e21: GID ::ffff:10.9.0.1
func writeUDLocalAddress(w io.Writer, which string, d Dest) error {
	return writeAddress(w, which, ":", d)
}

func writeAddress(w io.Writer, which, sep string, d Dest) error {
	label := which + " address:"
	_, err := fmt.Fprintf(w, "  %-16sLID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
		label, d.LID, uint32(d.QPN), uint32(d.PSN), sep, FormatGID(d.GID))
	return err
}
