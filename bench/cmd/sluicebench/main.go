// Command sluicebench runs Sluice side by side with golang.org/x/time/rate,
// go.uber.org/ratelimit and throttled/v2 in one process and prints each
// figure, the ratios against the targets, and the HTTP figure of
// POST /v1/take over loopback; then the shared-state figures: Sluice's
// Redis store against go-redis/redis_rate, its PostgreSQL store against a
// bare UPDATE, and its SQLite store, on the local servers (a section whose
// server is unreachable is skipped).
//
//	go run ./cmd/sluicebench                 # 5 rounds, medians
//	go run ./cmd/sluicebench -rounds 1       # quick look
//	go run ./cmd/sluicebench -only 'serial/allowed|http'
//	go run ./cmd/sluicebench -only '^(redis|postgres|sqlite)/'
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicerl/sluice/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sluicebench:", err)
		os.Exit(1)
	}
}

// httpID is the -only name of the HTTP figure.
const httpID = "http/take"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sluicebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rounds := fs.Int("rounds", 5, "rounds of every benchmark; figures are medians over rounds")
	only := fs.String("only", "", "run only cases whose id matches this regexp (ids: sluicebench -list)")
	benchtime := fs.String("benchtime", "1s", "testing benchtime of each benchmark run: a duration or Nx")
	httpDur := fs.Duration("http-duration", 5*time.Second, "how long the HTTP load is measured")
	httpConns := fs.Int("http-conns", 64, "HTTP client goroutines and connections")
	slice := fs.Duration("slice", 250*time.Millisecond, "shared-state figures: length of one alternation slice")
	nslices := fs.Int("slices", 4, "shared-state figures: slices per case per round")
	list := fs.Bool("list", false, "list the case ids and exit")
	leaseDur := fs.Duration("lease-duration", time.Second, "lease figures: how long each pairs/s round runs")
	slotsDur := fs.Duration("slots-duration", 5*time.Second, "slots figures: how long the single-event and HTTP loads run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds must be >= 1, got %d", *rounds)
	}
	if *slice <= 0 || *nslices < 1 {
		return fmt.Errorf("-slice must be > 0 and -slices >= 1, got %s and %d", *slice, *nslices)
	}
	testing.Init()
	if err := flag.CommandLine.Set("test.benchtime", *benchtime); err != nil {
		return fmt.Errorf("-benchtime: %w", err)
	}
	var re *regexp.Regexp
	if *only != "" {
		var err error
		if re, err = regexp.Compile(*only); err != nil {
			return fmt.Errorf("-only: %w", err)
		}
	}
	match := func(id string) bool { return re == nil || re.MatchString(id) }

	var cases []bench.Case
	for _, c := range bench.Cases() {
		if match(c.ID) {
			cases = append(cases, c)
		}
	}
	sections := bench.SharedSections(bench.SharedConfig{})
	shared := make([][]bench.SharedCase, len(sections))
	nshared := 0
	for i, sec := range sections {
		for _, c := range sec.Cases {
			if match(c.ID) {
				shared[i] = append(shared[i], c)
				nshared++
			}
		}
	}
	if *list {
		for _, c := range bench.Cases() {
			fmt.Fprintf(stdout, "%-44s %s\n", c.ID, c.Label)
		}
		fmt.Fprintf(stdout, "%-44s %s\n", httpID, "POST /v1/take over loopback HTTP")
		fmt.Fprintf(stdout, "%-44s %s\n", httpAuthID, "POST /v1/take over loopback HTTP, without and with auth (authfig.go)")
		for _, sec := range sections {
			for _, c := range sec.Cases {
				fmt.Fprintf(stdout, "%-50s %s (goroutines: %d)\n", c.ID, c.Label, c.Workers)
			}
		}
		for _, id := range leaseIDs() {
			fmt.Fprintf(stdout, "%-50s lease figure (see lease.go)\n", id)
		}
		for _, c := range slotCases {
			fmt.Fprintf(stdout, "%-44s %s\n", c.id, c.label)
		}
		return nil
	}
	runHTTP := match(httpID)
	runHTTPAuth := match(httpAuthID)
	runLeases := slices.ContainsFunc(leaseIDs(), match)
	nslots := 0
	for _, c := range slotCases {
		if match(c.id) {
			nslots++
		}
	}
	if len(cases) == 0 && !runHTTP && !runHTTPAuth && nshared == 0 && !runLeases && nslots == 0 {
		return fmt.Errorf("-only %q matches no case (see -list)", *only)
	}

	w := bufio.NewWriter(stdout)
	defer w.Flush()
	header(w, *rounds, *benchtime)
	w.Flush()

	// Rounds are interleaved (every case once per round) so that drift in
	// the machine's load touches every case alike.
	results := make(map[string][]testing.BenchmarkResult, len(cases))
	for r := range *rounds {
		for _, c := range cases {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res := testing.Benchmark(c.F)
			if res.N == 0 {
				return fmt.Errorf("benchmark %s failed", c.ID)
			}
			results[c.ID] = append(results[c.ID], res)
			fmt.Fprintf(stderr, "round %d/%d  %-32s %10.1f ns/op\n", r+1, *rounds, c.ID, nsPerOp(res))
		}
	}

	figs := make(map[string]figure, len(cases))
	for _, c := range cases {
		figs[c.ID] = summarize(results[c.ID])
	}
	for _, g := range bench.Groups {
		var in []bench.Case
		for _, c := range cases {
			if c.Group == g {
				in = append(in, c)
			}
		}
		if len(in) == 0 {
			continue
		}
		table(w, g, in, figs)
		ratios(w, g, figs)
	}

	if runHTTP {
		w.Flush()
		if err := httpFigure(ctx, w, stderr, *httpConns, *httpDur); err != nil {
			return err
		}
	}
	if runHTTPAuth {
		w.Flush()
		if err := httpAuthFigure(ctx, w, stderr, *rounds, *httpConns, *httpDur); err != nil {
			return err
		}
	}

	if nshared > 0 {
		o := sharedOpts{rounds: *rounds, slice: *slice, slices: *nslices}
		sharedHeader(w, o)
		for i, sec := range sections {
			if len(shared[i]) == 0 {
				continue
			}
			if err := runSection(ctx, w, stderr, sec, shared[i], o); err != nil {
				return fmt.Errorf("%s: %w", sec.Name, err)
			}
			w.Flush()
		}
	}
	if runLeases {
		if err := leaseFigures(ctx, w, stderr, match, *rounds, *leaseDur); err != nil {
			return fmt.Errorf("leases: %w", err)
		}
	}
	if nslots > 0 {
		pg := os.Getenv("SLUICE_TEST_POSTGRES_URL")
		if pg == "" {
			pg = bench.DefaultPostgresURL
		}
		if err := slotsFigures(ctx, w, stderr, match, slotsOpts{duration: *slotsDur, pgURL: pg}); err != nil {
			return err
		}
	}
	return nil
}

