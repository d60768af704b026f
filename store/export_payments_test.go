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

// OnPayMissed runs fn(orderID) whenever a pay's UPDATE moved no row, before
// the row is read, until the returned func restores it.
func OnPayMissed(fn func(orderID string)) (restore func()) {
	old := afterPayMissed
	afterPayMissed = fn
	return func() { afterPayMissed = old }
}
