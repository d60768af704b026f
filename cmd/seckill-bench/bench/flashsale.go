package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// FlashSale is one flash sale against a running deployment.
type FlashSale struct {
	APIURL string
	// APIURLs, when set, are every API instance: purchases spread over them
	// (Sale.BaseURLs) and pays go round robin; the item is created on APIURL.
	APIURLs     []string
	Units       int64
	Buyers      int
	FirstBuyer  int64 // buyer ids are FirstBuyer .. FirstBuyer+Buyers-1
	Load        Load
	MaxAttempts int
	// Lead is how far ahead of now the sale starts; the buyers fire at that instant.
	Lead           time.Duration
	PaymentTimeout time.Duration
	// PayFraction of the orders are paid as a buyer would: at their 202 (a
	// pay the door refuses while the order is QUEUED, with early payment
	// off, is sent again once the order waits for payment).
	PayFraction float64
	// WaitTimeouts waits for every unpaid order's payment window to close
	// and its compensation to run, then checks that every unpaid unit is back.
	WaitTimeouts bool
	DrainTimeout time.Duration
	// PIDs of the API and worker processes (0: found by name).
	APIPID, WorkerPID int
	JWTSecret         []byte
	// HoldSagas, when set, is called with true before the stampede and with
	// false right after it (the worker's order consumer held, then
	// released): the stampede then measures the purchase path alone, and
	// the sagas per second count from the release.
	HoldSagas func(hold bool) error
	// MeterPIDs, when set, are the processes whose CPU the stampede is
	// charged with (SaleReport.StampedeCPU).
	MeterPIDs map[string][]int
	Progress  io.Writer
	Log       *slog.Logger
	// DuringStampede, when set, runs alongside the stampede (a fault
	// injected while purchases flow); the sale waits for it before the drain.
	DuringStampede func(ctx context.Context, itemID int64) error
	// AfterStampede, when set, runs once the stampede is over, before the
	// drain (a fault while the sagas run).
	AfterStampede func(ctx context.Context, itemID int64) error
	// BeforeCheck, when set, runs just before the invariant check (a
	// repair, e.g. the reconciler after a fault that loses data).
	BeforeCheck func(ctx context.Context, itemID int64) error
}

// Deps are the systems the sale reads directly (the invariant checks and
// the drain watch).
type Deps struct {
	Store     *store.Store
	Stock     *stock.Store
	Workflows snapshot.WorkflowLister // nil: skip the Temporal checks
}

// SaleReport is everything a flash sale measured and checked.
type SaleReport struct {
	Kind            string             `json:"kind"`
	At              time.Time          `json:"at"`
	Machine         Machine            `json:"machine"`
	Config          map[string]any     `json:"config"`
	ItemID          int64              `json:"item_id"`
	Answers         Summary            `json:"answers"`
	Attempts        int64              `json:"attempts"`
	Retries         int64              `json:"retries"`
	GaveUp          int64              `json:"gave_up"`
	ClientErrors    int64              `json:"client_errors"`
	Recovered       int64              `json:"recovered_from_409,omitempty"`
	Accepted        int                `json:"accepted"`
	AcceptedPerSec  float64            `json:"accepted_per_second"`
	SoldOutAfterS   float64            `json:"sold_out_after_s"`
	DrainAfterS     float64            `json:"drain_after_s"` // from the start to the last accepted order persisted
	Drained         bool               `json:"drained"`
	SagasPerSec     float64            `json:"sagas_per_second"`
	OrdersPerSecond []int64            `json:"orders_per_second"` // orders reaching PENDING_PAYMENT (or final), per second since the start
	Paid            map[string]int64   `json:"pay_answers"`
	TimeoutsAfterS  float64            `json:"timeouts_done_after_s,omitempty"`
	Memory          map[string]ProcMem `json:"memory"`
	Invariants      *invariant.Report  `json:"invariants,omitempty"`
	Notes           []string           `json:"notes,omitempty"`
	PayLatency      map[string]Latency `json:"pay_latency,omitempty"`
	// AcceptedToPayable is, over every paid order, what its buyer waited
	// to pay: from the 202's arrival to the arrival of the first 200 to a
	// pay (sent at the 202, and again once the order waits for payment if
	// the door refused it while QUEUED), both on the bench's clock.
	AcceptedToPayable Latency `json:"accepted_to_payable"`
	// AcceptedToDeducted is, over every order that took its unit from the
	// stock row, the time from its 202 (the order id's timestamp) to that
	// deduction (stock_deduction.created_at, written in the same
	// transaction): the order tier's catch-up.
	AcceptedToDeducted Latency `json:"accepted_to_deducted"`
	// DeductedHistogram counts AcceptedToDeducted over DeductedBoundsS.
	DeductedHistogram []int64   `json:"accepted_to_deducted_histogram"`
	DeductedBoundsS   []float64 `json:"accepted_to_deducted_bounds_s"`
	// InTimePaysRefused counts pays sent before the order's deadline that
	// were not answered 200 (the saga issue's target: 0).
	InTimePaysRefused int64 `json:"in_time_pays_refused"`
	// OrdersByStatus is, per second since the start, how many of the item's
	// accepted orders were in each status (QUEUED = accepted, no saga row
	// past QUEUED yet).
	OrdersByStatus map[string][]int64 `json:"orders_by_status_timeline"`
	// StampedeCPU is the CPU-µs per answer of each metered process during
	// the stampede, and their "total".
	StampedeCPU map[string]float64 `json:"stampede_cpu_us_per_answer,omitempty"`
}

