package retry

import (
	"testing"
	"time"
)

// FuzzDecide feeds random attempts (four bytes each: time step, outcome and
// flags, attempt number, retry-after) through one budget and checks: only
// transient outcomes are retried, never an unknown outcome of a
// non-idempotent call, never past MaxAttempts; the delay is under the
// backoff ceiling and at least the Retry-After, or exactly the Retry-After
// when that is above the ceiling, at most MaxDelay;
// and retries stay within capacity + ratio x successes + floor x time.
func FuzzDecide(f *testing.F) {
	f.Add([]byte("\x01\x02\x01\x00\x01\x01\x01\x00\x01\x06\x02\x20\x01\x0e\x01\xff"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		const capa, ratio, floor = 5.0, 0.2, 0.5
		p, err := New(Config{Base: 10 * time.Millisecond, Cap: time.Second, MaxAttempts: 4, MaxDelay: 10 * time.Second,
			BudgetCapacity: capa, BudgetRatio: ratio, BudgetFloor: floor})
		if err != nil {
			t.Fatal(err)
		}
		var b Budget
		now := t0
		retries, successes := 0, 0
		for i := 0; i+4 <= len(ops) && i < 4*2000; i += 4 {
			now += int64(ops[i]) * 10 * ms
			a := Attempt{
				Outcome:    Outcome(1 + ops[i+1]%4),
				Unknown:    ops[i+1]&0x04 != 0,
				Idempotent: ops[i+1]&0x08 != 0,
				N:          1 + int(ops[i+2]%6),
			}
			if ops[i+3] != 0 {
				a.RetryAfter, a.HasRetryAfter = int64(ops[i+3])*100*ms, true
			}
			u := float64(ops[i+2]) / 256
			d := p.Decide(&b, now, a, u)
			if a.Outcome == Success {
				successes++
			}
			if !d.Retry {
				if d.Delay != 0 {
					t.Fatalf("attempt %d: no retry with delay %d", i/4, d.Delay)
				}
				continue
			}
			retries++
			switch {
			case a.Outcome != Transient:
				t.Fatalf("attempt %d: retried %+v", i/4, a)
			case a.Unknown && !a.Idempotent:
				t.Fatalf("attempt %d: retried an unknown non-idempotent call", i/4)
			case a.N >= 4:
				t.Fatalf("attempt %d: retried after %d attempts", i/4, a.N)
			case d.Stop != nil:
				t.Fatalf("attempt %d: retry with stop %v", i/4, d.Stop)
			}
			ceil := min(sec, 10*ms<<(a.N-1))
			if a.HasRetryAfter && a.RetryAfter >= ceil {
				if d.Delay != a.RetryAfter || d.Delay > 10*sec {
					t.Fatalf("attempt %d: delay %d, retry-after %d", i/4, d.Delay, a.RetryAfter)
				}
			} else if d.Delay < 0 || d.Delay >= ceil || a.HasRetryAfter && d.Delay < a.RetryAfter {
				t.Fatalf("attempt %d: delay %d outside [0, %d) or below the retry-after %d", i/4, d.Delay, ceil, a.RetryAfter)
			}
			if bound := capa + ratio*float64(successes) + floor*float64(now-t0)/1e6; float64(retries) > bound+1e-9 {
				t.Fatalf("attempt %d: %d retries, budget allows %v", i/4, retries, bound)
			}
		}
	})
}
