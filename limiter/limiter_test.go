package limiter_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// t0 is aligned to the minute, so fixed windows of 10 s start on it.
var t0 = time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)

type bundle struct {
	clk *clocktest.Clock
	st  *memstore.Store
	l   *limiter.Limiter
}

// setup returns a Limiter over a memstore, both on one manual clock reading
// t0.
func setup(t testing.TB, policies ...limiter.Policy) *bundle {
	t.Helper()
	return setupAt(t, t0, policies...)
}

func setupAt(t testing.TB, start time.Time, policies ...limiter.Policy) *bundle {
	t.Helper()
	clk := clocktest.New(start)
	st := memstore.New(memstore.Config{Clock: clk})
	l, err := limiter.New(limiter.Config{Store: st, Clock: clk, Policies: policies})
	require.NoError(t, err)
	return &bundle{clk: clk, st: st, l: l}
}

// futureStart is a manual clock's start time that lies ahead of the real
// clock, so that a context deadline set relative to the manual clock is a
// real deadline that has not passed: WaitN measures it against the manual
// clock, and the real one never fires during a test.
func futureStart() time.Time { return time.Now().Add(2 * time.Hour).Truncate(time.Hour) }

// peek returns the decision for a cost of 0: it never changes state.
func peek(t testing.TB, l *limiter.Limiter, policy, key string) limiter.Decision {
	t.Helper()
	d, err := l.AllowN(context.Background(), policy, key, 0)
	require.NoError(t, err)
	return d
}

func gcraPolicy(name string, rate int64, period time.Duration, burst int64) limiter.Policy {
	return limiter.Policy{Name: name, Algorithm: store.GCRA, Rate: rate, Period: period, Burst: burst}
}

func fixedPolicy(name string, limit int64, window time.Duration) limiter.Policy {
	return limiter.Policy{Name: name, Algorithm: store.FixedWindow, Rate: limit, Period: window}
}

func slidingPolicy(name string, limit int64, window time.Duration) limiter.Policy {
	return limiter.Policy{Name: name, Algorithm: store.SlidingWindow, Rate: limit, Period: window}
}

func shadow(p limiter.Policy) limiter.Policy {
	p.Shadow = true
	return p
}

func TestNew(t *testing.T) {
	t.Parallel()
	ok := gcraPolicy("api", 10, time.Second, 5)
	tests := []struct {
		name     string
		policies []limiter.Policy
		wantErr  string // substring; "" means New succeeds
	}{
		{name: "none", policies: nil},
		{name: "all algorithms", policies: []limiter.Policy{ok, fixedPolicy("orders", 50, 10*time.Second), slidingPolicy("hourly", 5000, time.Hour)}},
		{name: "burst defaults to rate", policies: []limiter.Policy{gcraPolicy("api", 10, time.Second, 0)}},
		{name: "name charset", policies: []limiter.Policy{gcraPolicy("a-b_c.d:e/F9", 1, time.Second, 1)}},
		{name: "duplicate name", policies: []limiter.Policy{ok, fixedPolicy("api", 5, time.Second)}, wantErr: `duplicate policy name "api"`},
		{name: "empty name", policies: []limiter.Policy{gcraPolicy("", 1, time.Second, 1)}, wantErr: "empty policy name"},
		{name: "bad name", policies: []limiter.Policy{gcraPolicy("a b", 1, time.Second, 1)}, wantErr: `policy name "a b"`},
		{name: "long name", policies: []limiter.Policy{gcraPolicy(string(make([]byte, 129)), 1, time.Second, 1)}, wantErr: "longer than 128 bytes"},
		{name: "zero rate", policies: []limiter.Policy{gcraPolicy("api", 0, time.Second, 1)}, wantErr: "rate must be > 0"},
		{name: "negative rate window", policies: []limiter.Policy{fixedPolicy("api", -1, time.Second)}, wantErr: "limit must be > 0"},
		{name: "zero period", policies: []limiter.Policy{gcraPolicy("api", 1, 0, 1)}, wantErr: "period must be > 0"},
		{name: "sub-microsecond window", policies: []limiter.Policy{fixedPolicy("api", 1, time.Nanosecond)}, wantErr: "window must be at least 1us"},
		{name: "negative burst", policies: []limiter.Policy{gcraPolicy("api", 1, time.Second, -1)}, wantErr: "burst must be >= 0"},
		{name: "burst on fixed window", policies: []limiter.Policy{{Name: "api", Algorithm: store.FixedWindow, Rate: 5, Period: time.Second, Burst: 5}}, wantErr: "burst applies only to gcra, not fixed_window"},
		{name: "burst on sliding window", policies: []limiter.Policy{{Name: "api", Algorithm: store.SlidingWindow, Rate: 5, Period: time.Second, Burst: 1}}, wantErr: "burst applies only to gcra, not sliding_window"},
		{name: "finer than a microsecond", policies: []limiter.Policy{gcraPolicy("api", 2_000_000, time.Second, 1)}, wantErr: "finer than one unit per microsecond"},
		{name: "sliding product too large", policies: []limiter.Policy{slidingPolicy("api", 1<<40, time.Hour)}, wantErr: "too large"},
		{name: "unknown algorithm", policies: []limiter.Policy{{Name: "api", Algorithm: store.Algorithm(9), Rate: 1, Period: time.Second}}, wantErr: "unknown algorithm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := limiter.New(limiter.Config{Policies: tt.policies})
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Len(t, l.Policies(), len(tt.policies))
				for _, p := range tt.policies {
					require.NoError(t, p.Validate())
				}
				return
			}
			require.ErrorIs(t, err, limiter.ErrInvalidPolicy)
			require.ErrorContains(t, err, tt.wantErr)
			require.Nil(t, l)
		})
	}
}

