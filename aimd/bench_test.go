package aimd

import "testing"

func BenchmarkObserve(b *testing.B) {
	c := mustNew(b, Config{Start: 100})
	s := c.Init()
	now := t0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now += ms
		i++
		in := Sample{Outcome: Success, Latency: 40*ms + int64(i%7)*ms}
		if i%100 == 0 {
			in.Outcome = Throttled
		}
		c.Observe(&s, now, in)
	}
}

func BenchmarkLockedObserve(b *testing.B) {
	l := NewLocked(mustNew(b, Config{Start: 100}))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := t0
		for pb.Next() {
			now += ms
			l.Observe(now, Sample{Outcome: Success, Latency: 40 * ms})
		}
	})
}
