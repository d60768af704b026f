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
