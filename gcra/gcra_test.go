package gcra

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// t0 is an arbitrary instant (2030-01-01T00:00:00Z) in Unix microseconds.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

const (
	ms  = int64(1000)
	sec = 1000 * ms
)

// step is one request in a table: its inputs and the decision it must get.
type step struct {
	now, cost, maxDelay int64
	allowed             bool
	remaining           int64
	retryAfter          int64
	resetAfter          int64
	delay               int64
}

// runSteps feeds steps through Take in order, carrying the state, and checks
// every decision and that denials and peeks leave the state unchanged.
func runSteps(t *testing.T, l Limit, s State, steps []step) State {
	t.Helper()
	for i, st := range steps {
		ns, d, err := Take(l, s, st.now, st.cost, st.maxDelay)
		if err != nil {
			t.Fatalf("step %d (now=t0%+dus cost=%d): unexpected error %v", i, st.now-t0, st.cost, err)
		}
		want := Decision{Allowed: st.allowed, Remaining: st.remaining, RetryAfter: st.retryAfter, ResetAfter: st.resetAfter, Delay: st.delay}
		if d != want {
			t.Fatalf("step %d (now=t0%+dus cost=%d): got %+v, want %+v", i, st.now-t0, st.cost, d, want)
		}
		if (!d.Allowed || st.cost == 0) && ns != s {
			t.Fatalf("step %d: denial or peek changed state %+v -> %+v", i, s, ns)
		}
		if d.Allowed && st.cost > 0 && ns.TAT != max(s.TAT, st.now)+st.cost*l.Interval() {
			t.Fatalf("step %d: TAT %d, want %d", i, ns.TAT, max(s.TAT, st.now)+st.cost*l.Interval())
		}
		s = ns
	}
	return s
}

func TestTakeSteps(t *testing.T) {
	t.Parallel()
	// 10 per second, bursts of 5: T = 100ms, tau = 500ms.
	l := Limit{Rate: 10, Period: time.Second, Burst: 5}
	runSteps(t, l, State{}, []step{
		{now: t0, cost: 1, allowed: true, remaining: 4, resetAfter: 100 * ms},
		{now: t0, cost: 3, allowed: true, remaining: 1, resetAfter: 400 * ms},
		// 2 more would need 600ms of TAT, 100ms past tau.
		{now: t0, cost: 2, allowed: false, remaining: 1, retryAfter: 100 * ms, resetAfter: 400 * ms},
		{now: t0, cost: 1, allowed: true, remaining: 0, resetAfter: 500 * ms},
		// A peek on an empty key is allowed and charges nothing.
		{now: t0, cost: 0, allowed: true, remaining: 0, resetAfter: 500 * ms},
		{now: t0 + 50*ms, cost: 1, allowed: false, remaining: 0, retryAfter: 50 * ms, resetAfter: 450 * ms},
		{now: t0 + 100*ms - 1, cost: 1, allowed: false, remaining: 0, retryAfter: 1, resetAfter: 400*ms + 1},
		{now: t0 + 100*ms, cost: 1, allowed: true, remaining: 0, resetAfter: 500 * ms},
		// 250ms later 2.5 units have dripped back: 2 conform, the half stays.
		{now: t0 + 350*ms, cost: 2, allowed: true, remaining: 0, resetAfter: 450 * ms},
		{now: t0 + 400*ms, cost: 1, allowed: true, remaining: 0, resetAfter: 500 * ms},
		// Idle for 10s banks only the burst.
		{now: t0 + 10*sec, cost: 0, allowed: true, remaining: 5, resetAfter: 0},
		{now: t0 + 10*sec, cost: 5, allowed: true, remaining: 0, resetAfter: 500 * ms},
		{now: t0 + 10*sec, cost: 1, allowed: false, remaining: 0, retryAfter: 100 * ms, resetAfter: 500 * ms},
		// Half-way through refilling: 2 units back after 250ms.
		{now: t0 + 10*sec + 250*ms, cost: 0, allowed: true, remaining: 2, resetAfter: 250 * ms},
		{now: t0 + 10*sec + 250*ms, cost: 3, allowed: false, remaining: 2, retryAfter: 50 * ms, resetAfter: 250 * ms},
		// The clock goes back an hour: nothing conforms, and it says so.
		{now: t0 + 10*sec - 3600*sec, cost: 1, allowed: false, remaining: 0, retryAfter: 3600*sec + 100*ms, resetAfter: 3600*sec + 500*ms},
		{now: t0 + 10*sec + 300*ms, cost: 3, allowed: true, remaining: 0, resetAfter: 500 * ms},
	})
}

