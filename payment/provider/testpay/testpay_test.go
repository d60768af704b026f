package testpay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
)

const secret = "whsec_testpay"

// receiver is the notification endpoint as an http.RoundTripper: no
// network, so a test runs inside a synctest bubble. It verifies and records
// each delivery; fail makes it answer 500 that many times first.
type receiver struct {
	mu   sync.Mutex
	fail int
	got  []provider.Event
	at   []time.Time
	bad  []error
}

func (r *receiver) RoundTrip(req *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	status := http.StatusOK
	if r.fail > 0 {
		r.fail--
		status = http.StatusInternalServerError
	} else if ev, err := provider.VerifyNotification(body, req.Header.Get(provider.SignatureHeader), secret, time.Minute, time.Now()); err != nil {
		r.bad = append(r.bad, err)
		status = http.StatusBadRequest
	} else {
		r.got, r.at = append(r.got, ev), append(r.at, time.Now())
	}
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

func (r *receiver) events() []provider.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) > 0 {
		panic(r.bad[0])
	}
	return append([]provider.Event(nil), r.got...)
}

func newProvider(t *testing.T, rec *receiver, k testpay.Knobs) *testpay.Provider {
	p := testpay.New(testpay.Options{Secret: secret, NotifyURL: "http://shop.test/notify", BaseURL: "http://pay.test",
		Client: &http.Client{Transport: rec}, Knobs: k, Seed: 1})
	t.Cleanup(p.Close)
	return p
}

func create(t *testing.T, p *testpay.Provider, order string) provider.Payment {
	t.Helper()
	pay, err := p.Create(context.Background(), provider.Request{OrderID: order, Amount: 999, Currency: "EUR", PayBy: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return pay
}

func pay(t *testing.T, p *testpay.Provider, id string) {
	t.Helper()
	if _, err := p.Pay(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

// The order id is the idempotency key: a second Create returns the first
// payment; the same order with another amount is refused.
func TestCreateIsIdempotentByOrder(t *testing.T) {
	p := newProvider(t, &receiver{}, testpay.Knobs{})
	a := create(t, p, "o1")
	if b := create(t, p, "o1"); a != b || a.Status != provider.Pending || a.CheckoutURL != "http://pay.test/pay/"+a.ID {
		t.Fatalf("second create %+v, first %+v", b, a)
	}
	if _, err := p.Create(context.Background(), provider.Request{OrderID: "o1", Amount: 1000, Currency: "EUR"}); err == nil {
		t.Fatal("the same order with another amount was accepted")
	}
	if c := create(t, p, "o2"); c.ID == a.ID {
		t.Fatal("two orders share a payment")
	}
}

// The test card pays; the notification that follows is signed the way
// Stripe signs (the receiver verifies it) and says who paid what; Lookup
// has the new state. Paying again sends nothing.
func TestPaySendsASignedNotification(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &receiver{}
		p := newProvider(t, rec, testpay.Knobs{})
		a := create(t, p, "o1")
		pay(t, p, a.ID)
		pay(t, p, a.ID)
		synctest.Wait()
		got := rec.events()
		if len(got) != 1 {
			t.Fatalf("%d notifications, want 1", len(got))
		}
		e := got[0]
		if e.Type != provider.PaymentSucceeded || e.PaymentID != a.ID || e.OrderID != "o1" || e.Amount != 999 || e.Currency != "EUR" || !e.At.Equal(time.Now().Truncate(time.Second)) {
			t.Fatalf("event %+v", e)
		}
		if l, err := p.Lookup(context.Background(), a.ID); err != nil || l.Status != provider.Succeeded {
			t.Fatalf("lookup: %+v, %v", l, err)
		}
	})
}

// Cancel closes an open payment (and says so); it cannot close a paid one:
// ErrAlreadySucceeded, the payment wins. An unknown payment is ErrNotFound.
func TestCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &receiver{}
		p := newProvider(t, rec, testpay.Knobs{})
		ctx := context.Background()
		a, b := create(t, p, "o1"), create(t, p, "o2")
		if c, err := p.Cancel(ctx, a.ID); err != nil || c.Status != provider.Canceled {
			t.Fatalf("cancel: %+v, %v", c, err)
		}
		if c, err := p.Cancel(ctx, a.ID); err != nil || c.Status != provider.Canceled {
			t.Fatalf("second cancel: %+v, %v", c, err)
		}
		if _, err := p.Pay(ctx, a.ID); !errors.Is(err, testpay.ErrClosed) {
			t.Fatalf("pay after cancel: %v, want ErrClosed", err)
		}
		pay(t, p, b.ID)
		if c, err := p.Cancel(ctx, b.ID); !errors.Is(err, provider.ErrAlreadySucceeded) || c.Status != provider.Succeeded {
			t.Fatalf("cancel of a paid payment: %+v, %v", c, err)
		}
		if _, err := p.Cancel(ctx, "pi_nope"); !errors.Is(err, provider.ErrNotFound) {
			t.Fatalf("cancel unknown: %v", err)
		}
		synctest.Wait()
		// No order is promised, even without the Reorder knob (nor by Stripe).
		types := map[string]provider.EventType{}
		for _, e := range rec.events() {
			types[e.OrderID] = e.Type
		}
		if len(types) != 2 || types["o1"] != provider.PaymentCanceled || types["o2"] != provider.PaymentSucceeded {
			t.Fatalf("notifications %+v, want o1 canceled and o2 succeeded", types)
		}
	})
}

