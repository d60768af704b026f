package workflows_test

import (
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/worker"
	"github.com/seckill/seckill/workflows"
)

var (
	_ payment.Sagas  = (*workflows.Client)(nil)
	_ worker.Starter = (*workflows.Client)(nil)
)
