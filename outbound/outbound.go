package outbound

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/breaker"
	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// ErrInvalidConfig is wrapped by New for a Config it cannot use; the
// message names the field.
var ErrInvalidConfig = errors.New("outbound: invalid config")

// ErrEmptyKey: Do was called without a key, or a request has no host.
var ErrEmptyKey = errors.New("outbound: empty key")

// ErrNotRetryable is wrapped around a request that cannot be retried
// (a body without GetBody) when the only way on was a retry.
var ErrNotRetryable = errors.New("outbound: request body cannot be replayed")

// Config configures a Client: a plain value that New copies. Every zero
// field means its documented default, so the zero Config is a client over
// http.DefaultTransport with an in-memory store.
type Config struct {
	// Base sends the requests. Nil means http.DefaultTransport.
	Base http.RoundTripper
	// Store keeps each key's pacing state (and, with SharedRate, its
	// adapted rate). Processes that share a store share every key's pace
	// and pauses. Nil means a new in-memory store of this client alone.
	Store store.RateStore
	// Clock times waits and latencies. Nil means the real clock. The
	// store's clock decides pacing.
	Clock clock.Clock
	// Prefix is prepended to every store key. Empty means "outbound:".
	Prefix string
	// Profiles maps host keys (see HostKey) to a provider profile name:
	// every host of a profile shares one key, the profile name.
	Profiles map[string]string
	// MaxConcurrent bounds the calls in flight per key (the bulkhead).
	// Zero means no bound.
	MaxConcurrent int
	// Timeout bounds a whole call, retries included. Zero means none
	// beyond the caller's context.
	Timeout time.Duration
	// Burst is how many attempts a key may send at once after a quiet
	// spell. Zero means 1: strict pacing.
	Burst int64
	// MaxReserve is how far ahead an attempt may book its turn; longer
	// waits poll the store again. A turn booked before another process
	// synced a pause into the store is not cancelled, so this bounds how
	// late such a turn may go out. Zero means 100 ms.
	MaxReserve time.Duration
	// AIMD configures each key's rate controller.
	AIMD aimd.Config
	// SharedRate keeps each key's adapted rate in Store and paces every
	// process sharing the store on one GCRA at that rate, so that the
	// fleet adapts as one. Without it each process adapts and paces its
	// own share (a pacing key of its own, see Instance); pauses are
	// shared either way.
	SharedRate bool
	// Instance names this client among those sharing Store, for its own
	// pacing keys. Empty means a random name.
	Instance string
	// Idempotent says whether a request may be retried after an outcome
	// that leaves it unknown (a 5xx, a timeout after sending). Nil means
	// GET, HEAD, OPTIONS, TRACE, PUT and DELETE are, and requests carrying
	// an Idempotency-Key header.
	Idempotent func(*http.Request) bool
	// IdleTTL drops a key's local state once it has been idle this long
	// and MaxKeys keys are held. Zero means 10 minutes; MaxKeys zero
	// means 10,000.
	IdleTTL time.Duration
	MaxKeys int
	// Metrics, when set, registers the client's Prometheus metrics.
	Metrics Registerer
	// KeyLabels labels metrics of Do keys with the raw key. Without it they
	// are labelled "other"; host and profile keys are always labelled with
	// the host or profile.
	KeyLabels bool
	// Signal configures the response parser (its Retry-After clamp).
	Signal signal.Config
	// Retry configures each key's retries and retry budget; Breaker each
	// key's circuit breaker.
	Retry   retry.Config
	Breaker breaker.Config
	// OnBreakerEvent, if set, receives every breaker transition (no
	// payloads or credentials: see breaker.Event) with its key, to
	// persist or show. It runs under the key's breaker lock: keep it
	// quick and do not call the client from it.
	OnBreakerEvent func(key string, e breaker.Event)
	// Rand is the jitter source of retry backoff. Nil means math/rand/v2.
	Rand retry.Rand
}

