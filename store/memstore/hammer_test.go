package memstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicerl/sluice/store"
)

// hammer runs loops, each on a goroutine of its own, until run stops them:
// the concurrency tests' workers. A test proves it was not vacuous by
// counting events (calls made, takes admitted and denied, sweeps that
// raced a take), never by what happened within some wall-clock span: run
// stops the loops once the test's events have all happened, however long
// that takes on a busy machine, and fails the test if they have not within
// hammerLimit.
type hammer struct {
	loops []func(i int)
	iters []*atomic.Int64
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

// hammerLimit bounds how long run waits for a test's events. An idle
// machine needs well under a second; it is generous for a saturated one.
const hammerLimit = time.Minute

func newHammer() *hammer { return &hammer{stop: make(chan struct{})} }

// loop adds a loop that calls f(0), f(1), ... once run starts it, and
// returns the count of calls it has completed.
func (h *hammer) loop(f func(i int)) *atomic.Int64 {
	n := new(atomic.Int64)
	h.loops = append(h.loops, f)
	h.iters = append(h.iters, n)
	return n
}

// run starts the loops and lets them run until every loop has completed at
// least minIters calls and done reports true (each loop checks after every
// call), then stops them and waits for them. It returns how long the loops
// ran, measured from before the first started to after the last stopped,
// so that a bound on what they may do in that time holds whatever the
// machine's load. It fails the test, after stopping the loops, if the
// events have not all happened within hammerLimit; why says which (it is
// called then, and only then).
func (h *hammer) run(t *testing.T, minIters int64, done func() bool, why func() string) time.Duration {
	t.Helper()
	if minIters < 1 {
		t.Fatalf("hammer: minIters %d, want >= 1", minIters)
	}
	var short atomic.Int64 // loops short of minIters
	short.Store(int64(len(h.loops)))
	finish := func() { h.once.Do(func() { close(h.stop) }) }
	start := time.Now()
	for j, f := range h.loops {
		n := h.iters[j]
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-h.stop:
					return
				default:
				}
				f(i)
				if n.Add(1) == minIters {
					short.Add(-1)
				}
				if short.Load() <= 0 && done() {
					finish()
				}
			}
		}()
	}
	timedOut := false
	select {
	case <-h.stop:
	case <-time.After(hammerLimit):
		timedOut = true
		finish()
	}
	h.wg.Wait()
	elapsed := time.Since(start)
	if timedOut {
		calls := make([]int64, len(h.iters))
		for j, n := range h.iters {
			calls[j] = n.Load()
		}
		t.Fatalf("not vacuous: the events did not all happen within %v: calls per loop %v (want >= %d each); %s",
			hammerLimit, calls, minIters, why())
	}
	return elapsed
}

// gcraBound is the most a GCRA limit may admit to one key in elapsed from
// bursts fresh starts (a key reset starts fresh again): a burst each, the
// rate over the time, and one for rounding.
func gcraBound(l store.Limit, bursts int64, elapsed time.Duration) int64 {
	return l.Burst*bursts + int64(float64(l.Rate)*elapsed.Seconds()) + 1
}

// flood adds a loop that takes short-lived keys of l (fresh soon after a
// take), which makes s sweep and rebuild its shards' indexes, and sweeps
// every sweepEvery takes. It returns the loop's count of calls.
func (h *hammer) flood(s *Store, l store.Limit, sweepEvery int) *atomic.Int64 {
	return h.loop(func(i int) {
		_, err := s.Take(context.Background(), store.TakeParams{Key: l.Name + strconv.Itoa(i), Limit: l, Cost: 1})
		if err != nil && err != store.ErrTooManyKeys {
			panic(err)
		}
		if i%sweepEvery == 0 {
			s.Sweep()
		}
	})
}
