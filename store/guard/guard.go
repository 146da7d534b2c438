// Package guard keeps rate decisions answering when the shared store is slow
// or down, and tells a store that is down from one that was slow once.
//
// A guard.Store wraps a shared store.RateStore (Redis, PostgreSQL) and gives
// every call a deadline. The guard waits for the store no longer than that
// deadline, even if the backend takes longer to give the call up.
//
// # The deadline adapts
//
// A call that times out is denied, so the deadline must hold for a slow but
// healthy store: it follows the latency the store shows. It is
// Config.TimeoutFactor (4) times the 99th percentile latency of the last
// 1024 calls the store answered, never below Config.Timeout (the floor,
// default 1s) nor above Config.MaxTimeout (default 10 times the floor). It
// rises as soon as it is recomputed (every 64 answers) and comes down by
// at most half each time. So a store that grows slower keeps answering
// within its deadline and is never declared down while its latency grows
// no faster than the deadline follows; one whose calls all take longer
// than the deadline it earned is, as a dead one is. Timeouts do not
// lengthen the deadline, so a store that goes silent is found out within
// it, and a probe of a store held down gets the floor. MaxTimeout equal to
// Timeout fixes the deadline.

// # Health, not latency
//
// The store is declared down
//
//   - at once on a connection error (refused, reset, EOF, a closed pool:
//     any error that is neither a timeout nor an answer about the request);
//   - on timeouts sustained across a window: at least Config.MinTimeouts
//     calls timed out and none answered for Config.Window (default: 3
//     timeouts and no answer for 2s).
//
// One slow call never declares it down. A call that times out while the
// store is not down is answered with store.FallbackTimeout: denied, in
// every outage mode, with RetryAfter one deadline. The store may still apply
// such a call, so admitting it (fail_open, or local on top of the shared
// grants) could exceed the limit while the store is up.
//
// Errors about the request (store.ErrCostExceedsLimit, ErrInvalidLimit,
// ErrNegativeCost, ErrEmptyKey, ErrInvalidValue, ErrInvalidID, ErrOutOfRange,
// and the lease answers ErrLeaseNotHeld, ErrStaleToken, ErrInvalidLease)
// pass through unchanged
// and count as the store answering, as does the caller's own context ending
// (which counts as nothing).
//
// # Outage modes
//
// While the store is down, each call is decided by its limit's outage mode
// and its result says so (Result.Fallback is store.FallbackStoreDown,
// Result.FallbackMode the mode):
//
//   - store.FailClosed: denied, with RetryAfter until the store is tried
//     again.
//   - store.FailOpen: allowed (Remaining is unknown and reported as 0).
//   - store.FailLocal: decided by a store in this process that enforces the
//     limit scaled by Outage.Share, this process's share of the fleet's
//     limit. When the store is back, the first call for a key that was
//     granted locally first charges into the shared key what the local
//     grants still weigh (the units the local store has not yet recovered),
//     so local plus shared grants never exceed the limit plus the local
//     share, however often the store comes and goes.
//
// While down, the guard stops calling the store for a short backoff (100ms,
// doubling to 250ms) and decides every call by its outage mode at once;
// then a single call probes the store, and the first success returns every
// call to the store. So a dead store costs callers at most one timeout (or
// MinTimeouts of them, for a silent one), and a healed one is back in use
// within about a quarter of a second.
//
// Every fallback is reported to Config.OnFallback (for metrics) and logged
// to Config.Logger at most once a second per limit and reason, with how
// many were not logged; the store going down and coming back are always
// logged.
//
// Store.Leases guards the primary's lease operations with the same timeout
// and health state; leases always fail closed.
package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// ErrUnavailable wraps the store's error when a call could not be decided
// by the store and has no outage mode (Reset; Settle and Sync that timed
// out while the store is up; leases).
var ErrUnavailable = errors.New("guard: store unavailable")

