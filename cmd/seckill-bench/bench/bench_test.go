package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeAPI answers purchase attempts like the API would: the first attempt of
// every third buyer is rate limited (Retry-After: 0), then one unit per buyer
// until stock runs out, then SOLD_OUT; a second purchase is ALREADY_PURCHASED.
type fakeAPI struct {
	mu      sync.Mutex
	left    int
	seen    map[string]int
	owners  map[string]string
	answers map[int]int
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen[tok]++
	n, _ := strconv.Atoi(strings.TrimPrefix(tok, "t"))
	code := 0
	switch {
	case n%3 == 0 && f.seen[tok] == 1:
		w.Header().Set("Retry-After", "0")
		code = http.StatusTooManyRequests
	case f.owners[tok] != "":
		code = http.StatusConflict
	case f.left == 0:
		code = http.StatusGone
	default:
		f.left--
		f.owners[tok] = fmt.Sprintf("order-%d", n)
		code = http.StatusAccepted
	}
	f.answers[code]++
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if code == http.StatusAccepted {
		_, _ = fmt.Fprintf(w, `{"order_id":%q,"status":"QUEUED","pay_by":"2030-01-02T03:04:05.678Z"}`, f.owners[tok])
	} else {
		_, _ = io.WriteString(w, `{"error":{"code":"X","message":"x"}}`)
	}
}

