// Package store defines the contract between Sluice's facades and the
// backends that keep shared state: one atomic domain operation per method,
// a params struct in and a result out.
//
// Every backend (store/memstore, and the Redis, PostgreSQL and SQLite
// stores) implements RateStore and LeaseStore (lease.go: N-permit leases
// with fencing tokens) and passes the conformance suites in
// store/storetest. The store's own clock decides: Redis TIME, the database's
// now(), or the process clock clamped never to run backwards. Every params
// struct carries an optional Now that overrides that clock; it exists for
// tests and the differential check and nothing else should set it.
//
// A denial is a result (Result.Allowed == false), never an error. Errors are
// for requests that can never succeed (ErrCostExceedsLimit, an invalid
// limit, ErrOutOfRange) and for a store that could not answer. Every backend
// returns the same answer and the same error for the same request and Now,
// to the extremes (storetest.FuzzDifferential checks it).
//
// Every key, limit name, holder, event id and config name follows one
// identifier rule (ident.go, CheckID): 1 to a documented number of bytes of
// valid UTF-8 without control characters. Facades check it before calling a
// store, and every backend checks it again before touching its state; a
// value that breaks it is an *InvalidIDError matching ErrInvalidID, the
// caller's mistake and never a store outage.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicerl/sluice/gcra"
	"github.com/sluicerl/sluice/window"
)

var (
	// ErrCostExceedsLimit: the cost is above the limit's burst (GCRA) or
	// limit (windows), so the request could never be admitted. Permanent.
	ErrCostExceedsLimit = errors.New("store: cost exceeds the limit's burst")
	// ErrNegativeCost: a cost below zero.
	ErrNegativeCost = errors.New("store: negative cost")
	// ErrInvalidLimit: a limit that cannot be enforced; the wrapped message
	// says which field is wrong.
	ErrInvalidLimit = errors.New("store: invalid limit")
	// ErrEmptyKey: an operation without a key or limit name.
	ErrEmptyKey = errors.New("store: empty key or limit name")
	// ErrTooManyKeys: an in-memory store is full of keys that still hold
	// state and cannot be evicted without giving budget away.
	ErrTooManyKeys = errors.New("store: too many keys hold state")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("store: closed")
	// ErrInvalidValue: the backend refused a value of the request itself
	// (PostgreSQL's data exceptions, SQLSTATE class 22, or 54000
	// program_limit_exceeded: a key the database cannot hold). It is an
	// answer about the request, never a sign that the store is down.
	ErrInvalidValue = errors.New("store: the store refused a value of the request")
	// ErrOutOfRange: a Now override beyond MaxNow, or an operation that
	// would leave a key's state (or the time at which it becomes fresh) at
	// MaxTime or beyond: a debt, a delay or a pause reaching the year 2255,
	// which Redis's Lua numbers cannot hold exactly. Every backend refuses
	// it alike and writes nothing. Permanent: the request itself is wrong.
	ErrOutOfRange = errors.New("store: value out of range")
)

const (
	// MaxNow bounds a Now override: it must lie after the Unix epoch and
	// less than MaxNow microseconds (2^52, about 142 years) after it,
	// before the year 2112. The Unix epoch itself, like the zero time,
	// means the store clock.
	MaxNow = int64(1) << 52
	// MaxTime bounds every stored time: an operation that would leave a
	// key's state with a time, or a FreshAt, at or beyond 2^53
	// microseconds (or at or below -2^53) fails with ErrOutOfRange.
	MaxTime = int64(1) << 53
)

var (
	minNowTime = time.UnixMicro(0)
	maxNowTime = time.UnixMicro(MaxNow)
)

