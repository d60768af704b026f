package testpay

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/seckill/seckill/payment/provider"
)

// The provider's JSON API, served by Handler under /v1 beside the checkout
// pages, so that every process reaches one test provider (Client): each
// route wants "Authorization: Bearer <Secret>" (401 otherwise).
//
//	POST /v1/payments               provider.Request → payment (idempotent by order_id)
//	GET  /v1/payments/{id}          payment; 404 not_found
//	POST /v1/payments/{id}/cancel   payment; 409 already_succeeded (with the payment)
//	POST /v1/payments/{id}/refund   {key} → refund; 503 unavailable (FailRefunds)
//	GET  /v1/refunds/{id}           refund: a pending one settles (PendingRefunds, FailingRefunds)
//	GET  /v1/payments/{id}/record   the provider's own ledger of the payment (captured, refunded, ...)
//	POST /v1/payments/{id}/dashboard-refund  {amount}: a refund made by hand, outside the shop's books
//	POST /v1/payments/{id}/pay      payment: the test card; 409 closed (with the payment)
//	PUT  /v1/knobs, GET /v1/knobs   Knobs → the knobs now
func (p *Provider) api() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) {
		var req provider.Request
		if decode(w, r, &req) {
			reply(w)(p.Create(r.Context(), req))
		}
	})
	mux.HandleFunc("GET /v1/payments/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w)(p.Lookup(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/payments/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		reply(w)(p.Cancel(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/payments/{id}/pay", func(w http.ResponseWriter, r *http.Request) {
		reply(w)(p.Pay(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/payments/{id}/refund", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Key string `json:"key"`
		}
		if decode(w, r, &req) {
			reply(w)(p.Refund(r.Context(), r.PathValue("id"), req.Key))
		}
	})
	mux.HandleFunc("GET /v1/payments/{id}/record", func(w http.ResponseWriter, r *http.Request) {
		reply(w)(p.Record(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/payments/{id}/dashboard-refund", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Amount int64 `json:"amount"`
		}
		if decode(w, r, &req) {
			reply(w)(p.DashboardRefund(r.Context(), r.PathValue("id"), req.Amount))
		}
	})
	mux.HandleFunc("GET /v1/refunds/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w)(p.LookupRefund(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("PUT /v1/knobs", func(w http.ResponseWriter, r *http.Request) {
		var k Knobs
		if decode(w, r, &k) {
			p.SetKnobs(k)
			reply(w)(p.Knobs(), nil)
		}
	})
	mux.HandleFunc("GET /v1/knobs", func(w http.ResponseWriter, _ *http.Request) { reply(w)(p.Knobs(), nil) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if want := "Bearer " + p.o.Secret; p.o.Secret == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
			writeJSON(w, http.StatusUnauthorized, apiError{Error: "unauthorized"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// apiError is the body of every refused call.
type apiError struct {
	Error   string            `json:"error"` // not_found, already_succeeded, closed, unavailable, refused, unauthorized
	Message string            `json:"message,omitempty"`
	Payment *provider.Payment `json:"payment,omitempty"`
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "refused", Message: err.Error()})
		return false
	}
	return true
}

// reply writes v, or the error's code: a provider's typed error keeps its
// meaning across the wire (Client maps it back).
func reply(w http.ResponseWriter) func(any, error) {
	return func(v any, err error) {
		e := apiError{Error: "refused"}
		status := http.StatusBadRequest
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, v)
			return
		case errors.Is(err, provider.ErrNotFound):
			e.Error, status = "not_found", http.StatusNotFound
		case errors.Is(err, provider.ErrAlreadySucceeded):
			e.Error, status = "already_succeeded", http.StatusConflict
		case errors.Is(err, ErrClosed):
			e.Error, status = "closed", http.StatusConflict
		case errors.Is(err, provider.ErrUnavailable):
			e.Error, status = "unavailable", http.StatusServiceUnavailable
		}
		if pay, ok := v.(provider.Payment); ok && status == http.StatusConflict {
			e.Payment = &pay
		}
		e.Message = err.Error()
		writeJSON(w, status, e)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// knobsJSON is Knobs on the wire: durations as Go duration strings ("1.5s").
type knobsJSON struct {
	Delay       string  `json:"delay"`
	Duplicate   float64 `json:"duplicate"`
	Reorder     float64 `json:"reorder"`
	ReorderBy   string  `json:"reorder_by"`
	Drop        float64 `json:"drop"`
	FailRefunds int     `json:"fail_refunds"`
}

func (k Knobs) MarshalJSON() ([]byte, error) {
	return json.Marshal(knobsJSON{Delay: k.Delay.String(), Duplicate: k.Duplicate, Reorder: k.Reorder,
		ReorderBy: k.ReorderBy.String(), Drop: k.Drop, FailRefunds: k.FailRefunds})
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
	*k = Knobs{Delay: delay, Duplicate: j.Duplicate, Reorder: j.Reorder, ReorderBy: by, Drop: j.Drop, FailRefunds: j.FailRefunds}
	return errors.Join(err1, err2)
}
