package provider

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEmbeddedProfilesParse(t *testing.T) {
	t.Parallel()
	s, err := Embedded()
	require.NoError(t, err)
	require.Equal(t, []string{"binance", "github", "ietf", "shopify-bulk", "shopify-graphql", "shopify-rest"}, s.Names())
	for _, n := range s.Names() {
		p, _ := s.Get(n)
		require.Equal(t, n, p.Name)
		require.Equal(t, "embedded:profiles/"+n+".yaml", s.Origin(n))
	}
	def, err := s.Lookup("")
	require.NoError(t, err)
	require.Equal(t, DefaultProfile, def.Name)
}

func TestEmbeddedValues(t *testing.T) {
	t.Parallel()
	s, err := Embedded()
	require.NoError(t, err)
	gql, _ := s.Get("shopify-graphql")
	require.Equal(t, KeyShopifyShop, gql.Key)
	require.Equal(t, Limit{Name: "points", Scope: "shop", Unit: "points", Algorithm: LeakyBucket, Capacity: 1000, Rate: 50, Per: time.Second,
		Charge: ChargeCost, Sync: &Sync{Source: "shopify-graphql", Learn: true}, Description: gql.Limits[0].Description}, gql.Limits[0])
	rest, _ := s.Get("shopify-rest")
	require.Equal(t, int64(40), rest.Limits[0].Capacity)
	require.Equal(t, int64(2), rest.Limits[0].Rate)

	bulk, _ := s.Get("shopify-bulk")
	q, ok := bulk.Lease("bulk-query")
	require.True(t, ok)
	for v, want := range map[string]int64{"2024-10": 1, "2025-10": 1, "2026-01": 5, "2026-04": 5, "unstable": 5, "": 5} {
		require.Equal(t, want, q.PermitsFor(v), "api version %q", v)
	}
	m, _ := bulk.Lease("bulk-mutation")
	require.Equal(t, int64(1), m.PermitsFor("2026-01"))

	bn, _ := s.Get("binance")
	r, ok := bn.Route("POST", "/api/v3/order")
	require.True(t, ok)
	require.Equal(t, map[string]int64{"weight": 1, "orders": 1}, r.Costs)
	require.False(t, *r.Idempotent)
	r, _ = bn.Route("GET", "/api/v3/account")
	require.Equal(t, int64(20), r.Costs["weight"])
	r, _ = bn.Route("GET", "/api/v3/unlisted")
	require.Equal(t, int64(1), r.Costs["weight"])

	gh, _ := s.Get("github")
	r, _ = gh.Route("GET", "/search/code")
	require.Equal(t, "search", r.Resource)
	r, _ = gh.Route("PATCH", "/repos/o/r")
	require.Equal(t, int64(5), r.Costs["rest_points"])
}

