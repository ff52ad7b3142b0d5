package qperf

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// measure is what a test's figures are: qperf's MEASURE.
type measure int

const (
	latency measure = iota
	msgRate
	bandwidth
	bandwidthSR
)

// resn is one side's times, reckoned from its stat (RESN).
type resn struct {
	real, cpu                             float64 // seconds
	total, user, intr, idle, kern, iowait float64 // fractions of a CPU
}

func calcNode(s *Stat) resn {
	var r resn
	t := float64(s.End[tReal] - s.Start[tReal])
	if t == 0 || s.Ticks == 0 {
		return r
	}
	d := func(i int) float64 { return float64(s.End[i] - s.Start[i]) }
	r.real = t / float64(s.Ticks)
	var cpu float64
	for i := range tN {
		if i != tReal && i != tIdle {
			cpu += d(i)
		}
	}
	r.cpu = cpu / float64(s.Ticks)
	r.user = (d(tUser) + d(tNice)) / t
	r.intr = (d(tIRQ) + d(tSoftIRQ)) / t
	r.idle = d(tIdle) / t
	r.kern = (d(tKernel) + d(tSteal)) / t
	r.iowait = d(tIOWait) / t
	r.total = r.user + r.intr + r.kern + r.iowait
	return r
}

// results are a test's figures (RES), reckoned from both sides' stats.
type results struct {
	l, r                        resn
	sendBW, recvBW, rate        float64
	sendCost, recvCost, latency float64
}

// calc merges what each side counted of the other's traffic into the
// other's stat, and reckons the figures, as qperf's calc_results.
func calc(l, r *Stat) results {
	l.S.add(r.RemS)
	l.R.add(r.RemR)
	r.S.add(l.RemS)
	r.R.add(l.RemR)
	var res results
	res.l, res.r = calcNode(l), calcNode(r)
	if n := float64(l.R.Msgs + r.R.Msgs); n != 0 {
		res.latency = res.l.real / n
	}
	lt, rt := res.l.real, res.r.real
	mid := (lt + rt) / 2
	if lt == 0 || rt == 0 {
		return res
	}
	pick := func(lv, rv uint64) float64 {
		switch {
		case rv == 0:
			return float64(lv) / lt
		case lv == 0:
			return float64(rv) / rt
		}
		return float64(lv+rv) / mid
	}
	// qperf divides the local count by the remote time where only the
	// local side counted messages, and the other way round: a quirk kept.
	switch {
	case r.R.Msgs == 0:
		res.rate = float64(l.R.Msgs) / rt
	case l.R.Msgs == 0:
		res.rate = float64(r.R.Msgs) / lt
	default:
		res.rate = float64(l.R.Msgs+r.R.Msgs) / mid
	}
	res.sendBW = pick(l.S.Bytes, r.S.Bytes)
	res.recvBW = pick(l.R.Bytes, r.R.Bytes)
	const gB = 1e9
	switch {
	case l.S.Bytes != 0 && l.R.Bytes == 0 && r.S.Bytes == 0:
		res.sendCost = res.l.cpu * gB / float64(l.S.Bytes)
	case r.S.Bytes != 0 && r.R.Bytes == 0 && l.S.Bytes == 0:
		res.sendCost = res.r.cpu * gB / float64(r.S.Bytes)
	}
	switch {
	case r.R.Bytes != 0 && r.S.Bytes == 0 && l.R.Bytes == 0:
		res.recvCost = res.r.cpu * gB / float64(r.R.Bytes)
	case l.R.Bytes != 0 && l.S.Bytes == 0 && r.R.Bytes == 0:
		res.recvCost = res.l.cpu * gB / float64(l.R.Bytes)
	}
	return res
}

// showRow is one line of a test's report.
type showRow struct {
	name, data, unit, altn string
	hasUnit                bool
}

// shower gathers a test's report lines and prints them aligned, as
// qperf's place_* and view_* functions.
type shower struct {
	c    *Command
	rows []showRow
}

