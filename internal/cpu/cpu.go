// Package cpu tells a busy-polling loop about the machine it spins on.
package cpu

import "runtime"

// One reports whether the process can run on one CPU only (the CPUs of
// its affinity mask, as the runtime counted them at start). A loop that
// busy polls there takes the CPU from everything else, the kernel's own
// packet processing included (softirqs handed to ksoftirqd), so it must
// give the CPU back as it spins (Yield).
func One() bool { return runtime.NumCPU() == 1 }
