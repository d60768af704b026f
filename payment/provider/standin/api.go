package standin

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// api is Stripe's API as the stand-in serves it (behind guard).
func (s *Server) api() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/checkout/sessions", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(s.createSession(r.PostForm))
	})
	mux.HandleFunc("GET /v1/checkout/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(s.read(func() (any, error) {
			cs, ok := s.sessions[r.PathValue("id")]
			if !ok {
				return nil, missing("checkout.session", r.PathValue("id"), "session")
			}
			return s.sessionJSON(cs, expansions(r.Form)), nil
		}))
	})
	mux.HandleFunc("POST /v1/checkout/sessions/{id}/expire", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(s.expireSession(r.PathValue("id"), expansions(r.PostForm)))
	})
	mux.HandleFunc("GET /v1/payment_intents/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(s.read(func() (any, error) {
			p, ok := s.intents[r.PathValue("id")]
			if !ok {
				return nil, missing("payment_intent", r.PathValue("id"), "intent")
			}
			return s.intentJSON(p, expansions(r.Form)), nil
		}))
	})
	mux.HandleFunc("POST /v1/payment_intents/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(s.cancelIntent(r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/refunds", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(s.createRefund(r.PostForm))
	})
	mux.HandleFunc("GET /v1/refunds/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(s.lookupRefund(r.PathValue("id")))
	})
	mux.HandleFunc("GET /v1/refunds", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(s.read(func() (any, error) { return s.listRefunds(r.Form) }))
	})
	mux.HandleFunc("GET /v1/charges", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(s.read(func() (any, error) { return s.listCharges(r.Form) }))
	})
	mux.HandleFunc("GET /v1/events/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		body, ok := s.events[r.PathValue("id")]
		s.mu.Unlock()
		if !ok {
			writeError(w, missing("event", r.PathValue("id"), "id"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		e := invalid("", "", "Unrecognized request URL (%s: %s): the stand-in serves the part of Stripe's API the shop uses "+
			"(payment/provider/standin)", r.Method, r.URL.Path)
		e.Status = http.StatusNotFound
		writeError(w, e)
	})
	return mux
}

// read runs fn under the lock.
func (s *Server) read(fn func() (any, error)) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn()
}

var expandKey = regexp.MustCompile(`^expand(\[\d*\])?$`)

// expansions are the expand[] parameters of a request.
func expansions(f url.Values) expand {
	e := expand{}
	for k, vs := range f {
		if expandKey.MatchString(k) {
			for _, v := range vs {
				e[v] = true
			}
		}
	}
	return e
}

// sessionParams are the top-level parameters of a session the stand-in
// takes; Stripe's others are refused as unknown (the shop sends none).
var sessionParams = []string{"mode", "line_items", "payment_method_types", "allow_promotion_codes", "adaptive_pricing",
	"client_reference_id", "metadata", "payment_intent_data", "success_url", "cancel_url", "expires_at", "expand"}

var (
	lineParam = regexp.MustCompile(`^line_items\[(\d+)\]\[(quantity|price_data\]\[(currency|unit_amount|product_data\]\[(name|description)))\]$`)
	mapParam  = regexp.MustCompile(`^(metadata|payment_intent_data\[metadata\])\[([^\]]+)\]$`)
)

// createSession opens a Checkout Session in payment mode from price_data
// line items, checked as Stripe checks them.
func (s *Server) createSession(f url.Values) (any, error) {
	now := s.o.Now()
	cs := &session{Status: "open", PaymentStatus: "unpaid", Created: now.Unix(), ExpiresAt: now.Add(24 * time.Hour).Unix(),
		Metadata: map[string]string{}, IntentMetadata: map[string]string{}, PaymentMethodTypes: []string{"card"},
		ClientReferenceID: f.Get("client_reference_id"), SuccessURL: f.Get("success_url"), CancelURL: f.Get("cancel_url")}
	lines := map[int]*line{}
	for k := range f {
		top, _, _ := strings.Cut(k, "[")
		if !slices.Contains(sessionParams, top) {
			return nil, invalid("parameter_unknown", k, "Received unknown parameter: %s", k)
		}
		if err := s.sessionParam(cs, lines, k, f.Get(k)); err != nil {
			return nil, err
		}
	}
	if m := f.Get("mode"); m != "payment" {
		return nil, invalid("parameter_invalid_empty", "mode", "mode %q: the stand-in opens payment sessions only", m)
	}
	if err := sessionLines(cs, lines); err != nil {
		return nil, err
	}
	cur, err := sessionCurrency(f)
	if err != nil {
		return nil, err
	}
	cs.Currency, cs.PaymentMethodTypes = cur, paymentMethodTypes(f)
	if v := f.Get("expires_at"); v != "" {
		at, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil:
			return nil, invalid("parameter_invalid_integer", "expires_at", "Invalid integer: %s", v)
		case at < now.Add(30*time.Minute).Unix():
			return nil, invalid("", "expires_at", "The `expires_at` timestamp must be at least 30 minutes from Checkout Session creation.")
		case at > now.Add(24*time.Hour).Unix():
			return nil, invalid("", "expires_at", "The `expires_at` timestamp must be less than 24 hours from Checkout Session creation.")
		}
		cs.ExpiresAt = at
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cs.ID = s.id("cs")
	s.sessions[cs.ID] = cs
	s.order = append(s.order, cs.ID)
	return s.sessionJSON(cs, expansions(f)), nil
}