func TestTakeIntervalRoundsUp(t *testing.T) {
	t.Parallel()
	// 3 per 10us: T rounds up to 4us, so only 1 unit per 4us conforms.
	l := Limit{Rate: 3, Period: 10 * time.Microsecond, Burst: 1}
	runSteps(t, l, State{}, []step{
		{now: t0, cost: 1, allowed: true, remaining: 0, resetAfter: 4},
		{now: t0 + 3, cost: 1, allowed: false, remaining: 0, retryAfter: 1, resetAfter: 1},
		{now: t0 + 4, cost: 1, allowed: true, remaining: 0, resetAfter: 4},
	})
}

func TestInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l    Limit
		want int64
	}{
		{Limit{Rate: 1, Period: time.Second, Burst: 1}, sec},
		{Limit{Rate: 10, Period: time.Second, Burst: 1}, 100 * ms},
		{Limit{Rate: 3, Period: time.Second, Burst: 1}, 333334},
		{Limit{Rate: 3, Period: 10 * time.Microsecond, Burst: 1}, 4},
		{Limit{Rate: 7, Period: 7 * time.Microsecond, Burst: 1}, 1},
		{Limit{Rate: 1000, Period: time.Minute, Burst: 1}, 60 * ms},
		{Limit{Rate: 7, Period: time.Minute, Burst: 1}, 8571429},
	} {
		if got := tc.l.Interval(); got != tc.want {
			t.Errorf("%+v.Interval() = %d, want %d", tc.l, got, tc.want)
		}
		// Rounded up: Rate intervals never fit in less than a Period.
		if tc.l.Interval()*tc.l.Rate < tc.l.Period.Microseconds() {
			t.Errorf("%+v: interval %d admits more than Rate per Period", tc.l, tc.l.Interval())
		}
	}
}

func TestTakeCostExceedsBurst(t *testing.T) {
	t.Parallel()
	l := Limit{Rate: 10, Period: time.Second, Burst: 5}
	s := State{TAT: t0 + 100*ms}
	for _, now := range []int64{t0, t0 + 10*sec} {
		ns, d, err := Take(l, s, now, 6, 0)
		if !errors.Is(err, ErrCostExceedsBurst) {
			t.Fatalf("cost 6 > burst 5 at t0%+d: err = %v, want ErrCostExceedsBurst", now-t0, err)
		}
		if ns != s || d != (Decision{}) {
			t.Fatalf("error changed state or returned a decision: %+v %+v", ns, d)
		}
		// Even a generous maxDelay does not turn it into a wait.
		if _, _, err := Take(l, s, now, 6, 3600*sec); !errors.Is(err, ErrCostExceedsBurst) {
			t.Fatalf("cost 6 with maxDelay: err = %v, want ErrCostExceedsBurst", err)
		}
	}
	// Exactly the burst is fine on a fresh key.
	if _, d, err := Take(l, State{}, t0, 5, 0); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("cost == burst on fresh key: %+v, %v", d, err)
	}
}

func TestTakeNegativeCost(t *testing.T) {
	t.Parallel()
	l := Limit{Rate: 10, Period: time.Second, Burst: 5}
	s := State{TAT: t0 + 300*ms}
	ns, d, err := Take(l, s, t0, -1, 0)
	if !errors.Is(err, ErrNegativeCost) {
		t.Fatalf("err = %v, want ErrNegativeCost", err)
	}
	if ns != s || d.Allowed {
		t.Fatalf("negative cost changed state or was allowed: %+v %+v", ns, d)
	}
}

func TestTakePeekNeverChangesState(t *testing.T) {
	t.Parallel()
	l := Limit{Rate: 10, Period: time.Second, Burst: 5}
	for _, s := range []State{{}, {TAT: t0 - sec}, {TAT: t0 + 200*ms}, {TAT: t0 + 500*ms}, {TAT: t0 + 5*sec}} {
		for _, md := range []int64{0, 10 * sec} {
			ns, d, err := Take(l, s, t0, 0, md)
			if err != nil || ns != s {
				t.Fatalf("peek of %+v changed it to %+v (err %v)", s, ns, err)
			}
			// The peek reports what a real take would see.
			_, d1, _ := Take(l, s, t0, 1, 0)
			if s.TAT <= t0+500*ms && !d.Allowed {
				t.Fatalf("peek of non-indebted %+v denied: %+v", s, d)
			}
			if d1.Allowed && d.Remaining != d1.Remaining+1 {
				t.Fatalf("peek remaining %d, take of 1 leaves %d", d.Remaining, d1.Remaining)
			}
		}
	}
}

