package cli_test

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
	"github.com/sluicerl/sluice/internal/testenv"
)

const examplePolicies = "../../examples/policies.yaml"

type result struct {
	code           int
	stdout, stderr string
}

// run runs the command line with env as the whole environment.
func run(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr testenv.SyncBuffer
	code := cli.Run(t.Context(), args, cli.Options{
		Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] },
	})
	return result{code, stdout.String(), stderr.String()}
}

func TestPoliciesCheckExample(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "policies", "check", examplePolicies)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Empty(t, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 6)
	require.Equal(t, []string{"NAME", "ALGORITHM", "RATE", "BURST", "SHADOW"}, strings.Fields(lines[0]))
	require.Equal(t, []string{"exchange-weight", "gcra", "1200/1m", "100", "false"}, strings.Fields(lines[1]))
	require.Equal(t, []string{"exchange-orders", "fixed_window", "50/10s", "-", "false"}, strings.Fields(lines[2]))
	require.Equal(t, []string{"api-hourly", "sliding_window", "5000/1h", "-", "false"}, strings.Fields(lines[3]))
	require.Equal(t, []string{"crawler-per-host", "gcra", "2/1s", "4", "true"}, strings.Fields(lines[4]))
	require.Equal(t, []string{"shopify-bulk", "concurrency", "5", "permits,", "ttl", "30s", "-", "false"}, strings.Fields(lines[5]))
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

const badPolicies = `policies:
  api:
    rate: -5
    period: 1m
  orders:
    algorithm: fixed_windoww
    limit: 10
    window: 10s
`

func TestPoliciesCheckBad(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "bad.yaml", badPolicies)
	r := run(t, nil, "policies", "check", path)
	require.Equal(t, cli.ExitFailure, r.code)
	require.Empty(t, r.stdout)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	require.Equal(t, []string{
		path + `:3:11: policies.api.rate: want a positive integer, got "-5"`,
		path + `:6:16: policies.orders.algorithm: unknown algorithm "fixed_windoww" (want gcra, fixed_window, sliding_window or concurrency)`,
		"sluice: 2 errors in the policy file",
	}, lines)
}

func TestPoliciesCheckUsage(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "policies", "check", filepath.Join(t.TempDir(), "missing.yaml"))
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "no such file")

	r = run(t, nil, "policies", "check")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "accepts 1 arg")
	require.Contains(t, r.stderr, "sluice policies check --help")

	r = run(t, nil, "policies", "lint", examplePolicies)
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `unknown command "lint"`)
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "version")
	require.Equal(t, cli.ExitOK, r.code)
	require.Regexp(t, `^sluice \S+.* \(go1\.\S+ \w+/\w+\)\n$`, r.stdout)
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		stderr string
	}{
		{"unknown command", nil, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", nil, []string{"serve", "--colour"}, "unknown flag: --colour"},
		{"serve args", nil, []string{"serve", "now"}, `unknown command "now"`},
		{"bad addr flag", nil, []string{"serve", "--addr", "nope"}, `invalid --addr "nope": want host:port`},
		{"bad port flag", nil, []string{"serve", "--addr", "127.0.0.1:http"}, `invalid --addr "127.0.0.1:http": port "http"`},
		{"bad addr env", map[string]string{"SLUICE_ADDR": "127.0.0.1:99999"}, []string{"serve"}, `invalid SLUICE_ADDR "127.0.0.1:99999"`},
		{"bad log level", nil, []string{"serve", "--log-level", "loud"}, `invalid --log-level "loud": want debug, info, warn or error`},
		{"bad log level env", map[string]string{"SLUICE_LOG_LEVEL": "loud"}, []string{"serve"}, `invalid SLUICE_LOG_LEVEL "loud"`},
		{"bad log format", nil, []string{"serve", "--log-format", "xml"}, `invalid --log-format "xml": want text or json`},
		{"bad duration", nil, []string{"serve", "--shutdown-timeout", "soon"}, `"--shutdown-timeout"`},
		{"bad duration env", map[string]string{"SLUICE_SHUTDOWN_TIMEOUT": "soon"}, []string{"serve"}, `invalid SLUICE_SHUTDOWN_TIMEOUT "soon": time: invalid duration`},
		{"zero duration", nil, []string{"serve", "--shutdown-timeout", "0s"}, `invalid --shutdown-timeout 0s: want a positive duration`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, tt.env, tt.args...)
			require.Equal(t, cli.ExitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tt.stderr)
			require.Contains(t, r.stderr, "--help' for usage")
		})
	}
}

