// Package purchase is the door that takes the stampede: POST
// /api/v1/seckill/:itemId reserves a unit in Redis (one Lua script) and
// answers 202 with the order, or why not. It reads the items from the
// sale's read model (sale.Cache) and remembers the buyers whose outcome it
// could not tell (unsureBuyers). Package api composes it: it owns its route
// and its metrics; api lends it the checks (auth, the global limiter) and
// the error answer.
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
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/stock"
)

var (
	_ Items = (*sale.Cache)(nil)
	_ Units = (*stock.Store)(nil)
	_ Views = (*orderstatus.Board)(nil)
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
	// ConfirmTimeout bounds the reading of a buyer's mark after a failed
	// reservation.
	WriteTimeout, ConfirmTimeout time.Duration
	// Auth returns the request's principal, of the role asked for, charged
	// to its limiter; Global takes a token of the global limiter, or says
	// how long to wait for one; Fail answers an error as the API does.
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

// Register adds the purchase's route to r (the API's engine) and its
// metrics to d.Registry.
func Register(r gin.IRoutes, d Deps) *Purchase {
	f := promauto.With(d.Registry)
	s := &Purchase{d: d, log: d.Log, unsure: newUnsureBuyers(10*time.Minute, 100_000),
		reserved: f.NewCounter(prometheus.CounterOpts{Name: "seckill_reservations_total", Help: "Units reserved (202 answers)."}),
		confirms: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reservation_confirms_total",
			Help: "Reservations that failed with their outcome unknown, by what the buyer's mark then said (reserved: 202; not_reserved: 503; unknown: Redis did not answer within SECKILL_API_CONFIRM_TIMEOUT, 503)."},
			[]string{"outcome"}),
	}
	r.POST("/api/v1/seckill/:itemId", s.purchase)
	return s
}

// POST /api/v1/seckill/:itemId (buyer)
//
// The checks run from cheapest to dearest, and this is the one place that
// orders them:
//
//  1. route and item id, token (no I/O);
//  2. the buyer's own limiter (charged by authenticate, on every
//     authenticated route): what stops one buyer's flood; then the role;
//  3. answers from this instance's memory: unknown item (remembered misses),
//     sale not started, sale ended, sold out. They cost nothing downstream,
//     so they are not charged to the global limiter;
//  4. the global limiter, which guards what reaches Redis or MySQL: an item
//     not cached yet (one MySQL read) and the reservation;
//  5. the reservation itself: one Lua script, one round trip.
func (s *Purchase) purchase(c *gin.Context) {
	by := s.answerBy(time.Now())
	itemID, ok := apierr.ParseID(c.Param("itemId"))
	if !ok {
		s.d.Fail(c, apierr.BadRequest("itemId: must be a positive integer"))
		return
	}
	p, err := s.d.Auth(c, auth.RoleBuyer) // charges the buyer's limiter
	if err != nil {
		s.d.Fail(c, err)
		return
	}
	now := s.d.Now()
	ci, err := s.d.Items.Peek(itemID)
	if err == nil && ci != nil {
		err = ci.Early(now)
	}
	if errors.Is(err, apierr.ErrSoldOut) {
		if s.unsure.has(itemID, p.UserID, now) {
			err = nil // Redis knows whether this buyer's earlier attempt took a unit
		} else {
			err = s.soldOut(c.Request.Context(), ci, p.UserID)
		}
	}
	if err != nil {
		s.d.Fail(c, err)
		return
	}
	if err := s.d.Global(now); err != nil {
		s.d.Fail(c, err)
		return
	}
	ctx := c.Request.Context()
	if ci == nil {
		if ci, err = s.d.Items.Get(ctx, itemID); err == nil {
			err = ci.Early(now)
		}
		if err != nil {
			s.d.Fail(c, err)
			return
		}
	}

	// The deadline is computed once, here, and travels with the order (its
	// reservation, the message, the row): every reader sees this instant.
	payBy := order.Deadline(now, ci.Item().PaymentTimeoutSeconds)
	msg := order.Message{OrderID: order.NewID(), ItemID: itemID, UserID: p.UserID, ReservedAt: now.UTC(), PayBy: &payBy}
	// The reservation and the order's QUEUED status in one round trip,
	// given up (outcome unknown) when the answer would come too late.
	rctx, cancel := context.WithDeadline(ctx, by)
	left, err := s.d.Units.Reserve(rctx, msg)
	cancel()
	var already *stock.AlreadyReservedError
	switch {
	case err == nil:
	case errors.Is(err, stock.ErrSoldOut):
		s.unsure.forget(itemID, p.UserID)
		s.d.Items.MarkSoldOut(ci)
		s.d.Fail(c, err)
		return
	case errors.As(err, &already), errors.Is(err, stock.ErrNotLoaded):
		s.unsure.forget(itemID, p.UserID)
		s.d.Fail(c, err)
		return
	default:
		// Redis failed with the outcome unknown: the script may have run
		// (a reply lost with its connection, a master that died after
		// replicating it). Only the buyer's mark can say.
		found := s.confirm(ctx, msg, by)
		s.confirms.WithLabelValues(found.String()).Inc()
		switch found {
		case notReserved:
			// Nothing was reserved, whatever Redis answered (a dropped
			// connection, or an error reply such as READONLY during a
			// failover or OOM): 503, the buyer may try again.
			s.d.Fail(c, fmt.Errorf("%w: reserve: %w", apierr.ErrUnavailable, err))
			return
		case unknown:
			// Redis did not answer in time: neither 202 nor "nothing
			// reserved" would be true. The buyer's retry on this instance
			// goes to Redis even if the item looks sold out here.
			s.unsure.add(itemID, p.UserID, s.d.Now())
			s.d.Fail(c, fmt.Errorf("%w: reserve: %w", apierr.ErrOutcomeUnknown, err))
			return
		}
		// The unit is ours and the outbox carries it, so the buyer gets
		// 202, not a 503 that would hide a live order. Whether the
		// pipeline stored the QUEUED status is unknown: store it (SET NX
		// keeps a later one).
		left = 1
		s.markQueued(ctx, msg, by)
	}
	s.unsure.forget(itemID, p.UserID)
	if left <= 0 {
		s.d.Items.MarkSoldOut(ci)
	}
	s.accepted(c, msg)
}

