package retry

import (
	"testing"
	"time"
)

// FuzzConfig builds policies from arbitrary configurations (NaN,
// infinities, zero and negative values) and asks them arbitrary questions
// (any retry number, any jitter including NaN, instants that jump and run
// backwards): New must refuse what it cannot use with an error, nothing may
// panic, and a delay is never negative.
func FuzzConfig(f *testing.F) {
	f.Add(int64(10_000), int64(1_000_000), 4, int64(0), 0.2, 0.5, 5.0, 3, 0.5, []byte{1, 2, 3, 4})
	f.Add(int64(-1), int64(1<<62), -1, int64(-1), -1.0, 0.0, 0.0, 1<<62, 1.5, []byte{0xff, 0x80})
	f.Fuzz(func(t *testing.T, baseNS, capNS int64, maxAttempts int, maxDelayNS int64, ratio, floor, capa float64, n int, u float64, ops []byte) {
		p, err := New(Config{Base: time.Duration(baseNS), Cap: time.Duration(capNS), MaxAttempts: maxAttempts,
			MaxDelay: time.Duration(maxDelayNS), BudgetRatio: ratio, BudgetFloor: floor, BudgetCapacity: capa})
		if err != nil {
			return
		}
		if d := p.Backoff(n, u); d < 0 {
			t.Fatalf("Backoff(%d, %v) = %d", n, u, d)
		}
		var b Budget
		now := int64(0)
		for i := 0; i+3 <= len(ops) && i < 3*500; i += 3 {
			now += int64(int8(ops[i])) << (ops[i+1] % 56)
			a := Attempt{Outcome: Outcome(ops[i+1] % 5), Unknown: ops[i+2]&1 != 0, Idempotent: ops[i+2]&2 != 0,
				N: int(int8(ops[i+2])), RetryAfter: int64(int8(ops[i])) << (ops[i+2] % 60), HasRetryAfter: ops[i+2]&4 != 0}
			d := p.Decide(&b, now, a, u)
			if d.Delay < 0 {
				t.Fatalf("op %d: negative delay in %+v", i/3, d)
			}
			_ = p.Tokens(b, now)
			_ = p.Fresh(b, now)
		}
		r := NewRetrier(p, nil)
		_ = r.Decide(1<<63-1, Attempt{Outcome: Transient, Idempotent: true, N: 1 << 40})
		_ = r.Tokens(-1 << 63)
	})
}
