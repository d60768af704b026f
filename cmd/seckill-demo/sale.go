package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/seckill/seckill/apiclient"
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

// demo is what the sale left: the item and the order still to pay, and
// that order's checkout page when the API pays through a provider.
type demo struct {
	ItemID      int64
	ToPay       string
	CheckoutURL string
}

// sale runs the demo sale and tells w what it did.
func sale(ctx context.Context, o options, w io.Writer) (demo, error) {
	if o.BuyAPI == "" {
		o.BuyAPI = o.API
	}
	c, err := newClient(o)
	if err != nil {
		return demo{}, err
	}
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(w, "[demo] "+format+"\n", args...) } // words only

	now := time.Now().UTC().Truncate(time.Second)
	window := 900
	created, err := c.api.CreateItemWithResponse(ctx, apiclient.CreateItem{Name: "Demo phone", PriceCents: 99900, StockTotal: 100,
		StartAt: now.Add(-time.Second), EndAt: now.Add(2 * time.Hour), PaymentTimeoutSeconds: &window}, c.as(admin, auth.RoleAdmin))
	if err := apiclient.Want(created, err, http.StatusCreated); err != nil {
		return demo{}, fmt.Errorf("create the demo item: %w", err)
	}
	it := created.JSON201
	say("admin %d put item %d on sale on %s: %q, %d units at %.2f, until %s, %d s to pay after each purchase",
		admin, it.ID, o.API, it.Name, it.StockTotal, float64(it.PriceCents)/100, it.EndAt.Format(time.RFC3339), it.PaymentTimeoutSeconds)

	orders := make(map[int64]apiclient.OrderID, len(buyers))
	for _, b := range buyers {
		res, err := c.buy.PurchaseWithResponse(ctx, it.ID, c.as(b, auth.RoleBuyer))
		if err := apiclient.Want(res, err, http.StatusAccepted); err != nil {
			return demo{}, fmt.Errorf("buyer %d's purchase: %w", b, err)
		}
		v := res.JSON202
		orders[b] = v.OrderID
		say("buyer %d bought one unit on %s: order %s, %s, payable until %s", b, o.BuyAPI, v.OrderID, v.Status, when(&v.PayBy))
	}

	paid := orders[payer]
	page, err := c.checkout(ctx, paid, payer)
	switch {
	case err != nil:
		return demo{}, err
	case page != "":
		say("buyer %d checked out order %s: the provider's checkout page is %s", payer, paid, page)
		if err := c.payOnPage(ctx, page); err != nil {
			return demo{}, fmt.Errorf("buyer %d's pay on %s: %w", payer, page, err)
		}
		say("buyer %d paid order %s on that page with the test card: the provider's notification pays it", payer, paid)
	default:
		res, err := c.buy.PayOrderWithResponse(ctx, paid, c.as(payer, auth.RoleBuyer))
		if err := apiclient.Want(res, err, http.StatusOK); err != nil {
			return demo{}, fmt.Errorf("buyer %d's pay: %w", payer, err)
		}
		settling := ""
		if v := res.JSON200; v.Settling != nil && *v.Settling {
			settling = " (settling: its saga has not taken the unit yet)"
		}
		say("buyer %d paid order %s at once: %s%s", payer, paid, res.JSON200.Status, settling)
	}

	// Follow every order until its saga has it: the paid one settled PAID,
	// the others PENDING_PAYMENT.
	deadline := time.Now().Add(o.Within)
	for _, b := range buyers {
		want := order.StatusPendingPayment
		if b == payer {
			want = order.StatusPaid
		}
		v, err := c.follow(ctx, orders[b], b, want, deadline)
		if err != nil {
			return demo{}, fmt.Errorf("order %s of buyer %d: %w (is the worker running?)", orders[b], b, err)
		}
		if b == payer {
			say("order %s of buyer %d is %s: its saga took the unit from the stock row", v.OrderID, b, v.Status)
		} else {
			say("order %s of buyer %d is %s: its saga took the unit and waits for the pay until %s", v.OrderID, b, v.Status, when(v.PayBy))
		}
	}
	d := demo{ItemID: it.ID, ToPay: orders[leftFor]}
	if page != "" {
		if d.CheckoutURL, err = c.checkout(ctx, d.ToPay, leftFor); err != nil {
			return demo{}, err
		}
		say("buyer %d's order %s is payable on %s", leftFor, d.ToPay, d.CheckoutURL)
	}
	return d, nil
}

