package window

import (
	"testing"
	"time"
)

// FuzzWindow calls every function with arbitrary limits, states, instants
// and costs, valid or not, and checks that none panics, that an error
// leaves the state as it was, that an invalid limit is always refused, and
// that a valid one keeps Remaining within [0, Limit].
func FuzzWindow(f *testing.F) {
	f.Add(int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(1), int64(0), false)
	f.Add(int64(10), int64(sec), t0, int64(3), int64(2), t0, int64(1), int64(5), true)
	f.Add(int64(1), int64(1<<52), int64(MaxTime), int64(1<<53), int64(0), int64(-MaxTime), int64(1<<62), int64(1<<63-1), true)
	f.Add(int64(-1), int64(-1), int64(-1<<63), int64(-1), int64(-1), int64(1<<63-1), int64(-1), int64(-1<<63), false)
	f.Fuzz(func(t *testing.T, limit, windowUS, end, count, prev, now, cost, other int64, sliding bool) {
		l := Limit{Limit: limit, Window: time.Duration(windowUS) * time.Microsecond}
		valid := l.Validate(sliding) == nil
		s := State{End: end, Count: count, Prev: prev}
		take := FixedTake
		if sliding {
			take = SlidingTake
		}
		ns, d, err := take(l, s, now, cost)
		if err != nil && ns != s {
			t.Fatalf("take error %v changed the state %+v -> %+v", err, s, ns)
		}
		if err == nil {
			if !valid {
				t.Fatalf("take accepted invalid limit %+v", l)
			}
			if d.Remaining < 0 || d.Remaining > l.Limit {
				t.Fatalf("remaining %d outside [0, %d]", d.Remaining, l.Limit)
			}
		}
		ns, err = Settle(l, s, now, other, cost, other, sliding)
		if err != nil && ns != s {
			t.Fatalf("Settle error %v changed the state %+v -> %+v", err, s, ns)
		}
		if err == nil && !valid {
			t.Fatalf("Settle accepted invalid limit %+v", l)
		}
		if _, err := Sync(l, now, cost, other); err == nil && l.Validate(false) != nil {
			t.Fatalf("Sync accepted invalid limit %+v", l)
		}
		_ = s.Fresh(now, windowUS, sliding)
	})
}
