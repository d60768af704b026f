package bench

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/seckill/seckill/store"
)

// printf and printLine write to a terminal or a log: a failed write there is
// not worth failing a benchmark for.
func printf(w io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }

func printLine(w io.Writer, args ...any) { _, _ = fmt.Fprintln(w, args...) }

// WriteJSON writes v as indented JSON to path, creating its directory.
func WriteJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// PrintSale writes the sale report as terminal tables.
func PrintSale(w io.Writer, r *SaleReport) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	printf(tw, "\nFlash sale: item %d, %v units, %v buyers, %v\n", r.ItemID, r.Config["units"], r.Config["buyers"], r.Config["load"])
	printf(tw, "machine: %d CPUs, %.1f GiB, %s\n\n", r.Machine.CPUs, r.Machine.MemoryGB, r.Machine.Kernel)
	printLine(tw, "answer\tcount\tp50 ms\tp90 ms\tp99 ms\tmax ms\t")
	for _, k := range append(sortedKeys(r.Answers.ByOutcome), "all") {
		l := r.Answers.Latency[k]
		n := r.Answers.ByOutcome[k]
		if k == "all" {
			n = r.Answers.Total
		}
		printf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t\n", k, n, l.P50, l.P90, l.P99, l.Max)
	}
	printLine(tw)
	rate := 0.0
	if r.Answers.Duration > 0 {
		rate = float64(r.Answers.Total) / r.Answers.Duration
	}
	printf(tw, "attempts\t%d (retries %d, gave up %d, no answer %d)\t\n", r.Attempts, r.Retries, r.GaveUp, r.ClientErrors)
	printf(tw, "answers per second\t%.0f over %.1f s\t\n", rate, r.Answers.Duration)
	printf(tw, "accepted (202)\t%d, %.0f/s\t\n", r.Accepted, r.AcceptedPerSec)
	printf(tw, "time until sold out\t%.2f s\t\n", r.SoldOutAfterS)
	printf(tw, "time to drain\t%.1f s (drained: %v), %.1f sagas/s\t\n", r.DrainAfterS, r.Drained, r.SagasPerSec)
	if r.TimeoutsAfterS > 0 {
		printf(tw, "payment windows closed\t%.1f s after the start\t\n", r.TimeoutsAfterS)
	}
	printf(tw, "pay answers\t%s\t\n", PayAnswers(r.Paid))
	printf(tw, "pays sent in time and refused\t%d\t\n", r.InTimePaysRefused)
	if l, ok := r.PayLatency["all"]; ok {
		printf(tw, "pay request -> answer\t%s\t\n", l.Seconds())
	}
	printf(tw, "202 -> payable (first accepted pay)\t%s\t\n", r.AcceptedToPayable.Seconds())
	printf(tw, "202 -> deducted\t%s\t\n", r.AcceptedToDeducted.Seconds())
	for _, k := range sortedKeys(r.Memory) {
		m := r.Memory[k]
		if m.Error != "" {
			printf(tw, "%s memory\t%s\t\n", k, m.Error)
			continue
		}
		printf(tw, "%s memory (pid %d)\tpeak RSS %.1f MB during the sale, VmHWM %.1f MB\t\n", k, m.PID, m.PeakRSSMB, m.HWMMB)
	}
	for _, n := range r.Notes {
		printf(tw, "note\t%s\t\n", n)
	}
	_ = tw.Flush()
	PrintInvariants(w, r)
}

// PrintInvariants writes the checker's verdict.
func PrintInvariants(w io.Writer, r *SaleReport) {
	inv := r.Invariants
	if inv == nil {
		return
	}
	printf(w, "\nInvariants (MySQL, Redis%s): stock %d, live orders %d, orders %s, stock row %d, redis left %d, reservations %d",
		map[bool]string{true: ", Temporal", false: ""}[inv.WorkflowsChecked], inv.StockTotal, inv.LiveOrders,
		Counts(inv.OrdersByStatus), inv.StockRow, inv.RedisLeft, inv.RedisReservations)
	if inv.WorkflowsChecked {
		printf(w, ", workflows %s", Counts(inv.WorkflowsByStatus))
	}
	printLine(w)
	if inv.WorkflowsError != "" {
		printLine(w, "Temporal checks skipped: "+inv.WorkflowsError)
	}
	if inv.ProviderRead > 0 || slices.ContainsFunc(inv.Money, func(m store.Money) bool { return m != store.Money{Currency: m.Currency} }) {
		printLine(w, "Books: "+BooksText(inv))
	}
	if inv.OK() {
		printLine(w, "OK: no violation")
		return
	}
	for _, v := range inv.Violations {
		printf(w, "VIOLATION %s\n", v)
	}
}

