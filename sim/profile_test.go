package sim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
)

func serveProfile(p http.Handler, method, url string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, req)
	return rec
}

func TestProfileShopifyGraphQL(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	p, err := NewProfileProvider(ProfileConfig{Profile: "shopify-graphql", Clock: clk})
	require.NoError(t, err)
	type cost struct {
		TS map[string]float64 `json:"throttleStatus"`
	}
	var body struct {
		Errors []struct {
			Extensions struct{ Code string } `json:"extensions"`
		} `json:"errors"`
		Extensions struct{ Cost cost } `json:"extensions"`
	}
	for i := range 16 { // 1000 points, 40 actual per query: the 25th would need 100 with 40 left
		rec := serveProfile(p, "POST", "https://a.myshopify.com/graphql.json", map[string]string{"X-Sim-Query-Cost": "100", "X-Sim-Actual-Cost": "60"})
		require.Equal(t, 200, rec.Code)
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		require.Empty(t, body.Errors, "query %d", i)
		require.Equal(t, float64(1000-60*(i+1)), body.Extensions.Cost.TS["currentlyAvailable"])
	}
	rec := serveProfile(p, "POST", "https://a.myshopify.com/graphql.json", map[string]string{"X-Sim-Query-Cost": "100"})
	body.Errors = nil
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, "THROTTLED", body.Errors[0].Extensions.Code, "40 left < 100 requested")
	require.Equal(t, 200, rec.Code)
	// Another shop has its own bucket; time refills this one.
	rec = serveProfile(p, "POST", "https://b.myshopify.com/graphql.json", nil)
	require.NotContains(t, rec.Body.String(), "THROTTLED")
	clk.Advance(2 * time.Second)
	rec = serveProfile(p, "POST", "https://a.myshopify.com/graphql.json", nil)
	require.NotContains(t, rec.Body.String(), "THROTTLED")
	rec = serveProfile(p, "POST", "https://a.myshopify.com/graphql.json", map[string]string{"X-Sim-Query-Cost": "1001"})
	require.Contains(t, rec.Body.String(), "MAX_COST_EXCEEDED")
	st := p.Stats()
	require.Equal(t, ProfileStats{Requests: 20, Admitted: 18, Throttled: 1, TooCostly: 1, Points: 16*60 + 40 + 40}, st)
}

func TestProfileShopifyREST(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	p, err := NewProfileProvider(ProfileConfig{Profile: "shopify-rest", Clock: clk})
	require.NoError(t, err)
	for i := range 40 {
		rec := serveProfile(p, "GET", "https://a.myshopify.com/admin/api/2026-01/products.json", nil)
		require.Equal(t, 200, rec.Code, "request %d", i)
		require.Equal(t, itoa(i+1)+"/40", rec.Header().Get("X-Shopify-Shop-Api-Call-Limit"))
	}
	rec := serveProfile(p, "GET", "https://a.myshopify.com/admin/api/2026-01/products.json", nil)
	require.Equal(t, 429, rec.Code)
	require.Equal(t, "2.0", rec.Header().Get("Retry-After"))
	clk.Advance(time.Second) // leaks 2
	for range 2 {
		require.Equal(t, 200, serveProfile(p, "GET", "https://a.myshopify.com/x", nil).Code)
	}
	require.Equal(t, 429, serveProfile(p, "GET", "https://a.myshopify.com/x", nil).Code)
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestProfileBinance(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(1_700_000_080, 0)) // 40 s into a minute
	p, err := NewProfileProvider(ProfileConfig{Profile: "binance", Capacity: 100, BanAfter: 2, BanFor: time.Minute, Clock: clk})
	require.NoError(t, err)
	for range 5 {
		rec := serveProfile(p, "GET", "https://api.binance.com/api/v3/account", nil)
		require.Equal(t, 200, rec.Code)
	}
	rec := serveProfile(p, "GET", "https://api.binance.com/api/v3/ping", nil)
	require.Equal(t, 429, rec.Code)
	require.Equal(t, "100", rec.Header().Get("X-Mbx-Used-Weight-1m"))
	require.Equal(t, "20", rec.Header().Get("Retry-After"), "the window is aligned to the clock: 20 s left")
	// Coming back before the Retry-After: violations, then a ban.
	require.Equal(t, 429, serveProfile(p, "GET", "https://api.binance.com/api/v3/ping", nil).Code)
	rec = serveProfile(p, "GET", "https://api.binance.com/api/v3/ping", nil)
	require.Equal(t, 418, rec.Code)
	require.Equal(t, "60", rec.Header().Get("Retry-After"))
	clk.Advance(time.Minute)
	require.Equal(t, 200, serveProfile(p, "GET", "https://api.binance.com/api/v3/ping", nil).Code)
	require.Equal(t, int64(1), p.Stats().Bans)
}

func TestProfileGitHub(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(1_700_000_000, 0).Truncate(time.Hour))
	p, err := NewProfileProvider(ProfileConfig{Profile: "github", Capacity: 3, Clock: clk})
	require.NoError(t, err)
	for i := range 3 {
		rec := serveProfile(p, "GET", "https://api.github.com/repos/o/r", map[string]string{"Authorization": "token a"})
		require.Equal(t, 200, rec.Code)
		require.Equal(t, itoa(2-i), rec.Header().Get("X-Ratelimit-Remaining"))
		require.Equal(t, "core", rec.Header().Get("X-Ratelimit-Resource"))
	}
	rec := serveProfile(p, "GET", "https://api.github.com/repos/o/r", map[string]string{"Authorization": "token a"})
	require.Equal(t, 429, rec.Code)
	require.Equal(t, "0", rec.Header().Get("X-Ratelimit-Remaining"))
	require.Equal(t, 200, serveProfile(p, "GET", "https://api.github.com/repos/o/r", map[string]string{"Authorization": "token b"}).Code)
	rec = serveProfile(p, "GET", "https://api.github.com/repos/o/r", map[string]string{"Authorization": "token a"})
	require.Equal(t, "3600", rec.Header().Get("Retry-After"), "coming back before the reset")
}

func TestProfileConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := NewProfileProvider(ProfileConfig{Profile: "nope"})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewProfileProvider(ProfileConfig{Profile: "shopify-graphql", RequestedCost: 5, ActualCost: 10})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewProfileProvider(ProfileConfig{Profile: "binance", Capacity: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

// TestProfileGitHubResources: search and GraphQL have primary limits of
// their own, reported with their resource; GraphQL spends a query's
// points.
func TestProfileGitHubResources(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(1_700_000_000, 0).Truncate(time.Hour))
	p, err := NewProfileProvider(ProfileConfig{Profile: "github", Capacity: 100, SearchCapacity: 2, GraphQLCapacity: 10, Clock: clk})
	require.NoError(t, err)
	tok := map[string]string{"Authorization": "token a"}
	for range 2 {
		rec := serveProfile(p, "GET", "https://api.github.com/search/code", tok)
		require.Equal(t, 200, rec.Code)
		require.Equal(t, "search", rec.Header().Get("X-Ratelimit-Resource"))
	}
	rec := serveProfile(p, "GET", "https://api.github.com/search/code", tok)
	require.Equal(t, 429, rec.Code)
	require.Equal(t, "0", rec.Header().Get("X-Ratelimit-Remaining"))
	require.Equal(t, 200, serveProfile(p, "GET", "https://api.github.com/repos/o/r", tok).Code, "core is another resource")

	gql := map[string]string{"Authorization": "token a", "X-Sim-Query-Cost": "4"}
	rec = serveProfile(p, "POST", "https://api.github.com/graphql", gql)
	require.Equal(t, 200, rec.Code)
	require.Equal(t, "graphql", rec.Header().Get("X-Ratelimit-Resource"))
	require.Equal(t, "6", rec.Header().Get("X-Ratelimit-Remaining"))
	require.Equal(t, "4", rec.Header().Get("X-Ratelimit-Used"))
	require.Equal(t, 200, serveProfile(p, "POST", "https://api.github.com/graphql", gql).Code)
	gql["X-Sim-403"] = "1"
	rec = serveProfile(p, "POST", "https://api.github.com/graphql", gql)
	require.Equal(t, 403, rec.Code, "8 of 10 points used: a query of 4 does not fit")
	require.Equal(t, "0", rec.Header().Get("X-Ratelimit-Remaining"))
	require.EqualValues(t, 8, p.Stats().Points)
}

// TestProfileGitHubSecondary: the secondary points (REST: a GET 1, a POST
// 5) in a rolling minute answer 403 with retry-after 60; coming back
// before it passed, again and again, earns a ban; the concurrency limit
// refuses the request above MaxConcurrent in flight.
func TestProfileGitHubSecondary(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(1_700_000_000, 0).Truncate(time.Hour))
	p, err := NewProfileProvider(ProfileConfig{Profile: "github", SecondaryPoints: 7, BanAfter: 2, Clock: clk})
	require.NoError(t, err)
	tok := map[string]string{"Authorization": "token a"}
	require.Equal(t, 200, serveProfile(p, "POST", "https://api.github.com/repos/o/r/issues", tok).Code)
	require.Equal(t, 200, serveProfile(p, "GET", "https://api.github.com/repos/o/r", tok).Code)
	require.Equal(t, 200, serveProfile(p, "GET", "https://api.github.com/repos/o/r", tok).Code)
	clk.Advance(30 * time.Second)
	rec := serveProfile(p, "GET", "https://api.github.com/repos/o/r", tok)
	require.Equal(t, 403, rec.Code, "7 points in the rolling minute")
	require.Equal(t, "60", rec.Header().Get("Retry-After"))
	require.Contains(t, rec.Body.String(), "secondary rate limit")
	require.EqualValues(t, 1, p.Stats().Throttled)
	clk.Advance(31 * time.Second) // the first 7 points leave the minute
	require.Equal(t, 200, serveProfile(p, "GET", "https://api.github.com/repos/o/r", map[string]string{"Authorization": "token b"}).Code)
	for range 6 {
		serveProfile(p, "GET", "https://api.github.com/repos/o/r", tok)
	}
	// Hammering on: violations, then a ban.
	for range 3 {
		serveProfile(p, "GET", "https://api.github.com/repos/o/r", tok)
	}
	require.EqualValues(t, 1, p.Stats().Bans)
	require.Positive(t, p.Stats().Banned)

	// Concurrency: with one place, a request arriving while one is in
	// flight is refused.
	clk2 := clocktest.New(time.Unix(1_700_000_000, 0))
	q, err := NewProfileProvider(ProfileConfig{Profile: "github", MaxConcurrent: 1, Latency: time.Second, Clock: clk2})
	require.NoError(t, err)
	done := make(chan int)
	go func() { done <- serveProfile(q, "GET", "https://api.github.com/repos/o/r", tok).Code }()
	clk2.BlockUntilTimers(1) // the first request waits its latency
	rec = serveProfile(q, "GET", "https://api.github.com/repos/o/r", tok)
	require.Equal(t, 403, rec.Code)
	require.Equal(t, "60", rec.Header().Get("Retry-After"))
	clk2.Advance(time.Second)
	require.Equal(t, 200, <-done)
}
