// Package clock abstracts time so that everything above the pure algorithms
// can be tested with a manual clock.
//
// Pure packages (gcra, window, ...) never read a clock: they take "now" as an
// argument. Packages with timers or shared state take a Clock. For shared
// state the store's clock decides; in-process stores clamp the process clock
// with Monotonic so that it never runs backwards.
package clock

import (
	"sync/atomic"
	"time"
)

// Clock tells the time and makes timers.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock.
type Timer interface {
	// C returns the channel the timer's time is sent on.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether the call
	// stopped the timer (false if it had already fired or been stopped).
	Stop() bool
}

// Real is the process's wall clock. Its zero value is ready to use and it is
// safe for concurrent use.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// Monotonic wraps a Clock so that Now never returns a time before one it has
// already returned: a wall clock stepped backwards (NTP, a VM restore) reads
// as standing still until it catches up.
//
// A Monotonic is safe for concurrent use. Build it with NewMonotonic.
type Monotonic struct {
	base Clock
	last atomic.Int64 // unix nanoseconds of the latest Now returned
}

// NewMonotonic returns a clamped view of base. A nil base means Real.
func NewMonotonic(base Clock) *Monotonic {
	if base == nil {
		base = Real{}
	}
	return &Monotonic{base: base}
}

// Now returns the later of the base clock's time and the latest time this
// clock has returned.
func (m *Monotonic) Now() time.Time {
	t := m.base.Now()
	n := t.UnixNano()
	for {
		last := m.last.Load()
		if n <= last {
			return time.Unix(0, last)
		}
		if m.last.CompareAndSwap(last, n) {
			return t
		}
	}
}

// NewTimer delegates to the base clock.
func (m *Monotonic) NewTimer(d time.Duration) Timer { return m.base.NewTimer(d) }

// Or returns c, or Real when c is nil. Constructors use it to apply the
// documented default.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}
