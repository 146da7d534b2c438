package blackbox

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/faultproxy"
	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/store/guard"
)

var figures = flag.Bool("blackbox.figures", false,
	"print the figures table (admitted/ideal and excess per store, outage mode, healthy and with a 5 s outage, quiet and saturated): about 3 minutes")

// TestMain runs this binary as a busy loop when asked to: the processes
// that saturate the machine.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_BLACKBOX_BUSY") == "1" {
		var x uint64
		for {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// The policies: one per outage mode, with the same limit.
const (
	rate    = 50 // per second
	burst   = 25
	share   = 0.33
	servers = 3
	// clients is how many client goroutines take from each policy on each
	// server: far more than the limit needs, so the limit binds.
	clients = 4
)

var modes = []string{"fail_open", "fail_closed", "local"}

const policiesYAML = `policies:
  fail_open:
    rate: 50
    period: 1s
    burst: 25
    on_store_outage: fail_open
  fail_closed:
    rate: 50
    period: 1s
    burst: 25
    on_store_outage: fail_closed
  local:
    rate: 50
    period: 1s
    burst: 25
    on_store_outage: local
    local_share: 0.33
`

// localAllowance is what local mode may admit beyond the limit: the local
// shares' bursts (each process's share, as its local store scales it:
// floor(25 x 0.33) = 8), for processes whose local grants are not yet
// charged into the shared key (store/guard).
const localAllowance = servers * 8

// Bounds from the guard's own configuration (serve's defaults) plus margin.
const (
	// margin is what scheduling adds on a saturated 2-core machine.
	margin = time.Second
	// backBound: after the store recovers, a probe in flight may still fail
	// (within the timeout), the guard waits at most guard.MaxBackoff, and
	// the next probe answers within the timeout.
	backBound = 2*guard.DefaultTimeout + guard.MaxBackoff + margin
)

// answer is one response as the client saw it.
type answer struct {
	server     int
	policy     string
	send, recv time.Time // the decision happened between the two
	status     int
	allowed    bool
	outage     string // the Sluice-Outage header
}

// backend is a shared store the fleet runs over.
type backend struct {
	name  string
	state string // --state URL
	// stop and start make a real outage (nil: none possible).
	stop, start func(t *testing.T)
	// sessions, if set, counts the distinct database sessions the servers
	// opened since it was last called.
	sessions func(t *testing.T) int
}

var (
	buildOnce sync.Once
	binDir    string // the built binary's directory, removed at exit
	binPath   string
	buildErr  error
)

// sluiceBinary builds cmd/sluice once per test binary, or returns
// SLUICE_BLACKBOX_BIN, a sluice binary built elsewhere (to run the fleet
// against another version, such as the one before the store health work).
func sluiceBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if bin := os.Getenv("SLUICE_BLACKBOX_BIN"); bin != "" {
			binPath = bin
			return
		}
		dir, err := os.MkdirTemp("", "sluice-blackbox-")
		if err != nil {
			buildErr = err
			return
		}
		binDir, binPath = dir, filepath.Join(dir, "sluice")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/sluicerl/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// saturate starts 2 x NumCPU busy processes; the returned func stops them.
func saturate(t *testing.T) func() {
	t.Helper()
	var cmds []*exec.Cmd
	for range 2 * runtime.NumCPU() {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "SLUICE_BLACKBOX_BUSY=1")
		require.NoError(t, cmd.Start())
		cmds = append(cmds, cmd)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for _, c := range cmds {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// logTail is how much of a server's log a failed test prints.
const logTail = 8 << 10

// logBuffer collects a server's stderr; safe for the copying goroutine
// and the test to use at once.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 4*logTail {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-logTail:]...)
	}
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func (b *logBuffer) tail() string {
	s := b.String()
	if len(s) > logTail {
		s = s[len(s)-logTail:]
	}
	return s
}

// cleanEnv is the environment without SLUICE_ variables, which serve reads.
func cleanEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SLUICE_") })
}

// startServers runs the fleet over state and returns the servers' base
// URLs.
func startServers(t *testing.T, state string) []string {
	t.Helper()
	bin := sluiceBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "policies.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(policiesYAML), 0o600))
	var urls []string
	for i := range servers {
		cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--config", cfg, "--state", state,
			"--db", "sqlite:"+filepath.Join(dir, fmt.Sprintf("records-%d.db", i)), "--log-level", "warn")
		cmd.Env = cleanEnv()
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		stderr := &logBuffer{}
		cmd.Stderr = stderr
		require.NoError(t, cmd.Start())
		// On failure, what each server logged (the guard logs the store
		// going down and why) is the first thing to read.
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("server %d log (last %d bytes):\n%s", i, logTail, stderr.tail())
			}
		})
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
		addr := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if a, ok := strings.CutPrefix(sc.Text(), "sluice listening on "); ok {
					addr <- a
				}
			}
			close(addr)
		}()
		select {
		case a, ok := <-addr:
			require.True(t, ok, "server %d exited before listening: %s", i, stderr.String())
			urls = append(urls, a)
		case <-time.After(60 * time.Second):
			t.Fatalf("server %d did not start within 60s: %s", i, stderr.String())
		}
	}
	// Warm up: every server's pool connects before anything is measured.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	load(ctx, t, urls, fmt.Sprintf("warm-up-%016x", rand.Uint64()))
	return urls
}

