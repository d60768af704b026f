package books_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

var (
	now   = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	payBy = now.Add(-10 * time.Minute)
	long  = now.Add(-time.Hour) // past any grace
)

const grace = 2 * time.Minute

// sale is one item at 999 EUR: its orders, payments and refunds.
type sale struct {
	orders   []store.Order
	payments []store.Payment
	refunds  []store.Refund
}

func (s *sale) order(id string, st order.Status, paidAt *time.Time) *sale {
	s.orders = append(s.orders, store.Order{OrderID: id, UserID: 1, ItemID: 1, Status: st, PayBy: &payBy, PaidAt: paidAt, UpdatedAt: long})
	return s
}

// because sets the reason of the last order added.
func (s *sale) because(reason string) *sale {
	s.orders[len(s.orders)-1].Reason = reason
	return s
}

// pay adds a payment of order id that took money at at (status succeeded, or mismatch), updated at updated.
func (s *sale) pay(id, orderID, status string, amount int64, at, updated time.Time) *sale {
	s.payments = append(s.payments, store.Payment{ID: int64(len(s.payments) + 1), OrderID: orderID, UserID: 1, ItemID: 1,
		Provider: "testpay", ProviderPaymentID: id, Amount: amount, Currency: "EUR", Status: status, PayBy: payBy,
		SucceededAt: &at, UpdatedAt: updated})
	return s
}

// refund adds a refund of the payment numbered n (1-based), created at created.
func (s *sale) refund(n int64, status string, created time.Time) *sale {
	p := store.Payment{ID: n, OrderID: "gone", ProviderPaymentID: "pi_gone", Amount: 999, Currency: "EUR"}
	if n <= int64(len(s.payments)) {
		p = s.payments[n-1]
	}
	s.refunds = append(s.refunds, store.Refund{ID: int64(len(s.refunds) + 1), OrderID: p.OrderID, PaymentID: n,
		ProviderPaymentID: p.ProviderPaymentID, Amount: p.Amount, Currency: p.Currency, Status: status, CreatedAt: created})
	return s
}

func (s *sale) judge(require bool) books.Sale {
	db := store.ItemState{Item: store.Item{ID: 1, PriceCents: 999, Currency: "EUR", StockTotal: 10},
		Orders: s.orders, Payments: s.payments, Refunds: s.refunds}
	return books.Judge(snapshot.New(1, now, db, stock.ItemState{}, nil, nil, false), books.Options{RequirePayments: require, Grace: grace})
}

func at(t time.Time) *time.Time { return &t }

