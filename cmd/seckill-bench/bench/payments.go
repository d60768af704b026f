package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill/api/payhook"
	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
	"github.com/seckill/seckill/store"
)

// Stage 5, the payment stampede (issue 29, item 7): a sale of S + S/2 units
// sells out and drains to PENDING_PAYMENT; then, in rounds taken in turn,
// 512 payers pay a share of S/2 orders at the door (POST …/pay), and the
// test provider pays a share of the other S orders and notifies the API as
// fast as 512 connections carry it, 20 % of the notifications sent twice
// and 5 % held back so later ones overtake them. The sagas run beside
// both. The provider is the bench's own testpay (signing with the API's
// secret) and each payment row is recorded straight in MySQL, as a
// checkout would: the API's own test provider keeps its payments in the
// API's memory, and its checkouts go through the provider limiter (80/s),
// which is not what this stage measures.

// PaymentKnobs are stage 5's provider misbehaviour (issue 29, item 7).
var PaymentKnobs = testpay.Knobs{Duplicate: 0.2, Reorder: 0.05, ReorderBy: 250 * time.Millisecond}

// PaymentReport is what stage 5 measured.
type PaymentReport struct {
	ItemID        int64              `json:"item_id"`
	Notifications int                `json:"notifications"` // S: payments paid through the provider
	DoorPays      int                `json:"door_pays"`
	Rounds        []PaymentRound     `json:"rounds"`
	Answers       map[string]int64   `json:"notification_answers"` // by outcome (HTTP status or the door's verdict)
	Latency       Latency            `json:"notification_latency"` // every copy sent
	DoorAnswers   map[string]int64   `json:"door_answers"`
	DoorLatency   Latency            `json:"door_latency"`
	Refused       int64              `json:"in_time_refused"` // payments (either path) never answered paid
	Sent          int64              `json:"notifications_sent"`
	Events        int64              `json:"payment_events_rows"`
	UniqueEvents  int64              `json:"unique_events_answered"`
	Succeeded     int64              `json:"payments_succeeded"`
	OrdersPaid    int64              `json:"orders_paid"`
	Invariants    *invariant.Report  `json:"invariants,omitempty"`
	Sale          *SaleReport        `json:"sale"`
	Knobs         map[string]float64 `json:"knobs"`
}

// PaymentRound is one round's door pays and notifications, side by side.
type PaymentRound struct {
	DoorPerSec   float64 `json:"door_pays_per_second"`
	DoorP99MS    float64 `json:"door_p99_ms"`
	NotifyPerSec float64 `json:"notifications_applied_per_second"`
	NotifyP99MS  float64 `json:"notification_p99_ms"`
}

// stage5 runs the payment stampede.
func (r *stagesRun) stage5(firstBuyer int64) {
	if r.PaymentUnits <= 0 {
		return
	}
	r.settle("stage 5")
	rep, err := r.paymentStampede(firstBuyer)
	if rep != nil {
		r.rep.Details["payment_stampede"] = rep
		r.rep.Ratios = append(r.rep.Ratios, paymentRatios(rep)...)
	}
	if err != nil {
		r.fail("stage 5", err)
	}
}

func (r *stagesRun) say(format string, args ...any) {
	if r.Progress != nil {
		printf(r.Progress, "[stage 5] "+format+"\n", args...)
	}
}

