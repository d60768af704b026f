package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/nemesis"
	"github.com/seckill/seckill/testkit"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary builds this command once: the tests run it as a process they can
// kill -9.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "seckill-nemesis-test-"); buildErr != nil {
			return
		}
		_ = os.Chmod(binDir, 0o755) // for the not-root run
		out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "seckill-nemesis"), ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(err.Error() + ": " + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "seckill-nemesis")
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage: seckill-nemesis FAULT"},
		{[]string{"--help"}, "usage: seckill-nemesis FAULT"},
		{[]string{"zap"}, `unknown fault "zap"`},
		{[]string{"cut"}, "cut needs --ports"},
		{[]string{"cut", "--ports", "70000"}, "port 70000"},
		{[]string{"cut", "--ports", "3306", "--ms", "5"}, "cut takes no --ms"},
		{[]string{"delay", "--ports", "3306"}, "delay needs --ms"},
		{[]string{"replies", "--ports", "3306", "--client", "localhost"}, "--client"},
		{[]string{"pause"}, "pause needs --pid"},
		{[]string{"pause", "--pid", "x"}, "--pid"},
		{[]string{"heal", "extra"}, `unexpected argument "extra"`},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), c.args, &out); code != 2 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", c.args, code, out.String(), c.want)
		}
	}
}

// Without root it says why it cannot run, and exits 2.
func TestNotRootSaysWhyAndExits2(t *testing.T) {
	var out bytes.Buffer
	code := 0
	if os.Geteuid() == 0 {
		cmd := exec.Command(binary(t), "cut", "--ports", "3306")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		cmd.Stdout, cmd.Stderr = &out, &out
		var ee *exec.ExitError
		if err := cmd.Run(); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
	} else {
		code = run(context.Background(), []string{"cut", "--ports", "3306"}, &out)
	}
	if code != 2 || !strings.Contains(out.String(), "cannot run: needs root") {
		t.Fatalf("as nobody: exit %d, %q; want 2 and why", code, out.String())
	}
}

// tool is a running seckill-nemesis and its stderr (the watchdog's too).
type tool struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	text strings.Builder
	more chan struct{}
	eof  chan struct{}
	exit chan error
}

func startTool(t *testing.T, args ...string) *tool {
	t.Helper()
	if err := nemesis.CanRun(); err != nil {
		t.Skipf("kernel network faults: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	tl := &tool{cmd: exec.Command(binary(t), args...), more: make(chan struct{}, 1), eof: make(chan struct{}), exit: make(chan error, 1)}
	tl.cmd.Stderr = w
	if err := tl.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	go func() {
		defer close(tl.eof)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			tl.mu.Lock()
			tl.text.WriteString(sc.Text() + "\n")
			tl.mu.Unlock()
			select {
			case tl.more <- struct{}{}:
			default:
			}
		}
	}()
	go func() { tl.exit <- tl.cmd.Wait() }()
	t.Cleanup(func() {
		_ = tl.cmd.Process.Kill()
		<-tl.eof
		t.Logf("seckill-nemesis %s:\n%s", strings.Join(args, " "), tl.stderr())
	})
	return tl
}

func (tl *tool) stderr() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.text.String()
}

// waitLog waits for a line of stderr that matches re and returns its
// submatches.
func (tl *tool) waitLog(t *testing.T, re string, within time.Duration) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(within)
	for {
		for line := range strings.Lines(tl.stderr()) {
			if m := rx.FindStringSubmatch(line); m != nil {
				return m
			}
		}
		select {
		case <-tl.more:
		case <-tl.eof:
			t.Fatalf("stderr ended with no line matching %s:\n%s", re, tl.stderr())
		case <-deadline:
			t.Fatalf("no line matching %s within %v:\n%s", re, within, tl.stderr())
		}
	}
}

// on waits for the tool's "fault on" line: its slot and watchdog's pid.
func (tl *tool) on(t *testing.T) (slot, watchdog int) {
	t.Helper()
	m := tl.waitLog(t, `msg="fault on" .*slot=(\d+) .*watchdog=(\d+)`, 10*time.Second)
	slot, _ = strconv.Atoi(m[1])
	watchdog, _ = strconv.Atoi(m[2])
	return slot, watchdog
}

// exitCode waits for the tool's exit.
func (tl *tool) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case err := <-tl.exit:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("seckill-nemesis still running after %v", within)
		return -1
	}
}

// cutOff: a new connection to addr hangs (the positive sign of a cut).
func cutOff(t *testing.T, addr string) {
	t.Helper()
	_, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("dial %s during the cut: %v, want a timeout", addr, err)
	}
}

