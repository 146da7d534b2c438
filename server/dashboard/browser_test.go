package dashboard_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/breaker"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/server/dashboard"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// bound is how long a test waits for something a page should show: long,
// as the machine may be busy; a correct page shows it in about a second.
const bound = time.Minute

// chromium finds the browser, or skips (fails under CI=true) saying how to
// get one.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("SLUICE_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	msg := "the dashboard's browser tests need Chromium: run scripts/ensure-chromium.sh (as root it runs apt-get install -y chromium), " +
		"or set SLUICE_CHROMIUM to a Chromium or Chrome binary, then go test ./server/dashboard"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// outDir is where screenshots and figures go: $SLUICE_UI_OUT (a CI
// artifact directory), else sluice-ui in the system's temporary directory;
// never the repository.
func outDir(t *testing.T) string {
	dir := os.Getenv("SLUICE_UI_OUT")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "sluice-ui")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// fixture is a real server with the dashboard mounted, and the parts the
// test drives.
type fixture struct {
	url      string
	jobs     store.JobStore
	provider *provider
	stated   *statingProvider
	client   *outbound.Client
	// peer is a second server of the same fleet: the same rate, lease,
	// slot and job stores, its own process-local counts and dashboard.
	peer string
}

// statingProvider is a simulated upstream that states its limit on every
// success (50 per 10 s, 42 left) after a few milliseconds, and throttles
// with a Retry-After of 30 s while told to.
type statingProvider struct {
	mu        sync.Mutex
	throttled bool
}

func (p *statingProvider) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	throttled := p.throttled
	p.mu.Unlock()
	if throttled {
		w.Header().Set("Retry-After", "30")
		http.Error(w, "slow down", http.StatusTooManyRequests)
		return
	}
	time.Sleep(3 * time.Millisecond) // the provider's latency, for the percentiles
	w.Header().Set("RateLimit-Policy", `"q";q=50;w=10`)
	w.Header().Set("RateLimit", `"q";r=42;t=7`)
	_, _ = io.WriteString(w, "ok")
}

// provider is a simulated upstream that fails while told to.
type provider struct {
	mu      sync.Mutex
	failing bool
}