// DeductedBoundsS are the upper bounds (seconds) of the 202 -> deducted
// histogram.
var DeductedBoundsS = []float64{0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}

// Machine is where the numbers were taken.
type Machine struct {
	CPUs     int     `json:"cpus"`
	MemoryGB float64 `json:"memory_gb"`
	Kernel   string  `json:"kernel"`
	Go       string  `json:"go"`
	Host     string  `json:"host"`
}

// ThisMachine describes the machine we run on.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	m.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %f kB", &kb); err == nil {
			m.MemoryGB = kb / 1024 / 1024
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// MintBuyers signs a token per buyer (ids first..first+n-1) with the JWT
// secret, the way `seckill token` does.
func MintBuyers(secret []byte, first int64, n int, ttl time.Duration) ([]Buyer, error) {
	now := time.Now()
	return mintEach(first, n, func(id int64) (string, error) { return auth.Sign(secret, id, auth.RoleBuyer, ttl, now) })
}

// mintEach signs a token per buyer (ids first..first+n-1) with sign, on
// every core.
func mintEach(first int64, n int, sign func(id int64) (string, error)) ([]Buyer, error) {
	out := make([]Buyer, n)
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	workers := runtime.NumCPU()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += workers {
				id := first + int64(i)
				tok, err := sign(id)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				out[i] = Buyer{ID: id, Token: tok}
			}
		}(w)
	}
	wg.Wait()
	return out, firstErr
}

// Item is the part of the API's item answer the bench uses.
type Item struct {
	ID         int64 `json:"id"`
	StockTotal int64 `json:"stock_total"`
	StockLeft  int64 `json:"stock_left"`
}

// CreateItem creates an item through the API (POST /api/v1/items) with an
// admin token signed locally.
func CreateItem(ctx context.Context, apiURL string, secret []byte, name string, units int64, start time.Time,
	window time.Duration, paymentTimeout time.Duration) (Item, error) {
	tok, err := auth.Sign(secret, 1, auth.RoleAdmin, time.Hour, time.Now())
	if err != nil {
		return Item{}, err
	}
	api, err := apiclient.New(apiURL, tok, apiClient)
	if err != nil {
		return Item{}, err
	}
	secs := int(paymentTimeout / time.Second)
	res, err := api.CreateItemWithResponse(ctx, apiclient.CreateItem{Name: name, PriceCents: 1999, StockTotal: units,
		StartAt: start.UTC(), EndAt: start.Add(window).UTC(), PaymentTimeoutSeconds: &secs})
	if err := apiclient.Want(res, err, http.StatusCreated); err != nil {
		return Item{}, fmt.Errorf("create item: %w", err)
	}
	return Item{ID: res.JSON201.ID, StockTotal: res.JSON201.StockTotal, StockLeft: res.JSON201.StockLeft}, nil
}

// apiClient is the HTTP client of the bench's calls through apiclient (the
// item's creation, the pays, the sold-out probe).
var apiClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: payers}}