func TestServeBadConfig(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "bad.yaml", badPolicies)
	for _, r := range []result{
		run(t, nil, "serve", "--addr", "127.0.0.1:0", "--config", path),
		run(t, map[string]string{"SLUICE_CONFIG": path, "SLUICE_ADDR": "127.0.0.1:0"}, "serve"),
	} {
		require.Equal(t, cli.ExitFailure, r.code)
		require.Contains(t, r.stderr, path+":3:11: policies.api.rate")
		require.NotContains(t, r.stdout, "listening")
	}
}

func TestServeAddrInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	r := run(t, nil, "serve", "--addr", ln.Addr().String(), "--db", "sqlite:"+filepath.Join(t.TempDir(), "r.db"))
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "listen on "+ln.Addr().String())
}

// serving is a serve command running in the background.
type serving struct {
	addr   string
	cancel context.CancelFunc
	done   chan int
	stdout *testenv.SyncBuffer
	stderr *testenv.SyncBuffer
}

func startServe(t *testing.T, env map[string]string, args ...string) *serving {
	t.Helper()
	// Keep the records database out of the package directory.
	env = maps.Clone(env)
	if env == nil {
		env = map[string]string{}
	}
	if env["SLUICE_DB"] == "" {
		env["SLUICE_DB"] = "sqlite:" + filepath.Join(t.TempDir(), "records.db")
	}
	ctx, cancel := context.WithCancel(t.Context())
	s := &serving{cancel: cancel, done: make(chan int, 1), stdout: &testenv.SyncBuffer{}, stderr: &testenv.SyncBuffer{}}
	ready := make(chan net.Addr, 1)
	go func() {
		s.done <- cli.Run(ctx, append([]string{"serve"}, args...), cli.Options{
			Stdout: s.stdout, Stderr: s.stderr,
			Getenv: func(k string) string { return env[k] },
			Ready:  func(a net.Addr) { ready <- a },
		})
	}()
	select {
	case a := <-ready:
		s.addr = a.String()
	case code := <-s.done:
		t.Fatalf("serve exited with %d before listening: %s", code, s.stderr)
	case <-time.After(time.Minute):
		t.Fatal("serve did not start within a minute")
	}
	t.Cleanup(cancel)
	return s
}

