package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/guard"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/storetest"
)

// flakyLeases is a memstore lease store that, while broken, hangs until the
// caller's deadline or fails at once, like flaky.
type flakyLeases struct {
	*memstore.Leases
	f *flaky
}

func (l *flakyLeases) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	if err := l.f.broken(ctx); err != nil {
		return store.AcquireResult{}, err
	}
	return l.Leases.Acquire(ctx, p)
}

func (l *flakyLeases) Renew(ctx context.Context, p store.RenewParams) (store.Lease, error) {
	if err := l.f.broken(ctx); err != nil {
		return store.Lease{}, err
	}
	return l.Leases.Renew(ctx, p)
}

func (l *flakyLeases) Release(ctx context.Context, p store.ReleaseParams) error {
	if err := l.f.broken(ctx); err != nil {
		return err
	}
	return l.Leases.Release(ctx, p)
}

func (l *flakyLeases) TakeAllAcquire(ctx context.Context, p store.TakeAllAcquireParams) (store.TakeAllAcquireResult, error) {
	if err := l.f.broken(ctx); err != nil {
		return store.TakeAllAcquireResult{}, err
	}
	return l.Leases.TakeAllAcquire(ctx, p)
}

func leaseSetup(t *testing.T) (store.LeaseStore, *guard.Store, *flaky, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	mem := memstore.New(memstore.Config{Clock: clk})
	f := &flaky{RateStore: mem}
	fl := &flakyLeases{Leases: memstore.NewLeases(memstore.LeasesConfig{Rates: mem}), f: f}
	g, err := guard.New(fl, guard.Config{
		Timeout: time.Minute, // never reached: flaky times out at once
		Clock:   clk,
		Limits:  map[string]store.Outage{"open": {Mode: store.FailOpen}},
	})
	require.NoError(t, err)
	ls := g.Leases()
	require.NotNil(t, ls)
	return ls, g, f, clk
}

func acquire(holder string) store.AcquireParams {
	return store.AcquireParams{Name: "jobs", Key: "k", Holder: holder, Permits: 1, TTL: time.Minute}
}

func TestLeasesConformanceWhileHealthy(t *testing.T) {
	t.Parallel()
	storetest.RunLeases(t, func(t *testing.T) store.LeaseStore {
		g, err := guard.New(memstore.NewLeases(memstore.LeasesConfig{}), guard.Config{Timeout: time.Minute})
		require.NoError(t, err)
		return g.Leases()
	})
}

func TestLeasesImplementWhatThePrimaryDoes(t *testing.T) {
	t.Parallel()
	g, err := guard.New(memstore.NewLeases(memstore.LeasesConfig{}), guard.Config{})
	require.NoError(t, err)
	ls := g.Leases()
	require.Implements(t, (*store.RateLeaseStore)(nil), ls)
	require.Implements(t, (*store.LeaseWatcher)(nil), ls)

	g, err = guard.New(memstore.New(memstore.Config{}), guard.Config{})
	require.NoError(t, err)
	require.Nil(t, g.Leases(), "a primary without leases has none to guard")
}

func TestLeasesFailClosedWithinTheTimeout(t *testing.T) {
	t.Parallel()
	ls, g, f, clk := leaseSetup(t)
	ctx := context.Background()

	got, err := ls.Acquire(ctx, acquire("a"))
	require.NoError(t, err)
	require.True(t, got.Acquired)

	// A black-holed store: each call times out and fails closed; enough of
	// them, over a window, mark the store down.
	f.mode.Store(1)
	for i := range guard.DefaultMinTimeouts {
		require.True(t, g.Healthy(), "fewer timeouts than the threshold leave the store up")
		if i > 0 {
			clk.Advance(guard.DefaultWindow / 2) // spread over the window
		}
		start := time.Now()
		_, err = ls.Acquire(ctx, acquire("b"))
		require.ErrorIs(t, err, guard.ErrUnavailable)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		// flaky fails at once; the guard's own Timeout is a minute: half
		// of it is the stated margin for a saturated machine.
		require.Less(t, time.Since(start), time.Minute/2, "answered by the store's failure, not the guard's timeout")
	}
	require.False(t, g.Healthy())

	// During the backoff nothing reaches the store and every lease call
	// fails at once.
	calls := f.calls.Load()
	_, err = ls.Renew(ctx, store.RenewParams{Name: "jobs", Key: "k", Holder: "a", Token: got.Lease.Token, TTL: time.Minute})
	require.ErrorIs(t, err, guard.ErrUnavailable)
	err = ls.Release(ctx, store.ReleaseParams{Name: "jobs", Key: "k", Holder: "a", Token: got.Lease.Token})
	require.ErrorIs(t, err, guard.ErrUnavailable)
	_, err = ls.(store.RateLeaseStore).TakeAllAcquire(ctx, store.TakeAllAcquireParams{Lease: acquire("b")})
	require.ErrorIs(t, err, guard.ErrUnavailable)
	_, _, err = ls.(store.LeaseWatcher).WatchLease(ctx, "jobs", "k")
	require.ErrorIs(t, err, guard.ErrUnavailable)
	require.Equal(t, calls, f.calls.Load(), "no call may reach the store during the backoff")

	// The rate half keeps its outage modes.
	res, err := ls.(store.RateLeaseStore).Take(ctx, store.TakeParams{Key: "x", Limit: lim("open"), Cost: 1})
	require.NoError(t, err)
	require.True(t, res.Allowed)

	// Healed: after the backoff one probe goes through, and the lease held
	// before the outage is still "a"'s.
	f.mode.Store(0)
	clk.Advance(time.Second)
	l, err := ls.Renew(ctx, store.RenewParams{Name: "jobs", Key: "k", Holder: "a", Token: got.Lease.Token, TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, got.Lease.Token, l.Token)
	require.True(t, g.Healthy())
}

func TestLeaseAnswersAreNotOutages(t *testing.T) {
	t.Parallel()
	ls, g, _, _ := leaseSetup(t)
	ctx := context.Background()
	err := ls.Release(ctx, store.ReleaseParams{Name: "jobs", Key: "k", Holder: "nobody", Token: 1})
	require.ErrorIs(t, err, store.ErrLeaseNotHeld)
	require.NotErrorIs(t, err, guard.ErrUnavailable)
	_, err = ls.Acquire(ctx, store.AcquireParams{Name: "jobs", Key: "k", Holder: "a", Permits: 0, TTL: time.Minute})
	require.ErrorIs(t, err, store.ErrInvalidLease)
	require.True(t, g.Healthy())
}

func TestWatchLeaseThroughTheGuard(t *testing.T) {
	t.Parallel()
	ls, g, _, _ := leaseSetup(t)
	w := ls.(store.LeaseWatcher)
	// A request the store refuses says nothing about its health.
	_, _, err := w.WatchLease(t.Context(), "", "k")
	require.ErrorIs(t, err, store.ErrEmptyKey)
	require.True(t, g.Healthy())
	ch, stop, err := w.WatchLease(t.Context(), "jobs", "k")
	require.NoError(t, err)
	defer stop()
	got, err := ls.Acquire(t.Context(), acquire("a"))
	require.NoError(t, err)
	_, err = ls.Acquire(t.Context(), acquire("b")) // refused: a waiter now
	require.NoError(t, err)
	require.NoError(t, ls.Release(t.Context(), store.ReleaseParams{Name: "jobs", Key: "k", Holder: "a", Token: got.Lease.Token}))
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the release was not announced through the guard")
	}
}
