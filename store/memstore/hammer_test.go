package memstore

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/sluicerl/sluice/store"
)

// hammer runs loops, each on a goroutine of its own, until runFor stops
// them: the concurrency tests' workers.
type hammer struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	start time.Time
}

func newHammer() *hammer { return &hammer{stop: make(chan struct{}), start: time.Now()} }

// loop calls f(0), f(1), ... on a new goroutine until the hammer stops.
func (h *hammer) loop(f func(i int)) {
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
		}
	}()
}

// runFor lets the loops run for d, stops them, waits for them, and returns
// how long they ran since newHammer.
func (h *hammer) runFor(d time.Duration) time.Duration {
	time.Sleep(d)
	close(h.stop)
	h.wg.Wait()
	return time.Since(h.start)
}

// gcraBound is the most a GCRA limit may admit to one key in elapsed from
// bursts fresh starts (a key reset starts fresh again): a burst each, the
// rate over the time, and one for rounding.
func gcraBound(l store.Limit, bursts int64, elapsed time.Duration) int64 {
	return l.Burst*bursts + int64(float64(l.Rate)*elapsed.Seconds()) + 1
}

// flood adds a loop that takes short-lived keys of l (fresh soon after a
// take), which makes s sweep and rebuild its shards' indexes, and sweeps
// every sweepEvery takes.
func (h *hammer) flood(s *Store, l store.Limit, sweepEvery int) {
	h.loop(func(i int) {
		_, err := s.Take(context.Background(), store.TakeParams{Key: l.Name + strconv.Itoa(i), Limit: l, Cost: 1})
		if err != nil && err != store.ErrTooManyKeys {
			panic(err)
		}
		if i%sweepEvery == 0 {
			s.Sweep()
		}
	})
}
