package congestion

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Variant is which of DCQCN's two published state machines a reaction
// point runs. The profiles set it; the other fields of Params tune it.
type Variant uint8

const (
	// VariantPaper is the SIGCOMM'15 paper's reaction point, as its
	// author's ns-3 model (bobzhuyb/ns3-rdma) and uet-htsim run it: every
	// CNP updates α at once, α decays every K without a CNP, rates and α
	// are real numbers (here: bits per second and a 32-bit fraction).
	VariantPaper Variant = iota
	// VariantConnectX is NVIDIA's firmware reaction point (ConnectX-4 and
	// later), as Google's isekai and HPCC's ns-3 model it: α is a 10-bit
	// fraction updated every dce_tcp_rtt from a "CNP arrived" flag, rates
	// are whole Mb/s, hyper increase adds a constant.
	VariantConnectX
)

// String returns the variant's profile name.
func (v Variant) String() string {
	switch v {
	case VariantPaper:
		return "paper"
	case VariantConnectX:
		return "connectx"
	}
	return "Variant(" + strconv.Itoa(int(v)) + ")"
}

// Params are DCQCN's parameters for a reaction point (RP) and a
// notification point (NP). Each field is named after NVIDIA's firmware
// parameter (mlxconfig and /sys/class/net/<if>/ecn/roce_rp, roce_np; the
// mlx5 debugfs cc_params name it rp_* and np_*); its comment gives the
// SIGCOMM'15 paper's symbol where the paper has one. Times and rates are
// Go types; the integers keep NVIDIA's units. Set and String speak
// NVIDIA's units throughout (µs, Mb/s, 1024ths, 64-byte units).
//
// Paper and ConnectX return the two profiles; change a field to override
// it, and Validate (which NewReactionPoint and NewNotificationPoint call)
// says what is wrong with a set of them.
type Params struct {
	// Variant selects the state machine (see Variant).
	Variant Variant

	// DCETCPG is dce_tcp_g, α's gain in 1024ths: g = (1024 − DCETCPG) /
	// 1024. The paper's g = 1/256 is 1020; NVIDIA's default 1019 is
	// g = 5/1024.
	DCETCPG uint16
	// DCETCPRTT is dce_tcp_rtt, α's update period. The paper's K (55 µs):
	// the time without a CNP after which α decays, restarted by every CNP.
	// In the ConnectX variant a free-running period (1 µs) at whose end α
	// rises if a CNP came during it and decays if none did.
	DCETCPRTT time.Duration
	// InitialAlphaValue is initial_alpha_value, α on the first CNP, in
	// 1024ths. NVIDIA's range is 0..1023 (1023 ≈ 1); 1024, exactly 1 as
	// the paper starts, only the paper variant can hold.
	InitialAlphaValue uint16

	// RateReduceMonitorPeriod is rate_reduce_monitor_period: at most one
	// rate decrease per period; CNPs within it are folded into one
	// decrease at its end. Zero, as in the paper, cuts on every CNP.
	RateReduceMonitorPeriod time.Duration
	// RPGGD is rpg_gd, log2 of Gd: a cut takes RC·α/Gd with α in 1024ths,
	// so 11 is the paper's RC·α/2.
	RPGGD uint8
	// RPGMinDecFac is rpg_min_dec_fac, in percent: one cut never takes
	// the rate below this share of what it was (100 prevents cuts). The
	// paper has no such bound; with RPGGD 11 a cut takes at most half, so
	// 50 never binds.
	RPGMinDecFac uint8
	// RPGMinRate is rpg_min_rate, the floor under RC.
	RPGMinRate Rate
	// RPGMaxRate is rpg_max_rate, the ceiling over RC and RT; zero is the
	// line rate.
	RPGMaxRate Rate
	// RateToSetOnFirstCNP is rate_to_set_on_first_cnp: if not zero, the
	// first CNP sets RC and RT to it instead of cutting.
	RateToSetOnFirstCNP Rate
	// ClampTgtRate is clamp_tgt_rate: every cut first sets RT = RC, as
	// the paper does.
	ClampTgtRate bool
	// ClampTgtRateAfterTimeInc is clamp_tgt_rate_after_time_inc: a cut
	// sets RT = RC if the rate rose since the last cut (NVIDIA's default).
	ClampTgtRateAfterTimeInc bool

	// RPGTimeReset is rpg_time_reset, the paper's T: the rate-increase
	// timer's period, restarted by every cut.
	RPGTimeReset time.Duration
	// RPGByteReset is rpg_byte_reset, the paper's B, in units of 64
	// bytes: every B bytes sent is a rate-increase event. The paper's
	// 10 MB is 156250; NVIDIA's 32767 is 2,097,088 bytes.
	RPGByteReset uint32
	// RPGThreshold is rpg_threshold, the paper's F: the number of
	// increase events (of the timer, or of the byte counter) that are
	// fast recovery before additive increase begins.
	RPGThreshold uint8
	// RPGAIRate is rpg_ai_rate, the paper's R_AI: what additive increase
	// adds to RT.
	RPGAIRate Rate
	// RPGHAIRate is rpg_hai_rate, the paper's R_HAI: what hyper increase
	// adds to RT (times the stage in the paper variant).
	RPGHAIRate Rate

	// MinTimeBetweenCNPs is min_time_between_cnps: an NP sends at most
	// one CNP per QP per this interval (the paper's 50 µs). Zero answers
	// every marked packet.
	MinTimeBetweenCNPs time.Duration
	// CNPDSCP is cnp_dscp, the DSCP CNPs are sent with.
	CNPDSCP uint8
}

