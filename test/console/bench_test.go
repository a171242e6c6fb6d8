package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// BenchmarkConsolePages times each console page from navigation until its
// content shows, on a node holding 20 topics of 16 queues (200,000
// records) and 20 groups with committed offsets; it reports the node's
// resident memory after the pages were used (the node runs in the
// benchmark's process).
func BenchmarkConsolePages(b *testing.B) {
	exe := chromiumB(b)
	n := apptest.StartTestNode(b, apptest.TestConfig(b.TempDir()))
	base := "http://" + n.HTTPAddr()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	for tp := range 20 {
		topic := fmt.Sprintf("orders-%02d", tp)
		post(b, base+"/api/v1/topics", map[string]any{"name": topic, "queues": 16})
		recs := make([]*kgo.Record, 10_000)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: []byte(fmt.Sprintf(`{"order":%d,"amount":%d}`, i, i*7))}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		post(b, base+"/api/v1/groups/billing-"+strconv.Itoa(tp)+"/reset", map[string]any{"topic": topic, "to": "offset", "offset": 100})
	}
	pages := []struct{ name, path, want string }{
		{"overview", "/", "total lag"},
		{"topics", "/#/topics", "orders-19"},
		{"topic", "/#/topics/orders-07", `"amount"`},
		{"groups", "/#/groups", "billing-19"},
		{"group", "/#/groups/billing-3", "total lag"},
		{"dead-letters", "/#/dlq", "nothing yet"},
		{"transactions", "/#/transactions", "RocketMQ half messages"},
		{"timers", "/#/timers", "Pending timers"},
		{"users", "/#/security", "Quotas"},
		{"cluster", "/#/cluster", "Replication groups"},
	}
	br := openBrowserB(b, exe)
	// A page opened afresh: the console's files, then the page's API calls.
	b.Run("first-load", func(b *testing.B) {
		for b.Loop() {
			if err := chromedp.Do(br, chromedp.Navigate("about:blank"), chromedp.Navigate(base+"/#/topics"),
				chromedp.WaitVisible(chromedp.Search(`//*[@id="view"]//*[contains(text(), 'orders-19')]`))); err != nil {
				b.Fatal(err)
			}
		}
	})
	if err := chromedp.Do(br, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.Search(`//*[@id="view"]//*[contains(text(), 'total lag')]`))); err != nil {
		b.Fatal(err)
	}
	// Moving between pages, as the navigation does: the view renders from
	// its API calls (timed in the page, from the hash change until the
	// content shows).
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			var total float64
			for b.Loop() {
				js := fmt.Sprintf(`new Promise((resolve) => {
  location.hash = "#/blank-" + Math.random();
  setTimeout(() => {
    const t0 = performance.now();
    location.hash = %q;
    const look = () => document.getElementById("view").innerText.includes(%q) ? resolve(performance.now() - t0) : requestAnimationFrame(look);
    look();
  }, 0);
})`, strings.TrimPrefix(p.path, "/"), p.want)
				ms, err := chromedp.Run(br, chromedp.Evaluate[float64](js, chromedp.EvalAwaitPromise))
				if err != nil {
					b.Fatalf("%s: %v", p.name, err)
				}
				total += ms
			}
			b.ReportMetric(total/float64(b.N), "ms/render")
		})
	}
	if s, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(s), "\n") {
			if strings.HasPrefix(line, "VmRSS") || strings.HasPrefix(line, "VmHWM") {
				b.Log(strings.Join(strings.Fields(line), " "))
			}
		}
	}
}

func chromiumB(b *testing.B) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	b.Skip("chromium not installed")
	return ""
}

// openBrowserB starts a headless Chromium for a benchmark.
func openBrowserB(b *testing.B, exe string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Headless)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		b.Fatal(err)
	}
	return ctx
}
