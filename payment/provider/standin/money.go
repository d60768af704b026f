package standin

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// ErrClosed: the test card was used on a session that is not open (paid,
// expired, or past its expires_at).
var ErrClosed = errors.New("standin: the checkout session is not open")

// Pay is the test card on the session's page: its PaymentIntent is
// created succeeded with its charge, the session completes paid, and
// checkout.session.completed and payment_intent.succeeded are sent. A
// session paid before is returned as it is; one not open is ErrClosed
// (with it), an unknown one a resource_missing error.
func (s *Server) Pay(id string) (map[string]any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, ok := s.sessions[id]
	if !ok {
		return nil, missing("checkout.session", id, "session")
	}
	now := s.o.Now()
	if cs.Status == "open" && now.Unix() >= cs.ExpiresAt {
		s.expireLocked(cs)
	}
	switch cs.Status {
	case "complete":
		return s.sessionJSON(cs, expand{"payment_intent.latest_charge": true}), nil
	case "expired":
		return s.sessionJSON(cs, nil), ErrClosed
	}
	p := &intent{ID: s.id("pi"), Currency: cs.Currency, Status: "succeeded", Session: cs.ID, Created: now.Unix(),
		Amount: cs.AmountTotal, Metadata: meta(cs.IntentMetadata)}
	c := &charge{ID: s.id("ch"), Currency: cs.Currency, PaymentIntent: p.ID, Created: now.Unix(), Amount: p.Amount, Metadata: meta(p.Metadata)}
	p.LatestCharge = c.ID
	cs.Status, cs.PaymentStatus, cs.PaymentIntent = "complete", "paid", p.ID
	s.intents[p.ID], s.charges[c.ID] = p, c
	s.order = append(s.order, p.ID, c.ID)
	s.emitLocked("checkout.session.completed", s.sessionJSON(cs, nil))
	s.emitLocked("payment_intent.succeeded", s.intentJSON(p, nil))
	return s.sessionJSON(cs, expand{"payment_intent.latest_charge": true}), nil
}

// createRefund refunds a PaymentIntent's (or a charge's) amount, or what is
// left of it, as the knobs say: failed with a 500 having done nothing,
// pending until looked up, or succeeded.
func (s *Server) createRefund(f url.Values) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.knobs.FailRefunds > 0 {
		s.knobs.FailRefunds--
		return nil, &apiError{Status: http.StatusInternalServerError, Type: "api_error",
			Message: "An unknown error occurred (the stand-in's FailRefunds knob): nothing was refunded."}
	}
	for k := range f {
		if top, _, _ := strings.Cut(k, "["); !slices.Contains([]string{"payment_intent", "charge", "amount", "reason", "metadata", "expand"}, top) {
			return nil, invalid("parameter_unknown", k, "Received unknown parameter: %s", k)
		}
	}
	c, err := s.chargeOf(f)
	if err != nil {
		return nil, err
	}
	left := c.Amount - c.AmountRefunded
	for _, r := range s.refunds {
		if r.Charge == c.ID && r.Status == "pending" {
			left -= r.Amount
		}
	}
	amount := left
	if v := f.Get("amount"); v != "" {
		if amount, err = strconv.ParseInt(v, 10, 64); err != nil || amount < 1 {
			return nil, invalid("parameter_invalid_integer", "amount", "Invalid positive integer: %s", v)
		}
	}
	switch {
	case left <= 0:
		return nil, invalid("charge_already_refunded", "", "Charge %s has already been refunded.", c.ID)
	case amount > left:
		return nil, invalid("amount_too_large", "amount", "Refund amount (%d) is greater than unrefunded amount on charge (%d)", amount, left)
	}
	r := &refund{ID: s.id("re"), Currency: c.Currency, Charge: c.ID, PaymentIntent: c.PaymentIntent, Status: "succeeded",
		Created: s.o.Now().Unix(), Amount: amount, Metadata: map[string]string{}}
	for k, v := range f {
		if name, ok := strings.CutPrefix(k, "metadata["); ok {
			r.Metadata[strings.TrimSuffix(name, "]")] = v[0]
		}
	}
	switch {
	case s.knobs.PendingRefunds > 0:
		s.knobs.PendingRefunds--
		r.Status, r.settle = "pending", "succeed"
	case s.knobs.FailingRefunds > 0:
		s.knobs.FailingRefunds--
		r.Status, r.settle = "pending", "fail"
	default:
		c.AmountRefunded += amount
	}
	s.refunds[r.ID] = r
	s.order = append(s.order, r.ID)
	s.emitLocked("refund.created", s.refundJSON(r))
	if r.Status == "succeeded" {
		s.emitLocked("charge.refunded", s.chargeJSON(c))
	}
	return s.refundJSON(r), nil
}

