package cashier_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/cashier"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/store"
)

// fakeStore holds one order row or view, one item, and the payments saved.
type fakeStore struct {
	mu       sync.Mutex
	row      *store.Order
	item     store.Item
	payments []store.Payment
	events   []store.PaymentEvent
	result   store.EventResult
	err      error
}

func (f *fakeStore) FindOrder(_ context.Context, id string) (store.Order, error) {
	if f.row == nil || f.row.OrderID != id {
		return store.Order{}, order.ErrNotFound
	}
	return *f.row, nil
}

func (f *fakeStore) GetItem(context.Context, int64) (store.Item, error) { return f.item, nil }

func (f *fakeStore) OrderPayment(_ context.Context, id, _ string) (store.Payment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.payments {
		if p.OrderID == id {
			return p, nil
		}
	}
	return store.Payment{}, order.ErrNotFound
}

func (f *fakeStore) OpenPayment(_ context.Context, p store.Payment) (store.Payment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.Status, p.ID, p.ProviderPaymentID = store.PaymentPending, int64(len(f.payments)+1), store.Placeholder(p.IdempotencyKey)
	f.payments = append(f.payments, p)
	return p, nil
}

func (f *fakeStore) NamePayment(_ context.Context, p store.Payment, id, url string) (store.Payment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.payments {
		if f.payments[i].ID == p.ID && !f.payments[i].Named() {
			f.payments[i].ProviderPaymentID, f.payments[i].CheckoutURL = id, url
		}
		if f.payments[i].ID == p.ID {
			return f.payments[i], nil
		}
	}
	return store.Payment{}, order.ErrNotFound
}

func (f *fakeStore) ApplyPaymentEvent(_ context.Context, e store.PaymentEvent) (store.EventResult, error) {
	f.events = append(f.events, e)
	return f.result, f.err
}

type noViews struct{ v *order.View }

func (n noViews) Status(context.Context, string) (order.View, bool, error) {
	if n.v == nil {
		return order.View{}, false, nil
	}
	return *n.v, true, nil
}

type settler struct{ settled []store.Order }

func (s *settler) Settle(_ context.Context, row store.Order) order.View {
	s.settled = append(s.settled, row)
	return row.View()
}

// fakeProvider counts creates and verifies with the test secret.
type fakeProvider struct {
	provider.Provider
	creates []provider.Request
}

const secret = "whsec_test"

func (p *fakeProvider) Create(_ context.Context, r provider.Request) (provider.Payment, error) {
	p.creates = append(p.creates, r)
	return provider.Payment{ID: "pi_1", OrderID: r.OrderID, Amount: r.Amount, Currency: r.Currency, CheckoutURL: "http://pay/pi_1"}, nil
}

func (p *fakeProvider) Verify(payload []byte, sig string) (provider.Event, error) {
	return provider.VerifyNotification(payload, sig, secret, provider.DefaultTolerance, time.Now())
}

const orderID = "01JABCDEFGHJKMNPQRSTVWXYZ0"

// cashierWith is a cashier over st asking p.
func cashierWith(st *fakeStore, p provider.Provider) *cashier.Cashier {
	return cashier.New(st, noViews{}, p, &settler{}, cashier.Options{Provider: "stripe"},
		cashier.NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
}

func newCashier(st *fakeStore, views noViews) (*cashier.Cashier, *fakeProvider, *settler, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	p, s := &fakeProvider{}, &settler{}
	c := cashier.New(st, views, p, s, cashier.Options{Provider: "testpay", ReturnURL: "http://shop/?order={order_id}"},
		cashier.NewMetrics(reg), slog.New(slog.NewTextHandler(io.Discard, nil)))
	return c, p, s, reg
}

func TestCheckoutOpensOnePaymentOfTheItemsPrice(t *testing.T) {
	now := time.Now()
	payBy := now.Add(time.Minute)
	st := &fakeStore{row: &store.Order{OrderID: orderID, UserID: 7, ItemID: 3, Status: order.StatusPendingPayment, PayBy: &payBy},
		item: store.Item{ID: 3, PriceCents: 999, Currency: "EUR"}}
	c, p, _, _ := newCashier(st, noViews{})
	co, err := c.Checkout(context.Background(), orderID, 7, now)
	if err != nil || co.PaymentID != "pi_1" || co.Amount != 999 || co.Currency != "EUR" || co.CheckoutURL != "http://pay/pi_1" {
		t.Fatalf("checkout %+v %v", co, err)
	}
	r := p.creates[0]
	if r.OrderID != orderID || !r.PayBy.Equal(payBy) || r.ReturnURL != "http://shop/?order="+orderID {
		t.Fatalf("create request %+v", r)
	}
	if again, err := c.Checkout(context.Background(), orderID, 7, now); err != nil || again.PaymentID != "pi_1" || len(p.creates) != 1 {
		t.Fatalf("second checkout %+v %v, %d creates", again, err, len(p.creates))
	}
	if _, err := c.Checkout(context.Background(), orderID, 8, now); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("another buyer's checkout: %v", err)
	}
}