// stop cancels serve's context and waits for it to return.
func (s *serving) stop(t *testing.T) int {
	t.Helper()
	s.cancel()
	select {
	case code := <-s.done:
		return code
	case <-time.After(time.Minute):
		t.Fatal("serve did not stop within a minute of cancellation")
		return -1
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestServeDefaults(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--addr", "127.0.0.1:0")
	code, body := get(t, "http://"+s.addr+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"ok"}`, body)

	code, body = get(t, "http://"+s.addr+"/v1/policies")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"policies":[{"name":"default","algorithm":"gcra","rate":100,"periodMs":1000,"burst":100,"shadow":false,
		"description":"built-in default: 100 per second, bursts of 100"}]}`, body)

	resp, err := http.Post("http://"+s.addr+"/v1/take", "application/json", strings.NewReader(`{"policy":"default","key":"k"}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, `"default";q=100;w=1`, resp.Header.Get("RateLimit-Policy"))

	require.Equal(t, cli.ExitOK, s.stop(t), s.stderr.String())
	require.Equal(t, "sluice listening on http://"+s.addr+"\n", s.stdout.String())
	require.Contains(t, s.stderr.String(), "sluice listening")
	require.Contains(t, s.stderr.String(), `config="built-in defaults"`)
	require.Contains(t, s.stderr.String(), "msg=stopped")

	// The listener is closed.
	_, err = net.DialTimeout("tcp", s.addr, time.Second)
	require.Error(t, err)
}

func TestServeEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"SLUICE_ADDR":       "127.0.0.1:0",
		"SLUICE_CONFIG":     examplePolicies,
		"SLUICE_LOG_FORMAT": "json",
	}
	s := startServe(t, env)
	code, body := get(t, "http://"+s.addr+"/v1/policies")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"name":"exchange-weight"`)
	require.Equal(t, cli.ExitOK, s.stop(t))
	require.Contains(t, s.stderr.String(), `"msg":"sluice listening"`)
	require.Contains(t, s.stderr.String(), `"config":"../../examples/policies.yaml"`)
}

func TestServeFlagsWinOverEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"SLUICE_ADDR":      "nope",
		"SLUICE_CONFIG":    filepath.Join(t.TempDir(), "missing.yaml"),
		"SLUICE_LOG_LEVEL": "loud",
	}
	s := startServe(t, env, "--addr", "127.0.0.1:0", "--config", examplePolicies, "--log-level", "warn")
	code, body := get(t, "http://"+s.addr+"/v1/policies")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"name":"api-hourly"`)
	require.Equal(t, cli.ExitOK, s.stop(t))
	require.NotContains(t, s.stderr.String(), "level=INFO", "--log-level warn wins over SLUICE_LOG_LEVEL")
}

func TestStateAndDBFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"unknown state scheme", nil, []string{"serve", "--state", "mongodb://x"}, `invalid --state "mongodb://x": unknown scheme "mongodb"`},
		{"state without scheme", nil, []string{"serve", "--state", "redis"}, `invalid --state "redis": want memory:`},
		{"state env", map[string]string{"SLUICE_STATE": "sqlite:"}, []string{"serve"}, `invalid SLUICE_STATE "sqlite:": want sqlite:PATH`},
		{"bad redis url", nil, []string{"serve", "--state", "redis://h:p:q/x"}, `invalid --state "redis://h:p:q/x"`},
		{"memory db", nil, []string{"serve", "--db", "memory:"}, `invalid --db "memory:": records need sqlite:PATH or postgres://`},
		{"bad store timeout", nil, []string{"serve", "--store-timeout", "0s"}, `invalid --store-timeout 0s: want a positive duration`},
		{"negative cleanup interval", nil, []string{"serve", "--cleanup-interval", "-1s"}, `invalid --cleanup-interval -1s: want a duration >= 0`},
		{"migrate bad db", nil, []string{"migrate", "status", "--db", "redis://localhost"}, `records need sqlite:PATH or postgres://`},
		{"migrate down bad steps", nil, []string{"migrate", "down", "zero", "--db", "sqlite:x.db"}, `invalid STEPS "zero"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := cli.Run(t.Context(), tc.args, cli.Options{Stdout: &stdout, Stderr: &stderr,
				Getenv: func(k string) string { return tc.env[k] }})
			require.Equal(t, cli.ExitUsage, code, "stderr: %s", stderr.String())
			require.Contains(t, stderr.String(), tc.want)
		})
	}
}

func TestServeOnSQLiteState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "p.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("policies:\n  default:\n    rate: 100\n    period: 1h\n"), 0o600))
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--config", cfg, "--state", "sqlite:"+filepath.Join(dir, "state.db"))
	for i := range 101 {
		resp, err := http.Post("http://"+s.addr+"/v1/take", "application/json", strings.NewReader(`{"policy":"default","key":"k"}`))
		require.NoError(t, err)
		_ = resp.Body.Close()
		if i < 100 {
			require.Equal(t, http.StatusOK, resp.StatusCode, "take %d", i)
		} else {
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the 101st take in a burst of 100")
		}
	}
	require.Equal(t, 0, s.stop(t))

	// The state survives a restart: the key is still spent.
	s = startServe(t, nil, "--addr", "127.0.0.1:0", "--config", cfg, "--state", "sqlite:"+filepath.Join(dir, "state.db"))
	resp, err := http.Post("http://"+s.addr+"/v1/take", "application/json", strings.NewReader(`{"policy":"default","key":"k","cost":50}`))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, 0, s.stop(t))
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	run := func(args ...string) string {
		var stdout, stderr bytes.Buffer
		code := cli.Run(t.Context(), append(args, "--db", db), cli.Options{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
		require.Equal(t, 0, code, "sluice %v: %s", args, stderr.String())
		return stdout.String()
	}
	require.Contains(t, run("migrate", "up"), "up 0001")
	require.Contains(t, run("migrate", "up"), "nothing to do")
	require.Contains(t, run("migrate", "status"), "applied")
	require.Contains(t, run("migrate", "down", "all"), "down 0001")
	st := run("migrate", "status")
	require.NotContains(t, st, "applied")
	require.Contains(t, st, "pending")
}
