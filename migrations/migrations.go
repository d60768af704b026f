// Package migrations embeds the SQL schema and applies it with golang-migrate.
package migrations

import (
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

//go:embed *.sql
var files embed.FS

type Migrator struct {
	m *migrate.Migrate
}

// New opens a migrator on dsn (a go-sql-driver/mysql DSN). Close it when done.
func New(dsn string) (*Migrator, error) {
	db, err := sql.Open("mysql", dsn+"&multiStatements=true")
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	driver, err := mysql.WithInstance(db, &mysql.Config{})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrate driver: %w", err)
	}
	src, err := iofs.New(files, ".")
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrate source: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "mysql", driver)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return &Migrator{m: m}, nil
}

// Up applies every pending migration. Nothing to do is not an error.
func (g *Migrator) Up() error { return changed("up", g.m.Up()) }

func (g *Migrator) Down() error { return changed("down", g.m.Down()) }

func changed(what string, err error) error {
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate %s: %w", what, err)
	}
	return nil
}

// Version returns the applied version and whether it is dirty (0 when none).
func (g *Migrator) Version() (uint, bool, error) {
	v, dirty, err := g.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("migrate version: %w", err)
	}
	return v, dirty, nil
}

func (g *Migrator) Close() error {
	srcErr, dbErr := g.m.Close()
	return errors.Join(srcErr, dbErr)
}
