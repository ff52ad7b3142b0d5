package pingpong

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/wire/bth"
)

// golden is one line of testdata/golden.txt, which testdata/golden.c
// made with glibc's sprintf, inet_ntop and printf and rc_pingpong's
// format strings.
type golden struct {
	kind   string   // msg, gid, addr or rep
	inputs []string // the fields of the second column
	want   string
}

func readGolden(t *testing.T) []golden {
	t.Helper()
	f, err := os.Open("testdata/golden.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []golden
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) != 3 {
			t.Fatalf("golden.txt: %q: want 3 tab-separated columns", sc.Text())
		}
		out = append(out, golden{cols[0], strings.Fields(cols[1]), cols[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 20 {
		t.Fatalf("golden.txt: only %d lines", len(out))
	}
	return out
}

// dest builds a Dest from golden's "LID QPN PSN GIDHEX" (decimal numbers).
func dest(t *testing.T, in []string) Dest {
	t.Helper()
	n := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return Dest{LID: uint16(n(in[0])), QPN: bth.QPN(n(in[1])), PSN: bth.PSN(n(in[2])), GID: gidHex(t, in[3])}
}

func gidHex(t *testing.T, s string) [16]byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		t.Fatalf("GID %q: %v", s, err)
	}
	return [16]byte(b)
}

func TestGolden(t *testing.T) {
	counts := map[string]int{}
	for _, g := range readGolden(t) {
		counts[g.kind]++
		switch g.kind {
		case "msg":
			d := dest(t, g.inputs)
			m := d.Message()
			want := append([]byte(g.want), make([]byte, MessageLen-len(g.want))...)
			if len(g.want) != MessageLen-1 || !bytes.Equal(m[:], want) {
				t.Errorf("Message(%+v) = %q, want %q and its NUL", d, m, g.want)
			}
			back, err := ParseMessage(m[:])
			if err != nil || back != d {
				t.Errorf("ParseMessage(%q) = %+v, %v; want %+v", m, back, err, d)
			}
		case "gid":
			if got := FormatGID(gidHex(t, g.inputs[0])); got != g.want {
				t.Errorf("FormatGID(%s) = %q, want %q (inet_ntop)", g.inputs[0], got, g.want)
			}
		case "addr":
			var b bytes.Buffer
			WriteAddress(&b, "local", dest(t, g.inputs))
			if got := b.String(); got != g.want+"\n" {
				t.Errorf("WriteAddress(%v) = %q, want %q", g.inputs, got, g.want+"\n")
			}
		case "rep":
			size, _ := strconv.Atoi(g.inputs[0])
			iters, _ := strconv.Atoi(g.inputs[1])
			usec, _ := strconv.Atoi(g.inputs[2])
			r := Result{Size: size, Iters: iters, Elapsed: time.Duration(usec)*time.Microsecond + 999*time.Nanosecond}
			var b bytes.Buffer
			r.WriteReport(&b)
			if want := strings.ReplaceAll(g.want, "|", "\n") + "\n"; b.String() != want {
				t.Errorf("report of %v:\n%s\nwant (printf):\n%s", g.inputs, b.String(), want)
			}
		default:
			t.Fatalf("golden.txt: unknown kind %q", g.kind)
		}
	}
	for _, k := range []string{"msg", "gid", "addr", "rep"} {
		if counts[k] == 0 {
			t.Errorf("golden.txt has no %s line", k)
		}
	}
}

// TestRemoteLine checks the remote line's label, one space shorter.
func TestRemoteLine(t *testing.T) {
	var b bytes.Buffer
	WriteAddress(&b, "remote", Dest{QPN: 0x12, PSN: 0x345678, GID: gidHex(t, "00000000000000000000ffff0a090002")})
	want := "  remote address: LID 0x0000, QPN 0x000012, PSN 0x345678, GID ::ffff:10.9.0.2\n"
	if b.String() != want {
		t.Errorf("got  %q\nwant %q", b.String(), want)
	}
}

// msg pads text with NULs to MessageLen bytes.
func msg(text string) []byte {
	return append([]byte(text), make([]byte, MessageLen-len(text))...)
}

func TestParseMessage(t *testing.T) {
	gid := "00000000000000000000ffff0a090002"
	want := Dest{QPN: 0x11, PSN: 0xabcdef, GID: gidHex(t, gid)}
	for _, tc := range []struct {
		name string
		in   []byte
		want Dest
		err  string // in the error; "" for none
	}{
		{"as written", msg("0000:000011:abcdef:" + gid), want, ""},
		// What sscanf's %x reads beyond rc_pingpong's own widths.
		{"short fields", msg("0:11:abcdef:" + gid), want, ""},
		{"upper case", msg("0000:000011:ABCDEF:" + strings.ToUpper(gid)), want, ""},
		{"wide LID", msg("00000000:11:abcdef:" + gid), want, ""},
		{"garbage after the NUL", append([]byte("0000:000011:abcdef:"+gid+"\x00"), "x"...)[:MessageLen], want, ""},
		{"short", []byte("0000:000011:abcdef:" + gid), Dest{}, "51 bytes, want 52"},
		{"no NUL", bytes.Repeat([]byte("a"), MessageLen), Dest{}, "no NUL"},
		{"empty", make([]byte, MessageLen), Dest{}, "want LID:QPN:PSN:GID"},
		{"three fields", msg("0000:000011:" + gid), Dest{}, "want LID:QPN:PSN:GID"},
		{"five fields", msg("0:11:abcdef:" + gid[:30] + ":1"), Dest{}, "want LID:QPN:PSN:GID"},
		{"LID not hex", msg("000g:000011:abcdef:" + gid), Dest{}, `LID "000g": not hex`},
		{"LID too big", msg("10000:11:abcdef:" + gid), Dest{}, "LID \"10000\": more than 16 bits"},
		{"QPN too big", msg("0:1000000:abcdef:" + gid), Dest{}, "QPN \"1000000\": more than 24 bits"},
		{"PSN empty", msg("0000:000011::" + gid), Dest{}, "PSN \"\": want 1 to 8 hex digits"},
		{"PSN nine digits", msg("0:11:000abcdef:" + gid), Dest{}, "want 1 to 8 hex digits"},
		{"sign", msg("0000:+00011:abcdef:" + gid), Dest{}, "not hex"},
		{"GID short", msg("0000:000011:abcdef:" + gid[:31]), Dest{}, "GID has 31 characters"},
		{"GID not hex", msg("0000:000011:abcdef:" + gid[:30] + "zz"), Dest{}, `GID "zz": not hex`},
		{"GID space", msg("0000:000011:abcdef:" + gid[:30] + " 2"), Dest{}, `GID " 2": not hex`},
	} {
		got, err := ParseMessage(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !errors.Is(err, ErrMessage) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want ErrMessage with %q", tc.name, err, tc.err)
		case got != tc.want:
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestParseTruncated feeds every prefix of a good message, NUL-padded to
// its length, and checks that none but the whole parses.
func TestParseTruncated(t *testing.T) {
	good := Dest{LID: 1, QPN: 0x11, PSN: 0x123456, GID: gidHex(t, "fe800000000000000202c9fffe000001")}.Message()
	for n := 0; n < MessageLen-1; n++ {
		if d, err := ParseMessage(msg(string(good[:n]))); !errors.Is(err, ErrMessage) {
			t.Errorf("prefix of %d bytes %q: %+v, %v; want ErrMessage", n, good[:n], d, err)
		}
	}
	if _, err := ParseMessage(good[:]); err != nil {
		t.Fatal(err)
	}
}

func TestMessageMasks(t *testing.T) {
	m := Dest{QPN: 0x1abcdef, PSN: 0xff123456}.Message()
	if got := string(m[:18]); got != "0000:abcdef:123456" {
		t.Errorf("QPN and PSN beyond 24 bits: %q, want them masked", got)
	}
}

func FuzzParseMessage(f *testing.F) {
	f.Add(msg("0000:000011:abcdef:00000000000000000000ffff0a090002"))
	f.Add(msg("0:1:2:fe800000000000000202c9fffe000001"))
	f.Add(make([]byte, MessageLen))
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := ParseMessage(in)
		if err != nil {
			if !errors.Is(err, ErrMessage) {
				t.Fatalf("%q: %v is not ErrMessage", in, err)
			}
			return
		}
		// What parses round-trips through the canonical form.
		m := d.Message()
		back, err := ParseMessage(m[:])
		if err != nil || back != d {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", in, d, m, back, err)
		}
	})
}
