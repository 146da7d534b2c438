package guard_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/guard"
	"github.com/sluicerl/sluice/store/memstore"
)

// TestOneSlowCallIsNotAnOutage: a call that times out while the store is
// up is denied in every mode (the store may still apply it), says so, and
// does not take the store down; nor do timeouts within less than
// Config.Window of the last answer.
func TestOneSlowCallIsNotAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, f, _ := setup(t)
	for _, name := range []string{"open", "closed", "local"} {
		f.mode.Store(1)
		r, err := g.Take(ctx, store.TakeParams{Key: "k", Limit: lim(name), Cost: 1})
		require.NoError(t, err)
		require.False(t, r.Allowed, "%s: a timed-out call while the store is up is denied", name)
		require.Equal(t, store.FallbackTimeout, r.Fallback)
		require.Equal(t, g.Timeout(), r.RetryAfter)
		f.mode.Store(0)
		// Successes in between keep timeouts a minority of the window.
		for range 3 {
			r, err = g.Take(ctx, store.TakeParams{Key: "k2", Limit: lim(name), Cost: 0})
			require.NoError(t, err)
			require.Equal(t, store.NoFallback, r.Fallback)
		}
		require.True(t, g.Healthy(), "%s: one slow call never declares the store down", name)
	}

	// A stall shorter than the window, however many calls it times out,
	// is not an outage; timeouts with no answer for a whole window are.
	g, f, clk := setup(t)
	_, err := g.Take(ctx, store.TakeParams{Key: "k", Limit: lim("open"), Cost: 1})
	require.NoError(t, err)
	f.mode.Store(1)
	for range 10 {
		_, _ = g.Take(ctx, store.TakeParams{Key: "k", Limit: lim("open"), Cost: 1})
	}
	clk.Advance(guard.DefaultWindow - time.Millisecond)
	_, _ = g.Take(ctx, store.TakeParams{Key: "k", Limit: lim("open"), Cost: 1})
	require.True(t, g.Healthy(), "timeouts within less than a window of the last answer")
	clk.Advance(time.Millisecond)
	_, _ = g.Take(ctx, store.TakeParams{Key: "k", Limit: lim("open"), Cost: 1})
	require.False(t, g.Healthy(), "timeouts and no answer for a whole window")
}

// hangs is a store whose calls ignore their context until released, as a
// backend does that waits for a cancel request to be answered.
type hangs struct {
	store.RateStore
	release chan struct{}
	entered chan struct{}
}

func (h *hangs) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	h.entered <- struct{}{}
	<-h.release
	return store.Result{}, context.DeadlineExceeded
}

// TestNeverWaitsPastTheTimeout: the guard answers at its deadline even when
// the backend has not given the call up.
func TestNeverWaitsPastTheTimeout(t *testing.T) {
	t.Parallel()
	h := &hangs{RateStore: memstore.New(memstore.Config{}), release: make(chan struct{}), entered: make(chan struct{}, 1)}
	defer close(h.release)
	g, err := guard.New(h, guard.Config{Timeout: 10 * time.Millisecond})
	require.NoError(t, err)
	r, err := g.Take(context.Background(), store.TakeParams{Key: "k", Limit: lim("x"), Cost: 1})
	require.NoError(t, err)
	<-h.entered
	require.False(t, r.Allowed)
	require.Equal(t, store.FallbackTimeout, r.Fallback, "answered while the backend still holds the call")
}

// TestRequestErrorsNeverFeedTheDetector: a store refusing a value of the
// request (ErrInvalidValue) is an answer about the request, however many
// times it happens.
func TestRequestErrorsNeverFeedTheDetector(t *testing.T) {
	t.Parallel()
	for _, refusal := range []error{store.ErrInvalidValue, store.ErrOutOfRange, store.ErrInvalidID, store.ErrCostExceedsLimit} {
		g, err := guard.New(refuses{memstore.New(memstore.Config{}), refusal}, guard.Config{})
		require.NoError(t, err)
		for range 10 {
			_, err := g.Take(context.Background(), store.TakeParams{Key: "bad", Limit: lim("x"), Cost: 1})
			require.ErrorIs(t, err, refusal)
		}
		require.True(t, g.Healthy(), "%v", refusal)
	}
}

type refuses struct {
	store.RateStore
	err error
}

func (r refuses) Take(context.Context, store.TakeParams) (store.Result, error) {
	return store.Result{}, r.err
}

// TestLocalPlusSharedNeverExceedsLimitPlusShares runs two processes (two
// guards, local share 0.5 each) over one shared store that goes down and
// comes back again and again, each taking all it is given every 10ms of a
// fake clock, and checks every interval of the grants: at most burst + rate
// x interval, plus the local shares' bursts (each process's local store
// starts a fresh burst when the store goes down). Without charging local
// grants into the shared key on return, each return hands the shared
// store's idle budget out again and the excess grows with every cycle.
func TestLocalPlusSharedNeverExceedsLimitPlusShares(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &flaky{RateStore: memstore.New(memstore.Config{Clock: clk})}
	const share = 0.5
	l := store.Limit{Name: "local", Rate: 10, Period: time.Second, Burst: 10}
	var gs []*guard.Store
	for range 2 {
		g, err := guard.New(f, guard.Config{Clock: clk, Default: store.Outage{Mode: store.FailLocal, Share: share}})
		require.NoError(t, err)
		gs = append(gs, g)
	}
	var grants []time.Time
	var local, shared int
	const step = 10 * time.Millisecond
	for cycle := range 12 {
		for phase, span := range []time.Duration{500 * time.Millisecond, 700 * time.Millisecond} {
			f.mode.Store(int32(2 * phase)) // up, then reset connections
			for at := time.Duration(0); at < span; at += step {
				for _, g := range gs {
					for range 30 {
						r, err := g.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
						require.NoError(t, err)
						if !r.Allowed {
							break
						}
						grants = append(grants, clk.Now())
						if r.Fallback == store.NoFallback {
							shared++
						} else {
							local++
						}
					}
				}
				clk.Advance(step)
			}
		}
		_ = cycle
	}
	require.Positive(t, local)
	require.Positive(t, shared)
	allowance := 2 * share * float64(l.Burst)
	for i := range grants {
		for j := i; j < len(grants); j++ {
			span := grants[j].Sub(grants[i]).Seconds()
			bound := float64(l.Burst) + float64(l.Rate)*span + allowance
			require.LessOrEqualf(t, float64(j-i+1), bound,
				"%d grants within %.2fs (from %s): more than burst + rate x interval + the local shares' bursts (%.1f)",
				j-i+1, span, grants[i].Format("15:04:05.000"), bound)
		}
	}
	t.Logf("%d grants (%d shared, %d local)", len(grants), shared, local)
}

