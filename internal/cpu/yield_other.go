//go:build !linux

package cpu

import "runtime"

// Yield gives the CPU to other goroutines; elsewhere than on Linux, the
// kernel's threads are left to the kernel.
func Yield() { runtime.Gosched() }
