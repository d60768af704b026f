package testkit

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// RepoRoot returns the repository's root directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	// From the test's working directory (its package's) up to go.mod: right
	// under -trimpath too, where runtime.Caller names no directory.
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("repo root (go.mod) not found above %s", dir)
		}
	}
}

// built are the binaries this test process built, by package.
var built sync.Map // package -> *binary

type binary struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// buildBinary builds the command pkg (./cmd/…) once per test process and
// returns its path.
func buildBinary(t testing.TB, pkg, name string) string {
	t.Helper()
	root := RepoRoot(t)
	v, _ := built.LoadOrStore(pkg, &binary{})
	b := v.(*binary)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "seckill-test-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Dir = root
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, b.err, b.out)
	}
	return b.path
}

// SeckillBinary builds cmd/seckill once per test process and returns its
// path: tests run its roles as child processes they can kill -9.
func SeckillBinary(t testing.TB) string {
	t.Helper()
	return buildBinary(t, "./cmd/seckill", "seckill")
}

// StripeStandinBinary builds cmd/seckill-stripe, the Stripe stand-in, once
// per test process and returns its path.
func StripeStandinBinary(t testing.TB) string {
	t.Helper()
	return buildBinary(t, "./cmd/seckill-stripe", "seckill-stripe")
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// StripeMockBin is the stripe-mock binary for a test: SECKILL_STRIPE_MOCK_BIN,
// else stripe-mock on the PATH. It skips the test under -short or without
// one, unless SECKILL_REQUIRE_STRIPE_MOCK=1 (make test) makes that a failure.
func StripeMockBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("stripe-mock: an integration test")
	}
	bin := os.Getenv("SECKILL_STRIPE_MOCK_BIN")
	if bin == "" {
		bin, _ = exec.LookPath("stripe-mock")
	}
	if bin == "" {
		if os.Getenv("SECKILL_REQUIRE_STRIPE_MOCK") == "1" {
			t.Fatal("stripe-mock not found: scripts/stack stripe-mock installs it, SECKILL_STRIPE_MOCK_BIN names it")
		}
		t.Skip("stripe-mock not found: scripts/stack stripe-mock installs it (SECKILL_REQUIRE_STRIPE_MOCK=1 makes this a failure)")
	}
	return bin
}
