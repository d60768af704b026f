package nemesis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The tool's reserved names. Every fault holds one of Slots slots; slot n
// owns the lo ingress filter prefs SlotPrefs(n), the ifb dropN and the tun
// delayN, and nothing else, so healing a slot removes only what the tool
// added there and faults in other slots run on.
const (
	Slots     = 16
	PrefFirst = 48640 // 0xbe00: below partition.sh's 49152.. (tc's first automatic pref)
	PrefLast  = PrefFirst + Slots*prefsPerSlot - 1

	prefsPerSlot = 4 // IPv4 to the port, IPv4 from it, IPv6 to, IPv6 from
	devPrefix    = "nemesis-"
	stateDir     = "/run/seckill-nemesis"
)

// SlotPrefs returns the filter prefs slot n may install on lo's ingress.
func SlotPrefs(n int) []int {
	out := make([]int, prefsPerSlot)
	for i := range out {
		out[i] = PrefFirst + n*prefsPerSlot + i
	}
	return out
}

func slotPref(n int, fam family, dir direction) int {
	i := int(dir)
	if fam.proto == ipv6.proto {
		i += 2
	}
	return PrefFirst + n*prefsPerSlot + i
}

func sinkDev(n int) string  { return devPrefix + "drop" + strconv.Itoa(n) }
func delayDev(n int) string { return devPrefix + "delay" + strconv.Itoa(n) }

func lockPath(n int) string { return filepath.Join(stateDir, "slot-"+strconv.Itoa(n)+".lock") }

// A slot's lock file is flock'ed by the process that made the fault and by
// its watchdog, which inherits the same open file: the slot is free again
// only when both are gone. Its text records what a heal must undo that the
// kernel does not show (the paused pids), and who holds it.

// slot is a held slot and its watchdog.
type slot struct {
	n     int
	lock  *os.File
	guard *exec.Cmd
	pipe  *os.File      // the watchdog's stdin: closing it (or dying) heals
	done  chan struct{} // closed when the watchdog exited
	err   error         // its exit status, once done
}

var errNoSlot = fmt.Errorf("every one of the %d slots holds a fault: heal one first", Slots)

// acquire takes a free slot, one that nothing of a crash is left in when
// it can: such a leftover (a run killed together with its watchdog) stays
// for `seckill-nemesis heal` to report and remove. When every free slot
// has one, it heals one and takes it.
func acquire(ctx context.Context) (*slot, error) {
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
	var withLeftovers []int
	for n := range Slots {
		f, ok, err := tryLock(lockPath(n))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if len(slotLeftovers(n, prefs, devs)) > 0 {
			_ = f.Close()
			withLeftovers = append(withLeftovers, n)
			continue
		}
		return &slot{n: n, lock: f, done: make(chan struct{})}, nil
	}
	for _, n := range withLeftovers {
		f, ok, err := tryLock(lockPath(n))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if err := healSlot(ctx, n); err != nil {
			_ = f.Close()
			return nil, err
		}
		return &slot{n: n, lock: f, done: make(chan struct{})}, nil
	}
	return nil, errNoSlot
}

func tryLock(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("flock %s: %w", path, err)
	}
	return f, true, nil
}

// withLoLock runs fn holding the lock that orders changes of lo's clsact
// qdisc and of net.ipv4.conf.all.rp_filter among the tool's processes (the
// heal script takes it too).
func withLoLock(fn func() error) error {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(stateDir, "lo.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("flock lo.lock: %w", err)
	}
	return fn()
}

// record writes who holds the slot, for `seckill-nemesis heal`.
func (s *slot) record(kind Kind, what string) error {
	rec := fmt.Sprintf("pid %d\nwatchdog %d\nkind %s\nwhat %s\nsince %s\n",
		os.Getpid(), s.guard.Process.Pid, kind, what, time.Now().Format(time.RFC3339))
	if err := s.lock.Truncate(0); err != nil {
		return err
	}
	_, err := s.lock.WriteAt([]byte(rec), 0)
	return err
}

// recordPause appends a pid the heal must continue; written before the
// SIGSTOP, so no crash leaves a process stopped and unrecorded.
func (s *slot) recordPause(pid int) error {
	_, err := s.lock.Seek(0, 2)
	if err == nil {
		_, err = fmt.Fprintf(s.lock, "pause %d\n", pid)
	}
	return err
}

