package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/flexps/flexps/status"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// barTotal is a bar's resolution: the master's done fraction, in
// thousandths.
const barTotal = 1000

// stageBars draws one bar per running stage of each followed task. The
// text beside a bar comes from the master's progress reports (its real
// samples/s and loss), not from the bar's own rate, since the bar advances
// by done fraction, which a stage of unknown length does not have.
type stageBars struct {
	prog *mpb.Progress
	mu   sync.Mutex // guards bars; never taken by a decorator
	bars map[string]*stageBar
}

type stageBar struct {
	bar     *mpb.Bar
	task    string
	started time.Time
	// mu guards st, which the bar's decorator reads on mpb's goroutine;
	// it is held only to copy, never across an mpb call.
	mu sync.Mutex
	st status.Task
}

func newStageBars(w io.Writer) *stageBars {
	return &stageBars{
		prog: mpb.New(mpb.WithOutput(w), mpb.WithRefreshRate(150*time.Millisecond), mpb.WithWidth(32),
			// The caller decided w is a terminal (mpb would not draw on a pipe).
			mpb.WithAutoRefresh()),
		bars: map[string]*stageBar{},
	}
}

func (b *stageBars) update(s status.Task) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := fmt.Sprintf("%s/%d", s.ID, s.Stage)
	// A task's earlier stage is over once a later one reports.
	for k, sb := range b.bars {
		if sb.task == s.ID && k != key {
			sb.bar.Abort(true)
			delete(b.bars, k)
		}
	}
	sb := b.bars[key]
	if sb == nil {
		sb = &stageBar{task: s.ID, started: time.Now()}
		name := fmt.Sprintf("%s %d/%d %s", s.Name, s.Stage+1, s.Stages, s.StageName)
		sb.bar = b.prog.AddBar(barTotal,
			mpb.BarRemoveOnComplete(),
			mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR)),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return sb.text() })),
		)
		b.bars[key] = sb
	}
	sb.mu.Lock()
	sb.st = s
	sb.mu.Unlock()
	if f := s.Progress.Fraction; f > 0 {
		sb.bar.SetCurrent(int64(min(f, 1) * barTotal * 0.999)) // full only when the stage ends
	}
}

// text is the bar's suffix: % and ETA when the master knows the stage's
// length, then epoch, samples/s and loss.
func (sb *stageBar) text() string {
	sb.mu.Lock()
	pr := sb.st.Progress
	sb.mu.Unlock()
	var parts []string
	if f := pr.Fraction; f > 0 {
		part := fmt.Sprintf("%3.0f%%", 100*min(f, 1))
		if el := time.Since(sb.started); f < 1 && el > time.Second {
			eta := time.Duration(float64(el) * (1 - f) / f).Round(time.Second)
			part += " ETA " + eta.String()
		}
		parts = append(parts, part)
	}
	if pr.Epochs > 0 {
		parts = append(parts, fmt.Sprintf("epoch %d/%d", min(pr.Epoch+1, pr.Epochs), pr.Epochs))
	} else {
		parts = append(parts, fmt.Sprintf("epoch %d", pr.Epoch+1))
	}
	parts = append(parts, human(pr.SamplesPerSec)+" samples/s", fmt.Sprintf("loss %.4f", pr.Loss))
	return strings.Join(parts, "  ")
}

// endTask removes a task's bars. (SetTotal cannot complete a bar made
// with a total: mpb ignores it, and Wait would wait for it forever.)
func (b *stageBars) endTask(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, sb := range b.bars {
		if sb.task == id {
			sb.bar.Abort(true)
			delete(b.bars, k)
		}
	}
}

// write prints lines above the bars; it fails once the container has
// stopped.
func (b *stageBars) write(p []byte) error {
	_, err := b.prog.Write(p)
	return err
}

// close removes the remaining bars and waits for the last frame.
func (b *stageBars) close() {
	b.mu.Lock()
	for k, sb := range b.bars {
		sb.bar.Abort(true)
		delete(b.bars, k)
	}
	b.mu.Unlock()
	b.prog.Wait()
}