// CheckNow returns ErrOutOfRange (wrapped) for a Now override beyond
// MaxNow; the zero time (no override) passes. Backends check it after the
// limit and the costs, before anything that depends on the key's state.
func CheckNow(t time.Time) error {
	if !t.IsZero() && (t.Before(minNowTime) || !t.Before(maxNowTime)) {
		return fmt.Errorf("%w: Now %s is not within 2^52us after the Unix epoch", ErrOutOfRange, t.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// Algorithm selects how a limit counts.
type Algorithm uint8

const (
	// GCRA paces Rate units per Period with bursts of up to Burst (the
	// default: the zero value).
	GCRA Algorithm = iota
	// FixedWindow admits Rate units per Period-long window aligned to the
	// store clock. Burst is ignored.
	FixedWindow
	// SlidingWindow admits Rate units per Period estimated over a sliding
	// window (weighted previous window). Burst is ignored.
	SlidingWindow
)

// String returns the name used in configuration files.
func (a Algorithm) String() string {
	switch a {
	case GCRA:
		return "gcra"
	case FixedWindow:
		return "fixed_window"
	case SlidingWindow:
		return "sliding_window"
	case Concurrency:
		return "concurrency"
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm parses the configuration name of an algorithm.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "gcra", "":
		return GCRA, nil
	case "fixed_window":
		return FixedWindow, nil
	case "sliding_window":
		return SlidingWindow, nil
	}
	return 0, fmt.Errorf("unknown algorithm %q (want gcra, fixed_window or sliding_window)", s)
}

// Limit is a rate limit as a store sees it. State is kept per (Name, key):
// two limits with different names never share a counter.
type Limit struct {
	Name      string
	Algorithm Algorithm
	Rate      int64         // units per Period (windows: units per window)
	Period    time.Duration // GCRA period, or window length
	Burst     int64         // GCRA only; 0 means Rate
}

// GCRA returns the limit as a gcra.Limit, with the Burst default applied.
func (l Limit) GCRA() gcra.Limit {
	b := l.Burst
	if b == 0 {
		b = l.Rate
	}
	return gcra.Limit{Rate: l.Rate, Period: l.Period, Burst: b}
}

// Window returns the limit as a window.Limit.
func (l Limit) Window() window.Limit { return window.Limit{Limit: l.Rate, Window: l.Period} }

// Max is the largest cost one request may have: the burst for GCRA, the
// window's limit otherwise. It is also the Limit reported in results.
func (l Limit) Max() int64 {
	if l.Algorithm == GCRA && l.Burst != 0 {
		return l.Burst
	}
	return l.Rate
}

// Validate reports whether the limit can be enforced.
func (l Limit) Validate() error {
	if err := CheckID("limit name", l.Name); err != nil {
		return err
	}
	var err error
	switch l.Algorithm {
	case GCRA:
		if l.Burst < 0 {
			return fmt.Errorf("%w %q: burst must be >= 0 (0 means rate), got %d", ErrInvalidLimit, l.Name, l.Burst)
		}
		err = l.GCRA().Validate()
	case FixedWindow, SlidingWindow:
		err = l.Window().Validate(l.Algorithm == SlidingWindow)
	default:
		return fmt.Errorf("%w %q: unknown algorithm %d", ErrInvalidLimit, l.Name, l.Algorithm)
	}
	if err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidLimit, l.Name, err)
	}
	return nil
}

// OutageMode is what a limit does while a shared store is unavailable (see
// package store/guard, which enforces it).
type OutageMode uint8

const (
	// FailClosed denies while the store is unavailable (the zero value).
	FailClosed OutageMode = iota
	// FailOpen allows while the store is unavailable.
	FailOpen
	// FailLocal enforces this process's share of the limit in memory.
	FailLocal
)

// String returns the configuration name of the mode.
func (m OutageMode) String() string {
	switch m {
	case FailClosed:
		return "fail_closed"
	case FailOpen:
		return "fail_open"
	case FailLocal:
		return "local"
	}
	return fmt.Sprintf("outage_mode(%d)", uint8(m))
}

// ParseOutageMode parses fail_closed, fail_open or local.
func ParseOutageMode(s string) (OutageMode, error) {
	switch s {
	case "fail_closed":
		return FailClosed, nil
	case "fail_open":
		return FailOpen, nil
	case "local":
		return FailLocal, nil
	}
	return 0, fmt.Errorf("unknown store outage mode %q (want fail_closed, fail_open or local)", s)
}

// Outage is a limit's behaviour while a shared store is unavailable.
type Outage struct {
	Mode OutageMode
	// Share is, for FailLocal, the fraction of the limit's rate and burst
	// this process enforces on its own, in (0, 1]: with 4 processes sharing
	// a limit, 0.25. Zero means 1.
	Share float64
}

// Validate reports whether the outage settings are usable.
func (o Outage) Validate() error {
	if o.Mode > FailLocal {
		return fmt.Errorf("store: unknown outage mode %d", o.Mode)
	}
	if !(o.Share >= 0 && o.Share <= 1) {
		return fmt.Errorf("store: local share must be in (0, 1], got %v", o.Share)
	}
	return nil
}

// FallbackReason says why a result was decided without the shared store
// (by store/guard). The zero value, NoFallback, means the store decided.
type FallbackReason uint8

const (
	// NoFallback: the store decided.
	NoFallback FallbackReason = iota
	// FallbackStoreDown: the store is held down (a connection error, or
	// timeouts sustained across a window), and the limit's outage mode
	// decided.
	FallbackStoreDown
	// FallbackTimeout: the store is up but did not answer this call in
	// time. The store may still apply the call, so every outage mode
	// denies it: admitting could exceed the limit.
	FallbackTimeout
)

// String returns the name used in headers, logs and metric labels.
func (r FallbackReason) String() string {
	switch r {
	case NoFallback:
		return "none"
	case FallbackStoreDown:
		return "store_down"
	case FallbackTimeout:
		return "timeout"
	}
	return fmt.Sprintf("fallback_reason(%d)", uint8(r))
}

// Result is the outcome of a rate operation.
type Result struct {
	Allowed bool
	// Fallback is set when the result was not decided by the store (see
	// FallbackReason); FallbackMode is then the outage mode that decided.
	Fallback     FallbackReason
	FallbackMode OutageMode
	// Limit is the most a single request may cost: the burst for GCRA, the
	// window's limit otherwise.
	Limit int64
	// Remaining is the number of units that could be taken right after
	// this decision.
	Remaining int64
	// RetryAfter is, when denied, how long until the request would be
	// admitted. Zero when allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to a fresh state.
	ResetAfter time.Duration
	// Delay is, for a request allowed with MaxDelay > 0, how long the caller
	// must wait before using what it was granted.
	Delay time.Duration
	// At is the store clock's time of the decision, in Unix microseconds.
	// Settle needs it to find the window a reservation was taken in.
	At int64
}

// TakeParams asks for Cost units of Limit for Key. A Cost of 0 peeks at the
// key without changing it.
type TakeParams struct {
	Key   string
	Limit Limit
	Cost  int64
	// MaxDelay lets a GCRA request reserve units that conform within this
	// delay (Result.Delay says how long to wait). Windows ignore it.
	MaxDelay time.Duration
	// Now overrides the store clock. Tests only.
	Now time.Time
}

// Item is one limit of an all-or-nothing request.
type Item struct {
	Key   string
	Limit Limit
	Cost  int64
}

// TakeAllParams asks for every item at once: either all are charged or none.
type TakeAllParams struct {
	Items    []Item
	MaxDelay time.Duration // as in TakeParams, for every GCRA item
	Now      time.Time
}

// AllResult is the outcome of TakeAll: Allowed is true only if every item
// was allowed, and Results holds one result per item in order, so a denial
// names which limits refused. When Allowed is false nothing was charged: an
// item whose Result.Allowed is true had room on its own, and its Remaining
// and ResetAfter describe its uncharged state (a peek).
type AllResult struct {
	Allowed bool
	Results []Result
}

// SettleParams corrects a reservation made by a Take of Reserved units (at
// store time ReservedAt, that Take's Result.At) whose actual cost was Actual.
// The difference is refunded or charged atomically.
type SettleParams struct {
	Key        string
	Limit      Limit
	Reserved   int64
	Actual     int64
	ReservedAt int64
	Now        time.Time
}

// SyncParams overrides a key's state with what the provider reported:
// Remaining units available now, and, when Remaining is 0, nothing until
// ResetAfter has passed (a Retry-After or an exhausted window).
type SyncParams struct {
	Key        string
	Limit      Limit
	Remaining  int64
	ResetAfter time.Duration
	Now        time.Time
}

// ResetParams drops a key's state, making it fresh.
type ResetParams struct {
	Key   string
	Limit Limit
}

// RateStore keeps rate-limit state. Each method is one atomic operation
// against the backend. Implementations must be safe for concurrent use.
type RateStore interface {
	// Take charges p.Cost units if they conform, or reports when they will.
	Take(ctx context.Context, p TakeParams) (Result, error)
	// TakeAll charges every item or none of them.
	TakeAll(ctx context.Context, p TakeAllParams) (AllResult, error)
	// Settle refunds or charges the difference between a reservation and
	// its actual cost. The result is a peek after the correction.
	Settle(ctx context.Context, p SettleParams) (Result, error)
	// Sync overrides the key's state with a provider's report. The result
	// is a peek after the override.
	Sync(ctx context.Context, p SyncParams) (Result, error)
	// Reset makes the key fresh.
	Reset(ctx context.Context, p ResetParams) error
}
