// Package standin is a stateful stand-in for the part of Stripe's API the
// shop uses (issue 39, item 5), served by its own binary, cmd/seckill-stripe,
// which the shop's binary never links: `make run`, the tests and the demo
// point the production client (stripepay, stripe-go) at it through
// SECKILL_PAYMENT_STRIPE_URL, so the code path every test runs is the one a
// shop on Stripe runs. stripe-mock keeps checking request shapes against
// Stripe's OpenAPI document; this one holds state.
//
// It speaks Stripe's wire format: form-encoded requests (stripe-go's
// encoding), JSON answers as stripe-go decodes them (an unexpanded
// reference is an id, an expanded one the object), Stripe's error shape,
// the Idempotency-Key honoured (the same key and parameters: the first
// answer again; other parameters: idempotency_error), any sk_test_ key (or
// the configured ones), 429 rate_limit above the configured rate. Routes:
//
//	POST /v1/checkout/sessions                 a Checkout Session (payment mode, price_data line items)
//	GET  /v1/checkout/sessions/{id}            expand payment_intent, payment_intent.latest_charge
//	POST /v1/checkout/sessions/{id}/expire     open → expired (checkout.session.expired)
//	GET  /v1/payment_intents/{id}              expand latest_charge
//	POST /v1/payment_intents/{id}/cancel       payment_intent_unexpected_state once succeeded
//	POST /v1/refunds                           payment_intent or charge, amount (default: what is left)
//	GET  /v1/refunds/{id}                      a pending refund settles here (knobs)
//	GET  /v1/refunds?payment_intent=…          the refunds of a PaymentIntent
//	GET  /v1/charges?payment_intent=…          the charges of a PaymentIntent
//	GET  /v1/events/{id}                       an event sent (or held back, or dropped)
//
// beside the hosted checkout page (GET /pay/{id}: Pay with a test card,
// or Cancel, each sending the buyer to the session's success_url or
// cancel_url), the webhooks (POSTed to Options.WebhookURL, signed with
// Options.WebhookSecret exactly as Stripe signs, resent with backoff until
// answered 2xx), the misbehaviour knobs of the test provider (Knobs), an
// admin API under /_standin/ (knobs, "pay this session" for tests that have
// no browser, the calls it answered) and /healthz.
package standin

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Options configure a stand-in.
type Options struct {
	// BaseURL is where Handler is reached by buyers' browsers: a session's
	// url is BaseURL/pay/<session id>.
	BaseURL string
	// WebhookURL receives the events (the shop's notification endpoint);
	// empty: none are sent (GET /v1/events/{id} still has them).
	WebhookURL string
	// WebhookSecret signs every event (whsec_…), as the endpoint's secret
	// in Stripe's dashboard.
	WebhookSecret string
	// EventTypes are the types sent to WebhookURL (the endpoint's enabled
	// events); nil: DefaultEventTypes.
	EventTypes []string
	// Keys are the API keys accepted; empty: any sk_test_… key.
	Keys []string
	// RPS bounds the API calls answered per second, reads and writes each
	// (Stripe: about 100 in live mode, 25 in test mode); past it, 429
	// rate_limit. 0: no limit.
	RPS float64
	// Resends bounds the further sends of an event not answered 2xx
	// (default 10), ResendAfter the first wait (default 1s), doubled each
	// time up to a minute. (Stripe resends for three days.)
	Resends     int
	ResendAfter time.Duration
	Seed        uint64 // the knobs' draws: the same seed, the same choices
	Knobs       Knobs
	Client      *http.Client // sends the webhooks (default: 10 s timeout)
	Logger      *slog.Logger
	Now         func() time.Time // default time.Now
}

// DefaultEventTypes are the events sent by default: those docs/payments.md
// tells a shop to register — a Checkout Session's completion and expiry,
// one event per payment (its PaymentIntent's events would have each payment
// decided twice; refunds are confirmed by lookup).
var DefaultEventTypes = []string{"checkout.session.completed", "checkout.session.expired"}

