package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// pendingOrder is a PENDING_PAYMENT order of buyer userID with a pending
// payment of 100 EUR through testpay, provider id pi.
func pendingOrder(t *testing.T, st *store.Store, itemID int64, orderID string, userID int64, payBy time.Time, pi string) store.Payment {
	t.Helper()
	ctx := context.Background()
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: orderID, UserID: userID, ItemID: itemID, PayBy: &payBy}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.DeductStock(ctx, orderID, itemID, time.Minute); err != nil {
		t.Fatal(err)
	}
	return payment(t, st, itemID, orderID, userID, payBy, pi)
}

func payment(t *testing.T, st *store.Store, itemID int64, orderID string, userID int64, payBy time.Time, pi string) store.Payment {
	t.Helper()
	p, err := st.SavePayment(context.Background(), store.Payment{OrderID: orderID, UserID: userID, ItemID: itemID,
		Provider: "testpay", ProviderPaymentID: pi, Amount: 100, Currency: "EUR", PayBy: payBy})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func succeeded(id, pi string, at time.Time) store.PaymentEvent {
	return store.PaymentEvent{ID: id, Type: "payment_succeeded", Provider: "testpay", PaymentID: pi, Amount: 100, Currency: "EUR", At: at}
}

func apply(t *testing.T, st *store.Store, e store.PaymentEvent, want store.Verdict) store.EventResult {
	t.Helper()
	r, err := st.ApplyPaymentEvent(context.Background(), e)
	if err != nil || r.Verdict != want {
		t.Fatalf("event %s: %+v %v, want %s", e.ID, r, err, want)
	}
	return r
}

func events(t *testing.T, st *store.Store) int64 {
	var n int64
	if err := st.DB().Raw("SELECT COUNT(*) FROM payment_events").Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// A success in time pays a PENDING_PAYMENT order once; its resend is
// dropped by its event id; a later event of the same payment finds it paid.
// An order with no row yet gets the row a door pay writes.
func TestPaymentEventPaysOnce(t *testing.T) {
	st, it := newSale(t, 3)
	ctx := context.Background()
	now := time.Now()
	payBy := now.Add(time.Minute)
	pendingOrder(t, st, it.ID, "P1", 31, payBy, "pi_1")
	if again := payment(t, st, it.ID, "P1", 31, payBy, "pi_1"); again.Status != store.PaymentPending {
		t.Fatalf("second checkout's row %+v", again)
	}
	r := apply(t, st, succeeded("evt_1", "pi_1", now), store.VerdictPaid)
	if r.Order.Status != order.StatusPaid || r.Payment.Status != store.PaymentSucceeded {
		t.Fatalf("paid %+v", r)
	}
	apply(t, st, succeeded("evt_1", "pi_1", now), store.VerdictRepeated)
	apply(t, st, succeeded("evt_2", "pi_1", now), store.VerdictAlreadyPaid)
	apply(t, st, store.PaymentEvent{ID: "evt_3", Type: "payment_canceled", Provider: "testpay", PaymentID: "pi_1"}, store.VerdictRecorded)
	if p, err := st.OrderPayment(ctx, "P1", "testpay"); err != nil || p.Status != store.PaymentSucceeded {
		t.Fatalf("a cancel after the success changed the payment %+v %v", p, err)
	}

	payment(t, st, it.ID, "P2", 32, payBy, "pi_2") // QUEUED, no row yet
	r = apply(t, st, succeeded("evt_4", "pi_2", now), store.VerdictPaid)
	if !r.Order.PaidQueued() {
		t.Fatalf("early paid row %+v", r.Order)
	}
	if row, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: "P2", UserID: 32, ItemID: it.ID, PayBy: &payBy}); err != nil || !row.PaidQueued() {
		t.Fatalf("the saga's persist after the notification %+v %v", row, err)
	}
	apply(t, st, succeeded("evt_5", "pi_unknown", now), store.VerdictUnknown)
	apply(t, st, succeeded("evt_5", "pi_unknown", now), store.VerdictRepeated)
}

