package guard_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/guard"
	"github.com/sluicerl/sluice/store/memstore"
)

// prompt is a primary that returns by its deadline (guard.DeadlineHonourer)
// and records whether each call ran on the goroutine of the test that made
// it, and whether its context had the guard's deadline.
type prompt struct {
	store.RateStore
	honours          bool
	caller, deadline atomic.Int64
	calls            atomic.Int64
	timeout          atomic.Bool // answer as a round trip cut by its deadline
}

func (p *prompt) HonoursDeadline() bool { return p.honours }

func (p *prompt) note(ctx context.Context) error {
	p.calls.Add(1)
	var pcs [64]uintptr
	for _, pc := range pcs[:runtime.Callers(1, pcs[:])] {
		if f := runtime.FuncForPC(pc); f != nil && strings.HasSuffix(f.Name(), "guard_test.TestDirectCalls") {
			p.caller.Add(1)
			break
		}
	}
	if _, ok := ctx.Deadline(); ok {
		p.deadline.Add(1)
	}
	if p.timeout.Load() {
		return fmt.Errorf("read tcp: i/o timeout: %w", context.DeadlineExceeded)
	}
	return nil
}

func (p *prompt) Take(ctx context.Context, tp store.TakeParams) (store.Result, error) {
	if err := p.note(ctx); err != nil {
		return store.Result{}, err
	}
	return p.RateStore.Take(ctx, tp)
}

func (p *prompt) TakeAll(ctx context.Context, tp store.TakeAllParams) (store.AllResult, error) {
	if err := p.note(ctx); err != nil {
		return store.AllResult{}, err
	}
	return p.RateStore.TakeAll(ctx, tp)
}

// TestDirectCalls: a primary that returns by its deadline is called on the
// caller's goroutine, with the guard's deadline; its answers, request
// errors and timeouts are judged as on a goroutine of its own.
func TestDirectCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := store.Limit{Name: "l", Algorithm: store.GCRA, Rate: 2, Period: time.Hour}
	for _, honours := range []bool{true, false} {
		p := &prompt{RateStore: memstore.New(memstore.Config{}), honours: honours}
		g, err := guard.New(p, guard.Config{})
		require.NoError(t, err)
		for range 3 {
			_, err := g.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
			require.NoError(t, err)
		}
		all, err := g.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{{Key: "k2", Limit: l, Cost: 1}}})
		require.NoError(t, err)
		require.True(t, all.Allowed)
		_, err = g.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 3})
		require.ErrorIs(t, err, store.ErrCostExceedsLimit, "a request error passes through")
		require.Equal(t, int64(5), p.calls.Load())
		require.Equal(t, int64(5), p.deadline.Load(), "every call has the guard's deadline")
		if honours {
			require.Equal(t, int64(5), p.caller.Load(), "every call runs on the caller's goroutine")
		} else {
			require.Zero(t, p.caller.Load(), "every call runs on a goroutine of its own")
		}
		require.True(t, g.Healthy())

		// A round trip cut by its deadline is a timeout, not an answer:
		// denied with FallbackTimeout while the store is not down.
		p.timeout.Store(true)
		res, err := g.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
		require.NoError(t, err)
		require.False(t, res.Allowed)
		require.Equal(t, store.FallbackTimeout, res.Fallback)
		require.True(t, g.Healthy(), "one timeout is not an outage")
		p.timeout.Store(false)

		// The caller's own cancellation says nothing about the store.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = g.Take(cctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
		require.True(t, errors.Is(err, context.Canceled) || err == nil, "got %v", err)
		require.True(t, g.Healthy())
	}
}
