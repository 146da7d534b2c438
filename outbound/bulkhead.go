package outbound

import (
	"context"
	"sync/atomic"
)

// bulkhead bounds a key's calls in flight (Config.MaxConcurrent) and counts
// them. Its zero value (after init(0)) has no bound.
type bulkhead struct {
	sem      chan struct{} // nil without a bound
	inFlight atomic.Int64
}

func (b *bulkhead) init(max int) {
	if max > 0 {
		b.sem = make(chan struct{}, max)
	}
}

// enter waits for a place, or for ctx; leave gives it back.
func (b *bulkhead) enter(ctx context.Context) error {
	if b.sem != nil {
		select {
		case b.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.inFlight.Add(1)
	return nil
}

// tryEnter takes a place if one is free now.
func (b *bulkhead) tryEnter() bool {
	if b.sem != nil {
		select {
		case b.sem <- struct{}{}:
		default:
			return false
		}
	}
	b.inFlight.Add(1)
	return true
}

func (b *bulkhead) leave() {
	b.inFlight.Add(-1)
	if b.sem != nil {
		<-b.sem
	}
}
