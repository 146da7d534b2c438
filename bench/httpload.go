package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicerl/sluice/limiter"
)

// HTTPConfig configures RunHTTP. Zero fields take the documented defaults.
type HTTPConfig struct {
	// Conns is the number of client goroutines and the most connections
	// the client opens. Zero means 64.
	Conns int
	// Duration is how long requests are measured. Zero means 5s.
	Duration time.Duration
	// Warmup runs requests that are not counted before measuring, so that
	// connections are open and the keys hold state. Zero means 500ms; a
	// negative value means none.
	Warmup time.Duration
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
}

func (c HTTPConfig) withDefaults() HTTPConfig {
	if c.Conns <= 0 {
		c.Conns = 64
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = 500 * time.Millisecond
	}
	return c
}

// HTTPResult is what RunHTTP measured.
type HTTPResult struct {
	Addr      string        // the listener's address
	Conns     int           // client goroutines and connections
	Elapsed   time.Duration // the measured span
	Requests  int64         // requests answered 200 or 429 in the span
	Allowed   int64         // of which 200
	Limited   int64         // of which 429
	Errors    int64         // transport errors and other statuses
	FirstErr  string        // the first error, for diagnosis
	P50, P90  time.Duration // latency percentiles of answered requests
	P99, P999 time.Duration
	Max       time.Duration
	// CPU is the process's CPU time (all threads: server and load
	// generator) over the measured span; CPUPerRequest divides it. Less
	// disturbed by other load on the machine than requests per second.
	CPU time.Duration
}

// CPUPerRequest is CPU / Requests.
func (r HTTPResult) CPUPerRequest() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Requests)
}

// RPS returns answered requests per second.
func (r HTTPResult) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// TakeLimiter returns the limiter the HTTP figure runs against: the
// always-allowed policy "p" over the default in-memory store.
func TakeLimiter() (*limiter.Limiter, error) {
	return limiter.New(limiter.Config{Policies: []limiter.Policy{{Name: "p", Rate: allowRate, Period: time.Second, Burst: allowBurst}}})
}

// takeBodies are the request bodies, one per key of Keys, built once so the
// load generator does not spend the shared CPUs encoding JSON.
var takeBodies = func() [][]byte {
	bs := make([][]byte, len(Keys))
	for i, k := range Keys {
		bs[i] = []byte(`{"policy":"p","key":"` + k + `","cost":1}`)
	}
	return bs
}()

