package provider

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/sim"
	"github.com/sluicerl/sluice/store/memstore"
)

// TestSyncLevelBetweenUnits is the boundary sluice sim --profile
// shopify-rest hit: the first call reserved reaches the shop late (here 100
// ms, while the client's bucket already leaks it), and 39 more are reserved
// and served together. The shop's bucket, which started leaking at its
// first call, is then fuller than the client's (40 against 39.8); its
// header says 40/40 and the client, at 0 units remaining either way, must
// still raise its level to the shop's count, or the call it reserves once
// its own level is down to 39 reaches a shop at 39.2 and is throttled.
// Every call the client reserves from then on must be admitted.
func TestSyncLevelBetweenUnits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	set, err := Embedded()
	require.NoError(t, err)
	p, err := set.Lookup("shopify-rest")
	require.NoError(t, err)
	rt, err := NewRuntime(Config{Profile: p, Store: memstore.New(memstore.Config{Clock: clk}), Clock: clk})
	require.NoError(t, err)
	shop, err := sim.NewProfileProvider(sim.ProfileConfig{Profile: "shopify-rest", Clock: clk})
	require.NoError(t, err)

	const host = "demo-shop.myshopify.com"
	call := Call{Key: host, Method: http.MethodGet, Path: "/admin/api/2026-01/products.json"}
	reserve := func() *Ticket {
		tk, err := rt.Reserve(ctx, call)
		require.NoError(t, err)
		return tk
	}
	send := func(tk *Ticket) int {
		rec := httptest.NewRecorder()
		shop.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "https://"+host+call.Path, nil))
		_, err := rt.Settle(ctx, tk, signal.Response{Status: rec.Code, Header: rec.Header()})
		require.NoError(t, err)
		return rec.Code
	}

	tickets := []*Ticket{reserve()}
	clk.Advance(100 * time.Millisecond) // the first call is on its way
	for range 39 {
		tickets = append(tickets, reserve())
	}
	for i, tk := range tickets {
		require.True(t, tk.OK, "call %d fits the bucket of 40", i)
		require.Equal(t, http.StatusOK, send(tk), "call %d", i)
	}
	start := clk.Now()
	for n := 0; n < 10; {
		tk := reserve()
		if !tk.OK {
			require.Positive(t, tk.Delay)
			clk.Advance(tk.Delay)
			continue
		}
		require.Equal(t, http.StatusOK, send(tk), "the call reserved %v after the burst reached a shop with no room for it", clk.Now().Sub(start))
		n++
	}
	require.Zero(t, shop.Stats().Throttled)
}
