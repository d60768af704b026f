package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/stripepay"
	"github.com/seckill/seckill/store"
)

// Stage 5, the payment stampede (issue 29, item 7), through the path a shop
// on Stripe runs (issue 39): a sale of S + S/2 units sells out through the
// bench's API on SECKILL_PAYMENT_PROVIDER=stripe and drains to
// PENDING_PAYMENT; S of its buyers check out (POST …/checkout: stripe-go
// opens a Checkout Session at the Stripe stand-in, cmd/seckill-stripe).
// Then, in rounds taken in turn, 512 payers pay a share of the other S/2
// orders at the door (POST …/pay, on the bench's API on door: the same
// slice, the same binary), and 512 payers pay a share of the sessions on
// the stand-in (its page's button: POST /_standin/sessions/{id}/pay), each
// waiting until the shop has decided the payment: the stand-in sends
// checkout.session.completed and payment_intent.succeeded, signed as Stripe
// signs them, 20 % of them twice and 5 % held back so later ones overtake
// them, through the bench's Relay to the API's notification route. The
// sagas run beside both. Afterwards the invariants are checked with the
// books held against the stand-in's own record of every payment.

// StandinKnobs are the Stripe stand-in's misbehaviour knobs stage 5 turns
// (PUT /_standin/knobs; payment/provider/standin.Knobs, which the bench
// does not link: it reaches the stand-in over HTTP, as the shop does).
type StandinKnobs struct {
	Duplicate float64 // the fraction of events sent twice
	Reorder   float64 // the fraction held back ReorderBy, so later ones overtake them
	ReorderBy time.Duration
}

// PaymentKnobs are stage 5's provider misbehaviour (issue 29, item 7).
var PaymentKnobs = StandinKnobs{Duplicate: 0.2, Reorder: 0.05, ReorderBy: 250 * time.Millisecond}

// StripePath is what stage 5 pays through: the processes `seckill-bench
// run` starts beside its API on door (Stages.APIURL, the door's pays).
type StripePath struct {
	APIURL string // the bench's API on stripe: the sale, the checkouts, the notifications
	APIPID int
	// StandinURL is the Stripe stand-in (the API's SECKILL_PAYMENT_STRIPE_URL),
	// Key an API key it takes (the API's SECKILL_PAYMENT_STRIPE_KEY).
	StandinURL, Key string
	Relay           *Relay // the stand-in's -webhook-url: forwards to APIURL's notification route
}

// PaymentReport is what stage 5 measured.
type PaymentReport struct {
	ItemID        int64              `json:"item_id"`
	Provider      string             `json:"provider"`      // stripe: the stand-in, through stripe-go
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
	CheckoutS     float64            `json:"checkouts_s"` // the S checkouts (not measured against anything)
	Invariants    *invariant.Report  `json:"invariants,omitempty"`
	Sale          *SaleReport        `json:"sale"`
	Knobs         map[string]float64 `json:"knobs"`
}

// PaymentRound is one round's door pays and notifications, side by side.
type PaymentRound struct {
	DoorPerSec   float64 `json:"door_pays_per_second"`
	DoorP99MS    float64 `json:"door_p99_ms"`
	NotifyPerSec float64 `json:"notifications_applied_per_second"` // payments decided (their first 200) per second
	NotifyP99MS  float64 `json:"notification_p99_ms"`
	// AnsweredPerSec: every notification copy answered (2 events a payment, duplicates) per second.
	AnsweredPerSec float64 `json:"notifications_answered_per_second"`
}

