package standin

import (
	"maps"
	"strings"
)

// The objects the stand-in holds, as Stripe names them. Times are Unix
// seconds, amounts minor units, currencies lower case (Stripe's way).

type session struct {
	ID, Currency, Status, PaymentStatus      string // status: open, complete, expired; payment_status: unpaid, paid
	Created, ExpiresAt, AmountTotal          int64
	ClientReferenceID, SuccessURL, CancelURL string
	Metadata, IntentMetadata                 map[string]string // the session's, and payment_intent_data's for its PaymentIntent
	Lines                                    []line
	PaymentMethodTypes                       []string
	AllowPromotionCodes, AdaptivePricing     bool
	PaymentIntent                            string // created when the buyer pays
}

// line is a line item from price_data.
type line struct {
	Name       string
	UnitAmount int64
	Quantity   int64
}

type intent struct {
	ID, Currency, Status, LatestCharge, Session string // status: succeeded, canceled
	Created, Amount, CanceledAt                 int64
	Metadata                                    map[string]string
}

type charge struct {
	ID, Currency, PaymentIntent     string
	Created, Amount, AmountRefunded int64
	Metadata                        map[string]string
}

type refund struct {
	ID, Currency, Charge, PaymentIntent, Status, FailureReason string // status: pending, succeeded, failed
	Created, Amount                                            int64
	Metadata                                                   map[string]string
	// settle is what the first lookup of a pending refund does (the
	// knobs): "succeed" or "fail".
	settle string
}

// expand is the set of expansions a request asked for (expand[]=a.b).
type expand map[string]bool

// has reports whether field is expanded (itself or a field below it).
func (e expand) has(field string) bool {
	for p := range e {
		if p == field || strings.HasPrefix(p, field+".") {
			return true
		}
	}
	return false
}

// below is the expansions under field.
func (e expand) below(field string) expand {
	out := expand{}
	for p := range e {
		if rest, ok := strings.CutPrefix(p, field+"."); ok {
			out[rest] = true
		}
	}
	return out
}

// nullable is s, or JSON null when empty (Stripe's way for unset strings).
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func meta(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

// sessionJSON is cs on the wire; its PaymentIntent an id, or the object
// when expanded.
func (s *Server) sessionJSON(cs *session, e expand) map[string]any {
	var pi any = nullable(cs.PaymentIntent)
	if p, ok := s.intents[cs.PaymentIntent]; ok && e.has("payment_intent") {
		pi = s.intentJSON(p, e.below("payment_intent"))
	}
	var url any
	if cs.Status == "open" {
		url = s.o.BaseURL + "/pay/" + cs.ID // Stripe: only while the session is open
	}
	return map[string]any{
		"id": cs.ID, "object": "checkout.session", "livemode": false, "mode": "payment", "ui_mode": "hosted",
		"adaptive_pricing": map[string]any{"enabled": cs.AdaptivePricing}, "allow_promotion_codes": cs.AllowPromotionCodes,
		"amount_subtotal": cs.AmountTotal, "amount_total": cs.AmountTotal, "currency": cs.Currency,
		"cancel_url": nullable(cs.CancelURL), "success_url": nullable(cs.SuccessURL), "client_reference_id": nullable(cs.ClientReferenceID),
		"created": cs.Created, "expires_at": cs.ExpiresAt, "metadata": meta(cs.Metadata),
		"payment_intent": pi, "payment_method_types": cs.PaymentMethodTypes, "payment_status": cs.PaymentStatus,
		"status": cs.Status, "url": url, "customer": nil, "customer_details": nil,
		"total_details": map[string]any{"amount_discount": 0, "amount_shipping": 0, "amount_tax": 0},
	}
}

// intentJSON is p on the wire; its latest charge an id, or the object when
// expanded.
func (s *Server) intentJSON(p *intent, e expand) map[string]any {
	var ch any = nullable(p.LatestCharge)
	if c, ok := s.charges[p.LatestCharge]; ok && e.has("latest_charge") {
		ch = s.chargeJSON(c)
	}
	received := int64(0)
	if p.Status == "succeeded" {
		received = p.Amount
	}
	var canceledAt any
	if p.CanceledAt != 0 {
		canceledAt = p.CanceledAt
	}
	return map[string]any{
		"id": p.ID, "object": "payment_intent", "livemode": false, "amount": p.Amount, "amount_capturable": 0,
		"amount_received": received, "currency": p.Currency, "status": p.Status, "created": p.Created,
		"canceled_at": canceledAt, "cancellation_reason": nil, "capture_method": "automatic_async",
		"confirmation_method": "automatic", "client_secret": p.ID + "_secret_standin", "latest_charge": ch,
		"metadata": meta(p.Metadata), "payment_method_types": []string{"card"},
	}
}

func (s *Server) chargeJSON(c *charge) map[string]any {
	return map[string]any{
		"id": c.ID, "object": "charge", "livemode": false, "amount": c.Amount, "amount_captured": c.Amount,
		"amount_refunded": c.AmountRefunded, "refunded": c.AmountRefunded >= c.Amount, "captured": true, "paid": true,
		"status": "succeeded", "currency": c.Currency, "created": c.Created, "payment_intent": c.PaymentIntent,
		"metadata":               meta(c.Metadata),
		"payment_method_details": map[string]any{"type": "card", "card": map[string]any{"brand": "visa", "last4": "4242"}},
	}
}

func (s *Server) refundJSON(r *refund) map[string]any {
	return map[string]any{
		"id": r.ID, "object": "refund", "amount": r.Amount, "currency": r.Currency, "charge": r.Charge,
		"payment_intent": r.PaymentIntent, "status": r.Status, "created": r.Created, "reason": nil,
		"failure_reason": nullable(r.FailureReason), "metadata": meta(r.Metadata),
	}
}
