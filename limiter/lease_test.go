package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

const mixedYAML = `
policies:
  shopify-bulk:
    algorithm: concurrency
    permits: 2
    ttl: 30s
  shopify-calls:
    rate: 2
    period: 1s
`

func TestParseConcurrency(t *testing.T) {
	t.Parallel()
	ps, err := limiter.Parse("p.yaml", []byte(mixedYAML))
	require.NoError(t, err)
	require.Len(t, ps, 2)
	require.Equal(t, limiter.Policy{Name: "shopify-bulk", Algorithm: store.Concurrency, Permits: 2, TTL: 30 * time.Second}, ps[0])
	require.Equal(t, "concurrency", ps[0].Algorithm.String())

	for _, tc := range []struct{ name, yaml, want string }{
		{"missing permits", "policies:\n  b:\n    algorithm: concurrency\n    ttl: 1s\n", "p.yaml:2:3: policies.b: missing permits"},
		{"missing ttl", "policies:\n  b:\n    algorithm: concurrency\n    permits: 1\n", "p.yaml:2:3: policies.b: missing ttl"},
		{"rate on concurrency", "policies:\n  b:\n    algorithm: concurrency\n    permits: 1\n    ttl: 1s\n    rate: 5\n", "p.yaml:6:5: policies.b.rate: rate does not apply to concurrency (want permits and ttl)"},
		{"permits on gcra", "policies:\n  b:\n    rate: 5\n    period: 1s\n    permits: 2\n", "p.yaml:5:5: policies.b.permits: permits applies only to algorithm: concurrency"},
		{"bad ttl", "policies:\n  b:\n    algorithm: concurrency\n    permits: 1\n    ttl: soon\n", `p.yaml:5:10: policies.b.ttl: want a positive duration such as 1s, 10s, 1m or 24h, got "soon"`},
		{"tiny ttl", "policies:\n  b:\n    algorithm: concurrency\n    permits: 1\n    ttl: 1us\n", "p.yaml:2:3: policies.b: limiter: invalid policy \"b\": store: invalid lease: ttl must be in [1ms, 8784h0m0s], got 1µs"},
		{"too many permits", "policies:\n  b:\n    algorithm: concurrency\n    permits: 10001\n    ttl: 1s\n", "p.yaml:2:3: policies.b: limiter: invalid policy \"b\": permits must be in [1, 10000], got 10001"},
		{"shadow", "policies:\n  b:\n    algorithm: concurrency\n    permits: 1\n    ttl: 1s\n    shadow: true\n", "p.yaml:2:3: policies.b: limiter: invalid policy \"b\": concurrency cannot be shadow"},
	} {
		_, err := limiter.Parse("p.yaml", []byte(tc.yaml))
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
	}
}

func newMixed(t *testing.T, cfg limiter.Config) *limiter.Limiter {
	t.Helper()
	ps, err := limiter.Parse("p.yaml", []byte(mixedYAML))
	require.NoError(t, err)
	cfg.Policies = ps
	l, err := limiter.New(cfg)
	require.NoError(t, err)
	return l
}

func TestLeaseThroughLimiter(t *testing.T) {
	t.Parallel()
	l := newMixed(t, limiter.Config{})
	ctx := context.Background()
	a, err := l.Acquire(ctx, "shopify-bulk", "shop-1", "a")
	require.NoError(t, err)
	require.True(t, a.Acquired)
	b, err := l.Acquire(ctx, "shopify-bulk", "shop-1", "b")
	require.NoError(t, err)
	require.True(t, b.Acquired)
	c, err := l.Acquire(ctx, "shopify-bulk", "shop-1", "c")
	require.NoError(t, err)
	require.False(t, c.Acquired, "two permits")
	hs, err := l.Holders(ctx, "shopify-bulk", "shop-1")
	require.NoError(t, err)
	require.Len(t, hs, 2)
	got, err := l.Renew(ctx, "shopify-bulk", "shop-1", "a", a.Lease.Token)
	require.NoError(t, err)
	require.Equal(t, a.Lease.Token, got.Token)
	require.NoError(t, l.Release(ctx, "shopify-bulk", "shop-1", "a", a.Lease.Token))
	require.ErrorIs(t, l.Release(ctx, "shopify-bulk", "shop-1", "a", a.Lease.Token), store.ErrLeaseNotHeld)

	_, err = l.Acquire(ctx, "shopify-calls", "shop-1", "a")
	require.ErrorIs(t, err, limiter.ErrNotLeasePolicy)
	_, err = l.Allow(ctx, "shopify-bulk", "shop-1")
	require.ErrorIs(t, err, limiter.ErrNotRatePolicy)
	// Every rate operation says so, not only Allow.
	_, err = l.ReserveN(ctx, "shopify-bulk", "shop-1", 1, nil)
	require.ErrorIs(t, err, limiter.ErrNotRatePolicy)
	require.ErrorIs(t, l.WaitN(ctx, "shopify-bulk", "shop-1", 1), limiter.ErrNotRatePolicy)
	mixed := []limiter.Request{{Policy: "shopify-calls", Key: "shop-1", Cost: 1}, {Policy: "shopify-bulk", Key: "shop-1", Cost: 1}}
	_, err = l.AllowAll(ctx, mixed)
	require.ErrorIs(t, err, limiter.ErrNotRatePolicy)
	require.ErrorIs(t, l.WaitAll(ctx, mixed), limiter.ErrNotRatePolicy)
	_, err = l.Acquire(ctx, "nope", "shop-1", "a")
	require.ErrorIs(t, err, limiter.ErrUnknownPolicy)
}