// clients are the generated clients of urls, on apiClient, answers unread
// (the callers count statuses).
func clients(urls []string) []*apiclient.Client {
	out := make([]*apiclient.Client, len(urls))
	for i, u := range urls {
		out[i], _ = apiclient.NewClient(strings.TrimRight(u, "/"), apiclient.WithHTTPClient(apiClient)) // no option fails
	}
	return out
}

// get is the status of GET url (a probe: /healthz or /readyz of any
// listener; the body is dropped).
func get(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	res, err := apiClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode, nil
}

// WaitReady polls GET /healthz until the API answers 200.
func WaitReady(ctx context.Context, url string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		code, err := get(ctx, url)
		if err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (last: %d %v)", url, within, code, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Run runs the sale: item, tokens, stampede, drain (paying a fraction),
// payment timeouts, invariant checks. The report is returned even when the
// checks fail; an error means the sale could not be run or checked.
func (f FlashSale) Run(ctx context.Context, d Deps) (*SaleReport, error) {
	log := f.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep := f.newReport()
	buyers, it, start, err := f.prepare(ctx, rep, log)
	if err != nil {
		return nil, err
	}

	mem := SampleRSS(ctx, map[string]int{"api": f.APIPID, "worker": f.WorkerPID})
	defer func() {
		if rep.Memory == nil {
			rep.Memory = mem.Stop()
		}
	}()

	// The drain watch runs from the start: it counts orders persisted per
	// second; the chosen fraction is paid at the 202 (Sale.OnAccepted).
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w := f.newWatcher(d, it.ID, start, buyers)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); w.run(watchCtx) }()

	if err := waitUntil(ctx, start); err != nil {
		return nil, err
	}
	hold := &sagaHold{hold: f.HoldSagas}
	if err := hold.start(); err != nil {
		return nil, err
	}
	defer hold.releaseIfHeld() // however the sale ends, the worker is not left held
	res, err := f.stampede(ctx, rep, log, it.ID, buyers, w)
	if err != nil {
		return rep, err
	}
	sagasFrom, err := f.afterStampede(ctx, rep, it.ID, res, hold)
	if err != nil {
		return rep, err
	}

	f.drain(ctx, rep, w, len(res.Accepted), start, sagasFrom)
	log.Info("drained", "ok", rep.Drained, "after", rep.DrainAfterS)
	if f.WaitTimeouts {
		f.waitTimeouts(ctx, rep, w, start)
	}
	stopWatch()
	<-watchDone
	rep.Memory = mem.Stop()
	rep.figures(ctx, w, d.Store)
	return rep, f.check(ctx, rep, d, res)
}

// newReport is the sale's report before anything ran: its settings.
func (f FlashSale) newReport() *SaleReport {
	return &SaleReport{Kind: "flash-sale", At: time.Now().UTC(), Machine: ThisMachine(), Paid: map[string]int64{},
		Config: map[string]any{"api_url": f.APIURL, "units": f.Units, "buyers": f.Buyers, "load": f.Load.String(),
			"max_attempts": f.MaxAttempts, "payment_timeout_s": f.PaymentTimeout.Seconds(), "pay_fraction": f.PayFraction,
			"wait_timeouts": f.WaitTimeouts}}
}

// prepare mints the buyers' tokens and creates the item, starting Lead
// from now.
func (f FlashSale) prepare(ctx context.Context, rep *SaleReport, log *slog.Logger) ([]Buyer, Item, time.Time, error) {
	log.Info("minting buyer tokens", "buyers", f.Buyers)
	buyers, err := MintBuyers(f.JWTSecret, f.FirstBuyer, f.Buyers, 2*time.Hour)
	if err != nil {
		return nil, Item{}, time.Time{}, err
	}
	start := time.Now().Add(f.Lead).Truncate(time.Millisecond)
	it, err := CreateItem(ctx, f.APIURL, f.JWTSecret, fmt.Sprintf("bench flash sale %s", rep.At.Format(time.RFC3339)),
		f.Units, start, 2*time.Hour, f.PaymentTimeout)
	if err != nil {
		return nil, Item{}, time.Time{}, err
	}
	rep.ItemID = it.ID
	log.Info("item created", "item", it.ID, "units", f.Units, "starts", start.Format(time.RFC3339Nano))
	return buyers, it, start, nil
}