// Defaults for the zero fields of Config.
const (
	// DefaultTimeout bounds each call to the shared store.
	DefaultTimeout = time.Second
	// DefaultWindow is how long the store must have answered nothing.
	DefaultWindow = 2 * time.Second
	// DefaultMinTimeouts is how many calls must have timed out since the
	// last answer.
	DefaultMinTimeouts = 3
	// DefaultTimeoutFactor multiplies the 99th percentile latency into the
	// deadline.
	DefaultTimeoutFactor = 4
	// DefaultMaxTimeoutRatio is the default MaxTimeout over Timeout.
	DefaultMaxTimeoutRatio = 10
)

// Config configures a Store. Zero fields take the documented defaults.
type Config struct {
	// Timeout is the floor of every call's deadline (see "The deadline
	// adapts"). Zero means DefaultTimeout (1s).
	Timeout time.Duration
	// MaxTimeout is the ceiling of the deadline: the longest a decision
	// waits for the store. Zero means DefaultMaxTimeoutRatio (10) times
	// Timeout; equal to Timeout, the deadline is fixed.
	MaxTimeout time.Duration
	// TimeoutFactor multiplies the 99th percentile latency of recent
	// answers into the deadline. Zero means DefaultTimeoutFactor (4).
	TimeoutFactor int
	// Window and MinTimeouts say when timeouts declare the store down: when
	// no call has been answered for Window and at least MinTimeouts calls
	// have timed out since the last answer. So a stall shorter than Window
	// (a busy machine, a pause) never does, however many calls it times
	// out, and a silent store is declared down after at most about Window
	// plus Timeout. Zero means DefaultWindow (2s), DefaultMinTimeouts (3).
	Window      time.Duration
	MinTimeouts int
	// Default is the outage behaviour of limits not named in Limits.
	Default store.Outage
	// Limits sets the outage behaviour per limit name.
	Limits map[string]store.Outage
	// Local decides FailLocal limits during an outage. Nil means a new
	// memstore.
	Local store.RateStore
	// Clock times the backoff and the health window. Nil means the real
	// clock. (Each call's deadline is a context deadline, in real time.)
	Clock clock.Clock
	// OnFallback, if set, is called for every decision not made by the
	// store (for metrics), with the limit, its outage mode, why, and the
	// store's error (nil if the store was skipped while down). It must be
	// fast and safe for concurrent use.
	OnFallback func(limit string, mode store.OutageMode, reason store.FallbackReason, err error)
	// Logger receives the store going down and coming back, and fallbacks
	// (at most one line per second per limit and reason). Nil discards
	// them. Keys are never logged.
	Logger *slog.Logger
}

// Backoff while the store is down: the first probe comes MinBackoff after
// it was declared down, each failed probe doubles the wait up to
// MaxBackoff.
const (
	MinBackoff = 100 * time.Millisecond
	MaxBackoff = 250 * time.Millisecond
)

// outcome is what one store call says about the store's health.
type outcome uint8

const (
	answered  outcome = iota // the store answered (success or a request error)
	cancelled                // the caller gave up: says nothing
	timedOut                 // no answer within the timeout
	broken                   // a connection error: down at once
)

// Store is a store.RateStore that guards a shared store with a timeout, a
// health detector and per-limit outage modes. It is safe for concurrent
// use. Build it with New; the zero value is not usable.
type Store struct {
	primary     store.RateStore
	local       store.RateStore
	dl          *deadline // deadline.go
	window      time.Duration
	minTimeouts int
	def         store.Outage
	limits      map[string]store.Outage
	clk         clock.Clock
	notify      func(string, store.OutageMode, store.FallbackReason, error)
	log         *slog.Logger

	mu         sync.Mutex
	downUntil  time.Time // while in the future, skip the store
	backoff    time.Duration
	lastAnswer atomic.Int64 // clock time (Unix ns) a call was last answered; 0: never
	timeouts   atomic.Int64 // calls timed out since lastAnswer
	down       atomic.Bool  // the store is held down
	probing    atomic.Bool  // one call is probing the store

	direct bool // the primary returns by its deadline: call it on the caller's goroutine

	debts   debts // keys granted locally, to charge into the store
	logging logLimiter
}

