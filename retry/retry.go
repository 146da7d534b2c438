package retry

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

var (
	// ErrBudgetExhausted stops retrying because the key's retry budget is
	// empty: the caller's own limit on retry volume, not the provider's
	// throttling. Defer the work rather than spin.
	ErrBudgetExhausted = errors.New("retry: retry budget exhausted")
	// ErrAttemptsExhausted stops retrying after Config.MaxAttempts
	// attempts.
	ErrAttemptsExhausted = errors.New("retry: max attempts reached")
	// ErrNotIdempotent stops retrying a call whose outcome is unknown (it
	// may have been processed) and that is not safe to repeat.
	ErrNotIdempotent = errors.New("retry: outcome unknown and the call is not idempotent")
	// ErrDelayTooLong stops retrying when the provider asks to wait
	// (Retry-After) longer than Config.MaxDelay: wait elsewhere, not in a
	// retry loop.
	ErrDelayTooLong = errors.New("retry: retry-after exceeds the maximum delay")
	// ErrInvalidConfig is wrapped by New for a Config it cannot use.
	ErrInvalidConfig = errors.New("retry: invalid config")
)

// Defaults for the zero fields of Config.
const (
	DefaultBase           = 100 * time.Millisecond
	DefaultCap            = 10 * time.Second
	DefaultMaxAttempts    = 4
	DefaultMaxDelay       = time.Minute
	DefaultBudgetRatio    = 0.2
	DefaultBudgetFloor    = 1.0 // tokens per second
	DefaultBudgetCapacity = 10.0
)

// Config configures a Policy. Every zero field means its documented default,
// so the zero Config is usable; New copies it.
type Config struct {
	// Base and Cap shape the backoff: before retry n (n = 1 for the first
	// retry) the delay is uniform in [0, min(Cap, Base x 2^(n-1))). Zero
	// means DefaultBase (100ms) and DefaultCap (10s).
	Base, Cap time.Duration
	// MaxAttempts is the most attempts a call makes, the first included.
	// Zero means DefaultMaxAttempts (4); 1 never retries.
	MaxAttempts int
	// MaxDelay is the longest Retry-After a retry waits for. Zero means
	// DefaultMaxDelay (1 minute).
	MaxDelay time.Duration
	// BudgetRatio is the tokens each success adds to the budget: the
	// share of successful requests that may be retried. Zero means
	// DefaultBudgetRatio (0.2).
	BudgetRatio float64
	// BudgetFloor is the tokens added per second regardless, so that a key
	// with few requests can still retry now and then. Zero means
	// DefaultBudgetFloor (1/s); negative means none.
	BudgetFloor float64
	// BudgetCapacity is the most tokens the budget holds, and what it
	// starts with. Zero means DefaultBudgetCapacity (10).
	BudgetCapacity float64
}

// Policy is a validated Config. It is immutable and safe for concurrent use;
// its zero value is not usable, use New.
type Policy struct {
	base, cap, maxDelay int64
	maxAttempts         int
	ratio, floor, capa  float64
}

