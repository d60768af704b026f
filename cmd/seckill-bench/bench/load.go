// Package bench is the flash-sale load generator and benchmark harness:
// `seckill-bench` (one flash sale against a running deployment, then the
// invariant checks) and `seckill-bench stages` (each pipeline stage against
// its own baseline, what `make bench` runs). Every HTTP measurement goes
// through the same vegeta attacker with the same settings (Load), so the
// ratios compare like with like.
package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Load is how hard the generator pushes: open loop at Rate hits per second,
// or, when Rate is 0, closed loop with Connections workers each keeping one
// request in flight.
type Load struct {
	Rate        float64       `json:"rate"`
	Connections int           `json:"connections"`
	Timeout     time.Duration `json:"timeout"`
}

func (l Load) String() string {
	if l.Rate > 0 {
		return fmt.Sprintf("open loop %.0f/s (up to %d connections)", l.Rate, l.Connections)
	}
	return fmt.Sprintf("closed loop, %d connections", l.Connections)
}

func (l Load) attacker() *vegeta.Attacker {
	c := max(l.Connections, 1)
	opts := []func(*vegeta.Attacker){
		vegeta.Connections(c), vegeta.MaxConnections(c), vegeta.KeepAlive(true),
		vegeta.Timeout(orDefault(l.Timeout, 10*time.Second)), vegeta.Redirects(vegeta.NoFollow),
		vegeta.MaxBody(4096), vegeta.HTTP2(false),
	}
	if l.Rate <= 0 {
		opts = append(opts, vegeta.Workers(uint64(c)), vegeta.MaxWorkers(uint64(c)))
	} else {
		opts = append(opts, vegeta.Workers(uint64(min(c, 64))), vegeta.MaxWorkers(uint64(c)))
	}
	return vegeta.NewAttacker(opts...)
}

func (l Load) pacer() vegeta.Pacer {
	if l.Rate <= 0 {
		return vegeta.ConstantPacer{} // zero rate: as fast as the workers go
	}
	return vegeta.ConstantPacer{Freq: int(l.Rate), Per: time.Second}
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Outcome names an answer: its status code, or "error" when none came.
func Outcome(code uint16) string {
	if code == 0 {
		return "error"
	}
	return strconv.Itoa(int(code))
}

// Recorder collects answers: counts by outcome, latencies by outcome and a
// per-second timeline. Safe for one writer and concurrent readers.
type Recorder struct {
	mu        sync.Mutex
	start     time.Time
	byCode    map[string]int64
	latencies map[string][]time.Duration
	perSecond []map[string]int64
	total     atomic.Int64
	last      time.Time
}

// NewRecorder starts the clock at start.
func NewRecorder(start time.Time) *Recorder {
	return &Recorder{start: start, byCode: map[string]int64{}, latencies: map[string][]time.Duration{}}
}

// Add records one answer that ended at end after latency.
func (r *Recorder) Add(outcome string, end time.Time, latency time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byCode[outcome]++
	r.latencies[outcome] = append(r.latencies[outcome], latency)
	sec := int(end.Sub(r.start) / time.Second)
	if sec < 0 {
		sec = 0
	}
	for len(r.perSecond) <= sec {
		r.perSecond = append(r.perSecond, map[string]int64{})
	}
	r.perSecond[sec][outcome]++
	if end.After(r.last) {
		r.last = end
	}
	r.total.Add(1)
}

// Total is the number of answers so far.
func (r *Recorder) Total() int64 { return r.total.Load() }

// Counts returns a copy of the counts by outcome.
func (r *Recorder) Counts() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.byCode))
	for k, v := range r.byCode {
		out[k] = v
	}
	return out
}

// Latency is a latency summary in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

// Histogram is a latency distribution over log-spaced buckets (upper bounds in ms).
type Histogram struct {
	BoundsMS []float64          `json:"bounds_ms"`
	Counts   map[string][]int64 `json:"counts"` // outcome -> count per bucket
}

