package outbound_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	"github.com/sluicerl/sluice/store/memstore"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// scripted answers with the next response of a script (the last one
// repeats) and counts calls; with clk set, it notes when each was sent.
type scripted struct {
	mu    sync.Mutex
	resps []func() *http.Response
	calls atomic.Int64
	clk   clock.Clock
	sent  []time.Time
}

// sentAt returns when each call was sent, on clk.
func (s *scripted) sentAt() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	s.calls.Add(1)
	s.mu.Lock()
	if s.clk != nil {
		s.sent = append(s.sent, s.clk.Now())
	}
	f := s.resps[0]
	if len(s.resps) > 1 {
		s.resps = s.resps[1:]
	}
	s.mu.Unlock()
	r := f()
	r.Request = req
	return r, nil
}

func response(status int, body string, header ...string) func() *http.Response {
	return func() *http.Response {
		rec := httptest.NewRecorder()
		for i := 0; i+1 < len(header); i += 2 {
			rec.Header().Set(header[i], header[i+1])
		}
		rec.WriteHeader(status)
		_, _ = rec.WriteString(body)
		return rec.Result()
	}
}

func get(t *testing.T, c http.RoundTripper, u string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, u, nil).WithContext(t.Context())
	req.RequestURI = ""
	resp, err := c.RoundTrip(req)
	require.NoError(t, err)
	return resp
}

func TestHostKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"http://API.Example.com/x", "api.example.com"},
		{"http://api.example.com:80/x", "api.example.com"},
		{"https://api.example.com:443/", "api.example.com"},
		{"https://api.example.com:80/", "api.example.com:80"},
		{"http://api.example.com:8080/", "api.example.com:8080"},
		{"https://[2001:DB8::1]:443/", "[2001:db8::1]"},
		{"http://[2001:db8::1]:8080/", "[2001:db8::1]:8080"},
		{"wss://stream.example.com:443/ws", "stream.example.com"},
		{"http://example.com:/", "example.com"},
		{"/relative", ""},
	} {
		u, err := url.Parse(tt.in)
		require.NoError(t, err)
		require.Equal(t, tt.want, outbound.HostKey(u), tt.in)
	}
}