// shown reports whether a value of this kind is shown: 'a' always;
// otherwise when positive, at the verbosity its letter asks for.
func (s *shower) shown(kind byte, v float64) bool {
	if kind == 'a' {
		return true
	}
	if v <= 0 {
		return false
	}
	vb := s.c.Verbose
	switch kind {
	case 'd':
		return s.c.Debug
	case 'c':
		return vb.Conf >= 1
	case 's':
		return vb.Stat >= 1
	case 't':
		return vb.Time >= 1
	case 'u':
		return vb.Used >= 1
	case 'C':
		return vb.Conf >= 2
	case 'S':
		return vb.Stat >= 2
	case 'T':
		return vb.Time >= 2
	case 'U':
		return vb.Used >= 2
	}
	return false
}

// scaled divides v by 1000 while it is at least 1000 and a larger unit
// is left, unless -uu.
func (s *shower) scaled(v float64, units []string) (float64, string) {
	n := 0
	if !s.c.UnifyUnits {
		for v >= 1000 && n < len(units)-1 {
			v /= 1000
			n++
		}
	}
	return v, units[n]
}

func (s *shower) val(name, unit string, v float64) {
	s.rows = append(s.rows, showRow{name: name, data: s.commify(formatPrecision(v, s.c.Precision)), unit: unit, hasUnit: true})
}

// formatPrecision writes v with prec significant digits in its integer
// part and fraction together, dropping trailing zeros, as place_val.
func formatPrecision(v float64, prec int) string {
	data := strconv.FormatFloat(v, 'f', 0, 64)
	digits := strings.TrimPrefix(data, "-")
	n := prec - len(digits)
	if n <= 0 {
		return data
	}
	data = strconv.FormatFloat(v, 'f', n, 64)
	data = strings.TrimRight(data, "0")
	return strings.TrimSuffix(data, ".")
}

