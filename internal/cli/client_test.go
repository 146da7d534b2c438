package cli_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// clientServer is an httptest server over server.Handler with an outbound
// client, behind a check that every request carries the bearer token
// "s3cret" (401 otherwise), recording the requests' paths.
func clientServer(t *testing.T) (string, func() []string) {
	t.Helper()
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policies: []limiter.Policy{
		{Name: "api", Rate: 10, Period: time.Second, Burst: 10},
		{Name: "strict", Rate: 1, Period: time.Hour, Burst: 1},
		{Name: "bulk", Algorithm: store.Concurrency, Permits: 2, TTL: time.Minute},
	}})
	require.NoError(t, err)
	oc, err := outbound.New(outbound.Config{})
	require.NoError(t, err)
	srv, err := server.New(server.Config{Limiter: lim, Outbound: oc})
	require.NoError(t, err)
	var mu sync.Mutex
	var paths []string
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"type":"about:blank","title":"Unauthorized","status":401,"detail":"a bearer token is required"}`))
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), paths...)
	}
}

func TestClientTake(t *testing.T) {
	t.Parallel()
	url, _ := clientServer(t)
	env := map[string]string{"SLUICE_SERVER": url, "SLUICE_TOKEN": "s3cret"}
	r := run(t, env, "take", "api", "user-1", "--cost", "3")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	var d struct {
		Allowed   bool
		Remaining int64
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
	require.True(t, d.Allowed)
	require.EqualValues(t, 7, d.Remaining)

	r = run(t, env, "take", "strict", "user-1", "--output", "table")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^allowed\s+true$`, r.stdout)
	r = run(t, env, "take", "strict", "user-1")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stdout, `"allowed":false`)
	require.Contains(t, r.stderr, "take: denied; retry after")

	r = run(t, env, "take", "nope", "user-1")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "(422)")
	require.Contains(t, r.stderr, "nope")

	r = run(t, map[string]string{"SLUICE_SERVER": url}, "take", "api", "user-1")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "unauthorized (401)")
	r = run(t, map[string]string{"SLUICE_SERVER": url}, "take", "api", "user-1", "--token", "s3cret")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)

	for _, bad := range [][]string{
		{"take", "api"},
		{"take", "api", "k", "--output", "yaml"},
		{"take", "api", "k", "--server", "ftp://x"},
		{"take", "api", "k", "--cost", "-1"},
		{"take", "api", "bad\x01key"},
	} {
		r = run(t, env, bad...)
		require.Equal(t, cli.ExitUsage, r.code, "%q: %s", bad, r.stderr)
	}
}

func TestClientAcquireReport(t *testing.T) {
	t.Parallel()
	url, paths := clientServer(t)
	env := map[string]string{"SLUICE_SERVER": url, "SLUICE_TOKEN": "s3cret"}
	r := run(t, env, "acquire", "api.example.com", "--wait", "2s", "--idempotent")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	var p struct{ Permit string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &p), r.stdout)
	require.NotEmpty(t, p.Permit)

	r = run(t, env, "report", p.Permit, "--status", "429", "--header", "Retry-After: 30", "--header", "x-ratelimit-remaining: 0",
		"--latency", "120ms", "--output", "table")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^throttled\s+true$`, r.stdout)
	require.Regexp(t, `(?m)^pausedForMs\s+30000$`, r.stdout)

	r = run(t, env, "acquire", "api.example.com")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "(429)")
	require.Contains(t, r.stderr, "retry after")

	r = run(t, env, "report", p.Permit, "--status", "200")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "(409)")

	for _, bad := range [][]string{
		{"report", p.Permit},
		{"report", p.Permit, "--status", "200", "--error", "timeout"},
		{"report", p.Permit, "--status", "200", "--header", "no colon"},
		{"acquire", "k", "--wait", "1m"},
	} {
		r = run(t, env, bad...)
		require.Equal(t, cli.ExitUsage, r.code, "%q: %s", bad, r.stderr)
	}
	require.Contains(t, strings.Join(paths(), "\n"), "POST /v1/outbound/report")
}

func TestClientLeases(t *testing.T) {
	t.Parallel()
	url, _ := clientServer(t)
	env := map[string]string{"SLUICE_SERVER": url, "SLUICE_TOKEN": "s3cret"}
	r := run(t, env, "lease", "acquire", "bulk", "shop-1", "--holder", "w1")
	require.Equal(t, cli.ExitOK, r.code, "lease sends the token too: %s", r.stderr)
	r = run(t, env, "lease", "acquire", "bulk", "shop-1", "--holder", "w2")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	r = run(t, env, "leases", "bulk", "shop-1", "--output", "table")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	require.Regexp(t, `^EXPIRESAT\s+HOLDERHASH\s+KEY\s+PERMITS\s+POLICY\s+TOKEN\s+TTLMS$`, lines[0])
	require.Contains(t, lines[1], "shop-1")
	r = run(t, env, "leases", "bulk", "shop-1")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"leases":[`)
	r = run(t, env, "leases", "nope", "shop-1")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "(422)")
}

// slots assign --server goes through the HTTP API, with the token; without
// it, the records database as before.
func TestClientSlotsAssign(t *testing.T) {
	t.Parallel()
	st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "slots.db"), sqlitestore.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	sch, err := slot.New(slot.Config{Store: st})
	require.NoError(t, err)
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{})})
	require.NoError(t, err)
	srv, err := server.New(server.Config{Limiter: lim, Slots: sch})
	require.NoError(t, err)
	var auth []string
	var mu sync.Mutex
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		srv.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	_, err = sch.PutConfig(t.Context(), store.SlotConfig{Name: "default", MaxPerWindow: 10, WindowSize: 4 * time.Second})
	require.NoError(t, err)
	at := time.Now().UTC().Add(time.Hour).Format(time.RFC3339)
	env := map[string]string{"SLUICE_TOKEN": "tok"}
	r := run(t, env, "slots", "assign", "e1", "--at", at, "--server", ts.URL, "--output", "table")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^status\s+NEW$`, r.stdout)
	r = run(t, env, "slots", "assign", "e1", "--at", at, "--server", ts.URL)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"status":"EXISTING"`)
	r = run(t, env, "slots", "assign", "e2", "--at", at, "--config", "nope", "--server", ts.URL)
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "(422)")
	mu.Lock()
	require.Equal(t, []string{"Bearer tok", "Bearer tok", "Bearer tok"}, auth)
	mu.Unlock()

	// Without --server: the records database, as before.
	db := "sqlite:" + filepath.Join(t.TempDir(), "local.db")
	r = run(t, nil, "slots", "config", "default", "--max", "5", "--window", "PT4S", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	r = run(t, nil, "slots", "assign", "e1", "--at", at, "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"status":"NEW"`)
}
