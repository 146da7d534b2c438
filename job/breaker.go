package job

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicerl/sluice/breaker"
	"github.com/sluicerl/sluice/store"
)

// BreakerLog makes circuit breaker transitions durable records (seed 002
// D6) for operator health views: from, to, reason and counters, never
// routes, bodies, record ids or credentials. Pass its OnEvent as
// outbound.Config.OnBreakerEvent. It is safe for concurrent use; build it
// with NewBreakerLog and Close it to flush.
type BreakerLog struct {
	st          store.JobStore
	connectorOf func(key string) string
	ch          chan store.BreakerTransition
	done        chan struct{}
	closeOnce   sync.Once
	mu          sync.RWMutex // OnEvent holds it shared; Close exclusively
	closed      bool
	dropped     atomic.Int64
	failed      atomic.Int64
}

// NewBreakerLog starts a log writing to st. connectorOf names the
// connector of an outbound key; nil means the key itself, without a
// "connector:" prefix (Run.Call's keys). buffer bounds the transitions
// waiting to be written (0 means 1024); more are dropped and counted, so
// that OnEvent never blocks the breaker.
func NewBreakerLog(st store.JobStore, connectorOf func(key string) string, buffer int) *BreakerLog {
	if connectorOf == nil {
		connectorOf = func(key string) string { return strings.TrimPrefix(key, "connector:") }
	}
	if buffer <= 0 {
		buffer = 1024
	}
	l := &BreakerLog{st: st, connectorOf: connectorOf, ch: make(chan store.BreakerTransition, buffer), done: make(chan struct{})}
	go l.write()
	return l
}

func (l *BreakerLog) write() {
	defer close(l.done)
	for t := range l.ch {
		if _, err := l.st.RecordBreakerTransition(context.Background(), t); err != nil {
			l.failed.Add(1)
		}
	}
}

// OnEvent queues a transition (events that are not transitions are
// ignored). It never blocks.
func (l *BreakerLog) OnEvent(key string, e breaker.Event) {
	if !e.Changed() {
		return
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.dropped.Add(1)
		return
	}
	t := store.BreakerTransition{ConnectorID: l.connectorOf(key), Key: key, From: e.From.String(), To: e.To.String(),
		Reason: e.Reason.String(), Requests: int64(e.Counts.Requests), Failures: int64(e.Counts.Failures)}
	select {
	case l.ch <- t:
	default:
		l.dropped.Add(1)
	}
}

// Close writes the queued transitions and stops the log. It returns how
// many transitions were dropped (a full buffer) or failed to write.
func (l *BreakerLog) Close(ctx context.Context) (dropped, failed int64, err error) {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		close(l.ch)
		l.mu.Unlock()
	})
	select {
	case <-l.done:
	case <-ctx.Done():
		return l.dropped.Load(), l.failed.Load(), ctx.Err()
	}
	return l.dropped.Load(), l.failed.Load(), nil
}
