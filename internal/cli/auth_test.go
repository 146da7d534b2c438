package cli_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
)

// call sends a request with an optional bearer token.
func call(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// mint runs 'sluice token create' and returns the token and its line.
func mint(t *testing.T, name, scopes string) (string, string) {
	t.Helper()
	r := run(t, nil, "token", "create", "--name", name, "--scopes", scopes)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2)
	require.True(t, strings.HasPrefix(lines[0], "sluice_"))
	require.True(t, strings.HasPrefix(lines[1], name+" "))
	require.NotContains(t, lines[1], lines[0], "the line holds the hash, never the token")
	return lines[0], lines[1]
}

func TestTokenCreateFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"token", "create", "--scopes", "take"}, "--name is required"},
		{[]string{"token", "create", "--name", "a b", "--scopes", "take"}, `invalid --name: token name "a b"`},
		{[]string{"token", "create", "--name", "a", "--scopes", "fly"}, `invalid --scopes "fly": unknown scope "fly"`},
	} {
		r := run(t, nil, tc.args...)
		require.Equal(t, cli.ExitUsage, r.code, tc.args)
		require.Contains(t, r.stderr, tc.err)
	}
}

func TestServeRefusesOpenNonLoopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{":0", "0.0.0.0:0", "example.com:0"} {
		r := run(t, nil, "serve", "--addr", addr)
		require.Equal(t, cli.ExitUsage, r.code, addr)
		require.Contains(t, r.stderr, "refusing to serve "+addr+" without tokens")
		require.Contains(t, r.stderr, "--insecure-no-auth")
	}
}

const reloadPolicies = `policies:
  api:
    rate: 10
    period: 1s
`

func TestServeAuthAndReload(t *testing.T) {
	t.Parallel()
	taker, takerLine := mint(t, "taker", "take")
	admin, adminLine := mint(t, "ops", "*")
	tokens := writeFile(t, "tokens", "# name scopes hash\n"+takerLine+"\n"+adminLine+"\n")
	config := writeFile(t, "p.yaml", reloadPolicies)
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--config", config, "--tokens", tokens, "--watch=false")
	base := "http://" + s.addr

	code, _ := call(t, "GET", base+"/healthz", "", "")
	require.Equal(t, http.StatusOK, code, "/healthz is open")
	code, _ = call(t, "GET", base+"/metrics", "", "")
	require.Equal(t, http.StatusOK, code, "/metrics is open")
	code, body := call(t, "POST", base+"/v1/take", "", `{"policy":"api","key":"k"}`)
	require.Equal(t, http.StatusUnauthorized, code, body)
	code, body = call(t, "POST", base+"/v1/take", taker, `{"policy":"api","key":"k"}`)
	require.Equal(t, http.StatusOK, code, body)
	code, _ = call(t, "POST", base+"/v1/admin/reload", taker, "")
	require.Equal(t, http.StatusForbidden, code)

	// A bad config is refused whole; the old one stays.
	require.NoError(t, os.WriteFile(config, []byte(reloadPolicies+"  more:\n    rate: -1\n    period: 1s\n"), 0o600))
	code, body = call(t, "POST", base+"/v1/admin/reload", admin, "")
	require.Equal(t, http.StatusUnprocessableEntity, code, body)
	require.Contains(t, body, "p.yaml:6:11: policies.more.rate: want a positive integer")
	code, _ = call(t, "POST", base+"/v1/take", taker, `{"policy":"api","key":"k"}`)
	require.Equal(t, http.StatusOK, code)

	// A good one is swapped in: "api" removed (404), "fresh" added; the
	// auth section of the policy file adds a token.
	fresh, freshLine := mint(t, "fresh", "take")
	f := strings.Fields(freshLine)
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`policies:
  fresh:
    rate: 5
    period: 1s
auth:
  tokens:
    - {name: %s, scopes: %q, sha256: %s}
`, f[0], f[1], strings.TrimPrefix(f[2], "sha256:"))), 0o600))
	code, body = call(t, "POST", base+"/v1/admin/reload", admin, "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"name":"fresh"`)
	code, body = call(t, "POST", base+"/v1/take", fresh, `{"policy":"fresh","key":"k"}`)
	require.Equal(t, http.StatusOK, code, body)
	code, body = call(t, "POST", base+"/v1/take", taker, `{"policy":"api","key":"k"}`)
	require.Equal(t, http.StatusNotFound, code, body)
	require.Contains(t, body, "urn:sluice:problem:policy-removed")

	// An empty token file is a set with no token: every token is revoked,
	// and auth stays on.
	require.NoError(t, os.WriteFile(tokens, nil, 0o600))
	require.NoError(t, os.WriteFile(config, []byte(reloadPolicies), 0o600))
	code, body = call(t, "POST", base+"/v1/admin/reload", admin, "")
	require.Equal(t, http.StatusOK, code, "an empty token file is a set with no token, not no auth: %s", body)
	code, _ = call(t, "POST", base+"/v1/take", taker, `{"policy":"api","key":"k"}`)
	require.Equal(t, http.StatusUnauthorized, code, "every token revoked")
	require.Equal(t, cli.ExitOK, s.stop(t))
}

