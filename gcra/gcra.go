// Package gcra implements the generic cell rate algorithm with weighted cost
// as pure functions: (limit, state, now, cost) -> (state, decision).
//
// Times are int64 microseconds since the Unix epoch and durations are int64
// microseconds. Microseconds are what every Sluice store can represent
// exactly: Redis TIME and Lua's doubles, PostgreSQL timestamps and SQLite
// integers all hold them without rounding, so every backend reaches the same
// decision from the same inputs.
//
// A limit admits Rate units per Period with bursts of up to Burst units. The
// emission interval T is Period/Rate, rounded up to a whole microsecond so
// that rounding can only ever admit less, never more. A request of cost n
// conforms when max(TAT, now) + n*T - now <= Burst*T; when it does, the
// theoretical arrival time TAT advances by n*T. Idle time never banks more
// than Burst, a request costing more than Burst is an error, and a clock that
// runs backwards mints nothing.
//
// Nothing in this package allocates, blocks or reads a clock. All functions
// are safe for concurrent use because they share nothing.
package gcra

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

var (
	// ErrCostExceedsBurst is returned for a request that could never conform:
	// its cost is above the limit's burst. It is permanent, not a wait.
	ErrCostExceedsBurst = errors.New("gcra: cost exceeds burst")
	// ErrNegativeCost is returned for a cost below zero.
	ErrNegativeCost = errors.New("gcra: negative cost")
	// ErrInvalidLimit is wrapped by Limit.Validate.
	ErrInvalidLimit = errors.New("gcra: invalid limit")
	// ErrOutOfRange is returned for an instant (now, or a state's TAT)
	// beyond MaxTime microseconds either side of the Unix epoch, or a Sync
	// whose ResetAfter would take the TAT there: the arithmetic could
	// overflow.
	ErrOutOfRange = errors.New("gcra: time out of range")
)

// MaxSpan bounds every span: Burst*T (Validate refuses a limit whose
// Burst*T is MaxSpan or more) and the debt Settle may leave, TAT - now after
// a further Take of the whole burst (Settle refuses a charge that would
// reach it, and a refund of MaxSpan or more). It is 2^52 microseconds,
// about 142 years, so that a TAT decided at an instant before 2^52 (the
// year 2112) stays below 2^53, exact in Lua's doubles for the Redis store,
// and every duration derived from it fits a time.Duration.
const MaxSpan = int64(1) << 52

const maxSpan = MaxSpan

// MaxTime bounds the instants every function here accepts: now and a
// state's TAT must lie in [-MaxTime, MaxTime] microseconds (about 73,000
// years either side of 1970), so that no sum or difference of them and a
// span overflows an int64.
const MaxTime = int64(1) << 61

func inTime(t int64) bool { return t >= -MaxTime && t <= MaxTime }

// Limit is a GCRA limit. The zero value is invalid; see Validate.
type Limit struct {
	Rate   int64         // units admitted per Period, > 0
	Period time.Duration // > 0; at least Rate microseconds
	Burst  int64         // units that may be taken at once, > 0
}

// Validate reports whether the limit is usable.
func (l Limit) Validate() error {
	switch {
	case l.Rate <= 0:
		return fmt.Errorf("%w: rate must be > 0, got %d", ErrInvalidLimit, l.Rate)
	case l.Period <= 0:
		return fmt.Errorf("%w: period must be > 0, got %s", ErrInvalidLimit, l.Period)
	case l.Burst <= 0:
		return fmt.Errorf("%w: burst must be > 0, got %d", ErrInvalidLimit, l.Burst)
	case l.Period.Microseconds() < l.Rate:
		return fmt.Errorf("%w: rate %d per %s is finer than one unit per microsecond", ErrInvalidLimit, l.Rate, l.Period)
	}
	// Burst*T must stay below maxSpan; checked without a division because
	// stores validate on every call.
	if hi, lo := bits.Mul64(uint64(l.Burst), uint64(l.Interval())); hi != 0 || lo >= uint64(maxSpan) {
		return fmt.Errorf("%w: burst %d is too large for an interval of %dus", ErrInvalidLimit, l.Burst, l.Interval())
	}
	return nil
}

// Interval returns the emission interval T in microseconds: Period/Rate
// rounded up. The limit must be valid: for a Rate of 0 or less it returns 0.
func (l Limit) Interval() int64 {
	if l.Rate <= 0 {
		return 0
	}
	p := l.Period.Microseconds()
	return (p + l.Rate - 1) / l.Rate
}

