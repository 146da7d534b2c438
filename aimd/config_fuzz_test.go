package aimd

import (
	"testing"
	"time"
)

// FuzzConfig builds controllers from arbitrary configurations (NaN,
// infinities, zero and negative values, overflowing durations) and feeds
// them arbitrary samples at arbitrary instants: New must refuse what it
// cannot use with an error, and nothing may panic; a controller New
// accepted keeps its rate finite and within [Floor, Ceiling].
func FuzzConfig(f *testing.F) {
	f.Add(1.0, 0.5, 10.0, 0.0, 1.0, 0.5, int64(0), int64(0), 2.0, []byte{1, 2, 3, 4})
	f.Add(-1.0, 0.0, 0.0, -5.0, 2.0, 0.0, int64(-1), int64(1<<62), 0.0, []byte{0xff, 0, 0x80})
	f.Fuzz(func(t *testing.T, start, floor, ceiling, increase, decrease, weight float64, cooldownUS, targetUS int64, factor float64, ops []byte) {
		c, err := New(Config{Start: start, Floor: floor, Ceiling: ceiling, Increase: increase, Decrease: decrease,
			LatencyWeight: weight, Cooldown: time.Duration(cooldownUS), LatencyTarget: time.Duration(targetUS),
			LatencyFactor: factor, Plateau: factor, UsageMultiple: factor, Queue: weight, Hold: time.Duration(cooldownUS),
			SlowStart: increase})
		if err != nil {
			return
		}
		s := c.Init()
		now := int64(0)
		for i := 0; i+3 <= len(ops) && i < 3*500; i += 3 {
			now += int64(int8(ops[i])) << (ops[i+1] % 48)
			in := Sample{Outcome: Outcome(ops[i+1] % 6), Latency: int64(ops[i+2]) << (ops[i] % 40),
				RetryAfter: int64(int8(ops[i+2])) << (ops[i+1] % 50), Hint: float64(int8(ops[i])) * weight}
			d := c.Observe(&s, now, in)
			r := c.Rate(&s)
			if r != r || r < c.floor || r > c.ceiling {
				t.Fatalf("op %d: rate %v (decision %+v) outside [%v, %v]", i/3, r, d, c.floor, c.ceiling)
			}
			_, _ = s.Paused(now)
			_ = c.Fresh(&s, now)
		}
		l := NewLocked(c)
		l.Observe(now, Sample{Outcome: Throttled, RetryAfter: 1<<63 - 1})
		_, _ = l.Rate(1<<63 - 1)
	})
}