// startGuard starts the watchdog: a shell in a session of its own (no
// terminal's Ctrl-C or hangup reaches it) that waits for EOF on its stdin,
// which it gets when this process heals or dies however it dies, and then
// runs the slot's heal.
func (s *slot) startGuard(stderr *os.File) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command("/bin/sh", "-c", guardScript(s.n, os.Getpid()), "seckill-nemesis-watchdog")
	cmd.Stdin, cmd.Stderr = r, stderr
	cmd.ExtraFiles = []*os.File{s.lock} // fd 3: the slot stays locked while the watchdog lives
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return fmt.Errorf("start the watchdog: %w", err)
	}
	s.guard, s.pipe = cmd, w
	go func() { s.err = cmd.Wait(); close(s.done) }()
	return nil
}

// release heals the slot through its watchdog and frees it. When the
// watchdog is gone or does not finish, the heal runs here.
func (s *slot) release(ctx context.Context) error {
	var guardErr error
	if s.guard != nil {
		_, _ = s.pipe.WriteString("healed\n")
		_ = s.pipe.Close()
		select {
		case <-s.done:
			if s.err != nil {
				guardErr = fmt.Errorf("the watchdog (pid %d) ended before the heal: %v", s.guard.Process.Pid, s.err)
			}
		case <-time.After(15 * time.Second):
			_ = s.guard.Process.Kill()
			<-s.done
			guardErr = fmt.Errorf("the watchdog (pid %d) did not finish its heal in 15 s", s.guard.Process.Pid)
		}
	}
	var err error
	if s.guard == nil || guardErr != nil {
		err = healSlot(ctx, s.n)
	}
	return errors.Join(guardErr, err, s.lock.Close())
}

// healSlot runs slot n's heal now, in this process's stead.
func healSlot(ctx context.Context, n int) error {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", healScript(n))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("heal slot %d: %v: %s", n, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// healScript undoes everything slot n may hold, in the order that lets
// traffic flow first: its filters, the paused pids, its devices (a delay
// line's tun goes with its process; waited for), lo's clsact qdisc when no
// filter of anyone is left on lo, and all.rp_filter once no delay line is
// left. Idempotent; the one heal every path runs.
func healScript(n int) string {
	prefs := SlotPrefs(n)
	ps := make([]string, len(prefs))
	for i, p := range prefs {
		ps[i] = strconv.Itoa(p)
	}
	return fmt.Sprintf(`heal() {
  for p in %[1]s; do tc filter del dev lo ingress pref "$p" 2>/dev/null; done
  while read -r k v; do [ "$k" = pause ] && kill -CONT "$v" 2>/dev/null; done <%[2]s/slot-%[3]d.lock
  : >%[2]s/slot-%[3]d.lock
  ip link del %[4]s 2>/dev/null
  i=0; while [ -e /sys/class/net/%[5]s ] && [ $i -lt 40 ]; do ip link del %[5]s 2>/dev/null; sleep 0.05; i=$((i+1)); done
  exec 8>>%[2]s/lo.lock; flock 8
  [ -z "$(tc filter show dev lo ingress 2>/dev/null; tc filter show dev lo egress 2>/dev/null)" ] &&
    tc qdisc del dev lo clsact 2>/dev/null
  if [ -f %[2]s/rp_filter ] && ! ls /sys/class/net | grep -q '^%[6]sdelay'; then
    cat %[2]s/rp_filter >/proc/sys/net/ipv4/conf/all/rp_filter && rm -f %[2]s/rp_filter
  fi
  exec 8>&-
  return 0
}
heal
`, strings.Join(ps, " "), stateDir, n, sinkDev(n), delayDev(n), devPrefix)
}

// guardScript is the watchdog: it heals when its stdin ends, and says so
// when the holder ended without asking for it.
func guardScript(n, holder int) string {
	return fmt.Sprintf(`trap '' HUP INT
trap 'heal; exit 0' TERM
%s
`, strings.Replace(healScript(n), "\nheal\n", "\n", 1)) + fmt.Sprintf(`read -r why
heal
[ "$why" = healed ] || echo "seckill-nemesis watchdog: pid %d ended without healing its fault (slot %d); healed" >&2
exit 0
`, holder, n)
}
