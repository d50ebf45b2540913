package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

func plotCmd(g *globals) *cobra.Command {
	var (
		out           string
		width, height float64
		only          []string
	)
	c := &cobra.Command{
		Use:   "plot METRICS.jsonl -o FILE.png|svg|pdf",
		Short: "Draw loss and quality curves per epoch from a --metrics-out file",
		Long: `plot reads the JSON lines "flexps run/submit --metrics-out" wrote and draws
one panel per metric (objective, logloss, acc, rmse, test_acc ...), one line
per task and stage, epochs on the x axis (continuing across a task's stages).
The output format follows the file extension: png, svg, pdf, jpg or tif.`,
		Args: args(func(n int) bool { return n == 1 }, "one metrics file"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if out == "" {
				return usageError{"-o/--out FILE is required"}
			}
			format := strings.TrimPrefix(strings.ToLower(filepath.Ext(out)), ".")
			switch format {
			case "png", "svg", "pdf", "jpg", "jpeg", "tif", "tiff":
			default:
				return usageError{fmt.Sprintf("-o %s: unknown image format %q (want .png, .svg, .pdf, .jpg or .tif)", out, format)}
			}
			for _, d := range []struct {
				flag string
				v    float64
			}{{"width", width}, {"height", height}} {
				// NaN or infinity panicked in the image library; a
				// huge size ran out of memory drawing it.
				if !(d.v >= 0 && d.v <= maxPlotCm) {
					return usageError{fmt.Sprintf("--%s %v: want centimetres in [0, %d] (0: the default)", d.flag, d.v, maxPlotCm)}
				}
			}
			f, err := os.Open(a[0])
			if err != nil {
				return err
			}
			defer f.Close()
			recs, err := readRecords(f, a[0])
			if err != nil {
				return err
			}
			if len(only) > 0 {
				// A misspelt --metric left out its panel silently, or
				// alone said "no epoch metrics to plot".
				has := map[string]bool{}
				for _, c := range collectCurves(recs, nil) {
					has[c.Metric] = true
				}
				for _, m := range only {
					if !has[m] && len(has) > 0 {
						return usageError{fmt.Sprintf("--metric %s: %s has no such metric (it has %s)", m, a[0], strings.Join(slices.Sorted(maps.Keys(has)), ", "))}
					}
				}
			}
			curves := collectCurves(recs, only)
			if len(curves) == 0 {
				return fmt.Errorf("%s: no epoch metrics to plot", a[0])
			}
			if err := drawCurves(curves, out, format, vg.Length(width)*vg.Centimeter, vg.Length(height)*vg.Centimeter); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%d panels)\n", out, len(curves))
			return nil
		},
	}
	c.Flags().StringVarP(&out, "out", "o", "", "output image; the extension picks the format (required)")
	c.Flags().Float64Var(&width, "width", 0, "image width in cm (default 12 per panel column)")
	c.Flags().Float64Var(&height, "height", 0, "image height in cm (default 8 per panel row)")
	c.Flags().StringSliceVar(&only, "metric", nil, "plot only these metrics (repeat or comma-separate; default all)")
	return c
}

// maxPlotCm bounds --width and --height: 100 cm is about 3,800 pixels
// (plot writes images at 96 dpi), 100 x 100 cm a 57 MB RGBA canvas.
const maxPlotCm = 100

// readRecords parses a JSON-lines metrics file; a bad line is reported
// with its number.
func readRecords(r io.Reader, name string) ([]Record, error) {
	var recs []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("%s line %d: not a metrics record: %w", name, line, err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s line %d: %w", name, line+1, err)
	}
	return recs, nil
}

var stageKind = regexp.MustCompile(`\.[0-9]+$`)

// curve is one panel: a metric and its series.
type curve struct {
	Metric string
	Series []series
}

type series struct {
	Name string
	XY   plotter.XYs
}

