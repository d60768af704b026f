package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill/seckill/order"
)

// The saga's writes to seckill_order. Each is idempotent on order_id (the
// unique key uk_order_order_id) and moves a row only forward: QUEUED or
// PENDING_PAYMENT to a final status, never out of one.

// CreateQueuedOrder inserts o as QUEUED: the saga has the order, the stock
// row is not touched yet (DeductStock moves it to PENDING_PAYMENT). When a row
// with the same order_id already exists (a retry after a lost reply, or a row
// recorded by someone else) it returns that row unchanged: the caller looks at
// its status. When the buyer already holds another order for the item
// (uk_order_user_item) it returns ErrDuplicate.
func (s *Store) CreateQueuedOrder(ctx context.Context, o Order) (Order, error) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	o.ID, o.Status, o.Reason, o.PayBy, o.CreatedAt, o.UpdatedAt = 0, order.StatusQueued, "", nil, now, now
	err := s.db.WithContext(ctx).Omit("id").Create(&o).Error
	if err == nil {
		return o, nil
	}
	if !isDuplicate(err) {
		return Order{}, fmt.Errorf("insert order %s: %w", o.OrderID, err)
	}
	existing, err := orderRow(s.db.WithContext(ctx), o.OrderID)
	if errors.Is(err, ErrNotFound) {
		return Order{}, fmt.Errorf("buyer %d already has another order for item %d: %w", o.UserID, o.ItemID, ErrDuplicate)
	}
	return existing, err
}

// SetOrderPaid moves a PENDING_PAYMENT order to PAID, whatever its deadline
// (the saga's MarkPaid: the API already judged the deadline, or an operator
// says so). Paying a PAID order again succeeds; any other status is
// order.ErrNotPayable, returned with the row.
func (s *Store) SetOrderPaid(ctx context.Context, orderID string) (Order, error) {
	db := s.db.WithContext(ctx)
	res := db.Exec("UPDATE seckill_order SET status = ?, reason = '' WHERE order_id = ? AND status = ?",
		order.StatusPaid, orderID, order.StatusPendingPayment)
	if res.Error != nil {
		return Order{}, fmt.Errorf("mark order %s paid: %w", orderID, res.Error)
	}
	o, err := orderRow(db, orderID)
	if err != nil {
		return Order{}, err
	}
	if o.Status != order.StatusPaid {
		return o, fmt.Errorf("order %s is %s: %w", orderID, o.Status, order.ErrNotPayable)
	}
	return o, nil
}

// RecordPayment is the buyer's payment judged at the door: the order moves
// from PENDING_PAYMENT to PAID only if it belongs to userID and receivedAt
// (when the API received the request) is before its deadline. The row is the
// decision; the saga follows it. Paying a PAID order again returns it with
// changed false; any other outcome is order.ErrNotPayable with the row, or
// ErrNotFound.
func (s *Store) RecordPayment(ctx context.Context, orderID string, userID int64, receivedAt time.Time) (_ Order, changed bool, _ error) {
	return s.recordAtDoor(ctx, orderID, userID, receivedAt, order.StatusPaid, "")
}

// RecordCancel is the buyer's cancel judged at the door, like RecordPayment:
// PENDING_PAYMENT and in time becomes CANCELLED (BUYER_CANCELLED). The saga
// gives the units back. Cancelling twice is order.ErrNotPayable, as before.
func (s *Store) RecordCancel(ctx context.Context, orderID string, userID int64, receivedAt time.Time) (_ Order, changed bool, _ error) {
	return s.recordAtDoor(ctx, orderID, userID, receivedAt, order.StatusCancelled, order.ReasonBuyerCancelled)
}

func (s *Store) recordAtDoor(ctx context.Context, orderID string, userID int64, receivedAt time.Time, status order.Status, reason string) (Order, bool, error) {
	db := s.db.WithContext(ctx)
	res := db.Exec(`UPDATE seckill_order SET status = ?, reason = ?
		WHERE order_id = ? AND user_id = ? AND status = ? AND pay_by > ?`,
		status, reason, orderID, userID, order.StatusPendingPayment, receivedAt.UTC())
	if res.Error != nil {
		return Order{}, false, fmt.Errorf("record %s of order %s: %w", status, orderID, res.Error)
	}
	o, err := orderRow(db, orderID)
	if err != nil {
		return Order{}, false, err
	}
	if o.UserID != userID {
		return Order{}, false, fmt.Errorf("order %s: %w", orderID, ErrOrderNotFound)
	}
	changed := res.RowsAffected == 1
	if o.Status == status && (changed || status == order.StatusPaid) {
		return o, changed, nil
	}
	return o, false, fmt.Errorf("order %s is %s: %w", orderID, o.Status, order.ErrNotPayable)
}

// Closing is how CloseOrder should close an order.
type Closing struct {
	Status order.Status // CANCELLED or FAILED
	Reason string
	// AfterDeadline closes an open order only once its deadline plus this
	// grace has passed by the database's clock (a payment timeout); an order
	// not yet due is ErrNotDue. Zero closes at once.
	AfterDeadline time.Duration
}

// ErrNotDue: the order's payment window (plus grace) is still open.
var ErrNotDue = errors.New("payment window still open")