// Client is an outbound client. It is safe for concurrent use. Build it with
// New; the zero value is not usable.
type Client struct {
	base       http.RoundTripper
	store      store.RateStore
	clk        clock.Clock
	prefix     string
	profiles   map[string]string
	maxConc    int
	timeout    time.Duration
	burst      int64
	maxReserve time.Duration
	ctl        *aimd.Controller
	shared     bool
	idempotent func(*http.Request) bool
	idleTTL    time.Duration
	maxKeys    int
	keyLabels  bool
	instance   string
	parser     *signal.Parser
	metrics    *metrics
	policy     policy

	mu   sync.Mutex
	keys map[string]*keyState

	requests, throttles, retries, rejected atomic.Int64
}

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	switch {
	case cfg.MaxConcurrent < 0:
		return nil, fmt.Errorf("%w: MaxConcurrent must be >= 0, got %d", ErrInvalidConfig, cfg.MaxConcurrent)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("%w: Timeout must be >= 0, got %v", ErrInvalidConfig, cfg.Timeout)
	case cfg.Burst < 0:
		return nil, fmt.Errorf("%w: Burst must be >= 0, got %d", ErrInvalidConfig, cfg.Burst)
	case cfg.MaxReserve < 0:
		return nil, fmt.Errorf("%w: MaxReserve must be >= 0, got %v", ErrInvalidConfig, cfg.MaxReserve)
	case cfg.IdleTTL < 0 || cfg.MaxKeys < 0:
		return nil, fmt.Errorf("%w: IdleTTL and MaxKeys must be >= 0", ErrInvalidConfig)
	}
	for h, p := range cfg.Profiles {
		if h == "" || p == "" {
			return nil, fmt.Errorf("%w: profiles: empty host or profile name (%q: %q)", ErrInvalidConfig, h, p)
		}
	}
	ctl, err := aimd.New(cfg.AIMD)
	if err != nil {
		return nil, fmt.Errorf("%w: aimd: %w", ErrInvalidConfig, err)
	}
	parser, err := signal.New(cfg.Signal)
	if err != nil {
		return nil, fmt.Errorf("%w: signal: %w", ErrInvalidConfig, err)
	}
	pol, err := newPolicy(cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{
		base: cfg.Base, store: cfg.Store, clk: clock.Or(cfg.Clock), prefix: cfg.Prefix,
		maxConc: cfg.MaxConcurrent, timeout: cfg.Timeout, burst: cfg.Burst, maxReserve: cfg.MaxReserve,
		ctl: ctl, shared: cfg.SharedRate, idempotent: cfg.Idempotent, idleTTL: cfg.IdleTTL,
		maxKeys: cfg.MaxKeys, keyLabels: cfg.KeyLabels, parser: parser, policy: pol,
		keys: make(map[string]*keyState), instance: cfg.Instance,
	}
	if c.instance == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.instance = hex.EncodeToString(b[:])
	}
	if c.base == nil {
		c.base = http.DefaultTransport
	}
	if c.store == nil {
		c.store = memstore.New(memstore.Config{Clock: cfg.Clock})
	}
	if c.prefix == "" {
		c.prefix = "outbound:"
	}
	if len(cfg.Profiles) > 0 {
		c.profiles = make(map[string]string, len(cfg.Profiles))
		for h, p := range cfg.Profiles {
			c.profiles[h] = p
		}
	}
	if c.burst == 0 {
		c.burst = 1
	}
	if c.maxReserve == 0 {
		c.maxReserve = 100 * time.Millisecond
	}
	if c.idempotent == nil {
		c.idempotent = defaultIdempotent
	}
	if c.idleTTL == 0 {
		c.idleTTL = 10 * time.Minute
	}
	if c.maxKeys == 0 {
		c.maxKeys = 10000
	}
	if cfg.Metrics != nil {
		m, err := newMetrics(cfg.Metrics)
		if err != nil {
			return nil, fmt.Errorf("outbound: metrics: %w", err)
		}
		c.metrics = m
	}
	return c, nil
}

func defaultIdempotent(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete, "":
		return true
	}
	return r.Header.Get("Idempotency-Key") != ""
}

// keyState is one key's local state.
type keyState struct {
	key, label string
	paceKey    string // the pacing GCRA: this client's own, or the fleet's with SharedRate
	fleetKey   string // the fleet's pacing GCRA
	pauseKey   string // the fleet's pause, shared by every client of the store
	rateKey    string
	budgetKey  string        // the fleet's learned window budget
	sem        chan struct{} // the bulkhead; nil without MaxConcurrent
	inFlight   atomic.Int64
	keyPolicy  *keyPolicy

	mu          sync.Mutex
	adapt       aimd.State
	syncedUntil int64   // µs: the store already holds a pause until then
	costPerCall float64 // latest actual cost of a call, for cost-bucket hints
	weight      usedWeight
	lastActive  int64   // µs
	latency     float64 // EWMA of attempt latency, µs
	// minLatency is the fastest success since minLatencyAt (µs).
	minLatency, minLatencyAt int64

	requests, successes, throttles, errors, retries, rejected int64
}

