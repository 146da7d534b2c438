package gcra

import (
	"cmp"
	"errors"
	"slices"
	"testing"
	"time"
)

// admission is one allowed take in the fuzz run: when the caller may act on
// it (now + Delay) and what it cost.
type admission struct{ at, cost int64 }

// FuzzTake drives one key through a sequence of (dt, cost, maxDelay) steps
// decoded from ops, four bytes a step, and checks GCRA's invariants after
// every step and over the whole run:
//
//   - over any interval [a, b] between admitted instants, admitted cost is at
//     most Burst + floor((b-a)/T), whatever order the instants came in (a
//     negative dt is a clock running backwards);
//   - Remaining is in [0, Burst];
//   - with cost > 0, RetryAfter > 0 exactly when denied, and it is exact;
//   - a denial, a peek and an error leave the state unchanged;
//   - a decision allowed at some instant is allowed at every later one, so a
//     clock that runs backwards can only admit less.
func FuzzTake(f *testing.F) {
	f.Add(uint16(10), uint32(1_000_000), uint8(5), []byte("\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x03\x00\x10\x00\x01\x00"))
	f.Fuzz(func(t *testing.T, rate uint16, periodUS uint32, burst uint8, ops []byte) {
		l := Limit{
			Rate:   int64(rate%1000) + 1,
			Period: time.Duration(int64(periodUS)%(3600*sec)+1) * time.Microsecond,
			Burst:  int64(burst%64) + 1,
		}
		if l.Period.Microseconds() < l.Rate {
			l.Period = time.Duration(l.Rate) * time.Microsecond
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("built an invalid limit %+v: %v", l, err)
		}
		T := l.Interval()
		unit := max(1, T/32) // dt granularity: a step spans about ±1000 T
		if len(ops) > 4*512 {
			ops = ops[:4*512]
		}

		var (
			s        State
			now      = t0
			latest   = t0 // latest instant seen so far
			admitted []admission
		)
		for i := 0; i+4 <= len(ops); i += 4 {
			now += int64(int16(uint16(ops[i])|uint16(ops[i+1])<<8)) * unit
			latest = max(latest, now)
			cost := int64(ops[i+2]) % (l.Burst + 2) // Burst+1 must be refused
			var maxDelay int64
			if ops[i+3] >= 0xe0 {
				maxDelay = int64(ops[i+3]-0xe0) * T / 4
			}

			ns, d, err := Take(l, s, now, cost, maxDelay)
			if cost > l.Burst {
				if !errors.Is(err, ErrCostExceedsBurst) || ns != s || d.Allowed {
					t.Fatalf("step %d: cost %d > burst %d: %+v %v", i/4, cost, l.Burst, d, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("step %d: %v", i/4, err)
			}
			if d.Remaining < 0 || d.Remaining > l.Burst {
				t.Fatalf("step %d: remaining %d outside [0, %d]", i/4, d.Remaining, l.Burst)
			}
			if d.ResetAfter < 0 || d.Delay < 0 || d.RetryAfter < 0 {
				t.Fatalf("step %d: negative duration in %+v", i/4, d)
			}
			if cost > 0 && (d.RetryAfter > 0) == d.Allowed {
				t.Fatalf("step %d: allowed=%v with retryAfter %d", i/4, d.Allowed, d.RetryAfter)
			}
			if !d.Allowed || cost == 0 {
				if ns != s {
					t.Fatalf("step %d: denial or peek changed state %+v -> %+v", i/4, s, ns)
				}
			}
			if d.Allowed {
				if d.Delay > maxDelay || (maxDelay == 0 && d.Delay != 0) {
					t.Fatalf("step %d: delay %d with maxDelay %d", i/4, d.Delay, maxDelay)
				}
				if cost > 0 && ns.TAT != max(s.TAT, now)+cost*T {
					t.Fatalf("step %d: TAT %d, want %d", i/4, ns.TAT, max(s.TAT, now)+cost*T)
				}
				if d.ResetAfter != max(ns.TAT, now)-now {
					t.Fatalf("step %d: resetAfter %d, TAT is %d past now", i/4, d.ResetAfter, ns.TAT-now)
				}
			} else if maxDelay == 0 {
				// RetryAfter is exact: the same request conforms then and
				// not a microsecond sooner.
				if _, d2, _ := Take(l, s, now+d.RetryAfter, cost, 0); !d2.Allowed {
					t.Fatalf("step %d: denied again after retryAfter %d", i/4, d.RetryAfter)
				}
				if _, d2, _ := Take(l, s, now+d.RetryAfter-1, cost, 0); d2.Allowed {
					t.Fatalf("step %d: allowed before retryAfter %d", i/4, d.RetryAfter)
				}
			}
			// Time only helps: what conforms now conforms later too.
			if now < latest {
				_, dl, _ := Take(l, s, latest, cost, maxDelay)
				if d.Allowed && !dl.Allowed {
					t.Fatalf("step %d: allowed at a backwards instant, denied at the latest one", i/4)
				}
				_, pb, _ := Take(l, s, now, 0, 0)
				_, pl, _ := Take(l, s, latest, 0, 0)
				if pb.Remaining > pl.Remaining {
					t.Fatalf("step %d: remaining %d at a backwards instant > %d at the latest", i/4, pb.Remaining, pl.Remaining)
				}
			}
			if d.Allowed && cost > 0 {
				admitted = append(admitted, admission{at: now + d.Delay, cost: cost})
			}
			s = ns
		}
		checkAdmissions(t, admitted, l.Burst, T)
	})
}

// fataler is the part of testing.T the oracle needs, so that it can be
// tested itself.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// checkAdmissions checks that the admitted cost over every interval
// [a_i, a_j] between admitted instants is at most burst + floor((a_j-a_i)/T).
func checkAdmissions(t fataler, admitted []admission, burst, T int64) {
	t.Helper()
	slices.SortFunc(admitted, func(a, b admission) int { return cmp.Compare(a.at, b.at) })
	for i := range admitted {
		var sum int64
		for j := i; j < len(admitted); j++ {
			sum += admitted[j].cost
			// Equal instants belong to the same interval: only check at
			// the last admission of an instant.
			if j+1 < len(admitted) && admitted[j+1].at == admitted[j].at {
				continue
			}
			if bound := burst + (admitted[j].at-admitted[i].at)/T; sum > bound {
				t.Fatalf("admitted %d in [%d, %d] (%dus), bound %d", sum, admitted[i].at, admitted[j].at, admitted[j].at-admitted[i].at, bound)
			}
		}
	}
}

// recorder is a fataler that records a failure instead of failing.
type recorder struct{ failed bool }

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(string, ...any) {
	r.failed = true
	panic(r)
}

func (r *recorder) run(f func(fataler)) (failed bool) {
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
		failed = r.failed
	}()
	f(r)
	return
}

func TestCheckAdmissionsOracle(t *testing.T) {
	t.Parallel()
	// The fuzz oracle must accept a run at the bound and reject one that
	// admits a single unit too many. Burst 5, T = 100us.
	for _, tc := range []struct {
		admitted []admission
		fail     bool
	}{
		{[]admission{{0, 2}, {0, 3}, {100, 1}, {300, 2}}, false},
		{[]admission{{300, 2}, {0, 3}, {100, 1}, {0, 2}}, false}, // out of order
		{[]admission{{0, 2}, {0, 3}, {100, 1}, {250, 2}}, true},
		{[]admission{{0, 2}, {0, 3}, {99, 1}}, true},
		{[]admission{{0, 6}}, true},
		{[]admission{{1000, 5}, {1100, 1}, {1150, 1}}, true},
		{[]admission{{1000, 4}, {1100, 1}, {1150, 1}}, false},
	} {
		if got := new(recorder).run(func(f fataler) { checkAdmissions(f, tc.admitted, 5, 100) }); got != tc.fail {
			t.Errorf("%v: failed=%v, want %v", tc.admitted, got, tc.fail)
		}
	}
}

// FuzzLimits calls every exported function with arbitrary limits, states,
// instants and costs, valid or not, and checks that none panics, that an
// error leaves the state as it was, and that a valid limit decides within
// its burst.
func FuzzLimits(f *testing.F) {
	f.Add(int64(0), int64(0), int64(0), int64(0), int64(0), int64(1), int64(0), int64(0))
	f.Add(int64(1_000_000), int64(sec), int64(1), int64(0), int64(t0), int64(1), int64(0), int64(1<<52))
	f.Add(int64(1), int64(sec), int64(1), int64(MaxTime), int64(-MaxTime), int64(1<<40), int64(1<<62), int64(-1))
	f.Add(int64(-1), int64(-sec), int64(-5), int64(1<<63-1), int64(-1<<63), int64(-1), int64(1<<63-1), int64(1<<63-1))
	f.Fuzz(func(t *testing.T, rate, periodUS, burst, tat, now, cost, maxDelay, other int64) {
		l := Limit{Rate: rate, Period: time.Duration(periodUS) * time.Microsecond, Burst: burst}
		valid := l.Validate() == nil
		_ = l.Interval()
		s := State{TAT: tat}
		ns, d, err := Take(l, s, now, cost, maxDelay)
		if err != nil && ns != s {
			t.Fatalf("Take error %v changed the state %+v -> %+v", err, s, ns)
		}
		if err == nil {
			if !valid {
				t.Fatalf("Take accepted invalid limit %+v", l)
			}
			if d.Remaining < 0 || d.Remaining > l.Burst {
				t.Fatalf("remaining %d outside [0, %d]", d.Remaining, l.Burst)
			}
		}
		var p Params
		if pp, err := l.Params(); err == nil {
			p = pp
		} else if valid {
			t.Fatalf("Params of a valid limit: %v", err)
		}
		s2 := s
		if err := (Params{Interval: rate, Burst: burst}).TakeTo(&s2, now, cost, maxDelay, &d); err != nil && s2 != s {
			t.Fatalf("TakeTo error %v changed the state", err)
		}
		_, _, _ = p.Take(s, now, cost, maxDelay)
		ns, err = Settle(l, s, now, cost, other)
		if err != nil && ns != s {
			t.Fatalf("Settle error %v changed the state %+v -> %+v", err, s, ns)
		}
		if err == nil && !valid {
			t.Fatalf("Settle accepted invalid limit %+v", l)
		}
		if _, err := Sync(l, now, Observation{Remaining: cost, ResetAfter: other}); err == nil && !valid {
			t.Fatalf("Sync accepted invalid limit %+v", l)
		}
		_ = BucketLimit(rate, burst).Validate()
	})
}
