package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/testkit"
)

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// `seckill api` with SECKILL_API_METRICS_ADDR serves /metrics there, and the
// public listener does not (404), against the real services.
func TestAPIMetricsOnTheirOwnListener(t *testing.T) {
	_, mcfg := testkit.MySQL(t)
	_, prefix := testkit.Redis(t)
	cfg := testkit.Config(t)
	cfg.Dev, cfg.MySQL, cfg.Redis.KeyPrefix = true, mcfg, prefix
	cfg.API.Addr, cfg.API.MetricsAddr = freeAddr(t), freeAddr(t)
	cfg.API.Instance = testkit.Name(t, "api")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runAPI(ctx, &app{cfg: cfg, log: testkit.Logger(t)}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("api: %v", err)
		}
	})
	get := func(addr string) (int, string, error) {
		res, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = res.Body.Close() }()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), nil
	}
	// Wait for the public listener (it starts after the metrics one).
	for {
		if _, _, err := get(cfg.API.Addr); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("api stopped: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if code, body, err := get(cfg.API.MetricsAddr); err != nil || code != http.StatusOK || !strings.Contains(body, "seckill_reservations_total") {
		t.Fatalf("metrics listener: %d %v %.200s", code, err, body)
	}
	if code, body, err := get(cfg.API.Addr); err != nil || code != http.StatusNotFound {
		t.Fatalf("public listener's /metrics: %d %v %.200s", code, err, body)
	}
}
