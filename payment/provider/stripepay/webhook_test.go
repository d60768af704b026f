package stripepay_test

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/stripepay"
	"github.com/seckill/seckill/payment/provider/testpay"
)

const secret = "whsec_seckill_test"

var verifier = stripepay.New(stripepay.Config{Key: key, WebhookSecret: secret})

func event(typ string, created time.Time) []byte {
	return []byte(`{"id":"evt_1","object":"event","api_version":"2020-08-27","type":"` + typ + `","created":` +
		strconv.FormatInt(created.Unix(), 10) + `,"data":{"object":{"id":"pi_1","object":"payment_intent",` +
		`"amount":999,"currency":"eur","status":"succeeded","metadata":{"order_id":"01ORDER"}}}}`)
}

// signed is payload signed the way Stripe signs, by the library.
func signed(payload []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header
}

// A notification signed by Stripe's library is read as the typed event.
func TestVerifyGoodSignature(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	body := event("payment_intent.succeeded", now)
	ev, err := verifier.Verify(body, signed(body, secret, now))
	if err != nil {
		t.Fatal(err)
	}
	want := provider.Event{ID: "evt_1", Type: provider.PaymentSucceeded, ProviderType: "payment_intent.succeeded",
		PaymentID: "pi_1", PaymentIntentID: "pi_1", OrderID: "01ORDER", Amount: 999, Currency: "EUR", At: now.UTC()}
	if ev != want {
		t.Fatalf("event %+v, want %+v", ev, want)
	}
	// The shared verifier (the test provider's) reads it the same, but for
	// PaymentIntentID: its payments are PaymentIntents, held as such.
	ev.PaymentIntentID = ""
	if ev2, err := provider.VerifyNotification(body, signed(body, secret, now), secret, provider.DefaultTolerance, time.Now()); err != nil || ev2 != ev {
		t.Fatalf("provider.VerifyNotification: %+v, %v", ev2, err)
	}
}

// Another secret, a tampered body, no header: ErrBadSignature, from both
// verifiers.
func TestVerifyBadSignature(t *testing.T) {
	now := time.Now()
	body := event("payment_intent.succeeded", now)
	cases := map[string]struct {
		body   []byte
		header string
	}{
		"other secret": {body, signed(body, "whsec_other", now)},
		"tampered":     {[]byte(strings.Replace(string(body), "999", "1", 1)), signed(body, secret, now)},
		"no header":    {body, ""},
		"garbage":      {body, "t=x,v1=y"},
	}
	for name, c := range cases {
		if _, err := verifier.Verify(c.body, c.header); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
		if _, err := provider.VerifyNotification(c.body, c.header, secret, provider.DefaultTolerance, now); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s, shared verifier: %v, want ErrBadSignature", name, err)
		}
	}
}

// During a rotation a notification signed with the current or the previous
// secret is read (the library's multi-signature header too); one signed
// with neither is refused, and a client without a secret refuses every
// notification, even one "signed" with the empty secret.
func TestVerifyDuringARotation(t *testing.T) {
	const previous = "whsec_seckill_previous"
	rotating := stripepay.New(stripepay.Config{Key: key, WebhookSecret: secret, WebhookSecretPrevious: previous})
	now := time.Now()
	body := event("payment_intent.succeeded", now)
	both := signed(body, secret, now) + ",v1=" + hex.EncodeToString(webhook.ComputeSignature(now, body, previous))
	for name, header := range map[string]string{"current": signed(body, secret, now), "previous": signed(body, previous, now), "both": both} {
		if ev, err := rotating.Verify(body, header); err != nil || ev.PaymentID != "pi_1" {
			t.Errorf("signed with the %s secret: %+v, %v", name, ev, err)
		}
	}
	if _, err := rotating.Verify(body, signed(body, "whsec_other", now)); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("signed with neither: %v, want ErrBadSignature", err)
	}
	// Without the rotation the previous secret's signature is refused.
	if _, err := verifier.Verify(body, signed(body, previous, now)); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("previous secret, no rotation: %v, want ErrBadSignature", err)
	}
	// A stale notification stays stale under either secret.
	then := now.Add(-provider.DefaultTolerance - time.Minute)
	if _, err := rotating.Verify(body, signed(body, previous, then)); !errors.Is(err, provider.ErrStale) {
		t.Errorf("stale, previous secret: %v, want ErrStale", err)
	}
	unset := stripepay.New(stripepay.Config{Key: key})
	if _, err := unset.Verify(body, signed(body, "", now)); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("no secret configured, signed with the empty one: %v, want ErrBadSignature", err)
	}
}

// A genuine notification signed longer ago than the tolerance: ErrStale.
func TestVerifyStaleTimestamp(t *testing.T) {
	then := time.Now().Add(-provider.DefaultTolerance - time.Minute)
	body := event("payment_intent.succeeded", then)
	if _, err := verifier.Verify(body, signed(body, secret, then)); !errors.Is(err, provider.ErrStale) {
		t.Fatalf("%v, want ErrStale", err)
	}
	if _, err := provider.VerifyNotification(body, signed(body, secret, then), secret, provider.DefaultTolerance, time.Now()); !errors.Is(err, provider.ErrStale) {
		t.Fatalf("shared verifier: %v, want ErrStale", err)
	}
}

func sessionEvent(typ, paid string, created time.Time) []byte {
	return []byte(`{"id":"evt_2","object":"event","type":"` + typ + `","created":` + strconv.FormatInt(created.Unix(), 10) +
		`,"data":{"object":{"id":"cs_1","object":"checkout.session","status":"complete","payment_status":"` + paid + `",` +
		`"amount_total":999,"currency":"eur","client_reference_id":"01ORDER","metadata":{"order_id":"01ORDER"},"payment_intent":"pi_1"}}}`)
}