// collectCurves groups epoch records into panels by metric name and into
// series by task and stage name. The x value is the epoch count within
// the task, so a task's stages continue one another on the axis (SVRG's
// one-epoch stages form one line).
func collectCurves(recs []Record, only []string) []curve {
	want := map[string]bool{}
	for _, m := range only {
		want[m] = true
	}
	type key struct{ metric, series string }
	pts := map[key]plotter.XYs{}
	var order []key
	seen := map[string]int{} // epochs per task so far
	tasks := map[string]bool{}
	for _, r := range recs {
		if r.Type == "epoch" {
			tasks[r.TaskID] = true
		}
	}
	for _, r := range recs {
		if r.Type != "epoch" {
			continue
		}
		seen[r.TaskID]++
		x := float64(seen[r.TaskID])
		// SVRG names its alternating stages full.0, sgd.0, full.1 ...: one
		// line per kind of stage, not one point per stage.
		name := stageKind.ReplaceAllString(r.StageName, "")
		if name == "" {
			name = fmt.Sprintf("stage %d", r.Stage)
		}
		if len(tasks) > 1 {
			name = r.Task + " " + r.TaskID + ": " + name
		}
		for m, v := range r.Values {
			if (len(want) > 0 && !want[m]) || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			k := key{m, name}
			if _, ok := pts[k]; !ok {
				order = append(order, k)
			}
			pts[k] = append(pts[k], plotter.XY{X: x, Y: v})
		}
	}
	byMetric := map[string]*curve{}
	var names []string
	for _, k := range order {
		c := byMetric[k.metric]
		if c == nil {
			c = &curve{Metric: k.metric}
			byMetric[k.metric] = c
			names = append(names, k.metric)
		}
		c.Series = append(c.Series, series{Name: k.series, XY: pts[k]})
	}
	sort.Slice(names, func(i, j int) bool {
		return metricRank(names[i]) < metricRank(names[j]) || (metricRank(names[i]) == metricRank(names[j]) && names[i] < names[j])
	})
	out := make([]curve, len(names))
	for i, n := range names {
		out[i] = *byMetric[n]
	}
	return out
}

// metricRank puts losses before quality metrics and training before test.
func metricRank(m string) int {
	r := 0
	if strings.HasPrefix(m, "test_") {
		r = 10
		m = strings.TrimPrefix(m, "test_")
	}
	switch m {
	case "objective":
	case "loss", "logloss":
		r++
	case "rmse", "mae":
		r += 2
	default:
		r += 3
	}
	return r
}

func drawCurves(curves []curve, path, format string, w, h vg.Length) error {
	cols := 1
	if len(curves) > 1 {
		cols = 2
	}
	rows := (len(curves) + cols - 1) / cols
	if w <= 0 {
		w = vg.Length(12*cols) * vg.Centimeter
	}
	if h <= 0 {
		h = vg.Length(8*rows) * vg.Centimeter
	}
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, c := range curves {
		p := plot.New()
		p.Title.Text = c.Metric
		p.X.Label.Text = "epoch"
		p.Y.Label.Text = c.Metric
		p.Add(plotter.NewGrid())
		var lines []any
		for _, s := range c.Series {
			lines = append(lines, s.Name, s.XY)
		}
		if err := plotutil.AddLinePoints(p, lines...); err != nil {
			return fmt.Errorf("plot %s: %w", c.Metric, err)
		}
		// Losses fall and quality rises: keep the legend off the curve's end.
		p.Legend.Top = metricRank(c.Metric)%10 < 2
		grid[i/cols][i%cols] = p
	}
	if format == "jpeg" {
		format = "jpg"
	}
	if format == "tiff" {
		format = "tif"
	}
	img, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return fmt.Errorf("-o %s: %w", path, err)
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, tiles, draw.New(img))
	for j := range grid {
		for i, p := range grid[j] {
			if p != nil {
				p.Draw(canvases[j][i])
			}
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := img.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
