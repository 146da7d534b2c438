package cli_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
