package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/sim"
)

func TestSimRunWritesChartAndSummary(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "run.svg")
	r := run(t, nil, "sim", "--dialect", "bare-429", "--limit", "20", "--change", "1s=10",
		"--duration", "2s", "--workers", "4", "--out", out)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Equal(t, []string{"t", "limit", "offered", "admitted", "goodput", "throttles", "bans", "retries", "rate"}, strings.Fields(lines[0]))
	require.Equal(t, []string{"0", "20"}, strings.Fields(lines[1])[:2])
	require.Equal(t, []string{"1", "10"}, strings.Fields(lines[2])[:2])
	require.Contains(t, r.stdout, "bare-429, sluice: goodput/limit")
	svg, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(svg), "<svg")
	b, err := os.ReadFile(strings.TrimSuffix(out, ".svg") + ".json")
	require.NoError(t, err)
	var sum struct {
		Client  string
		Summary sim.Summary
		Seconds []sim.Second
	}
	require.NoError(t, json.Unmarshal(b, &sum))
	require.Equal(t, "sluice", sum.Client)
	require.Len(t, sum.Seconds, 2)
	require.Positive(t, sum.Summary.Offered)
}

func TestSimScenarioFilePNG(t *testing.T) {
	t.Parallel()
	sc := writeFile(t, "sc.yaml", `name: shop
provider:
  dialect: cost-bucket
  limit: 10
  latency: 5ms
  changes:
    - {at: 1s, limit: 5}
workers: 2
processes: 1
duration: 2s
`)
	out := filepath.Join(t.TempDir(), "run.png")
	r := run(t, nil, "sim", "--scenario", sc, "--client", "autothrottle", "--out", out)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "shop, autothrottle:")
	png, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "\x89PNG", string(png[:4]))
}

func TestSimTarget(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	r := run(t, nil, "sim", "--target", srv.URL+"/x", "--duration", "2s", "--workers", "2", "--processes", "1")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Positive(t, hits.Load())
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Equal(t, []string{"0", "-"}, strings.Fields(lines[1])[:2], "no --limit: the limit is unknown")
	require.Contains(t, r.stdout, "goodput/limit -")
}

func TestSimReport(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "report.json")
	r := run(t, nil, "sim", "--report", "--duration", "2s", "--out", out)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	// Header, rule, 8 dialects x 6 clients, "wrote".
	require.Len(t, lines, 2+8*6+1)
	require.Contains(t, r.stdout, "| weight-window | fixed-2x |")
	var rows []sim.Row
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rows))
	require.Len(t, rows, 48)
}

func TestSimUsageErrors(t *testing.T) {
	t.Parallel()
	bad := writeFile(t, "bad.yaml", "provider:\n  dialect: bare-429\n  limt: 5\n")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--dialect", "nope"}, `unknown dialect "nope"`},
		{[]string{"--change", "soon"}, `--change "soon": want AT=LIMIT`},
		{[]string{"--limit", "-3"}, "--limit must be a positive number"},
		{[]string{"--out", "x.gif"}, "want FILE.png or FILE.svg"},
		{[]string{"--report", "--out", "x.svg"}, "--out with --report writes JSON"},
		{[]string{"--report", "--target", "http://x.test/"}, "cannot be combined"},
		{[]string{"--client", "magic"}, `--client "magic"`},
		{[]string{"--workers", "1", "--processes", "2"}, "need 0 < processes <= workers"},
		{[]string{"--duration", "10ms"}, "duration must be at least 1s"},
		{[]string{"--workers", "0"}, "--workers must be positive, got 0"},
		{[]string{"--processes", "-1"}, "--processes must be positive, got -1"},
		{[]string{"--duration", "0s"}, "--duration must be positive"},
		{[]string{"--latency", "-1ms"}, "latency must be >= 0"},
		{[]string{"--change", "5s=-2"}, "changes[0]: limit must be positive"},
		{[]string{"--target", "ftp://x.test/"}, "want an http or https URL"},
		{[]string{"--scenario", bad}, "field limt not found"},
	} {
		r := run(t, nil, append([]string{"sim"}, tt.args...)...)
		require.NotEqual(t, cli.ExitOK, r.code, "%v", tt.args)
		require.Contains(t, r.stderr, tt.want, "%v", tt.args)
	}
}