func (p *provider) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	failing := p.failing
	p.mu.Unlock()
	if failing {
		http.Error(w, "upstream down", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("RateLimit-Policy", `"q";q=50;w=10`)
	_, _ = io.WriteString(w, "ok")
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	lim, err := limiter.New(limiter.Config{
		Store: memstore.New(memstore.Config{}),
		Policies: []limiter.Policy{
			// 10 an hour, bursts of 10: no unit comes back while the test runs,
			// so counts and remaining are exact.
			{Name: "api", Rate: 10, Period: time.Hour, Burst: 10, Description: "per user"},
			{Name: "trial", Rate: 1, Period: time.Hour, Shadow: true, Description: "would deny"},
			{Name: "export", Algorithm: store.Concurrency, Permits: 2, TTL: 5 * time.Minute},
		},
	})
	require.NoError(t, err)
	jobs := memstore.NewJobStore(memstore.JobConfig{})
	slots, err := slot.New(slot.Config{})
	require.NoError(t, err)
	rec := dashboard.NewRecorder(nil)
	srv, err := server.New(server.Config{Limiter: lim, Slots: slots, Jobs: jobs, Observer: rec})
	require.NoError(t, err)

	prov := &provider{failing: true}
	up := httptest.NewServer(prov)
	t.Cleanup(up.Close)
	client, err := outbound.New(outbound.Config{
		// One attempt a call: a 429's Retry-After is shown, not waited out.
		Retry:   retry.Config{MaxAttempts: 1},
		Breaker: breaker.Config{ConsecutiveFailures: 3, MinRequests: 100, OpenTimeout: 10 * time.Minute},
		OnBreakerEvent: func(key string, e breaker.Event) {
			_, _ = jobs.RecordBreakerTransition(context.Background(), store.BreakerTransition{ConnectorID: "binance", Key: key,
				From: e.From.String(), To: e.To.String(), Reason: e.Reason.String(), Requests: int64(e.Counts.Requests),
				Failures: int64(e.Counts.Failures)})
		},
	})
	require.NoError(t, err)
	dash, err := dashboard.New(dashboard.Config{Limiter: lim, Recorder: rec, API: srv.Handler(), Jobs: jobs, Slots: slots,
		Outbound: client, StoreName: "memory", Refresh: 500 * time.Millisecond})
	require.NoError(t, err)
	hs := httptest.NewServer(dashboard.Mount(srv.Handler(), dash))
	t.Cleanup(hs.Close)

	// The peer: another server over the same stores (a limiter over the
	// same rate and lease store, the same slot and job stores).
	limB, err := limiter.New(limiter.Config{Store: lim.Store(), Leases: lim.Leases(), Policies: lim.Policies()})
	require.NoError(t, err)
	slotsB, err := slot.New(slot.Config{Store: slots.Store()})
	require.NoError(t, err)
	recB := dashboard.NewRecorder(nil)
	srvB, err := server.New(server.Config{Limiter: limB, Slots: slotsB, Jobs: jobs, Observer: recB})
	require.NoError(t, err)
	dashB, err := dashboard.New(dashboard.Config{Limiter: limB, Recorder: recB, API: srvB.Handler(), Jobs: jobs, Slots: slotsB,
		StoreName: "memory", Refresh: 500 * time.Millisecond})
	require.NoError(t, err)
	peer := httptest.NewServer(dashboard.Mount(srvB.Handler(), dashB))
	t.Cleanup(peer.Close)
	return &fixture{url: hs.URL, jobs: jobs, provider: prov, stated: &statingProvider{}, client: client, peer: peer.URL}
}

// call sends a JSON request to the API and decodes the answer into out
// (when not nil); it returns the status.
func (f *fixture) call(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && len(b) > 0 {
		require.NoError(t, json.Unmarshal(b, out), "%s %s: %s", method, path, b)
	}
	return resp.StatusCode
}

func (f *fixture) metric(t *testing.T, series string) string {
	t.Helper()
	resp, err := http.Get(f.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	require.NotNil(t, m, "no series %s in /metrics", series)
	return string(m[1])
}

// claim claims up to 10 jobs as holder and returns their ids and tokens.
func (f *fixture) claim(t *testing.T) map[string]int64 {
	t.Helper()
	var out struct {
		Claims []struct {
			Job   store.Job `json:"job"`
			Token int64     `json:"token"`
		} `json:"claims"`
	}
	require.Equal(t, http.StatusOK, f.call(t, "POST", "/v1/jobs/claim", `{"holder":"worker-1","limit":10,"lease_ttl_ms":60000}`, &out))
	got := map[string]int64{}
	for _, c := range out.Claims {
		got[c.Job.ID] = c.Token
	}
	return got
}

// browser records what a page must not do: console errors, exceptions,
// errors the browser logs (CSP violations, failed loads).
type browser struct {
	ctx       context.Context
	mu        sync.Mutex
	errs      []string
	bytes     int64           // encoded bytes of the page loads (not refreshes) since the last reset
	refreshes map[string]bool // request ids of refreshes
	shotTo    string
}

func newBrowser(t *testing.T, exe string) *browser {
	t.Helper()
	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	b := &browser{ctx: ctx, shotTo: outDir(t), refreshes: map[string]bool{}}
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				b.errs = append(b.errs, "console."+string(e.Type)+": "+strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			b.errs = append(b.errs, "exception: "+e.ExceptionDetails.Text+" "+describe(e.ExceptionDetails.Exception))
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError {
				b.errs = append(b.errs, "browser log: "+e.Entry.Text+" "+e.Entry.URL)
			}
		case *network.EventRequestWillBeSent:
			if strings.Contains(e.Request.URL, "fragment=") {
				b.refreshes[string(e.RequestID)] = true
			}
		case *network.EventLoadingFinished:
			if !b.refreshes[string(e.RequestID)] { // the page's own loads, not its refreshes
				b.bytes += int64(e.EncodedDataLength)
			}
		}
	}))
	_, err := chromedp.Call(ctx, log.Enable, struct{}{})
	require.NoError(t, err)
	_, err = chromedp.Call(ctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		require.Empty(t, b.errs, "the pages logged errors")
	})
	return b
}

func describe(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	return o.Description
}

// do runs actions with a bound.
func (b *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, bound)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// eval evaluates a JavaScript expression into a T.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, bound)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, "evaluating %s", expr)
	return v
}

// waitFor waits until the expression is truthy, polling, within bound.
func (b *browser) waitFor(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, bound+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(100*time.Millisecond),
		chromedp.WithPollingTimeout(bound)))
	require.NoError(t, err, "waiting for %s", what)
}