// Paper returns the SIGCOMM'15 paper's parameters: g = 1/256,
// K = T = 55 µs, B = 10 MB, F = 5, R_AI = 40 Mb/s (its 40 Gb/s
// setting), R_HAI = 200 Mb/s and a 100 Mb/s floor (ns3-rdma's sample
// config and MinRate default), a cut on every CNP with RT = RC, and CNPs
// at most every 50 µs.
func Paper() Params {
	return Params{
		Variant:                 VariantPaper,
		DCETCPG:                 1020,
		DCETCPRTT:               55 * time.Microsecond,
		InitialAlphaValue:       1024,
		RateReduceMonitorPeriod: 0,
		RPGGD:                   11,
		RPGMinDecFac:            50,
		RPGMinRate:              100 * MbitPerSecond,
		ClampTgtRate:            true,
		RPGTimeReset:            55 * time.Microsecond,
		RPGByteReset:            10_000_000 / 64,
		RPGThreshold:            5,
		RPGAIRate:               40 * MbitPerSecond,
		RPGHAIRate:              200 * MbitPerSecond,
		MinTimeBetweenCNPs:      50 * time.Microsecond,
		CNPDSCP:                 48,
	}
}

// ConnectX returns NVIDIA's firmware defaults, as a ConnectX-5 Ex (firmware
// 16.27.2008) reports them with mlxconfig -q: dce_tcp_g 1019, dce_tcp_rtt
// 1 µs, initial_alpha_value 1023, rate_reduce_monitor_period 4 µs,
// rpg_gd 11, rpg_min_dec_fac 50, rpg_min_rate 1 Mb/s, rpg_max_rate 0,
// rate_to_set_on_first_cnp 0, clamp_tgt_rate 0,
// clamp_tgt_rate_after_time_inc 1, rpg_time_reset 300 µs, rpg_byte_reset
// 32767, rpg_threshold 1, rpg_ai_rate 5 Mb/s, rpg_hai_rate 50 Mb/s,
// min_time_between_cnps 2 µs, cnp_dscp 48.
func ConnectX() Params {
	return Params{
		Variant:                  VariantConnectX,
		DCETCPG:                  1019,
		DCETCPRTT:                time.Microsecond,
		InitialAlphaValue:        1023,
		RateReduceMonitorPeriod:  4 * time.Microsecond,
		RPGGD:                    11,
		RPGMinDecFac:             50,
		RPGMinRate:               MbitPerSecond,
		ClampTgtRateAfterTimeInc: true,
		RPGTimeReset:             300 * time.Microsecond,
		RPGByteReset:             32767,
		RPGThreshold:             1,
		RPGAIRate:                5 * MbitPerSecond,
		RPGHAIRate:               50 * MbitPerSecond,
		MinTimeBetweenCNPs:       2 * time.Microsecond,
		CNPDSCP:                  48,
	}
}

// Profile returns the profile of the given name: "paper" or "connectx".
func Profile(name string) (Params, error) {
	switch strings.ToLower(name) {
	case "paper":
		return Paper(), nil
	case "connectx":
		return ConnectX(), nil
	}
	return Params{}, fmt.Errorf("congestion: unknown profile %q: want paper or connectx", name)
}

// ErrParams is what every error about bad Params wraps.
var ErrParams = errors.New("congestion: bad parameters")

// maxPeriod bounds every period: a day is beyond any sane setting and
// keeps time arithmetic far from overflow.
const maxPeriod = 24 * time.Hour

