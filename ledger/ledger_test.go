package ledger_test

import (
	"testing"
	"time"

	"github.com/seckill/seckill/ledger"
	"github.com/seckill/seckill/order"
)

// Every move the code makes is in the table; the ones that would let money
// flow backwards are not.
func TestTable(t *testing.T) {
	allowed := [][3]string{
		{"payment", ledger.PaymentPending, ledger.PaymentSucceeded},
		{"payment", ledger.PaymentPending, ledger.PaymentMismatch},
		{"payment", ledger.PaymentPending, ledger.PaymentCanceled},
		{"payment", ledger.PaymentCanceled, ledger.PaymentMismatch},
		{"refund", ledger.RefundPending, ledger.RefundSucceeded},
		{"refund", ledger.RefundFailed, ledger.RefundPending},
		{"order", ledger.QueuedPaid, string(order.StatusPaid)},
		{"order", string(order.StatusPaid), string(order.StatusRefunded)},
		{"order", "", string(order.StatusCancelled)},
	}
	refused := [][3]string{
		{"payment", ledger.PaymentMismatch, ledger.PaymentSucceeded}, // a refunded mismatch never pays
		{"payment", ledger.PaymentCanceled, ledger.PaymentSucceeded},
		{"payment", ledger.PaymentSucceeded, ledger.PaymentMismatch},
		{"payment", ledger.PaymentSucceeded, ledger.PaymentPending},
		{"refund", ledger.RefundSucceeded, ledger.RefundPending},
		{"refund", ledger.RefundSucceeded, ledger.RefundFailed},
		{"order", string(order.StatusCancelled), string(order.StatusPaid)},
		{"order", string(order.StatusRefunded), string(order.StatusPaid)},
		{"order", string(order.StatusPaid), string(order.StatusCancelled)},
		{"order", string(order.StatusQueued), string(order.StatusPaid)}, // a unit is taken first
	}
	for _, m := range allowed {
		if !ledger.Allowed(ledger.Fact(m[0]), m[1], m[2]) {
			t.Errorf("%s %s -> %s refused", m[0], m[1], m[2])
		}
	}
	for _, m := range refused {
		if ledger.Allowed(ledger.Fact(m[0]), m[1], m[2]) {
			t.Errorf("%s %s -> %s allowed", m[0], m[1], m[2])
		}
	}
	if got := ledger.From(ledger.FactPayment, ledger.PaymentMismatch); len(got) != 3 {
		t.Errorf("from-states of a mismatch: %v, want itself, pending and canceled", got)
	}
	for _, tr := range ledger.Table {
		if tr.By == "" || tr.From == tr.To {
			t.Errorf("transition %+v: no cause, or no move", tr)
		}
	}
}

var payBy = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// OnSuccess: the first verdict stays; item 1 of the money issue (a refunded
// mismatch paid by a later success of the right amount) cannot happen.
func TestOnSuccessKeepsTheFirstVerdict(t *testing.T) {
	p := ledger.Payment{OrderID: "O", UserID: 1, Amount: 999, Currency: "EUR", Status: ledger.PaymentPending, PayBy: payBy}
	right := ledger.Success{OrderID: "O", Amount: 999, Currency: "EUR", At: payBy.Add(-time.Minute)}
	wrong := right
	wrong.Amount = 1
	cases := []struct {
		from string
		s    ledger.Success
		want string
	}{
		{ledger.PaymentPending, right, ledger.PaymentSucceeded},
		{ledger.PaymentPending, wrong, ledger.PaymentMismatch},
		{ledger.PaymentMismatch, right, ledger.PaymentMismatch},
		{ledger.PaymentSucceeded, wrong, ledger.PaymentSucceeded},
		{ledger.PaymentCanceled, right, ledger.PaymentMismatch},
	}
	for _, c := range cases {
		p.Status = c.from
		if got := ledger.OnSuccess(p, c.s); got != c.want {
			t.Errorf("%s + success of %d: %s, want %s", c.from, c.s.Amount, got, c.want)
		}
		if !ledger.Allowed(ledger.FactPayment, c.from, c.want) {
			t.Errorf("%s -> %s not in the table", c.from, c.want)
		}
	}
}

