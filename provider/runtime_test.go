package provider

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// fixedNow is a test clock for the store: every store call happens at *t.
type fixedNow struct{ t time.Time }

func (f *fixedNow) now() time.Time          { return f.t }
func (f *fixedNow) advance(d time.Duration) { f.t = f.t.Add(d) }

var t0 = time.Date(2026, 1, 6, 12, 0, 0, 0, time.UTC)

// fixture builds runtimes of one profile over one shared store at a
// fixed store time: two runtimes stand for two processes of a fleet.
func fixture(t *testing.T, profile string, st store.RateStore) (*fixedNow, func() *Runtime) {
	t.Helper()
	s, err := Embedded()
	require.NoError(t, err)
	p, ok := s.Get(profile)
	require.True(t, ok)
	clk := &fixedNow{t: t0}
	if st == nil {
		st = memstore.New(memstore.Config{})
	}
	return clk, func() *Runtime {
		rt, err := NewRuntime(Config{Profile: p, Store: st, Now: clk.now, Prefix: "p-" + t.Name() + ":"})
		require.NoError(t, err)
		return rt
	}
}

func gqlBody(requested, actual any, maxAv, avail, restore float64, code string) []byte {
	errs := ""
	if code != "" {
		errs = fmt.Sprintf(`"errors":[{"message":"x","extensions":{"code":%q}}],`, code)
	}
	return fmt.Appendf(nil, `{%s"data":{},"extensions":{"cost":{"requestedQueryCost":%v,"actualQueryCost":%v,"throttleStatus":{"maximumAvailable":%v,"currentlyAvailable":%v,"restoreRate":%v}}}}`,
		errs, requested, actual, maxAv, avail, restore)
}

func peek(t *testing.T, rt *Runtime, limit int, key string, now time.Time) int64 {
	t.Helper()
	r, err := rt.store.Take(context.Background(), store.TakeParams{Key: rt.prefix + key, Limit: rt.limitFor(limit, key), Cost: 0, Now: now})
	require.NoError(t, err)
	return r.Remaining
}

func TestShopifyGraphQLReserveSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk, mk := fixture(t, "shopify-graphql", nil)
	rt := mk()
	const shop = "my-shop.myshopify.com"

	tk, err := rt.Reserve(ctx, Call{Key: "https://My-Shop.myshopify.com/admin", Cost: 100})
	require.NoError(t, err)
	require.True(t, tk.OK)
	require.Equal(t, shop, tk.Key)
	require.Equal(t, int64(900), peek(t, rt, 0, shop, clk.t))

	o, err := rt.Settle(ctx, tk, signal.Response{Status: 200, Body: gqlBody(100, 30, 1000, 970, 50, "")})
	require.NoError(t, err)
	require.Equal(t, OK, o.Kind)
	require.Equal(t, int64(70), o.Refunded)
	require.Equal(t, int64(970), peek(t, rt, 0, shop, clk.t))
	_, err = rt.Settle(ctx, tk, signal.Response{Status: 200})
	require.ErrorIs(t, err, ErrSettled)

	// Proactive rule: available 970 < cost 980, so do not call; the delay
	// is (cost - available) / restoreRate = 10/50 s.
	tk, err = rt.Reserve(ctx, Call{Key: shop, Cost: 980})
	require.NoError(t, err)
	require.False(t, tk.OK)
	require.Equal(t, "points", tk.Reason)
	require.Equal(t, 200*time.Millisecond, tk.Delay)
	require.Equal(t, int64(970), peek(t, rt, 0, shop, clk.t), "a refused reservation charges nothing")
	clk.advance(200 * time.Millisecond)
	tk, err = rt.Reserve(ctx, Call{Key: shop, Cost: 980})
	require.NoError(t, err)
	require.True(t, tk.OK)
}

