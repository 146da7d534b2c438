package clocktest

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicerl/sluice/clock"
)

var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// fired reports whether tm has fired, and with what time.
func fired(tm clock.Timer) (time.Time, bool) {
	select {
	case v := <-tm.C():
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestAdvanceAndSet(t *testing.T) {
	t.Parallel()
	c := New(base)
	if !c.Now().Equal(base) {
		t.Fatalf("Now = %v", c.Now())
	}
	c.Advance(90 * time.Second)
	if want := base.Add(90 * time.Second); !c.Now().Equal(want) {
		t.Fatalf("after Advance: %v, want %v", c.Now(), want)
	}
	c.Advance(-time.Hour)
	if want := base.Add(90*time.Second - time.Hour); !c.Now().Equal(want) {
		t.Fatalf("after Advance back: %v, want %v", c.Now(), want)
	}
	c.Set(base)
	if !c.Now().Equal(base) {
		t.Fatalf("after Set: %v", c.Now())
	}
}

func TestTimersFireInDeadlineOrder(t *testing.T) {
	t.Parallel()
	c := New(base)
	t3 := c.NewTimer(3 * time.Second)
	t1 := c.NewTimer(time.Second)
	t2 := c.NewTimer(2 * time.Second)
	if c.Timers() != 3 {
		t.Fatalf("Timers = %d, want 3", c.Timers())
	}
	if _, ok := fired(t1); ok {
		t.Fatal("timer fired before time moved")
	}
	c.Advance(999 * time.Millisecond)
	if _, ok := fired(t1); ok {
		t.Fatal("1s timer fired at 999ms")
	}
	c.Advance(500 * time.Millisecond)
	if v, ok := fired(t1); !ok || !v.Equal(base.Add(1499*time.Millisecond)) {
		t.Fatalf("1s timer at 1.499s: fired=%v with %v", ok, v)
	}
	if _, ok := fired(t2); ok {
		t.Fatal("2s timer fired at 1.499s")
	}
	if c.Timers() != 2 {
		t.Fatalf("Timers = %d, want 2", c.Timers())
	}
	// Backwards fires nothing.
	c.Advance(-time.Hour)
	if _, ok := fired(t2); ok {
		t.Fatal("timer fired when the clock went back")
	}
	// Setting past both fires both, each once.
	c.Set(base.Add(10 * time.Second))
	for i, tm := range []clock.Timer{t2, t3} {
		if v, ok := fired(tm); !ok || !v.Equal(base.Add(10*time.Second)) {
			t.Fatalf("timer %d: fired=%v with %v", i, ok, v)
		}
	}
	if c.Timers() != 0 {
		t.Fatalf("Timers = %d after all fired", c.Timers())
	}
	c.Advance(time.Hour)
	for _, tm := range []clock.Timer{t1, t2, t3} {
		if _, ok := fired(tm); ok {
			t.Fatal("a timer fired twice")
		}
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	c := New(base)
	tm := c.NewTimer(time.Second)
	keep := c.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop on a pending timer reported false")
	}
	if tm.Stop() {
		t.Fatal("second Stop reported true")
	}
	if c.Timers() != 1 {
		t.Fatalf("Timers = %d after Stop, want 1", c.Timers())
	}
	c.Advance(time.Minute)
	if _, ok := fired(tm); ok {
		t.Fatal("stopped timer fired")
	}
	if _, ok := fired(keep); !ok {
		t.Fatal("the other timer did not fire")
	}
	if keep.Stop() {
		t.Fatal("Stop on a fired timer reported true")
	}
}

func TestNonPositiveTimerFiresAtOnce(t *testing.T) {
	t.Parallel()
	c := New(base)
	for _, d := range []time.Duration{0, -time.Second} {
		tm := c.NewTimer(d)
		if v, ok := fired(tm); !ok || !v.Equal(base) {
			t.Fatalf("NewTimer(%v): fired=%v with %v", d, ok, v)
		}
		if tm.Stop() {
			t.Fatalf("NewTimer(%v): Stop reported true", d)
		}
	}
	if c.Timers() != 0 {
		t.Fatalf("Timers = %d", c.Timers())
	}
}

func TestBlockUntilTimers(t *testing.T) {
	t.Parallel()
	c := New(base)
	c.BlockUntilTimers(0) // already satisfied: returns at once

	done := make(chan time.Time)
	for range 2 {
		go func() {
			tm := c.NewTimer(5 * time.Second)
			done <- <-tm.C()
		}()
	}
	// Waiting for 1 and for 2 at once: both return once both goroutines
	// are parked on their timers.
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.BlockUntilTimers(1) }()
	go func() { defer wg.Done(); c.BlockUntilTimers(2) }()
	wg.Wait()
	if c.Timers() != 2 {
		t.Fatalf("BlockUntilTimers(2) returned with %d timers", c.Timers())
	}
	c.BlockUntilTimers(2) // satisfied now: returns at once
	c.Advance(5 * time.Second)
	for range 2 {
		select {
		case v := <-done:
			if !v.Equal(base.Add(5 * time.Second)) {
				t.Fatalf("fired with %v", v)
			}
		case <-time.After(time.Minute):
			t.Fatal("waiting goroutine never woke")
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	c := New(base)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				tm := c.NewTimer(time.Duration(1+(g+i)%5) * time.Millisecond)
				if i%3 == 0 {
					tm.Stop()
				}
				c.Advance(time.Millisecond)
				_ = c.Now()
				_ = c.Timers()
			}
		}()
	}
	wg.Wait()
	c.Advance(time.Hour)
	if c.Timers() != 0 {
		t.Fatalf("%d timers left after an hour", c.Timers())
	}
}

func TestTimersAtLeast(t *testing.T) {
	t.Parallel()
	c := New(base)
	select {
	case <-c.TimersAtLeast(0):
	default:
		t.Fatal("TimersAtLeast(0) not closed at once")
	}
	ch := c.TimersAtLeast(1)
	select {
	case <-ch:
		t.Fatal("closed with no timer pending")
	default:
	}
	tm := c.NewTimer(time.Second)
	select {
	case <-ch:
	default:
		t.Fatal("not closed once a timer was pending")
	}
	tm.Stop()
}
