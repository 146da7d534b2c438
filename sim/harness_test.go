package sim

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
)

// runManual runs cfg on clk, a manual clock, and returns its result. The
// clock moves on by a millisecond only once every goroutine of the run
// waits on it: the run's pending timers are then the harness's two (the
// run's end and the per-second sampler) and one per worker (each waits on
// the provider's service time or on its back-off after a failure), so the
// provider sees each request when its worker sent it, however slow the
// machine.
func runManual(t *testing.T, clk *clocktest.Clock, cfg Config) *Result {
	t.Helper()
	cfg.Clock = clk
	type result struct {
		res *Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := Run(t.Context(), cfg)
		done <- result{res, err}
	}()
	want := cfg.Workers + 2
	deadline := time.Now().Add(3 * time.Minute) // a few thousand steps of scheduling at most
	for {
		select {
		case r := <-done:
			require.NoError(t, r.err)
			return r.res
		default:
		}
		if n := clk.Timers(); n >= want {
			require.Equal(t, want, n, "more timers than the run's goroutines")
			clk.Advance(time.Millisecond)
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running at %v on the manual clock after 3 minutes (%d of %d timers pending)", clk.Now(), clk.Timers(), want)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func TestRunUnpacedAgainstProvider(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	p, err := NewProvider(ProviderConfig{Dialect: RetryAfterSeconds, Limit: 20, Latency: 5 * time.Millisecond, Clock: clk})
	require.NoError(t, err)
	res := runManual(t, clk, Config{
		Workers: 4, Processes: 2, Duration: 2 * time.Second,
		Base: HandlerTransport{Handler: p}, Limit: p.LimitAt,
	})
	require.Len(t, res.Seconds, 2)
	var off, adm, good, thr int64
	for _, s := range res.Seconds {
		require.Equal(t, 20.0, s.Limit)
		off += s.Offered
		adm += s.Admitted
		good += s.Goodput
		thr += s.Throttles
	}
	st := p.Stats()
	// The harness saw what the provider answered (a request still in
	// flight at the end, one per worker at most, is missing here).
	require.InDelta(t, st.Requests, off, 4)
	require.InDelta(t, st.Admitted, adm, 4)
	require.InDelta(t, st.Throttled, thr, 4)
	require.InDelta(t, adm, good, 4)
	// Unpaced workers get the limit (and the burst of 2) and a storm of
	// 429s.
	require.InDelta(t, 40+2, adm, 1)
	require.Greater(t, thr, 4*adm)
	sum := Summarize(res)
	require.Equal(t, off, sum.Offered)
	require.Zero(t, sum.Retries)
}

// retryOnce retries a throttled request once, counting its retries: the
// harness must count them too.
type retryOnce struct {
	base    http.RoundTripper
	retried *atomic.Int64
}

func (r retryOnce) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		return resp, err
	}
	_ = resp.Body.Close()
	r.retried.Add(1)
	return r.base.RoundTrip(req)
}

func TestRunCountsRetriesAndRates(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	p, err := NewProvider(ProviderConfig{Dialect: Bare429, Limit: 10, Latency: 5 * time.Millisecond, Clock: clk})
	require.NoError(t, err)
	var retried atomic.Int64
	res := runManual(t, clk, Config{
		Workers: 2, Processes: 2, Duration: time.Second,
		Base: HandlerTransport{Handler: p},
		NewClient: func(i int, base http.RoundTripper) (Client, error) {
			return Client{Transport: retryOnce{base, &retried}, Rate: func() float64 { return float64(i + 1) }}, nil
		},
	})
	s := res.Seconds[0]
	require.Positive(t, s.Retries)
	// Every retry the clients sent is counted (one in flight per worker at
	// the end at most is not).
	require.InDelta(t, retried.Load(), s.Retries, 2)
	require.Equal(t, 3.0, s.Rate)
	require.Zero(t, s.Limit, "no limit function: unknown")
	require.Equal(t, -1, Summarize(res).ConvergeS)
}

func TestRunConfigErrors(t *testing.T) {
	t.Parallel()
	base := HandlerTransport{}
	for _, c := range []Config{
		{},
		{Base: base, Workers: 1, Processes: 2},
		{Base: base, Duration: time.Millisecond},
		{Base: base, URL: "://bad"},
		{Base: base, SlowAfter: -1},
		{Base: base, NewClient: func(int, http.RoundTripper) (Client, error) { return Client{}, nil }},
	} {
		_, err := Run(context.Background(), c)
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", c)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	secs := make([]Second, 30)
	for i := range secs {
		l := 100.0
		if i >= 15 {
			l = 50
		}
		secs[i] = Second{T: i, Limit: l, Offered: int64(l), Goodput: int64(l * 0.97), Admitted: int64(l * 0.97)}
	}
	secs[0].Goodput, secs[1].Goodput, secs[2].Goodput = 10, 40, 95 // the ramp
	secs[15].Throttles, secs[16].Throttles, secs[17].Throttles = 20, 10, 5
	secs[20].Throttles = 1 // under 1% of the rest of the segment
	secs[5].Throttles = 3
	s := Summarize(&Result{Seconds: secs})
	require.Equal(t, 2, s.ConvergeS)
	require.Equal(t, 3, s.SettleS)
	// Steady seconds: 10..14 and 25..28.
	want := (5*97 + 4*48.0) / (5*100 + 4*50.0)
	require.InDelta(t, want, s.GoodputRatio, 1e-9)
	require.InDelta(t, 0.0, s.ThrottleRatio, 1e-9)
	secs[12].Throttles = 7
	require.InDelta(t, 7.0/(5*100+4*50), Summarize(&Result{Seconds: secs}).ThrottleRatio, 1e-9)
	require.EqualValues(t, 39, s.Throttles)
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status int
		body   string
		want   Outcome
	}{
		{200, `{"ok":true}`, OutcomeOK},
		{200, `{"errors":[{"extensions":{"code":"THROTTLED"}}]}`, OutcomeThrottle},
		// Issue 18: a 200 carrying GraphQL errors is an error, never goodput.
		{200, `{"data":null,"errors":[{"message":"Field 'shop' doesn't exist"}]}`, OutcomeError},
		{200, `{"data":{"x":1},"errors":[]}`, OutcomeOK},
		{200, `{"data":{"note":"\"errors\" in a string"}}`, OutcomeOK},
		{429, ``, OutcomeThrottle},
		{503, ``, OutcomeThrottle},
		{529, ``, OutcomeThrottle},
		{418, ``, OutcomeBan},
		{404, ``, OutcomeError},
		{500, ``, OutcomeError},
	} {
		require.Equal(t, tt.want, Classify(tt.status, []byte(tt.body)), "%d %s", tt.status, tt.body)
	}
}

func TestClassifyResponse403(t *testing.T) {
	t.Parallel()
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	require.Equal(t, OutcomeThrottle, ClassifyResponse(403, h("Retry-After", "60"), nil), "a secondary limit")
	require.Equal(t, OutcomeThrottle, ClassifyResponse(403, h("X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "9"), nil), "a primary limit")
	require.Equal(t, OutcomeError, ClassifyResponse(403, h("X-Ratelimit-Remaining", "7"), nil), "permission")
	require.Equal(t, OutcomeError, ClassifyResponse(403, nil, nil))
	require.Equal(t, OutcomeThrottle, ClassifyResponse(429, nil, nil))
	require.Equal(t, OutcomeOK, ClassifyResponse(200, h("Retry-After", "60"), []byte(`{}`)))
}
