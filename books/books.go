// Package books judges an item's money on its snapshot: every payment that
// took money paid a paid order or is refunded, every refund is of such a
// payment, and captured − refunded − owed = Σ price of the paid orders, per
// currency. The invariant checker reports its problems, seckill reconcile
// starts the refunds missing, the worker exports its totals.
package books

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/seckill/seckill/ledger"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/store"
)

// Problem kinds (docs/runbook.md).
const (
	PaidWithoutPayment   = "paid_order_payment"     // a paid order without exactly one succeeded payment of its price
	RefundMissing        = "refund_missing"         // money owed back, no refund asked, past the grace
	RefundStuck          = "refund_stuck"           // a refund asked, not confirmed past the grace
	RefundWithoutPayment = "refund_without_payment" // a refund of no payment, of one that took no money, or of another amount
	Unbalanced           = "books_unbalanced"       // captured − refunded − owed != Σ price of the paid orders
	// PaidInTimeNotPaid: the provider confirmed a payment before pay_by and
	// its order does not hold its unit (ledger.Owed): a broken promise,
	// whether or not the money went back.
	PaidInTimeNotPaid = "paid_in_time_not_paid"
	// ProviderDiffers: the provider's own ledger of a payment (captured,
	// refunded, disputed) is not what our books say of it.
	ProviderDiffers = "provider_differs"
)

// Kinds are the problem kinds, in report order.
var Kinds = []string{PaidInTimeNotPaid, ProviderDiffers, Unbalanced, PaidWithoutPayment, RefundMissing, RefundStuck, RefundWithoutPayment}

// Options say which paid orders the books hold and how long a refund may take.
type Options struct {
	// RequirePayments: every paid order was paid by a provider payment
	// (SECKILL_PAYMENT_PROVIDER=stripe: only a verified notification pays).
	// Otherwise an order no payment paid was paid at the door (door, the
	// test provider's instant card) and is out of the books.
	RequirePayments bool
	// Grace: how long money owed back may go without a confirmed refund.
	Grace time.Duration
	// Records: the provider's own ledger of the item's payments read so far,
	// by provider payment id (nil: not read). Each is compared with ours.
	Records map[string]provider.Record
}

type Problem struct {
	Kind      string `json:"kind"`
	OrderID   string `json:"order_id,omitempty"`
	PaymentID string `json:"payment_id,omitempty"` // the provider's
	Detail    string `json:"detail"`
}

// Sale is an item's books. Money's RefundsPending is owed back and not
// confirmed (asked or not); Stuck counts those past the grace.
type Sale struct {
	ItemID int64         `json:"item_id"`
	Money  []store.Money `json:"money"`
	// Provider: the same figures as the provider's own ledger has them, over
	// the payments whose record was read (ProviderRead of them; a payment
	// not read yet is in Money only).
	Provider     []store.Money `json:"provider,omitempty"`
	ProviderRead int           `json:"provider_read,omitempty"`
	// MoneyRead: our figures over the same payments as Provider (what we
	// captured of them, the refunds the provider confirmed, the refunds
	// asked and not confirmed), so a check within a budget compares like
	// with like.
	MoneyRead []store.Money `json:"money_read,omitempty"`
	Stuck     int           `json:"refunds_stuck"`
	Problems  []Problem     `json:"problems,omitempty"`
}

// Took reports whether a payment took money.
func Took(p store.Payment) bool {
	return p.Status == store.PaymentSucceeded || p.Status == store.PaymentMismatch
}

