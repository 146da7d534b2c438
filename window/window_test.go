package window

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// t0 is 2030-01-01T00:00:00Z in Unix microseconds: on a minute, an hour and a
// day boundary of the epoch-aligned windows.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

const (
	ms  = int64(1000)
	sec = 1000 * ms
)

type step struct {
	now, cost  int64
	allowed    bool
	remaining  int64
	retryAfter int64
	resetAfter int64
}

type takeFunc func(Limit, State, int64, int64) (State, Decision, error)

// runSteps feeds steps through take in order, carrying the state.
func runSteps(t *testing.T, take takeFunc, l Limit, s State, steps []step) State {
	t.Helper()
	for i, st := range steps {
		ns, d, err := take(l, s, st.now, st.cost)
		if err != nil {
			t.Fatalf("step %d (t0%+dus cost %d): %v", i, st.now-t0, st.cost, err)
		}
		want := Decision{Allowed: st.allowed, Remaining: st.remaining, RetryAfter: st.retryAfter, ResetAfter: st.resetAfter}
		if d != want {
			t.Fatalf("step %d (t0%+dus cost %d): got %+v, want %+v", i, st.now-t0, st.cost, d, want)
		}
		if (!d.Allowed || st.cost == 0) && ns != s {
			t.Fatalf("step %d: denial or peek changed state %+v -> %+v", i, s, ns)
		}
		s = ns
	}
	return s
}

func TestFixedTakeSteps(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 10, Window: time.Minute}
	s := runSteps(t, FixedTake, l, State{}, []step{
		{now: t0 + 10*sec, cost: 0, allowed: true, remaining: 10},
		{now: t0 + 10*sec, cost: 3, allowed: true, remaining: 7, resetAfter: 50 * sec},
		{now: t0 + 20*sec, cost: 7, allowed: true, remaining: 0, resetAfter: 40 * sec},
		{now: t0 + 30*sec, cost: 1, allowed: false, remaining: 0, retryAfter: 30 * sec, resetAfter: 30 * sec},
		{now: t0 + 30*sec, cost: 0, allowed: true, remaining: 0, resetAfter: 30 * sec},
		{now: t0 + 60*sec - 1, cost: 1, allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1},
		// The window is aligned to the epoch: it resets on the minute,
		// not a minute after the first request.
		{now: t0 + 60*sec, cost: 1, allowed: true, remaining: 9, resetAfter: 60 * sec},
		{now: t0 + 60*sec, cost: 9, allowed: true, remaining: 0, resetAfter: 60 * sec},
		// The clock runs back into the previous window: it still counts
		// against the latest one, which is full.
		{now: t0 + 59*sec, cost: 1, allowed: false, remaining: 0, retryAfter: 61 * sec, resetAfter: 61 * sec},
		{now: t0 - 3600*sec, cost: 1, allowed: false, remaining: 0, retryAfter: 3720 * sec, resetAfter: 3720 * sec},
		{now: t0 + 119*sec, cost: 1, allowed: false, remaining: 0, retryAfter: sec, resetAfter: sec},
		// Two windows later the key is fresh.
		{now: t0 + 180*sec, cost: 0, allowed: true, remaining: 10},
		{now: t0 + 180*sec, cost: 10, allowed: true, remaining: 0, resetAfter: 60 * sec},
	})
	if s != (State{End: t0 + 240*sec, Count: 10}) {
		t.Fatalf("final state %+v", s)
	}
}

func TestFixedTakeBackwardsPartlyUsed(t *testing.T) {
	t.Parallel()
	// A request stamped in an earlier window than the stored one is
	// counted against the stored window: it mints nothing.
	l := Limit{Limit: 10, Window: time.Minute}
	runSteps(t, FixedTake, l, State{End: t0 + 120*sec, Count: 4}, []step{
		{now: t0 + 59*sec, cost: 6, allowed: true, remaining: 0, resetAfter: 61 * sec},
		{now: t0 + 10*sec, cost: 1, allowed: false, remaining: 0, retryAfter: 110 * sec, resetAfter: 110 * sec},
	})
}

