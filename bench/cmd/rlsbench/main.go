// Command rlsbench measures Envoy's ShouldRateLimit side by side: Sluice's
// rate limit service (`sluice serve --grpc-addr`) against
// envoyproxy/ratelimit, both started as processes from the same
// configuration file over the same Redis, loaded over gRPC by 1, 16 and 64
// concurrent streams in alternation, round after round; then a
// client-side over-admission check across a window edge.
//
// envoyproxy/ratelimit is built from the Go module proxy (go install
// github.com/envoyproxy/ratelimit/src/service_cmd@VERSION, cached under
// the user cache directory); sluice is built from this checkout.
//
//	go run ./cmd/rlsbench                       # 3 rounds of 5 s per case
//	go run ./cmd/rlsbench -rounds 1 -duration 2s
//	go run ./cmd/rlsbench -sluice-only          # without envoyproxy/ratelimit
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// EnvoyVersion is the envoyproxy/ratelimit version benchmarked by default:
// its newest on the module proxy when this was written.
const EnvoyVersion = "v1.4.1-0.20260122083618-3fb702589d36"

// The configuration both services load. client: the throughput load, a
// limit no stream reaches, over many keys; edge: the over-admission check.
const configYAML = `domain: rlsbench
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 100000}
  - key: edge
    rate_limit: {unit: second, requests_per_unit: %d}
`

func configYAMLWith(edgeLimit int) string { return fmt.Sprintf(configYAML, edgeLimit) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

type options struct {
	rounds     int
	duration   time.Duration
	warmup     time.Duration
	streams    []int
	keys       int
	edgeLimit  int
	redisURL   string
	envoyVer   string
	envoyBin   string
	sluiceBin  string
	sluiceOnly bool
	skipEdge   bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rlsbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var streams string
	fs.IntVar(&o.rounds, "rounds", 3, "rounds; figures are medians over rounds")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "how long each case is measured, per round")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "load before each measurement, not measured")
	fs.StringVar(&streams, "streams", "1,16,64", "concurrent streams (in-flight calls on one connection), comma-separated")
	fs.IntVar(&o.keys, "keys", 1000, "distinct descriptor values the load cycles through")
	fs.IntVar(&o.edgeLimit, "edge-limit", 100, "requests_per_unit (per second) of the over-admission check")
	fs.StringVar(&o.redisURL, "redis", envOr("SLUICE_TEST_REDIS_URL", "redis://127.0.0.1:6379"), "the Redis both services use")
	fs.StringVar(&o.envoyVer, "envoy-version", EnvoyVersion, "envoyproxy/ratelimit version to build")
	fs.StringVar(&o.envoyBin, "envoy-bin", "", "a built envoyproxy/ratelimit service_cmd (skips the build)")
	fs.StringVar(&o.sluiceBin, "sluice-bin", "", "a built sluice binary (skips the build)")
	fs.BoolVar(&o.sluiceOnly, "sluice-only", false, "measure Sluice alone")
	fs.BoolVar(&o.skipEdge, "skip-edge", false, "skip the over-admission check")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range strings.Split(streams, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-streams: want positive integers, got %q", s)
		}
		o.streams = append(o.streams, n)
	}
	if o.rounds < 1 || o.duration <= 0 || o.keys < 1 || o.edgeLimit < 1 {
		return errors.New("-rounds, -duration, -keys and -edge-limit must be positive")
	}
	return bench(ctx, &o, stdout, stderr)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// target is one running rate limit service.
type target struct {
	name   string
	addr   string
	pid    int           // the server process, for its CPU time; 0 in process
	redis  *redis.Client // the Redis it uses, for Redis's CPU time; nil in process
	conn   *grpc.ClientConn
	client pb.RateLimitServiceClient
	stop   func()
}