// reachable polls a dial to addr until it succeeds, within.
func reachable(t *testing.T, addr string, within time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return time.Since(t0)
		}
		if time.Since(t0) > within {
			t.Fatalf("%s not reachable within %v: %v", addr, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clean: no filter of the tool on port, and the slot left nothing (unless
// a new fault holds it already), within a few seconds.
func clean(t *testing.T, slot, port int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		prefs, err := nemesis.FiltersOn(ctx, port)
		if err != nil {
			t.Fatal(err)
		}
		left, held, err := nemesis.SlotLeftovers(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if len(prefs) == 0 && (held || len(left) == 0) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("filters on :%d: prefs %v; slot %d left %v", port, prefs, slot, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A fault's tool killed with SIGKILL mid-cut: its watchdog heals the link.
func TestKill9MidCutHeals(t *testing.T) {
	e := testkit.Echo(t)
	tl := startTool(t, "cut", "--ports", strconv.Itoa(e.Port), "--for", "60s")
	slot, _ := tl.on(t)
	cutOff(t, e.Addr)

	if err := tl.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	took := reachable(t, e.Addr, 5*time.Second)
	t.Logf("reachable %v after the SIGKILL", took)
	tl.waitLog(t, `watchdog: pid \d+ ended without healing its fault`, 5*time.Second)
	clean(t, slot, e.Port)
}

// `heal` removes what a fault left when its tool and its watchdog both died.
func TestHealRemovesWhatACrashLeft(t *testing.T) {
	e := testkit.Echo(t)
	tl := startTool(t, "cut", "--ports", strconv.Itoa(e.Port), "--for", "60s")
	slot, watchdog := tl.on(t)
	// The watchdog frozen, then both killed: nobody heals.
	for _, k := range []struct {
		pid int
		sig syscall.Signal
	}{{watchdog, syscall.SIGSTOP}, {tl.cmd.Process.Pid, syscall.SIGKILL}, {watchdog, syscall.SIGKILL}} {
		if err := syscall.Kill(k.pid, k.sig); err != nil {
			t.Fatalf("kill -%d %d: %v", k.sig, k.pid, err)
		}
	}
	tl.exitCode(t, 5*time.Second)
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for { // the slot frees once the watchdog is gone
		if _, held, err := nemesis.SlotLeftovers(ctx, slot); err != nil || !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %d still held after its tool and watchdog were killed", slot)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if prefs, err := nemesis.FiltersOn(ctx, e.Port); err != nil || len(prefs) == 0 {
		t.Fatalf("no filter left on :%d after the crash (%v): the test shows nothing", e.Port, err)
	}
	cutOff(t, e.Addr)

	var out bytes.Buffer
	heal := exec.Command(binary(t), "heal")
	heal.Stdout, heal.Stderr = &out, &out
	if err := heal.Run(); err != nil {
		t.Fatalf("seckill-nemesis heal: %v\n%s", err, out.String())
	}
	t.Logf("seckill-nemesis heal:\n%s", out.String())
	if !strings.Contains(out.String(), `msg="healed a leftover" slot=`+strconv.Itoa(slot)) {
		t.Errorf("heal did not say it healed slot %d", slot)
	}
	clean(t, slot, e.Port)
	reachable(t, e.Addr, 2*time.Second)
}

// SIGTERM heals, and the tool says how many packets it dropped.
func TestSignalHealsAndCounts(t *testing.T) {
	e := testkit.Echo(t)
	tl := startTool(t, "requests", "--ports", strconv.Itoa(e.Port))
	slot, _ := tl.on(t)
	cutOff(t, e.Addr)
	if err := tl.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := tl.exitCode(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	m := tl.waitLog(t, `msg=healed .*why=signal .*dropped_packets=(\d+)`, 5*time.Second)
	if m[1] == "0" {
		t.Errorf("healed with 0 dropped packets after a dial timed out")
	}
	clean(t, slot, e.Port)
	reachable(t, e.Addr, 2*time.Second)
}

// --for holds the fault that long and heals on its own; a delay says how
// many packets it delayed.
func TestDelayForADurationThenHeals(t *testing.T) {
	e := testkit.Echo(t)
	tl := startTool(t, "delay", "--ports", strconv.Itoa(e.Port), "--ms", "60", "--for", "1s")
	slot, _ := tl.on(t)
	t0 := time.Now()
	c, err := net.DialTimeout("tcp", e.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if d := time.Since(t0); d < 120*time.Millisecond {
		t.Errorf("a handshake through 60 ms each way took %v", d)
	}
	if code := tl.exitCode(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	m := tl.waitLog(t, `msg=healed .*why="time up" held=(\S+) delayed_packets=(\d+)`, 5*time.Second)
	if m[2] == "0" {
		t.Errorf("healed with 0 delayed packets after a handshake went through it")
	}
	clean(t, slot, e.Port)
}