func (r *stagesRun) paymentStampede(firstBuyer int64) (*PaymentReport, error) {
	ctx, d := r.ctx, r.d
	s := r.PaymentUnits
	doors := s / 2
	notifyURL := strings.TrimRight(r.APIURL, "/") + payhook.NotificationRoute
	if code, err := post(ctx, notifyURL, nil); err != nil || code == http.StatusNotFound {
		return nil, fmt.Errorf("the API takes no provider notifications (%d %v): run it with SECKILL_PAYMENT_PROVIDER=testpay", code, err)
	}
	r.say("a sale of %d units (%d to be paid by provider notifications, %d at the door), sold out and drained to PENDING_PAYMENT", s+doors, s, doors)
	fs := FlashSale{APIURL: r.APIURL, Units: int64(s + doors), Buyers: (s + doors) * 11 / 10, FirstBuyer: firstBuyer, Load: r.Load,
		MaxAttempts: 20, Lead: 2 * time.Second, PaymentTimeout: time.Hour, DrainTimeout: 20 * time.Minute,
		JWTSecret: r.secret, Progress: r.Progress, Log: r.log}
	sale, err := fs.Run(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("the sale: %w", err)
	}
	rep := &PaymentReport{ItemID: sale.ItemID, Sale: sale, Answers: map[string]int64{},
		Knobs: map[string]float64{"duplicate": PaymentKnobs.Duplicate, "reorder": PaymentKnobs.Reorder, "reorder_by_s": PaymentKnobs.ReorderBy.Seconds()}}
	var rows []store.Order
	if err := d.Store.DB().WithContext(ctx).Where("item_id = ? AND status = ?", sale.ItemID, order.StatusPendingPayment).
		Order("order_id").Find(&rows).Error; err != nil {
		return rep, err
	}
	if len(rows) < s+doors {
		return rep, fmt.Errorf("%d orders waiting for payment, want %d", len(rows), s+doors)
	}
	var doorRows, notifyRows []store.Order
	for i, o := range rows[:s+doors] {
		if i%3 == 2 {
			doorRows = append(doorRows, o)
		} else {
			notifyRows = append(notifyRows, o)
		}
	}
	rep.Notifications, rep.DoorPays = len(notifyRows), len(doorRows)

	sent := &sentNotes{outcomes: map[string][]string{}, sem: make(chan struct{}, payers), all: NewRecorder(time.Now()),
		rec: NewRecorder(time.Now()), hop: &http.Transport{MaxIdleConnsPerHost: payers}}
	tp := testpay.New(testpay.Options{Secret: r.Cfg.Payment.Testpay.Secret.Value(), NotifyURL: notifyURL, BaseURL: "http://bench",
		Client: &http.Client{Timeout: 30 * time.Second, Transport: sent}, Knobs: PaymentKnobs, Seed: 29, Logger: r.log})
	defer tp.Close()
	ids, err := r.checkouts(ctx, tp, sale.ItemID, notifyRows)
	if err != nil {
		return rep, err
	}
	door := &doorPays{rec: NewRecorder(time.Now()), secret: r.secret, api: clients([]string{r.APIURL})[0]}
	rounds := max(r.PaymentRounds, 1)
	for i := range rounds {
		var dr, nr roundFigures
		if i%2 == 0 { // in turn: door first, then notifications first
			dr, nr = door.run(ctx, share(doorRows, i, rounds)), sent.round(ctx, tp, share(ids, i, rounds))
		} else {
			nr, dr = sent.round(ctx, tp, share(ids, i, rounds)), door.run(ctx, share(doorRows, i, rounds))
		}
		rep.Rounds = append(rep.Rounds, PaymentRound{DoorPerSec: dr.perSec, DoorP99MS: dr.p99, NotifyPerSec: nr.perSec, NotifyP99MS: nr.p99})
		r.say("round %d of %d: door %.0f pays/s (p99 %.0f ms), notifications %.0f applied/s (p99 %.0f ms)",
			i+1, rounds, dr.perSec, dr.p99, nr.perSec, nr.p99)
	}
	r.say("waiting for the last copies in flight")
	sent.waitIdle(ctx)
	sum, dsum := sent.all.Summary(), door.rec.Summary()
	rep.Answers, rep.Latency, rep.DoorAnswers, rep.DoorLatency = sent.counts(), sum.Latency["all"], dsum.ByOutcome, dsum.Latency["all"]
	rep.Sent, rep.UniqueEvents = sum.Total, int64(len(sent.outcomes))
	rep.Refused = sent.refused() + door.refused.Load()
	return rep, r.verifyPayments(ctx, rep, sale)
}

// share is the i-th of n shares of xs.
func share[T any](xs []T, i, n int) []T {
	return xs[i*len(xs)/n : (i+1)*len(xs)/n]
}

// checkouts opens a provider payment per order and records it as the
// API's checkout does: the provider's payment ids, in the orders' order.
func (r *stagesRun) checkouts(ctx context.Context, tp *testpay.Provider, itemID int64, rows []store.Order) ([]string, error) {
	it, err := r.d.Store.GetItem(ctx, itemID)
	if err != nil {
		return nil, err
	}
	r.say("checking out %d orders at the test provider (%d %s each)", len(rows), it.PriceCents, it.Currency)
	ids := make([]string, len(rows))
	var firstErr error
	var once sync.Once
	parallel(32, len(rows), func(i int) {
		o := rows[i]
		p, err := tp.Create(ctx, provider.Request{OrderID: o.OrderID, Amount: it.PriceCents, Currency: it.Currency, PayBy: *o.PayBy})
		if err == nil {
			_, err = r.d.Store.SavePayment(ctx, store.Payment{OrderID: o.OrderID, UserID: o.UserID, ItemID: itemID, Provider: "testpay",
				ProviderPaymentID: p.ID, Amount: it.PriceCents, Currency: it.Currency, PayBy: *o.PayBy})
		}
		if err != nil {
			once.Do(func() { firstErr = err })
			return
		}
		ids[i] = p.ID
	})
	return ids, firstErr
}

