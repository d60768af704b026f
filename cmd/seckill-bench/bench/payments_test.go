package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/standin"
	"github.com/seckill/seckill/payment/provider/stripepay"
)

// A round of the stampede on the Stripe path: sessions opened through
// stripe-go at the stand-in, paid on it by the round's payers, its webhooks
// (one event per payment, as a shop registers, duplicated and held back by
// the knobs) relayed to the shop; each payer waits for its payment's
// decision, the round for every copy's answer. Every payment is paid once,
// the copies repeated, none refused; the knobs went over the admin route.
func TestStripeRound(t *testing.T) {
	const key, secret = "sk_test_bench", "whsec_bench"
	var mu sync.Mutex
	seen, paid := map[string]bool{}, map[string]bool{}
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if err := provider.VerifySignature(b, r.Header.Get(provider.SignatureHeader), secret, time.Minute, time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ev provider.StripeEvent
		_ = json.Unmarshal(b, &ev)
		order := ev.Data.Object.Metadata[provider.MetadataOrderID]
		mu.Lock()
		outcome := "paid"
		switch {
		case seen[ev.ID]:
			outcome = "repeated"
		case paid[order]:
			outcome = "already_paid"
		}
		seen[ev.ID], paid[order] = true, true
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"outcome": outcome})
	}))
	defer shop.Close()
	relay, err := StartRelay("127.0.0.1:0", shop.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = relay.Close() }()
	relayURL := "http://" + relay.Addr()
	sin := standin.New(standin.Options{WebhookURL: relayURL + "/api/v1/payments/notifications", WebhookSecret: secret, Seed: 7})
	defer sin.Close()
	srv := httptest.NewServer(sin.Handler())
	defer srv.Close()
	sin2 := standin.NewAdmin(srv.URL, key, nil) // the stand-in's own client reads back what the bench's set
	admin := newStandinAdmin(srv.URL, key)
	ctx := context.Background()
	knobs := StandinKnobs{Duplicate: 0.5, Reorder: 0.2, ReorderBy: 50 * time.Millisecond}
	if err := admin.setKnobs(ctx, knobs); err != nil {
		t.Fatal(err)
	}
	if k := sin.Knobs(); k.Duplicate != knobs.Duplicate || k.Reorder != knobs.Reorder || k.ReorderBy != knobs.ReorderBy {
		t.Fatalf("knobs set %+v, want %+v", k, knobs)
	}
	stripe := stripepay.New(stripepay.Config{Key: key, URL: srv.URL})
	var sessions, orders []string
	for i := range 40 {
		o := fmt.Sprintf("order-%02d", i)
		p, err := stripe.Create(ctx, provider.Request{OrderID: o, Amount: 1999, Currency: "EUR", PayBy: time.Now().Add(time.Hour),
			ReturnURL: "http://shop/#/orders/{order_id}"})
		if err != nil {
			t.Fatal(err)
		}
		sessions, orders = append(sessions, p.ID), append(orders, o)
	}
	notes := relay.notes
	f := notes.round(ctx, admin, sessions, orders)
	notes.waitIdle(ctx)
	c := notes.counts()
	if f.perSec <= 0 || f.answers <= 0 || c["paid"] != 40 || c["already_paid"] != 0 || c["repeated"] == 0 || notes.refused(orders) != 0 ||
		notes.events() != 40 {
		t.Fatalf("round %+v, answers %v, %d events, %d refused", f, c, notes.events(), notes.refused(orders))
	}
	if calls, err := sin2.Calls(ctx, "/v1/checkout/sessions"); err != nil || len(calls) != 40 {
		t.Fatalf("%d session calls at the stand-in, %v: want 40", len(calls), err)
	}
	if err := admin.pay(ctx, "cs_test_unknown"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("pay of an unknown session: %v, want a 404", err)
	}
}
