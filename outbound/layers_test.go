package outbound_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/breaker"
	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// fast is a config whose pacing and backoff do not slow a test down.
func fast(base http.RoundTripper) outbound.Config {
	return outbound.Config{Base: base, Burst: 100, AIMD: aimd.Config{Start: 1e4, IgnoreLatency: true},
		Retry: retry.Config{Base: time.Microsecond, Cap: time.Microsecond}}
}

func TestRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	base := &scripted{resps: []func() *http.Response{response(503, ""), response(502, ""), response(200, "ok")}}
	c, err := outbound.New(fast(base))
	require.NoError(t, err)
	resp := get(t, c, "http://api.test/")
	require.Equal(t, 200, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
	require.EqualValues(t, 3, base.calls.Load())
	require.EqualValues(t, 2, c.Snapshot(0).Retries)
}

func TestNoRetryOfUnknownNonIdempotentCalls(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		req   func() *http.Request
		calls int64
	}{
		{"POST after a 502", func() *http.Request {
			return httptest.NewRequest(http.MethodPost, "http://api.test/", strings.NewReader("x"))
		}, 1},
		{"POST with an idempotency key", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "http://api.test/", strings.NewReader("x"))
			r.Header.Set("Idempotency-Key", "k1")
			r.GetBody = func() (ioReadCloser, error) { return nopBody("x"), nil }
			return r
		}, 2},
		{"body without GetBody", func() *http.Request {
			r := httptest.NewRequest(http.MethodPut, "http://api.test/", strings.NewReader("x"))
			r.GetBody = nil
			return r
		}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := &scripted{resps: []func() *http.Response{response(502, ""), response(200, "ok")}}
			c, err := outbound.New(fast(base))
			require.NoError(t, err)
			req := tt.req()
			req.RequestURI = ""
			resp, err := c.RoundTrip(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, tt.calls, base.calls.Load())
		})
	}
}

func TestRetryBudgetExhaustionIsItsOwnError(t *testing.T) {
	t.Parallel()
	base := &scripted{resps: []func() *http.Response{response(503, "")}}
	cfg := fast(base)
	cfg.Retry.BudgetCapacity, cfg.Retry.BudgetFloor, cfg.Retry.MaxAttempts = 1, -1, 10
	cfg.Breaker.ConsecutiveFailures = 1000
	c, err := outbound.New(cfg)
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "http://api.test/", nil)
	req.RequestURI = ""
	_, err = c.RoundTrip(req)
	require.ErrorIs(t, err, retry.ErrBudgetExhausted)
	require.NotErrorIs(t, err, breaker.ErrOpen)
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	require.Equal(t, 2, re.Attempts, "one retry from the single token, then the budget is empty")
	var se *outbound.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 503, se.Status, "the provider's last answer is kept, distinct from the reason")
	require.EqualValues(t, 2, base.calls.Load())
	require.EqualValues(t, 1, c.Snapshot(0).Rejected)

	// Do reports it the same way.
	err = c.Do(t.Context(), "k", &outbound.DoOpts{Idempotent: true}, func(context.Context) error {
		return &outbound.StatusError{Status: 503}
	})
	require.ErrorIs(t, err, retry.ErrBudgetExhausted)
}

func TestBreakerOpensAndReportsTransitions(t *testing.T) {
	t.Parallel()
	base := &scripted{resps: []func() *http.Response{response(500, "")}}
	cfg := fast(base)
	cfg.Retry.MaxAttempts = 1
	cfg.Breaker = breaker.Config{ConsecutiveFailures: 3, OpenTimeout: time.Hour}
	var mu sync.Mutex
	var events []string
	cfg.OnBreakerEvent = func(key string, e breaker.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, key+" "+e.From.String()+"->"+e.To.String()+" "+e.Reason.String())
	}
	c, err := outbound.New(cfg)
	require.NoError(t, err)
	for i := range 3 {
		resp := get(t, c, "http://api.test/")
		require.Equal(t, 500, resp.StatusCode)
		_ = resp.Body.Close()
		if i == 1 {
			b := c.Snapshot(0).Keys[0].Breaker
			require.Equal(t, "closed", b.State)
			require.Equal(t, 1.0, b.ErrorRate)
			require.Equal(t, 2, b.Consecutive)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "http://api.test/", nil)
	req.RequestURI = ""
	_, err = c.RoundTrip(req)
	require.ErrorIs(t, err, breaker.ErrOpen)
	require.EqualValues(t, 3, base.calls.Load(), "an open breaker fails fast")
	mu.Lock()
	require.Equal(t, []string{"api.test closed->open consecutive_failures"}, events)
	mu.Unlock()
	snap := c.Snapshot(0)
	require.Equal(t, 1, snap.OpenBreakers)
	require.Equal(t, "open", snap.Keys[0].Breaker.State)
	require.Positive(t, snap.Keys[0].Breaker.OpenFor)
}