// Validate reports the first parameter that makes no sense, by NVIDIA's
// name, or nil.
func (p Params) Validate() error {
	bad := func(name, format string, args ...any) error {
		return fmt.Errorf("%w: %s %s", ErrParams, name, fmt.Sprintf(format, args...))
	}
	period := func(name string, d time.Duration, zeroOK bool) error {
		switch {
		case d < 0, d == 0 && !zeroOK:
			return bad(name, "%v: must be positive", d)
		case d > maxPeriod:
			return bad(name, "%v: longer than %v", d, maxPeriod)
		}
		return nil
	}
	switch p.Variant {
	case VariantPaper, VariantConnectX:
	default:
		return bad("variant", "%d: want paper or connectx", p.Variant)
	}
	if p.DCETCPG > 1023 {
		return bad("dce_tcp_g", "%d: must be 0..1023 (g = (1024 - dce_tcp_g)/1024, so g is in (0, 1])", p.DCETCPG)
	}
	if err := period("dce_tcp_rtt", p.DCETCPRTT, false); err != nil {
		return err
	}
	if maxA := p.alphaMax1024(); p.InitialAlphaValue > maxA {
		return bad("initial_alpha_value", "%d: must be 0..%d in the %v variant (1024 is α = 1)", p.InitialAlphaValue, maxA, p.Variant)
	}
	if err := period("rate_reduce_monitor_period", p.RateReduceMonitorPeriod, true); err != nil {
		return err
	}
	if p.RPGGD > 31 {
		return bad("rpg_gd", "%d: must be 0..31", p.RPGGD)
	}
	if p.RPGMinDecFac > 100 {
		return bad("rpg_min_dec_fac", "%d: a percentage, 0..100", p.RPGMinDecFac)
	}
	if p.RPGMinRate == 0 {
		return bad("rpg_min_rate", "0: must be positive")
	}
	if p.RPGMaxRate != 0 && p.RPGMaxRate < p.RPGMinRate {
		return bad("rpg_max_rate", "%v: below rpg_min_rate %v", p.RPGMaxRate, p.RPGMinRate)
	}
	if p.RateToSetOnFirstCNP != 0 && p.RateToSetOnFirstCNP < p.RPGMinRate {
		return bad("rate_to_set_on_first_cnp", "%v: below rpg_min_rate %v", p.RateToSetOnFirstCNP, p.RPGMinRate)
	}
	if err := period("rpg_time_reset", p.RPGTimeReset, false); err != nil {
		return err
	}
	if p.RPGByteReset == 0 {
		return bad("rpg_byte_reset", "0: must be at least 1 (64 bytes)")
	}
	if p.RPGThreshold > 31 {
		return bad("rpg_threshold", "%d: must be 0..31", p.RPGThreshold)
	}
	if p.RPGAIRate == 0 {
		return bad("rpg_ai_rate", "0: must be positive, or a clamped target never rises")
	}
	if p.RPGHAIRate == 0 {
		return bad("rpg_hai_rate", "0: must be positive")
	}
	if err := period("min_time_between_cnps", p.MinTimeBetweenCNPs, true); err != nil {
		return err
	}
	if p.CNPDSCP > 63 {
		return bad("cnp_dscp", "%d: a DSCP is 0..63", p.CNPDSCP)
	}
	if p.Variant == VariantConnectX {
		for _, r := range []struct {
			name string
			r    Rate
		}{
			{"rpg_min_rate", p.RPGMinRate}, {"rpg_max_rate", p.RPGMaxRate},
			{"rate_to_set_on_first_cnp", p.RateToSetOnFirstCNP},
			{"rpg_ai_rate", p.RPGAIRate}, {"rpg_hai_rate", p.RPGHAIRate},
		} {
			if r.r%MbitPerSecond != 0 {
				return bad(r.name, "%v: the connectx variant counts rates in whole Mb/s", r.r)
			}
		}
	}
	return nil
}

// alphaMax1024 is the largest α the variant holds, in 1024ths.
func (p Params) alphaMax1024() uint16 {
	if p.Variant == VariantPaper {
		return 1024
	}
	return 1023
}

// param is one parameter in NVIDIA's units, for Set and String.
type param struct {
	name, debugfs string
	get           func(p *Params) string
	set           func(p *Params, v string) error
}

// usField, mbpsField, uintField and boolField make a param of a field,
// parsing and printing NVIDIA's units.
func usField(name, debugfs string, f func(p *Params) *time.Duration) param {
	get := func(p *Params) string {
		d := *f(p)
		if d%time.Microsecond == 0 {
			return strconv.FormatInt(int64(d/time.Microsecond), 10)
		}
		return d.String()
	}
	set := func(p *Params, v string) error {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil {
			*f(p) = time.Duration(n) * time.Microsecond
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return errors.New("want microseconds, as 55, or a duration, as 1.5us")
		}
		*f(p) = d
		return nil
	}
	return param{name, debugfs, get, set}
}

func mbpsField(name, debugfs string, f func(p *Params) *Rate) param {
	get := func(p *Params) string {
		r := *f(p)
		if r%MbitPerSecond == 0 {
			return strconv.FormatUint(uint64(r/MbitPerSecond), 10)
		}
		return r.String()
	}
	set := func(p *Params, v string) error {
		r, err := ParseRate(v, MbitPerSecond)
		if err != nil {
			return err
		}
		*f(p) = r
		return nil
	}
	return param{name, debugfs, get, set}
}

