package lease_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/lease"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

type bundle struct {
	clk    *clocktest.Clock
	store  *memstore.Leases
	leaser *lease.Leaser
}

func setup(t *testing.T, wrap func(store.LeaseStore) store.LeaseStore) *bundle {
	t.Helper()
	clk := clocktest.New(t0)
	ms := memstore.NewLeases(memstore.LeasesConfig{Clock: clk})
	var s store.LeaseStore = ms
	if wrap != nil {
		s = wrap(ms)
	}
	l, err := lease.New(lease.Config{Store: s, Clock: clk})
	require.NoError(t, err)
	return &bundle{clk: clk, store: ms, leaser: l}
}

var job = lease.Params{Name: "job", Key: "j1", Permits: 1, TTL: 3 * time.Second}

func TestAcquireRelease(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	a, res, err := b.leaser.Acquire(ctx, job)
	require.NoError(t, err)
	require.NotNil(t, a)
	require.True(t, res.Acquired)
	require.Equal(t, res.Lease.Token, a.Token())
	require.NoError(t, a.Context().Err())

	other, res, err := b.leaser.Acquire(ctx, job)
	require.NoError(t, err)
	require.Nil(t, other, "one permit")
	require.Equal(t, 3*time.Second, res.RetryAfter)

	require.NoError(t, a.Write(ctx, "cursor", []byte("42")))
	require.NoError(t, a.Release(ctx))
	require.ErrorIs(t, a.Err(), lease.ErrReleased)
	require.ErrorIs(t, a.Release(ctx), store.ErrLeaseNotHeld, "twice")
	require.ErrorIs(t, a.Write(ctx, "cursor", []byte("43")), store.ErrStaleToken)

	c, _, err := b.leaser.Acquire(ctx, job)
	require.NoError(t, err)
	require.NotNil(t, c)
	require.Greater(t, c.Token(), a.Token())
	require.NoError(t, c.Release(ctx))
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, p := range []lease.Params{
		{Key: "k", Permits: 1, TTL: time.Second},
		{Name: "n", Key: "k", Permits: 0, TTL: time.Second},
		{Name: "n", Key: "k", Permits: 1},
	} {
		_, _, err := b.leaser.Acquire(context.Background(), p)
		require.Error(t, err, "%+v", p)
		_, err = b.leaser.AcquireWait(context.Background(), p)
		require.Error(t, err, "%+v", p)
	}
	for _, cfg := range []lease.Config{
		{RenewFraction: -1}, {RenewFraction: 0.95}, {MinBackoff: -1}, {MinBackoff: 2 * time.Second, MaxBackoff: time.Second},
	} {
		_, err := lease.New(cfg)
		require.ErrorIs(t, err, lease.ErrInvalidConfig, "%+v", cfg)
	}
}

func TestKeepAliveRenews(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	a, _, err := b.leaser.Acquire(ctx, job)
	require.NoError(t, err)
	for range 10 {
		b.clk.BlockUntilTimers(1)
		b.clk.Advance(time.Second) // a third of the TTL
	}
	b.clk.BlockUntilTimers(1) // the tenth renewal is through
	require.NoError(t, a.Context().Err(), "held for 10 s with a TTL of 3 s")
	hs, err := b.store.Holders(ctx, store.HoldersParams{Name: "job", Key: "j1"})
	require.NoError(t, err)
	require.Len(t, hs, 1)
	require.Equal(t, t0.Add(13*time.Second).UnixMicro(), hs[0].Expires)
	require.Equal(t, hs[0].Expires, a.Lease().Expires)
	require.NoError(t, a.Release(ctx))
}

// skewed makes the store's clock run ahead of the Leaser's, as a holder
// frozen for a while would see it.
type skewed struct {
	store.LeaseStore
	clk  *clocktest.Clock
	skew time.Duration
}

func (s *skewed) Renew(ctx context.Context, p store.RenewParams) (store.Lease, error) {
	p.Now = s.clk.Now().Add(s.skew)
	return s.LeaseStore.Renew(ctx, p)
}

