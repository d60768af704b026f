package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill/seckill/invariant"
)

// Buyer is one simulated buyer.
type Buyer struct {
	ID    int64
	Token string
}

// Sale is the stampede: every buyer tries to buy ItemID at once, each up to
// MaxAttempts times (a 429 is retried after its Retry-After, a 503, a network
// error or SALE_NOT_STARTED after a short pause; 202, 409, 410 and
// SALE_ENDED end the buyer's attempts).
type Sale struct {
	BaseURL string
	// BaseURLs, when set, replaces BaseURL: several API instances behind no
	// load balancer; attempt k of buyer i goes to BaseURLs[(i+k) % n], so a
	// retry after an instance died goes to another.
	BaseURLs    []string
	ItemID      int64
	Buyers      []Buyer
	Load        Load
	MaxAttempts int
	// Units is the item's stock: the sale is sold out when that many 202s came.
	Units    int64
	Progress io.Writer
	// OnAccepted, when set, is called for each 202 as it arrives, with the
	// order's pay_by from its body (zero if absent) and the arrival time:
	// the buyer may pay from then on. It must not block.
	OnAccepted func(orderID string, userID int64, payBy, at time.Time)
}

// SaleResult is what the buyers were told.
type SaleResult struct {
	Summary     Summary
	Accepted    []invariant.Accepted
	SoldOutSeen bool
	// SoldOutAfter is the time from the first attempt to the answer that
	// took the last unit (or to the first SOLD_OUT); 0 when it never sold out.
	SoldOutAfter time.Duration
	// AcceptedPerSecond is 202s per second from the first attempt to the last 202.
	AcceptedPerSecond float64
	Attempts          int64
	Retries           int64
	GaveUp            int64 // buyers whose attempts ran out without a decisive answer
	ClientErrors      int64 // attempts without any answer (timeouts, refused)
	// Recovered counts orders learnt from a 409 ALREADY_PURCHASED after a
	// retry (the 202 of the first attempt was lost).
	Recovered int64
	Start     time.Time
}

type buyerState struct {
	attempt    int
	dispatched time.Time
}

