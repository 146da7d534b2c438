// Package window implements window-counting rate limits as pure functions:
// a fixed window aligned to the clock (the form exchanges publish: "1200
// weight per minute", resetting on the minute) and a sliding-window counter
// that weighs the previous window by how much of it still overlaps.
//
// Like package gcra, times are int64 Unix microseconds and durations int64
// microseconds; nothing here allocates, blocks or reads a clock, and every
// function is safe for concurrent use.
//
// Windows are aligned to the Unix epoch: a 1-minute window starts on the
// minute. A fixed window admits at most Limit units per window. A sliding
// window estimates the units in the last Window as
// ceil(prev*(Window-elapsed)/Window) + current and admits while that stays at
// or below Limit; rounding up keeps the estimate conservative.
package window

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrCostExceedsLimit is returned for a request whose cost is above the
	// window's limit: it could never be admitted.
	ErrCostExceedsLimit = errors.New("window: cost exceeds limit")
	// ErrNegativeCost is returned for a cost below zero.
	ErrNegativeCost = errors.New("window: negative cost")
	// ErrInvalidLimit is wrapped by Limit.Validate, and returned by every
	// function given an invalid limit.
	ErrInvalidLimit = errors.New("window: invalid limit")
	// ErrOutOfRange is returned for an instant (now, a state's End, or now
	// plus a Sync's resetAfter) beyond MaxTime microseconds either side of
	// the Unix epoch, or a state count outside [0, 2^53]: the arithmetic
	// could overflow.
	ErrOutOfRange = errors.New("window: value out of range")
)

// MaxTime bounds the instants every function here accepts (about 73,000
// years either side of 1970), so that no sum of them and a window
// overflows an int64.
const MaxTime = int64(1) << 61

// check validates what every function here is given.
func check(l Limit, s State, now int64, sliding bool) error {
	if err := l.Validate(sliding); err != nil {
		return err
	}
	if now < -MaxTime || now > MaxTime || s.End < -MaxTime || s.End > MaxTime ||
		s.Count < 0 || s.Count > MaxSlidingProduct || s.Prev < 0 || s.Prev > MaxSlidingProduct {
		return ErrOutOfRange
	}
	return nil
}

// MaxSlidingProduct bounds Limit*Window (in microseconds) for sliding
// windows: Limit must be below MaxSlidingProduct/Window, so that the
// rounded-up weighting's numerator stays within 2^53 and is exact in every
// store, including Lua's doubles.
const MaxSlidingProduct = int64(1) << 53

// maxExact bounds a window's length (in microseconds) and its limit, so
// that window ends and counts stay exact in every store (about 142 years).
const maxExact = int64(1) << 52

// Limit admits Limit units per Window. The zero value is invalid.
type Limit struct {
	Limit  int64         // units per window, > 0
	Window time.Duration // >= 1 microsecond
}

// Validate reports whether the limit is usable as a fixed window (sliding
// false) or a sliding window (sliding true).
func (l Limit) Validate(sliding bool) error {
	w := l.Window.Microseconds()
	switch {
	case l.Limit <= 0:
		return fmt.Errorf("%w: limit must be > 0, got %d", ErrInvalidLimit, l.Limit)
	case w <= 0:
		return fmt.Errorf("%w: window must be at least 1us, got %s", ErrInvalidLimit, l.Window)
	case w > maxExact || l.Limit > maxExact:
		// Every store must hold window ends and counts exactly, Redis's
		// Lua doubles included.
		return fmt.Errorf("%w: limit %d per %s is beyond 2^52 (units, or microseconds of window)", ErrInvalidLimit, l.Limit, l.Window)
	case sliding && l.Limit >= MaxSlidingProduct/w:
		return fmt.Errorf("%w: sliding limit %d per %s is too large (limit x window must stay under 2^53 microseconds); use a fixed window or gcra", ErrInvalidLimit, l.Limit, l.Window)
	}
	return nil
}