// newWatcher is the drain watch of item, paying for buyers.
func (f FlashSale) newWatcher(d Deps, item int64, start time.Time, buyers []Buyer) *watcher {
	tokenOf := make(map[int64]string, len(buyers))
	for _, b := range buyers {
		tokenOf[b.ID] = b.Token
	}
	return &watcher{db: d.Store, stock: d.Stock, item: item, start: start, payFraction: f.PayFraction,
		apis: clients(urlsOr(f.APIURLs, f.APIURL)), tokens: tokenOf, paid: map[string]int64{}, payRec: NewRecorder(start),
		payQ: make(chan payJob, 1<<16), orders: map[string]*payState{}}
}

// waitUntil returns at t, or with ctx's error if it ends first.
func waitUntil(ctx context.Context, t time.Time) error {
	if wait := time.Until(t); wait > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	return nil
}

// sagaHold is FlashSale.HoldSagas (nil: nothing to hold) and whether the
// worker is held now.
type sagaHold struct {
	hold func(bool) error
	held bool
}

func (h *sagaHold) start() error {
	if h.hold == nil {
		return nil
	}
	if err := h.hold(true); err != nil {
		return fmt.Errorf("hold the sagas: %w", err)
	}
	h.held = true
	return nil
}

// release lets the worker go; it is not retried if that fails.
func (h *sagaHold) release() error {
	h.held = false
	return h.hold(false)
}

func (h *sagaHold) releaseIfHeld() {
	if h.held {
		_ = h.hold(false)
	}
}

// stampede fires the buyers (beside DuringStampede, metering MeterPIDs)
// and puts what they were told in rep.
func (f FlashSale) stampede(ctx context.Context, rep *SaleReport, log *slog.Logger, item int64, buyers []Buyer, w *watcher) (SaleResult, error) {
	sale := Sale{BaseURL: f.APIURL, BaseURLs: f.APIURLs, ItemID: item, Buyers: buyers, Load: f.Load, MaxAttempts: f.MaxAttempts,
		Units: f.Units, Progress: f.Progress, OnAccepted: w.accepted}
	faultErr := make(chan error, 1)
	if f.DuringStampede != nil {
		go func() { faultErr <- f.DuringStampede(ctx, item) }()
	} else {
		faultErr <- nil
	}
	var meter *CPUMeter
	if f.MeterPIDs != nil {
		meter = StartCPU(f.MeterPIDs)
	}
	res := sale.Run(ctx)
	if meter != nil {
		rep.StampedeCPU = meter.PerAnswer(res.Summary.Total)
	}
	rep.Answers, rep.Attempts, rep.Retries, rep.GaveUp, rep.ClientErrors = res.Summary, res.Attempts, res.Retries, res.GaveUp, res.ClientErrors
	rep.Recovered = res.Recovered
	rep.Accepted, rep.AcceptedPerSec, rep.SoldOutAfterS = len(res.Accepted), res.AcceptedPerSecond, res.SoldOutAfter.Seconds()
	log.Info("stampede over", "attempts", res.Attempts, "accepted", len(res.Accepted), "sold_out_after", res.SoldOutAfter,
		"recovered_from_409", res.Recovered)
	if err := <-faultErr; err != nil {
		return res, fmt.Errorf("fault during the stampede: %w", err)
	}
	return res, nil
}

// afterStampede runs AfterStampede and releases the sagas if held; it
// returns when the sagas were let go.
func (f FlashSale) afterStampede(ctx context.Context, rep *SaleReport, item int64, res SaleResult, hold *sagaHold) (time.Time, error) {
	if f.AfterStampede != nil {
		if err := f.AfterStampede(ctx, item); err != nil {
			return time.Time{}, fmt.Errorf("fault after the stampede: %w", err)
		}
	}
	sagasFrom := res.Start
	if f.HoldSagas != nil {
		sagasFrom = time.Now()
		if err := hold.release(); err != nil {
			return time.Time{}, fmt.Errorf("release the sagas: %w", err)
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("sagas held during the stampede, released %.1f s after the start",
			sagasFrom.Sub(res.Start).Seconds()))
	}
	return sagasFrom, nil
}

