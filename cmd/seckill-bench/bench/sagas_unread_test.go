package bench

import (
	"strings"
	"testing"

	"github.com/seckill/seckill/invariant"
)

// A sale whose sagas could not be listed prints its MySQL and Redis verdict
// and names the read that failed, rather than passing for a full check.
func TestSagasNotListedAreNamedInTheReport(t *testing.T) {
	const why = "temporal visibility: list workflows of item 42, page 7 (after 6000 sagas), 4 attempt(s): reset"
	rep := &SaleReport{ItemID: 42, Invariants: &invariant.Report{ItemID: 42, StockTotal: 10, WorkflowsError: why, Violations: []invariant.Violation{}}}
	var b strings.Builder
	PrintInvariants(&b, rep)
	if !strings.Contains(b.String(), "Temporal checks skipped: "+why) {
		t.Fatalf("printed %q, want the failed read named", b.String())
	}
	if v := verdict(rep); !strings.Contains(v, "sagas not listed") {
		t.Fatalf("verdict %q passes for a full check", v)
	}
}
