package sale

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// blocking is a catalog, live figures and announcer whose reload and marks
// load hold until told (reload) or until their context ends (marks).
type blocking struct {
	item       store.Item
	reloading  chan struct{} // closed when the announced item's reload reads MySQL
	release    chan struct{} // closed by the test: the reload's read answers
	marking    chan struct{} // closed when the marks load reads Redis
	marksEnded chan struct{} // closed when the marks load saw its context end
}

func (b *blocking) CreateItem(context.Context, store.Item) (store.Item, error) { return b.item, nil }
func (b *blocking) ListItems(context.Context) ([]store.Item, error)            { return []store.Item{b.item}, nil }
func (b *blocking) GetItem(context.Context, int64) (store.Item, error) {
	close(b.reloading)
	<-b.release
	return b.item, nil
}

func (b *blocking) LeftMany(context.Context, []int64) (map[int64]int64, error) { return nil, nil }
func (b *blocking) Pulses(context.Context, []int64) (map[int64]stock.Pulse, error) {
	return map[int64]stock.Pulse{}, nil
}
func (b *blocking) MarkedBuyers(ctx context.Context, _, _ int64) (map[int64]struct{}, bool, error) {
	close(b.marking)
	<-ctx.Done()
	close(b.marksEnded)
	return nil, false, ctx.Err()
}

func (b *blocking) AnnounceItem(context.Context, int64, bool) (int64, error) { return 0, nil }
func (b *blocking) WatchUnitsBack(ctx context.Context, _ func(int64))        { <-ctx.Done() }
func (b *blocking) WatchItems(ctx context.Context, fn func(int64)) {
	fn(b.item.ID)
	<-ctx.Done()
}

func waitClosed(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not happen", what)
	}
}

// Run owns every goroutine the read model starts: an announced change's
// reload and a sold-out item's marks load run under Run's context, and Run
// returns only once they have ended.
func TestRunOwnsItsGoroutines(t *testing.T) {
	now := time.Now()
	b := &blocking{item: store.Item{ID: 7, StockTotal: 1, StartAt: now.Add(-time.Minute), EndAt: now.Add(time.Hour)},
		reloading: make(chan struct{}), release: make(chan struct{}), marking: make(chan struct{}), marksEnded: make(chan struct{})}
	s := Register(gin.New(), Deps{Catalog: b, Live: b, Announcer: b, Refresh: time.Hour,
		Registry: prometheus.NewRegistry(), Log: slog.New(slog.DiscardHandler), Now: time.Now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()

	waitClosed(t, b.reloading, "the announced item's reload")
	ci, err := s.Items().Peek(b.item.ID)
	if ci == nil || err != nil {
		t.Fatalf("item %d not loaded by Run: %v", b.item.ID, err)
	}
	s.Items().MarkSoldOut(ci) // sold out: its buyer marks are loaded
	waitClosed(t, b.marking, "the sold-out item's marks load")

	cancel()
	waitClosed(t, b.marksEnded, "the marks load's end with Run's context")
	select {
	case <-done:
		t.Fatal("Run returned while the reload it started was still running")
	case <-time.After(100 * time.Millisecond):
	}
	close(b.release)
	waitClosed(t, done, "Run's return once the reload ended")
}