func TestTakeIdleBanksOnlyBurst(t *testing.T) {
	t.Parallel()
	l := Limit{Rate: 10, Period: time.Second, Burst: 5}
	for _, idle := range []int64{0, 500 * ms, 10 * sec, 24 * 3600 * sec, 10 * 365 * 24 * 3600 * sec} {
		s := State{TAT: t0}
		now := t0 + idle
		n := int64(0)
		for {
			ns, d, err := Take(l, s, now, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
			s = ns
			n++
			if n > 1000 {
				t.Fatal("unbounded admission")
			}
		}
		if n != l.Burst {
			t.Fatalf("after %dus idle admitted %d at one instant, want exactly burst %d", idle, n, l.Burst)
		}
	}
}

func TestTakeBackwardsClockMintsNothing(t *testing.T) {
	t.Parallel()
	l := Limit{Rate: 10, Period: time.Second, Burst: 5}
	// Exhaust the key at t0.
	s := State{}
	for range l.Burst {
		var d Decision
		s, d, _ = Take(l, s, t0, 1, 0)
		if !d.Allowed {
			t.Fatal("fresh key refused within burst")
		}
	}
	for _, back := range []int64{1, 100 * ms, 10 * sec, 3600 * sec, 365 * 24 * 3600 * sec} {
		now := t0 - back
		ns, d, err := Take(l, s, now, 1, 0)
		if err != nil || d.Allowed || ns != s {
			t.Fatalf("%dus back: %+v %v (state %+v -> %+v), want denied and unchanged", back, d, err, s, ns)
		}
		if d.Remaining != 0 {
			t.Fatalf("%dus back: remaining %d, want 0", back, d.Remaining)
		}
		// It asks to wait at least as long as it would at t0.
		if d.RetryAfter < 100*ms+back {
			t.Fatalf("%dus back: retryAfter %d < %d", back, d.RetryAfter, 100*ms+back)
		}
	}
	// A partly used key never shows more remaining at an earlier instant.
	s = State{TAT: t0 + 200*ms}
	_, at, _ := Take(l, s, t0, 0, 0)
	for back := int64(0); back <= 2*sec; back += 7 * ms {
		_, d, _ := Take(l, s, t0-back, 0, 0)
		if d.Remaining > at.Remaining {
			t.Fatalf("%dus back: remaining %d > %d at t0", back, d.Remaining, at.Remaining)
		}
	}
}

func TestTakeMaxDelay(t *testing.T) {
	t.Parallel()
	// 10/s, burst 2: T = 100ms, tau = 200ms.
	l := Limit{Rate: 10, Period: time.Second, Burst: 2}
	s := runSteps(t, l, State{}, []step{
		{now: t0, cost: 2, allowed: true, remaining: 0, resetAfter: 200 * ms},
		// Conforms 100ms from now: reserve it.
		{now: t0, cost: 1, maxDelay: 150 * ms, allowed: true, remaining: 0, resetAfter: 300 * ms, delay: 100 * ms},
		// The next would need 200ms: too long, and the state stays.
		{now: t0, cost: 1, maxDelay: 150 * ms, allowed: false, remaining: 0, retryAfter: 200 * ms, resetAfter: 300 * ms},
		// maxDelay exactly the wait is enough.
		{now: t0, cost: 1, maxDelay: 200 * ms, allowed: true, remaining: 0, resetAfter: 400 * ms, delay: 200 * ms},
		// A negative maxDelay means none.
		{now: t0 + 250*ms, cost: 1, maxDelay: -sec, allowed: false, remaining: 0, retryAfter: 50 * ms, resetAfter: 150 * ms},
		// A request that conforms now has no delay even with maxDelay set.
		{now: t0 + 300*ms, cost: 1, maxDelay: sec, allowed: true, remaining: 0, resetAfter: 200 * ms},
		{now: t0 + 10*sec, cost: 1, maxDelay: sec, allowed: true, remaining: 1, resetAfter: 100 * ms},
	})
	if s.TAT != t0+10*sec+100*ms {
		t.Fatalf("TAT = t0%+d", s.TAT-t0)
	}
}

func TestSettle(t *testing.T) {
	t.Parallel()
	// 1 per second, burst 20: T = 1s.
	l := Limit{Rate: 1, Period: time.Second, Burst: 20}
	remaining := func(s State, now int64) int64 {
		t.Helper()
		_, d, err := Take(l, s, now, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	reserve := func(n int64) State {
		t.Helper()
		s, d, err := Take(l, State{}, t0, n, 0)
		if err != nil || !d.Allowed {
			t.Fatalf("reserve %d: %+v %v", n, d, err)
		}
		return s
	}

	for _, tc := range []struct {
		name             string
		reserved, actual int64
		at               int64 // settle time
		want             int64 // remaining at the settle time
	}{
		{"refund", 10, 3, t0, 17},
		{"charge", 10, 15, t0, 5},
		{"exact", 10, 10, t0, 10},
		{"refund everything", 10, 0, t0, 20},
		// Charges may go into debt: remaining clamps at 0 and the debt
		// shows as a longer wait.
		{"charge into debt", 10, 25, t0, 0},
		// After 4s, 4 units have dripped back on top of the refund, but
		// never more than the burst.
		{"refund later", 10, 3, t0 + 4*sec, 20},
		{"refund later partial", 15, 10, t0 + 2*sec, 12},
		{"charge later", 10, 12, t0 + 4*sec, 12},
	} {
		s := reserve(tc.reserved)
		ns, err := Settle(l, s, tc.at, tc.reserved, tc.actual)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := remaining(ns, tc.at); got != tc.want {
			t.Errorf("%s: remaining %d after settle, want %d (TAT t0%+d)", tc.name, got, tc.want, ns.TAT-t0)
		}
	}

	// The debt is real: 25 units against a burst of 20 means the next unit
	// conforms only after 6s.
	s, _ := Settle(l, reserve(10), t0, 10, 25)
	if _, d, _ := Take(l, s, t0, 1, 0); d.Allowed || d.RetryAfter != 6*sec {
		t.Fatalf("after debt of 5: %+v, want denied with RetryAfter 6s", d)
	}
	// A refund on an already full key mints nothing.
	ns, err := Settle(l, State{}, t0, 10, 0)
	if err != nil || remaining(ns, t0) != l.Burst {
		t.Fatalf("refund on fresh key: %+v %v", ns, err)
	}
	ns, _ = Settle(l, State{TAT: t0 + 2*sec}, t0, 10, 0)
	if got := remaining(ns, t0); got != l.Burst {
		t.Fatalf("refund of 10 on a key owing 2: remaining %d, want %d", got, l.Burst)
	}
	n := int64(0)
	for ; ; n++ {
		var d Decision
		ns, d, _ = Take(l, ns, t0, 1, 0)
		if !d.Allowed {
			break
		}
	}
	if n != l.Burst {
		t.Fatalf("after a large refund %d units conform at once, want burst %d", n, l.Burst)
	}
	// Errors.
	if _, err := Settle(l, s, t0, -1, 2); !errors.Is(err, ErrNegativeCost) {
		t.Fatalf("negative reserved: %v", err)
	}
	if _, err := Settle(l, s, t0, 2, -1); !errors.Is(err, ErrNegativeCost) {
		t.Fatalf("negative actual: %v", err)
	}
	if got, err := Settle(l, s, t0, 1<<62, 0); err == nil {
		t.Fatalf("overflowing refund accepted: %+v", got)
	}
	if got, err := Settle(l, s, t0, 0, 1<<62); err == nil {
		t.Fatalf("overflowing charge accepted: %+v", got)
	}
}

func TestSync(t *testing.T) {
	t.Parallel()
	// Shopify-like bucket: 1000 points, 50 restored per second. T = 20ms.
	l := BucketLimit(1000, 50)
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	if l.Interval() != 20*ms {
		t.Fatalf("interval %d", l.Interval())
	}
	for _, r := range []int64{0, 1, 2, 500, 999, 1000} {
		s := mustSync(t, l, t0, Observation{Remaining: r})
		_, d, _ := Take(l, s, t0, 0, 0)
		if d.Remaining != r {
			t.Errorf("Sync(remaining=%d): remaining %d", r, d.Remaining)
		}
		if r > 0 {
			_, d, _ = Take(l, s, t0, r, 0)
			if !d.Allowed {
				t.Errorf("Sync(remaining=%d): taking %d denied", r, r)
			}
		}
		if r < l.Burst {
			_, d, _ = Take(l, s, t0, r+1, 0)
			if d.Allowed {
				t.Errorf("Sync(remaining=%d): taking %d allowed", r, r+1)
			}
		}
	}
	// Out-of-range reports clamp.
	if s := mustSync(t, l, t0, Observation{Remaining: 5000}); s.TAT != t0 {
		t.Errorf("remaining above burst: TAT t0%+d, want t0", s.TAT-t0)
	}
	s := mustSync(t, l, t0, Observation{Remaining: -3})
	if _, d, _ := Take(l, s, t0, 0, 0); d.Remaining != 0 {
		t.Errorf("negative remaining: %d", d.Remaining)
	}
	// Remaining 0 and a reset: the first unit conforms exactly at
	// now+reset, not a microsecond sooner.
	for _, reset := range []int64{1, 5 * ms, 20 * ms, 30 * sec, 3600 * sec} {
		s := mustSync(t, l, t0, Observation{Remaining: 0, ResetAfter: reset})
		_, d, _ := Take(l, s, t0, 1, 0)
		if d.Allowed || d.RetryAfter != reset {
			t.Errorf("reset %d: %+v, want denied with RetryAfter %d", reset, d, reset)
		}
		if _, d, _ := Take(l, s, t0+reset-1, 1, 0); d.Allowed {
			t.Errorf("reset %d: allowed 1us early", reset)
		}
		if _, d, _ := Take(l, s, t0+reset, 1, 0); !d.Allowed {
			t.Errorf("reset %d: denied at now+reset", reset)
		}
		// And only one unit: from then on the bucket refills at its rate.
		if _, d, _ := Take(l, s, t0+reset, 2, 0); d.Allowed {
			t.Errorf("reset %d: 2 units allowed at now+reset", reset)
		}
	}
	// A reset is ignored when units remain.
	s = mustSync(t, l, t0, Observation{Remaining: 3, ResetAfter: 3600 * sec})
	if _, d, _ := Take(l, s, t0, 3, 0); !d.Allowed {
		t.Errorf("remaining 3 with reset: %+v", d)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l  Limit
		ok bool
	}{
		{Limit{Rate: 1, Period: time.Second, Burst: 1}, true},
		{Limit{Rate: 1000000, Period: time.Second, Burst: 1}, true},
		{Limit{Rate: 10, Period: 10 * time.Microsecond, Burst: 1}, true},
		{Limit{Rate: 0, Period: time.Second, Burst: 1}, false},
		{Limit{Rate: -1, Period: time.Second, Burst: 1}, false},
		{Limit{Rate: 1, Period: 0, Burst: 1}, false},
		{Limit{Rate: 1, Period: -time.Second, Burst: 1}, false},
		{Limit{Rate: 1, Period: time.Second, Burst: 0}, false},
		{Limit{Rate: 1, Period: time.Second, Burst: -5}, false},
		// Finer than one unit per microsecond.
		{Limit{Rate: 1000001, Period: time.Second, Burst: 1}, false},
		{Limit{Rate: 1, Period: 999 * time.Nanosecond, Burst: 1}, false},
		// Burst*T must stay below maxSpan.
		{Limit{Rate: 1, Period: time.Second, Burst: maxSpan / sec}, true},
		{Limit{Rate: 1, Period: time.Second, Burst: maxSpan/sec + 1}, false},
		{Limit{Rate: 1, Period: time.Microsecond, Burst: maxSpan - 1}, true},
		{Limit{Rate: 1, Period: time.Microsecond, Burst: maxSpan}, false},
		{Limit{Rate: 1, Period: time.Second, Burst: 1 << 62}, false},
		{Limit{Rate: 1, Period: time.Hour, Burst: 1<<63 - 1}, false},
		{Limit{}, false},
	} {
		err := tc.l.Validate()
		if tc.ok && err != nil {
			t.Errorf("%+v: unexpected error %v", tc.l, err)
		}
		if !tc.ok && !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%+v: err = %v, want ErrInvalidLimit", tc.l, err)
		}
	}
}

func TestFresh(t *testing.T) {
	t.Parallel()
	l := Limit{Rate: 10, Period: time.Second, Burst: 5}
	if !(State{}).Fresh(t0) {
		t.Fatal("zero state not fresh")
	}
	s, _, _ := Take(l, State{}, t0, 2, 0)
	if s.Fresh(t0) || s.Fresh(t0+200*ms-1) {
		t.Fatal("state holding units reported fresh")
	}
	if !s.Fresh(t0 + 200*ms) {
		t.Fatal("state not fresh once TAT passed")
	}
	// Fresh means indistinguishable from a fresh key: the full burst.
	_, d, _ := Take(l, s, t0+200*ms, 0, 0)
	if d.Remaining != l.Burst || d.ResetAfter != 0 {
		t.Fatalf("fresh state has %+v", d)
	}
}

func TestParamsMatchesValidate(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...int64) int64 { return xs[rng.IntN(len(xs))] }
	for range 20000 {
		l := Limit{
			Rate:   pick(-1, 0, 1, 3, 7, 1000, 1_000_000, 1_000_001, rng.Int64N(1<<20)),
			Period: time.Duration(pick(-1, 0, 999, 1000, 7000, int64(time.Second), int64(time.Hour), rng.Int64N(1<<40))),
			Burst:  pick(-1, 0, 1, 5, maxSpan/sec, maxSpan/sec+1, maxSpan, 1<<62, rng.Int64N(1<<40)),
		}
		p, err := l.Params()
		verr := l.Validate()
		if (err == nil) != (verr == nil) {
			t.Fatalf("%+v: Params error %v, Validate error %v", l, err, verr)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidLimit) {
				t.Fatalf("%+v: Params error %v is not ErrInvalidLimit", l, err)
			}
			if _, _, terr := Take(l, State{}, t0, 1, 0); !errors.Is(terr, ErrInvalidLimit) {
				t.Fatalf("%+v: Take on an invalid limit: %v", l, terr)
			}
			continue
		}
		if p.Interval != l.Interval() || p.Burst != l.Burst {
			t.Fatalf("%+v: Params %+v, interval %d", l, p, l.Interval())
		}
		if p.Burst*p.Interval >= maxSpan || p.Burst*p.Interval <= 0 {
			t.Fatalf("%+v: Burst*Interval = %d out of range", l, p.Burst*p.Interval)
		}
	}
}

