package retry

import "testing"

func BenchmarkDecide(b *testing.B) {
	p := mustNew(b, Config{})
	var bud Budget
	now := t0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now += ms
		i++
		a := Attempt{N: 1, Outcome: Success}
		if i%5 == 0 {
			a.Outcome = Transient
		}
		p.Decide(&bud, now, a, 0.5)
	}
}