// Counts writes a count map as words and numbers, largest first:
// "PAID 3,766, CANCELLED 6,234".
func Counts(m map[string]int64) string {
	keys := sortedKeys(m)
	sort.SliceStable(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+" "+thousands(m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// payAnswerNames says what each pay answer means.
var payAnswerNames = map[string]string{
	"200": "200 paid", "202": "202 accepted, finishing", "409": "409 ORDER_NOT_PAYABLE", "404": "404 ORDER_NOT_FOUND",
	"429": "429 RATE_LIMITED", "503": "503 UNAVAILABLE", "error": "no answer",
}

// PayAnswers writes the pay answers in words: "200 paid 3,299, 409 ORDER_NOT_PAYABLE 0".
func PayAnswers(m map[string]int64) string {
	named := make(map[string]int64, len(m))
	for k, v := range m {
		if n, ok := payAnswerNames[k]; ok {
			k = n
		}
		named[k] = v
	}
	return Counts(named)
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// Seconds writes a latency summary in seconds.
func (l Latency) Seconds() string {
	if l.Count == 0 {
		return "none measured"
	}
	return fmt.Sprintf("p50 %.2f s, p90 %.2f s, p99 %.2f s, max %.2f s (n = %s)", l.P50/1000, l.P90/1000, l.P99/1000, l.Max/1000, thousands(l.Count))
}

// Series is one line of a chart.
type Series struct {
	Name  string
	Color string
	Y     []float64
}

var palette = map[string]string{"202": "#2e7d32", "410": "#1565c0", "409": "#6a1b9a", "429": "#ef6c00",
	"403": "#795548", "503": "#c62828", "error": "#000000", "orders": "#d81b60", "all": "#455a64"}

func colorOf(name string, i int) string {
	if c, ok := palette[name]; ok {
		return c
	}
	return []string{"#00838f", "#9e9d24", "#5d4037", "#283593"}[i%4]
}

// lineChart renders an inline SVG line chart. X values are xs (logX puts
// them on a log scale); every series has one Y per x.
func lineChart(title, xLabel, yLabel string, xs []float64, logX bool, series []Series) template.HTML {
	const W, H, L, R, T, B = 760.0, 300.0, 60.0, 130.0, 30.0, 40.0
	if len(xs) == 0 {
		return template.HTML("<p>(no data for " + template.HTMLEscapeString(title) + ")</p>")
	}
	fx := func(x float64) float64 {
		if logX {
			return math.Log10(math.Max(x, 1e-3))
		}
		return x
	}
	x0, x1 := fx(xs[0]), fx(xs[len(xs)-1])
	if x1 == x0 {
		x1 = x0 + 1
	}
	ymax := 1.0
	for _, s := range series {
		for _, y := range s.Y {
			ymax = math.Max(ymax, y)
		}
	}
	px := func(x float64) float64 { return L + (fx(x)-x0)/(x1-x0)*(W-L-R) }
	py := func(y float64) float64 { return T + (1-y/ymax)*(H-T-B) }
	var b strings.Builder
	printf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`, W, H)
	printf(&b, `<text x="%.0f" y="18" font-size="14" font-weight="bold">%s</text>`, L, template.HTMLEscapeString(title))
	printf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999"/>`, L, H-B, W-R, H-B)
	printf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999"/>`, L, T, L, H-B)
	for i := 0; i <= 4; i++ {
		y := ymax * float64(i) / 4
		printf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`, L-4, py(y)+4, short(y))
		printf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/>`, L, py(y), W-R, py(y))
	}
	for i := 0; i <= 5; i++ {
		v := x0 + (x1-x0)*float64(i)/5
		lab := v
		if logX {
			lab = math.Pow(10, v)
		}
		xp := L + float64(i)/5*(W-L-R)
		printf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`, xp, H-B+14, short(lab))
	}
	printf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`, L+(W-L-R)/2, H-6, template.HTMLEscapeString(xLabel))
	printf(&b, `<text x="12" y="%.0f" transform="rotate(-90 12 %.0f)" text-anchor="middle">%s</text>`, T+(H-T-B)/2, T+(H-T-B)/2, template.HTMLEscapeString(yLabel))
	for i, s := range series {
		var pts []string
		for j, y := range s.Y {
			if j < len(xs) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(xs[j]), py(y)))
			}
		}
		c := s.Color
		if c == "" {
			c = colorOf(s.Name, i)
		}
		printf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`, c, strings.Join(pts, " "))
		printf(&b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`,
			W-R+10, T+float64(i)*16, c, W-R+24, T+float64(i)*16+9, template.HTMLEscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from numbers and escaped names
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// latencyChart plots the share of answers per latency bucket, by outcome.
func latencyChart(s Summary) template.HTML {
	h := s.Histogram
	lo, hi := len(h.BoundsMS), 0
	for _, c := range h.Counts {
		for i, n := range c {
			if n > 0 && i < len(h.BoundsMS) {
				lo, hi = min(lo, i), max(hi, i)
			}
		}
	}
	if lo > hi {
		return lineChart("Latency distribution", "", "", nil, true, nil)
	}
	lo, hi = max(lo-1, 0), min(hi+1, len(h.BoundsMS)-1)
	xs := h.BoundsMS[lo : hi+1]
	var series []Series
	for _, k := range sortedKeys(h.Counts) {
		c := h.Counts[k]
		total := 0.0
		for _, n := range c {
			total += float64(n)
		}
		ys := make([]float64, 0, len(xs))
		for i := lo; i <= hi; i++ {
			ys = append(ys, 100*float64(c[i])/math.Max(total, 1))
		}
		series = append(series, Series{Name: k, Y: ys})
	}
	return lineChart("Latency distribution by answer", "latency (ms, log scale, bucket upper bound)", "% of that answer", xs, true, series)
}

func timelineChart(s Summary, orders []int64) template.HTML {
	n := max(len(s.PerSecond), len(orders))
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i)
	}
	codes := map[string]bool{}
	for _, m := range s.PerSecond {
		for k := range m {
			codes[k] = true
		}
	}
	var series []Series
	for _, k := range sortedKeys(codes) {
		ys := make([]float64, n)
		for i, m := range s.PerSecond {
			ys[i] = float64(m[k])
		}
		series = append(series, Series{Name: k + "/s", Color: colorOf(k, len(series)), Y: ys})
	}
	if orders != nil {
		ys := make([]float64, n)
		for i, v := range orders {
			ys[i] = float64(v)
		}
		series = append(series, Series{Name: "orders/s", Color: palette["orders"], Y: ys})
	}
	return lineChart("Requests and orders per second", "seconds since the sale started", "per second", xs, false, series)
}