func TestFixedTakeAligned(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		w := 1 + rng.Int64N(10*sec)
		l := Limit{Limit: 1 + rng.Int64N(100), Window: time.Duration(w) * time.Microsecond}
		now := t0 + rng.Int64N(100*w)
		s, d, err := FixedTake(l, State{}, now, l.Limit)
		if err != nil || !d.Allowed {
			t.Fatalf("fresh key refused its limit: %+v %v", d, err)
		}
		if s.End%w != 0 || s.End <= now || s.End-w > now {
			t.Fatalf("window end %d not the aligned end of the window holding %d (w=%d)", s.End, now, w)
		}
		if d.ResetAfter != s.End-now {
			t.Fatalf("resetAfter %d, want %d", d.ResetAfter, s.End-now)
		}
		// Full: denied until the boundary, exactly.
		_, d, _ = FixedTake(l, s, now, 1)
		if d.Allowed || d.RetryAfter != s.End-now {
			t.Fatalf("full window: %+v, want denied until the boundary (%d)", d, s.End-now)
		}
		if _, d2, _ := FixedTake(l, s, now+d.RetryAfter-1, 1); d2.Allowed {
			t.Fatal("allowed before retryAfter")
		}
		if _, d2, _ := FixedTake(l, s, now+d.RetryAfter, l.Limit); !d2.Allowed {
			t.Fatal("denied at retryAfter")
		}
	}
}

func TestFixedTakeErrors(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 10, Window: time.Minute}
	s := State{End: t0 + 60*sec, Count: 3}
	for _, take := range []takeFunc{FixedTake, SlidingTake} {
		if ns, _, err := take(l, s, t0, 11); !errors.Is(err, ErrCostExceedsLimit) || ns != s {
			t.Fatalf("cost 11 > limit 10: %v (state %+v)", err, ns)
		}
		if ns, _, err := take(l, s, t0, -1); !errors.Is(err, ErrNegativeCost) || ns != s {
			t.Fatalf("cost -1: %v (state %+v)", err, ns)
		}
		if _, d, err := take(l, State{}, t0, 10); err != nil || !d.Allowed {
			t.Fatalf("cost == limit on a fresh key: %+v %v", d, err)
		}
	}
}

func TestSlidingTakeSteps(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 10, Window: 10 * time.Second}
	runSteps(t, SlidingTake, l, State{}, []step{
		{now: t0 + 5*sec, cost: 4, allowed: true, remaining: 6, resetAfter: 15 * sec},
		{now: t0 + 9*sec, cost: 6, allowed: true, remaining: 0, resetAfter: 11 * sec},
		// 11 would not fit even in the next window until 1s into it,
		// when the previous 10 weigh ceil(10*9/10) = 9.
		{now: t0 + 9*sec, cost: 1, allowed: false, remaining: 0, retryAfter: 2 * sec, resetAfter: 11 * sec},
		// Start of the next window: the previous window weighs fully.
		{now: t0 + 10*sec, cost: 1, allowed: false, remaining: 0, retryAfter: sec, resetAfter: 10 * sec},
		{now: t0 + 11*sec - 1, cost: 1, allowed: false, remaining: 0, retryAfter: 1, resetAfter: 9*sec + 1},
		{now: t0 + 11*sec, cost: 1, allowed: true, remaining: 0, resetAfter: 19 * sec},
		// Half-way: the previous 10 weigh 5, plus 1 in this window.
		{now: t0 + 15*sec, cost: 0, allowed: true, remaining: 4, resetAfter: 15 * sec},
		{now: t0 + 15*sec, cost: 4, allowed: true, remaining: 0, resetAfter: 15 * sec},
		// A microsecond later the weight still rounds up to 5.
		{now: t0 + 15*sec + 1, cost: 1, allowed: false, remaining: 0, retryAfter: sec - 1, resetAfter: 15*sec - 1},
		{now: t0 + 16*sec, cost: 1, allowed: true, remaining: 0, resetAfter: 14 * sec},
		// The clock runs back before the stored window: the previous
		// window weighs fully, so nothing conforms.
		{now: t0 + 9*sec, cost: 1, allowed: false, remaining: 0, retryAfter: 8 * sec, resetAfter: 21 * sec},
		{now: t0 - 3600*sec, cost: 1, allowed: false, remaining: 0, retryAfter: 3617 * sec, resetAfter: 3630 * sec},
		// Next window: this window's 6 weigh ceil(6*8/10) = 5 at 2s.
		{now: t0 + 22*sec, cost: 0, allowed: true, remaining: 5, resetAfter: 8 * sec},
		// 6 more fit once the previous 6 weigh 4: ceil(6*(w-e)/w) <= 4 from
		// e = w - floor(4w/6) = 3333334us.
		{now: t0 + 22*sec, cost: 6, allowed: false, remaining: 5, retryAfter: sec + 333334, resetAfter: 8 * sec},
		// Two windows on, nothing is left.
		{now: t0 + 40*sec, cost: 0, allowed: true, remaining: 10},
	})
}

