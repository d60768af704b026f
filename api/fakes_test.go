package api_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/stock/stocktwin"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// In-memory twins of the API's dependencies: the handlers' HTTP contract is
// tested on these in milliseconds with nothing running (go test -short);
// harness_test.go runs the same routes on the real Redis and MySQL.

var (
	_ api.ItemStore    = (*fakeItems)(nil)
	_ api.OrderReader  = (*fakeOrders)(nil)
	_ api.Units        = (*fakeUnits)(nil)
	_ api.Views        = (*fakeViews)(nil)
	_ api.OrderActions = (*fakeActions)(nil)
	_ api.StockFence   = (*fakeItems)(nil)
)

// errDown is what a dependency that cannot be reached returns (connection
// refused), as the Redis and MySQL drivers do.
var errDown = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

// fakeItems is the MySQL item table.
type fakeItems struct {
	mu     sync.Mutex
	byID   map[int64]store.Item
	nextID int64
	err    error // returned by every call when set
	gets   int   // GetItem calls
	// afterRead, when set, runs after each GetItem's read, with the row read
	// (a test holds a read there to race it with a change).
	afterRead func(store.Item)
	// applied adds: add id -> its row, (item, key) -> add id
	addRows map[string]store.StockAdd
	addKeys map[string]string
}

func newFakeItems() *fakeItems {
	return &fakeItems{byID: map[int64]store.Item{}, nextID: 1000,
		addRows: map[string]store.StockAdd{}, addKeys: map[string]string{}}
}

func (f *fakeItems) CreateItem(_ context.Context, it store.Item) (store.Item, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.Item{}, f.err
	}
	f.nextID++
	it.ID = f.nextID
	if it.Currency == "" {
		it.Currency = "EUR" // the column's default
	}
	f.byID[it.ID] = it
	return it, nil
}

// fail makes every call return err (nil: none).
func (f *fakeItems) fail(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }

func (f *fakeItems) GetItem(_ context.Context, id int64) (store.Item, error) {
	f.mu.Lock()
	f.gets++
	it, err := f.find(id)
	hook := f.afterRead
	f.mu.Unlock()
	if hook != nil && err == nil {
		hook(it)
	}
	return it, err
}

// find is a row read of the item (f.mu held): the injected error, the item,
// or ErrItemNotFound.
// FenceStock runs fn on a stock row of stock_total (the fakes deduct
// nothing from it).
func (f *fakeItems) FenceStock(_ context.Context, id int64, _ store.Stock, _ []string, fn func(store.Stock, []string) error) (bool, error) {
	f.mu.Lock()
	it, err := f.find(id)
	f.mu.Unlock()
	if err != nil {
		return false, err
	}
	return false, fn(store.Stock{ItemID: id, Stock: it.StockTotal}, nil)
}

func (f *fakeItems) find(id int64) (store.Item, error) {
	if f.err != nil {
		return store.Item{}, f.err
	}
	if it, ok := f.byID[id]; ok {
		return it, nil
	}
	return store.Item{}, fmt.Errorf("item %d: %w", id, order.ErrItemNotFound)
}

func (f *fakeItems) ListItems(context.Context) ([]store.Item, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := make([]store.Item, 0, len(f.byID))
	for _, it := range f.byID {
		out = append(out, it)
	}
	return out, nil
}