var _ store.RateStore = (*Store)(nil)

// New returns a guard over primary.
func New(primary store.RateStore, cfg Config) (*Store, error) {
	if primary == nil {
		return nil, errors.New("guard: primary store is required")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("guard: timeout must be >= 0, got %s", cfg.Timeout)
	}
	if cfg.Window < 0 {
		return nil, fmt.Errorf("guard: window must be >= 0, got %s", cfg.Window)
	}
	if cfg.MaxTimeout < 0 || cfg.MaxTimeout > 0 && cfg.MaxTimeout < cmpOr(cfg.Timeout, DefaultTimeout) {
		return nil, fmt.Errorf("guard: max timeout must be 0 or at least the timeout (%s), got %s", cmpOr(cfg.Timeout, DefaultTimeout), cfg.MaxTimeout)
	}
	if cfg.TimeoutFactor < 0 {
		return nil, fmt.Errorf("guard: timeout factor must be >= 0, got %d", cfg.TimeoutFactor)
	}
	if cfg.MinTimeouts < 0 {
		return nil, fmt.Errorf("guard: min timeouts must be >= 0, got %d", cfg.MinTimeouts)
	}
	if err := cfg.Default.Validate(); err != nil {
		return nil, err
	}
	for name, o := range cfg.Limits {
		if err := o.Validate(); err != nil {
			return nil, fmt.Errorf("guard: limit %q: %w", name, err)
		}
	}
	floor := cmpOr(cfg.Timeout, DefaultTimeout)
	s := &Store{
		primary:     primary,
		local:       cfg.Local,
		dl:          newDeadline(floor, cmpOr(cfg.MaxTimeout, DefaultMaxTimeoutRatio*floor), cmpOr(cfg.TimeoutFactor, DefaultTimeoutFactor)),
		window:      cmpOr(cfg.Window, DefaultWindow),
		minTimeouts: cmpOr(cfg.MinTimeouts, DefaultMinTimeouts),
		def:         cfg.Default,
		limits:      cfg.Limits,
		clk:         clock.Or(cfg.Clock),
		notify:      cfg.OnFallback,
		log:         cfg.Logger,
		backoff:     MinBackoff,
	}
	if h, ok := primary.(DeadlineHonourer); ok {
		s.direct = h.HonoursDeadline()
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.local == nil {
		s.local = memstore.New(memstore.Config{Clock: cfg.Clock})
	}
	s.debts.m = map[debtKey]*debt{}
	s.logging.last = map[logKey]*logEntry{}
	return s, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Healthy reports whether the store is in use: it has not been declared
// down, or has answered since.
func (s *Store) Healthy() bool { return !s.down.Load() }

// Timeout is the deadline of the next call to the store (it adapts: see
// the package doc).
func (s *Store) Timeout() time.Duration { return s.dl.get() }

func (s *Store) outage(name string) store.Outage {
	if o, ok := s.limits[name]; ok {
		return o
	}
	return s.def
}

// usable reports whether this call should go to the store: always while it
// is up; while down, only one call per backoff period probes it.
func (s *Store) usable() bool {
	if !s.down.Load() {
		return true
	}
	s.mu.Lock()
	wait := s.clk.Now().Before(s.downUntil)
	s.mu.Unlock()
	if wait {
		return false
	}
	return s.probing.CompareAndSwap(false, true)
}

// retryIn is how long until the store will be tried again.
func (s *Store) retryIn() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.downUntil.Sub(s.clk.Now()), time.Millisecond)
}

