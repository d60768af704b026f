package books

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/store"
)

// Recorder reads a payment's record in the provider's own ledger
// (provider.Provider, behind provider.Guard: its limiter paces the reads).
type Recorder interface {
	Record(ctx context.Context, paymentID string) (provider.Record, error)
}

// Ledger is the provider whose own books the books are held against.
type Ledger struct {
	Name     string // its name in payments.provider (testpay, stripe)
	Recorder Recorder
	// Budget: the most records read per item and run (0: DefaultRecordBudget),
	// so that a check leaves the provider's rate limit to checkouts; the
	// payments that took money or have a refund are read first.
	Budget int
}

// DefaultRecordBudget is a Ledger's Budget when unset: at Stripe's 100
// calls a second, about 4 s of one account's rate for a 2,000-unit sale.
const DefaultRecordBudget = 400

// Read reads the records of the item's payments through l, within its
// budget. A nil Recorder reads nothing (nil: the books hold only our copies).
func (l Ledger) Read(ctx context.Context, it *snapshot.Item) (map[string]provider.Record, error) {
	if l.Recorder == nil {
		return nil, nil
	}
	refunded := map[int64]bool{}
	for _, r := range it.MySQL.Refunds {
		refunded[r.PaymentID] = true
	}
	ps := slices.DeleteFunc(slices.Clone(it.MySQL.Payments), func(p store.Payment) bool { return p.Provider != l.Name })
	weight := func(p store.Payment) int {
		if Took(p) || refunded[p.ID] {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(ps, func(a, b store.Payment) int { return cmp.Compare(weight(a), weight(b)) })
	budget := cmp.Or(l.Budget, DefaultRecordBudget)
	out := make(map[string]provider.Record, min(len(ps), budget))
	for _, p := range ps[:min(len(ps), budget)] {
		rec, err := l.Recorder.Record(ctx, p.ProviderPaymentID)
		if err != nil {
			return out, fmt.Errorf("read the provider's record of payment %s (order %s): %w", p.ProviderPaymentID, p.OrderID, err)
		}
		out[p.ProviderPaymentID] = rec
	}
	return out, nil
}
