package limiter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/lease"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// fastStore is a rate store of a type the limiter has never heard of that
// has the capabilities of the embedded memstore (store.PreparedTaker,
// store.LeaseKeeper, store.RateSharer), counting the fast-path decisions.
type fastStore struct {
	*memstore.Store
	fast atomic.Int64
}

func (f *fastStore) DecidePrepared(key string, l *store.Prepared, cost int64) (store.Result, error) {
	f.fast.Add(1)
	return f.Store.DecidePrepared(key, l, cost)
}

// TestCapabilitiesNotTypes: the limiter finds a store's fast path, its
// lease store and its rates by their capabilities, whatever the store's
// type: Allow takes the copy-free path, mixed requests charge the rates
// Allow reads, and a lease store charging other rates is refused.
func TestCapabilitiesNotTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ps, err := limiter.Parse("p.yaml", []byte(mixedYAML))
	require.NoError(t, err)
	f := &fastStore{Store: memstore.New(memstore.Config{})}
	l, err := limiter.New(limiter.Config{Store: f, Policies: ps})
	require.NoError(t, err)

	d, err := l.Allow(ctx, "shopify-calls", "shop-1")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(1), f.fast.Load(), "Allow took the store's PreparedTaker path")

	// The lease store is the one f keeps: a mixed request's rate item is
	// charged where Allow looks, and spends the burst of 2 with the Allow.
	md, err := l.AllowAllAcquire(ctx, []limiter.Request{{Policy: "shopify-calls", Key: "shop-1", Cost: 1}},
		limiter.LeaseRequest{Policy: "shopify-bulk", Key: "shop-1", Holder: "h"})
	require.NoError(t, err)
	require.True(t, md.Allowed)
	d, err = l.Allow(ctx, "shopify-calls", "shop-1")
	require.NoError(t, err)
	require.False(t, d.Allowed, "the mixed request charged the rates Allow reads")

	_, err = limiter.New(limiter.Config{Store: f, Policies: ps, Leases: memstore.NewLeases(memstore.LeasesConfig{})})
	require.ErrorIs(t, err, limiter.ErrLeaseStoreMismatch)
	_, err = limiter.New(limiter.Config{Store: f, Policies: ps, Leases: memstore.NewLeases(memstore.LeasesConfig{Rates: f.Store})})
	require.NoError(t, err)
}

// TestLeaseFor: the one way to hold a policy's lease in Go, a lease.Leaser
// over the limiter's lease store with LeaseFor's params, holds one of the
// policy's permits where the limiter (and the HTTP API) see it.
func TestLeaseFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ps, err := limiter.Parse("p.yaml", []byte(mixedYAML))
	require.NoError(t, err)
	lim, err := limiter.New(limiter.Config{Policies: ps})
	require.NoError(t, err)
	leaser, err := lease.New(lease.Config{Store: lim.Leases()})
	require.NoError(t, err)
	p, err := lim.LeaseFor("shopify-bulk", "shop-1")
	require.NoError(t, err)
	require.Equal(t, lease.Params{Name: "shopify-bulk", Key: "shop-1", Permits: 2, TTL: 30 * time.Second}, p)
	l, err := leaser.AcquireWait(ctx, p)
	require.NoError(t, err)
	hs, err := lim.Holders(ctx, "shopify-bulk", "shop-1")
	require.NoError(t, err)
	require.Len(t, hs, 1)
	require.Equal(t, l.Token(), hs[0].Token)
	require.NoError(t, l.Release(ctx))

	_, err = lim.LeaseFor("shopify-calls", "shop-1")
	require.ErrorIs(t, err, limiter.ErrNotLeasePolicy)
	_, err = lim.LeaseFor("shopify-bulk", "a\x00b")
	require.ErrorIs(t, err, store.ErrInvalidID)
}