func (c *Client) now() int64 { return c.clk.Now().UnixMicro() }

// KeyFor returns the key a request is paced under: its profile's name when
// its host belongs to a profile, otherwise its host key.
func (c *Client) KeyFor(req *http.Request) string {
	k, _ := c.keyFor(req)
	return k
}

func (c *Client) keyFor(req *http.Request) (key, label string) {
	h := HostKey(req.URL)
	if p, ok := c.profiles[h]; ok {
		return p, p
	}
	return h, h
}

func (c *Client) state(key, label string) *keyState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ks, ok := c.keys[key]; ok {
		return ks
	}
	now := c.now()
	if len(c.keys) >= c.maxKeys {
		c.evictLocked(now)
	}
	// Every store key of one key carries the same hash tag, so that a
	// TakeAll over them runs on one Redis Cluster slot.
	tagged := c.prefix + "{" + braces.Replace(key) + "}"
	pace := tagged + "#" + c.instance
	if c.shared {
		pace = tagged
	}
	ks := &keyState{key: key, label: label, paceKey: pace, fleetKey: tagged, pauseKey: tagged + ":pause", rateKey: tagged + ":rate", budgetKey: tagged + ":budget",
		adapt: c.ctl.Init(), lastActive: now, keyPolicy: c.policy.newKey(key)}
	if c.maxConc > 0 {
		ks.sem = make(chan struct{}, c.maxConc)
	}
	c.keys[key] = ks
	return ks
}

// braces escapes a key's braces, so that the hash tag is always the whole
// key.
var braces = strings.NewReplacer("{", "%7B", "}", "%7D", "%", "%25")

// evictLocked drops keys idle for IdleTTL with nothing in flight. Their
// pacing state lives on in the store, so nothing is given away.
func (c *Client) evictLocked(now int64) {
	cut := now - c.idleTTL.Microseconds()
	for k, ks := range c.keys {
		ks.mu.Lock()
		idle := ks.lastActive < cut && ks.inFlight.Load() == 0
		ks.mu.Unlock()
		if idle {
			delete(c.keys, k)
		}
	}
}