// TestParseErrors: every malformed profile is refused with the file, line
// and field named.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	const base = "schema: 1\nname: x\nrevision: r1\nkey: lower\nlimits:\n  - name: a\n    scope: k\n    algorithm: gcra\n    capacity: 10\n    rate: 10\n    per: 1s\n"
	for _, tc := range []struct {
		name, yaml  string
		line        int
		field, want string
	}{
		{"unknown top key", base + "colour: red\n", 12, "colour", "field colour not found"},
		{"unknown limit key", strings.Replace(base, "    per: 1s\n", "    per: 1s\n    burst: 3\n", 1), 12, "limits[0].burst", "field burst not found"},
		{"bad type", strings.Replace(base, "capacity: 10", "capacity: lots", 1), 9, "limits[0].capacity", "cannot unmarshal"},
		{"bad duration", strings.Replace(base, "per: 1s", "per: soon", 1), 11, "limits[0].per", "soon"},
		{"zero capacity", strings.Replace(base, "capacity: 10", "capacity: 0", 1), 9, "limits[0].capacity", "want a count"},
		{"bad algorithm", strings.Replace(base, "algorithm: gcra", "algorithm: magic", 1), 8, "limits[0].algorithm", "unknown algorithm"},
		{"schema", strings.Replace(base, "schema: 1", "schema: 2", 1), 1, "schema", "want schema: 1"},
		{"no revision", strings.Replace(base, "revision: r1\n", "", 1), 0, "revision", "missing"},
		{"bad key rule", strings.Replace(base, "key: lower", "key: upper", 1), 4, "key", "unknown key rule"},
		{"window on bucket", strings.Replace(base, "per: 1s", "per: 1s\n    window: 1m", 1), 12, "limits[0].window", "window applies to windows"},
		{"bad charge", strings.Replace(base, "per: 1s", "per: 1s\n    charge: weight", 1), 12, "limits[0].charge", "want request, cost"},
		{"bad sync", strings.Replace(base, "per: 1s", "per: 1s\n    sync: {source: smoke}", 1), 12, "limits[0].sync.source", "unknown source"},
		{"bad rule", base + "outcomes:\n  throttle:\n    - {status: [700]}\n", 14, "outcomes.throttle[0].status", "want HTTP statuses"},
		{"bad graphql", base + "outcomes:\n  permanent:\n    - {graphql: OOPS}\n", 14, "outcomes.permanent[0].graphql", "unknown GraphQL code"},
		{"dup name", base + "  - {name: a, scope: k, algorithm: gcra, capacity: 1, rate: 1, per: 1s}\n", 12, "limits[1].name", "duplicate name"},
		{"bad route", base + "routes:\n  - {match: \"GET api\"}\n", 13, "routes[0].match", "METHOD /path"},
		{"lease versions", "schema: 1\nname: x\nrevision: r\nleases:\n  - name: l\n    scope: s\n    permits: 1\n    ttl: 1m\n    by_api_version:\n      - {from: 2026-13, permits: 2}\n", 10, "leases[0].by_api_version[0].from", "YYYY-MM"},
		{"bad hold", "schema: 1\nname: x\nrevision: r\nleases:\n  - name: l\n    scope: s\n    permits: 1\n    ttl: 1m\n    hold: always\n", 9, "leases[0].hold", "unknown hold \"always\""},
		{"hold not a string", "schema: 1\nname: x\nrevision: r\nleases:\n  - name: l\n    scope: s\n    permits: 1\n    ttl: 1m\n    hold: [call]\n", 9, "leases[0].hold", "cannot unmarshal"},
		{"call hold permits", "schema: 1\nname: x\nrevision: r\nleases:\n  - name: l\n    scope: s\n    permits: 20000\n    ttl: 1m\n    hold: call\n", 7, "leases[0].permits", "at most 10000"},
		{"call hold ttl", "schema: 1\nname: x\nrevision: r\nleases:\n  - name: l\n    scope: s\n    permits: 1\n    ttl: 1500ns\n    hold: call\n", 8, "leases[0].ttl", "whole number of microseconds"},
		{"call hold versions", "schema: 1\nname: x\nrevision: r\nleases:\n  - name: l\n    scope: s\n    permits: 1\n    ttl: 1m\n    hold: call\n    by_api_version:\n      - {from: 2026-01, permits: 2}\n", 10, "leases[0].by_api_version", "by_api_version is for explicit"},
		{"two documents", base + "---\nname: y\n", 12, "", "one YAML document"},
		{"not yaml", "schema: [1\n", 0, "", "did not find"},
		{"empty", "", 0, "", "empty profile file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("p.yaml", []byte(tc.yaml))
			require.Error(t, err)
			var pe *Error
			require.True(t, errors.As(err, &pe), "%T %v", err, err)
			require.Equal(t, "p.yaml", pe.File)
			require.Contains(t, pe.Msg, tc.want)
			if tc.line > 0 {
				require.Equal(t, tc.line, pe.Line, "%v", err)
			}
			require.Equal(t, tc.field, pe.Field, "%v", err)
			require.Contains(t, err.Error(), "p.yaml")
		})
	}
	p, err := Parse("p.yaml", []byte(base))
	require.NoError(t, err)
	require.Equal(t, "x", p.Name)
}

// TestOverrideAndRegistry: a user's file replaces the embedded profile of
// the same name; a malformed file leaves the registry's profiles as they
// were.
func TestOverrideAndRegistry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "rest.yaml")
	data, err := embedded.ReadFile("profiles/shopify-rest.yaml")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(good, []byte(strings.Replace(string(data), "capacity: 40", "capacity: 400", 1)), 0o600))
	s, err := Load(good)
	require.NoError(t, err)
	p, _ := s.Get("shopify-rest")
	require.Equal(t, int64(400), p.Limits[0].Capacity)
	require.Equal(t, good, s.Origin("shopify-rest"))

	_, err = Load(good, good)
	require.ErrorContains(t, err, "also defined in")

	reg := NewRegistry(s)
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(strings.Replace(string(data), "rate: 2", "rate: -2", 1)), 0o600))
	err = reg.Reload(bad)
	var pe *Error
	require.True(t, errors.As(err, &pe))
	require.Equal(t, bad, pe.File)
	require.Equal(t, "limits[0].rate", pe.Field)
	require.Same(t, s, reg.Set(), "a refused reload keeps the profiles the registry had")
	require.NoError(t, reg.Reload())
	p, _ = reg.Set().Get("shopify-rest")
	require.Equal(t, int64(40), p.Limits[0].Capacity)
}