// chargeOf is the charge a refund is of: its payment_intent's (which must
// have succeeded) or its charge.
func (s *Server) chargeOf(f url.Values) (*charge, error) {
	if id := f.Get("charge"); id != "" {
		c, ok := s.charges[id]
		if !ok {
			return nil, missing("charge", id, "charge")
		}
		return c, nil
	}
	id := f.Get("payment_intent")
	if id == "" {
		return nil, invalid("parameter_missing", "payment_intent", "One of the following params should be provided for this request: payment_intent or charge.")
	}
	p, ok := s.intents[id]
	if !ok {
		return nil, missing("payment_intent", id, "payment_intent")
	}
	c, ok := s.charges[p.LatestCharge]
	if !ok || p.Status != "succeeded" {
		return nil, invalid("", "payment_intent", "This PaymentIntent (%s) does not have a successful charge to refund.", id)
	}
	return c, nil
}

// lookupRefund answers a refund; a pending one settles here (the knobs
// PendingRefunds and FailingRefunds), with refund.updated (and
// charge.refunded when it succeeded).
func (s *Server) lookupRefund(id string) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.refunds[id]
	if !ok {
		return nil, missing("refund", id, "refund")
	}
	if r.Status == "pending" && r.settle != "" {
		c := s.charges[r.Charge]
		if r.settle == "fail" {
			r.Status, r.FailureReason = "failed", "expired_or_canceled_card"
		} else {
			r.Status = "succeeded"
			c.AmountRefunded += r.Amount
		}
		r.settle = ""
		s.emitLocked("refund.updated", s.refundJSON(r))
		if r.Status == "succeeded" {
			s.emitLocked("charge.refunded", s.chargeJSON(c))
		}
	}
	return s.refundJSON(r), nil
}

// listRefunds lists refunds (of a payment_intent or a charge), newest
// first, a page of limit (default 10, at most 100) after starting_after.
func (s *Server) listRefunds(f url.Values) (any, error) {
	var items []map[string]any
	for _, id := range slices.Backward(s.order) {
		r, ok := s.refunds[id]
		if ok && (f.Get("payment_intent") == "" || r.PaymentIntent == f.Get("payment_intent")) &&
			(f.Get("charge") == "" || r.Charge == f.Get("charge")) {
			items = append(items, s.refundJSON(r))
		}
	}
	return page("/v1/refunds", items, f)
}

// listCharges lists charges (of a payment_intent) as listRefunds does.
func (s *Server) listCharges(f url.Values) (any, error) {
	var items []map[string]any
	for _, id := range slices.Backward(s.order) {
		c, ok := s.charges[id]
		if ok && (f.Get("payment_intent") == "" || c.PaymentIntent == f.Get("payment_intent")) {
			items = append(items, s.chargeJSON(c))
		}
	}
	return page("/v1/charges", items, f)
}

// page is a Stripe list of items: limit of them after starting_after.
func page(path string, items []map[string]any, f url.Values) (any, error) {
	limit := 10
	if v := f.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return nil, invalid("parameter_invalid_integer", "limit", "Invalid integer: %s (1 to 100)", v)
		}
		limit = n
	}
	if after := f.Get("starting_after"); after != "" {
		i := slices.IndexFunc(items, func(m map[string]any) bool { return m["id"] == after })
		items = items[i+1:] // not found (-1): from the start
	}
	more := len(items) > limit
	if more {
		items = items[:limit]
	}
	if items == nil {
		items = []map[string]any{}
	}
	return map[string]any{"object": "list", "url": path, "has_more": more, "data": items}, nil
}
