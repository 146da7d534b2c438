package guard

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The adaptive deadline (see the package doc): every call to the store
// while it is up gets the current deadline, which is TimeoutFactor times
// the 99th percentile latency of the last latencySamples calls the store
// answered, recomputed every recomputeEvery answers once minSamples have
// been seen, never below Config.Timeout (the floor) nor above
// Config.MaxTimeout. It rises at once and comes down by at most half per
// recomputation, so one quiet spell does not undo what a busy one showed.
// Only answers are sampled: a timeout is not a latency, and it does not
// lengthen the deadline, so a store that stops answering is still found
// out within the deadline the healthy store earned (and a probe of a
// store held down gets the floor).
const (
	latencySamples = 1024
	recomputeEvery = 64
	minSamples     = 64
)

// deadline is the adaptive per-call timeout. Its methods are safe for
// concurrent use; observe and get are lock-free.
type deadline struct {
	floor, ceil int64 // ns
	factor      int64
	cur         atomic.Int64 // ns
	n           atomic.Uint64
	ring        [latencySamples]atomic.Int64 // ns
	mu          sync.Mutex                   // one recomputation at a time
	scratch     []int64                      // under mu
}

func newDeadline(floor, ceil time.Duration, factor int) *deadline {
	d := &deadline{floor: int64(floor), ceil: int64(ceil), factor: int64(factor)}
	d.cur.Store(d.floor)
	return d
}

// get returns the deadline of the next call.
func (d *deadline) get() time.Duration { return time.Duration(d.cur.Load()) }

// observe records the latency of a call the store answered, and every
// recomputeEvery answers sets the deadline from the samples.
func (d *deadline) observe(lat time.Duration) {
	if d.floor == d.ceil {
		return // fixed
	}
	i := d.n.Add(1)
	d.ring[(i-1)%latencySamples].Store(int64(lat))
	if i%recomputeEvery != 0 || i < minSamples || !d.mu.TryLock() {
		return
	}
	defer d.mu.Unlock()
	n := int(min(i, latencySamples))
	d.scratch = d.scratch[:0]
	for j := range n {
		d.scratch = append(d.scratch, d.ring[j].Load())
	}
	slices.Sort(d.scratch)
	p99 := d.scratch[(n*99+99)/100-1] // nearest rank: the ceil(0.99n)-th
	target := d.floor
	if p99 > 0 && p99 <= d.ceil/d.factor {
		target = max(d.factor*p99, d.floor)
	} else if p99 > 0 {
		target = d.ceil
	}
	for {
		cur := d.cur.Load()
		next := max(target, cur/2) // down by at most half, up at once
		if d.cur.CompareAndSwap(cur, next) {
			return
		}
	}
}