// Run fires every buyer's attempts and returns when each buyer has a
// decisive answer or no attempts left.
func (s Sale) Run(ctx context.Context) SaleResult {
	maxAttempts := max(s.MaxAttempts, 1)
	bases := s.BaseURLs
	if len(bases) == 0 {
		bases = []string{s.BaseURL}
	}
	urls := make([]string, len(bases))
	for k, b := range bases {
		urls[k] = fmt.Sprintf("%s/api/v1/seckill/%d?b=", strings.TrimRight(b, "/"), s.ItemID)
	}
	const buyerParam = "?b="
	headers := make([]http.Header, len(s.Buyers))
	for i, b := range s.Buyers {
		headers[i] = header(b.Token)
	}
	state := make([]buyerState, len(s.Buyers))

	// The queue of buyers ready to send; retries come back to it after
	// their pause. outstanding counts buyers not finished yet.
	var (
		mu          sync.Mutex
		cond        = sync.NewCond(&mu)
		queue       = make([]int, 0, len(s.Buyers))
		outstanding = len(s.Buyers)
		stopped     bool
	)
	for i := range s.Buyers {
		queue = append(queue, i)
	}
	go func() {
		<-ctx.Done()
		mu.Lock()
		stopped = true
		cond.Broadcast()
		mu.Unlock()
	}()
	tr := func(t *vegeta.Target) error {
		mu.Lock()
		for len(queue) == 0 && outstanding > 0 && !stopped {
			cond.Wait()
		}
		if len(queue) == 0 || stopped {
			mu.Unlock()
			return vegeta.ErrNoTargets
		}
		i := queue[0]
		queue = queue[1:]
		state[i].attempt++
		// Latency is measured from here, not from when vegeta asked for a
		// target: a worker may have waited above for a retry to fall due.
		state[i].dispatched = time.Now()
		mu.Unlock()
		t.Method = http.MethodPost
		t.URL = urls[(i+state[i].attempt)%len(urls)] + strconv.Itoa(i)
		t.Header = headers[i]
		t.Body = nil
		return nil
	}
	finish := func() {
		mu.Lock()
		outstanding--
		cond.Broadcast()
		mu.Unlock()
	}
	retry := func(i int, after time.Duration) {
		time.AfterFunc(after, func() {
			mu.Lock()
			queue = append(queue, i)
			cond.Broadcast()
			mu.Unlock()
		})
	}

	res := SaleResult{Start: time.Now()}
	rec := NewRecorder(res.Start)
	var accepted atomic.Int64
	stop := progress(ctx, s.Progress, "sale", rec, func() string {
		return fmt.Sprintf("accepted=%d/%d", accepted.Load(), s.Units)
	})
	var last202, first410 time.Time
	seen := make(map[string]bool)
	atk := s.Load.attacker()
	for r := range atk.Attack(tr, s.Load.pacer(), 0, "sale") {
		if r.Method == "" {
			continue
		}
		i, err := strconv.Atoi(r.URL[strings.LastIndex(r.URL, buyerParam)+len(buyerParam):])
		if err != nil || i < 0 || i >= len(s.Buyers) {
			continue
		}
		mu.Lock()
		st := state[i]
		mu.Unlock()
		end := r.End()
		lat := end.Sub(st.dispatched)
		out := Outcome(r.Code)
		rec.Add(out, end, lat)
		res.Attempts++
		again := st.attempt < maxAttempts
		switch r.Code {
		case http.StatusAccepted:
			var body struct {
				OrderID string    `json:"order_id"`
				PayBy   time.Time `json:"pay_by"`
			}
			_ = json.Unmarshal(r.Body, &body)
			if seen[body.OrderID] {
				finish()
				continue
			}
			seen[body.OrderID] = true
			res.Accepted = append(res.Accepted, invariant.Accepted{OrderID: body.OrderID, UserID: s.Buyers[i].ID})
			if s.OnAccepted != nil {
				s.OnAccepted(body.OrderID, s.Buyers[i].ID, body.PayBy, end)
			}
			if n := accepted.Add(1); n == s.Units && res.SoldOutAfter == 0 {
				res.SoldOutAfter = end.Sub(res.Start)
			}
			last202 = end
			finish()
		case http.StatusGone, http.StatusConflict:
			// ALREADY_PURCHASED after a retry: the first attempt reserved,
			// its answer was lost (an instance died, a timeout). The buyer
			// holds that order: count it.
			var body struct {
				Error struct {
					OrderID string `json:"order_id"`
				} `json:"error"`
			}
			if r.Code == http.StatusConflict && st.attempt > 1 && json.Unmarshal(r.Body, &body) == nil &&
				body.Error.OrderID != "" && !seen[body.Error.OrderID] {
				seen[body.Error.OrderID] = true
				res.Accepted = append(res.Accepted, invariant.Accepted{OrderID: body.Error.OrderID, UserID: s.Buyers[i].ID})
				accepted.Add(1)
				res.Recovered++
			}
			if r.Code == http.StatusGone {
				res.SoldOutSeen = true
				if first410.IsZero() {
					first410 = end
				}
			}
			finish()
		case http.StatusTooManyRequests:
			if again {
				res.Retries++
				retry(i, retryAfter(r.Headers))
			} else {
				res.GaveUp++
				finish()
			}
		case http.StatusForbidden:
			if again && strings.Contains(string(r.Body), "SALE_NOT_STARTED") {
				res.Retries++
				retry(i, 50*time.Millisecond)
			} else {
				finish()
			}
		case 0, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusBadGateway:
			if r.Code == 0 {
				res.ClientErrors++
			}
			if again {
				res.Retries++
				retry(i, 200*time.Millisecond)
			} else {
				res.GaveUp++
				finish()
			}
		default: // 400, 401, 404: retrying cannot help
			finish()
		}
	}
	stop()
	if res.SoldOutAfter == 0 && !first410.IsZero() {
		res.SoldOutAfter = first410.Sub(res.Start)
	}
	if n := len(res.Accepted); n > 0 {
		res.AcceptedPerSecond = float64(n) / last202.Sub(res.Start).Seconds()
	}
	res.Summary = rec.Summary()
	return res
}

// retryAfter reads Retry-After (seconds), defaulting to one second.
func retryAfter(h http.Header) time.Duration {
	if v := h.Get("Retry-After"); v != "" {
		if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 0 {
			return time.Duration(n * float64(time.Second))
		}
	}
	return time.Second
}