func TestSettleDebtNeverOverflows(t *testing.T) {
	t.Parallel()
	// Settle's costs are request data, not configuration: however large the
	// charges, and however many, the key must stay in exactly the debt it
	// accepted (or refuse the charge), never wrap around into a fresh key.
	for _, l := range []Limit{
		{Rate: 1, Period: time.Second, Burst: 20},
		{Rate: 1000, Period: time.Second, Burst: 1},
		{Rate: 1, Period: time.Second, Burst: maxSpan/sec - 1},
	} {
		T := l.Interval()
		for _, actual := range []int64{maxSpan / T, maxSpan/T - l.Burst, maxSpan / T / 2, 1 << 40, 1} {
			s := State{}
			var charged int64 // units accepted so far: TAT is t0 + charged*T
			for i := range 8 {
				ns, err := Settle(l, s, t0, 0, actual)
				if err != nil {
					if !errors.Is(err, ErrCostExceedsBurst) || ns != s {
						t.Fatalf("%+v settle %d: %v (state %+v -> %+v)", l, actual, err, s, ns)
					}
					if i == 0 && actual <= maxSpan/T-l.Burst {
						t.Fatalf("%+v: first charge of %d refused", l, actual)
					}
					continue
				}
				charged += actual
				if ns.TAT != t0+charged*T {
					t.Fatalf("%+v: after charges of %d units TAT is t0%+d", l, charged, ns.TAT-t0)
				}
				s = ns
				_, d, err := Take(l, s, t0, 1, 0)
				if err != nil || d.Allowed != (charged+1 <= l.Burst) {
					t.Fatalf("%+v: %d units in debt, take of 1: %+v %v", l, charged, d, err)
				}
			}
		}
	}
}

