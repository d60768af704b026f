package secure_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/seckill/seckill/queue"
)

// TestMain runs the package's tests, then stops the servers they share
// (started once per run by the first test that needs them: a broker or a
// Temporal server costs tens of seconds to start on a small machine).
func TestMain(m *testing.M) {
	queue.SetClientLogLevel("error")
	code := m.Run()
	shared.mu.Lock()
	stops := shared.stops
	shared.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	if code != 0 {
		for _, d := range shared.dirs {
			fmt.Fprintf(os.Stderr, "test/secure: servers' files and logs kept in %s\n", d)
		}
	} else {
		for _, d := range shared.dirs {
			_ = os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// shared collects what TestMain undoes after the last test: stops of
// servers, and their directories (removed when every test passed, kept
// with their logs otherwise).
var shared struct {
	mu    sync.Mutex
	stops []func()
	dirs  []string
}

// atExit has TestMain call stop after the last test (in reverse order).
func atExit(stop func()) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.stops = append(shared.stops, stop)
}

// sharedDir makes a directory that outlives the test that made it (a shared
// server's files); TestMain removes it, or keeps it when a test failed.
func sharedDir(pattern string) (string, error) {
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.dirs = append(shared.dirs, d)
	return d, nil
}

// server is a server of the package's own, launched by the first test that
// asks for it (the servers stop after the last test: launch registers its
// stop with atExit). A failed launch fails every test that asks.
type server[T any] struct {
	once sync.Once
	v    T
	err  error
}

func (s *server[T]) get(t testing.TB, what string, launch func() (T, error)) T {
	t.Helper()
	s.once.Do(func() { s.v, s.err = launch() })
	if s.err != nil {
		t.Fatalf("%s: %v", what, s.err)
	}
	return s.v
}

// refusal is a client's configuration a server must refuse, and what the
// refusal says.
type refusal[C any] struct {
	name string
	cfg  C
	want string
}

// wantRefused checks that ping fails for every case with an error that
// holds its want.
func wantRefused[C any](t *testing.T, ping func(C) error, cases ...refusal[C]) {
	t.Helper()
	for _, c := range cases {
		err := ping(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal with %q", c.name, err, c.want)
			continue
		}
		t.Logf("%s: refused: %v", c.name, err)
	}
}
