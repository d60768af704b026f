package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
)

// ControlRoom is an open control room (/admin) as the bench keeps it during
// a stage: GET /api/v1/admin/summary every Every (the page polls every
// 500 ms), with an admin token, until Close.
type ControlRoom struct {
	cancel context.CancelFunc
	done   chan struct{}

	report func() ControlRoomReport

	mu      sync.Mutex
	lat     []time.Duration
	errors  int64
	lastErr string
}

// ControlRoomReport is what the control room cost and saw.
type ControlRoomReport struct {
	Polls    int     `json:"polls"`
	Errors   int64   `json:"errors"`
	LastErr  string  `json:"last_error,omitempty"`
	Every    float64 `json:"every_s"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
	MaxMS    float64 `json:"max_ms"`
	Duration float64 `json:"duration_s"`
}

// OpenControlRoom starts polling the summary of the API at apiURL as admin 1
// (a token signed with secret).
func OpenControlRoom(ctx context.Context, apiURL string, secret []byte, every time.Duration) (*ControlRoom, error) {
	tok, err := auth.Sign(secret, 1, auth.RoleAdmin, 2*time.Hour, time.Now())
	if err != nil {
		return nil, fmt.Errorf("control room token: %w", err)
	}
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &ControlRoom{cancel: cancel, done: make(chan struct{})}
	// The generated client's plain call: the page reads the answer, the
	// bench only times it.
	api, err := apiclient.NewClient(strings.TrimRight(apiURL, "/"), apiclient.WithHTTPClient(&http.Client{Timeout: 5 * time.Second}),
		apiclient.WithRequestEditorFn(apiclient.Bearer(tok)))
	if err != nil {
		cancel()
		return nil, err
	}
	start := time.Now()
	go func() {
		defer close(r.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			r.poll(ctx, api)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	r.report = func() ControlRoomReport {
		return ControlRoomReport{Every: every.Seconds(), Duration: time.Since(start).Seconds()}
	}
	return r, nil
}

func (r *ControlRoom) poll(ctx context.Context, api *apiclient.Client) {
	t0 := time.Now()
	res, err := api.AdminSummary(ctx)
	if err == nil {
		_, err = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		if err == nil && res.StatusCode != http.StatusOK {
			err = fmt.Errorf("HTTP %d", res.StatusCode)
		}
	}
	if ctx.Err() != nil {
		return // closing: not a failure of the room
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errors++
		r.lastErr = err.Error()
		return
	}
	r.lat = append(r.lat, time.Since(t0))
}

// Close stops polling and reports.
func (r *ControlRoom) Close() ControlRoomReport {
	r.cancel()
	<-r.done
	rep := r.report()
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.Polls, rep.Errors, rep.LastErr = len(r.lat), r.errors, r.lastErr
	if n := len(r.lat); n > 0 {
		ls := append([]time.Duration(nil), r.lat...)
		sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
		at := func(q float64) float64 { return ms(ls[min(n-1, int(q*float64(n)))]) }
		rep.P50MS, rep.P99MS, rep.MaxMS = at(0.50), at(0.99), ms(ls[n-1])
	}
	return rep
}