// New validates cfg and returns a Policy.
func New(cfg Config) (*Policy, error) {
	if cfg.Base < 0 || cfg.Cap < 0 || cfg.MaxDelay < 0 || cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("%w: Base, Cap, MaxDelay and MaxAttempts must be >= 0", ErrInvalidConfig)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"BudgetRatio", cfg.BudgetRatio}, {"BudgetFloor", cfg.BudgetFloor}, {"BudgetCapacity", cfg.BudgetCapacity}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return nil, fmt.Errorf("%w: %s must be finite, got %v", ErrInvalidConfig, f.name, f.v)
		}
	}
	if cfg.BudgetRatio < 0 || cfg.BudgetCapacity < 0 {
		return nil, fmt.Errorf("%w: BudgetRatio and BudgetCapacity must be >= 0", ErrInvalidConfig)
	}
	p := &Policy{
		base: cfg.Base.Microseconds(), cap: cfg.Cap.Microseconds(), maxDelay: cfg.MaxDelay.Microseconds(),
		maxAttempts: cfg.MaxAttempts, ratio: cfg.BudgetRatio, floor: cfg.BudgetFloor, capa: cfg.BudgetCapacity,
	}
	if cfg.Base == 0 {
		p.base = DefaultBase.Microseconds()
	}
	if cfg.Cap == 0 {
		p.cap = DefaultCap.Microseconds()
	}
	if cfg.MaxDelay == 0 {
		p.maxDelay = DefaultMaxDelay.Microseconds()
	}
	if p.base < 1 || p.cap < 1 {
		return nil, fmt.Errorf("%w: Base and Cap must be at least 1us", ErrInvalidConfig)
	}
	if p.cap < p.base {
		return nil, fmt.Errorf("%w: Cap %v is below Base %v", ErrInvalidConfig, cfg.Cap, cfg.Base)
	}
	if p.maxAttempts == 0 {
		p.maxAttempts = DefaultMaxAttempts
	}
	if p.ratio == 0 {
		p.ratio = DefaultBudgetRatio
	}
	switch {
	case p.floor == 0:
		p.floor = DefaultBudgetFloor
	case p.floor < 0:
		p.floor = 0
	}
	if p.capa == 0 {
		p.capa = DefaultBudgetCapacity
	}
	if p.capa < 1 {
		return nil, fmt.Errorf("%w: BudgetCapacity must hold at least one retry, got %v", ErrInvalidConfig, p.capa)
	}
	return p, nil
}

// Backoff returns the full-jitter delay, in microseconds, before retry n (1
// for the first retry): u x min(Cap, Base x 2^(n-1)) for u uniform in [0,
// 1), clamped into [0, 1).
func (p *Policy) Backoff(n int, u float64) int64 {
	ceil := p.cap
	if n >= 1 && n <= 62 {
		if b := p.base << (n - 1); b > 0 && b>>(n-1) == p.base {
			ceil = min(p.cap, b)
		}
	} else if n < 1 {
		ceil = min(p.cap, p.base)
	}
	if !(u > 0) {
		return 0
	}
	u = min(u, math.Nextafter(1, 0))
	return int64(u * float64(ceil))
}

// Outcome is what an attempt's result means for retrying. The zero value is
// no outcome, which is never retried.
type Outcome uint8

const (
	// Success needs no retry; it refills the budget.
	Success Outcome = iota + 1
	// Transient may succeed later: timeouts, network errors, 408, 429,
	// 5xx.
	Transient
	// Permanent will fail again: other 4xx, and errors that are not the
	// network's.
	Permanent
	// Canceled was canceled by the caller.
	Canceled
)

// Attempt describes the attempt that just finished; a plain value.
type Attempt struct {
	// N is the number of attempts made so far, this one included (1
	// after the first).
	N       int
	Outcome Outcome
	// Unknown is set when the attempt may have been processed (a 5xx, a
	// timeout or a connection lost after sending).
	Unknown bool
	// Idempotent says repeating the call is safe: an idempotent method,
	// or the caller's word (an idempotency key).
	Idempotent bool
	// RetryAfter, in microseconds, is the provider's Retry-After, the
	// floor of the delay, when HasRetryAfter.
	RetryAfter    int64
	HasRetryAfter bool
}

// Budget is one key's retry budget: a token bucket. The zero value is a
// full budget that has never been used. It is a plain value, not safe for
// concurrent use; Retrier guards one.
type Budget struct {
	// Tokens is the balance after the last update at Last (Unix µs);
	// Started says it has been initialized.
	Tokens  float64
	Last    int64
	Started bool
}

// refill brings b up to now: the floor's tokens for the time elapsed.
func (p *Policy) refill(b *Budget, now int64) {
	if !b.Started {
		*b = Budget{Tokens: p.capa, Last: now, Started: true}
		return
	}
	if now > b.Last {
		b.Tokens = min(p.capa, b.Tokens+p.floor*float64(now-b.Last)/1e6)
		b.Last = now
	}
}

