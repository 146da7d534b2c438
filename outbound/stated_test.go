package outbound_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Issue 18: a limit the provider states on its first answer is paced at
// once, from a conservative start of 1/s, with no slow start towards it.
func TestStatedLimitIsPacedFromTheFirstAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header []string
		body   string
		want   float64
	}{
		{"IETF RateLimit-Policy", []string{"RateLimit-Policy", `"default";q=100;w=1`, "RateLimit", `"default";r=99;t=1`}, "", 98},
		{"X-RateLimit-*", []string{"X-RateLimit-Limit", "600", "X-RateLimit-Remaining", "599", "X-RateLimit-Reset", "60"}, "", 0.98 * 600 / 60},
		{"OpenAI requests and tokens a minute", []string{"X-Ratelimit-Limit-Requests", "600", "X-Ratelimit-Remaining-Requests", "599",
			"X-Ratelimit-Reset-Requests", "100ms", "X-Ratelimit-Limit-Tokens", "150000", "X-Ratelimit-Remaining-Tokens", "149000",
			"X-Ratelimit-Reset-Tokens", "400ms"}, "", 0.98 * 600 / 60},
		{"Anthropic requests and tokens a minute", []string{"Anthropic-Ratelimit-Requests-Limit", "300", "Anthropic-Ratelimit-Requests-Remaining", "299",
			"Anthropic-Ratelimit-Requests-Reset", t0.Add(200 * time.Millisecond).Format(time.RFC3339Nano),
			"Anthropic-Ratelimit-Tokens-Limit", "80000", "Anthropic-Ratelimit-Tokens-Remaining", "79000",
			"Anthropic-Ratelimit-Tokens-Reset", t0.Add(time.Second).Format(time.RFC3339)}, "", 0.98 * 300 / 60},
		{"HubSpot calls per interval", []string{"X-HubSpot-RateLimit-Max", "100", "X-HubSpot-RateLimit-Remaining", "99",
			"X-HubSpot-RateLimit-Interval-Milliseconds", "10000"}, "", 0.98 * 100 / 10},
		{"Shopify throttleStatus", []string{"Content-Type", "application/json"},
			`{"data":{},"extensions":{"cost":{"requestedQueryCost":10,"actualQueryCost":5,` +
				`"throttleStatus":{"maximumAvailable":1000,"currentlyAvailable":995,"restoreRate":50}}}}`, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktest.New(t0)
			base := &scripted{resps: []func() *http.Response{response(200, tc.body, tc.header...)}}
			c, err := outbound.New(outbound.Config{Base: base, Clock: clk, Store: memstore.New(memstore.Config{Clock: clk})})
			require.NoError(t, err)
			before, _ := c.Rate("api.test")
			require.Less(t, before, tc.want)
			resp := get(t, c, "http://api.test/")
			require.NoError(t, resp.Body.Close())
			rate, _ := c.Rate("api.test")
			require.InDelta(t, tc.want, rate, 1e-9, "the stated rate after the first answer")
		})
	}
}

// xrlWindow answers 200 with X-RateLimit-Limit/-Remaining/-Reset (Unix
// seconds) of a fixed window of a second aligned to the clock, holding
// limit calls, remaining as given for each call in turn.
type xrlWindow struct {
	clk       *clocktest.Clock
	limit     int
	remaining []int
	n         int
	// delta gives the reset as whole seconds from now, rounded up, not
	// as a Unix time: a window of a second always says 1.
	delta bool
}

func (x *xrlWindow) RoundTrip(*http.Request) (*http.Response, error) {
	now := x.clk.Now()
	r := x.remaining[min(x.n, len(x.remaining)-1)]
	x.n++
	reset := strconv.FormatInt(now.Unix()+1, 10)
	if x.delta {
		reset = "1"
	}
	return response(200, "ok", "X-RateLimit-Limit", strconv.Itoa(x.limit), "X-RateLimit-Remaining", strconv.Itoa(r),
		"X-RateLimit-Reset", reset)(), nil
}

