package invariant_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// picture is a hand-made snapshot: units S, orders by status, each with its
// reservation and deduction as a healthy pipeline leaves them.
type picture struct {
	db  store.ItemState
	rd  stock.ItemState
	wfs []snapshot.Workflow
	acc []invariant.Accepted
}

func newPicture(units int64, statuses ...order.Status) *picture {
	p := &picture{db: store.ItemState{Item: store.Item{ID: 1, StockTotal: units}, Stock: store.Stock{Stock: units}},
		rd: stock.ItemState{Left: units}}
	p.rd.Reservations, p.rd.Marks, p.rd.Released = map[string]order.Message{}, map[int64]string{}, map[string]bool{}
	for i, s := range statuses {
		id, user := fmt.Sprintf("o%02d", i), int64(i+1)
		p.acc = append(p.acc, invariant.Accepted{OrderID: id, UserID: user})
		p.rd.Marks[user] = id
		p.db.Orders = append(p.db.Orders, store.Order{OrderID: id, UserID: user, ItemID: 1, Status: s})
		wf := "Completed"
		if snapshot.Live(s) {
			p.db.Stock.Stock--
			p.db.Deductions = append(p.db.Deductions, store.StockDeduction{OrderID: id})
			p.rd.Left--
			p.rd.Reservations[id] = order.Message{OrderID: id, ItemID: 1, UserID: user}
			if s == order.StatusPendingPayment {
				wf = "Running"
			}
		} else {
			p.db.Deductions = append(p.db.Deductions, store.StockDeduction{OrderID: id, Restored: true})
			p.rd.Released[id] = true
		}
		p.wfs = append(p.wfs, snapshot.Workflow{WorkflowID: "order-" + id, OrderID: id, Status: wf})
	}
	return p
}

func (p *picture) judge(after bool) invariant.Report {
	it := snapshot.New(1, time.Now(), p.db, p.rd, nil, p.wfs, true)
	return invariant.Judge(it, invariant.Input{ItemID: 1, Accepted: p.acc, AcceptedComplete: true, AfterTimeouts: after})
}

// Each rule on its own: a healthy picture passes every rule; each broken
// promise is named by its own rule, and only by the rules it concerns.
func TestRules(t *testing.T) {
	P, Q, C, F := order.StatusPaid, order.StatusPendingPayment, order.StatusCancelled, order.StatusFailed
	if rep := newPicture(5, P, Q, C).judge(false); !rep.OK() {
		t.Fatalf("healthy picture: %v", rep.Violations)
	}
	if rep := newPicture(5, P, C, C).judge(true); !rep.OK() {
		t.Fatalf("healthy picture after the timeouts: %v", rep.Violations)
	}
	cases := []struct {
		name  string
		after bool
		brk   func(p *picture)
		want  []string
	}{
		{"a FAILED order", false, func(p *picture) {}, nil},
		{"redis oversold", false, func(p *picture) { p.rd.Left = -1 }, []string{invariant.Oversell, invariant.RedisStock}},
		{"stock row off", false, func(p *picture) { p.db.Stock.Stock++ }, []string{invariant.StockRow}},
		{"deduction missing", false, func(p *picture) { p.db.Deductions[0].Restored = true }, []string{invariant.StockDeduction}},
		{"live order lost its reservation", false, func(p *picture) {
			delete(p.rd.Reservations, "o00")
			p.rd.Left++
		}, []string{invariant.ReleasedLiveOrder}},
		{"released order holds a unit", false, func(p *picture) {
			p.rd.Reservations["o02"] = order.Message{OrderID: "o02", UserID: 3}
			p.rd.Left--
		}, []string{invariant.LeakedUnit}},
		{"lost order", false, func(p *picture) { p.acc = append(p.acc, invariant.Accepted{OrderID: "zz", UserID: 99}) },
			[]string{invariant.LostOrder, invariant.UnitsSold, invariant.WorkflowMissing}},
		{"phantom order", false, func(p *picture) { p.acc = p.acc[1:] }, []string{invariant.PhantomOrder, invariant.UnitsSold}},
		{"second order of a buyer", false, func(p *picture) { p.rd.Marks[1] = "other" }, []string{invariant.DuplicateBuyer}},
		{"pending after the timeouts", true, func(p *picture) {}, []string{invariant.PendingAfterTimeout, invariant.WorkflowStuck, invariant.LeakedUnit}},
		{"saga of a paid order still running", false, func(p *picture) { p.wfs[0].Status = "Running" }, []string{invariant.WorkflowStuck}},
		{"terminated saga left its unit", false, func(p *picture) { p.wfs[1].Status = "Terminated" }, []string{invariant.WorkflowUncompensated}},
		// The money rules (package books) report in the same report.
		{"a succeeded payment of a CANCELLED order, never refunded", false, func(p *picture) {
			p.db.Payments = append(p.db.Payments, paid("o02", time.Hour))
		}, []string{books.RefundMissing}},
		{"a refund of no payment", false, func(p *picture) {
			p.db.Refunds = append(p.db.Refunds, store.Refund{ID: 1, OrderID: "o02", PaymentID: 9, Amount: 999, Currency: "EUR", Status: store.RefundPending})
		}, []string{books.RefundWithoutPayment}},
		{"a stuck refund and an unrelated leak, one report", false, func(p *picture) {
			p.db.Payments = append(p.db.Payments, paid("o02", time.Hour))
			p.db.Refunds = append(p.db.Refunds, store.Refund{ID: 1, OrderID: "o02", PaymentID: 1, Amount: 999, Currency: "EUR",
				Status: store.RefundPending, CreatedAt: time.Now().Add(-time.Hour)})
			p.db.Stock.Stock++
		}, []string{books.RefundStuck, invariant.StockRow}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPicture(5, P, Q, C)
			if c.name == "a FAILED order" {
				p = newPicture(5, P, Q, F)
				c.want = []string{invariant.FailedOrder}
			}
			c.brk(p)
			rep := p.judge(c.after)
			got := map[string]bool{}
			for _, v := range rep.Violations {
				got[v.Name] = true
			}
			for _, w := range c.want {
				if !got[w] {
					t.Errorf("%s not found; got %v", w, rep.Violations)
				}
				delete(got, w)
			}
			for n := range got {
				t.Errorf("unexpected %s: %v", n, rep.Violations)
			}
		})
	}
}

// paid is a payment of 999 EUR of order id that succeeded ago.
func paid(id string, ago time.Duration) store.Payment {
	at := time.Now().Add(-ago)
	return store.Payment{ID: 1, OrderID: id, UserID: 3, ItemID: 1, ProviderPaymentID: "pi_" + id, Amount: 999, Currency: "EUR",
		Status: store.PaymentSucceeded, SucceededAt: &at, PayBy: at, UpdatedAt: at}
}

// A saga of an order paid at the door runs until its wake (paced at the
// API) or its own timer at pay_by + grace: not stuck before that.
func TestSagaWaitingForItsWakeIsNotStuck(t *testing.T) {
	p := newPicture(5, order.StatusPaid)
	p.wfs[0].Status = "Running"
	soon := time.Now().Add(-order.PayGrace + time.Second)
	p.db.Orders[0].PayBy = &soon
	if rep := p.judge(false); !rep.OK() {
		t.Fatalf("waiting saga reported: %v", rep.Violations)
	}
	long := time.Now().Add(-order.PayGrace - 2*time.Minute)
	p.db.Orders[0].PayBy = &long
	if rep := p.judge(false); !rep.Has(invariant.WorkflowStuck) {
		t.Fatalf("saga asleep past its timer not reported: %v", rep.Violations)
	}
}