// load takes from every policy on every server until ctx ends, each client
// on one key per policy, and returns every answer.
func load(ctx context.Context, t *testing.T, urls []string, key string) []answer {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var mu sync.Mutex
	var all []answer
	var wg sync.WaitGroup
	for si, u := range urls {
		for _, mode := range modes {
			body := fmt.Sprintf(`{"policy":%q,"key":%q}`, mode, key)
			for range clients {
				wg.Go(func() {
					var mine []answer
					for ctx.Err() == nil {
						a := answer{server: si, policy: mode, send: time.Now()}
						resp, err := hc.Post(u+"/v1/take", "application/json", strings.NewReader(body))
						if err != nil {
							if ctx.Err() == nil {
								t.Errorf("server %d: %v", si, err)
							}
							break
						}
						var d struct {
							Allowed bool `json:"allowed"`
						}
						_ = json.NewDecoder(resp.Body).Decode(&d)
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						a.recv, a.status, a.allowed = time.Now(), resp.StatusCode, d.Allowed
						a.outage = resp.Header.Get("Sluice-Outage")
						mine = append(mine, a)
					}
					mu.Lock()
					all = append(all, mine...)
					mu.Unlock()
				})
			}
		}
	}
	wg.Wait()
	return all
}

// excess is the most that allowed answers exceed the policy by over any
// interval, from the client side: grants whose requests were sent at or
// after x and answered at or before y were decided within [x, y], so their
// number must be at most burst + rate x (y - x). No tolerance is needed
// for the client's timestamps; the check only loses strength (never
// soundness) by the requests' round trips. It returns the excess (<= 0
// when the policy held) and the interval where it was worst.
func excess(grants []answer) (float64, string) {
	slices.SortFunc(grants, func(a, b answer) int { return a.send.Compare(b.send) })
	worst, where := -float64(burst), ""
	recvs := make([]time.Time, 0, len(grants))
	for i := range grants {
		recvs = recvs[:0]
		for _, g := range grants[i:] {
			recvs = append(recvs, g.recv)
		}
		slices.SortFunc(recvs, func(a, b time.Time) int { return a.Compare(b) })
		for m, r := range recvs {
			span := r.Sub(grants[i].send).Seconds()
			if e := float64(m+1) - (burst + rate*span); e > worst {
				worst = e
				where = fmt.Sprintf("%d grants within %.3fs", m+1, span)
			}
		}
	}
	return worst, where
}

// result is one mode's figures from one run.
type result struct {
	mode           string
	admitted       int     // allowed answers
	ideal          float64 // burst + rate x the run's span
	excess         float64 // from excess(), over the grants the bound applies to
	where          string
	fallbacks      int           // answers that carried Sluice-Outage
	downFallbacks  int           // of which reason=store_down
	back           time.Duration // the slowest server's return to the store (outage runs)
	checkedGrants  int
	unexpectedCode int
}

// scenario is one run: a healthy store for span, or an outage of length
// outage starting at before.
type scenario struct {
	span, before, outage time.Duration
}