func mustSync(t *testing.T, l Limit, now int64, obs Observation) State {
	t.Helper()
	s, err := Sync(l, now, obs)
	if err != nil {
		t.Fatalf("Sync(%+v, %d, %+v): %v", l, now, obs, err)
	}
	return s
}

// TestInvalidInputIsAnError checks that every exported function refuses an
// invalid limit, zero params and out-of-range instants with an error, and
// never panics (Settle and Sync used to divide by a zero interval).
func TestInvalidInputIsAnError(t *testing.T) {
	t.Parallel()
	ok := Limit{Rate: 1, Period: time.Second, Burst: 1}
	for _, l := range []Limit{{}, {Rate: 0, Period: time.Second, Burst: 1}, {Rate: -1, Period: time.Second, Burst: 1},
		{Rate: 1, Period: 0, Burst: 1}, {Rate: 1, Period: -time.Second, Burst: 1}, {Rate: 1, Period: time.Second},
		{Rate: 2, Period: time.Microsecond, Burst: 1}, {Rate: 1, Period: time.Second, Burst: MaxSpan}} {
		if _, err := Settle(l, State{}, t0, 0, 1); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("Settle(%+v): %v, want ErrInvalidLimit", l, err)
		}
		if _, err := Sync(l, t0, Observation{ResetAfter: sec}); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("Sync(%+v): %v, want ErrInvalidLimit", l, err)
		}
		if _, _, err := Take(l, State{}, t0, 1, 0); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("Take(%+v): %v, want ErrInvalidLimit", l, err)
		}
		_ = l.Interval()
	}
	var d Decision
	for _, p := range []Params{{}, {Interval: 1}, {Burst: 1}, {Interval: -1, Burst: 1}, {Interval: 1 << 40, Burst: 1 << 40}} {
		s := State{TAT: 7}
		if err := p.TakeTo(&s, t0, 0, 0, &d); !errors.Is(err, ErrInvalidLimit) || s.TAT != 7 {
			t.Errorf("%+v.TakeTo: %v, state %+v", p, err, s)
		}
	}
	for _, now := range []int64{MaxTime + 1, -MaxTime - 1, 1<<63 - 1, -1 << 63} {
		if _, _, err := Take(ok, State{}, now, 1, 1<<62); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Take at %d: %v, want ErrOutOfRange", now, err)
		}
		if _, _, err := Take(ok, State{TAT: now}, t0, 1, 0); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Take on TAT %d: %v, want ErrOutOfRange", now, err)
		}
		if _, err := Settle(ok, State{}, now, 0, 1); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Settle at %d: %v, want ErrOutOfRange", now, err)
		}
		if _, err := Settle(ok, State{TAT: now}, t0, 1, 0); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Settle on TAT %d: %v, want ErrOutOfRange", now, err)
		}
		if _, err := Sync(ok, now, Observation{}); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Sync at %d: %v, want ErrOutOfRange", now, err)
		}
	}
	if _, err := Sync(ok, MaxTime-sec, Observation{ResetAfter: sec + 1}); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("Sync past MaxTime: %v, want ErrOutOfRange", err)
	}
	if s, err := Sync(ok, MaxTime-sec, Observation{ResetAfter: sec}); err != nil || s.TAT != MaxTime {
		t.Errorf("Sync up to MaxTime: %+v %v", s, err)
	}
}