// commify puts commas between thousands of the number's integer part,
// unless -uu.
func (s *shower) commify(data string) string {
	if s.c.UnifyUnits {
		return data
	}
	end := len(data)
	i := end
	for i > 0 && data[i-1] >= '0' && data[i-1] <= '9' {
		i--
	}
	if i > 0 && data[i-1] == '.' {
		end = i - 1
		i = end
		for i > 0 && data[i-1] >= '0' && data[i-1] <= '9' {
			i--
		}
	}
	digits := data[i:end]
	if len(digits) <= 3 {
		return data
	}
	var b strings.Builder
	for k, d := range digits {
		if k > 0 && (len(digits)-k)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return data[:i] + b.String() + data[end:]
}

func (s *shower) band(kind byte, name string, v float64) {
	if !s.shown(kind, v) {
		return
	}
	units := []string{"bytes/sec", "KB/sec", "MB/sec", "GB/sec", "TB/sec"}
	if s.c.Bits {
		units, v = []string{"bits/sec", "Kb/sec", "Mb/sec", "Gb/sec", "Tb/sec"}, v*8
	}
	v, u := s.scaled(v, units)
	s.val(name, u, v)
}

func (s *shower) rate(kind byte, name string, v float64) {
	if !s.shown(kind, v) {
		return
	}
	v, u := s.scaled(v, []string{"/sec", "K/sec", "M/sec", "G/sec", "T/sec"})
	s.val(name, u, v)
}

func (s *shower) time(kind byte, name string, v float64) {
	v *= 1e9
	if !s.shown(kind, v) {
		return
	}
	v, u := s.scaled(v, []string{"ns", "us", "ms", "sec"})
	s.val(name, u, v)
}

func (s *shower) cost(kind byte, name string, v float64) {
	v *= 1e9
	if !s.shown(kind, v) {
		return
	}
	v, u := s.scaled(v, []string{"ns/GB", "us/GB", "ms/GB", "sec/GB"})
	s.val(name, u, v)
}

func (s *shower) cpus(kind byte, name string, v float64) {
	v *= 100
	if !s.shown(kind, v) {
		return
	}
	s.val(name, "% cpus", v)
}

func (s *shower) long(kind byte, name string, n uint64) {
	v := float64(n)
	if !s.shown(kind, v) {
		return
	}
	unit := ""
	if !s.c.UnifyUnits && v >= 1e6 {
		v, unit = s.scaled(v, []string{"", "thousand", "million", "billion", "trillion"})
	}
	s.val(name, unit, v)
}

// size shows a byte count, as a whole number of KiB, MiB ... where it is
// one, the bytes after it in brackets.
func (s *shower) size(kind byte, name string, n uint64) {
	v := float64(n)
	if !s.shown(kind, v) {
		return
	}
	if !s.c.UnifyUnits {
		if n >= 1024 && n%1024 == 0 {
			val, k, nice := n/1024, 0, true
			units := []string{"KiB", "MiB", "GiB", "TiB"}
			for val >= 1024 && k < len(units)-1 {
				if val%1024 != 0 {
					nice = false
					break
				}
				val /= 1024
				k++
			}
			if nice {
				s.rows = append(s.rows, showRow{name: name, data: s.commify(strconv.FormatUint(val, 10)), unit: units[k],
					hasUnit: true, altn: s.commify(strconv.FormatUint(n, 10))})
				return
			}
		}
	}
	v, u := s.scaled(v, []string{"bytes", "KB", "MB", "GB", "TB"})
	s.val(name, u, v)
}

func (s *shower) str(kind byte, name, v string) {
	if !s.shown(kind, boolFloat(v != "")) {
		return
	}
	s.rows = append(s.rows, showRow{name: name, data: v})
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// flush prints the rows, names and numbers aligned, and forgets them.
func (s *shower) flush(w io.Writer) {
	nameLen, dataLen := 0, 0
	for _, r := range s.rows {
		nameLen = max(nameLen, len(r.name))
		if r.hasUnit {
			dataLen = max(dataLen, len(r.data))
		}
	}
	for _, r := range s.rows {
		fmt.Fprintf(w, "    %-*s", nameLen, r.name)
		if r.hasUnit {
			fmt.Fprintf(w, "  =  %*s %s", dataLen, r.data, r.unit)
		} else {
			fmt.Fprintf(w, "  =  %s", r.data)
		}
		if r.altn != "" {
			fmt.Fprintf(w, " (%s)", r.altn)
		}
		fmt.Fprintln(w)
	}
	s.rows = s.rows[:0]
}

// report adds a test's figures, as qperf's show_results: the measure's
// figures, the parameters used (-vu), the costs (-vt), and each side's
// times and counts.
func (s *shower) report(m measure, l, r *Stat, p *params) {
	res := calc(l, r)
	switch m {
	case latency:
		s.time('a', "latency", res.latency)
		s.rate('s', "msg_rate", res.rate)
	case msgRate:
		s.rate('a', "msg_rate", res.rate)
	case bandwidth:
		s.band('a', "bw", res.recvBW)
		s.rate('s', "msg_rate", res.rate)
	case bandwidthSR:
		s.band('a', "send_bw", res.sendBW)
		s.band('a', "recv_bw", res.recvBW)
		s.rate('s', "msg_rate", res.rate)
	}
	s.used(p)
	s.cost('t', "send_cost", res.sendCost)
	s.cost('t', "recv_cost", res.recvCost)
	s.rest(&res, l, r)
	if s.c.Debug {
		s.debug("l_", l)
		s.debug("r_", r)
	}
}

// used shows the parameters the test read: with -vu those set on the
// command line, with -vvu all of them.
func (s *shower) used(p *params) {
	if s.c.Verbose.Used == 0 {
		return
	}
	for k := range nPar {
		l, r := &p.loc[k], &p.rem[k]
		if !l.inuse && !r.inuse {
			continue
		}
		if s.c.Verbose.Used < 2 && l.setBy == "" && r.setBy == "" {
			continue
		}
		name, kind := parNames[k].name, parNames[k].kind
		show := func(pref string, v *parValue) {
			switch kind {
			case 'l':
				s.long('u', pref+name, uint64(v.n))
			case 'p':
				s.str('u', pref+name, v.s)
			case 's':
				s.size('u', pref+name, uint64(v.n))
			case 't':
				s.time('u', pref+name, float64(v.n))
			}
		}
		if kind == 'p' && l.s == r.s || kind != 'p' && l.n == r.n {
			show("", l)
		} else {
			show("loc_", l)
			show("rem_", r)
		}
	}
}

// rest shows each side's CPU use, times and counts: as sender and
// receiver when one side only sent and the other only received.
func (s *shower) rest(res *results, l, r *Stat) {
	type side struct {
		pref string
		rn   *resn
		st   *Stat
	}
	if !s.c.UnifyNodes {
		var snd, rcv side
		switch {
		case l.S.Bytes != 0 && r.S.Bytes == 0 && r.R.Bytes != 0 && l.R.Bytes == 0:
			snd, rcv = side{"send_", &res.l, l}, side{"recv_", &res.r, r}
		case r.S.Bytes != 0 && l.S.Bytes == 0 && l.R.Bytes != 0 && r.R.Bytes == 0:
			snd, rcv = side{"send_", &res.r, r}, side{"recv_", &res.l, l}
		}
		if snd.st != nil {
			for _, sd := range []side{snd, rcv} {
				s.cpuTimes(sd.pref, sd.rn)
				u := sd.st.S
				if sd.pref == "recv_" {
					u = sd.st.R
				}
				s.long('S', sd.pref+"errors", u.Errs)
				s.size('S', sd.pref+"bytes", u.Bytes)
				s.long('S', sd.pref+"msgs", u.Msgs)
				s.long('S', sd.pref+"max_cqe", uint64(sd.st.MaxCQEs))
			}
			return
		}
	}
	for _, sd := range []side{{"loc_", &res.l, l}, {"rem_", &res.r, r}} {
		s.cpuTimes(sd.pref, sd.rn)
		s.long('S', sd.pref+"send_errors", sd.st.S.Errs)
		s.long('S', sd.pref+"recv_errors", sd.st.R.Errs)
		s.size('S', sd.pref+"send_bytes", sd.st.S.Bytes)
		s.size('S', sd.pref+"recv_bytes", sd.st.R.Bytes)
		s.long('S', sd.pref+"send_msgs", sd.st.S.Msgs)
		s.long('S', sd.pref+"recv_msgs", sd.st.R.Msgs)
		s.long('S', sd.pref+"max_cqe", uint64(sd.st.MaxCQEs))
	}
}

func (s *shower) cpuTimes(pref string, r *resn) {
	s.cpus('t', pref+"cpus_used", r.total)
	s.cpus('T', pref+"cpus_user", r.user)
	s.cpus('T', pref+"cpus_intr", r.intr)
	s.cpus('T', pref+"cpus_kernel", r.kern)
	s.cpus('T', pref+"cpus_iowait", r.iowait)
	s.time('T', pref+"real_time", r.real)
	s.time('T', pref+"cpu_time", r.cpu)
}

// debug shows a side's raw counters, with -D.
func (s *shower) debug(pref string, st *Stat) {
	s.long('d', pref+"no_cpus", uint64(st.CPUs))
	s.long('d', pref+"no_ticks", uint64(st.Ticks))
	s.long('d', pref+"max_cqes", uint64(st.MaxCQEs))
	for _, u := range []struct {
		name string
		u    UStat
	}{{"s_", st.S}, {"r_", st.R}, {"rem_s_", st.RemS}, {"rem_r_", st.RemR}} {
		s.size('d', pref+u.name+"no_bytes", u.u.Bytes)
		s.long('d', pref+u.name+"no_msgs", u.u.Msgs)
		s.long('d', pref+u.name+"no_errs", u.u.Errs)
	}
}