// Summary is what a Recorder saw.
type Summary struct {
	Duration  float64            `json:"duration_s"` // first send to last answer
	Total     int64              `json:"total"`
	ByOutcome map[string]int64   `json:"by_outcome"`
	Latency   map[string]Latency `json:"latency"` // by outcome, plus "all"
	PerSecond []map[string]int64 `json:"per_second"`
	Histogram Histogram          `json:"histogram"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func summarize(ls []time.Duration) Latency {
	if len(ls) == 0 {
		return Latency{}
	}
	s := append([]time.Duration(nil), ls...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) float64 { return ms(s[min(len(s)-1, int(p*float64(len(s))))]) }
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return Latency{Count: int64(len(s)), P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: ms(s[len(s)-1]),
		Mean: ms(sum / time.Duration(len(s)))}
}

// Summary computes percentiles, the timeline and the histogram.
func (r *Recorder) Summary() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := Summary{Total: r.total.Load(), ByOutcome: map[string]int64{}, Latency: map[string]Latency{}}
	if !r.last.IsZero() {
		out.Duration = r.last.Sub(r.start).Seconds()
	}
	var all []time.Duration
	bounds := []float64{}
	for b := 0.1; b < 60000; b *= 1.4142 {
		bounds = append(bounds, b)
	}
	out.Histogram = Histogram{BoundsMS: bounds, Counts: map[string][]int64{}}
	for k, v := range r.byCode {
		out.ByOutcome[k] = v
		out.Latency[k] = summarize(r.latencies[k])
		all = append(all, r.latencies[k]...)
		h := make([]int64, len(bounds)+1)
		for _, l := range r.latencies[k] {
			h[sort.SearchFloat64s(bounds, ms(l))]++
		}
		out.Histogram.Counts[k] = h
	}
	out.Latency["all"] = summarize(all)
	for _, m := range r.perSecond {
		c := make(map[string]int64, len(m))
		for k, v := range m {
			c[k] = v
		}
		out.PerSecond = append(out.PerSecond, c)
	}
	return out
}

// progress prints a live line every second until ctx ends.
func progress(ctx context.Context, w io.Writer, label string, rec *Recorder, extra func() string) func() {
	var prev int64
	return liveLine(ctx, w, func() string {
		n := rec.Total()
		c := rec.Counts()
		keys := make([]string, 0, len(c))
		for k := range c {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		line := fmt.Sprintf("\r[%s] %5.0fs answered %d (%d/s)", label, time.Since(rec.start).Seconds(), n, n-prev)
		for _, k := range keys {
			line += fmt.Sprintf(" %s=%d", k, c[k])
		}
		if extra != nil {
			line += " " + extra()
		}
		prev = n
		return line
	})
}

// liveLine emits render's line every second until ctx ends or the returned
// stop is called (which waits for the last line). A nil w prints nothing.
func liveLine(ctx context.Context, w io.Writer, render func() string) func() {
	if w == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				printLine(w)
				return
			case <-t.C:
				emit(w, render())
			}
		}
	}()
	return func() { cancel(); <-done }
}

// emit writes a progress line: rewritten in place on a terminal, one line
// every five seconds otherwise (logs stay readable).
func emit(w io.Writer, line string) {
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			printf(w, "%-120s", line)
			return
		}
	}
	if sec := time.Now().Unix(); sec%5 == 0 {
		printLine(w, strings.TrimPrefix(line, "\r"))
	}
}

// Fixed runs the load for duration d against the targets next(i) returns for
// the i-th hit, and records every answer. This is the measurement every stage
// shares: bare gin, sold-out rejections.
func Fixed(ctx context.Context, l Load, d time.Duration, label string, w io.Writer, next func(i uint64, t *vegeta.Target)) Summary {
	var seq atomic.Uint64
	tr := func(t *vegeta.Target) error {
		if ctx.Err() != nil {
			return vegeta.ErrNoTargets
		}
		next(seq.Add(1)-1, t)
		return nil
	}
	atk := l.attacker()
	start := time.Now()
	rec := NewRecorder(start)
	stop := progress(ctx, w, label, rec, nil)
	for res := range atk.Attack(tr, l.pacer(), d, label) {
		if res.Method == "" { // the targeter ran dry; nothing was sent
			continue
		}
		rec.Add(Outcome(res.Code), res.End(), res.Latency)
	}
	stop()
	return rec.Summary()
}

// header builds a request header with a bearer token.
func header(token string) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set("Content-Type", "application/json")
	return h
}
