package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// --burst, --jitter, --fixed-window and --retry-after-millis reach the
// simulated provider: the run's JSON names the scenario it ran.
func TestSimProviderShapeFlags(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "run.svg")
	r := run(t, nil, "sim", "--dialect", "ban", "--fixed-window", "--burst", "2s", "--jitter", "4ms", "--retry-after-millis", "--limit", "20",
		"--duration", "1s", "--workers", "2", "--processes", "1", "--out", out)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	b, err := os.ReadFile(strings.TrimSuffix(out, ".svg") + ".json")
	require.NoError(t, err)
	var sum struct {
		Scenario struct {
			Provider struct {
				FixedWindow      bool   `json:"fixed_window"`
				RetryAfterMillis bool   `json:"retry_after_millis"`
				Burst            string `json:"burst"`
				Jitter           string `json:"jitter"`
			} `json:"provider"`
		} `json:"scenario"`
	}
	require.NoError(t, json.Unmarshal(b, &sum))
	require.True(t, sum.Scenario.Provider.FixedWindow, string(b))
	require.True(t, sum.Scenario.Provider.RetryAfterMillis, string(b))
	require.Equal(t, "2s", sum.Scenario.Provider.Burst, string(b))
	require.Equal(t, "4ms", sum.Scenario.Provider.Jitter, string(b))
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
	// Header, rule, every dialect x 6 clients, "wrote".
	n := len(sim.Dialects())
	require.Len(t, lines, 2+n*6+1)
	require.Contains(t, r.stdout, "| weight-window | fixed-2x |")
	var rows []sim.Row
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rows))
	require.Len(t, rows, n*6)
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
		{[]string{"--jitter", "-1ms"}, "jitter must be >= 0"},
		{[]string{"--burst", "-1s"}, "burst must be >= 0"},
		{[]string{"--dialect", "ietf", "--fixed-window"}, "fixed_window applies to retry-after-seconds"},
		{[]string{"--dialect", "bare-429", "--retry-after-millis"}, "retry_after_millis applies to retry-after-seconds and ban, not bare-429"},
		{[]string{"--store-timeout", "-1s"}, "invalid --store-timeout -1s: want a positive duration"},
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
// unreachable nothing goes out, with Redis it runs (given a store timeout
// far above any stall of a busy machine, else its clients fail closed).
func TestSimStateRedis(t *testing.T) {
	t.Parallel()
	raw := testenv.RedisURL()
	c := redis.NewClient(mustRedisOptions(t, raw))
	defer c.Close()
	if err := c.Ping(t.Context()).Err(); err != nil {
		testenv.Unreachable(t, "Redis at "+raw, err)
	}
	out := filepath.Join(t.TempDir(), "run.svg")
	r := run(t, nil, "sim", "--state", raw, "--store-timeout", "1m", "--dialect", "503", "--duration", "2s", "--workers", "2", "--out", out)
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
// under one shared prefix. Each run reaches Redis through a tap of its own,
// so what it sent is seen whatever the keys' lifetimes; a store timeout
// far above any stall of a busy machine keeps the clients from failing
// closed (then nothing would go out), and the simulator serves until the
// runs are done.
func TestSimServeAndTargetsShareRedis(t *testing.T) {
	t.Parallel()
	raw := testenv.RedisURL()
	opts := mustRedisOptions(t, raw)
	rc := redis.NewClient(opts)
	defer rc.Close()
	if err := rc.Ping(t.Context()).Err(); err != nil {
		testenv.Unreachable(t, "Redis at "+raw, err)
	}
	addrc := make(chan net.Addr, 1)
	var serveOut testenv.SyncBuffer
	served := make(chan int, 1)
	serveCtx, stopServe := context.WithCancel(t.Context())
	defer stopServe()
	go func() {
		served <- cli.Run(serveCtx, []string{"sim", "--serve", "127.0.0.1:0", "--dialect", "ban", "--limit", "20", "--duration", "10m"},
			cli.Options{Stdout: &serveOut, Stderr: &serveOut, Getenv: func(string) string { return "" }, Ready: func(a net.Addr) { addrc <- a }})
	}()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case code := <-served:
		t.Fatalf("sim --serve ended with %d before serving: %s", code, serveOut.String())
	}
	prefix := fmt.Sprintf("sluice-sim-test-%d:", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		if keys, err := rc.Keys(ctx, "*"+prefix+"*").Result(); err == nil && len(keys) > 0 {
			_ = rc.Del(ctx, keys...).Err()
		}
	})
	taps := []*redisTap{newRedisTap(t, opts.Addr), newRedisTap(t, opts.Addr)}
	var wg sync.WaitGroup
	results := make([]result, len(taps))
	outs := make([]string, len(taps))
	for i, tp := range taps {
		outs[i] = filepath.Join(t.TempDir(), "run.svg")
		u := *mustParseURL(t, raw)
		u.Host = tp.addr()
		wg.Go(func() {
			results[i] = run(t, nil, "sim", "--target", "http://"+addr.String()+"/", "--processes", "1", "--workers", "4",
				"--duration", "2s", "--state", u.String(), "--state-prefix", prefix, "--store-timeout", "1m", "--out", outs[i])
		})
	}
	wg.Wait()
	stopServe()
	select {
	case code := <-served:
		require.Equal(t, cli.ExitOK, code, serveOut.String())
	case <-time.After(time.Minute):
		t.Fatal("sim --serve did not end within a minute of its context")
	}
	require.Regexp(t, `requests [1-9][0-9]*,`, serveOut.String())
	for i, r := range results {
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		// Its clients fail closed: whatever went out was granted by Redis.
		var sum struct{ Summary sim.Summary }
		b, err := os.ReadFile(strings.TrimSuffix(outs[i], ".svg") + ".json")
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &sum))
		require.Positive(t, sum.Summary.Offered, "run %d sent nothing", i)
		sent := taps[i].sentString()
		require.True(t, strings.Contains(sent, prefix), "run %d sent Redis %d bytes, no key under the shared prefix %q", i, len(sent), prefix)
	}
}

