package standin

import (
	"bytes"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// apiError is Stripe's error answer: {"error": {type, code, message, param}}.
type apiError struct {
	Status  int            `json:"-"`
	Type    string         `json:"type"`
	Code    string         `json:"code,omitempty"`
	Message string         `json:"message"`
	Param   string         `json:"param,omitempty"`
	DocURL  string         `json:"doc_url,omitempty"`
	Intent  map[string]any `json:"payment_intent,omitempty"`
}

func (e *apiError) Error() string { return e.Type + ": " + e.Message }

func invalid(code, param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: code, Param: param,
		Message: fmt.Sprintf(format, args...)}
}

func missing(kind, id, param string) *apiError {
	e := invalid("resource_missing", param, "No such %s: '%s'", kind, id)
	e.Status = http.StatusNotFound
	return e
}

var errRateLimited = &apiError{Status: http.StatusTooManyRequests, Type: "invalid_request_error", Code: "rate_limit",
	DocURL:  "https://stripe.com/docs/error-codes/rate-limit",
	Message: "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits."}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_standin")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.Status, map[string]*apiError{"error": e})
}

// answer writes v, or err as Stripe's error (an *apiError; anything else
// is a 500 api_error).
func answer(w http.ResponseWriter) func(v any, err error) {
	return func(v any, err error) {
		if err == nil {
			writeJSON(w, http.StatusOK, v)
			return
		}
		var e *apiError
		if !errors.As(err, &e) {
			e = &apiError{Status: http.StatusInternalServerError, Type: "api_error", Message: err.Error()}
		}
		writeError(w, e)
	}
}

// authorized reports whether r carries an accepted API key, as Stripe takes
// it: "Authorization: Bearer sk_…" or HTTP Basic with the key as the user.
func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		if raw, isBasic := strings.CutPrefix(h, "Basic "); isBasic {
			b, err := base64.StdEncoding.DecodeString(raw)
			key, _, _ = strings.Cut(string(b), ":")
			ok = err == nil
		}
	}
	if !ok || key == "" {
		return false
	}
	if len(s.o.Keys) == 0 {
		return strings.HasPrefix(key, "sk_test_") && len(key) > len("sk_test_")
	}
	return slices.ContainsFunc(s.o.Keys, func(k string) bool { return subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 })
}

// guard wraps the API: the key, the rate limit (reads and writes each),
// the idempotency key of a POST, and the calls' log.
func (s *Server) guard(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		defer func() { s.logCall(r, rec.status) }()
		if !s.authorized(r) {
			writeError(rec, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error",
				Message: "Invalid API Key provided: the stand-in takes any sk_test_ key, or the ones it was started with"})
			return
		}
		lim := s.writes
		if r.Method == http.MethodGet {
			lim = s.reads
		}
		if !lim.Allow() {
			writeError(rec, errRateLimited)
			return
		}
		if err := r.ParseForm(); err != nil {
			writeError(rec, invalid("", "", "the body could not be read: %v", err))
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if r.Method != http.MethodPost || key == "" {
			api.ServeHTTP(rec, r)
			return
		}
		s.idempotent(rec, r, key, api)
	})
}

// replay is the first answer under an idempotency key.
type replay struct {
	fingerprint string
	done        bool
	status      int
	header      http.Header
	body        []byte
}

// idempotent serves a POST under key: the first request with it runs; a
// later one with the same parameters gets the first's answer again
// (Idempotent-Replayed: true), one with other parameters idempotency_error,
// one while the first runs 409 idempotency_key_in_use. A 5xx or a 429 is
// not kept: a retry runs again (as Stripe).
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, key string, api http.Handler) {
	fp := r.Method + " " + r.URL.Path + "?" + r.PostForm.Encode()
	s.mu.Lock()
	rp, seen := s.idem[key]
	if !seen {
		rp = &replay{fingerprint: fp}
		s.idem[key] = rp
	}
	s.mu.Unlock()
	switch {
	case seen && rp.fingerprint != fp:
		e := invalid("", "", "Keys for idempotent requests can only be used with the same parameters they were first used with. "+
			"Try using a key other than '%s' if you meant to execute a different request.", key)
		e.Type = "idempotency_error"
		writeError(w, e)
		return
	case seen && !rp.done:
		writeError(w, &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "idempotency_key_in_use",
			Message: "There is currently another in-progress request using this Idempotent Key. Please try again later."})
		return
	case seen:
		for k, v := range rp.header {
			w.Header()[k] = v
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(rp.status)
		_, _ = w.Write(rp.body)
		return
	}
	buf := &buffered{header: http.Header{}, status: http.StatusOK}
	api.ServeHTTP(buf, r)
	s.mu.Lock()
	if buf.status >= 500 || buf.status == http.StatusTooManyRequests {
		delete(s.idem, key)
	} else {
		rp.done, rp.status, rp.header, rp.body = true, buf.status, buf.header, buf.body.Bytes()
	}
	s.mu.Unlock()
	for k, v := range buf.header {
		w.Header()[k] = v
	}
	w.Header().Set("Idempotency-Key", key)
	w.WriteHeader(buf.status)
	_, _ = w.Write(buf.body.Bytes())
}

func (s *Server) logCall(r *http.Request, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) >= maxCalls {
		s.calls = s.calls[len(s.calls)/2:]
	}
	s.calls = append(s.calls, Call{Method: r.Method, Path: r.URL.Path, Status: status,
		IdempotencyKey: r.Header.Get("Idempotency-Key"), At: s.o.Now().UTC()})
}

// recorder notes the status written.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// buffered holds an answer until it is kept for replays.
type buffered struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *buffered) Header() http.Header         { return b.header }
func (b *buffered) WriteHeader(code int)        { b.status = code }
func (b *buffered) Write(p []byte) (int, error) { return b.body.Write(p) }
