// Package purchase is the door that takes the stampede: POST
// /api/v1/seckill/:itemId reserves a unit in Redis (one Lua script) and
// answers 202 with the order, or why not.
package purchase

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/api/sale"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
)

// Items is the sale's item read model (sale.Cache), from memory first.
type Items interface {
	Peek(itemID int64) (*sale.Entry, error)
	Get(ctx context.Context, itemID int64) (*sale.Entry, error)
	MarkSoldOut(ci *sale.Entry)
	MayHold(ci *sale.Entry, userID int64) bool
}

// Units are the reservation and the buyers' marks in Redis (stock.Store).
type Units interface {
	Reserve(ctx context.Context, r order.Message) (int64, error)
	BuyerOrder(ctx context.Context, itemID, userID int64) (string, bool, error)
}

// Views stores an order's QUEUED view (orderstatus.Board).
type Views interface {
	MarkQueued(ctx context.Context, v order.View) error
}

// Deps are what the purchase is built from.
type Deps struct {
	Items    Items
	Units    Units
	Views    Views
	Registry prometheus.Registerer
	Log      *slog.Logger
	Now      func() time.Time
	// WriteTimeout is the server's (the answer is due before it);
	// ConfirmTimeout bounds the reading of a buyer's mark (confirm).
	WriteTimeout, ConfirmTimeout time.Duration
	// The API's checks (auth, the global limiter) and error answer.
	Auth   func(c *gin.Context, role auth.Role) (auth.Principal, error)
	Global func(now time.Time) error
	Fail   func(c *gin.Context, err error)
}

// Purchase serves POST /api/v1/seckill/:itemId.
type Purchase struct {
	d        Deps
	log      *slog.Logger
	unsure   *unsureBuyers
	reserved prometheus.Counter
	confirms *prometheus.CounterVec
}

// Register adds the purchase's route to r and its metrics to d.Registry.
func Register(r gin.IRoutes, d Deps) *Purchase {
	f := promauto.With(d.Registry)
	s := &Purchase{d: d, log: d.Log, unsure: newUnsureBuyers(10*time.Minute, 100_000),
		reserved: f.NewCounter(prometheus.CounterOpts{Name: "seckill_reservations_total", Help: "Units reserved (202 answers)."}),
		confirms: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reservation_confirms_total",
			Help: "Reservations that failed with their outcome unknown, by what the buyer's mark then said (reserved: 202; not_reserved: 503; unknown: Redis did not answer within SECKILL_API_CONFIRM_TIMEOUT, 503)."},
			[]string{"outcome"}),
	}
	r.POST("/api/v1/seckill/:itemId", apierr.Handle(d.Fail, s.purchase))
	return s
}

// POST /api/v1/seckill/:itemId (buyer). The checks run cheapest first: ids
// and token; the buyer's limiter and role; answers from memory (not charged
// to the global limiter); the global limiter, guarding what reaches Redis or
// MySQL; the reservation.
func (s *Purchase) purchase(c *gin.Context) error {
	by := s.answerBy(time.Now())
	itemID, ok := apierr.ParseID(c.Param("itemId"))
	if !ok {
		return apierr.BadRequest("itemId: must be a positive integer")
	}
	p, err := s.d.Auth(c, auth.RoleBuyer) // charges the buyer's limiter
	if err != nil {
		return err
	}
	now := s.d.Now()
	ci, err := s.d.Items.Peek(itemID)
	if err == nil && ci != nil {
		err = ci.Early(now)
	}
	if errors.Is(err, apierr.ErrSoldOut) {
		if s.unsure.has(itemID, p.UserID, now) {
			err = nil // only Redis knows whether an earlier attempt took a unit
		} else {
			err = s.soldOut(c.Request.Context(), ci, p.UserID)
		}
	}
	if err != nil {
		return err
	}
	if err := s.d.Global(now); err != nil {
		return err
	}
	ctx := c.Request.Context()
	if ci == nil {
		if ci, err = s.d.Items.Get(ctx, itemID); err == nil {
			err = ci.Early(now)
		}
		if err != nil {
			return err
		}
	}
	// The deadline is computed once, here, and travels with the order.
	payBy := order.Deadline(now, ci.Item().PaymentTimeoutSeconds)
	msg := order.Message{OrderID: order.NewID(), ItemID: itemID, UserID: p.UserID, ReservedAt: now.UTC(), PayBy: &payBy}
	// The reservation and the QUEUED status in one round trip, given up
	// (outcome unknown) when the answer would come too late.
	rctx, cancel := context.WithDeadline(ctx, by)
	left, err := s.d.Units.Reserve(rctx, msg)
	cancel()
	var already *stock.AlreadyReservedError
	switch {
	case err == nil:
	case errors.Is(err, stock.ErrSoldOut):
		s.unsure.forget(itemID, p.UserID)
		s.d.Items.MarkSoldOut(ci)
		return err
	case errors.As(err, &already), errors.Is(err, stock.ErrNotLoaded):
		s.unsure.forget(itemID, p.UserID)
		return err
	default:
		// The script may have run (a reply lost, a master that died after
		// replicating it): only the buyer's mark can say.
		found := s.confirm(ctx, msg, by)
		s.confirms.WithLabelValues(found.String()).Inc()
		switch found {
		case notReserved:
			// Nothing was reserved, whatever Redis answered: 503.
			return fmt.Errorf("%w: reserve: %w", apierr.ErrUnavailable, err)
		case unknown:
			// Neither 202 nor "nothing reserved" would be true; the
			// buyer's retry here goes to Redis even if sold out here.
			s.unsure.add(itemID, p.UserID, s.d.Now())
			return fmt.Errorf("%w: reserve: %w", apierr.ErrOutcomeUnknown, err)
		}
		// The unit is reserved and in the outbox: 202. The QUEUED status
		// may be missing: store it (SET NX keeps a later one).
		left = 1
		s.markQueued(ctx, msg, by)
	}
	s.unsure.forget(itemID, p.UserID)
	if left <= 0 {
		s.d.Items.MarkSoldOut(ci)
	}
	s.accepted(c, msg)
	return nil
}

