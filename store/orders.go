package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/seckill/order"
)

// CreateQueuedOrder inserts o as QUEUED, or returns its row already there; the
// buyer holding another order for the item is ErrDuplicate.
func (s *Store) CreateQueuedOrder(ctx context.Context, o Order) (Order, error) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	o.ID, o.Status, o.Reason, o.PaidAt, o.CreatedAt, o.UpdatedAt = 0, order.StatusQueued, "", nil, now, now
	err := s.db.WithContext(ctx).Omit("id").Create(&o).Error
	if err == nil {
		return o, nil
	}
	if !isDuplicate(err) {
		return Order{}, fmt.Errorf("insert order %s: %w", o.OrderID, err)
	}
	existing, err := orderRow(s.db.WithContext(ctx), o.OrderID)
	if errors.Is(err, order.ErrNotFound) {
		return Order{}, fmt.Errorf("buyer %d already has another order for item %d: %w", o.UserID, o.ItemID, ErrDuplicate)
	}
	return existing, err
}

// ConfirmPaid reads the order the saga was told is paid: a PAID row is
// returned; any other is order.ErrNotPayable, with the row. It writes
// nothing: only the door and the provider's confirmed payment pay an order
// (ledger.Pays), never a signal.
func (s *Store) ConfirmPaid(ctx context.Context, orderID string) (Order, error) {
	o, err := orderRow(s.db.WithContext(ctx), orderID)
	if err != nil {
		return Order{}, err
	}
	if o.Status != order.StatusPaid {
		return o, fmt.Errorf("order %s is %s: %w", orderID, o.Status, order.ErrNotPayable)
	}
	return o, nil
}

// RecordPayment is the payment judged at the door, one conditional update:
// an open, unpaid order of userID's received before its deadline becomes
// PAID; with early, a QUEUED one only records paid_at (the deduction makes it
// PAID). A paid order returns unchanged; else order.ErrNotPayable/ErrNotFound.
func (s *Store) RecordPayment(ctx context.Context, orderID string, userID int64, receivedAt time.Time, early bool) (_ Order, changed bool, _ error) {
	return s.recordAtDoor(ctx, orderID, userID, receivedAt, early, true)
}

// RecordCancel is RecordPayment's cancel: CANCELLED (BUYER_CANCELLED).
func (s *Store) RecordCancel(ctx context.Context, orderID string, userID int64, receivedAt time.Time, early bool) (_ Order, changed bool, _ error) {
	return s.recordAtDoor(ctx, orderID, userID, receivedAt, early, false)
}

func (s *Store) recordAtDoor(ctx context.Context, orderID string, userID int64, receivedAt time.Time, early, pay bool) (Order, bool, error) {
	db := s.db.WithContext(ctx)
	open := []order.Status{order.StatusPendingPayment}
	if early {
		open = append(open, order.StatusQueued)
	}
	at := receivedAt.UTC().Truncate(time.Millisecond)
	action, set, args := "cancel", "status = ?, reason = ?", []any{order.StatusCancelled, order.ReasonBuyerCancelled}
	if pay {
		action, set, args = "payment", "paid_at = ?, reason = '', status = IF(status = ?, ?, status)", []any{at, order.StatusPendingPayment, order.StatusPaid}
	}
	args = append(args, orderID, userID, open, at)
	var o Order
	var changed bool
	err := retryDeadlock(ctx, func() error {
		return db.Transaction(func(tx *gorm.DB) (err error) {
			res := tx.Exec("UPDATE seckill_order SET "+set+" WHERE order_id = ? AND user_id = ? AND status IN ? AND paid_at IS NULL AND pay_by > ?", args...)
			if res.Error != nil {
				return fmt.Errorf("record %s of order %s: %w", action, orderID, res.Error)
			}
			if o, err = orderRow(tx, orderID); err != nil {
				return err
			}
			changed = res.RowsAffected == 1
			if changed && o.Status.Final() { // a pay of a QUEUED order stays QUEUED
				return recordEvent(tx, orderID)
			}
			return nil
		})
	})
	if err != nil {
		return Order{}, false, err
	}
	if o.UserID != userID {
		return Order{}, false, fmt.Errorf("order %s: %w", orderID, order.ErrNotFound)
	}
	switch {
	case changed:
		return o, true, nil
	case pay && (o.Status == order.StatusPaid || o.PaidQueued()):
		return o, false, nil
	}
	return o, false, fmt.Errorf("order %s is %s: %w", orderID, o.View().Status, order.ErrNotPayable)
}

