package store

import (
	"context"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
)

// LeaseListenLinger is how long a LeaseListener's subscription outlives its
// last watch by default, so that waiters coming and going do not subscribe
// each time.
const LeaseListenLinger = 5 * time.Second

// LeaseSubscribe opens a backend's subscription to released permits (a
// Redis SUBSCRIBE, a PostgreSQL LISTEN). It returns once no release
// announced after it can be missed, with a function that ends the
// subscription and a channel closed once the subscription has ended. While
// open, the subscription hands every release's id to wake.Wake; when it
// ends, stopped or lost, it calls wake.WakeAll, so that no watcher waits for
// a release it can no longer hear of, and closes the channel.
type LeaseSubscribe func(ctx context.Context, wake *LeaseWakeups) (stop func(), done <-chan struct{}, err error)

// LeaseListener is the bookkeeping of a backend's one subscription to
// released permits, for its WatchLease: the first watch opens the
// subscription, which stays open while anyone watches and for Linger after
// the last watch ends; a watch that finds it ended (a lost connection)
// opens it again. Releases reach the watchers of their id through
// LeaseWakeups.
//
// It is safe for concurrent use. The zero value is ready, with no
// subscription open; set Clock and Linger, if at all, before the first
// Watch.
type LeaseListener struct {
	// Clock times the linger; nil means the real clock. The linger is
	// housekeeping, not a decision: it need not be the store's clock.
	Clock clock.Clock
	// Linger is how long the subscription outlives its last watch. Zero
	// means LeaseListenLinger.
	Linger time.Duration

	mu      sync.Mutex // guards the fields below
	watches int
	stop    func()          // ends the subscription; nil when none is open
	done    <-chan struct{} // closed once the subscription has ended
	idle    clock.Timer     // the pending linger, if any
	cancel  chan struct{}   // closed when the pending linger is cancelled
	wake    LeaseWakeups
}

// Watch registers a watcher of the release id, opening the subscription
// with subscribe if none is open (or the last one ended). ch receives a
// value, without blocking the sender, when a release of id is heard or the
// subscription ends; unwatch ends the watch and may be called more than
// once. It returns subscribe's error, with no watch registered.
func (l *LeaseListener) Watch(ctx context.Context, id string, subscribe LeaseSubscribe) (ch <-chan struct{}, unwatch func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancelLinger()
	if l.done != nil {
		select {
		case <-l.done: // lost: open it again
			l.end()
		default:
		}
	}
	if l.done == nil {
		stop, done, err := subscribe(ctx, &l.wake)
		if err != nil {
			return nil, nil, err
		}
		l.stop, l.done = stop, done
	}
	l.watches++
	ch, stopWatch, _ := l.wake.Watch(id)
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			stopWatch()
			l.mu.Lock()
			defer l.mu.Unlock()
			l.watches--
			if l.watches == 0 && l.done != nil {
				l.linger()
			}
		})
	}, nil
}

// linger ends the subscription after Linger unless a watch comes first;
// l.mu is held.
func (l *LeaseListener) linger() {
	d := l.Linger
	if d == 0 {
		d = LeaseListenLinger
	}
	t := clock.Or(l.Clock).NewTimer(d)
	cancel := make(chan struct{})
	l.idle, l.cancel = t, cancel
	go func() {
		select {
		case <-t.C():
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.cancel == cancel { // not cancelled meanwhile
				l.idle, l.cancel = nil, nil
				l.end()
			}
		case <-cancel:
		}
	}()
}

// cancelLinger cancels the pending linger, if any; l.mu is held.
func (l *LeaseListener) cancelLinger() {
	if l.idle != nil {
		l.idle.Stop()
		close(l.cancel)
		l.idle, l.cancel = nil, nil
	}
}

// end ends the subscription; l.mu is held.
func (l *LeaseListener) end() {
	if l.stop != nil {
		l.stop()
	}
	l.stop, l.done = nil, nil
}
