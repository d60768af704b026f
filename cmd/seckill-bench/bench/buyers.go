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
	q := newBuyerQueue(len(s.Buyers))
	go q.stopOn(ctx)
	tr := s.targeter(q)

	res := SaleResult{Start: time.Now()}
	rec := NewRecorder(res.Start)
	t := &saleTally{sale: &s, q: q, res: &res, maxAttempts: max(s.MaxAttempts, 1), seen: make(map[string]bool)}
	stop := progress(ctx, s.Progress, "sale", rec, func() string {
		return fmt.Sprintf("accepted=%d/%d", t.accepted.Load(), s.Units)
	})
	atk := s.Load.attacker()
	for r := range atk.Attack(tr, s.Load.pacer(), 0, "sale") {
		if r.Method == "" {
			continue
		}
		i, err := strconv.Atoi(r.URL[strings.LastIndex(r.URL, buyerParam)+len(buyerParam):])
		if err != nil || i < 0 || i >= len(s.Buyers) {
			continue
		}
		st := q.stateOf(i)
		end := r.End()
		rec.Add(Outcome(r.Code), end, end.Sub(st.dispatched))
		res.Attempts++
		t.answer(r, i, st, end)
	}
	stop()
	if res.SoldOutAfter == 0 && !t.first410.IsZero() {
		res.SoldOutAfter = t.first410.Sub(res.Start)
	}
	if n := len(res.Accepted); n > 0 {
		res.AcceptedPerSecond = float64(n) / t.last202.Sub(res.Start).Seconds()
	}
	res.Summary = rec.Summary()
	return res
}

// buyerParam is the query parameter naming the buyer of an attempt: the
// answer's URL says whose it was.
const buyerParam = "?b="

// targeter hands vegeta each buyer's next attempt as the queue makes it
// ready; attempt k of buyer i goes to instance (i+k) % n.
func (s Sale) targeter(q *buyerQueue) vegeta.Targeter {
	bases := s.BaseURLs
	if len(bases) == 0 {
		bases = []string{s.BaseURL}
	}
	urls := make([]string, len(bases))
	for k, b := range bases {
		urls[k] = fmt.Sprintf("%s/api/v1/seckill/%d%s", strings.TrimRight(b, "/"), s.ItemID, buyerParam)
	}
	headers := make([]http.Header, len(s.Buyers))
	for i, b := range s.Buyers {
		headers[i] = header(b.Token)
	}
	return func(t *vegeta.Target) error {
		i, attempt, ok := q.next()
		if !ok {
			return vegeta.ErrNoTargets
		}
		t.Method = http.MethodPost
		t.URL = urls[(i+attempt)%len(urls)] + strconv.Itoa(i)
		t.Header = headers[i]
		t.Body = nil
		return nil
	}
}

// buyerQueue is the queue of buyers ready to send; retries come back to it
// after their pause. outstanding counts buyers not finished yet.
type buyerQueue struct {
	mu          sync.Mutex
	cond        *sync.Cond
	queue       []int
	outstanding int
	stopped     bool
	state       []buyerState
}

func newBuyerQueue(n int) *buyerQueue {
	q := &buyerQueue{queue: make([]int, 0, n), outstanding: n, state: make([]buyerState, n)}
	q.cond = sync.NewCond(&q.mu)
	for i := range n {
		q.queue = append(q.queue, i)
	}
	return q
}

// stopOn wakes every waiting next with nothing to send once ctx ends.
func (q *buyerQueue) stopOn(ctx context.Context) {
	<-ctx.Done()
	q.mu.Lock()
	q.stopped = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// next waits for a buyer ready to send and starts its attempt; false when
// every buyer is finished or the sale stopped.
func (q *buyerQueue) next() (i, attempt int, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.queue) == 0 && q.outstanding > 0 && !q.stopped {
		q.cond.Wait()
	}
	if len(q.queue) == 0 || q.stopped {
		return 0, 0, false
	}
	i = q.queue[0]
	q.queue = q.queue[1:]
	q.state[i].attempt++
	// Latency is measured from here, not from when vegeta asked for a
	// target: a worker may have waited above for a retry to fall due.
	q.state[i].dispatched = time.Now()
	return i, q.state[i].attempt, true
}

func (q *buyerQueue) stateOf(i int) buyerState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state[i]
}

