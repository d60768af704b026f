package api_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/payment"
)

// SECKILL_API_TRUSTED_PROXIES="a, b" trusts b too: the client address of a
// request from b comes from X-Forwarded-For (b used to be dropped silently,
// and the peer address counted).
func TestUnitTrustedProxiesFromEnv(t *testing.T) {
	loaded, err := config.LoadFrom(map[string]string{"SECKILL_API_TRUSTED_PROXIES": "10.0.0.0/8, 127.0.0.1/32, ::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	h := newUnitHarness(t, func(c *config.API, _ *api.Deps) {
		c.IPRPS, c.IPBurst, c.TrustedProxies = 0.01, 1, loaded.API.TrustedProxies
	})
	h.checkForwardedBuckets(t, h.onSale(1))
}

// A purchase whose outcome Redis leaves unknown is answered within the
// server's write timeout, whatever SECKILL_API_CONFIRM_TIMEOUT says and however
// long the reservation waited for its batch: a 503 the buyer reads, never a
// connection the server drops because the answer came too late.
func TestUnitPurchaseAnsweredWithinWriteTimeout(t *testing.T) {
	h := newUnitHarness(t, func(c *config.API, _ *api.Deps) {
		c.WriteTimeout, c.ConfirmTimeout = 2*time.Second, 10*time.Second
	})
	item := h.onSale(3)
	path := fmt.Sprintf("/api/v1/seckill/%d", item)
	client := h.ts.Client()
	client.Timeout = time.Minute // only so a hung handler fails the test instead of hanging it
	post := func(buyer int64) response {
		req, _ := http.NewRequest("POST", h.ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+h.buyer(buyer))
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("buyer %d: no answer: %v", buyer, err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return response{status: res.StatusCode, header: res.Header, body: body}
	}
	// The script's reply was lost and the mark stays unreadable: the confirm
	// window is cut to what the write deadline leaves.
	h.units.reserveErr, h.units.markFails = errDown, -1
	r := post(1)
	expectErr(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
	if !strings.Contains(string(r.body), "not known") {
		t.Fatalf("body %s, want the outcome-unknown answer", r.body)
	}
	// The reservation itself never comes back (its batch is stuck): it is
	// given up in time for the answer.
	h.units.reserveErr = nil
	h.units.mu.Lock()
	h.units.stall = true
	h.units.mu.Unlock()
	r = post(2)
	expectErr(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
}

// A pay or cancel the desk could not record in time is 503 saying so: the
// buyer learns that its payment's fate is not known yet, not that "nothing
// was reserved".
func TestUnitPayNotRecordedInTime(t *testing.T) {
	h := newUnitHarness(t)
	item := h.onSale(1)
	v := h.pendingOrder(item, 5, time.Minute)
	h.inject(failActions, fmt.Errorf("pay: %w: %w", payment.ErrNotRecorded, context.DeadlineExceeded))
	for _, action := range []string{"pay", "cancel"} {
		r := h.do("POST", "/api/v1/orders/"+v.OrderID+"/"+action, h.buyer(5), nil)
		expectErr(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
		if strings.Contains(string(r.body), "reserved") || !strings.Contains(string(r.body), "not known") {
			t.Fatalf("%s: body %s", action, r.body)
		}
	}
}

// redisErr is a reply error of Redis, as go-redis returns it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// A backing service that is back in a moment (a restarted Redis loading its
// data, a failover, a MySQL connection broken mid-query) is 503, not 500.
func TestUnitTransientFailuresAre503(t *testing.T) {
	h := newUnitHarness(t)
	item := h.onSale(1)
	v := h.pendingOrder(item, 5, time.Minute)
	for _, err := range []error{
		redisErr("LOADING Redis is loading the dataset in memory"),
		redisErr("MASTERDOWN Link with MASTER is down"),
		mysql.ErrInvalidConn,
		driver.ErrBadConn,
	} {
		h.inject(failActions, fmt.Errorf("read status of order %s: %w", v.OrderID, err))
		r := h.do("POST", "/api/v1/orders/"+v.OrderID+"/cancel", h.buyer(5), nil)
		expectErr(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
	}
	h.inject(failActions, errors.New("a bug"))
	expectErr(t, h.do("POST", "/api/v1/orders/"+v.OrderID+"/cancel", h.buyer(5), nil), http.StatusInternalServerError, "INTERNAL")
}

// collects counts the registry's renderings: each exports the count so far.
type collects struct{ n atomic.Int64 }

var collectsDesc = prometheus.NewDesc("test_collects_total", "Renderings of the registry.", nil, nil)

func (c *collects) Describe(ch chan<- *prometheus.Desc) { ch <- collectsDesc }
func (c *collects) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(collectsDesc, prometheus.CounterValue, float64(c.n.Add(1)))
}

// A flood of scrapes on the public listener, from the scraper's own address
// even, makes no scrape fail (one limiter shared by every client let anyone
// starve Prometheus, and every local client shares its loopback address),
// and costs at most one rendering of the registry a second.
func TestUnitPublicMetricsServeEveryScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	var c collects
	reg.MustRegister(&c)
	h := newUnitHarness(t, func(cfg *config.API, d *api.Deps) {
		cfg.IPRPS, cfg.IPBurst = 1, 2 // a tight per-IP limit, which other routes still meet
		d.Metrics = api.NewMetrics(reg)
	})
	start := time.Now()
	for i := range 200 {
		r := h.do("GET", "/metrics", "", nil)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), "test_collects_total") {
			t.Fatalf("scrape %d: %d %.200s", i, r.status, r.body)
		}
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Fatalf("scrape %d: Content-Type %q", i, ct)
		}
	}
	if n, most := c.n.Load(), 1+int64(time.Since(start)/time.Second); n > most {
		t.Fatalf("200 scrapes in %s rendered the registry %d times, want at most %d", time.Since(start), n, most)
	}
	for range 2 { // the same address's burst on a limited route
		h.do("GET", "/api/v1/time", "", nil)
	}
	expectErr(t, h.do("GET", "/api/v1/time", "", nil), http.StatusTooManyRequests, "RATE_LIMITED")
	if r := h.do("GET", "/metrics", "", nil); r.status != http.StatusOK {
		t.Fatalf("scrape with the address's limit spent: %d", r.status)
	}
	// A later scrape gets a fresh rendering.
	before := c.n.Load()
	for deadline := time.Now().Add(5 * time.Second); c.n.Load() == before; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no fresh rendering 5 s later")
		}
		if r := h.do("GET", "/metrics", "", nil); r.status != http.StatusOK {
			t.Fatalf("scrape: %d", r.status)
		}
	}
}

// With SECKILL_API_METRICS_ADDR, /metrics is served by its own server (for
// that listener only) and the public listener does not know the route.
func TestUnitMetricsOnTheirOwnListener(t *testing.T) {
	h := newUnitHarness(t, func(c *config.API, _ *api.Deps) { c.MetricsAddr = "127.0.0.1:0" })
	expectErr(t, h.do("GET", "/metrics", "", nil), http.StatusNotFound, "NOT_FOUND")
	ms := h.srv.MetricsServer()
	if ms == nil || ms.Addr != "127.0.0.1:0" {
		t.Fatalf("metrics server %+v", ms)
	}
	ts := httptest.NewServer(ms.Handler)
	defer ts.Close()
	for range 50 { // Prometheus' own scrapes are not limited
		res, err := ts.Client().Get(ts.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "seckill_http_requests_total") {
			t.Fatalf("metrics listener: %d %.200s", res.StatusCode, body)
		}
	}
	if newUnitHarness(t).srv.MetricsServer() != nil {
		t.Fatal("a metrics server without SECKILL_API_METRICS_ADDR")
	}
}
