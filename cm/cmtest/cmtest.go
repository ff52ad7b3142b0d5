// Package cmtest opens gorxe devices with a connection manager on an
// in-memory fabric, for the tests of the packages built on package cm.
package cmtest

import (
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rnic"
)

// Open opens a device at addr on the fabric f and a connection manager on
// its QP 1, both closed when the test ends.
func Open(t testing.TB, f *mem.Fabric, addr string) (*rnic.Device, *cm.Manager) {
	t.Helper()
	l, err := f.NewLink(netip.MustParseAddr(addr))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rnic.Open(rnic.Config{Link: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	m, err := cm.New(dev, cm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return dev, m
}