// run drives the fleet over b for one scenario and returns a result per
// mode.
func run(t *testing.T, b backend, urls []string, sc scenario) map[string]*result {
	t.Helper()
	key := fmt.Sprintf("k-%016x", rand.Uint64())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan []answer, 1)
	go func() { done <- load(ctx, t, urls, key) }()
	var downAt, upAt time.Time
	if sc.outage > 0 {
		time.Sleep(sc.before)
		downAt = time.Now()
		b.stop(t)
		time.Sleep(sc.outage)
		b.start(t)
		upAt = time.Now()
		time.Sleep(sc.span - sc.before - sc.outage)
	} else {
		time.Sleep(sc.span)
	}
	cancel()
	answers := <-done

	out := map[string]*result{}
	for _, mode := range modes {
		r := &result{mode: mode}
		var first, last time.Time
		var grants []answer
		firstBack := make([]time.Time, servers)
		for _, a := range answers {
			if a.policy != mode {
				continue
			}
			if first.IsZero() || a.send.Before(first) {
				first = a.send
			}
			last = later(last, a.recv)
			if a.status != http.StatusOK && a.status != http.StatusTooManyRequests {
				r.unexpectedCode++
			}
			if a.outage != "" {
				r.fallbacks++
				if strings.Contains(a.outage, "reason=store_down") {
					r.downFallbacks++
				}
			}
			if !upAt.IsZero() && a.outage == "" && !a.send.Before(upAt) &&
				(firstBack[a.server].IsZero() || a.recv.Before(firstBack[a.server])) {
				firstBack[a.server] = a.recv
			}
			if !a.allowed {
				continue
			}
			r.admitted++
			// fail_open admits without bound while the store is down, by
			// design: only the store's own grants are held to the limit.
			if mode == "fail_open" && strings.Contains(a.outage, "reason=store_down") {
				continue
			}
			grants = append(grants, a)
		}
		// The ideal is what the policy admits to demand that never stops,
		// over the span the answers cover: an upper bound on what it could
		// admit them.
		r.ideal = burst + rate*last.Sub(first).Seconds()
		r.checkedGrants = len(grants)
		r.excess, r.where = excess(grants)
		if !upAt.IsZero() {
			for _, fb := range firstBack {
				if fb.IsZero() {
					r.back = -1 // never came back
					break
				}
				r.back = max(r.back, fb.Sub(upAt))
			}
		}
		out[mode] = r
	}
	_ = downAt
	return out
}

// check asserts what must hold of one run.
func check(t *testing.T, name string, sc scenario, res map[string]*result) {
	t.Helper()
	for _, mode := range modes {
		r := res[mode]
		require.Zerof(t, r.unexpectedCode, "%s %s: answers other than 200 and 429", name, mode)
		require.Positive(t, r.admitted, "%s %s: nothing admitted", name, mode)
		allowance := 0.0
		if mode == "local" && sc.outage > 0 {
			allowance = localAllowance
		}
		require.LessOrEqualf(t, r.excess, allowance,
			"%s %s: admitted more than burst + rate x interval (+ %v for local shares): %s", name, mode, allowance, r.where)
		if sc.outage == 0 {
			require.Zerof(t, r.downFallbacks, "%s %s: the store was up, yet %d answers said it was down", name, mode, r.downFallbacks)
		} else {
			require.Positivef(t, r.downFallbacks, "%s %s: the outage was never noticed", name, mode)
			require.GreaterOrEqualf(t, r.back, time.Duration(0), "%s %s: a server never returned to the store", name, mode)
			require.LessOrEqualf(t, r.back, backBound, "%s %s: back to the store within two timeouts, the longest backoff and %s", name, mode, margin)
		}
	}
}

func redisBackend(t *testing.T) backend {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Unreachable(t, "redis-server (to start a Redis of the test's own)", err)
	}
	dir := t.TempDir()
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var cmd *exec.Cmd
	start := func(t *testing.T) {
		// Every write is fsynced, so a killed server restarts with every
		// decision it acknowledged: losing the state is not what is tested.
		cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--dir", dir,
			"--save", "", "--appendonly", "yes", "--appendfsync", "always")
		require.NoError(t, cmd.Start())
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		defer c.Close()
		deadline := time.Now().Add(30 * time.Second)
		for c.Ping(context.Background()).Err() != nil {
			require.True(t, time.Now().Before(deadline), "redis-server on %s did not answer within 30s", addr)
			time.Sleep(10 * time.Millisecond)
		}
	}
	stop := func(t *testing.T) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	start(t)
	t.Cleanup(func() { stop(t) })
	return backend{name: "redis", state: "redis://" + addr, stop: stop, start: start}
}

