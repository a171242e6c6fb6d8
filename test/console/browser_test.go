package console_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// browser is a headless Chromium driven through chromedp, collecting
// script exceptions and console errors (the test fails on any).
type browser struct {
	t        *testing.T
	ctx      context.Context
	shots    string
	mu       sync.Mutex
	problems []string
}

// openBrowser starts Chromium for t; screenshots go to
// ROSETTA_ARTIFACTS/<name> (default: under the system's temporary
// directory).
func openBrowser(t *testing.T, exe, name string) *browser {
	t.Helper()
	br := &browser{t: t}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Headless)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		br.mu.Lock()
		defer br.mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			br.problems = append(br.problems, fmt.Sprintf("exception: %s %v", e.ExceptionDetails.Text, e.ExceptionDetails.Exception))
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError {
				br.problems = append(br.problems, "console: "+e.Entry.Text)
			}
		}
	}))
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	br.ctx = ctx
	br.shots = os.Getenv("ROSETTA_ARTIFACTS")
	if br.shots == "" {
		br.shots = filepath.Join(os.TempDir(), "rosetta-console-screenshots")
	}
	br.shots = filepath.Join(br.shots, name)
	if err := os.MkdirAll(br.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		t.Logf("screenshots in %s", br.shots)
		br.mu.Lock()
		for _, p := range br.problems {
			t.Errorf("browser: %s", p)
		}
		br.mu.Unlock()
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	return br
}

// do runs steps, failing the test with what when they fail.
func (br *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	br.t.Helper()
	if err := chromedp.Do(br.ctx, steps...); err != nil {
		br.t.Fatalf("%s: %v", what, err)
	}
}

// click clicks what xpath finds; when the page redrew the element between
// finding and clicking it (a list reloading), nothing was clicked and it
// tries again.
func (br *browser) click(what, xpath string) {
	br.t.Helper()
	for attempt := 1; ; attempt++ {
		err := chromedp.Do(br.ctx, chromedp.Click(chromedp.Search(xpath)))
		if err == nil {
			return
		}
		if msg := err.Error(); attempt < 10 && (strings.Contains(msg, "Could not find node with given id") ||
			strings.Contains(msg, "No node with given id") || strings.Contains(msg, "Node is detached")) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		br.t.Fatalf("%s: %v", what, err)
	}
}

// openModal clicks what xpath finds until the message dialog shows: a
// click on a list the page redrew just then (its first load replaced by
// the next) opens nothing, and is made again.
func (br *browser) openModal(what, xpath string) {
	br.t.Helper()
	const shown = `(() => { const e = document.querySelector("#modal-body pre"); return !!e && e.offsetParent !== null })()`
	for attempt := 1; ; attempt++ {
		br.click(what, xpath)
		_, err := chromedp.Run(br.ctx, chromedp.Poll[bool](shown, chromedp.WithPollingTimeout(5*time.Second)))
		if err == nil {
			return
		}
		if attempt == 5 {
			text, _ := chromedp.Run(br.ctx, chromedp.Evaluate[string](`(document.getElementById("modal-body") || {}).innerText || "(no dialog)"`))
			br.t.Fatalf("%s: the dialog never showed its message: %v\n%s", what, err, text)
		}
	}
}

// shot writes a screenshot of the page as name.png.
func (br *browser) shot(name string) {
	br.t.Helper()
	// From the top: a page scrolled by a click would show the sticky
	// header in the middle of the full-page picture.
	if _, err := chromedp.Run(br.ctx, chromedp.Evaluate[int](`window.scrollTo(0, 0), 0`)); err != nil {
		br.t.Fatalf("scroll before the screenshot of %s: %v", name, err)
	}
	png, err := chromedp.Run(br.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		br.t.Fatalf("screenshot of %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(br.shots, name+".png"), png, 0o644); err != nil {
		br.t.Fatal(err)
	}
}

// waitFor waits until the view shows want and returns its text.
func (br *browser) waitFor(want string) string { return br.waitIn("view", want) }

// waitIn waits until the element with id shows want and returns its text,
// failing on script values shown as text.
func (br *browser) waitIn(id, want string) string {
	br.t.Helper()
	expr := fmt.Sprintf(`document.getElementById(%q).innerText.includes(%q)`, id, want)
	if _, err := chromedp.Run(br.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		text, _ := chromedp.Run(br.ctx, chromedp.Text(chromedp.ID(id)))
		br.t.Fatalf("#%s never showed %q: %v\n%s", id, want, err, text)
	}
	text, err := chromedp.Run(br.ctx, chromedp.Text(chromedp.ID(id)))
	if err != nil {
		br.t.Fatal(err)
	}
	if lower := strings.ToLower(text); strings.Contains(lower, "[object object]") || strings.Contains(lower, "undefined") || strings.Contains(text, "NaN") {
		br.t.Errorf("#%s shows a script value instead of text:\n%s", id, text)
	}
	return text
}
