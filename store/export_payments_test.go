package store

import "gorm.io/gorm"

// FailAfterEventInsert makes ApplyPaymentEvent fail between the event's
// insert and the decision until the returned func restores it.
func FailAfterEventInsert(err error) (restore func()) {
	old := afterEventInsert
	afterEventInsert = func(*gorm.DB) error { return err }
	return func() { afterEventInsert = old }
}
