// Package provider is the seam between the shop and a payment provider: the
// one small interface the door and the saga ask for money through (issue 29),
// its typed errors, the typed notification it reads, and the rules every
// implementation shares. Guard puts every outgoing call behind one rate
// limiter and retries what a provider asks to be retried; the notification
// signature is Stripe's (Stripe-Signature: t=…,v1=…), so one verifier serves
// Stripe (stripepay) and the built-in test provider (testpay).
//
// Amounts are integer minor units (999 is 9.99 EUR); currencies are ISO 4217
// codes in upper case.
package provider

import (
	"context"
	"errors"
	"time"
)

// Provider is a payment provider as the door and the saga see it. Every
// write is idempotent, and says how: Create by the order id, Refund by the
// caller's key; Cancel and Lookup change nothing twice.
type Provider interface {
	// Create opens a payment for an order. The order id is the idempotency
	// key (and in the payment's metadata): a second Create for the order
	// returns the first's payment.
	Create(ctx context.Context, r Request) (Payment, error)
	// Cancel closes a payment that has not succeeded, so that it never can.
	// ErrAlreadySucceeded (with the payment) when it has: the payment wins.
	// A canceled payment is returned as it is.
	Cancel(ctx context.Context, paymentID string) (Payment, error)
	// Refund gives a succeeded payment's whole amount back. key is the
	// idempotency key: a second Refund with it returns the first's refund.
	Refund(ctx context.Context, paymentID, key string) (Refund, error)
	// Lookup fetches the payment's current state from the provider: where
	// order matters, this is the truth, not the order notifications came in.
	Lookup(ctx context.Context, paymentID string) (Payment, error)
	// LookupRefund fetches a refund's current state: a refund created
	// pending is confirmed (or failed) here, never by asking for it again
	// (the same idempotency key answers the first answer, pending, for a day).
	LookupRefund(ctx context.Context, refundID string) (Refund, error)
	// Record reads the provider's own ledger of a payment: what it captured
	// and refunded (the books are checked against it, not our copies).
	Record(ctx context.Context, paymentID string) (Record, error)
	// Verify checks a notification's signature (the Stripe-Signature header)
	// and its timestamp's age, and reads it. ErrBadSignature, ErrStale or
	// ErrMalformed when it must not be believed; an event of a type the shop
	// does not handle is returned as Unhandled, no error.
	Verify(payload []byte, signature string) (Event, error)
}

