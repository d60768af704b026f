package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is the kernel's USER_HZ: the unit of /proc/<pid>/stat times
// (100 on every Linux the project runs on).
const clockTicks = 100

// procCPUSeconds reads a process's user+system CPU time from /proc.
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count fields after ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad times", pid)
	}
	return float64(utime+stime) / clockTicks, nil
}

// findProcess returns the pid of the first process whose command line
// contains every one of parts (0 if none).
func findProcess(parts ...string) int {
	return scanProcs(func(args []string) bool {
		cmd := strings.Join(args, " ")
		for _, p := range parts {
			if !strings.Contains(cmd, p) {
				return false
			}
		}
		return true
	})
}

// StackPIDs finds the processes whose CPU a stage is charged with besides
// the API: Redis, the RocketMQ broker, and this load generator.
func StackPIDs() map[string]int {
	pids := map[string]int{"load generator": os.Getpid()}
	if p := findProcess("redis-server"); p > 0 {
		pids["redis"] = p
	}
	if p := findProcess("org.apache.rocketmq.broker.BrokerStartup"); p > 0 {
		pids["broker"] = p
	}
	return pids
}

// CPUMeter measures the CPU the named processes use over a window.
type CPUMeter struct {
	pids  map[string]int
	start map[string]float64
}

// StartCPU snapshots the processes' CPU times.
func StartCPU(pids map[string]int) *CPUMeter {
	m := &CPUMeter{pids: pids, start: map[string]float64{}}
	for name, pid := range pids {
		if pid <= 0 {
			continue
		}
		if s, err := procCPUSeconds(pid); err == nil {
			m.start[name] = s
		}
	}
	return m
}

// PerAnswer returns each process's CPU-µs per answer since StartCPU, and
// their sum under "total".
func (m *CPUMeter) PerAnswer(answers int64) map[string]float64 {
	out := map[string]float64{}
	if answers <= 0 {
		return out
	}
	var total float64
	for name, s0 := range m.start {
		s1, err := procCPUSeconds(m.pids[name])
		if err != nil {
			continue
		}
		us := (s1 - s0) * 1e6 / float64(answers)
		out[name] = us
		total += us
	}
	out["total"] = total
	return out
}
