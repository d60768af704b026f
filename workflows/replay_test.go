package workflows

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TestReplayHistories replays the saved histories of real runs on the dev
// server (one per path, of the saga and of PaymentRefund; recorded by the worker package's integration tests
// with SECKILL_RECORD_HISTORIES=1), so a change that makes the saga
// non-deterministic for orders already in flight fails here.
func TestReplayHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, path := range []string{"paid", "payment_timeout", "buyer_cancel", "operator_cancel", "stock_exhausted", "duplicate_buyer",
		// Paid, timed out or cancelled while QUEUED (recorded by worker/early_pay_test.go).
		"paid_while_queued", "refunded", "timeout_while_queued", "cancel_while_queued",
		// Payments through a provider (recorded by worker/payment_saga_test.go): canceled at pay_by, the
		// payment won at the cancel, refunded after the close.
		"payment_canceled", "payment_won", "payment_refunded",
		// A payment confirmed before pay_by, its saga run after it: completed, not refunded (worker/owed_money_test.go).
		"payment_in_time_late_saga",
		// Support's refund of a PAID order (PaymentRefund, Support; worker/support_refund_test.go).
		"support_refund"} {
		want[path+".json"] = false
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(OrderSaga, workflow.RegisterOptions{Name: WorkflowType})
			r.RegisterWorkflowWithOptions(PaymentRefund, workflow.RegisterOptions{Name: RefundWorkflowType})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatal(err)
			}
		})
		want[filepath.Base(f)] = true
	}
	for name, found := range want {
		if !found {
			t.Errorf("missing history testdata/%s", name)
		}
	}
}
