package testkit

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// RepoRoot returns the repository's root directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repo root not found from %s", file)
	}
	return root
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildOut  []byte
)

// SeckillBinary builds cmd/seckill once per test process and returns its
// path: tests run its roles as child processes they can kill -9.
func SeckillBinary(t testing.TB) string {
	t.Helper()
	root := RepoRoot(t)
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "seckill-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "seckill")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/seckill")
		cmd.Dir = root
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build: %v\n%s", buildErr, buildOut)
	}
	return binPath
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
