package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/signal"
)

// Client is what one simulated process calls the provider through: a
// plain value. Its Transport and Rate are called from many workers at once
// and must be safe for concurrent use. The zero value has no transport and
// is rejected by Run.
type Client struct {
	// Transport sends a request: the outbound client under test, or a
	// baseline wrapping the base transport.
	Transport http.RoundTripper
	// Rate, if set, reports the client's current (adapted or configured)
	// rate in requests per second; the harness samples it every second.
	Rate func() float64
}

// Config configures Run, a plain value. Base is required; every other zero
// value means the documented default.
type Config struct {
	// Workers is the total number of concurrent workers. Zero means 8.
	Workers int
	// Processes splits the workers into this many processes, each with
	// its own client. Zero means 2.
	Processes int
	// Duration is how long the workers run. Zero means 30 s.
	Duration time.Duration
	// URL is the URL every worker requests. Empty means http://sim.test/.
	URL string
	// Request, if set, builds each request instead of a GET of URL: for
	// worker w's seq-th operation (from 0). Its body must be replayable
	// (http.NewRequest sets GetBody for a bytes or strings reader) so
	// that the client may retry it. Nil means a GET of URL.
	Request func(ctx context.Context, worker int, seq int64) (*http.Request, error)
	// Base reaches the provider: a HandlerTransport for a simulator, or an
	// http.Transport for a real endpoint.
	Base http.RoundTripper
	// NewClient builds process i's client over base (the harness's
	// counting wrapper around Base). Nil means every process calls base
	// directly, with no pacing at all.
	NewClient func(process int, base http.RoundTripper) (Client, error)
	// Limit returns the true limit in requests per second at elapsed time
	// d, for the figures. Nil means unknown (figures relative to the limit
	// are then not computed).
	Limit func(d time.Duration) float64
	// SlowAfter counts a response slower than this as a throttle signal
	// (for providers that slow down instead of refusing). Zero means never.
	SlowAfter time.Duration
	// Clock times the run. Nil means the real clock.
	Clock clock.Clock
	// OnSecond, if set, is called with each second's record shortly after
	// it ends (late responses may still add to it: Run's result is
	// final). It is called from one goroutine, in order.
	OnSecond func(Second)
}

// Second is what happened during one second of a run: a plain value.
type Second struct {
	T     int     `json:"t"`               // seconds since the start
	Limit float64 `json:"limit,omitempty"` // the true limit, requests/s (0: unknown)
	// Offered counts attempts that reached the provider, retries included.
	Offered int64 `json:"offered"`
	// Admitted counts attempts the provider served without a throttle
	// signal.
	Admitted int64 `json:"admitted"`
	// Goodput counts workers' operations that ended in success.
	Goodput int64 `json:"goodput"`
	// Throttles counts throttle responses (429, 503, THROTTLED in a 200,
	// and responses slower than SlowAfter).
	Throttles int64 `json:"throttles"`
	// Bans counts 418 responses.
	Bans int64 `json:"bans"`
	// Retries counts attempts after the first of an operation.
	Retries int64 `json:"retries"`
	// Errors counts operations that ended in an error or a non-2xx
	// response.
	Errors int64 `json:"errors"`
	// Rate is the sum of the processes' reported rates at the end of the
	// second (0 when the clients do not report one).
	Rate float64 `json:"rate"`
}

// Result is a run's second-by-second record: a plain value, not safe to
// modify concurrently. The zero value is an empty run.
type Result struct {
	Seconds []Second `json:"seconds"`
}

type counters struct {
	offered, admitted, goodput, throttles, bans, retries, errors atomic.Int64
	rate                                                         atomic.Uint64 // float64 bits
}

type recorder struct {
	clk       clock.Clock
	start     time.Time
	secs      []counters
	slowAfter time.Duration
}

func (r *recorder) at(t time.Time) *counters {
	i := int(t.Sub(r.start) / time.Second)
	if i < 0 || i >= len(r.secs) {
		return nil
	}
	return &r.secs[i]
}

type attemptsKey struct{}