func bench(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	u, err := url.Parse(o.redisURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("-redis %q: want redis://HOST:PORT", o.redisURL)
	}
	tmp, err := os.MkdirTemp("", "rlsbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	run := randomHex()
	cfgDir := filepath.Join(tmp, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	cfgFile := filepath.Join(cfgDir, "rlsbench.yaml")
	if err := os.WriteFile(cfgFile, []byte(configYAMLWith(o.edgeLimit)), 0o644); err != nil {
		return err
	}

	ropts, err := redis.ParseURL(o.redisURL)
	if err != nil {
		return fmt.Errorf("-redis %q: %w", o.redisURL, err)
	}
	rc := redis.NewClient(ropts)
	defer rc.Close()

	var targets []*target
	defer func() {
		for _, t := range targets {
			t.stop()
		}
	}()
	sluiceBin := o.sluiceBin
	if sluiceBin == "" {
		sluiceBin = filepath.Join(tmp, "sluice")
		fmt.Fprintln(stderr, "building sluice...")
		if err := buildSluice(ctx, sluiceBin); err != nil {
			return err
		}
	}
	st, err := startSluice(ctx, sluiceBin, tmp, o.redisURL, cfgFile, stderr)
	if err != nil {
		return err
	}
	st.redis = rc
	targets = append(targets, st)
	if !o.sluiceOnly {
		bin := o.envoyBin
		if bin == "" {
			if bin, err = buildEnvoy(ctx, o.envoyVer, stderr); err != nil {
				return err
			}
		}
		et, err := startEnvoy(ctx, bin, tmp, u.Host, "rlsbench_"+run+"_", stderr)
		if err != nil {
			return err
		}
		et.redis = rc
		targets = append(targets, et)
	}

	fmt.Fprintf(stdout, "# ShouldRateLimit, %d round(s) of %s per case, %d keys, Redis %s\n", o.rounds, o.duration, o.keys, u.Host)
	fmt.Fprintf(stdout, "# load average at start: %s\n", loadavg())
	type key struct {
		target  string
		streams int
	}
	results := map[key][]result{}
	for r := range o.rounds {
		for _, n := range o.streams {
			order := slices.Clone(targets)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, t := range order {
				if err := ctx.Err(); err != nil {
					return err
				}
				res, err := load(ctx, t, n, o.keys, o.warmup, o.duration)
				if err != nil {
					return fmt.Errorf("%s, %d streams: %w", t.name, n, err)
				}
				fmt.Fprintf(stderr, "round %d, %s, %d streams: %.0f/s p50 %s p99 %s cpu/call %s redis cpu/call %s (errors %d %s, over %d)\n",
					r+1, t.name, n, res.rps, res.p50, res.p99, res.cpuPerCall, res.redisPerCall, res.errors, res.firstErr, res.over)
				results[key{t.name, n}] = append(results[key{t.name, n}], res)
			}
		}
	}
	fmt.Fprintf(stdout, "# load average at end: %s\n\n", loadavg())
	fmt.Fprintln(stdout, "| streams | service | calls/s | p50 | p99 | server CPU per call | Redis CPU per call | errors |")
	fmt.Fprintln(stdout, "|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, n := range o.streams {
		var base result
		for i, t := range targets {
			m := median(results[key{t.name, n}])
			ratio := ""
			if i == 0 {
				base = m
			} else if m.rps > 0 {
				ratio = fmt.Sprintf(" (sluice %.2fx)", base.rps/m.rps)
			}
			fmt.Fprintf(stdout, "| %d | %s | %.0f%s | %s | %s | %s | %s | %d |\n", n, t.name, m.rps, ratio, round(m.p50), round(m.p99), round(m.cpuPerCall), round(m.redisPerCall), m.errors)
		}
	}
	if o.skipEdge {
		return nil
	}
	fmt.Fprintf(stdout, "\n# Over-admission across a window edge: limit %d per second; a client sends as fast as it can\n", o.edgeLimit)
	fmt.Fprintln(stdout, "# (64 streams) from 250 ms before a whole second to 250 ms after it, on a fresh key, and counts the")
	fmt.Fprintln(stdout, "# OK answers by the time each call was sent. GCRA's bound over the 500 ms: limit + limit/2.")
	fmt.Fprintln(stdout, "# The check is conclusive only when well over twice the limit were sent.")
	fmt.Fprintln(stdout, "\n| service | sent | admitted in the 500 ms | before the edge | after it | limit |")
	fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|---:|")
	for _, t := range targets {
		e, err := edge(ctx, t, "e-"+run+"-"+t.name)
		if err != nil {
			return fmt.Errorf("%s: over-admission check: %w", t.name, err)
		}
		fmt.Fprintf(stdout, "| %s | %d | %d | %d | %d | %d |\n", t.name, e.sent, e.before+e.after, e.before, e.after, o.edgeLimit)
	}
	return nil
}

func round(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// buildSluice builds cmd/sluice in the main module (the checkout this
// module's replace directive points at), with its own go.sum.
func buildSluice(ctx context.Context, bin string) error {
	dir, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/sluicerl/sluice").Output()
	if err != nil {
		return fmt.Errorf("locating the sluice module: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/sluice")
	cmd.Dir = strings.TrimSpace(string(dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building sluice: %v\n%s", err, out)
	}
	return nil
}

// buildEnvoy installs envoyproxy/ratelimit's service_cmd at version from
// the module proxy into the user cache directory, once.
func buildEnvoy(ctx context.Context, version string, stderr io.Writer) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "sluice-rlsbench", "envoy-ratelimit-"+version)
	bin := filepath.Join(dir, "service_cmd")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	fmt.Fprintf(stderr, "building envoyproxy/ratelimit %s from the module proxy (minutes)...\n", version)
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/envoyproxy/ratelimit/src/service_cmd@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod")
	cmd.Dir = os.TempDir() // outside any module
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building envoyproxy/ratelimit %s: %v\n%s", version, err, out)
	}
	return bin, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startProcess starts cmd, logging its output to a file in tmp, and
// returns a stop function that interrupts it and waits.
func startProcess(cmd *exec.Cmd, tmp, name string) (func(), *os.File, error) {
	logf, err := os.Create(filepath.Join(tmp, name+".log"))
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = logf
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			logf.Close()
		})
	}
	return stop, logf, nil
}

