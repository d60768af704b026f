package provider_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/payment/provider"
)

const secret = "whsec_test_secret"

var succeeded = []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","created":1764720000,
"data":{"object":{"id":"pi_1","object":"payment_intent","amount":999,"currency":"eur","status":"succeeded","metadata":{"order_id":"01ORDER"}}}}`)

// A notification signed with the secret reads as the typed event, the
// provider's timestamp and the order from the metadata included.
func TestVerifyNotificationReadsAGoodOne(t *testing.T) {
	now := time.Unix(1764720000, 0)
	ev, err := provider.VerifyNotification(succeeded, provider.Sign(succeeded, secret, now), secret, time.Minute, now.Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := provider.Event{ID: "evt_1", Type: provider.PaymentSucceeded, ProviderType: "payment_intent.succeeded",
		PaymentID: "pi_1", OrderID: "01ORDER", Amount: 999, Currency: "EUR", At: now.UTC()}
	if ev != want {
		t.Fatalf("event %+v, want %+v", ev, want)
	}
}

// Whatever is wrong with the signature, the answer is ErrBadSignature; a
// rolled secret (two v1 signatures) passes with either.
func TestVerifySignatureRefusesBadSignatures(t *testing.T) {
	now := time.Now()
	good := provider.Sign(succeeded, secret, now)
	for name, h := range map[string]string{
		"other secret": provider.Sign(succeeded, "whsec_other", now),
		"no header":    "",
		"no v1":        good[:strings.Index(good, ",")],
		"no timestamp": good[strings.Index(good, ",")+1:],
		"garbage":      "t=abc,v1=zz",
		"other time":   strings.Replace(good, good[2:strings.Index(good, ",")], "1", 1),
	} {
		if err := provider.VerifySignature(succeeded, h, secret, time.Minute, now); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	tampered := []byte(strings.Replace(string(succeeded), "999", "1", 1))
	if err := provider.VerifySignature(tampered, good, secret, time.Minute, now); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("tampered payload: %v, want ErrBadSignature", err)
	}
	rolled := good + "," + strings.Split(provider.Sign(succeeded, "whsec_old", now), ",")[1]
	if err := provider.VerifySignature(succeeded, rolled, secret, time.Minute, now); err != nil {
		t.Errorf("two signatures, one good: %v", err)
	}
}

// A genuine notification older than the tolerance is ErrStale (a replay).
func TestVerifySignatureRefusesAStaleTimestamp(t *testing.T) {
	signed := time.Now().Add(-10 * time.Minute)
	h := provider.Sign(succeeded, secret, signed)
	if err := provider.VerifySignature(succeeded, h, secret, 5*time.Minute, time.Now()); !errors.Is(err, provider.ErrStale) {
		t.Fatalf("%v, want ErrStale", err)
	}
	if err := provider.VerifySignature(succeeded, h, secret, 15*time.Minute, time.Now()); err != nil {
		t.Fatalf("within a 15m tolerance: %v", err)
	}
}

// An event type the shop does not act on is read, as Unhandled, without an
// error (the door answers 2xx so that the provider stops resending it); a
// payload that is not an event is ErrMalformed.
func TestParseEventTypes(t *testing.T) {
	ev, err := provider.ParseEvent([]byte(`{"id":"evt_2","object":"event","type":"customer.created","created":1,"data":{"object":{"id":"cus_1","object":"customer"}}}`))
	if err != nil || ev.Type != provider.Unhandled || ev.ProviderType != "customer.created" || ev.ID != "evt_2" {
		t.Fatalf("unknown type: %+v, %v", ev, err)
	}
	for typ, want := range provider.StripeTypes {
		ev, err := provider.ParseEvent([]byte(strings.Replace(string(succeeded), "payment_intent.succeeded", typ, 1)))
		if err != nil || ev.Type != want || ev.PaymentID != "pi_1" {
			t.Errorf("%s: %+v, %v", typ, ev, err)
		}
	}
	for _, bad := range []string{`not json`, `{"id":"evt_3"}`, `{"id":"evt_4","type":"payment_intent.succeeded","data":{"object":{}}}`} {
		if _, err := provider.ParseEvent([]byte(bad)); !errors.Is(err, provider.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", bad, err)
		}
	}
}