// TestSlidingRetryAfterExact checks, over many random states, that a denied
// request is allowed exactly RetryAfter later and not a microsecond sooner,
// and that the estimate never lets a window count more than its limit.
func TestSlidingRetryAfterExact(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, take := range []struct {
		name string
		f    takeFunc
	}{{"fixed", FixedTake}, {"sliding", SlidingTake}} {
		denied := 0
		for i := range 20000 {
			w := 1 + rng.Int64N(60*sec)
			if i%4 == 0 {
				w = 1 + rng.Int64N(20) // tiny windows stress the rounding
			}
			lim := 1 + rng.Int64N(1000)
			l := Limit{Limit: lim, Window: time.Duration(w) * time.Microsecond}
			now := t0 + rng.Int64N(1000*w)
			end := now - (now%w+w)%w + w
			// Any stored window near now, counts up to 1.5x the limit
			// (a settled charge may overshoot).
			s := State{End: end + (rng.Int64N(5)-3)*w, Count: rng.Int64N(lim + lim/2 + 1)}
			if take.name == "sliding" {
				s.Prev = rng.Int64N(lim + lim/2 + 1)
			}
			if rng.IntN(8) == 0 {
				s = State{}
			}
			cost := rng.Int64N(lim + 1)
			_, d, err := take.f(l, s, now, cost)
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining < 0 || d.Remaining > lim || d.ResetAfter < 0 {
				t.Fatalf("%s %+v %+v now=%d cost=%d: %+v", take.name, l, s, now, cost, d)
			}
			if d.Allowed {
				if d.RetryAfter != 0 {
					t.Fatalf("%s: allowed with retryAfter %d", take.name, d.RetryAfter)
				}
				continue
			}
			denied++
			if d.RetryAfter <= 0 {
				t.Fatalf("%s %+v %+v now=%d cost=%d: denied with retryAfter %d", take.name, l, s, now, cost, d.RetryAfter)
			}
			if _, d2, _ := take.f(l, s, now+d.RetryAfter, cost); !d2.Allowed {
				t.Fatalf("%s %+v %+v now=%d cost=%d: still denied after retryAfter %d: %+v", take.name, l, s, now, cost, d.RetryAfter, d2)
			}
			if _, d2, _ := take.f(l, s, now+d.RetryAfter-1, cost); d2.Allowed {
				t.Fatalf("%s %+v %+v now=%d cost=%d: allowed 1us before retryAfter %d", take.name, l, s, now, cost, d.RetryAfter)
			}
		}
		if denied < 1000 {
			t.Fatalf("%s: only %d denials in the random cases: the test lost its teeth", take.name, denied)
		}
	}
}

