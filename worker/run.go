package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/seckill/seckill/auth"
)

// ConsumerPath is the order consumer's admin switch (GET; POST /hold, /release).
const ConsumerPath = "/admin/consumer"

// OpsHandler serves /metrics, /healthz and the admin switch (503 without verifier or gate).
func OpsHandler(m *Metrics, gate *Gate, verifier *auth.Verifier, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	admin := func(act func()) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			switch {
			case verifier == nil:
				opsError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "the admin switch needs SECKILL_JWT_SECRET (not the development secret unless SECKILL_DEV=1)")
			case !isAdmin(verifier, r):
				opsError(w, http.StatusUnauthorized, "UNAUTHORIZED", "a bearer token of role admin is required")
			case gate == nil:
				opsError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "this worker runs no order consumer")
			default:
				act()
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]bool{"held": gate.Held()})
			}
		}
	}
	mux.HandleFunc("GET "+ConsumerPath, admin(func() {}))
	mux.HandleFunc("POST "+ConsumerPath+"/hold", admin(func() { gate.Set(true); log.Info("order consumer", "held", true) }))
	mux.HandleFunc("POST "+ConsumerPath+"/release", admin(func() { gate.Set(false); log.Info("order consumer", "held", false) }))
	return mux
}

func isAdmin(v *auth.Verifier, r *http.Request) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	p, err := v.Verify(token)
	return err == nil && p.IsAdmin()
}

func opsError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// SwitchConsumer sends "hold", "release" or "status" and returns whether the consumer is held.
func SwitchConsumer(ctx context.Context, baseURL, adminToken, action string) (held bool, err error) {
	method, path := http.MethodPost, ConsumerPath+"/"+action
	if action == "status" {
		method, path = http.MethodGet, ConsumerPath
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(baseURL, "/")+path, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("%s %s: %w", method, req.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Held  bool `json:"held"`
		Error struct{ Code, Message string }
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&body); err != nil {
		return false, fmt.Errorf("%s %s: %s: %w", method, req.URL, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s %s: %s %s: %s", method, req.URL, resp.Status, body.Error.Code, body.Error.Message)
	}
	return body.Held, nil
}
