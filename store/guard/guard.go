// Package guard keeps rate decisions answering when the shared store is slow
// or down.
//
// A guard.Store wraps a shared store.RateStore (Redis, PostgreSQL) and gives
// every call a deadline (Config.Timeout, default 50ms). When the store does
// not answer in time, or fails, the call is decided by the limit's outage
// mode instead:
//
//   - store.FailClosed: denied, with RetryAfter until the store is tried
//     again.
//   - store.FailOpen: allowed (Remaining is unknown and reported as 0).
//   - store.FailLocal: decided by a store in this process that enforces the
//     limit scaled by Outage.Share, this process's share of the fleet's
//     limit.
//
// After a failure the guard stops calling the store for a short backoff
// (100ms, doubling to 1s) and decides every call by its outage mode at once;
// then a single call probes the store, and the first success returns every
// call to the store. So a dead store costs callers at most one timeout, and
// a healed one is back in use within about a second.
//
// Errors that say the request itself is wrong (store.ErrCostExceedsLimit,
// ErrInvalidLimit, ErrNegativeCost, ErrEmptyKey, ErrInvalidID, and the lease answers
// ErrLeaseNotHeld, ErrStaleToken, ErrInvalidLease) pass through unchanged,
// as does the caller's own context ending.
//
// Store.Leases guards the primary's lease operations with the same timeout
// and health state; leases always fail closed.
package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// ErrUnavailable wraps the store's error when a call could not be decided
// by the store (Reset, which has no outage mode).
var ErrUnavailable = errors.New("guard: store unavailable")

// Config configures a Store. Zero fields take the documented defaults.
type Config struct {
	// Timeout bounds every call to the shared store. Zero means 50ms.
	Timeout time.Duration
	// Default is the outage behaviour of limits not named in Limits.
	Default store.Outage
	// Limits sets the outage behaviour per limit name.
	Limits map[string]store.Outage
	// Local decides FailLocal limits during an outage. Nil means a new
	// memstore.
	Local store.RateStore
	// Clock times the backoff. Nil means the real clock.
	Clock clock.Clock
	// OnFallback, if set, is called for every decision made by an outage
	// mode instead of the store (for metrics). It must be fast and safe for
	// concurrent use.
	OnFallback func(limit string, mode store.OutageMode, err error)
}

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = time.Second
)

// Store is a store.RateStore that guards a shared store with a timeout and
// per-limit outage modes. It is safe for concurrent use. Build it with New.
type Store struct {
	primary store.RateStore
	local   store.RateStore
	timeout time.Duration
	def     store.Outage
	limits  map[string]store.Outage
	clk     clock.Clock
	notify  func(string, store.OutageMode, error)

	mu        sync.Mutex
	downUntil time.Time // while in the future, skip the store
	backoff   time.Duration
	down      atomic.Bool // the store failed and has not answered since
	probing   atomic.Bool // one call is probing the store
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
	if err := cfg.Default.Validate(); err != nil {
		return nil, err
	}
	for name, o := range cfg.Limits {
		if err := o.Validate(); err != nil {
			return nil, fmt.Errorf("guard: limit %q: %w", name, err)
		}
	}
	s := &Store{
		primary: primary,
		local:   cfg.Local,
		timeout: cfg.Timeout,
		def:     cfg.Default,
		limits:  cfg.Limits,
		clk:     clock.Or(cfg.Clock),
		notify:  cfg.OnFallback,
		backoff: minBackoff,
	}
	if s.timeout == 0 {
		s.timeout = 50 * time.Millisecond
	}
	if s.local == nil {
		s.local = memstore.New(memstore.Config{Clock: cfg.Clock})
	}
	return s, nil
}

// Healthy reports whether the last call to the store succeeded.
func (s *Store) Healthy() bool { return !s.down.Load() }

func (s *Store) outage(name string) store.Outage {
	if o, ok := s.limits[name]; ok {
		return o
	}
	return s.def
}

// usable reports whether this call should go to the store: always while it
// is healthy; during an outage, only one call per backoff period probes it.
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

func (s *Store) succeeded() {
	if s.down.Load() {
		s.mu.Lock()
		s.backoff = minBackoff
		s.down.Store(false)
		s.mu.Unlock()
	}
	s.probing.Store(false)
}

func (s *Store) failed() {
	s.mu.Lock()
	if s.down.Load() {
		s.backoff = min(2*s.backoff, maxBackoff)
	}
	s.downUntil = s.clk.Now().Add(s.backoff)
	s.down.Store(true)
	s.mu.Unlock()
	s.probing.Store(false)
}

// requestError reports whether err is about the request, not the store.
func requestError(err error) bool {
	return errors.Is(err, store.ErrCostExceedsLimit) || errors.Is(err, store.ErrInvalidLimit) ||
		errors.Is(err, store.ErrNegativeCost) || errors.Is(err, store.ErrEmptyKey) ||
		errors.Is(err, store.ErrInvalidID) || leaseAnswer(err)
}

