package controls_test

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
)

// Early payment over HTTP on a `seckill api` process with no worker at all:
// no saga ever runs, so every order stays QUEUED and whatever the door
// answers it answers without one. Pay and cancel of a QUEUED order are
// answered at once, 200 PAID (settling) and 200 CANCELLED, GET shows the
// door's decision, and the 202 carries pay_by.
func TestEarlyPayOverHTTP(t *testing.T) {
	ctx, s, bin := deployment(t)
	it := s.Sale(ctx, t, "early pay", 10, 15*time.Minute)
	env := s.Env("SECKILL_JWT_SECRET=" + secret)
	logs := filepath.Join(t.TempDir(), "api.log")
	on := startAPI(t, bin, logs, "early-pay", env).api

	buy := func(user int64) apiclient.OrderID {
		a, err := on.PurchaseWithResponse(ctx, it.ID, as(t, user, auth.RoleBuyer))
		if err := apiclient.Want(a, err, http.StatusAccepted); err != nil {
			t.Fatal(err)
		}
		if a.JSON202.OrderID == "" || a.JSON202.PayBy.IsZero() {
			t.Fatalf("purchase: %s %s, want 202 with order_id and pay_by", a.Status(), a.Body)
		}
		return a.JSON202.OrderID
	}
	settling := func(v *apiclient.Order) bool { return v.Settling != nil && *v.Settling }
	buyer := func(user int64) apiclient.RequestEditorFn { return as(t, user, auth.RoleBuyer) }

	// A QUEUED order is paid or cancelled at once.
	paid := buy(1)
	pay, err := on.PayOrderWithResponse(ctx, paid, buyer(1))
	if answered(t, err); pay.JSON200 == nil || pay.JSON200.Status != apiclient.OrderStatusPAID || !settling(pay.JSON200) {
		t.Fatalf("pay of a QUEUED order: %s %s, want 200 PAID settling", pay.Status(), pay.Body)
	}
	got, err := on.GetOrderWithResponse(ctx, paid, buyer(1))
	if answered(t, err); got.JSON200 == nil || got.JSON200.Status != apiclient.OrderStatusPAID || !settling(got.JSON200) {
		t.Fatalf("GET after the pay: %s %s, want PAID settling", got.Status(), got.Body)
	}
	cancelled := buy(2)
	cancel, err := on.CancelOrderWithResponse(ctx, cancelled, buyer(2))
	if answered(t, err); cancel.JSON200 == nil ||
		cancel.JSON200.Status != apiclient.OrderStatusCANCELLED || cancel.JSON200.Reason != order.ReasonBuyerCancelled {
		t.Fatalf("cancel of a QUEUED order: %s %s, want 200 CANCELLED", cancel.Status(), cancel.Body)
	}
	pay, err = on.PayOrderWithResponse(ctx, cancelled, buyer(2))
	if answered(t, err); code(pay.JSON409) != apiclient.ErrorObjectCodeORDERNOTPAYABLE {
		t.Fatalf("pay after the cancel: %s %s, want 409 ORDER_NOT_PAYABLE", pay.Status(), pay.Body)
	}
	pay, err = on.PayOrderWithResponse(ctx, order.NewID(), buyer(3))
	if answered(t, err); code(pay.JSON404) != apiclient.ErrorObjectCodeORDERNOTFOUND {
		t.Fatalf("pay of an unknown order: %s %s, want 404 ORDER_NOT_FOUND", pay.Status(), pay.Body)
	}
}
