package standin

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/seckill/seckill/payment/provider"
)

// Handler serves everything: the API (/v1/, behind the key, the rate
// limit and idempotency), the hosted checkout pages (/pay/, public, as
// Stripe's), the admin API (/_standin/, behind the key) and /healthz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/", s.guard(s.api()))
	mux.Handle("/_standin/", s.admin())
	mux.HandleFunc("GET /pay/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		cs, ok := s.sessions[r.PathValue("id")]
		var v pageView
		if ok {
			if cs.Status == "open" && s.o.Now().Unix() >= cs.ExpiresAt {
				s.expireLocked(cs)
			}
			v = viewOf(cs)
		}
		s.mu.Unlock()
		s.page(w, v, ok, http.StatusOK)
	})
	mux.HandleFunc("POST /pay/{id}", func(w http.ResponseWriter, r *http.Request) {
		_, err := s.Pay(r.PathValue("id"))
		s.mu.Lock()
		cs, ok := s.sessions[r.PathValue("id")]
		var v pageView
		if ok {
			v = viewOf(cs)
		}
		s.mu.Unlock()
		switch {
		case err == nil && v.SuccessURL != "":
			http.Redirect(w, r, strings.ReplaceAll(v.SuccessURL, "{CHECKOUT_SESSION_ID}", v.ID), http.StatusSeeOther)
		case err == nil:
			s.page(w, v, ok, http.StatusOK)
		default:
			s.page(w, v, ok, http.StatusConflict)
		}
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}

// pageView is what the checkout page shows of a session.
type pageView struct {
	ID, Status, Name, Price, OrderID, SuccessURL, CancelURL string
	ExpiresAt                                               time.Time
}

func viewOf(cs *session) pageView {
	name := ""
	if len(cs.Lines) > 0 {
		name = cs.Lines[0].Name
	}
	order := cs.Metadata[provider.MetadataOrderID]
	if order == "" {
		order = cs.ClientReferenceID
	}
	return pageView{ID: cs.ID, Status: cs.Status, Name: name, Price: provider.FormatAmount(cs.AmountTotal, strings.ToUpper(cs.Currency)),
		OrderID: order, SuccessURL: cs.SuccessURL, CancelURL: strings.ReplaceAll(cs.CancelURL, "{CHECKOUT_SESSION_ID}", cs.ID),
		ExpiresAt: time.Unix(cs.ExpiresAt, 0).UTC()}
}

var checkoutPage = template.Must(template.New("checkout").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Checkout (Stripe stand-in)</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: sans-serif; max-width: 30em; margin: 3em auto">
<p>Stripe Checkout, as the development stand-in serves it: no real money moves.</p>
{{- if .Missing}}<h1>No such checkout session</h1>
{{- else if eq .Status "open"}}<h1>Pay {{.Price}} with a test card</h1>
<p>{{.Name}}{{if .OrderID}} (order {{.OrderID}}){{end}}</p>
<p>Card 4242 4242 4242 4242, any future date, any CVC. This page expires at {{.ExpiresAt.Format "15:04:05 UTC"}}.</p>
<form method="post" action="/pay/{{.ID}}"><button type="submit" id="pay">Pay {{.Price}}</button></form>
{{- if .CancelURL}}<p><a id="cancel" href="{{.CancelURL}}">Cancel and go back to the shop</a></p>{{end}}
{{- else if eq .Status "complete"}}<h1>Paid {{.Price}}</h1><p>{{.Name}}{{if .OrderID}} (order {{.OrderID}}){{end}}: you can close this page.</p>
{{- else}}<h1>This checkout session has expired</h1><p>{{if .OrderID}}Order {{.OrderID}}: {{end}}its time to pay ran out, or the shop closed it.</p>
{{- end}}
</body></html>
`))

func (s *Server) page(w http.ResponseWriter, v pageView, found bool, status int) {
	if !found {
		status = http.StatusNotFound
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = checkoutPage.Execute(w, struct {
		pageView
		Missing bool
	}{v, !found})
}

// admin is the stand-in's own API, for tests and the bench (the key, as
// the API's; no rate limit):
//
//	GET, PUT /_standin/knobs           Knobs (durations as "1.5s") → the knobs now
//	POST /_standin/sessions/{id}/pay   the test card, as the page's button → the session
//	                                   (its PaymentIntent and charge expanded); 409 closed
//	GET  /_standin/calls               the API calls answered, oldest first (?path= a prefix)
func (s *Server) admin() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_standin/knobs", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Knobs()) })
	mux.HandleFunc("PUT /_standin/knobs", func(w http.ResponseWriter, r *http.Request) {
		var k Knobs
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&k); err != nil {
			writeError(w, invalid("", "", "knobs: %v", err))
			return
		}
		s.SetKnobs(k)
		writeJSON(w, http.StatusOK, s.Knobs())
	})
	mux.HandleFunc("POST /_standin/sessions/{id}/pay", func(w http.ResponseWriter, r *http.Request) {
		v, err := s.Pay(r.PathValue("id"))
		if errors.Is(err, ErrClosed) {
			writeJSON(w, http.StatusConflict, map[string]any{"error": map[string]any{"type": "invalid_request_error",
				"code": "checkout_session_closed", "message": fmt.Sprintf("checkout session %s is %v: it cannot be paid", r.PathValue("id"), v["status"])},
				"checkout_session": v})
			return
		}
		answer(w)(v, err)
	})
	mux.HandleFunc("GET /_standin/calls", func(w http.ResponseWriter, r *http.Request) {
		prefix := r.URL.Query().Get("path")
		s.mu.Lock()
		out := []Call{}
		for _, c := range s.calls {
			if strings.HasPrefix(c.Path, prefix) {
				out = append(out, c)
			}
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			writeError(w, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Message: "Invalid API Key provided"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// knobsJSON is Knobs on the wire: durations as Go duration strings ("1.5s").
type knobsJSON struct {
	Delay          string  `json:"delay"`
	Duplicate      float64 `json:"duplicate"`
	Reorder        float64 `json:"reorder"`
	ReorderBy      string  `json:"reorder_by"`
	Drop           float64 `json:"drop"`
	FailRefunds    int     `json:"fail_refunds"`
	PendingRefunds int     `json:"pending_refunds"`
	FailingRefunds int     `json:"failing_refunds"`
}

func (k Knobs) MarshalJSON() ([]byte, error) {
	return json.Marshal(knobsJSON{Delay: k.Delay.String(), Duplicate: k.Duplicate, Reorder: k.Reorder, ReorderBy: k.ReorderBy.String(),
		Drop: k.Drop, FailRefunds: k.FailRefunds, PendingRefunds: k.PendingRefunds, FailingRefunds: k.FailingRefunds})
}

func (k *Knobs) UnmarshalJSON(b []byte) error {
	var j knobsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	dur := func(s string) (time.Duration, error) {
		if s == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(s)
		if err == nil && d < 0 {
			err = fmt.Errorf("negative duration %q", s)
		}
		return d, err
	}
	delay, err1 := dur(j.Delay)
	by, err2 := dur(j.ReorderBy)
	*k = Knobs{Delay: delay, Duplicate: j.Duplicate, Reorder: j.Reorder, ReorderBy: by, Drop: j.Drop,
		FailRefunds: j.FailRefunds, PendingRefunds: j.PendingRefunds, FailingRefunds: j.FailingRefunds}
	return errors.Join(err1, err2)
}