// EndSale ends the sale now, recording key, unless it has ended
// (store.ErrSaleEnded).
func (f *fakeItems) EndSale(_ context.Context, id int64, key string) (store.Item, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	it, err := f.find(id)
	if err != nil {
		return it, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if !now.Before(it.EndAt) {
		return it, fmt.Errorf("item %d: %w", id, store.ErrSaleEnded)
	}
	it.EndAt = now
	if key != "" {
		it.EndKey = &key
	}
	if !it.StartAt.Before(now) {
		it.StartAt = now.Add(-time.Millisecond)
	}
	f.byID[id] = it
	return it, nil
}

// AddStock raises stock_total and records the add; inRedis runs before the
// change is kept. A key already applied answers that add (store's rules).
func (f *fakeItems) AddStock(ctx context.Context, id, n int64, key, addID string, inRedis func(context.Context, store.Item) error) (store.Item, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	it, err := f.find(id)
	if err != nil {
		return it, false, err
	}
	if prev, ok := f.addRows[f.addKeys[fmt.Sprint(id, "/", key)]]; ok && key != "" {
		if prev.Units != n {
			return store.Item{}, false, fmt.Errorf("item %d: %w", id, store.ErrAddKeyReused)
		}
		it.StockTotal = prev.StockTotal
		return it, true, nil
	}
	if !time.Now().Before(it.EndAt) {
		return store.Item{}, false, fmt.Errorf("item %d: %w", id, store.ErrSaleEnded)
	}
	it.StockTotal += n
	if err := inRedis(ctx, it); err != nil {
		return store.Item{}, false, err
	}
	f.byID[id] = it
	f.addRows[addID] = store.StockAdd{AddID: addID, ItemID: id, Units: n, StockTotal: it.StockTotal}
	if key != "" {
		f.addKeys[fmt.Sprint(id, "/", key)] = addID
	}
	return it, false, nil
}

func (f *fakeItems) AddApplied(_ context.Context, addID string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	_, ok := f.addRows[addID]
	return ok, nil
}

// fakeOrders is the MySQL order table.
type fakeOrders struct {
	mu      sync.Mutex
	rows    map[string]store.Order
	refunds map[string][]store.Refund
	err     error
	counts  atomic.Int64 // CountOrders calls
}

func newFakeOrders() *fakeOrders { return &fakeOrders{rows: map[string]store.Order{}} }

func (f *fakeOrders) FindOrder(_ context.Context, id string) (store.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.Order{}, f.err
	}
	o, ok := f.rows[id]
	if !ok {
		return store.Order{}, fmt.Errorf("order %s: %w", id, order.ErrNotFound)
	}
	return o, nil
}

func (f *fakeOrders) ListUserOrders(_ context.Context, user int64, before string, limit int) ([]store.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []store.Order
	for _, o := range f.rows {
		if o.UserID == user && (before == "" || o.OrderID < before) {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b store.Order) int { return strings.Compare(b.OrderID, a.OrderID) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (f *fakeOrders) OrderPayments(context.Context, string) ([]store.Payment, error) { return nil, nil }

func (f *fakeOrders) OrderRefunds(_ context.Context, id string) ([]store.Refund, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refunds[id], nil
}

// OweSupportRefund: the unit tests' orders have no provider payment to
// refund (support's refund route is tested in api/support and on MySQL).
func (f *fakeOrders) OweSupportRefund(_ context.Context, id, _, _ string) (store.Refund, store.Payment, error) {
	return store.Refund{}, store.Payment{}, fmt.Errorf("order %s: %w", id, order.ErrNotRefundable)
}

func (f *fakeOrders) HeldOrders(_ context.Context, itemID int64) ([]store.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []store.Order
	for _, o := range f.rows {
		if o.ItemID == itemID && o.Status.Holds() {
			out = append(out, o)
		}
	}
	return out, nil
}

func (f *fakeOrders) put(o store.Order) {
	f.mu.Lock()
	f.rows[o.OrderID] = o
	f.mu.Unlock()
}

// fakeViews is the orders' latest views in Redis, with its pub/sub.
type fakeViews struct {
	mu       sync.Mutex
	views    map[string]order.View
	watchers []func(order.View)
	watching chan struct{} // closed once Watch has registered
	once     sync.Once
	err      error
}

func newFakeViews() *fakeViews {
	return &fakeViews{views: map[string]order.View{}, watching: make(chan struct{})}
}

// MarkQueued stores the QUEUED view unless the order has one (SET NX).
func (f *fakeViews) MarkQueued(_ context.Context, v order.View) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if _, ok := f.views[v.OrderID]; !ok {
		f.views[v.OrderID] = v
	}
	return nil
}

func (f *fakeViews) Status(_ context.Context, id string) (order.View, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return order.View{}, false, f.err
	}
	v, ok := f.views[id]
	return v, ok, nil
}

func (f *fakeViews) Watch(ctx context.Context, fn func(order.View)) {
	f.mu.Lock()
	f.watchers = append(f.watchers, fn)
	f.mu.Unlock()
	f.once.Do(func() { close(f.watching) })
	<-ctx.Done()
}

// publish stores v and delivers it to the watchers (the saga's Notify).
func (f *fakeViews) publish(v order.View) {
	f.mu.Lock()
	f.views[v.OrderID] = v
	ws := append([]func(order.View){}, f.watchers...)
	f.mu.Unlock()
	for _, fn := range ws {
		fn(v)
	}
}

// fakeUnits is the live stock in Redis: stock's rules are the twin's
// (stocktwin, held to the Lua scripts by stock's contract tests); the fake
// adds the injected failures and the call counters, and stores the QUEUED
// view with the reservation, as stock.Store does.
type fakeUnits struct {
	*stocktwin.Twin
	mu           sync.Mutex // guards the fields below
	views        *fakeViews
	itemWatchers []func(int64) // WatchItems calls, counted by tests
	addErr       error         // AddUnits only
	pulses       int           // Pulses calls (the refreshes and revision reads)

	// Injected failures.
	err        error // every call
	reserveErr error // Reserve only, before anything is taken
	// failAfter makes Reserve take the unit and still fail (Redis
	// timed out after the script ran).
	failAfter error
	// markFails makes the next BuyerOrder calls fail (Redis unreachable
	// while a failover promotes a replica); -1: every one.
	markFails int
	reserves  int // Reserve calls
	leftManys int // LeftMany calls
	// stall makes Reserve wait until its context ends (a batch stuck
	// behind a Redis that does not answer) and fail with its error.
	stall bool
}

func newFakeUnits(v *fakeViews) *fakeUnits {
	return &fakeUnits{Twin: stocktwin.New(), views: v}
}

// fail makes every call return err (nil: none).
func (f *fakeUnits) fail(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }

// down returns the failure injected into every call (nil: none).
func (f *fakeUnits) down() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fakeUnits) Load(ctx context.Context, itemID, units int64) (bool, error) {
	if err := f.down(); err != nil {
		return false, err
	}
	return f.Twin.Load(ctx, itemID, units)
}

