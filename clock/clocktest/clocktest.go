// Package clocktest provides a manual clock for tests.
package clocktest

import (
	"sort"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
)

// Clock is a manual clock: time moves only when the test calls Advance or
// Set, and timers fire when time reaches them.
//
// A Clock is safe for concurrent use. Build it with New.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*timer
	waiters []waiter // BlockUntilTimers callers
}

type waiter struct {
	n  int
	ch chan struct{}
}

var _ clock.Clock = (*Clock)(nil)

// New returns a manual clock reading t.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (a negative d moves it backwards) and
// fires every timer that is now due, in deadline order.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.setLocked(c.now.Add(d))
	c.mu.Unlock()
}

// Set moves the clock to t, forwards or backwards, and fires due timers.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.setLocked(t)
	c.mu.Unlock()
}

func (c *Clock) setLocked(t time.Time) {
	c.now = t
	sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].when.Before(c.timers[j].when) })
	keep := c.timers[:0]
	for _, tm := range c.timers {
		if !tm.when.After(t) {
			tm.fired = true
			tm.ch <- t // buffered, capacity 1, sent once
			continue
		}
		keep = append(keep, tm)
	}
	for i := len(keep); i < len(c.timers); i++ {
		c.timers[i] = nil
	}
	c.timers = keep
}

// Timers returns how many timers are pending.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// BlockUntilTimers waits until at least n timers are pending, so a test can
// advance time only once the code under test is waiting on it.
func (c *Clock) BlockUntilTimers(n int) {
	<-c.TimersAtLeast(n)
}

// TimersAtLeast returns a channel closed once at least n timers are
// pending: BlockUntilTimers as an event a test can select on beside
// others (the call under test returned instead, or a bound on the wait).
func (c *Clock) TimersAtLeast(n int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	if len(c.timers) >= n {
		close(ch)
		return ch
	}
	c.waiters = append(c.waiters, waiter{n: n, ch: ch})
	return ch
}

// NewTimer returns a timer that fires when the clock reaches Now()+d. A
// non-positive d fires at once.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &timer{c: c, when: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		tm.fired = true
		tm.ch <- c.now
		return tm
	}
	c.timers = append(c.timers, tm)
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if len(c.timers) >= w.n {
			close(w.ch)
			continue
		}
		keep = append(keep, w)
	}
	c.waiters = keep
	return tm
}

type timer struct {
	c     *Clock
	when  time.Time
	ch    chan time.Time
	fired bool
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.fired {
		return false
	}
	for i, tm := range t.c.timers {
		if tm == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			t.fired = true
			return true
		}
	}
	return false
}
