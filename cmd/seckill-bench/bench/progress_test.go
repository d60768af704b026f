package bench

import (
	"strings"
	"testing"
	"time"
)

// The drain's progress line says the pay answers in words, never as a Go
// map (it printed "paid map[]" before any pay and "paid map[200:1 409:1]"
// after).
func TestDrainProgressIsInWords(t *testing.T) {
	w := &watcher{start: time.Now(), paid: map[string]int64{}, persisted: 7, pending: 4}
	line, p := w.drainLine("drain", 10, 3)
	if p != 7 || !strings.HasSuffix(line, "persisted 7/10 (4/s) pending payment 4, pays: none") {
		t.Fatalf("before any pay: %q (persisted %d)", line, p)
	}
	w.paid["200"], w.paid["409"], w.paid["error"] = 2, 1, 1
	line, _ = w.drainLine("timeouts", -1, 7)
	want := "persisted 7 (0/s) pending payment 4, pays: 4 (200 paid 2, 409 ORDER_NOT_PAYABLE 1, no answer 1)"
	if !strings.HasSuffix(line, want) || strings.Contains(line, "map[") {
		t.Fatalf("after pays: %q, want it to end in %q", line, want)
	}
}

func TestPIDsInWords(t *testing.T) {
	got := pidsText(map[string][]int{"worker": {12}, "broker": {7, 8}, "api": nil})
	if want := "api none, broker 7 8, worker 12"; got != want {
		t.Fatalf("pidsText = %q, want %q", got, want)
	}
}