// drain waits until every accepted order is persisted (PENDING_PAYMENT or
// final), or DrainTimeout.
func (f FlashSale) drain(ctx context.Context, rep *SaleReport, w *watcher, accepted int, start, sagasFrom time.Time) {
	w.setExpected(accepted)
	drainCtx, cancelDrain := context.WithTimeout(ctx, f.DrainTimeout)
	stopProgress := drainProgress(drainCtx, f.Progress, "drain", w, accepted)
	drainedAt, drained := w.waitDrained(drainCtx)
	stopProgress()
	cancelDrain()
	rep.Drained = drained
	if drained {
		rep.DrainAfterS = drainedAt.Sub(start).Seconds()
		if first := w.firstPersisted(); !first.IsZero() && drainedAt.After(first) && accepted > 1 {
			rep.SagasPerSec = float64(accepted) / drainedAt.Sub(sagasFrom).Seconds()
		}
	} else {
		rep.Notes = append(rep.Notes, fmt.Sprintf("not drained within %s", f.DrainTimeout))
	}
}

// waitTimeouts waits until no order waits for payment any more (every
// unpaid window closed), or a payment window and a drain timeout from now.
func (f FlashSale) waitTimeouts(ctx context.Context, rep *SaleReport, w *watcher, start time.Time) {
	deadline := time.Now().Add(f.PaymentTimeout + f.DrainTimeout)
	tctx, cancel := context.WithDeadline(ctx, deadline)
	stop := drainProgress(tctx, f.Progress, "timeouts", w, -1)
	at, ok := w.waitNoPending(tctx)
	stop()
	cancel()
	if ok {
		rep.TimeoutsAfterS = at.Sub(start).Seconds()
	} else {
		rep.Notes = append(rep.Notes, "orders still PENDING_PAYMENT when the wait for payment timeouts ended")
	}
}

// figures puts what the watch saw in the report, and the 202 -> deducted
// latencies read from MySQL.
func (rep *SaleReport) figures(ctx context.Context, w *watcher, db *store.Store) {
	rep.OrdersPerSecond = w.perSecond()
	rep.Paid = w.paidCounts()
	if s := w.payRec.Summary(); s.Total > 0 {
		rep.PayLatency = s.Latency
	}
	var refusedIDs []string
	rep.AcceptedToPayable, rep.InTimePaysRefused, refusedIDs = w.paySummary()
	if len(refusedIDs) > 0 {
		rep.Notes = append(rep.Notes, "pays refused in time, e.g. orders "+strings.Join(refusedIDs, ", "))
	}
	if d, err := deductionLatencies(ctx, db, rep.ItemID); err != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("202 -> deducted not measured: %v", err))
	} else {
		rep.AcceptedToDeducted, rep.DeductedHistogram = summarize(d), histogram(d, DeductedBoundsS)
		rep.DeductedBoundsS = DeductedBoundsS
	}
	rep.OrdersByStatus = w.statusTimeline()
}

// check runs BeforeCheck, then the invariant checks, into rep.Invariants.
// Quiet now (every saga waits for payment or is over): a second look a
// moment later filters what the visibility index had not caught up with.
func (f FlashSale) check(ctx context.Context, rep *SaleReport, d Deps, res SaleResult) error {
	if f.BeforeCheck != nil {
		if err := f.BeforeCheck(ctx, rep.ItemID); err != nil {
			return fmt.Errorf("before the check: %w", err)
		}
	}
	in := invariant.Input{ItemID: rep.ItemID, Accepted: res.Accepted, AcceptedComplete: res.ClientErrors == 0,
		SoldOutSeen: res.SoldOutSeen, AfterTimeouts: f.WaitTimeouts}
	deps := invariant.Deps{Store: d.Store, Stock: d.Stock, Workflows: d.Workflows}
	var inv invariant.Report
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		inv, err = invariant.Check(ctx, deps, in)
		if err != nil {
			if inv.WorkflowsError != "" { // MySQL and Redis were judged: keep that
				rep.Invariants = &inv
			}
			return fmt.Errorf("invariant check: %w", err)
		}
		if inv.OK() {
			break
		}
		time.Sleep(3 * time.Second)
	}
	rep.Invariants = &inv
	return nil
}

// watcher follows the item's orders in MySQL while the sale drains.
type watcher struct {
	db          *store.Store
	stock       *stock.Store
	item        int64
	start       time.Time
	payFraction float64
	apis        []*apiclient.Client // every API instance, pays round robin
	tokens      map[int64]string
	payRec      *Recorder

	mu        sync.Mutex
	expected  int
	persisted int64 // orders past QUEUED
	pending   int64
	seen      []time.Time // when the watcher first saw each persisted order
	lastSeen  time.Time   // the latest updated_at seen
	known     map[string]bool
	paid      map[string]int64
	payWG     sync.WaitGroup
	payQ      chan payJob
	first     time.Time
	orders    map[string]*payState // the orders chosen to be paid
	payable   []time.Duration      // 202 -> first accepted pay of each paid order
	timeline  map[string][]int64
	polls     int
}

