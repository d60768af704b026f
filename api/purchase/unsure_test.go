package purchase

import (
	"testing"
	"time"
)

// A buyer answered "outcome unknown" is unsure until Redis answers for it or
// the ttl passes; past max entries, new buyers are dropped once the expired
// ones are swept.
func TestUnsureBuyers(t *testing.T) {
	now := time.Now()
	u := newUnsureBuyers(time.Minute, 2)
	if u.has(1, 10, now) {
		t.Fatal("an empty set holds a buyer")
	}
	u.add(1, 10, now)
	if !u.has(1, 10, now) || u.has(2, 10, now) || u.has(1, 11, now) {
		t.Fatal("the set answers for another item or buyer, or not for the one added")
	}
	if u.has(1, 10, now.Add(2*time.Minute)) {
		t.Fatal("a buyer is still unsure past the ttl")
	}
	u.forget(1, 10)
	if u.has(1, 10, now) {
		t.Fatal("a forgotten buyer is still unsure")
	}
	u.add(1, 1, now)
	u.add(1, 2, now)
	u.add(1, 3, now) // full: dropped
	if u.has(1, 3, now) {
		t.Fatal("a buyer past max entries was kept")
	}
	u.add(1, 4, now.Add(2*time.Minute)) // the expired ones are swept first
	if !u.has(1, 4, now.Add(2*time.Minute)) {
		t.Fatal("a buyer was dropped though expired entries could go")
	}
}