func uintField[T uint8 | uint16 | uint32](name, debugfs string, f func(p *Params) *T) param {
	get := func(p *Params) string { return strconv.FormatUint(uint64(*f(p)), 10) }
	set := func(p *Params, v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > uint64(^T(0)) {
			return fmt.Errorf("want a whole number from 0 to %d", uint64(^T(0)))
		}
		*f(p) = T(n)
		return nil
	}
	return param{name, debugfs, get, set}
}

func boolField(name, debugfs string, f func(p *Params) *bool) param {
	get := func(p *Params) string {
		if *f(p) {
			return "1"
		}
		return "0"
	}
	set := func(p *Params, v string) error {
		switch v {
		case "0", "false":
			*f(p) = false
		case "1", "true":
			*f(p) = true
		default:
			return errors.New("want 0 or 1")
		}
		return nil
	}
	return param{name, debugfs, get, set}
}

// params lists the parameters in the order NVIDIA's documentation does.
var params = []param{
	uintField("dce_tcp_g", "rp_dce_tcp_g", func(p *Params) *uint16 { return &p.DCETCPG }),
	usField("dce_tcp_rtt", "rp_dce_tcp_rtt", func(p *Params) *time.Duration { return &p.DCETCPRTT }),
	uintField("initial_alpha_value", "rp_initial_alpha_value", func(p *Params) *uint16 { return &p.InitialAlphaValue }),
	mbpsField("rate_to_set_on_first_cnp", "rp_rate_to_set_on_first_cnp", func(p *Params) *Rate { return &p.RateToSetOnFirstCNP }),
	uintField("rpg_min_dec_fac", "rp_min_dec_fac", func(p *Params) *uint8 { return &p.RPGMinDecFac }),
	mbpsField("rpg_min_rate", "rp_min_rate", func(p *Params) *Rate { return &p.RPGMinRate }),
	uintField("rpg_gd", "rp_gd", func(p *Params) *uint8 { return &p.RPGGD }),
	usField("rate_reduce_monitor_period", "rp_rate_reduce_monitor_period", func(p *Params) *time.Duration { return &p.RateReduceMonitorPeriod }),
	boolField("clamp_tgt_rate", "rp_clamp_tgt_rate", func(p *Params) *bool { return &p.ClampTgtRate }),
	boolField("clamp_tgt_rate_after_time_inc", "rp_clamp_tgt_rate_ati", func(p *Params) *bool { return &p.ClampTgtRateAfterTimeInc }),
	usField("rpg_time_reset", "rp_time_reset", func(p *Params) *time.Duration { return &p.RPGTimeReset }),
	uintField("rpg_byte_reset", "rp_byte_reset", func(p *Params) *uint32 { return &p.RPGByteReset }),
	uintField("rpg_threshold", "rp_threshold", func(p *Params) *uint8 { return &p.RPGThreshold }),
	mbpsField("rpg_max_rate", "rp_max_rate", func(p *Params) *Rate { return &p.RPGMaxRate }),
	mbpsField("rpg_ai_rate", "rp_ai_rate", func(p *Params) *Rate { return &p.RPGAIRate }),
	mbpsField("rpg_hai_rate", "rp_hai_rate", func(p *Params) *Rate { return &p.RPGHAIRate }),
	usField("min_time_between_cnps", "np_min_time_between_cnps", func(p *Params) *time.Duration { return &p.MinTimeBetweenCNPs }),
	uintField("cnp_dscp", "np_cnp_dscp", func(p *Params) *uint8 { return &p.CNPDSCP }),
}

// Set sets one parameter by NVIDIA's name (as mlxconfig, sysfs or mlx5's
// debugfs spell it, in either case) to a value in NVIDIA's units:
// microseconds for times (or a Go duration, as 1.5us), Mb/s for rates (or
// a rate with its unit, as 40Gb/s), 1024ths for dce_tcp_g and
// initial_alpha_value, 64-byte units for rpg_byte_reset, percent for
// rpg_min_dec_fac, 0 or 1 for the clamps. It does not validate the whole;
// Validate does.
func (p *Params) Set(name, value string) error {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, q := range params {
		if n == q.name || n == q.debugfs {
			if err := q.set(p, strings.TrimSpace(value)); err != nil {
				return fmt.Errorf("%w: %s=%s: %v", ErrParams, q.name, value, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: no parameter %q", ErrParams, name)
}

// String lists the parameters as name=value in NVIDIA's units, the
// variant first, in the form Set takes.
func (p Params) String() string {
	var b strings.Builder
	b.WriteString("variant=" + p.Variant.String())
	for _, q := range params {
		b.WriteString(" " + q.name + "=" + q.get(&p))
	}
	return b.String()
}