// RunHTTP serves h on a fresh listener at 127.0.0.1:0 in this process and
// sends POST /v1/take from cfg.Conns goroutines for cfg.Duration, each
// request for one of Keys in turn. The load generator shares the CPUs with
// the server.
func RunHTTP(ctx context.Context, h http.Handler, cfg HTTPConfig) (HTTPResult, error) {
	cfg = cfg.withDefaults()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return HTTPResult{}, fmt.Errorf("bench: listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	client := newClient(cfg.Conns)
	defer client.CloseIdleConnections()
	url := "http://" + ln.Addr().String() + "/v1/take"

	// Fail fast, with the server's own words, if the endpoint is not there.
	if err := probe(ctx, client, url, cfg.Token); err != nil {
		return HTTPResult{}, err
	}

	warm := max(cfg.Warmup, 0)
	start := time.Now()
	measureFrom := start.Add(warm)
	stopAt := measureFrom.Add(cfg.Duration)
	rctx, cancel := context.WithDeadline(ctx, stopAt)
	defer cancel()

	type worker struct {
		lat              []time.Duration
		allowed, limited int64
		errs             int64
		firstErr         string
	}
	workers := make([]worker, cfg.Conns)
	cpuFrom := make(chan time.Duration, 1)
	go func() {
		t := time.NewTimer(time.Until(measureFrom))
		defer t.Stop()
		select {
		case <-t.C:
			cpuFrom <- processCPU()
		case <-rctx.Done():
			cpuFrom <- processCPU()
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			me := &workers[w]
			me.lat = make([]time.Duration, 0, 1<<14)
			c := newKeyCursor()
			for rctx.Err() == nil {
				body := takeBodies[c.nextIndex()]
				t0 := time.Now()
				status, err := post(rctx, client, url, body, cfg.Token)
				t1 := time.Now()
				if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
					return
				}
				if t0.Before(measureFrom) {
					continue
				}
				switch {
				case err != nil:
					me.errs++
					if me.firstErr == "" {
						me.firstErr = err.Error()
					}
					continue
				case status == http.StatusOK:
					me.allowed++
				case status == http.StatusTooManyRequests:
					me.limited++
				default:
					me.errs++
					if me.firstErr == "" {
						me.firstErr = "status " + strconv.Itoa(status)
					}
					continue
				}
				me.lat = append(me.lat, t1.Sub(t0))
			}
		})
	}
	wg.Wait()
	cpu := processCPU() - <-cpuFrom
	elapsed := min(time.Since(measureFrom), cfg.Duration)

	res := HTTPResult{Addr: ln.Addr().String(), Conns: cfg.Conns, Elapsed: elapsed, CPU: cpu}
	var all []time.Duration
	for i := range workers {
		w := &workers[i]
		res.Allowed += w.allowed
		res.Limited += w.limited
		res.Errors += w.errs
		if res.FirstErr == "" {
			res.FirstErr = w.firstErr
		}
		all = append(all, w.lat...)
	}
	res.Requests = res.Allowed + res.Limited
	if len(all) > 0 {
		slices.Sort(all)
		res.P50 = percentile(all, 0.50)
		res.P90 = percentile(all, 0.90)
		res.P99 = percentile(all, 0.99)
		res.P999 = percentile(all, 0.999)
		res.Max = all[len(all)-1]
	}
	return res, nil
}

// newClient returns an HTTP/1.1 client that keeps up to conns connections
// to one host open.
func newClient(conns int) *http.Client {
	tr := &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// HTTPTake is the go test form of the HTTP figure: b.N POST /v1/take
// requests from 64 goroutines (b.SetParallelism) over at most 64
// connections to an httptest server on 127.0.0.1. It reports req/s and the
// p50 and p99 latency in microseconds.
func HTTPTake(b *testing.B) {
	const conns = 64
	lim, err := TakeLimiter()
	if err != nil {
		b.Fatal(err)
	}
	h, err := TakeHandler(lim)
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(h)
	defer ts.Close()
	client := newClient(conns)
	defer client.CloseIdleConnections()
	url := ts.URL + "/v1/take"
	ctx := context.Background()
	if err := probe(ctx, client, url, ""); err != nil {
		b.Fatal(err)
	}

	var mu sync.Mutex
	var all []time.Duration
	var allowed atomic.Int64
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((conns + procs - 1) / procs)
	m := startMeter(b)
	b.RunParallel(func(pb *testing.PB) {
		c := newKeyCursor()
		var lat []time.Duration
		var ok int64
		for pb.Next() {
			t0 := time.Now()
			status, err := post(ctx, client, url, takeBodies[c.nextIndex()], "")
			lat = append(lat, time.Since(t0))
			switch {
			case err != nil:
				b.Error(err)
				return
			case status == http.StatusOK:
				ok++
			case status != http.StatusTooManyRequests:
				b.Errorf("status %d", status)
				return
			}
		}
		allowed.Add(ok)
		mu.Lock()
		all = append(all, lat...)
		mu.Unlock()
	})
	m.stop(allowed.Load())
	if len(all) > 0 {
		slices.Sort(all)
		b.ReportMetric(float64(percentile(all, 0.50))/1e3, "p50-µs")
		b.ReportMetric(float64(percentile(all, 0.99))/1e3, "p99-µs")
	}
	if e := b.Elapsed(); e > 0 {
		b.ReportMetric(float64(b.N)/e.Seconds(), "req/s")
	}
}

// percentile returns the q-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func post(ctx context.Context, c *http.Client, url string, body []byte, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

func probe(ctx context.Context, c *http.Client, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(takeBodies[0]))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("bench: probe POST /v1/take: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return fmt.Errorf("bench: probe POST /v1/take: status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}