// Judge keeps the item's books on its snapshot.
func Judge(it *snapshot.Item, o Options) Sale {
	s := Sale{ItemID: it.ID}
	add := func(m store.Money) { s.Money = store.AddMoney(s.Money, m) }
	problem := func(kind, orderID, paymentID, format string, args ...any) {
		s.Problems = append(s.Problems, Problem{Kind: kind, OrderID: orderID, PaymentID: paymentID, Detail: fmt.Sprintf(format, args...)})
	}
	refundOf := make(map[int64]store.Refund, len(it.MySQL.Refunds))
	for _, r := range it.MySQL.Refunds {
		refundOf[r.PaymentID] = r
	}
	payments := make(map[int64]store.Payment, len(it.MySQL.Payments))
	kept := map[string][]store.Payment{} // by order: the payments that paid it
	for _, p := range it.MySQL.Payments {
		payments[p.ID] = p
		if !Took(p) {
			continue
		}
		add(store.Money{Currency: p.Currency, Captured: p.Amount})
		row, found := it.Orders[p.OrderID]
		if ledger.Owed(p.Facts(), row.Facts(), found, closed(it, p, o.Grace)) {
			problem(PaidInTimeNotPaid, p.OrderID, p.ProviderPaymentID, "payment %s of %d %s confirmed at %s, before pay_by %s; order %s",
				p.ProviderPaymentID, p.Amount, p.Currency, p.SucceededAt.UTC().Format(time.RFC3339Nano), p.PayBy.UTC().Format(time.RFC3339Nano),
				status(row, found)+reasonOf(row, found))
		}
		r, asked := refundOf[p.ID]
		switch {
		case !ledger.RefundDue(p.Facts(), row.Facts(), found):
			kept[p.OrderID] = append(kept[p.OrderID], p)
			continue
		case asked && r.Status == store.RefundSucceeded:
			continue
		}
		add(store.Money{Currency: p.Currency, RefundsPending: p.Amount})
		since, kind, what := p.UpdatedAt, RefundMissing, "no refund asked"
		if found {
			since = later(since, row.UpdatedAt)
		}
		if asked {
			since, kind, what = r.CreatedAt, RefundStuck, "refund "+r.Status+" since "+r.CreatedAt.UTC().Format(time.RFC3339)
		}
		if it.At.Sub(since) > o.Grace {
			s.Stuck++
			problem(kind, p.OrderID, p.ProviderPaymentID, "payment %s of %d %s (%s) owed back, order %s: %s",
				p.ProviderPaymentID, p.Amount, p.Currency, p.Status, status(row, found), what)
		}
	}
	if o.Records != nil {
		s.compare(it, o.Records, refundOf, problem)
	}
	for _, r := range it.MySQL.Refunds {
		if r.Status == store.RefundSucceeded {
			add(store.Money{Currency: r.Currency, Refunded: r.Amount})
		}
		p, ok := payments[r.PaymentID]
		if !ok || !Took(p) || p.Amount != r.Amount || p.Currency != r.Currency || p.OrderID != r.OrderID {
			problem(RefundWithoutPayment, r.OrderID, r.ProviderPaymentID, "refund %d (%s) of %d %s: its payment is %s",
				r.ID, r.Status, r.Amount, r.Currency, paymentOf(p, ok))
		}
	}
	price, cur := it.MySQL.Item.PriceCents, it.MySQL.Item.Currency
	var paid int64
	for _, row := range it.MySQL.Orders {
		ks := kept[row.OrderID]
		if row.Status != order.StatusPaid && !row.PaidQueued() || len(ks) == 0 && !o.RequirePayments {
			continue
		}
		paid++
		if len(ks) != 1 || ks[0].Amount != price || ks[0].Currency != cur {
			id := ""
			if len(ks) > 0 {
				id = ks[0].ProviderPaymentID
			}
			problem(PaidWithoutPayment, row.OrderID, id, "%s order with %d payment(s) that paid it, want one of %d %s: %s",
				row.Status, len(ks), price, cur, amounts(ks))
		}
	}
	add(store.Money{Currency: cur})
	slices.SortFunc(s.Money, func(a, b store.Money) int { return cmp.Compare(a.Currency, b.Currency) })
	for _, m := range s.Money {
		want := int64(0)
		if m.Currency == cur {
			want = paid * price
		}
		if got := m.Captured - m.Refunded - m.RefundsPending; got != want {
			problem(Unbalanced, "", "", "%s: captured %d - refunded %d - owed %d = %d, want %d = %d paid orders x %d",
				m.Currency, m.Captured, m.Refunded, m.RefundsPending, got, want, paid, price)
		}
	}
	slices.SortStableFunc(s.Problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(slices.Index(Kinds, a.Kind), slices.Index(Kinds, b.Kind)), cmp.Compare(a.OrderID, b.OrderID))
	})
	return s
}

// compare holds each payment whose record was read against the provider's
// own ledger: the money it captured, refunded and has disputed, to the cent.
func (s *Sale) compare(it *snapshot.Item, recs map[string]provider.Record, refundOf map[int64]store.Refund,
	problem func(kind, orderID, paymentID, format string, args ...any)) {
	for _, p := range it.MySQL.Payments {
		rec, ok := recs[p.ProviderPaymentID]
		if !ok {
			continue
		}
		s.ProviderRead++
		cur := cmp.Or(rec.Currency, p.Currency)
		s.Provider = store.AddMoney(s.Provider, store.Money{Currency: cur, Captured: rec.Captured, Refunded: rec.Refunded,
			RefundsPending: rec.RefundsPending})
		var captured, refunded, pending int64
		if Took(p) {
			captured = p.Amount
		}
		if r, asked := refundOf[p.ID]; asked && r.Status == store.RefundSucceeded {
			refunded = r.Amount
		} else if asked && r.Status == store.RefundPending {
			pending = r.Amount
		}
		s.MoneyRead = store.AddMoney(s.MoneyRead, store.Money{Currency: p.Currency, Captured: captured, Refunded: refunded, RefundsPending: pending})
		switch {
		case rec.Captured != captured || rec.Captured > 0 && cur != p.Currency:
			problem(ProviderDiffers, p.OrderID, p.ProviderPaymentID, "the provider captured %d %s, our books %d %s (%s)",
				rec.Captured, cur, captured, p.Currency, p.Status)
		case rec.Refunded != refunded:
			problem(ProviderDiffers, p.OrderID, p.ProviderPaymentID, "the provider refunded %d %s, our books %d", rec.Refunded, cur, refunded)
		case rec.Disputed > 0:
			problem(ProviderDiffers, p.OrderID, p.ProviderPaymentID, "%d %s disputed at the provider", rec.Disputed, cur)
		}
	}
}

// closed reports whether p's order can no longer be paid by its saga: the
// saga ended, or pay_by plus the grace (and the saga's) passed.
func closed(it *snapshot.Item, p store.Payment, grace time.Duration) bool {
	if w, ok := it.Sagas[p.OrderID]; ok && !w.Running() {
		return true
	}
	return it.At.Sub(p.PayBy) > order.PayGrace+grace
}

func reasonOf(row store.Order, found bool) string {
	if !found || row.Reason == "" {
		return ""
	}
	return " (" + row.Reason + ")"
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func status(row store.Order, found bool) string {
	if !found {
		return "missing"
	}
	return string(row.Status)
}

func paymentOf(p store.Payment, ok bool) string {
	if !ok {
		return "missing"
	}
	return fmt.Sprintf("%s, %d %s, of order %s", p.Status, p.Amount, p.Currency, p.OrderID)
}

func amounts(ps []store.Payment) string {
	out := "none"
	for i, p := range ps {
		if i == 0 {
			out = ""
		} else {
			out += ", "
		}
		out += fmt.Sprintf("%s %d %s", p.ProviderPaymentID, p.Amount, p.Currency)
	}
	return out
}