func TestLimiterAccessors(t *testing.T) {
	t.Parallel()
	ps := []limiter.Policy{fixedPolicy("b", 5, time.Second), gcraPolicy("a", 1, time.Second, 0), slidingPolicy("c", 5, time.Second)}
	l, err := limiter.New(limiter.Config{Policies: ps}) // nil Store and Clock take the defaults
	require.NoError(t, err)
	require.NotNil(t, l.Store())

	got := l.Policies()
	require.Equal(t, []string{"a", "b", "c"}, []string{got[0].Name, got[1].Name, got[2].Name})
	got[0].Name = "mutated"
	require.Equal(t, "a", l.Policies()[0].Name, "Policies returns a copy")

	h, err := l.Handle("b")
	require.NoError(t, err)
	require.Equal(t, ps[0], h.Policy())

	d, err := l.Allow(context.Background(), "a", "k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, "a", d.Policy)
}

// step is one call in a table of decisions at times relative to t0.
type step struct {
	at        time.Duration // since t0
	key       string        // "" means "k"
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
}

func TestAllowN(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy limiter.Policy
		steps  []step
	}{
		{
			// T = 100ms, tau = 500ms.
			name:   "gcra",
			policy: gcraPolicy("p", 10, time.Second, 5),
			steps: []step{
				{at: 0, cost: 0, allowed: true, remaining: 5}, // peek at a fresh key
				{at: 0, cost: 5, allowed: true, remaining: 0},
				{at: 0, cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
				{at: 0, key: "other", cost: 5, allowed: true, remaining: 0}, // keys are independent
				{at: 100 * time.Millisecond, cost: 1, allowed: true, remaining: 0},
				{at: 350 * time.Millisecond, cost: 3, allowed: false, remaining: 2, retry: 50 * time.Millisecond},
				{at: 350 * time.Millisecond, cost: 2, allowed: true, remaining: 0},
				{at: 350 * time.Millisecond, cost: 0, allowed: true, remaining: 0},
				{at: time.Minute, cost: 1, allowed: true, remaining: 4}, // idle time banks no more than burst
			},
		},
		{
			name:   "gcra burst defaults to rate",
			policy: gcraPolicy("p", 3, time.Second, 0),
			steps: []step{
				{at: 0, cost: 3, allowed: true, remaining: 0},
				{at: 0, cost: 1, allowed: false, remaining: 0, retry: 333334 * time.Microsecond}, // T rounds up
			},
		},
		{
			name:   "fixed window",
			policy: fixedPolicy("p", 3, 10*time.Second),
			steps: []step{
				{at: 0, cost: 2, allowed: true, remaining: 1},
				{at: time.Second, cost: 1, allowed: true, remaining: 0},
				{at: time.Second, cost: 1, allowed: false, remaining: 0, retry: 9 * time.Second},
				{at: 9 * time.Second, cost: 1, allowed: false, remaining: 0, retry: time.Second},
				{at: 10 * time.Second, cost: 1, allowed: true, remaining: 2}, // the window rolled
				{at: 10 * time.Second, cost: 3, allowed: false, remaining: 2, retry: 10 * time.Second},
			},
		},
		{
			name:   "sliding window",
			policy: slidingPolicy("p", 4, 10*time.Second),
			steps: []step{
				{at: 0, cost: 4, allowed: true, remaining: 0},
				// The whole previous window still counts at the start of the next.
				{at: 10 * time.Second, cost: 1, allowed: false, remaining: 0, retry: 2500 * time.Millisecond},
				// ceil(4 * 7.5/10) = 3 of it counts 2.5 s later.
				{at: 12500 * time.Millisecond, cost: 1, allowed: true, remaining: 0},
				{at: 30 * time.Second, cost: 4, allowed: true, remaining: 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.policy)
			h, err := b.l.Handle("p")
			require.NoError(t, err)
			for i, s := range tt.steps {
				b.clk.Set(t0.Add(s.at))
				key := s.key
				if key == "" {
					key = "k"
				}
				// Alternate the Limiter and Handle forms: they must agree.
				var d limiter.Decision
				if i%2 == 0 {
					d, err = b.l.AllowN(context.Background(), "p", key, s.cost)
				} else {
					d, err = h.AllowN(context.Background(), key, s.cost)
				}
				require.NoError(t, err, "step %d", i)
				require.Equal(t, "p", d.Policy, "step %d", i)
				require.Equal(t, s.allowed, d.Allowed, "step %d: allowed", i)
				require.False(t, d.Shadowed, "step %d", i)
				require.Equal(t, s.remaining, d.Remaining, "step %d: remaining", i)
				require.Equal(t, s.retry, d.RetryAfter, "step %d: retry after", i)
				require.Equal(t, tt.policy.Limit().Max(), d.Limit, "step %d: limit", i)
			}
		})
	}
}

func TestAllowSingleUnit(t *testing.T) {
	t.Parallel()
	b := setup(t, gcraPolicy("p", 1, time.Second, 1))
	h, err := b.l.Handle("p")
	require.NoError(t, err)
	d, err := h.Allow(context.Background(), "k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, time.Second, d.ResetAfter)
	d, err = b.l.Allow(context.Background(), "p", "k")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, time.Second, d.RetryAfter)
}

func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, gcraPolicy("g", 10, time.Second, 5), fixedPolicy("w", 3, time.Second), shadow(gcraPolicy("s", 1, time.Second, 1)))
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"Allow unknown", func() error { _, err := b.l.Allow(ctx, "nope", "k"); return err }, limiter.ErrUnknownPolicy},
		{"AllowN unknown", func() error { _, err := b.l.AllowN(ctx, "nope", "k", 1); return err }, limiter.ErrUnknownPolicy},
		{"Handle unknown", func() error { _, err := b.l.Handle("nope"); return err }, limiter.ErrUnknownPolicy},
		{"ReserveN unknown", func() error { _, err := b.l.ReserveN(ctx, "nope", "k", 1, nil); return err }, limiter.ErrUnknownPolicy},
		{"Wait unknown", func() error { return b.l.Wait(ctx, "nope", "k") }, limiter.ErrUnknownPolicy},
		{"WaitN unknown", func() error { return b.l.WaitN(ctx, "nope", "k", 1) }, limiter.ErrUnknownPolicy},
		{"AllowAll unknown", func() error {
			_, err := b.l.AllowAll(ctx, []limiter.Request{{Policy: "g", Key: "k", Cost: 1}, {Policy: "nope", Key: "k", Cost: 1}})
			return err
		}, limiter.ErrUnknownPolicy},
		{"WaitAll unknown", func() error { return b.l.WaitAll(ctx, []limiter.Request{{Policy: "nope", Key: "k", Cost: 1}}) }, limiter.ErrUnknownPolicy},
		{"AllowN above burst", func() error { _, err := b.l.AllowN(ctx, "g", "k", 6); return err }, limiter.ErrCostExceedsLimit},
		{"AllowN above window limit", func() error { _, err := b.l.AllowN(ctx, "w", "k", 4); return err }, limiter.ErrCostExceedsLimit},
		{"ReserveN above burst", func() error { _, err := b.l.ReserveN(ctx, "g", "k", 6, nil); return err }, limiter.ErrCostExceedsLimit},
		{"WaitN above burst", func() error { return b.l.WaitN(ctx, "g", "k", 6) }, limiter.ErrCostExceedsLimit},
		{"AllowAll above limit", func() error {
			_, err := b.l.AllowAll(ctx, []limiter.Request{{Policy: "g", Key: "k", Cost: 1}, {Policy: "w", Key: "k", Cost: 4}})
			return err
		}, limiter.ErrCostExceedsLimit},
		{"WaitAll above burst", func() error { return b.l.WaitAll(ctx, []limiter.Request{{Policy: "g", Key: "k", Cost: 6}}) }, limiter.ErrCostExceedsLimit},
		{"AllowN negative", func() error { _, err := b.l.AllowN(ctx, "g", "k", -1); return err }, store.ErrNegativeCost},
		{"AllowN empty key", func() error { _, err := b.l.AllowN(ctx, "g", "", 1); return err }, store.ErrEmptyKey},
	}
	t.Run("calls", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				err := tt.call()
				require.ErrorIs(t, err, tt.want)
				require.Regexp(t, `^limiter: `, err.Error())
			})
		}
	})
	// None of the failed calls charged anything.
	require.Equal(t, int64(5), peek(t, b.l, "g", "k").Remaining)
	require.Equal(t, int64(3), peek(t, b.l, "w", "k").Remaining)
	require.Equal(t, 0, b.clk.Timers())
}

