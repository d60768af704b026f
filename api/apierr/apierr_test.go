package apierr

import "testing"

func TestParseID(t *testing.T) {
	for s, want := range map[string]int64{"1": 1, "42": 42, "9223372036854775807": 1<<63 - 1, "007": 7} {
		if got, ok := ParseID(s); !ok || got != want {
			t.Fatalf("ParseID(%q) = %d %v", s, got, ok)
		}
	}
	for _, s := range []string{"", "0", "-1", "+1", "1.0", "9223372036854775808", "99999999999999999999", "1e3", " 1", "abc"} {
		if _, ok := ParseID(s); ok {
			t.Fatalf("ParseID(%q) accepted", s)
		}
	}
}