type payJob struct {
	orderID string
	userID  int64
	payBy   time.Time
}

// payState is one chosen order's payment as its buyer sees it.
type payState struct {
	acceptedAt time.Time // the 202's arrival (the order id's time when learnt from the database)
	inFlight   bool
	retried    bool // sent again once PENDING_PAYMENT (the door refused it while QUEUED)
	paid       bool
	refused    bool // the last pay was sent before pay_by and not answered 200
}

// accepted is Sale.OnAccepted: a chosen order is paid at once, as a buyer
// holding its 202 would.
func (w *watcher) accepted(orderID string, userID int64, payBy, at time.Time) {
	if !pays(orderID, w.payFraction) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.orders[orderID] != nil {
		return
	}
	w.orders[orderID] = &payState{acceptedAt: at, inFlight: true}
	select {
	case w.payQ <- payJob{orderID: orderID, userID: userID, payBy: payBy}:
	default:
		w.orders[orderID].inFlight = false
	}
}

// payers is how many payments can be in flight at once: in a stampede every
// winner pays within a second or two of the others, and with 128 payers
// (the API's MySQL pool is 32) the pays queued in the bench, whose wait the
// pay latency did not show (3b on a busy box: 202 -> payable p99 10.8 s,
// pay p99 2.8 s). With more, a pay waits in the API, as a buyer's would.
const payers = 512

func (w *watcher) setExpected(n int) { w.mu.Lock(); w.expected = n; w.mu.Unlock() }

func (w *watcher) run(ctx context.Context) {
	// Buyers pay independently of each other: enough payers that a pay is
	// sent as soon as its 202 arrives, not after the pays queued before it.
	for i := 0; i < payers; i++ {
		w.payWG.Add(1)
		go func() { defer w.payWG.Done(); w.payer(ctx) }()
	}
	defer func() { close(w.payQ); w.payWG.Wait() }()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		w.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *watcher) poll(ctx context.Context) {
	type row struct {
		OrderID   string
		UserID    int64
		Status    string
		PayBy     *time.Time
		UpdatedAt time.Time
	}
	var rows []row
	db := w.db.DB().WithContext(ctx)
	// By the time a row left QUEUED, not by id: a row the door wrote at a
	// pay (early payment) has an older id than rows the sagas wrote since.
	// Updates may commit out of time order: look back and dedupe.
	if err := db.Raw("SELECT order_id, user_id, status, pay_by, updated_at FROM seckill_order WHERE item_id = ? AND status <> ? AND updated_at >= ?",
		w.item, order.StatusQueued, w.since()).Scan(&rows).Error; err != nil {
		return
	}
	var pending int64
	if err := db.Raw("SELECT COUNT(*) FROM seckill_order WHERE item_id = ? AND status IN (?, ?)", w.item, order.StatusPendingPayment, order.StatusQueued).
		Scan(&pending).Error; err != nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = pending
	if w.known == nil {
		w.known = map[string]bool{}
	}
	for _, r := range rows {
		if w.known[r.OrderID] {
			continue
		}
		w.known[r.OrderID] = true
		if r.UpdatedAt.After(w.lastSeen) {
			w.lastSeen = r.UpdatedAt
		}
		w.persisted++
		w.seen = append(w.seen, now)
		if w.first.IsZero() {
			w.first = now
		}
		if r.Status == string(order.StatusPendingPayment) && r.PayBy != nil && pays(r.OrderID, w.payFraction) {
			w.payAgain(r.OrderID, r.UserID, *r.PayBy)
		}
	}
	if w.polls++; w.polls%4 == 1 { // about once a second
		w.mu.Unlock()
		counts := w.countByStatus(ctx)
		w.mu.Lock()
		if counts != nil {
			sec := max(0, int(now.Sub(w.start)/time.Second))
			if w.timeline == nil {
				w.timeline = map[string][]int64{}
			}
			for _, st := range timelineStatuses {
				for len(w.timeline[st]) <= sec {
					w.timeline[st] = append(w.timeline[st], counts[st])
				}
				w.timeline[st][sec] = counts[st]
			}
		}
	}
}

