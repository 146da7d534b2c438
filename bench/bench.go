// Package bench runs Sluice side by side with the rate limiters Go programs
// commonly use instead: golang.org/x/time/rate, go.uber.org/ratelimit and
// github.com/throttled/throttled/v2 (GCRA over its memstore).
//
// It lives in its own module so that the peers never enter Sluice's main
// module. Every benchmark is a plain func(*testing.B): cmd/sluicebench runs
// them with testing.Benchmark over several rounds and prints medians and
// ratios, and bench_test.go runs the same functions under `go test -bench`.
//
// The HTTP figure (POST /v1/take over loopback) is not a testing.B benchmark
// in the program: RunHTTP drives the server for a fixed duration and reports
// requests per second and latency percentiles.
//
// The shared-state figures (SharedSections) run Sluice's Redis, PostgreSQL
// and SQLite stores on the local servers, against
// github.com/go-redis/redis_rate/v10 and the floors of one round trip (a
// bare EVALSHA) and one statement per decision (a bare UPDATE).
package bench

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttled/throttled/v2"
	tmemstore "github.com/throttled/throttled/v2/store/memstore"
	"go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/sluicerl/sluice/gcra"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Group is a set of cases that are compared with each other.
type Group string

// The groups, in the order they are printed.
const (
	SerialAllowed Group = "serial, single key, always allowed"
	SerialDenied  Group = "serial, single key, mostly denied (rate 1/s, burst 1)"
	Parallel10k   Group = "parallel (b.RunParallel), 10,000 keys, always allowed"
)

// Groups lists the groups in print order.
var Groups = []Group{SerialAllowed, SerialDenied, Parallel10k}

// Case is one benchmark.
type Case struct {
	// ID is a short slash-separated name, matched by -only and used as the
	// sub-benchmark name under go test.
	ID string
	// Label is the name printed in the table.
	Label string
	Group Group
	// Reference marks a case that is only a floor for reading the profile
	// (it is not a peer and has no target).
	Reference bool
	F         func(b *testing.B)
}

// The always-allowed limit: 1e6 units per second (the finest rate a Sluice
// policy can express, one unit per microsecond) with a burst of 2^40, so
// that no benchmark run of any realistic length can exhaust it even at
// hundreds of millions of calls per second. Every peer gets the same
// numbers.
const (
	allowRate  = 1_000_000
	allowBurst = 1 << 40
)

// NumKeys is the number of distinct keys of the parallel benchmarks.
const NumKeys = 10_000

// Keys are the precomputed keys of the parallel benchmarks, so that choosing
// a key never allocates.
var Keys = func() []string {
	ks := make([]string, NumKeys)
	for i := range ks {
		ks[i] = "tenant-" + strconv.Itoa(i)
	}
	return ks
}()

// Cases returns every benchmark, grouped and in print order.
func Cases() []Case {
	return []Case{
		{ID: "serial/allowed/sluice-handle", Label: "sluice Handle.Allow", Group: SerialAllowed, F: serialSluiceHandle(allowRate, allowBurst)},
		{ID: "serial/allowed/sluice-limiter", Label: "sluice Limiter.Allow", Group: SerialAllowed, F: serialSluiceLimiter(allowRate, allowBurst)},
		{ID: "serial/allowed/xrate", Label: "x/time/rate Allow", Group: SerialAllowed, F: serialXRate(allowRate, allowBurst)},
		{ID: "serial/allowed/uber", Label: "uber ratelimit Take (1e9/s, never sleeps)", Group: SerialAllowed, F: serialUber},
		{ID: "serial/allowed/throttled", Label: "throttled GCRA RateLimitCtx", Group: SerialAllowed, F: serialThrottled(allowRate, allowBurst)},
		{ID: "serial/allowed/ref-memstore", Label: "(ref) sluice memstore.Take, no facade", Group: SerialAllowed, Reference: true, F: serialMemstore(allowRate, allowBurst)},
		{ID: "serial/allowed/ref-gcra", Label: "(ref) gcra.Take + time.Now, no store", Group: SerialAllowed, Reference: true, F: serialGCRA(allowRate, allowBurst)},

		{ID: "serial/denied/sluice-handle", Label: "sluice Handle.Allow", Group: SerialDenied, F: serialSluiceHandle(1, 1)},
		{ID: "serial/denied/sluice-limiter", Label: "sluice Limiter.Allow", Group: SerialDenied, F: serialSluiceLimiter(1, 1)},
		{ID: "serial/denied/xrate", Label: "x/time/rate Allow", Group: SerialDenied, F: serialXRate(1, 1)},
		{ID: "serial/denied/throttled", Label: "throttled GCRA RateLimitCtx", Group: SerialDenied, F: serialThrottled(1, 1)},

		{ID: "parallel/sluice-handle", Label: "sluice Handle.Allow", Group: Parallel10k, F: parallelSluice},
		{ID: "parallel/mutexmap-xrate", Label: "mutex map[string]*rate.Limiter", Group: Parallel10k, F: parallelMutexMap},
		{ID: "parallel/throttled", Label: "throttled GCRA memstore (map)", Group: Parallel10k, F: parallelThrottled(0)},
		{ID: "parallel/throttled-lru", Label: "throttled GCRA memstore (LRU 65536)", Group: Parallel10k, F: parallelThrottled(1 << 16)},
	}
}

