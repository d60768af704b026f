package store

import (
	"slices"

	"gorm.io/gorm"
)

// FailAfterEventInsert makes ApplyPaymentEvent(s) fail between an event's
// insert and its decision, for the events named (every event when none),
// until the returned func restores it.
func FailAfterEventInsert(err error, ids ...string) (restore func()) {
	old := afterEventInsert
	afterEventInsert = func(_ *gorm.DB, e PaymentEvent) error {
		if len(ids) == 0 || slices.Contains(ids, e.ID) {
			return err
		}
		return nil
	}
	return func() { afterEventInsert = old }
}