// countingTransport records every attempt that reaches the provider.
type countingTransport struct {
	base http.RoundTripper
	rec  *recorder
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if n, ok := req.Context().Value(attemptsKey{}).(*atomic.Int32); ok && n.Add(1) > 1 {
		if s := c.rec.at(c.rec.clk.Now()); s != nil {
			s.retries.Add(1)
		}
	}
	begin := c.rec.clk.Now()
	resp, err := c.base.RoundTrip(req)
	end := c.rec.clk.Now()
	s := c.rec.at(end)
	if err != nil {
		if s != nil {
			s.offered.Add(1)
		}
		return nil, err
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return nil, rerr
	}
	if s == nil {
		return resp, nil
	}
	s.offered.Add(1)
	switch ClassifyResponse(resp.StatusCode, resp.Header, body) {
	case OutcomeBan:
		s.bans.Add(1)
	case OutcomeThrottle:
		s.throttles.Add(1)
	case OutcomeOK:
		if c.rec.slowAfter > 0 && end.Sub(begin) > c.rec.slowAfter {
			s.throttles.Add(1)
		} else {
			s.admitted.Add(1)
		}
	}
	return resp, nil
}

// Outcome is how the harness counts a response. The zero value is
// OutcomeOK.
type Outcome uint8

const (
	// OutcomeOK is a 2xx without a throttle error in its body.
	OutcomeOK Outcome = iota
	// OutcomeThrottle is a 429, a 503, a 529 (overloaded), a 2xx carrying
	// THROTTLED, or (by ClassifyResponse) a 403 over a rate limit.
	OutcomeThrottle
	// OutcomeBan is a 418.
	OutcomeBan
	// OutcomeError is any other response, a 2xx whose JSON body carries
	// GraphQL errors among them: a provider's error is never goodput.
	OutcomeError
)

var throttledCode = []byte(`"THROTTLED"`)

// statusOverloaded is the 529 a provider overloaded answers (Anthropic).
const statusOverloaded = 529

// Classify says how the harness counts a response of status with body.
func Classify(status int, body []byte) Outcome {
	switch {
	case status == http.StatusTeapot:
		return OutcomeBan
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable || status == statusOverloaded:
		return OutcomeThrottle
	case status >= 200 && status < 300:
		if bytes.Contains(body, throttledCode) {
			return OutcomeThrottle
		}
		if graphQLErrors(body) {
			return OutcomeError
		}
		return OutcomeOK
	}
	return OutcomeError
}

// ClassifyResponse is Classify with the response's header: a 403 over a
// rate limit (with Retry-After, or with X-RateLimit-Remaining 0, as
// GitHub answers) is a throttle, as package signal reads it; any other
// 403 is an error.
func ClassifyResponse(status int, h http.Header, body []byte) Outcome {
	o := Classify(status, body)
	// Whether a 403 states a limit does not depend on the time: no clock
	// is read.
	if o == OutcomeError && status == http.StatusForbidden &&
		signal.Parse(0, signal.Response{Status: status, Header: h}).Throttled {
		return OutcomeThrottle
	}
	return o
}

// graphQLErrors reports whether body is a JSON object with a non-empty
// top-level "errors" list (a GraphQL response that failed, in part or
// whole, although its status is 200).
func graphQLErrors(body []byte) bool {
	if !bytes.Contains(body, []byte(`"errors"`)) {
		return false
	}
	var v struct {
		Errors []json.RawMessage `json:"errors"`
	}
	return json.Unmarshal(body, &v) == nil && len(v.Errors) > 0
}

