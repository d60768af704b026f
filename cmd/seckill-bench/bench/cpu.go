package bench

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/seckill/seckill/config"
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
// the API: every Redis node and every broker of cfg (on the cluster profile
// six redis-server and two brokers; found by the ports they listen on, so a
// second stack on the machine is not counted), and this load generator.
// When no listener is found for a role (another user's processes), the
// first process whose command line names it stands in.
func StackPIDs(cfg config.Config) map[string][]int {
	pids := map[string][]int{"load generator": {os.Getpid()}}
	byPort := listenerPIDs()
	role := func(name string, addrs []string, cmdline string) {
		seen := map[int]bool{}
		for _, a := range addrs {
			_, port, err := net.SplitHostPort(a)
			if err != nil {
				continue
			}
			n, _ := strconv.Atoi(port)
			if pid := byPort[n]; pid > 0 && !seen[pid] {
				seen[pid] = true
				pids[name] = append(pids[name], pid)
			}
		}
		if len(pids[name]) == 0 {
			if p := findProcess(cmdline); p > 0 {
				pids[name] = []int{p}
			}
		}
	}
	role("redis", cfg.Redis.Addresses(), "redis-server")
	role("broker", cfg.RocketMQ.Brokers, "org.apache.rocketmq.broker.BrokerStartup")
	return pids
}

// listenerPIDs maps the TCP ports listened on (IPv4 and IPv6) to the pid of
// a process holding the listening socket: /proc/net/tcp* give each
// listener's socket inode, /proc/<pid>/fd the processes' sockets.
func listenerPIDs() map[int]int {
	inodes := map[string]int{} // socket inode -> port
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" { // 0A: LISTEN
				continue
			}
			i := strings.LastIndexByte(fs[1], ':')
			if i < 0 {
				continue
			}
			port, err := strconv.ParseUint(fs[1][i+1:], 16, 16)
			if err != nil {
				continue
			}
			inodes["socket:["+fs[9]+"]"] = int(port)
		}
	}
	out := map[int]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(d)
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(d, fd.Name()))
			if err != nil || !strings.HasPrefix(target, "socket:[") {
				continue
			}
			if port, ok := inodes[target]; ok {
				if _, dup := out[port]; !dup {
					out[port] = pid
				}
			}
		}
	}
	return out
}

// CPUMeter measures the CPU that groups of processes use over a window.
type CPUMeter struct {
	pids  map[string][]int
	start map[string]float64
}

// StartCPU snapshots the processes' CPU times, summed per name.
func StartCPU(pids map[string][]int) *CPUMeter {
	m := &CPUMeter{pids: pids, start: map[string]float64{}}
	for name := range pids {
		if s, ok := m.seconds(name); ok {
			m.start[name] = s
		}
	}
	return m
}

// seconds is the summed CPU time of a name's processes (false when none
// can be read).
func (m *CPUMeter) seconds(name string) (float64, bool) {
	var sum float64
	read := false
	for _, pid := range m.pids[name] {
		if pid <= 0 {
			continue
		}
		if s, err := procCPUSeconds(pid); err == nil {
			sum += s
			read = true
		}
	}
	return sum, read
}

// PerAnswer returns each name's CPU-µs per answer since StartCPU, and their
// sum under "total".
func (m *CPUMeter) PerAnswer(answers int64) map[string]float64 {
	out := map[string]float64{}
	if answers <= 0 {
		return out
	}
	var total float64
	for name, s0 := range m.start {
		s1, ok := m.seconds(name)
		if !ok {
			continue
		}
		us := (s1 - s0) * 1e6 / float64(answers)
		out[name] = us
		total += us
	}
	out["total"] = total
	return out
}