// call runs f against the store with the timeout. It returns ok=false when
// the store is unavailable and the caller should use the outage mode, with
// the error that made it so (nil if the store was skipped during backoff).
func (s *Store) call(ctx context.Context, f func(ctx context.Context) error) (ok bool, err error) {
	if !s.usable() {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	err = f(cctx)
	cancel()
	switch {
	case err == nil:
		s.succeeded()
		return true, nil
	case requestError(err):
		s.succeeded() // the store answered
		return true, err
	case ctx.Err() != nil:
		// The caller gave up; that says nothing about the store.
		s.probing.Store(false)
		return true, ctx.Err()
	}
	s.failed()
	return false, err
}

func (s *Store) fallback(name string, mode store.OutageMode, err error) {
	if s.notify != nil {
		s.notify(name, mode, err)
	}
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

// Take implements store.RateStore.
func (s *Store) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	var res store.Result
	ok, err := s.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.primary.Take(ctx, p)
		return err
	})
	if ok {
		return res, err
	}
	o := s.outage(p.Limit.Name)
	s.fallback(p.Limit.Name, o.Mode, err)
	switch o.Mode {
	case store.FailOpen:
		if err := store.CheckCost(p.Limit, p.Cost); err != nil {
			return store.Result{}, err
		}
		return store.Result{Allowed: true, Limit: p.Limit.Max()}, nil
	case store.FailLocal:
		lp := p
		lp.Limit = scaled(p.Limit, o.Share)
		r, err := s.local.Take(ctx, lp)
		if errors.Is(err, store.ErrCostExceedsLimit) && store.CheckCost(p.Limit, p.Cost) == nil {
			// Fits the fleet's limit but not this process's share of it.
			return store.Result{Limit: lp.Limit.Max(), RetryAfter: s.retryIn()}, nil
		}
		return r, err
	default:
		if err := store.CheckCost(p.Limit, p.Cost); err != nil {
			return store.Result{}, err
		}
		return store.Result{Limit: p.Limit.Max(), RetryAfter: s.retryIn()}, nil
	}
}

// TakeAll implements store.RateStore. During an outage a request with any
// FailClosed limit is denied whole; FailLocal limits are taken
// all-or-nothing from the local store; FailOpen limits are allowed.
func (s *Store) TakeAll(ctx context.Context, p store.TakeAllParams) (store.AllResult, error) {
	var res store.AllResult
	ok, err := s.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.primary.TakeAll(ctx, p)
		return err
	})
	if ok {
		return res, err
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
		s.fallback(it.Limit.Name, o.Mode, err)
		switch o.Mode {
		case store.FailOpen:
			out.Results[i] = store.Result{Allowed: true, Limit: it.Limit.Max()}
		case store.FailLocal:
			li := it
			li.Limit = scaled(it.Limit, o.Share)
			local = append(local, li)
			at = append(at, i)
		default:
			closed = true
			out.Results[i] = store.Result{Limit: it.Limit.Max(), RetryAfter: s.retryIn()}
		}
	}
	if closed {
		out.Allowed = false
		for i := range out.Results {
			if out.Results[i].RetryAfter == 0 {
				out.Results[i].Allowed = true // had room as far as we know
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
			out.Results[i] = lr.Results[j]
		}
	}
	return out, nil
}

// Settle implements store.RateStore. During an outage the correction is
// applied to the local store.
func (s *Store) Settle(ctx context.Context, p store.SettleParams) (store.Result, error) {
	var res store.Result
	ok, err := s.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.primary.Settle(ctx, p)
		return err
	})
	if ok {
		return res, err
	}
	o := s.outage(p.Limit.Name)
	s.fallback(p.Limit.Name, o.Mode, err)
	lp := p
	lp.Limit = scaled(p.Limit, o.Share)
	return s.local.Settle(ctx, lp)
}

// Sync implements store.RateStore. During an outage the provider's report
// is applied to the local store, so FailLocal limits still honour it.
func (s *Store) Sync(ctx context.Context, p store.SyncParams) (store.Result, error) {
	var res store.Result
	ok, err := s.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.primary.Sync(ctx, p)
		return err
	})
	if ok {
		return res, err
	}
	o := s.outage(p.Limit.Name)
	s.fallback(p.Limit.Name, o.Mode, err)
	lp := p
	lp.Limit = scaled(p.Limit, o.Share)
	return s.local.Sync(ctx, lp)
}

// Reset implements store.RateStore. It fails with ErrUnavailable during an
// outage (the local state is reset too).
func (s *Store) Reset(ctx context.Context, p store.ResetParams) error {
	ok, err := s.call(ctx, func(ctx context.Context) error { return s.primary.Reset(ctx, p) })
	_ = s.local.Reset(ctx, p)
	if ok {
		return err
	}
	if err == nil {
		err = errors.New("store skipped during backoff")
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