func TestKeepAliveCancelsWhenLost(t *testing.T) {
	t.Parallel()
	var sk *skewed
	b := setup(t, func(s store.LeaseStore) store.LeaseStore { sk = &skewed{LeaseStore: s}; return sk })
	sk.clk = b.clk
	ctx := context.Background()
	a, _, err := b.leaser.Acquire(ctx, job)
	require.NoError(t, err)
	// The holder was frozen: the store's clock is 5 s on, and a successor
	// has the permit.
	sk.skew = 5 * time.Second
	succ, err := b.store.Acquire(ctx, store.AcquireParams{Name: "job", Key: "j1", Holder: "succ", Permits: 1, TTL: 3 * time.Second, Now: t0.Add(5 * time.Second)})
	require.NoError(t, err)
	require.True(t, succ.Acquired)
	b.clk.BlockUntilTimers(1)
	b.clk.Advance(time.Second)
	<-a.Context().Done()
	require.ErrorIs(t, a.Err(), lease.ErrLost)
	require.ErrorIs(t, a.Write(ctx, "f", nil), store.ErrStaleToken, "the stale holder cannot write")
	require.ErrorIs(t, a.Release(ctx), store.ErrLeaseNotHeld)
	hs, err := b.store.Holders(ctx, store.HoldersParams{Name: "job", Key: "j1", Now: t0.Add(5 * time.Second)})
	require.NoError(t, err)
	require.Len(t, hs, 1)
	require.Equal(t, "succ", hs[0].Holder, "the successor's permit is untouched")
}

// failing fails every renewal with a transient error.
type failing struct{ store.LeaseStore }

func (failing) Renew(context.Context, store.RenewParams) (store.Lease, error) {
	return store.Lease{}, errors.New("connection refused")
}

func TestKeepAliveCancelsAtDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, func(s store.LeaseStore) store.LeaseStore { return failing{s} })
	a, _, err := b.leaser.Acquire(context.Background(), job)
	require.NoError(t, err)
	for a.Context().Err() == nil {
		b.clk.BlockUntilTimers(1)
		require.False(t, b.clk.Now().After(t0.Add(3*time.Second)), "still held past the TTL")
		b.clk.Advance(250 * time.Millisecond)
		if b.clk.Now().Equal(t0.Add(3 * time.Second)) {
			<-a.Context().Done()
		}
	}
	require.ErrorIs(t, a.Err(), lease.ErrLost)
}

func TestAcquireContextBoundsOnlyTheCall(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	a, _, err := b.leaser.Acquire(ctx, job)
	require.NoError(t, err)
	cancel()
	for range 5 { // 5 s with a TTL of 3 s
		b.clk.BlockUntilTimers(1)
		b.clk.Advance(time.Second)
	}
	b.clk.BlockUntilTimers(1)
	require.NoError(t, a.Context().Err(), "still held and renewed")
	require.NoError(t, a.Release(context.Background()))
}

func TestAcquireWaitWakesOnRelease(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	a, _, err := b.leaser.Acquire(ctx, job)
	require.NoError(t, err)
	got := make(chan *lease.Lease)
	go func() {
		l, err := b.leaser.AcquireWait(ctx, job)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	b.clk.BlockUntilTimers(2) // a's keep-alive and the waiter's safety net
	require.NoError(t, a.Release(ctx))
	w := <-got // no time passed: the release woke it
	require.NotNil(t, w)
	require.Greater(t, w.Token(), a.Token())
	require.NoError(t, w.Release(ctx))
}

// deaf hides the store's announcements: waiters must back off.
type deaf struct{ store.LeaseStore }

func TestAcquireWaitBacksOffWithoutAnnouncements(t *testing.T) {
	t.Parallel()
	b := setup(t, func(s store.LeaseStore) store.LeaseStore { return deaf{s} })
	ctx := context.Background()
	a, _, err := b.leaser.Acquire(ctx, job)
	require.NoError(t, err)
	got := make(chan *lease.Lease, 1)
	go func() {
		l, err := b.leaser.AcquireWait(ctx, job)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	b.clk.BlockUntilTimers(2)
	require.NoError(t, a.Release(ctx))
	select {
	case <-got:
		t.Fatal("woken without an announcement or time passing")
	default:
	}
	b.clk.Advance(10 * time.Millisecond) // the first back-off is at most MinBackoff
	var w *lease.Lease
	select {
	case w = <-got:
	case <-time.After(time.Minute):
		t.Fatal("the waiter did not retry after its first back-off")
	}
	require.Greater(t, w.Token(), a.Token())
}

func TestAcquireWaitHonoursContext(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a, _, err := b.leaser.Acquire(context.Background(), job)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := b.leaser.AcquireWait(ctx, job)
		done <- err
	}()
	b.clk.BlockUntilTimers(2)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, a.Release(context.Background()))
}