// TestWindowNeverOverLimit drives both kinds through random arrivals, some
// running backwards, and checks that no aligned window is charged more than
// its limit and that the sliding estimate never exceeds the limit.
func TestWindowNeverOverLimit(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sliding := range []bool{false, true} {
		take := FixedTake
		if sliding {
			take = SlidingTake
		}
		for range 200 {
			w := 1 + rng.Int64N(sec)
			l := Limit{Limit: 1 + rng.Int64N(50), Window: time.Duration(w) * time.Microsecond}
			var s State
			now := t0
			charged := map[int64]int64{} // window end -> cost charged to it
			for range 300 {
				now += rng.Int64N(w/3+1) - w/20
				cost := rng.Int64N(l.Limit + 1)
				ns, d, err := take(l, s, now, cost)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed && cost > 0 {
					if ns.End < s.End {
						t.Fatalf("window moved backwards: %d -> %d", s.End, ns.End)
					}
					charged[ns.End] += cost
					if charged[ns.End] != ns.Count {
						t.Fatalf("window %d counts %d, charged %d", ns.End, ns.Count, charged[ns.End])
					}
					if charged[ns.End] > l.Limit {
						t.Fatalf("window %d charged %d > limit %d", ns.End, charged[ns.End], l.Limit)
					}
				}
				s = ns
			}
		}
	}
}

func TestSlidingWeighting(t *testing.T) {
	t.Parallel()
	// 100 per 100us; the previous window holds 100.
	l := Limit{Limit: 100, Window: 100 * time.Microsecond}
	end := t0 + 200
	s := State{End: end, Count: 0, Prev: 100}
	for e := int64(0); e <= 100; e++ {
		_, d, _ := SlidingTake(l, s, end-100+e, 0)
		// weight ceil(100*(100-e)/100) = 100-e: remaining is exactly e.
		if d.Remaining != e && e < 100 {
			t.Fatalf("elapsed %d: remaining %d, want %d", e, d.Remaining, e)
		}
	}
	// Rounding up: 3 previous over a window of 7 at elapsed 1 weigh
	// ceil(18/7) = 3, at elapsed 3 ceil(12/7) = 2, at 5 ceil(6/7) = 1.
	l = Limit{Limit: 3, Window: 7 * time.Microsecond}
	end = t0 - t0%7 + 7
	s = State{End: end, Prev: 3}
	for _, tc := range []struct{ elapsed, remaining int64 }{{0, 0}, {1, 0}, {2, 0}, {3, 1}, {4, 1}, {5, 2}, {6, 2}} {
		_, d, _ := SlidingTake(l, s, end-7+tc.elapsed, 0)
		if d.Remaining != tc.remaining {
			t.Errorf("elapsed %d: remaining %d, want %d", tc.elapsed, d.Remaining, tc.remaining)
		}
	}
}