// caller returns a function that makes one call through a client of x on
// x's clock and returns the key's rate after it.
func (x *xrlWindow) caller(t *testing.T) func() float64 {
	t.Helper()
	c, err := outbound.New(outbound.Config{Base: x, Clock: x.clk, Store: memstore.New(memstore.Config{Clock: x.clk})})
	require.NoError(t, err)
	return func() float64 {
		resp := get(t, c, "http://api.test/")
		require.NoError(t, resp.Body.Close())
		rate, _ := c.Rate("api.test")
		return rate
	}
}

// Issue 18: an X-RateLimit-* quota states no window; the key paces the
// limit over the longest time to a reset seen (whole seconds), and what
// remains over the time to the reset only when that is less. What remains
// alone read as a rate near a reset (5 left 30 ms before it: 166/s) sent a
// burst at the window's edge.
func TestWindowlessQuotaPacesTheLimitOverItsWindow(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0) // t0 is on a whole second
	x := &xrlWindow{clk: clk, limit: 100, remaining: []int{99, 5, 1}}
	call := x.caller(t)
	require.InDelta(t, 98, call(), 1e-9, "the first answer, a whole second before the reset: 0.98 x 100 over 1 s")
	clk.Advance(970 * time.Millisecond)
	require.InDelta(t, 98, call(), 1e-9, "5 left 30 ms before the reset is no faster pace than the window's")
	clk.Advance(15 * time.Millisecond) // past the pace's next turn, so the call does not wait
	require.InDelta(t, 1/0.015, call(), 1e-6, "1 left 15 ms before the reset: what remains is the slower pace")
}

// A reset in whole seconds from now is rounded: a window of a second says
// 1 from its start to its end, so what remains over it (50 left half way:
// 50/s) is no pace; the limit over the window is. A provider of 1 s
// windows not written here got 0.65 of its limit when what remained over
// a rounded second set the pace.
func TestWholeSecondResetIsNoPace(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	x := &xrlWindow{clk: clk, limit: 100, remaining: []int{99, 50, 3}, delta: true}
	call := x.caller(t)
	require.InDelta(t, 98, call(), 1e-9, "the first answer: 0.98 x 100 over 1 s")
	clk.Advance(500 * time.Millisecond)
	require.InDelta(t, 98, call(), 1e-9, "50 left half way through the window, reset 1: still the window's pace")
	clk.Advance(450 * time.Millisecond)
	require.InDelta(t, 98, call(), 1e-9, "3 left near the end, reset 1")
}

// lateDrive runs f, moving w on to each timer the code under test waits
// on, late by late: a starved process whose timers fire late.
func lateDrive(t *testing.T, w *watched, late time.Duration, f func()) {
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
			w.advanceTo(when.Add(late))
		case <-time.After(time.Minute):
			t.Fatal("the call neither returned nor waited on the clock")
		}
	}
}

// clocked answers 200 after the next latency of a script, on a fake clock.
type clocked struct {
	clk       *watched
	latencies []time.Duration
	n         int
}

func (a *clocked) RoundTrip(*http.Request) (*http.Response, error) {
	a.clk.Advance(a.latencies[min(a.n, len(a.latencies)-1)])
	a.n++
	return response(200, "ok")(), nil
}