// TestLeaseStoreMismatch: a lease store that keeps rates of its own,
// other than Store, is refused: mixed requests would charge rates that
// Allow never sees.
func TestLeaseStoreMismatch(t *testing.T) {
	t.Parallel()
	ms := memstore.New(memstore.Config{})
	_, err := limiter.New(limiter.Config{Store: ms, Leases: memstore.NewLeases(memstore.LeasesConfig{})})
	require.ErrorIs(t, err, limiter.ErrLeaseStoreMismatch)
	ml := memstore.NewLeases(memstore.LeasesConfig{})
	_, err = limiter.New(limiter.Config{Store: ml, Leases: memstore.NewLeases(memstore.LeasesConfig{})})
	require.ErrorIs(t, err, limiter.ErrLeaseStoreMismatch)
	for _, cfg := range []limiter.Config{
		{Store: ms, Leases: memstore.NewLeases(memstore.LeasesConfig{Rates: ms})},
		{Store: ml, Leases: ml},
		{Store: ms, Leases: apart{memstore.NewLeases(memstore.LeasesConfig{})}}, // keeps no rates
		{Store: ms},
	} {
		_, err = limiter.New(cfg)
		require.NoError(t, err)
	}
}

// apart hides TakeAllAcquire: the limiter must fall back.
type apart struct{ store.LeaseStore }

func TestAllowAllAcquire(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  func() limiter.Config
	}{
		{"atomic", func() limiter.Config { return limiter.Config{} }},
		{"fallback", func() limiter.Config {
			return limiter.Config{Store: memstore.New(memstore.Config{}), Leases: apart{memstore.NewLeases(memstore.LeasesConfig{})}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newMixed(t, tc.cfg())
			ctx := context.Background()
			calls := []limiter.Request{{Policy: "shopify-calls", Key: "shop-1", Cost: 1}}
			lr := func(h string) limiter.LeaseRequest {
				return limiter.LeaseRequest{Policy: "shopify-bulk", Key: "shop-1", Holder: h}
			}
			d, err := l.AllowAllAcquire(ctx, calls, lr("a"))
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.True(t, d.Lease.Acquired)
			require.Equal(t, int64(1), d.Decisions[0].Remaining)

			// The rate has one unit left: a cost of 2 refuses, and b gets
			// no lease although a permit is free.
			d, err = l.AllowAllAcquire(ctx, []limiter.Request{{Policy: "shopify-calls", Key: "shop-1", Cost: 2}}, lr("b"))
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.False(t, d.Lease.Acquired)
			require.Positive(t, d.RetryAfter)
			hs, err := l.Holders(ctx, "shopify-bulk", "shop-1")
			require.NoError(t, err)
			require.Len(t, hs, 1, "no lease taken")
			// a asking again, refused by the rate: a keeps the permit it
			// held before.
			d, err = l.AllowAllAcquire(ctx, []limiter.Request{{Policy: "shopify-calls", Key: "shop-1", Cost: 2}}, lr("a"))
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.False(t, d.Lease.Acquired)
			hs, err = l.Holders(ctx, "shopify-bulk", "shop-1")
			require.NoError(t, err)
			require.Len(t, hs, 1, "a's permit is not released")
			require.Equal(t, "a", hs[0].Holder)

			d, err = l.AllowAllAcquire(ctx, calls, lr("b"))
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.Equal(t, int64(0), d.Decisions[0].Remaining)

			// Both permits held: the rate is not charged.
			peek, err := l.AllowN(ctx, "shopify-calls", "shop-2", 0)
			require.NoError(t, err)
			require.Equal(t, int64(2), peek.Remaining)
			d, err = l.AllowAllAcquire(ctx, []limiter.Request{{Policy: "shopify-calls", Key: "shop-2", Cost: 1}}, lr("c"))
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.False(t, d.Lease.Acquired)
			require.Equal(t, 30*time.Second, d.RetryAfter.Round(time.Second))
			peek, err = l.AllowN(ctx, "shopify-calls", "shop-2", 0)
			require.NoError(t, err)
			require.Equal(t, int64(2), peek.Remaining, "nothing charged")

			_, err = l.AllowAllAcquire(ctx, calls, limiter.LeaseRequest{Policy: "shopify-calls", Key: "k", Holder: "h"})
			require.ErrorIs(t, err, limiter.ErrNotLeasePolicy)
			_, err = l.AllowAllAcquire(ctx, []limiter.Request{{Policy: "shopify-bulk", Key: "k", Cost: 1}}, lr("d"))
			require.ErrorIs(t, err, limiter.ErrNotRatePolicy)
		})
	}
}
