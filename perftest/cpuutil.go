package perftest

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// cpuStat is what perftest's --cpu_util reads of the machine's CPU time
// (get_cpu_stats): the first line of /proc/stat, all CPUs together, its
// user and idle times in clock ticks.
type cpuStat struct {
	user, idle uint64
	ok         bool
}

// procStat is the file cpuStat is read from; tests point it elsewhere.
var procStat = "/proc/stat"

// readCPUStat reads the machine's CPU times, or a cpuStat that is not ok
// where /proc/stat cannot be read.
func readCPUStat() cpuStat {
	f, err := os.Open(procStat)
	if err != nil {
		return cpuStat{}
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return cpuStat{}
	}
	// cpu  user nice system idle iowait irq softirq ...
	w := strings.Fields(line)
	if len(w) < 5 || w[0] != "cpu" {
		return cpuStat{}
	}
	user, err1 := strconv.ParseUint(w[1], 10, 64)
	idle, err2 := strconv.ParseUint(w[4], 10, 64)
	return cpuStat{user: user, idle: idle, ok: err1 == nil && err2 == nil}
}

// cpuUtil is perftest's calc_cpu_util between two readings: the user time
// as a percentage of user and idle time together (system, interrupt and
// wait times count in neither), or 0.
func cpuUtil(from, to cpuStat) float64 {
	if !from.ok || !to.ok || to.user < from.user || to.idle < from.idle {
		return 0
	}
	user, idle := to.user-from.user, to.idle-from.idle
	if user+idle == 0 {
		return 0
	}
	return float64(user) / float64(user+idle) * 100
}
