package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/clock/clocktest"
)

var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestMonotonicNeverGoesBack(t *testing.T) {
	t.Parallel()
	fake := clocktest.New(base)
	m := clock.NewMonotonic(fake)
	if got := m.Now(); !got.Equal(base) {
		t.Fatalf("Now = %v, want %v", got, base)
	}
	steps := []struct {
		move time.Duration
		want time.Time
	}{
		{-time.Hour, base},       // stepped back: stands still
		{30 * time.Minute, base}, // still behind
		{30*time.Minute + time.Second, base.Add(time.Second)}, // caught up and past
		{-24 * time.Hour, base.Add(time.Second)},
		{24 * time.Hour, base.Add(time.Second)},
		{time.Nanosecond, base.Add(time.Second + time.Nanosecond)},
	}
	for i, st := range steps {
		fake.Advance(st.move)
		if got := m.Now(); !got.Equal(st.want) {
			t.Fatalf("step %d (advance %v): Now = %v, want %v", i, st.move, got, st.want)
		}
	}
}

func TestMonotonicConcurrent(t *testing.T) {
	t.Parallel()
	fake := clocktest.New(base)
	m := clock.NewMonotonic(fake)
	stop := make(chan struct{})
	var jiggle sync.WaitGroup
	jiggle.Add(1)
	go func() {
		defer jiggle.Done()
		// Walk the base clock forwards and backwards, never past base+1h.
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			fake.Set(base.Add(time.Duration(i*7919%3600) * time.Second))
		}
	}()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev := m.Now()
			for range 2000 {
				now := m.Now()
				if now.Before(prev) {
					t.Errorf("Now went back from %v to %v", prev, now)
					return
				}
				if now.After(base.Add(time.Hour)) || now.Before(base) {
					t.Errorf("Now %v outside what the base clock ever read", now)
					return
				}
				prev = now
			}
		}()
	}
	wg.Wait()
	close(stop)
	jiggle.Wait()
}

func TestMonotonicDefaultsToReal(t *testing.T) {
	t.Parallel()
	before := time.Now()
	got := clock.NewMonotonic(nil).Now()
	after := time.Now()
	if got.Before(before.Truncate(time.Microsecond)) || got.After(after) {
		t.Fatalf("Now = %v, not between %v and %v", got, before, after)
	}
}

func TestMonotonicTimerDelegates(t *testing.T) {
	t.Parallel()
	fake := clocktest.New(base)
	m := clock.NewMonotonic(fake)
	tm := m.NewTimer(time.Second)
	if fake.Timers() != 1 {
		t.Fatalf("base has %d timers, want 1", fake.Timers())
	}
	fake.Advance(time.Second)
	select {
	case <-tm.C():
	default:
		t.Fatal("timer did not fire when the base clock reached it")
	}
}

func TestOr(t *testing.T) {
	t.Parallel()
	if _, ok := clock.Or(nil).(clock.Real); !ok {
		t.Fatalf("Or(nil) = %T, want clock.Real", clock.Or(nil))
	}
	fake := clocktest.New(base)
	if clock.Or(fake) != clock.Clock(fake) {
		t.Fatal("Or(c) did not return c")
	}
}

func TestReal(t *testing.T) {
	t.Parallel()
	var c clock.Real
	if d := time.Since(c.Now()); d < 0 || d > time.Minute {
		t.Fatalf("Real.Now is %v off", d)
	}
	tm := c.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(time.Minute):
		t.Fatal("real timer never fired")
	}
	if tm.Stop() {
		t.Fatal("Stop on a fired timer reported true")
	}
	long := c.NewTimer(time.Hour)
	if !long.Stop() {
		t.Fatal("Stop on a pending timer reported false")
	}
	if long.Stop() {
		t.Fatal("second Stop reported true")
	}
}