func TestShopifyGraphQLThrottledSyncsAndRefunds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk, mk := fixture(t, "shopify-graphql", nil)
	a, b := mk(), mk()
	const shop = "s.myshopify.com"
	tk, err := a.Reserve(ctx, Call{Key: shop, Cost: 500})
	require.NoError(t, err)
	require.True(t, tk.OK)
	// Another app's traffic emptied the shop's bucket: THROTTLED in a 200.
	o, err := a.Settle(ctx, tk, signal.Response{Status: 200, Body: gqlBody(500, "null", 1000, 100, 50, "THROTTLED")})
	require.NoError(t, err)
	require.Equal(t, Throttled, o.Kind)
	require.True(t, o.Retry, "throttled work is delayed, not failed")
	require.Equal(t, 8*time.Second, o.Delay)
	require.Equal(t, int64(500), o.Refunded, "a throttled query was not run: its whole cost comes back")
	require.Equal(t, int64(100), peek(t, a, 0, shop, clk.t), "the provider's count wins when higher")
	// The other process sees the synced bucket.
	tk, err = b.Reserve(ctx, Call{Key: shop, Cost: 500})
	require.NoError(t, err)
	require.False(t, tk.OK)
	require.Equal(t, 8*time.Second, tk.Delay)

	// A lower provider count never gives budget back.
	clk.advance(8 * time.Second)
	tk, err = b.Reserve(ctx, Call{Key: shop, Cost: 500})
	require.NoError(t, err)
	require.True(t, tk.OK)
	_, err = b.Settle(ctx, tk, signal.Response{Status: 200, Body: gqlBody(500, 500, 1000, 1000, 50, "")})
	require.NoError(t, err)
	require.Equal(t, int64(0), peek(t, b, 0, shop, clk.t))
}

func TestShopifyGraphQLMaxCostNeverRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, mk := fixture(t, "shopify-graphql", nil)
	rt := mk()
	_, err := rt.Reserve(ctx, Call{Key: "s", Cost: 1001})
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	tk, err := rt.Reserve(ctx, Call{Key: "s", Cost: 10})
	require.NoError(t, err)
	body := []byte(`{"errors":[{"message":"Query cost is 1500, which exceeds the single query max cost limit (1000).","extensions":{"code":"MAX_COST_EXCEEDED","cost":1500,"maxCost":1000}}]}`)
	o, err := rt.Settle(ctx, tk, signal.Response{Status: 200, Body: body})
	require.NoError(t, err)
	require.Equal(t, Permanent, o.Kind)
	require.False(t, o.Retry)
}

func TestShopifyGraphQLLearnsPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk, mk := fixture(t, "shopify-graphql", nil)
	rt := mk()
	tk, err := rt.Reserve(ctx, Call{Key: "plus", Cost: 10})
	require.NoError(t, err)
	// A Plus shop: 20000 points restoring at 1000/s.
	_, err = rt.Settle(ctx, tk, signal.Response{Status: 200, Body: gqlBody(10, 10, 20000, 19990, 1000, "")})
	require.NoError(t, err)
	// The 10 points were booked as 200 ms of the bootstrap rate (50/s);
	// at the learned 1000/s that time is 200 points: the local count stays
	// the higher, so it stays.
	require.Equal(t, int64(19800), peek(t, rt, 0, "plus.myshopify.com", clk.t))
	tk, err = rt.Reserve(ctx, Call{Key: "plus", Cost: 5000})
	require.NoError(t, err)
	require.True(t, tk.OK)
}

func TestShopifyREST(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk, mk := fixture(t, "shopify-rest", nil)
	a, b := mk(), mk()
	const shop = "s.myshopify.com"
	for i := range 40 {
		tk, err := a.Reserve(ctx, Call{Key: shop, Method: "GET", Path: "/admin/api/2026-01/products.json"})
		require.NoError(t, err)
		require.True(t, tk.OK, "request %d", i)
	}
	tk, err := a.Reserve(ctx, Call{Key: shop})
	require.NoError(t, err)
	require.False(t, tk.OK)
	require.Equal(t, 500*time.Millisecond, tk.Delay, "the bucket leaks 2 a second")

	clk.advance(time.Second)
	tk, err = a.Reserve(ctx, Call{Key: shop})
	require.NoError(t, err)
	require.True(t, tk.OK)
	h := http.Header{}
	h.Set("Retry-After", "2.0")
	h.Set("X-Shopify-Shop-Api-Call-Limit", "40/40")
	o, err := a.Settle(ctx, tk, signal.Response{Status: 429, Header: h})
	require.NoError(t, err)
	require.Equal(t, Throttled, o.Kind)
	require.Equal(t, 2*time.Second, o.Delay)
	// Every worker of the fleet pauses.
	tk, err = b.Reserve(ctx, Call{Key: "S.myshopify.com"})
	require.NoError(t, err)
	require.False(t, tk.OK)
	require.Equal(t, "paused", tk.Reason)
	require.Equal(t, 2*time.Second, tk.Delay)
	clk.advance(2 * time.Second)
	tk, err = b.Reserve(ctx, Call{Key: shop})
	require.NoError(t, err)
	require.True(t, tk.OK)
}

func TestBinanceAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk, mk := fixture(t, "binance", nil)
	rt := mk()
	order := Call{Keys: map[string]string{"ip": "203.0.113.7", "account": "Acct"}, Method: "POST", Path: "/api/v3/order"}
	for i := range 100 {
		tk, err := rt.Reserve(ctx, order)
		require.NoError(t, err)
		require.True(t, tk.OK, "order %d", i)
	}
	w := peek(t, rt, 0, "203.0.113.7", clk.t)
	require.Equal(t, int64(5900), w)
	tk, err := rt.Reserve(ctx, order)
	require.NoError(t, err)
	require.False(t, tk.OK)
	require.Equal(t, "orders-10s", tk.Reason)
	require.Equal(t, w, peek(t, rt, 0, "203.0.113.7", clk.t), "a refused order charges no weight")
	require.Equal(t, int64(199900), peek(t, rt, 2, "acct", clk.t))
	// A GET spends only weight.
	tk, err = rt.Reserve(ctx, Call{Keys: order.Keys, Method: "GET", Path: "/api/v3/account"})
	require.NoError(t, err)
	require.True(t, tk.OK)
	require.Equal(t, w-20, peek(t, rt, 0, "203.0.113.7", clk.t))

	// The provider counts more weight than we do: its count wins.
	h := http.Header{}
	h.Set("X-Mbx-Used-Weight-1m", "5990")
	h.Set("X-Mbx-Used-Weight", "5990")
	o, err := rt.Settle(ctx, tk, signal.Response{Status: 200, Header: h})
	require.NoError(t, err)
	require.Equal(t, OK, o.Kind)
	require.Equal(t, int64(10), peek(t, rt, 0, "203.0.113.7", clk.t))
	tk, err = rt.Reserve(ctx, Call{Keys: order.Keys, Method: "GET", Path: "/api/v3/account"})
	require.NoError(t, err)
	require.False(t, tk.OK)
	require.Equal(t, "request-weight", tk.Reason)
	// Windows align to the clock: the next minute starts afresh.
	clk.advance(time.Minute)
	tk, err = rt.Reserve(ctx, Call{Keys: order.Keys, Method: "GET", Path: "/api/v3/account"})
	require.NoError(t, err)
	require.True(t, tk.OK)
}

func TestBinanceBanAndUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk, mk := fixture(t, "binance", nil)
	a, b := mk(), mk()
	keys := map[string]string{"ip": "203.0.113.7", "account": "a"}
	tk, err := a.Reserve(ctx, Call{Keys: keys, Method: "POST", Path: "/api/v3/order"})
	require.NoError(t, err)
	o, err := a.Settle(ctx, tk, signal.Response{Status: 502})
	require.NoError(t, err)
	require.Equal(t, Unknown, o.Kind, "a 5xx on an order leaves its outcome unknown")
	require.False(t, o.Retry, "never retried blindly")
	tk, err = a.Reserve(ctx, Call{Keys: keys, Method: "GET", Path: "/api/v3/order"})
	require.NoError(t, err)
	o, err = a.Settle(ctx, tk, signal.Response{Status: 502})
	require.NoError(t, err)
	require.Equal(t, Failed, o.Kind)
	require.True(t, o.Retry, "a query may be retried")

	tk, err = a.Reserve(ctx, Call{Keys: keys, Method: "GET", Path: "/api/v3/depth"})
	require.NoError(t, err)
	h := http.Header{}
	h.Set("Retry-After", "120")
	o, err = a.Settle(ctx, tk, signal.Response{Status: 418, Header: h})
	require.NoError(t, err)
	require.Equal(t, Banned, o.Kind)
	require.Equal(t, 2*time.Minute, o.Delay)
	// The ban opens the key for every process until it ends.
	clk.advance(time.Minute)
	tk, err = b.Reserve(ctx, Call{Keys: keys, Method: "GET", Path: "/api/v3/ping"})
	require.NoError(t, err)
	require.False(t, tk.OK)
	require.Equal(t, "banned", tk.Reason)
	require.Equal(t, time.Minute, tk.Delay)
	clk.advance(time.Minute)
	tk, err = b.Reserve(ctx, Call{Keys: keys, Method: "GET", Path: "/api/v3/ping"})
	require.NoError(t, err)
	require.True(t, tk.OK)
}

