package controls_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// The rolling-upgrade switch SECKILL_API_EARLY_PAY (docs/deploy.md), over
// HTTP on two `seckill api` processes of one deployment, one with it on and
// one with it off, and no worker at all: no saga ever runs, so every order
// stays QUEUED and whatever the door answers it answers without one.
//   - on: pay and cancel of a QUEUED order are answered at once, 200 PAID
//     (settling) and 200 CANCELLED, and GET shows the door's decision;
//   - off: the behaviour before early payment — a QUEUED order is not
//     payable (409 ORDER_NOT_PAYABLE, nothing written), a PENDING_PAYMENT one
//     is paid as before; the 202 carries pay_by either way.
func TestEarlyPaySwitch(t *testing.T) {
	ctx, s, bin := deployment(t)
	db := s.Store
	it := s.Sale(ctx, t, "early pay", 10, 15*time.Minute)
	env := s.Env("SECKILL_JWT_SECRET=" + secret)
	logs := filepath.Join(t.TempDir(), "api.log")
	on := startAPI(t, bin, logs, "early-pay-on", append(env, "SECKILL_API_EARLY_PAY=true"))
	off := startAPI(t, bin, logs, "early-pay-off", append(env, "SECKILL_API_EARLY_PAY=false"))

	type view struct {
		OrderID  string       `json:"order_id"`
		Status   order.Status `json:"status"`
		Settling bool         `json:"settling"`
		Reason   string       `json:"reason"`
		PayBy    *time.Time   `json:"pay_by"`
	}
	decode := func(a answer) view {
		var v view
		if err := json.Unmarshal(a.body, &v); err != nil {
			t.Fatalf("body %s: %v", a.body, err)
		}
		return v
	}
	buy := func(in instance, user int64) view {
		a := call(t, "POST", fmt.Sprintf("%s/api/v1/seckill/%d", in.url, it.ID), user, auth.RoleBuyer, "")
		v := decode(a)
		if a.status != http.StatusAccepted || v.OrderID == "" || v.PayBy == nil {
			t.Fatalf("purchase on %s: %d %s, want 202 with order_id and pay_by", in.url, a.status, a.body)
		}
		return v
	}
	act := func(in instance, verb string, user int64, id string) answer {
		return call(t, "POST", in.url+"/api/v1/orders/"+id+"/"+verb, user, auth.RoleBuyer, "")
	}
	get := func(in instance, user int64, id string) view {
		a := call(t, "GET", in.url+"/api/v1/orders/"+id, user, auth.RoleBuyer, "")
		if a.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", id, a.status, a.body)
		}
		return decode(a)
	}

	// On: a QUEUED order is paid or cancelled at once.
	paid := buy(on, 1)
	a := act(on, "pay", 1, paid.OrderID)
	if v := decode(a); a.status != http.StatusOK || v.Status != order.StatusPaid || !v.Settling {
		t.Fatalf("pay of a QUEUED order with early pay on: %d %s, want 200 PAID settling", a.status, a.body)
	}
	if v := get(on, 1, paid.OrderID); v.Status != order.StatusPaid || !v.Settling {
		t.Fatalf("GET after the pay: %+v, want PAID settling", v)
	}
	cancelled := buy(on, 2)
	a = act(on, "cancel", 2, cancelled.OrderID)
	if v := decode(a); a.status != http.StatusOK || v.Status != order.StatusCancelled || v.Reason != order.ReasonBuyerCancelled {
		t.Fatalf("cancel of a QUEUED order with early pay on: %d %s, want 200 CANCELLED", a.status, a.body)
	}
	if a := act(on, "pay", 2, cancelled.OrderID); a.status != http.StatusConflict || a.code() != "ORDER_NOT_PAYABLE" {
		t.Fatalf("pay after the cancel: %d %s, want 409 ORDER_NOT_PAYABLE", a.status, a.body)
	}
	if a := act(on, "pay", 3, order.NewID()); a.status != http.StatusNotFound || a.code() != "ORDER_NOT_FOUND" {
		t.Fatalf("pay of an unknown order: %d %s, want 404 ORDER_NOT_FOUND", a.status, a.body)
	}

	// Off: a QUEUED order is not payable and the door writes nothing.
	queued := buy(off, 4)
	for _, verb := range []string{"pay", "cancel"} {
		if a := act(off, verb, 4, queued.OrderID); a.status != http.StatusConflict || a.code() != "ORDER_NOT_PAYABLE" {
			t.Fatalf("%s of a QUEUED order with early pay off: %d %s, want 409 ORDER_NOT_PAYABLE", verb, a.status, a.body)
		}
	}
	if v := get(off, 4, queued.OrderID); v.Status != order.StatusQueued {
		t.Fatalf("GET after the refused pay: %+v, want QUEUED", v)
	}
	if _, err := db.FindOrder(ctx, queued.OrderID); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("the refused pay wrote an order row (or the read failed): %v", err)
	}
	// ... and a PENDING_PAYMENT order is paid as before (its saga's forward
	// steps played on the database).
	pending := buy(off, 5)
	if _, err := db.CreateQueuedOrder(ctx, store.Order{OrderID: pending.OrderID, UserID: 5, ItemID: it.ID}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.DeductStock(ctx, pending.OrderID, it.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	a = act(off, "pay", 5, pending.OrderID)
	if v := decode(a); a.status != http.StatusOK || v.Status != order.StatusPaid || v.Settling {
		t.Fatalf("pay of a PENDING_PAYMENT order with early pay off: %d %s, want 200 PAID", a.status, a.body)
	}
	// The switch is the door's: the order the off instance refused is
	// payable through the instance that has it on.
	if a := act(on, "pay", 4, queued.OrderID); a.status != http.StatusOK {
		t.Fatalf("pay on the early-pay instance of the order the other refused: %d %s", a.status, a.body)
	}
}