// stage5 runs the payment stampede.
func (r *stagesRun) stage5(firstBuyer int64) {
	if r.PaymentUnits <= 0 {
		return
	}
	if r.Stripe == nil || r.Stripe.Relay == nil {
		r.fail("stage 5", errors.New("it pays through the Stripe stand-in and the relay `seckill-bench run` starts"))
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
	ctx, d, sp := r.ctx, r.d, r.Stripe
	s := r.PaymentUnits
	doors := s / 2
	admin := newStandinAdmin(sp.StandinURL, sp.Key)
	if err := admin.setKnobs(ctx, PaymentKnobs); err != nil {
		return nil, fmt.Errorf("the stand-in's knobs: %w", err)
	}
	r.say("a sale of %d units on the API on stripe (%d to be paid through the Stripe stand-in, %d at the door), sold out and drained to PENDING_PAYMENT",
		s+doors, s, doors)
	fs := FlashSale{APIURL: sp.APIURL, Units: int64(s + doors), Buyers: (s + doors) * 11 / 10, FirstBuyer: firstBuyer, Load: r.Load,
		MaxAttempts: 20, Lead: 2 * time.Second, PaymentTimeout: time.Hour, DrainTimeout: 20 * time.Minute, APIPID: sp.APIPID,
		JWTSecret: r.secret, Progress: r.Progress, Log: r.log}
	sale, err := fs.Run(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("the sale: %w", err)
	}
	rep := &PaymentReport{ItemID: sale.ItemID, Provider: "stripe", Sale: sale, Answers: map[string]int64{},
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
	var orders []string // notifyRows' ids
	for i, o := range rows[:s+doors] {
		if i%3 == 2 {
			doorRows = append(doorRows, o)
		} else {
			notifyRows, orders = append(notifyRows, o), append(orders, o.OrderID)
		}
	}
	rep.Notifications, rep.DoorPays = len(notifyRows), len(doorRows)
	t0 := time.Now()
	sessions, err := r.checkouts(ctx, sp.APIURL, notifyRows)
	if err != nil {
		return rep, err
	}
	rep.CheckoutS = time.Since(t0).Seconds()
	r.say("%d Checkout Sessions opened in %.1f s", len(sessions), rep.CheckoutS)
	door := &doorPays{rec: NewRecorder(time.Now()), secret: r.secret, api: clients([]string{r.APIURL})[0]}
	notes := sp.Relay.notes
	rounds := max(r.PaymentRounds, 1)
	for i := range rounds {
		var dr, nr roundFigures
		pay := func() roundFigures {
			return notes.round(ctx, admin, share(sessions, i, rounds), share(orders, i, rounds))
		}
		if i%2 == 0 { // in turn: door first, then notifications first
			dr, nr = door.run(ctx, share(doorRows, i, rounds)), pay()
		} else {
			nr, dr = pay(), door.run(ctx, share(doorRows, i, rounds))
		}
		rep.Rounds = append(rep.Rounds, PaymentRound{DoorPerSec: dr.perSec, DoorP99MS: dr.p99, NotifyPerSec: nr.perSec, NotifyP99MS: nr.p99,
			AnsweredPerSec: nr.answers})
		r.say("round %d of %d: door %.0f pays/s (p99 %.0f ms), Stripe %.0f payments applied/s (%.0f notifications answered/s, p99 %.0f ms)",
			i+1, rounds, dr.perSec, dr.p99, nr.perSec, nr.answers, nr.p99)
	}
	r.say("waiting for the last copies in flight")
	notes.waitIdle(ctx)
	sum, dsum := notes.all.Summary(), door.rec.Summary()
	rep.Answers, rep.Latency, rep.DoorAnswers, rep.DoorLatency = notes.counts(), sum.Latency["all"], dsum.ByOutcome, dsum.Latency["all"]
	rep.Sent, rep.UniqueEvents = sum.Total, notes.events()
	rep.Refused = notes.refused(orders) + door.refused.Load()
	return rep, r.verifyPayments(ctx, rep)
}

// share is the i-th of n shares of xs.
func share[T any](xs []T, i, n int) []T {
	return xs[i*len(xs)/n : (i+1)*len(xs)/n]
}

// checkouts opens each order's Checkout Session as its buyer does (POST
// …/checkout on the API on stripe: stripe-go creates it at the stand-in),
// 64 at a time: the sessions' ids, in the orders' order. The setup of the
// stage, not its subject.
func (r *stagesRun) checkouts(ctx context.Context, apiURL string, rows []store.Order) ([]string, error) {
	api, err := apiclient.NewClientWithResponses(strings.TrimRight(apiURL, "/"), apiclient.WithHTTPClient(apiClient))
	if err != nil {
		return nil, err
	}
	r.say("checking out %d orders: a Checkout Session each at the Stripe stand-in", len(rows))
	ids := make([]string, len(rows))
	var firstErr error
	var once sync.Once
	parallel(64, len(rows), func(i int) {
		o := rows[i]
		tok, err := auth.Sign(r.secret, o.UserID, auth.RoleBuyer, time.Hour, time.Now())
		if err == nil {
			var res *apiclient.CheckoutOrderResponse
			res, err = api.CheckoutOrderWithResponse(ctx, o.OrderID, apiclient.Bearer(tok))
			if err = apiclient.Want(res, err, http.StatusOK); err == nil {
				ids[i] = res.JSON200.PaymentID
			}
		}
		if err != nil {
			once.Do(func() { firstErr = fmt.Errorf("checkout of order %s: %w", o.OrderID, err) })
		}
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
// send to last answer) and the p99 of the round's answers; for the Stripe
// side, also the notifications answered per second (every copy, to the
// round's last answer).
type roundFigures struct{ perSec, p99, answers float64 }

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

// verifyPayments reads what MySQL holds: one event row per event, S
// succeeded payments, every order of the sale PAID; and the invariants,
// with the books held against the stand-in's own record of each of the S
// payments (read through stripe-go behind provider.Guard, as the worker's
// reconcile reads Stripe's).
func (r *stagesRun) verifyPayments(ctx context.Context, rep *PaymentReport) error {
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
	sp := r.Stripe
	stripe := provider.Guard(stripepay.New(stripepay.Config{Key: sp.Key, URL: sp.StandinURL}), provider.Limits{RPS: 10_000})
	r.say("checking the invariants, the books against the stand-in's record of each of the %d payments", rep.Notifications)
	// A third of the orders are paid at the door, the baseline, with no
	// provider payment: out of the books (RequirePayments off), as under
	// SECKILL_PAYMENT_PROVIDER=door.
	inv, err := invariant.Check(ctx, invariant.Deps{Store: r.d.Store, Stock: r.d.Stock, Workflows: r.d.Workflows,
		Ledger: books.Ledger{Name: rep.Provider, Recorder: stripe, Budget: rep.Notifications}},
		invariant.Input{ItemID: rep.ItemID, Accepted: acc})
	rep.Invariants = &inv
	r.say("MySQL: %d event rows for %d events answered, %d payments succeeded of %d, %d orders PAID of %d; invariants: %s; books: %s",
		rep.Events, rep.UniqueEvents, rep.Succeeded, rep.Notifications, rep.OrdersPaid, rep.Notifications+rep.DoorPays,
		verdict(&SaleReport{Invariants: rep.Invariants}), BooksText(rep.Invariants))
	return err
}

// exactlyOnce counts what breaks exactly-once: event rows other than the
// events answered, payments not succeeded, orders not PAID.
func (rep *PaymentReport) exactlyOnce() int64 {
	abs := func(x int64) int64 { return max(x, -x) }
	return abs(rep.Events-rep.UniqueEvents) + abs(rep.Succeeded-int64(rep.Notifications)) +
		abs(rep.OrdersPaid-int64(rep.Notifications+rep.DoorPays))
}

// apart is how far, in minor units, the books are from the provider's
// record: captured, refunded and owed back, summed over the currencies,
// and how many of the provider's payments were not read.
func apart(inv *invariant.Report, payments int) (cents int64, unread int) {
	if inv == nil {
		return 0, payments
	}
	abs := func(x int64) int64 { return max(x, -x) }
	theirs := map[string]store.Money{}
	for _, m := range inv.Provider {
		theirs[m.Currency] = m
	}
	for _, m := range inv.Money {
		t := theirs[m.Currency]
		delete(theirs, m.Currency)
		cents += abs(m.Captured-t.Captured) + abs(m.Refunded-t.Refunded) + abs(m.RefundsPending-t.RefundsPending)
	}
	for _, t := range theirs {
		cents += t.Captured + t.Refunded + t.RefundsPending
	}
	return cents, payments - inv.ProviderRead
}

// paymentRatios judge stage 5: the payments applied through Stripe's
// notifications against the door's pays, round by round, their answer p99,
// exactly-once, and the books against the provider's record.
func paymentRatios(p *PaymentReport) []Ratio {
	var notes, doors, answered []float64
	for _, x := range p.Rounds {
		notes, doors, answered = append(notes, x.NotifyPerSec), append(doors, x.DoorPerSec), append(answered, x.AnsweredPerSec)
	}
	inv := "not checked"
	if p.Invariants != nil {
		inv = verdict(&SaleReport{Invariants: p.Invariants})
	}
	cents, unread := apart(p.Invariants, p.Notifications)
	return []Ratio{
		sideBySide("5", "Stripe payments applied/s (checkout.session.completed, one event a payment) vs door pays/s (512 in flight each, sagas running)",
			notes, doors, "/s", 0.8, true,
			fmt.Sprintf("%d rounds in turn: %d payments through the Stripe stand-in (%d notifications sent, %s), %d door pays; "+
				"Stripe %s payments/s (%s notifications answered/s), door %s/s",
				len(p.Rounds), p.Notifications, p.Sent, Counts(p.Answers), p.DoorPays, spread(notes, "%.0f"), spread(answered, "%.0f"),
				spread(doors, "%.0f"))),
		atMost("5", "p99 notification -> answer", p.Latency.P99/1000, 1, "s",
			fmt.Sprintf("p50 %.0f ms, max %.0f ms; the door's pay p50 %.0f ms, p99 %.0f ms", p.Latency.P50, p.Latency.Max, p.DoorLatency.P50, p.DoorLatency.P99)),
		atMost("5", "payments in time and refused", float64(p.Refused), 0, "payments", "door answers "+Counts(p.DoorAnswers)),
		atMost("5", "exactly-once breaks in MySQL", float64(p.exactlyOnce()), 0, "rows",
			fmt.Sprintf("%d event rows for %d events, %d payments succeeded of %d, %d orders PAID of %d; invariants: %s",
				p.Events, p.UniqueEvents, p.Succeeded, p.Notifications, p.OrdersPaid, p.Notifications+p.DoorPays, inv)),
		atMost("5", "books apart from the provider's record", float64(cents), 0, "cents",
			fmt.Sprintf("%s; %d of %d payments not read", BooksText(p.Invariants), unread, p.Notifications)),
	}
}

// BooksText is a sale's books beside the provider's record of them:
// "EUR captured 19,990,000, refunded 0, owed 0; the provider's record (10,000
// payments read): EUR captured 19,990,000, refunded 0, pending 0".
func BooksText(inv *invariant.Report) string {
	if inv == nil {
		return "not checked"
	}
	money := func(ms []store.Money, owed string) string {
		var parts []string
		for _, m := range ms {
			parts = append(parts, fmt.Sprintf("%s captured %s, refunded %s, %s %s", m.Currency, thousands(m.Captured),
				thousands(m.Refunded), owed, thousands(m.RefundsPending)))
		}
		if len(parts) == 0 {
			return "none"
		}
		return strings.Join(parts, "; ")
	}
	out := "ours " + money(inv.Money, "owed")
	if inv.ProviderRead == 0 {
		return out + "; the provider's record not read"
	}
	return fmt.Sprintf("%s; the provider's record (%s payments read): %s", out, thousands(int64(inv.ProviderRead)), money(inv.Provider, "pending"))
}

// standinAdmin reaches the stand-in's admin routes (/_standin/, with an
// API key it takes) over HTTP: the knobs, and the test card on a session.
type standinAdmin struct {
	base, key string
	hc        *http.Client
}

func newStandinAdmin(base, key string) *standinAdmin {
	return &standinAdmin{base: strings.TrimRight(base, "/"), key: key,
		hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: payers}}}
}

// setKnobs turns the knobs (PUT /_standin/knobs; durations as Go duration strings).
func (a *standinAdmin) setKnobs(ctx context.Context, k StandinKnobs) error {
	body, err := json.Marshal(map[string]any{"duplicate": k.Duplicate, "reorder": k.Reorder, "reorder_by": k.ReorderBy.String()})
	if err != nil {
		return err
	}
	return a.do(ctx, http.MethodPut, "/_standin/knobs", body)
}

// pay pays a Checkout Session with the test card, as its page's button
// (POST /_standin/sessions/{id}/pay): the stand-in sends its events.
func (a *standinAdmin) pay(ctx context.Context, session string) error {
	return a.do(ctx, http.MethodPost, "/_standin/sessions/"+url.PathEscape(session)+"/pay", nil)
}

func (a *standinAdmin) do(ctx context.Context, method, path string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	req.Header.Set("Content-Type", "application/json")
	res, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("the stand-in: %s %s: %s: %s", method, path, res.Status, b)
	}
	return nil
}
