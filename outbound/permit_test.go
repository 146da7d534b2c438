package outbound_test

import (
	"context"
	"errors"
	"net/http"
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

// permitClient is a client for the two-step form on a fake clock: no wait
// ever sleeps (MaxWait 0 answers at once), so time moves only when the test
// moves it.
func permitClient(t *testing.T, clk *clocktest.Clock, st store.RateStore, cfg outbound.Config) *outbound.Client {
	t.Helper()
	cfg.Clock, cfg.Store = clk, st
	if cfg.AIMD == (aimd.Config{}) {
		cfg.AIMD = aimd.Config{Start: 1e4, IgnoreLatency: true}
	}
	c, err := outbound.New(cfg)
	require.NoError(t, err)
	return c
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// A 429 with Retry-After reported through one client's permit pauses the
// key for another client sharing the store (as two servers of a fleet):
// its Acquire answers how long to wait, and grants once the pause is over.
func TestPermitRetryAfterPausesTheFleet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(t0)
	st := memstore.New(memstore.Config{Clock: clk})
	a := permitClient(t, clk, st, outbound.Config{Retry: retry.Config{MaxAttempts: 1}})
	b := permitClient(t, clk, st, outbound.Config{})

	p, err := a.Acquire(ctx, "api.example.com", nil)
	require.NoError(t, err)
	require.Equal(t, "api.example.com", p.Key())
	v, err := p.Report(ctx, outbound.Outcome{Status: 429, Header: hdr("Retry-After", "2"), Latency: time.Millisecond})
	require.NoError(t, err)
	require.True(t, v.Throttled)
	require.Equal(t, "transient", v.Class)
	require.Equal(t, 2*time.Second, v.PausedFor)

	_, err = b.Acquire(ctx, "api.example.com", nil)
	var we *outbound.WaitError
	require.ErrorAs(t, err, &we)
	require.ErrorIs(t, err, outbound.ErrWouldWait)
	require.True(t, we.Paused)
	require.Greater(t, we.RetryAfter, time.Second)
	require.LessOrEqual(t, we.RetryAfter, 2*time.Second)

	// b heard of the pause: it is paused itself now, and answers so
	// without asking the store until it ends.
	_, err = b.Acquire(ctx, "api.example.com", nil)
	require.ErrorIs(t, err, outbound.ErrWouldWait)
	clk.Advance(2 * time.Second)
	p, err = b.Acquire(ctx, "api.example.com", nil)
	require.NoError(t, err)
	_, err = p.Report(ctx, outbound.Outcome{Status: 200})
	require.NoError(t, err)
}

// The breaker opens on a storm of 5xx reported through permits; Acquire
// then refuses with how long it stays open, until it half-opens.
func TestPermitBreakerOpensOn5xxStorm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(t0)
	c := permitClient(t, clk, memstore.New(memstore.Config{Clock: clk}), outbound.Config{
		Breaker: breaker.Config{ConsecutiveFailures: 3, OpenTimeout: 5 * time.Second},
	})
	for i := range 3 {
		p, err := c.Acquire(ctx, "k", nil)
		require.NoError(t, err, "attempt %d", i+1)
		v, err := p.Report(ctx, outbound.Outcome{Status: 500, Attempt: i + 1})
		require.NoError(t, err)
		require.True(t, v.Unknown)
		require.False(t, v.Retry, "a call that is not idempotent is not retried after an unknown outcome")
		require.ErrorIs(t, v.Stop, retry.ErrNotIdempotent)
		clk.Advance(time.Second) // the next turn is due
	}
	_, err := c.Acquire(ctx, "k", nil)
	var oe *outbound.OpenError
	require.ErrorAs(t, err, &oe)
	require.ErrorIs(t, err, breaker.ErrOpen)
	require.Equal(t, 4*time.Second, oe.RetryAfter, "opened a second ago, for 5 s")
	snap, ok := c.KeySnapshot("k")
	require.True(t, ok)
	require.Equal(t, "open", snap.Breaker.State)
	require.EqualValues(t, 1, snap.Rejected)

	clk.Advance(4 * time.Second)
	p, err := c.Acquire(ctx, "k", nil)
	require.NoError(t, err, "a half-open breaker admits a probe")
	require.True(t, p.Cancel())
	require.False(t, p.Cancel())
	_, err = p.Report(ctx, outbound.Outcome{Status: 200})
	require.ErrorIs(t, err, outbound.ErrPermitDone)
}