func (f *fakeUnits) Recount(ctx context.Context, itemID, stockRow int64, deducted []string, mode stock.CountMode) (int64, int64, error) {
	if err := f.down(); err != nil {
		return 0, 0, err
	}
	return f.Twin.Recount(ctx, itemID, stockRow, deducted, mode)
}

func (f *fakeUnits) Left(ctx context.Context, itemID int64) (int64, error) {
	if err := f.down(); err != nil {
		return 0, err
	}
	return f.Twin.Left(ctx, itemID)
}

func (f *fakeUnits) LeftMany(ctx context.Context, ids []int64) (map[int64]int64, error) {
	f.mu.Lock()
	f.leftManys++
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return f.Twin.LeftMany(ctx, ids)
}

func (f *fakeUnits) Reserve(ctx context.Context, r order.Message) (int64, error) {
	f.mu.Lock()
	f.reserves++
	stall, err, reserveErr, failAfter := f.stall, f.err, f.reserveErr, f.failAfter
	f.mu.Unlock()
	if stall {
		<-ctx.Done()
		return 0, fmt.Errorf("reserve item %d: %w", r.ItemID, ctx.Err())
	}
	if err != nil {
		return 0, err
	}
	if reserveErr != nil {
		return 0, reserveErr
	}
	n, err := f.Twin.Reserve(ctx, r)
	if err != nil {
		return 0, err
	}
	_ = f.views.MarkQueued(context.Background(), r.QueuedView())
	if failAfter != nil {
		return 0, failAfter
	}
	return n, nil
}

func (f *fakeUnits) RestoreAll(ctx context.Context, itemID int64, ms []order.Message) (int, error) {
	if err := f.down(); err != nil {
		return 0, err
	}
	return f.Twin.RestoreAll(ctx, itemID, ms)
}

func (f *fakeUnits) BuyerOrder(ctx context.Context, itemID, userID int64) (string, bool, error) {
	f.mu.Lock()
	err := f.err
	if err == nil && f.markFails != 0 {
		if f.markFails > 0 {
			f.markFails--
		}
		err = errDown
	}
	f.mu.Unlock()
	if err != nil {
		return "", false, err
	}
	return f.Twin.BuyerOrder(ctx, itemID, userID)
}

func (f *fakeUnits) BuyerOrders(ctx context.Context, items []int64, user int64) (map[int64]string, error) {
	if err := f.down(); err != nil {
		return nil, err
	}
	return f.Twin.BuyerOrders(ctx, items, user)
}

func (f *fakeUnits) MarkedBuyers(ctx context.Context, item, max int64) (map[int64]struct{}, bool, error) {
	if err := f.down(); err != nil {
		return nil, false, err
	}
	return f.Twin.MarkedBuyers(ctx, item, max)
}

