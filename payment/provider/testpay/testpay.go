// Package testpay is the built-in test payment provider: what make run, the
// tests and the bench pay through. It keeps its payments in memory, serves
// a hosted checkout page ("Pay 9.99 EUR with a test card") from Handler,
// and notifies a configured URL the way Stripe does: a Stripe-shaped event
// signed in the Stripe-Signature header, resent until answered 2xx. Knobs
// make it misbehave as real providers do: notifications delayed,
// duplicated, reordered or dropped, refunds failing.
package testpay

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/seckill/seckill/payment/provider"
)

// ErrClosed: the test card was used on a payment that is canceled, or past
// its expiry (the request's PayBy).
var ErrClosed = errors.New("testpay: the payment is closed")

// Options configure a Provider.
type Options struct {
	Secret    string // signs every notification (Stripe-Signature)
	NotifyURL string // where notifications are POSTed; empty: none are sent
	BaseURL   string // where Handler is served: checkout URLs are BaseURL/pay/<id>
	Tolerance time.Duration
	Client    *http.Client // sends the notifications (default: 10 s timeout)
	// Resends bounds the further sends of a notification its receiver did
	// not answer 2xx (default 5), ResendAfter the first wait (default 1s),
	// doubled each time. (Stripe resends for three days.)
	Resends     int
	ResendAfter time.Duration
	Seed        uint64 // the knobs' draws: the same seed, the same choices
	Knobs       Knobs
	Logger      *slog.Logger
}

// Knobs make the provider misbehave. Each fraction is drawn per notification.
type Knobs struct {
	Delay     time.Duration // every notification waits this long before its first send
	Duplicate float64       // the fraction of notifications sent twice
	Reorder   float64       // the fraction held back ReorderBy more, so later ones overtake them
	ReorderBy time.Duration // default 1s
	Drop      float64       // the fraction never sent
	// FailRefunds: the next N Refund calls fail with provider.ErrUnavailable
	// (before doing anything, so a retry with the same key refunds once).
	FailRefunds int
	// PendingRefunds: the next N refunds are created pending (Stripe's
	// answer for some cards and methods); each succeeds at its first
	// LookupRefund. Asked again with its key, it answers pending.
	PendingRefunds int
	// FailingRefunds: the next N refunds are created pending and fail at
	// their first LookupRefund (Stripe: pending for a day, then failed for
	// good); the payment can be refunded again under another key.
	FailingRefunds int
}

// Provider is the test provider. Its zero value is not usable: New.
type Provider struct {
	o      Options
	ctx    context.Context // canceled by Close: sends in flight stop
	stop   context.CancelFunc
	sends  sync.WaitGroup
	prefix string

	mu       sync.Mutex
	knobs    Knobs
	rnd      *rand.Rand
	seq      int
	payments map[string]*provider.Payment
	expires  map[string]time.Time
	returns  map[string]string
	byOrder  map[string]string // order id -> payment id (Create's idempotency)
	refunds  map[string]provider.Refund
	refunded map[string]string // payment id -> refund id
	failing  map[string]bool   // refund ids that fail at their lookup (FailingRefunds)
}

var _ provider.Provider = (*Provider)(nil)