// finish ends a buyer's attempts.
func (q *buyerQueue) finish() {
	q.mu.Lock()
	q.outstanding--
	q.cond.Broadcast()
	q.mu.Unlock()
}

// retry puts buyer i back in the queue after a pause.
func (q *buyerQueue) retry(i int, after time.Duration) {
	time.AfterFunc(after, func() {
		q.mu.Lock()
		q.queue = append(q.queue, i)
		q.cond.Broadcast()
		q.mu.Unlock()
	})
}

// saleTally turns each answer into the sale's result and the buyer's next
// step: finished, or queued again.
type saleTally struct {
	sale              *Sale
	q                 *buyerQueue
	res               *SaleResult
	maxAttempts       int
	accepted          atomic.Int64 // read by the progress line
	last202, first410 time.Time
	seen              map[string]bool // order ids counted
}

// answer handles the answer to buyer i's attempt st, arrived at end.
func (t *saleTally) answer(r *vegeta.Result, i int, st buyerState, end time.Time) {
	again := st.attempt < t.maxAttempts
	switch r.Code {
	case http.StatusAccepted:
		t.accept(r, i, end)
	case http.StatusGone, http.StatusConflict:
		t.decided(r, i, st, end)
	case http.StatusTooManyRequests:
		t.retryOrGiveUp(i, again, retryAfter(r.Headers))
	case http.StatusForbidden:
		if again && strings.Contains(string(r.Body), "SALE_NOT_STARTED") {
			t.res.Retries++
			t.q.retry(i, 50*time.Millisecond)
		} else {
			t.q.finish()
		}
	case 0, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusBadGateway:
		if r.Code == 0 {
			t.res.ClientErrors++
		}
		t.retryOrGiveUp(i, again, 200*time.Millisecond)
	default: // 400, 401, 404: retrying cannot help
		t.q.finish()
	}
}

// accept counts a 202's order once and tells OnAccepted.
func (t *saleTally) accept(r *vegeta.Result, i int, end time.Time) {
	s, res := t.sale, t.res
	var body struct {
		OrderID string    `json:"order_id"`
		PayBy   time.Time `json:"pay_by"`
	}
	_ = json.Unmarshal(r.Body, &body)
	if t.seen[body.OrderID] {
		t.q.finish()
		return
	}
	t.seen[body.OrderID] = true
	res.Accepted = append(res.Accepted, invariant.Accepted{OrderID: body.OrderID, UserID: s.Buyers[i].ID})
	if s.OnAccepted != nil {
		s.OnAccepted(body.OrderID, s.Buyers[i].ID, body.PayBy, end)
	}
	if n := t.accepted.Add(1); n == s.Units && res.SoldOutAfter == 0 {
		res.SoldOutAfter = end.Sub(res.Start)
	}
	t.last202 = end
	t.q.finish()
}

// decided ends a buyer told SOLD_OUT (410) or ALREADY_PURCHASED (409).
func (t *saleTally) decided(r *vegeta.Result, i int, st buyerState, end time.Time) {
	res := t.res
	// ALREADY_PURCHASED after a retry: the first attempt reserved, its
	// answer was lost (an instance died, a timeout). The buyer holds that
	// order: count it.
	var body struct {
		Error struct {
			OrderID string `json:"order_id"`
		} `json:"error"`
	}
	if r.Code == http.StatusConflict && st.attempt > 1 && json.Unmarshal(r.Body, &body) == nil &&
		body.Error.OrderID != "" && !t.seen[body.Error.OrderID] {
		t.seen[body.Error.OrderID] = true
		res.Accepted = append(res.Accepted, invariant.Accepted{OrderID: body.Error.OrderID, UserID: t.sale.Buyers[i].ID})
		t.accepted.Add(1)
		res.Recovered++
	}
	if r.Code == http.StatusGone {
		res.SoldOutSeen = true
		if t.first410.IsZero() {
			t.first410 = end
		}
	}
	t.q.finish()
}

// retryOrGiveUp queues buyer i again after a pause while it has attempts
// left; otherwise the buyer gave up.
func (t *saleTally) retryOrGiveUp(i int, again bool, after time.Duration) {
	if again {
		t.res.Retries++
		t.q.retry(i, after)
	} else {
		t.res.GaveUp++
		t.q.finish()
	}
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
