package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/api/support"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
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
	ps := newPaySlice(t, "")
	ctx := context.Background()
	it, m := ps.pending(1, 15*time.Minute, 7401)
	c := ps.checkout(m)
	if _, err := ps.tp.Pay(ctx, c.PaymentID); err != nil {
		t.Fatal(err)
	}
	ps.waitStatus(m.OrderID, order.StatusPaid, 30*time.Second)
	ps.waitWorkflowClosed(m.OrderID, 2*time.Minute)
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
	ps.waitWorkflowID(wid, 3*time.Minute)
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
	ps.wantClean(it.ID, []invariant.Accepted{{OrderID: m.OrderID, UserID: m.UserID}, {OrderID: next.OrderID, UserID: next.UserID}})
}

// Two PAID orders of a sold-out sale are refunded through the route while
// 64 buyers keep trying to buy: the two units come back once each, exactly
// two buyers get them, and the sale's invariants are clean.
func TestSupportRefundDuringStampede(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t, "")
	ctx := context.Background()
	it, first := ps.pending(3, 15*time.Minute, 7501)
	held := []order.Message{first, ps.buy(it.ID, 7502), ps.buy(it.ID, 7503)}
	for _, m := range held[1:] {
		ps.waitStatus(m.OrderID, order.StatusPendingPayment, 30*time.Second)
	}
	var pids []string
	for _, m := range held[:2] {
		c := ps.checkout(m)
		if _, err := ps.tp.Pay(ctx, c.PaymentID); err != nil {
			t.Fatal(err)
		}
		ps.waitStatus(m.OrderID, order.StatusPaid, 30*time.Second)
		ps.waitWorkflowClosed(m.OrderID, 2*time.Minute)
		pids = append(pids, c.PaymentID)
	}

	const buyers = 64
	bctx, stop := context.WithTimeout(ctx, 5*time.Minute)
	defer stop()
	var (
		mu      sync.Mutex
		won     []order.Message
		refused atomic.Int64
		wg      sync.WaitGroup
	)
	running := make(chan struct{})
	var once sync.Once
	for i := range buyers {
		wg.Go(func() {
			for bctx.Err() == nil {
				m, err := ps.reserve(it.ID, int64(8000+i))
				if err == nil {
					mu.Lock()
					won = append(won, m)
					mu.Unlock()
					return
				}
				if !errors.Is(err, stock.ErrSoldOut) {
					t.Errorf("buyer %d: %v", i, err)
					return
				}
				if refused.Add(1) == buyers {
					once.Do(func() { close(running) })
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	<-running // every buyer was refused at least about once: the stampede runs
	h := ps.supportRoutes()
	var rw sync.WaitGroup
	for _, m := range held[:2] {
		rw.Go(func() {
			for range 2 { // a double click
				if st, ans := refund(t, h, m.OrderID, "stampede"); st != http.StatusAccepted && st != http.StatusOK {
					t.Errorf("refund %s: %d %+v", m.OrderID, st, ans)
				}
			}
		})
	}
	rw.Wait()
	for _, pid := range pids {
		ps.waitWorkflowID(workflows.RefundWorkflowID(pid), 3*time.Minute)
	}
	for { // the two units are bought back; the buyers keep trying meanwhile
		mu.Lock()
		n := len(won)
		mu.Unlock()
		if n >= 2 || bctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the stampede goes on a little past the second sale
	stop()
	wg.Wait()
	if len(won) != 2 {
		t.Fatalf("%d buyers got a unit back, want 2", len(won))
	}
	ps.wantLeft(it.ID, 0)
	for _, m := range won {
		if err := ps.producer.PublishOrder(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range won {
		ps.waitStatus(m.OrderID, order.StatusPendingPayment, 30*time.Second)
	}
	ps.wantStock(it.ID, 0)
	for _, m := range held[:2] {
		if rs := ps.refunds(m.OrderID); len(rs) != 1 || rs[0].Status != store.RefundSucceeded {
			t.Fatalf("refunds of %s: %+v", m.OrderID, rs)
		}
	}
	var acc []invariant.Accepted
	for _, m := range append(held, won...) {
		acc = append(acc, invariant.Accepted{OrderID: m.OrderID, UserID: m.UserID})
	}
	ps.wantClean(it.ID, acc)
}

// wantClean fails the test unless the sale's invariants hold (sagas included)
// once Temporal's visibility has caught up.
func (ps *paySlice) wantClean(itemID int64, acc []invariant.Accepted) {
	ps.t.Helper()
	deps := invariant.Deps{Store: ps.st, Stock: ps.stk,
		Workflows: snapshot.TemporalLister{Client: ps.tc, Namespace: ps.cfg.Temporal.Namespace}}
	var rep invariant.Report
	for range 10 { // visibility catches up with the sagas
		var err error
		if rep, err = invariant.Check(context.Background(), deps, invariant.Input{ItemID: itemID, Accepted: acc, AcceptedComplete: true}); err != nil {
			ps.t.Fatal(err)
		}
		if rep.OK() {
			return
		}
		time.Sleep(time.Second)
	}
	ps.t.Fatalf("invariants: %v", rep.Violations)
}
