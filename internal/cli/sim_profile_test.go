package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
)

func TestSimProfile(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "sim", "--profile", "nope")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `--profile "nope" has no simulator`)
	r = run(t, nil, "sim", "--profile", "shopify-rest", "--report")
	require.Equal(t, cli.ExitUsage, r.code)

	r = run(t, nil, "sim", "--profile", "shopify-rest", "--duration", "3s", "--latency", "1ms")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "profile shopify-rest: goodput/limit")
	require.Contains(t, r.stdout, "0 throttled, 0 banned, 0 MAX_COST_EXCEEDED", "the bucket of 40 holds a 3 s run: nothing is refused")
}

// TestSimProfileAll: --profile all runs every simulated profile in turn
// and prints one table.
func TestSimProfileAll(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "sim", "--profile", "all", "--target", "http://127.0.0.1:1/")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "cannot be combined with --target")
	r = run(t, nil, "sim", "--profile", "all", "--duration", "2s", "--latency", "1ms")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "hidden limit/s")
	for _, p := range []string{"shopify-graphql", "shopify-rest", "binance", "github"} {
		require.Contains(t, r.stdout, "\n"+p+" ", "a row for %s", p)
	}
}