// State is the per-key GCRA state. The zero value is a fresh key with its
// whole burst available.
type State struct {
	// TAT is the theoretical arrival time in Unix microseconds. Any TAT at
	// or before now means the key is full, exactly like a fresh key.
	TAT int64
}

// Fresh reports whether s carries no information at now: a store may drop
// it without giving any budget away.
func (s State) Fresh(now int64) bool { return s.TAT <= now }

// Decision is the outcome of Take. Durations are microseconds.
type Decision struct {
	Allowed bool
	// Remaining is how many units could be taken right after this decision.
	Remaining int64
	// RetryAfter is, when denied, how long until the same request would
	// conform with no delay. It is 0 when allowed.
	RetryAfter int64
	// ResetAfter is how long until the key is full again (fresh).
	ResetAfter int64
	// Delay is, when allowed with a positive maxDelay, how long the caller
	// must wait before acting on the units it was granted. It is 0 for a
	// request that conforms now.
	Delay int64
}

// Params is a validated limit in the units Take works in: the emission
// interval and the burst. Stores that decide on every call build it once per
// call with Limit.Params, which validates and divides exactly once. The zero
// value is invalid: TakeTo refuses it with ErrInvalidLimit.
type Params struct {
	Interval int64 // emission interval T in microseconds, >= 1
	Burst    int64 // > 0, with Burst*Interval < MaxSpan (2^52)
}

// Params validates the limit and returns it in Take's units.
func (l Limit) Params() (Params, error) {
	pm := l.Period.Microseconds()
	if l.Rate <= 0 || l.Burst <= 0 || pm < l.Rate {
		return Params{}, l.Validate()
	}
	t := (pm + l.Rate - 1) / l.Rate
	if hi, lo := bits.Mul64(uint64(l.Burst), uint64(t)); hi != 0 || lo >= uint64(maxSpan) {
		return Params{}, l.Validate()
	}
	return Params{Interval: t, Burst: l.Burst}, nil
}

// Take decides a request of cost units at now. maxDelay (microseconds, >= 0)
// lets the request reserve units that only become conforming within that
// delay: it is then allowed with Decision.Delay set and TAT advanced, and the
// caller must wait Delay before acting. With maxDelay 0 only requests that
// conform now are allowed. A cost of 0 is a peek: it never changes state.
//
// Denials return the input state unchanged.
func Take(l Limit, s State, now, cost, maxDelay int64) (State, Decision, error) {
	p, err := l.Params()
	if err != nil {
		return s, Decision{}, err
	}
	return p.Take(s, now, cost, maxDelay)
}

// Take is the package-level Take on a limit already validated by
// Limit.Params.
func (p Params) Take(s State, now, cost, maxDelay int64) (State, Decision, error) {
	var d Decision
	err := p.TakeTo(&s, now, cost, maxDelay, &d)
	return s, d, err
}

// TakeTo is Take working in place: it updates *s when the request is
// allowed (and costs something) and writes the decision to *d. It exists
// for stores' hot paths, which then copy nothing large. Params that did not
// come from Limit.Params are refused with ErrInvalidLimit, and a now or TAT
// beyond MaxTime with ErrOutOfRange; on any error *s and *d are untouched.
func (p Params) TakeTo(s *State, now, cost, maxDelay int64, d *Decision) error {
	if hi, lo := bits.Mul64(uint64(p.Burst), uint64(p.Interval)); p.Interval <= 0 || p.Burst <= 0 || hi != 0 || lo >= uint64(maxSpan) {
		return fmt.Errorf("%w: params with interval %d and burst %d", ErrInvalidLimit, p.Interval, p.Burst)
	}
	if cost < 0 {
		return ErrNegativeCost
	}
	if cost > p.Burst {
		return ErrCostExceedsBurst
	}
	if !inTime(now) || !inTime(s.TAT) {
		return ErrOutOfRange
	}
	t := p.Interval
	tau := p.Burst * t
	tat := max(s.TAT, now)
	newTAT := tat + cost*t
	allowAt := newTAT - tau
	if allowAt-now > max(maxDelay, 0) {
		d.Allowed = false
		d.Remaining = remaining(tau, tat, now, t)
		d.RetryAfter = allowAt - now
		d.ResetAfter = tat - now
		d.Delay = 0
		return nil
	}
	d.Allowed = true
	d.Remaining = remaining(tau, newTAT, now, t)
	d.RetryAfter = 0
	d.ResetAfter = newTAT - now
	d.Delay = max(allowAt-now, 0)
	if cost != 0 {
		s.TAT = newTAT
	}
	return nil
}