func TestShadow(t *testing.T) {
	t.Parallel()
	// A shadow policy decides exactly like its enforced twin, but reports its
	// denials as Shadowed instead of denying.
	b := setup(t, gcraPolicy("enforced", 2, time.Second, 2), shadow(gcraPolicy("shadow", 2, time.Second, 2)))
	ctx := context.Background()
	steps := []struct {
		at      time.Duration
		charged bool // the enforced twin allows: the units are charged
	}{
		{0, true}, {0, true}, {0, false}, {0, false},
		{500 * time.Millisecond, true}, {500 * time.Millisecond, false},
		{2 * time.Second, true},
	}
	for i, s := range steps {
		b.clk.Set(t0.Add(s.at))
		e, err := b.l.Allow(ctx, "enforced", "k")
		require.NoError(t, err)
		d, err := b.l.Allow(ctx, "shadow", "k")
		require.NoError(t, err)
		require.Equal(t, s.charged, e.Allowed, "step %d", i)
		require.True(t, d.Allowed, "step %d: a shadow policy never denies", i)
		require.Equal(t, !s.charged, d.Shadowed, "step %d", i)
		require.Equal(t, e.Remaining, d.Remaining, "step %d", i)
		require.Equal(t, e.RetryAfter, d.RetryAfter, "step %d", i)
		require.Equal(t, e.ResetAfter, d.ResetAfter, "step %d", i)
	}
	// State is charged: a peek sees what the twin sees.
	require.Equal(t, peek(t, b.l, "enforced", "k"), withPolicy(peek(t, b.l, "shadow", "k"), "enforced"))
}

func withPolicy(d limiter.Decision, p string) limiter.Decision {
	d.Policy = p
	return d
}