// Rate returns key's current adapted rate in requests per second and
// whether the client holds state for the key.
func (c *Client) Rate(key string) (float64, bool) {
	c.mu.Lock()
	ks, ok := c.keys[key]
	c.mu.Unlock()
	if !ok {
		return 0, false
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return c.effectiveRate(ks), true
}

// effectiveRate is the controller's rate under the provider's hint.
func (c *Client) effectiveRate(ks *keyState) float64 {
	return c.ctl.Rate(&ks.adapt)
}

// pacing returns the GCRA limit for rate r.
func (c *Client) pacing(r float64) store.Limit {
	r = min(max(r, 1e-3), 1e6)
	return store.Limit{Name: "outbound", Rate: 1, Period: time.Duration(float64(time.Second) / r), Burst: c.burst}
}

// pauseLimit is the fleet-wide pause of a key: so fast (a million a
// second, a millisecond's burst) that it never holds anything back, until a
// Sync with nothing remaining pushes it into the future until a
// Retry-After, a ban or an exhausted quota has passed. Every attempt takes
// it together with its pacing limit, all or nothing, in one store call.
var pauseLimit = store.Limit{Name: "outbound-pause", Rate: 1, Period: time.Microsecond, Burst: 1000}

// sharedRateLimit encodes a rate (in thousandths of a request per second)
// as the remaining units of a long fixed window: Sync writes it, a peek
// reads it. A fresh window (nothing written, or written more than a day
// ago) reads as full: no shared rate.
var sharedRateLimit = store.Limit{Name: "outbound-rate", Algorithm: store.FixedWindow, Rate: 1 << 40, Period: 24 * time.Hour}

func (c *Client) readShared(ctx context.Context, ks *keyState) (float64, bool) {
	r, err := c.store.Take(ctx, store.TakeParams{Key: ks.rateKey, Limit: sharedRateLimit, Cost: 0})
	if err != nil || r.Remaining >= sharedRateLimit.Rate || r.Remaining <= 0 {
		return 0, false
	}
	return float64(r.Remaining) / 1000, true
}

func (c *Client) writeShared(ctx context.Context, ks *keyState, rate float64) {
	v := int64(math.Round(rate * 1000))
	v = min(max(v, 1), sharedRateLimit.Rate-1)
	_, _ = c.store.Sync(ctx, store.SyncParams{Key: ks.rateKey, Limit: sharedRateLimit, Remaining: v})
}

func sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait blocks until the key's pacing lets one attempt through.
func (c *Client) wait(ctx context.Context, ks *keyState) error {
	start := c.clk.Now()
	defer func() {
		if c.metrics != nil {
			c.metrics.wait.WithLabelValues(ks.label).Observe(c.clk.Now().Sub(start).Seconds())
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.shared {
			if r, ok := c.readShared(ctx, ks); ok {
				ks.mu.Lock()
				if ks.adapt.Started {
					ks.adapt.Rate = r
				}
				ks.mu.Unlock()
			}
		}
		ks.mu.Lock()
		now := c.now()
		until, paused := ks.adapt.Paused(now)
		rate := c.effectiveRate(ks)
		paceKey := ks.paceKey
		if ks.adapt.Hint > 0 {
			// The provider stated its rate: that is the fleet's rate,
			// so every process paces on the fleet's GCRA.
			paceKey = ks.fleetKey
		}
		ks.mu.Unlock()
		if paused {
			if err := sleep(ctx, c.clk, time.Duration(until-now)*time.Microsecond); err != nil {
				return err
			}
			continue
		}
		maxDelay := c.maxReserve
		if dl, ok := ctx.Deadline(); ok {
			maxDelay = min(maxDelay, max(dl.Sub(c.clk.Now()), 0))
		}
		lim := c.pacing(rate)
		items := [2]store.Item{
			{Key: paceKey, Limit: lim, Cost: 1},
			{Key: ks.pauseKey, Limit: pauseLimit, Cost: 1},
		}
		all, err := c.store.TakeAll(ctx, store.TakeAllParams{Items: items[:], MaxDelay: maxDelay})
		if err != nil {
			return fmt.Errorf("outbound: key %q: rate store: %w", ks.key, err)
		}
		if len(all.Results) != len(items) {
			return fmt.Errorf("outbound: key %q: rate store answered %d results for %d items", ks.key, len(all.Results), len(items))
		}
		if all.Allowed {
			delay := max(all.Results[0].Delay, all.Results[1].Delay)
			if err := sleep(ctx, c.clk, delay); err != nil {
				_, _ = c.store.Settle(context.WithoutCancel(ctx), store.SettleParams{
					Key: paceKey, Limit: lim, Reserved: 1, Actual: 0, ReservedAt: all.Results[0].At,
				})
				return err
			}
			if delay > 0 {
				// A pause may have begun, here or in another process,
				// while this turn was booked: a turn booked before a
				// Retry-After must not be spent during it.
				ks.mu.Lock()
				_, paused := ks.adapt.Paused(c.now())
				ks.mu.Unlock()
				if paused {
					continue
				}
				p, err := c.store.Take(ctx, store.TakeParams{Key: ks.pauseKey, Limit: pauseLimit, Cost: 0})
				if err != nil {
					return fmt.Errorf("outbound: key %q: rate store: %w", ks.key, err)
				}
				if !p.Allowed && p.RetryAfter > 0 {
					c.notePause(ctx, ks, p.RetryAfter)
					continue
				}
			}
			return nil
		}
		var wait time.Duration
		for _, r := range all.Results {
			if !r.Allowed {
				wait = max(wait, r.RetryAfter)
			}
		}
		if p := all.Results[1]; !p.Allowed && p.RetryAfter > 0 {
			c.notePause(ctx, ks, p.RetryAfter)
		}
		if err := sleep(ctx, c.clk, min(wait, max(c.maxReserve, time.Millisecond))); err != nil {
			return err
		}
	}
}

// notePause tells the key's controller about a pause another process
// synced into the store, as if this process had been told the Retry-After
// itself: the key pauses and its rate decreases once for the episode, so
// that the whole fleet slows down, not only the process that was
// throttled.
func (c *Client) notePause(ctx context.Context, ks *keyState, d time.Duration) {
	ks.mu.Lock()
	now := c.now()
	until := now + d.Microseconds()
	// Ours already (or one we have heard of): nothing new.
	if ks.adapt.PausedUntil >= until-int64(time.Millisecond/time.Microsecond) {
		ks.mu.Unlock()
		return
	}
	c.ctl.Observe(&ks.adapt, now, aimd.Sample{Outcome: aimd.Failed, RetryAfter: d.Microseconds()})
	if until > ks.syncedUntil {
		ks.syncedUntil = until
	}
	window := ks.weight.window
	ks.mu.Unlock()
	if window > 0 {
		// The process that was refused may have learned the window's
		// budget from it: take it up.
		c.readBudget(ctx, ks, window)
	}
}

// budgetLimit keeps a key's learned window budget (see usedWeight) in the
// store for every process sharing it, encoded like sharedRateLimit, under a
// key that names the window's length (a budget learned for a minute's
// window means nothing for a second's). A stored budget lasts until the end
// of the UTC day it was written in (fixed windows align to the epoch); the
// process that learned it keeps it, and its next refusal writes it again.
var budgetLimit = store.Limit{Name: "outbound-budget", Algorithm: store.FixedWindow, Rate: 1 << 40, Period: 24 * time.Hour}

func budgetKey(ks *keyState, window int64) string {
	return ks.budgetKey + ":" + strconv.FormatInt(window, 10)
}

func (c *Client) readBudget(ctx context.Context, ks *keyState, window int64) {
	r, err := c.store.Take(ctx, store.TakeParams{Key: budgetKey(ks, window), Limit: budgetLimit, Cost: 0})
	if err != nil || r.Remaining >= budgetLimit.Rate || r.Remaining <= 0 {
		return
	}
	ks.mu.Lock()
	if ks.weight.window == window { // still the window it was learned for
		ks.weight.budget = r.Remaining
	}
	ks.mu.Unlock()
}

func (c *Client) writeBudget(ctx context.Context, ks *keyState, window, budget int64) {
	v := min(max(budget, 1), budgetLimit.Rate-1)
	_, _ = c.store.Sync(ctx, store.SyncParams{Key: budgetKey(ks, window), Limit: budgetLimit, Remaining: v})
}

// attemptResult is what one attempt produced.
type attemptResult struct {
	resp *http.Response // RoundTrip only
	in   signal.Response
}

// call runs the layers for one call. attempt sends one attempt; replayable
// says whether a second attempt is possible at all.
func (c *Client) call(ctx context.Context, ks *keyState, idempotent, replayable bool, attempt func(context.Context) attemptResult) (attemptResult, error) {
	// 1. bulkhead
	if ks.sem != nil {
		select {
		case ks.sem <- struct{}{}:
			defer func() { <-ks.sem }()
		case <-ctx.Done():
			return attemptResult{}, ctx.Err()
		}
	}
	ks.inFlight.Add(1)
	defer ks.inFlight.Add(-1)
	c.requests.Add(1)
	ks.mu.Lock()
	ks.requests++
	ks.mu.Unlock()
	var last attemptResult
	var rep signal.Report
	for n := 1; ; n++ {
		// 3. rate limiter
		if err := c.wait(ctx, ks); err != nil {
			return last, err
		}
		// 4. circuit breaker: an open breaker fails at once, without
		// touching the retry budget.
		done, err := ks.keyPolicy.allow(c.now())
		if err != nil {
			c.reject(ks, "breaker_open")
			return last, err
		}
		// 6. the request
		begin := c.clk.Now()
		res := attempt(ctx)
		end := c.clk.Now()
		c.parser.ParseTo(&rep, end.UnixMicro(), res.in)
		done(end.UnixMicro(), &rep)
		c.observe(ctx, ks, &rep, end.Sub(begin), end.UnixMicro())
		if last.resp != nil {
			_ = last.resp.Body.Close()
		}
		last = res
		// 5. retry: every outcome goes to the budget (successes refill
		// it); only transient failures are retried.
		d := ks.keyPolicy.retry(n, &rep, idempotent, c.now())
		if !d.Retry {
			if errors.Is(d.Stop, retry.ErrBudgetExhausted) {
				c.reject(ks, "budget_exhausted")
				return last, &retry.Error{Reason: d.Stop, Attempts: n, Last: lastError(res)}
			}
			return last, nil
		}
		if !replayable {
			return last, nil
		}
		if err := sleep(ctx, c.clk, time.Duration(d.Delay)*time.Microsecond); err != nil {
			return last, nil
		}
		c.retries.Add(1)
		ks.mu.Lock()
		ks.retries++
		ks.mu.Unlock()
		if c.metrics != nil {
			c.metrics.retries.WithLabelValues(ks.label).Inc()
		}
	}
}

// lastError is the error that stands for an attempt's result.
func lastError(r attemptResult) error {
	if r.in.Err != nil {
		return r.in.Err
	}
	return &StatusError{Status: r.in.Status, Header: r.in.Header}
}

func (c *Client) reject(ks *keyState, reason string) {
	c.rejected.Add(1)
	ks.mu.Lock()
	ks.rejected++
	ks.mu.Unlock()
	if c.metrics != nil {
		c.metrics.rejected.WithLabelValues(ks.label, reason).Inc()
	}
}

// observe feeds one attempt's report to the key's controller and syncs the
// key's quota in the store.
func (c *Client) observe(ctx context.Context, ks *keyState, rep *signal.Report, latency time.Duration, now int64) {
	if rep.Class == signal.ClassCanceled {
		return
	}
	s := aimd.Sample{Latency: latency.Microseconds()}
	switch {
	case rep.Throttled:
		s.Outcome = aimd.Throttled
	case rep.Class == signal.ClassSuccess:
		s.Outcome = aimd.Success
	case rep.Unknown || rep.Timeout:
		s.Outcome = aimd.Overloaded
	default:
		s.Outcome = aimd.Failed
	}
	if rep.HasRetryAfter && (rep.Throttled || rep.Class != signal.ClassSuccess) {
		s.RetryAfter = rep.RetryAfter
	}
	shared, haveShared := 0.0, false
	if c.shared {
		// Read the fleet's rate just before adapting it, so that this
		// process's change applies to the latest value.
		shared, haveShared = c.readShared(ctx, ks)
	}
	ks.mu.Lock()
	if haveShared && ks.adapt.Started {
		ks.adapt.Rate = shared
	}
	budget := ks.weight.budget
	s.Hint = c.hint(ks, rep)
	budgetWindow := ks.weight.window
	if ks.weight.budget == budget {
		budget = 0
	} else {
		budget = ks.weight.budget // learned here: tell the fleet
	}
	ks.lastActive = now
	switch s.Outcome {
	case aimd.Success:
		ks.successes++
	case aimd.Throttled:
		ks.throttles++
	default:
		ks.errors++
	}
	lat := float64(s.Latency)
	if ks.latency == 0 {
		ks.latency = lat
	} else {
		ks.latency += 0.2 * (lat - ks.latency)
	}
	if s.Outcome == aimd.Success {
		// Anchor the latency target to the fastest recent success (the
		// provider's base latency, as TCP Vegas and BBR do) so that a
		// latency growing slowly with load cannot drag the target along.
		if ks.minLatency == 0 || s.Latency < ks.minLatency || now-ks.minLatencyAt > minLatencyWindow {
			ks.minLatency, ks.minLatencyAt = max(s.Latency, 1), now
		}
		if anchor := float64(ks.minLatency) * targetOverMin; ks.adapt.Target > anchor {
			ks.adapt.Target = anchor
		}
	}
	d := c.ctl.Observe(&ks.adapt, now, s)
	rate := c.effectiveRate(ks)
	// A pause (Retry-After, a ban, an exhausted quota) goes to the store
	// once per episode, so every process sharing the key waits too.
	var pause int64
	if d.PausedUntil > now && d.PausedUntil > ks.syncedUntil {
		pause = d.PausedUntil - now
		ks.syncedUntil = d.PausedUntil
	} else if rep.Known&signal.FieldRemaining != 0 && rep.Remaining == 0 &&
		rep.Known&signal.FieldResetAfter != 0 && now+rep.ResetAfter > ks.syncedUntil {
		pause = rep.ResetAfter
		ks.syncedUntil = now + rep.ResetAfter
	}
	ks.mu.Unlock()
	if s.Outcome == aimd.Throttled {
		c.throttles.Add(1)
	}
	if pause > 0 {
		_, _ = c.store.Sync(ctx, store.SyncParams{
			Key: ks.pauseKey, Limit: pauseLimit, Remaining: 0, ResetAfter: time.Duration(pause) * time.Microsecond,
		})
	}
	if c.shared && d.Change != aimd.Unchanged {
		c.writeShared(ctx, ks, rate)
	}
	if budget > 0 {
		c.writeBudget(ctx, ks, budgetWindow, budget)
	}
	if c.metrics != nil {
		c.metrics.observe(ks.label, s.Outcome, rate)
	}
}

// The latency target never exceeds targetOverMin times the fastest success
// of the last minLatencyWindow.
const (
	targetOverMin    = 2
	minLatencyWindow = int64(30 * time.Second / time.Microsecond)
)

// hint returns the sustainable rate the provider reported, in calls per
// second, or 0: a quota over a window, or a cost bucket's restore rate
// over the cost of a call. ks.mu is held.
func (c *Client) hint(ks *keyState, rep *signal.Report) float64 {
	if rep.HasCost && rep.CostActual > 0 {
		ks.costPerCall = rep.CostActual
	}
	if rep.RestoreRate > 0 && ks.costPerCall > 0 {
		return rep.RestoreRate / ks.costPerCall
	}
	if h := ks.weight.observe(rep); h > 0 {
		return h
	}
	const both = signal.FieldLimit | signal.FieldWindow
	if rep.Known&both == both && rep.Window > 0 && rep.Limit > 0 {
		return float64(rep.Limit) / (float64(rep.Window) / 1e6)
	}
	return 0
}

// RoundTrip sends req through the layers under req's key.
func (c *Client) RoundTrip(req *http.Request) (*http.Response, error) {
	key, label := c.keyFor(req)
	if key == "" {
		return nil, fmt.Errorf("%w: request to %q has no host", ErrEmptyKey, req.URL)
	}
	if err := store.CheckKey(key); err != nil {
		return nil, fmt.Errorf("outbound: %w", err)
	}
	ks := c.state(key, label)
	ctx := req.Context()
	cancel := context.CancelFunc(func() {})
	if c.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	first := true
	res, err := c.call(ctx, ks, c.idempotent(req), replayable, func(ctx context.Context) attemptResult {
		r := req.WithContext(ctx)
		if !first && req.GetBody != nil {
			b, err := req.GetBody()
			if err != nil {
				return attemptResult{in: signal.Response{Err: err}}
			}
			r.Body = b
		}
		first = false
		resp, err := c.base.RoundTrip(r)
		if err != nil {
			return attemptResult{in: signal.Response{Err: err}}
		}
		return attemptResult{resp: resp, in: signal.Response{Status: resp.StatusCode, Header: resp.Header, Body: peekJSON(resp)}}
	})
	if err == nil && res.resp == nil && res.in.Err != nil {
		err = res.in.Err
	}
	if err != nil {
		cancel()
		if res.resp != nil {
			_ = res.resp.Body.Close()
		}
		return nil, err
	}
	res.resp.Body = &cancelBody{ReadCloser: res.resp.Body, cancel: cancel}
	return res.resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// maxPeek bounds the JSON body read for GraphQL signals.
const maxPeek = 256 << 10

// peekJSON reads a JSON body of at most maxPeek bytes for the parser and
// puts it back for the caller; other bodies are left alone.
func peekJSON(resp *http.Response) []byte {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/json" && mt != "application/graphql-response+json" {
		return nil
	}
	if resp.ContentLength > maxPeek {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPeek+1))
	rest := resp.Body
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), rest), rest}
	if err != nil || len(b) > maxPeek {
		return nil
	}
	return b
}

