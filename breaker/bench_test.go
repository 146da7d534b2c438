package breaker

import "testing"

func BenchmarkAllowRecord(b *testing.B) {
	p := mustNew(b, Config{})
	var br Breaker
	now := t0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now += 100
		i++
		tk, _, err := p.Allow(&br, now)
		if err != nil {
			continue
		}
		o := Success
		if i%10 == 0 {
			o = Failure
		}
		p.Record(&br, now, tk, o)
	}
}

func BenchmarkLocked(b *testing.B) {
	l := NewLocked(mustNew(b, Config{}), nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := t0
		for pb.Next() {
			now += 100
			tk, err := l.Allow(now)
			if err == nil {
				l.Done(now, tk, Success)
			}
		}
	})
}
