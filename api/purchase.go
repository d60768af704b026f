package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
)

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
func (s *Server) purchase(c *gin.Context) {
	by := s.answerBy(time.Now())
	itemID, ok := parseID(c.Param("itemId"))
	if !ok {
		s.fail(c, badRequest("itemId: must be a positive integer"))
		return
	}
	p, ok := s.requireRole(c, auth.RoleBuyer) // charges the buyer's limiter
	if !ok {
		return
	}
	now := s.now()
	ci, err := s.items.peek(itemID)
	if err == nil && ci != nil {
		err = early(ci, now)
	}
	if errors.Is(err, ErrSoldOut) {
		if s.unsure.has(itemID, p.UserID, now) {
			err = nil // Redis knows whether this buyer's earlier attempt took a unit
		} else {
			err = s.soldOut(c.Request.Context(), ci, p.UserID)
		}
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	if !s.global.AllowN(now, 1) {
		s.fail(c, rateLimited(retryAfter(s.global, now)))
		return
	}
	ctx := c.Request.Context()
	if ci == nil {
		if ci, err = s.items.get(ctx, itemID); err == nil {
			err = early(ci, now)
		}
		if err != nil {
			s.fail(c, err)
			return
		}
	}

	// The deadline is computed once, here, and travels with the order (its
	// reservation, the message, the row): every reader sees this instant.
	payBy := order.Deadline(now, ci.it.PaymentTimeoutSeconds)
	msg := order.Message{OrderID: order.NewID(), ItemID: itemID, UserID: p.UserID, ReservedAt: now.UTC(), PayBy: &payBy}
	// The reservation and the order's QUEUED status in one round trip,
	// given up (outcome unknown) when the answer would come too late.
	rctx, cancel := context.WithDeadline(ctx, by)
	left, err := s.units.Reserve(rctx, msg)
	cancel()
	var already *stock.AlreadyReservedError
	switch {
	case err == nil:
	case errors.Is(err, stock.ErrSoldOut):
		s.unsure.forget(itemID, p.UserID)
		s.items.markSoldOut(ci)
		s.fail(c, err)
		return
	case errors.As(err, &already), errors.Is(err, stock.ErrNotLoaded):
		s.unsure.forget(itemID, p.UserID)
		s.fail(c, err)
		return
	default:
		// Redis failed with the outcome unknown: the script may have run
		// (a reply lost with its connection, a master that died after
		// replicating it). Only the buyer's mark can say.
		found := s.confirm(ctx, msg, by)
		s.metrics.confirms.WithLabelValues(found.String()).Inc()
		switch found {
		case notReserved:
			// Nothing was reserved, whatever Redis answered (a dropped
			// connection, or an error reply such as READONLY during a
			// failover or OOM): 503, the buyer may try again.
			s.fail(c, fmt.Errorf("%w: reserve: %w", ErrUnavailable, err))
			return
		case unknown:
			// Redis did not answer in time: neither 202 nor "nothing
			// reserved" would be true. The buyer's retry on this instance
			// goes to Redis even if the item looks sold out here.
			s.unsure.add(itemID, p.UserID, s.now())
			s.fail(c, fmt.Errorf("%w: reserve: %w", ErrOutcomeUnknown, err))
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
		s.items.markSoldOut(ci)
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
func (s *Server) soldOut(ctx context.Context, ci *cachedItem, userID int64) error {
	if ms := ci.marks.Load(); ms != nil {
		if _, holds := ms.users[userID]; !holds && !ms.tooMany {
			return ErrSoldOut
		}
	} else {
		s.items.loadMarks(ci, -1)
	}
	id, ok, err := s.units.BuyerOrder(ctx, ci.it.ID, userID)
	switch {
	case err != nil:
		return fmt.Errorf("%w: sold out here, the buyer's mark unreadable: %w", ErrUnavailable, err)
	case ok:
		return alreadyPurchased(id)
	}
	return ErrSoldOut
}

// early is the answer the item's cached state gives without any I/O: sale
// not started, sale ended, sold out; nil when the purchase may go on.
func early(ci *cachedItem, now time.Time) error {
	switch {
	case now.Before(ci.it.StartAt):
		return ErrSaleNotStarted
	case !now.Before(ci.it.EndAt):
		return ErrSaleEnded
	case ci.soldOut.Load():
		return ErrSoldOut
	}
	return nil
}

// answerBy is when a purchase's answer must be ready: the server's write
// timeout runs from the request's arrival, and an answer written after it is
// a dropped connection to the buyer. A margin is left for the write itself.
func (s *Server) answerBy(start time.Time) time.Time {
	wt := s.cfg.WriteTimeout
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
func (s *Server) markQueued(ctx context.Context, msg order.Message, by time.Time) {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), earliest(by, time.Now().Add(time.Second)))
	defer cancel()
	if err := s.views.MarkQueued(ctx, msg.QueuedView()); err != nil {
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
func (s *Server) confirm(ctx context.Context, msg order.Message, by time.Time) outcome {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), earliest(by, time.Now().Add(s.cfg.ConfirmTimeout)))
	defer cancel()
	found := notReserved
	err := retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		id, ok, err := s.units.BuyerOrder(ctx, msg.ItemID, msg.UserID)
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

// retry calls try until it succeeds or ctx ends (then it returns try's last
// error), backing off from 50 ms to 1 s between calls.
func retry(ctx context.Context, try func(ctx context.Context) error) error {
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		err := try(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// accepted answers 202 for a reserved unit (its QUEUED status is stored).
func (s *Server) accepted(c *gin.Context, msg order.Message) {
	s.metrics.reserved.Inc()
	c.Writer.Header()["Location"] = []string{"/api/v1/orders/" + msg.OrderID}
	writeJSON(c, http.StatusAccepted, acceptedJSON(msg))
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