func TestGitHub(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk, mk := fixture(t, "github", nil)
	rt := mk()
	tk, err := rt.Reserve(ctx, Call{Key: "tok", Method: "GET", Path: "/repos/o/r"})
	require.NoError(t, err)
	require.True(t, tk.OK)
	h := http.Header{}
	h.Set("X-Ratelimit-Limit", "5000")
	h.Set("X-Ratelimit-Remaining", "0")
	h.Set("X-Ratelimit-Used", "5000")
	h.Set("X-Ratelimit-Reset", fmt.Sprint(clk.t.Add(30*time.Minute).Unix()))
	h.Set("X-Ratelimit-Resource", "core")
	o, err := rt.Settle(ctx, tk, signal.Response{Status: 403, Header: h})
	require.NoError(t, err)
	require.Equal(t, Throttled, o.Kind, "a 403 with nothing remaining is the primary limit")
	tk, err = rt.Reserve(ctx, Call{Key: "tok", Method: "GET", Path: "/repos/o/r"})
	require.NoError(t, err)
	require.False(t, tk.OK)
	require.Equal(t, "core", tk.Reason)
	// Search is another resource, still open.
	tk, err = rt.Reserve(ctx, Call{Key: "tok", Method: "GET", Path: "/search/code"})
	require.NoError(t, err)
	require.True(t, tk.OK)
	h = http.Header{}
	h.Set("Retry-After", "60")
	o, err = rt.Settle(ctx, tk, signal.Response{Status: 403, Header: h})
	require.NoError(t, err)
	require.Equal(t, Throttled, o.Kind, "a 403 with retry-after is a secondary limit")
	tk, err = rt.Reserve(ctx, Call{Key: "tok", Method: "GET", Path: "/search/code"})
	require.NoError(t, err)
	require.Equal(t, "paused", tk.Reason)
	// A plain 403 is permanent.
	clk.advance(time.Hour)
	tk, err = rt.Reserve(ctx, Call{Key: "tok", Method: "GET", Path: "/search/code"})
	require.NoError(t, err)
	require.True(t, tk.OK)
	o, err = rt.Settle(ctx, tk, signal.Response{Status: 403})
	require.NoError(t, err)
	require.Equal(t, Permanent, o.Kind)
	require.False(t, o.Retry)
	// GraphQL points come from the call's cost, against the graphql
	// resource's 5000 an hour (the secondary 2000 a minute counts 1 a
	// request, not the query's points).
	tk, err = rt.Reserve(ctx, Call{Key: "tok", Method: "POST", Path: "/graphql", Cost: 2001})
	require.NoError(t, err)
	require.True(t, tk.OK)
	tk, err = rt.Reserve(ctx, Call{Key: "tok", Method: "POST", Path: "/graphql", Cost: 5001})
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	require.Nil(t, tk)
}

func TestIETFDefaultLearns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk, mk := fixture(t, "ietf", nil)
	rt := mk()
	call := Call{Key: "https://API.example.com/v1/x"}
	tk, err := rt.Reserve(ctx, call)
	require.NoError(t, err)
	require.Equal(t, "api.example.com", tk.Key)
	h := http.Header{}
	h.Set("Ratelimit-Policy", `"burst";q=100;w=60`)
	h.Set("Ratelimit", `"burst";r=50;t=30`)
	_, err = rt.Settle(ctx, tk, signal.Response{Status: 200, Header: h})
	require.NoError(t, err)
	require.Equal(t, int64(50), peek(t, rt, 0, "api.example.com", clk.t))
	// 100 per 60 s: the next unit within one emission interval.
	require.Equal(t, 50, drain(t, rt, call, 600*time.Millisecond))
}

// drain reserves call until rt refuses it, which must be with a delay in
// (0, within], and returns how many it let through.
func drain(t *testing.T, rt *Runtime, call Call, within time.Duration) int {
	t.Helper()
	for n := 0; ; n++ {
		tk, err := rt.Reserve(context.Background(), call)
		require.NoError(t, err)
		if !tk.OK {
			require.Greater(t, tk.Delay, time.Duration(0))
			require.LessOrEqual(t, tk.Delay, within)
			return n
		}
	}
}

