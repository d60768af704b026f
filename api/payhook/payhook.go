// Package payhook is the door's side of a payment provider (issue 29): the
// buyer's checkout, which opens (or returns) the provider payment of their
// order, and the provider's notification endpoint — no buyer token, its own
// rate limit, the body capped — whose verdict is the cashier's
// (payment/cashier). Package api composes it. Without a provider
// (SECKILL_PAYMENT_PROVIDER=door) both routes answer 404.
package payhook

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/cashier"
	"github.com/seckill/seckill/payment/provider"
)

// Cashier opens payments and judges notifications (cashier.Cashier).
type Cashier interface {
	Checkout(ctx context.Context, orderID string, userID int64, now time.Time) (cashier.Checkout, error)
	Notify(ctx context.Context, payload []byte, signature string) (string, error)
}

var _ Cashier = (*cashier.Cashier)(nil)

// MaxNotification caps a notification's body (Stripe's are a few KiB).
const MaxNotification = 64 << 10

// Options are what the API's configuration gives: the cashier (nil: no
// provider, the routes answer 404) and the notifications' rate limit.
type Options struct {
	Cashier Cashier
	// NotifyRPS bounds the notifications this instance takes per second
	// (burst the same); past it they are answered 429 and the provider
	// resends them. SECKILL_PAYMENT_NOTIFY_RPS.
	NotifyRPS float64
}

// Deps are what the routes are built from.
type Deps struct {
	Options
	Log *slog.Logger
	Now func() time.Time
	// Auth returns the request's principal, of the role asked for, charged
	// to its limiter; Fail answers an error as the API does.
	Auth func(c *gin.Context, role auth.Role) (auth.Principal, error)
	Fail func(c *gin.Context, err error)
}

// Routes of this package.
const (
	CheckoutRoute     = "/api/v1/orders/:orderId/checkout"
	NotificationRoute = "/api/v1/payments/notifications"
)

type hook struct {
	d   Deps
	lim *rate.Limiter
}

// Register adds the routes to r (the API's engine).
func Register(r gin.IRoutes, d Deps) {
	rps := d.NotifyRPS
	if rps <= 0 {
		rps = 1
	}
	h := &hook{d: d, lim: rate.NewLimiter(rate.Limit(rps), max(1, int(rps)))}
	r.POST(CheckoutRoute, apierr.Handle(d.Fail, h.checkout))
	r.POST(NotificationRoute, apierr.Handle(d.Fail, h.notification))
}

// errNoProvider: payments are taken at the door (POST …/pay), not here.
var errNoProvider = apierr.ErrNoRoute.With("no payment provider here (SECKILL_PAYMENT_PROVIDER=door): pay with POST /api/v1/orders/{orderId}/pay")

// POST /api/v1/orders/:orderId/checkout (the order's buyer): the order's
// provider payment and where to pay it.
func (h *hook) checkout(c *gin.Context) error {
	now := h.d.Now()
	p, err := h.d.Auth(c, auth.RoleBuyer)
	if err != nil {
		return err
	}
	if h.d.Cashier == nil {
		return errNoProvider
	}
	id := c.Param("orderId")
	if !order.ValidID(id) {
		return order.ErrNotFound
	}
	co, err := h.d.Cashier.Checkout(c.Request.Context(), id, p.UserID, now)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, co)
	return nil
}

// POST /api/v1/payments/notifications (the provider, signed): answered 200
// only once the decision is durable; 400 when it must not be believed.
func (h *hook) notification(c *gin.Context) error {
	if h.d.Cashier == nil {
		return errNoProvider
	}
	now := h.d.Now()
	if !h.lim.AllowN(now, 1) {
		return apierr.RateLimited(time.Second) // the provider resends
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, MaxNotification))
	if err != nil {
		return err
	}
	outcome, err := h.d.Cashier.Notify(c.Request.Context(), body, c.GetHeader(provider.SignatureHeader))
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, gin.H{"outcome": outcome})
	return nil
}