// A success of another amount or currency, or timestamped at or after
// pay_by, never pays; a mismatch is recorded on the payment.
func TestPaymentEventRefusals(t *testing.T) {
	st, it := newSale(t, 3)
	ctx := context.Background()
	now := time.Now()
	pendingOrder(t, st, it.ID, "M1", 41, now.Add(time.Minute), "pi_m1")
	for i, e := range []store.PaymentEvent{succeeded("evt_a", "pi_m1", now), succeeded("evt_c", "pi_m1", now)} {
		if i == 0 {
			e.Amount = 99
		} else {
			e.Currency = "USD"
		}
		r := apply(t, st, e, store.VerdictMismatch)
		if r.Payment.Status != store.PaymentMismatch {
			t.Fatalf("mismatch not recorded %+v", r)
		}
	}
	if o, _ := st.FindOrder(ctx, "M1"); o.Status != order.StatusPendingPayment || o.PaidAt != nil {
		t.Fatalf("a mismatch paid %+v", o)
	}
	payBy := now.Add(-time.Second)
	pendingOrder(t, st, it.ID, "L1", 42, payBy, "pi_l1")
	apply(t, st, succeeded("evt_l", "pi_l1", payBy), store.VerdictLate)
	if o, _ := st.FindOrder(ctx, "L1"); o.Status != order.StatusPendingPayment || o.PaidAt != nil {
		t.Fatalf("a late success paid %+v", o)
	}
	payment(t, st, it.ID, "L2", 43, payBy, "pi_l2") // no row yet
	apply(t, st, succeeded("evt_l2", "pi_l2", now), store.VerdictLate)
	if _, err := st.FindOrder(ctx, "L2"); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("a late success wrote a row: %v", err)
	}
	// A closed order is not paid.
	pendingOrder(t, st, it.ID, "C1", 44, now.Add(time.Minute), "pi_c1")
	if _, err := st.CloseOrder(ctx, store.Order{OrderID: "C1", UserID: 44, ItemID: it.ID},
		store.Closing{Status: order.StatusCancelled, Reason: order.ReasonBuyerCancelled}); err != nil {
		t.Fatal(err)
	}
	apply(t, st, succeeded("evt_c1", "pi_c1", now), store.VerdictNotPayable)
}

// The event's insert and the decision are one transaction: a failure
// between them leaves neither, and the resend then pays. Not parallel: the
// failure it injects is the package's, and parallel tests would meet it.
func TestPaymentEventIsOneTransaction(t *testing.T) {
	st, _ := testkit.MySQL(t)
	it := newItem(t, st, 1)
	ctx := context.Background()
	now := time.Now()
	pendingOrder(t, st, it.ID, "T1", 51, now.Add(time.Minute), "pi_t1")
	boom := errors.New("boom")
	restore := store.FailAfterEventInsert(boom, "evt_t")
	_, err := st.ApplyPaymentEvent(ctx, succeeded("evt_t", "pi_t1", now))
	restore()
	if !errors.Is(err, boom) {
		t.Fatalf("want the injected failure, got %v", err)
	}
	if n := events(t, st); n != 0 {
		t.Fatalf("%d events left by a failed decision", n)
	}
	if o, _ := st.FindOrder(ctx, "T1"); o.Status != order.StatusPendingPayment {
		t.Fatalf("order moved by a failed decision %+v", o)
	}
	apply(t, st, succeeded("evt_t", "pi_t1", now), store.VerdictPaid)
}