// The default profile learns OpenAI's requests a minute from its
// x-ratelimit-*-requests headers (a quota a minute, replenished
// continuously), not from the tokens beside them.
func TestIETFDefaultLearnsOpenAIsRequestsAMinute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk, mk := fixture(t, "ietf", nil)
	rt := mk()
	call := Call{Key: "https://api.openai.example/v1/chat/completions"}
	tk, err := rt.Reserve(ctx, call)
	require.NoError(t, err)
	h := http.Header{}
	h.Set("X-Ratelimit-Limit-Requests", "60")
	h.Set("X-Ratelimit-Remaining-Requests", "59")
	h.Set("X-Ratelimit-Reset-Requests", "1s")
	h.Set("X-Ratelimit-Limit-Tokens", "150000")
	h.Set("X-Ratelimit-Remaining-Tokens", "149000")
	h.Set("X-Ratelimit-Reset-Tokens", "400ms")
	_, err = rt.Settle(ctx, tk, signal.Response{Status: 200, Header: h})
	require.NoError(t, err)
	require.Equal(t, int64(59), peek(t, rt, 0, "api.openai.example", clk.t))
	// 60 a minute: the next one within a second.
	require.Equal(t, 59, drain(t, rt, call, time.Second))
}

// The default profile reads a 403 that states a rate limit as GitHub's
// are read: with a Retry-After, or with the quota it states exhausted, it
// throttles (the host pauses for the fleet); a plain 403 is permanent.
func TestIETFDefault403OverALimitThrottles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk, mk := fixture(t, "ietf", nil)
	rt := mk()
	call := Call{Key: "https://api.example.com/v1/x"}
	settle := func(status int, kv ...string) Outcome {
		t.Helper()
		tk, err := rt.Reserve(ctx, call)
		require.NoError(t, err)
		require.True(t, tk.OK)
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		o, err := rt.Settle(ctx, tk, signal.Response{Status: status, Header: h})
		require.NoError(t, err)
		return o
	}
	o := settle(403)
	require.Equal(t, Permanent, o.Kind, "a 403 that states no limit is permission")
	o = settle(403, "Retry-After", "5")
	require.Equal(t, Throttled, o.Kind, "a 403 with retry-after is a rate limit")
	tk, err := rt.Reserve(ctx, call)
	require.NoError(t, err)
	require.Equal(t, "paused", tk.Reason, "the host pauses for the fleet")
	clk.advance(time.Minute)
	o = settle(403, "X-Ratelimit-Limit", "60", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "30")
	require.Equal(t, Throttled, o.Kind, "a 403 with nothing remaining is a rate limit")
}

// TestGitHubSecondaryPoints: REST calls (search included) share the
// secondary points, a GET 1 and a POST 5, kept so that no minute holds
// more than 900: a burst of 60, then 14 a second; GraphQL requests spend 1
// of their own 2000 whatever their primary points.
func TestGitHubSecondaryPoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, mk := fixture(t, "github", nil)
	rt := mk()
	n := 0
	for ; n < 1000; n++ {
		path := "/repos/o/r"
		if n%2 == 1 {
			path = "/search/code"
		}
		tk, err := rt.Reserve(ctx, Call{Key: "tok", Method: "GET", Path: path})
		require.NoError(t, err)
		if !tk.OK {
			if n%2 == 1 {
				require.Equal(t, "search", tk.Reason, "search's own 30 a minute")
			} else {
				require.Equal(t, "secondary-rest-points", tk.Reason)
			}
			break
		}
	}
	require.Equal(t, 60, n, "30 GETs and 30 searches spend the burst of 60 points; the next GET waits")
	tk, err := rt.Reserve(ctx, Call{Key: "tok2", Method: "POST", Path: "/repos/o/r/issues"})
	require.NoError(t, err)
	require.True(t, tk.OK)
	for i := range 12 {
		tk, err = rt.Reserve(ctx, Call{Key: "tok2", Method: "POST", Path: "/repos/o/r/issues"})
		require.NoError(t, err)
		require.Equal(t, i < 11, tk.OK, "a POST is 5 points: 12 of them spend the 60")
	}
	for range 100 {
		tk, err = rt.Reserve(ctx, Call{Key: "tok2", Method: "POST", Path: "/graphql", Cost: 30})
		require.NoError(t, err)
		require.True(t, tk.OK, "GraphQL's secondary points are its own")
		// The call is done: its concurrent-requests permit frees (held
		// around every call, at most 100 a token).
		require.NoError(t, rt.Release(ctx, tk))
	}
}
