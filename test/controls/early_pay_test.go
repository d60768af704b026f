package controls_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

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
	on := startAPI(t, bin, logs, "early-pay", env)

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

	// A QUEUED order is paid or cancelled at once.
	paid := buy(on, 1)
	a := act(on, "pay", 1, paid.OrderID)
	if v := decode(a); a.status != http.StatusOK || v.Status != order.StatusPaid || !v.Settling {
		t.Fatalf("pay of a QUEUED order: %d %s, want 200 PAID settling", a.status, a.body)
	}
	if v := get(on, 1, paid.OrderID); v.Status != order.StatusPaid || !v.Settling {
		t.Fatalf("GET after the pay: %+v, want PAID settling", v)
	}
	cancelled := buy(on, 2)
	a = act(on, "cancel", 2, cancelled.OrderID)
	if v := decode(a); a.status != http.StatusOK || v.Status != order.StatusCancelled || v.Reason != order.ReasonBuyerCancelled {
		t.Fatalf("cancel of a QUEUED order: %d %s, want 200 CANCELLED", a.status, a.body)
	}
	if a := act(on, "pay", 2, cancelled.OrderID); a.status != http.StatusConflict || a.code() != "ORDER_NOT_PAYABLE" {
		t.Fatalf("pay after the cancel: %d %s, want 409 ORDER_NOT_PAYABLE", a.status, a.body)
	}
	if a := act(on, "pay", 3, order.NewID()); a.status != http.StatusNotFound || a.code() != "ORDER_NOT_FOUND" {
		t.Fatalf("pay of an unknown order: %d %s, want 404 ORDER_NOT_FOUND", a.status, a.body)
	}
}
