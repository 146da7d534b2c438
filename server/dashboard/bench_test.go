//go:build unix

package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/server/dashboard"
)

// benchHandler is the API over a roomy in-memory policy, with or without
// the dashboard's Recorder observing every decision.
func benchHandler(b *testing.B, observe bool) (http.Handler, *dashboard.Dashboard) {
	lim, err := limiter.New(limiter.Config{Policies: []limiter.Policy{{Name: "p", Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}}})
	if err != nil {
		b.Fatal(err)
	}
	cfg := server.Config{Limiter: lim}
	rec := dashboard.NewRecorder(nil)
	if observe {
		cfg.Observer = rec
	}
	srv, err := server.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Config{Limiter: lim, Recorder: rec, API: srv.Handler()})
	if err != nil {
		b.Fatal(err)
	}
	return dashboard.Mount(srv.Handler(), d), d
}

// cpuTime is the CPU time (user and system) this process has used: on a
// machine shared with other work it measures the cost of an operation
// better than the wall clock does.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports cpu-ns/op: the process's CPU time over the loop.
func reportCPU(b *testing.B, from time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-from)/float64(b.N), "cpu-ns/op")
}

// BenchmarkTake is POST /v1/take through the handler in process (no
// network), 1000 keys, with and without the Recorder: the dashboard's
// cost on the decision path. Read cpu-ns/op on a busy machine.
func BenchmarkTake(b *testing.B) {
	bodies := make([]string, 1000)
	for i := range bodies {
		bodies[i] = `{"policy":"p","key":"user-` + strconv.Itoa(i) + `"}`
	}
	for _, observe := range []bool{false, true} {
		name := "without-dashboard"
		if observe {
			name = "with-recorder"
		}
		b.Run(name, func(b *testing.B) {
			h, _ := benchHandler(b, observe)
			var n atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			from := cpuTime(b)
			defer reportCPU(b, from)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					req := httptest.NewRequest(http.MethodPost, "/v1/take", strings.NewReader(bodies[i%int64(len(bodies))]))
					req.Header.Set("Content-Type", "application/json")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						b.Fatalf("take: %d %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}

// BenchmarkOverviewRefresh is one refresh of an open overview page (its
// live part) after traffic on 1000 keys.
func BenchmarkOverviewRefresh(b *testing.B) {
	h, _ := benchHandler(b, true)
	for i := range 20000 {
		req := httptest.NewRequest(http.MethodPost, "/v1/take", strings.NewReader(`{"policy":"p","key":"user-`+strconv.Itoa(i%1000)+`"}`))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("take: %d %s", w.Code, w.Body)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	from := cpuTime(b)
	defer reportCPU(b, from)
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/ui/?fragment=1", nil))
		if w.Code != http.StatusOK {
			b.Fatalf("overview: %d", w.Code)
		}
	}
}

// BenchmarkObserveDecision is the Recorder's work on one decision, from
// parallel goroutines over 1000 keys: what the decision path pays.
func BenchmarkObserveDecision(b *testing.B) {
	rec := dashboard.NewRecorder(nil)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	from := cpuTime(b)
	defer reportCPU(b, from)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			rec.ObserveDecision(keys[i%int64(len(keys))], limiter.Decision{Policy: "p", Allowed: i%7 != 0, Limit: 100, Remaining: i % 100}, true)
		}
	})
}
