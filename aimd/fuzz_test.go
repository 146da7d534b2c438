package aimd

import (
	"math"
	"testing"
	"time"
)

// FuzzObserve drives one key through samples decoded from ops, four bytes
// a sample (time step, outcome, latency, retry-after/hint), and checks the
// controller's invariants after every one: the rate stays finite and in
// [Floor, Ceiling] (and under a reported hint, unless that is below the
// floor); a non-success never raises it; a pause never shrinks.
func FuzzObserve(f *testing.F) {
	f.Add(uint8(10), []byte("\x0a\x01\x08\x00\x0a\x01\x08\x00\x05\x02\x01\x81\x01\x02\x01\x00\x30\x03\x40\x00"))
	f.Fuzz(func(t *testing.T, start uint8, ops []byte) {
		// A configured latency target, and one learned from the samples;
		// and the figures' plateau and latency gradient.
		for _, target := range []time.Duration{20 * time.Millisecond, 0} {
			observe(t, start, target, false, ops)
		}
		observe(t, start, 0, true, ops)
	})
}

func observe(t *testing.T, start uint8, target time.Duration, plateau bool, ops []byte) {
	t.Helper()
	cfg := Config{Start: float64(start) + 0.5, Floor: 0.5, Ceiling: 300, Cooldown: 0, LatencyTarget: target}
	if plateau {
		cfg.Decrease, cfg.Plateau, cfg.Hold, cfg.Queue = 0.8, 0.91, time.Second, 2.5
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Init()
	now := t0
	var paused int64
	for i := 0; i+4 <= len(ops) && i < 4*2000; i += 4 {
		now += int64(ops[i]) * 10 * ms
		in := Sample{Outcome: Outcome(1 + ops[i+1]%4), Latency: int64(ops[i+2]) * 5 * ms}
		switch x := ops[i+3]; {
		case x >= 0x80:
			in.RetryAfter = int64(x-0x80) * 100 * ms
		case x >= 0x40:
			in.Hint = float64(x - 0x40)
		}
		before := s.rate
		d := c.Observe(&s, now, in)
		if math.IsNaN(d.Rate) || d.Rate < 0.5 || d.Rate > 300 || d.Rate != s.rate {
			t.Fatalf("target %v, sample %d: rate %v outside [0.5, 300]", target, i/4, d.Rate)
		}
		if s.hint > 0 && d.Rate > max(s.hint, 0.5)+1e-9 {
			t.Fatalf("target %v, sample %d: rate %v above the hint %v", target, i/4, d.Rate, s.hint)
		}
		if in.Outcome != Success && d.Rate > before {
			t.Fatalf("target %v, sample %d: %+v raised the rate %v -> %v", target, i/4, in, before, d.Rate)
		}
		if d.Change == Increased && d.Rate <= before || d.Change == Decreased && d.Rate > before {
			t.Fatalf("target %v, sample %d: change %v from %v to %v", target, i/4, d.Change, before, d.Rate)
		}
		if d.PausedUntil < paused {
			t.Fatalf("target %v, sample %d: pause shrank from %d to %d", target, i/4, paused, d.PausedUntil)
		}
		paused = d.PausedUntil
	}
}