// TestFallbacksAreLoggedRateLimited: the store going down is logged, each
// fallback line at most once a second per limit and reason with the count
// of lines not written, and the store coming back is logged.
func TestFallbacksAreLoggedRateLimited(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &flaky{RateStore: memstore.New(memstore.Config{Clock: clk})}
	var buf testenv.SyncBuffer
	g, err := guard.New(f, guard.Config{Clock: clk, Default: store.Outage{Mode: store.FailOpen},
		Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	require.NoError(t, err)
	f.mode.Store(2)
	for range 50 {
		_, err := g.Take(context.Background(), store.TakeParams{Key: "secret-key", Limit: lim("x"), Cost: 1})
		require.NoError(t, err)
	}
	clk.Advance(time.Second)
	_, err = g.Take(context.Background(), store.TakeParams{Key: "secret-key", Limit: lim("x"), Cost: 1})
	require.NoError(t, err)
	f.mode.Store(0)
	clk.Advance(time.Second)
	_, err = g.Take(context.Background(), store.TakeParams{Key: "secret-key", Limit: lim("x"), Cost: 1})
	require.NoError(t, err)
	out := buf.String()
	require.Equal(t, 1, strings.Count(out, "shared store is down"), out)
	require.Equal(t, 2, strings.Count(out, "decided without the shared store"), out)
	require.Contains(t, out, "suppressed=49")
	require.Contains(t, out, "reason=store_down")
	require.Equal(t, 1, strings.Count(out, "answers again"), out)
	require.NotContains(t, out, "secret-key", "keys are never logged")
}

// slow answers every Take after its latency (0 until set), unless its
// context ends first.
type slow struct {
	store.RateStore
	latency atomic.Int64 // ns
}

func (s *slow) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	if d := time.Duration(s.latency.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		// Too late, whichever came first. (ctx.Err may lag behind the
		// deadline on a loaded machine: the deadline itself says.)
		if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(dl) {
			return store.Result{}, context.DeadlineExceeded
		}
	}
	return s.RateStore.Take(ctx, p)
}

// TestSlowButHealthyStoreIsNeverDown: a store whose latency grows from
// three quarters of the deadline's floor to one and a half times it,
// answering every call, keeps a deadline above its latency (4 x p99: at
// least three floors) and is never declared down, though the guard's
// clock (which times the health window) moves a tenth of a second per
// call; with the deadline fixed at the floor, the same store is.
func TestSlowButHealthyStoreIsNeverDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The floor is large beside a loaded machine's scheduling delays (a
	// sleep of three quarters of it must rarely overrun it by a quarter),
	// so that what is measured is the store's latency, not the machine's.
	const floor = 50 * time.Millisecond
	for _, fixed := range []bool{false, true} {
		st := &slow{RateStore: memstore.New(memstore.Config{})}
		clk := clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		cfg := guard.Config{Timeout: floor, MaxTimeout: 10 * time.Second, Clock: clk,
			Default: store.Outage{Mode: store.FailOpen}}
		if fixed {
			cfg.MaxTimeout = cfg.Timeout
		}
		g, err := guard.New(st, cfg)
		require.NoError(t, err)
		l := store.Limit{Name: "x", Rate: 1000, Period: time.Second}
		// One quick answer, then 128 at three quarters of the floor: the
		// deadline learns the latency (4 x p99, at least three floors;
		// with the fixed deadline, one). The guard's clock stands still,
		// so no timeout a loaded machine may cause here adds up to an
		// outage.
		_, err = g.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
		require.NoError(t, err)
		st.latency.Store(int64(floor * 3 / 4))
		for i := range 128 {
			r, err := g.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
			require.NoError(t, err)
			require.NotEqual(t, store.FallbackStoreDown, r.Fallback, "call %d at half the floor", i)
		}
		st.latency.Store(int64(floor * 3 / 2)) // above the floor
		answered := 0
		for i := range 60 { // 6s on the guard's clock: three windows
			clk.Advance(100 * time.Millisecond)
			r, err := g.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
			require.NoError(t, err)
			if r.Fallback == store.NoFallback {
				answered++
			}
			if !fixed {
				require.NotEqual(t, store.FallbackStoreDown, r.Fallback, "call %d: a slow store answering is not down (deadline %s)", i, g.Timeout())
			}
		}
		if fixed {
			require.Zero(t, answered, "every call times out at the fixed floor")
			require.False(t, g.Healthy(), "a fixed deadline declares the slow store down")
			continue
		}
		require.True(t, g.Healthy())
		require.Positive(t, answered)
		require.GreaterOrEqual(t, g.Timeout(), 3*floor, "the deadline follows the latency")
	}
}
