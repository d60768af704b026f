package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/seckill/seckill/config"
)

// `seckill api` refuses to start with the published development secret or a
// short one unless SECKILL_DEV=1; it stops before dialling anything.
func TestAPIRefusesTheDevelopmentSecret(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, secret := range []string{config.DevJWTSecret, "too-short"} {
		a := &app{cfg: config.Config{JWTSecret: config.Secret(secret)}, log: log}
		err := runAPI(context.Background(), a)
		if err == nil || !strings.Contains(err.Error(), "SECKILL_JWT_SECRET") {
			t.Fatalf("secret %q: err %v, want a refusal naming SECKILL_JWT_SECRET", secret, err)
		}
	}
}

// `seckill api` (which signs order messages) and `seckill worker` with its
// order consumer (which accepts what the key signs) refuse the published
// development order signing key, or a short one, unless SECKILL_DEV=1; they
// stop before dialling anything. A worker without the consumer needs no key.
func TestRolesRefuseTheDevelopmentSigningKey(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, key := range []string{config.DevOrderSigningKey, "too-short"} {
		cfg := config.Config{JWTSecret: config.Secret(strings.Repeat("s", 40))}
		cfg.RocketMQ.OrderSigningKey = config.Secret(key)
		cfg.Worker.Consumer, cfg.Worker.Temporal = true, true
		if err := runAPI(context.Background(), &app{cfg: cfg, log: log}); err == nil || !strings.Contains(err.Error(), "SECKILL_ROCKETMQ_ORDER_SIGNING_KEY") {
			t.Fatalf("api, key %q: err %v, want a refusal naming SECKILL_ROCKETMQ_ORDER_SIGNING_KEY", key, err)
		}
		if err := runWorker(context.Background(), cfg, log); err == nil || !strings.Contains(err.Error(), "SECKILL_ROCKETMQ_ORDER_SIGNING_KEY") {
			t.Fatalf("worker, key %q: err %v, want a refusal naming SECKILL_ROCKETMQ_ORDER_SIGNING_KEY", key, err)
		}
		// The same worker without its consumer: it gets past the check and
		// fails dialling Temporal, where nothing listens.
		cfg.Worker.Consumer = false
		cfg.Temporal.Address, cfg.Temporal.Namespace = "127.0.0.1:1", "default"
		stopped, cancel := context.WithCancel(context.Background())
		cancel()
		if err := runWorker(stopped, cfg, log); err != nil {
			t.Fatalf("worker without consumer, key %q: %v, want a clean stop", key, err)
		}
	}
}

// `seckill testpay` serves the test provider only on a development machine:
// its payments move no money, and its secret defaults to a published one.
func TestTestpayRefusesOutsideDevelopment(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := runTestpay(context.Background(), &app{cfg: config.Config{}, log: log})
	if err == nil || !strings.Contains(err.Error(), "SECKILL_DEV=1") {
		t.Fatalf("err %v, want a refusal naming SECKILL_DEV=1", err)
	}
}

// A role told to stop while it is still starting (here: before it has
// reached Temporal) stops cleanly, exit status 0; the same failure with no
// stop asked for is an error.
func TestRolesStoppedWhileStartingStopCleanly(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Config{JWTSecret: config.Secret(strings.Repeat("s", 40))}
	cfg.RocketMQ.OrderSigningKey = config.Secret(strings.Repeat("o", 40))
	cfg.Temporal.Address, cfg.Temporal.Namespace = "127.0.0.1:1", "default" // nothing listens there
	cfg.MySQL.Host, cfg.MySQL.Port = "127.0.0.1", 1
	cfg.Worker.Consumer, cfg.Worker.Temporal = true, true
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	if err := runWorker(stopped, cfg, log); err != nil {
		t.Fatalf("worker stopped while starting: %v, want a clean stop", err)
	}
	if err := runAPI(stopped, &app{cfg: cfg, log: log}); err != nil {
		t.Fatalf("api stopped while starting: %v, want a clean stop", err)
	}
	if err := runWorker(context.Background(), cfg, log); err == nil {
		t.Fatal("worker with no Temporal reachable and no stop asked for: no error")
	}
}