func TestCheckoutRefusesWhatIsNotPayable(t *testing.T) {
	now := time.Now()
	past, later := now.Add(-time.Second), now.Add(time.Minute)
	for name, row := range map[string]store.Order{
		"late":   {Status: order.StatusPendingPayment, PayBy: &past},
		"paid":   {Status: order.StatusPaid, PayBy: &later},
		"closed": {Status: order.StatusCancelled, PayBy: &later},
		"early":  {Status: order.StatusQueued, PayBy: &later, PaidAt: &now},
	} {
		row.OrderID, row.UserID = orderID, 7
		c, p, _, _ := newCashier(&fakeStore{row: &row, item: store.Item{PriceCents: 1, Currency: "EUR"}}, noViews{})
		if _, err := c.Checkout(context.Background(), orderID, 7, now); !errors.Is(err, order.ErrNotPayable) || len(p.creates) != 0 {
			t.Errorf("%s: %v, %d creates", name, err, len(p.creates))
		}
	}
	// No row yet: the QUEUED view in Redis.
	v := order.View{OrderID: orderID, UserID: 7, ItemID: 3, Status: order.StatusQueued, PayBy: &later}
	c, _, _, _ := newCashier(&fakeStore{item: store.Item{ID: 3, PriceCents: 5, Currency: "JPY"}}, noViews{&v})
	if co, err := c.Checkout(context.Background(), orderID, 7, now); err != nil || co.Currency != "JPY" {
		t.Fatalf("checkout of a QUEUED order %+v %v", co, err)
	}
	c, _, _, _ = newCashier(&fakeStore{}, noViews{})
	if _, err := c.Checkout(context.Background(), orderID, 7, now); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("checkout of no order: %v", err)
	}
}

func event(typ string, amount int64) []byte {
	return []byte(`{"id":"evt_1","object":"event","type":"` + typ + `","created":` + strconv.FormatInt(time.Now().Unix(), 10) +
		`,"data":{"object":{"id":"pi_1","object":"payment_intent","amount":` + strconv.FormatInt(amount, 10) +
		`,"currency":"eur","metadata":{"order_id":"` + orderID + `"}}}}`)
}

