package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/store/memstore"
)

// hourlyProfile writes a profile "hourly" (2 calls an hour per key, POST
// /order answering 5xx an unknown outcome) and returns its file.
func hourlyProfile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "hourly.yaml")
	require.NoError(t, os.WriteFile(f, []byte(`schema: 1
name: hourly
revision: "1"
key: lower
limits:
  - {name: hour, scope: token, algorithm: gcra, capacity: 2, rate: 1, per: 1h}
outcomes:
  unknown:
    - {status: [500, 502, 503, 504]}
`), 0o600))
	return f
}

// TestOutboundProfileOverHTTP: acquire and report with a "profile" apply
// it as outbound.AcquireOpts.Profile does: the key is normalized, the
// profile's limits are reserved (the third call of the hour is refused
// 429 without being made), a 5xx after a POST is an unknown outcome never
// retried; an unknown profile is 422 naming the field.
func TestOutboundProfileOverHTTP(t *testing.T) {
	t.Parallel()
	set, err := provider.Load(hourlyProfile(t))
	require.NoError(t, err)
	reg := provider.NewRegistry(set)
	clk := clocktest.New(start)
	b := outboundSetup(t, clk, memstore.New(memstore.Config{Clock: clk}), outbound.Config{Burst: 100, ProviderProfiles: reg},
		server.Config{Providers: reg})
	const js = "application/json"
	for i := range 2 {
		rec := b.do(t, "POST", "/v1/outbound/acquire", js, `{"key":"TOKEN-1","profile":"hourly"}`)
		require.Equal(t, 200, rec.Code, "call %d: %s", i, rec.Body)
		p := decodeAs[permitAnswer](t, rec.Body.Bytes())
		require.Equal(t, "token-1", p.Key)
		rec = b.do(t, "POST", "/v1/outbound/report", js, fmt.Sprintf(`{"permit":%q,"status":200}`, p.Permit))
		require.Equal(t, 200, rec.Code, rec.Body.String())
		require.Equal(t, "ok", decodeAs[struct{ Profile string }](t, rec.Body.Bytes()).Profile)
	}
	rec := b.do(t, "POST", "/v1/outbound/acquire", js, `{"key":"token-1","profile":"hourly","waitMs":100}`)
	require.Equal(t, 429, rec.Code, rec.Body.String())
	require.Greater(t, decodeAs[waitAnswer](t, rec.Body.Bytes()).RetryAfterMs, int64(30*60*1000), "the profile's hour")
	// Without the profile the key is not held by it.
	rec = b.do(t, "POST", "/v1/outbound/acquire", js, `{"key":"token-1"}`)
	require.Equal(t, 200, rec.Code, rec.Body.String())

	rec = b.do(t, "POST", "/v1/outbound/acquire", js, `{"key":"token-2","profile":"hourly","method":"POST","path":"/order","idempotent":true}`)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	p := decodeAs[permitAnswer](t, rec.Body.Bytes())
	rec = b.do(t, "POST", "/v1/outbound/report", js, fmt.Sprintf(`{"permit":%q,"status":503}`, p.Permit))
	require.Equal(t, 200, rec.Code, rec.Body.String())
	v := decodeAs[struct {
		Profile, Stop string
		Retry         bool
	}](t, rec.Body.Bytes())
	require.Equal(t, "unknown", v.Profile)
	require.Equal(t, "unknown_outcome", v.Stop)
	require.False(t, v.Retry)

	rec = b.do(t, "POST", "/v1/outbound/acquire", js, `{"key":"k","profile":"nope"}`)
	require.Equal(t, 422, rec.Code)
	require.Contains(t, rec.Body.String(), `"pointer":"#/profile"`)
	require.Contains(t, rec.Body.String(), server.TypeUnknownProfile)
}

// TestProvidersRoutes: GET /v1/providers lists the registry's current set
// (a swap is seen at the next request), and /v1/providers/{name} shows one.
func TestProvidersRoutes(t *testing.T) {
	t.Parallel()
	set, err := provider.Embedded()
	require.NoError(t, err)
	reg := provider.NewRegistry(set)
	clk := clocktest.New(start)
	b := outboundSetup(t, clk, memstore.New(memstore.Config{Clock: clk}), outbound.Config{ProviderProfiles: reg}, server.Config{Providers: reg})
	rec := b.do(t, "GET", "/v1/providers", "", "")
	require.Equal(t, 200, rec.Code)
	names := func(body []byte) []string {
		var out []string
		for _, p := range decodeAs[struct{ Providers []struct{ Name string } }](t, body).Providers {
			out = append(out, p.Name)
		}
		return out
	}
	require.Contains(t, names(rec.Body.Bytes()), "github")
	require.NotContains(t, names(rec.Body.Bytes()), "hourly")
	rec = b.do(t, "GET", "/v1/providers/github", "", "")
	require.Equal(t, 200, rec.Code)
	require.Contains(t, rec.Body.String(), `"resourceHeader":"X-Ratelimit-Resource"`)
	require.Equal(t, 404, b.do(t, "GET", "/v1/providers/hourly", "", "").Code)

	f := hourlyProfile(t)
	require.NoError(t, reg.Reload(f))
	rec = b.do(t, "GET", "/v1/providers/hourly", "", "")
	require.Equal(t, 200, rec.Code)
	require.Contains(t, rec.Body.String(), fmt.Sprintf(`"origin":%q`, f))
	require.Contains(t, names(b.do(t, "GET", "/v1/providers", "", "").Body.Bytes()), "hourly")
}
