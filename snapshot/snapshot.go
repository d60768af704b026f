// Package snapshot reads one item's world (MySQL, Redis, its outbox, its
// sagas) into one Item, each system in one step, going the pipeline backwards
// so that a cross-system rule errs on the side of "not yet".
package snapshot

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// MySQL is store.Store.
type MySQL interface {
	ReadItemState(ctx context.Context, itemID int64) (store.ItemState, error)
}

// Redis is stock.Store.
type Redis interface {
	ReadItemState(ctx context.Context, itemID int64) (stock.ItemState, error)
}

// Outbox is outbox.Stream.
type Outbox interface {
	OrderIDs(ctx context.Context, itemID int64) (map[string]bool, error)
}

type WorkflowLister interface {
	ListOrderWorkflows(ctx context.Context, itemID int64) ([]Workflow, error)
}

// Sources are the systems a snapshot reads; Outbox and Workflows may be nil.
type Sources struct {
	MySQL     MySQL
	Redis     Redis
	Outbox    Outbox
	Workflows WorkflowLister
}

type Item struct {
	ID            int64
	At            time.Time // when the MySQL read began
	MySQL         store.ItemState
	Redis         stock.ItemState
	Outbox        map[string]bool // nil when not read
	Workflows     []Workflow
	WorkflowsRead bool
	WorkflowsErr  error // why the sagas were not listed

	Orders     map[string]store.Order          // by order id
	Deductions map[string]store.StockDeduction // by order id
	Sagas      map[string]Workflow             // by order id
}

func Load(ctx context.Context, src Sources, itemID int64) (*Item, error) {
	at := time.Now()
	db, err := src.MySQL.ReadItemState(ctx, itemID)
	if err != nil {
		return nil, err
	}
	rd, err := src.Redis.ReadItemState(ctx, itemID)
	if err != nil {
		return nil, err
	}
	var ob map[string]bool
	if src.Outbox != nil {
		if ob, err = src.Outbox.OrderIDs(ctx, itemID); err != nil {
			return nil, err
		}
	}
	var wfs []Workflow
	var wfErr error
	if src.Workflows != nil {
		// The rest stands without the sagas; each user decides what it can judge.
		wfs, wfErr = src.Workflows.ListOrderWorkflows(ctx, itemID)
	}
	it := New(itemID, at, db, rd, ob, wfs, src.Workflows != nil && wfErr == nil)
	it.WorkflowsErr = wfErr
	return it, nil
}

// New assembles an Item from parts already read (Load, and tests).
func New(itemID int64, at time.Time, db store.ItemState, rd stock.ItemState, ob map[string]bool, wfs []Workflow, wfRead bool) *Item {
	it := &Item{ID: itemID, At: at, MySQL: db, Redis: rd, Outbox: ob, Workflows: wfs, WorkflowsRead: wfRead,
		Orders:     make(map[string]store.Order, len(db.Orders)),
		Deductions: make(map[string]store.StockDeduction, len(db.Deductions)),
		Sagas:      make(map[string]Workflow, len(wfs)),
	}
	for _, o := range db.Orders {
		it.Orders[o.OrderID] = o
	}
	for _, d := range db.Deductions {
		it.Deductions[d.OrderID] = d
	}
	for _, w := range wfs {
		it.Sagas[w.OrderID] = w
	}
	return it
}

// Live reports whether an order status holds a unit (PENDING_PAYMENT, PAID).
func Live(s order.Status) bool { return s == order.StatusPendingPayment || s == order.StatusPaid }

// Released: the status gave its unit back or never held one (REFUNDED).
func Released(s order.Status) bool {
	return s == order.StatusCancelled || s == order.StatusFailed || s == order.StatusRefunded
}

// WakesBy is when a saga of a final order wakes on its own at the latest:
// pay_by + order.PayGrace, or without one the row's last update.
func WakesBy(o store.Order) time.Time {
	if o.PayBy != nil {
		return o.PayBy.Add(order.PayGrace)
	}
	return o.UpdatedAt
}

// Age is how old an order is at the snapshot, from its ULID's time or created.
func (it *Item) Age(orderID string, created time.Time) time.Duration {
	return it.At.Sub(order.IDTime(orderID, created))
}

type Workflow struct {
	WorkflowID string `json:"workflow_id"`
	OrderID    string `json:"order_id"`
	Status     string `json:"status"` // Running, Completed, Failed, Canceled, Terminated, ContinuedAsNew, TimedOut
}

func (w Workflow) Running() bool { return w.Status == "Running" }

// Temporal is the part of client.Client the lister calls.
type Temporal interface {
	WorkflowService() workflowservice.WorkflowServiceClient
}

// The lister's bounds when its fields are zero.
const (
	DefaultPageSize    = 1000
	DefaultPageTimeout = 30 * time.Second
	DefaultAttempts    = 4
	DefaultBackoff     = time.Second
)

// TemporalLister lists an item's order workflows (`SeckillItemId = N`), each
// page with its own timeout, retried with backoff from its token.
type TemporalLister struct {
	Client      Temporal
	Namespace   string
	PageSize    int32
	PageTimeout time.Duration
	Attempts    int           // tries per page, the first included
	Backoff     time.Duration // before the second try; doubled before each next one
}

// ListOrderWorkflows lists every saga of the item; its error names the page.
func (l TemporalLister) ListOrderWorkflows(ctx context.Context, itemID int64) ([]Workflow, error) {
	var out []Workflow
	var token []byte
	for page := 1; ; page++ {
		resp, tries, err := l.page(ctx, itemID, token)
		if err != nil {
			return nil, fmt.Errorf("temporal visibility: list workflows of item %d, page %d (after %d sagas), %d attempt(s): %w",
				itemID, page, len(out), tries, err)
		}
		for _, e := range resp.GetExecutions() {
			id := e.GetExecution().GetWorkflowId()
			out = append(out, Workflow{WorkflowID: id, OrderID: strings.TrimPrefix(id, "order-"), Status: e.GetStatus().String()})
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return out, nil
		}
	}
}

func (l TemporalLister) page(ctx context.Context, itemID int64, token []byte) (*workflowservice.ListWorkflowExecutionsResponse, int, error) {
	req := &workflowservice.ListWorkflowExecutionsRequest{
		Namespace:     cmp.Or(l.Namespace, client.DefaultNamespace),
		PageSize:      cmp.Or(l.PageSize, DefaultPageSize),
		NextPageToken: token,
		Query:         fmt.Sprintf("SeckillItemId = %d", itemID),
	}
	attempts, backoff := cmp.Or(l.Attempts, DefaultAttempts), cmp.Or(l.Backoff, DefaultBackoff)
	for try := 1; ; try++ {
		// Not client.ListWorkflow: it caps a call at the RPC timeout (10 s).
		pctx, cancel := context.WithTimeout(ctx, cmp.Or(l.PageTimeout, DefaultPageTimeout))
		resp, err := l.Client.WorkflowService().ListWorkflowExecutions(pctx, req)
		cancel()
		if err == nil {
			return resp, try, nil
		}
		if try >= attempts || ctx.Err() != nil || !transient(err) {
			return nil, try, err
		}
		select {
		case <-ctx.Done():
			return nil, try, err
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// transient: a failed page call may succeed when tried again (a reset
// stream arrives as Canceled); a refused query or namespace will not.
func transient(err error) bool {
	switch serviceerror.ToStatus(err).Code() {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return false
	}
	return true
}