func (f *fakeUnits) Pulses(ctx context.Context, ids []int64) (map[int64]stock.Pulse, error) {
	f.mu.Lock()
	f.pulses++
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return f.Twin.Pulses(ctx, ids)
}

func (f *fakeUnits) AddUnits(ctx context.Context, item int64, addID string, n int64) (bool, error) {
	f.mu.Lock()
	err := f.err
	if err == nil {
		err = f.addErr
	}
	f.mu.Unlock()
	if err != nil {
		return false, err
	}
	return f.Twin.AddUnits(ctx, item, addID, n)
}

func (f *fakeUnits) UndoAdd(ctx context.Context, item int64, addID string) (bool, error) {
	if err := f.down(); err != nil {
		return false, err
	}
	return f.Twin.UndoAdd(ctx, item, addID)
}

func (f *fakeUnits) AnnounceItem(ctx context.Context, item int64, unitsBack bool) (int64, error) {
	if err := f.down(); err != nil {
		return 0, err
	}
	return f.Twin.AnnounceItem(ctx, item, unitsBack)
}

func (f *fakeUnits) WatchItems(ctx context.Context, fn func(int64)) {
	f.mu.Lock()
	f.itemWatchers = append(f.itemWatchers, fn)
	f.mu.Unlock()
	f.Twin.WatchItems(ctx, fn)
}

// release gives back the unit of one of the item's reservations, as a
// compensation does; the buyer keeps the mark (one order per buyer, ever).
func (f *fakeUnits) release(itemID int64) {
	st, err := f.ReadItemState(context.Background(), itemID)
	for id := range st.Reservations {
		if _, err = f.Release(context.Background(), itemID, id); err == nil {
			return
		}
	}
	panic(fmt.Sprintf("release a unit of item %d: no reservation (%v)", itemID, err))
}

func (f *fakeUnits) unitsLeft(itemID int64) int64 {
	n, _ := f.Twin.Left(context.Background(), itemID)
	return n
}

// fakeActions is the payment desk: pay and cancel of the buyer's pending
// order in the fake order table, judged against the order's deadline.
type fakeActions struct {
	orders *fakeOrders
	err    error // returned (with the order as it is) when set
}

func (f *fakeActions) Pay(ctx context.Context, id string, user int64, at time.Time) (order.View, error) {
	return f.act(ctx, id, user, at, order.StatusPaid, "")
}

func (f *fakeActions) Cancel(ctx context.Context, id string, user int64, at time.Time) (order.View, error) {
	return f.act(ctx, id, user, at, order.StatusCancelled, order.ReasonBuyerCancelled)
}

func (f *fakeActions) act(_ context.Context, id string, user int64, at time.Time, to order.Status, reason string) (order.View, error) {
	f.orders.mu.Lock()
	defer f.orders.mu.Unlock()
	o, ok := f.orders.rows[id]
	if !ok || o.UserID != user {
		return order.View{}, fmt.Errorf("order %s: %w", id, order.ErrNotFound)
	}
	if f.err != nil {
		return o.View(), f.err
	}
	if o.Status == to && to == order.StatusPaid {
		return o.View(), nil // paying a paid order again returns its view
	}
	if open := o.Status == order.StatusPendingPayment || o.Status == order.StatusQueued; !open || o.PayBy == nil || !at.Before(*o.PayBy) {
		return o.View(), fmt.Errorf("order %s is %s: %w", id, o.Status, order.ErrNotPayable)
	}
	o.Status, o.Reason, o.UpdatedAt = to, reason, at
	f.orders.rows[id] = o
	return o.View(), nil
}

// unitHarness is one API server on the fakes. The embedded harness gives the
// request helpers; its real-service fields (db, stk, views, rdb) are nil.
type unitHarness struct {
	*harness
	items   *fakeItems
	orders  *fakeOrders
	units   *fakeUnits
	views   *fakeViews
	actions *fakeActions
}

type unitOpt func(*config.API, *api.Deps)