// since is where the next poll looks from: 10 s before the latest change
// seen, or from before the sale (lastSeen is written only by poll).
func (w *watcher) since() time.Time {
	if w.lastSeen.IsZero() {
		return w.start.Add(-time.Hour).UTC()
	}
	return w.lastSeen.Add(-10 * time.Second)
}

// timelineStatuses are the statuses the timeline follows, in their order.
var timelineStatuses = []string{"QUEUED", "PENDING_PAYMENT", "PAID", "CANCELLED", "FAILED"}

// countByStatus counts the item's orders by status; QUEUED also counts the
// accepted orders that have no row yet (the buyer marks in Redis are every
// reservation ever made).
func (w *watcher) countByStatus(ctx context.Context) map[string]int64 {
	var rows []struct {
		Status string
		N      int64
	}
	if err := w.db.DB().WithContext(ctx).Raw("SELECT status, COUNT(*) AS n FROM seckill_order WHERE item_id = ? GROUP BY status",
		w.item).Scan(&rows).Error; err != nil {
		return nil
	}
	out := map[string]int64{}
	var rowsN int64
	for _, r := range rows {
		out[r.Status] = r.N
		rowsN += r.N
	}
	if w.stock != nil {
		if p, err := w.stock.Pulses(ctx, []int64{w.item}); err == nil && p[w.item].Marks > rowsN {
			out["QUEUED"] += p[w.item].Marks - rowsN
		}
	}
	return out
}

// payAgain sends a chosen order's pay once it waits for payment, unless
// its pay at the 202 was accepted or is still out: with early payment off
// the door refuses a pay while the order is QUEUED. Called with w.mu held.
func (w *watcher) payAgain(orderID string, userID int64, payBy time.Time) {
	st := w.orders[orderID]
	if st == nil { // no 202 seen for it (learnt from a 409 after a lost answer)
		st = &payState{}
		if id, err := ulid.Parse(orderID); err == nil {
			st.acceptedAt = ulid.Time(id.Time())
		}
		w.orders[orderID] = st
	}
	if st.paid || st.inFlight || st.retried {
		return
	}
	st.inFlight, st.retried = true, true
	select {
	case w.payQ <- payJob{orderID: orderID, userID: userID, payBy: payBy}:
	default:
		st.inFlight = false
	}
}

// paySummary is 202 -> payable over the paid orders, how many chosen
// orders were refused a pay sent before their deadline, and up to ten of them.
func (w *watcher) paySummary() (Latency, int64, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var refused int64
	var ids []string
	for id, st := range w.orders {
		if st.refused && !st.paid {
			if refused++; refused <= 10 {
				ids = append(ids, id)
			}
		}
	}
	sort.Strings(ids)
	return summarize(w.payable), refused, ids
}

// histogram counts ds over the upper bounds (seconds); the last bucket
// takes everything above.
func histogram(ds []time.Duration, bounds []float64) []int64 {
	hist := make([]int64, len(bounds))
	for _, d := range ds {
		i := sort.SearchFloat64s(bounds, d.Seconds())
		hist[min(i, len(hist)-1)]++
	}
	return hist
}

// deductionLatencies is, for every order of the item that took a unit from
// the stock row, the time from its 202 (the order id's timestamp) to the
// deduction's row (written in the decrement's transaction, on the
// database's clock in UTC).
func deductionLatencies(ctx context.Context, db *store.Store, item int64) ([]time.Duration, error) {
	var rows []struct {
		OrderID   string
		CreatedAt time.Time
	}
	if err := db.DB().WithContext(ctx).Raw("SELECT order_id, created_at FROM stock_deduction WHERE item_id = ?", item).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("read the deductions of item %d: %w", item, err)
	}
	out := make([]time.Duration, 0, len(rows))
	for _, r := range rows {
		if id, err := ulid.Parse(r.OrderID); err == nil {
			out = append(out, r.CreatedAt.Sub(ulid.Time(id.Time())))
		}
	}
	return out, nil
}

func (w *watcher) statusTimeline() map[string][]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]int64, len(w.timeline))
	for k, v := range w.timeline {
		out[k] = append([]int64(nil), v...)
	}
	return out
}

// pays picks the orders to pay by a hash of their id: stable and spread.
func pays(orderID string, fraction float64) bool {
	if fraction <= 0 {
		return false
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(orderID))
	return float64(h.Sum32()%10000) < fraction*10000
}