func TestReserveN(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("books ahead with a delay", func(t *testing.T) {
		t.Parallel()
		b := setup(t, gcraPolicy("p", 10, time.Second, 5)) // T = 100ms
		r, err := b.l.ReserveN(ctx, "p", "k", 5, nil)
		require.NoError(t, err)
		require.True(t, r.OK)
		require.Zero(t, r.Delay)
		r, err = b.l.ReserveN(ctx, "p", "k", 3, nil)
		require.NoError(t, err)
		require.True(t, r.OK)
		require.Equal(t, 300*time.Millisecond, r.Delay)
		require.True(t, r.Decision.Allowed)
		require.Equal(t, int64(0), r.Decision.Remaining)
		// Booked ahead: the key is in debt until the delay has passed.
		d := peek(t, b.l, "p", "k")
		require.Equal(t, 800*time.Millisecond, d.ResetAfter)

		// MaxDelay bounds the booking: refused, nothing charged.
		r, err = b.l.ReserveN(ctx, "p", "k", 1, &limiter.ReserveOpts{MaxDelay: 300 * time.Millisecond})
		require.NoError(t, err)
		require.False(t, r.OK)
		require.False(t, r.Decision.Allowed)
		require.Equal(t, 400*time.Millisecond, r.Decision.RetryAfter)
		require.Equal(t, d, peek(t, b.l, "p", "k"))
		require.ErrorIs(t, r.Settle(ctx, 1), limiter.ErrSettled, "a refused reservation has nothing to settle")
		require.ErrorIs(t, r.Cancel(ctx), limiter.ErrSettled)
		require.Equal(t, d, peek(t, b.l, "p", "k"))

		r, err = b.l.ReserveN(ctx, "p", "k", 1, &limiter.ReserveOpts{MaxDelay: 400 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, r.OK)
		require.Equal(t, 400*time.Millisecond, r.Delay)
	})

	tests := []struct {
		name          string
		policy        limiter.Policy
		reserve       int64
		advance       time.Duration // between reserving and settling
		settle        func(ctx context.Context, r *limiter.Reservation) error
		wantRemaining int64 // peek after settling
	}{
		{"gcra refund", gcraPolicy("p", 10, time.Second, 10), 8, 0, settleWith(3), 7},
		{"gcra charge", gcraPolicy("p", 10, time.Second, 10), 2, 0, settleWith(6), 4},
		{"gcra exact", gcraPolicy("p", 10, time.Second, 10), 4, 0, settleWith(4), 6},
		{"gcra cancel", gcraPolicy("p", 10, time.Second, 10), 8, 0, cancel, 10},
		{"gcra refund never above burst", gcraPolicy("p", 10, time.Second, 10), 8, time.Minute, cancel, 10},
		{"gcra charge into debt", gcraPolicy("p", 10, time.Second, 10), 10, 0, settleWith(15), 0},
		{"fixed refund", fixedPolicy("p", 10, 10*time.Second), 6, 0, settleWith(2), 8},
		{"fixed charge", fixedPolicy("p", 10, 10*time.Second), 6, 0, settleWith(9), 1},
		{"fixed cancel", fixedPolicy("p", 10, 10*time.Second), 6, 5 * time.Second, cancel, 10},
		// The window the units were taken in has passed: a refund must not
		// land in the new one.
		{"fixed refund after the window", fixedPolicy("p", 10, 10*time.Second), 6, 10 * time.Second, cancel, 10},
		{"sliding refund", slidingPolicy("p", 10, 10*time.Second), 6, 0, settleWith(1), 9},
		{"sliding charge", slidingPolicy("p", 10, 10*time.Second), 6, 0, settleWith(7), 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.policy)
			r, err := b.l.ReserveN(ctx, "p", "k", tt.reserve, nil)
			require.NoError(t, err)
			require.True(t, r.OK)
			require.Zero(t, r.Delay)
			require.Equal(t, tt.policy.Limit().Max()-tt.reserve, r.Decision.Remaining)
			b.clk.Advance(tt.advance)
			require.NoError(t, tt.settle(ctx, r))
			require.Equal(t, tt.wantRemaining, peek(t, b.l, "p", "k").Remaining)

			// Only once.
			require.ErrorIs(t, r.Settle(ctx, 1), limiter.ErrSettled)
			require.ErrorIs(t, r.Cancel(ctx), limiter.ErrSettled)
			require.Equal(t, tt.wantRemaining, peek(t, b.l, "p", "k").Remaining)
		})
	}

	t.Run("negative actual leaves it unsettled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, gcraPolicy("p", 10, time.Second, 10))
		h, err := b.l.Handle("p")
		require.NoError(t, err)
		r, err := h.ReserveN(ctx, "k", 5, nil)
		require.NoError(t, err)
		require.ErrorContains(t, r.Settle(ctx, -1), "negative actual cost")
		require.Equal(t, int64(5), peek(t, b.l, "p", "k").Remaining)
		require.NoError(t, r.Settle(ctx, 1))
		require.Equal(t, int64(9), peek(t, b.l, "p", "k").Remaining)
	})

	t.Run("concurrent settles: exactly one wins", func(t *testing.T) {
		t.Parallel()
		b := setup(t, gcraPolicy("p", 10, time.Second, 10))
		r, err := b.l.ReserveN(ctx, "p", "k", 8, nil)
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 16)
		for i := range errs {
			wg.Go(func() { errs[i] = r.Cancel(ctx) })
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else {
				require.ErrorIs(t, err, limiter.ErrSettled)
			}
		}
		require.Equal(t, 1, won)
		require.Equal(t, int64(10), peek(t, b.l, "p", "k").Remaining)
	})

	t.Run("shadow never denies nor delays", func(t *testing.T) {
		t.Parallel()
		b := setup(t, shadow(gcraPolicy("p", 1, time.Second, 1)))
		r, err := b.l.ReserveN(ctx, "p", "k", 1, nil)
		require.NoError(t, err)
		require.True(t, r.OK)
		require.Zero(t, r.Delay)
		require.False(t, r.Decision.Shadowed)

		r, err = b.l.ReserveN(ctx, "p", "k", 1, nil)
		require.NoError(t, err)
		require.True(t, r.OK, "a shadow policy never denies")
		require.Zero(t, r.Delay, "a shadow policy never makes its caller wait")
		require.True(t, r.Decision.Allowed)
		require.True(t, r.Decision.Shadowed)
		require.Equal(t, time.Second, r.Decision.RetryAfter)
		require.NoError(t, r.Settle(ctx, 1), "settling what was not charged is a no-op")
		require.ErrorIs(t, r.Settle(ctx, 1), limiter.ErrSettled)
		// Nothing was booked ahead: the key owes one unit, as after an
		// AllowN, not two.
		require.Equal(t, time.Second, peek(t, b.l, "p", "k").ResetAfter)
	})
}