// A Checkout Session's events name the session (the payment the shop
// holds) and its PaymentIntent: completed and paid is a success, expired a
// cancel, an async payment's failure a failure; completed but unpaid (a
// delayed method) pays nothing yet.
func TestVerifySessionEvents(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	for typ, want := range map[string]provider.EventType{"checkout.session.completed": provider.PaymentSucceeded,
		"checkout.session.async_payment_succeeded": provider.PaymentSucceeded, "checkout.session.expired": provider.PaymentCanceled,
		"checkout.session.async_payment_failed": provider.PaymentFailed} {
		body := sessionEvent(typ, "paid", now)
		ev, err := verifier.Verify(body, signed(body, secret, now))
		w := provider.Event{ID: "evt_2", Type: want, ProviderType: typ, PaymentID: "cs_1", PaymentIntentID: "pi_1", OrderID: "01ORDER",
			Amount: 999, Currency: "EUR", At: now.UTC()}
		if err != nil || ev != w {
			t.Errorf("%s: %+v, %v; want %+v", typ, ev, err, w)
		}
	}
	body := sessionEvent("checkout.session.completed", "unpaid", now)
	if ev, err := verifier.Verify(body, signed(body, secret, now)); err != nil || ev.Type != provider.Unhandled {
		t.Errorf("completed, unpaid: %+v, %v; want Unhandled", ev, err)
	}
	// The order comes from client_reference_id when the metadata lacks it.
	body = []byte(strings.Replace(string(sessionEvent("checkout.session.completed", "paid", now)), `"metadata":{"order_id":"01ORDER"},`, "", 1))
	if ev, err := verifier.Verify(body, signed(body, secret, now)); err != nil || ev.OrderID != "01ORDER" {
		t.Errorf("no metadata: %+v, %v", ev, err)
	}
	body = []byte(`{"id":"evt_3","object":"event","type":"checkout.session.expired","created":1,"data":{"object":{"object":"checkout.session"}}}`)
	if _, err := verifier.Verify(body, signed(body, secret, now)); !errors.Is(err, provider.ErrMalformed) {
		t.Errorf("a session event without its session: %v, want ErrMalformed", err)
	}
	// A canceled or failed PaymentIntent: a cancel, a failure.
	for typ, want := range map[string]provider.EventType{"payment_intent.canceled": provider.PaymentCanceled, "payment_intent.payment_failed": provider.PaymentFailed} {
		body := event(typ, now)
		if ev, err := verifier.Verify(body, signed(body, secret, now)); err != nil || ev.Type != want || ev.PaymentIntentID != "pi_1" {
			t.Errorf("%s: %+v, %v", typ, ev, err)
		}
	}
}

// A type the shop does not act on is read as Unhandled, without an error.
func TestVerifyUnknownEventType(t *testing.T) {
	now := time.Now()
	body := []byte(`{"id":"evt_9","object":"event","type":"customer.created","created":1,"data":{"object":{"id":"cus_1","object":"customer"}}}`)
	ev, err := verifier.Verify(body, signed(body, secret, now))
	if err != nil || ev.Type != provider.Unhandled || ev.ProviderType != "customer.created" || ev.ID != "evt_9" {
		t.Fatalf("%+v, %v", ev, err)
	}
	// A known type without its payment is not believed.
	body = []byte(`{"id":"evt_8","object":"event","type":"payment_intent.succeeded","created":1,"data":{"object":{"object":"payment_intent"}}}`)
	if _, err := verifier.Verify(body, signed(body, secret, now)); !errors.Is(err, provider.ErrMalformed) {
		t.Fatalf("%v, want ErrMalformed", err)
	}
}

// capture is a notification endpoint that hands over what it receives.
type capture chan [2]string

func (c capture) RoundTrip(r *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(r.Body)
	c <- [2]string{string(b), r.Header.Get(provider.SignatureHeader)}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// The test provider's notifications are Stripe's: Stripe's library verifies
// and reads them as the test provider's own verifier does.
func TestTestProviderNotificationsVerifyAsStripes(t *testing.T) {
	got := make(capture, 1)
	tp := testpay.New(testpay.Options{Secret: secret, NotifyURL: "http://shop.test/notify", Client: &http.Client{Transport: got}})
	defer tp.Close()
	ctx := context.Background()
	pay, err := tp.Create(ctx, provider.Request{OrderID: "01ORDER", Amount: 999, Currency: "EUR", PayBy: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Pay(ctx, pay.ID); err != nil {
		t.Fatal(err)
	}
	n := <-got
	viaStripe, err := verifier.Verify([]byte(n[0]), n[1])
	if err != nil {
		t.Fatal(err)
	}
	viaTestpay, err := tp.Verify([]byte(n[0]), n[1])
	viaTestpay.PaymentIntentID = viaTestpay.PaymentID // Stripe's library names the PaymentIntent of a payment_intent event
	if err != nil || viaStripe != viaTestpay {
		t.Fatalf("stripe's library read %+v, the test provider %+v (%v)", viaStripe, viaTestpay, err)
	}
	if viaStripe.Type != provider.PaymentSucceeded || viaStripe.PaymentID != pay.ID || viaStripe.OrderID != "01ORDER" || viaStripe.Amount != 999 || viaStripe.Currency != "EUR" {
		t.Fatalf("event %+v", viaStripe)
	}
}