// StatusError lets a Do function report a response it got: the status and
// headers are read like an HTTP response's. It is a plain value; the zero
// value is a response without a status, read as a failed call.
type StatusError struct {
	Status int
	Header http.Header
	Body   []byte
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("outbound: status %d", e.Status)
}

// DoOpts are per-call options of Do. The zero value is a call that is not
// idempotent.
type DoOpts struct {
	// Idempotent says the call may be retried when its outcome is
	// unknown (a timeout after sending, a 5xx).
	Idempotent bool
}

// Do runs fn through the layers under key. fn reports its outcome by its
// error: nil is a success, a *StatusError is read as an HTTP response, and
// any other error is classified by signal.ClassifyError. Do returns the
// last attempt's error, or the error of a layer that stopped the call.
func (c *Client) Do(ctx context.Context, key string, opts *DoOpts, fn func(context.Context) error) error {
	if key == "" {
		return ErrEmptyKey
	}
	// The key names a limiter key and a breaker: the identifier rule
	// applies (store.CheckID).
	if err := store.CheckKey(key); err != nil {
		return fmt.Errorf("outbound: %w", err)
	}
	label := "other"
	if c.keyLabels {
		label = key
	}
	ks := c.state(key, label)
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var last error
	_, err := c.call(ctx, ks, opts != nil && opts.Idempotent, true, func(ctx context.Context) attemptResult {
		last = fn(ctx)
		var se *StatusError
		switch {
		case last == nil:
			return attemptResult{in: signal.Response{Status: http.StatusOK}}
		case errors.As(last, &se):
			return attemptResult{in: signal.Response{Status: se.Status, Header: se.Header, Body: se.Body}}
		}
		return attemptResult{in: signal.Response{Err: last}}
	})
	if err != nil {
		return err
	}
	return last
}

