package provider_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/sim"
)

// TestUnderOutbound: a provider.Transport as outbound's Base applies the
// profile's exact accounting under outbound's layers (bulkhead, timeout,
// adaptive pacing, breaker, retry budget) without a change to outbound.
// 45 REST calls to a shop whose bucket holds 40 and leaks 2/s at real
// speed would need 10 s: here the simulated Shopify leaks 100/s, and none
// of the calls is refused by it.
func TestUnderOutbound(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shop, err := sim.NewProfileProvider(sim.ProfileConfig{Profile: "shopify-rest", Capacity: 40, Rate: 100})
	require.NoError(t, err)
	set, err := provider.Embedded()
	require.NoError(t, err)
	p, _ := set.Get("shopify-rest")
	// The fleet's profile says what this shop's plan is.
	q := *p
	q.Limits = append([]provider.Limit(nil), p.Limits...)
	q.Limits[0].Rate = 100
	q.Limits[0].Sync = nil
	rt, err := provider.NewRuntime(provider.Config{Profile: &q})
	require.NoError(t, err)
	c, err := outbound.New(outbound.Config{
		Base: &provider.Transport{Runtime: rt, Base: sim.HandlerTransport{Handler: shop}},
	})
	require.NoError(t, err)
	hc := &http.Client{Transport: c}
	for i := range 45 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://Shop.myshopify.com/admin/api/2026-01/products.json", nil)
		resp, err := hc.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "call %d", i)
	}
	require.Zero(t, shop.Stats().Throttled)
}
