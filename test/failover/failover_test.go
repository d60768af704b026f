// Package failover_test kills and stops real services and processes
// mid-flight (kill -9 of the API and the worker, the broker and Temporal
// stopped) and checks that no order and no unit is lost. The tests stop
// the services of the stack they run on, so they run only with
// SECKILL_FAILOVER=1, one at a time: `make test` runs them from the start
// on the failover profile's stack (scripts/stack --profile failover, with
// SECKILL_STACK_PROFILE=failover so that their scripts/stack calls reach
// it), beside the other tests on the default stack. TestLiveRepairDuringASale
// stops no shared service (it kills a private Redis and runs on a private
// Temporal): make test runs it on the default stack, after the secure tests.
package failover_test

import (
	"os"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/testkit"
)

func requireEnabled(t *testing.T) {
	t.Helper()
	if os.Getenv("SECKILL_FAILOVER") != "1" {
		t.Skip("stops shared services: set SECKILL_FAILOVER=1 (and hold /tmp/seckill-failover.lock)")
	}
}

// child is a `seckill` role run as a child process the test can kill -9.
type child struct{ *proc.Child }

// startChild runs `bin role` with env, appending its output to logPath under
// a banner line. When the test ends the child is killed, and on failure the
// tail of its log is printed.
func startChild(t *testing.T, bin, logPath, banner string, env []string, role string) *child {
	t.Helper()
	return &child{testkit.Start(t, proc.Spec{Path: bin, Args: []string{role}, Env: env, Log: logPath, Append: true, Banner: banner}, 0)}
}

// exitsCleanly waits until the child, sent SIGTERM, has exited without an
// error (30 s at most).
func (c *child) exitsCleanly(t *testing.T, name string) {
	t.Helper()
	select {
	case <-c.Done():
		if c.Err() != nil {
			t.Fatalf("%s exited with %v after SIGTERM", name, c.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still running 30 s after SIGTERM", name)
	}
}

// kill9 kills the child with SIGKILL and waits for it to be gone.
func (c *child) kill9(t *testing.T) {
	t.Helper()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
}
