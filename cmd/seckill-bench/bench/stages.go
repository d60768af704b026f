package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/worker"
)

// Stages measures each pipeline stage against its own baseline in one run,
// with the same load generator and settings (what `make bench` runs).
type Stages struct {
	Cfg     config.Config
	APIURL  string
	BareURL string // where `seckill-bench baseline-http` listens
	BarePID int    // its process, for the CPU it costs per answer
	Load    Load
	// HTTPDuration is how long each fixed-duration HTTP measurement lasts.
	HTTPDuration time.Duration
	// Rounds is how many times stage 1 measures bare gin and the sold-out
	// answers (and the same with the control room open) in turn.
	Rounds int
	// SagaOrders is how many purchases each of stage 2's sales accepts (and
	// stage 3 turns into sagas); the minimal-workflow baseline runs as many
	// workflows.
	SagaOrders int
	// Stage2Runs is how many such sales stage 2 runs, one after the other
	// (each drained before the next): its figures are their median, with
	// their spread (at least 1).
	Stage2Runs int
	// WaitingWorkflows is how many waiting workflows (WaitingWorkflow) the
	// yardstick of stages 3b and 4 runs.
	WaitingWorkflows int
	LuaUnits         int64
	// LatencyUnits is the size of stage 3b's sale (0 leaves it out).
	LatencyUnits int
	// WorkerOps is the worker's ops listener (http://host:port): stage 2
	// holds its order consumer there ("" runs stage 2 with sagas starting).
	WorkerOps string
	Full      FlashSale // stage 4; SkipFull leaves it out
	SkipFull  bool
	// PaymentUnits is S of stage 5, the payment stampede (0 leaves it out);
	// PaymentRounds its rounds of door pays and Stripe payments in turn;
	// PaymentsOnly runs stage 5 alone; Stripe is the path its payments take
	// (APIURL takes its door pays).
	PaymentUnits  int
	PaymentRounds int
	PaymentsOnly  bool
	Stripe        *StripePath
	// NoControlRoom leaves the control room closed: by default stage 1 is
	// measured again with it open (GET /api/v1/admin/summary twice a
	// second, as /admin polls) and stage 2 runs with it open.
	NoControlRoom bool
	// OIDC, when set, is the identity provider the API also takes tokens
	// from: stage 1 measures the sold-out answers again with its RS256
	// tokens (oidc.go).
	OIDC     *Issuer
	Temporal client.Client
	Progress io.Writer
	Log      *slog.Logger
}

// Ratio is one pipeline figure against its baseline.
type Ratio struct {
	Stage    string  `json:"stage"`
	Figure   string  `json:"figure"`
	Pipeline float64 `json:"pipeline"`
	Baseline float64 `json:"baseline"`
	Unit     string  `json:"unit"`
	Ratio    float64 `json:"ratio"`
	// Pairs is how many side-by-side measurements Ratio is the median of
	// (0: one measurement each); RatioMin and RatioMax are their spread.
	Pairs    int     `json:"pairs,omitempty"`
	RatioMin float64 `json:"ratio_min,omitempty"`
	RatioMax float64 `json:"ratio_max,omitempty"`
	Target   string  `json:"target"`
	Met      bool    `json:"met"`
	Note     string  `json:"note,omitempty"`
}

// StagesReport is the result of `seckill-bench stages`.
type StagesReport struct {
	Kind     string         `json:"kind"`
	At       time.Time      `json:"at"`
	Machine  Machine        `json:"machine"`
	Load     Load           `json:"load"`
	Settings map[string]any `json:"settings"`
	Ratios   []Ratio        `json:"ratios"`
	Details  map[string]any `json:"details"`
	Sale     *SaleReport    `json:"flash_sale,omitempty"`
	Errors   []string       `json:"errors,omitempty"`
}

func ratio(stage, figure string, pipeline, baseline float64, unit string, target float64, note string) Ratio {
	r := Ratio{Stage: stage, Figure: figure, Pipeline: pipeline, Baseline: baseline, Unit: unit,
		Target: fmt.Sprintf(">= %.2gx", target), Note: note}
	if baseline > 0 {
		r.Ratio = pipeline / baseline
		r.Met = r.Ratio >= target
	}
	return r
}