// New returns a provider with no payments.
func New(o Options) *Provider {
	if o.Tolerance <= 0 {
		o.Tolerance = provider.DefaultTolerance
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Resends <= 0 {
		o.Resends = 5
	}
	if o.ResendAfter <= 0 {
		o.ResendAfter = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &Provider{o: o, ctx: ctx, stop: stop, prefix: strings.ToLower(crand.Text()[:8]),
		rnd:      rand.New(rand.NewPCG(o.Seed, o.Seed^0x5eC1)),
		payments: map[string]*provider.Payment{}, expires: map[string]time.Time{}, returns: map[string]string{},
		byOrder: map[string]string{}, refunds: map[string]provider.Refund{}, refunded: map[string]string{}, failing: map[string]bool{}}
	p.SetKnobs(o.Knobs)
	return p
}

// SetKnobs changes how the provider misbehaves from now on.
func (p *Provider) SetKnobs(k Knobs) {
	if k.ReorderBy <= 0 {
		k.ReorderBy = time.Second
	}
	p.mu.Lock()
	p.knobs = k
	p.mu.Unlock()
}

// Knobs are the knobs now.
func (p *Provider) Knobs() Knobs {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.knobs
}

// Close stops the sends in flight and waits for them.
func (p *Provider) Close() {
	p.stop()
	p.sends.Wait()
}

// id is a new id with Stripe's prefix for its kind (pi, re, evt).
func (p *Provider) id(kind string) string {
	p.seq++
	return fmt.Sprintf("%s_test_%s%06d", kind, p.prefix, p.seq)
}

func (p *Provider) Create(_ context.Context, r provider.Request) (provider.Payment, error) {
	if r.OrderID == "" || r.Amount <= 0 || len(r.Currency) != 3 {
		return provider.Payment{}, fmt.Errorf("testpay: create: want an order id, a positive amount and a currency, got %+v", r)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.byOrder[r.OrderID]; ok {
		pay := p.payments[id]
		if pay.Amount != r.Amount || pay.Currency != r.Currency {
			// Stripe's answer to a key reused with other parameters.
			return provider.Payment{}, fmt.Errorf("testpay: create: order %s already has a payment of %d %s", r.OrderID, pay.Amount, pay.Currency)
		}
		return *pay, nil
	}
	id := p.id("pi")
	pay := &provider.Payment{ID: id, OrderID: r.OrderID, Amount: r.Amount, Currency: r.Currency, Status: provider.Pending,
		CheckoutURL: strings.TrimSuffix(p.o.BaseURL, "/") + "/pay/" + id}
	p.payments[id], p.byOrder[r.OrderID], p.expires[id], p.returns[id] = pay, id, r.PayBy, r.ReturnURL
	return *pay, nil
}

// expireLocked closes a pending payment past its expiry.
func (p *Provider) expireLocked(pay *provider.Payment) {
	if pay.Status == provider.Pending && !p.expires[pay.ID].IsZero() && !time.Now().Before(p.expires[pay.ID]) {
		pay.Status = provider.Canceled
	}
}

func (p *Provider) lookupLocked(id string) (*provider.Payment, error) {
	pay, ok := p.payments[id]
	if !ok {
		return nil, fmt.Errorf("testpay: payment %s: %w", id, provider.ErrNotFound)
	}
	p.expireLocked(pay)
	return pay, nil
}

func (p *Provider) Lookup(_ context.Context, id string) (provider.Payment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pay, err := p.lookupLocked(id)
	if err != nil {
		return provider.Payment{}, err
	}
	return *pay, nil
}

// Pay is the test card: the payment succeeds now, and its notification is
// sent. ErrClosed when it is canceled or expired; paying a paid payment
// changes nothing and sends nothing.
func (p *Provider) Pay(_ context.Context, id string) (provider.Payment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pay, err := p.lookupLocked(id)
	if err != nil {
		return provider.Payment{}, err
	}
	switch pay.Status {
	case provider.Canceled:
		return *pay, fmt.Errorf("payment %s: %w", id, ErrClosed)
	case provider.Pending:
		pay.Status, pay.SucceededAt = provider.Succeeded, time.Now().UTC().Truncate(time.Second) // whole seconds, as its event's
		p.notifyLocked("payment_intent.succeeded", *pay)
	}
	return *pay, nil
}

func (p *Provider) Cancel(_ context.Context, id string) (provider.Payment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pay, err := p.lookupLocked(id)
	if err != nil {
		return provider.Payment{}, err
	}
	switch pay.Status {
	case provider.Succeeded:
		return *pay, fmt.Errorf("testpay: cancel %s: %w", id, provider.ErrAlreadySucceeded)
	case provider.Pending:
		pay.Status = provider.Canceled
		p.notifyLocked("payment_intent.canceled", *pay)
	}
	return *pay, nil
}

func (p *Provider) Refund(_ context.Context, id, key string) (provider.Refund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.knobs.FailRefunds > 0 {
		p.knobs.FailRefunds--
		return provider.Refund{}, fmt.Errorf("testpay: refund %s: %w (the FailRefunds knob)", id, provider.ErrUnavailable)
	}
	if r, ok := p.refunds[key]; ok {
		if r.PaymentID != id {
			return provider.Refund{}, fmt.Errorf("testpay: refund key %q was used for payment %s", key, r.PaymentID)
		}
		return r, nil
	}
	pay, err := p.lookupLocked(id)
	if err != nil {
		return provider.Refund{}, err
	}
	if pay.Status != provider.Succeeded {
		return provider.Refund{}, fmt.Errorf("testpay: refund %s: the payment is %s, not succeeded", id, pay.Status)
	}
	if other, ok := p.refunded[id]; ok {
		return provider.Refund{}, fmt.Errorf("testpay: refund %s: already refunded by %s", id, other)
	}
	for _, r := range p.refunds {
		if r.PaymentID == id && r.Status == provider.RefundSucceeded {
			return provider.Refund{}, fmt.Errorf("testpay: refund %s: %d of it refunded already (in the dashboard)", id, r.Amount)
		}
	}
	r := provider.Refund{ID: p.id("re"), PaymentID: id, Amount: pay.Amount, Currency: pay.Currency, Status: provider.RefundSucceeded}
	switch {
	case p.knobs.PendingRefunds > 0:
		p.knobs.PendingRefunds--
		r.Status = provider.RefundPending
	case p.knobs.FailingRefunds > 0:
		p.knobs.FailingRefunds--
		r.Status = provider.RefundPending
		p.failing[r.ID] = true
	}
	p.refunds[key], p.refunded[id] = r, r.ID
	return r, nil
}

// LookupRefund answers a refund's state; a pending one settles here (the
// PendingRefunds and FailingRefunds knobs).
func (p *Provider) LookupRefund(_ context.Context, id string) (provider.Refund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, r := range p.refunds {
		if r.ID != id {
			continue
		}
		if r.Status == provider.RefundPending {
			r.Status = provider.RefundSucceeded
			if p.failing[id] {
				r.Status = provider.RefundFailed
				delete(p.refunded, r.PaymentID) // refundable again, under another key
			}
			p.refunds[key] = r
		}
		return r, nil
	}
	return provider.Refund{}, fmt.Errorf("testpay: refund %s: %w", id, provider.ErrNotFound)
}

// Record is the provider's own ledger of a payment: captured when paid,
// each refund by its state (the ones made in its "dashboard" included).
func (p *Provider) Record(_ context.Context, id string) (provider.Record, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pay, err := p.lookupLocked(id)
	if err != nil {
		return provider.Record{}, err
	}
	out := provider.Record{PaymentID: id, Currency: pay.Currency}
	if pay.Status == provider.Succeeded {
		out.Captured = pay.Amount
	}
	for _, r := range p.refunds {
		if r.PaymentID == id {
			out.AddRefund(r)
		}
	}
	return out, nil
}

// DashboardRefund is a refund made by hand in the provider's dashboard, of
// amount (a part of the payment, or all of it), outside the shop's books.
func (p *Provider) DashboardRefund(_ context.Context, id string, amount int64) (provider.Refund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pay, err := p.lookupLocked(id)
	if err != nil {
		return provider.Refund{}, err
	}
	if pay.Status != provider.Succeeded || amount <= 0 || amount > pay.Amount {
		return provider.Refund{}, fmt.Errorf("testpay: dashboard refund of %d of payment %s (%s, %d)", amount, id, pay.Status, pay.Amount)
	}
	r := provider.Refund{ID: p.id("re"), PaymentID: id, Amount: amount, Currency: pay.Currency, Status: provider.RefundSucceeded}
	p.refunds["dashboard-"+r.ID] = r
	return r, nil
}

// Verify checks a notification signed the way this provider (and Stripe)
// signs.
func (p *Provider) Verify(payload []byte, signature string) (provider.Event, error) {
	return provider.VerifyNotification(payload, signature, p.o.Secret, p.o.Tolerance, time.Now())
}

// notifyLocked sends the event about pay to NotifyURL, as the knobs say:
// dropped, held back, sent twice. Each copy is signed when it is sent.
func (p *Provider) notifyLocked(typ string, pay provider.Payment) {
	if p.o.NotifyURL == "" {
		return
	}
	var e provider.StripeEvent
	e.ID, e.Object, e.Type, e.Created = p.id("evt"), "event", typ, time.Now().Unix()
	if !pay.SucceededAt.IsZero() {
		e.Created = pay.SucceededAt.Unix() // a success is timestamped when it happened
	}
	e.Data.Object = provider.StripeIntent{ID: pay.ID, Object: "payment_intent", Amount: pay.Amount,
		Currency: strings.ToLower(pay.Currency), Status: string(pay.Status), Metadata: map[string]string{provider.MetadataOrderID: pay.OrderID}}
	body, err := json.Marshal(e)
	if err != nil {
		p.o.Logger.Error("testpay: encode notification", "event", e.ID, "err", err)
		return
	}
	k := p.knobs
	if p.rnd.Float64() < k.Drop {
		p.o.Logger.Info("testpay: notification dropped (knob)", "event", e.ID)
		return
	}
	wait := k.Delay
	if p.rnd.Float64() < k.Reorder {
		wait += k.ReorderBy
	}
	copies := 1
	if p.rnd.Float64() < k.Duplicate {
		copies = 2
	}
	for range copies {
		p.sends.Add(1)
		go p.send(e.ID, body, wait)
	}
}

// send POSTs one copy after wait, resending with backoff until a 2xx, the
// resends run out or Close.
func (p *Provider) send(id string, body []byte, wait time.Duration) {
	defer p.sends.Done()
	backoff := p.o.ResendAfter
	for n := 0; ; n++ {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-p.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		err := p.post(body)
		if err == nil {
			return
		}
		if n >= p.o.Resends {
			p.o.Logger.Warn("testpay: notification given up", "event", id, "sends", n+1, "err", err)
			return
		}
		wait, backoff = backoff, backoff*2
	}
}

func (p *Provider) post(body []byte) error {
	req, err := http.NewRequestWithContext(p.ctx, http.MethodPost, p.o.NotifyURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(provider.SignatureHeader, provider.Sign(body, p.o.Secret, time.Now()))
	resp, err := p.o.Client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // the connection is reused
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}