// parallel runs fn(0..n-1) on workers goroutines.
func parallel(workers, n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// roundFigures are one side of a round: unique decisions per second (first
// send to last answer) and the p99 of the round's answers.
type roundFigures struct{ perSec, p99 float64 }

// doorPays pays orders at the door with 512 payers, as stage 4's buyers do.
type doorPays struct {
	rec     *Recorder
	secret  []byte
	api     *apiclient.Client
	refused atomic.Int64
}

func (p *doorPays) run(ctx context.Context, rows []store.Order) roundFigures {
	rec := NewRecorder(time.Now())
	t0 := time.Now()
	parallel(payers, len(rows), func(i int) {
		o := rows[i]
		tok, err := auth.Sign(p.secret, o.UserID, auth.RoleBuyer, time.Hour, time.Now())
		if err != nil {
			return
		}
		start := time.Now()
		code := 0
		if res, err := p.api.PayOrder(ctx, o.OrderID, apiclient.Bearer(tok)); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			code = res.StatusCode
		}
		now := time.Now()
		rec.Add(Outcome(uint16(code)), now, now.Sub(start))
		p.rec.Add(Outcome(uint16(code)), now, now.Sub(start))
		if code != http.StatusOK {
			p.refused.Add(1)
		}
	})
	s := rec.Summary()
	return roundFigures{perSec: float64(s.ByOutcome["200"]) / time.Since(t0).Seconds(), p99: s.Latency["all"].P99}
}

// sentNotes is the provider's transport: at most 512 notifications in
// flight (the door's payers' count), each answer timed from its send and
// its outcome kept by event.
type sentNotes struct {
	sem      chan struct{}
	hop      http.RoundTripper
	all, rec *Recorder // every answer; the round's
	inFlight atomic.Int64
	mu       sync.Mutex
	outcomes map[string][]string // event id -> the answers of its copies
	payments map[string]string   // payment id -> its event id, once answered
	last     time.Time           // when the round's latest payment was first answered 200
}

func (s *sentNotes) RoundTrip(req *http.Request) (*http.Response, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	var ev provider.StripeEvent
	_ = json.Unmarshal(body, &ev)
	s.sem <- struct{}{}
	t0 := time.Now()
	res, err := s.hop.RoundTrip(req)
	<-s.sem
	outcome := "error"
	if err == nil {
		b, rerr := io.ReadAll(res.Body)
		_ = res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(b))
		var out struct{ Outcome string }
		if res.StatusCode != http.StatusOK || rerr != nil || json.Unmarshal(b, &out) != nil || out.Outcome == "" {
			outcome = Outcome(uint16(res.StatusCode))
		} else {
			outcome = out.Outcome
		}
	}
	now := time.Now()
	s.mu.Lock()
	s.all.Add(outcome, now, now.Sub(t0))
	s.rec.Add(outcome, now, now.Sub(t0))
	s.outcomes[ev.ID] = append(s.outcomes[ev.ID], outcome)
	if _, ok := s.payments[ev.Data.Object.ID]; !ok && outcome != "error" && res.StatusCode == http.StatusOK {
		s.payments[ev.Data.Object.ID], s.last = ev.ID, now
	}
	s.mu.Unlock()
	return res, err
}