// A payment expires at the request's PayBy: the test card is refused and
// Lookup says canceled.
func TestPaymentExpiresAtPayBy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, &receiver{}, testpay.Knobs{})
		a, err := p.Create(context.Background(), provider.Request{OrderID: "o1", Amount: 999, Currency: "EUR", PayBy: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if _, err := p.Pay(context.Background(), a.ID); !errors.Is(err, testpay.ErrClosed) {
			t.Fatalf("pay at pay_by: %v, want ErrClosed", err)
		}
		if l, _ := p.Lookup(context.Background(), a.ID); l.Status != provider.Canceled {
			t.Fatalf("lookup: %+v", l)
		}
	})
}

// A refund is idempotent by its key; a second refund of the payment under
// another key, or of an unpaid payment, is refused.
func TestRefund(t *testing.T) {
	p := newProvider(t, &receiver{}, testpay.Knobs{})
	ctx := context.Background()
	a, b := create(t, p, "o1"), create(t, p, "o2")
	if _, err := p.Refund(ctx, b.ID, "k-b"); err == nil {
		t.Fatal("an unpaid payment was refunded")
	}
	pay(t, p, a.ID)
	r1, err := p.Refund(ctx, a.ID, "k-a")
	if err != nil || r1.Status != provider.RefundSucceeded || r1.Amount != 999 || r1.Currency != "EUR" || r1.PaymentID != a.ID {
		t.Fatalf("refund: %+v, %v", r1, err)
	}
	if r2, err := p.Refund(ctx, a.ID, "k-a"); err != nil || r2 != r1 {
		t.Fatalf("same key: %+v, %v; want %+v", r2, err, r1)
	}
	if _, err := p.Refund(ctx, a.ID, "k-other"); err == nil {
		t.Fatal("a payment was refunded twice")
	}
	if _, err := p.Refund(ctx, "pi_nope", "k"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("unknown payment: %v", err)
	}
}

// FailRefunds=3: three refunds fail with ErrUnavailable, doing nothing;
// Guard's retries with the same key then refund once.
func TestKnobFailRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, &receiver{}, testpay.Knobs{FailRefunds: 3})
		a := create(t, p, "o1")
		pay(t, p, a.ID)
		if _, err := p.Refund(context.Background(), a.ID, "k"); !errors.Is(err, provider.ErrUnavailable) {
			t.Fatalf("first refund: %v, want ErrUnavailable", err)
		}
		g := provider.Guard(p, provider.Limits{Attempts: 3})
		r, err := g.Refund(context.Background(), a.ID, "k")
		if err != nil || r.Status != provider.RefundSucceeded {
			t.Fatalf("guarded refund after 2 more failures: %+v, %v", r, err)
		}
		if again, err := g.Refund(context.Background(), a.ID, "k"); err != nil || again != r {
			t.Fatalf("the key's refund again: %+v, %v", again, err)
		}
	})
}

