package main

import (
	"testing"
	"time"
)

// --since takes an RFC 3339 time or a duration before now; anything else is refused.
func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-12-03T10:00:00Z":      time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC),
		"2026-12-03T11:00:00+01:00": time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC),
		"90m":                       now.Add(-90 * time.Minute),
		"0s":                        now,
	} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "-1h", "2026-12-03"} {
		if got, err := parseSince(in, now); err == nil {
			t.Errorf("%q: accepted as %v", in, got)
		}
	}
}
