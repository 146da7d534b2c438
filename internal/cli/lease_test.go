package cli_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
)

const leaseConfig = `policies:
  bulk:
    algorithm: concurrency
    permits: 1
    ttl: 30s
  api:
    rate: 10
    period: 1s
`

func TestLeaseCommands(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "p.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(leaseConfig), 0o600))
	for _, state := range []string{"memory:", "sqlite:" + filepath.Join(t.TempDir(), "state.db")} {
		s := startServe(t, nil, "--addr", "127.0.0.1:0", "--config", cfg, "--state", state)
		env := map[string]string{"SLUICE_SERVER": "http://" + s.addr}

		r := run(t, env, "lease", "acquire", "bulk", "shop-1", "--holder", "w1")
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		var l struct {
			ID     string `json:"id"`
			Holder string `json:"holder"`
			Token  int64  `json:"token"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), r.stdout)
		require.Equal(t, "w1", l.Holder)
		require.Positive(t, l.Token)

		r = run(t, env, "lease", "acquire", "bulk", "shop-1")
		require.Equal(t, cli.ExitFailure, r.code)
		require.Contains(t, r.stderr, "lease unavailable (409)")

		r = run(t, env, "lease", "list", "bulk", "shop-1")
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		sum := sha256.Sum256([]byte("w1"))
		require.Contains(t, r.stdout, `"holderHash":"`+hex.EncodeToString(sum[:8])+`"`)
		require.NotContains(t, r.stdout, `"w1"`, "a listing does not hand out holder ids")

		r = run(t, env, "lease", "renew", l.ID)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		r = run(t, env, "lease", "release", l.ID)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		require.Equal(t, "released\n", r.stdout)
		r = run(t, env, "lease", "release", l.ID)
		require.Equal(t, cli.ExitFailure, r.code)
		require.Contains(t, r.stderr, "lease not held (404)")

		// --wait shorter than the holder's TTL: the waiter gets the permit
		// when the holder releases early. It talks through a proxy that
		// reports its refusals, so the release comes only once it has
		// been refused (it waited), and it must then get the permit.
		r = run(t, env, "lease", "acquire", "bulk", "shop-2")
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		var h struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &h))
		refused := make(chan struct{}, 1)
		proxy := refusalProxy(t, s.addr, refused)
		waited := make(chan result, 1)
		go func() {
			waited <- run(t, map[string]string{"SLUICE_SERVER": proxy}, "lease", "acquire", "bulk", "shop-2", "--wait", "20s")
		}()
		select {
		case <-refused:
		case r := <-waited:
			t.Fatalf("the waiter returned before it was refused: %d %s %s", r.code, r.stdout, r.stderr)
		case <-time.After(time.Minute):
			t.Fatal("the waiter was not refused within a minute")
		}
		r = run(t, env, "lease", "release", h.ID)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		r = <-waited
		require.Equal(t, cli.ExitOK, r.code, "--wait gave up before the TTL of 30s: %s", r.stderr)

		r = run(t, env, "lease", "acquire", "api", "k")
		require.Equal(t, cli.ExitFailure, r.code)
		require.Contains(t, r.stderr, "not concurrency")
		require.Equal(t, cli.ExitOK, s.stop(t))
	}
}

// refusalProxy returns the URL of a reverse proxy to the server at addr
// that signals refused (without blocking) each time the server answers a
// lease acquisition with 409 Conflict.
func refusalProxy(t *testing.T, addr string, refused chan<- struct{}) string {
	t.Helper()
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr})
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method == http.MethodPost && resp.Request.URL.Path == "/v1/leases" && resp.StatusCode == http.StatusConflict {
			select {
			case refused <- struct{}{}:
			default:
			}
		}
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestLeaseCommandErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"lease", "acquire", "bulk"}, nil, "accepts 2 arg(s)"},
		{[]string{"lease", "acquire", "bulk", "k", "--server", "ftp://x"}, nil, `invalid --server "ftp://x"`},
		{[]string{"lease", "list", "bulk", "k"}, map[string]string{"SLUICE_SERVER": "nope"}, `invalid SLUICE_SERVER "nope"`},
		{[]string{"lease", "acquire", "bulk", "k", "--wait", "-1s"}, nil, "invalid --wait"},
		{[]string{"lease", "renew"}, nil, "accepts 1 arg(s)"},
	} {
		r := run(t, tc.env, tc.args...)
		require.Equal(t, cli.ExitUsage, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, tc.args)
	}
}