// rateAfterSlowAnswers returns the rate of a key paced at 50/s after 12
// answers in 10 ms and 12 in 200 ms, its timers firing late by late and
// its store taking stall(n) for its n-th call (none when stall is nil).
func rateAfterSlowAnswers(t *testing.T, late time.Duration, stall func(n int) time.Duration) float64 {
	t.Helper()
	clk := watch(t0)
	var lat []time.Duration
	for range 12 {
		lat = append(lat, 10*time.Millisecond)
	}
	for range 12 {
		lat = append(lat, 200*time.Millisecond)
	}
	base := &clocked{clk: clk, latencies: lat}
	var st store.RateStore = memstore.New(memstore.Config{Clock: clk})
	if stall != nil {
		st = &stalling{Store: memstore.New(memstore.Config{Clock: clk}), clk: clk, stall: stall}
	}
	c, err := outbound.New(outbound.Config{Base: base, Clock: clk, Store: st,
		Burst: 1, AIMD: aimd.Config{Start: 50, SlowStart: -1, UsageMultiple: -1}, Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	for range len(lat) {
		lateDrive(t, clk, late, func() {
			resp := get(t, c, "http://api.test/")
			_ = resp.Body.Close()
		})
	}
	rate, _ := c.Rate("api.test")
	return rate
}

// Issue 18: latency means the provider only when the process is not
// starved. The same slow answers decrease the rate of a process whose
// timers fire on time, and leave alone that of a process whose own
// timers fire so late that its scheduling delay, not the provider, may be
// what made them slow.
func TestStarvedProcessDoesNotReadItsOwnDelayAsLatency(t *testing.T) {
	t.Parallel()
	rateAfter := func(late time.Duration) float64 { return rateAfterSlowAnswers(t, late, nil) }
	onTime := rateAfter(0)
	require.Less(t, onTime, 50.0, "slow answers to a process on time decrease the rate")
	starved := rateAfter(60 * time.Millisecond)
	require.GreaterOrEqual(t, starved, 50.0, "a starved process does not read its own delay as the provider's")
	// Timers 10 ms late cannot explain answers 190 ms slower than usual:
	// those are the provider's.
	require.Less(t, rateAfter(10*time.Millisecond), 50.0, "a little late, the provider's slowdown still counts")
}

// stalling is a store whose answers take time on the fake clock: stall(n)
// for its n-th call (TakeAll and Take alike).
type stalling struct {
	*memstore.Store
	clk   *watched
	stall func(n int) time.Duration
	n     int
}

func (s *stalling) wait() {
	s.clk.Advance(s.stall(s.n))
	s.n++
}

func (s *stalling) TakeAll(ctx context.Context, p store.TakeAllParams) (store.AllResult, error) {
	s.wait()
	return s.Store.TakeAll(ctx, p)
}

func (s *stalling) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	s.wait()
	return s.Store.Take(ctx, p)
}

// Issue 18: on a saturated machine the store (a Redis starved of CPU)
// stalls now and then, and every call booked in the stall leaves with the
// others when it answers: the provider's queue that bunch makes is the
// process's doing, not the provider's limit. The same slow answers leave
// the rate of a process whose store stalls on every other call alone, and
// decrease that of a process whose store answers in a steady 30 ms: a
// round trip every call pays alike shifts the calls, and no two leave
// together.
func TestStalledStoreIsNotTheProvidersLatency(t *testing.T) {
	t.Parallel()
	rateAfter := func(stall func(n int) time.Duration) float64 { return rateAfterSlowAnswers(t, 0, stall) }
	steady := rateAfter(func(int) time.Duration { return 30 * time.Millisecond })
	require.Less(t, steady, 50.0, "a store's steady round trip is no stall: the provider's slowdown counts")
	stalls := rateAfter(func(n int) time.Duration {
		if n%2 == 1 {
			return 100 * time.Millisecond
		}
		return time.Millisecond
	})
	require.GreaterOrEqual(t, stalls, 50.0, "calls a stalling store sent in bunches: their latency is not the provider's")
}

// Issue 18: a Retry-After is honoured exactly, with sub-second precision,
// by every process sharing the key: 1.5 s pauses the fleet for 1.5 s, not
// 2 s. (A regression test: the client already did; the rounded-up second
// of the issue was the provider's integer Retry-After.)
func TestRetryAfterIsExactForTheFleet(t *testing.T) {
	t.Parallel()
	clk := watch(t0)
	st := memstore.New(memstore.Config{Clock: clk})
	a := &scripted{resps: []func() *http.Response{response(429, "", "Retry-After", "1.5"), response(200, "ok")}, clk: clk}
	b := &scripted{resps: []func() *http.Response{response(200, "ok")}, clk: clk}
	ca, cb := fleetOf(t, st, clk, a, b)
	getAdvancing(t, clk, ca, "http://api.test/") // 429: the key pauses 1.5 s
	getAdvancing(t, clk, cb, "http://api.test/") // B waits for the pause
	getAdvancing(t, clk, ca, "http://api.test/")
	sa, sb := a.sentAt(), b.sentAt()
	require.Len(t, sa, 2)
	require.Len(t, sb, 1)
	// Exact to the pause's microsecond GCRA step, far under the second a
	// rounding would add.
	for _, d := range []time.Duration{sb[0].Sub(sa[0]), sa[1].Sub(sa[0])} {
		require.GreaterOrEqual(t, d, 1500*time.Millisecond, "never before the pause ends")
		require.LessOrEqual(t, d, 1500*time.Millisecond+time.Millisecond, "resumed as the pause ended")
	}
}

// callThrough makes one call, retries included, through a client with no
// provider profile (a start far above any limit, no latency rule) over a
// provider answering resps in turn, on a clock moved on to every timer
// the call waits on; it returns the status the caller got and when each
// attempt was sent.
func callThrough(t *testing.T, resps ...func() *http.Response) (int, []time.Time) {
	t.Helper()
	clk := watch(t0)
	base := &scripted{resps: resps, clk: clk}
	c, err := outbound.New(outbound.Config{Base: base, Store: memstore.New(memstore.Config{Clock: clk}), Clock: clk,
		AIMD: aimd.Config{Start: 1e4, IgnoreLatency: true}})
	require.NoError(t, err)
	var status int
	drive(t, clk, func() {
		resp := get(t, c, "http://api.test/")
		status = resp.StatusCode
		_ = resp.Body.Close()
	})
	return status, base.sentAt()
}

// A 403 over a rate limit, as GitHub answers one (with a Retry-After: a
// secondary limit; with x-ratelimit-remaining 0: a primary one, until its
// reset), is a throttle for a client with no provider profile: the call
// waits as long as asked and is sent again, rather than fail as a
// permission error. A 403 that says neither is returned as it is.
func TestA403OverARateLimitWaitsAndRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		resp func() *http.Response
		wait time.Duration
	}{
		{"retry-after", response(403, "secondary rate limit", "Retry-After", "2"), 2 * time.Second},
		{"nothing remaining", response(403, "API rate limit exceeded", "X-Ratelimit-Limit", "60",
			"X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "3"), 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, sent := callThrough(t, tc.resp, response(200, "ok"))
			require.Equal(t, http.StatusOK, status, "the refused call is sent again once the limit allows")
			require.Len(t, sent, 2)
			require.GreaterOrEqual(t, sent[1].Sub(sent[0]), tc.wait, "never before the provider said")
		})
	}
	t.Run("permission", func(t *testing.T) {
		t.Parallel()
		status, sent := callThrough(t, response(403, "forbidden"), response(200, "ok"))
		require.Equal(t, http.StatusForbidden, status)
		require.Len(t, sent, 1, "a permission error is not sent again")
	})
}

