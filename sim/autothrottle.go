package sim

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
)

// AutoThrottleConfig configures an AutoThrottle. The zero value is
// Scrapy's defaults, except StartDelay.
type AutoThrottleConfig struct {
	// StartDelay is the delay between requests before the first response.
	// Zero means 1 s (Scrapy's AUTOTHROTTLE_START_DELAY is 5 s).
	StartDelay time.Duration
	// MinDelay and MaxDelay bound the delay. Zero means 0 and 60 s.
	MinDelay, MaxDelay time.Duration
	// TargetConcurrency is the average number of requests the controller
	// aims to have in flight. Zero means 1.
	TargetConcurrency float64
	// Clock times the delays. Nil means the real clock.
	Clock clock.Clock
}

// AutoThrottle is a baseline for the figures: Scrapy's AutoThrottle, a
// per-process delay controller. After every response the delay moves half
// way towards latency / TargetConcurrency; a non-200 response may raise it
// but never lower it; requests start at least one delay apart. It keeps no
// shared state and does not read Retry-After. It is safe for concurrent
// use; build it with NewAutoThrottle.
type AutoThrottle struct {
	base http.RoundTripper
	cfg  AutoThrottleConfig

	mu    sync.Mutex
	delay time.Duration
	last  time.Time // start of the latest request
}

// NewAutoThrottle returns an AutoThrottle over base.
func NewAutoThrottle(base http.RoundTripper, cfg AutoThrottleConfig) (*AutoThrottle, error) {
	if cfg.StartDelay < 0 || cfg.MinDelay < 0 || cfg.MaxDelay < 0 || cfg.TargetConcurrency < 0 {
		return nil, fmt.Errorf("%w: autothrottle delays and target concurrency must be >= 0", ErrInvalidConfig)
	}
	if cfg.StartDelay == 0 {
		cfg.StartDelay = time.Second
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = time.Minute
	}
	if cfg.TargetConcurrency == 0 {
		cfg.TargetConcurrency = 1
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return &AutoThrottle{base: base, cfg: cfg, delay: cfg.StartDelay}, nil
}

// Rate returns 1 / delay in requests per second.
func (a *AutoThrottle) Rate() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.delay <= 0 {
		return 0
	}
	return float64(time.Second) / float64(a.delay)
}

// RoundTrip waits for the request's turn, sends it and adjusts the delay.
func (a *AutoThrottle) RoundTrip(req *http.Request) (*http.Response, error) {
	// Like Scrapy's download slot, the delay is checked when a request
	// is due to leave, so a shorter delay takes effect at once.
	for {
		a.mu.Lock()
		now := a.cfg.Clock.Now()
		wait := a.last.Add(a.delay).Sub(now)
		if wait <= 0 {
			a.last = now
			a.mu.Unlock()
			break
		}
		a.mu.Unlock()
		t := a.cfg.Clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-req.Context().Done():
			t.Stop()
			return nil, req.Context().Err()
		}
	}
	start := a.cfg.Clock.Now()
	resp, err := a.base.RoundTrip(req)
	latency := a.cfg.Clock.Now().Sub(start)
	if err != nil {
		return nil, err
	}
	target := time.Duration(float64(latency) / a.cfg.TargetConcurrency)
	a.mu.Lock()
	nd := max((a.delay+target)/2, target)
	nd = min(max(a.cfg.MinDelay, nd), a.cfg.MaxDelay)
	if resp.StatusCode == http.StatusOK || nd > a.delay {
		a.delay = nd
	}
	a.mu.Unlock()
	return resp, nil
}
