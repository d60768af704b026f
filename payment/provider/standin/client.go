package standin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Admin reaches a stand-in's admin API (/_standin/) from another process:
// the tests and the demo pay a session as the page's button does, turn the
// knobs, read the calls it answered.
type Admin struct {
	base, key string
	hc        *http.Client
}

// NewAdmin reaches the stand-in at baseURL with an API key it takes; hc
// nil: a 10 s timeout.
func NewAdmin(baseURL, key string, hc *http.Client) *Admin {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	return &Admin{base: strings.TrimSuffix(baseURL, "/"), key: key, hc: hc}
}

// Session is the part of a Checkout Session Pay answers.
type Session struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	PaymentStatus string `json:"payment_status"`
	PaymentIntent struct {
		ID           string `json:"id"`
		LatestCharge struct {
			ID      string `json:"id"`
			Created int64  `json:"created"`
		} `json:"latest_charge"`
	} `json:"payment_intent"`
}

// Pay pays the session with the test card (POST /_standin/sessions/{id}/pay):
// an error naming ErrClosed when it is not open.
func (a *Admin) Pay(ctx context.Context, sessionID string) (Session, error) {
	var s Session
	err := a.do(ctx, http.MethodPost, "/_standin/sessions/"+url.PathEscape(sessionID)+"/pay", nil, &s)
	return s, err
}

// SetKnobs replaces the stand-in's knobs.
func (a *Admin) SetKnobs(ctx context.Context, k Knobs) error {
	return a.do(ctx, http.MethodPut, "/_standin/knobs", k, nil)
}

// Calls are the API calls the stand-in answered whose path starts with
// prefix, oldest first.
func (a *Admin) Calls(ctx context.Context, prefix string) ([]Call, error) {
	var cs []Call
	err := a.do(ctx, http.MethodGet, "/_standin/calls?path="+url.QueryEscape(prefix), nil, &cs)
	return cs, err
}

func (a *Admin) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	req.Header.Set("Content-Type", "application/json")
	res, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("standin: %s %s: %w", method, path, err)
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("standin: %s %s: %w", method, path, err)
	}
	if res.StatusCode == http.StatusConflict {
		return fmt.Errorf("standin: %s %s: %w: %s", method, path, ErrClosed, b)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("standin: %s %s: %s: %s", method, path, res.Status, b)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}