// A Retry-After seen by one process pauses every process sharing the store.
func TestRetryAfterPausesEveryProcess(t *testing.T) {
	t.Parallel()
	clk := watch(t0)
	st := memstore.New(memstore.Config{Clock: clk})
	a := &scripted{resps: []func() *http.Response{response(429, "", "Retry-After", "2")}}
	b := &scripted{resps: []func() *http.Response{response(200, "ok")}, clk: clk}
	// No retries: this process gives up on the 429; the point is the
	// other process.
	ca, err := outbound.New(outbound.Config{Base: a, Store: st, Clock: clk, Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	cb, err := outbound.New(outbound.Config{Base: b, Store: st, Clock: clk})
	require.NoError(t, err)

	// B has called the key once, at its conservative start, a second
	// before A's refusal (one at the fleet's very start is a clash of
	// its first calls, which cuts nothing: see
	// TestTheFleetsFirstCallsClashingCutNothing).
	resp := get(t, cb, "http://api.example.com/x")
	require.NoError(t, resp.Body.Close())
	rateBefore, _ := cb.Rate("api.example.com")
	clk.Advance(time.Second)

	resp = get(t, ca, "http://api.example.com/x")
	require.Equal(t, 429, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
	k := ca.Snapshot(0).Keys[0]
	require.Equal(t, 2*time.Second, k.PausedFor)
	pauseEnd := clk.Now().Add(2 * time.Second)

	// B's next call waits on the clock until the pause is over: time
	// moves only to the instants it waits for.
	getAdvancing(t, clk, cb, "http://API.example.com:80/y")
	sent := b.sentAt()
	require.Len(t, sent, 2)
	require.False(t, sent[1].Before(pauseEnd), "the other process sent during the pause (%v before its end)", pauseEnd.Sub(sent[1]))
	// B slowed down too, having heard of the pause through the store.
	rateAfter, _ := cb.Rate("api.example.com")
	require.Less(t, rateAfter, rateBefore)
	snap := ca.Snapshot(0)
	require.Len(t, snap.Keys, 1)
	require.Equal(t, "api.example.com", snap.Keys[0].Key)
	require.EqualValues(t, 1, snap.Keys[0].Throttles)
	require.Zero(t, snap.Keys[0].PausedFor)
}

// Issue 18: a provider that states the milliseconds until its next token
// (Retry-After: 0.004) and bans after five refusals in 10 s, whatever the
// client did. Paused for those 4 ms, the refusal was over before the other
// process looked at the store: it never heard of it and kept its rate,
// the fleet resumed over the limit, and the refusals that followed earned
// a ban at the slow start's end and more when the limit halved (5 bans,
// goodput 0.47 of the limit). A refusal pauses the fleet long enough for
// every process to hear of it (150 ms at least), as the refusals of a
// whole-second Retry-After do.
func TestAShortRetryAfterPausesTheFleetLongEnoughToBeHeard(t *testing.T) {
	t.Parallel()
	clk := watch(t0)
	st := memstore.New(memstore.Config{Clock: clk})
	a := &scripted{resps: []func() *http.Response{response(429, "", "Retry-After", "0.004")}}
	b := &scripted{resps: []func() *http.Response{response(200, "ok")}, clk: clk}
	ca, cb := fleetOf(t, st, clk, a, b)

	resp := get(t, cb, "http://api.example.com/x")
	require.NoError(t, resp.Body.Close())
	clk.Advance(time.Second)

	resp = get(t, ca, "http://api.example.com/x")
	require.Equal(t, 429, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 150*time.Millisecond, ca.Snapshot(0).Keys[0].PausedFor)
	pauseEnd := clk.Now().Add(150 * time.Millisecond)
	// 100 ms later (the other process's next turn), the pause is still
	// there to be heard.
	clk.Advance(100 * time.Millisecond)
	getAdvancing(t, clk, cb, "http://api.example.com/y")
	sent := b.sentAt()
	require.Len(t, sent, 2)
	require.False(t, sent[1].Before(pauseEnd), "the other process did not hear of the pause (it sent %v before its end)", pauseEnd.Sub(sent[1]))
}

// Before any signal the key is paced at the controller's conservative start.
func TestConservativeStart(t *testing.T) {
	t.Parallel()
	clk := watch(t0)
	base := &scripted{resps: []func() *http.Response{response(200, "ok")}, clk: clk}
	c, err := outbound.New(outbound.Config{Base: base, Clock: clk, Store: memstore.New(memstore.Config{Clock: clk})})
	require.NoError(t, err)
	driveAll(t, clk, 3, func() {
		resp := get(t, c, "http://api.example.com/")
		_ = resp.Body.Close()
	})
	// One went at once (burst 1); the next waited a whole interval of
	// the start rate (aimd.DefaultStart, 1/s), and the third its turn at
	// a rate slow start has only begun to raise.
	sent := base.sentAt()
	require.Len(t, sent, 3)
	require.Equal(t, t0, sent[0])
	require.GreaterOrEqual(t, sent[1].Sub(sent[0]), time.Second)
	require.Greater(t, sent[2].Sub(sent[1]), 100*time.Millisecond)
	_, ok := c.Rate("api.example.com")
	require.True(t, ok)
}

func TestProfilesShareAKey(t *testing.T) {
	t.Parallel()
	base := &scripted{resps: []func() *http.Response{response(200, "ok")}}
	c, err := outbound.New(outbound.Config{Base: base, Burst: 10,
		Profiles: map[string]string{"a.shop.test": "shopify", "b.shop.test": "shopify"}})
	require.NoError(t, err)
	for _, u := range []string{"http://a.shop.test/", "http://B.shop.test:80/", "http://other.test/"} {
		resp := get(t, c, u)
		_ = resp.Body.Close()
	}
	snap := c.Snapshot(0)
	keys := map[string]int64{}
	for _, k := range snap.Keys {
		keys[k.Key] = k.Requests
	}
	require.Equal(t, map[string]int64{"shopify": 2, "other.test": 1}, keys)
	require.EqualValues(t, 3, snap.Requests)
}

// The response body survives the peek the GraphQL parser takes, and a
// THROTTLED inside a 200 counts as a throttle.
func TestGraphQLThrottleInA200(t *testing.T) {
	t.Parallel()
	body := `{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],` +
		`"extensions":{"cost":{"requestedQueryCost":10,"actualQueryCost":null,` +
		`"throttleStatus":{"maximumAvailable":100,"currentlyAvailable":2,"restoreRate":50}}}}`
	base := &scripted{resps: []func() *http.Response{response(200, body, "Content-Type", "application/json")}}
	c, err := outbound.New(outbound.Config{Base: base, Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	resp := get(t, c, "http://shop.test/graphql")
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, body, string(got))
	require.EqualValues(t, 1, c.Snapshot(0).Throttles)
}

func TestDoClassifiesErrors(t *testing.T) {
	t.Parallel()
	c, err := outbound.New(outbound.Config{Burst: 100, Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, c.Do(ctx, "db", nil, func(context.Context) error { return nil }))
	se := &outbound.StatusError{Status: 429, Header: http.Header{"Retry-After": {"1"}}}
	require.ErrorIs(t, c.Do(ctx, "db", nil, func(context.Context) error { return se }), se)
	boom := errors.New("boom")
	require.ErrorIs(t, c.Do(ctx, "db", nil, func(context.Context) error { return boom }), boom)
	require.ErrorIs(t, c.Do(ctx, "", nil, func(context.Context) error { return nil }), outbound.ErrEmptyKey)
	k := c.Snapshot(0).Keys[0]
	require.Equal(t, "other", k.Label, "Do keys are not metric labels unless opted in")
	require.EqualValues(t, 3, k.Requests)
	require.EqualValues(t, 1, k.Successes)
	require.EqualValues(t, 1, k.Throttles)
	require.EqualValues(t, 1, k.Errors)
}

func TestBulkhead(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 5)
	var inFlight, peak atomic.Int64
	base := roundTripFunc(func(*http.Request) (*http.Response, error) {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		entered <- struct{}{}
		<-release
		inFlight.Add(-1)
		return response(200, "ok")(), nil
	})
	c, err := outbound.New(outbound.Config{Base: base, MaxConcurrent: 2, Burst: 100,
		AIMD: aimdStart(1000)})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			resp := get(t, c, "http://api.test/")
			_ = resp.Body.Close()
		})
	}
	for i := range 2 {
		select {
		case <-entered:
		case <-time.After(time.Minute):
			t.Fatalf("%d calls of 5 reached the provider, want 2", i)
		}
	}
	require.EqualValues(t, 2, c.Snapshot(0).Keys[0].InFlight)
	close(release)
	wg.Wait()
	require.EqualValues(t, 2, peak.Load())
	require.Len(t, entered, 3, "the other three went once the first two were done")
}

func TestTimeoutBoundsTheCall(t *testing.T) {
	t.Parallel()
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done()
		return nil, r.Context().Err()
	})
	c, err := outbound.New(outbound.Config{Base: base, Timeout: 20 * time.Millisecond})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "http://slow.test/", nil)
	req.RequestURI = ""
	_, err = c.RoundTrip(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	base := &scripted{resps: []func() *http.Response{response(200, "ok"), response(503, "")}}
	c, err := outbound.New(outbound.Config{Base: base, Metrics: reg, Burst: 10, Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	for range 2 {
		resp := get(t, c, "http://api.test/")
		_ = resp.Body.Close()
	}
	require.NoError(t, c.Do(t.Context(), "secret-customer-key", nil, func(context.Context) error { return nil }))
	out, err := reg.Gather()
	require.NoError(t, err)
	var text strings.Builder
	for _, mf := range out {
		text.WriteString(mf.String())
	}
	require.NotContains(t, text.String(), "secret-customer-key")
	require.Equal(t, 1.0, attempts(t, reg, "api.test", "success"))
	require.Equal(t, 1.0, attempts(t, reg, "api.test", "throttled"))
	require.Equal(t, 1.0, attempts(t, reg, "other", "success"))

	_, err = outbound.New(outbound.Config{Metrics: reg})
	require.Error(t, err, "registering twice")
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, cfg := range []outbound.Config{
		{MaxConcurrent: -1},
		{Timeout: -1},
		{Burst: -1},
		{MaxReserve: -1},
		{IdleTTL: -1},
		{Profiles: map[string]string{"a.test": ""}},
		{AIMD: aimdDecrease(2)},
	} {
		_, err := outbound.New(cfg)
		require.ErrorIs(t, err, outbound.ErrInvalidConfig, "%+v", cfg)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A rate the provider states is the fleet's: every process paces on one
// GCRA at it, not each at the whole of it.
func TestProviderRatePacesTheFleet(t *testing.T) {
	t.Parallel()
	clk := watch(t0)
	st := memstore.New(memstore.Config{Clock: clk})
	body := `{"data":{},"extensions":{"cost":{"requestedQueryCost":1,"actualQueryCost":1,` +
		`"throttleStatus":{"maximumAvailable":100,"currentlyAvailable":90,"restoreRate":10}}}}`
	a := &scripted{resps: []func() *http.Response{response(200, body, "Content-Type", "application/json")}, clk: clk}
	b := &scripted{resps: []func() *http.Response{response(200, body, "Content-Type", "application/json")}, clk: clk}
	ca, cb := fleetOf(t, st, clk, a, b)
	for _, c := range []http.RoundTripper{ca, cb} { // both learn the rate: 10/s
		resp := get(t, c, "http://shop.test/graphql")
		require.NoError(t, resp.Body.Close())
	}
	rate, _ := ca.Rate("shop.test")
	require.InDelta(t, 10, rate, 1e-9)
	clk.Advance(time.Second)

	resp := get(t, ca, "http://shop.test/graphql")
	require.NoError(t, resp.Body.Close())
	getAdvancing(t, clk, cb, "http://shop.test/graphql")
	sa, sb := a.sentAt(), b.sentAt()
	require.Len(t, sb, 2)
	require.GreaterOrEqual(t, sb[1].Sub(sa[len(sa)-1]), 100*time.Millisecond,
		"B went %v after A: the processes paced apart", sb[1].Sub(sa[len(sa)-1]))
}

// advancing answers 200 after the next latency of a script, on a fake clock.
type advancing struct {
	clk       *clocktest.Clock
	latencies []time.Duration
	n         int
}

func (a *advancing) RoundTrip(*http.Request) (*http.Response, error) {
	a.clk.Advance(a.latencies[min(a.n, len(a.latencies)-1)])
	a.n++
	return response(200, "ok")(), nil
}

// A latency that grows slowly with load is caught: the target is anchored
// to the fastest recent success and cannot drift up with it.
func TestSlowlyGrowingLatencyDecreases(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	var lat []time.Duration
	for range 20 {
		lat = append(lat, 10*time.Millisecond)
	}
	for ms := 10; ms <= 60; ms++ { // slowly: 20 calls per millisecond more
		for range 20 {
			lat = append(lat, time.Duration(ms)*time.Millisecond)
		}
	}
	base := &advancing{clk: clk, latencies: lat}
	c, err := outbound.New(outbound.Config{Base: base, Clock: clk, Store: memstore.New(memstore.Config{Clock: clk}),
		Burst: 1000, AIMD: aimd.Config{Start: 1e4}, Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	for range len(lat) {
		resp := get(t, c, "http://api.test/")
		_ = resp.Body.Close()
	}
	rate, _ := c.Rate("api.test")
	require.Less(t, rate, 1e4, "latency grew from 10 to 60 ms and the rate never decreased")
	k := c.Snapshot(0).Keys[0]
	require.Greater(t, k.P95Latency, 10*time.Millisecond)
	require.LessOrEqual(t, k.P95Latency, 60*time.Millisecond)
}

// Idle keys are dropped when a new key comes while MaxKeys are held, not
// only by the idle sweep; their pacing lives on in the store, so nothing
// is given away.
func TestIdleKeysAreEvictedAtMaxKeys(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	base := &scripted{resps: []func() *http.Response{response(200, "ok")}}
	c, err := outbound.New(outbound.Config{Base: base, Clock: clk, Store: memstore.New(memstore.Config{Clock: clk}),
		MaxKeys: 2, IdleTTL: time.Minute, Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	keys := func() []string {
		var out []string
		for _, k := range c.Snapshot(0).Keys {
			out = append(out, k.Key)
		}
		return out
	}
	for _, h := range []string{"a.test", "b.test"} {
		resp := get(t, c, "http://"+h+"/")
		_ = resp.Body.Close()
	}
	clk.Advance(29 * time.Second)
	resp := get(t, c, "http://c.test/")
	_ = resp.Body.Close()
	require.ElementsMatch(t, []string{"a.test", "b.test", "c.test"}, keys(), "nothing idle long enough yet")
	// The idle sweep due at +30 s (it runs every 30 s) runs as the clock
	// reaches +60 s: a and b have been idle for exactly the TTL, not
	// more, and stay. Its next run is at +90 s.
	clk.Advance(31 * time.Second)
	clk.BlockUntilTimers(1)
	require.ElementsMatch(t, []string{"a.test", "b.test", "c.test"}, keys())
	clk.Advance(time.Second) // a and b idle 61 s, c 32 s
	resp = get(t, c, "http://d.test/")
	_ = resp.Body.Close()
	require.ElementsMatch(t, []string{"c.test", "d.test"}, keys())
}

// After a run of throttles that each carried a Retry-After (a pause each),
// the rate does not rush back towards the peak the run began at: it grows
// additively from the last cut.
func TestNoFastRecoveryTowardsADisprovedPeak(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	ok := response(200, "ok")
	throttled := response(429, "", "Retry-After", "1")
	base := &scripted{resps: []func() *http.Response{ok, throttled, throttled, ok}}
	c, err := outbound.New(outbound.Config{Base: base, Clock: clk, Store: memstore.New(memstore.Config{Clock: clk}),
		Burst: 1000, AIMD: aimd.Config{Start: 100, SlowStart: -1, Decrease: 0.5, IgnoreLatency: true},
		Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	call := func() {
		resp := get(t, c, "http://api.test/")
		_ = resp.Body.Close()
	}
	call() // 200 at 100/s
	clk.Advance(10 * time.Millisecond)
	call() // 429: 50/s, paused 1 s
	clk.Advance(1100 * time.Millisecond)
	call() // 429 again: 25/s
	rate, _ := c.Rate("api.test")
	require.InDelta(t, 25, rate, 1e-9)
	clk.Advance(1100 * time.Millisecond)
	for range 300 { // three seconds of successes
		call()
		clk.Advance(10 * time.Millisecond)
	}
	rate, _ = c.Rate("api.test")
	t.Logf("rate after recovery: %v", rate)
	require.Less(t, rate, 30.0, "rushed back towards the 100/s the run of throttles began at")
	require.Greater(t, rate, 25.0, "never grew again")
}

// A process that hears of a run of Retry-After pauses from the store (the
// throttles went to another process) bounds its recovery as the throttled
// process does: it does not rush back towards the peak the run began at.
func TestPausesHeardOfBoundTheRecoveryToo(t *testing.T) {
	t.Parallel()
	clk := watch(t0)
	st := memstore.New(memstore.Config{Clock: clk})
	ok := response(200, "ok")
	throttled := response(429, "", "Retry-After", "1")
	a := &scripted{resps: []func() *http.Response{ok, throttled, throttled, ok}}
	b := &scripted{resps: []func() *http.Response{ok}}
	cfg := func(base http.RoundTripper) outbound.Config {
		return outbound.Config{Base: base, Store: st, Clock: clk, Burst: 1000,
			AIMD:  aimd.Config{Start: 100, SlowStart: -1, Decrease: 0.5, IgnoreLatency: true},
			Retry: retry.Config{MaxAttempts: 1}}
	}
	ca, err := outbound.New(cfg(a))
	require.NoError(t, err)
	cb, err := outbound.New(cfg(b))
	require.NoError(t, err)
	// A call during a pause waits for it on the clock.
	call := func(c http.RoundTripper) { getAdvancing(t, clk, c, "http://api.test/") }
	call(cb)
	call(ca)
	clk.Advance(10 * time.Millisecond)
	call(ca) // 429: A at 50/s, the key paused 1 s
	call(cb) // B hears of the pause: 50/s
	rate, _ := cb.Rate("api.test")
	require.InDelta(t, 50, rate, 1e-9)
	call(ca) // 429 again: A at 25/s
	call(cb) // B at 25/s
	rate, _ = cb.Rate("api.test")
	require.InDelta(t, 25, rate, 1e-9)
	clk.Advance(1100 * time.Millisecond)
	for range 300 { // three seconds of successes
		call(cb)
		clk.Advance(10 * time.Millisecond)
	}
	rate, _ = cb.Rate("api.test")
	t.Logf("B's rate after recovery: %v", rate)
	require.Less(t, rate, 30.0, "B rushed back towards the 100/s the run of pauses began at")
	require.Greater(t, rate, 25.0, "B never grew again")
}

// A window budget the provider never states (Binance's used weight) is
// learned by the process that was refused, and taken up by the others
// when they find the key paused: the whole fleet then paces within it.
func TestWeightBudgetIsLearnedAndShared(t *testing.T) {
	t.Parallel()
	before, rate := weightFleet(t, "X-Mbx-Used-Weight-1s")
	require.Greater(t, before, 1000.0, "B has not heard of it yet")
	require.InDelta(t, 0.98*25, rate, 1e-9, "B took the budget up from the store")
}

// A budget learned for one window length is not taken up by a process
// that follows another: a second's budget is no minute's. (B's minute
// window is paced by its assumed budget: 6000 weight, 3000 calls of 2.)
func TestWeightBudgetIsSharedPerWindow(t *testing.T) {
	t.Parallel()
	before, rate := weightFleet(t, "X-Mbx-Used-Weight-1m")
	require.InDelta(t, 0.98*3000/60, before, 1e-9, "B has not heard of it yet")
	require.InDelta(t, 0.98*3000/60, rate, 1e-9, "B took up a budget learned for another window")
}

// weightFleet runs two processes on one store: A, whose provider reports
// the weight of a one-second window, is refused at 50 used; then B, whose
// reports carry usedB, finds the key paused. It returns B's rate before
// and after.
func weightFleet(t *testing.T, usedB string) (before, after float64) {
	clk := watch(t0)
	st := memstore.New(memstore.Config{Clock: clk})
	const used = "X-Mbx-Used-Weight-1s"
	a := &scripted{resps: []func() *http.Response{
		response(200, "ok", used, "4"), response(200, "ok", used, "6"),
		response(429, "", used, "50", "Retry-After", "1"),
	}}
	b := &scripted{resps: []func() *http.Response{
		response(200, "ok", usedB, "2"), response(200, "ok", usedB, "8"), response(200, "ok", usedB, "10"),
	}}
	ca, cb := fleetOf(t, st, clk, a, b)
	for _, c := range []http.RoundTripper{cb, ca, ca, cb, ca} {
		resp := get(t, c, "http://api.exchange.test/v3/ticker")
		require.NoError(t, resp.Body.Close())
		clk.Advance(10 * time.Millisecond)
	}
	// Refused at 50 used: 25 calls of weight 2 a second, paced at 98 %
	// at most.
	rate, _ := ca.Rate("api.exchange.test")
	require.LessOrEqual(t, rate, 0.98*25)
	require.InDelta(t, 0.98*25, ca.Snapshot(0).Keys[0].Hint, 1e-9)
	before, _ = cb.Rate("api.exchange.test")
	getAdvancing(t, clk, cb, "http://api.exchange.test/v3/ticker")
	after, _ = cb.Rate("api.exchange.test")
	return before, after
}

// The snapshot says what the dashboard shows of a key: the median latency
// beside the p95, the provider's own stated limit, and the pauses its
// Retry-After asked for.
func TestSnapshotStatedLimitP50AndRetryAfterPauses(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	st := memstore.New(memstore.Config{Clock: clk})
	// Ten successes of 11, 12, ..., 20 ms.
	var lat []time.Duration
	for i := 11; i <= 20; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	base := &advancing{clk: clk, latencies: lat}
	c, err := outbound.New(outbound.Config{Base: base, Clock: clk, Store: st, Burst: 1000, AIMD: aimd.Config{Start: 1e4},
		Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	for range 10 {
		resp := get(t, c, "http://api.test/")
		require.NoError(t, resp.Body.Close())
	}
	k := c.Snapshot(0).Keys[0]
	require.Equal(t, 15*time.Millisecond, k.P50Latency, "nearest rank: the 5th of 10")
	require.Equal(t, 20*time.Millisecond, k.P95Latency)
	require.False(t, k.Stated.Known, "no response stated a limit yet")
	require.Zero(t, k.RetryAfterPauses)

	// Another key's provider states 40 per 10 s with 31 left, then
	// throttles asking for a pause of 7 s.
	s := &scripted{resps: []func() *http.Response{
		response(200, "ok", "RateLimit-Policy", `"q";q=40;w=10`, "RateLimit", `"q";r=31;t=4`),
		response(429, "", "Retry-After", "7"),
	}}
	c2, err := outbound.New(outbound.Config{Base: s, Clock: clk, Store: st, Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	resp := get(t, c2, "http://stated.test/")
	require.NoError(t, resp.Body.Close())
	k = c2.Snapshot(0).Keys[0]
	require.True(t, k.Stated.Known)
	require.EqualValues(t, 40, k.Stated.Limit)
	require.EqualValues(t, 31, k.Stated.Remaining)
	require.Equal(t, 10*time.Second, k.Stated.Window)
	require.Equal(t, clk.Now().Add(4*time.Second).UTC(), k.Stated.ResetAt)
	clk.Advance(time.Second)
	resp = get(t, c2, "http://stated.test/")
	require.Equal(t, 429, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
	k = c2.Snapshot(0).Keys[0]
	require.EqualValues(t, 1, k.RetryAfterPauses)
	require.Equal(t, 7*time.Second, k.LastRetryAfter)
	require.Equal(t, clk.Now().UTC(), k.LastRetryAfterAt)
	require.Equal(t, 7*time.Second, k.PausedFor)
	require.EqualValues(t, 40, k.Stated.Limit, "a response stating nothing leaves the stated limit as it was")
}
