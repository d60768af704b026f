package api_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seckill/seckill/auth"
)

// fuzzHarness builds one harness per fuzz target: the engine calls the
// target many times in one process, and each call must stay cheap.
func fuzzHarness(f *testing.F) (*harness, int64) {
	h := newHarness(f)
	return h, h.activeItem(1_000_000)
}

// serve runs one request through the handler in memory and fails on 5xx
// (the services are up, so nothing may be UNAVAILABLE or INTERNAL).
func serve(t *testing.T, h *harness, req *http.Request) {
	rec := httptest.NewRecorder()
	h.srv.Engine().ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("%s %s -> %d %s", req.Method, req.URL, rec.Code, rec.Body.Bytes())
	}
	if rec.Code >= 400 && !bytes.HasPrefix(rec.Body.Bytes(), []byte(`{"error":{"code":"`)) {
		t.Fatalf("%s %s -> %d without the error body: %q", req.Method, req.URL, rec.Code, rec.Body.Bytes())
	}
}

func FuzzPurchase(f *testing.F) {
	h, fuzzItem := fuzzHarness(f)
	valid := h.buyer(42)
	f.Add("1", "Bearer "+valid, []byte(nil), uint8(0))
	f.Add("abc", "Bearer "+valid, []byte("{}"), uint8(1))
	f.Add("-1", "", []byte(nil), uint8(2))
	f.Add("99999999999999999999", "Bearer x.y.z", []byte(nil), uint8(3))
	f.Add("0", "bearer "+valid, []byte("x"), uint8(0))
	f.Add("1%2F..%2F", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIiwicm9sZSI6ImJ1eWVyIn0.", []byte(nil), uint8(4))
	f.Add("7", "Basic Zm9vOmJhcg==", []byte(nil), uint8(5))
	f.Fuzz(func(t *testing.T, id, authz string, body []byte, variant uint8) {
		if id == "" {
			id = "1"
		}
		path := "/api/v1/seckill/" + id
		if variant%2 == 1 {
			path = "/api/v1/items/" + id
		}
		method := "POST"
		if variant%2 == 1 && variant%4 == 3 {
			method = "GET"
		}
		req, err := http.NewRequest(method, "http://api"+path, bytes.NewReader(body))
		if err != nil {
			return // not a URL a client could send
		}
		switch variant % 3 {
		case 0:
			req.Header.Set("Authorization", authz)
		case 1:
			req.Header.Set("Authorization", "Bearer "+valid)
			req.Header.Set("X-Forwarded-For", authz)
		case 2:
			// A valid token for a buyer id derived from the input: reaches Reserve.
			tok, _ := auth.Sign(testSecret, int64(len(authz))+1, auth.RoleBuyer, time.Hour, time.Now())
			req.Header.Set("Authorization", "Bearer "+tok)
			if variant%5 == 0 {
				path = "/api/v1/seckill/" + itoa(fuzzItem)
				req.URL.Path = path
			}
		}
		serve(t, h, req)
	})
}

func FuzzCreateItem(f *testing.F) {
	h, _ := fuzzHarness(f)
	buyer := h.buyer(3)
	f.Add([]byte(`{"name":"phone","price_cents":100,"stock_total":5,"start_at":"2030-01-01T00:00:00Z","end_at":"2030-01-02T00:00:00Z"}`), true)
	f.Add([]byte(`{"name":"","price_cents":-1,"stock":0,"start_at":"x","end_at":"2030-01-02T00:00:00+14:00","payment_timeout_seconds":4}`), true)
	f.Add([]byte(`{"name":"\u0000","price_cents":1e400,"stock_total":"5"}`), true)
	f.Add([]byte(`{"name":"x","price_cents":9223372036854775807,"stock_total":10000000,"start_at":"0001-01-01T00:00:00Z","end_at":"9999-12-31T23:59:59Z"}`), true)
	f.Add([]byte(`{"name":"x","price_cents":1,"stock_total":1,"start_at":"9998-12-31T23:59:59-23:59","end_at":"9998-12-31T23:59:59.999999999Z"}`), true)
	f.Add([]byte(`[`), false)
	f.Add([]byte(`{"name":"\xff\xfe","price_cents":1}`), true)
	f.Fuzz(func(t *testing.T, body []byte, admin bool) {
		req, _ := http.NewRequest("POST", "http://api/api/v1/items", bytes.NewReader(body))
		if admin {
			req.Header.Set("Authorization", "Bearer "+h.admin)
		} else {
			req.Header.Set("Authorization", "Bearer "+buyer)
		}
		serve(t, h, req)
	})
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
