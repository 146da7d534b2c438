package cli_test

import (
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
)

func hourlyYAML(rev string, capacity string) string {
	return `schema: 1
name: hourly
revision: "` + rev + `"
key: lower
limits:
  - name: hour
    scope: token
    algorithm: gcra
    capacity: ` + capacity + `
    rate: 1
    per: 1h
`
}

// waitRevision polls /v1/providers/hourly until it shows rev (a minute at
// most).
func waitRevision(t *testing.T, base, rev string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := call(t, "GET", base+"/v1/providers/hourly", "", "")
		if code == http.StatusOK && strings.Contains(body, `"revision":"`+rev+`"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %q never appeared; last: %d %s", rev, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeProfiles: serve --profiles adds a profile to the built-in ones,
// lists it at /v1/providers and applies it to outbound calls naming it;
// the file reloads with the policies (admin endpoint, file change,
// SIGHUP), and a malformed file is refused whole, with its file, line and
// field named, while the server keeps the profiles it had.
func TestServeProfiles(t *testing.T) {
	t.Parallel()
	prof := writeFile(t, "hourly.yaml", hourlyYAML("1", "2"))
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--profiles", prof)
	base := "http://" + s.addr

	code, body := call(t, "GET", base+"/v1/providers", "", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"name":"hourly"`)
	require.Contains(t, body, `"name":"shopify-graphql"`, "the built-in ones stay")
	code, body = call(t, "GET", base+"/v1/providers/hourly", "", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"origin":"`+prof+`"`)

	// Applied: two calls an hour for the token, then 429.
	for range 2 {
		code, body = call(t, "POST", base+"/v1/outbound/acquire", "", `{"key":"T1","profile":"hourly","waitMs":5000}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `"key":"t1"`)
	}
	code, body = call(t, "POST", base+"/v1/outbound/acquire", "", `{"key":"t1","profile":"hourly","waitMs":5000}`)
	require.Equal(t, http.StatusTooManyRequests, code, body)
	code, body = call(t, "POST", base+"/v1/outbound/acquire", "", `{"key":"t1","profile":"nope"}`)
	require.Equal(t, http.StatusUnprocessableEntity, code, body)
	require.Contains(t, body, `"pointer":"#/profile"`)

	// Malformed: refused whole, file:line: field named; the old set stays.
	require.NoError(t, os.WriteFile(prof, []byte(hourlyYAML("2", "-5")), 0o600))
	code, body = call(t, "POST", base+"/v1/admin/reload", "", "")
	require.Equal(t, http.StatusUnprocessableEntity, code, body)
	require.Contains(t, body, prof+":9:")
	require.Contains(t, body, "limits[0].capacity")
	waitRevision(t, base, "1")

	// Fixed on disk: the file change reloads it.
	require.NoError(t, os.WriteFile(prof, []byte(hourlyYAML("2", "3")), 0o600))
	waitRevision(t, base, "2")
	// SIGHUP reloads it too (other serves of the package reload harmlessly).
	require.NoError(t, os.WriteFile(prof, []byte(hourlyYAML("3", "3")), 0o600))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	waitRevision(t, base, "3")
	require.Equal(t, cli.ExitOK, s.stop(t))

	// A malformed file at start is an error naming it.
	bad := writeFile(t, "bad.yaml", hourlyYAML("1", "x"))
	r := run(t, nil, "serve", "--addr", "127.0.0.1:0", "--profiles", bad)
	require.NotEqual(t, cli.ExitOK, r.code)
	require.Contains(t, r.stderr, bad+":9:")
}