// p95 is the nearest-rank 95th percentile of the latencies (µs) in the
// controller's ring, 0 when it holds none.
func p95(s *aimd.State) int64 {
	n := min(max(s.N, 0), aimd.RingSize)
	if n == 0 {
		return 0
	}
	buf := make([]int64, 0, aimd.RingSize)
	for i := range n {
		buf = append(buf, s.Ring[((s.Next-1-i)%aimd.RingSize+aimd.RingSize)%aimd.RingSize])
	}
	slices.Sort(buf)
	return buf[(95*n+99)/100-1]
}

// KeySnapshot is one key's state (seed 001 section 11): a plain value, a
// copy taken under the key's lock.
type KeySnapshot struct {
	Key      string `json:"key"`
	Label    string `json:"label"`
	InFlight int64  `json:"in_flight"`
	// Rate is the adapted rate in requests per second, Hint the
	// provider-reported rate capping it (0: none), Probing whether the
	// controller is still in slow start.
	Rate    float64 `json:"rate"`
	Hint    float64 `json:"hint"`
	Probing bool    `json:"probing"`
	// PausedFor is how long the key is paused by a Retry-After (0: not
	// paused); nextEarliest - now in seed 001's terms.
	PausedFor time.Duration `json:"paused_for"`
	// AvgLatency is an EWMA of attempt latency; P95Latency the 95th
	// percentile of the controller's recent successes (0 before any).
	AvgLatency time.Duration   `json:"avg_latency"`
	P95Latency time.Duration   `json:"p95_latency"`
	Requests   int64           `json:"requests"`
	Successes  int64           `json:"successes"`
	Throttles  int64           `json:"throttles"`
	Errors     int64           `json:"errors"`
	Retries    int64           `json:"retries"`
	Rejected   int64           `json:"rejected"`
	Breaker    BreakerSnapshot `json:"breaker"`
	LastActive time.Time       `json:"last_active"`
}

