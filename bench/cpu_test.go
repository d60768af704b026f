package bench

import (
	"os"
	"testing"
)

// The meter reads this process's own CPU and charges it per answer.
func TestCPUMeterReadsProc(t *testing.T) {
	m := StartCPU(map[string]int{"self": os.Getpid()})
	x := 0
	for i := range 50_000_000 { // burn a little CPU
		x += i % 7
	}
	_ = x
	per := m.PerAnswer(1000)
	if per["self"] <= 0 || per["total"] != per["self"] {
		t.Fatalf("per answer %v, want a positive figure for self equal to the total", per)
	}
}