func TestPermits(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	p := lease.Params{Name: "bulk", Key: "shop-1", Permits: 5, TTL: time.Minute}
	var held []*lease.Lease
	for range 5 {
		l, _, err := b.leaser.Acquire(ctx, p)
		require.NoError(t, err)
		require.NotNil(t, l)
		held = append(held, l)
	}
	l, _, err := b.leaser.Acquire(ctx, p)
	require.NoError(t, err)
	require.Nil(t, l, "five bulk operations per shop")
	for _, l := range held {
		require.NoError(t, l.Release(ctx))
	}
}

// flaky fails the first release with a transient error.
type flaky struct {
	store.LeaseStore
	failed bool
}

func (f *flaky) Release(ctx context.Context, p store.ReleaseParams) error {
	if !f.failed {
		f.failed = true
		return errors.New("connection reset")
	}
	return f.LeaseStore.Release(ctx, p)
}

// TestReleaseEndsContextWhenStoreFails: once Release is called nothing
// renews the lease, so its Context ends even if the store could not free
// the permit; a second Release frees it.
func TestReleaseEndsContextWhenStoreFails(t *testing.T) {
	t.Parallel()
	b := setup(t, func(s store.LeaseStore) store.LeaseStore { return &flaky{LeaseStore: s} })
	ctx := context.Background()
	a, _, err := b.leaser.Acquire(ctx, job)
	require.NoError(t, err)
	require.Error(t, a.Release(ctx))
	require.ErrorIs(t, a.Err(), lease.ErrReleased, "no longer renewed: the holder must stop")
	require.NoError(t, a.Release(ctx), "a retry frees the permit")
	hs, err := b.store.Holders(ctx, store.HoldersParams{Name: "job", Key: "j1"})
	require.NoError(t, err)
	require.Empty(t, hs)
}

// stuck blocks every renewal until its context ends, and reports why it
// ended.
type stuck struct {
	store.LeaseStore
	started chan struct{}
	ended   chan error
}

func (s *stuck) Renew(ctx context.Context, _ store.RenewParams) (store.Lease, error) {
	s.started <- struct{}{}
	<-ctx.Done()
	s.ended <- ctx.Err()
	return store.Lease{}, ctx.Err()
}

// TestReleaseCancelsRenewalInFlight: Release does not wait for a renewal
// stuck on the store; it cancels it.
func TestReleaseCancelsRenewalInFlight(t *testing.T) {
	t.Parallel()
	st := &stuck{started: make(chan struct{}, 1), ended: make(chan error, 1)}
	b := setup(t, func(s store.LeaseStore) store.LeaseStore { st.LeaseStore = s; return st })
	ctx := context.Background()
	a, _, err := b.leaser.Acquire(ctx, job)
	require.NoError(t, err)
	b.clk.BlockUntilTimers(1)
	b.clk.Advance(time.Second)
	<-st.started
	require.NoError(t, a.Release(ctx))
	require.ErrorIs(t, <-st.ended, context.Canceled, "cancelled by Release, not left to time out")
	require.ErrorIs(t, a.Err(), lease.ErrReleased)
}

// TestNoGoroutineLeft: released, lost and abandoned-wait leases leave no
// goroutine behind (synctest fails the test if one is still blocked).
func TestNoGoroutineLeft(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ms := memstore.NewLeases(memstore.LeasesConfig{})
		l, err := lease.New(lease.Config{Store: ms})
		require.NoError(t, err)
		ctx := context.Background()
		a, _, err := l.Acquire(ctx, job)
		require.NoError(t, err)
		time.Sleep(10 * time.Second) // renewed meanwhile
		require.NoError(t, a.Context().Err())

		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = l.AcquireWait(wctx, job)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, a.Release(ctx))

		// Lost: a successor takes the permit after the store's clock jumps.
		b, _, err := l.Acquire(ctx, job)
		require.NoError(t, err)
		_, err = ms.Acquire(ctx, store.AcquireParams{Name: job.Name, Key: job.Key, Holder: "succ", Permits: 1, TTL: time.Hour, Now: time.Now().Add(time.Minute)})
		require.NoError(t, err)
		<-b.Context().Done()
		require.ErrorIs(t, b.Err(), lease.ErrLost)
	})
}
