package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicerl/sluice/gcra"
	"github.com/sluicerl/sluice/window"
)

// State is one key's rate state in a backend-neutral shape. Backends that
// run the algorithms in Go (memstore, sqlitestore) keep it as is; the Redis
// and PostgreSQL stores keep the same three numbers and reimplement the
// arithmetic in Lua and SQL.
//
// For GCRA, Time is the theoretical arrival time. For windows, Time is the
// end of the counted window, Count the cost admitted in it and Prev (sliding
// only) the cost admitted in the window before. All times are Unix
// microseconds. The zero value is a fresh key.
type State struct {
	Time  int64
	Count int64
	Prev  int64
}

// Check makes the checks every backend makes on an item before doing any
// work, in this order, so that all of them fail alike: a key, a valid limit,
// and a cost the limit could ever grant.
func (it *Item) Check() error {
	if err := CheckKey(it.Key); err != nil {
		return err
	}
	if err := it.Limit.Validate(); err != nil {
		return err
	}
	return CheckCost(it.Limit, it.Cost)
}

// CheckCost validates a cost against a limit.
func CheckCost(l Limit, cost int64) error {
	if cost < 0 {
		return ErrNegativeCost
	}
	if cost > l.Max() {
		return ErrCostExceedsLimit
	}
	return nil
}

// Eval decides a request of cost units at now (Unix microseconds) against
// the state *st, updating *st in place when the request is allowed (and
// costs something), and writing the outcome to *res. It validates the limit
// and the cost itself (with the same errors as Limit.Validate and
// CheckCost), so a backend's hot path needs nothing else. Eval is the single
// definition of the arithmetic that every Go-side backend runs. It works
// through pointers so that the hot path copies nothing large.
func Eval(l *Limit, st *State, now, cost int64, maxDelay time.Duration, res *Result) error {
	var p Prepared
	if err := p.prepare(l); err != nil {
		return err
	}
	return p.Eval(st, now, cost, maxDelay, res)
}

// Prepared is a limit validated once, with the numbers deciding it needs
// computed up front, for callers that decide the same limit many times (a
// limiter's policy). Build it with Prepare. It is immutable and safe for
// concurrent use.
type Prepared struct {
	limit Limit
	gp    gcra.Params // GCRA only
	max   int64
}

// Prepare validates l and returns it prepared.
func Prepare(l Limit) (*Prepared, error) {
	p := new(Prepared)
	if err := p.prepare(&l); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Prepared) prepare(l *Limit) error {
	if err := CheckID("limit name", l.Name); err != nil {
		return err
	}
	p.limit = *l
	if l.Algorithm == GCRA {
		burst := l.Burst
		if burst == 0 {
			burst = l.Rate
		}
		gp, err := gcra.Limit{Rate: l.Rate, Period: l.Period, Burst: burst}.Params()
		if err != nil || l.Burst < 0 {
			return l.Validate()
		}
		p.gp, p.max = gp, gp.Burst
		return nil
	}
	if err := l.Validate(); err != nil {
		return err
	}
	p.max = l.Rate
	return nil
}

// Limit returns the prepared limit.
func (p *Prepared) Limit() Limit { return p.limit }

// Name returns the prepared limit's name.
func (p *Prepared) Name() string { return p.limit.Name }

// IsGCRA reports whether the prepared limit is a GCRA limit.
func (p *Prepared) IsGCRA() bool { return p.limit.Algorithm == GCRA }

// FreshAt is the package-level FreshAt for the prepared limit.
func (p *Prepared) FreshAt(s *State) int64 { return FreshAt(p.limit, *s) }