func remaining(tau, tat, now, t int64) int64 {
	r := (tau - (tat - now)) / t
	if r < 0 {
		return 0
	}
	return r
}

// Settle corrects a reservation of reserved units whose actual cost turned
// out to be actual: the difference is refunded (actual < reserved) or charged
// (actual > reserved) at now. A refund never raises the key above a full
// burst; a charge may push it into debt, because the provider already
// consumed those units. An invalid limit is an error (wrapping
// ErrInvalidLimit), and so are negative costs, a now or TAT beyond MaxTime
// (ErrOutOfRange) and, wrapping ErrCostExceedsBurst, a difference so large
// that the debt would reach MaxSpan (2^52 microseconds, about 142 years)
// beyond now even before a further Take of the whole burst, or a refund of
// MaxSpan or more.
func Settle(l Limit, s State, now, reserved, actual int64) (State, error) {
	if err := l.Validate(); err != nil {
		return s, err
	}
	if reserved < 0 || actual < 0 {
		return s, ErrNegativeCost
	}
	if !inTime(now) || !inTime(s.TAT) {
		return s, ErrOutOfRange
	}
	if reserved == actual {
		return s, nil
	}
	t := l.Interval()
	delta := actual - reserved
	if delta > maxSpan/t || -delta > maxSpan/t {
		return s, fmt.Errorf("%w: settle difference %d", ErrCostExceedsBurst, delta)
	}
	tat := s.TAT + delta*t
	if delta > 0 {
		// Debt is bounded so that TAT stays within maxSpan of now even
		// after a further Take of the whole burst: TAT never overflows.
		base := max(s.TAT, now)
		if delta > (maxSpan-l.Burst*t-(base-now))/t {
			return s, fmt.Errorf("%w: settle difference %d", ErrCostExceedsBurst, delta)
		}
		tat = base + delta*t
	}
	if tat < now {
		tat = now
	}
	return State{TAT: tat}, nil
}

// Observation is what a provider reported about a key's budget.
type Observation struct {
	// Remaining is how many units the provider says are available now. It
	// is clamped to [0, Burst].
	Remaining int64
	// ResetAfter, in microseconds, is when the provider will admit again
	// when Remaining is 0 (a Retry-After, or the end of an exhausted
	// window). It is ignored when Remaining is positive.
	ResetAfter int64
}

// Sync overrides the local belief with a provider's report at now: after it,
// exactly obs.Remaining units conform at now, and when obs.Remaining is 0 the
// first unit conforms only after obs.ResetAfter.
//
// A provider that reports a bucket as available units, maximum and restore
// rate (Shopify's throttleStatus) maps onto Limit{Rate: restore, Period:
// time.Second, Burst: maximum} and Observation{Remaining: available}; see
// BucketLimit.
//
// An invalid limit is an error (wrapping ErrInvalidLimit), and so
// (ErrOutOfRange) is a now beyond MaxTime or a ResetAfter that would take
// the TAT beyond it.
func Sync(l Limit, now int64, obs Observation) (State, error) {
	if err := l.Validate(); err != nil {
		return State{}, err
	}
	if !inTime(now) {
		return State{}, ErrOutOfRange
	}
	t := l.Interval()
	r := min(max(obs.Remaining, 0), l.Burst)
	if r == 0 && obs.ResetAfter > 0 {
		if obs.ResetAfter > MaxTime-now-(l.Burst-1)*t {
			return State{}, ErrOutOfRange
		}
		// First unit conforms at now+ResetAfter: TAT + T - tau = now + reset.
		return State{TAT: now + obs.ResetAfter + (l.Burst-1)*t}, nil
	}
	return State{TAT: now + (l.Burst-r)*t}, nil
}

// BucketLimit returns the limit of a leaky bucket that holds maximum units
// and restores restorePerSecond units each second.
func BucketLimit(maximum, restorePerSecond int64) Limit {
	return Limit{Rate: restorePerSecond, Period: time.Second, Burst: maximum}
}