// settle updates the health state with one call's outcome.
func (s *Store) settle(o outcome, err error) {
	switch o {
	case cancelled:
		s.probing.Store(false)
		return
	case answered:
		// Lock-free while the store is up: the hot path.
		s.lastAnswer.Store(s.clk.Now().UnixNano())
		if s.timeouts.Load() != 0 {
			s.timeouts.Store(0)
		}
		if s.down.Load() {
			s.mu.Lock()
			if s.down.Load() {
				s.backoff = MinBackoff
				s.down.Store(false)
				s.log.Info("guard: the shared store answers again; decisions are the store's")
			}
			s.mu.Unlock()
		}
		s.probing.Store(false)
		return
	}
	s.mu.Lock()
	wasDown := s.down.Load()
	declare := o == broken
	if o == timedOut {
		n := s.timeouts.Add(1)
		last := s.lastAnswer.Load()
		silent := last == 0 || s.clk.Now().UnixNano()-last >= s.window.Nanoseconds()
		declare = wasDown || n >= int64(s.minTimeouts) && silent // a probe that times out keeps it down
	}
	if declare {
		if wasDown {
			s.backoff = min(2*s.backoff, MaxBackoff)
		}
		s.downUntil = s.clk.Now().Add(s.backoff)
		s.down.Store(true)
		if !wasDown {
			s.log.Warn("guard: the shared store is down; outage modes decide", "cause", causeName(o), "err", err)
		}
	}
	s.mu.Unlock()
	s.probing.Store(false)
}

func causeName(o outcome) string {
	if o == timedOut {
		return "sustained timeouts"
	}
	return "connection error"
}

// requestError reports whether err is about the request, not the store.
func requestError(err error) bool {
	return errors.Is(err, store.ErrCostExceedsLimit) || errors.Is(err, store.ErrInvalidLimit) ||
		errors.Is(err, store.ErrNegativeCost) || errors.Is(err, store.ErrEmptyKey) ||
		errors.Is(err, store.ErrInvalidValue) || errors.Is(err, store.ErrInvalidID) ||
		errors.Is(err, store.ErrOutOfRange) || leaseAnswer(err)
}