// Snapshot is the client's state at one time: a plain value.
type Snapshot struct {
	At        time.Time `json:"at"`
	Requests  int64     `json:"requests"`
	Throttles int64     `json:"throttles"`
	Retries   int64     `json:"retries"`
	// Rejected counts calls stopped by an open breaker or an exhausted
	// retry budget.
	Rejected         int64         `json:"rejected"`
	OpenBreakers     int           `json:"open_breakers"`
	HalfOpenBreakers int           `json:"half_open_breakers"`
	Keys             []KeySnapshot `json:"keys"`
}

// Snapshot returns the state of the max most recently active keys (all
// when max <= 0), most recent first, with client-wide counters.
func (c *Client) Snapshot(max int) Snapshot {
	now := c.now()
	c.mu.Lock()
	states := make([]*keyState, 0, len(c.keys))
	for _, ks := range c.keys {
		states = append(states, ks)
	}
	c.mu.Unlock()
	s := Snapshot{At: time.UnixMicro(now), Requests: c.requests.Load(), Throttles: c.throttles.Load(),
		Retries: c.retries.Load(), Rejected: c.rejected.Load()}
	for _, ks := range states {
		ks.mu.Lock()
		k := KeySnapshot{
			Key: ks.key, Label: ks.label, InFlight: ks.inFlight.Load(),
			Rate: c.effectiveRate(ks), Hint: ks.adapt.Hint, Probing: ks.adapt.Probing,
			AvgLatency: time.Duration(ks.latency) * time.Microsecond,
			Requests:   ks.requests, Successes: ks.successes, Throttles: ks.throttles, Errors: ks.errors,
			Retries: ks.retries, Rejected: ks.rejected, LastActive: time.UnixMicro(ks.lastActive),
		}
		if until, ok := ks.adapt.Paused(now); ok {
			k.PausedFor = time.Duration(until-now) * time.Microsecond
		}
		k.P95Latency = time.Duration(p95(&ks.adapt)) * time.Microsecond
		ks.mu.Unlock()
		k.Breaker = ks.keyPolicy.snapshot(now)
		switch k.Breaker.State {
		case breaker.Open.String():
			s.OpenBreakers++
		case breaker.HalfOpen.String():
			s.HalfOpenBreakers++
		}
		s.Keys = append(s.Keys, k)
	}
	slices.SortFunc(s.Keys, func(a, b KeySnapshot) int { return b.LastActive.Compare(a.LastActive) })
	if max > 0 && len(s.Keys) > max {
		s.Keys = s.Keys[:max]
	}
	return s
}
