package congestion

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestProfilesValidate(t *testing.T) {
	for _, name := range []string{"paper", "connectx", "ConnectX"} {
		p, err := Profile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Profile("dctcp"); err == nil || !strings.Contains(err.Error(), "paper or connectx") {
		t.Errorf("unknown profile: %v", err)
	}
}

// TestProfileValues pins each profile, in NVIDIA's units, to its source:
// the paper's constants (dcqcn.md §1.3) and the ConnectX-5 Ex mlxconfig
// dump (§1.4).
func TestProfileValues(t *testing.T) {
	for _, c := range []struct {
		p    Params
		want string
	}{
		{Paper(), "variant=paper dce_tcp_g=1020 dce_tcp_rtt=55 initial_alpha_value=1024 rate_to_set_on_first_cnp=0 rpg_min_dec_fac=50 rpg_min_rate=100 rpg_gd=11 rate_reduce_monitor_period=0 clamp_tgt_rate=1 clamp_tgt_rate_after_time_inc=0 rpg_time_reset=55 rpg_byte_reset=156250 rpg_threshold=5 rpg_max_rate=0 rpg_ai_rate=40 rpg_hai_rate=200 min_time_between_cnps=50 cnp_dscp=48"},
		{ConnectX(), "variant=connectx dce_tcp_g=1019 dce_tcp_rtt=1 initial_alpha_value=1023 rate_to_set_on_first_cnp=0 rpg_min_dec_fac=50 rpg_min_rate=1 rpg_gd=11 rate_reduce_monitor_period=4 clamp_tgt_rate=0 clamp_tgt_rate_after_time_inc=1 rpg_time_reset=300 rpg_byte_reset=32767 rpg_threshold=1 rpg_max_rate=0 rpg_ai_rate=5 rpg_hai_rate=50 min_time_between_cnps=2 cnp_dscp=48"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
	// The paper's g = 1/256 and B = 10 MB are exact in NVIDIA's units.
	if p := Paper(); 1024-int(p.DCETCPG) != 1024/256 || int(p.RPGByteReset)*64 != 10_000_000 {
		t.Error("paper g or B not exact")
	}
}

// TestSetOneByOne: every parameter is set by its NVIDIA name (or mlx5's
// debugfs name), in NVIDIA's units, and String prints it back the same.
func TestSetOneByOne(t *testing.T) {
	p := ConnectX()
	for _, kv := range [][2]string{
		{"dce_tcp_g", "1020"}, {"DCE_TCP_RTT", "55"}, {"rp_initial_alpha_value", "1000"},
		{"rate_to_set_on_first_cnp", "40000"}, {"rpg_min_dec_fac", "25"}, {"rpg_min_rate", "10"},
		{"rpg_gd", "10"}, {"rate_reduce_monitor_period", "50"}, {"clamp_tgt_rate", "1"},
		{"rp_clamp_tgt_rate_ati", "0"}, {"rpg_time_reset", "55"}, {"rpg_byte_reset", "156250"},
		{"rpg_threshold", "5"}, {"rpg_max_rate", "90000"}, {"rpg_ai_rate", "40"},
		{"rpg_hai_rate", "200"}, {"np_min_time_between_cnps", "50"}, {"cnp_dscp", "26"},
	} {
		if err := p.Set(kv[0], kv[1]); err != nil {
			t.Fatalf("Set(%s, %s): %v", kv[0], kv[1], err)
		}
		if !strings.Contains(p.String(), "="+kv[1]+" ") && !strings.HasSuffix(p.String(), "="+kv[1]) {
			t.Errorf("after Set(%s, %s): %s", kv[0], kv[1], p)
		}
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.DCETCPRTT != 55*time.Microsecond || p.RPGMinRate != 10*MbitPerSecond || !p.ClampTgtRate || p.ClampTgtRateAfterTimeInc || p.CNPDSCP != 26 {
		t.Errorf("fields: %+v", p)
	}
	// Units beyond NVIDIA's.
	if err := p.Set("rpg_ai_rate", "1.5Gb/s"); err != nil || p.RPGAIRate != 1500*MbitPerSecond {
		t.Errorf("rate with unit: %v %v", err, p.RPGAIRate)
	}
	if err := p.Set("dce_tcp_rtt", "1.5us"); err != nil || p.DCETCPRTT != 1500*time.Nanosecond || !strings.Contains(p.String(), "dce_tcp_rtt=1.5µs") {
		t.Errorf("duration: %v %v %s", err, p.DCETCPRTT, p)
	}
}

func TestSetErrors(t *testing.T) {
	p := Paper()
	for _, c := range []struct{ name, value, want string }{
		{"rpg_frobnicate", "1", `no parameter "rpg_frobnicate"`},
		{"dce_tcp_g", "-1", "dce_tcp_g=-1"},
		{"dce_tcp_g", "70000", "0 to 65535"},
		{"rpg_threshold", "256", "0 to 255"},
		{"clamp_tgt_rate", "yes", "want 0 or 1"},
		{"rpg_ai_rate", "fast", "not a rate"},
		{"rpg_time_reset", "soon", "want microseconds"},
	} {
		err := p.Set(c.name, c.value)
		if err == nil || !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Set(%s, %s) = %v, want an ErrParams saying %q", c.name, c.value, err, c.want)
		}
	}
	if p != Paper() {
		t.Error("a failed Set changed the parameters")
	}
}

// TestValidateRejects: each kind of nonsense gets an error that names
// the parameter by NVIDIA's name; none panics.
func TestValidateRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(p *Params)
	}{
		{"variant", func(p *Params) { p.Variant = 7 }},
		{"dce_tcp_g", func(p *Params) { p.DCETCPG = 1024 }}, // g = 0: α never moves
		{"dce_tcp_g", func(p *Params) { p.DCETCPG = 5000 }}, // g > 1 cannot be written otherwise
		{"dce_tcp_rtt", func(p *Params) { p.DCETCPRTT = 0 }},
		{"dce_tcp_rtt", func(p *Params) { p.DCETCPRTT = -time.Microsecond }},
		{"dce_tcp_rtt", func(p *Params) { p.DCETCPRTT = 48 * time.Hour }},
		{"initial_alpha_value", func(p *Params) { p.InitialAlphaValue = 1025 }},
		{"rate_reduce_monitor_period", func(p *Params) { p.RateReduceMonitorPeriod = -1 }},
		{"rpg_gd", func(p *Params) { p.RPGGD = 32 }},
		{"rpg_min_dec_fac", func(p *Params) { p.RPGMinDecFac = 101 }},
		{"rpg_min_rate", func(p *Params) { p.RPGMinRate = 0 }},
		{"rpg_max_rate", func(p *Params) { p.RPGMaxRate = p.RPGMinRate / 2 }},
		{"rate_to_set_on_first_cnp", func(p *Params) { p.RateToSetOnFirstCNP = p.RPGMinRate / 2 }},
		{"rpg_time_reset", func(p *Params) { p.RPGTimeReset = 0 }},
		{"rpg_byte_reset", func(p *Params) { p.RPGByteReset = 0 }},
		{"rpg_threshold", func(p *Params) { p.RPGThreshold = 32 }},
		{"rpg_ai_rate", func(p *Params) { p.RPGAIRate = 0 }},
		{"rpg_hai_rate", func(p *Params) { p.RPGHAIRate = 0 }},
		{"min_time_between_cnps", func(p *Params) { p.MinTimeBetweenCNPs = -1 }},
		{"cnp_dscp", func(p *Params) { p.CNPDSCP = 64 }},
	} {
		for _, base := range []Params{Paper(), ConnectX()} {
			p := base
			c.mod(&p)
			err := p.Validate()
			if err == nil || !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), c.name) {
				t.Errorf("%v, %s: Validate() = %v", base.Variant, c.name, err)
			}
		}
	}
	// Only the paper variant holds α = 1 exactly; ConnectX's is 10 bits.
	p := ConnectX()
	p.InitialAlphaValue = 1024
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "0..1023") {
		t.Errorf("connectx α 1024: %v", err)
	}
	// ConnectX counts rates in whole Mb/s.
	p = ConnectX()
	p.RPGAIRate = 5500 * KbitPerSecond
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "whole Mb/s") {
		t.Errorf("connectx 5.5 Mb/s: %v", err)
	}
}

