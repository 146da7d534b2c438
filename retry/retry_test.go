package retry

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// t0 is an arbitrary instant (2030-01-01T00:00:00Z) in Unix microseconds.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

const (
	ms  = int64(1000)
	sec = 1000 * ms
)

func mustNew(t testing.TB, cfg Config) *Policy {
	t.Helper()
	p, err := New(cfg)
	require.NoError(t, err)
	return p
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg Config
		msg string
	}{
		{Config{Base: -1}, "Base"},
		{Config{MaxAttempts: -1}, "MaxAttempts"},
		{Config{Base: time.Second, Cap: time.Millisecond}, "Cap"},
		{Config{Base: time.Nanosecond}, "1us"},
		{Config{BudgetRatio: -0.1}, "BudgetRatio"},
		{Config{BudgetCapacity: 0.5}, "BudgetCapacity"},
	} {
		_, err := New(tc.cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", tc.cfg)
		require.ErrorContains(t, err, tc.msg, "%+v", tc.cfg)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{Base: 100 * time.Millisecond, Cap: time.Second})
	for _, tc := range []struct {
		n    int
		u    float64
		want int64
	}{
		{1, 0.5, 50 * ms},   // [0, 100ms)
		{2, 0.5, 100 * ms},  // [0, 200ms)
		{3, 0.5, 200 * ms},  // [0, 400ms)
		{4, 0.5, 400 * ms},  // [0, 800ms)
		{5, 0.5, 500 * ms},  // capped: [0, 1s)
		{60, 0.5, 500 * ms}, // no overflow
		{1000, 0.5, 500 * ms},
		{0, 0.5, 50 * ms},
		{3, 0, 0},
		{3, -1, 0},
		{5, 1, sec - 1}, // u is clamped below 1
	} {
		require.Equal(t, tc.want, p.Backoff(tc.n, tc.u), "n=%d u=%v", tc.n, tc.u)
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{Base: 100 * time.Millisecond, Cap: time.Second, MaxAttempts: 3, MaxDelay: 30 * time.Second})
	for _, tc := range []struct {
		name  string
		a     Attempt
		retry bool
		delay int64
		stop  error
	}{
		{"success", Attempt{N: 1, Outcome: Success}, false, 0, nil},
		{"permanent is not retried", Attempt{N: 1, Outcome: Permanent}, false, 0, nil},
		{"canceled is not retried", Attempt{N: 1, Outcome: Canceled}, false, 0, nil},
		{"transient is", Attempt{N: 1, Outcome: Transient}, true, 50 * ms, nil},
		{"second retry backs off more", Attempt{N: 2, Outcome: Transient}, true, 100 * ms, nil},
		{"max attempts", Attempt{N: 3, Outcome: Transient}, false, 0, ErrAttemptsExhausted},
		{"429 on a POST: not processed, so retried", Attempt{N: 1, Outcome: Transient}, true, 50 * ms, nil},
		{"502 on a POST: maybe processed, not retried", Attempt{N: 1, Outcome: Transient, Unknown: true}, false, 0, ErrNotIdempotent},
		{"502 on a GET", Attempt{N: 1, Outcome: Transient, Unknown: true, Idempotent: true}, true, 50 * ms, nil},
		{"retry-after is the floor", Attempt{N: 1, Outcome: Transient, RetryAfter: 2 * sec, HasRetryAfter: true}, true, 2 * sec, nil},
		{"backoff above retry-after wins", Attempt{N: 2, Outcome: Transient, RetryAfter: 10 * ms, HasRetryAfter: true}, true, 100 * ms, nil},
		{"retry-after of zero", Attempt{N: 1, Outcome: Transient, HasRetryAfter: true}, true, 50 * ms, nil},
		{"retry-after too long", Attempt{N: 1, Outcome: Transient, RetryAfter: 31 * sec, HasRetryAfter: true}, false, 0, ErrDelayTooLong},
	} {
		var b Budget
		d := p.Decide(&b, t0, tc.a, 0.5)
		require.Equal(t, tc.retry, d.Retry, tc.name)
		require.Equal(t, tc.delay, d.Delay, tc.name)
		require.Equal(t, tc.stop, d.Stop, tc.name)
		want := DefaultBudgetCapacity
		if d.Retry {
			want--
		}
		require.Equal(t, want, b.Tokens, "%s: only a retry takes a token", tc.name)
	}
}

