package cmtool_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/cm/cmtest"
	"github.com/gorxe/gorxe/cmtool"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rsocket"
)

// TestRcopy: rcopy's client copies a file to the server, which writes it
// where the client names it and serves the next client; a destination it
// cannot open comes back as the errno; a client that breaks the protocol
// is dropped, and the server serves on.
func TestRcopy(t *testing.T) {
	f := mem.NewFabric()
	_, sm := cmtest.Open(t, f, "10.0.0.2")
	_, cmgr := cmtest.Open(t, f, "10.0.0.1")
	l, err := rsocket.Listen(sm, netip.Addr{}, cmtool.RcopyPort, rsocket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sctx, stop := context.WithCancel(ctx(t))
	var sout bytes.Buffer
	served := make(chan error, 1)
	go func() { served <- cmtool.RcopyServer(sctx, l, &sout) }()
	server := netip.MustParseAddrPort("10.0.0.2:7427")
	dial := func() *rsocket.Conn {
		c, err := rsocket.Dial(ctx(t), cmgr, server, netip.Addr{}, rsocket.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	data := make([]byte, 1<<20+13)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dst", "dst2"} {
		var cout bytes.Buffer
		if err := cmtool.RcopyClient(dial(), src, filepath.Join(dir, name), &cout); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, cout.String())
		}
		if !strings.HasPrefix(cout.String(), "opening...transferring...closing...done\n1048589 bytes in ") {
			t.Errorf("the client printed %q", cout.String())
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes arrived (%v), want the %d sent", name, len(got), err, len(data))
		}
		if st, _ := os.Stat(filepath.Join(dir, name)); st.Mode().Perm() != 0o640 {
			t.Errorf("%s has mode %v, want the source's 0640", name, st.Mode())
		}
	}
	var cout bytes.Buffer
	err = cmtool.RcopyClient(dial(), src, filepath.Join(dir, "no", "such", "dir"), &cout)
	if err == nil || !strings.Contains(err.Error(), "status 2") {
		t.Errorf("a destination in no directory: %v", err)
	}
	// A hostile client: a header of another version.
	c := dial()
	if _, err := c.Write(make([]byte, 16)); err != nil { // version 0, length 0: too short
		t.Fatal(err)
	}
	c.Close()
	if err := cmtool.RcopyClient(dial(), src, filepath.Join(dir, "dst3"), &cout); err != nil {
		t.Fatalf("after a broken client: %v", err)
	}
	stop()
	<-served
	for _, want := range []string{"opening: " + filepath.Join(dir, "dst") + ", transferring...1048589 bytes...closing...done\n", "unable to open destination file", "invalid version 0 or length 0"} {
		if !strings.Contains(sout.String(), want) {
			t.Errorf("the server printed\n%s\nwant %q in it", sout.String(), want)
		}
	}
}