// soldOut is the answer to a buyer of an item this instance holds sold out:
// 410 SOLD_OUT, unless the buyer holds a unit of it (an earlier attempt on
// any instance took one, maybe answered by a 503 "outcome unknown" or lost
// with its instance): then 409 ALREADY_PURCHASED with the order. The item's
// marks, loaded into memory once it is sold out (and again when their count
// moves), answer almost every buyer without I/O; a buyer they name, or any
// buyer while they are not loaded yet, costs one HGET of the buyer's mark.
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

// answerBy is when a purchase's answer must be ready: the server's write
// timeout runs from the request's arrival, and an answer written after it is
// a dropped connection to the buyer. A margin is left for the write itself.
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

// markQueued records the QUEUED status of a reserved order when the
// reservation's own round trip may not have (by the answer's deadline).
func (s *Purchase) markQueued(ctx context.Context, msg order.Message, by time.Time) {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), earliest(by, time.Now().Add(time.Second)))
	defer cancel()
	if err := s.d.Views.MarkQueued(ctx, msg.QueuedView()); err != nil {
		// The unit is reserved and in the outbox; only GET order is blind
		// until the saga publishes the next status.
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

// confirm reads the buyer's mark (whether or not the buyer is still
// connected) until Redis answers or cfg.ConfirmTimeout has passed, but never
// past by, when the answer is due. In a failover the first reads fail and
// later ones reach the promoted master (stock reloads the slot map after a
// failed read), which holds the mark if the reservation was replicated before
// the old master died.
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

// accepted answers 202 for a reserved unit (its QUEUED status is stored).
func (s *Purchase) accepted(c *gin.Context, msg order.Message) {
	s.reserved.Inc()
	c.Writer.Header()["Location"] = []string{"/api/v1/orders/" + msg.OrderID}
	apierr.WriteJSON(c, http.StatusAccepted, acceptedJSON(msg))
}

// acceptedJSON is the 202 body, appended by hand on this hot path: a ULID, a
// status and an RFC 3339 time need no escaping (a test holds it to
// encoding/json's). pay_by: the order can be paid or cancelled until
// then.
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
