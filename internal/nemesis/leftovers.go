package nemesis

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Holder is a process that holds a slot's fault.
type Holder struct {
	Slot int
	PID  int
	What string // the fault, as its record says
}

// HealLeftovers removes what the tool left on this machine: it stops the
// running faults of `seckill-nemesis` processes (SIGTERM: they heal), and
// heals every slot whose fault's process and watchdog are both gone but
// whose filters, devices or paused pids remain. A slot held by another live
// process (a test's fault) is not a leftover: it is left to its holder and
// returned.
func HealLeftovers(ctx context.Context, log *slog.Logger) (live []Holder, err error) {
	if err := CanRun(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, err
	}
	prefs, err := InstalledPrefs(ctx)
	if err != nil {
		return nil, err
	}
	devs, err := Devices()
	if err != nil {
		return nil, err
	}
	for n := range Slots {
		h, err := healLeftover(ctx, log, n, prefs, devs)
		if err != nil {
			return live, err
		}
		if h != nil {
			live = append(live, *h)
		}
	}
	return live, nil
}

func healLeftover(ctx context.Context, log *slog.Logger, n int, prefs []int, devs []string) (*Holder, error) {
	f, ok, err := tryLock(lockPath(n))
	if err != nil {
		return nil, err
	}
	if !ok {
		h := readHolder(n)
		if h.PID > 0 && isTool(h.PID) {
			log.Info("stopping a running fault", "slot", n, "pid", h.PID, "fault", h.What)
			_ = syscall.Kill(h.PID, syscall.SIGTERM)
		} else if h.PID > 0 && syscall.Kill(h.PID, 0) == nil {
			log.Warn("a live fault of another process: left to it", "slot", n, "pid", h.PID, "fault", h.What)
			return &h, nil
		}
		// Its holder heals, or its watchdog is healing: the slot frees.
		if f, err = waitLock(ctx, n, 15*time.Second); err != nil {
			return nil, err
		}
		if prefs, err = InstalledPrefs(ctx); err == nil { // what its heal left
			devs, err = Devices()
		}
		if err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	defer func() { _ = f.Close() }()
	left := slotLeftovers(n, prefs, devs)
	if len(left) == 0 {
		return nil, nil
	}
	if err := healSlot(ctx, n); err != nil {
		return nil, err
	}
	log.Info("healed a leftover", "slot", n, "removed", strings.Join(left, ", "))
	return nil, nil
}

// SlotLeftovers lists what of slot n is on this machine while no fault
// holds it (held: a fault holds it now, nothing to judge).
func SlotLeftovers(ctx context.Context, n int) (left []string, held bool, err error) {
	f, ok, err := tryLock(lockPath(n))
	if err != nil {
		return nil, false, err
	}
	if !ok {
		return nil, true, nil
	}
	defer func() { _ = f.Close() }()
	prefs, err := InstalledPrefs(ctx)
	if err != nil {
		return nil, false, err
	}
	devs, err := Devices()
	if err != nil {
		return nil, false, err
	}
	return slotLeftovers(n, prefs, devs), false, nil
}

// slotLeftovers: slot n's prefs among prefs, its devices among devs, and
// the pids its record still holds paused.
func slotLeftovers(n int, prefs []int, devs []string) []string {
	var left []string
	for _, p := range SlotPrefs(n) {
		if slices.Contains(prefs, p) {
			left = append(left, "pref "+strconv.Itoa(p))
		}
	}
	for _, d := range []string{sinkDev(n), delayDev(n)} {
		if slices.Contains(devs, d) {
			left = append(left, d)
		}
	}
	rec, _ := os.ReadFile(lockPath(n))
	for line := range strings.Lines(string(rec)) {
		if pid, ok := strings.CutPrefix(strings.TrimSpace(line), "pause "); ok {
			left = append(left, "paused pid "+pid)
		}
	}
	return left
}

func waitLock(ctx context.Context, n int, within time.Duration) (*os.File, error) {
	deadline := time.Now().Add(within)
	for {
		f, ok, err := tryLock(lockPath(n))
		if err != nil || ok {
			return f, err
		}
		if time.Now().After(deadline) {
			h := readHolder(n)
			return nil, fmt.Errorf("slot %d still held after %v (pid %d, %s)", n, within, h.PID, h.What)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readHolder reads a slot's record.
func readHolder(n int) Holder {
	h := Holder{Slot: n}
	f, err := os.Open(lockPath(n))
	if err != nil {
		return h
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		switch k {
		case "pid":
			h.PID, _ = strconv.Atoi(v)
		case "kind":
			h.What = v
		case "what":
			h.What += " " + v
		}
	}
	return h
}

// isTool: pid runs the seckill-nemesis command.
func isTool(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	arg0, _, _ := strings.Cut(string(b), "\x00")
	return strings.HasSuffix(arg0, "seckill-nemesis")
}
