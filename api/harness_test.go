package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/redis/go-redis/v9"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

var testSecret = []byte("test-secret")

// harness is one API server on the real Redis and a private MySQL database.
type harness struct {
	t     testing.TB
	srv   *api.Server
	ts    *httptest.Server
	db    *store.Store
	stk   *stock.Store
	views *orderstatus.Board
	ob    *outbox.Stream
	rdb   redis.UniversalClient
	cfg   config.API
	admin string
}

type harnessOpt func(*config.API, *api.Deps, *api.Options)

// testAPIConfig is config.API with limits that stay out of the way.
func testAPIConfig(t testing.TB) config.API {
	c := testenv.Config(t).API
	c.GlobalRPS, c.GlobalBurst = 1e6, 1e6
	c.BuyerRPS, c.BuyerBurst = 1000, 1000
	c.IPRPS, c.IPBurst = 1e6, 1e6
	c.ItemRefresh = 200 * time.Millisecond
	c.EventsPoll = 500 * time.Millisecond
	return c
}

func newHarness(t testing.TB, opts ...harnessOpt) *harness {
	t.Helper()
	db, _ := testenv.MySQL(t)
	rdb, prefix := testenv.Redis(t)
	stk := stock.New(rdb, prefix)
	views := orderstatus.New(rdb, prefix)
	cfg := testAPIConfig(t)
	deps := api.Deps{
		Items: db, Orders: db, Units: stk, Views: views, Tokens: auth.NewVerifier(testSecret),
		Metrics: api.NewMetrics(prometheus.NewRegistry()), Log: testenv.Logger(t),
	}
	var o api.Options
	for _, opt := range opts {
		opt(&cfg, &deps, &o)
	}
	srv := api.New(cfg, deps, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	ts := httptest.NewUnstartedServer(srv.Engine())
	ts.Config = srv.HTTPServer()
	ts.Config.Handler = srv.Engine()
	ts.Start()
	t.Cleanup(func() {
		ts.Close()
		cancel()
		<-done
	})
	h := &harness{t: t, srv: srv, ts: ts, db: db, stk: stk, views: views, ob: outbox.New(rdb, prefix), rdb: rdb, cfg: cfg}
	h.admin = h.token(1, auth.RoleAdmin)
	return h
}

func (h *harness) token(user int64, role auth.Role) string {
	h.t.Helper()
	tok, err := auth.Sign(testSecret, user, role, time.Hour, time.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	return tok
}

func (h *harness) buyer(user int64) string { return h.token(user, auth.RoleBuyer) }

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
	return m
}

// errCode returns error.code of an error body ("" if none).
func (r response) errCode() string {
	var b struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			OrderID string `json:"order_id"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.body, &b)
	return b.Error.Code
}

func (h *harness) do(method, path, token string, body any) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, h.ts.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	checkOpenAPI(h.t, req, res.StatusCode, res.Header, b)
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// expect checks the status and, for errors, the JSON error code.
func expect(t testing.TB, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if code != "" && r.errCode() != code {
		t.Fatalf("error code %q, want %q; body %s", r.errCode(), code, r.body)
	}
}

// newItem creates an item through the API and returns its id.
func (h *harness) newItem(units int64, start, end time.Time) int64 {
	h.t.Helper()
	r := h.do("POST", "/api/v1/items", h.admin, map[string]any{
		"name": "item", "price_cents": 100, "stock_total": units,
		"start_at": start.Format(time.RFC3339Nano), "end_at": end.Format(time.RFC3339Nano),
	})
	expect(h.t, r, http.StatusCreated, "")
	return int64(r.json(h.t)["id"].(float64))
}

// activeItem is an item on sale now.
func (h *harness) activeItem(units int64) int64 {
	return h.newItem(units, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
}
