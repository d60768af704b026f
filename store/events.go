package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/seckill/order"
)

// OrderEvent is a row of order_events, the outbox of the orders' settled
// changes: written in the transaction of the change, published by the worker.
type OrderEvent struct {
	ID          int64        `gorm:"column:id;primaryKey"`
	EventID     string       `gorm:"column:event_id"`
	OrderID     string       `gorm:"column:order_id"`
	Seq         int          `gorm:"column:seq"`
	Status      order.Status `gorm:"column:status"`
	Payload     string       `gorm:"column:payload"` // order.Event as JSON
	CreatedAt   time.Time    `gorm:"column:created_at"`
	PublishedAt *time.Time   `gorm:"column:published_at"`
}

func (OrderEvent) TableName() string { return "order_events" }

// recordEvent adds the event of the order's status as it is now in tx, which
// has just changed it to a settled one: amount and currency are the item's
// unless a payment (whose success is the row's paid_at) or a confirmed
// refund says otherwise. A repeat of the event is a no-op (uk event_id).
func recordEvent(tx *gorm.DB, orderID string) error {
	var f struct {
		UserID, ItemID, Amount, Seq int64
		Status                      order.Status
		Reason, Currency            string
		UpdatedAt                   time.Time
		PaymentID, PayCurrency      sql.NullString
		PayAmount, RefundAmount     sql.NullInt64
		RefundID, RefundPaymentID   sql.NullString
		RefundCurrency              sql.NullString
	}
	err := tx.Raw(`SELECT o.user_id, o.item_id, o.status, o.reason, o.updated_at,
		COALESCE(i.price_cents, 0) AS amount, COALESCE(i.currency, '') AS currency,
		p.provider_payment_id AS payment_id, p.amount AS pay_amount, p.currency AS pay_currency,
		r.provider_refund_id AS refund_id, r.provider_payment_id AS refund_payment_id, r.amount AS refund_amount, r.currency AS refund_currency,
		(SELECT COUNT(*) FROM order_events e WHERE e.order_id = o.order_id) + 1 AS seq
		FROM seckill_order o LEFT JOIN item i ON i.id = o.item_id
		LEFT JOIN payments p ON p.id = (SELECT id FROM payments WHERE order_id = o.order_id AND status = ? AND succeeded_at = o.paid_at ORDER BY id LIMIT 1)
		LEFT JOIN refunds r ON o.status = ? AND r.id = (SELECT id FROM refunds WHERE order_id = o.order_id AND status = ? ORDER BY id DESC LIMIT 1)
		WHERE o.order_id = ?`, PaymentSucceeded, order.StatusRefunded, RefundSucceeded, orderID).Scan(&f).Error
	if err != nil {
		return fmt.Errorf("read event facts of order %s: %w", orderID, err)
	}
	if f.Status == "" {
		return fmt.Errorf("event of order %s: %w", orderID, order.ErrNotFound)
	}
	e := order.Event{EventID: order.EventID(orderID, f.Status), OrderID: orderID, Seq: int(f.Seq), BuyerID: f.UserID,
		ItemID: f.ItemID, Status: f.Status, Reason: f.Reason, AmountMinor: f.Amount, Currency: f.Currency, OccurredAt: f.UpdatedAt.UTC()}
	if f.PaymentID.Valid {
		e.PaymentID, e.AmountMinor, e.Currency = f.PaymentID.String, f.PayAmount.Int64, f.PayCurrency.String
	}
	if f.RefundID.Valid {
		e.PaymentID, e.RefundID, e.AmountMinor, e.Currency = f.RefundPaymentID.String, f.RefundID.String, f.RefundAmount.Int64, f.RefundCurrency.String
	}
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode event %s: %w", e.EventID, err)
	}
	err = tx.Exec("INSERT INTO order_events (event_id, order_id, seq, status, payload, created_at) VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id",
		e.EventID, orderID, e.Seq, e.Status, body, e.OccurredAt).Error
	if err != nil {
		return fmt.Errorf("record event %s: %w", e.EventID, err)
	}
	return nil
}

// UnpublishedEvents are up to limit events not yet published, oldest first.
func (s *Store) UnpublishedEvents(ctx context.Context, limit int) ([]OrderEvent, error) {
	var evs []OrderEvent
	if err := s.db.WithContext(ctx).Where("published_at IS NULL").Order("id").Limit(limit).Find(&evs).Error; err != nil {
		return nil, fmt.Errorf("read unpublished order events: %w", err)
	}
	return evs, nil
}

// EventsSince are up to limit events created at or after since with an id
// above afterID, oldest first, published or not (a replay).
func (s *Store) EventsSince(ctx context.Context, since time.Time, afterID int64, limit int) ([]OrderEvent, error) {
	var evs []OrderEvent
	err := s.db.WithContext(ctx).Where("id > ? AND created_at >= ?", afterID, since.UTC()).Order("id").Limit(limit).Find(&evs).Error
	if err != nil {
		return nil, fmt.Errorf("read order events since %s: %w", since.Format(time.RFC3339), err)
	}
	return evs, nil
}

// MarkPublished records that the broker stored the events of ids.
func (s *Store) MarkPublished(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.db.WithContext(ctx).Exec("UPDATE order_events SET published_at = NOW(3) WHERE id IN ? AND published_at IS NULL", ids).Error
	if err != nil {
		return fmt.Errorf("mark %d order events published: %w", len(ids), err)
	}
	return nil
}

// Lease is a MySQL named lock (GET_LOCK) of this database, held by one
// connection: it is lost with the connection.
type Lease struct {
	conn *sql.Conn
	name string
}

// TryLease takes the named lock if no session holds it (nil, nil when one does).
func (s *Store) TryLease(ctx context.Context, name string) (*Lease, error) {
	conn, err := s.pool.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(CONCAT(DATABASE(), '.', ?), 0)", name).Scan(&got); err != nil || got.Int64 != 1 {
		_ = conn.Close()
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		return nil, nil
	}
	return &Lease{conn: conn, name: name}, nil
}

// Held reports whether the lease's session still holds the lock.
func (l *Lease) Held(ctx context.Context) bool {
	var mine sql.NullBool
	err := l.conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(CONCAT(DATABASE(), '.', ?)) = CONNECTION_ID()", l.name).Scan(&mine)
	return err == nil && mine.Bool
}

// Release gives the lock up; a connection that may still hold it is closed,
// not returned to the pool.
func (l *Lease) Release() {
	if _, err := l.conn.ExecContext(context.Background(), "DO RELEASE_LOCK(CONCAT(DATABASE(), '.', ?))", l.name); err != nil {
		_ = l.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = l.conn.Close()
}

// eventIf records the order's event when res, the update that settles it, changed its row.
func eventIf(tx, res *gorm.DB, orderID string) error {
	if res.Error != nil || res.RowsAffected == 0 {
		return res.Error
	}
	return recordEvent(tx, orderID)
}