func settleWith(actual int64) func(context.Context, *limiter.Reservation) error {
	return func(ctx context.Context, r *limiter.Reservation) error { return r.Settle(ctx, actual) }
}

func cancel(ctx context.Context, r *limiter.Reservation) error { return r.Cancel(ctx) }

// waitAsync runs f in a goroutine and returns the channel its error arrives
// on.
func waitAsync(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func requireBlocked(t *testing.T, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("returned %v before the clock reached its time", err)
	default:
	}
}

func TestWaitN(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("returns at once when allowed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, gcraPolicy("g", 1, time.Second, 2), fixedPolicy("w", 2, time.Second))
		require.NoError(t, b.l.WaitN(ctx, "g", "k", 2))
		require.NoError(t, b.l.Wait(ctx, "w", "k"))
		require.NoError(t, b.l.WaitN(ctx, "w", "k", 0))
		require.Equal(t, 0, b.clk.Timers())
		require.Equal(t, int64(0), peek(t, b.l, "g", "k").Remaining)
		require.Equal(t, int64(1), peek(t, b.l, "w", "k").Remaining)
	})

	t.Run("gcra blocks until its booked time", func(t *testing.T) {
		t.Parallel()
		b := setup(t, gcraPolicy("g", 1, time.Second, 2))
		h, err := b.l.Handle("g")
		require.NoError(t, err)
		require.NoError(t, h.WaitN(ctx, "k", 2))
		done := waitAsync(func() error { return h.Wait(ctx, "k") })
		b.clk.BlockUntilTimers(1)
		// The unit is booked before the sleep: the next caller queues behind.
		d := peek(t, b.l, "g", "k")
		require.Equal(t, 3*time.Second, d.ResetAfter)
		b.clk.Advance(time.Second - time.Microsecond)
		requireBlocked(t, done)
		b.clk.Advance(time.Microsecond)
		require.NoError(t, <-done)
		require.Equal(t, 0, b.clk.Timers(), "the timer is released")
		require.Equal(t, int64(0), peek(t, b.l, "g", "k").Remaining)
	})

	t.Run("deadline too soon fails at once", func(t *testing.T) {
		t.Parallel()
		start := futureStart()
		b := setupAt(t, start, gcraPolicy("g", 1, time.Hour, 1), fixedPolicy("w", 1, time.Hour), slidingPolicy("s", 1, time.Hour))
		for _, p := range []string{"g", "w", "s"} {
			d, err := b.l.Allow(ctx, p, "k")
			require.NoError(t, err)
			require.True(t, d.Allowed)
			before := peek(t, b.l, p, "k")
			dctx, cancel := context.WithDeadline(ctx, b.clk.Now().Add(10*time.Minute))
			err = b.l.Wait(dctx, p, "k")
			cancel()
			require.ErrorIs(t, err, limiter.ErrWouldExceedDeadline, p)
			require.ErrorContains(t, err, strconv.Quote(p))
			require.Equal(t, before, peek(t, b.l, p, "k"), "%s: nothing charged", p)
			require.Equal(t, 0, b.clk.Timers(), "%s: no sleep", p)
		}
	})

	t.Run("deadline far enough waits", func(t *testing.T) {
		t.Parallel()
		b := setupAt(t, futureStart(), gcraPolicy("g", 1, time.Hour, 1))
		require.NoError(t, b.l.Wait(ctx, "g", "k"))
		dctx, cancel := context.WithDeadline(ctx, b.clk.Now().Add(time.Hour+time.Minute))
		defer cancel()
		done := waitAsync(func() error { return b.l.Wait(dctx, "g", "k") })
		b.clk.BlockUntilTimers(1)
		requireBlocked(t, done)
		b.clk.Advance(time.Hour)
		require.NoError(t, <-done)
	})

	t.Run("cancelled during the wait refunds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, gcraPolicy("g", 1, time.Second, 2))
		require.NoError(t, b.l.WaitN(ctx, "g", "k", 2))
		before := peek(t, b.l, "g", "k")
		cctx, cancel := context.WithCancel(ctx)
		done := waitAsync(func() error { return b.l.Wait(cctx, "g", "k") })
		b.clk.BlockUntilTimers(1)
		require.Equal(t, before.ResetAfter+time.Second, peek(t, b.l, "g", "k").ResetAfter, "booked")
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		require.Equal(t, before, peek(t, b.l, "g", "k"), "the booked unit was given back")
		b.clk.Advance(time.Second)
		d, err := b.l.Allow(ctx, "g", "k")
		require.NoError(t, err)
		require.True(t, d.Allowed, "the refunded unit is available to the next caller")
		require.Equal(t, int64(0), d.Remaining)
	})

	t.Run("cancelled before the call", func(t *testing.T) {
		t.Parallel()
		b := setup(t, gcraPolicy("g", 1, time.Second, 2))
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		require.ErrorIs(t, b.l.Wait(cctx, "g", "k"), context.Canceled)
		require.Equal(t, int64(2), peek(t, b.l, "g", "k").Remaining)
	})

	for _, tt := range []struct {
		p     limiter.Policy
		after int64 // remaining once the waiter got its unit
	}{
		{fixedPolicy("w", 2, 10*time.Second), 1},
		// Half of the previous window's 2 units still count.
		{slidingPolicy("w", 2, 10*time.Second), 0},
	} {
		t.Run(tt.p.Algorithm.String()+" retries after the window rolls", func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.p)
			b.clk.Advance(3 * time.Second)
			require.NoError(t, b.l.WaitN(ctx, "w", "k", 2))
			done := waitAsync(func() error { return b.l.Wait(ctx, "w", "k") })
			b.clk.BlockUntilTimers(1)
			requireBlocked(t, done)
			// Windows book nothing ahead: nothing is charged while waiting.
			require.Equal(t, int64(0), peek(t, b.l, "w", "k").Remaining)
			d, err := b.l.Allow(ctx, "w", "k")
			require.NoError(t, err)
			require.False(t, d.Allowed)
			b.clk.Advance(d.RetryAfter)
			require.NoError(t, <-done)
			require.Equal(t, tt.after, peek(t, b.l, "w", "k").Remaining)
		})
	}

	t.Run("window wait retries when another caller took the room", func(t *testing.T) {
		t.Parallel()
		b := setup(t, fixedPolicy("w", 1, 10*time.Second))
		require.NoError(t, b.l.Wait(ctx, "w", "k"))
		done := waitAsync(func() error { return b.l.Wait(ctx, "w", "k") })
		b.clk.BlockUntilTimers(1)
		// Just before the waiter wakes, the clock is already in the next
		// window and another caller takes its only unit.
		b.clk.Set(t0.Add(10*time.Second - time.Microsecond))
		requireBlocked(t, done)
		r, err := b.st.Take(ctx, store.TakeParams{Key: "k", Limit: fixedPolicy("w", 1, 10*time.Second).Limit(), Cost: 1, Now: t0.Add(10 * time.Second)})
		require.NoError(t, err)
		require.True(t, r.Allowed)
		b.clk.Advance(time.Microsecond)
		b.clk.BlockUntilTimers(1) // the waiter sleeps again, till the next window
		requireBlocked(t, done)
		b.clk.Advance(10 * time.Second)
		require.NoError(t, <-done)
	})

	t.Run("shadow never waits and books nothing ahead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, shadow(gcraPolicy("s", 1, time.Hour, 1)), shadow(fixedPolicy("w", 1, time.Hour)))
		for range 100 {
			require.NoError(t, b.l.Wait(ctx, "s", "k"))
			require.NoError(t, b.l.Wait(ctx, "w", "k"))
		}
		require.Equal(t, 0, b.clk.Timers())
		// The key owes no more than its burst, as after Allow.
		require.Equal(t, time.Hour, peek(t, b.l, "s", "k").ResetAfter)
		d, err := b.l.Allow(ctx, "s", "k")
		require.NoError(t, err)
		require.True(t, d.Shadowed)
		require.Equal(t, time.Hour, d.RetryAfter)
	})
}

func TestAllowAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Weight: 10 per minute, T = 6 s. Orders: 2 per 10 s window.
	policies := []limiter.Policy{
		gcraPolicy("weight", 10, time.Minute, 10),
		fixedPolicy("orders", 2, 10*time.Second),
		shadow(gcraPolicy("shadow", 1, time.Minute, 1)),
	}
	order := func(weight int64) []limiter.Request {
		return []limiter.Request{{Policy: "weight", Key: "ip", Cost: weight}, {Policy: "orders", Key: "acct", Cost: 1}}
	}

	t.Run("one refusal charges nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, policies...)
		for range 2 {
			md, err := b.l.AllowAll(ctx, order(3))
			require.NoError(t, err)
			require.True(t, md.Allowed)
			require.Zero(t, md.RetryAfter)
			require.Len(t, md.Decisions, 2)
		}
		b.clk.Advance(time.Second)
		md, err := b.l.AllowAll(ctx, order(3))
		require.NoError(t, err)
		require.False(t, md.Allowed)
		require.Equal(t, "weight", md.Decisions[0].Policy)
		require.True(t, md.Decisions[0].Allowed, "weight alone would pass")
		require.Equal(t, "orders", md.Decisions[1].Policy)
		require.False(t, md.Decisions[1].Allowed, "orders refused")
		require.Equal(t, 9*time.Second, md.RetryAfter)
		// Weight was not charged for the refused request (T = 6 s: the
		// second that passed refilled less than a unit).
		require.Equal(t, int64(4), peek(t, b.l, "weight", "ip").Remaining)
		require.Equal(t, int64(0), peek(t, b.l, "orders", "acct").Remaining)
	})

	t.Run("retry after is the longest refusal", func(t *testing.T) {
		t.Parallel()
		b := setup(t, policies...)
		md, err := b.l.AllowAll(ctx, []limiter.Request{{Policy: "weight", Key: "ip", Cost: 10}, {Policy: "orders", Key: "acct", Cost: 2}})
		require.NoError(t, err)
		require.True(t, md.Allowed)
		b.clk.Advance(time.Second)
		md, err = b.l.AllowAll(ctx, order(3))
		require.NoError(t, err)
		require.False(t, md.Allowed)
		require.False(t, md.Decisions[0].Allowed)
		require.False(t, md.Decisions[1].Allowed)
		require.Equal(t, 17*time.Second, md.Decisions[0].RetryAfter) // 3*6 s - 1 s
		require.Equal(t, 9*time.Second, md.Decisions[1].RetryAfter)
		require.Equal(t, 17*time.Second, md.RetryAfter)
	})

	t.Run("same key twice sees its own charge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, policies...)
		md, err := b.l.AllowAll(ctx, []limiter.Request{{Policy: "weight", Key: "ip", Cost: 6}, {Policy: "weight", Key: "ip", Cost: 6}})
		require.NoError(t, err)
		require.False(t, md.Allowed)
		require.True(t, md.Decisions[0].Allowed)
		require.False(t, md.Decisions[1].Allowed)
		require.Equal(t, int64(10), peek(t, b.l, "weight", "ip").Remaining)
	})

	t.Run("empty request", func(t *testing.T) {
		t.Parallel()
		b := setup(t, policies...)
		md, err := b.l.AllowAll(ctx, nil)
		require.NoError(t, err)
		require.True(t, md.Allowed)
		require.Empty(t, md.Decisions)
		require.NoError(t, b.l.WaitAll(ctx, nil))
	})

	t.Run("shadow never blocks the enforced policies", func(t *testing.T) {
		t.Parallel()
		b := setup(t, policies...)
		reqs := append(order(1), limiter.Request{Policy: "shadow", Key: "ip", Cost: 1})
		md, err := b.l.AllowAll(ctx, reqs)
		require.NoError(t, err)
		require.True(t, md.Allowed)
		require.False(t, md.Decisions[2].Shadowed)

		md, err = b.l.AllowAll(ctx, reqs)
		require.NoError(t, err)
		require.True(t, md.Allowed, "only the shadow policy refused")
		require.Zero(t, md.RetryAfter)
		require.True(t, md.Decisions[0].Allowed)
		require.True(t, md.Decisions[1].Allowed)
		require.True(t, md.Decisions[2].Allowed)
		require.True(t, md.Decisions[2].Shadowed)
		require.Equal(t, time.Minute, md.Decisions[2].RetryAfter)
		require.Equal(t, int64(8), peek(t, b.l, "weight", "ip").Remaining, "enforced policies charged")
		require.Equal(t, int64(0), peek(t, b.l, "orders", "acct").Remaining)

		// The enforced ones refuse too: denied, and the shadow's wait does
		// not count in RetryAfter.
		md, err = b.l.AllowAll(ctx, reqs)
		require.NoError(t, err)
		require.False(t, md.Allowed)
		require.False(t, md.Decisions[1].Allowed)
		require.True(t, md.Decisions[2].Shadowed)
		require.Equal(t, 10*time.Second, md.RetryAfter)
		require.Equal(t, int64(8), peek(t, b.l, "weight", "ip").Remaining, "nothing charged")
	})

	t.Run("only shadow policies", func(t *testing.T) {
		t.Parallel()
		b := setup(t, policies...)
		reqs := []limiter.Request{{Policy: "shadow", Key: "a", Cost: 1}, {Policy: "shadow", Key: "b", Cost: 1}}
		for i := range 3 {
			md, err := b.l.AllowAll(ctx, reqs)
			require.NoError(t, err)
			require.True(t, md.Allowed)
			require.Equal(t, i > 0, md.Decisions[0].Shadowed)
			require.Equal(t, i > 0, md.Decisions[1].Shadowed)
		}
	})
}

func TestWaitAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("window blocks then succeeds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, gcraPolicy("weight", 10, time.Minute, 10), fixedPolicy("orders", 1, 10*time.Second))
		reqs := []limiter.Request{{Policy: "weight", Key: "ip", Cost: 2}, {Policy: "orders", Key: "acct", Cost: 1}}
		require.NoError(t, b.l.WaitAll(ctx, reqs))
		require.Equal(t, 0, b.clk.Timers())
		done := waitAsync(func() error { return b.l.WaitAll(ctx, reqs) })
		b.clk.BlockUntilTimers(1)
		requireBlocked(t, done)
		require.Equal(t, int64(8), peek(t, b.l, "weight", "ip").Remaining, "nothing taken while waiting")
		b.clk.Advance(10 * time.Second)
		require.NoError(t, <-done)
		require.Equal(t, int64(0), peek(t, b.l, "orders", "acct").Remaining)
		// 10 s refilled 1 unit of weight (T = 6 s), then 2 were taken.
		require.Equal(t, int64(7), peek(t, b.l, "weight", "ip").Remaining)
	})

	t.Run("gcra books ahead then succeeds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, gcraPolicy("a", 1, time.Second, 1), gcraPolicy("b", 10, time.Second, 10))
		reqs := []limiter.Request{{Policy: "a", Key: "k", Cost: 1}, {Policy: "b", Key: "k", Cost: 1}}
		require.NoError(t, b.l.WaitAll(ctx, reqs))
		done := waitAsync(func() error { return b.l.WaitAll(ctx, reqs) })
		b.clk.BlockUntilTimers(1)
		require.Equal(t, int64(8), peek(t, b.l, "b", "k").Remaining, "booked on both")
		b.clk.Advance(time.Second - time.Microsecond)
		requireBlocked(t, done)
		b.clk.Advance(time.Microsecond)
		require.NoError(t, <-done)
	})

	t.Run("cancelled during the wait refunds every policy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, gcraPolicy("a", 1, time.Second, 1), gcraPolicy("b", 10, time.Second, 10))
		reqs := []limiter.Request{{Policy: "a", Key: "k", Cost: 1}, {Policy: "b", Key: "k", Cost: 3}}
		require.NoError(t, b.l.WaitAll(ctx, reqs))
		beforeA, beforeB := peek(t, b.l, "a", "k"), peek(t, b.l, "b", "k")
		cctx, cancel := context.WithCancel(ctx)
		done := waitAsync(func() error { return b.l.WaitAll(cctx, reqs) })
		b.clk.BlockUntilTimers(1)
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		require.Equal(t, beforeA, peek(t, b.l, "a", "k"))
		require.Equal(t, beforeB, peek(t, b.l, "b", "k"))
	})

	t.Run("deadline too soon fails at once", func(t *testing.T) {
		t.Parallel()
		b := setupAt(t, futureStart(), gcraPolicy("a", 1, time.Hour, 1), fixedPolicy("w", 1, time.Hour))
		for _, reqs := range [][]limiter.Request{
			{{Policy: "a", Key: "k", Cost: 1}},
			{{Policy: "w", Key: "k", Cost: 1}},
		} {
			require.NoError(t, b.l.WaitAll(ctx, reqs))
			dctx, cancel := context.WithDeadline(ctx, b.clk.Now().Add(10*time.Minute))
			err := b.l.WaitAll(dctx, reqs)
			cancel()
			require.ErrorIs(t, err, limiter.ErrWouldExceedDeadline)
			require.Equal(t, 0, b.clk.Timers())
		}
	})

	t.Run("shadow never makes it wait", func(t *testing.T) {
		t.Parallel()
		b := setup(t, gcraPolicy("enforced", 10, time.Second, 10), shadow(gcraPolicy("shadow", 1, time.Hour, 1)))
		reqs := []limiter.Request{{Policy: "enforced", Key: "k", Cost: 1}, {Policy: "shadow", Key: "k", Cost: 1}}
		require.NoError(t, b.l.WaitAll(ctx, reqs))
		done := waitAsync(func() error { return b.l.WaitAll(ctx, reqs) })
		slept := make(chan struct{})
		go func() { b.clk.BlockUntilTimers(1); close(slept) }()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-slept:
			b.clk.Advance(2 * time.Hour) // let it finish before failing
			<-done
			t.Fatal("WaitAll slept on a shadow policy's delay")
		}
		// Release the watcher: a pending timer satisfies it whether it is
		// already waiting or not yet.
		tm := b.clk.NewTimer(time.Hour)
		<-slept
		tm.Stop()
		require.Equal(t, int64(8), peek(t, b.l, "enforced", "k").Remaining)
	})
}

