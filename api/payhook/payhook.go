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
	"slices"
	"sync"
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
	Verify(payload []byte, signature string) (provider.Event, string, error)
	Judge(ctx context.Context, ev provider.Event) (string, error)
}

var _ Cashier = (*cashier.Cashier)(nil)

// MaxNotification caps a notification's body (Stripe's are a few KiB).
const MaxNotification = 64 << 10

// Options are what the API's configuration gives: the cashier (nil: no
// provider, the routes answer 404) and the notifications' rate limit.
type Options struct {
	Cashier Cashier
	// NotifyRPS bounds the verified notifications this instance decides
	// per second (burst the same); past it they are answered 429 and the
	// provider resends them. SECKILL_PAYMENT_NOTIFY_RPS. Notifications that
	// fail verification never count against it: their source is shed on
	// its own (BadSourceRPS).
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
	lim *rate.Limiter // verified notifications, all sources
	bad *badSources
}

// A source (client address, SECKILL_API_TRUSTED_PROXIES deciding whose)
// that sent a notification failing verification gets a bucket of its own:
// BadSourceBurst failures, then BadSourceRPS, and 429 before its body is read
// while the bucket is empty. A verified notification from it forgets its
// failures. Sources that never failed are not limited by it: a genuine
// provider's burst is not slowed by someone else's forgeries.
const (
	BadSourceRPS   = 1
	BadSourceBurst = 5
	// badSourcesMax bounds the sources remembered; past it the oldest
	// quarter is forgotten.
	badSourcesMax = 10000
)

type badSources struct {
	mu  sync.Mutex
	src map[string]*badSource
}

type badSource struct {
	lim  *rate.Limiter
	seen time.Time
}

// shed reports whether ip failed verification before and is out of tokens
// (checking takes none: only failures spend them).
func (b *badSources) shed(ip string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.src[ip]
	return ok && s.lim.TokensAt(now) < 1
}

// verified forgets ip's failures: a source that sends a genuine
// notification (several sources behind one address) is not shed for them.
func (b *badSources) verified(ip string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.src, ip)
}

// failed charges ip's bucket (created full on its first failure).
func (b *badSources) failed(ip string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.src[ip]
	if !ok {
		if len(b.src) >= badSourcesMax {
			b.forgetOldest()
		}
		s = &badSource{lim: rate.NewLimiter(BadSourceRPS, BadSourceBurst)}
		b.src[ip] = s
	}
	s.seen = now
	s.lim.AllowN(now, 1)
}

func (b *badSources) forgetOldest() {
	seen := make([]time.Time, 0, len(b.src))
	for _, s := range b.src {
		seen = append(seen, s.seen)
	}
	slices.SortFunc(seen, func(x, y time.Time) int { return x.Compare(y) })
	cut := seen[len(seen)/4]
	for ip, s := range b.src {
		if !s.seen.After(cut) {
			delete(b.src, ip)
		}
	}
}

// Register adds the routes to r (the API's engine).
func Register(r gin.IRoutes, d Deps) {
	rps := d.NotifyRPS
	if rps <= 0 {
		rps = 1
	}
	h := &hook{d: d, lim: rate.NewLimiter(rate.Limit(rps), max(1, int(rps))), bad: &badSources{src: map[string]*badSource{}}}
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
	now, src := h.d.Now(), c.ClientIP()
	if h.bad.shed(src, now) {
		return apierr.RateLimited(time.Second) // a source of bad signatures, shed before its body is read
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, MaxNotification))
	if err != nil {
		return err
	}
	ev, _, err := h.d.Cashier.Verify(body, c.GetHeader(provider.SignatureHeader))
	if err != nil {
		h.bad.failed(src, now)
		h.d.Log.Warn("payment notification failed verification", "source", src, "err", err)
		return err
	}
	h.bad.verified(src)
	if !h.lim.AllowN(now, 1) {
		return apierr.RateLimited(time.Second) // the provider resends
	}
	outcome, err := h.d.Cashier.Judge(c.Request.Context(), ev)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, gin.H{"outcome": outcome})
	return nil
}
