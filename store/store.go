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
)

// ErrDuplicate: the buyer holds another order for the item, or (InsertEarly)
// a row holds one of its order ids.
var ErrDuplicate = errors.New("duplicate")

type Store struct {
	db   *gorm.DB
	pool *sql.DB
	rows rowLocks // one stock-row writer per item in this process
}

// Open connects and pings the database.
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
