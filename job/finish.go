package job

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/store"
)

// finisher group-commits successful finishes: the first run to end starts
// a flush of every finish queued by then in one store call
// (store.FinishAll: one statement and one commit on the SQL backends);
// finishes that end while it is on the wire go out together in the next.
// While Run claims from a store.ClaimFinisher, the flush first waits a
// moment (hold) so that Run's next claim can take the queued finishes into
// its own transaction: one commit for both. Each caller waits for its own
// result, so a success is durable before it is reported, and a finish
// whose lease was lost is refused on its own (store.ErrStaleToken) without
// holding the others back.
type finisher struct {
	st store.JobStore

	// hold is how long (nanoseconds) a flush waits for a claim to take
	// the queue first; 0: it flushes at once.
	hold atomic.Int64

	mu       sync.Mutex
	queue    []*finishCall
	flushing bool
}

type finishCall struct {
	ctx  context.Context
	p    store.EndParams
	err  error
	done chan struct{}
}

// finish ends p's run as a success and returns once that is durable, or
// refused.
func (f *finisher) finish(ctx context.Context, p store.EndParams) error {
	if q := p; store.CheckEnd(store.RunSucceeded, &q) != nil {
		return f.st.FinishJob(ctx, p) // its error, alone
	}
	c := &finishCall{ctx: ctx, p: p, done: make(chan struct{})}
	f.mu.Lock()
	f.queue = append(f.queue, c)
	if !f.flushing {
		f.flushing = true
		go f.flush()
	}
	f.mu.Unlock()
	<-c.done
	return c.err
}

// take removes up to MaxClaim queued finishes, for a claim to write.
func (f *finisher) take() []*finishCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := min(len(f.queue), store.MaxClaim)
	calls := f.queue[:n:n]
	f.queue = f.queue[n:]
	return calls
}

// flush sends the queued finishes, MaxClaim at a time, until none is left.
func (f *finisher) flush() {
	if d := time.Duration(f.hold.Load()); d > 0 {
		t := time.NewTimer(d)
		<-t.C
	}
	for {
		f.mu.Lock()
		n := min(len(f.queue), store.MaxClaim)
		if n == 0 {
			f.flushing = false
			f.mu.Unlock()
			return
		}
		calls := f.queue[:n:n]
		f.queue = f.queue[n:]
		f.mu.Unlock()
		f.send(calls)
	}
}

// send writes calls on their own and reports to their callers.
func (f *finisher) send(calls []*finishCall) {
	if len(calls) == 1 {
		calls[0].err = f.st.FinishJob(calls[0].ctx, calls[0].p)
		close(calls[0].done)
		return
	}
	// The callers' contexts never end (they are the outcome's, cut from
	// cancellation), so the first one's values serve the batch.
	errs, err := store.FinishAll(calls[0].ctx, f.st, params(calls))
	deliver(calls, errs, err)
}

func params(calls []*finishCall) []store.EndParams {
	ps := make([]store.EndParams, len(calls))
	for i, c := range calls {
		ps[i] = c.p
	}
	return ps
}

// deliver reports errs (or err for all) to calls' callers.
func deliver(calls []*finishCall, errs []error, err error) {
	for i, c := range calls {
		if err != nil {
			c.err = err
		} else {
			c.err = errs[i]
		}
		close(c.done)
	}
}

// claimFinishing claims as w.claim does, writing the queued finishes in
// the same transaction when the store can (store.ClaimFinisher). If that
// claim fails, the finishes are written on their own before it returns.
func (w *Worker) claimFinishing(ctx context.Context, n int) ([]store.Claim, error) {
	cf, ok := w.store.(store.ClaimFinisher)
	if !ok {
		return w.claim(ctx, n)
	}
	calls := w.fin.take()
	if len(calls) == 0 {
		return w.claim(ctx, n)
	}
	cs, errs, err := cf.ClaimAndFinish(ctx, w.claimParams(n), params(calls))
	if err != nil {
		w.fin.send(calls)
		return nil, err
	}
	deliver(calls, errs, nil)
	return cs, nil
}

// holdFor sets how long finishes wait for Run's next claim: twice its last
// claim's time, within bounds.
func (f *finisher) holdFor(lastClaim time.Duration) {
	f.hold.Store(int64(min(max(2*lastClaim, time.Millisecond), 50*time.Millisecond)))
}