func TestRules(t *testing.T) {
	early := payBy.Add(-5 * time.Minute)
	for _, tc := range []struct {
		name    string
		sale    *sale
		require bool
		want    []string
		money   store.Money // EUR
	}{
		{name: "paid, refunded, mismatch refunded, door pay: clean", sale: new(sale).
			order("paid", order.StatusPaid, at(early)).pay("pi_1", "paid", store.PaymentSucceeded, 999, early, early).
			order("late", order.StatusRefunded, nil).pay("pi_2", "late", store.PaymentSucceeded, 999, payBy, payBy).refund(2, store.RefundSucceeded, long).
			order("mism", order.StatusRefunded, nil).pay("pi_3", "mism", store.PaymentMismatch, 999, early, early).refund(3, store.RefundSucceeded, long).
			order("door", order.StatusPaid, at(early)).order("open", order.StatusPendingPayment, nil),
			money: store.Money{Currency: "EUR", Captured: 3 * 999, Refunded: 2 * 999}},
		{name: "a second payment of a paid order refunded: clean", sale: new(sale).
			order("paid", order.StatusPaid, at(early)).pay("pi_1", "paid", store.PaymentSucceeded, 999, early, early).
			pay("pi_2", "paid", store.PaymentSucceeded, 999, early.Add(time.Second), early).refund(2, store.RefundSucceeded, long),
			money: store.Money{Currency: "EUR", Captured: 2 * 999, Refunded: 999}},
		{name: "a QUEUED order paid early counts as paid: clean", sale: new(sale).
			order("q", order.StatusQueued, at(early)).pay("pi_1", "q", store.PaymentSucceeded, 999, early, early), require: true,
			money: store.Money{Currency: "EUR", Captured: 999}},
		{name: "owed, younger than the grace: clean, pending", sale: new(sale).
			order("c", order.StatusCancelled, nil).pay("pi_1", "c", store.PaymentSucceeded, 999, payBy, now.Add(-time.Minute)),
			money: store.Money{Currency: "EUR", Captured: 999, RefundsPending: 999}},
		{name: "a refund in flight younger than the grace: clean", sale: new(sale).
			order("c", order.StatusCancelled, nil).pay("pi_1", "c", store.PaymentSucceeded, 999, payBy, long).refund(1, store.RefundPending, now.Add(-time.Minute)),
			money: store.Money{Currency: "EUR", Captured: 999, RefundsPending: 999}},
		{name: "a door pay with no payment under a provider", sale: new(sale).order("door", order.StatusPaid, at(early)), require: true,
			want: []string{books.Unbalanced, books.PaidWithoutPayment}, money: store.Money{Currency: "EUR"}},
		{name: "a paid order whose payment was of another amount", sale: new(sale).
			order("paid", order.StatusPaid, at(early)).pay("pi_1", "paid", store.PaymentSucceeded, 500, early, early),
			want: []string{books.Unbalanced, books.PaidWithoutPayment}, money: store.Money{Currency: "EUR", Captured: 500}},
		{name: "a succeeded payment of a CANCELLED order, no refund past the grace", sale: new(sale).
			order("c", order.StatusCancelled, nil).pay("pi_1", "c", store.PaymentSucceeded, 999, early, long),
			want: []string{books.PaidInTimeNotPaid, books.RefundMissing}, money: store.Money{Currency: "EUR", Captured: 999, RefundsPending: 999}},
		{name: "a mismatch of a paid order's buyer, no refund", sale: new(sale).
			order("paid", order.StatusPaid, at(early)).pay("pi_1", "paid", store.PaymentSucceeded, 999, early, early).
			pay("pi_2", "paid", store.PaymentMismatch, 999, early, long),
			want: []string{books.RefundMissing}, money: store.Money{Currency: "EUR", Captured: 2 * 999, RefundsPending: 999}},
		{name: "a refund asked and not confirmed past the grace", sale: new(sale).
			order("c", order.StatusCancelled, nil).because(order.ReasonBuyerCancelled).pay("pi_1", "c", store.PaymentSucceeded, 999, early, long).refund(1, store.RefundFailed, long),
			want: []string{books.RefundStuck}, money: store.Money{Currency: "EUR", Captured: 999, RefundsPending: 999}},
		{name: "paid in time, closed as timed out and refunded: the promise broken, the books balanced", sale: new(sale).
			order("t", order.StatusRefunded, nil).because(order.ReasonPaymentTimeout).pay("pi_1", "t", store.PaymentSucceeded, 999, early, early).refund(1, store.RefundSucceeded, long),
			want: []string{books.PaidInTimeNotPaid}, money: store.Money{Currency: "EUR", Captured: 999, Refunded: 999}},
		{name: "paid in time, cancelled by the buyer or refunded by support: clean", sale: new(sale).
			order("b", order.StatusRefunded, nil).because(order.ReasonBuyerCancelled).pay("pi_1", "b", store.PaymentSucceeded, 999, early, early).refund(1, store.RefundSucceeded, long).
			order("s", order.StatusRefunded, at(early)).because(order.ReasonSupportRefund).pay("pi_2", "s", store.PaymentSucceeded, 999, early, early).refund(2, store.RefundSucceeded, long).
			order("p", order.StatusRefunded, at(early)).because("STOCK_EXHAUSTED: DecrementStock: no unit").pay("pi_3", "p", store.PaymentSucceeded, 999, early, early).refund(3, store.RefundSucceeded, long),
			money: store.Money{Currency: "EUR", Captured: 3 * 999, Refunded: 3 * 999}},
		{name: "paid in time, the order still unpaid long after pay_by", sale: new(sale).
			order("q", order.StatusPendingPayment, nil).pay("pi_1", "q", store.PaymentSucceeded, 999, early, early),
			want: []string{books.PaidInTimeNotPaid, books.Unbalanced}, money: store.Money{Currency: "EUR", Captured: 999}},
		{name: "a refund of no payment", sale: new(sale).refund(7, store.RefundSucceeded, long),
			want: []string{books.Unbalanced, books.RefundWithoutPayment}, money: store.Money{Currency: "EUR", Refunded: 999}},
		{name: "a refund of a payment that took no money", sale: new(sale).order("c", order.StatusCancelled, nil).
			pay("pi_1", "c", store.PaymentCanceled, 999, early, early).refund(1, store.RefundPending, long),
			want: []string{books.RefundWithoutPayment}, money: store.Money{Currency: "EUR"}},
		{name: "a paid order's own payment refunded", sale: new(sale).
			order("paid", order.StatusPaid, at(early)).pay("pi_1", "paid", store.PaymentSucceeded, 999, early, early).refund(1, store.RefundSucceeded, long),
			want: []string{books.Unbalanced}, money: store.Money{Currency: "EUR", Captured: 999, Refunded: 999}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.sale.judge(tc.require)
			var got []string
			for _, p := range b.Problems {
				got = append(got, p.Kind)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems %v, want kinds %v", b.Problems, tc.want)
			}
			if len(b.Money) != 1 || b.Money[0] != tc.money {
				t.Errorf("money %+v, want [%+v]", b.Money, tc.money)
			}
			stuck := 0
			for _, k := range got {
				if k == books.RefundMissing || k == books.RefundStuck {
					stuck++
				}
			}
			if b.Stuck != stuck {
				t.Errorf("stuck %d, want %d", b.Stuck, stuck)
			}
		})
	}
}

