package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/migrations"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// An item created without a currency has the column's default, EUR; one
// created with a currency keeps it.
func TestItemCurrency(t *testing.T) {
	t.Parallel()
	st, _ := testkit.MySQL(t)
	if it := newItem(t, st, 1); it.Currency != "EUR" {
		t.Fatalf("an item without a currency has %q, want EUR", it.Currency)
	}
	it, err := st.CreateItem(context.Background(), store.Item{Name: "yen", PriceCents: 500, Currency: "JPY", StockTotal: 1,
		StartAt: time.Now(), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: 60})
	if err != nil || it.Currency != "JPY" {
		t.Fatalf("item %+v, %v; want JPY", it, err)
	}
}

// Every migration goes down and up again: the schema can be rolled back.
func TestMigrationsRoundTrip(t *testing.T) {
	t.Parallel()
	_, cfg := testkit.MySQL(t)
	dsn, err := cfg.DSN()
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrations.New(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Close() }()
	latest, _, err := m.Version()
	if err != nil || latest < 5 {
		t.Fatalf("version %d, %v: want 5 (item.currency) or later", latest, err)
	}
	if err := m.Down(); err != nil {
		t.Fatal(err)
	}
	if v, _, err := m.Version(); err != nil || v != 0 {
		t.Fatalf("after down: version %d, %v", v, err)
	}
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	if v, dirty, err := m.Version(); err != nil || v != latest || dirty {
		t.Fatalf("after up: version %d (dirty %v), %v; want %d", v, dirty, err, latest)
	}
}

// A retried add answers what the first add left, not what later adds made of
// the item since: the operator's retry is told the same result twice.
func TestAddStockReplayAnswersTheFirstResult(t *testing.T) {
	t.Parallel()
	st, _ := testkit.MySQL(t)
	it := newItem(t, st, 10)
	ctx := context.Background()
	none := func(context.Context, store.Item) error { return nil }
	first, replayed, err := st.AddStock(ctx, it.ID, 5, "click-1", "add-1", none)
	if err != nil || replayed || first.StockTotal != it.StockTotal+5 {
		t.Fatalf("first add: %+v replayed=%v %v", first, replayed, err)
	}
	if _, _, err := st.AddStock(ctx, it.ID, 3, "click-2", "add-2", none); err != nil {
		t.Fatal(err)
	}
	again, replayed, err := st.AddStock(ctx, it.ID, 5, "click-1", "add-3", none)
	if err != nil || !replayed {
		t.Fatalf("retry: replayed=%v %v", replayed, err)
	}
	if again.StockTotal != first.StockTotal {
		t.Fatalf("retry answered stock_total %d, the first add left %d", again.StockTotal, first.StockTotal)
	}
}