// Eval is the package-level Eval on a prepared limit. After the cost, it
// refuses a now beyond MaxNow and a change that would leave the state out
// of range (InRange) with ErrOutOfRange, leaving *st and *res untouched.
func (p *Prepared) Eval(st *State, now, cost int64, maxDelay time.Duration, res *Result) error {
	if cost < 0 {
		return ErrNegativeCost
	}
	if cost > p.max {
		return ErrCostExceedsLimit
	}
	if now >= MaxNow || now < 0 {
		return ErrOutOfRange
	}
	if p.limit.Algorithm == GCRA {
		var d gcra.Decision
		gs := gcra.State{TAT: st.Time}
		if err := p.gp.TakeTo(&gs, now, cost, maxDelay.Microseconds(), &d); err != nil {
			return ErrOutOfRange // a stored time beyond gcra.MaxTime: never written
		}
		if gs.TAT != st.Time && (gs.TAT >= MaxTime || gs.TAT <= -MaxTime) {
			return ErrOutOfRange
		}
		// Only the time moves: on a key whose state a window algorithm
		// wrote (a policy reload), the counts stay, as every backend
		// stores them.
		st.Time = gs.TAT
		res.Limit = p.max
		res.At = now
		res.Allowed = d.Allowed
		res.Remaining = d.Remaining
		res.RetryAfter = micros(d.RetryAfter)
		res.ResetAfter = micros(d.ResetAfter)
		res.Delay = micros(d.Delay)
		return nil
	}
	take := window.FixedTake
	if p.limit.Algorithm == SlidingWindow {
		// A state whose window would end at MaxTime or later under this
		// limit (one a fixed window of the same name left, after a policy
		// reload) is out of range: its answers could reach 2^53.
		if (st.Count != 0 || st.Prev != 0) && st.Time >= MaxTime-p.limit.Period.Microseconds() {
			return ErrOutOfRange
		}
		take = window.SlidingTake
	}
	ns, d, err := take(p.limit.Window(), window.State{End: st.Time, Count: st.Count, Prev: st.Prev}, now, cost)
	if err != nil {
		return ErrOutOfRange // a stored state beyond what any write leaves
	}
	n := State{Time: ns.End, Count: ns.Count, Prev: ns.Prev}
	if n != *st && !InRange(p.limit, n) {
		return ErrOutOfRange
	}
	*st = n
	res.Limit = p.max
	res.At = now
	res.Allowed = d.Allowed
	res.Remaining = d.Remaining
	res.RetryAfter = micros(d.RetryAfter)
	res.ResetAfter = micros(d.ResetAfter)
	res.Delay = 0
	return nil
}

// InRange reports whether a backend can store s, written under l: its
// time and FreshAt(l, s) below MaxTime, its time above -MaxTime and its
// counts below MaxTime. Every backend refuses a write of a state out of
// range with ErrOutOfRange.
func InRange(l Limit, s State) bool {
	return FreshAt(l, s) < MaxTime && s.Time < MaxTime && s.Time > -MaxTime && s.Count < MaxTime && s.Prev < MaxTime
}

// EvalSettle applies SettleParams to s at now. The limit must be valid.
// Errors come in this order: negative costs, a now beyond MaxNow
// (ErrOutOfRange), a charge or refund too large to count
// (ErrCostExceedsLimit, as gcra.Settle and window.Settle bound them), and
// a new state out of range (ErrOutOfRange).
func EvalSettle(s State, now int64, p *SettleParams) (State, error) {
	ns, err := evalSettle(s, now, p)
	if err == nil && ns != s && !InRange(p.Limit, ns) {
		return s, ErrOutOfRange
	}
	return ns, err
}

func evalSettle(s State, now int64, p *SettleParams) (State, error) {
	if p.Reserved < 0 || p.Actual < 0 {
		return s, ErrNegativeCost
	}
	if now >= MaxNow || now < 0 {
		return s, ErrOutOfRange
	}
	l := p.Limit
	switch l.Algorithm {
	case GCRA:
		ns, err := gcra.Settle(l.GCRA(), gcra.State{TAT: s.Time}, now, p.Reserved, p.Actual)
		switch {
		case errors.Is(err, gcra.ErrCostExceedsBurst):
			return s, ErrCostExceedsLimit
		case err != nil:
			return s, ErrOutOfRange // a stored time beyond gcra.MaxTime
		}
		return State{Time: ns.TAT}, nil
	default:
		wl := l.Window()
		ns, err := window.Settle(wl, window.State{End: s.Time, Count: s.Count, Prev: s.Prev},
			now, p.ReservedEnd(), p.Reserved, p.Actual, l.Algorithm == SlidingWindow)
		switch {
		case errors.Is(err, window.ErrCostExceedsLimit):
			return s, ErrCostExceedsLimit
		case err != nil:
			return s, ErrOutOfRange // a stored state beyond what any write leaves
		}
		return State{Time: ns.End, Count: ns.Count, Prev: ns.Prev}, nil
	}
}

