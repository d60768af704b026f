// Package worker holds the parts of the saga's worker process: the handler
// both RocketMQ consumers share (the orders topic and its dead-letter topic:
// each message starts its order's OrderSaga), the gate that holds the order
// consumer, the Temporal worker's registration, the periodic reconcile, and
// the ops listener (/metrics, /healthz, the consumer's admin switch). The
// saga's logic lives in workflows, activities and compensation;
// cmd/seckill starts and stops these parts.
package worker

import (
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/seckill/seckill/activities"
	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/workflows"
)

// Register registers the saga and its activities (forward steps and
// compensations) under the names the workflow uses.
func Register(r worker.Registry, a *activities.Activities, c *compensation.Activities) {
	r.RegisterWorkflowWithOptions(workflows.OrderSaga, workflow.RegisterOptions{Name: workflows.WorkflowType})
	r.RegisterActivity(a)
	r.RegisterActivity(c)
}

// NewTemporalWorker returns a (not yet started) worker on taskQueue sized by
// cfg (config.Validate holds the SDK's minimums).
func NewTemporalWorker(c client.Client, taskQueue string, cfg config.Worker, a *activities.Activities, comp *compensation.Activities) worker.Worker {
	w := worker.New(c, taskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize:      cfg.MaxConcurrentActivities,
		MaxConcurrentWorkflowTaskExecutionSize:  cfg.MaxConcurrentWorkflowTasks,
		MaxConcurrentLocalActivityExecutionSize: cfg.MaxConcurrentLocalActivities,
		MaxConcurrentWorkflowTaskPollers:        cfg.WorkflowPollers,
		MaxConcurrentActivityTaskPollers:        cfg.ActivityPollers,
	})
	Register(w, a, comp)
	return w
}
