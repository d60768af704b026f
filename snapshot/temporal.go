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
)

// Workflow is one order workflow as the visibility API lists it.
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

// TemporalLister lists an item's order workflows through the visibility API
// (`SeckillItemId = N`). Each page call has its own timeout and is retried
// with backoff from its own page token.
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