// sessionParam takes one parameter k=v of a session.
func (s *Server) sessionParam(cs *session, lines map[int]*line, k, v string) error {
	switch {
	case k == "payment_method_types" || strings.HasPrefix(k, "payment_method_types["):
		// read in order: paymentMethodTypes
	case k == "allow_promotion_codes":
		cs.AllowPromotionCodes = v == "true"
	case k == "adaptive_pricing[enabled]":
		cs.AdaptivePricing = v == "true"
	case strings.HasPrefix(k, "line_items"):
		m := lineParam.FindStringSubmatch(k)
		if m == nil {
			return invalid("parameter_unknown", k, "Received unknown parameter: %s (the stand-in takes line items with price_data)", k)
		}
		i, _ := strconv.Atoi(m[1])
		if lines[i] == nil {
			lines[i] = &line{}
		}
		return lineParamValue(lines[i], k, m, v)
	case strings.HasPrefix(k, "metadata[") || strings.HasPrefix(k, "payment_intent_data["):
		m := mapParam.FindStringSubmatch(k)
		if m == nil {
			return invalid("parameter_unknown", k, "Received unknown parameter: %s", k)
		}
		if m[1] == "metadata" {
			cs.Metadata[m[2]] = v
		} else {
			cs.IntentMetadata[m[2]] = v
		}
	case k == "adaptive_pricing" || k == "metadata" || k == "payment_intent_data":
		return invalid("parameter_unknown", k, "Received unknown parameter: %s", k)
	}
	return nil
}

func lineParamValue(l *line, k string, m []string, v string) error {
	switch {
	case m[2] == "quantity":
		q, err := strconv.ParseInt(v, 10, 64)
		if err != nil || q < 1 {
			return invalid("parameter_invalid_integer", k, "Invalid positive integer: %s", v)
		}
		l.Quantity = q
	case m[3] == "unit_amount":
		a, err := strconv.ParseInt(v, 10, 64)
		if err != nil || a < 0 {
			return invalid("parameter_invalid_integer", k, "Invalid non-negative integer: %s", v)
		}
		l.UnitAmount = a
	case m[4] == "name":
		l.Name = v
	}
	return nil
}

var currencyCode = regexp.MustCompile(`^[a-z]{3}$`)

// sessionLines checks the lines (each with a name, an amount and a
// quantity, one currency for all) and totals them.
func sessionLines(cs *session, lines map[int]*line) error {
	if len(lines) == 0 {
		return invalid("parameter_missing", "line_items", "Missing required param: line_items.")
	}
	for i := range len(lines) {
		l, ok := lines[i]
		switch {
		case !ok:
			return invalid("parameter_missing", "line_items", "line_items[%d] is missing", i)
		case l.Name == "":
			return invalid("parameter_missing", "line_items["+strconv.Itoa(i)+"][price_data][product_data][name]", "Missing required param: name.")
		case l.Quantity == 0:
			return invalid("parameter_missing", "line_items["+strconv.Itoa(i)+"][quantity]", "Quantity is required.")
		}
		cs.Lines = append(cs.Lines, *l)
		cs.AmountTotal += l.UnitAmount * l.Quantity
	}
	return nil
}

// sessionCurrency reads every line's currency (one for all).
func sessionCurrency(f url.Values) (string, error) {
	cur := ""
	for k, vs := range f {
		if m := lineParam.FindStringSubmatch(k); m != nil && m[3] == "currency" {
			c := vs[0]
			if !currencyCode.MatchString(c) || cur != "" && cur != c {
				return "", invalid("parameter_invalid_empty", k, "Invalid currency: %s (one lower-case ISO code for every line)", c)
			}
			cur = c
		}
	}
	if cur == "" {
		return "", invalid("parameter_missing", "line_items[0][price_data][currency]", "Missing required param: currency.")
	}
	return cur, nil
}

// paymentMethodTypes are the session's, in order.
func paymentMethodTypes(f url.Values) []string {
	var out []string
	for i := 0; ; i++ {
		v := f.Get("payment_method_types[" + strconv.Itoa(i) + "]")
		if v == "" {
			break
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		out = f["payment_method_types[]"]
	}
	if len(out) == 0 {
		return []string{"card"}
	}
	return out
}

// expireSession expires an open session (checkout.session.expired);
// another is refused as Stripe refuses it.
func (s *Server) expireSession(id string, e expand) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, ok := s.sessions[id]
	if !ok {
		return nil, missing("checkout.session", id, "session")
	}
	if cs.Status != "open" {
		return nil, invalid("", "", "Only Checkout Sessions with a status in [\"open\"] can be expired. This session has status %q.", cs.Status)
	}
	s.expireLocked(cs)
	return s.sessionJSON(cs, e), nil
}

func (s *Server) expireLocked(cs *session) {
	cs.Status = "expired"
	s.emitLocked("checkout.session.expired", s.sessionJSON(cs, nil))
}

// cancelIntent: the stand-in's PaymentIntents exist once paid, so none can
// be canceled (payment_intent_unexpected_state, with the intent).
func (s *Server) cancelIntent(id string) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.intents[id]
	if !ok {
		return nil, missing("payment_intent", id, "intent")
	}
	e := invalid("payment_intent_unexpected_state", "", "You cannot cancel this PaymentIntent because it has a status of %s. "+
		"Only a PaymentIntent with one of the following statuses may be canceled: requires_payment_method, requires_capture, "+
		"requires_confirmation, requires_action, processing.", p.Status)
	e.Intent = s.intentJSON(p, nil)
	return nil, e
}
