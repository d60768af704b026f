package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries a notification's signature, Stripe's way.
const SignatureHeader = "Stripe-Signature"

// DefaultTolerance is how old a notification's signed timestamp may be
// (Stripe's default: five minutes). Older is a replay, or a clock far off.
const DefaultTolerance = 5 * time.Minute

// Sign is the Stripe-Signature value of payload signed with secret at at:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<payload>">".
func Sign(payload []byte, secret string, at time.Time) string {
	t := strconv.FormatInt(at.Unix(), 10)
	return "t=" + t + ",v1=" + hex.EncodeToString(mac(secret, t, payload))
}

func mac(secret, t string, payload []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(t))
	m.Write([]byte{'.'})
	m.Write(payload)
	return m.Sum(nil)
}

// VerifySignature checks header (a Stripe-Signature value) against payload
// and secret, then the timestamp's age against tolerance at now: any v1
// signature may match (a rolled secret sends two). The signature is checked
// first, so ErrStale says a genuine notification came too late.
func VerifySignature(payload []byte, header, secret string, tolerance time.Duration, now time.Time) error {
	var t string
	var sigs [][]byte
	for _, kv := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		switch k {
		case "t":
			t = v
		case "v1":
			if s, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, s)
			}
		}
	}
	at, err := strconv.ParseInt(t, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: header %q has no timestamp or no v1 signature", ErrBadSignature, header)
	}
	want := mac(secret, t, payload)
	ok := false
	for _, s := range sigs {
		ok = ok || hmac.Equal(s, want)
	}
	if !ok {
		return ErrBadSignature
	}
	if age := now.Sub(time.Unix(at, 0)); age > tolerance {
		return fmt.Errorf("%w: signed %s ago, tolerance %s", ErrStale, age.Round(time.Second), tolerance)
	}
	return nil
}

// VerifyNotification is Verify for a provider that signs Stripe's way and
// sends Stripe-shaped events (the test provider): VerifySignature, then
// ParseEvent.
func VerifyNotification(payload []byte, header, secret string, tolerance time.Duration, now time.Time) (Event, error) {
	if err := VerifySignature(payload, header, secret, tolerance, now); err != nil {
		return Event{}, err
	}
	return ParseEvent(payload)
}

// StripeTypes maps the Stripe event types the shop acts on to its own.
var StripeTypes = map[string]EventType{
	"payment_intent.succeeded":      PaymentSucceeded,
	"payment_intent.payment_failed": PaymentFailed,
	"payment_intent.canceled":       PaymentCanceled,
}

// StripeEvent is the part of a Stripe event the shop reads: the envelope and
// the PaymentIntent it carries. The test provider sends events of this shape.
type StripeEvent struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "event"
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object StripeIntent `json:"object"`
	} `json:"data"`
}

// StripeIntent is the part of a Stripe PaymentIntent an event carries.
type StripeIntent struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"` // "payment_intent"
	Amount   int64             `json:"amount"`
	Currency string            `json:"currency"` // lower case, Stripe's way
	Status   string            `json:"status"`
	Metadata map[string]string `json:"metadata"`
}

// ParseEvent reads a Stripe-shaped event (no signature check).
func ParseEvent(payload []byte) (Event, error) {
	var e StripeEvent
	if err := json.Unmarshal(payload, &e); err != nil || e.ID == "" || e.Type == "" {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	ev := Event{ID: e.ID, Type: Unhandled, ProviderType: e.Type, At: time.Unix(e.Created, 0).UTC()}
	t, ok := StripeTypes[e.Type]
	if !ok {
		return ev, nil
	}
	pi := e.Data.Object
	if pi.ID == "" {
		return Event{}, fmt.Errorf("%w: %s event %s carries no payment", ErrMalformed, e.Type, e.ID)
	}
	ev.Type, ev.PaymentID, ev.OrderID = t, pi.ID, pi.Metadata[MetadataOrderID]
	ev.Amount, ev.Currency = pi.Amount, strings.ToUpper(pi.Currency)
	return ev, nil
}

// MetadataOrderID is the payment metadata key that names its order.
const MetadataOrderID = "order_id"