// Tokens returns the budget's balance at now: how many retries it would
// allow.
func (p *Policy) Tokens(b Budget, now int64) float64 {
	p.refill(&b, now)
	return b.Tokens
}

// Decision is what to do after an attempt; a plain value whose zero value
// is "do not retry, nothing exhausted".
type Decision struct {
	// Retry says to try again after Delay microseconds.
	Retry bool
	Delay int64
	// Stop says why a failed attempt is not retried: ErrBudgetExhausted,
	// ErrAttemptsExhausted, ErrNotIdempotent or ErrDelayTooLong. It is
	// nil when Retry is set and when there is nothing to retry (a
	// success, a permanent failure, a cancellation).
	Stop error
}

// Decide decides about the attempt a at now, with u uniform in [0, 1) for
// the jitter, and updates the budget b: a success refills it, a retry takes
// a token.
func (p *Policy) Decide(b *Budget, now int64, a Attempt, u float64) Decision {
	p.refill(b, now)
	switch a.Outcome {
	case Success:
		b.Tokens = min(p.capa, b.Tokens+p.ratio)
		return Decision{}
	case Transient:
	default:
		return Decision{}
	}
	if a.Unknown && !a.Idempotent {
		return Decision{Stop: ErrNotIdempotent}
	}
	if a.N >= p.maxAttempts {
		return Decision{Stop: ErrAttemptsExhausted}
	}
	delay := p.Backoff(a.N, u)
	if a.HasRetryAfter {
		if a.RetryAfter > p.maxDelay {
			return Decision{Stop: ErrDelayTooLong}
		}
		delay = max(delay, a.RetryAfter)
	}
	if b.Tokens < 1 {
		return Decision{Stop: ErrBudgetExhausted}
	}
	b.Tokens--
	return Decision{Retry: true, Delay: delay}
}

// Error is the error a caller returns when retrying stopped: why (Reason,
// one of the sentinel errors), after how many attempts, and the last
// attempt's error. errors.Is matches both Reason and Last. It is immutable
// once built; the zero value has no Reason and should not be used.
type Error struct {
	Reason   error
	Attempts int
	Last     error
}

// Error describes the stop and the last error.
func (e *Error) Error() string {
	if e.Last == nil {
		return fmt.Sprintf("%v after %d attempts", e.Reason, e.Attempts)
	}
	return fmt.Sprintf("%v after %d attempts: %v", e.Reason, e.Attempts, e.Last)
}

// Unwrap returns Reason and Last, for errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Last}
}

// Rand is a source of uniform numbers in [0, 1). *rand.Rand of math/rand/v2
// is one; Retrier calls it under its lock, so it need not be safe for
// concurrent use.
type Rand interface{ Float64() float64 }

// Retrier is a Policy with one key's Budget and a random source behind a
// mutex. It is safe for concurrent use; its zero value is not usable, use
// NewRetrier.
type Retrier struct {
	p   *Policy
	mu  sync.Mutex
	b   Budget
	rng Rand
}

// NewRetrier returns a Retrier with a full budget. A nil rng means the
// math/rand/v2 global source.
func NewRetrier(p *Policy, rng Rand) *Retrier {
	return &Retrier{p: p, rng: rng}
}

// Decide decides about an attempt at now (Unix µs); see Policy.Decide.
func (r *Retrier) Decide(now int64, a Attempt) Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	var u float64
	if r.rng == nil {
		u = rand.Float64()
	} else {
		u = r.rng.Float64()
	}
	return r.p.Decide(&r.b, now, a, u)
}

// Tokens returns the budget's balance at now.
func (r *Retrier) Tokens(now int64) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.p.Tokens(r.b, now)
}

// Fresh reports whether dropping b at now (an idle key's eviction) gives
// nothing away: the budget is full again.
func (p *Policy) Fresh(b Budget, now int64) bool {
	return p.Tokens(b, now) >= p.capa
}
