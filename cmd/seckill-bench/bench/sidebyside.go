package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// A ratio is only worth reporting if its baseline and its subject saw the
// same machine. On the shared 2-core box the bare-gin baseline alone moved
// between ~10,000 and ~30,000 req/s from run to run (other work on the
// machine, and what it does to the load generator's and the servers'
// CPU per answer), so stages 1 and 2 measure baseline and subject side by
// side, in short windows taken in turn, and report the median of the
// per-round ratios with their spread.

// Window is one fixed-duration HTTP measurement: the answers per second of
// the counted code, the CPU-µs per answer of the processes charged, and how
// busy the whole machine was meanwhile.
type Window struct {
	PerSecond float64            `json:"per_second"`
	Answers   int64              `json:"answers"`
	P99MS     float64            `json:"p99_ms"`
	CPU       map[string]float64 `json:"cpu_us_per_answer"`
	// MachineBusy, Others and Steal are fractions of the machine's CPU over
	// the window: busy (every process), busy with processes not charged
	// (idle services, other users' work), and stolen by the hypervisor.
	MachineBusy float64 `json:"machine_busy"`
	Others      float64 `json:"others"`
	Steal       float64 `json:"steal"`
}

// measureWindow runs the load for s.HTTPDuration against next's targets,
// counting answers with code and charging the CPU of pids.
func (s Stages) measureWindow(ctx context.Context, label, code string, pids map[string][]int, next func(uint64, *vegeta.Target)) Window {
	j0, jerr := cpuTimes()
	meter := StartCPU(pids)
	sum := Fixed(ctx, s.Load, s.HTTPDuration, label, s.Progress, next)
	w := Window{PerSecond: rate(sum, code), Answers: sum.Total, P99MS: sum.Latency["all"].P99, CPU: meter.PerAnswer(sum.Total)}
	if j1, err := cpuTimes(); jerr == nil && err == nil && sum.Duration > 0 {
		w.MachineBusy, w.Steal = busySince(j0, j1)
		charged := w.CPU["total"] * float64(sum.Total) / 1e6 / (sum.Duration * float64(runtime.NumCPU()))
		w.Others = max(w.MachineBusy-charged, 0)
	}
	return w
}

// Subject is one of the figures a round measures.
type subject struct {
	name    string
	measure func() Window
}

// rounds measures each subject rounds times, in turn: ABC, then CBA, then
// ABC..., so that a machine growing busier or quieter over the rounds
// weighs on each subject alike. It returns each subject's windows by name.
func rounds(n int, subjects []subject) map[string][]Window {
	out := map[string][]Window{}
	order := slices.Clone(subjects)
	for r := 0; r < max(n, 1); r++ {
		for _, sub := range order {
			out[sub.name] = append(out[sub.name], sub.measure())
		}
		slices.Reverse(order)
	}
	return out
}

// othersNote is how much of the machine the processes not charged used
// over the windows measured, as a range.
func othersNote(ws ...[]Window) string {
	var xs []float64
	for _, w := range ws {
		for _, x := range w {
			if x.Answers > 0 { // a window not measured says nothing
				xs = append(xs, 100*x.Others)
			}
		}
	}
	if len(xs) == 0 {
		return "machine used by others: -"
	}
	return fmt.Sprintf("machine used by others %.0f–%.0f %%", slices.Min(xs), slices.Max(xs))
}

// perSecond and cpuTotal are a series of windows' figures.
func perSecond(ws []Window) []float64 {
	out := make([]float64, len(ws))
	for i, w := range ws {
		out[i] = w.PerSecond
	}
	return out
}

func cpuTotal(ws []Window) []float64 {
	out := make([]float64, len(ws))
	for i, w := range ws {
		out[i] = w.CPU["total"]
	}
	return out
}

func cpuMaps(ws []Window) []map[string]float64 {
	out := make([]map[string]float64, len(ws))
	for i, w := range ws {
		out[i] = w.CPU
	}
	return out
}

// sideBySide is a figure measured beside its baseline, pipeline[i] with
// baseline[i]: its ratio is the median of the pairs' ratios (RatioMin and
// RatioMax their spread); pipeline and baseline are the medians of each.
// higher: more is better (the ratio must reach target), else less is (the
// ratio must stay within target).
func sideBySide(stage, figure string, pipeline, baseline []float64, unit string, target float64, higher bool, note string) Ratio {
	var rs []float64
	for i := range min(len(pipeline), len(baseline)) {
		if baseline[i] > 0 && pipeline[i] > 0 {
			rs = append(rs, pipeline[i]/baseline[i])
		}
	}
	r := Ratio{Stage: stage, Figure: figure, Pipeline: median(pipeline), Baseline: median(baseline), Unit: unit,
		Ratio: median(rs), Pairs: len(rs)}
	if len(rs) > 0 {
		r.RatioMin, r.RatioMax = slices.Min(rs), slices.Max(rs)
	}
	if higher {
		r.Target = fmt.Sprintf(">= %.2gx", target)
		r.Met = len(rs) > 0 && r.Ratio >= target
	} else {
		r.Target = fmt.Sprintf("<= %.3gx", target)
		r.Met = len(rs) > 0 && r.Ratio <= target
	}
	r.Note = note
	return r
}

// meanOf is the mean of the positive xs (0 for none): a baseline measured
// just before and just after its subject.
func meanOf(xs ...float64) float64 {
	var sum float64
	n := 0
	for _, x := range xs {
		if x > 0 {
			sum += x
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