// TestSettleBoundIsMaxSpan checks the bound the package documents: a debt
// reaching MaxSpan beyond now (after a further Take of the whole burst) is
// refused, one microsecond less is not.
func TestSettleBoundIsMaxSpan(t *testing.T) {
	t.Parallel()
	l := Limit{Rate: 1_000_000, Period: time.Second, Burst: 1} // T = 1us
	if _, err := Settle(l, State{}, t0, 0, MaxSpan); !errors.Is(err, ErrCostExceedsBurst) {
		t.Fatalf("Settle of 2^52 units: %v, want ErrCostExceedsBurst", err)
	}
	s, err := Settle(l, State{}, t0, 0, MaxSpan-1)
	if err != nil || s.TAT != t0+MaxSpan-1 {
		t.Fatalf("Settle of 2^52-1 units: %+v %v", s, err)
	}
	if _, err := Settle(l, s, t0, 0, 1); !errors.Is(err, ErrCostExceedsBurst) {
		t.Fatalf("Settle on top of a full debt: %v, want ErrCostExceedsBurst", err)
	}
	if _, err := Settle(l, State{}, t0, MaxSpan+1, 0); !errors.Is(err, ErrCostExceedsBurst) {
		t.Fatalf("refund beyond 2^52: %v, want ErrCostExceedsBurst", err)
	}
	l = Limit{Rate: 1, Period: time.Second, Burst: 1}
	if _, err := Settle(l, State{}, t0, 0, 1<<40); !errors.Is(err, ErrCostExceedsBurst) {
		t.Fatalf("Settle of 2^40 s: %v, want ErrCostExceedsBurst", err)
	}
}