// Knobs make the stand-in misbehave as real providers do (the test
// provider's, payment/provider/testpay). Each fraction is drawn per event.
type Knobs struct {
	Delay     time.Duration // every event waits this long before its first send
	Duplicate float64       // the fraction of events sent twice (same id)
	Reorder   float64       // the fraction held back ReorderBy more, so later ones overtake them
	ReorderBy time.Duration // default 1s
	Drop      float64       // the fraction never sent (GET /v1/events/{id} has them)
	// FailRefunds: the next N POST /v1/refunds answer 500 api_error
	// having done nothing (so a retry with the same key refunds once).
	FailRefunds int
	// PendingRefunds: the next N refunds are created pending; each
	// succeeds at its first GET /v1/refunds/{id}.
	PendingRefunds int
	// FailingRefunds: the next N refunds are created pending and fail at
	// their first GET /v1/refunds/{id} (Stripe: pending, then failed).
	FailingRefunds int
}

// Server is the stand-in. Its zero value is not usable: New.
type Server struct {
	o      Options
	ctx    context.Context // canceled by Close: sends in flight stop
	stop   context.CancelFunc
	sends  sync.WaitGroup
	prefix string
	reads  *rate.Limiter
	writes *rate.Limiter
	types  map[string]bool

	mu       sync.Mutex
	knobs    Knobs
	rnd      *rand.Rand
	seq      int
	sessions map[string]*session
	intents  map[string]*intent
	charges  map[string]*charge
	refunds  map[string]*refund
	events   map[string][]byte
	order    []string // ids in creation order, for lists
	idem     map[string]*replay
	calls    []Call
}

// Call is an API call the stand-in answered (GET /_standin/calls).
type Call struct {
	Method         string    `json:"method"`
	Path           string    `json:"path"`
	Status         int       `json:"status"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	At             time.Time `json:"at"`
}

// maxCalls bounds the calls kept (the oldest go first).
const maxCalls = 100_000

// New returns a stand-in with no objects; it sends nothing until a
// session is paid or expired. Close stops it.
func New(o Options) *Server {
	if o.Resends <= 0 {
		o.Resends = 10
	}
	if o.ResendAfter <= 0 {
		o.ResendAfter = time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.EventTypes == nil {
		o.EventTypes = DefaultEventTypes
	}
	o.BaseURL = strings.TrimSuffix(o.BaseURL, "/")
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{o: o, ctx: ctx, stop: stop, prefix: strings.ToLower(crand.Text()[:10]),
		reads: limiter(o.RPS), writes: limiter(o.RPS), types: map[string]bool{},
		rnd:      rand.New(rand.NewPCG(o.Seed, o.Seed^0x5eC1)),
		sessions: map[string]*session{}, intents: map[string]*intent{}, charges: map[string]*charge{},
		refunds: map[string]*refund{}, events: map[string][]byte{}, idem: map[string]*replay{}}
	for _, t := range o.EventTypes {
		s.types[t] = true
	}
	s.SetKnobs(o.Knobs)
	s.sends.Add(1)
	go s.sweep()
	return s
}

func limiter(rps float64) *rate.Limiter {
	if rps <= 0 {
		return rate.NewLimiter(rate.Inf, 0)
	}
	return rate.NewLimiter(rate.Limit(rps), max(1, int(rps)))
}

// SetKnobs changes how the stand-in misbehaves from now on.
func (s *Server) SetKnobs(k Knobs) {
	if k.ReorderBy <= 0 {
		k.ReorderBy = time.Second
	}
	s.mu.Lock()
	s.knobs = k
	s.mu.Unlock()
}

// Knobs are the knobs now.
func (s *Server) Knobs() Knobs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.knobs
}

// Close stops the sweeper and the sends in flight, and waits for them.
func (s *Server) Close() {
	s.stop()
	s.sends.Wait()
}

// id is a new id with Stripe's prefix for its kind (cs, pi, ch, re, evt)
// in test mode.
func (s *Server) id(kind string) string {
	s.seq++
	return fmt.Sprintf("%s_test_%s%08d", kind, s.prefix, s.seq)
}

// sweep expires open sessions past their expires_at, as Stripe does (with
// its checkout.session.expired event), once a second.
func (s *Server) sweep() {
	defer s.sends.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		now := s.o.Now()
		for _, id := range s.order {
			if cs, ok := s.sessions[id]; ok && cs.Status == "open" && now.Unix() >= cs.ExpiresAt {
				s.expireLocked(cs)
			}
		}
		s.mu.Unlock()
	}
}
