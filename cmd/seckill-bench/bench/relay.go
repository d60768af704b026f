package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/store"
)

// Relay is where stage 5's Stripe stand-in sends its webhooks (its
// -webhook-url): each is forwarded, as it came (body and Stripe-Signature),
// to the API's notification route, and the API's answer goes back to the
// stand-in, which resends what is not answered 2xx. The bench sees every
// copy this way: its answer timed from its send to the API, its outcome
// (the API's verdict) kept by event and by order. At most `payers`
// notifications are in flight to the API, over kept-alive connections, as
// the door's payers have at most 512 pays in flight.
type Relay struct {
	notes *sentNotes
	ln    net.Listener
	srv   *http.Server
	done  chan struct{}
}

// Addr is where the relay listens (host:port).
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// StartRelay listens on addr and forwards to target (the API's
// notification URL) until Close.
func StartRelay(addr, target string) (*Relay, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	notes := newSentNotes(target, payers)
	r := &Relay{notes: notes, ln: ln, done: make(chan struct{}),
		srv: &http.Server{Handler: notes, ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

// Close stops the relay (copies in flight are dropped: the stand-in
// resends them to nobody).
func (r *Relay) Close() error {
	err := r.srv.Close()
	<-r.done
	return err
}

// sentNotes forwards the notifications and keeps what their answers were.
type sentNotes struct {
	target   string
	sem      chan struct{}
	hop      http.RoundTripper
	inFlight atomic.Int64

	all *Recorder // every answer of the stage
	mu  sync.Mutex
	rec *Recorder // the round's answers
	// outcomes: event id -> the answers of its copies; paid: the orders a
	// copy was answered paid for.
	outcomes map[string][]string
	paid     map[string]bool
	// waiting: the round's orders not answered 200 yet -> closed at the
	// first (whatever the verdict: the shop has decided); last: when the
	// round's latest order got its first 200; decided: how many did.
	waiting map[string]chan struct{}
	last    time.Time
	decided int
}

func newSentNotes(target string, inFlight int) *sentNotes {
	return &sentNotes{target: target, sem: make(chan struct{}, inFlight), hop: &http.Transport{MaxIdleConnsPerHost: inFlight},
		all: NewRecorder(time.Now()), rec: NewRecorder(time.Now()), outcomes: map[string][]string{}, paid: map[string]bool{},
		waiting: map[string]chan struct{}{}}
}

func (s *sentNotes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	status, answer, err := s.forward(r.Context(), body, r.Header)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway) // the stand-in resends it
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

// forward sends one copy to the API once a slot is free, and records its
// answer: the API's verdict ("paid", "already_paid", "repeated", …), else
// its status, or "error" when it did not answer.
func (s *sentNotes) forward(ctx context.Context, body []byte, h http.Header) (int, []byte, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	var ev provider.StripeEvent
	_ = json.Unmarshal(body, &ev)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.target, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", h.Get("Content-Type"))
	req.Header.Set(provider.SignatureHeader, h.Get(provider.SignatureHeader))
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	}
	t0 := time.Now()
	res, err := s.hop.RoundTrip(req)
	var answer []byte
	if err == nil {
		answer, err = io.ReadAll(res.Body)
		_ = res.Body.Close()
	}
	<-s.sem
	now := time.Now()
	outcome, status := "error", 0
	if err == nil {
		status = res.StatusCode
		var out struct{ Outcome string }
		if status != http.StatusOK || json.Unmarshal(answer, &out) != nil || out.Outcome == "" {
			outcome = Outcome(uint16(status))
		} else {
			outcome = out.Outcome
		}
	}
	s.all.Add(outcome, now, now.Sub(t0))
	s.mu.Lock()
	s.rec.Add(outcome, now, now.Sub(t0))
	s.outcomes[ev.ID] = append(s.outcomes[ev.ID], outcome)
	orderID := ev.Data.Object.Metadata[provider.MetadataOrderID]
	if outcome == string(store.VerdictPaid) {
		s.paid[orderID] = true
	}
	if ch, ok := s.waiting[orderID]; ok && status == http.StatusOK {
		delete(s.waiting, orderID)
		close(ch)
		s.last, s.decided = now, s.decided+1
	}
	s.mu.Unlock()
	return status, answer, err
}

// decideWithin bounds how long a payer waits for its payment's first
// answer 200 before it counts the payment as not decided and moves on.
const decideWithin = 30 * time.Second

// round pays each of sessions (the Checkout Sessions of orders, in the same
// order) at the stand-in, as its page's button does, with 512 payers, each
// waiting until the shop has decided its payment (the first answer 200 to
// one of its notifications) before paying the next: a closed loop of 512,
// like the door's payers. It then waits until no copy is in flight. Its
// rate runs from the first pay to the last payment's first 200.
func (s *sentNotes) round(ctx context.Context, admin *standinAdmin, sessions, orders []string) roundFigures {
	s.mu.Lock()
	s.rec, s.last, s.decided = NewRecorder(time.Now()), time.Time{}, 0
	chans := make([]chan struct{}, len(orders))
	for i, o := range orders {
		chans[i] = make(chan struct{})
		s.waiting[o] = chans[i]
	}
	s.mu.Unlock()
	t0 := time.Now()
	parallel(payers, len(sessions), func(i int) {
		if err := admin.pay(ctx, sessions[i]); err != nil {
			s.all.Add("not_paid_at_provider", time.Now(), 0)
			return
		}
		select {
		case <-chans[i]:
		case <-ctx.Done():
		case <-time.After(decideWithin):
		}
	})
	for ctx.Err() == nil && !s.idle(ctx) {
		time.Sleep(20 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range orders {
		delete(s.waiting, o) // not decided in time: counted out of the rate
	}
	sum, elapsed := s.rec.Summary(), s.last.Sub(t0).Seconds()
	if elapsed <= 0 {
		return roundFigures{}
	}
	return roundFigures{perSec: float64(s.decided) / elapsed, p99: sum.Latency["all"].P99,
		answers: float64(sum.Total) / time.Since(t0).Seconds()}
}

// idle reports whether no copy was in flight over the next 100 ms (both
// copies of a duplicate leave together).
func (s *sentNotes) idle(ctx context.Context) bool {
	for range 5 {
		if s.inFlight.Load() > 0 || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// waitIdle waits until nothing was in flight for 2 s (a resend backs off 1 s).
func (s *sentNotes) waitIdle(ctx context.Context) {
	quiet := time.Now()
	for ctx.Err() == nil && time.Since(quiet) < 2*time.Second {
		if s.inFlight.Load() > 0 {
			quiet = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counts are the answers by outcome.
func (s *sentNotes) counts() map[string]int64 { return s.all.Counts() }

// events is how many distinct events were answered.
func (s *sentNotes) events() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.outcomes))
}

// refused counts the orders of which no copy of any notification was
// answered paid.
func (s *sentNotes) refused(orders []string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, o := range orders {
		if !s.paid[o] {
			n++
		}
	}
	return n
}
