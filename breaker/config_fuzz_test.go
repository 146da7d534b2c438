package breaker

import (
	"testing"
	"time"
)

// FuzzConfig builds policies from arbitrary configurations (NaN, zero and
// negative values, overflowing durations) and drives a breaker with
// arbitrary outcomes at instants that jump and run backwards: New must
// refuse what it cannot use with an error, and nothing may panic.
func FuzzConfig(f *testing.F) {
	f.Add(int64(2_000_000_000), 4, 4, 0.5, 3, int64(500_000_000), 2, []byte{1, 2, 3, 4})
	f.Add(int64(1), 1<<40, -1, 1.5, 0, int64(-1), -1, []byte{0xff, 0x80, 0x7f})
	f.Fuzz(func(t *testing.T, windowNS int64, buckets, minRequests int, rate float64, consecutive int, openNS int64, probes int, ops []byte) {
		p, err := New(Config{Window: time.Duration(windowNS), Buckets: buckets, MinRequests: minRequests, FailureRate: rate,
			ConsecutiveFailures: consecutive, OpenTimeout: time.Duration(openNS), HalfOpenProbes: probes})
		if err != nil {
			return
		}
		var b Breaker
		var tickets []Ticket
		now := int64(0)
		for i := 0; i+2 <= len(ops) && i < 2*1000; i += 2 {
			now += int64(int8(ops[i])) << (ops[i+1] % 56)
			if ops[i+1]&1 == 0 {
				if tk, _, err := p.Allow(&b, now); err == nil {
					tickets = append(tickets, tk)
				}
			} else if len(tickets) > 0 {
				j := int(ops[i]) % len(tickets)
				p.Record(&b, now, tickets[j], Outcome(ops[i+1]>>1%4))
			} else {
				p.Record(&b, now, Ticket{}, Outcome(ops[i+1]>>1%4))
			}
			_ = p.Counts(&b)
			_, _ = p.OpenUntil(&b)
			_ = p.Fresh(&b, now)
		}
		l := NewLocked(p, nil)
		if tk, err := l.Allow(1<<63 - 1); err == nil {
			l.Done(-1<<63, tk, Success)
		}
		_, _ = l.State()
	})
}
