package outbound_test

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/store"
)

func aimdStart(r float64) aimd.Config    { return aimd.Config{Start: r} }
func aimdDecrease(f float64) aimd.Config { return aimd.Config{Decrease: f} }

// attempts returns sluice_outbound_attempts_total{key, outcome}.
func attempts(t *testing.T, reg *prometheus.Registry, key, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sluice_outbound_attempts_total" {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if (l.GetName() == "key" && l.GetValue() != key) || (l.GetName() == "outcome" && l.GetValue() != outcome) {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

type ioReadCloser = io.ReadCloser

func nopBody(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

// watched is a fake clock that reports the deadline of every timer the
// code under test starts, so that a test moves time on only once a call
// waits on it, and exactly to the instant it waits for. Timers of a minute
// or more (the client's idle sweep) are not reported.
type watched struct {
	*clocktest.Clock
	mu    sync.Mutex // a timer's deadline is read and set at one instant
	waits chan time.Time
}

func watch(t0 time.Time) *watched {
	return &watched{Clock: clocktest.New(t0), waits: make(chan time.Time, 1024)}
}

func (w *watched) NewTimer(d time.Duration) clock.Timer {
	w.mu.Lock()
	when := w.Clock.Now().Add(d)
	tm := w.Clock.NewTimer(d)
	w.mu.Unlock()
	if d > 0 && d < time.Minute {
		select {
		case w.waits <- when:
		default: // a test that drives nothing: drive would fail
		}
	}
	return tm
}

// advanceTo moves the clock on to when, if it is not there yet.
func (w *watched) advanceTo(when time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.Clock.Now().Before(when) {
		w.Clock.Set(when)
	}
}

// driveAll runs n calls of f at once and moves w on only when every call
// still running waits on a timer, and then to the earliest of them: so a
// call woken at its turn acts at that instant, before the clock moves on
// for another. It fails the test when the calls neither finish nor wait on
// the clock for a minute of real time.
func driveAll(t *testing.T, w *watched, n int, f func()) {
	t.Helper()
	var live atomic.Int64
	live.Store(int64(n))
	done := make(chan struct{}, n)
	for range n {
		go func() {
			defer func() {
				live.Add(-1)
				done <- struct{}{}
			}()
			f()
		}()
	}
	var pending []time.Time // deadlines of timers not yet reached
	for finished := 0; finished < n; {
		now := w.Now()
		pending = slices.DeleteFunc(pending, func(d time.Time) bool { return !d.After(now) })
		if len(pending) > 0 && int64(len(pending)) == live.Load() {
			w.advanceTo(slices.MinFunc(pending, time.Time.Compare))
			continue
		}
		select {
		case <-done:
			finished++
		case when := <-w.waits:
			pending = append(pending, when)
		case <-time.After(time.Minute):
			t.Fatal("the calls neither finished nor waited on the clock")
		}
	}
}

// drive runs f and moves w on to each timer the code under test waits on,
// until f returns. It fails the test when f neither returns nor waits on
// the clock for 10 s of real time.
func drive(t *testing.T, w *watched, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	for {
		select {
		case <-done:
			return
		case when := <-w.waits:
			w.advanceTo(when)
		case <-time.After(time.Minute):
			t.Fatal("the call neither returned nor waited on the clock")
		}
	}
}

// getAdvancing makes one call through c to u and closes its body, moving
// w on to every timer the call waits on (for a pause, or its turn).
func getAdvancing(t *testing.T, w *watched, c http.RoundTripper, u string) {
	t.Helper()
	drive(t, w, func() {
		resp := get(t, c, u)
		_ = resp.Body.Close()
	})
}

// fleetOf returns two clients, as two processes sharing st, over a and b:
// a start far above any limit, no latency rule, no retries.
func fleetOf(t *testing.T, st store.RateStore, clk clock.Clock, a, b http.RoundTripper) (ca, cb *outbound.Client) {
	t.Helper()
	cfg := func(base http.RoundTripper) outbound.Config {
		return outbound.Config{Base: base, Store: st, Clock: clk, AIMD: aimd.Config{Start: 1e4, IgnoreLatency: true},
			Retry: retry.Config{MaxAttempts: 1}}
	}
	ca, err := outbound.New(cfg(a))
	require.NoError(t, err)
	cb, err = outbound.New(cfg(b))
	require.NoError(t, err)
	return ca, cb
}
