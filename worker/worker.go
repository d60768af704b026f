// Package worker holds the parts of the saga's worker process: the RocketMQ
// consumer that turns each order message into an OrderSaga, the dead-letter
// consumer that starts the sagas of orders whose messages ran out of
// deliveries, the gate that holds the order consumer, the Temporal worker's
// registration, the periodic reconcile, and the ops listener (/metrics,
// /healthz, the consumer's admin switch). The saga's logic lives in
// workflows, activities and compensation; cmd/seckill assembles the process.
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

// NewTemporalWorker returns a (not yet started) worker on taskQueue sized by cfg.
func NewTemporalWorker(c client.Client, taskQueue string, cfg config.Worker, a *activities.Activities, comp *compensation.Activities) worker.Worker {
	w := worker.New(c, taskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize:      cfg.MaxConcurrentActivities,
		MaxConcurrentWorkflowTaskExecutionSize:  max(cfg.MaxConcurrentWorkflowTasks, 2),
		MaxConcurrentLocalActivityExecutionSize: cfg.MaxConcurrentLocalActivities,
		MaxConcurrentWorkflowTaskPollers:        max(cfg.WorkflowPollers, 2),
		MaxConcurrentActivityTaskPollers:        max(cfg.ActivityPollers, 1),
	})
	Register(w, a, comp)
	return w
}