func header(w io.Writer, rounds int, benchtime string) {
	fmt.Fprintf(w, "sluicebench: Sluice and its peers in one process\n")
	fmt.Fprintf(w, "%s %s/%s, cpu: %s, NumCPU=%d, GOMAXPROCS=%d\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "rounds=%d benchtime=%s (testing.Benchmark); ns/op and allocs/op are medians over rounds,\n", rounds, benchtime)
	fmt.Fprintf(w, "spread = (max-min)/median ns/op; allowed = share of calls the limiter allowed;\n")
	fmt.Fprintf(w, "cpu-ns/op = process CPU time per call (all threads), less disturbed than ns/op by other load;\n")
	fmt.Fprintf(w, "cores = cpu-ns/op / ns/op: ~1 for a serial case that had a core to itself (< 0.8: starved),\n")
	fmt.Fprintf(w, "up to GOMAXPROCS for a parallel case (less: goroutines waited on locks or the machine was busy).\n")
	fmt.Fprintf(w, "always allowed: rate 1e6/s, burst 2^40 for every limiter; mostly denied: rate 1/s, burst 1.\n")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// figure is the summary of one case over its rounds.
type figure struct {
	ns      float64 // median ns/op
	cpu     float64 // median process CPU ns/op (NaN if unknown)
	allocs  int64   // median allocs/op
	bytes   int64   // median B/op
	allowed float64 // median share allowed
	spread  float64 // (max-min)/median of ns/op
	rounds  int
}

func (f figure) opsPerSec() float64 { return 1e9 / f.ns }

// cores is the CPU the process used while the case ran, in cores: about 1
// for a serial case that had a core to itself, up to GOMAXPROCS for a
// parallel one. A serial case well below 1 was starved by other load.
func (f figure) cores() float64 { return f.cpu / f.ns }

// starved reports whether a serial figure's wall time is mostly time the
// process was not running.
func (f figure) starved() bool { return f.cores() < 0.8 }

func nsPerOp(r testing.BenchmarkResult) float64 {
	return float64(r.T.Nanoseconds()) / float64(r.N)
}

func summarize(rs []testing.BenchmarkResult) figure {
	ns := make([]float64, len(rs))
	allocs := make([]float64, len(rs))
	bytes := make([]float64, len(rs))
	allowed := make([]float64, len(rs))
	cpu := make([]float64, len(rs))
	for i, r := range rs {
		cpu[i] = bench.CPUPerOp(r)
		ns[i] = nsPerOp(r)
		allocs[i] = float64(r.AllocsPerOp())
		bytes[i] = float64(r.AllocedBytesPerOp())
		allowed[i] = bench.AllowedShare(r)
	}
	f := figure{
		ns:      median(ns),
		cpu:     median(cpu),
		allocs:  int64(median(allocs)),
		bytes:   int64(median(bytes)),
		allowed: median(allowed),
		rounds:  len(rs),
	}
	f.spread = (slices.Max(ns) - slices.Min(ns)) / f.ns
	return f
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func table(w io.Writer, g bench.Group, cases []bench.Case, figs map[string]figure) {
	fmt.Fprintf(w, "\n== %s ==\n", g)
	fmt.Fprintf(w, "%-42s %9s %9s %6s %13s %8s %7s %10s %6s\n", "name", "ns/op", "allocs/op", "B/op", "ops/s", "allowed", "spread", "cpu-ns/op", "cores")
	for _, c := range cases {
		f := figs[c.ID]
		fmt.Fprintf(w, "%-42s %9.1f %9d %6d %13s %8s %6.0f%% %10.1f %6.2f\n",
			c.Label, f.ns, f.allocs, f.bytes, group3(f.opsPerSec()), pct(f.allowed), 100*f.spread, f.cpu, f.cores())
	}
}

func pct(x float64) string {
	switch {
	case math.IsNaN(x):
		return "-"
	case x > 0 && x < 0.001:
		return "<0.1%"
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

// group3 formats a rate with thousands separators.
func group3(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ratio is one comparison printed under a group's table.
type ratio struct {
	num, den string // case ids
	text     string
	// target: "<=" means num/den ns/op at most limit; ">=" means num ops/s
	// at least limit times den's; "" is for information.
	op    string
	limit float64
}

var groupRatios = map[bench.Group][]ratio{
	bench.SerialAllowed: {
		{num: "serial/allowed/sluice-handle", den: "serial/allowed/xrate", text: "sluice Handle.Allow / x/time/rate Allow", op: "<=", limit: 1.0},
		{num: "serial/allowed/sluice-limiter", den: "serial/allowed/xrate", text: "sluice Limiter.Allow / x/time/rate Allow", op: "<=", limit: 1.0},
		{num: "serial/allowed/sluice-handle", den: "serial/allowed/uber", text: "sluice Handle.Allow / uber ratelimit Take"},
		{num: "serial/allowed/sluice-handle", den: "serial/allowed/throttled", text: "sluice Handle.Allow / throttled GCRA"},
		{num: "serial/allowed/ref-memstore", den: "serial/allowed/xrate", text: "(ref) memstore.Take / x/time/rate Allow"},
		{num: "serial/allowed/ref-gcra", den: "serial/allowed/xrate", text: "(ref) gcra.Take+time.Now / x/time/rate Allow"},
	},
	bench.SerialDenied: {
		{num: "serial/denied/sluice-handle", den: "serial/denied/xrate", text: "sluice Handle.Allow / x/time/rate Allow", op: "<=", limit: 1.0},
		{num: "serial/denied/sluice-limiter", den: "serial/denied/xrate", text: "sluice Limiter.Allow / x/time/rate Allow", op: "<=", limit: 1.0},
		{num: "serial/denied/sluice-handle", den: "serial/denied/throttled", text: "sluice Handle.Allow / throttled GCRA"},
	},
	bench.Parallel10k: {
		{num: "parallel/sluice-handle", den: "parallel/mutexmap-xrate", text: "sluice ops/s / mutex map[string]*rate.Limiter ops/s", op: ">=", limit: 2.0},
		{num: "parallel/sluice-handle", den: "parallel/throttled", text: "sluice ops/s / throttled GCRA memstore (map) ops/s"},
		{num: "parallel/sluice-handle", den: "parallel/throttled-lru", text: "sluice ops/s / throttled GCRA memstore (LRU) ops/s"},
	},
}

func ratios(w io.Writer, g bench.Group, figs map[string]figure) {
	var lines []string
	for _, r := range groupRatios[g] {
		n, ok1 := figs[r.num]
		d, ok2 := figs[r.den]
		if !ok1 || !ok2 {
			continue
		}
		var x, xcpu float64
		if g == bench.Parallel10k {
			x = n.opsPerSec() / d.opsPerSec()
			xcpu = d.cpu / n.cpu // CPU spent per op, inverted like ops/s
		} else {
			x = n.ns / d.ns
			xcpu = n.cpu / d.cpu
		}
		line := fmt.Sprintf("  %s = %.2fx", r.text, x)
		switch r.op {
		case "<=":
			line += fmt.Sprintf(" (target <= %.1f) %s", r.limit, verdict(x <= r.limit))
		case ">=":
			line += fmt.Sprintf(" (target >= %.1f) %s", r.limit, verdict(x >= r.limit))
		}
		if !math.IsNaN(xcpu) {
			line += fmt.Sprintf("  [by cpu-ns/op: %.2fx]", xcpu)
			if g != bench.Parallel10k && (n.starved() || d.starved()) {
				line += " STARVED: wall time is mostly time off-CPU, trust the cpu ratio"
			}
		}
		lines = append(lines, line)
	}
	// Sluice's decision path must not allocate.
	var allocs []string
	for id, f := range figs {
		if strings.Contains(id, "sluice") && strings.HasPrefix(id, groupPrefix(g)) {
			allocs = append(allocs, fmt.Sprintf("  %s allocs/op = %d (target 0) %s", id, f.allocs, verdict(f.allocs == 0)))
		}
	}
	slices.Sort(allocs)
	lines = append(lines, allocs...)
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "ratios (median ns/op for serial, ops/s for parallel):")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

func groupPrefix(g bench.Group) string {
	switch g {
	case bench.SerialAllowed:
		return "serial/allowed/"
	case bench.SerialDenied:
		return "serial/denied/"
	}
	return "parallel/"
}

func verdict(ok bool) string {
	if ok {
		return "OK"
	}
	return "MISS"
}

func httpFigure(ctx context.Context, w *bufio.Writer, stderr io.Writer, conns int, dur time.Duration) error {
	fmt.Fprintf(w, "\n== POST /v1/take over loopback HTTP ==\n")
	lim, err := bench.TakeLimiter()
	if err != nil {
		return err
	}
	h, err := bench.TakeHandler(lim)
	if err != nil {
		fmt.Fprintf(w, "skipped: %v\n", err)
		return nil
	}
	fmt.Fprintf(stderr, "http: %d connections for %s (+500ms warmup)\n", conns, dur)
	res, err := bench.RunHTTP(ctx, h, bench.HTTPConfig{Conns: conns, Duration: dur})
	if err != nil {
		fmt.Fprintf(w, "failed: %v\n", err)
		return err
	}
	fmt.Fprintf(w, "server.New(server.Config{Limiter: lim}).Handler() on %s (net/http, same process);\n", res.Addr)
	fmt.Fprintf(w, "load: %d goroutines, net/http client, MaxConnsPerHost=%d, keys cycled over %d, %s after 500ms warmup.\n",
		res.Conns, res.Conns, bench.NumKeys, res.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "The load generator shares the %d CPUs (GOMAXPROCS=%d) with the server.\n", runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "%12s %10s %10s %10s %10s %10s %10s %8s %8s\n", "requests/s", "p50", "p90", "p99", "p99.9", "max", "requests", "429s", "errors")
	fmt.Fprintf(w, "%12s %10s %10s %10s %10s %10s %10d %8d %8d\n", group3(res.RPS()),
		dur3(res.P50), dur3(res.P90), dur3(res.P99), dur3(res.P999), dur3(res.Max), res.Requests, res.Limited, res.Errors)
	if res.Errors > 0 {
		fmt.Fprintf(w, "first error: %s\n", res.FirstErr)
	}
	return nil
}

func dur3(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
}