func (w *watcher) payer(ctx context.Context) {
	for j := range w.payQ {
		if ctx.Err() != nil {
			continue // the watch ended (interrupted or over): drop what is still queued
		}
		t0 := time.Now()
		var code int
		var err error
		for try := 0; try < 3; try++ { // 503 means nothing happened: try again (on the next instance)
			var res *http.Response
			code = 0
			res, err = w.apis[(int(j.userID)+try)%len(w.apis)].PayOrder(context.Background(), j.orderID, apiclient.Bearer(w.tokens[j.userID]))
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				code = res.StatusCode
			}
			if err == nil && code != http.StatusServiceUnavailable {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		out := Outcome(uint16(code))
		if err != nil {
			out = "error"
		}
		now := time.Now()
		w.payRec.Add(out, now, now.Sub(t0))
		w.mu.Lock()
		w.paid[out]++
		if st := w.orders[j.orderID]; st != nil {
			st.inFlight = false
			if code == http.StatusOK && !st.paid {
				st.paid = true
				w.payable = append(w.payable, now.Sub(st.acceptedAt))
			}
			st.refused = code != http.StatusOK && (j.payBy.IsZero() || t0.Before(j.payBy))
		}
		w.mu.Unlock()
	}
}

func (w *watcher) counts() (persisted, pending int64, expected int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.persisted, w.pending, w.expected
}

func (w *watcher) firstPersisted() time.Time { w.mu.Lock(); defer w.mu.Unlock(); return w.first }

func (w *watcher) waitDrained(ctx context.Context) (time.Time, bool) {
	for {
		p, _, exp := w.counts()
		if p >= int64(exp) {
			w.mu.Lock()
			at := time.Now()
			if len(w.seen) > 0 {
				at = w.seen[len(w.seen)-1]
			}
			w.mu.Unlock()
			return at, true
		}
		select {
		case <-ctx.Done():
			return time.Time{}, false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *watcher) waitNoPending(ctx context.Context) (time.Time, bool) {
	for {
		if _, pend, _ := w.counts(); pend == 0 {
			// Let the in-flight payments land before declaring quiet.
			return time.Now(), true
		}
		select {
		case <-ctx.Done():
			return time.Time{}, false
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (w *watcher) perSecond() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int64
	for _, t := range w.seen {
		s := int(t.Sub(w.start) / time.Second)
		if s < 0 {
			s = 0
		}
		for len(out) <= s {
			out = append(out, 0)
		}
		out[s]++
	}
	return out
}

func (w *watcher) paidCounts() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int64{}
	for k, v := range w.paid {
		out[k] = v
	}
	return out
}

func drainProgress(ctx context.Context, out io.Writer, label string, w *watcher, expected int) func() {
	var prev int64
	return liveLine(ctx, out, func() string {
		line, p := w.drainLine(label, expected, prev)
		prev = p
		return line
	})
}

// drainLine is the drain's progress line, in words: persisted orders (of
// expected, unless negative) and their rate since prev was persisted,
// orders waiting for payment, the pay answers so far. It returns the
// persisted count for the next line's rate.
func (w *watcher) drainLine(label string, expected int, prev int64) (string, int64) {
	p, pend, _ := w.counts()
	line := fmt.Sprintf("\r[%s] %5.0fs persisted %d", label, time.Since(w.start).Seconds(), p)
	if expected >= 0 {
		line += fmt.Sprintf("/%d", expected)
	}
	line += fmt.Sprintf(" (%d/s) pending payment %d, %s", p-prev, pend, payProgress(w.paidCounts()))
	return line, p
}

// payProgress writes the pay answers so far in words: "pays: none", or
// "pays: 3 (200 paid 2, 409 ORDER_NOT_PAYABLE 1)".
func payProgress(m map[string]int64) string {
	var n int64
	for _, v := range m {
		n += v
	}
	if n == 0 {
		return "pays: none"
	}
	return fmt.Sprintf("pays: %s (%s)", thousands(n), PayAnswers(m))
}

// ErrViolations is returned when the invariant checks found something.
var ErrViolations = errors.New("invariant violations")

// urlsOr returns urls, or one when urls is empty.
func urlsOr(urls []string, one string) []string {
	if len(urls) > 0 {
		return urls
	}
	return []string{one}
}
