package compensation

import (
	"errors"

	"go.temporal.io/sdk/workflow"
)

// Saga collects the undo of each step right after the step succeeds and runs
// them in reverse (temporalio/samples-go saga).
type Saga struct {
	steps []step
}

type step struct {
	name string
	undo func(ctx workflow.Context) error
}

// Add registers the undo of a step that just succeeded.
func (s *Saga) Add(name string, undo func(ctx workflow.Context) error) {
	s.steps = append(s.steps, step{name: name, undo: undo})
}

// Names lists the registered compensations in the order they would run.
func (s *Saga) Names() []string {
	names := make([]string, 0, len(s.steps))
	for i := len(s.steps) - 1; i >= 0; i-- {
		names = append(names, s.steps[i].name)
	}
	return names
}

// Compensate runs every registered undo, last first, in a context
// disconnected from ctx so that a cancelled workflow still compensates. An
// undo that fails (its activity retries forever, so only a non-retryable
// error or a bug gets here) is logged and the rest still run.
func (s *Saga) Compensate(ctx workflow.Context) error {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	var errs []error
	for i := len(s.steps) - 1; i >= 0; i-- {
		if err := s.steps[i].undo(dctx); err != nil {
			workflow.GetLogger(ctx).Error("compensation failed", "step", s.steps[i].name, "error", err)
			errs = append(errs, err)
		}
	}
	s.steps = nil
	return errors.Join(errs...)
}