// round pays ids at the provider at once and waits until each has been
// answered 200 and nothing is in flight; its rate runs from the first send
// to the last payment's first 200, as the door's to its last answer.
func (s *sentNotes) round(ctx context.Context, tp *testpay.Provider, ids []string) roundFigures {
	s.mu.Lock()
	s.payments, s.rec, s.last = map[string]string{}, NewRecorder(time.Now()), time.Time{}
	s.mu.Unlock()
	t0 := time.Now()
	for _, id := range ids {
		if _, err := tp.Pay(ctx, id); err != nil {
			s.all.Add("not_paid_at_provider", time.Now(), 0)
		}
	}
	for ctx.Err() == nil {
		s.mu.Lock()
		done := len(s.payments) >= len(ids)
		s.mu.Unlock()
		if done && s.idle(ctx) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.mu.Lock()
	sum, elapsed := s.rec.Summary(), s.last.Sub(t0).Seconds()
	s.mu.Unlock()
	if elapsed <= 0 {
		return roundFigures{}
	}
	return roundFigures{perSec: float64(len(ids)) / elapsed, p99: sum.Latency["all"].P99}
}

// idle reports whether no copy was in flight over the next 100 ms (both
// copies of a duplicate leave together).
func (s *sentNotes) idle(ctx context.Context) bool {
	for range 5 {
		if s.inFlight.Load() > 0 || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// waitIdle waits until nothing was in flight for 2 s (a resend backs off 1 s).
func (s *sentNotes) waitIdle(ctx context.Context) {
	quiet := time.Now()
	for ctx.Err() == nil && time.Since(quiet) < 2*time.Second {
		if s.inFlight.Load() > 0 {
			quiet = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counts are the answers by outcome.
func (s *sentNotes) counts() map[string]int64 { return s.all.Counts() }

// refused counts events none of whose copies was answered paid.
func (s *sentNotes) refused() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, outs := range s.outcomes {
		paid := false
		for _, o := range outs {
			paid = paid || o == string(store.VerdictPaid)
		}
		if !paid {
			n++
		}
	}
	return n
}

// verifyPayments reads what MySQL holds: one event row per event, S
// succeeded payments, every order of the sale PAID; and the invariants.
func (r *stagesRun) verifyPayments(ctx context.Context, rep *PaymentReport, sale *SaleReport) error {
	db := r.d.Store.DB().WithContext(ctx)
	qs := []struct {
		dst *int64
		sql string
	}{
		{&rep.Events, "SELECT COUNT(*) FROM payment_events e JOIN payments p ON p.provider_payment_id = e.payment_id WHERE p.item_id = ?"},
		{&rep.Succeeded, "SELECT COUNT(*) FROM payments WHERE item_id = ? AND status = 'succeeded'"},
		{&rep.OrdersPaid, "SELECT COUNT(*) FROM seckill_order WHERE item_id = ? AND status = 'PAID'"},
	}
	for _, q := range qs {
		if err := db.Raw(q.sql, rep.ItemID).Scan(q.dst).Error; err != nil {
			return err
		}
	}
	var acc []invariant.Accepted
	if err := db.Raw("SELECT order_id, user_id FROM seckill_order WHERE item_id = ?", rep.ItemID).Scan(&acc).Error; err != nil {
		return err
	}
	inv, err := invariant.Check(ctx, invariant.Deps{Store: r.d.Store, Stock: r.d.Stock, Workflows: r.d.Workflows},
		invariant.Input{ItemID: rep.ItemID, Accepted: acc})
	rep.Invariants = &inv
	r.say("MySQL: %d event rows for %d events answered, %d payments succeeded of %d, %d orders PAID of %d; invariants: %s",
		rep.Events, rep.UniqueEvents, rep.Succeeded, rep.Notifications, rep.OrdersPaid, rep.Notifications+rep.DoorPays,
		verdict(&SaleReport{Invariants: rep.Invariants}))
	return err
}

// exactlyOnce counts what breaks exactly-once: event rows other than the
// events answered, payments not succeeded, orders not PAID.
func (rep *PaymentReport) exactlyOnce() int64 {
	abs := func(x int64) int64 { return max(x, -x) }
	return abs(rep.Events-rep.UniqueEvents) + abs(rep.Succeeded-int64(rep.Notifications)) +
		abs(rep.OrdersPaid-int64(rep.Notifications+rep.DoorPays))
}

// paymentRatios judge stage 5: the notifications' applied rate against the
// door's pays, round by round, their answer p99, and exactly-once.
func paymentRatios(p *PaymentReport) []Ratio {
	var notes, doors []float64
	for _, x := range p.Rounds {
		notes, doors = append(notes, x.NotifyPerSec), append(doors, x.DoorPerSec)
	}
	inv := "not checked"
	if p.Invariants != nil {
		inv = verdict(&SaleReport{Invariants: p.Invariants})
	}
	return []Ratio{
		sideBySide("5", "notifications applied/s vs door pays/s (512 in flight each, sagas running)", notes, doors, "/s", 0.8, true,
			fmt.Sprintf("%d rounds in turn: %d notifications (%d sent, %s), %d door pays; notifications %s/s, door %s/s",
				len(p.Rounds), p.Notifications, p.Sent, Counts(p.Answers), p.DoorPays, spread(notes, "%.0f"), spread(doors, "%.0f"))),
		atMost("5", "p99 notification -> answer", p.Latency.P99/1000, 1, "s",
			fmt.Sprintf("p50 %.0f ms, max %.0f ms; the door's pay p50 %.0f ms, p99 %.0f ms", p.Latency.P50, p.Latency.Max, p.DoorLatency.P50, p.DoorLatency.P99)),
		atMost("5", "payments in time and refused", float64(p.Refused), 0, "payments", "door answers "+Counts(p.DoorAnswers)),
		atMost("5", "exactly-once breaks in MySQL", float64(p.exactlyOnce()), 0, "rows",
			fmt.Sprintf("%d event rows for %d events, %d payments succeeded of %d, %d orders PAID of %d; invariants: %s",
				p.Events, p.UniqueEvents, p.Succeeded, p.Notifications, p.OrdersPaid, p.Notifications+p.DoorPays, inv)),
	}
}

// post is the status of an empty POST to url.
func post(ctx context.Context, url string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode, nil
}