func TestSettle(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 10, Window: time.Minute}
	peek := func(s State, now int64, sliding bool) int64 {
		t.Helper()
		take := FixedTake
		if sliding {
			take = SlidingTake
		}
		_, d, err := take(l, s, now, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	for _, sliding := range []bool{false, true} {
		take := FixedTake
		if sliding {
			take = SlidingTake
		}
		reserve := func(n int64) State {
			t.Helper()
			s, d, err := take(l, State{}, t0+10*sec, n)
			if err != nil || !d.Allowed {
				t.Fatalf("reserve %d: %+v %v", n, d, err)
			}
			return s
		}
		rEnd := t0 + 60*sec
		for _, tc := range []struct {
			name             string
			reserved, actual int64
			at               int64
			want             int64 // remaining at the settle instant
			wantSliding      int64 // same, for a sliding window, if different
		}{
			{"refund same window", 8, 3, t0 + 20*sec, 7, 7},
			{"charge same window", 5, 9, t0 + 20*sec, 1, 1},
			{"exact", 5, 5, t0 + 20*sec, 5, 5},
			{"refund all", 8, 0, t0 + 20*sec, 10, 10},
			// A refund after the window ended: the fixed window has
			// already expired those units; the sliding window still
			// weighs them, so it refunds the previous window. At 10s into
			// the next window, 3 previous weigh ceil(3*50/60) = 3; 8
			// would have weighed 7.
			{"refund next window", 8, 3, t0 + 70*sec, 10, 7},
			{"refund two windows later", 8, 3, t0 + 130*sec, 10, 10},
			// A charge always lands in the current window.
			{"charge next window", 5, 9, t0 + 70*sec, 6, 1},
		} {
			s := reserve(tc.reserved)
			ns, err := Settle(l, s, tc.at, rEnd, tc.reserved, tc.actual, sliding)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			want := tc.want
			if sliding {
				want = tc.wantSliding
			}
			if got := peek(ns, tc.at, sliding); got != want {
				t.Errorf("sliding=%v %s: remaining %d, want %d (state %+v)", sliding, tc.name, got, want, ns)
			}
		}
		// A refund never takes a window below zero.
		ns, _ := Settle(l, State{End: rEnd, Count: 2}, t0+20*sec, rEnd, 8, 0, sliding)
		if ns.Count != 0 || peek(ns, t0+20*sec, sliding) != 10 {
			t.Errorf("sliding=%v: over-refund gave %+v", sliding, ns)
		}
		// A charge past the limit is debt: remaining reports 0, not a
		// negative number, and nothing conforms until the debt expires.
		ns, _ = Settle(l, reserve(10), t0+20*sec, rEnd, 10, 15, sliding)
		if ns.Count != 15 {
			t.Fatalf("sliding=%v: charge of 5 over 10 counted %d", sliding, ns.Count)
		}
		for _, cost := range []int64{0, 1} {
			_, d, _ := take(l, ns, t0+20*sec, cost)
			if d.Remaining != 0 || (cost > 0 && d.Allowed) {
				t.Errorf("sliding=%v: in debt, take %d: %+v", sliding, cost, d)
			}
		}
		// Errors.
		if _, err := Settle(l, ns, t0, rEnd, -1, 0, sliding); !errors.Is(err, ErrNegativeCost) {
			t.Errorf("negative reserved: %v", err)
		}
		if _, err := Settle(l, ns, t0, rEnd, 0, -1, sliding); !errors.Is(err, ErrNegativeCost) {
			t.Errorf("negative actual: %v", err)
		}
	}
}

func TestSync(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 10, Window: time.Minute}
	now := t0 + 10*sec
	for _, r := range []int64{0, 1, 4, 10} {
		s := mustSync(t, l, now, r, 0)
		if _, d, _ := FixedTake(l, s, now, 0); d.Remaining != r {
			t.Errorf("Sync(remaining=%d): remaining %d", r, d.Remaining)
		}
		if r < 10 {
			if _, d, _ := FixedTake(l, s, now, r+1); d.Allowed {
				t.Errorf("Sync(remaining=%d): %d allowed", r, r+1)
			}
		}
	}
	if s := mustSync(t, l, now, 50, 0); s.Count != 0 {
		t.Errorf("remaining above the limit: count %d", s.Count)
	}
	if s := mustSync(t, l, now, -5, 0); s.Count != 10 {
		t.Errorf("negative remaining: count %d", s.Count)
	}

	for _, tc := range []struct {
		name  string
		reset int64
		open  int64 // first instant a unit conforms
	}{
		{"reset within the window", 30 * sec, t0 + 60*sec},
		{"reset on the boundary", 50 * sec, t0 + 60*sec},
		{"pause past the window end", 100 * sec, t0 + 120*sec},
		{"pause to a later boundary", 110 * sec, t0 + 120*sec},
		{"pause an hour", 3600 * sec, t0 + 3660*sec},
	} {
		s := mustSync(t, l, now, 0, tc.reset)
		if s.End != tc.open || s.Count != 10 {
			t.Errorf("%s: state %+v", tc.name, s)
		}
		_, d, _ := FixedTake(l, s, now, 1)
		if d.Allowed || d.RetryAfter != tc.open-now {
			t.Errorf("%s: %+v, want denied for %d", tc.name, d, tc.open-now)
		}
		if d.RetryAfter < tc.reset {
			t.Errorf("%s: retryAfter %d shorter than the provider's reset %d", tc.name, d.RetryAfter, tc.reset)
		}
		for _, at := range []int64{now + tc.reset - 1, tc.open - w(l) + 1, tc.open - 1} {
			if at < now {
				continue
			}
			if _, d, _ := FixedTake(l, s, at, 1); d.Allowed {
				t.Errorf("%s: allowed at t0%+d, before %d", tc.name, at-t0, tc.open-t0)
			}
		}
		if _, d, _ := FixedTake(l, s, tc.open, 10); !d.Allowed {
			t.Errorf("%s: full limit denied at the boundary", tc.name)
		}
		// A sliding window paused the same way stays closed until the
		// boundary too (and reopens gradually after it).
		if _, d, _ := SlidingTake(l, s, tc.open-1, 1); d.Allowed {
			t.Errorf("%s: sliding allowed before the boundary", tc.name)
		}
		if _, d, _ := SlidingTake(l, s, tc.open+w(l), 10); !d.Allowed {
			t.Errorf("%s: sliding still closed a window after the boundary", tc.name)
		}
	}
	// A reset is ignored while units remain.
	if s := mustSync(t, l, now, 3, 3600*sec); s.End != t0+60*sec || s.Count != 7 {
		t.Errorf("remaining 3 with a reset: %+v", s)
	}
}