// cpuNote lists a stage's CPU-µs per answer by process.
func cpuNote(per map[string]float64) string {
	var parts []string
	for _, k := range sortedKeys(per) {
		if k != "total" {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, per[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// roundsNote is the spread of a side-by-side figure's two series.
func roundsNote(n int, pipeline, baseline []float64, f string) string {
	return fmt.Sprintf("%d rounds side by side: pipeline %s, baseline %s", n, spread(pipeline, f), spread(baseline, f))
}

// mergeRooms sums the control room's rounds: polls and errors added, the
// median round's p50, the worst round's p99 and max.
func mergeRooms(rs []ControlRoomReport) ControlRoomReport {
	var out ControlRoomReport
	var p50s []float64
	for _, r := range rs {
		out.Polls, out.Errors = out.Polls+r.Polls, out.Errors+r.Errors
		out.P99MS, out.MaxMS = max(out.P99MS, r.P99MS), max(out.MaxMS, r.MaxMS)
		p50s = append(p50s, r.P50MS)
		if r.LastErr != "" {
			out.LastErr = r.LastErr
		}
	}
	out.P50MS = median(p50s)
	return out
}

// Stage2Baseline is what one of stage 2's sales is judged against, measured
// just before and again just after its purchases.
type Stage2Baseline struct {
	Bare Window    `json:"bare_gin"`
	Lua  LuaResult `json:"direct_lua"`
}

// drainBound is the saga issue's bound on draining n accepted orders: 1.25 x
// n / (minimal-workflow rate), in seconds.
func drainBound(n int, minimalRate float64) float64 {
	if minimalRate <= 0 {
		return 0
	}
	return 1.25 * float64(n) / minimalRate
}

// atMost is a figure that must stay at or under bound (lower is better).
func atMost(stage, figure string, value, bound float64, unit, note string) Ratio {
	r := Ratio{Stage: stage, Figure: figure, Pipeline: value, Baseline: bound, Unit: unit,
		Target: fmt.Sprintf("<= %.3g %s", bound, unit), Met: value <= bound, Note: note}
	if bound > 0 {
		r.Ratio = value / bound
	}
	return r
}

func limit(stage, figure string, value, max float64, unit string) Ratio {
	return Ratio{Stage: stage, Figure: figure, Pipeline: value, Baseline: max, Unit: unit, Ratio: value / max,
		Target: fmt.Sprintf("<= %.0f %s", max, unit), Met: value > 0 && value <= max}
}

// Run runs the stages in an order that keeps them apart: stage 1 and the
// direct Lua baseline; the purchases of stage 2 (the worker's consumer held)
// and, once released, their sagas (stage 3); the minimal-workflow baseline
// after them, so that neither stage 2 nor the baseline shares the machine
// with a Temporal server still busy with the other; then the full sale.
func (s Stages) Run(ctx context.Context, d Deps) *StagesReport {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep := &StagesReport{Kind: "stages", At: time.Now().UTC(), Machine: ThisMachine(), Load: s.Load,
		Details: map[string]any{}, Settings: map[string]any{"http_duration_s": s.HTTPDuration.Seconds(), "stage1_rounds": max(s.Rounds, 1),
			"saga_orders": s.SagaOrders, "stage2_runs": max(s.Stage2Runs, 1), "waiting_workflows": s.WaitingWorkflows,
			"lua_units": s.LuaUnits, "load": s.Load.String(), "payment_units": s.PaymentUnits, "payment_rounds": s.PaymentRounds,
			"stage1_oidc": s.OIDC != nil}}
	r := &stagesRun{Stages: s, ctx: ctx, d: d, log: log, rep: rep, secret: []byte(s.Cfg.JWTSecret.Value())}
	r.base = time.Now().Unix() % 1_000_000 * 1000 // fresh buyer ids per run
	var err error
	r.buyers, err = MintBuyers(r.secret, 1_000_000_000+r.base*100, max(s.Full.Buyers, 20_000), 2*time.Hour)
	if err != nil {
		r.fail("tokens", err)
		return rep
	}

	stage5Buyer := 1_000_000_000 + r.base*100 + 50_000_000
	if s.PaymentsOnly {
		r.stage5(stage5Buyer)
		return rep
	}
	r.pipelinePIDs = StackPIDs(s.Cfg)
	r.pipelinePIDs["api"] = []int{s.Full.APIPID}
	log.Info("CPU charged to the pipeline", "processes", pidsText(r.pipelinePIDs))
	r.barePIDs = map[string][]int{"server": {s.BarePID}, "load generator": {os.Getpid()}}
	r.stage1()

	runs := max(s.Stage2Runs, 1)
	firstBuyer := 1_000_000_000 + r.base*100 + int64(len(r.buyers)) + 1
	st2 := r.stages2and3(runs, firstBuyer)
	// Stage 3 baseline: the minimal workflow on the same server and worker settings.
	var wf, waiting WorkflowResult
	if s.Temporal != nil {
		wf = r.workflowBaseline("stage 3 baseline", "stage 3 baseline", "minimal_workflow",
			"minimal workflow (3 no-op local activities, default worker, eager start, no result polling)", s.SagaOrders, Minimal)
		if s.WaitingWorkflows > 0 {
			waiting = r.workflowBaseline("stages 3b and 4 baseline", "waiting-workflow baseline", "waiting_workflow",
				"waiting workflow (no-op local activity, 1 s timer, no-op local activity, default worker, eager start)", s.WaitingWorkflows, Waiting)
		}
	}
	latency := r.stage3b(firstBuyer + int64(runs*s.SagaOrders) + 5)
	r.stages2and3Ratios(st2, wf)
	if latency != nil {
		rep.Ratios = append(rep.Ratios, buyerRatios("3b", latency, waiting.PerSecond)...)
	}
	if !s.SkipFull {
		r.stage4(waiting)
	}
	r.stage5(stage5Buyer)
	return rep
}

// stagesRun is one run of the stages: what every stage shares.
type stagesRun struct {
	Stages
	ctx    context.Context
	d      Deps
	log    *slog.Logger
	rep    *StagesReport
	secret []byte
	base   int64 // buyer ids of this run start at 1e9 + base*100
	buyers []Buyer
	// pipelinePIDs are the processes whose CPU the pipeline is charged
	// with; barePIDs the bare gin server's and the load generator's.
	pipelinePIDs, barePIDs map[string][]int
	// nextBuyer is one rotation over the buyers for every request of both
	// engines, as in one long run: the API verifies each buyer's token and
	// finds its limiter among all the buyers'.
	nextBuyer atomic.Uint64
}

func (r *stagesRun) fail(stage string, err error) {
	r.log.Error("stage failed", "stage", stage, "err", err)
	r.rep.Errors = append(r.rep.Errors, stage+": "+err.Error())
}

func (r *stagesRun) settle(what string) {
	busy := Settle(r.ctx, 0.25, 30*time.Second)
	r.log.Info("machine settled", "before", what, "cpu_busy", fmt.Sprintf("%.0f%%", busy*100))
}

func (r *stagesRun) bareTarget(_ uint64, t *vegeta.Target) {
	i := r.nextBuyer.Add(1)
	t.Method, t.URL, t.Header = http.MethodPost, r.BareURL+BarePath, header(r.buyers[i%uint64(len(r.buyers))].Token)
}

func (r *stagesRun) bareWindow() Window {
	return r.measureWindow(r.ctx, "bare gin", "200", r.barePIDs, r.bareTarget)
}

// stage1 measures bare gin against the sold-out answers (and those again
// with OIDC tokens and with the control room open), side by side in rounds
// (sidebyside.go).
func (r *stagesRun) stage1() {
	var bare1, sold, open, oidc []Window
	var roomReports []ControlRoomReport
	if it, err := r.soldOutItem(r.ctx, r.secret, r.buyers[0]); err != nil {
		r.fail("stage 1", err)
	} else {
		ws, rooms := r.stage1Rounds(it)
		bare1, sold, open, oidc, roomReports = ws["bare gin"], ws["sold out"], ws["sold out, control room open"], ws[soldOutOIDC], rooms
		r.rep.Details["stage1_rounds"] = ws
	}
	rep := r.rep
	hs256 := soldOutRatios("", sold, bare1)
	rep.Ratios = append(rep.Ratios, hs256[:]...)
	if len(oidc) > 0 {
		r.stage1OIDC(bare1, sold, oidc, hs256)
	}
	if len(open) > 0 {
		rep.Details["control_room_stage1"] = roomReports
		rr := mergeRooms(roomReports)
		note := fmt.Sprintf("%d summary polls, p50 %.1f ms, p99 %.1f ms (worst round), %d errors", rr.Polls, rr.P50MS, rr.P99MS, rr.Errors)
		rep.Ratios = append(rep.Ratios,
			sideBySide("1", "sold-out rejections/s, control room open vs closed", perSecond(open), perSecond(sold), "req/s", 0.9, true,
				note+"; "+roundsNote(len(open), perSecond(open), perSecond(sold), "%.0f")),
			sideBySide("1", "CPU-µs per sold-out answer, control room open vs closed", cpuTotal(open), cpuTotal(sold), "µs", 1.1, false,
				cpuNote(medianByKey(cpuMaps(open)))+"; "+roundsNote(len(open), cpuTotal(open), cpuTotal(sold), "%.0f")))
	}
}

// stage1Rounds runs stage 1's rounds against the sold-out item it: the
// windows of each subject, and the control room's report of each round.
func (r *stagesRun) stage1Rounds(it int64) (map[string][]Window, []ControlRoomReport) {
	var roomReports []ControlRoomReport
	url := fmt.Sprintf("%s/api/v1/seckill/%d", strings.TrimRight(r.APIURL, "/"), it)
	soldTarget := func(_ uint64, t *vegeta.Target) {
		i := r.nextBuyer.Add(1)
		t.Method, t.URL, t.Header = http.MethodPost, url, header(r.buyers[1+i%uint64(len(r.buyers)-1)].Token)
	}
	subjects := []subject{{"bare gin", r.bareWindow},
		{"sold out", func() Window { return r.measureWindow(r.ctx, "sold out", "410", r.pipelinePIDs, soldTarget) }}}
	warm := []func(uint64, *vegeta.Target){r.bareTarget, soldTarget}
	if r.OIDC != nil {
		if oidcTarget, err := r.oidcTarget(url); err != nil {
			r.fail("stage 1 with OIDC tokens", err)
		} else {
			warm = append(warm, oidcTarget)
			subjects = append(subjects, subject{soldOutOIDC, func() Window {
				return r.measureWindow(r.ctx, soldOutOIDC, "410", r.pipelinePIDs, oidcTarget)
			}})
		}
	}
	if !r.NoControlRoom {
		// The same load with the control room open (GET
		// /api/v1/admin/summary twice a second): what an operator
		// watching the sale costs the front door.
		subjects = append(subjects, subject{"sold out, control room open", func() Window {
			room, err := OpenControlRoom(r.ctx, r.APIURL, r.secret, 500*time.Millisecond)
			if err != nil {
				r.fail("stage 1 control room", err)
				return Window{}
			}
			w := r.measureWindow(r.ctx, "sold out, control room open", "410", r.pipelinePIDs, soldTarget)
			roomReports = append(roomReports, room.Close())
			return w
		}})
	}
	r.settle("stage 1")
	// A second of each first, not counted: the bare server is a new
	// process, and both get their connections and heaps going.
	for _, w := range warm {
		Fixed(r.ctx, r.Load, time.Second, "warm-up", nil, w)
	}
	r.log.Info("stage 1: bare gin and sold-out answers side by side", "item", it, "rounds", max(r.Rounds, 1),
		"window", r.HTTPDuration, "load", r.Load.String())
	return rounds(r.Rounds, subjects), roomReports
}

// stage2Baseline measures one of stage 2's baselines: bare gin, and the
// reservation path straight through go-redis.
func (r *stagesRun) stage2Baseline(label string) Stage2Baseline {
	b := Stage2Baseline{Bare: r.bareWindow()}
	lua, err := LuaBaseline(r.ctx, r.Cfg.Redis, fmt.Sprintf("seckill_bench_%d", time.Now().UnixNano()), max(r.Load.Connections, 1), r.LuaUnits)
	if err != nil {
		r.fail(label, err)
	}
	b.Lua = lua
	return b
}

// stage2Figures are what stages 2 and 3 measured over their sales.
type stage2Figures struct {
	// Per sale that accepted purchases.
	acceptedRates, floors, bareRates, luaRates []float64
	acceptedTotals, bareCPUs                   []float64
	acceptedCPUs                               []map[string]float64
	sagaRates                                  []float64 // per sale that drained

	baselines [][2]Stage2Baseline // per sale run
	room      string              // how the last sale's control room was
}

// add counts a sale that accepted purchases, beside its baselines.
func (f *stage2Figures) add(sr *SaleReport, pair [2]Stage2Baseline) {
	bareRate := meanOf(pair[0].Bare.PerSecond, pair[1].Bare.PerSecond)
	luaRate := meanOf(pair[0].Lua.PerSecond, pair[1].Lua.PerSecond)
	f.acceptedRates, f.bareRates, f.luaRates = append(f.acceptedRates, sr.AcceptedPerSec), append(f.bareRates, bareRate), append(f.luaRates, luaRate)
	f.floors = append(f.floors, min(bareRate, luaRate))
	f.acceptedCPUs = append(f.acceptedCPUs, sr.StampedeCPU)
	f.acceptedTotals = append(f.acceptedTotals, sr.StampedeCPU["total"])
	f.bareCPUs = append(f.bareCPUs, meanOf(pair[0].Bare.CPU["total"], pair[1].Bare.CPU["total"]))
	if sr.Drained {
		f.sagaRates = append(f.sagaRates, sr.SagasPerSec)
	}
}

// stages2and3 runs sales with as many units as buyers, each buyer one
// purchase, the worker's consumer held while they buy; then their sagas
// drain. Several in a row, for the spread. Each sale is judged against its
// own baselines, bare gin and the reservation path straight through
// go-redis, measured just before its purchases and again just after them
// (the consumer still held): the means of the two.
func (r *stagesRun) stages2and3(runs int, firstBuyer int64) *stage2Figures {
	fig := &stage2Figures{}
	var sales []*SaleReport
	for run := 0; run < runs; run++ {
		sr, pair := r.stage2Sale(run, runs, firstBuyer+int64(run*r.SagaOrders), fig)
		fig.baselines = append(fig.baselines, pair)
		if sr == nil || sr.Accepted == 0 {
			continue
		}
		// A sale whose drain or check failed still measured its purchases.
		sales = append(sales, sr)
		fig.add(sr, pair)
		if sr.Invariants != nil && !sr.Invariants.OK() {
			r.rep.Errors = append(r.rep.Errors, fmt.Sprintf("stages 2-3, sale %d: %d invariant violations", run+1, len(sr.Invariants.Violations)))
		}
	}
	r.rep.Details["purchases_and_sagas"] = sales
	r.rep.Details["stage2_baselines"] = fig.baselines
	return fig
}

// stage2Sale runs stage 2's sale run+1 of runs, its buyers from
// firstBuyer, between its two baselines; fig.room says how the control
// room was.
func (r *stagesRun) stage2Sale(run, runs int, firstBuyer int64, fig *stage2Figures) (*SaleReport, [2]Stage2Baseline) {
	r.settle(fmt.Sprintf("stage 2, sale %d of %d", run+1, runs))
	r.log.Info("stage 2: baselines, accepted purchases while stock lasts, baselines again", "units", r.SagaOrders,
		"sale", run+1, "of", runs, "lua_units", r.LuaUnits, "window", r.HTTPDuration)
	var pair [2]Stage2Baseline
	pair[0] = r.stage2Baseline(fmt.Sprintf("stage 2 baselines before sale %d", run+1))
	fs := FlashSale{APIURL: r.APIURL, Units: int64(r.SagaOrders), Buyers: r.SagaOrders,
		FirstBuyer: firstBuyer, Load: r.Load, MaxAttempts: 20,
		Lead: 2 * time.Second, PaymentTimeout: 24 * time.Hour, DrainTimeout: 15 * time.Minute, JWTSecret: r.secret,
		HoldSagas: holdWorker(r.WorkerOps, r.secret), MeterPIDs: r.pipelinePIDs, Progress: r.Progress, Log: r.log}
	r.rep.Settings["stage2_sagas_held"] = fs.HoldSagas != nil
	if fs.HoldSagas == nil && run == 0 {
		r.log.Warn("no --worker-ops: stage 2 runs while the worker starts sagas")
	}
	var room *ControlRoom
	var err error
	fig.room = "control room closed"
	closeRoom := func() {
		if room == nil {
			return
		}
		rr := room.Close()
		room = nil
		r.rep.Details[fmt.Sprintf("control_room_stage2_sale%d", run+1)] = rr
		fig.room = fmt.Sprintf("control room open: %d summary polls, p50 %.1f ms, p99 %.1f ms, %d errors", rr.Polls, rr.P50MS, rr.P99MS, rr.Errors)
	}
	if !r.NoControlRoom {
		// The purchases run with the control room open, as a real sale's
		// would; the baselines without.
		if room, err = OpenControlRoom(r.ctx, r.APIURL, r.secret, 500*time.Millisecond); err != nil {
			r.fail("stage 2 control room", err)
		}
	}
	fs.AfterStampede = func(context.Context, int64) error {
		closeRoom()
		pair[1] = r.stage2Baseline(fmt.Sprintf("stage 2 baselines after sale %d", run+1))
		return nil
	}
	sr, err := fs.Run(r.ctx, r.d)
	closeRoom()
	if err != nil {
		r.fail(fmt.Sprintf("stages 2-3, sale %d", run+1), err)
	}
	return sr, pair
}

// workflowBaseline runs n workflows of kind on a task queue of their own
// after settle(stage), under Details[key]; a failure is reported as label's.
func (r *stagesRun) workflowBaseline(stage, label, key, what string, n int, kind BaselineWorkflow) WorkflowResult {
	r.settle(stage)
	tq := fmt.Sprintf("bench-%s-%d", strings.TrimSuffix(key, "_workflow"), time.Now().UnixNano())
	r.log.Info(stage+": "+what, "workflows", n, "task_queue", tq)
	bctx, cancel := context.WithTimeout(r.ctx, 10*time.Minute)
	defer cancel()
	res, err := WorkflowBaseline(bctx, r.Cfg.Temporal, tq, n, kind)
	if err != nil {
		r.fail(label, err)
	}
	r.rep.Details[key] = res
	return res
}

// stage3b is what buyers feel after the 202, in a mid-size sale with no
// hold: every order paid at its 202 (10 s windows). Nil when left out or
// not run.
func (r *stagesRun) stage3b(firstBuyer int64) *SaleReport {
	if r.LatencyUnits <= 0 {
		return nil
	}
	r.settle("stage 3b")
	r.log.Info("stage 3b: buyer-facing latency", "units", r.LatencyUnits)
	ls := FlashSale{APIURL: r.APIURL, Units: int64(r.LatencyUnits), Buyers: r.LatencyUnits * 2,
		FirstBuyer: firstBuyer, Load: r.Load, MaxAttempts: 20,
		Lead: 2 * time.Second, PaymentTimeout: 10 * time.Second, PayFraction: 1, DrainTimeout: 15 * time.Minute,
		JWTSecret: r.secret, Progress: r.Progress, Log: r.log}
	latency, err := ls.Run(r.ctx, r.d)
	if err != nil {
		r.fail("stage 3b", err)
	}
	if latency != nil {
		r.rep.Details["buyer_latency_sale"] = latency
		if latency.Invariants != nil && !latency.Invariants.OK() {
			r.rep.Errors = append(r.rep.Errors, fmt.Sprintf("stage 3b: %d invariant violations", len(latency.Invariants.Violations)))
		}
	}
	return latency
}

// stages2and3Ratios judges stages 2 and 3's sales against their baselines
// and the minimal workflow wf.
func (r *stagesRun) stages2and3Ratios(f *stage2Figures, wf WorkflowResult) {
	var bare2 []Window
	for _, p := range f.baselines {
		bare2 = append(bare2, p[0].Bare, p[1].Bare)
	}
	sagaRate := median(f.sagaRates)
	acceptedCPU := medianByKey(f.acceptedCPUs)
	r.rep.Ratios = append(r.rep.Ratios,
		sideBySide("2", "accepted purchases/s vs min(bare gin, direct Lua)", f.acceptedRates, f.floors, "req/s", 0.4, true,
			fmt.Sprintf("%d sales of %d units, each beside its baselines (just before and after it): accepted %s/s; bare gin %s/s, direct Lua %s/s; %s; %s",
				len(f.acceptedRates), r.SagaOrders, spread(f.acceptedRates, "%.0f"), spread(f.bareRates, "%.0f"), spread(f.luaRates, "%.0f"),
				othersNote(bare2), f.room)),
		sideBySide("2", "CPU-µs per accepted purchase vs bare gin's per answer", f.acceptedTotals, f.bareCPUs, "µs", 3, false,
			fmt.Sprintf("median per process of %d sales: %s; total %s µs; bare gin %s µs", len(f.acceptedCPUs), cpuNote(acceptedCPU),
				spread(f.acceptedTotals, "%.0f"), spread(f.bareCPUs, "%.1f"))),
		atMost("2", "broker CPU-µs per accepted purchase", acceptedCPU["broker"], 25, "µs",
			fmt.Sprintf("%s µs over %d sales", spread(column(f.acceptedCPUs, "broker"), "%.0f"), len(f.acceptedCPUs))))
	r.rep.Ratios = append(r.rep.Ratios, ratio("3", "sagas/s (message to PENDING_PAYMENT) vs minimal workflow", sagaRate, wf.PerSecond, "wf/s", 0.8,
		fmt.Sprintf("median of %d drains: %s wf/s; baseline: default worker, eager start, no result polling", len(f.sagaRates), spread(f.sagaRates, "%.1f"))))
}

// stage4 runs the full flash sale and judges it against the waiting
// workflow.
func (r *stagesRun) stage4(waiting WorkflowResult) {
	rep := r.rep
	full := r.Full
	full.FirstBuyer = 1_000_000_000 + r.base*100 + int64(len(r.buyers)) + int64(r.SagaOrders) + 10
	full.JWTSecret, full.Progress, full.Log, full.APIURL = r.secret, r.Progress, r.log, r.APIURL
	r.settle("stage 4")
	r.log.Info("stage 4: full flash sale", "units", full.Units, "buyers", full.Buyers)
	sale, err := full.Run(r.ctx, r.d)
	if err != nil {
		r.fail("stage 4", err)
	}
	if sale == nil {
		return
	}
	// Partial when err != nil: the sale itself and the memory figures still count.
	rep.Sale = sale
	api, wk := sale.Memory["api"], sale.Memory["worker"]
	rep.Ratios = append(rep.Ratios,
		Ratio{Stage: "4", Figure: "time until sold out", Pipeline: sale.SoldOutAfterS, Unit: "s", Target: "-", Met: true},
		atMost("4", "time to drain (every accepted order past QUEUED: deducted or closed)", sale.DrainAfterS, drainBound(sale.Accepted, waiting.PerSecond), "s",
			fmt.Sprintf("bound 1.25 x %d / %.1f waiting wf/s; drained: %v", sale.Accepted, waiting.PerSecond, sale.Drained)))
	rep.Ratios = append(rep.Ratios, buyerRatios("4", sale, waiting.PerSecond)...)
	rep.Ratios = append(rep.Ratios,
		limit("4", "API peak RSS", api.PeakRSSMB, 150, "MB"),
		limit("4", "worker peak RSS", wk.PeakRSSMB, 200, "MB"))
	if sale.Invariants != nil && !sale.Invariants.OK() {
		rep.Errors = append(rep.Errors, fmt.Sprintf("stage 4: %d invariant violations", len(sale.Invariants.Violations)))
	}
}

// pidsText writes processes by name in words: "api 812, broker 640 641".
func pidsText(pids map[string][]int) string {
	parts := make([]string, 0, len(pids))
	for _, k := range sortedKeys(pids) {
		part := k
		if len(pids[k]) == 0 {
			part += " none"
		}
		for _, pid := range pids[k] {
			part += " " + strconv.Itoa(pid)
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// buyerRatios are what a sale's buyers felt after their 202: when they could
// pay (target: p99 within a second), when their order took its unit from
// the stock row (the order tier's catch-up, against 1.25 x orders / the
// waiting-workflow rate), pays refused in time, and the pay's own latency.
func buyerRatios(stage string, r *SaleReport, waitingRate float64) []Ratio {
	p, d, pay := r.AcceptedToPayable, r.AcceptedToDeducted, r.PayLatency["all"]
	return []Ratio{
		atMost(stage, "p99 202 -> payable (first accepted pay)", p.P99/1000, 1, "s",
			fmt.Sprintf("p50 %.2f s, max %.2f s, %d paid orders", p.P50/1000, p.Max/1000, p.Count)),
		atMost(stage, "p99 202 -> deducted (the order tier's catch-up)", d.P99/1000, drainBound(r.Accepted, waitingRate), "s",
			fmt.Sprintf("bound 1.25 x %d / %.1f waiting wf/s; p50 %.2f s, max %.2f s, %d orders", r.Accepted, waitingRate,
				d.P50/1000, d.Max/1000, d.Count)),
		atMost(stage, "pays sent in time and refused", float64(r.InTimePaysRefused), 0, "pays", PayAnswers(r.Paid)),
		atMost(stage, "p99 pay request -> answer", pay.P99/1000, 0.1, "s", fmt.Sprintf("max %.2f s", pay.Max/1000)),
	}
}

// median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	ys := append([]float64(nil), xs...)
	sort.Float64s(ys)
	if n := len(ys); n%2 == 0 {
		return (ys[n/2-1] + ys[n/2]) / 2
	}
	return ys[len(ys)/2]
}

// spread is "min / median / max" of xs in format f ("-" for none).
func spread(xs []float64, f string) string {
	if len(xs) == 0 {
		return "-"
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	return fmt.Sprintf(f+" / "+f+" / "+f, lo, median(xs), hi)
}

// column is key's value in each of ms.
func column(ms []map[string]float64, key string) []float64 {
	out := make([]float64, 0, len(ms))
	for _, m := range ms {
		if v, ok := m[key]; ok {
			out = append(out, v)
		}
	}
	return out
}

// medianByKey is, per key, the median of its values over ms (nil for none).
func medianByKey(ms []map[string]float64) map[string]float64 {
	if len(ms) == 0 {
		return nil
	}
	out := map[string]float64{}
	for _, m := range ms {
		for k := range m {
			out[k] = 0
		}
	}
	for k := range out {
		out[k] = median(column(ms, k))
	}
	return out
}

// holdWorker holds and releases the order consumer of the worker whose ops
// listener is at opsURL, through its admin switch (`seckill consumer
// hold|release`): stage 2 measures the purchase path while no saga competes
// for the cores, like its baselines; stage 3 then times the sagas of the
// messages waiting. nil (no hold) without a URL.
func holdWorker(opsURL string, secret []byte) func(bool) error {
	if opsURL == "" {
		return nil
	}
	return func(hold bool) error {
		token, err := auth.Sign(secret, 1, auth.RoleAdmin, time.Minute, time.Now())
		if err != nil {
			return err
		}
		action := "release"
		if hold {
			action = "hold"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = worker.SwitchConsumer(ctx, opsURL, token, action)
		return err
	}
}

func rate(s Summary, code string) float64 {
	if s.Duration <= 0 {
		return 0
	}
	return float64(s.ByOutcome[code]) / s.Duration
}

// soldOutItem creates a one-unit item, buys its unit and waits until the
// API answers SOLD_OUT.
func (s Stages) soldOutItem(ctx context.Context, secret []byte, buyer Buyer) (int64, error) {
	start := time.Now().Add(1500 * time.Millisecond)
	it, err := CreateItem(ctx, s.APIURL, secret, "bench sold-out item", 1, start, 2*time.Hour, 24*time.Hour)
	if err != nil {
		return 0, err
	}
	api := clients([]string{s.APIURL})[0]
	deadline := time.Now().Add(30 * time.Second)
	other := Buyer{}
	for time.Now().Before(deadline) {
		tok := buyer.Token
		if other.Token != "" {
			tok = other.Token
		}
		res, err := api.Purchase(ctx, it.ID, apiclient.Bearer(tok))
		code := 0
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			code = res.StatusCode
		}
		if code == http.StatusGone {
			return it.ID, nil
		}
		if (code == http.StatusAccepted || code == http.StatusConflict) && other.Token == "" {
			bs, err := MintBuyers(secret, buyer.ID+7_777_777, 1, time.Hour)
			if err != nil {
				return 0, err
			}
			other = bs[0]
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("item %d never answered SOLD_OUT", it.ID)
}

// ratioText is the ratio, with the spread of its pairs when it is a median.
func (r Ratio) ratioText() string {
	f := r.ratioFormat()
	if r.Pairs > 1 {
		return fmt.Sprintf(f+" ("+f+"–"+f+")", r.Ratio, r.RatioMin, r.RatioMax)
	}
	return fmt.Sprintf(f, r.Ratio)
}

// ratioFormat is two decimals, or as many more (up to four) as it takes for
// the text to read as its verdict against a ratio target: a median ratio of
// 0.3996 against ">= 0.4x" shows 0.3996, not 0.40 beside a ✗.
func (r Ratio) ratioFormat() string {
	var op string
	var bound float64
	target, isRatio := strings.CutSuffix(r.Target, "x")
	if n, _ := fmt.Sscanf(target, "%s %g", &op, &bound); !isRatio || n != 2 {
		return "%.2f"
	}
	for d := 2; d < 4; d++ {
		shown, _ := strconv.ParseFloat(strconv.FormatFloat(r.Ratio, 'f', d, 64), 64)
		if looksMet := (op == ">=" && shown >= bound) || (op == "<=" && shown <= bound); looksMet == r.Met {
			return "%." + strconv.Itoa(d) + "f"
		}
	}
	return "%.4f"
}

// PrintRatios writes the ratio table.
func PrintRatios(w io.Writer, r *StagesReport) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	printf(tw, "\nStages against their baselines — %d CPUs, %.1f GiB, %s\n", r.Machine.CPUs, r.Machine.MemoryGB, r.Load.String())
	printLine(tw, "stage\tfigure\tpipeline\tbaseline\tratio\ttarget\tmet\t")
	for _, x := range r.Ratios {
		base, rat := "-", "-"
		if x.Baseline > 0 {
			base, rat = fmt.Sprintf("%.1f %s", x.Baseline, x.Unit), x.ratioText()
		}
		printf(tw, "%s\t%s\t%.2f %s\t%s\t%s\t%s\t%v\t\n", x.Stage, x.Figure, x.Pipeline, x.Unit, base, rat, x.Target, x.Met)
	}
	_ = tw.Flush()
	if o, ok := r.Details["stage1_oidc"].(Stage1OIDC); ok {
		printLine(w, "\n"+o.text())
	}
	for _, e := range r.Errors {
		printLine(w, "ERROR", e)
	}
}

// MarkdownRatios renders the ratio table for docs/performance.md.
func MarkdownRatios(r *StagesReport) string {
	var b strings.Builder
	printf(&b, "Last run: %s on %d CPUs, %.1f GiB RAM (%s, %s); load: %s.\n\n",
		r.At.Format(time.RFC3339), r.Machine.CPUs, r.Machine.MemoryGB, r.Machine.Kernel, r.Machine.Go, r.Load.String())
	b.WriteString("| stage | figure | pipeline | baseline | ratio | target | met | note |\n|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Ratios {
		base, rat := "-", "-"
		if x.Baseline > 0 {
			base, rat = fmt.Sprintf("%.1f %s", x.Baseline, x.Unit), x.ratioText()
		}
		met := "✗"
		if x.Met {
			met = "✓"
		}
		printf(&b, "| %s | %s | %.2f %s | %s | %s | %s | %s | %s |\n", x.Stage, x.Figure, x.Pipeline, x.Unit, base, rat, x.Target, met, x.Note)
	}
	if o, ok := r.Details["stage1_oidc"].(Stage1OIDC); ok {
		printf(&b, "\n%s\n", o.text())
	}
	if l, ok := r.Details["buyer_latency_sale"].(*SaleReport); ok && l != nil {
		printf(&b, "\nStage 3b sale (item %d, %d accepted, 10 s windows, every order paid at its 202): 202 -> payable %s; "+
			"202 -> deducted %s; pay request -> answer %s; pay answers %s; invariants: %s.\n", l.ItemID, l.Accepted,
			l.AcceptedToPayable.Seconds(), l.AcceptedToDeducted.Seconds(), l.PayLatency["all"].Seconds(), PayAnswers(l.Paid), verdict(l))
	}
	if r.Sale != nil {
		s := r.Sale
		printf(&b, "\nFull sale (item %d): %d attempts, answers %s, accepted %d; p99 latency %.1f ms (all answers); "+
			"202 -> payable %s; 202 -> deducted %s; pay answers %s; invariants: %s.\n", s.ItemID, s.Attempts, Counts(s.Answers.ByOutcome),
			s.Accepted, s.Answers.Latency["all"].P99, s.AcceptedToPayable.Seconds(), s.AcceptedToDeducted.Seconds(), PayAnswers(s.Paid), verdict(s))
	}
	if p, ok := r.Details["payment_stampede"].(*PaymentReport); ok && p != nil {
		printf(&b, "\nPayment stampede (item %d, Stripe Checkout through the stand-in): %d Checkout Sessions (%.0f s), paid on the stand-in; "+
			"%d notifications sent (%s), notification -> answer p50 %.0f ms, p99 %.0f ms; %d door pays (%s), pay -> answer p50 %.0f ms, p99 %.0f ms; "+
			"%d refused in time; MySQL: %d event rows, %d payments succeeded, %d orders PAID; books: %s.\n",
			p.ItemID, p.Notifications, p.CheckoutS, p.Sent, Counts(p.Answers), p.Latency.P50, p.Latency.P99, p.DoorPays, Counts(p.DoorAnswers),
			p.DoorLatency.P50, p.DoorLatency.P99, p.Refused, p.Events, p.Succeeded, p.OrdersPaid, BooksText(p.Invariants))
	}
	for _, e := range r.Errors {
		printf(&b, "\n- error: %s", e)
	}
	return b.String()
}

func verdict(s *SaleReport) string {
	if s.Invariants == nil {
		return "not checked"
	}
	if s.Invariants.WorkflowsError != "" && s.Invariants.OK() {
		return "no violation in MySQL and Redis, sagas not listed"
	}
	if s.Invariants.OK() {
		return "no violation"
	}
	var names []string
	for _, v := range s.Invariants.Violations {
		names = append(names, fmt.Sprintf("%s by %d", v.Name, v.Amount))
	}
	return "VIOLATED: " + strings.Join(names, ", ")
}

var benchBlock = regexp.MustCompile(`(?s)<!-- bench:begin -->.*<!-- bench:end -->`)

// UpdateDoc replaces the block between <!-- bench:begin --> and
// <!-- bench:end --> in path with the latest figures.
func UpdateDoc(path string, r *StagesReport) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !benchBlock.Match(b) {
		return fmt.Errorf("%s has no <!-- bench:begin --> ... <!-- bench:end --> block", path)
	}
	block := "<!-- bench:begin -->\n" + MarkdownRatios(r) + "\n<!-- bench:end -->"
	out := benchBlock.ReplaceAllLiteral(b, []byte(block))
	return os.WriteFile(path, out, 0o644)
}

// Child is a subprocess the bench started (the bare gin server).
type Child = proc.Child

// StartChild runs this executable with args, output to logPath. Stop it with
// StopChild.
func StartChild(args []string, logPath string) (*Child, error) {
	return proc.Start(proc.Spec{Args: args, Log: logPath})
}

// StopChild asks the child to stop (SIGTERM) and kills it after five seconds.
func StopChild(c *Child) { c.Stop(5 * time.Second) }