// statusChart draws the item's orders by status over time, one line each.
func statusChart(tl map[string][]int64) template.HTML {
	n := 0
	for _, v := range tl {
		n = max(n, len(v))
	}
	if n == 0 {
		return ""
	}
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i)
	}
	var series []Series
	for _, st := range timelineStatuses {
		ys := make([]float64, n)
		for i, v := range tl[st] {
			ys[i] = float64(v)
		}
		series = append(series, Series{Name: st, Color: colorOf(st, len(series)), Y: ys})
	}
	return lineChart("Orders by status", "seconds since the sale started", "orders", xs, false, series)
}

// deductedChart draws the distribution of 202 -> deducted.
func deductedChart(r *SaleReport) template.HTML {
	if len(r.DeductedHistogram) == 0 || r.AcceptedToDeducted.Count == 0 {
		return ""
	}
	ys := make([]float64, len(r.DeductedHistogram))
	for i, c := range r.DeductedHistogram {
		ys[i] = 100 * float64(c) / float64(r.AcceptedToDeducted.Count)
	}
	return lineChart("202 → deducted", "seconds (log scale, bucket upper bound)", "% of deducted orders",
		r.DeductedBoundsS, true, []Series{{Name: "orders", Y: ys}})
}

var saleHTML = template.Must(template.New("sale").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>seckill flash sale — item {{.R.ItemID}}</title>
<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 16px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}
.bad{color:#b71c1c;font-weight:bold}.ok{color:#1b5e20;font-weight:bold}</style></head><body>
<h1>Flash sale — item {{.R.ItemID}}</h1>
<p>{{.R.At}} · {{.R.Machine.CPUs}} CPUs, {{printf "%.1f" .R.Machine.MemoryGB}} GiB · config: {{range $k, $v := .R.Config}}{{$k}}={{$v}} {{end}}</p>
<h2>Outcome</h2>
<table><tr><th>figure</th><th>value</th></tr>
<tr><td>accepted (202)</td><td>{{.R.Accepted}} ({{printf "%.0f" .R.AcceptedPerSec}}/s)</td></tr>
<tr><td>time until sold out</td><td>{{printf "%.2f" .R.SoldOutAfterS}} s</td></tr>
<tr><td>time to drain (all accepted orders persisted)</td><td>{{printf "%.1f" .R.DrainAfterS}} s · {{printf "%.1f" .R.SagasPerSec}} sagas/s</td></tr>
<tr><td>attempts / retries / gave up / no answer</td><td>{{.R.Attempts}} / {{.R.Retries}} / {{.R.GaveUp}} / {{.R.ClientErrors}}</td></tr>
<tr><td>pay answers</td><td>{{.PayAnswers}}</td></tr>
<tr><td>pays sent in time and refused</td><td>{{.R.InTimePaysRefused}}</td></tr>
<tr><td>pay request → answer</td><td>{{.PayLatency}}</td></tr>
<tr><td>202 → payable (first accepted pay)</td><td>{{.R.AcceptedToPayable.Seconds}}</td></tr>
<tr><td>202 → deducted</td><td>{{.R.AcceptedToDeducted.Seconds}}</td></tr>
{{range $k, $m := .R.Memory}}<tr><td>{{$k}} memory</td><td>{{if $m.Error}}{{$m.Error}}{{else}}peak RSS {{printf "%.1f" $m.PeakRSSMB}} MB, VmHWM {{printf "%.1f" $m.HWMMB}} MB (pid {{$m.PID}}){{end}}</td></tr>{{end}}
</table>
<h2>Answers and latency</h2>
<table><tr><th>answer</th><th>count</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>
{{range .Rows}}<tr><td>{{.Name}}</td><td>{{.Count}}</td><td>{{printf "%.2f" .L.P50}}</td><td>{{printf "%.2f" .L.P90}}</td><td>{{printf "%.2f" .L.P99}}</td><td>{{printf "%.2f" .L.Max}}</td></tr>{{end}}
</table>
{{.Timeline}}
{{.Statuses}}
{{.Deducted}}
{{.Latency}}
<h2>Invariants</h2>
{{with .R.Invariants}}<p>stock {{.StockTotal}} · live orders {{.LiveOrders}} · orders {{$.Orders}} · stock row {{.StockRow}} · redis left {{.RedisLeft}} · reservations {{.RedisReservations}}{{if .WorkflowsChecked}} · workflows {{$.Workflows}}{{end}}</p>
{{if .Violations}}<table><tr><th>violation</th><th>by</th><th>detail</th></tr>{{range .Violations}}<tr><td class="bad">{{.Name}}</td><td>{{.Amount}}</td><td style="text-align:left">{{.Detail}}</td></tr>{{end}}</table>
{{else}}<p class="ok">no violation</p>{{end}}{{end}}
{{range .R.Notes}}<p>note: {{.}}</p>{{end}}
</body></html>
`))

type latencyRow struct {
	Name  string
	Count int64
	L     Latency
}

// WriteSaleHTML writes a self-contained page (inline SVG, no scripts, no links).
func WriteSaleHTML(path string, r *SaleReport) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var rows []latencyRow
	for _, k := range sortedKeys(r.Answers.ByOutcome) {
		rows = append(rows, latencyRow{k, r.Answers.ByOutcome[k], r.Answers.Latency[k]})
	}
	rows = append(rows, latencyRow{"all", r.Answers.Total, r.Answers.Latency["all"]})
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	data := map[string]any{"R": r, "Rows": rows, "PayAnswers": PayAnswers(r.Paid),
		"PayLatency": r.PayLatency["all"].Seconds(),
		"Timeline":   timelineChart(r.Answers, r.OrdersPerSecond), "Latency": latencyChart(r.Answers),
		"Statuses": statusChart(r.OrdersByStatus), "Deducted": deductedChart(r)}
	if r.Invariants != nil {
		data["Orders"], data["Workflows"] = Counts(r.Invariants.OrdersByStatus), Counts(r.Invariants.WorkflowsByStatus)
	}
	if err := saleHTML.Execute(f, data); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