func w(l Limit) int64 { return l.Window.Microseconds() }

func TestValidate(t *testing.T) {
	t.Parallel()
	max53 := MaxSlidingProduct / (60 * sec)
	for _, tc := range []struct {
		l                Limit
		fixedOK, slideOK bool
	}{
		{Limit{Limit: 10, Window: time.Minute}, true, true},
		{Limit{Limit: 1, Window: time.Microsecond}, true, true},
		{Limit{Limit: 0, Window: time.Minute}, false, false},
		{Limit{Limit: -1, Window: time.Minute}, false, false},
		{Limit{Limit: 10, Window: 0}, false, false},
		{Limit{Limit: 10, Window: -time.Second}, false, false},
		{Limit{Limit: 10, Window: 999 * time.Nanosecond}, false, false},
		{Limit{Limit: max53 - 1, Window: time.Minute}, true, true},
		{Limit{Limit: max53, Window: time.Minute}, true, false},
		{Limit{Limit: 1 << 62, Window: 24 * time.Hour}, false, false},
		{Limit{Limit: 1 << 52, Window: 24 * time.Hour}, true, false},
		{Limit{Limit: 1<<52 + 1, Window: 24 * time.Hour}, false, false},
		{Limit{}, false, false},
	} {
		for _, sliding := range []bool{false, true} {
			ok := tc.fixedOK
			if sliding {
				ok = tc.slideOK
			}
			err := tc.l.Validate(sliding)
			if ok && err != nil {
				t.Errorf("%+v sliding=%v: %v", tc.l, sliding, err)
			}
			if !ok && !errors.Is(err, ErrInvalidLimit) {
				t.Errorf("%+v sliding=%v: err %v, want ErrInvalidLimit", tc.l, sliding, err)
			}
		}
	}
}