// soldOut answers a buyer of an item held sold out: 410, or 409 with the
// order if the buyer holds a unit (an earlier attempt's, maybe answered
// 503). The loaded marks answer almost every buyer without I/O; the others
// cost one read of the buyer's mark.
func (s *Purchase) soldOut(ctx context.Context, ci *sale.Entry, userID int64) error {
	if !s.d.Items.MayHold(ci, userID) {
		return apierr.ErrSoldOut
	}
	id, ok, err := s.d.Units.BuyerOrder(ctx, ci.Item().ID, userID)
	switch {
	case err != nil:
		return fmt.Errorf("%w: sold out here, the buyer's mark unreadable: %w", apierr.ErrUnavailable, err)
	case ok:
		return apierr.AlreadyPurchased(id)
	}
	return apierr.ErrSoldOut
}

// answerBy is when the answer must be ready: before the server's write
// timeout (from arrival) drops it, with a margin for the write.
func (s *Purchase) answerBy(start time.Time) time.Time {
	wt := s.d.WriteTimeout
	return start.Add(wt - min(time.Second, wt/10))
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// markQueued stores a reserved order's QUEUED status (by the deadline).
func (s *Purchase) markQueued(ctx context.Context, msg order.Message, by time.Time) {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), earliest(by, time.Now().Add(time.Second)))
	defer cancel()
	if err := s.d.Views.MarkQueued(ctx, msg.QueuedView()); err != nil {
		// Only GET order is blind until the saga's next status.
		s.log.Warn("order reserved but QUEUED status not stored", "order_id", msg.OrderID, "err", err)
	}
}

// outcome is what the buyer's mark says of a reservation that failed.
type outcome int

func (o outcome) String() string { return [...]string{"reserved", "not_reserved", "unknown"}[o] }

const (
	reserved    outcome = iota // the mark holds this attempt's order id
	notReserved                // no mark, or another order's
	unknown                    // Redis did not answer within the confirm window
)

// confirm reads the buyer's mark until Redis answers or ConfirmTimeout has
// passed (never past by). In a failover later reads reach the promoted
// master, which holds the mark if the reservation was replicated.
func (s *Purchase) confirm(ctx context.Context, msg order.Message, by time.Time) outcome {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), earliest(by, time.Now().Add(s.d.ConfirmTimeout)))
	defer cancel()
	found := notReserved
	err := apierr.Retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		id, ok, err := s.d.Units.BuyerOrder(ctx, msg.ItemID, msg.UserID)
		if ok && id == msg.OrderID {
			found = reserved
		}
		return err
	})
	if err != nil {
		s.log.Warn("reservation outcome unknown", "order_id", msg.OrderID, "item_id", msg.ItemID,
			"user_id", msg.UserID, "err", err)
		return unknown
	}
	return found
}

// accepted answers 202 for a reserved unit.
func (s *Purchase) accepted(c *gin.Context, msg order.Message) {
	s.reserved.Inc()
	c.Writer.Header()["Location"] = []string{"/api/v1/orders/" + msg.OrderID}
	apierr.WriteJSON(c, http.StatusAccepted, acceptedJSON(msg))
}

// acceptedJSON is the 202 body, appended by hand on this hot path (nothing
// needs escaping; a test holds it to encoding/json's).
func acceptedJSON(msg order.Message) []byte {
	b := make([]byte, 0, 112)
	b = append(b, `{"order_id":"`...)
	b = append(b, msg.OrderID...)
	b = append(b, `","status":"`+order.StatusQueued+`"`...)
	if msg.PayBy != nil {
		b = append(b, `,"pay_by":"`...)
		b = msg.PayBy.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, '}')
}