// TestWaitNConcurrent checks zero over-admission: however many goroutines
// wait on one key, the units admitted in any interval of length t are at most
// burst + rate*t.
func TestWaitNConcurrent(t *testing.T) {
	t.Parallel()
	const (
		workers = 32
		rate    = 10
		period  = time.Second
		burst   = 5
	)
	b := setup(t, gcraPolicy("g", rate, period, burst))
	h, err := b.l.Handle("g")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu       sync.Mutex
		admitted []time.Time
		wg       sync.WaitGroup
		errs     = make(chan error, workers)
	)
	for range workers {
		wg.Go(func() {
			for {
				err := h.Wait(ctx, "k")
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						errs <- err
					}
					return
				}
				mu.Lock()
				admitted = append(admitted, b.clk.Now())
				mu.Unlock()
			}
		})
	}
	// Every worker is asleep on a timer before each step, so the clock moves
	// only between admissions and every admission is stamped with the step
	// that woke it. Steps are at most T = 100ms: a longer jump would wake
	// units booked for different instants all at once, as a process that
	// was suspended would, and say nothing about the limiter. With such
	// steps a stamp is at most T after the booked time, which the burst
	// (>= 2) covers.
	steps := []time.Duration{time.Millisecond, 37 * time.Millisecond, 100 * time.Millisecond, 63 * time.Millisecond, 99 * time.Millisecond, 7 * time.Millisecond}
	for i := range 300 {
		b.clk.BlockUntilTimers(workers)
		b.clk.Advance(steps[i%len(steps)])
	}
	b.clk.BlockUntilTimers(workers)
	end := b.clk.Now()
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	slices.SortFunc(admitted, time.Time.Compare)
	for i := range admitted {
		for j := i; j < len(admitted); j++ {
			n := int64(j - i + 1)
			span := admitted[j].Sub(admitted[i])
			// n <= burst + rate*span/period
			if (n-burst)*int64(period) > rate*int64(span) {
				t.Fatalf("%d units admitted in %s (%s..%s): more than burst %d + rate %d/%s", n, span, admitted[i].Sub(t0), admitted[j].Sub(t0), burst, rate, period)
			}
		}
	}
	// Saturated demand gets the whole budget (no timing assertion: the
	// clock is the test's).
	elapsed := end.Sub(t0)
	require.GreaterOrEqual(t, int64(len(admitted)), burst+rate*int64(elapsed)/int64(period))
}

func TestShadowCostAboveBurstIsShadowedNotError(t *testing.T) {
	t.Parallel()
	lim, err := limiter.New(limiter.Config{Policies: []limiter.Policy{
		{Name: "trial", Rate: 10, Period: time.Second, Burst: 5, Shadow: true},
		{Name: "enforced", Rate: 10, Period: time.Second, Burst: 5},
	}})
	require.NoError(t, err)
	d, err := lim.AllowN(context.Background(), "trial", "k", 6)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.True(t, d.Shadowed)
	_, err = lim.AllowN(context.Background(), "enforced", "k", 6)
	require.ErrorIs(t, err, limiter.ErrCostExceedsLimit)
}
