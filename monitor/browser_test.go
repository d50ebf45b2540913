package monitor_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds the headless browser scripts/setup.sh installs.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium in CI: scripts/setup.sh installs it")
	}
	t.Skip("no chromium on this machine (scripts/setup.sh installs Debian's chromium)")
	return ""
}

// TestStatusPageInBrowser loads the page in a real headless browser: it
// renders a running task's progress bar and a finished task's loss curve,
// and refreshes by itself. A screenshot is kept in the test's output
// directory ($FLEXPS_TEST_ARTIFACTS, else the test's temp dir, logged).
func TestStatusPageInBrowser(t *testing.T) {
	bin := chromium(t)
	l := startCluster(t)
	if _, err := l.SubmitAndWait(context.Background(), task("finished-task", 5, 5), nil); err != nil {
		t.Fatal(err)
	}
	id, err := l.Submit(context.Background(), task("running-task", 1000, 20))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Cancel(context.Background(), id)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1200, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	// The first action starts the browser, which lives as long as that
	// action's context: no timeout on it; later steps get one.
	if err := chromedp.Do(bctx, chromedp.Navigate(l.Monitors.Page.URL()+"/")); err != nil {
		t.Fatal(err)
	}
	ctx, cancelT := context.WithTimeout(bctx, 90*time.Second)
	defer cancelT()
	must := func(v string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`article[data-task="`+id+`"] .bar`)); err != nil {
		t.Fatal(err)
	}
	firstStamp := must(chromedp.Run(ctx, chromedp.Text(`header p`)))
	running := must(chromedp.Run(ctx, chromedp.Text(`#running article[data-task="`+id+`"]`)))
	curveCaption := must(chromedp.Run(ctx, chromedp.Text(`#recent figure.curve figcaption`)))
	points, err := chromedp.Run(ctx, chromedp.AttributeValue(`#recent figure.curve polyline`, "points"))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(running, "running-task") || !strings.Contains(running, "samples/s") {
		t.Errorf("running task section: %q", running)
	}
	if !strings.Contains(curveCaption, "loss over 5 epochs") || len(strings.Fields(points.Value)) != 5 {
		t.Errorf("finished task curve: %q, points %q", curveCaption, points.Value)
	}
	// The page refreshes by itself: the header's time stamp changes.
	later := firstStamp
	deadline := time.Now().Add(20 * time.Second)
	for later == firstStamp {
		if time.Now().After(deadline) {
			t.Fatalf("the page did not refresh: %q", firstStamp)
		}
		time.Sleep(500 * time.Millisecond)
		later = must(chromedp.Run(ctx, chromedp.Text(`header p`)))
	}
	dir := os.Getenv("FLEXPS_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "status-page.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the status page: %s (%d bytes)", path, len(shot))
}
