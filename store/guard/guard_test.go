package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/guard"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/storetest"
)

// flaky wraps a store and, while broken, times out (a black-holed
// connection: the call ends with a deadline error at once, so that tests do
// not depend on the machine's speed; TestNeverWaitsPastTheTimeout checks
// the guard's own deadline) or fails (a reset one).
type flaky struct {
	store.RateStore
	mode  atomic.Int32 // 0 healthy, 1 hang, 2 fail
	calls atomic.Int64
}

var errReset = errors.New("connection reset by peer")

func (f *flaky) broken(ctx context.Context) error {
	f.calls.Add(1)
	switch f.mode.Load() {
	case 1:
		if err := ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("read tcp: i/o timeout: %w", context.DeadlineExceeded)
	case 2:
		return errReset
	}
	return nil
}

func (f *flaky) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	if err := f.broken(ctx); err != nil {
		return store.Result{}, err
	}
	return f.RateStore.Take(ctx, p)
}

func (f *flaky) TakeAll(ctx context.Context, p store.TakeAllParams) (store.AllResult, error) {
	if err := f.broken(ctx); err != nil {
		return store.AllResult{}, err
	}
	return f.RateStore.TakeAll(ctx, p)
}

func lim(name string) store.Limit {
	return store.Limit{Name: name, Rate: 10, Period: time.Second, Burst: 10}
}

// breakDown breaks the store (1 hang, 2 reset) and takes from "closed"
// until the guard declares it down: at once on a reset connection; when it
// hangs, after DefaultMinTimeouts timeouts spread over DefaultWindow (the
// fake clock moves on half a window after each), each of those answered as
// a timeout (denied, the store still up). It returns the first answer
// given while down.
func breakDown(t *testing.T, g *guard.Store, f *flaky, clk *clocktest.Clock, brk int32) store.Result {
	t.Helper()
	f.mode.Store(brk)
	want := 1
	if brk == 1 {
		want = guard.DefaultMinTimeouts
	}
	for i := 1; ; i++ {
		r, err := g.Take(context.Background(), store.TakeParams{Key: "k", Limit: lim("closed"), Cost: 1})
		require.NoError(t, err)
		require.False(t, r.Allowed)
		if !g.Healthy() {
			require.Equal(t, want, i, "calls it took to declare the store down")
			require.Equal(t, store.FallbackStoreDown, r.Fallback)
			return r
		}
		require.Equal(t, store.FallbackTimeout, r.Fallback, "a timeout while the store is up")
		require.Less(t, i, want)
		clk.Advance(guard.DefaultWindow / 2)
	}
}

func setup(t *testing.T) (*guard.Store, *flaky, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &flaky{RateStore: memstore.New(memstore.Config{Clock: clk})}
	g, err := guard.New(f, guard.Config{
		Timeout: time.Minute, // never reached: flaky times out at once
		Clock:   clk,
		Limits: map[string]store.Outage{
			"open":   {Mode: store.FailOpen},
			"closed": {Mode: store.FailClosed},
			"local":  {Mode: store.FailLocal, Share: 0.5},
		},
	})
	require.NoError(t, err)
	return g, f, clk
}

func TestConformanceWhileHealthy(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.RateStore {
		g, err := guard.New(memstore.New(memstore.Config{}), guard.Config{Timeout: time.Minute})
		require.NoError(t, err)
		return g
	})
}

func TestOutageModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, brk := range []int32{1, 2} {
		g, f, clk := setup(t)
		r := breakDown(t, g, f, clk, brk)
		require.False(t, r.Allowed, "fail_closed denies")
		require.Positive(t, r.RetryAfter)
		require.Equal(t, store.FallbackStoreDown, r.Fallback)
		require.Equal(t, store.FailClosed, r.FallbackMode)
		require.False(t, g.Healthy())

		// During the backoff the store is not called at all.
		calls := f.calls.Load()
		r, err := g.Take(ctx, store.TakeParams{Key: "k", Limit: lim("open"), Cost: 3})
		require.NoError(t, err)
		require.True(t, r.Allowed, "fail_open allows")
		require.Equal(t, store.FallbackStoreDown, r.Fallback, "an outage answer says it is one")
		require.Equal(t, store.FailOpen, r.FallbackMode)
		require.Equal(t, calls, f.calls.Load())

		// local: half of rate 10 and burst 10 in this process, starting
		// spent (the shared store may have granted the burst just before):
		// nothing at once, then at most its burst of 5 a second later.
		r, err = g.Take(ctx, store.TakeParams{Key: "k", Limit: lim("local"), Cost: 1})
		require.NoError(t, err)
		require.False(t, r.Allowed, "local starts with its budget spent")
		clk.Advance(time.Second)
		admitted := 0
		for range 8 {
			r, err = g.Take(ctx, store.TakeParams{Key: "k", Limit: lim("local"), Cost: 1})
			require.NoError(t, err)
			if r.Allowed {
				admitted++
			}
		}
		require.Equal(t, 5, admitted, "local enforces its share")

		// A cost the fleet's limit could never grant is still an error.
		_, err = g.Take(ctx, store.TakeParams{Key: "k", Limit: lim("open"), Cost: 11})
		require.ErrorIs(t, err, store.ErrCostExceedsLimit)

		// The store heals: after the backoff one probe finds it and every
		// call goes back to it.
		f.mode.Store(0)
		clk.Advance(time.Second)
		r, err = g.Take(ctx, store.TakeParams{Key: "k", Limit: lim("closed"), Cost: 1})
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.True(t, g.Healthy())
		require.Equal(t, int64(9), r.Remaining, "decided by the shared store again")
		require.Equal(t, store.NoFallback, r.Fallback)
	}
}

func TestTakeAllDuringOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, f, clk := setup(t)
	f.mode.Store(2)

	res, err := g.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{
		{Key: "a", Limit: lim("open"), Cost: 1},
		{Key: "a", Limit: lim("closed"), Cost: 1},
	}})
	require.NoError(t, err)
	require.False(t, res.Allowed, "any fail_closed limit denies the whole request")
	require.True(t, res.Results[0].Allowed)
	require.False(t, res.Results[1].Allowed)

	// open + local: local decides, all or nothing, starting spent.
	res, err = g.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{
		{Key: "b", Limit: lim("open"), Cost: 1},
		{Key: "b", Limit: lim("local"), Cost: 1},
	}})
	require.NoError(t, err)
	require.False(t, res.Allowed, "local starts with its budget spent")
	clk.Advance(time.Second)
	for range 5 {
		res, err = g.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{
			{Key: "b", Limit: lim("open"), Cost: 1},
			{Key: "b", Limit: lim("local"), Cost: 1},
		}})
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	res, err = g.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{
		{Key: "b", Limit: lim("open"), Cost: 1},
		{Key: "b", Limit: lim("local"), Cost: 1},
	}})
	require.NoError(t, err)
	require.False(t, res.Allowed, "the local share of 5 is spent")
}

func TestRequestErrorsAreNotOutages(t *testing.T) {
	t.Parallel()
	g, _, _ := setup(t)
	_, err := g.Take(context.Background(), store.TakeParams{Key: "k", Limit: lim("closed"), Cost: 50})
	require.ErrorIs(t, err, store.ErrCostExceedsLimit)
	require.True(t, g.Healthy())
}

func TestCallerCancellationIsNotAnOutage(t *testing.T) {
	t.Parallel()
	g, f, _ := setup(t)
	f.mode.Store(1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := g.Take(ctx, store.TakeParams{Key: "k", Limit: lim("closed"), Cost: 1})
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, g.Healthy())
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := guard.New(nil, guard.Config{})
	require.Error(t, err)
	_, err = guard.New(memstore.New(memstore.Config{}), guard.Config{Timeout: -1})
	require.ErrorContains(t, err, "timeout")
	_, err = guard.New(memstore.New(memstore.Config{}), guard.Config{Timeout: time.Second, MaxTimeout: time.Millisecond})
	require.ErrorContains(t, err, "max timeout")
	_, err = guard.New(memstore.New(memstore.Config{}), guard.Config{TimeoutFactor: -1})
	require.ErrorContains(t, err, "timeout factor")
	_, err = guard.New(memstore.New(memstore.Config{}), guard.Config{Limits: map[string]store.Outage{"x": {Mode: store.FailLocal, Share: 2}}})
	require.ErrorContains(t, err, `limit "x"`)
}

func TestFallbackIsReported(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &flaky{RateStore: memstore.New(memstore.Config{Clock: clk})}
	f.mode.Store(2)
	var got []string
	g, err := guard.New(f, guard.Config{Clock: clk, Default: store.Outage{Mode: store.FailOpen},
		OnFallback: func(limit string, mode store.OutageMode, reason store.FallbackReason, err error) {
			got = append(got, limit+"/"+mode.String()+"/"+reason.String())
		}})
	require.NoError(t, err)
	_, err = g.Take(context.Background(), store.TakeParams{Key: "k", Limit: lim("x"), Cost: 1})
	require.NoError(t, err)
	require.Equal(t, []string{"x/fail_open/store_down"}, got)
}