// CloseResult is what CloseOrder found and did.
type CloseResult struct {
	Order    Order // the row as it is now: PAID, CANCELLED or FAILED
	Restored bool  // this call gave the stock-row unit back
	Recorded bool  // false when no row can hold the order (the buyer's row belongs to another order id)
}

// CloseOrder is the saga's compensation on the database, one transaction that
// reads the order row first (FOR UPDATE, so a pay at the door and the close
// serialize):
//   - a PAID row is left alone and nothing is given back: the payment won;
//   - an open row (QUEUED, PENDING_PAYMENT) is closed with c's status and
//     reason (a final row keeps its own: the first final status wins);
//   - a missing row is inserted closed, so the order is on record;
//   - the order's stock_deduction marker, if it exists and is not restored,
//     is flipped and the stock row goes up by one (version+1).
//
// Repeating it changes nothing more: the marker says whether the unit is back.
func (s *Store) CloseOrder(ctx context.Context, o Order, c Closing) (CloseResult, error) {
	if c.Status != order.StatusCancelled && c.Status != order.StatusFailed {
		return CloseResult{}, fmt.Errorf("close order %s: %s is not a closing status", o.OrderID, c.Status)
	}
	c.Reason = clip(c.Reason, 512)
	var out CloseResult
	// READ COMMITTED: a locking read of a missing row takes no gap lock, so
	// concurrent closes and inserts of neighbouring order ids cannot wait on
	// each other's gaps (under REPEATABLE READ they did, up to the lock wait
	// timeout). The row lock on an existing row is the same.
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		out = CloseResult{}
		var row Order
		err := lockOrder(tx, o.OrderID, &row)
		if errors.Is(err, gorm.ErrRecordNotFound) {
			now := time.Now().UTC().Truncate(time.Millisecond)
			row = Order{OrderID: o.OrderID, UserID: o.UserID, ItemID: o.ItemID, Status: c.Status, Reason: c.Reason,
				CreatedAt: now, UpdatedAt: now}
			ierr := tx.Omit("id").Create(&row).Error
			switch {
			case ierr == nil:
				out.Order, out.Recorded = row, true
				restored, err := restoreDeduction(tx, o.OrderID)
				out.Restored = restored
				return err
			case !isDuplicate(ierr):
				return fmt.Errorf("insert closed order %s: %w", o.OrderID, ierr)
			}
			// Either this order's own row was committed meanwhile (a
			// PersistOrder whose insert landed late: close that row), or
			// another order id holds the buyer's (user_id, item_id). An
			// insert failure does not abort a MySQL transaction.
			err = lockOrder(tx, o.OrderID, &row)
			if errors.Is(err, gorm.ErrRecordNotFound) {
				out.Order = Order{OrderID: o.OrderID, UserID: o.UserID, ItemID: o.ItemID, Status: c.Status, Reason: c.Reason}
				restored, err := restoreDeduction(tx, o.OrderID)
				out.Restored = restored
				return err
			}
		}
		if err != nil {
			return fmt.Errorf("read order %s: %w", o.OrderID, err)
		}
		out.Recorded = true
		switch {
		case row.Status == order.StatusPaid:
			out.Order = row
			return nil
		case !row.Status.Final():
			if c.AfterDeadline > 0 && row.PayBy != nil {
				var due bool
				if err := tx.Raw("SELECT NOW(3) >= ?", row.PayBy.Add(c.AfterDeadline)).Scan(&due).Error; err != nil {
					return fmt.Errorf("check deadline of order %s: %w", o.OrderID, err)
				}
				if !due {
					return fmt.Errorf("order %s due at %s: %w", o.OrderID, row.PayBy.Add(c.AfterDeadline).Format(time.RFC3339Nano), ErrNotDue)
				}
			}
			if err := tx.Exec("UPDATE seckill_order SET status = ?, reason = ? WHERE id = ?", c.Status, c.Reason, row.ID).Error; err != nil {
				return fmt.Errorf("close order %s: %w", o.OrderID, err)
			}
			row.Status, row.Reason = c.Status, c.Reason
		}
		out.Order = row
		restored, err := restoreDeduction(tx, o.OrderID)
		out.Restored = restored
		return err
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return CloseResult{}, err
	}
	if out.Order.OrderID == "" {
		out.Order = Order{OrderID: o.OrderID, UserID: o.UserID, ItemID: o.ItemID, Status: c.Status, Reason: c.Reason}
	}
	return out, nil
}

// lockOrder reads one order by order id with a row lock (inside tx).
func lockOrder(tx *gorm.DB, orderID string, row *Order) error {
	return tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("order_id = ?", orderID).Take(row).Error
}

// orderRow reads one order by order id with db (a pool or a transaction).
func orderRow(db *gorm.DB, orderID string) (Order, error) {
	var o Order
	err := db.Where("order_id = ?", orderID).Take(&o).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Order{}, fmt.Errorf("order %s: %w", orderID, ErrOrderNotFound)
	}
	if err != nil {
		return Order{}, fmt.Errorf("read order %s: %w", orderID, err)
	}
	return o, nil
}

// clip shortens s to at most n characters (the reason column is VARCHAR(512)).
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}