func TestBudget(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{BudgetRatio: 0.2, BudgetFloor: 1, BudgetCapacity: 5})
	var b Budget
	fail := Attempt{N: 1, Outcome: Transient}
	// The capacity, then nothing: the provider is down, no successes.
	for i := range 5 {
		require.True(t, p.Decide(&b, t0, fail, 0.5).Retry, "retry %d", i)
	}
	d := p.Decide(&b, t0, fail, 0.5)
	require.False(t, d.Retry)
	require.ErrorIs(t, d.Stop, ErrBudgetExhausted)
	// The floor: one token a second.
	require.False(t, p.Decide(&b, t0+999*ms, fail, 0.5).Retry)
	require.True(t, p.Decide(&b, t0+2*sec, fail, 0.5).Retry)
	require.True(t, p.Decide(&b, t0+2*sec, fail, 0.5).Retry)
	require.False(t, p.Decide(&b, t0+2*sec, fail, 0.5).Retry)
	// Successes refill by the ratio: five successes, one retry.
	for range 5 {
		p.Decide(&b, t0+2*sec, Attempt{N: 1, Outcome: Success}, 0)
	}
	require.InDelta(t, 1.0, p.Tokens(b, t0+2*sec), 1e-9)
	require.True(t, p.Decide(&b, t0+2*sec, fail, 0.5).Retry)
	require.False(t, p.Decide(&b, t0+2*sec, fail, 0.5).Retry)
	// Never above the capacity.
	for range 100 {
		p.Decide(&b, t0+3*sec, Attempt{N: 1, Outcome: Success}, 0)
	}
	require.Equal(t, 5.0, p.Tokens(b, t0+time.Hour.Microseconds()))
}

// TestBudgetBound is the budget as a property: over random traffic, retries
// never exceed capacity + ratio x successes + floor x elapsed seconds.
func TestBudgetBound(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for run := range 100 {
		capa, ratio, floor := float64(1+rng.IntN(20)), rng.Float64()*0.5+0.01, rng.Float64()*2
		p := mustNew(t, Config{BudgetCapacity: capa, BudgetRatio: ratio, BudgetFloor: floor, MaxAttempts: 1 << 20})
		var b Budget
		now := t0
		retries, successes := 0, 0
		failRate := rng.Float64()
		for range 2000 {
			now += rng.Int64N(50 * ms)
			if rng.Float64() < failRate {
				if p.Decide(&b, now, Attempt{N: 1, Outcome: Transient}, rng.Float64()).Retry {
					retries++
				}
			} else {
				p.Decide(&b, now, Attempt{N: 1, Outcome: Success}, 0)
				successes++
			}
			bound := capa + ratio*float64(successes) + floor*float64(now-t0)/1e6
			require.LessOrEqual(t, float64(retries), bound+1e-9, "run %d", run)
		}
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	last := fmt.Errorf("get: %w", errors.New("503 service unavailable"))
	var err error = &Error{Reason: ErrBudgetExhausted, Attempts: 2, Last: last}
	require.ErrorIs(t, err, ErrBudgetExhausted)
	require.ErrorIs(t, err, last)
	require.NotErrorIs(t, err, ErrAttemptsExhausted)
	require.EqualError(t, err, "retry: retry budget exhausted after 2 attempts: get: 503 service unavailable")
	var re *Error
	require.ErrorAs(t, err, &re)
	require.Equal(t, 2, re.Attempts)
	require.EqualError(t, &Error{Reason: ErrNotIdempotent, Attempts: 1}, "retry: outcome unknown and the call is not idempotent after 1 attempts")
}

// seq is a Rand that returns fixed values in turn.
type seq struct{ v []float64 }

func (s *seq) Float64() float64 { x := s.v[0]; s.v = s.v[1:]; return x }

func TestRetrier(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{Base: 100 * time.Millisecond, Cap: time.Second, BudgetCapacity: 100, BudgetFloor: -1})
	r := NewRetrier(p, &seq{v: []float64{0.25, 0.75}})
	require.Equal(t, 25*ms, r.Decide(t0, Attempt{N: 1, Outcome: Transient}).Delay)
	require.Equal(t, 150*ms, r.Decide(t0, Attempt{N: 2, Outcome: Transient}).Delay)

	// Concurrent use with the global source: exactly the budget's worth
	// of retries, no more.
	r = NewRetrier(p, nil)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		retried int
	)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				d := r.Decide(t0, Attempt{N: 1, Outcome: Transient})
				require.Less(t, d.Delay, 100*ms)
				if d.Retry {
					mu.Lock()
					retried++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, 100, retried)
	require.Zero(t, r.Tokens(t0))
}

func TestFresh(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{BudgetCapacity: 2, BudgetFloor: 1})
	var b Budget
	require.True(t, p.Fresh(b, t0))
	p.Decide(&b, t0, Attempt{N: 1, Outcome: Transient}, 0)
	require.False(t, p.Fresh(b, t0+999*ms))
	require.True(t, p.Fresh(b, t0+sec))
}
