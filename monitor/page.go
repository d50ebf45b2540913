package monitor

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

//go:embed static
var staticRoot embed.FS

// staticFS serves /static/... from the embedded directory.
var staticFS fs.FS = staticRoot

//go:embed page.html
var pageHTML string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"pct":  func(f float64) string { return fmt.Sprintf("%.0f%%", 100*math.Max(0, math.Min(1, f))) },
	"load": func(s status.Slave) float64 { return float64(s.Slots-s.Free) / float64(s.Slots) },
	"num":  humanNum,
	"inc":  func(i int) int { return i + 1 }, // stage indexes count from 0, "stage 1 of 2" from 1
	"placement": func(m map[string]int) string { // "s1:2, s3:1"
		parts := make([]string, 0, len(m))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
		}
		return strings.Join(parts, ", ")
	},
	"ago":  func(t, now time.Time) string { return now.Sub(t).Round(100 * time.Millisecond).String() },
	"when": func(t time.Time) string { return t.Format("15:04:05") },
	"lossStr": func(f float64) string {
		if f == 0 {
			return "–"
		}
		return fmt.Sprintf("%.4g", f)
	},
}).Parse(pageHTML))

// pageData is what page.html renders.
type pageData struct {
	Now     time.Time
	Policy  string
	Slaves  []status.Slave
	Alive   int
	Running []taskView
	Recent  []taskView
}

type taskView struct {
	status.Task
	Curves []curve
}

// curve is one stage's metric per epoch, drawn as an SVG polyline.
type curve struct {
	Stage  string
	Metric string
	Points string // SVG polyline points
	Min    string
	Max    string
	Last   string
	Epochs int
}

// maxRecent bounds the ended tasks the page shows.
const maxRecent = 20

func renderPage(w http.ResponseWriter, st status.Cluster, now time.Time) {
	d := pageData{Now: now, Policy: st.Policy, Slaves: st.Slaves}
	for _, s := range st.Slaves {
		if s.Alive {
			d.Alive++
		}
	}
	for i := len(st.Tasks) - 1; i >= 0; i-- { // newest first
		t := st.Tasks[i]
		v := taskView{Task: t, Curves: curves(t)}
		if t.Ended() {
			if len(d.Recent) < maxRecent {
				d.Recent = append(d.Recent, v)
			}
		} else {
			d.Running = append(d.Running, v)
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := page.Execute(w, d); err != nil {
		// Headers are gone; the truncated page shows the error's place.
		fmt.Fprintf(w, "\n<!-- template error: %s -->", template.HTMLEscapeString(err.Error()))
	}
}

// curves picks, per stage with epochs, the metric users read for it: the
// training loss when reported, else the objective, else the RMSE.
func curves(t status.Task) []curve {
	var out []curve
	for _, r := range t.Results {
		if c, ok := stageCurve(r.Name, r.Epochs); ok {
			out = append(out, c)
		}
	}
	return out
}

func stageCurve(stage string, eps []status.Epoch) (curve, bool) {
	if len(eps) == 0 {
		return curve{}, false
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i].Epoch < eps[j].Epoch })
	type metric struct {
		name string
		fn   func(m map[string]float64) (float64, bool)
	}
	per := func(sum, n string) func(m map[string]float64) (float64, bool) {
		return func(m map[string]float64) (float64, bool) {
			if m[n] <= 0 {
				return 0, false
			}
			v, ok := m[sum]
			return v / m[n], ok
		}
	}
	candidates := []metric{
		{"loss", per(tasks.MetricLossSum, tasks.MetricSamples)},
		{"objective", func(m map[string]float64) (float64, bool) { v, ok := m[tasks.MetricObjective]; return v, ok }},
		{"rmse", func(m map[string]float64) (float64, bool) {
			v, ok := per(tasks.MetricSqErrSum, tasks.MetricSamples)(m)
			return math.Sqrt(v), ok
		}},
	}
	for _, c := range candidates {
		var vals []float64
		for _, e := range eps {
			v, ok := c.fn(e.Metrics)
			if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
				vals = nil
				break
			}
			vals = append(vals, v)
		}
		if len(vals) == 0 {
			continue
		}
		lo, hi := vals[0], vals[0]
		for _, v := range vals {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		span := hi - lo
		if span == 0 {
			span = 1
		}
		const w, h, pad = 300.0, 80.0, 4.0
		var pts []string
		for i, v := range vals {
			x := pad
			if len(vals) > 1 {
				x = pad + (w-2*pad)*float64(i)/float64(len(vals)-1)
			}
			y := pad + (h-2*pad)*(1-(v-lo)/span)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		if len(pts) == 1 { // one epoch: a flat segment
			pts = append(pts, fmt.Sprintf("%.1f,%s", w-pad, strings.Split(pts[0], ",")[1]))
		}
		return curve{Stage: stage, Metric: c.name, Points: strings.Join(pts, " "), Epochs: len(vals),
			Min: fmt.Sprintf("%.4g", lo), Max: fmt.Sprintf("%.4g", hi), Last: fmt.Sprintf("%.4g", vals[len(vals)-1])}, true
	}
	return curve{}, false
}

func humanNum(v any) string {
	var f float64
	switch x := v.(type) {
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case float64:
		f = x
	default:
		return fmt.Sprint(v)
	}
	switch a := math.Abs(f); {
	case a >= 1e9:
		return fmt.Sprintf("%.2fG", f/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.2fM", f/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.1fk", f/1e3)
	case a >= 100 || a == math.Trunc(a):
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.3g", f)
}