// PendingRefunds: a refund answers pending, asked again with its key it
// still does (as Stripe's idempotency answers), and its lookup confirms it.
// FailingRefunds: pending, then failed at the lookup; the payment is then
// refundable under another key.
func TestKnobPendingAndFailingRefunds(t *testing.T) {
	p := newProvider(t, &receiver{}, testpay.Knobs{PendingRefunds: 1, FailingRefunds: 1})
	ctx := context.Background()
	a, b := create(t, p, "o1"), create(t, p, "o2")
	pay(t, p, a.ID)
	pay(t, p, b.ID)
	ra, err := p.Refund(ctx, a.ID, "k-a")
	if err != nil || ra.Status != provider.RefundPending {
		t.Fatalf("pending refund: %+v, %v", ra, err)
	}
	if again, _ := p.Refund(ctx, a.ID, "k-a"); again.Status != provider.RefundPending {
		t.Fatalf("asked again: %+v, want pending", again)
	}
	if got, err := p.LookupRefund(ctx, ra.ID); err != nil || got.Status != provider.RefundSucceeded || got.ID != ra.ID {
		t.Fatalf("lookup: %+v, %v, want succeeded", got, err)
	}
	rb, _ := p.Refund(ctx, b.ID, "k-b")
	if got, err := p.LookupRefund(ctx, rb.ID); err != nil || got.Status != provider.RefundFailed {
		t.Fatalf("failing refund's lookup: %+v, %v, want failed", got, err)
	}
	if again, _ := p.Refund(ctx, b.ID, "k-b"); again.Status != provider.RefundFailed {
		t.Fatalf("the failed key again: %+v", again)
	}
	if r2, err := p.Refund(ctx, b.ID, "k-b-2"); err != nil || r2.Status != provider.RefundSucceeded || r2.ID == rb.ID {
		t.Fatalf("a new key after the failure: %+v, %v", r2, err)
	}
	if _, err := p.LookupRefund(ctx, "re_nope"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("unknown refund: %v", err)
	}
}

// Delay: nothing arrives before the delay, the notification at it.
func TestKnobDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &receiver{}
		p := newProvider(t, rec, testpay.Knobs{Delay: 30 * time.Second})
		pay(t, p, create(t, p, "o1").ID)
		time.Sleep(30*time.Second - time.Millisecond)
		synctest.Wait()
		if n := len(rec.events()); n != 0 {
			t.Fatalf("%d notifications before the delay", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := len(rec.events()); n != 1 {
			t.Fatalf("%d notifications at the delay, want 1", n)
		}
	})
}

// Duplicate=1: each notification arrives twice, under the same event id.
func TestKnobDuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &receiver{}
		p := newProvider(t, rec, testpay.Knobs{Duplicate: 1})
		pay(t, p, create(t, p, "o1").ID)
		synctest.Wait()
		got := rec.events()
		if len(got) != 2 || got[0].ID != got[1].ID {
			t.Fatalf("notifications %+v, want one event twice", got)
		}
	})
}

// Reorder: a held-back notification is overtaken by the next one.
func TestKnobReorder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &receiver{}
		p := newProvider(t, rec, testpay.Knobs{Reorder: 1, ReorderBy: 5 * time.Second})
		a, b := create(t, p, "o1"), create(t, p, "o2")
		pay(t, p, a.ID)
		p.SetKnobs(testpay.Knobs{})
		pay(t, p, b.ID)
		synctest.Wait()
		if got := rec.events(); len(got) != 1 || got[0].OrderID != "o2" {
			t.Fatalf("before the hold ends: %+v, want o2's alone", got)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := rec.events(); len(got) != 2 || got[1].OrderID != "o1" {
			t.Fatalf("after the hold: %+v, want o2's then o1's", got)
		}
	})
}