// becomes reports whether the expression turns truthy within d, polling.
func (b *browser) becomes(expr string, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(b.ctx, d+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(100*time.Millisecond),
		chromedp.WithPollingTimeout(d)))
	return err == nil
}

func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	return strings.TrimSpace(eval[string](t, b, fmt.Sprintf(`document.querySelector(%q)?.textContent ?? "<missing>"`, sel)))
}

// open navigates and waits for the live part.
func (b *browser) open(t *testing.T, url string) {
	t.Helper()
	b.do(t, chromedp.Navigate(url), chromedp.WaitVisible("#live"))
}

// click clicks the element sel names. The live tables are drawn anew on
// each refresh, so the node a query found can be gone by the time the
// click reaches it (CDP's "Could not find node with given id"); a user's
// click lands on whatever is drawn there, so the click is tried again on
// the node drawn in its place, a bounded number of times.
func (b *browser) click(t *testing.T, sel string) {
	t.Helper()
	var err error
	for range 5 {
		ctx, cancel := context.WithTimeout(b.ctx, bound)
		err = chromedp.Do(ctx, chromedp.Click(sel))
		cancel()
		if err == nil || !nodeReplaced(err) {
			break
		}
	}
	require.NoError(t, err, "clicking %s", sel)
}

// nodeReplaced tells CDP's errors for a node removed from the document
// between the query that found it and the action on it.
func nodeReplaced(err error) bool {
	m := err.Error()
	return strings.Contains(m, "Could not find node with given id") ||
		strings.Contains(m, "No node with given id") ||
		strings.Contains(m, "Node is detached from document")
}

// confirm answers the page's confirmation dialog. The page refreshes its
// rows every few seconds, replacing the button: on a loaded machine a
// click whose press and release straddle a refresh opens nothing (the
// dialog did not open within a minute, make test at load 4.3). So while
// the dialog is not open, the button is clicked again, within bound.
func (b *browser) confirm(t *testing.T, clickSel string) {
	t.Helper()
	const open = `document.getElementById("confirm").open`
	deadline := time.Now().Add(bound)
	for {
		b.click(t, clickSel)
		if b.becomes(open, 5*time.Second) {
			break
		}
		require.True(t, time.Now().Before(deadline), "waiting for the confirmation dialog")
	}
	b.click(t, "#confirm-ok")
	b.waitFor(t, "the action's answer", `/^(Done|Failed|Cancelled)/.test(document.getElementById("status").textContent)`)
	require.True(t, strings.HasPrefix(b.text(t, "#status"), "Done:"), "the action's answer: %s", b.text(t, "#status"))
}

// screenshots writes the page at 1280 and 390 px wide and checks that
// nothing overflows the narrow one, then restores 1280.
func (b *browser) screenshots(t *testing.T, name string) {
	t.Helper()
	b.do(t, chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur()`))
	for _, w := range []int64{1280, 390} {
		b.do(t, chromedp.EmulateViewport(w, 900))
		b.waitFor(t, "the layout at "+strconv.FormatInt(w, 10)+" px", fmt.Sprintf("window.innerWidth === %d", w))
		over := eval[int](t, b, `document.documentElement.scrollWidth - window.innerWidth`)
		if over > 0 {
			wide := eval[[]string](t, b, `[...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).slice(0, 8).map(e => e.tagName + "." + e.className + " " + Math.round(e.getBoundingClientRect().right))`)
			t.Fatalf("%s overflows %d px by %d px: %v", name, w, over, wide)
		}
		ctx, cancel := context.WithTimeout(b.ctx, bound)
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
		cancel()
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(b.shotTo, fmt.Sprintf("%s-%d.png", name, w)), png, 0o644))
	}
	b.do(t, chromedp.EmulateViewport(1280, 900))
}

// accessibility checks what a keyboard or screen reader user needs: every
// control has a label or text, every image chart a name, text contrast
// at least 4.5:1 (WCAG AA), and the first Tab lands on a visibly focused
// skip link.
func (b *browser) accessibility(t *testing.T, name string) {
	t.Helper()
	problems := eval[[]string](t, b, a11yScript)
	require.Empty(t, problems, "accessibility problems on %s", name)
	b.do(t, chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur(); window.scrollTo(0,0)`),
		chromedp.KeyEvent(kb.Tab))
	focused := eval[string](t, b, `document.activeElement.className + "|" + getComputedStyle(document.activeElement).outlineStyle`)
	require.Equal(t, "skip|solid", focused, "the first Tab on %s should land on the visibly focused skip link", name)
}

