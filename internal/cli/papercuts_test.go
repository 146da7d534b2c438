package cli_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
	"github.com/sluicerl/sluice/sim"
)

// The files under examples/ are what a new user tries first: each one
// loads with the command it is for.
func TestExamplesLoad(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../examples/scenario.yaml")
	require.NoError(t, err)
	sc, err := sim.ParseScenario(b)
	require.NoError(t, err, "examples/scenario.yaml is a valid --scenario file")
	require.NotEmpty(t, sc.Provider.Changes)

	// The scenario as the command runs it (shortened: flags override the file).
	r := run(t, nil, "sim", "--scenario", "../../examples/scenario.yaml", "--duration", "1s", "--workers", "2", "--processes", "1")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, sc.Name+", sluice:")

	db := "sqlite:" + filepath.Join(t.TempDir(), "slots.db")
	r = run(t, nil, "slots", "config", "default", "--max", "4", "--window", "PT1S", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	r = run(t, nil, "slots", "load", "../../examples/events.csv", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "20 events in")
	require.Contains(t, r.stdout, "20 new, 0 existing, 0 exhausted")
}

// Commands that only read refuse a database that is not there, and do not
// create it.
func TestReadOnlyCommandsDoNotCreateDatabases(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "typo.db")
	for _, args := range [][]string{
		{"slots", "verify", "--db", "sqlite:" + path},
		{"migrate", "status", "--db", "sqlite:" + path},
		{"migrate", "down", "--db", "sqlite:" + path},
	} {
		r := run(t, nil, args...)
		require.Equal(t, cli.ExitFailure, r.code, "%v: %s", args, r.stdout)
		require.Contains(t, r.stderr, "--db: no database at "+path, args)
		require.NotContains(t, r.stdout, "ok", args)
		_, err := os.Stat(path)
		require.ErrorIs(t, err, os.ErrNotExist, "%v created the database", args)
	}
	r := run(t, map[string]string{"SLUICE_DB": "sqlite:" + path}, "slots", "verify")
	require.Contains(t, r.stderr, "SLUICE_DB: no database at "+path)
}

func TestRequiredFlagsAreNamed(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "slots.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"slots", "assign", "e1", "--db", db}, "sluice: --at is required"},
		{[]string{"slots", "config", "c", "--db", db}, "sluice: --max and --window are required"},
		{[]string{"slots", "config", "c", "--max", "5", "--db", db}, "sluice: --window is required"},
		{[]string{"slots", "config", "c", "--window", "PT4S", "--db", db}, "sluice: --max is required"},
	} {
		r := run(t, nil, tc.args...)
		require.Equal(t, cli.ExitUsage, r.code, tc.args)
		require.Contains(t, r.stderr, tc.want+"\n", tc.args)
	}
}

// --db takes the records database, SQLite or PostgreSQL; an error names
// only those, not the --state schemes.
func TestDBSchemesNamed(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"migrate", "status", "--db", "mysql://x"},
		{"migrate", "up", "--db", "mysql://x"},
		{"slots", "verify", "--db", "mysql://x"},
		{"serve", "--db", "mysql://x"},
	} {
		r := run(t, nil, args...)
		require.Equal(t, cli.ExitUsage, r.code, args)
		require.Contains(t, r.stderr, `invalid --db "mysql://x": records need sqlite:PATH or postgres://...`, args)
		require.NotContains(t, r.stderr, "redis", args)
		require.NotContains(t, r.stderr, "memory", args)
	}
}

func TestEmptyPolicyFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "empty.yaml", "policies: {}\n")
	r := run(t, nil, "policies", "check", path)
	require.Equal(t, cli.ExitFailure, r.code, r.stdout)
	require.Contains(t, r.stderr, "defines no policies")

	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--config", path)
	require.Equal(t, cli.ExitOK, s.stop(t))
	require.Contains(t, s.stderr.String(), "level=WARN")
	require.Contains(t, s.stderr.String(), "defines no policies")
}

func TestServeMaxBody(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--max-body", "1KiB"}, {"--max-body", "1024"}} {
		s := startServe(t, nil, append([]string{"--addr", "127.0.0.1:0"}, args...)...)
		body := `{"policy":"default","key":"` + strings.Repeat("k", 2000) + `"}`
		resp, err := http.Post("http://"+s.addr+"/v1/take", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, string(b))
		require.Contains(t, string(b), "larger than 1024 bytes (1 KiB)")
		require.Equal(t, cli.ExitOK, s.stop(t))
	}
	// The environment sets it too.
	s := startServe(t, map[string]string{"SLUICE_MAX_BODY": "64B"}, "--addr", "127.0.0.1:0")
	resp, err := http.Post("http://"+s.addr+"/v1/take", "application/json", strings.NewReader(`{"policy":"default","key":"`+strings.Repeat("k", 64)+`"}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Equal(t, cli.ExitOK, s.stop(t))

	for _, bad := range []string{"0", "-5", "4XB", "lots", "2TiB"} {
		r := run(t, nil, "serve", "--max-body", bad)
		require.Equal(t, cli.ExitUsage, r.code, bad)
		require.Contains(t, r.stderr, "want a positive size in bytes", bad)
	}
}

// JSON logs write durations as Go durations, not nanoseconds.
func TestServeJSONLogDurations(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--log-format", "json", "--shutdown-timeout", "1500ms")
	require.Equal(t, cli.ExitOK, s.stop(t))
	require.Contains(t, s.stderr.String(), `"msg":"shutting down","timeout":"1.5s"`)
}

func TestSimOutCheckedBeforeTheRun(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing", "dir", "run.svg")
	r := run(t, nil, "sim", "--duration", "30s", "--out", missing)
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "no directory "+filepath.Dir(missing))
	require.Empty(t, r.stdout, "nothing ran")

	file := writeFile(t, "plain", "")
	r = run(t, nil, "sim", "--duration", "30s", "--out", filepath.Join(file, "run.svg"))
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "is not a directory")
	require.Empty(t, r.stdout, "nothing ran")
}

// With --target the summary and the report name the target, not the
// simulated dialect that did not run; the report's durations are readable.
func TestSimTargetNamed(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	t.Cleanup(srv.Close)
	out := filepath.Join(t.TempDir(), "run.svg")
	r := run(t, nil, "sim", "--target", srv.URL+"/x", "--duration", "1s", "--workers", "1", "--processes", "1", "--out", out)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "\n"+srv.URL+"/x, sluice: goodput/limit")
	require.NotContains(t, r.stdout, "retry-after-seconds")
	b, err := os.ReadFile(strings.TrimSuffix(out, ".svg") + ".json")
	require.NoError(t, err)
	var rep struct {
		Scenario map[string]any `json:"scenario"`
	}
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, "1s", rep.Scenario["duration"])
}
