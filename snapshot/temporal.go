package snapshot

import (
	"context"
	"fmt"
	"strings"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// Workflow is one order workflow as the visibility API lists it.
type Workflow struct {
	WorkflowID string `json:"workflow_id"`
	OrderID    string `json:"order_id"`
	Status     string `json:"status"` // Running, Completed, Failed, Canceled, Terminated, ContinuedAsNew, TimedOut
}

func (w Workflow) Running() bool { return w.Status == "Running" }

// TemporalLister lists an item's order workflows through the visibility API
// (`SeckillItemId = N`), the way support staff find them.
type TemporalLister struct {
	Client    client.Client
	Namespace string
}

func (l TemporalLister) ListOrderWorkflows(ctx context.Context, itemID int64) ([]Workflow, error) {
	var out []Workflow
	var token []byte
	for {
		resp, err := l.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace:     l.Namespace,
			PageSize:      1000,
			NextPageToken: token,
			Query:         fmt.Sprintf("SeckillItemId = %d", itemID),
		})
		if err != nil {
			return nil, fmt.Errorf("list workflows with SeckillItemId = %d: %w", itemID, err)
		}
		for _, e := range resp.GetExecutions() {
			id := e.GetExecution().GetWorkflowId()
			out = append(out, Workflow{
				WorkflowID: id,
				OrderID:    strings.TrimPrefix(id, "order-"),
				Status:     e.GetStatus().String(),
			})
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return out, nil
		}
	}
}