// timeoutError reports whether err says a deadline passed.
func timeoutError(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// verdict is what the guard makes of one store call.
type verdict struct {
	ok     bool                 // the store decided: use its answer (and err)
	reason store.FallbackReason // else why not
	err    error
}

// DeadlineHonourer is implemented by a primary store whose rate
// operations (Take, TakeAll, Settle, Sync, Reset) return by their
// context's deadline when HonoursDeadline reports true (redisstore's do).
// The guard then calls them on the caller's goroutine: no goroutine,
// channel and select per call.
type DeadlineHonourer interface {
	HonoursDeadline() bool
}

// rateCall is call for the primary's rate operations: on the caller's
// goroutine when the primary returns by its deadline by itself.
func rateCall[T any](s *Store, ctx context.Context, f func(ctx context.Context) (T, error)) (T, verdict) {
	return guarded(s, ctx, s.direct, f)
}

// call runs f against the store with the timeout, waiting no longer than
// the timeout even if f does. While the store is down (or the call is
// skipped during the backoff) the verdict is FallbackStoreDown; a call that
// timed out while the store is up is FallbackTimeout.
//
// f runs on a goroutine of its own and hands its result over the channel
// only: a call abandoned at the deadline writes nothing the caller reads.
func call[T any](s *Store, ctx context.Context, f func(ctx context.Context) (T, error)) (T, verdict) {
	return guarded(s, ctx, false, f)
}

// guarded is call, with f on the caller's goroutine when direct.
func guarded[T any](s *Store, ctx context.Context, direct bool, f func(ctx context.Context) (T, error)) (T, verdict) {
	var zero T
	if !s.usable() {
		return zero, verdict{reason: store.FallbackStoreDown}
	}
	d := s.dl.get()
	if s.down.Load() {
		d = time.Duration(s.dl.floor) // a probe: the floor
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	type answer struct {
		r   T
		err error
	}
	var a answer
	if direct {
		a.r, a.err = f(cctx)
		return a.r, s.verdict(ctx, cctx, start, a.err)
	}
	done := make(chan answer, 1)
	go func() {
		r, err := f(cctx)
		done <- answer{r, err}
	}()
	select {
	case a = <-done:
	case <-cctx.Done():
		// The backend may take longer to give the call up (a cancel
		// request, a dead socket); its answer no longer matters.
		a.err = cctx.Err()
	}
	return a.r, s.verdict(ctx, cctx, start, a.err)
}

// verdict judges a call that started at start and samples its latency
// when the store answered.
func (s *Store) verdict(ctx, cctx context.Context, start time.Time, err error) verdict {
	v := s.judge(ctx, cctx, err)
	if v.ok && v.err == nil || v.ok && requestError(v.err) {
		s.dl.observe(time.Since(start))
	}
	return v
}

// judge turns a store call's error into a verdict and updates the health
// state with it.
func (s *Store) judge(ctx, cctx context.Context, err error) verdict {
	switch {
	case err == nil:
		s.settle(answered, nil)
		return verdict{ok: true}
	case requestError(err):
		s.settle(answered, nil)
		return verdict{ok: true, err: err}
	case ctx.Err() != nil:
		s.settle(cancelled, nil)
		return verdict{ok: true, err: ctx.Err()}
	case cctx.Err() != nil || timeoutError(err):
		s.settle(timedOut, err)
	default:
		s.settle(broken, err)
	}
	if s.down.Load() {
		return verdict{reason: store.FallbackStoreDown, err: err}
	}
	return verdict{reason: store.FallbackTimeout, err: err}
}

func (s *Store) fallback(name string, mode store.OutageMode, v verdict) {
	if s.notify != nil {
		s.notify(name, mode, v.reason, v.err)
	}
	s.logging.log(s.log, s.clk.Now(), name, mode, v)
}

// scaled returns l shrunk to a local share.
func scaled(l store.Limit, share float64) store.Limit {
	if share == 0 || share == 1 {
		return l
	}
	l.Rate = max(1, int64(float64(l.Rate)*share))
	if l.Burst > 0 {
		l.Burst = max(1, int64(float64(l.Burst)*share))
	}
	return l
}

// denied is the answer to a call the store did not decide, when that
// answer is a denial.
func denied(l store.Limit, retry time.Duration, v verdict, mode store.OutageMode) store.Result {
	return store.Result{Limit: l.Max(), RetryAfter: retry, Fallback: v.reason, FallbackMode: mode}
}

// Take implements store.RateStore.
func (s *Store) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	res, v := rateCall(s, ctx, func(ctx context.Context) (store.Result, error) {
		if err := s.chargeDebt(ctx, p.Key, p.Limit); err != nil {
			return store.Result{}, err
		}
		res, err := s.primary.Take(ctx, p)
		if err == nil {
			s.paid(p.Key, p.Limit)
		}
		return res, err
	})
	if v.ok {
		return res, v.err
	}
	o := s.outage(p.Limit.Name)
	s.fallback(p.Limit.Name, o.Mode, v)
	if err := store.CheckCost(p.Limit, p.Cost); err != nil {
		return store.Result{}, err
	}
	if v.reason == store.FallbackTimeout {
		return denied(p.Limit, s.dl.get(), v, o.Mode), nil
	}
	switch o.Mode {
	case store.FailOpen:
		return store.Result{Allowed: true, Limit: p.Limit.Max(), Fallback: v.reason, FallbackMode: o.Mode}, nil
	case store.FailLocal:
		lp := p
		lp.Limit = scaled(p.Limit, o.Share)
		if err := s.startLocal(ctx, p.Key, p.Limit, lp.Limit); err != nil {
			return store.Result{}, err
		}
		r, err := s.local.Take(ctx, lp)
		if errors.Is(err, store.ErrCostExceedsLimit) {
			// Fits the fleet's limit but not this process's share of it.
			return denied(lp.Limit, s.retryIn(), v, o.Mode), nil
		}
		if err != nil {
			return r, err
		}
		if r.Allowed {
			s.debts.grant(p.Limit.Name, p.Key, p.Cost)
		}
		r.Fallback, r.FallbackMode = v.reason, o.Mode
		return r, nil
	default:
		return denied(p.Limit, s.retryIn(), v, o.Mode), nil
	}
}

// TakeAll implements store.RateStore. While the store is down a request
// with any FailClosed limit is denied whole; FailLocal limits are taken
// all-or-nothing from the local store; FailOpen limits are allowed. A call
// that timed out while the store is up is denied whole.
func (s *Store) TakeAll(ctx context.Context, p store.TakeAllParams) (store.AllResult, error) {
	res, v := rateCall(s, ctx, func(ctx context.Context) (store.AllResult, error) {
		for _, it := range p.Items {
			if err := s.chargeDebt(ctx, it.Key, it.Limit); err != nil {
				return store.AllResult{}, err
			}
		}
		res, err := s.primary.TakeAll(ctx, p)
		if err == nil {
			for _, it := range p.Items {
				s.paid(it.Key, it.Limit)
			}
		}
		return res, err
	})
	if v.ok {
		return res, v.err
	}
	out := store.AllResult{Allowed: true, Results: make([]store.Result, len(p.Items))}
	var local []store.Item
	var at []int
	closed := false
	for i, it := range p.Items {
		if err := store.CheckCost(it.Limit, it.Cost); err != nil {
			return store.AllResult{}, err
		}
		o := s.outage(it.Limit.Name)
		s.fallback(it.Limit.Name, o.Mode, v)
		switch {
		case v.reason == store.FallbackTimeout:
			closed = true
			out.Results[i] = denied(it.Limit, s.dl.get(), v, o.Mode)
		case o.Mode == store.FailOpen:
			out.Results[i] = store.Result{Allowed: true, Limit: it.Limit.Max(), Fallback: v.reason, FallbackMode: o.Mode}
		case o.Mode == store.FailLocal:
			li := it
			li.Limit = scaled(it.Limit, o.Share)
			if err := s.startLocal(ctx, it.Key, it.Limit, li.Limit); err != nil {
				return store.AllResult{}, err
			}
			local = append(local, li)
			at = append(at, i)
		default:
			closed = true
			out.Results[i] = denied(it.Limit, s.retryIn(), v, o.Mode)
		}
	}
	if closed {
		out.Allowed = false
		for i := range out.Results {
			if out.Results[i].RetryAfter == 0 {
				out.Results[i].Allowed = true // had room as far as we know
			}
			if out.Results[i].Fallback == store.NoFallback { // a local item not taken
				o := s.outage(p.Items[i].Limit.Name)
				out.Results[i] = store.Result{Allowed: true, Limit: p.Items[i].Limit.Max(), Fallback: v.reason, FallbackMode: o.Mode}
			}
		}
		return out, nil
	}
	if len(local) > 0 {
		lr, err := s.local.TakeAll(ctx, store.TakeAllParams{Items: local, MaxDelay: p.MaxDelay, Now: p.Now})
		if err != nil {
			return store.AllResult{}, err
		}
		out.Allowed = lr.Allowed
		for j, i := range at {
			r := lr.Results[j]
			r.Fallback, r.FallbackMode = v.reason, store.FailLocal
			out.Results[i] = r
			if lr.Allowed {
				s.debts.grant(p.Items[i].Limit.Name, p.Items[i].Key, p.Items[i].Cost)
			}
		}
	}
	return out, nil
}

// Settle implements store.RateStore. While the store is down the
// correction is applied to the local store; when the call timed out while
// the store is up (it may still apply it) it fails with ErrUnavailable.
func (s *Store) Settle(ctx context.Context, p store.SettleParams) (store.Result, error) {
	res, v := rateCall(s, ctx, func(ctx context.Context) (store.Result, error) { return s.primary.Settle(ctx, p) })
	if v.ok {
		return res, v.err
	}
	o := s.outage(p.Limit.Name)
	s.fallback(p.Limit.Name, o.Mode, v)
	if v.reason == store.FallbackTimeout {
		return store.Result{}, fmt.Errorf("%w: settle: %w", ErrUnavailable, v.err)
	}
	lp := p
	lp.Limit = scaled(p.Limit, o.Share)
	if o.Mode == store.FailLocal {
		if err := s.startLocal(ctx, p.Key, p.Limit, lp.Limit); err != nil {
			return store.Result{}, err
		}
	}
	r, err := s.local.Settle(ctx, lp)
	if err == nil && o.Mode == store.FailLocal && p.Actual > p.Reserved {
		s.debts.grant(p.Limit.Name, p.Key, p.Actual-p.Reserved)
	}
	r.Fallback, r.FallbackMode = v.reason, o.Mode
	return r, err
}

// Sync implements store.RateStore. While the store is down the provider's
// report is applied to the local store, so FailLocal limits still honour
// it; when the call timed out while the store is up it fails with
// ErrUnavailable.
func (s *Store) Sync(ctx context.Context, p store.SyncParams) (store.Result, error) {
	res, v := rateCall(s, ctx, func(ctx context.Context) (store.Result, error) { return s.primary.Sync(ctx, p) })
	if v.ok {
		return res, v.err
	}
	o := s.outage(p.Limit.Name)
	s.fallback(p.Limit.Name, o.Mode, v)
	if v.reason == store.FallbackTimeout {
		return store.Result{}, fmt.Errorf("%w: sync: %w", ErrUnavailable, v.err)
	}
	lp := p
	lp.Limit = scaled(p.Limit, o.Share)
	r, err := s.local.Sync(ctx, lp)
	r.Fallback, r.FallbackMode = v.reason, o.Mode
	return r, err
}

// Reset implements store.RateStore. It fails with ErrUnavailable when the
// store could not answer (the local state is reset too).
func (s *Store) Reset(ctx context.Context, p store.ResetParams) error {
	_, v := rateCall(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.primary.Reset(ctx, p) })
	_ = s.local.Reset(ctx, p)
	s.debts.drop(p.Limit.Name, p.Key)
	if v.ok {
		return v.err
	}
	err := v.err
	if err == nil {
		err = errors.New("store skipped while down")
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// debtKey names a key granted locally.
type debtKey struct{ name, key string }

// debts are the keys granted by the local store during an outage, whose
// local grants are charged into the shared store before its next decision
// on them.
type debts struct {
	mu sync.Mutex
	m  map[debtKey]*debt
	n  atomic.Int64 // len(m), read without the lock
}

// debt is one key's local episode.
type debt struct {
	granted int64 // units granted locally
}

func (d *debts) add(name, key string) {
	d.mu.Lock()
	d.m[debtKey{name, key}] = &debt{}
	d.n.Store(int64(len(d.m)))
	d.mu.Unlock()
}

// grant counts units granted locally on key.
func (d *debts) grant(name, key string, n int64) {
	d.mu.Lock()
	if e := d.m[debtKey{name, key}]; e != nil {
		e.granted += n
	}
	d.mu.Unlock()
}

// granted is what was granted locally on key in its episode.
func (d *debts) granted(name, key string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.m[debtKey{name, key}]; e != nil {
		return e.granted
	}
	return 0
}

func (d *debts) has(name, key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.m[debtKey{name, key}]
	return ok
}

func (d *debts) drop(name, key string) {
	d.mu.Lock()
	delete(d.m, debtKey{name, key})
	d.n.Store(int64(len(d.m)))
	d.mu.Unlock()
}

// startLocal readies key's local state for its first local decision since
// it was last charged into the shared store: the local budget starts spent
// (its whole burst, or its window's limit, is charged), so local decisions
// pace at the local share's rate and never hand out a fresh burst that the
// shared store may have granted just before it went down.
func (s *Store) startLocal(ctx context.Context, key string, l, sl store.Limit) error {
	if s.debts.has(l.Name, key) {
		return nil
	}
	peek, err := s.local.Take(ctx, store.TakeParams{Key: key, Limit: sl})
	if err != nil {
		return err
	}
	if _, err := s.local.Settle(ctx, store.SettleParams{Key: key, Limit: sl, Actual: sl.Max(), ReservedAt: peek.At}); err != nil {
		return err
	}
	s.debts.add(l.Name, key)
	return nil
}

// Debts is how many keys hold local grants not yet charged into the shared
// store.
func (s *Store) Debts() int { return int(s.debts.n.Load()) }

// chargeDebt charges into the shared store what the local grants on key
// still weigh: the units the local store has not recovered yet (for GCRA,
// its TAT ahead of now in emission intervals; for windows, the current
// window's count), at most the units granted locally. Units recovered locally at the local share's rate are
// not charged: over any interval, local grants beyond what was charged are
// at most the local share's rate times the time spent local, which the
// shared limit's own rate covers. It runs inside a store call, before the
// shared decision on the key.
func (s *Store) chargeDebt(ctx context.Context, key string, l store.Limit) error {
	if s.debts.n.Load() == 0 || !s.debts.has(l.Name, key) {
		return nil
	}
	sl := scaled(l, s.outage(l.Name).Share)
	peek, err := s.local.Take(ctx, store.TakeParams{Key: key, Limit: sl})
	if err != nil {
		s.debts.drop(l.Name, key) // nothing the local store can tell
		return nil
	}
	var used int64
	if sl.Algorithm == store.GCRA {
		iv := sl.GCRA().Interval()
		used = (peek.ResetAfter.Microseconds() + iv - 1) / iv
	} else {
		used = sl.Max() - peek.Remaining
	}
	// The local budget started spent, so the units it has not recovered
	// can exceed what was granted: never charge more than that.
	used = min(used, s.debts.granted(l.Name, key))
	if used > 0 {
		// A peek of the shared key gives the store's time, which a window's
		// settle needs to find the current window.
		sp, err := s.primary.Take(ctx, store.TakeParams{Key: key, Limit: l})
		if err != nil {
			return err
		}
		if _, err := s.primary.Settle(ctx, store.SettleParams{Key: key, Limit: l, Actual: used, ReservedAt: sp.At}); err != nil {
			return err
		}
		// Charged: should the store fail again before deciding, the next
		// local decision starts a new local episode (spent budget).
		s.debts.drop(l.Name, key)
	}
	// Nothing left to charge: the key leaves the debts once the store has
	// decided on it (paid), not before, or a failing probe would let the
	// next local decision start over.
	return nil
}

// paid drops key from the debts once the store has decided on it.
func (s *Store) paid(key string, l store.Limit) {
	if s.debts.n.Load() != 0 {
		s.debts.drop(l.Name, key)
	}
}

// logKey is what fallback log lines are rate-limited by.
type logKey struct {
	limit  string
	reason store.FallbackReason
}

type logEntry struct {
	last       time.Time
	suppressed int
}

// logLimiter logs at most one fallback line per second per limit and
// reason.
type logLimiter struct {
	mu   sync.Mutex
	last map[logKey]*logEntry
}

func (l *logLimiter) log(log *slog.Logger, now time.Time, name string, mode store.OutageMode, v verdict) {
	k := logKey{name, v.reason}
	l.mu.Lock()
	e := l.last[k]
	if e == nil {
		e = &logEntry{}
		l.last[k] = e
	}
	if !e.last.IsZero() && now.Sub(e.last) < time.Second {
		e.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := e.suppressed
	e.last, e.suppressed = now, 0
	l.mu.Unlock()
	attrs := []any{"limit", name, "mode", mode.String(), "reason", v.reason.String(), "suppressed", suppressed}
	if v.err != nil {
		attrs = append(attrs, "err", v.err)
	}
	log.Warn("guard: decided without the shared store", attrs...)
}
