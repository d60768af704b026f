package worker_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/worker"
)

// The ops listener's admin switch holds and releases the gate for an admin
// token only, and says why it cannot when the process has no usable secret
// or no consumer; SwitchConsumer (what `seckill consumer` and the bench
// call) reads its answers.
func TestOpsSwitchHoldsTheConsumerForAdminsOnly(t *testing.T) {
	secret := []byte("ops-switch-test-secret-of-32-bytes!!")
	sign := func(role auth.Role) string {
		tok, err := auth.Sign(secret, 1, role, time.Minute, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	admin := sign(auth.RoleAdmin)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := worker.NewGate()
	m := worker.NewMetrics(g)
	srv := httptest.NewServer(worker.OpsHandler(m, g, auth.NewVerifier(secret), log))
	defer srv.Close()
	ctx := context.Background()

	steps := []struct {
		action string
		held   bool
	}{{"hold", true}, {"hold", true}, {"status", true}, {"release", false}, {"status", false}}
	for _, s := range steps {
		held, err := worker.SwitchConsumer(ctx, srv.URL, admin, s.action)
		if err != nil || held != s.held || g.Held() != s.held {
			t.Fatalf("%s: held %v (gate %v), err %v; want %v", s.action, held, g.Held(), err, s.held)
		}
	}
	if _, err := worker.SwitchConsumer(ctx, srv.URL, sign(auth.RoleBuyer), "hold"); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") || g.Held() {
		t.Fatalf("a buyer's hold: err %v, held %v; want UNAUTHORIZED and not held", err, g.Held())
	}
	resp, err := http.Post(srv.URL+worker.ConsumerPath+"/hold", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || g.Held() {
		t.Fatalf("a hold without a token: %s, held %v", resp.Status, g.Held())
	}
	if resp, err := http.Get(srv.URL + worker.ConsumerPath + "/hold"); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET of the hold: %v %v, want 405", resp, err)
	} else {
		_ = resp.Body.Close()
	}

	for name, h := range map[string]http.Handler{
		"no secret":   worker.OpsHandler(m, g, nil, log),
		"no consumer": worker.OpsHandler(m, nil, auth.NewVerifier(secret), log),
	} {
		s := httptest.NewServer(h)
		if _, err := worker.SwitchConsumer(ctx, s.URL, admin, "hold"); err == nil || !strings.Contains(err.Error(), "UNAVAILABLE") {
			t.Errorf("%s: err %v, want UNAVAILABLE", name, err)
		}
		s.Close()
	}
	if g.Held() {
		t.Fatal("held by a refused switch")
	}
}