// Run runs cfg.Workers workers over cfg.Processes clients for
// cfg.Duration (or until ctx ends) and returns the per-second record.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Base == nil {
		return nil, fmt.Errorf("%w: base transport is nil", ErrInvalidConfig)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 8
	}
	if cfg.Processes == 0 {
		cfg.Processes = 2
	}
	if cfg.Duration == 0 {
		cfg.Duration = 30 * time.Second
	}
	if cfg.URL == "" {
		cfg.URL = "http://sim.test/"
	}
	switch {
	case cfg.Workers < 0 || cfg.Processes < 0:
		return nil, fmt.Errorf("%w: workers and processes must be positive, got %d and %d", ErrInvalidConfig, cfg.Workers, cfg.Processes)
	case cfg.Processes > cfg.Workers:
		return nil, fmt.Errorf("%w: %d processes need at least as many workers, got %d", ErrInvalidConfig, cfg.Processes, cfg.Workers)
	case cfg.Duration < time.Second:
		return nil, fmt.Errorf("%w: duration must be at least 1s, got %v", ErrInvalidConfig, cfg.Duration)
	case cfg.SlowAfter < 0:
		return nil, fmt.Errorf("%w: slow_after must be >= 0, got %v", ErrInvalidConfig, cfg.SlowAfter)
	}
	if _, err := http.NewRequest(http.MethodGet, cfg.URL, nil); err != nil {
		return nil, fmt.Errorf("%w: url: %w", ErrInvalidConfig, err)
	}
	clk := clock.Or(cfg.Clock)
	n := int((cfg.Duration + time.Second - 1) / time.Second)
	rec := &recorder{clk: clk, start: clk.Now(), secs: make([]counters, n), slowAfter: cfg.SlowAfter}
	base := countingTransport{base: cfg.Base, rec: rec}
	clients := make([]Client, cfg.Processes)
	for i := range clients {
		if cfg.NewClient == nil {
			clients[i] = Client{Transport: base}
			continue
		}
		c, err := cfg.NewClient(i, base)
		if err != nil {
			return nil, fmt.Errorf("sim: process %d: %w", i, err)
		}
		if c.Transport == nil {
			return nil, fmt.Errorf("%w: process %d: client has no transport", ErrInvalidConfig, i)
		}
		clients[i] = c
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		c := clients[w%cfg.Processes]
		newReq := cfg.Request
		if newReq == nil {
			newReq = func(ctx context.Context, _ int, _ int64) (*http.Request, error) {
				return http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL, nil)
			}
		}
		wg.Go(func() { worker(ctx, clk, w, newReq, c.Transport, rec) })
	}
	reported := 0
	wg.Go(func() { reported = sampleRates(ctx, clk, clients, rec, cfg.Limit, cfg.OnSecond) })
	t := clk.NewTimer(cfg.Duration)
	select {
	case <-t.C():
	case <-ctx.Done():
		t.Stop()
	}
	cancel()
	wg.Wait()

	res := &Result{Seconds: make([]Second, n)}
	for i := range res.Seconds {
		if i >= reported {
			// The run ended before the sampler saw this second end.
			rec.secs[i].rate.Store(floatBits(sumRates(clients)))
		}
		res.Seconds[i] = rec.second(i, cfg.Limit)
		if i >= reported && cfg.OnSecond != nil {
			cfg.OnSecond(res.Seconds[i])
		}
	}
	return res, nil
}

func (r *recorder) second(i int, limit func(time.Duration) float64) Second {
	c := &r.secs[i]
	s := Second{
		T: i, Offered: c.offered.Load(), Admitted: c.admitted.Load(), Goodput: c.goodput.Load(),
		Throttles: c.throttles.Load(), Bans: c.bans.Load(), Retries: c.retries.Load(),
		Errors: c.errors.Load(), Rate: floatFrom(c.rate.Load()),
	}
	if limit != nil {
		s.Limit = limit(time.Duration(i)*time.Second + time.Second/2)
	}
	return s
}

func worker(ctx context.Context, clk clock.Clock, w int, newReq func(context.Context, int, int64) (*http.Request, error), rt http.RoundTripper, rec *recorder) {
	for seq := int64(0); ctx.Err() == nil; seq++ {
		var attempts atomic.Int32
		req, err := newReq(context.WithValue(ctx, attemptsKey{}, &attempts), w, seq)
		var resp *http.Response
		if err == nil {
			resp, err = rt.RoundTrip(req)
		}
		ok := false
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
			ok = Classify(resp.StatusCode, body) == OutcomeOK
		}
		if ctx.Err() != nil {
			return
		}
		if s := rec.at(clk.Now()); s != nil {
			if ok {
				s.goodput.Add(1)
			} else {
				s.errors.Add(1)
			}
		}
		if !ok {
			// A client that fails fast (an open breaker, an exhausted
			// budget) must not turn the worker into a busy loop.
			t := clk.NewTimer(10 * time.Millisecond)
			select {
			case <-t.C():
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
	}
}

// sampleRates records the clients' rates at the end of every second and
// reports each second; it returns how many seconds it reported.
func sampleRates(ctx context.Context, clk clock.Clock, clients []Client, rec *recorder, limit func(time.Duration) float64, onSecond func(Second)) int {
	for i := range rec.secs {
		t := clk.NewTimer(rec.start.Add(time.Duration(i+1) * time.Second).Sub(clk.Now()))
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return i
		}
		if ctx.Err() != nil {
			return i
		}
		rec.secs[i].rate.Store(floatBits(sumRates(clients)))
		if onSecond != nil {
			onSecond(rec.second(i, limit))
		}
	}
	return len(rec.secs)
}

func sumRates(clients []Client) float64 {
	var sum float64
	for _, c := range clients {
		if c.Rate != nil {
			sum += c.Rate()
		}
	}
	return sum
}
