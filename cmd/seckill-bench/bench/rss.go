package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FindPID returns the pid of a running `seckill <role>` process (0 if none):
// argv[0] ends in "seckill" and argv[1] is the role.
func FindPID(role string) int {
	return scanProcs(func(args []string) bool {
		return len(args) >= 2 && filepath.Base(args[0]) == "seckill" && args[1] == role
	})
}

// scanProcs returns the pid of the first other process whose argv matches
// (0 if none).
func scanProcs(match func(args []string) bool) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	self := os.Getpid()
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(d + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			return pid
		}
	}
	return 0
}

// memKB reads VmRSS and VmHWM (peak resident set) of a process in kB.
func memKB(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss, _ = strconv.ParseInt(f[1], 10, 64)
		case "VmHWM:":
			hwm, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return rss, hwm, nil
}

// ProcMem is a process's memory during a measurement.
type ProcMem struct {
	Role string `json:"role"`
	PID  int    `json:"pid"`
	// PeakRSSMB is the highest VmRSS sampled during the measurement;
	// HWMMB the kernel's VmHWM (peak since the process started) at its end.
	PeakRSSMB float64 `json:"peak_rss_mb"`
	HWMMB     float64 `json:"vm_hwm_mb"`
	Samples   int     `json:"samples"`
	Error     string  `json:"error,omitempty"`
}

// RSSSampler samples the resident set of some processes every 200 ms.
type RSSSampler struct {
	mu   sync.Mutex
	mem  map[string]*ProcMem
	stop func()
}

// SampleRSS starts sampling pids (role -> pid; a pid of 0 is looked up by role).
func SampleRSS(ctx context.Context, pids map[string]int) *RSSSampler {
	s := &RSSSampler{mem: map[string]*ProcMem{}}
	for role, pid := range pids {
		if pid == 0 {
			pid = FindPID(role)
		}
		m := &ProcMem{Role: role, PID: pid}
		if pid == 0 {
			m.Error = "no running `seckill " + role + "` process found"
		}
		s.mem[role] = m
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	s.stop = func() { cancel(); <-done }
	return s
}

func (s *RSSSampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.mem {
		if m.PID == 0 {
			continue
		}
		rss, hwm, err := memKB(m.PID)
		if err != nil {
			m.Error = err.Error()
			continue
		}
		m.Samples++
		m.PeakRSSMB = max(m.PeakRSSMB, float64(rss)/1024)
		m.HWMMB = float64(hwm) / 1024
	}
}

// Stop ends sampling and returns the figures by role.
func (s *RSSSampler) Stop() map[string]ProcMem {
	s.stop()
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]ProcMem{}
	for k, v := range s.mem {
		out[k] = *v
	}
	return out
}

// jiffies are the machine's CPU times from /proc/stat's first line.
type jiffies struct{ busy, steal, total uint64 }

// cpuTimes reads the machine's busy, stolen and total jiffies from /proc/stat.
func cpuTimes() (jiffies, error) {
	var j jiffies
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return j, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return j, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	// user nice system idle iowait irq softirq steal; guest time is already
	// in user and nice.
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return j, fmt.Errorf("/proc/stat: %w", err)
		}
		j.total += v
		if i != 3 && i != 4 { // idle, iowait
			j.busy += v
		}
		if i == 7 {
			j.steal = v
		}
	}
	return j, nil
}

// busySince is the fraction of the machine's CPU busy since j0 (and the
// fraction the hypervisor stole), as of j1.
func busySince(j0, j1 jiffies) (busy, steal float64) {
	if j1.total <= j0.total {
		return 0, 0
	}
	d := float64(j1.total - j0.total)
	return float64(j1.busy-j0.busy) / d, float64(j1.steal-j0.steal) / d
}

// Settle waits until the machine is quiet (under maxBusy of its CPU for
// half a second: background work of the previous stage, a Redis AOF
// rewrite, a JVM's GC, done) or within has passed; it returns the busy
// fraction it last saw. Each stage starts from the same quiet machine.
func Settle(ctx context.Context, maxBusy float64, within time.Duration) float64 {
	deadline := time.Now().Add(within)
	last := 1.0
	j0, err := cpuTimes()
	if err != nil {
		return -1
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return last
		case <-time.After(500 * time.Millisecond):
		}
		j1, err := cpuTimes()
		if err != nil {
			return -1
		}
		if j1.total > j0.total {
			last, _ = busySince(j0, j1)
		}
		if last <= maxBusy {
			return last
		}
		j0 = j1
	}
	return last
}
