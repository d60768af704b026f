// Package worker holds the parts of the saga's worker process.
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

// NewTemporalWorker returns a (not yet started) worker with the saga, the
// payment refund workflow and their activities.
func NewTemporalWorker(c client.Client, taskQueue string, cfg config.Worker, a *activities.Activities, comp *compensation.Activities) worker.Worker {
	w := worker.New(c, taskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize:      cfg.MaxConcurrentActivities,
		MaxConcurrentWorkflowTaskExecutionSize:  cfg.MaxConcurrentWorkflowTasks,
		MaxConcurrentLocalActivityExecutionSize: cfg.MaxConcurrentLocalActivities,
		MaxConcurrentWorkflowTaskPollers:        cfg.WorkflowPollers,
		MaxConcurrentActivityTaskPollers:        cfg.ActivityPollers,
	})
	w.RegisterWorkflowWithOptions(workflows.OrderSaga, workflow.RegisterOptions{Name: workflows.WorkflowType})
	w.RegisterWorkflowWithOptions(workflows.PaymentRefund, workflow.RegisterOptions{Name: workflows.RefundWorkflowType})
	w.RegisterActivity(a)
	w.RegisterActivity(comp)
	return w
}
