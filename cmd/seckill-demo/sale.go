package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
)

// options are the demo's flags; Secret signs its tokens.
type options struct {
	API, BuyAPI string
	Within      time.Duration
	Secret      []byte
}

// The demo's people: admin 1 creates the item; buyers 1001, 1003 and 1004
// buy, 1003 pays at once and 1001's order is left for the reader to pay.
// Buyer 1002 is the storefront's (scripts/run signs it in there).
const (
	admin   = 1
	payer   = 1003
	leftFor = 1001
)

var buyers = []int64{leftFor, payer, 1004}

// demo is what the sale left: the item and the order still to pay.
type demo struct {
	ItemID int64
	ToPay  string
}

type item struct {
	ID                    int64     `json:"id,omitempty"` // the API's
	Name                  string    `json:"name"`
	PriceCents            int64     `json:"price_cents"`
	StockTotal            int64     `json:"stock_total"`
	StartAt               time.Time `json:"start_at"`
	EndAt                 time.Time `json:"end_at"`
	PaymentTimeoutSeconds int       `json:"payment_timeout_seconds"`
}

// sale runs the demo sale and tells w what it did.
func sale(ctx context.Context, o options, w io.Writer) (demo, error) {
	if o.BuyAPI == "" {
		o.BuyAPI = o.API
	}
	c := client{secret: o.Secret, http: &http.Client{Timeout: 30 * time.Second}}
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(w, "[demo] "+format+"\n", args...) } // words only

	now := time.Now().UTC().Truncate(time.Second)
	it := item{Name: "Demo phone", PriceCents: 99900, StockTotal: 100, StartAt: now.Add(-time.Second), EndAt: now.Add(2 * time.Hour),
		PaymentTimeoutSeconds: 900}
	if err := c.do(ctx, "POST", o.API+"/api/v1/items", admin, auth.RoleAdmin, it, &it); err != nil {
		return demo{}, fmt.Errorf("create the demo item: %w", err)
	}
	say("admin %d put item %d on sale on %s: %q, %d units at %.2f, until %s, %d s to pay after each purchase",
		admin, it.ID, o.API, it.Name, it.StockTotal, float64(it.PriceCents)/100, it.EndAt.Format(time.RFC3339), it.PaymentTimeoutSeconds)

	orders := make(map[int64]order.View, len(buyers))
	for _, b := range buyers {
		var v order.View
		if err := c.do(ctx, "POST", fmt.Sprintf("%s/api/v1/seckill/%d", o.BuyAPI, it.ID), b, auth.RoleBuyer, nil, &v); err != nil {
			return demo{}, fmt.Errorf("buyer %d's purchase: %w", b, err)
		}
		orders[b] = v
		say("buyer %d bought one unit on %s: order %s, %s, payable until %s", b, o.BuyAPI, v.OrderID, v.Status, when(v.PayBy))
	}

	paid := orders[payer].OrderID
	var v order.View
	if err := c.do(ctx, "POST", o.BuyAPI+"/api/v1/orders/"+paid+"/pay", payer, auth.RoleBuyer, nil, &v); err != nil {
		return demo{}, fmt.Errorf("buyer %d's pay: %w", payer, err)
	}
	settling := ""
	if v.Settling {
		settling = " (settling: its saga has not taken the unit yet)"
	}
	say("buyer %d paid order %s at once: %s%s", payer, paid, v.Status, settling)

	// Follow every order until its saga has it: the paid one settled PAID,
	// the others PENDING_PAYMENT.
	deadline := time.Now().Add(o.Within)
	for _, b := range buyers {
		want := order.StatusPendingPayment
		if b == payer {
			want = order.StatusPaid
		}
		v, err := c.follow(ctx, o.API, orders[b].OrderID, b, want, deadline)
		if err != nil {
			return demo{}, fmt.Errorf("order %s of buyer %d: %w (is the worker running?)", orders[b].OrderID, b, err)
		}
		if b == payer {
			say("order %s of buyer %d is %s: its saga took the unit from the stock row", v.OrderID, b, v.Status)
		} else {
			say("order %s of buyer %d is %s: its saga took the unit and waits for the pay until %s", v.OrderID, b, v.Status, when(v.PayBy))
		}
	}
	return demo{ItemID: it.ID, ToPay: orders[leftFor].OrderID}, nil
}

func when(t *time.Time) string {
	if t == nil {
		return "(no deadline)"
	}
	return t.UTC().Format(time.RFC3339)
}

// follow reads the order until it is want (a PAID one settled), another
// final status (an error), or the deadline passes.
func (c client) follow(ctx context.Context, api, orderID string, buyer int64, want order.Status, deadline time.Time) (order.View, error) {
	for {
		var v order.View
		err := c.do(ctx, "GET", api+"/api/v1/orders/"+orderID, buyer, auth.RoleBuyer, nil, &v)
		switch {
		case err != nil:
			return v, err
		case v.Status == want && !v.Settling:
			return v, nil
		case v.Status.Final() && v.Status != want:
			return v, fmt.Errorf("%s (%s), want %s", v.Status, v.Reason, want)
		case time.Now().After(deadline):
			return v, fmt.Errorf("still %s, want %s", v.Status, want)
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// client calls the API as a user, with a token it signs for each call.
type client struct {
	secret []byte
	http   *http.Client
}

// do sends body (nil: none) as JSON and decodes a 2xx answer into out; any
// other answer is an error that quotes it.
func (c client) do(ctx context.Context, method, url string, user int64, role auth.Role, body, out any) error {
	tok, err := auth.Sign(c.secret, user, role, time.Hour, time.Now())
	if err != nil {
		return err
	}
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, url, res.Status, bytes.TrimSpace(b))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return errors.Join(fmt.Errorf("%s %s: the answer is not the JSON expected: %s", method, url, b), err)
	}
	return nil
}
