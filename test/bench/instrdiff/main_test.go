package main

import (
	"strings"
	"testing"
)

const small = `--------------------------------------------------------------------------------
Ir                  
--------------------------------------------------------------------------------
31,073,177 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                  file:function
--------------------------------------------------------------------------------
1,000,000 ( 3.22%)  /work/main/wire/packet.go:github.com/gorxe/gorxe/wire.ParseUDPPayload [/tmp/gorxe]
  900,000 ( 2.90%)  /usr/local/go/src/runtime/mbitmap.go:runtime.runGCProg [/tmp/gorxe]
   50,000 ( 0.16%)  ???:0x000000000001ab70 [/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2]
`

const large = `41,073,177 (100.0%)  PROGRAM TOTALS
3,000,000 ( 7.30%)  /work/main/wire/packet.go:github.com/gorxe/gorxe/wire.ParseUDPPayload [/tmp/gorxe]
  900,000 ( 2.19%)  /usr/local/go/src/runtime/mbitmap.go:runtime.runGCProg [/tmp/gorxe]
  400,000 ( 0.97%)  /work/main/link/udp/send_linux.go:github.com/gorxe/gorxe/link/udp.(*Link).build [/tmp/gorxe]
`

// TestDiff: per unit, what the larger run spent beyond the smaller, by
// function, most first; start-up costs both runs share drop out.
func TestDiff(t *testing.T) {
	a, err := parse(strings.NewReader(small))
	if err != nil {
		t.Fatal(err)
	}
	b, err := parse(strings.NewReader(large))
	if err != nil {
		t.Fatal(err)
	}
	total, rows := diff(a, b, 1000)
	if want := float64(41073177-31073177) / 1000; total != want {
		t.Errorf("total %v, want %v", total, want)
	}
	want := []row{{"github.com/gorxe/gorxe/wire.ParseUDPPayload", 2000}, {"github.com/gorxe/gorxe/link/udp.(*Link).build", 400}}
	if len(rows) != len(want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d: %v, want %v", i, rows[i], want[i])
		}
	}
	if _, err := parse(strings.NewReader("not a summary\n")); err == nil {
		t.Error("a file without PROGRAM TOTALS parsed")
	}
}