// EvalSync returns the state a provider's report implies at now for a key
// holding s. The limit must be valid. A now beyond MaxNow, and a change to
// a state out of range (a pause reaching MaxTime), are ErrOutOfRange.
func EvalSync(s State, now int64, p *SyncParams) (State, error) {
	if now >= MaxNow || now < 0 {
		return s, ErrOutOfRange
	}
	l := p.Limit
	// now is within 2^52 and a Duration within 2^53 microseconds, so
	// neither gcra.Sync nor window.Sync reaches its MaxTime: an error is
	// an invalid limit.
	var ns State
	switch l.Algorithm {
	case GCRA:
		gs, err := gcra.Sync(l.GCRA(), now, gcra.Observation{Remaining: p.Remaining, ResetAfter: p.ResetAfter.Microseconds()})
		if err != nil {
			return s, fmt.Errorf("%w %q: %w", ErrInvalidLimit, l.Name, err)
		}
		ns = State{Time: gs.TAT}
	default:
		ws, err := window.Sync(l.Window(), now, p.Remaining, p.ResetAfter.Microseconds())
		if err != nil {
			return s, fmt.Errorf("%w %q: %w", ErrInvalidLimit, l.Name, err)
		}
		ns = State{Time: ws.End, Count: ws.Count, Prev: ws.Prev}
	}
	if ns != s && !InRange(l, ns) {
		return s, ErrOutOfRange
	}
	return ns, nil
}

// Fresh reports whether s is indistinguishable from a fresh key at now, so
// that a backend may drop it (or let it expire) without giving budget away.
func Fresh(l Limit, s State, now int64) bool {
	switch l.Algorithm {
	case GCRA:
		return gcra.State{TAT: s.Time}.Fresh(now)
	default:
		return window.State{End: s.Time, Count: s.Count, Prev: s.Prev}.Fresh(now, l.Period.Microseconds(), l.Algorithm == SlidingWindow)
	}
}

// FreshAt returns the earliest time (Unix microseconds) at which s becomes
// fresh, assuming no further takes: a backend's expiry time for the key.
func FreshAt(l Limit, s State) int64 {
	switch l.Algorithm {
	case GCRA:
		return s.Time
	case SlidingWindow:
		if s.Count == 0 && s.Prev == 0 {
			return 0
		}
		return s.Time + l.Period.Microseconds()
	default:
		if s.Count == 0 {
			return 0
		}
		return s.Time
	}
}

// Kept returns what a backend stores for the state s that a write under l
// left at now, and when that becomes fresh: s and FreshAt(l, s), or, when
// s is already fresh under l, the zero State and 0. The zero State is
// nothing: every algorithm reads it as a fresh key, whereas a state fresh
// under one algorithm need not be under another (a window refunded to
// zero keeps its end, which GCRA would read as a TAT in the future). Every
// backend stores this (Redis and memstore drop the key, SQLite and
// PostgreSQL may keep the row, zeroed), so that a key read under another
// algorithm of the same name after a policy reload reads alike on all.
//
// A state that becomes fresh later, with no write, is absent from then on
// (Live): Redis may expire it at that instant, memstore, SQLite and
// PostgreSQL keep it until a sweep or Cleanup, and every backend reads it
// as nothing either way.
func Kept(l Limit, s State, now int64) (State, int64) {
	fa := FreshAt(l, s)
	if fa <= now {
		return State{}, 0
	}
	return s, fa
}

// Live returns the state a backend reads at now for a stored state s whose
// writer fixed its fresh time at fa (FreshAt under the limit that wrote
// it, as Kept returns it): s while fa is after now, and the zero State, a
// fresh key, from fa on. Every backend reads stored state through it and
// so keeps fa beside the state (memstore's cells, the fresh_at columns of
// SQLite and PostgreSQL, the fourth number of a Redis window value). The
// check matters only across algorithms of one name (a policy reload):
// under its writer's limit, a state whose fresh time has passed already
// reads as a fresh key; under another it need not (a fixed window's count
// just after its end is, to a sliding window, the previous window's, and
// the counts a GCRA take keeps beside its TAT would outlive the window
// that counted them).
func Live(s State, fa, now int64) State {
	if fa <= now {
		return State{}
	}
	return s
}

// NowMicros returns a params' Now as Unix microseconds, or 0 when it is
// the zero Time: none, the store's clock decides. Every backend reads an
// override through it, so the Unix epoch itself also means none.
func NowMicros(now time.Time) int64 {
	if now.IsZero() {
		return 0
	}
	return now.UnixMicro()
}

// ReservedEnd returns, for a window limit, the end of the window the
// reservation was taken in: ReservedAt rounded up past it to a multiple of
// the period (windows are aligned to the Unix epoch). It returns 0 for
// GCRA, and for a period shorter than a microsecond (validate first).
func (p *SettleParams) ReservedEnd() int64 {
	w := p.Limit.Period.Microseconds()
	if p.Limit.Algorithm == GCRA || w <= 0 {
		return 0
	}
	r := p.ReservedAt % w
	if r < 0 {
		r += w
	}
	return p.ReservedAt - r + w
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
