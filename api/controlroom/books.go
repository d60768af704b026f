package controlroom

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/store"
)

// A books check is a click, never a poll: it reads at most BooksBudget of
// the provider's records (about a second of Stripe's 100 calls a second,
// behind the provider's limiter, which checkouts share), one check at a time
// per instance, and a check of the same sale within booksTTL is answered
// with the last one's reading.
const (
	BooksBudget  = 100
	booksTTL     = 10 * time.Second
	booksTimeout = 10 * time.Second // within the API's write timeout (15 s by default)
)

// Books is what the books route reads: the sale's snapshot (MySQL and Redis;
// the outbox and the sagas are optional) and the provider's own ledger.
type Books struct {
	Sources snapshot.Sources
	// Ledger: the provider (Recorder nil: SECKILL_PAYMENT_PROVIDER=door, no
	// provider to compare with: the answer has our books only).
	Ledger books.Ledger
	// As seckill reconcile judges (books.Options).
	RequirePayments bool
	Grace           time.Duration
}

// BooksMetrics count the books checks (NewBooksMetrics).
type BooksMetrics struct {
	Checks  *prometheus.CounterVec // by outcome
	Records prometheus.Counter     // the provider's records read
}

// Outcomes of a books check (seckill_books_checks_total).
const (
	BooksAgree         = "agree"          // every record read is what our books say
	BooksDiffer        = "differ"         // a provider_differs problem
	BooksProviderError = "provider_error" // the provider stopped answering: compared as far as read
	BooksNoProvider    = "no_provider"    // door: our books only
)

// NewBooksMetrics registers the books checks' counters on reg.
func NewBooksMetrics(reg prometheus.Registerer) BooksMetrics {
	m := BooksMetrics{
		Checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_books_checks_total",
			Help: "The control room's checks of a sale's books against the provider's own ledger, by outcome (agree, differ, provider_error, no_provider)."},
			[]string{"outcome"}),
		Records: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_books_check_records_total",
			Help: "The provider's payment records the control room's books checks read (calls taken from the provider's rate limit)."}),
	}
	reg.MustRegister(m.Checks, m.Records)
	return m
}

// BooksCheck is a sale's books against the provider's own ledger
// (docs/openapi.yaml, AdminItemBooks).
type BooksCheck struct {
	ItemID   int64     `json:"item_id"`
	Provider string    `json:"provider"` // door, testpay, stripe
	ReadAt   time.Time `json:"read_at"`
	Budget   int       `json:"budget"`
	// Payments: the sale's payments at the provider; ProviderRead of them
	// were read, the ones that took money or have a refund first.
	Payments     int `json:"payments"`
	ProviderRead int `json:"provider_read"`
	// Money: our books, the whole sale; MoneyRead: ours over the payments
	// read; ProviderMoney: the provider's over the same payments.
	Money         []store.Money   `json:"money"`
	MoneyRead     []store.Money   `json:"money_read"`
	ProviderMoney []store.Money   `json:"provider_money"`
	RefundsStuck  int             `json:"refunds_stuck"`
	Problems      []books.Problem `json:"problems"`
	// ProviderError: why the reads stopped early (the comparison covers the
	// records read before).
	ProviderError string `json:"provider_error,omitempty"`
}

// bookChecks serialise the checks and hold the last of each sale.
type bookChecks struct {
	one  chan struct{} // a token: one check at a time per instance
	mu   sync.Mutex
	last map[int64]BooksCheck
}

// GET /api/v1/admin/items/:id/books (admin): the sale's books, ours and the
// provider's, payment by payment within BooksBudget.
func (rm *Room) adminBooks(c *gin.Context) error {
	id, ok := apierr.ParseID(c.Param("id"))
	if !ok {
		return apierr.BadRequest("id: must be a positive integer")
	}
	if rm.d.Books.Sources.MySQL == nil || rm.d.Books.Sources.Redis == nil {
		return apierr.ErrUnavailable.With("this instance does not read the books")
	}
	b, fresh := rm.lastBooks(id)
	if !fresh {
		ctx, cancel := context.WithTimeout(c.Request.Context(), booksTimeout)
		defer cancel()
		var err error
		if b, err = rm.checkOnce(ctx, id); err != nil {
			return err
		}
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, b)
	return nil
}

// checkOnce checks the sale's books when no other check runs on this
// instance (waiting for it), unless the one it waited for was this sale's.
func (rm *Room) checkOnce(ctx context.Context, id int64) (BooksCheck, error) {
	select {
	case rm.checks.one <- struct{}{}:
	case <-ctx.Done():
		return BooksCheck{}, apierr.ErrUnavailable.With("another books check is still running on this instance; try again")
	}
	defer func() { <-rm.checks.one }()
	if b, fresh := rm.lastBooks(id); fresh {
		return b, nil
	}
	b, err := rm.checkBooks(ctx, id)
	if err != nil {
		return BooksCheck{}, err
	}
	rm.checks.mu.Lock()
	for old, ob := range rm.checks.last {
		if b.ReadAt.Sub(ob.ReadAt) >= booksTTL {
			delete(rm.checks.last, old)
		}
	}
	rm.checks.last[id] = b
	rm.checks.mu.Unlock()
	return b, nil
}

// lastBooks is the sale's last check while it is younger than booksTTL.
func (rm *Room) lastBooks(id int64) (BooksCheck, bool) {
	rm.checks.mu.Lock()
	defer rm.checks.mu.Unlock()
	b, ok := rm.checks.last[id]
	if ok && rm.d.Now().Sub(b.ReadAt) >= booksTTL {
		delete(rm.checks.last, id)
		ok = false
	}
	return b, ok
}

// checkBooks reads the sale's snapshot and the provider's records of its
// payments, and judges them as seckill reconcile does.
func (rm *Room) checkBooks(ctx context.Context, id int64) (BooksCheck, error) {
	bk := rm.d.Books
	it, err := snapshot.Load(ctx, bk.Sources, id)
	if err != nil {
		return BooksCheck{}, err
	}
	led := bk.Ledger
	if led.Budget == 0 {
		led.Budget = BooksBudget
	}
	recs, rerr := led.Read(ctx, it)
	sale := books.Judge(it, books.Options{RequirePayments: bk.RequirePayments, Grace: bk.Grace, Records: recs})
	b := BooksCheck{ItemID: id, Provider: "door", ReadAt: rm.d.Now().UTC(), Budget: led.Budget, ProviderRead: sale.ProviderRead,
		Money: orEmpty(sale.Money), MoneyRead: orEmpty(sale.MoneyRead), ProviderMoney: orEmpty(sale.Provider),
		RefundsStuck: sale.Stuck, Problems: sale.Problems}
	if b.Problems == nil {
		b.Problems = []books.Problem{}
	}
	outcome := BooksNoProvider
	if led.Recorder != nil {
		b.Provider, outcome = led.Name, BooksAgree
		for _, p := range it.MySQL.Payments {
			if p.Provider == led.Name {
				b.Payments++
			}
		}
	}
	switch {
	case rerr != nil:
		b.ProviderError, outcome = rerr.Error(), BooksProviderError
	case slices.ContainsFunc(b.Problems, func(p books.Problem) bool { return p.Kind == books.ProviderDiffers }):
		outcome = BooksDiffer
	}
	rm.d.BooksMetrics.Checks.WithLabelValues(outcome).Inc()
	rm.d.BooksMetrics.Records.Add(float64(len(recs)))
	return b, nil
}

func orEmpty(ms []store.Money) []store.Money {
	if ms == nil {
		return []store.Money{}
	}
	return ms
}