func postgresBackend(t *testing.T) backend {
	t.Helper()
	schema := testenv.PostgresSchema(t, "blackbox_")
	raw := testenv.PostgresURL()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	target := u.Host
	if _, _, err := net.SplitHostPort(target); err != nil {
		target += ":5432"
	}
	p, err := faultproxy.New(target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	app := fmt.Sprintf("sluice-blackbox-%08x", rand.Uint32())
	u.Host = p.Addr()
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	state := testenv.WithSearchPath(u.String(), schema)

	// Sessions: sample pg_stat_activity while the fleet runs.
	conn, err := pgx.Connect(context.Background(), raw)
	require.NoError(t, err)
	var mu sync.Mutex
	seen := map[int32]bool{}
	sctx, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sctx.Err() == nil {
			rows, err := conn.Query(sctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
			if err == nil {
				pids, _ := pgx.CollectRows(rows, pgx.RowTo[int32])
				mu.Lock()
				for _, pid := range pids {
					seen[pid] = true
				}
				mu.Unlock()
			}
			select {
			case <-sctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		stopSampling()
		<-sampled
		_ = conn.Close(context.Background())
	})
	sessions := func(*testing.T) int {
		mu.Lock()
		defer mu.Unlock()
		n := len(seen)
		clear(seen)
		return n
	}
	return backend{name: "postgres", state: state, sessions: sessions,
		stop:  func(*testing.T) { p.Set(faultproxy.Reset) },
		start: func(*testing.T) { p.Set(faultproxy.Pass) },
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// TestFleet runs 3 `sluice serve` processes over Redis and over PostgreSQL
// with the machine saturated, healthy and across a real outage, and checks
// from the client side that every policy held (fail_open: its store-decided
// grants; local: within the limit plus the local shares' bursts during an
// outage), that a healthy store is never reported down, that an outage is
// noticed, and that every server returns to the store within backBound.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and saturates the machine for about 40s; not under -short")
	}
	if os.Getenv("SLUICE_INTEGRATION") != "1" && !*figures {
		t.Skip("black-box fleet test: set SLUICE_INTEGRATION=1 (make test does) to run it")
	}
	if *figures {
		printFigures(t)
		return
	}
	sluiceBinary(t) // before the machine is saturated
	stop := saturate(t)
	defer stop()
	healthy := scenario{span: 5 * time.Second}
	outage := scenario{span: 8 * time.Second, before: 2 * time.Second, outage: 3 * time.Second}
	for _, mk := range []func(*testing.T) backend{redisBackend, postgresBackend} {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			began := time.Now()
			urls := startServers(t, b.state)
			t.Logf("%s: servers up in %s", b.name, time.Since(began).Round(time.Millisecond))
			if b.sessions != nil {
				b.sessions(t)
			}
			res := run(t, b, urls, healthy)
			logResults(t, b.name+" healthy", res)
			check(t, b.name+" healthy", healthy, res)
			if b.sessions != nil {
				n := b.sessions(t)
				t.Logf("%s: %d sessions seen during the healthy run", b.name, n)
				// pgxpool's default MaxConns on this machine, per server.
				pool := int(max(4, runtime.NumCPU()))
				require.LessOrEqual(t, n, servers*pool, "sessions opened during a healthy run: at most the pools' size")
			}
			res = run(t, b, urls, outage)
			logResults(t, b.name+" outage", res)
			check(t, b.name+" outage", outage, res)
		})
	}
}

func logResults(t *testing.T, name string, res map[string]*result) {
	t.Helper()
	for _, mode := range modes {
		r := res[mode]
		t.Logf("%s %-11s admitted/ideal %.3f (%d/%.0f) excess %.1f (%s) fallbacks %d (store_down %d) back %s",
			name, mode, float64(r.admitted)/r.ideal, r.admitted, r.ideal, max(r.excess, 0), r.where,
			r.fallbacks, r.downFallbacks, r.back.Round(time.Millisecond))
	}
}

// printFigures runs every store x machine load x scenario once and prints
// one table, each row from one run.
func printFigures(t *testing.T) {
	healthy := scenario{span: 10 * time.Second}
	outage := scenario{span: 10 * time.Second, before: 2 * time.Second, outage: 5 * time.Second}
	sluiceBinary(t)
	var rows []string
	for _, mk := range []func(*testing.T) backend{redisBackend, postgresBackend, sqliteBackend} {
		b := mk(t)
		urls := startServers(t, b.state)
		for _, saturated := range []bool{false, true} {
			var stop func()
			if saturated {
				stop = saturate(t)
				time.Sleep(time.Second) // let the load average see it
			}
			machine := map[bool]string{false: "quiet", true: "saturated"}[saturated]
			for _, sc := range []scenario{healthy, outage} {
				if sc.outage > 0 && b.stop == nil {
					continue
				}
				if b.sessions != nil {
					b.sessions(t)
				}
				res := run(t, b, urls, sc)
				la := loadavg()
				sessions := "-"
				if b.sessions != nil {
					sessions = fmt.Sprint(b.sessions(t))
				}
				what := map[bool]string{false: "healthy", true: "5s outage"}[sc.outage > 0]
				for _, mode := range modes {
					r := res[mode]
					back := "-"
					if sc.outage > 0 {
						back = r.back.Round(time.Millisecond).String()
					}
					rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %.3f | %.1f | %d | %d | %s | %s | %s |",
						b.name, machine, what, mode, float64(r.admitted)/r.ideal, max(r.excess, 0),
						r.fallbacks, r.downFallbacks, back, sessions, la))
				}
			}
			if stop != nil {
				stop()
			}
		}
	}
	fmt.Println("| store | machine | store state | mode | admitted/ideal | excess | outage answers | of which store_down | back to store | PG sessions | load avg (1 5 15) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(r)
	}
}

// sqliteBackend is one SQLite file the three servers share (no outage: a
// local file is not guarded).
func sqliteBackend(t *testing.T) backend {
	return backend{name: "sqlite", state: "sqlite:" + filepath.Join(t.TempDir(), "state.db")}
}
