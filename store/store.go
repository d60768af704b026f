// Package store is the MySQL system of record (gorm): items, the
// optimistic-lock stock row and orders.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/ledger"
	"github.com/seckill/seckill/order"
)

// ErrDuplicate: the buyer holds another order for the item (or the order ids are taken).
var ErrDuplicate = errors.New("duplicate")

type Store struct {
	db   *gorm.DB
	pool *sql.DB
	rows rowLocks // one stock-row writer per item in this process
}

func Open(ctx context.Context, cfg config.MySQL) (*Store, error) {
	dsn, err := cfg.DSN()
	if err != nil {
		return nil, err
	}
	db, err := gorm.Open(mysql.Open(dsn), &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		// No statement cache: gorm prepares on a pool connection even inside a
		// transaction, so row-locking transactions could wait on each other.
		PrepareStmt: false,
		NowFunc:     func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		return nil, fmt.Errorf("open mysql %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("mysql pool: %w", err)
	}
	sqlDB.SetMaxOpenConns(cfg.MaxOpenConns)
	sqlDB.SetMaxIdleConns(cfg.MaxIdleConns)
	sqlDB.SetConnMaxLifetime(cfg.ConnMaxLife)
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("ping mysql %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	return &Store{db: db, pool: sqlDB}, nil
}

// DB is the gorm handle, for tests and tools.
func (s *Store) DB() *gorm.DB { return s.db }

func (s *Store) Ping(ctx context.Context) error { return s.pool.PingContext(ctx) }

func (s *Store) Close() error { return s.pool.Close() }

// take reads the one row of T matching query; notFound when there is none.
func take[T any](db *gorm.DB, notFound error, what, query string, args ...any) (T, error) {
	var row T
	err := db.Where(query, args...).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return row, fmt.Errorf("%s: %w", what, notFound)
	}
	if err != nil {
		return row, fmt.Errorf("read %s: %w", what, err)
	}
	return row, nil
}

func forUpdate(db *gorm.DB) *gorm.DB { return db.Clauses(clause.Locking{Strength: "UPDATE"}) }

// isDuplicate: a unique-key violation (MySQL error 1062).
func isDuplicate(err error) bool {
	return errors.Is(err, gorm.ErrDuplicatedKey) || mysqlErrNumber(err) == 1062
}

func mysqlErrNumber(err error) uint16 {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// Item is a row of `item`. Its JSON is the API's (sale.ItemView).
type Item struct {
	ID         int64     `gorm:"column:id;primaryKey" json:"id"`
	Name       string    `gorm:"column:name" json:"name"`
	PriceCents int64     `gorm:"column:price_cents" json:"price_cents"`
	Currency   string    `gorm:"column:currency" json:"currency"` // ISO 4217; empty: the column's default
	StockTotal int64     `gorm:"column:stock_total" json:"stock_total"`
	StartAt    time.Time `gorm:"column:start_at" json:"start_at"`
	EndAt      time.Time `gorm:"column:end_at" json:"end_at"`
	// EndKey is the Idempotency-Key of the request that ended the sale.
	EndKey                *string   `gorm:"column:end_key" json:"-"`
	PaymentTimeoutSeconds int       `gorm:"column:payment_timeout_seconds" json:"payment_timeout_seconds"`
	CreatedAt             time.Time `gorm:"column:created_at" json:"-"`
}

func (Item) TableName() string { return "item" }

type Stock struct {
	ID      int64 `gorm:"column:id;primaryKey"`
	ItemID  int64 `gorm:"column:item_id"`
	Stock   int64 `gorm:"column:stock"`
	Version int64 `gorm:"column:version"`
}

func (Stock) TableName() string { return "stock" }

// StockAdd is an applied add (Key: its Idempotency-Key; StockTotal: after it).
type StockAdd struct {
	AddID      string    `gorm:"column:add_id;primaryKey"`
	ItemID     int64     `gorm:"column:item_id"`
	Key        *string   `gorm:"column:idempotency_key"`
	Units      int64     `gorm:"column:units"`
	StockTotal int64     `gorm:"column:stock_total"`
	CreatedAt  time.Time `gorm:"column:created_at;->"`
}

func (StockAdd) TableName() string { return "stock_add" }

type Order struct {
	ID      int64        `gorm:"column:id;primaryKey"`
	OrderID string       `gorm:"column:order_id"`
	UserID  int64        `gorm:"column:user_id"`
	ItemID  int64        `gorm:"column:item_id"`
	Status  order.Status `gorm:"column:status"`
	Reason  string       `gorm:"column:reason"`
	PayBy   *time.Time   `gorm:"column:pay_by"`
	// PaidAt is when the API received the payment. A QUEUED row with it holds
	// no unit yet: the deduction makes it PAID (or the saga REFUNDED).
	PaidAt    *time.Time `gorm:"column:paid_at"`
	CreatedAt time.Time  `gorm:"column:created_at"`
	UpdatedAt time.Time  `gorm:"column:updated_at"`
}

func (Order) TableName() string { return "seckill_order" }

// View is the row's order view (paid while QUEUED: PAID, settling).
func (o Order) View() order.View {
	v := order.View{OrderID: o.OrderID, ItemID: o.ItemID, UserID: o.UserID, Status: o.Status,
		Reason: o.Reason, PayBy: o.PayBy, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt}
	if o.PaidQueued() {
		v.Status, v.Settling = order.StatusPaid, true
	}
	return v
}

// Reservation is the order's Redis reservation as far as the row knows it.
func (o Order) Reservation() order.Message {
	m := order.Message{OrderID: o.OrderID, ItemID: o.ItemID, UserID: o.UserID, ReservedAt: order.IDTime(o.OrderID, o.CreatedAt).UTC()}
	if o.PayBy != nil {
		payBy := o.PayBy.UTC()
		m.PayBy = &payBy
	}
	return m
}

// Facts is what the ledger judges of o.
func (o Order) Facts() ledger.Order {
	return ledger.Order{OrderID: o.OrderID, UserID: o.UserID, Status: o.Status, Reason: o.Reason, PayBy: o.PayBy, PaidAt: o.PaidAt}
}

// PaidQueued: paid while QUEUED, holding no stock-row unit yet.
func (o Order) PaidQueued() bool { return o.Status == order.StatusQueued && o.PaidAt != nil }

// StockDeduction marks that an order took a unit from the stock row.
type StockDeduction struct {
	OrderID   string    `gorm:"column:order_id;primaryKey"`
	ItemID    int64     `gorm:"column:item_id"`
	Restored  bool      `gorm:"column:restored"`
	CreatedAt time.Time `gorm:"column:created_at"`
	UpdatedAt time.Time `gorm:"column:updated_at"`
}

func (StockDeduction) TableName() string { return "stock_deduction" }
