// Package cmtest opens gorxe devices with a connection manager on an
// in-memory fabric, for the tests of the packages built on package cm.
package cmtest

import (
	"testing"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rnic/rnictest"
)

// Open opens a device at addr on the fabric f and a connection manager on
// its QP 1, both closed when the test ends.
func Open(t testing.TB, f *mem.Fabric, addr string) (*rnic.Device, *cm.Manager) {
	t.Helper()
	dev := rnictest.Open(t, f, addr)
	m, err := cm.New(dev, cm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return dev, m
}