// Deliveries racing each other (the same event, and other events of the
// same payment) pay the order exactly once.
func TestPaymentEventRacesPayOnce(t *testing.T) {
	st, it := newSale(t, 2)
	now := time.Now()
	payBy := now.Add(time.Minute)
	pendingOrder(t, st, it.ID, "R1", 61, payBy, "pi_r1")
	payment(t, st, it.ID, "R2", 62, payBy, "pi_r2") // no row yet: the insert races too
	var mu sync.Mutex
	paid := map[string]int{}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			for _, pi := range []string{"pi_r1", "pi_r2"} {
				r, err := st.ApplyPaymentEvent(context.Background(), succeeded(fmt.Sprintf("evt_%s_%d", pi, i%3), pi, now))
				if err != nil {
					t.Error(err)
					return
				}
				if r.Verdict == store.VerdictPaid {
					mu.Lock()
					paid[pi]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if paid["pi_r1"] != 1 || paid["pi_r2"] != 1 {
		t.Fatalf("paid %v, want each once", paid)
	}
	if n := events(t, st); n != 6 {
		t.Fatalf("%d events stored, want 6", n)
	}
}

// A batch decides each event as the one-by-one path would, in turn: a
// repeat within the batch or of an event stored before, a later event of a
// payment the batch paid, a cancel after it, an order with no row yet, an
// unknown payment, a mismatch and a late success.
func TestPaymentEventBatchDecidesAsOneByOne(t *testing.T) {
	st, it := newSale(t, 5)
	ctx := context.Background()
	now := time.Now()
	payBy := now.Add(time.Minute)
	pendingOrder(t, st, it.ID, "B1", 71, payBy, "pi_b1")
	payment(t, st, it.ID, "B2", 72, payBy, "pi_b2") // QUEUED, no row yet
	pendingOrder(t, st, it.ID, "B3", 73, payBy, "pi_b3")
	pendingOrder(t, st, it.ID, "B4", 74, now.Add(-time.Second), "pi_b4")
	pendingOrder(t, st, it.ID, "B5", 75, payBy, "pi_b5")
	pendingOrder(t, st, it.ID, "B6", 76, payBy, "pi_b6")
	apply(t, st, succeeded("evt_b0", "pi_b5", now), store.VerdictPaid)
	mismatch := succeeded("evt_b6", "pi_b3", now)
	mismatch.Amount = 99
	batch := []store.PaymentEvent{
		succeeded("evt_b1", "pi_b1", now), succeeded("evt_b1", "pi_b1", now), succeeded("evt_b2", "pi_b1", now),
		{ID: "evt_b3", Type: "payment_canceled", Provider: "testpay", PaymentID: "pi_b1"},
		succeeded("evt_b4", "pi_b2", now), succeeded("evt_b5", "pi_unknown", now), mismatch,
		succeeded("evt_b7", "pi_b4", now), succeeded("evt_b0", "pi_b5", now), succeeded("evt_b8", "pi_b6", now),
	}
	want := []store.Verdict{store.VerdictPaid, store.VerdictRepeated, store.VerdictAlreadyPaid, store.VerdictRecorded,
		store.VerdictPaid, store.VerdictUnknown, store.VerdictMismatch, store.VerdictLate, store.VerdictRepeated, store.VerdictPaid}
	rs, err := st.ApplyPaymentEvents(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Verdict != want[i] {
			t.Errorf("event %d (%s): %s, want %s", i, batch[i].ID, r.Verdict, want[i])
		}
	}
	if rs[0].Order.Status != order.StatusPaid || rs[9].Order.Status != order.StatusPaid || !rs[4].Order.PaidQueued() ||
		rs[6].Payment.Status != store.PaymentMismatch || rs[9].Payment.Status != store.PaymentSucceeded {
		t.Fatalf("paid %+v %+v, early %+v, mismatch %+v", rs[0].Order, rs[9], rs[4].Order, rs[6].Payment)
	}
	for _, id := range []string{"B1", "B6"} {
		if o, _ := st.FindOrder(ctx, id); o.Status != order.StatusPaid || o.PaidAt == nil {
			t.Fatalf("order %s after the batch: %+v", id, o)
		}
	}
	if p, _ := st.OrderPayment(ctx, "B1", "testpay"); p.Status != store.PaymentSucceeded {
		t.Fatalf("a cancel after the success changed the payment %+v", p)
	}
	if n := events(t, st); n != 9 {
		t.Fatalf("%d events stored, want 9", n)
	}
}

// Two payments of one order succeeding in one batch: the batch's pay moves
// one row where it judged two payable, so nothing is written; one by one,
// the first pays and the second finds the order paid.
func TestPaymentEventBatchTwoPaymentsOfOneOrder(t *testing.T) {
	st, it := newSale(t, 1)
	ctx := context.Background()
	now := time.Now()
	pendingOrder(t, st, it.ID, "D1", 77, now.Add(time.Minute), "pi_d1")
	payment(t, st, it.ID, "D1", 77, now.Add(time.Minute), "pi_d2")
	batch := []store.PaymentEvent{succeeded("evt_d1", "pi_d1", now), succeeded("evt_d2", "pi_d2", now)}
	if _, err := st.ApplyPaymentEvents(ctx, batch); err == nil {
		t.Fatal("a batch paying one order twice committed")
	}
	if n := events(t, st); n != 0 {
		t.Fatalf("%d events left by a failed batch", n)
	}
	apply(t, st, batch[0], store.VerdictPaid)
	apply(t, st, batch[1], store.VerdictAlreadyPaid)
}

// A failing decision fails its batch as a whole (nothing written), and the
// batcher then decides the others one by one: only the failing one errs,
// and its resend pays.
func TestPaymentEventBatchFailure(t *testing.T) {
	st, it := newSale(t, 3)
	ctx := context.Background()
	now := time.Now()
	for i := range 3 {
		pendingOrder(t, st, it.ID, fmt.Sprintf("F%d", i), int64(81+i), now.Add(time.Minute), fmt.Sprintf("pi_f%d", i))
	}
	boom := errors.New("boom")
	restore := store.FailAfterEventInsert(boom, "evt_f1")
	defer restore()
	batch := []store.PaymentEvent{succeeded("evt_f0", "pi_f0", now), succeeded("evt_f1", "pi_f1", now), succeeded("evt_f2", "pi_f2", now)}
	if _, err := st.ApplyPaymentEvents(ctx, batch); !errors.Is(err, boom) {
		t.Fatalf("want the injected failure, got %v", err)
	}
	if n := events(t, st); n != 0 {
		t.Fatalf("%d events left by a failed batch", n)
	}
	b := store.NewBatcher(st, 1, 8)
	defer b.Close()
	var wg sync.WaitGroup
	errs := make([]error, len(batch))
	for i, e := range batch {
		wg.Go(func() { _, errs[i] = b.ApplyPaymentEvent(ctx, e) })
	}
	wg.Wait()
	if errs[0] != nil || !errors.Is(errs[1], boom) || errs[2] != nil {
		t.Fatalf("errors %v: want only evt_f1's", errs)
	}
	restore()
	if r, err := b.ApplyPaymentEvent(ctx, batch[1]); err != nil || r.Verdict != store.VerdictPaid {
		t.Fatalf("resend %+v %v", r, err)
	}
}

// Deliveries racing through the batcher (the same event twice, other
// events of the same payment, several lanes) pay each order exactly once.
func TestPaymentEventBatcherPaysOnce(t *testing.T) {
	st, it := newSale(t, 8)
	now := time.Now()
	payBy := now.Add(time.Minute)
	var pis []string
	for i := range 8 {
		pi := fmt.Sprintf("pi_g%d", i)
		pis = append(pis, pi)
		if i%2 == 0 {
			pendingOrder(t, st, it.ID, fmt.Sprintf("G%d", i), int64(91+i), payBy, pi)
		} else {
			payment(t, st, it.ID, fmt.Sprintf("G%d", i), int64(91+i), payBy, pi) // no row yet
		}
	}
	b := store.NewBatcher(st, 3, 16)
	defer b.Close()
	var mu sync.Mutex
	paid := map[string]int{}
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			for _, pi := range pis {
				r, err := b.ApplyPaymentEvent(context.Background(), succeeded(fmt.Sprintf("evt_%s_%d", pi, i%3), pi, now))
				if err != nil {
					t.Error(err)
					return
				}
				if r.Verdict == store.VerdictPaid {
					mu.Lock()
					paid[pi]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, pi := range pis {
		if paid[pi] != 1 {
			t.Errorf("%s paid %d times, want once", pi, paid[pi])
		}
	}
	if n := events(t, st); n != 24 {
		t.Fatalf("%d events stored, want 24", n)
	}
}

// A payment that can never pay stays so (the ledger's moves are monotonic):
// a mismatch, refunded, is not turned into a success by the provider's own
// success of the right amount arriving after it; a success after the
// provider canceled the payment is money to give back, never a PAID order.
func TestPaymentThatCannotPayNeverPays(t *testing.T) {
	st, it := newSale(t, 3)
	ctx := context.Background()
	now := time.Now()
	payBy := now.Add(time.Minute)

	pendingOrder(t, st, it.ID, "M1", 41, payBy, "pi_m1")
	wrong := succeeded("evt_m1_wrong", "pi_m1", now)
	wrong.Amount = 1
	if r := apply(t, st, wrong, store.VerdictMismatch); r.Payment.Status != store.PaymentMismatch {
		t.Fatalf("wrong amount %+v", r)
	}
	p, _ := st.OrderPayment(ctx, "M1", "testpay")
	r, err := st.BeginRefund(ctx, p, "payment mismatch")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.FinishRefund(ctx, r, "re_m1", store.RefundSucceeded); err != nil {
		t.Fatal(err)
	}
	apply(t, st, succeeded("evt_m1_right", "pi_m1", now.Add(2*time.Second)), store.VerdictMismatch)
	row, err := st.FindOrder(ctx, "M1")
	if err != nil || row.Status != order.StatusPendingPayment || row.PaidAt != nil {
		t.Fatalf("order after a refunded mismatch's late success: %+v %v, want PENDING_PAYMENT unpaid", row, err)
	}
	if p, _ := st.OrderPayment(ctx, "M1", "testpay"); p.Status != store.PaymentMismatch {
		t.Fatalf("payment %s, want it to stay mismatch", p.Status)
	}

	pendingOrder(t, st, it.ID, "C1", 42, payBy, "pi_c1")
	apply(t, st, store.PaymentEvent{ID: "evt_c1_cancel", Type: "payment_canceled", Provider: "testpay", PaymentID: "pi_c1"}, store.VerdictRecorded)
	if r := apply(t, st, succeeded("evt_c1_ok", "pi_c1", now), store.VerdictMismatch); r.Payment.Status != store.PaymentMismatch || r.Payment.SucceededAt == nil {
		t.Fatalf("success after cancel %+v, want mismatch with its time", r)
	}
	if row, _ := st.FindOrder(ctx, "C1"); row.Status != order.StatusPendingPayment || row.PaidAt != nil {
		t.Fatalf("order after a canceled payment's success %+v", row)
	}
	// A success after a success keeps the first verdict and its time.
	pendingOrder(t, st, it.ID, "S1", 43, payBy, "pi_s1")
	first := apply(t, st, succeeded("evt_s1_a", "pi_s1", now), store.VerdictPaid)
	other := succeeded("evt_s1_b", "pi_s1", now.Add(time.Second))
	other.Amount = 5
	if r := apply(t, st, other, store.VerdictAlreadyPaid); r.Payment.Status != store.PaymentSucceeded ||
		!r.Payment.SucceededAt.Equal(*first.Payment.SucceededAt) {
		t.Fatalf("contradicting success %+v, want the first verdict kept", r.Payment)
	}
}

// A payment opened before the provider was asked, whose id we could not
// record (the create's answer lost, MySQL out): the provider's success for
// it, naming the order in its metadata, finds the row, names it and pays
// the order; the row is opened once per order, whoever asks again.
func TestEventForAPaymentNotNamedYet(t *testing.T) {
	st, it := newSale(t, 2)
	ctx := context.Background()
	now := time.Now()
	payBy := now.Add(time.Minute)
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: "U1", UserID: 51, ItemID: it.ID, PayBy: &payBy}); err != nil {
		t.Fatal(err)
	}
	expires := payBy.Add(31 * time.Minute).Truncate(time.Second)
	open := store.Payment{OrderID: "U1", UserID: 51, ItemID: it.ID, Provider: "stripe", IdempotencyKey: "U1", Amount: 100,
		Currency: "EUR", Name: "x", ReturnURL: "http://shop/U1", PayBy: payBy, ExpiresAt: &expires}
	p, err := st.OpenPayment(ctx, open)
	if err != nil || p.Named() || p.ProviderPaymentID != store.Placeholder("U1") || p.Status != store.PaymentPending {
		t.Fatalf("open: %+v %v", p, err)
	}
	if again, err := st.OpenPayment(ctx, open); err != nil || again.ID != p.ID {
		t.Fatalf("opened again: %+v %v, want the first row", again, err)
	}
	if r := p.Request(); r.Key() != "U1" || !r.ExpiresAt.Equal(expires) || r.ReturnURL != "http://shop/U1" || r.Amount != 100 {
		t.Fatalf("stored request %+v", r)
	}
	e := store.PaymentEvent{ID: "evt_u1", Type: "payment_succeeded", Provider: "stripe", PaymentID: "cs_u1", OrderID: "U1",
		Amount: 100, Currency: "EUR", At: now}
	r, err := st.ApplyPaymentEvent(ctx, e)
	if err != nil || r.Verdict != store.VerdictPaid || r.Payment.ProviderPaymentID != "cs_u1" {
		t.Fatalf("event for the unnamed payment: %+v %v", r, err)
	}
	if p, _ := st.OrderPayment(ctx, "U1", "stripe"); !p.Named() || p.ProviderPaymentID != "cs_u1" || p.Status != store.PaymentSucceeded {
		t.Fatalf("row after the event %+v", p)
	}
	if named, err := st.NamePayment(ctx, p, "cs_other", "http://x"); err != nil || named.ProviderPaymentID != "cs_u1" {
		t.Fatalf("naming a named row: %+v %v, want it kept", named, err)
	}
}

// The saga's insert of an order row lands while a success of its payment is
// being decided (a 2,000-unit sale under test/failover's money faults found
// it, one pay in a thousand): the pay's UPDATE finds no row, and the locked
// read after it finds the row the insert committed meanwhile. The success,
// in time, pays that row: it is not judged not_payable, whose refund took
// the unit of a buyer who had paid in time. The same while the insert is
// still uncommitted when the pay looks: the pay waits for it, then pays.
// (Not parallel: the hook is the package's.)
func TestPaymentEventPaysARowPersistedMidDecision(t *testing.T) {
	st, _ := testkit.MySQL(t)
	it := newItem(t, st, 2)
	ctx := context.Background()
	now := time.Now()
	payBy := now.Add(time.Minute)
	payment(t, st, it.ID, "MID1", 71, payBy, "pi_mid1") // checked out before the saga persisted the order
	restore := store.OnPayMissed(func(orderID string) {
		if orderID == "MID1" {
			if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: "MID1", UserID: 71, ItemID: it.ID, PayBy: &payBy}); err != nil {
				t.Error(err)
			}
		}
	})
	r, err := st.ApplyPaymentEvent(ctx, succeeded("evt_mid1", "pi_mid1", now))
	restore()
	if err != nil || r.Verdict != store.VerdictPaid {
		t.Fatalf("the success of a row persisted between the pay and its read: %+v %v, want paid", r, err)
	}
	if row, err := st.FindOrder(ctx, "MID1"); err != nil || !row.PaidQueued() {
		t.Fatalf("order %+v %v, want QUEUED with paid_at", row, err)
	}
	if rs, err := st.OrderRefunds(ctx, "MID1"); err != nil || len(rs) != 0 {
		t.Fatalf("refunds %+v %v, want none", rs, err)
	}

	payment(t, st, it.ID, "MID2", 72, payBy, "pi_mid2")
	tx := st.DB().Begin() // the saga's insert, held uncommitted
	created := now.UTC().Truncate(time.Millisecond)
	if err := tx.Omit("id").Create(&store.Order{OrderID: "MID2", UserID: 72, ItemID: it.ID, Status: order.StatusQueued,
		PayBy: &payBy, CreatedAt: created, UpdatedAt: created}).Error; err != nil {
		t.Fatal(err)
	}
	type decision struct {
		r   store.EventResult
		err error
	}
	done := make(chan decision, 1)
	go func() {
		r, err := st.ApplyPaymentEvent(ctx, succeeded("evt_mid2", "pi_mid2", now))
		done <- decision{r, err}
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case d := <-done:
		_ = tx.Rollback()
		t.Fatalf("decided before the row's insert committed: %+v %v", d.r, d.err)
	default:
	}
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if d := <-done; d.err != nil || d.r.Verdict != store.VerdictPaid {
		t.Fatalf("the success of a row inserted, uncommitted, as it was decided: %+v %v, want paid", d.r, d.err)
	}
}