// Pacing: a second turn within the key's emission interval is a wait, not
// a pause; MaxWait long enough to cover it waits on the clock and grants.
func TestPermitPacingAndMaxWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := watch(t0)
	c, err := outbound.New(outbound.Config{Clock: clk, Store: memstore.New(memstore.Config{Clock: clk}),
		AIMD: aimd.Config{Start: 1, IgnoreLatency: true}})
	require.NoError(t, err)
	p, err := c.Acquire(ctx, "slow", nil)
	require.NoError(t, err)
	_, err = p.Report(ctx, outbound.Outcome{Status: 200})
	require.NoError(t, err)

	_, err = c.Acquire(ctx, "slow", &outbound.AcquireOpts{})
	var we *outbound.WaitError
	require.ErrorAs(t, err, &we)
	require.False(t, we.Paused)
	require.Greater(t, we.RetryAfter, time.Duration(0))
	require.LessOrEqual(t, we.RetryAfter, time.Second)

	drive(t, clk, func() {
		p, err = c.Acquire(ctx, "slow", &outbound.AcquireOpts{MaxWait: 10 * time.Second})
	})
	require.NoError(t, err)
	require.False(t, p.Granted().Before(t0.Add(we.RetryAfter)), "granted before the turn")
	require.True(t, p.Cancel())
}

// The bulkhead bounds permits in flight: a full one answers Busy.
func TestPermitBulkhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(t0)
	c := permitClient(t, clk, memstore.New(memstore.Config{Clock: clk}), outbound.Config{MaxConcurrent: 1, Burst: 10})
	p, err := c.Acquire(ctx, "k", nil)
	require.NoError(t, err)
	_, err = c.Acquire(ctx, "k", nil)
	var we *outbound.WaitError
	require.ErrorAs(t, err, &we)
	require.True(t, we.Busy)
	require.True(t, p.Cancel())
	p, err = c.Acquire(ctx, "k", nil)
	require.NoError(t, err)
	require.True(t, p.Cancel())
}

// Retry advice follows idempotency and the retry budget.
func TestPermitRetryAdvice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(t0)
	c := permitClient(t, clk, memstore.New(memstore.Config{Clock: clk}), outbound.Config{
		Retry:   retry.Config{MaxAttempts: 3},
		Breaker: breaker.Config{ConsecutiveFailures: -1},
	})
	p, err := c.Acquire(ctx, "k", &outbound.AcquireOpts{Idempotent: true})
	require.NoError(t, err)
	v, err := p.Report(ctx, outbound.Outcome{Status: 503})
	require.NoError(t, err)
	require.True(t, v.Retry)
	require.Greater(t, v.RetryAfter, time.Duration(0))

	clk.Advance(time.Second)
	p, err = c.Acquire(ctx, "k2", nil)
	require.NoError(t, err)
	v, err = p.Report(ctx, outbound.Outcome{Status: 404})
	require.NoError(t, err)
	require.False(t, v.Retry)
	require.NoError(t, v.Stop, "a permanent failure is not retried, and that is no budget's doing")

	p, err = c.Acquire(ctx, "k3", nil)
	require.NoError(t, err)
	v, err = p.Report(ctx, outbound.Outcome{Err: context.DeadlineExceeded})
	require.NoError(t, err)
	require.True(t, v.Unknown)
	require.Equal(t, "transient", v.Class)

	_, err = c.Acquire(ctx, "bad\x00key", nil)
	require.ErrorIs(t, err, store.ErrInvalidID)
	_, err = c.Acquire(ctx, "k", &outbound.AcquireOpts{MaxWait: -1})
	require.Error(t, err)
	require.False(t, errors.Is(err, outbound.ErrWouldWait))
}