// Early is the door's pay or cancel of the reservation M, with no row yet.
type Early struct {
	M          order.Message
	ReceivedAt time.Time
	Pay        bool
}

// InsertEarly inserts the rows of door decisions, all or none: QUEUED with
// paid_at for a pay, CANCELLED for a cancel. A row already there is
// ErrDuplicate; a decision after its deadline is order.ErrNotPayable.
func (s *Store) InsertEarly(ctx context.Context, ds []Early) ([]Order, error) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	rows := make([]Order, len(ds))
	for i, e := range ds {
		if e.M.PayBy == nil || !e.ReceivedAt.Before(*e.M.PayBy) {
			return nil, fmt.Errorf("order %s: received after its deadline: %w", e.M.OrderID, order.ErrNotPayable)
		}
		payBy := e.M.PayBy.UTC().Truncate(time.Millisecond)
		rows[i] = Order{OrderID: e.M.OrderID, UserID: e.M.UserID, ItemID: e.M.ItemID, Status: order.StatusCancelled,
			Reason: order.ReasonBuyerCancelled, PayBy: &payBy, CreatedAt: now, UpdatedAt: now}
		if e.Pay {
			at := e.ReceivedAt.UTC().Truncate(time.Millisecond)
			rows[i].Status, rows[i].Reason, rows[i].PaidAt = order.StatusQueued, "", &at
		}
	}
	db := s.db.WithContext(ctx)
	err := retryDeadlock(ctx, func() error {
		return db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Omit("id").Create(&rows).Error; err != nil {
				return err
			}
			for _, r := range rows {
				if r.Status.Final() {
					if err := recordEvent(tx, r.OrderID); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	switch {
	case isDuplicate(err):
		return nil, fmt.Errorf("record %d door decisions: %w: %w", len(ds), ErrDuplicate, err)
	case err != nil:
		return nil, fmt.Errorf("record %d door decisions: %w", len(ds), err)
	}
	return rows, nil
}

// retryDeadlock retries a write InnoDB rolled back as a deadlock victim (1213).
func retryDeadlock(ctx context.Context, write func() error) error {
	for attempt := 1; ; attempt++ {
		err := write()
		if mysqlErrNumber(err) != 1213 || attempt == 5 {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(attempt) * 5 * time.Millisecond):
		}
	}
}

type Closing struct {
	Status order.Status // CANCELLED or FAILED
	Reason string
	// AfterDeadline: close an open order only once its deadline plus this has
	// passed by the database's clock (else ErrNotDue). Zero closes at once.
	AfterDeadline time.Duration
}

// ErrNotDue: the order's payment window (plus grace) is still open.
var ErrNotDue = errors.New("payment window still open")

type CloseResult struct {
	Order    Order // the row as it is now: PAID, CANCELLED, FAILED or REFUNDED
	Restored bool  // this call gave the stock-row unit back
	Recorded bool  // false when the buyer's row belongs to another order id
	Refunded bool  // this call closed an order paid while QUEUED
}

// CloseOrder is the saga's compensation in one transaction that locks the
// order row: a PAID row is left alone; an open row is closed with c (paid
// while QUEUED: REFUNDED); a missing one is inserted closed; an unrestored
// deduction gives its unit back.
func (s *Store) CloseOrder(ctx context.Context, o Order, c Closing) (CloseResult, error) {
	if c.Status != order.StatusCancelled && c.Status != order.StatusFailed {
		return CloseResult{}, fmt.Errorf("close order %s: %s is not a closing status", o.OrderID, c.Status)
	}
	if r := []rune(c.Reason); len(r) > 512 { // VARCHAR(512)
		c.Reason = string(r[:512])
	}
	closed := Order{OrderID: o.OrderID, UserID: o.UserID, ItemID: o.ItemID, Status: c.Status, Reason: c.Reason}
	var out CloseResult
	// READ COMMITTED: a locking read of a missing row takes no gap lock that
	// closes and inserts of neighbouring order ids would wait on.
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		out = CloseResult{Order: closed}
		restore := func() (err error) {
			out.Restored, err = restoreDeduction(tx, o.OrderID)
			return err
		}
		row, err := orderRow(forUpdate(tx), o.OrderID)
		if errors.Is(err, order.ErrNotFound) {
			row = closed
			row.CreatedAt = time.Now().UTC().Truncate(time.Millisecond)
			row.UpdatedAt = row.CreatedAt
			ierr := tx.Omit("id").Create(&row).Error
			switch {
			case ierr == nil:
				out.Order, out.Recorded = row, true
				if err := recordEvent(tx, o.OrderID); err != nil {
					return err
				}
				if err := oweDue(tx, o.OrderID, row, true, closingReason(row), AskedBySaga); err != nil {
					return err
				}
				return restore()
			case !isDuplicate(ierr):
				return fmt.Errorf("insert closed order %s: %w", o.OrderID, ierr)
			}
			// This order's row was committed meanwhile (close it), or another
			// order holds the buyer's (user_id, item_id). The transaction goes on.
			if row, err = orderRow(forUpdate(tx), o.OrderID); errors.Is(err, order.ErrNotFound) {
				return restore()
			}
		}
		if err != nil {
			return err
		}
		out.Recorded = true
		if row.Status == order.StatusPaid {
			out.Order = row
			return nil
		}
		if !row.Status.Final() {
			if c.AfterDeadline > 0 && row.PayBy != nil {
				due := row.PayBy.Add(c.AfterDeadline)
				var past bool
				if err := tx.Raw("SELECT NOW(3) >= ?", due).Scan(&past).Error; err != nil {
					return fmt.Errorf("check deadline of order %s: %w", o.OrderID, err)
				}
				if !past {
					return fmt.Errorf("order %s due at %s: %w", o.OrderID, due.Format(time.RFC3339Nano), ErrNotDue)
				}
			}
			status := c.Status
			if row.PaidAt != nil {
				// Paid while QUEUED, never held a unit: the payment goes back.
				status, out.Refunded = order.StatusRefunded, true
			}
			if err := tx.Exec("UPDATE seckill_order SET status = ?, reason = ? WHERE id = ?", status, c.Reason, row.ID).Error; err != nil {
				return fmt.Errorf("close order %s: %w", o.OrderID, err)
			}
			if err := recordEvent(tx, o.OrderID); err != nil {
				return err
			}
			row.Status, row.Reason = status, c.Reason
		}
		out.Order = row
		if err := oweDue(tx, o.OrderID, row, true, closingReason(row), AskedBySaga); err != nil {
			return err
		}
		return restore()
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return CloseResult{}, err
	}
	return out, nil
}

// closingReason is why a closed order's payments are refunded.
func closingReason(row Order) string { return "order " + string(row.Status) + ": " + row.Reason }

// FindOrder reads an order by its order id (order.ErrNotFound when none).
func (s *Store) FindOrder(ctx context.Context, orderID string) (Order, error) {
	return orderRow(s.db.WithContext(ctx), orderID)
}

func orderRow(db *gorm.DB, orderID string) (Order, error) {
	return take[Order](db, order.ErrNotFound, "order "+orderID, "order_id = ?", orderID)
}

// ListUserOrders returns up to limit of a buyer's orders below before, newest first.
func (s *Store) ListUserOrders(ctx context.Context, userID int64, before string, limit int) ([]Order, error) {
	q := s.db.WithContext(ctx).Where("user_id = ?", userID)
	if before != "" {
		q = q.Where("order_id < ?", before)
	}
	var rows []Order
	if err := q.Order("order_id DESC").Limit(limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list orders of buyer %d: %w", userID, err)
	}
	return rows, nil
}

// CountOrders counts the orders of each item by status (index only).
func (s *Store) CountOrders(ctx context.Context, itemIDs []int64) (map[int64]map[order.Status]int64, error) {
	out := make(map[int64]map[order.Status]int64, len(itemIDs))
	if len(itemIDs) == 0 {
		return out, nil
	}
	var rows []struct {
		ItemID int64
		Status order.Status
		N      int64
	}
	err := s.db.WithContext(ctx).Raw("SELECT item_id, status, COUNT(*) AS n FROM seckill_order WHERE item_id IN ? GROUP BY item_id, status",
		itemIDs).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("count orders of %d items: %w", len(itemIDs), err)
	}
	for _, r := range rows {
		if out[r.ItemID] == nil {
			out[r.ItemID] = make(map[order.Status]int64)
		}
		out[r.ItemID][r.Status] = r.N
	}
	return out, nil
}