// redisTap is a TCP proxy to a Redis server that keeps every byte its
// clients sent.
type redisTap struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	sent   []byte
}

func newRedisTap(t *testing.T, target string) *redisTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tp := &redisTap{ln: ln, target: target}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(s, io.TeeReader(c, tp))
				_ = s.Close()
			})
			wg.Go(func() {
				_, _ = io.Copy(c, s)
				_ = c.Close()
			})
		}
	})
	return tp
}

func (tp *redisTap) addr() string { return tp.ln.Addr().String() }

// Write records what a client sent.
func (tp *redisTap) Write(p []byte) (int, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.sent = append(tp.sent, p...)
	return len(p), nil
}

func (tp *redisTap) sentString() string {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return string(tp.sent)
}

func mustParseURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u
}

// Issue 18: --target is a real load client. It sends the method, body,
// headers and per-request cost it is told to, and a 200 carrying GraphQL
// errors is an error, never goodput.
func TestSimTargetSendsWhatItIsTold(t *testing.T) {
	t.Parallel()
	var hits, right atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		var body struct {
			Query     string `json:"query"`
			Variables struct {
				Cost   int `json:"cost"`
				Worker int `json:"worker"`
			} `json:"variables"`
		}
		err := json.NewDecoder(r.Body).Decode(&body)
		if err == nil && r.Method == http.MethodPost && r.Header.Get("X-Api-Key") == "k1" &&
			r.Header.Get("Content-Type") == "application/json" && body.Query == "{ shop { name } }" && body.Variables.Cost == 7 {
			right.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"data":null,"errors":[{"message":"no such field"}]}`))
	}))
	t.Cleanup(srv.Close)
	out := filepath.Join(t.TempDir(), "run.svg")
	r := run(t, nil, "sim", "--target", srv.URL+"/graphql", "--duration", "2s", "--workers", "2", "--processes", "1",
		"--method", "post", "--header", "X-Api-Key: k1",
		"--body", `{"query":"{ shop { name } }","variables":{"worker":{{.Worker}}}}`, "--cost", "7", "--cost-in", "body:variables.cost",
		"--out", out)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Positive(t, hits.Load())
	require.Equal(t, hits.Load(), right.Load(), "every request as told")
	require.Contains(t, r.stdout, srv.URL+"/graphql, sluice:", "the summary names the target")
	var res struct {
		Scenario map[string]any `json:"scenario"`
		Target   string         `json:"target"`
		Seconds  []sim.Second   `json:"seconds"`
	}
	b, err := os.ReadFile(strings.TrimSuffix(out, ".svg") + ".json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &res))
	require.Equal(t, srv.URL+"/graphql", res.Scenario["name"], "the report names the target")
	var good, errs int64
	for _, s := range res.Seconds {
		good += s.Goodput
		errs += s.Errors
	}
	require.Zero(t, good, "a 200 carrying GraphQL errors is not goodput")
	require.Positive(t, errs)
}

func TestSimTargetCostInHeaderAndQuery(t *testing.T) {
	t.Parallel()
	var hits, right atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("X-Weight") == "3" || r.URL.Query().Get("weight") == "3" {
			right.Add(1)
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	for _, in := range []string{"header:X-Weight", "query:weight"} {
		r := run(t, nil, "sim", "--target", srv.URL+"/api?x=1", "--duration", "1s", "--workers", "1", "--processes", "1",
			"--cost", "3", "--cost-in", in)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
	}
	require.Positive(t, hits.Load())
	require.Equal(t, hits.Load(), right.Load())
}

func TestSimTargetUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--method", "GE T"}, `--method "GE T": want an HTTP method`},
		{[]string{"--header", "nocolon"}, `--header "nocolon": want 'Name: value'`},
		{[]string{"--body", "{{.Nope"}, "--body: template"},
		{[]string{"--body", "{{.Nope}}"}, "--body: template"},
		{[]string{"--body", "@/no/such/file"}, "--body @/no/such/file"},
		{[]string{"--cost", "-1", "--cost-in", "header:X"}, "--cost must be >= 0"},
		{[]string{"--cost", "2"}, "--cost needs --cost-in"},
		{[]string{"--cost", "2", "--cost-in", "cookie:x"}, `--cost-in "cookie:x": want header:NAME`},
		{[]string{"--cost", "2", "--cost-in", "body:cost"}, "needs a JSON --body"},
		{[]string{"--cost", "2", "--cost-in", "body:cost", "--body", "not json"}, "the body is not a JSON object"},
		{[]string{"--cost", "2", "--cost-in", "body:a.b", "--body", `{"a":1}`}, `"a" is not an object`},
	} {
		r := run(t, nil, append([]string{"sim", "--target", "http://127.0.0.1:1/", "--duration", "1s"}, tt.args...)...)
		require.Equal(t, cli.ExitUsage, r.code, "%v: %s", tt.args, r.stderr)
		require.Contains(t, r.stderr, tt.want, "%v", tt.args)
	}
}