// checkout opens the order's payment at the provider and answers its
// checkout page; "" when the API takes payments at the door (404).
func (c client) checkout(ctx context.Context, orderID string, buyer int64) (string, error) {
	res, err := c.buy.CheckoutOrderWithResponse(ctx, orderID, c.as(buyer, auth.RoleBuyer))
	if err == nil && res.StatusCode() == http.StatusNotFound {
		return "", nil
	}
	if err := apiclient.Want(res, err, http.StatusOK); err != nil {
		return "", fmt.Errorf("buyer %d's checkout of order %s: %w", buyer, orderID, err)
	}
	if res.JSON200.CheckoutURL == "" {
		return "", fmt.Errorf("order %s: the provider answered no checkout page (payment %s)", orderID, res.JSON200.PaymentID)
	}
	return res.JSON200.CheckoutURL, nil
}

var formAction = regexp.MustCompile(`<form method="post" action="([^"]+)"`)

// payOnPage pays as a browser would: the checkout page (Stripe Checkout's,
// as the stand-in serves it, or the test provider's), then its form's
// button (the test card). The provider answers by sending the buyer back to
// the shop (a 303, not followed: the demo follows the order itself).
func (c client) payOnPage(ctx context.Context, page string) error {
	body, err := c.fetch(ctx, http.MethodGet, page)
	if err != nil {
		return err
	}
	m := formAction.FindSubmatch(body)
	if m == nil {
		return fmt.Errorf("no pay button on the page: %.200s", body)
	}
	u, err := url.Parse(page)
	if err == nil {
		u, err = u.Parse(string(m[1]))
	}
	if err != nil {
		return err
	}
	_, err = c.fetch(ctx, http.MethodPost, u.String())
	return err
}

func (c client) fetch(ctx context.Context, method, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	noFollow := *c.hc
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := noFollow.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err == nil && res.StatusCode != http.StatusOK && res.StatusCode != http.StatusSeeOther {
		err = fmt.Errorf("%s %s: %s", method, u, res.Status)
	}
	return body, err
}

func when(t *time.Time) string {
	if t == nil {
		return "(no deadline)"
	}
	return t.UTC().Format(time.RFC3339)
}

// follow reads the order until it is want (a PAID one settled), another
// final status (an error), or the deadline passes.
func (c client) follow(ctx context.Context, orderID string, buyer int64, want order.Status, deadline time.Time) (apiclient.Order, error) {
	for {
		res, err := c.api.GetOrderWithResponse(ctx, orderID, c.as(buyer, auth.RoleBuyer))
		if err := apiclient.Want(res, err, http.StatusOK); err != nil {
			return apiclient.Order{}, err
		}
		v := *res.JSON200
		switch st := order.Status(v.Status); {
		case st == want && (v.Settling == nil || !*v.Settling):
			return v, nil
		case st.Final() && st != want:
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

// client calls the API (api: the item's and the orders', buy: the
// purchases' and the pay's) through the generated client, as the user a
// token it signs names.
type client struct {
	api, buy *apiclient.ClientWithResponses
	hc       *http.Client
	secret   []byte
}

func newClient(o options) (client, error) {
	hc := &http.Client{Timeout: 30 * time.Second}
	api, err := apiclient.New(o.API, "", hc)
	if err != nil {
		return client{}, err
	}
	buy, err := apiclient.New(o.BuyAPI, "", hc)
	if err != nil {
		return client{}, err
	}
	return client{api: api, buy: buy, hc: hc, secret: o.Secret}, nil
}

// as makes a call user's with role: a token signed for it (a token that
// cannot be signed fails the call).
func (c client) as(user int64, role auth.Role) apiclient.RequestEditorFn {
	return func(ctx context.Context, req *http.Request) error {
		tok, err := auth.Sign(c.secret, user, role, time.Hour, time.Now())
		if err != nil {
			return err
		}
		return apiclient.Bearer(tok)(ctx, req)
	}
}