// State is the per-key window state. The zero value is a fresh key.
type State struct {
	// End is the exclusive end, in Unix microseconds, of the window Count
	// belongs to. It is normally aligned to the window; Sync may push it
	// further to pause the key.
	End int64
	// Count is the cost admitted in the window ending at End.
	Count int64
	// Prev is, for sliding windows, the cost admitted in the window before.
	Prev int64
}

// Decision is the outcome of a take. Durations are microseconds.
type Decision struct {
	Allowed    bool
	Remaining  int64 // units that could be taken right after this decision
	RetryAfter int64 // when denied: time until the request would be admitted
	ResetAfter int64 // time until the key holds nothing (fresh)
}

func alignUp(t, w int64) int64 {
	r := t % w
	if r < 0 {
		r += w
	}
	return t - r + w // end of the window containing t
}

// current returns the state rolled forward to now: the window end that now
// counts against, and its current and previous counts.
func current(s State, now, w int64) (end, cur, prev int64) {
	end = alignUp(now, w)
	switch {
	case end < s.End:
		// The clock ran backwards, or Sync paused the key: keep counting
		// against the stored window. This mints nothing.
		return s.End, s.Count, s.Prev
	case end == s.End:
		return end, s.Count, s.Prev
	case end == s.End+w:
		return end, 0, s.Count
	default:
		return end, 0, 0
	}
}

// FixedTake decides a request of cost units at now against a fixed window.
// A cost of 0 is a peek. Denials return the input state unchanged. An
// invalid limit (wrapping ErrInvalidLimit), a negative cost, a cost above
// the limit and an instant or state out of range (ErrOutOfRange) are errors.
func FixedTake(l Limit, s State, now, cost int64) (State, Decision, error) {
	if err := check(l, s, now, false); err != nil {
		return s, Decision{}, err
	}
	if cost < 0 {
		return s, Decision{}, ErrNegativeCost
	}
	if cost > l.Limit {
		return s, Decision{}, ErrCostExceedsLimit
	}
	w := l.Window.Microseconds()
	end, cur, _ := current(s, now, w)
	if cur+cost > l.Limit {
		// cur may exceed the limit after a settled charge: that is debt,
		// not negative room.
		return s, Decision{Remaining: max(l.Limit-cur, 0), RetryAfter: end - now, ResetAfter: end - now}, nil
	}
	cur += cost
	d := Decision{Allowed: true, Remaining: l.Limit - cur}
	if cur > 0 {
		d.ResetAfter = end - now
	}
	if cost == 0 {
		return s, d, nil
	}
	return State{End: end, Count: cur}, d, nil
}

// weighted returns ceil(prev*(w-elapsed)/w) for 0 <= elapsed <= w.
func weighted(prev, w, elapsed int64) int64 {
	if prev == 0 || elapsed >= w {
		return 0
	}
	return (prev*(w-elapsed) + w - 1) / w
}

// firstElapsed returns the smallest elapsed e in [0, w] at which
// ceil(prev*(w-e)/w) <= budget, for budget >= 0.
func firstElapsed(prev, budget, w int64) int64 {
	if prev <= budget {
		return 0
	}
	// ceil(prev*(w-e)/w) <= budget  <=>  prev*(w-e) <= budget*w
	// <=> e >= w - floor(budget*w/prev)
	return w - budget*w/prev
}

// SlidingTake decides a request of cost units at now against a sliding
// window counter. A cost of 0 is a peek. Denials return the input state
// unchanged. Errors are as in FixedTake.
func SlidingTake(l Limit, s State, now, cost int64) (State, Decision, error) {
	if err := check(l, s, now, true); err != nil {
		return s, Decision{}, err
	}
	if cost < 0 {
		return s, Decision{}, ErrNegativeCost
	}
	if cost > l.Limit {
		return s, Decision{}, ErrCostExceedsLimit
	}
	w := l.Window.Microseconds()
	end, cur, prev := current(s, now, w)
	start := end - w
	elapsed := min(max(now-start, 0), w)
	est := weighted(prev, w, elapsed) + cur
	if est+cost > l.Limit {
		var at int64 // absolute time at which the request would conform
		if cur+cost <= l.Limit {
			at = start + firstElapsed(prev, l.Limit-cur-cost, w)
		} else {
			// Only in the next window, where cur becomes prev.
			at = end + firstElapsed(cur, l.Limit-cost, w)
		}
		return s, Decision{
			Remaining:  max(l.Limit-est, 0),
			RetryAfter: max(at-now, 1),
			ResetAfter: slidingReset(end, w, now, cur, prev),
		}, nil
	}
	cur += cost
	d := Decision{
		Allowed:    true,
		Remaining:  l.Limit - est - cost,
		ResetAfter: slidingReset(end, w, now, cur, prev),
	}
	if cost == 0 {
		return s, d, nil
	}
	return State{End: end, Count: cur, Prev: prev}, d, nil
}