// counted is the notifications counted with outcome.
func counted(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "seckill_payment_notifications_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestNotifyJudgesOnlyVerifiedEvents(t *testing.T) {
	now := time.Now()
	st := &fakeStore{result: store.EventResult{Verdict: store.VerdictPaid, Order: store.Order{OrderID: orderID, Status: order.StatusPaid}}}
	c, _, s, reg := newCashier(st, noViews{})
	body := event("payment_intent.succeeded", 999)
	for name, sig := range map[string]string{
		"forged":   provider.Sign(body, "another secret", now),
		"missing":  "",
		"stale":    provider.Sign(body, secret, now.Add(-time.Hour)),
		"tampered": provider.Sign(event("payment_intent.succeeded", 1), secret, now),
	} {
		if _, err := c.Notify(context.Background(), body, sig); !errors.Is(err, provider.ErrBadSignature) && !errors.Is(err, provider.ErrStale) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(st.events) != 0 || len(s.settled) != 0 {
		t.Fatalf("refused notifications reached the store: %+v", st.events)
	}
	out, err := c.Notify(context.Background(), body, provider.Sign(body, secret, now))
	if err != nil || out != "paid" || len(s.settled) != 1 {
		t.Fatalf("paid: %s %v, settled %d", out, err, len(s.settled))
	}
	e := st.events[0]
	if e.PaymentID != "pi_1" || e.Amount != 999 || e.Currency != "EUR" || e.OrderID != orderID || e.Provider != "testpay" {
		t.Fatalf("event %+v", e)
	}
	other := event("charge.refunded", 999)
	if out, err := c.Notify(context.Background(), other, provider.Sign(other, secret, now)); err != nil || out != cashier.OutcomeUnhandled || len(st.events) != 1 {
		t.Fatalf("unhandled: %s %v", out, err)
	}
	st.result = store.EventResult{Verdict: store.VerdictMismatch}
	if out, err := c.Notify(context.Background(), body, provider.Sign(body, secret, now)); err != nil || out != "mismatch" || len(s.settled) != 1 {
		t.Fatalf("mismatch: %s %v", out, err)
	}
	st.err = errors.New("mysql down")
	if _, err := c.Notify(context.Background(), body, provider.Sign(body, secret, now)); err == nil {
		t.Fatal("a failed decision answered no error")
	}
	for outcome, want := range map[string]float64{"bad_signature": 3, "stale": 1, "paid": 1, "unhandled": 1, "mismatch": 1, "error": 1} {
		if got := counted(t, reg, outcome); got != want {
			t.Errorf("outcome %s counted %v, want %v", outcome, got, want)
		}
	}
}

// refundStarts records the refund workflows the cashier starts.
type refundStarts struct {
	started []string // payment ids
	err     error
}

func (r *refundStarts) StartRefund(_ context.Context, _, paymentID, _ string) error {
	r.started = append(r.started, paymentID)
	return r.err
}

// A success the door cannot take starts its payment's refund workflow; a
// paid, repeated or recorded one does not; a second payment of a paid order
// does; a failed start is counted.
func TestNotifyStartsRefunds(t *testing.T) {
	now := time.Now()
	st := &fakeStore{}
	refunds := &refundStarts{}
	reg := prometheus.NewRegistry()
	c := cashier.New(st, noViews{}, &fakeProvider{}, &settler{}, cashier.Options{Provider: "testpay", Refunds: refunds},
		cashier.NewMetrics(reg), slog.New(slog.DiscardHandler))
	body := event("payment_intent.succeeded", 999)
	at, other := now.Add(-time.Minute), now.Add(-2*time.Minute)
	pay := store.Payment{OrderID: orderID, ProviderPaymentID: "pi_1", SucceededAt: &at}
	for _, c2 := range []struct {
		r     store.EventResult
		start bool
	}{
		{store.EventResult{Verdict: store.VerdictPaid, Payment: pay, Order: store.Order{OrderID: orderID, Status: order.StatusPaid}}, false},
		{store.EventResult{Verdict: store.VerdictRepeated}, false},
		{store.EventResult{Verdict: store.VerdictRecorded, Payment: pay}, false},
		{store.EventResult{Verdict: store.VerdictLate, Payment: pay}, true},
		{store.EventResult{Verdict: store.VerdictNotPayable, Payment: pay}, true},
		{store.EventResult{Verdict: store.VerdictMismatch, Payment: pay}, true},
		{store.EventResult{Verdict: store.VerdictAlreadyPaid, Payment: pay, Order: store.Order{PaidAt: &at}}, false},
		{store.EventResult{Verdict: store.VerdictAlreadyPaid, Payment: pay, Order: store.Order{PaidAt: &other}}, true},
	} {
		st.result = c2.r
		n := len(refunds.started)
		if _, err := c.Notify(context.Background(), body, provider.Sign(body, secret, now)); err != nil {
			t.Fatal(err)
		}
		if started := len(refunds.started) > n; started != c2.start {
			t.Errorf("%s (order paid at %v): refund started %v, want %v", c2.r.Verdict, c2.r.Order.PaidAt, started, c2.start)
		}
	}
	refunds.err = errors.New("temporal down")
	st.result = store.EventResult{Verdict: store.VerdictLate, Payment: pay}
	if out, err := c.Notify(context.Background(), body, provider.Sign(body, secret, now)); err != nil || out != "late" {
		t.Fatalf("a failed start: %s %v, want late answered 2xx (the decision is durable)", out, err)
	}
	if got := counted(t, reg, cashier.OutcomeRefundNotStarted); got != 1 {
		t.Fatalf("refund_not_started counted %v", got)
	}
}

// lostReply creates at its provider and loses the first answer (the
// provider acted, the caller cannot know).
type lostReply struct {
	*fakeProvider
	lost int
}

func (l *lostReply) Create(ctx context.Context, r provider.Request) (provider.Payment, error) {
	pay, err := l.fakeProvider.Create(ctx, r)
	if l.lost > 0 {
		l.lost--
		return provider.Payment{}, fmt.Errorf("create: %w", provider.ErrUnavailable)
	}
	return pay, err
}

// Durable before the provider: the payment's row, with every parameter the
// provider is sent, is committed before the create; the create's answer
// lost, the buyer's checkout again replays the same create (same key, same
// parameters) and names the row — one payment at the provider.
func TestCheckoutIsDurableBeforeTheProvider(t *testing.T) {
	now := time.Now()
	payBy := now.Add(time.Minute)
	st := &fakeStore{row: &store.Order{OrderID: orderID, UserID: 7, ItemID: 3, Status: order.StatusPendingPayment, PayBy: &payBy},
		item: store.Item{ID: 3, Name: "Phone", PriceCents: 999, Currency: "EUR"}}
	p := &lostReply{fakeProvider: &fakeProvider{}, lost: 1}
	c := cashierWith(st, p)
	if _, err := c.Checkout(context.Background(), orderID, 7, now); !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("checkout with the create's answer lost: %v", err)
	}
	if len(st.payments) != 1 || st.payments[0].Named() || st.payments[0].Status != store.PaymentPending ||
		st.payments[0].IdempotencyKey != orderID || st.payments[0].ExpiresAt == nil || st.payments[0].Name != "Phone" {
		t.Fatalf("the row before the provider's answer: %+v", st.payments)
	}
	co, err := c.Checkout(context.Background(), orderID, 7, now.Add(time.Second))
	if err != nil || co.PaymentID != "pi_1" || co.CheckoutURL != "http://pay/pi_1" || len(st.payments) != 1 {
		t.Fatalf("checkout again: %+v %v, rows %+v", co, err, st.payments)
	}
	if len(p.creates) != 2 || !reflect.DeepEqual(p.creates[0], p.creates[1]) || p.creates[0].Key() != orderID {
		t.Fatalf("creates %+v, want the same request twice under the order's key", p.creates)
	}
}