// Request is a payment to open for an order.
type Request struct {
	OrderID  string `json:"order_id"`
	Amount   int64  `json:"amount"`   // minor units
	Currency string `json:"currency"` // ISO 4217, upper case
	// PayBy is the order's payment deadline. The test provider closes the
	// payment then; a Stripe Checkout Session can only expire 30 min to 24 h
	// after its creation (ExpiresAt), so the saga's close at pay_by expires
	// it through the API (Cancel). PayBy is in the payment's metadata.
	PayBy time.Time `json:"pay_by"`
	// ReturnURL is where the provider's checkout page sends the buyer back
	// to (paid or not): the order's page.
	ReturnURL string `json:"return_url"`
	// Name is what the buyer pays for, shown on the checkout page (the
	// item's name); empty: the order id.
	Name string `json:"name,omitempty"`
	// IdempotencyKey keys the create at the provider; empty: the order id.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// ExpiresAt is when the provider's checkout closes by itself, as sent;
	// zero: the provider derives it from PayBy (stripepay.SessionExpiry).
	// A create replayed under the same key must send the same value.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// A hosted checkout's life bounds at the provider (Stripe Checkout: a
// session expires 30 min to 24 h after its creation).
const (
	MinSessionLife = 30 * time.Minute
	MaxSessionLife = 24 * time.Hour
	sessionMargin  = time.Minute
)

// SessionExpiry is the expires_at a checkout for a payment due by payBy is
// created with at now: pay_by + 31 min, inside the provider's bounds for any
// checkout before pay_by (a window of up to 23 h 29 min), and the same value
// for every create of one order, so a create replayed under the same
// idempotency key sends the same parameters (Stripe refuses a key reused
// with others: idempotency_error). A longer wait to pay_by is capped at
// now + 23 h 59 min. The provider's own expiry is only a backstop: the
// saga's close cancels the payment at pay_by through the API.
func SessionExpiry(payBy, now time.Time) time.Time {
	e := payBy.Add(MinSessionLife + sessionMargin)
	if hi := now.Add(MaxSessionLife - sessionMargin); e.After(hi) {
		e = hi
	}
	if lo := now.Add(MinSessionLife + sessionMargin); e.Before(lo) {
		e = lo
	}
	return e.Truncate(time.Second)
}

// Key is the request's idempotency key: IdempotencyKey, else the order id.
func (r Request) Key() string {
	if r.IdempotencyKey != "" {
		return r.IdempotencyKey
	}
	return r.OrderID
}

// Status is a payment's state at the provider.
type Status string

const (
	Pending   Status = "pending"   // open: it may still succeed
	Succeeded Status = "succeeded" // the money is taken
	Canceled  Status = "canceled"  // closed: it can never succeed
)

// Payment is a payment as the provider holds it.
type Payment struct {
	ID       string `json:"id"`
	OrderID  string `json:"order_id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   Status `json:"status"`
	// CheckoutURL is the provider's hosted page where the buyer pays (a
	// Stripe Checkout Session's url, the test provider's page).
	CheckoutURL string `json:"checkout_url,omitempty"`
	// PaymentIntentID is Stripe's PaymentIntent of a Checkout Session (ID),
	// once Stripe names it (when the buyer pays); the money moves on it,
	// refunds are made of it. Empty when ID is the PaymentIntent itself.
	PaymentIntentID string `json:"payment_intent_id,omitempty"`
	// SucceededAt is when the provider says the payment succeeded (zero when
	// it has not, or the provider does not say): a success a cancel finds is
	// judged against pay_by by it.
	SucceededAt time.Time `json:"succeeded_at,omitzero"`
}

// RefundStatus is a refund's state at the provider.
type RefundStatus string

const (
	RefundPending   RefundStatus = "pending"
	RefundSucceeded RefundStatus = "succeeded"
	RefundFailed    RefundStatus = "failed"
)

// Refund is a refund as the provider holds it.
type Refund struct {
	ID        string       `json:"id"`
	PaymentID string       `json:"payment_id"`
	Amount    int64        `json:"amount"`
	Currency  string       `json:"currency"`
	Status    RefundStatus `json:"status"`
}

// Record is a payment as the provider's own ledger holds it, in minor
// units of Currency: the money captured (charges), refunded (refunds it
// confirmed), refunds pending or failed there, and disputed.
type Record struct {
	PaymentID      string `json:"payment_id"`
	Currency       string `json:"currency"`
	Captured       int64  `json:"captured"`
	Refunded       int64  `json:"refunded"`
	RefundsPending int64  `json:"refunds_pending"`
	RefundsFailed  int64  `json:"refunds_failed"`
	Disputed       int64  `json:"disputed"`
}

// AddRefund counts a refund of the payment in r, by its state.
func (r *Record) AddRefund(f Refund) {
	switch f.Status {
	case RefundSucceeded:
		r.Refunded += f.Amount
	case RefundFailed:
		r.RefundsFailed += f.Amount
	default:
		r.RefundsPending += f.Amount
	}
}

// EventType is what a notification says happened, in the shop's words.
type EventType string

const (
	PaymentSucceeded EventType = "payment_succeeded"
	PaymentFailed    EventType = "payment_failed" // an attempt failed; the payment stays open
	PaymentCanceled  EventType = "payment_canceled"
	// Unhandled: a type the shop does not act on. Answer it 2xx, so the
	// provider stops resending it, and count it.
	Unhandled EventType = "unhandled"
)

// Event is a verified notification. ID is the provider's event id: a
// provider sends an event at least once and may resend it for days, so the
// door drops a repeated ID.
type Event struct {
	ID           string
	Type         EventType
	ProviderType string // the provider's own name of the type (payment_intent.succeeded)
	// PaymentID is the payment the shop holds (a Checkout Session's id) or,
	// for an event about a PaymentIntent, the PaymentIntent's id: then
	// PaymentIntentID is set too, and the door finds the shop's payment by
	// OrderID (a Checkout Session's PaymentIntent carries its order id).
	PaymentID       string
	PaymentIntentID string
	OrderID         string // from the payment's metadata
	Amount          int64
	Currency        string
	// At is when the provider says it happened (the event's creation): a
	// success is judged against pay_by by it, not by when it arrived.
	At time.Time
}

var (
	// ErrBadSignature: the notification's signature is missing, malformed or
	// not made with the signing secret. Answer 400; write nothing.
	ErrBadSignature = errors.New("payment provider: bad notification signature")
	// ErrStale: a well-signed notification whose timestamp is older than the
	// tolerance (a replay). Answer 400; write nothing.
	ErrStale = errors.New("payment provider: notification timestamp outside the tolerance")
	// ErrMalformed: a well-signed notification that cannot be read.
	ErrMalformed = errors.New("payment provider: malformed notification")
	// ErrNotFound: the provider does not know the payment.
	ErrNotFound = errors.New("payment provider: no such payment")
	// ErrAlreadySucceeded: a cancel came too late, the payment succeeded.
	ErrAlreadySucceeded = errors.New("payment provider: payment already succeeded")
	// ErrRateLimited: the provider answered 429. Retried by Guard.
	ErrRateLimited = errors.New("payment provider: rate limited")
	// ErrUnavailable: a timeout, a connection error or a 5xx: the call may
	// or may not have happened. Retried by Guard with the same key.
	ErrUnavailable = errors.New("payment provider: unavailable")
)