func TestRate(t *testing.T) {
	for _, c := range []struct {
		r    Rate
		want string
	}{
		{40 * GbitPerSecond, "40Gb/s"}, {39843750000, "39.84375Gb/s"}, {5 * MbitPerSecond, "5Mb/s"},
		{37646484375, "37646.484375Mb/s"}, {1500, "1.5kb/s"}, {7, "7b/s"}, {0, "0b/s"},
	} {
		if got := c.r.String(); got != c.want {
			t.Errorf("%d: %q, want %q", uint64(c.r), got, c.want)
		}
		if c.r != 0 {
			back, err := ParseRate(c.want, MbitPerSecond)
			if err != nil || back != c.r {
				t.Errorf("ParseRate(%q) = %v, %v", c.want, back, err)
			}
		}
	}
	for _, c := range []struct {
		s    string
		want Rate
	}{{"100", 100 * MbitPerSecond}, {"25Gbps", 25 * GbitPerSecond}, {" 1.25 Gb/s", 1250 * MbitPerSecond}} {
		if got, err := ParseRate(c.s, MbitPerSecond); err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", c.s, got, err, c.want)
		}
	}
	for _, s := range []string{"", "fast", "-1Mb/s", "0.5b/s", "1e30Gb/s", "99999999999999999999Gb/s"} {
		if _, err := ParseRate(s, MbitPerSecond); err == nil {
			t.Errorf("ParseRate(%q) took it", s)
		}
	}
}