// The units of the extra metrics every benchmark reports.
const (
	// allowedMetric is the share of calls that were allowed.
	allowedMetric = "allowed/op"
	// cpuMetric is the process CPU time (user+system) per call. On a
	// machine shared with other work it moves less than wall time, which
	// counts the time the benchmark was not scheduled.
	cpuMetric = "cpu-ns/op"
)

// meter times the measured loop of a benchmark.
type meter struct {
	b    *testing.B
	cpu0 time.Duration
}

// startMeter resets the benchmark timer and starts counting CPU time.
func startMeter(b *testing.B) meter {
	b.ReportAllocs()
	cpu0 := processCPU() // before ResetTimer: getrusage's buffer is not the benchmark's
	b.ResetTimer()
	return meter{b: b, cpu0: cpu0}
}

// stop stops the timer and reports the extra metrics.
func (m meter) stop(allowed int64) {
	m.b.StopTimer()
	n := float64(max(m.b.N, 1))
	if cpu := processCPU(); cpu > 0 {
		m.b.ReportMetric(float64(cpu-m.cpu0)/n, cpuMetric)
	}
	m.b.ReportMetric(float64(allowed)/n, allowedMetric)
}

// CPUPerOp returns the process CPU nanoseconds per call of a result, or NaN
// where the platform does not say.
func CPUPerOp(r testing.BenchmarkResult) float64 {
	v, ok := r.Extra[cpuMetric]
	if !ok {
		return math.NaN()
	}
	return v
}

// AllowedShare returns the share of calls allowed in a result, or NaN.
func AllowedShare(r testing.BenchmarkResult) float64 {
	v, ok := r.Extra[allowedMetric]
	if !ok {
		return math.NaN()
	}
	return v
}

func newSluice(b *testing.B, r, burst int64) *limiter.Limiter {
	lim, err := limiter.New(limiter.Config{Policies: []limiter.Policy{{Name: "p", Rate: r, Period: time.Second, Burst: burst}}})
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

func sluiceHandle(b *testing.B, r, burst int64) *limiter.Handle {
	h, err := newSluice(b, r, burst).Handle("p")
	if err != nil {
		b.Fatal(err)
	}
	return h
}

func serialSluiceHandle(r, burst int64) func(*testing.B) {
	return func(b *testing.B) {
		h := sluiceHandle(b, r, burst)
		ctx := context.Background()
		key := "k"
		_, _ = h.Allow(ctx, key) // the key's first state is inserted outside the timer
		var allowed int64
		m := startMeter(b)
		for range b.N {
			d, err := h.Allow(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
		}
		m.stop(allowed)
	}
}

func serialSluiceLimiter(r, burst int64) func(*testing.B) {
	return func(b *testing.B) {
		lim := newSluice(b, r, burst)
		ctx := context.Background()
		key := "k"
		_, _ = lim.Allow(ctx, "p", key)
		var allowed int64
		m := startMeter(b)
		for range b.N {
			d, err := lim.Allow(ctx, "p", key)
			if err != nil {
				b.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
		}
		m.stop(allowed)
	}
}

// serialMemstore calls the store directly, skipping the limiter facade: the
// difference to sluice-handle is what the facade costs.
func serialMemstore(r, burst int64) func(*testing.B) {
	return func(b *testing.B) {
		st := memstore.New(memstore.Config{})
		lim := store.Limit{Name: "p", Rate: r, Period: time.Second, Burst: burst}
		ctx := context.Background()
		_, _ = st.Take(ctx, store.TakeParams{Key: "k", Limit: lim, Cost: 1})
		var allowed int64
		m := startMeter(b)
		for range b.N {
			res, err := st.Take(ctx, store.TakeParams{Key: "k", Limit: lim, Cost: 1})
			if err != nil {
				b.Fatal(err)
			}
			if res.Allowed {
				allowed++
			}
		}
		m.stop(allowed)
	}
}

// serialGCRA is the arithmetic alone plus the clock read: the floor any
// store-backed decision sits on.
func serialGCRA(r, burst int64) func(*testing.B) {
	return func(b *testing.B) {
		l := gcra.Limit{Rate: r, Period: time.Second, Burst: burst}
		var s gcra.State
		var allowed int64
		m := startMeter(b)
		for range b.N {
			ns, d, err := gcra.Take(l, s, time.Now().UnixMicro(), 1, 0)
			if err != nil {
				b.Fatal(err)
			}
			s = ns
			if d.Allowed {
				allowed++
			}
		}
		m.stop(allowed)
	}
}

func serialXRate(r float64, burst int) func(*testing.B) {
	return func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(r), burst)
		var allowed int64
		m := startMeter(b)
		for range b.N {
			if l.Allow() {
				allowed++
			}
		}
		m.stop(allowed)
	}
}

// serialUber benchmarks go.uber.org/ratelimit, which has only a blocking
// Take. At 1e9 per second (one permit per nanosecond) a Take is always
// already due when it is called, so it never sleeps and the figure is the
// cost of its bookkeeping. There is no mostly-denied form: Take would sleep.
func serialUber(b *testing.B) {
	l := ratelimit.New(1_000_000_000)
	var slept int64
	m := startMeter(b)
	for range b.N {
		t0 := time.Now()
		if l.Take().After(t0.Add(time.Millisecond)) {
			slept++ // would mean it slept: the figure would be wrong
		}
	}
	m.stop(int64(b.N) - slept)
}

func newThrottled(b *testing.B, perSec, burst, maxKeys int) *throttled.GCRARateLimiterCtx {
	st, err := tmemstore.NewCtx(maxKeys)
	if err != nil {
		b.Fatal(err)
	}
	// throttled's MaxBurst is the burst beyond the first request, so a
	// burst of n is MaxBurst n-1.
	rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(perSec), MaxBurst: burst - 1})
	if err != nil {
		b.Fatal(err)
	}
	return rl
}

