package breaker

import (
	"errors"
	"testing"
	"time"
)

// FuzzBreaker drives one breaker with Allows and Records decoded from ops
// (two bytes each: time step, and an action) and checks the state machine:
// only the legal transitions happen, each from the state the breaker was
// in, with the generation counting them; closed never refuses; open refuses
// with ErrOpen until its timeout; half-open admits at most the probe budget
// between reports.
func FuzzBreaker(f *testing.F) {
	f.Add([]byte("\x00\x01\x00\x01\x00\x01\x00\x01\x00\x01\x00\x01\x10\x00\x00\x02\x00\x00\x00\x02"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		const timeout = 500 * ms
		p, err := New(Config{Window: 2 * time.Second, Buckets: 4, MinRequests: 4, FailureRate: 0.5,
			ConsecutiveFailures: 3, OpenTimeout: time.Duration(timeout) * time.Microsecond, HalfOpenProbes: 2})
		if err != nil {
			t.Fatal(err)
		}
		var (
			b       Breaker
			tickets []Ticket
			issued  []int64 // when each ticket was admitted
			now     = t0
		)
		check := func(i int, before State, gen uint64, ev Event) {
			if !ev.Changed() {
				if b.State() != before || b.Generation() != gen {
					t.Fatalf("op %d: state %v -> %v without an event", i, before, b.State())
				}
				return
			}
			legal := before == Closed && ev.To == Open || before == Open && ev.To == HalfOpen ||
				before == HalfOpen && (ev.To == Open || ev.To == Closed)
			if !legal || ev.From != before || ev.To != b.State() || ev.Generation != gen+1 || b.Generation() != gen+1 || ev.At != now {
				t.Fatalf("op %d: event %+v from %v (generation %d)", i, ev, before, gen)
			}
		}
		for i := 0; i+2 <= len(ops) && i < 2*4000; i += 2 {
			now += int64(ops[i]%64) * 50 * ms
			before, gen := b.State(), b.Generation()
			action := ops[i+1]
			if action%4 == 0 || len(tickets) == 0 {
				openUntil, open := p.OpenUntil(&b)
				tk, ev, err := p.Allow(&b, now)
				check(i/2, before, gen, ev)
				switch {
				case before == Closed && err != nil:
					t.Fatalf("op %d: closed refused: %v", i/2, err)
				case open && now < openUntil && !errors.Is(err, ErrOpen):
					t.Fatalf("op %d: open before its timeout admitted (%v)", i/2, err)
				case open && now >= openUntil && (b.State() != HalfOpen || !tk.Probe && err == nil):
					t.Fatalf("op %d: open past its timeout: %v %v", i/2, b.State(), err)
				}
				if err == nil {
					tickets = append(tickets, tk)
					issued = append(issued, now)
				}
				if b.State() == HalfOpen && b.probes > 2 {
					t.Fatalf("op %d: %d probes admitted", i/2, b.probes)
				}
				// Probes still out that were admitted within an open
				// timeout are not taken as lost: never more than the
				// budget, however late the lost ones report.
				out := 0
				for j, tk := range tickets {
					if tk.Probe && tk.Generation == b.Generation() && now-issued[j] < timeout {
						out++
					}
				}
				if out > 2 {
					t.Fatalf("op %d: %d probes out at once", i/2, out)
				}
				continue
			}
			k := int(action/4) % len(tickets)
			tk := tickets[k]
			tickets = append(tickets[:k], tickets[k+1:]...)
			issued = append(issued[:k], issued[k+1:]...)
			ev := p.Record(&b, now, tk, Outcome(action%4))
			check(i/2, before, gen, ev)
		}
	})
}