// --state puts the sluice clients' shared state in Redis: with Redis
// unreachable nothing goes out, with Redis it runs.
func TestSimStateRedis(t *testing.T) {
	t.Parallel()
	raw := testenv.RedisURL()
	c := redis.NewClient(mustRedisOptions(t, raw))
	defer c.Close()
	if err := c.Ping(t.Context()).Err(); err != nil {
		testenv.Unreachable(t, "Redis at "+raw, err)
	}
	out := filepath.Join(t.TempDir(), "run.svg")
	r := run(t, nil, "sim", "--state", raw, "--dialect", "503", "--duration", "2s", "--workers", "2", "--out", out)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	var sum struct{ Summary sim.Summary }
	b, err := os.ReadFile(strings.TrimSuffix(out, ".svg") + ".json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &sum))
	require.Positive(t, sum.Summary.Offered)

	r = run(t, nil, "sim", "--state", "redis://127.0.0.1:1/0", "--dialect", "503", "--duration", "1s", "--workers", "2", "--out", out)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	b, err = os.ReadFile(strings.TrimSuffix(out, ".svg") + ".json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &sum))
	require.Zero(t, sum.Summary.Offered, "a store that cannot answer lets nothing through (fail closed)")

	r = run(t, nil, "sim", "--state", "nope:x")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `invalid --state "nope:x"`)
}

func mustRedisOptions(t *testing.T, raw string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(raw)
	require.NoError(t, err)
	return o
}

// Two sluice sim runs (each with its own clients, as two processes would
// be) drive one simulator served over HTTP and keep their state in Redis
// under one shared prefix.
func TestSimServeAndTargetsShareRedis(t *testing.T) {
	t.Parallel()
	raw := testenv.RedisURL()
	rc := redis.NewClient(mustRedisOptions(t, raw))
	defer rc.Close()
	if err := rc.Ping(t.Context()).Err(); err != nil {
		testenv.Unreachable(t, "Redis at "+raw, err)
	}
	addrc := make(chan net.Addr, 1)
	var serveOut syncBuffer
	served := make(chan int, 1)
	go func() {
		served <- cli.Run(t.Context(), []string{"sim", "--serve", "127.0.0.1:0", "--dialect", "ban", "--limit", "20", "--duration", "3s"},
			cli.Options{Stdout: &serveOut, Stderr: &serveOut, Getenv: func(string) string { return "" }, Ready: func(a net.Addr) { addrc <- a }})
	}()
	addr := <-addrc
	prefix := fmt.Sprintf("sluice-sim-test-%d:", time.Now().UnixNano())
	// Watch Redis while they run: their state lives under the prefix.
	seen := make(chan bool, 1)
	watchCtx, stopWatch := context.WithCancel(t.Context())
	go func() {
		for watchCtx.Err() == nil {
			if keys, _ := rc.Keys(watchCtx, "*"+prefix+"*").Result(); len(keys) > 0 {
				seen <- true
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		seen <- false
	}()
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Go(func() {
			r := run(t, nil, "sim", "--target", "http://"+addr.String()+"/", "--processes", "1", "--workers", "4",
				"--duration", "2s", "--state", raw, "--state-prefix", prefix)
			codes[i] = r.code
		})
	}
	wg.Wait()
	require.Equal(t, []int{cli.ExitOK, cli.ExitOK}, codes)
	require.Equal(t, cli.ExitOK, <-served, serveOut.String())
	require.Contains(t, serveOut.String(), "requests ")
	stopWatch()
	require.True(t, <-seen, "nothing under the shared prefix in Redis")
	keys, err := rc.Keys(t.Context(), "*"+prefix+"*").Result()
	require.NoError(t, err)
	if len(keys) > 0 {
		require.NoError(t, rc.Del(context.WithoutCancel(t.Context()), keys...).Err())
	}
}