// Drop=1: the payment succeeds, its notification never comes (the shop
// learns it by Lookup).
func TestKnobDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &receiver{}
		p := newProvider(t, rec, testpay.Knobs{Drop: 1})
		a := create(t, p, "o1")
		pay(t, p, a.ID)
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(rec.events()); n != 0 {
			t.Fatalf("%d notifications, want none", n)
		}
		if l, _ := p.Lookup(context.Background(), a.ID); l.Status != provider.Succeeded {
			t.Fatalf("lookup: %+v", l)
		}
	})
}

// The fractions are drawn per notification: at 0.2, about a fifth of 1,000
// payments' notifications are duplicated, and a seed repeats the draws.
func TestKnobFractions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &receiver{}
		p := newProvider(t, rec, testpay.Knobs{Duplicate: 0.2})
		for i := range 1000 {
			pay(t, p, create(t, p, fmt.Sprint("o", i)).ID)
		}
		synctest.Wait()
		if n := len(rec.events()) - 1000; n < 150 || n > 250 {
			t.Fatalf("%d duplicates of 1,000, want about 200", n)
		}
	})
}

// A receiver that does not answer 2xx gets the notification again, with a
// signature of the moment of each send, after waits that double.
func TestUnansweredNotificationsAreResent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &receiver{fail: 2}
		p := newProvider(t, rec, testpay.Knobs{})
		start := time.Now()
		pay(t, p, create(t, p, "o1").ID)
		time.Sleep(time.Minute)
		synctest.Wait()
		got := rec.events()
		if len(got) != 1 || rec.at[0].Sub(start) != 3*time.Second {
			t.Fatalf("%d deliveries, the first after %s; want 1 after 1s+2s", len(got), rec.at[0].Sub(start))
		}
	})
}

// The hosted checkout: the page offers the test card, its button pays and
// sends the buyer back; the notification reaches a real HTTP endpoint.
func TestCheckoutPage(t *testing.T) {
	notes := make(chan provider.Event, 1)
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := provider.VerifyNotification(body, r.Header.Get(provider.SignatureHeader), secret, time.Minute, time.Now())
		if err != nil {
			t.Error(err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		notes <- ev
	}))
	defer shop.Close()
	p := testpay.New(testpay.Options{Secret: secret, NotifyURL: shop.URL})
	defer p.Close()
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	a, err := p.Create(context.Background(), provider.Request{OrderID: "o1", Amount: 999, Currency: "EUR",
		PayBy: time.Now().Add(time.Hour), ReturnURL: "http://shop.test/orders/o1"})
	if err != nil {
		t.Fatal(err)
	}
	get := func() (int, string) {
		resp, err := http.Get(srv.URL + "/pay/" + a.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, page := get(); code != 200 || !strings.Contains(page, "Pay 9.99 EUR with a test card") {
		t.Fatalf("checkout page %d:\n%s", code, page)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm(srv.URL+"/pay/"+a.ID, url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "http://shop.test/orders/o1" {
		t.Fatalf("pay answered %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	if ev := <-notes; ev.Type != provider.PaymentSucceeded || ev.OrderID != "o1" {
		t.Fatalf("notification %+v", ev)
	}
	if code, page := get(); code != 200 || !strings.Contains(page, "Paid 9.99 EUR") {
		t.Fatalf("page after paying %d:\n%s", code, page)
	}
	if resp, err := http.Get(srv.URL + "/pay/pi_nope"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown payment: %v %v", resp, err)
	}
}

func TestFormatAmount(t *testing.T) {
	for _, c := range []struct {
		amount   int64
		currency string
		want     string
	}{{999, "EUR", "9.99 EUR"}, {5, "USD", "0.05 USD"}, {500, "JPY", "500 JPY"}, {-150, "EUR", "-1.50 EUR"},
		{9999, "KWD", "9.999 KWD"}, {5, "BHD", "0.005 BHD"}} {
		if got := testpay.FormatAmount(c.amount, c.currency); got != c.want {
			t.Errorf("FormatAmount(%d, %s) = %q, want %q", c.amount, c.currency, got, c.want)
		}
	}
}
