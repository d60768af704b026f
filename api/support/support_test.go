package support_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/api/support"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/ledger"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// fakeDesk holds orders, payments and refunds; its StartSupportRefund
// records each start and, like the workflow id, starts one refund per payment.
type fakeDesk struct {
	mu       sync.Mutex
	rows     map[string]store.Order
	payments map[string][]store.Payment
	refunds  map[string][]store.Refund
	starts   []string // payment ids started
	running  map[string]bool
}

func (f *fakeDesk) FindOrder(_ context.Context, id string) (store.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.rows[id]
	if !ok {
		return o, fmt.Errorf("order %s: %w", id, order.ErrNotFound)
	}
	return o, nil
}

func (f *fakeDesk) ListUserOrders(_ context.Context, user int64, _ string, _ int) ([]store.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.Order
	for _, o := range f.rows {
		if o.UserID == user {
			out = append(out, o)
		}
	}
	return out, nil
}

func (f *fakeDesk) OrderPayments(_ context.Context, id string) ([]store.Payment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.payments[id], nil
}

func (f *fakeDesk) OrderRefunds(_ context.Context, id string) ([]store.Refund, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refunds[id], nil
}

func (f *fakeDesk) StartSupportRefund(_ context.Context, orderID, paymentID, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts = append(f.starts, paymentID)
	f.running[paymentID] = true
	return nil
}

// OweSupportRefund is store's: the refund row of the payment that paid a
// PAID order, written once (the first ask's reason stays).
func (f *fakeDesk) OweSupportRefund(_ context.Context, orderID, reason, askedBy string) (store.Refund, store.Payment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.rows[orderID]
	switch {
	case !ok:
		return store.Refund{}, store.Payment{}, order.ErrNotFound
	case o.Status != order.StatusPaid && o.Status != order.StatusRefunded:
		return store.Refund{}, store.Payment{}, fmt.Errorf("order is %s: %w", o.Status, order.ErrNotRefundable)
	}
	for _, p := range f.payments[orderID] {
		if !ledger.PaidWith(p.Facts(), o.Facts()) {
			continue
		}
		for _, r := range f.refunds[orderID] {
			if r.PaymentID == p.ID {
				return r, p, nil
			}
		}
		if o.Status != order.StatusPaid {
			break
		}
		r := store.Refund{OrderID: orderID, PaymentID: p.ID, ProviderPaymentID: p.ProviderPaymentID, Status: store.RefundPending,
			Reason: reason, AskedBy: askedBy, Amount: p.Amount, Currency: p.Currency}
		f.refunds[orderID] = append(f.refunds[orderID], r)
		return r, p, nil
	}
	return store.Refund{}, store.Payment{}, fmt.Errorf("no provider payment: %w", order.ErrNotRefundable)
}

// finish is the workflow's end: refund confirmed, order REFUNDED.
func (f *fakeDesk) finish(orderID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.rows[orderID]
	o.Status, o.Reason = order.StatusRefunded, order.ReasonSupportRefund
	f.rows[orderID] = o
	f.refunds[orderID][0].Status, f.refunds[orderID][0].ProviderRefundID = store.RefundSucceeded, "re_1"
}

var (
	paidAt   = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	paidID   = order.NewID()
	doorID   = order.NewID()
	cancelID = order.NewID()
)

func newDesk() *fakeDesk {
	at := paidAt
	f := &fakeDesk{rows: map[string]store.Order{}, payments: map[string][]store.Payment{}, refunds: map[string][]store.Refund{},
		running: map[string]bool{}}
	f.rows[paidID] = store.Order{OrderID: paidID, UserID: 7, ItemID: 1, Status: order.StatusPaid, PaidAt: &at}
	f.payments[paidID] = []store.Payment{{ID: 11, OrderID: paidID, UserID: 7, ItemID: 1, Provider: "testpay", ProviderPaymentID: "pi_1",
		Amount: 999, Currency: "EUR", Status: store.PaymentSucceeded, SucceededAt: &at}}
	f.rows[doorID] = store.Order{OrderID: doorID, UserID: 7, ItemID: 2, Status: order.StatusPaid, PaidAt: &at} // paid at the door
	f.rows[cancelID] = store.Order{OrderID: cancelID, UserID: 8, ItemID: 1, Status: order.StatusCancelled}
	return f
}

