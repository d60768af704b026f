package snapshot_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/testkit"
	"github.com/seckill/seckill/workflows"
)

// counting counts the page calls that reach the real service.
type counting struct {
	workflowservice.WorkflowServiceClient
	calls atomic.Int32
}

func (c *counting) WorkflowService() workflowservice.WorkflowServiceClient { return c }

func (c *counting) ListWorkflowExecutions(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest, opts ...grpc.CallOption) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	c.calls.Add(1)
	return c.WorkflowServiceClient.ListWorkflowExecutions(ctx, req, opts...)
}

// On the real Temporal server an item with more sagas than a page holds is
// listed whole, page by page: 350 sagas at 100 a page.
func TestTemporalListerPagesTheRealIndex(t *testing.T) {
	testkit.Integration(t)
	const sagas, pageSize = 350, 100
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := testkit.Config(t)
	cfg.Temporal.TaskQueue = testkit.Name(t, "list") // no worker: the sagas stay Running, then are terminated
	tc := testkit.Temporal(ctx, t, cfg.Temporal, testkit.Logger(t))
	item := time.Now().UnixNano() % 1_000_000_000_000 // SeckillItemId is global across runs
	prefix := fmt.Sprintf("order-listtest-%d-", item)

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range sagas {
		g.Go(func() error {
			_, err := tc.ExecuteWorkflow(gctx, client.StartWorkflowOptions{
				ID: fmt.Sprintf("%s%04d", prefix, i), TaskQueue: cfg.Temporal.TaskQueue,
				WorkflowExecutionTimeout: 5 * time.Minute, // a backstop should the cleanup not run
				TypedSearchAttributes:    temporal.NewSearchAttributes(workflows.SearchItemID.ValueSet(item)),
			}, "snapshot-list-test")
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("start sagas (SeckillItemId registered by scripts/stack?): %v", err)
	}
	// Visibility catches up with the starts on its own time.
	q := fmt.Sprintf("SeckillItemId = %d", item)
	for {
		resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: cfg.Temporal.Namespace, Query: q})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetCount() == sagas {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("visibility counts %d sagas of %d", resp.GetCount(), sagas)
		case <-time.After(100 * time.Millisecond):
		}
	}

	svc := &counting{WorkflowServiceClient: tc.WorkflowService()}
	l := snapshot.TemporalLister{Client: svc, Namespace: cfg.Temporal.Namespace, PageSize: pageSize}
	wfs, err := l.ListOrderWorkflows(ctx, item)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, w := range wfs {
		if seen[w.WorkflowID] || !w.Running() || w.OrderID != w.WorkflowID[len("order-"):] {
			t.Fatalf("saga %+v listed twice, not running or without its order id", w)
		}
		seen[w.WorkflowID] = true
	}
	if len(seen) != sagas {
		t.Fatalf("listed %d distinct sagas, want %d", len(seen), sagas)
	}
	if n := svc.calls.Load(); n < sagas/pageSize+1 {
		t.Fatalf("%d page calls for %d sagas at %d a page", n, sagas, pageSize)
	}
}
