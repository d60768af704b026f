package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/api/support"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/workflows"
)

// supportRoutes serves api/support on the slice's MySQL and Temporal, every
// caller an admin.
func (ps *paySlice) supportRoutes() http.Handler {
	gin.SetMode(gin.TestMode)
	e := gin.New()
	support.Register(e, support.Deps{Rows: ps.st, Refunds: ps.orders, Temporal: ps.cfg.Temporal,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Auth: func(*gin.Context, auth.Role) (auth.Principal, error) {
			return auth.Principal{UserID: 1, Role: auth.RoleAdmin}, nil
		},
		Fail: func(c *gin.Context, err error) { apierr.Write(c, apierr.To(err)) },
	})
	return e
}

// refund POSTs the order's refund with reason and returns the answer.
func refund(t *testing.T, h http.Handler, orderID, reason string) (int, support.Refund) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"reason": reason})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/api/v1/orders/"+orderID+"/refund", strings.NewReader(string(body))))
	var ans support.Refund
	if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
		t.Fatalf("refund: %d %s", w.Code, w.Body.String())
	}
	return w.Code, ans
}

// Support refunds a PAID order twice through the route: one refund at the
// provider, with the first reason; the order REFUNDED with its refund on
// the published view; its unit back in the stock row and in Redis, where a
// new buyer buys it; the sale's invariants clean.
func TestSupportRefundGivesTheUnitBack(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t)
	ctx := context.Background()
	it, m := ps.pending(1, 15*time.Minute, 7401)
	c := ps.checkout(m)
	if _, err := ps.tp.Pay(ctx, c.PaymentID); err != nil {
		t.Fatal(err)
	}
	ps.waitStatus(m.OrderID, order.StatusPaid, 30*time.Second)
	ps.waitWorkflowClosed(m.OrderID, 30*time.Second)
	ps.wantStock(it.ID, 0)
	ps.wantLeft(it.ID, 0)

	h := ps.supportRoutes()
	wid := workflows.RefundWorkflowID(c.PaymentID)
	if st, ans := refund(t, h, m.OrderID, "damaged in transit"); st != http.StatusAccepted || ans.WorkflowID != wid {
		t.Fatalf("first refund: %d %+v", st, ans)
	}
	if st, ans := refund(t, h, m.OrderID, "clicked twice"); (st != http.StatusAccepted && st != http.StatusOK) || ans.WorkflowID != wid {
		t.Fatalf("second refund: %d %+v", st, ans)
	}
	ps.waitWorkflowID(wid, 60*time.Second)
	row := ps.waitStatus(m.OrderID, order.StatusRefunded, 10*time.Second)
	rs := ps.refunds(m.OrderID)
	if len(rs) != 1 || rs[0].Status != store.RefundSucceeded || rs[0].Reason != "damaged in transit" || rs[0].Amount != 100 ||
		row.Reason != order.ReasonSupportRefund {
		t.Fatalf("refunds %+v, order %+v", rs, row)
	}
	if _, err := ps.tp.Refund(ctx, c.PaymentID, "another-key"); err == nil {
		t.Fatal("the payment could be refunded again: it was not refunded")
	}
	if st, ans := refund(t, h, m.OrderID, "third"); st != http.StatusOK || ans.Status != order.StatusRefunded ||
		ans.RefundID != rs[0].ProviderRefundID || ans.Reason != "damaged in transit" {
		t.Fatalf("after: %d %+v", st, ans)
	}
	v, ok, err := ps.views.Status(ctx, m.OrderID)
	if err != nil || !ok || v.Status != order.StatusRefunded || v.RefundID != rs[0].ProviderRefundID || v.RefundAmount != 100 ||
		v.RefundCurrency != "EUR" || v.RefundedAt == nil {
		t.Fatalf("published view %+v %v %v", v, ok, err)
	}
	ps.wantStock(it.ID, 1)
	ps.wantLeft(it.ID, 1)
	ps.saveWorkflowHistory(wid, "support_refund")

	next := ps.buy(it.ID, 7402) // the unit is on sale again
	ps.waitStatus(next.OrderID, order.StatusPendingPayment, 30*time.Second)
	ps.wantStock(it.ID, 0)
	acc := []invariant.Accepted{{OrderID: m.OrderID, UserID: m.UserID}, {OrderID: next.OrderID, UserID: next.UserID}}
	deps := invariant.Deps{Store: ps.st, Stock: ps.stk,
		Workflows: snapshot.TemporalLister{Client: ps.tc, Namespace: ps.cfg.Temporal.Namespace}}
	var rep invariant.Report
	for range 10 { // visibility catches up with the sagas
		if rep, err = invariant.Check(ctx, deps, invariant.Input{ItemID: it.ID, Accepted: acc, AcceptedComplete: true}); err != nil {
			t.Fatal(err)
		}
		if rep.OK() {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("invariants: %v", rep.Violations)
}