// waitPolicy polls /v1/policies until it lists name (bounded: a minute).
func waitPolicy(t *testing.T, base, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := call(t, "GET", base+"/v1/policies", "", "")
		require.Equal(t, http.StatusOK, code)
		if strings.Contains(body, `"name":"`+name+`"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy %q never appeared; last: %s", name, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServeReloadOnFileChange(t *testing.T) {
	t.Parallel()
	config := writeFile(t, "p.yaml", reloadPolicies)
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--config", config)
	base := "http://" + s.addr
	waitPolicy(t, base, "api")
	// Replace the file as editors do: write a temporary, rename it over.
	tmp := config + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte("policies:\n  changed:\n    rate: 1\n    period: 1s\n"), 0o600))
	require.NoError(t, os.Rename(tmp, config))
	waitPolicy(t, base, "changed")
	// A broken edit is refused and logged; the config stays.
	require.NoError(t, os.WriteFile(config, []byte("policies: [\n"), 0o600))
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(s.stderr.String(), "reload refused") {
		require.False(t, time.Now().After(deadline), "no refusal logged: %s", s.stderr)
		time.Sleep(20 * time.Millisecond)
	}
	waitPolicy(t, base, "changed")
	require.Equal(t, cli.ExitOK, s.stop(t))
}

func TestServeReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	config := writeFile(t, "p.yaml", reloadPolicies)
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--config", config, "--watch=false")
	base := "http://" + s.addr
	require.NoError(t, os.WriteFile(config, []byte("policies:\n  hup:\n    rate: 1\n    period: 1s\n"), 0o600))
	// serve has SIGHUP registered while it runs, so this does not end the
	// test process; other serves of this package reload too, harmlessly.
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	waitPolicy(t, base, "hup")
	require.Equal(t, cli.ExitOK, s.stop(t))
}

// TestServeShutdownDrains: a request in flight when shutdown starts
// completes with its answer, and serve exits 0.
func TestServeShutdownDrains(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--addr", "127.0.0.1:0")
	conn, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(time.Minute)))
	body := `{"policy":"default","key":"k"}`
	// Headers asking 100-continue, and no body yet: the server answers
	// "100 Continue" when the handler first reads the body, so once it is
	// read the handler is running, blocked on the body. (A request whose
	// headers net/http reads only after Shutdown began is dropped, so
	// the test must not cancel before.)
	_, err = fmt.Fprintf(conn, "POST /v1/take HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(body))
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 100 Continue\r\n", line)
	line, err = br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "\r\n", line)

	s.cancel() // shutdown starts
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(s.stderr.String(), "shutting down") {
		require.False(t, time.Now().After(deadline), "no shutdown logged")
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case code := <-s.done:
		t.Fatalf("serve exited (%d) with a request in flight: %s", code, s.stderr)
	default:
	}
	_, err = io.WriteString(conn, body)
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(b), `"allowed":true`)
	select {
	case code := <-s.done:
		require.Equal(t, cli.ExitOK, code)
	case <-time.After(time.Minute):
		t.Fatal("serve did not exit after the request finished")
	}
}

func TestPoliciesCheckAuthSection(t *testing.T) {
	t.Parallel()
	bad := writeFile(t, "p.yaml", reloadPolicies+"auth:\n  tokens:\n    - {name: a, scopes: fly, sha256: x}\n")
	r := run(t, nil, "policies", "check", bad)
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, `p.yaml:7:25: auth.tokens[0].scopes: unknown scope "fly"`)
}