// DeductStock's refusals (ErrVersionConflict: every optimistic attempt lost).
var (
	ErrStockExhausted  = errors.New("stock row exhausted")
	ErrVersionConflict = errors.New("stock version conflict")
	ErrOrderClosed     = errors.New("order already closed")

	errVersionMiss     = errors.New("version miss")
	errAlreadyDeducted = errors.New("already deducted")
)

const deductAttempts = 50

// DeductStock takes one unit from the stock row for the order and makes it
// PENDING_PAYMENT (or PAID) with a deadline, at most once: decrement, marker
// and move are one transaction. deducted is false when it had already.
func (s *Store) DeductStock(ctx context.Context, orderID string, itemID int64, window time.Duration) (_ Order, deducted bool, err error) {
	// Optimistic writers of one row in one process would mostly lose to each
	// other: they take turns; the version check guards against other processes.
	unlock, err := s.rows.lock(ctx, itemID)
	if err != nil {
		return Order{}, false, err
	}
	defer unlock()
	db := s.db.WithContext(ctx)
	already := func() (Order, bool, error) {
		row, err := orderRow(db, orderID)
		return row, false, err
	}
	for attempt := 1; ; attempt++ {
		// Read outside the transaction: the UPDATE's version check makes it safe.
		st, err := stockRow(db.Select("stock", "version"), itemID)
		if err != nil {
			return Order{}, false, err
		}
		if st.Stock <= 0 {
			// A retry of an order that did deduct must not read as exhausted.
			var n int64
			if err := db.Model(&StockDeduction{}).Where("order_id = ?", orderID).Count(&n).Error; err != nil {
				return Order{}, false, fmt.Errorf("read deduction of order %s: %w", orderID, err)
			}
			if n > 0 {
				return already()
			}
			return Order{}, false, fmt.Errorf("item %d: %w", itemID, ErrStockExhausted)
		}
		var after Order
		err = db.Transaction(func(tx *gorm.DB) error {
			res := tx.Exec("UPDATE stock SET stock = stock - 1, version = version + 1 WHERE item_id = ? AND version = ? AND stock > 0",
				itemID, st.Version)
			if res.Error != nil {
				return fmt.Errorf("decrement stock of item %d: %w", itemID, res.Error)
			}
			if res.RowsAffected == 0 {
				return errVersionMiss
			}
			err := tx.Exec("INSERT INTO stock_deduction (order_id, item_id) VALUES (?, ?)", orderID, itemID).Error
			if isDuplicate(err) {
				return errAlreadyDeducted // rolls the decrement back
			}
			if err != nil {
				return fmt.Errorf("insert deduction of order %s: %w", orderID, err)
			}
			// Paid at the door while QUEUED: PAID here, with its unit.
			res = tx.Exec(`UPDATE seckill_order SET status = IF(paid_at IS NULL, ?, ?),
				pay_by = COALESCE(pay_by, NOW(3) + INTERVAL ? MICROSECOND)
				WHERE order_id = ? AND status IN (?, ?)`,
				order.StatusPendingPayment, order.StatusPaid, window.Microseconds(), orderID,
				order.StatusQueued, order.StatusPendingPayment)
			if res.Error != nil {
				return fmt.Errorf("order %s to %s: %w", orderID, order.StatusPendingPayment, res.Error)
			}
			if res.RowsAffected == 0 {
				return ErrOrderClosed // rolls the decrement and the marker back
			}
			if after, err = orderRow(tx, orderID); err == nil && after.Status == order.StatusPaid {
				err = recordEvent(tx, orderID) // paid while QUEUED: PAID now
			}
			return err
		})
		switch {
		case err == nil:
			return after, true, nil
		case errors.Is(err, errAlreadyDeducted):
			return already()
		case errors.Is(err, ErrOrderClosed):
			row, rerr := orderRow(db, orderID)
			if rerr != nil && !errors.Is(rerr, order.ErrNotFound) {
				return Order{}, false, rerr
			}
			return row, false, fmt.Errorf("order %s is %s: %w", orderID, row.Status, ErrOrderClosed)
		case !errors.Is(err, errVersionMiss):
			return Order{}, false, err
		case attempt >= deductAttempts:
			return Order{}, false, fmt.Errorf("item %d after %d attempts: %w", itemID, attempt, ErrVersionConflict)
		}
		pause := time.Duration(1+rand.IntN(4*min(attempt, 10))) * time.Millisecond
		select {
		case <-ctx.Done():
			return Order{}, false, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// rowLocks serializes this process's writers of one stock row.
type rowLocks struct{ items sync.Map } // item id -> chan struct{} (capacity 1)

func (l *rowLocks) lock(ctx context.Context, itemID int64) (func(), error) {
	v, _ := l.items.LoadOrStore(itemID, make(chan struct{}, 1))
	ch := v.(chan struct{})
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// restoreDeduction gives the order's deducted unit back, once.
func restoreDeduction(tx *gorm.DB, orderID string) (bool, error) {
	res := tx.Exec("UPDATE stock_deduction SET restored = TRUE WHERE order_id = ? AND restored = FALSE", orderID)
	if res.Error != nil {
		return false, fmt.Errorf("mark deduction of order %s restored: %w", orderID, res.Error)
	}
	if res.RowsAffected == 0 {
		return false, nil // never deducted, or already restored
	}
	res = tx.Exec(`UPDATE stock s JOIN stock_deduction d ON s.item_id = d.item_id
		SET s.stock = s.stock + 1, s.version = s.version + 1 WHERE d.order_id = ?`, orderID)
	if res.Error != nil {
		return false, fmt.Errorf("restore stock for order %s: %w", orderID, res.Error)
	}
	if res.RowsAffected != 1 {
		return false, fmt.Errorf("restore stock for order %s: stock row missing", orderID)
	}
	return true, nil
}

// SaleSecond is how many orders of an item were recorded (created_at), paid
// (paid_at) or refunded (a succeeded refund's updated_at) in one second,
// counted from the item's start_at.
type SaleSecond struct {
	ItemID int64
	Kind   string // accepted, paid or refunded
	Second int64
	N      int64
}

// CountBySecond counts the items' orders by kind and second since each
// item's start (one round trip; the orders are found by item_id's index,
// the refunds by their order's). A provider's paid_at is in whole seconds,
// so the first second counts what is less than a second before the start.
func (s *Store) CountBySecond(ctx context.Context, itemIDs []int64) ([]SaleSecond, error) {
	if len(itemIDs) == 0 {
		return nil, nil
	}
	const per = "SELECT o.item_id, '%[1]s' AS kind, TIMESTAMPDIFF(SECOND, i.start_at, %[2]s) AS second, COUNT(*) AS n " +
		"FROM %[3]s JOIN item i ON i.id = o.item_id WHERE o.item_id IN @ids AND TIMESTAMPDIFF(SECOND, i.start_at, %[2]s) >= 0%[4]s GROUP BY o.item_id, second"
	q := fmt.Sprintf(per, "accepted", "o.created_at", "seckill_order o", "") + " UNION ALL " +
		fmt.Sprintf(per, "paid", "o.paid_at", "seckill_order o", "") + " UNION ALL " +
		fmt.Sprintf(per, "refunded", "r.updated_at", "refunds r JOIN seckill_order o ON o.order_id = r.order_id", " AND r.status = 'succeeded'")
	var rows []SaleSecond
	if err := s.db.WithContext(ctx).Raw(q, sql.Named("ids", itemIDs)).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("count orders by second of %d items: %w", len(itemIDs), err)
	}
	return rows, nil
}
