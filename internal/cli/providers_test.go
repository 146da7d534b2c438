package cli_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
)

func TestProvidersListShow(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "providers", "list")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	for _, n := range []string{"binance", "github", "ietf", "shopify-bulk", "shopify-graphql", "shopify-rest"} {
		require.Contains(t, r.stdout, "\n"+n+" ")
	}
	r = run(t, nil, "providers", "show", "shopify-bulk")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "bulk-query     shop   1; 5 from API 2026-01")
	require.Regexp(t, `bulk-query\s+shop\s+1; 5 from API 2026-01\s+10m\s+explicit`, r.stdout)
	r = run(t, nil, "providers", "show", "github")
	require.Regexp(t, `concurrent-requests\s+token\s+100\s+1m\s+call`, r.stdout, "held around every call")
	r = run(t, nil, "providers", "show", "binance")
	require.Contains(t, r.stdout, "POST /api/v3/order        orders=1 weight=1 not idempotent")
	require.Contains(t, r.stdout, "ban       418")

	r = run(t, nil, "providers", "show", "nope")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, `unknown profile "nope"`)
}

func TestProvidersFileOverride(t *testing.T) {
	t.Parallel()
	good := writeFile(t, "rest.yaml", "schema: 1\nname: shopify-rest\nrevision: mine\nkey: shopify-shop\nlimits:\n  - {name: requests, scope: shop, algorithm: leaky_bucket, capacity: 400, rate: 20, per: 1s}\n")
	r := run(t, nil, "providers", "--file", good, "show", "shopify-rest")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "revision mine")
	require.Contains(t, r.stdout, "400 requests, +20 per 1s")

	bad := writeFile(t, "bad.yaml", "schema: 1\nname: x\nrevision: r\nlimits:\n  - {name: a, scope: s, algorithm: gcra, capacity: 1, rate: 0, per: 1s}\n")
	r = run(t, nil, "providers", "list", "--file", bad)
	require.Equal(t, cli.ExitFailure, r.code)
	require.True(t, strings.Contains(r.stderr, bad+":5: limits[0].rate: want a count"), r.stderr)
}
