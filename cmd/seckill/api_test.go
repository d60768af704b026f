package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/caarlos0/env/v11"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/relay"
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

// The relay's fallbacks for zero options are config's defaults: one truth.
func TestRelayDefaultsMatchConfig(t *testing.T) {
	var c config.Config
	if err := env.ParseWithOptions(&c, env.Options{Prefix: "SECKILL_", Environment: map[string]string{}}); err != nil {
		t.Fatal(err)
	}
	d := relay.DefaultOptions()
	for name, pair := range map[string][2]any{
		"batch":         {int64(c.API.RelayBatch), d.Batch},
		"claim after":   {c.API.RelayClaimAfter, d.ClaimAfter},
		"discover":      {c.API.RelayDiscover, d.Discover},
		"flush timeout": {c.API.RelayFlushTimeout, d.FlushTimeout},
		"parallel":      {c.API.RelayParallel, d.Parallel},
		"send batch":    {c.API.RelaySendBatch, d.SendBatch},
		"retire after":  {c.API.RelayRetireAfter, d.RetireAfter},
	} {
		if pair[0] != pair[1] {
			t.Errorf("relay %s: config default %v, relay default %v", name, pair[0], pair[1])
		}
	}
}