// The books against the provider's own ledger, payment by payment, to the
// cent: a capture of another amount, a refund made in its dashboard, a
// dispute are findings naming their orders; equal records are clean and
// the sale's figures are the provider's.
func TestAgainstTheProvidersRecord(t *testing.T) {
	early := payBy.Add(-5 * time.Minute)
	s := new(sale).
		order("paid", order.StatusPaid, at(early)).pay("pi_1", "paid", store.PaymentSucceeded, 999, early, early).
		order("gone", order.StatusRefunded, nil).because(order.ReasonBuyerCancelled).pay("pi_2", "gone", store.PaymentSucceeded, 999, early, early).
		refund(2, store.RefundSucceeded, long)
	s.payments = append(s.payments, store.Payment{ID: 3, OrderID: "open", UserID: 1, ItemID: 1, Provider: "testpay",
		ProviderPaymentID: "pi_3", Amount: 999, Currency: "EUR", Status: store.PaymentPending, PayBy: payBy, UpdatedAt: early})
	s.order("open", order.StatusPendingPayment, nil)
	judge := func(recs map[string]provider.Record) books.Sale {
		db := store.ItemState{Item: store.Item{ID: 1, PriceCents: 999, Currency: "EUR", StockTotal: 10},
			Orders: s.orders, Payments: s.payments, Refunds: s.refunds}
		return books.Judge(snapshot.New(1, now, db, stock.ItemState{}, nil, nil, false), books.Options{Grace: grace, Records: recs})
	}
	equal := map[string]provider.Record{
		"pi_1": {Currency: "EUR", Captured: 999},
		"pi_2": {Currency: "EUR", Captured: 999, Refunded: 999},
		"pi_3": {Currency: "EUR"},
	}
	b := judge(equal)
	if len(b.Problems) != 0 || b.ProviderRead != 3 || len(b.Provider) != 1 || b.Provider[0] != (store.Money{Currency: "EUR", Captured: 2 * 999, Refunded: 999}) {
		t.Fatalf("equal records: %+v", b)
	}
	if len(b.MoneyRead) != 1 || b.MoneyRead[0] != b.Provider[0] {
		t.Fatalf("our figures over the payments read %+v, want the provider's %+v", b.MoneyRead, b.Provider)
	}
	// Within a budget: ours over the payments read, not the whole sale.
	if b := judge(map[string]provider.Record{"pi_2": equal["pi_2"]}); b.ProviderRead != 1 ||
		len(b.MoneyRead) != 1 || b.MoneyRead[0] != (store.Money{Currency: "EUR", Captured: 999, Refunded: 999}) {
		t.Fatalf("one record read: %+v", b)
	}
	for name, tc := range map[string]struct {
		pid string
		rec provider.Record
	}{
		"a capture of another amount":           {"pi_1", provider.Record{Currency: "EUR", Captured: 1999}},
		"a partial refund in the dashboard":     {"pi_1", provider.Record{Currency: "EUR", Captured: 999, Refunded: 500}},
		"a dispute":                             {"pi_1", provider.Record{Currency: "EUR", Captured: 999, Disputed: 999}},
		"our refund the provider did not make":  {"pi_2", provider.Record{Currency: "EUR", Captured: 999, RefundsFailed: 999}},
		"money taken on a payment we call open": {"pi_3", provider.Record{Currency: "EUR", Captured: 999}},
	} {
		recs := maps.Clone(equal)
		recs[tc.pid] = tc.rec
		b := judge(recs)
		if len(b.Problems) != 1 || b.Problems[0].Kind != books.ProviderDiffers || b.Problems[0].PaymentID != tc.pid {
			t.Errorf("%s: problems %+v, want one %s of %s", name, b.Problems, books.ProviderDiffers, tc.pid)
		}
	}
	if b := judge(nil); b.ProviderRead != 0 || b.Provider != nil || b.MoneyRead != nil {
		t.Fatalf("no records read: %+v", b)
	}
}
