package proc_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/proc"
)

func TestAppendKeepsTheLogAndReportsTheExit(t *testing.T) {
	log := filepath.Join(t.TempDir(), "child.log")
	for i, banner := range []string{"first", "second"} {
		c, err := proc.Start(proc.Spec{Path: "/bin/sh", Args: []string{"-c", "echo out; echo err >&2; exit 3"},
			Log: log, Append: true, Banner: banner})
		if err != nil {
			t.Fatal(err)
		}
		<-c.Done()
		var exit *exec.ExitError
		if err := c.Err(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
			t.Fatalf("run %d: exit %v, want status 3", i, err)
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if want := "==== first\nout\nerr\n==== second\nout\nerr\n"; string(b) != want {
		t.Fatalf("log %q, want %q", b, want)
	}
}

func TestWithoutAppendTheLogStartsEmpty(t *testing.T) {
	log := filepath.Join(t.TempDir(), "child.log")
	if err := os.WriteFile(log, []byte("old run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := proc.Start(proc.Spec{Path: "/bin/sh", Args: []string{"-c", "echo new"}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(log); string(b) != "new\n" {
		t.Fatalf("log %q, want only this run's output", b)
	}
}

// Stop kills a child that ignores SIGTERM once the grace is over; Kill
// returns once the child is gone.
func TestStopKillsAfterGrace(t *testing.T) {
	dir := t.TempDir()
	c, err := proc.Start(proc.Spec{Path: "/bin/sh", Args: []string{"-c", "trap '' TERM; echo ready; while :; do sleep 1; done"},
		Log: filepath.Join(dir, "stubborn.log")})
	if err != nil {
		t.Fatal(err)
	}
	waitForLog(t, filepath.Join(dir, "stubborn.log"), "ready\n") // the trap is set
	c.Stop(100 * time.Millisecond)
	select {
	case <-c.Done():
	default:
		t.Fatal("Stop returned with the child still running")
	}
	k, err := proc.Start(proc.Spec{Path: "/bin/sh", Args: []string{"-c", "while :; do sleep 1; done"}, Log: filepath.Join(dir, "k.log")})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Done():
	default:
		t.Fatal("Kill returned with the child still running")
	}
	var nilChild *proc.Child
	nilChild.Stop(time.Second) // no-op
}

func waitForLog(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, _ := os.ReadFile(path); string(b) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never read %q", path, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