// server serves the desk's routes; the token "admin" is an admin, "buyer" a buyer.
func server(f *fakeDesk) http.Handler {
	gin.SetMode(gin.TestMode)
	e := gin.New()
	support.Register(e, support.Deps{Rows: f, Refunds: f, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Temporal: config.Temporal{UIURL: "http://ui.test", Namespace: "default"},
		Auth: func(c *gin.Context, role auth.Role) (auth.Principal, error) {
			switch c.GetHeader("Authorization") {
			case "Bearer admin":
				return auth.Principal{UserID: 1, Role: auth.RoleAdmin}, nil
			case "Bearer buyer":
				if role == auth.RoleAdmin {
					return auth.Principal{}, apierr.ErrForbidden
				}
				return auth.Principal{UserID: 7, Role: auth.RoleBuyer}, nil
			}
			return auth.Principal{}, apierr.ErrUnauthorized
		},
		Fail: func(c *gin.Context, err error) { apierr.Write(c, apierr.To(err)) },
	})
	return e
}

func call(t *testing.T, h http.Handler, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var out map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: %d %q", method, path, w.Code, w.Body.String())
	}
	return w.Code, out
}

func code(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// The reason is required (not blank, at most 255 characters); only an admin
// refunds; an unknown order is 404; an order not PAID, or paid at the door,
// is 409 NOT_REFUNDABLE. Nothing is started for any of them.
func TestRefundRefusals(t *testing.T) {
	f := newDesk()
	h := server(f)
	path := "/api/v1/orders/" + paidID + "/refund"
	for _, c := range []struct {
		name, path, token, body string
		status                  int
		code                    string
	}{
		{"no body", path, "admin", "", 400, "BAD_REQUEST"},
		{"no reason", path, "admin", `{}`, 400, "BAD_REQUEST"},
		{"blank reason", path, "admin", `{"reason": "  "}`, 400, "BAD_REQUEST"},
		{"reason too long", path, "admin", `{"reason": "` + strings.Repeat("é", support.MaxReason+1) + `"}`, 400, "BAD_REQUEST"},
		{"not JSON", path, "admin", `reason=x`, 400, "BAD_REQUEST"},
		{"buyer", path, "buyer", `{"reason": "x"}`, 403, "FORBIDDEN"},
		{"no token", path, "", `{"reason": "x"}`, 401, "UNAUTHORIZED"},
		{"unknown order", "/api/v1/orders/" + order.NewID() + "/refund", "admin", `{"reason": "x"}`, 404, "ORDER_NOT_FOUND"},
		{"not an order id", "/api/v1/orders/nope/refund", "admin", `{"reason": "x"}`, 404, "ORDER_NOT_FOUND"},
		{"cancelled", "/api/v1/orders/" + cancelID + "/refund", "admin", `{"reason": "x"}`, 409, "NOT_REFUNDABLE"},
		{"paid at the door", "/api/v1/orders/" + doorID + "/refund", "admin", `{"reason": "x"}`, 409, "NOT_REFUNDABLE"},
	} {
		if st, out := call(t, h, "POST", c.path, c.token, c.body); st != c.status || code(out) != c.code {
			t.Errorf("%s: %d %v, want %d %s", c.name, st, out, c.status, c.code)
		}
	}
	if len(f.starts) != 0 {
		t.Fatalf("refunds started: %v", f.starts)
	}
}

// A refund answers 202 with its workflow; a repeat while it runs answers the
// same workflow (one refund); once done, 200 REFUNDED with the refund id and
// the first request's reason.
func TestRefundIdempotent(t *testing.T) {
	f := newDesk()
	h := server(f)
	path := "/api/v1/orders/" + paidID + "/refund"
	st, first := call(t, h, "POST", path, "admin", `{"reason": " damaged in transit "}`)
	if st != 202 || first["workflow_id"] != "refund-pi_1" || first["status"] != "PAID" || first["reason"] != "damaged in transit" ||
		first["order_id"] != paidID || !strings.Contains(first["workflow_url"].(string), url("refund-pi_1")) {
		t.Fatalf("first: %d %v", st, first)
	}
	if st, again := call(t, h, "POST", path, "admin", `{"reason": "clicked twice"}`); st != 202 || again["workflow_id"] != "refund-pi_1" ||
		again["reason"] != "damaged in transit" {
		t.Fatalf("repeat: %d %v", st, again)
	}
	f.finish(paidID)
	st, done := call(t, h, "POST", path, "admin", `{"reason": "third"}`)
	if st != 200 || done["status"] != "REFUNDED" || done["refund_id"] != "re_1" || done["workflow_id"] != "refund-pi_1" ||
		done["reason"] != "damaged in transit" {
		t.Fatalf("after: %d %v", st, done)
	}
	if len(f.starts) != 2 || len(f.refunds[paidID]) != 1 {
		t.Fatalf("starts %v, refunds %+v", f.starts, f.refunds[paidID])
	}
}

func url(workflowID string) string { return "WorkflowId%3D%22" + workflowID + "%22" }

// Find by order id or buyer id: each order with its payments, refunds and
// saga link; refundable only when PAID through a provider payment.
func TestFind(t *testing.T) {
	f := newDesk()
	h := server(f)
	st, out := call(t, h, "GET", "/api/v1/admin/orders?order_id="+paidID, "admin", "")
	orders, _ := out["orders"].([]any)
	if st != 200 || len(orders) != 1 {
		t.Fatalf("by order: %d %v", st, out)
	}
	o := orders[0].(map[string]any)
	pays := o["payments"].([]any)
	if o["saga_id"] != "order-"+paidID || !strings.Contains(o["saga_url"].(string), url("order-"+paidID)) || o["refundable"] != true ||
		len(pays) != 1 || pays[0].(map[string]any)["provider_payment_id"] != "pi_1" || pays[0].(map[string]any)["amount"] != 999.0 {
		t.Fatalf("order: %v", o)
	}
	if st, out := call(t, h, "GET", "/api/v1/admin/orders?buyer_id=7", "admin", ""); st != 200 || len(out["orders"].([]any)) != 2 {
		t.Fatalf("by buyer: %d %v", st, out)
	}
	for _, q := range []string{"order_id=" + order.NewID(), "order_id=nope", "buyer_id=99"} {
		if st, out := call(t, h, "GET", "/api/v1/admin/orders?"+q, "admin", ""); st != 200 || len(out["orders"].([]any)) != 0 {
			t.Fatalf("%s: %d %v", q, st, out)
		}
	}
	for _, q := range []string{"", "?buyer_id=x", "?order_id=" + paidID + "&buyer_id=7"} {
		if st, out := call(t, h, "GET", "/api/v1/admin/orders"+q, "admin", ""); st != 400 {
			t.Fatalf("%q: %d %v", q, st, out)
		}
	}
	if st, _ := call(t, h, "GET", "/api/v1/admin/orders?buyer_id=7", "buyer", ""); st != 403 {
		t.Fatalf("buyer: %d", st)
	}
	f.rows[paidID] = store.Order{OrderID: paidID, UserID: 7, Status: order.StatusRefunded, PaidAt: &paidAt}
	f.refunds[paidID] = []store.Refund{{PaymentID: 11, ProviderRefundID: "re_1", Status: store.RefundSucceeded, Amount: 999, Currency: "EUR"}}
	_, out = call(t, h, "GET", "/api/v1/admin/orders?order_id="+paidID, "admin", "")
	o = out["orders"].([]any)[0].(map[string]any)
	if v := o["order"].(map[string]any); o["refundable"] != false || v["refund_id"] != "re_1" || v["refund_amount"] != 999.0 ||
		o["refund_workflow_id"] != "refund-pi_1" {
		t.Fatalf("refunded: %v", o)
	}
}