func TestFresh(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 10, Window: time.Minute}
	wl := w(l)
	for _, tc := range []struct {
		s              State
		now            int64
		fixed, sliding bool
	}{
		{State{}, t0, true, true},
		{State{End: t0 + 60*sec, Count: 0}, t0, true, true},
		{State{End: t0 + 60*sec, Count: 3}, t0, false, false},
		{State{End: t0 + 60*sec, Count: 3}, t0 + 60*sec - 1, false, false},
		{State{End: t0 + 60*sec, Count: 3}, t0 + 60*sec, true, false},
		{State{End: t0 + 60*sec, Count: 3}, t0 + 120*sec - 1, true, false},
		{State{End: t0 + 60*sec, Count: 3}, t0 + 120*sec, true, true},
		// Conservative: the previous window's 3 no longer weigh anything
		// at t0+60s, but sliding Fresh waits until End+w.
		{State{End: t0 + 60*sec, Prev: 3}, t0 + 60*sec, true, false},
	} {
		if got := tc.s.Fresh(tc.now, wl, false); got != tc.fixed {
			t.Errorf("%+v at t0%+d: fixed Fresh %v", tc.s, tc.now-t0, got)
		}
		if got := tc.s.Fresh(tc.now, wl, true); got != tc.sliding {
			t.Errorf("%+v at t0%+d: sliding Fresh %v", tc.s, tc.now-t0, got)
		}
	}

	// Fresh means what the store relies on to drop a key: from then on it
	// answers exactly like a fresh key.
	rng := rand.New(rand.NewPCG(7, 8))
	for range 5000 {
		s0 := State{End: t0 + rng.Int64N(6)*wl, Count: rng.Int64N(15), Prev: rng.Int64N(15)}
		now := t0 + rng.Int64N(8*wl)
		for _, sliding := range []bool{false, true} {
			s, take := s0, SlidingTake
			if !sliding {
				s.Prev, take = 0, FixedTake
			}
			if !s.Fresh(now, wl, sliding) {
				continue
			}
			if s.Count == 0 && s.Prev == 0 && s.End-wl > now {
				// Empty counts of a window that has not started (the
				// clock ran back after a full refund) are fresh too, but
				// a take stamped now would be charged to that later
				// window rather than to the current one. Either way no
				// window is charged more than its limit.
				continue
			}
			for _, at := range []int64{now, now + 1, now + wl/2, now + wl} {
				for _, cost := range []int64{0, 1, 10} {
					_, got, _ := take(l, s, at, cost)
					_, want, _ := take(l, State{}, at, cost)
					if got != want {
						t.Fatalf("sliding=%v %+v fresh at t0%+d but at t0%+d cost %d answers %+v, fresh key %+v", sliding, s, now-t0, at-t0, cost, got, want)
					}
				}
			}
		}
	}
}

func TestSettleChargeNeverOverflows(t *testing.T) {
	t.Parallel()
	// Settle's costs are request data: an absurd actual cost must be
	// refused or counted as debt, never wrap a count around to negative.
	for _, l := range []Limit{
		{Limit: 10, Window: time.Minute},
		{Limit: 1, Window: time.Microsecond},
		{Limit: MaxSlidingProduct/(60*sec) - 1, Window: time.Minute}, // the largest valid sliding limit
	} {
		rEnd := t0 + 60*sec
		for _, sliding := range []bool{false, true} {
			take := FixedTake
			if sliding {
				take = SlidingTake
			}
			w := l.Window.Microseconds()
			now := t0 + 60*sec - w // in the window ending at rEnd
			s, _, _ := take(l, State{}, now, 1)
			accepted := 0
			for _, actual := range []int64{1<<63 - 1, 1 << 62, MaxSlidingProduct, MaxSlidingProduct / w, 3 * l.Limit, 2} {
				for range 3 {
					ns, err := Settle(l, s, now, rEnd, 0, actual, sliding)
					if err != nil {
						if !errors.Is(err, ErrCostExceedsLimit) || ns != s {
							t.Fatalf("%+v sliding=%v actual %d: %v (state %+v -> %+v)", l, sliding, actual, err, s, ns)
						}
					} else {
						if ns.Count != s.Count+actual {
							t.Fatalf("%+v sliding=%v: charge of %d counted %d -> %d", l, sliding, actual, s.Count, ns.Count)
						}
						accepted++
					}
					s = ns
					if ns.Count < 0 || ns.Prev < 0 {
						t.Fatalf("%+v sliding=%v actual %d: count wrapped: %+v", l, sliding, actual, ns)
					}
					if _, d, _ := take(l, s, now, 1); d.Allowed != (s.Count+1 <= l.Limit) {
						t.Fatalf("%+v sliding=%v actual %d: state %+v, take of 1: %+v", l, sliding, actual, s, d)
					}
					if sliding {
						// The debt weighs on the start of the next window.
						if _, d, _ := take(l, s, rEnd, 1); d.Allowed && s.Count > l.Limit {
							t.Fatalf("%+v actual %d: allowed at the start of the next window with %d in debt", l, actual, s.Count)
						}
					}
				}
			}
			if accepted == 0 {
				t.Fatalf("%+v sliding=%v: every charge refused", l, sliding)
			}
		}
	}
}

