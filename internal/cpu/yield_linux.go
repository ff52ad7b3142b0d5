package cpu

import "golang.org/x/sys/unix"

// Yield gives the CPU to another thread that is ready to run, if there is
// one, and returns at once otherwise: sched_yield(2). Unlike
// runtime.Gosched, which hands the thread to another goroutine, it lets
// the kernel's threads and other processes run. It is a raw system call,
// as it cannot block.
func Yield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