// OpenAI states its tokens a minute beside its requests: with no tokens
// left the key waits until they are back (x-ratelimit-reset-tokens), for
// the fleet, however many requests remain.
func TestNoTokensLeftPausesUntilTheirReset(t *testing.T) {
	t.Parallel()
	clk := watch(t0)
	base := &scripted{resps: []func() *http.Response{
		response(200, "ok", "X-Ratelimit-Limit-Requests", "600", "X-Ratelimit-Remaining-Requests", "599", "X-Ratelimit-Reset-Requests", "100ms",
			"X-Ratelimit-Limit-Tokens", "1000", "X-Ratelimit-Remaining-Tokens", "0", "X-Ratelimit-Reset-Tokens", "2.5s"),
		response(200, "ok")}, clk: clk}
	c, err := outbound.New(outbound.Config{Base: base, Store: memstore.New(memstore.Config{Clock: clk}), Clock: clk})
	require.NoError(t, err)
	getAdvancing(t, clk, c, "http://api.test/")
	getAdvancing(t, clk, c, "http://api.test/")
	sent := base.sentAt()
	require.Len(t, sent, 2)
	require.GreaterOrEqual(t, sent[1].Sub(sent[0]), 2500*time.Millisecond, "not before the tokens are back")
}

// Discord rounds its Retry-After header up to whole seconds and states
// the exact wait in the 429's body: the call waits the exact one.
func TestA429BodysExactWaitWins(t *testing.T) {
	t.Parallel()
	status, sent := callThrough(t, response(429, `{"message": "You are being rate limited.", "retry_after": 1.25, "global": false}`,
		"Content-Type", "application/json", "Retry-After", "2"), response(200, "ok"))
	require.Equal(t, http.StatusOK, status)
	require.Len(t, sent, 2)
	require.GreaterOrEqual(t, sent[1].Sub(sent[0]), 1250*time.Millisecond, "never before the exact wait")
	require.Less(t, sent[1].Sub(sent[0]), 2*time.Second, "not the header's rounded-up second")
}