func serialThrottled(perSec, burst int) func(*testing.B) {
	return func(b *testing.B) {
		rl := newThrottled(b, perSec, burst, 0)
		ctx := context.Background()
		_, _, _ = rl.RateLimitCtx(ctx, "k", 1)
		var allowed int64
		m := startMeter(b)
		for range b.N {
			limited, _, err := rl.RateLimitCtx(ctx, "k", 1)
			if err != nil {
				b.Fatal(err)
			}
			if !limited {
				allowed++
			}
		}
		m.stop(allowed)
	}
}

// keyCursor walks Keys in a scattered order from a per-goroutine start.
type keyCursor struct{ i int }

var cursorSeed atomic.Int64

func newKeyCursor() keyCursor {
	return keyCursor{i: int(cursorSeed.Add(1)*1237) % NumKeys}
}

// nextIndex moves to the next key and returns its index. The stride is
// prime to NumKeys, so every goroutine visits all keys in an order that
// defeats sequential caching.
func (c *keyCursor) nextIndex() int {
	c.i += 7919
	if c.i >= NumKeys {
		c.i -= NumKeys
	}
	return c.i
}

// next moves to the next key and returns it.
func (c *keyCursor) next() string { return Keys[c.nextIndex()] }

// runParallel runs allow over Keys on GOMAXPROCS goroutines and reports the
// share allowed.
func runParallel(b *testing.B, allow func(key string) bool) {
	var allowed atomic.Int64
	m := startMeter(b)
	b.RunParallel(func(pb *testing.PB) {
		c := newKeyCursor()
		var n int64
		for pb.Next() {
			if allow(c.next()) {
				n++
			}
		}
		allowed.Add(n)
	})
	m.stop(allowed.Load())
}

// warm touches every key once so that the figures measure the steady state,
// not the first insertion of each key.
func warm(allow func(key string) bool) {
	for _, k := range Keys {
		allow(k)
	}
}

func parallelSluice(b *testing.B) {
	h := sluiceHandle(b, allowRate, allowBurst)
	ctx := context.Background()
	allow := func(key string) bool {
		d, err := h.Allow(ctx, key)
		if err != nil {
			panic(err)
		}
		return d.Allowed
	}
	warm(allow)
	runParallel(b, allow)
}

// MutexMap is the glue code programs write around x/time/rate to limit per
// key: one mutex over a map, get-or-create, unlock, Allow.
type MutexMap struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	r     rate.Limit
	burst int
}

// NewMutexMap returns an empty MutexMap whose limiters have rate r and burst.
func NewMutexMap(r rate.Limit, burst int) *MutexMap {
	return &MutexMap{m: make(map[string]*rate.Limiter), r: r, burst: burst}
}

// Allow reports whether key may act now.
func (mm *MutexMap) Allow(key string) bool {
	mm.mu.Lock()
	l, ok := mm.m[key]
	if !ok {
		l = rate.NewLimiter(mm.r, mm.burst)
		mm.m[key] = l
	}
	mm.mu.Unlock()
	return l.Allow()
}

func parallelMutexMap(b *testing.B) {
	mm := NewMutexMap(allowRate, allowBurst)
	warm(mm.Allow)
	runParallel(b, mm.Allow)
}

func parallelThrottled(maxKeys int) func(*testing.B) {
	return func(b *testing.B) {
		rl := newThrottled(b, allowRate, allowBurst, maxKeys)
		ctx := context.Background()
		allow := func(key string) bool {
			limited, _, err := rl.RateLimitCtx(ctx, key, 1)
			if err != nil {
				panic(err)
			}
			return !limited
		}
		warm(allow)
		runParallel(b, allow)
	}
}
