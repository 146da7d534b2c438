package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
)

// TestLeaseAcquireSaysWhenAPermitFrees: on a full key, acquire's error
// carries the server's Retry-After, as its help promises.
func TestLeaseAcquireSaysWhenAPermitFrees(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "p.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(leaseConfig), 0o600))
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--config", cfg)
	env := map[string]string{"SLUICE_SERVER": "http://" + s.addr}
	r := run(t, env, "lease", "acquire", "bulk", "shop-1")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)

	r = run(t, env, "lease", "acquire", "bulk", "shop-1")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "lease unavailable (409)")
	m := regexp.MustCompile(`a permit frees within (\S+) \(Retry-After\)`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, r.stderr)
	d, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	// The first lease (ttl 30s) ends within its ttl.
	require.Positive(t, d)
	require.LessOrEqual(t, d, 30*time.Second)
}