const a11yScript = `(() => {
  const out = [];
  if (!document.documentElement.lang) out.push("html has no lang");
  for (const el of document.querySelectorAll("input:not([type=hidden]), select, textarea")) {
    if (!(el.labels && el.labels.length) && !el.getAttribute("aria-label")) out.push("unlabelled " + el.outerHTML.slice(0, 80));
  }
  for (const el of document.querySelectorAll("button, a[href]")) {
    if (!el.textContent.trim() && !el.getAttribute("aria-label")) out.push("no accessible name: " + el.outerHTML.slice(0, 80));
  }
  for (const el of document.querySelectorAll("svg[role=img]")) {
    if (!el.getAttribute("aria-label")) out.push("chart without a name");
  }
  const lum = (c) => {
    const m = c.match(/[\d.]+/g).map(Number);
    const ch = m.slice(0, 3).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2];
  };
  const bg = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = getComputedStyle(e).backgroundColor;
      const m = c.match(/[\d.]+/g);
      if (m && (m.length < 4 || Number(m[3]) === 1)) return c;
    }
    return "rgb(255, 255, 255)";
  };
  for (const el of document.querySelectorAll("p, li, td, th, dt, dd, a, button, label, h1, h2, h3, figcaption, small, span, code")) {
    if (!el.textContent.trim() || el.closest(".sr, dialog:not([open]), .cell")) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const a = lum(getComputedStyle(el).color), b = lum(bg(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) out.push("contrast " + ratio.toFixed(2) + " of " + el.tagName + " " + el.textContent.trim().slice(0, 40));
  }
  return out;
})()`

