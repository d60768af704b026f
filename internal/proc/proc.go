// Package proc runs a `seckill` role as a child process with its output in
// a log file: the bench's bare HTTP server and the failover tests' API and
// worker instances, which kill -9 and restart them.
package proc

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Spec is the process to start.
type Spec struct {
	Path string   // the executable; "" is this one (os.Executable)
	Args []string // after the program name
	Env  []string // nil: this process's environment
	Log  string   // stdout and stderr go here
	// Append keeps what Log holds (several children sharing one log) and
	// writes Banner as a line first; otherwise Log is truncated.
	Append bool
	Banner string
}

// Child is a started process. Done is closed once it exited; Err is then
// its exit status.
type Child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts the process described by s.
func Start(s Spec) (*Child, error) {
	path := s.Path
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		path = exe
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if s.Append {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(s.Log, flags, 0o644)
	if err != nil {
		return nil, err
	}
	if s.Banner != "" {
		_, _ = fmt.Fprintf(f, "==== %s\n", s.Banner)
	}
	cmd := exec.Command(path, s.Args...)
	cmd.Env = s.Env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, err
	}
	c := &Child{cmd: cmd, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); _ = f.Close(); close(c.done) }()
	return c, nil
}

// PID is the child's process id.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Done is closed when the child has exited.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is the child's exit status; only meaningful once Done is closed.
func (c *Child) Err() error {
	<-c.done
	return c.err
}

// Signal sends sig to the child.
func (c *Child) Signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }

// Kill kills the child with SIGKILL and returns once it is gone.
func (c *Child) Kill() error {
	err := c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
	return err
}

// Stop asks the child to stop (SIGTERM) and kills it after grace. A nil
// Child is a no-op.
func (c *Child) Stop(grace time.Duration) {
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}
