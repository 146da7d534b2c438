package limiter_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/storetest"
)

// untouchable is a store that must never be called: every method of the
// nil interface it embeds panics.
type untouchable struct{ store.RateLeaseStore }

// TestHostileKeysNeverReachTheStore: every limiter entry point refuses a
// key or holder that breaks the identifier rule with an error matching
// store.ErrInvalidID, before any store sees it (so no outage policy can
// answer for it), on a shared store and on the embedded one.
func TestHostileKeysNeverReachTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ps, err := limiter.Parse("p.yaml", []byte(mixedYAML+`
  open:
    rate: 1
    period: 1h
    on_store_outage: fail_open
`))
	require.NoError(t, err)
	shared, err := limiter.New(limiter.Config{Store: untouchable{}, Policies: ps})
	require.NoError(t, err)
	embedded, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policies: ps})
	require.NoError(t, err)
	for _, l := range []*limiter.Limiter{shared, embedded} {
		for _, bad := range storetest.HostileIDs() {
			checks := map[string]error{}
			_, checks["Allow"] = l.Allow(ctx, "open", bad)
			_, checks["AllowN peek"] = l.AllowN(ctx, "open", bad, 0)
			_, checks["ReserveN"] = l.ReserveN(ctx, "open", bad, 1, nil)
			checks["WaitN"] = l.WaitN(ctx, "open", bad, 1)
			_, checks["AllowAll"] = l.AllowAll(ctx, []limiter.Request{{Policy: "open", Key: "ok", Cost: 1}, {Policy: "open", Key: bad, Cost: 1}})
			_, checks["Acquire key"] = l.Acquire(ctx, "shopify-bulk", bad, "h")
			_, checks["Acquire holder"] = l.Acquire(ctx, "shopify-bulk", "k", bad)
			_, checks["Renew"] = l.Renew(ctx, "shopify-bulk", bad, "h", 1)
			_, checks["Renew holder"] = l.Renew(ctx, "shopify-bulk", "k", bad, 1)
			checks["Release"] = l.Release(ctx, "shopify-bulk", bad, "h", 1)
			_, checks["Holders"] = l.Holders(ctx, "shopify-bulk", bad)
			_, checks["AllowAllAcquire rate"] = l.AllowAllAcquire(ctx, []limiter.Request{{Policy: "shopify-calls", Key: bad, Cost: 1}}, limiter.LeaseRequest{Policy: "shopify-bulk", Key: "k", Holder: "h"})
			_, checks["AllowAllAcquire lease"] = l.AllowAllAcquire(ctx, []limiter.Request{{Policy: "shopify-calls", Key: "k", Cost: 1}}, limiter.LeaseRequest{Policy: "shopify-bulk", Key: bad, Holder: "h"})
			for name, err := range checks {
				require.ErrorIs(t, err, store.ErrInvalidID, "%s(%q)", name, bad)
			}
		}
	}
	// Nothing was charged on the embedded store: the good key of the
	// refused AllowAll still has its one unit.
	d, err := embedded.Allow(ctx, "open", "ok")
	require.NoError(t, err)
	require.True(t, d.Allowed)
}