func TestSaleHonoursRetryAfterAndCountsAcceptances(t *testing.T) {
	api := &fakeAPI{left: 50, seen: map[string]int{}, owners: map[string]string{}, answers: map[int]int{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	var buyers []Buyer
	for i := 1; i <= 300; i++ {
		buyers = append(buyers, Buyer{ID: int64(i), Token: "t" + strconv.Itoa(i)})
	}
	var mu sync.Mutex
	payable := map[string]time.Time{}
	onAccepted := func(orderID string, userID int64, payBy, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if orderID != fmt.Sprintf("order-%d", userID) || at.IsZero() {
			t.Errorf("OnAccepted(%s, %d, %s, %s)", orderID, userID, payBy, at)
		}
		payable[orderID] = payBy
	}
	res := Sale{BaseURL: srv.URL, ItemID: 7, Buyers: buyers, Load: Load{Connections: 8, Timeout: 5 * time.Second},
		MaxAttempts: 3, Units: 50, OnAccepted: onAccepted}.Run(context.Background())
	want := time.Date(2030, 1, 2, 3, 4, 5, 678e6, time.UTC)
	for id, payBy := range payable {
		if !payBy.Equal(want) {
			t.Fatalf("order %s: pay_by %s, want %s", id, payBy, want)
		}
	}
	if len(payable) != 50 {
		t.Fatalf("OnAccepted called for %d orders, want 50", len(payable))
	}

	if len(res.Accepted) != 50 {
		t.Fatalf("accepted %d, want 50", len(res.Accepted))
	}
	owners := map[string]bool{}
	for _, a := range res.Accepted {
		if a.OrderID != fmt.Sprintf("order-%d", a.UserID) || owners[a.OrderID] {
			t.Fatalf("bad or duplicate acceptance %+v", a)
		}
		owners[a.OrderID] = true
	}
	// Every third buyer was limited once and retried once.
	if res.Retries != 100 || res.Summary.ByOutcome["429"] != 100 {
		t.Fatalf("retries %d, 429s %d; want 100 each", res.Retries, res.Summary.ByOutcome["429"])
	}
	if res.Attempts != 400 || res.Summary.ByOutcome["410"] != 250 || !res.SoldOutSeen {
		t.Fatalf("attempts %d, answers %v", res.Attempts, res.Summary.ByOutcome)
	}
	if res.SoldOutAfter <= 0 || res.AcceptedPerSecond <= 0 {
		t.Fatalf("sold out after %s, %f accepted/s", res.SoldOutAfter, res.AcceptedPerSecond)
	}
	if l := res.Summary.Latency["202"]; l.Count != 50 || l.P50 <= 0 || l.Max < l.P99 {
		t.Fatalf("latency summary %+v", l)
	}
}

func TestSaleReportRendersOffline(t *testing.T) {
	rec := NewRecorder(time.Now())
	for i := 0; i < 100; i++ {
		rec.Add("410", rec.start.Add(time.Duration(i)*20*time.Millisecond), time.Duration(i+1)*time.Millisecond)
		if i%10 == 0 {
			rec.Add("202", rec.start.Add(time.Duration(i)*20*time.Millisecond), 3*time.Millisecond)
		}
	}
	rep := &SaleReport{ItemID: 1, Answers: rec.Summary(), OrdersPerSecond: []int64{3, 5, 2}, Config: map[string]any{"units": 10},
		Memory: map[string]ProcMem{"api": {Role: "api", PID: 1, PeakRSSMB: 42}}}
	path := filepath.Join(t.TempDir(), "sale.html")
	if err := WriteSaleHTML(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if strings.Count(page, "<svg") != 2 || !strings.Contains(page, "<polyline") {
		t.Fatal("want two inline SVG charts")
	}
	for _, bad := range []string{"<script src", "<link", "https://", "cdn"} {
		if strings.Contains(page, bad) {
			t.Fatalf("page refers to something outside itself: %q", bad)
		}
	}
}

func TestUpdateDocReplacesOnlyTheBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perf.md")
	if err := os.WriteFile(path, []byte("intro\n<!-- bench:begin -->\nold\n<!-- bench:end -->\noutro\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := &StagesReport{Ratios: []Ratio{ratio("1", "x", 80, 100, "req/s", 0.8, "")}}
	if err := UpdateDoc(path, rep); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	if strings.Contains(s, "old") || !strings.HasPrefix(s, "intro\n") || !strings.HasSuffix(s, "outro\n") ||
		!strings.Contains(s, "| 1 | x | 80.00 req/s | 100.0 req/s | 0.80 |") {
		t.Fatalf("doc after update:\n%s", s)
	}
}

// Settle returns once the machine is quiet, and reports what it saw.
func TestSettleReadsTheMachine(t *testing.T) {
	j0, err := cpuTimes()
	if err != nil {
		t.Fatal(err)
	}
	if j0.busy == 0 || j0.total < j0.busy || j0.steal > j0.busy {
		t.Fatalf("cpuTimes: %+v", j0)
	}
	// Anything is quiet enough under a 100 % ceiling: one window.
	busy := Settle(context.Background(), 1, 10*time.Second)
	if busy < 0 || busy > 1 {
		t.Fatalf("busy fraction %v, want 0..1", busy)
	}
	j1, err := cpuTimes()
	if err != nil {
		t.Fatal(err)
	}
	if j1.total <= j0.total || j1.busy < j0.busy {
		t.Fatalf("jiffies went backwards or stood still: %+v -> %+v", j0, j1)
	}
	if b, st := busySince(j0, j1); b < 0 || b > 1 || st < 0 || st > b {
		t.Fatalf("busySince: busy %v, steal %v", b, st)
	}
}

// A chosen order is paid at its 202: 202 -> payable counts the paid one, and
// a pay refused before its deadline counts as refused.
func TestPaysAtThe202(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/orders/paid/") {
			_, _ = io.WriteString(w, `{"status":"PAID"}`)
			return
		}
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"error":{"code":"ORDER_NOT_PAYABLE","message":"x"}}`)
	}))
	defer srv.Close()
	now := time.Now()
	w := &watcher{payFraction: 1, apis: clients([]string{srv.URL}), tokens: map[int64]string{1: "t1", 2: "t2"},
		paid: map[string]int64{}, payRec: NewRecorder(now), payQ: make(chan payJob, 4), orders: map[string]*payState{}}
	w.accepted("paid", 1, now.Add(time.Minute), now)
	w.accepted("refused", 2, now.Add(time.Minute), now)
	w.accepted("paid", 1, now.Add(time.Minute), now) // a second 202 for the same order: one pay
	close(w.payQ)
	w.payer(context.Background())
	payable, refused, ids := w.paySummary()
	if payable.Count != 1 || payable.Max <= 0 || refused != 1 || len(ids) != 1 || ids[0] != "refused" {
		t.Fatalf("202 -> payable %+v, refused %d; want one paid order and one refused", payable, refused)
	}
	if w.paid["200"] != 1 || w.paid["409"] != 1 {
		t.Fatalf("pay answers %v", w.paid)
	}
}

func TestSpreadAndMedians(t *testing.T) {
	if got := spread([]float64{3, 1, 2}, "%.0f"); got != "1 / 2 / 3" {
		t.Fatalf("spread %q", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Fatalf("median %v", got)
	}
	m := medianByKey([]map[string]float64{{"broker": 10, "total": 100}, {"broker": 30, "total": 90}, {"broker": 20, "total": 120}})
	if m["broker"] != 20 || m["total"] != 100 {
		t.Fatalf("medianByKey %v", m)
	}
	h := histogram([]time.Duration{50 * time.Millisecond, time.Second, time.Hour}, []float64{0.1, 1, 10})
	if fmt.Sprint(h) != "[1 1 1]" {
		t.Fatalf("histogram %v", h)
	}
}

func TestTimedOut(t *testing.T) {
	for _, err := range []error{context.DeadlineExceeded, fmt.Errorf("start: %w", context.DeadlineExceeded),
		serviceerror.NewDeadlineExceeded("context deadline exceeded"), status.Error(codes.DeadlineExceeded, "x")} {
		if !timedOut(err) {
			t.Errorf("timedOut(%v) = false", err)
		}
	}
	if timedOut(errors.New("namespace not found")) {
		t.Error("timedOut(other) = true")
	}
}

// Rounds take the subjects in turn, reversing the order each round, so a
// drifting machine weighs on each alike.
func TestRoundsAlternateTheOrder(t *testing.T) {
	var seq []string
	sub := func(name string) subject {
		return subject{name, func() Window { seq = append(seq, name); return Window{PerSecond: float64(len(seq))} }}
	}
	ws := rounds(3, []subject{sub("a"), sub("b"), sub("c")})
	if got := strings.Join(seq, ""); got != "abccbaabc" {
		t.Fatalf("order %q, want abccbaabc", got)
	}
	if fmt.Sprint(perSecond(ws["a"])) != "[1 6 7]" || len(ws["c"]) != 3 {
		t.Fatalf("windows %v", ws)
	}
}

// A side-by-side figure is the median of its pairs' ratios, not the ratio
// of two medians, and carries the pairs' spread.
func TestSideBySideIsTheMedianOfThePairs(t *testing.T) {
	// Baseline and pipeline swing together: the ratios stay near 0.8.
	r := sideBySide("1", "x", []float64{8000, 24000, 16400, 0}, []float64{10000, 30000, 20000, 25000}, "req/s", 0.8, true, "n")
	if r.Pairs != 3 || r.Ratio != 0.8 || r.RatioMin != 0.8 || r.RatioMax != 0.82 || !r.Met || r.Pipeline != 12200 || r.Baseline != 22500 {
		t.Fatalf("%+v", r)
	}
	if got := r.ratioText(); got != "0.80 (0.80–0.82)" {
		t.Fatalf("ratio text %q", got)
	}
	c := sideBySide("1", "cpu", []float64{130, 90}, []float64{100, 60}, "µs", 1.25, false, "")
	if c.Ratio != 1.4 || c.Met || c.Target != "<= 1.25x" {
		t.Fatalf("%+v", c)
	}
	if none := sideBySide("2", "y", nil, []float64{1}, "req/s", 0.4, true, ""); none.Met || none.Pairs != 0 || none.ratioText() != "0.00" {
		t.Fatalf("%+v", none)
	}
	// Two decimals that would read as the other verdict get a third.
	near := sideBySide("2", "z", []float64{3996}, []float64{10000}, "req/s", 0.4, true, "")
	if near.Met || near.ratioText() != "0.3996" {
		t.Fatalf("%+v reads %q", near, near.ratioText())
	}
	if over := sideBySide("1", "cpu", []float64{1252}, []float64{1000}, "µs", 1.25, false, ""); over.Met || over.ratioText() != "1.252" {
		t.Fatalf("%+v reads %q", over, over.ratioText())
	}
	if meanOf(10, 0, 20) != 15 || meanOf(0) != 0 {
		t.Fatal("meanOf")
	}
	if got := othersNote([]Window{{Answers: 1, Others: 0.12}, {Others: 0.9}}, []Window{{Answers: 1, Others: 0.4}, {Answers: 1, Others: 0.3}}); got != "machine used by others 12–40 %" {
		t.Fatalf("othersNote %q", got)
	}
	m := mergeRooms([]ControlRoomReport{{Polls: 6, P50MS: 2, P99MS: 9, Errors: 1}, {Polls: 6, P50MS: 4, P99MS: 20}})
	if m.Polls != 12 || m.Errors != 1 || m.P50MS != 3 || m.P99MS != 20 {
		t.Fatalf("mergeRooms %+v", m)
	}
}