// A 429 that says when to come back paces the key; it does not trip the
// breaker. A bare 429 or 503 counts in the failure rate, which trips it
// (MinRequests 3 here), but not in a run of consecutive failures while
// the provider also serves (a limit that fell refuses a burst of calls;
// the rate controller slows down for them), which a 500 trips; from a
// provider that never served, it is a failure like a 500 (it is down).
func TestRetryAfterDoesNotTripTheBreaker(t *testing.T) {
	t.Parallel()
	rateTrips := breaker.Config{ConsecutiveFailures: 2, MinRequests: 3, FailureRate: 0.5, OpenTimeout: time.Hour}
	runTrips := breaker.Config{ConsecutiveFailures: 2, MinRequests: 1000, OpenTimeout: time.Hour}
	for _, tt := range []struct {
		name   string
		resp   func() *http.Response
		cfg    breaker.Config
		state  string
		served bool // a 200 first
	}{
		{"with Retry-After", response(429, "", "Retry-After", "0"), rateTrips, "closed", false},
		{"bare, failure rate", response(429, ""), rateTrips, "open", true},
		{"bare, consecutive", response(429, ""), runTrips, "closed", true},
		{"503, consecutive", response(503, ""), runTrips, "closed", true},
		{"500, consecutive", response(500, ""), runTrips, "open", true},
		{"bare, never served", response(429, ""), runTrips, "open", false},
		{"503, never served", response(503, ""), runTrips, "open", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resps := []func() *http.Response{tt.resp, tt.resp}
			if tt.served {
				resps = append([]func() *http.Response{response(200, "ok")}, resps...)
			}
			base := &scripted{resps: resps}
			cfg := fast(base)
			cfg.Retry.MaxAttempts = 1
			cfg.Breaker = tt.cfg
			c, err := outbound.New(cfg)
			require.NoError(t, err)
			for range len(resps) {
				resp := get(t, c, "http://api.test/")
				_ = resp.Body.Close()
			}
			require.Equal(t, tt.state, c.Snapshot(0).Keys[0].Breaker.State)
		})
	}
}

func TestLayerConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := outbound.New(outbound.Config{Retry: retry.Config{Base: -1}})
	require.ErrorIs(t, err, outbound.ErrInvalidConfig)
	_, err = outbound.New(outbound.Config{Breaker: breaker.Config{FailureRate: 2}})
	require.ErrorIs(t, err, outbound.ErrInvalidConfig)
	require.True(t, errors.Is(err, breaker.ErrInvalidConfig))
}

// With SharedRate, a decrease seen by one process is the fleet's rate.
func TestSharedRate(t *testing.T) {
	t.Parallel()
	// One fake clock for both clients and the store: the rates compared
	// move only by what the calls say, not by how slowly they ran.
	clk := clocktest.New(t0)
	st := memstore.New(memstore.Config{Clock: clk})
	a := &scripted{resps: []func() *http.Response{response(200, "ok"), response(429, "")}}
	b := &scripted{resps: []func() *http.Response{response(200, "ok")}}
	cfgA, cfgB := fast(a), fast(b)
	for _, c := range []*outbound.Config{&cfgA, &cfgB} {
		c.Store, c.SharedRate, c.Clock = st, true, clk
		c.Retry.MaxAttempts = 1
	}
	ca, err := outbound.New(cfgA)
	require.NoError(t, err)
	cb, err := outbound.New(cfgB)
	require.NoError(t, err)
	for _, c := range []http.RoundTripper{ca, cb, ca} { // A: 200, B: 200, A: 429
		resp := get(t, c, "http://api.test/")
		_ = resp.Body.Close()
	}
	ra, _ := ca.Rate("api.test")
	rb, _ := cb.Rate("api.test")
	require.Less(t, ra, 1e4, "A decreased")
	require.Greater(t, rb, ra, "B has not heard yet")
	// The layout processes of other versions read: the rate in
	// thousandths, as the remaining units of a day's fixed window under
	// the key's hash-tagged ":rate" key.
	raw, err := st.Take(t.Context(), store.TakeParams{Key: "outbound:{api.test}:rate", Cost: 0,
		Limit: store.Limit{Name: "outbound-rate", Algorithm: store.FixedWindow, Rate: 1 << 40, Period: 24 * time.Hour}})
	require.NoError(t, err)
	require.EqualValues(t, math.Round(ra*1000), raw.Remaining)
	resp := get(t, cb, "http://api.test/")
	_ = resp.Body.Close()
	rb, _ = cb.Rate("api.test")
	require.InDelta(t, ra, rb, ra*0.05, "B adapts from the fleet's rate")
}
