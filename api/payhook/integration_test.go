package payhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/api/payhook"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/payment/cashier"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
	"github.com/seckill/seckill/workflows"
)

const tpSecret = "whsec_integration"

// sagas records the wakes the desk sends.
type sagas struct {
	mu    sync.Mutex
	wakes map[string][]string
}

func (s *sagas) Signal(_ context.Context, orderID, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakes[orderID] = append(s.wakes[orderID], name)
	return nil
}

func (s *sagas) of(orderID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.wakes[orderID]...)
}

type nopCounter struct{}

func (nopCounter) Inc() {}

// rig is the door with the test provider, on real MySQL and Redis: the
// notifications the API received are kept (bodies), so a test can resend them.
type rig struct {
	st     *store.Store
	board  *orderstatus.Board
	tp     *testpay.Provider
	sagas  *sagas
	url    string
	item   store.Item
	mu     sync.Mutex
	bodies [][]byte
}

func newRig(t *testing.T, knobs testpay.Knobs) *rig {
	t.Helper()
	st, _ := testkit.MySQL(t)
	rdb, prefix := testkit.Redis(t)
	board, units := orderstatus.New(rdb, prefix), stock.New(rdb, prefix)
	r := &rig{st: st, board: board, sagas: &sagas{wakes: map[string][]string{}}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	desk, err := payment.New(st, board, board, units, func() (payment.Sagas, error) { return r.sagas, nil }, nopCounter{},
		payment.Options{WakeRate: 1000}, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	go desk.Run(ctx)
	var c *cashier.Cashier
	h := engineFor(func() payhook.Cashier { return c })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == payhook.NotificationRoute {
			b, _ := io.ReadAll(req.Body)
			r.mu.Lock()
			r.bodies = append(r.bodies, b)
			r.mu.Unlock()
			req.Body = io.NopCloser(bytes.NewReader(b))
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	r.tp = testpay.New(testpay.Options{Secret: tpSecret, NotifyURL: srv.URL + payhook.NotificationRoute, BaseURL: "http://checkout",
		ResendAfter: 50 * time.Millisecond, Knobs: knobs, Seed: 29})
	t.Cleanup(r.tp.Close)
	c = cashier.New(st, board, provider.Guard(r.tp, provider.Limits{}), desk,
		cashier.Options{Provider: "testpay", ReturnURL: "http://shop/?order={order_id}"}, cashier.NewMetrics(prometheus.NewRegistry()), testkit.Logger(t))
	r.item, err = st.CreateItem(ctx, store.Item{Name: "x", PriceCents: 999, Currency: "EUR", StockTotal: 100,
		StartAt: time.Now().Add(-time.Hour), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// engineFor serves the routes over the cashier get returns once built.
func engineFor(get func() payhook.Cashier) http.Handler {
	return engine(payhook.Options{Cashier: lazy{get}, NotifyRPS: 10_000})
}

type lazy struct{ get func() payhook.Cashier }

func (l lazy) Checkout(ctx context.Context, id string, user int64, now time.Time) (cashier.Checkout, error) {
	return l.get().Checkout(ctx, id, user, now)
}

func (l lazy) Verify(payload []byte, sig string) (provider.Event, string, error) {
	return l.get().Verify(payload, sig)
}

func (l lazy) Judge(ctx context.Context, ev provider.Event) (string, error) {
	return l.get().Judge(ctx, ev)
}

// pending is a PENDING_PAYMENT order of buyer user due at payBy, checked
// out: its payment id.
func (r *rig) pending(t *testing.T, user int64, payBy time.Time) (orderID, paymentID string) {
	t.Helper()
	ctx := context.Background()
	orderID = order.NewID()
	if _, err := r.st.CreateQueuedOrder(ctx, store.Order{OrderID: orderID, UserID: user, ItemID: r.item.ID, PayBy: &payBy}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.st.DeductStock(ctx, orderID, r.item.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	code, out := r.post(t, "/api/v1/orders/"+orderID+"/checkout", nil, map[string]string{buyerHeader: strconv.FormatInt(user, 10)})
	if code != http.StatusOK || out["amount"] != 999.0 || out["currency"] != "EUR" || out["checkout_url"] == "" {
		t.Fatalf("checkout: %d %v", code, out)
	}
	return orderID, out["payment_id"].(string)
}

func (r *rig) post(t *testing.T, path string, body []byte, header map[string]string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.url+path, bytes.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// notify posts body signed with secret at signedAt.
func (r *rig) notify(t *testing.T, body []byte, secret string, signedAt time.Time) (int, map[string]any) {
	t.Helper()
	return r.post(t, payhook.NotificationRoute, body, map[string]string{provider.SignatureHeader: provider.Sign(body, secret, signedAt)})
}

// event is a Stripe-shaped event about a payment, created at.
func event(t *testing.T, id, typ, paymentID, orderID string, amount int64, currency string, at time.Time) []byte {
	t.Helper()
	var e provider.StripeEvent
	e.ID, e.Object, e.Type, e.Created = id, "event", typ, at.Unix()
	e.Data.Object = provider.StripeIntent{ID: paymentID, Object: "payment_intent", Amount: amount, Currency: currency,
		Metadata: map[string]string{provider.MetadataOrderID: orderID}}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (r *rig) count(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := r.st.DB().Raw(query, args...).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

func (r *rig) order(t *testing.T, id string) store.Order {
	t.Helper()
	o, err := r.st.FindOrder(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}

// Paid through the test provider's checkout, each notification delivered
// three times (twice by the provider, some held back so others overtake
// them, once more by the test) pays its order once, wakes its saga once,
// and a failure event older than the success, arriving after it, changes
// nothing.
func TestNotificationsPayOnceWhateverTheirOrder(t *testing.T) {
	t.Parallel()
	r := newRig(t, testpay.Knobs{Duplicate: 1, Reorder: 0.5, ReorderBy: 150 * time.Millisecond})
	const n = 6
	ids := map[string]string{}
	for i := range n {
		o, p := r.pending(t, int64(100+i), time.Now().Add(time.Minute))
		ids[o] = p
	}
	for _, p := range ids {
		if _, err := r.tp.Pay(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every copy delivered", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.bodies) == 2*n })
	r.mu.Lock()
	bodies := append([][]byte(nil), r.bodies...)
	r.mu.Unlock()
	for _, b := range bodies {
		if code, out := r.notify(t, b, tpSecret, time.Now()); code != http.StatusOK || out["outcome"] != "repeated" {
			t.Fatalf("third delivery: %d %v", code, out)
		}
	}
	for o, p := range ids {
		if row := r.order(t, o); row.Status != order.StatusPaid || row.PaidAt == nil {
			t.Fatalf("order %s %+v", o, row)
		}
		eventually(t, "saga woken", func() bool { return len(r.sagas.of(o)) > 0 })
		if w := r.sagas.of(o); len(w) != 1 || w[0] != workflows.SignalPay {
			t.Fatalf("order %s wakes %v", o, w)
		}
		if s := r.count(t, "SELECT COUNT(*) FROM payments WHERE provider_payment_id = ? AND status = 'succeeded'", p); s != 1 {
			t.Fatalf("payment %s not recorded succeeded", p)
		}
	}
	if e := r.count(t, "SELECT COUNT(*) FROM payment_events"); e != n {
		t.Fatalf("%d events stored, want %d", e, n)
	}
	// Out of order: an older failure of a paid payment, arriving last.
	for o, p := range ids {
		b := event(t, "evt_old_"+o, "payment_intent.payment_failed", p, o, 999, "eur", time.Now().Add(-time.Minute))
		if code, out := r.notify(t, b, tpSecret, time.Now()); code != http.StatusOK || out["outcome"] != "recorded" {
			t.Fatalf("old failure: %d %v", code, out)
		}
		if row := r.order(t, o); row.Status != order.StatusPaid {
			t.Fatalf("an old failure moved order %s: %+v", o, row)
		}
		break
	}
}

// Forged, tampered or stale notifications are 400 and write nothing; a
// success of another amount or currency, or timestamped at or after
// pay_by, is answered 200 and never pays.
func TestNotificationsNotBelievedOrNotPaying(t *testing.T) {
	t.Parallel()
	r := newRig(t, testpay.Knobs{Drop: 1}) // the test sends every notification itself
	now := time.Now()
	o, p := r.pending(t, 200, now.Add(time.Minute))
	good := event(t, "evt_good", "payment_intent.succeeded", p, o, 999, "eur", now)
	for name, send := range map[string]func() (int, map[string]any){
		"forged": func() (int, map[string]any) { return r.notify(t, good, "whsec_someone_else", now) },
		"tampered": func() (int, map[string]any) {
			return r.post(t, payhook.NotificationRoute, event(t, "evt_good", "payment_intent.succeeded", p, o, 1, "eur", now),
				map[string]string{provider.SignatureHeader: provider.Sign(good, tpSecret, now)})
		},
		"stale":    func() (int, map[string]any) { return r.notify(t, good, tpSecret, now.Add(-10*time.Minute)) },
		"unsigned": func() (int, map[string]any) { return r.post(t, payhook.NotificationRoute, good, nil) },
	} {
		if code, out := send(); code != http.StatusBadRequest {
			t.Errorf("%s: %d %v", name, code, out)
		}
	}
	if e := r.count(t, "SELECT COUNT(*) FROM payment_events"); e != 0 {
		t.Fatalf("%d events written by refused notifications", e)
	}
	for name, b := range map[string][]byte{
		"amount":   event(t, "evt_amount", "payment_intent.succeeded", p, o, 998, "eur", now),
		"currency": event(t, "evt_currency", "payment_intent.succeeded", p, o, 999, "usd", now),
	} {
		if code, out := r.notify(t, b, tpSecret, now); code != http.StatusOK || out["outcome"] != "mismatch" {
			t.Fatalf("%s mismatch: %d %v", name, code, out)
		}
	}
	if row := r.order(t, o); row.Status != order.StatusPendingPayment || row.PaidAt != nil {
		t.Fatalf("a mismatch paid %+v", row)
	}
	if m := r.count(t, "SELECT COUNT(*) FROM payments WHERE provider_payment_id = ? AND status = 'mismatch'", p); m != 1 {
		t.Fatal("the mismatch is not recorded on the payment")
	}
	payBy := now.Add(30 * time.Second)
	late, lp := r.pending(t, 201, payBy)
	b := event(t, "evt_late", "payment_intent.succeeded", lp, late, 999, "eur", payBy.Add(time.Second))
	if code, out := r.notify(t, b, tpSecret, now); code != http.StatusOK || out["outcome"] != "late" {
		t.Fatalf("late success: %d %v", code, out)
	}
	if row := r.order(t, late); row.Status != order.StatusPendingPayment || row.PaidAt != nil {
		t.Fatalf("a late success paid %+v", row)
	}
	// The payment's first verdict stands (the ledger's moves are monotonic):
	// its success of the right amount, after its mismatch was recorded (and
	// refunded), never pays the order.
	if code, out := r.notify(t, good, tpSecret, now); code != http.StatusOK || out["outcome"] != "mismatch" {
		t.Fatalf("the genuine success after the mismatch: %d %v, want mismatch", code, out)
	}
	if row := r.order(t, o); row.Status != order.StatusPendingPayment || row.PaidAt != nil {
		t.Fatalf("a mismatched payment paid %+v", row)
	}
	if m := r.count(t, "SELECT COUNT(*) FROM refunds WHERE provider_payment_id = ? AND status = 'pending' AND asked_by = 'notification'", p); m != 1 {
		t.Fatalf("the mismatch's refund row: %d, want one owed by the notification", m)
	}
}

// An order the saga has not persisted yet (its QUEUED view only) is checked
// out and paid: the notification writes the row a door pay writes (QUEUED,
// paid) and publishes it PAID, settling; no saga is woken (the saga makes it
// PAID when it takes the unit).
func TestNotificationPaysAQueuedOrder(t *testing.T) {
	t.Parallel()
	r := newRig(t, testpay.Knobs{})
	ctx := context.Background()
	id, payBy := order.NewID(), time.Now().Add(time.Minute)
	v := order.Message{OrderID: id, UserID: 300, ItemID: r.item.ID, ReservedAt: time.Now(), PayBy: &payBy}.QueuedView()
	if err := r.board.MarkQueued(ctx, v); err != nil {
		t.Fatal(err)
	}
	code, out := r.post(t, "/api/v1/orders/"+id+"/checkout", nil, map[string]string{buyerHeader: "300"})
	if code != http.StatusOK {
		t.Fatalf("checkout of a QUEUED order: %d %v", code, out)
	}
	if _, err := r.tp.Pay(ctx, out["payment_id"].(string)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the view published PAID", func() bool {
		v, ok, err := r.board.Status(ctx, id)
		return err == nil && ok && v.Status == order.StatusPaid && v.Settling
	})
	if row := r.order(t, id); !row.PaidQueued() {
		t.Fatalf("row %+v", row)
	}
	// A barrier: the desk sends wakes one at a time in order, so once a pending
	// order paid after it is woken, a wake of the QUEUED one would be seen.
	other, op := r.pending(t, 301, time.Now().Add(time.Minute))
	if _, err := r.tp.Pay(ctx, op); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pending order's saga woken", func() bool { return len(r.sagas.of(other)) > 0 })
	if w := r.sagas.of(id); len(w) != 0 {
		t.Fatalf("a paid QUEUED order's saga woken: %v", w)
	}
}