func TestDashboardInBrowser(t *testing.T) {
	exe := chromium(t)
	f := newFixture(t)
	b := newBrowser(t, exe)

	// Traffic: 15 takes of one user (10 allowed, 5 denied), 3 of a shadow
	// policy, two leases and a refused one, slots, a connector with jobs.
	var statuses [2]int
	for range 15 {
		if f.call(t, "POST", "/v1/take", `{"policy":"api","key":"user-1"}`, nil) == http.StatusOK {
			statuses[0]++
		} else {
			statuses[1]++
		}
	}
	require.Equal(t, [2]int{10, 5}, statuses)
	for range 3 {
		require.Equal(t, http.StatusOK, f.call(t, "POST", "/v1/take", `{"policy":"trial","key":"user-2"}`, nil))
	}

	// --- Overview: the numbers match the API's answers and /metrics.
	start := time.Now()
	b.mu.Lock()
	b.bytes = 0
	b.mu.Unlock()
	b.open(t, f.url+"/ui/")
	openedIn := time.Since(start)
	b.markPage(t)
	b.waitFor(t, "the page's load", `document.readyState === "complete"`)
	b.mu.Lock()
	weight := b.bytes
	b.mu.Unlock()
	b.waitFor(t, "the first contentful paint", `performance.getEntriesByName("first-contentful-paint").length > 0`)
	fcp := eval[float64](t, b, `(performance.getEntriesByName("first-contentful-paint")[0] || {startTime: -1}).startTime`)
	figures := fmt.Sprintf("overview page weight: %d bytes transferred (HTML, CSS, JS); first contentful paint %.0f ms after navigation start; navigate to visible %s (loopback, headless Chromium; load %s)\n",
		weight, fcp, openedIn.Round(time.Millisecond), loadavg())
	t.Log(figures)
	require.NoError(t, os.WriteFile(filepath.Join(b.shotTo, "figures.txt"), []byte(figures), 0o644))

	card := `.card[data-policy="api"] `
	require.Equal(t, "10", b.text(t, card+".n-allowed"))
	require.Equal(t, "5", b.text(t, card+".n-denied"))
	require.Equal(t, f.metric(t, `sluice_decisions_total{policy="api",result="allowed"}`), b.text(t, card+".n-allowed"))
	require.Equal(t, f.metric(t, `sluice_decisions_total{policy="api",result="denied"}`), b.text(t, card+".n-denied"))
	// The shadow policy's burst is its rate, 1: the first take fits, the
	// next two would have been denied.
	require.Equal(t, "2", b.text(t, `.card[data-policy="trial"] .n-shadow`))
	require.Equal(t, f.metric(t, `sluice_decisions_total{policy="trial",result="shadow_denied"}`), b.text(t, `.card[data-policy="trial"] .n-shadow`))
	// The chart has its 60 points, and the allowed line leaves the zero line.
	pts := eval[string](t, b, `document.querySelector('.card[data-policy="api"] polyline[data-series="allowed"]').getAttribute("points")`)
	pairs := strings.Fields(pts)
	require.Len(t, pairs, 60)
	ys := map[string]bool{}
	for _, p := range pairs {
		ys[p[strings.IndexByte(p, ',')+1:]] = true
	}
	require.Greater(t, len(ys), 1, "the allowed line is flat: %s", pts)
	// The exhausted key is nearest its limit, with the remaining the API reports.
	var peek struct{ Remaining int64 }
	f.call(t, "POST", "/v1/take", `{"policy":"api","key":"user-1","cost":0}`, &peek)
	require.Equal(t, "0 (0%)", b.text(t, "#near tbody tr:first-child .remaining"), "an exhausted key comes first")
	require.True(t, strings.HasPrefix(b.text(t, `#near tr[data-policy="api"][data-key="user-1"] .remaining`), strconv.FormatInt(peek.Remaining, 10)+" "))
	require.Equal(t, "healthy", b.text(t, "#store-state .ok"))
	// Live: one more denied take shows without reloading the page.
	require.Equal(t, http.StatusTooManyRequests, f.call(t, "POST", "/v1/take", `{"policy":"api","key":"user-1"}`, nil))
	b.waitFor(t, "the refreshed denied count", `document.querySelector('.card[data-policy="api"] .n-denied').textContent.trim() === "6"`)
	b.samePage(t)
	// The decision counts say they are this server's; remaining is the fleet's.
	require.Equal(t, "server", eval[string](t, b, `document.querySelector('section[aria-labelledby="dec-h"] .scope').dataset.scope`))
	require.Equal(t, "fleet", eval[string](t, b, `document.querySelector('section[aria-labelledby="near-h"] .scope').dataset.scope`))
	b.accessibility(t, "overview")
	b.screenshots(t, "overview")

	// --- Policies and keys: search a key; its numbers match the API.
	// (A take of cost 0 through the API is a decision like any other: the
	// server counts it.)
	f.call(t, "POST", "/v1/take", `{"policy":"api","key":"user-1","cost":0}`, &peek)
	allowed, err := strconv.Atoi(f.metric(t, `sluice_decisions_total{policy="api",result="allowed"}`))
	require.NoError(t, err)
	denied, err := strconv.Atoi(f.metric(t, `sluice_decisions_total{policy="api",result="denied"}`))
	require.NoError(t, err)
	b.open(t, f.url+"/ui/policies")
	b.do(t, chromedp.SetValue("#q-policy", "api"), chromedp.SendKeys("#q-key", "user-1"), chromedp.Click(`form.search button`),
		chromedp.WaitVisible("#search-remaining"))
	require.Equal(t, strconv.FormatInt(peek.Remaining, 10), b.text(t, "#search-remaining"))
	require.Equal(t, "10", b.text(t, "#search-limit"))
	require.Equal(t, allowed+denied, eval[int](t, b, `document.querySelectorAll("#recent tbody tr").length`), "every decision of user-1, newest first")
	require.Equal(t, "user-1", b.text(t, `table.hot[data-policy="api"] tbody tr:first-child .key`))
	require.Equal(t, strconv.Itoa(allowed+denied), b.text(t, `table.hot[data-policy="api"] tbody tr:first-child td:nth-child(2)`))
	b.accessibility(t, "policies")
	b.screenshots(t, "policies")

	// --- Outbound and breakers: a failing provider opens the key's breaker.
	up := httptest.NewServer(f.provider)
	t.Cleanup(up.Close)
	hc := &http.Client{Transport: f.client}
	for range 3 {
		resp, err := hc.Get(up.URL + "/v1/ticker")
		if err == nil {
			_ = resp.Body.Close()
		}
	}
	b.open(t, f.url+"/ui/breakers")
	b.waitFor(t, "an open breaker", `[...document.querySelectorAll("#outbound-breakers .state")].some(e => e.textContent.trim() === "open")`)
	b.waitFor(t, "the durable transition to open", `[...document.querySelectorAll("#breaker-states .state")].some(e => e.textContent.trim() === "open")`)
	b.accessibility(t, "breakers")
	b.screenshots(t, "breakers")
	// A provider that states its limit, then throttles with a Retry-After.
	sp := httptest.NewServer(f.stated)
	t.Cleanup(sp.Close)
	for range 4 {
		resp, err := hc.Get(sp.URL + "/v1/orders")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, resp.Body.Close())
	}
	f.stated.mu.Lock()
	f.stated.throttled = true
	f.stated.mu.Unlock()
	resp, err := hc.Get(sp.URL + "/v1/orders")
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
	spURL, err := url.Parse(sp.URL)
	require.NoError(t, err)
	spKey := outbound.HostKey(spURL)
	snap, ok := f.client.KeySnapshot(spKey)
	require.True(t, ok)

	b.open(t, f.url+"/ui/outbound")
	b.markPage(t)
	require.Equal(t, 2, eval[int](t, b, `document.querySelectorAll(".card[data-key]").length`))
	require.Equal(t, "open", b.text(t, ".card[data-key] .breaker-open"))
	sc := fmt.Sprintf(`.card[data-key=%q] `, spKey)
	// Latency p50 beside p95, as the client measured them (the page shows
	// whole milliseconds).
	for sel, want := range map[string]time.Duration{".lat-p50": snap.P50Latency, ".lat-p95": snap.P95Latency} {
		got, err := time.ParseDuration(b.text(t, sc+sel))
		require.NoError(t, err, sel)
		require.Equal(t, want.Round(time.Millisecond), got, sel)
		require.GreaterOrEqual(t, got, 3*time.Millisecond, "%s: the provider answers after 3 ms", sel)
	}
	// The provider's own limit, as it stated it.
	require.True(t, strings.HasPrefix(b.text(t, sc+".stated"), "50 per 10s, 42 left, resets "), b.text(t, sc+".stated"))
	require.Equal(t, "none stated", b.text(t, `.card:not([data-key=`+strconv.Quote(spKey)+`]) .stated`), "the failing provider stated nothing")
	// The Retry-After pause: counted, and the key paused now.
	require.EqualValues(t, 1, snap.RetryAfterPauses)
	require.True(t, strings.HasPrefix(b.text(t, sc+".pauses"), "1 (last 30s at "), b.text(t, sc+".pauses"))
	require.True(t, strings.HasPrefix(b.text(t, sc+".paused"), "for "), b.text(t, sc+".paused"))
	require.Equal(t, strconv.FormatInt(snap.Throttles, 10), b.text(t, sc+".throttles"))
	// The page samples the learned rate as it refreshes, without
	// reloading: the chart gets points.
	b.waitFor(t, "a learned-rate chart", `Number(document.querySelector(".card[data-key] polyline[data-series='learned rate']")?.dataset.points) >= 3`)
	b.samePage(t)
	b.accessibility(t, "outbound")
	b.screenshots(t, "outbound")

	// --- Leases: holders and tokens match the API; release one from the page.
	var l1, l2 struct{ Token int64 }
	require.Equal(t, http.StatusCreated, f.call(t, "POST", "/v1/leases", `{"policy":"export","key":"shop-1","holder":"a"}`, &l1))
	require.Equal(t, http.StatusCreated, f.call(t, "POST", "/v1/leases", `{"policy":"export","key":"shop-1","holder":"b"}`, &l2))
	require.Equal(t, http.StatusConflict, f.call(t, "POST", "/v1/leases", `{"policy":"export","key":"shop-1","holder":"c"}`, nil))
	b.open(t, f.url+"/ui/leases")
	tokens := eval[[]string](t, b, `[...document.querySelectorAll('#leases tr[data-key="shop-1"] .token')].map(e => e.textContent.trim())`)
	require.ElementsMatch(t, []string{strconv.FormatInt(l1.Token, 10), strconv.FormatInt(l2.Token, 10)}, tokens)
	require.Equal(t, "2 / 2", b.text(t, `#leases tr[data-key="shop-1"] td:nth-child(3)`))
	require.Equal(t, "1", b.text(t, `#leases tr[data-key="shop-1"] td:nth-child(7)`), "the refused ask")
	// c waits for a permit: one waiter, by c's fingerprint.
	var listedC struct{ Leases []struct{ Holder string } }
	require.Equal(t, "1", b.text(t, `#leases tr[data-key="shop-1"] .n-waiting`))
	require.Contains(t, b.text(t, `#leases tr[data-key="shop-1"] .waiters`), fingerprintOf(t, "c"))
	b.waitFor(t, "an expiry countdown", `/^\d+ s$/.test(document.querySelector('#leases time[data-until]').textContent)`)
	b.accessibility(t, "leases")
	b.screenshots(t, "leases")
	b.confirm(t, `#leases tr[data-key="shop-1"] button.danger`)
	b.waitFor(t, "one holder left", `document.querySelectorAll('#leases tr[data-key="shop-1"] .token').length === 1`)
	var listed struct{ Leases []struct{ Token int64 } }
	require.Equal(t, http.StatusOK, f.call(t, "GET", "/v1/leases?policy=export&key=shop-1", "", &listed))
	require.Len(t, listed.Leases, 1)
	// The freed permit goes to c, which waits no more.
	require.Equal(t, http.StatusCreated, f.call(t, "POST", "/v1/leases", `{"policy":"export","key":"shop-1","holder":"c"}`, nil))
	b.waitFor(t, "no waiter left", `document.querySelector('#leases tr[data-key="shop-1"] .n-waiting').textContent.trim() === "0"`)
	require.Equal(t, http.StatusOK, f.call(t, "GET", "/v1/leases?policy=export&key=shop-1", "", &listedC))
	require.Len(t, listedC.Leases, 2)

	// --- Slots: the heatmap holds the assigned events; full windows are CLOSED.
	require.Equal(t, http.StatusCreated, f.call(t, "POST", "/admin/rate-limit/config", `{"configName":"payouts","maxPerWindow":2,"windowSize":"PT1M"}`, nil))
	// Five minutes ahead: the page's 48 windows from the current one hold
	// them all, even if a minute turns while the test runs.
	now := time.Now().Add(5 * time.Minute).UTC().Format(time.RFC3339Nano)
	var batch struct{ Assigned, Exhausted int }
	events := make([]string, 7)
	for i := range events {
		events[i] = fmt.Sprintf(`{"eventId":"pay-%d","requestedTime":%q}`, i, now)
	}
	require.Equal(t, http.StatusOK, f.call(t, "POST", "/api/v1/slots/batch", `{"configName":"payouts","events":[`+strings.Join(events, ",")+`]}`, &batch))
	require.Equal(t, 7, batch.Assigned)
	b.open(t, f.url+"/ui/slots")
	require.Equal(t, 48, eval[int](t, b, `document.querySelectorAll('[data-config="payouts"] .heatmap .cell').length`))
	require.Equal(t, 7, eval[int](t, b, `[...document.querySelectorAll('[data-config="payouts"] .heatmap .cell')].reduce((s, e) => s + Number(e.dataset.count), 0)`))
	require.GreaterOrEqual(t, eval[int](t, b, `document.querySelectorAll('[data-config="payouts"] .heatmap .cell.closed').length`), 3,
		"7 events in windows of 2: at least three full windows")
	b.accessibility(t, "slots")
	b.screenshots(t, "slots")
	b.confirm(t, `form[action="/ui/actions/slots/flush"] button`)

	// --- Jobs: pausing the connector from the page stops its jobs.
	require.Equal(t, http.StatusCreated, f.call(t, "PUT", "/v1/connectors/binance", `{"policies":["api"]}`, nil))
	for _, id := range []string{"binance-btc-1m", "binance-eth-1m"} {
		require.Equal(t, http.StatusCreated, f.call(t, "PUT", "/v1/jobs/"+id, `{"connector_id":"binance","type":"ohlcv"}`, nil))
	}
	claimed := f.claim(t)
	require.Len(t, claimed, 2)
	tok := claimed["binance-btc-1m"]
	require.Equal(t, http.StatusNoContent, f.call(t, "POST", "/v1/jobs/binance-btc-1m/commit", fmt.Sprintf(`{"token":%d,"cursor":"2026-11-26T00:00Z"}`, tok), nil))
	require.Equal(t, http.StatusNoContent, f.call(t, "POST", "/v1/jobs/binance-btc-1m/finish", fmt.Sprintf(`{"token":%d,"requests":3}`, tok), nil))
	require.Equal(t, http.StatusNoContent, f.call(t, "POST", "/v1/jobs/binance-eth-1m/release", fmt.Sprintf(`{"token":%d}`, claimed["binance-eth-1m"]), nil))
	b.open(t, f.url+"/ui/jobs")
	require.Equal(t, "active", b.text(t, `#connectors tr[data-connector="binance"] .status`))
	require.Equal(t, "2026-11-26T00:00Z", b.text(t, `#jobs tr[data-job="binance-btc-1m"] td:nth-child(6)`))
	require.Equal(t, 2, eval[int](t, b, `document.querySelectorAll("#runs tbody tr").length`))
	require.Equal(t, "2", b.text(t, "#runs tbody tr:first-child td:first-child"), "the latest run first")
	require.Equal(t, "released", b.text(t, "#runs tbody tr:first-child td:nth-child(6)"))
	b.accessibility(t, "jobs")
	b.screenshots(t, "jobs")
	b.confirm(t, `#connectors tr[data-connector="binance"] button`)
	b.waitFor(t, "the paused connector", `document.querySelector('#connectors tr[data-connector="binance"] .status').textContent.trim() === "paused"`)
	var c store.Connector
	require.Equal(t, http.StatusOK, f.call(t, "GET", "/v1/connectors/binance", "", &c))
	require.Equal(t, store.ConnectorPaused, c.Status)
	require.Empty(t, f.claim(t), "a paused connector's jobs must not be claimed")
	b.confirm(t, `#connectors tr[data-connector="binance"] button`)
	b.waitFor(t, "the resumed connector", `document.querySelector('#connectors tr[data-connector="binance"] .status').textContent.trim() === "active"`)
	require.Len(t, f.claim(t), 2, "resumed, its jobs are claimed again")
	b.screenshots(t, "jobs-after")

	// --- The fleet: the peer server made no decision and served no lease,
	// yet shows the fleet's leases, slots and jobs from the shared
	// stores, and says which of its numbers are its own.
	b.open(t, f.peer+"/ui/")
	require.Equal(t, "0", b.text(t, `.card[data-policy="api"] .n-allowed`), "the peer counts only its own decisions")
	require.Contains(t, b.text(t, `section[aria-labelledby="dec-h"] .scope`), "This server only")
	b.open(t, f.peer+"/ui/leases?policy=export&key=shop-1")
	var fleet struct{ Leases []struct{ Token int64 } }
	require.Equal(t, http.StatusOK, f.call(t, "GET", "/v1/leases?policy=export&key=shop-1", "", &fleet))
	var want []string
	for _, l := range fleet.Leases {
		want = append(want, strconv.FormatInt(l.Token, 10))
	}
	require.ElementsMatch(t, want, eval[[]string](t, b, `[...document.querySelectorAll('#leases tr[data-key="shop-1"] .token')].map(e => e.textContent.trim())`),
		"the peer shows the leases taken through the other server")
	require.Equal(t, "0", b.text(t, `#leases tr[data-key="shop-1"] .n-waiting`), "waiters are the asks this server answered")
	require.Equal(t, []string{"fleet", "server"}, eval[[]string](t, b, `[...document.querySelectorAll("#live .scope")].map(e => e.dataset.scope)`))
	b.screenshots(t, "peer-leases")
	b.open(t, f.peer+"/ui/slots?config=payouts")
	require.Equal(t, 7, eval[int](t, b, `[...document.querySelectorAll('[data-config="payouts"] .heatmap .cell')].reduce((s, e) => s + Number(e.dataset.count), 0)`))
	b.open(t, f.peer+"/ui/jobs")
	require.Equal(t, "active", b.text(t, `#connectors tr[data-connector="binance"] .status`))
	require.Equal(t, "fleet", eval[string](t, b, `document.querySelector("#live .scope").dataset.scope`))
	t.Logf("screenshots in %s", b.shotTo)
}

// fingerprintOf is the fingerprint the API lists a holder by.
func fingerprintOf(t *testing.T, holder string) string {
	t.Helper()
	h := sha256.Sum256([]byte(holder))
	return hex.EncodeToString(h[:8])
}

// markPage marks the open page's window, so that samePage can tell a live
// refresh (the mark stays) from a reload (it is gone).
func (b *browser) markPage(t *testing.T) {
	t.Helper()
	b.do(t, chromedp.Evaluate[chromedp.Void](`window.sluiceTestMark = "kept"`))
}

// samePage fails when the page was reloaded since markPage.
func (b *browser) samePage(t *testing.T) {
	t.Helper()
	require.Equal(t, "kept", eval[string](t, b, `window.sluiceTestMark || "reloaded"`), "the live refresh reloaded the page")
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