func startEnvoy(ctx context.Context, bin, tmp, redisHost, prefix string, stderr io.Writer) (*target, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(),
		"USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisHost,
		"RUNTIME_ROOT="+filepath.Join(tmp, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
		"LOG_LEVEL=warn", "CACHE_KEY_PREFIX="+prefix,
	)
	stop, _, err := startProcess(cmd, tmp, "envoy-ratelimit")
	if err != nil {
		return nil, fmt.Errorf("starting envoyproxy/ratelimit: %w", err)
	}
	t := &target{name: "envoyproxy/ratelimit", addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])), stop: stop, pid: cmd.Process.Pid}
	if err := t.connect(ctx); err != nil {
		stop()
		log, _ := os.ReadFile(filepath.Join(tmp, "envoy-ratelimit.log"))
		return nil, fmt.Errorf("envoyproxy/ratelimit did not answer: %w\n%s", err, log)
	}
	fmt.Fprintf(stderr, "envoyproxy/ratelimit listening on %s\n", t.addr)
	return t, nil
}

func startSluice(ctx context.Context, bin, tmp, redisURL, cfgFile string, stderr io.Writer) (*target, error) {
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
		"--rls-config", cfgFile, "--state", redisURL, "--db", "sqlite:"+filepath.Join(tmp, "records.db"), "--log-level", "warn")
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	stop, _, err := startProcess(cmd, tmp, "sluice")
	if err != nil {
		return nil, fmt.Errorf("starting sluice: %w", err)
	}
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`grpc://(\S+)`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	t := &target{name: "sluice", stop: func() { stop(); pw.Close() }, pid: cmd.Process.Pid}
	select {
	case t.addr = <-addr:
	case <-time.After(time.Minute):
		t.stop()
		log, _ := os.ReadFile(filepath.Join(tmp, "sluice.log"))
		return nil, fmt.Errorf("sluice did not start within a minute:\n%s", log)
	}
	if err := t.connect(ctx); err != nil {
		t.stop()
		return nil, err
	}
	fmt.Fprintf(stderr, "sluice listening on %s\n", t.addr)
	return t, nil
}

// connect dials t and waits (a minute at most) for a first answer.
func (t *target) connect(ctx context.Context) error {
	conn, err := grpc.NewClient(t.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	t.conn, t.client = conn, pb.NewRateLimitServiceClient(conn)
	stop := t.stop
	t.stop = func() { _ = conn.Close(); stop() }
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := t.client.ShouldRateLimit(cctx, request("client", "warm", 1))
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func request(key, value string, hits uint32) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "rlsbench", HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
	}}}
}

type result struct {
	cpuPerCall     time.Duration // the server process's CPU time per call
	redisPerCall   time.Duration // Redis's CPU time per call (INFO cpu), 0 if unknown
	firstErr       string
	rps            float64
	p50, p99       time.Duration
	errors, over   int64
	calls          int64
	latencySamples int
}

