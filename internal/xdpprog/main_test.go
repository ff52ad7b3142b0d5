package xdpprog

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Loading and running BPF programs needs root (CAP_BPF and CAP_NET_ADMIN).
// So that the attach tests never touch the machine's own interfaces, and
// nothing they create outlives them even if they crash, TestMain runs the
// test binary again in a new network namespace, where they make veth pairs.

const netnsEnv = "GORXE_XDPPROG_TEST_NETNS"

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 && os.Getenv(netnsEnv) == "" {
		cmd := exec.Command(os.Args[0], os.Args[1:]...)
		cmd.Env = append(os.Environ(), netnsEnv+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "xdpprog tests: running in a new network namespace: %v\n", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// needRoot skips a test that loads BPF programs when not root.
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading XDP programs needs root (CAP_BPF and CAP_NET_ADMIN); CI runs as root")
	}
}

// load loads a program and closes it in cleanup.
func load(t testing.TB, c Config) *Program {
	t.Helper()
	needRoot(t)
	p, err := Load(c)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