// unitConfig is config.API with limits that stay out of the way and no
// environment read: nothing in it points at a service.
func unitConfig() config.API {
	return config.API{
		BodyLimitBytes: 64 << 10, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 15 * time.Second, IdleTimeout: time.Minute,
		GlobalRPS: 1e6, GlobalBurst: 1e6, BuyerRPS: 1000, BuyerBurst: 1000, IPRPS: 1e6, IPBurst: 1e6,
		AdminRPS: 1e6, AdminBurst: 1e6,
		LimiterIdleTTL: 2 * time.Minute, LimiterMaxKeys: 1 << 16, IPLimiterMaxKeys: 1 << 16,
		StreamsPerBuyer: 4, StreamsMax: 100, ItemRefresh: time.Hour, EventsPoll: time.Hour, EventsMax: time.Minute,
		ConfirmTimeout: 100 * time.Millisecond, // fuzzing with Redis down must not wait the 10 s default
	}
}

// newUnitServer builds the server on fakes and runs it until the test ends
// (no listener: the fuzz targets call its handler in memory).
func newUnitServer(t testing.TB, opts ...unitOpt) *unitHarness {
	t.Helper()
	items, orders, views := newFakeItems(), newFakeOrders(), newFakeViews()
	units := newFakeUnits(views)
	actions := &fakeActions{orders: orders}
	cfg := unitConfig()
	deps := api.Deps{
		Items: items, Stock: items, Orders: orders, Units: units, Views: views, Actions: actions,
		Tokens: auth.NewVerifier(testSecret), Metrics: api.NewMetrics(prometheus.NewRegistry()), Log: testkit.Logger(t),
	}
	for _, opt := range opts {
		opt(&cfg, &deps)
	}
	srv := api.New(cfg, deps)
	run(t, srv)
	select { // published views reach the event streams from here on
	case <-views.watching:
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not start watching views")
	}
	h := &unitHarness{harness: &harness{t: t, srv: srv, cfg: cfg},
		items: items, orders: orders, units: units, views: views, actions: actions}
	h.admin = h.token(1, auth.RoleAdmin)
	return h
}

// newUnitHarness is newUnitServer behind an httptest server with the
// production http.Server settings.
func newUnitHarness(t testing.TB, opts ...unitOpt) *unitHarness {
	t.Helper()
	h := newUnitServer(t, opts...)
	h.ts = listen(t, h.srv)
	return h
}

// item stores an item in the fake MySQL with its stock loaded in the fake
// Redis, as POST /api/v1/items leaves it.
func (h *unitHarness) item(units int64, start, end time.Time) int64 {
	it, err := h.items.CreateItem(context.Background(), store.Item{Name: "item", PriceCents: 100, StockTotal: units,
		StartAt: start.UTC().Truncate(time.Millisecond), EndAt: end.UTC().Truncate(time.Millisecond), PaymentTimeoutSeconds: 900})
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.units.Load(context.Background(), it.ID, units); err != nil {
		h.t.Fatal(err)
	}
	return it.ID
}

func (h *unitHarness) onSale(units int64) int64 {
	return h.item(units, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
}

// pendingOrder is an order of buyer for item in PENDING_PAYMENT with the
// deadline window from now, in the fake table and the fake Redis view.
func (h *unitHarness) pendingOrder(item, buyer int64, window time.Duration) order.View {
	now := time.Now().UTC()
	payBy := now.Add(window)
	o := store.Order{OrderID: order.NewID(), UserID: buyer, ItemID: item, Status: order.StatusPendingPayment,
		PayBy: &payBy, CreatedAt: now, UpdatedAt: now}
	h.orders.put(o)
	h.views.publish(o.View())
	return o.View()
}

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // no route listing per server built
	os.Exit(m.Run())
}

// Failure injection: which dependency fails (the fuzz targets pick one per
// request).
const (
	failNone = iota
	failItems
	failOrders
	failUnits   // every Units call
	failReserve // Reserve only, before anything is taken
	failViews
	failActions
	failKinds
)

// inject makes one dependency fail with err (failNone, or a nil err,
// clears every failure) and reports whether one was injected.
func (h *unitHarness) inject(which int, err error) bool {
	set := func(mu *sync.Mutex, field *error, on bool) {
		mu.Lock()
		*field = nil
		if on {
			*field = err
		}
		mu.Unlock()
	}
	set(&h.items.mu, &h.items.err, which == failItems)
	set(&h.orders.mu, &h.orders.err, which == failOrders)
	set(&h.units.mu, &h.units.err, which == failUnits)
	set(&h.units.mu, &h.units.reserveErr, which == failReserve)
	set(&h.views.mu, &h.views.err, which == failViews)
	set(&h.orders.mu, &h.actions.err, which == failActions) // the fake desk runs under the order table's lock
	return which != failNone && err != nil
}