func slidingReset(end, w, now, cur, prev int64) int64 {
	switch {
	case cur > 0:
		return end + w - now
	case prev > 0:
		return end - now
	}
	return 0
}

// Fresh reports whether s carries no information at now for a window of w
// microseconds: a store may drop it without giving any budget away. sliding
// selects the sliding-window rule (the previous window still counts).
func (s State) Fresh(now, w int64, sliding bool) bool {
	if s.Count == 0 && s.Prev == 0 {
		return true
	}
	if sliding {
		return s.End+w <= now
	}
	return s.End <= now
}

// Settle corrects a reservation of reserved units whose actual cost was
// actual, taken in the window that ended at reservedEnd (State.End after the
// take). A refund applies only while that window is still the current one;
// once it has passed, the units have expired anyway. A charge always lands
// in the current window, and may take it over the limit, but not past
// max(Limit, MaxSlidingProduct/window - 1) units: a larger one is refused with
// ErrCostExceedsLimit, so that counts never overflow. An invalid limit,
// negative costs and an instant or state out of range are errors as in
// FixedTake.
func Settle(l Limit, s State, now, reservedEnd, reserved, actual int64, sliding bool) (State, error) {
	if err := check(l, s, now, sliding); err != nil {
		return s, err
	}
	if reserved < 0 || actual < 0 {
		return s, ErrNegativeCost
	}
	w := l.Window.Microseconds()
	end, cur, prev := current(s, now, w)
	switch delta := actual - reserved; {
	case delta > 0:
		// Debt is bounded so that counts can neither overflow nor lose
		// exactness in the sliding weighting: count*window + window - 1,
		// the largest numerator of the rounded-up weighting, stays <= 2^53.
		if delta > max(l.Limit, MaxSlidingProduct/w-1)-cur {
			return s, fmt.Errorf("%w: settle difference %d", ErrCostExceedsLimit, delta)
		}
		cur += delta
	case delta < 0:
		if end != reservedEnd {
			if sliding && end == reservedEnd+w {
				prev = max(prev+delta, 0)
				return State{End: end, Count: cur, Prev: prev}, nil
			}
			return s, nil
		}
		cur = max(cur+delta, 0)
	default:
		return s, nil
	}
	if !sliding {
		prev = 0
	}
	return State{End: end, Count: cur, Prev: prev}, nil
}

// Sync overrides the local belief with a provider's report at now: remaining
// units are available in the current window, and when remaining is 0 and
// resetAfter reaches past the current window, the key stays closed until the
// first window boundary at or after now+resetAfter. Counts from before are
// dropped: the provider's word replaces them. An invalid limit (for a fixed
// window: Sync's state is the same for both) is an error wrapping
// ErrInvalidLimit, and a now, or with remaining 0 a now+resetAfter, beyond
// MaxTime is ErrOutOfRange.
func Sync(l Limit, now, remaining, resetAfter int64) (State, error) {
	if err := check(l, State{}, now, false); err != nil {
		return State{}, err
	}
	w := l.Window.Microseconds()
	r := min(max(remaining, 0), l.Limit)
	end := alignUp(now, w)
	if r == 0 && resetAfter > end-now {
		if resetAfter > MaxTime-now {
			return State{}, ErrOutOfRange
		}
		end = alignUp(now+resetAfter-1, w)
	}
	return State{End: end, Count: l.Limit - r}, nil
}