// RefundDue: which payments' money must go back, by the payment and its order row.
func TestRefundDue(t *testing.T) {
	payBy := payBy
	inTime, late := payBy.Add(-time.Minute), payBy.Add(time.Second)
	pay := func(status string, at *time.Time) ledger.Payment {
		return ledger.Payment{UserID: 1, Status: status, PayBy: payBy, SucceededAt: at}
	}
	row := func(status order.Status, paidAt *time.Time) ledger.Order {
		return ledger.Order{UserID: 1, Status: status, PayBy: &payBy, PaidAt: paidAt}
	}
	other := inTime.Add(-time.Second)
	cases := []struct {
		name  string
		p     ledger.Payment
		row   ledger.Order
		found bool
		want  bool
	}{
		{"pending", pay(ledger.PaymentPending, nil), row(order.StatusCancelled, nil), true, false},
		{"canceled", pay(ledger.PaymentCanceled, nil), row(order.StatusCancelled, nil), true, false},
		{"mismatch of a paid order", pay(ledger.PaymentMismatch, &inTime), row(order.StatusPaid, &other), true, true},
		{"paid the order", pay(ledger.PaymentSucceeded, &inTime), row(order.StatusPaid, &inTime), true, false},
		{"paid the queued order", pay(ledger.PaymentSucceeded, &inTime), row(order.StatusQueued, &inTime), true, false},
		{"second payment", pay(ledger.PaymentSucceeded, &inTime), row(order.StatusPaid, &other), true, true},
		{"paid row without paid_at", pay(ledger.PaymentSucceeded, &inTime), row(order.StatusPaid, nil), true, false},
		{"order cancelled", pay(ledger.PaymentSucceeded, &inTime), row(order.StatusCancelled, nil), true, true},
		{"order failed", pay(ledger.PaymentSucceeded, &inTime), row(order.StatusFailed, nil), true, true},
		{"phantom unit", pay(ledger.PaymentSucceeded, &inTime), row(order.StatusRefunded, &inTime), true, true},
		{"late, order still open", pay(ledger.PaymentSucceeded, &late), row(order.StatusPendingPayment, nil), true, true},
		{"in time, order still open", pay(ledger.PaymentSucceeded, &inTime), row(order.StatusPendingPayment, nil), true, false},
		{"another buyer's row", pay(ledger.PaymentSucceeded, &inTime), ledger.Order{UserID: 2, Status: order.StatusPaid, PaidAt: &inTime}, true, true},
		{"no row, late", pay(ledger.PaymentSucceeded, &late), ledger.Order{}, false, true},
		{"no row, in time", pay(ledger.PaymentSucceeded, &inTime), ledger.Order{}, false, false},
	}
	for _, c := range cases {
		if got := ledger.RefundDue(c.p, c.row, c.found); got != c.want {
			t.Errorf("%s: RefundDue = %v, want %v", c.name, got, c.want)
		}
	}
}

// PaidWith: the payment that paid the row (what support refunds), and no other.
func TestPaidWith(t *testing.T) {
	at, other := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC)
	p := ledger.Payment{OrderID: "O", UserID: 1, Status: ledger.PaymentSucceeded, SucceededAt: &at}
	row := ledger.Order{OrderID: "O", UserID: 1, Status: order.StatusPaid, PaidAt: &at}
	if !ledger.PaidWith(p, row) {
		t.Fatal("the payment that paid the order")
	}
	for name, c := range map[string]func(p *ledger.Payment, r *ledger.Order){
		"another payment":   func(_ *ledger.Payment, r *ledger.Order) { r.PaidAt = &other },
		"paid at no time":   func(_ *ledger.Payment, r *ledger.Order) { r.PaidAt = nil },
		"not succeeded":     func(p *ledger.Payment, _ *ledger.Order) { p.Status = ledger.PaymentMismatch },
		"another buyer's":   func(p *ledger.Payment, _ *ledger.Order) { p.UserID = 2 },
		"another order's":   func(p *ledger.Payment, _ *ledger.Order) { p.OrderID = "P" },
		"success not known": func(p *ledger.Payment, _ *ledger.Order) { p.SucceededAt = nil },
	} {
		p2, r2 := p, row
		c(&p2, &r2)
		if ledger.PaidWith(p2, r2) {
			t.Errorf("%s: PaidWith", name)
		}
	}
}