// load runs n streams against t for warmup + dur and measures the last dur.
func load(ctx context.Context, t *target, n, keys int, warmup, dur time.Duration) (result, error) {
	reqs := make([]*pb.RateLimitRequest, keys)
	for i := range reqs {
		reqs[i] = request("client", "c"+strconv.Itoa(i), 1)
	}
	var measuring atomic.Bool
	var calls, errs, over atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, n)
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 1<<16)
			for i := g; lctx.Err() == nil; i += n {
				start := time.Now()
				resp, err := t.client.ShouldRateLimit(lctx, reqs[i%keys])
				el := time.Since(start)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					if lctx.Err() == nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
					continue
				}
				calls.Add(1)
				if resp.OverallCode != pb.RateLimitResponse_OK {
					over.Add(1)
				}
				mine = append(mine, el)
			}
			lat[g] = mine
		}()
	}
	sleep(ctx, warmup)
	cpu0, rcpu0 := procCPU(t.pid), redisCPU(ctx, t.redis)
	measuring.Store(true)
	start := time.Now()
	sleep(ctx, dur)
	measuring.Store(false)
	elapsed := time.Since(start)
	cpu1, rcpu1 := procCPU(t.pid), redisCPU(ctx, t.redis)
	cancel()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return result{}, fmt.Errorf("no call succeeded (%d errors)", errs.Load())
	}
	slices.Sort(all)
	fe, _ := firstErr.Load().(string)
	var redisPerCall time.Duration
	if rcpu0 > 0 && rcpu1 > rcpu0 {
		redisPerCall = (rcpu1 - rcpu0) / time.Duration(max(calls.Load(), 1))
	}
	return result{
		cpuPerCall:   (cpu1 - cpu0) / time.Duration(max(calls.Load(), 1)),
		redisPerCall: redisPerCall,
		firstErr:     fe,
		rps:          float64(calls.Load()) / elapsed.Seconds(),
		p50:          all[len(all)/2],
		p99:          all[len(all)*99/100],
		errors:       errs.Load(), over: over.Load(), calls: calls.Load(), latencySamples: len(all),
	}, nil
}

// redisCPU is the CPU time the Redis server has used so far (INFO cpu),
// or 0 when it cannot be read. It counts whatever else uses that Redis
// too.
func redisCPU(ctx context.Context, c *redis.Client) time.Duration {
	if c == nil {
		return 0
	}
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	return parseRedisCPU(info)
}

// parseRedisCPU returns used_cpu_sys plus used_cpu_user of an INFO reply,
// or 0 unless it holds both as numbers.
func parseRedisCPU(info string) time.Duration {
	var total float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return 0
		}
		total += f
		found++
	}
	if found != 2 {
		return 0
	}
	return time.Duration(total * float64(time.Second))
}

// procCPU is the user and system CPU time of process pid so far (Linux
// /proc), or 0 when it cannot be read.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after ") ".
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clockTicks
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func median(rs []result) result {
	if len(rs) == 0 {
		return result{}
	}
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	var errs int64
	for _, r := range rs {
		errs += r.errors
	}
	return result{
		rps:          pick(func(r result) float64 { return r.rps }),
		p50:          time.Duration(pick(func(r result) float64 { return float64(r.p50) })),
		p99:          time.Duration(pick(func(r result) float64 { return float64(r.p99) })),
		cpuPerCall:   time.Duration(pick(func(r result) float64 { return float64(r.cpuPerCall) })),
		redisPerCall: time.Duration(pick(func(r result) float64 { return float64(r.redisPerCall) })),
		errors:       errs,
	}
}

type edgeResult struct{ before, after, sent int }

// edge sends as fast as 64 streams can from 250 ms before a whole second
// (the edge of envoyproxy/ratelimit's per-second window) to 250 ms after
// it, on a key nobody used, and counts the OK answers by the time each
// request was sent.
func edge(ctx context.Context, t *target, value string) (edgeResult, error) {
	now := time.Now()
	edgeAt := now.Truncate(time.Second).Add(2 * time.Second)
	from, to := edgeAt.Add(-250*time.Millisecond), edgeAt.Add(250*time.Millisecond)
	sleep(ctx, time.Until(from))
	req := request("edge", value, 1)
	var before, after, calls, errs atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				at := time.Now()
				if !at.Before(to) {
					return
				}
				calls.Add(1)
				resp, err := t.client.ShouldRateLimit(ctx, req)
				if err != nil {
					errs.Add(1)
					continue
				}
				if resp.OverallCode == pb.RateLimitResponse_OK {
					if at.Before(edgeAt) {
						before.Add(1)
					} else {
						after.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := errs.Load(); n > 0 {
		return edgeResult{}, fmt.Errorf("%d calls failed", n)
	}
	return edgeResult{before: int(before.Load()), after: int(after.Load()), sent: int(calls.Load())}, nil
}
