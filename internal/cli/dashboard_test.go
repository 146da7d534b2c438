package cli_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
)

// TestServeDashboard: sluice serve mounts the dashboard at /ui/, fed by
// the server's decisions, beside the API.
func TestServeDashboard(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--addr", "127.0.0.1:0")
	base := "http://" + s.addr
	resp, err := http.Post(base+"/v1/take", "application/json", strings.NewReader(`{"policy":"default","key":"k"}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	code, body := get(t, base+"/ui/?fragment=1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<dd class="n-allowed">1</dd>`)
	require.Contains(t, body, `<dd id="store-name">memory</dd>`)
	for _, p := range []string{"policies", "outbound", "breakers", "leases", "slots", "jobs"} {
		code, body = get(t, base+"/ui/"+p)
		require.Equal(t, http.StatusOK, code, "/ui/%s: %s", p, body)
	}
	code, _ = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
}

// TestServeDashboardAuth: with tokens, the dashboard asks the browser for
// one (a Basic challenge, the token as password): scope read shows the
// pages, and an action needs admin.
func TestServeDashboardAuth(t *testing.T) {
	t.Parallel()
	reader, readerLine := mint(t, "viewer", "read")
	tokens := writeFile(t, "tokens", readerLine+"\n")
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--tokens", tokens, "--watch=false")
	base := "http://" + s.addr
	code, _ := get(t, base+"/ui/")
	require.Equal(t, http.StatusUnauthorized, code)

	req, err := http.NewRequest(http.MethodGet, base+"/ui/", nil)
	require.NoError(t, err)
	req.SetBasicAuth("me", reader)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	req, err = http.NewRequest(http.MethodPost, base+"/ui/actions/flush", strings.NewReader(""))
	require.NoError(t, err)
	req.SetBasicAuth("me", reader)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "acting needs scope admin")
}

// TestServeDashboardFollowsReload: after POST /v1/admin/reload with a
// changed policy file, the dashboard shows the policies in force, not the
// ones the server started with.
func TestServeDashboardFollowsReload(t *testing.T) {
	t.Parallel()
	config := writeFile(t, "p.yaml", reloadPolicies)
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--config", config, "--watch=false")
	base := "http://" + s.addr
	code, body := get(t, base+"/ui/policies?fragment=1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<tr data-policy="api">`)

	require.NoError(t, os.WriteFile(config, []byte("policies:\n  fresh:\n    rate: 5\n    period: 1s\n    description: added by the reload\n"), 0o600))
	code, body = call(t, "POST", base+"/v1/admin/reload", "", "")
	require.Equal(t, http.StatusOK, code, body)
	code, body = call(t, "POST", base+"/v1/take", "", `{"policy":"fresh","key":"k"}`)
	require.Equal(t, http.StatusOK, code, body)

	code, body = get(t, base+"/ui/policies?fragment=1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<tr data-policy="fresh">`)
	require.Contains(t, body, "added by the reload")
	require.NotContains(t, body, `<tr data-policy="api">`, "a removed policy is gone from the page")
	code, body = get(t, base+"/ui/?fragment=1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `data-policy="fresh"`)
	require.Contains(t, body, `<dd class="n-allowed">1</dd>`, "the take under the new policy is counted")
	require.NotContains(t, body, `data-policy="api"`)
	require.Equal(t, cli.ExitOK, s.stop(t))
}
