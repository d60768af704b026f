package workflows_test

import (
	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/workflows"
)

// The API's pay and cancel go through the saga client.
var _ api.OrderActions = (*workflows.Client)(nil)