func mustSync(t *testing.T, l Limit, now, remaining, resetAfter int64) State {
	t.Helper()
	s, err := Sync(l, now, remaining, resetAfter)
	if err != nil {
		t.Fatalf("Sync(%+v, %d, %d, %d): %v", l, now, remaining, resetAfter, err)
	}
	return s
}

// TestInvalidInputIsAnError checks that every function refuses an invalid
// limit and out-of-range instants or states with an error instead of
// panicking (a zero window divided by zero).
func TestInvalidInputIsAnError(t *testing.T) {
	t.Parallel()
	for _, l := range []Limit{{}, {Limit: 1}, {Limit: 1, Window: -time.Second}, {Limit: 0, Window: time.Second},
		{Limit: -1, Window: time.Second}, {Limit: 1, Window: time.Nanosecond}} {
		for _, take := range []takeFunc{FixedTake, SlidingTake} {
			if _, _, err := take(l, State{}, t0, 1); !errors.Is(err, ErrInvalidLimit) {
				t.Errorf("take %+v: %v, want ErrInvalidLimit", l, err)
			}
		}
		for _, sliding := range []bool{false, true} {
			if _, err := Settle(l, State{}, t0, t0, 0, 1, sliding); !errors.Is(err, ErrInvalidLimit) {
				t.Errorf("Settle %+v: %v, want ErrInvalidLimit", l, err)
			}
		}
		if _, err := Sync(l, t0, 0, sec); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("Sync %+v: %v, want ErrInvalidLimit", l, err)
		}
	}
	ok := Limit{Limit: 10, Window: time.Second}
	for _, bad := range []struct {
		s   State
		now int64
	}{
		{State{}, MaxTime + 1}, {State{}, -MaxTime - 1}, {State{}, 1<<63 - 1}, {State{}, -1 << 63},
		{State{End: 1<<63 - 1}, t0}, {State{End: -1 << 63}, t0},
		{State{End: t0, Count: -1}, t0}, {State{End: t0, Prev: -1}, t0}, {State{End: t0, Count: 1 << 60}, t0},
	} {
		for _, take := range []takeFunc{FixedTake, SlidingTake} {
			if _, _, err := take(ok, bad.s, bad.now, 1); !errors.Is(err, ErrOutOfRange) {
				t.Errorf("take on %+v at %d: %v, want ErrOutOfRange", bad.s, bad.now, err)
			}
		}
		if _, err := Settle(ok, bad.s, bad.now, t0, 0, 1, true); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Settle on %+v at %d: %v, want ErrOutOfRange", bad.s, bad.now, err)
		}
	}
	if _, err := Sync(ok, MaxTime-sec, 0, 2*sec); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("Sync past MaxTime: %v, want ErrOutOfRange", err)
	}
	if _, err := Sync(ok, t0, 0, 1<<63-1); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("Sync with the largest reset: %v, want ErrOutOfRange", err)
	}
}
