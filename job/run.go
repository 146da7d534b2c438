package job

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/sluicerl/sluice/breaker"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
)

// Envelope bounds one run (seed 002 D1, D7): the zero value is unbounded.
// Budgets are checked only at slice boundaries (Commit), never mid-call,
// so an in-flight request is never interrupted.
type Envelope struct {
	// MaxRequests caps the upstream attempts of one run (retries count).
	MaxRequests int64
	// MaxDuration caps the run's wall-clock time.
	MaxDuration time.Duration
	// MaxRetries is the run's retry budget: the most retries it may make.
	MaxRetries int64
}

// Run is one execution of a claimed job, handed to its Handler. Its
// methods are safe for concurrent use by the handler's goroutines. The
// zero value is not usable; the Worker builds it.
type Run struct {
	w         *Worker
	job       store.Job
	connector store.Connector
	runID     int64
	fence     store.Fence
	started   time.Time
	env       Envelope

	mu       sync.Mutex
	cursor   string
	catchUp  string
	requests int64
	retries  int64
	slices   int64
	lost     bool
}

// Job returns the job as claimed: its spec, params and the cursors it
// started from.
func (r *Run) Job() store.Job { return r.job }

// Connector returns the job's connector as read at the claim.
func (r *Run) Connector() store.Connector { return r.connector }

// ID returns the run's record id.
func (r *Run) ID() int64 { return r.runID }

// Token returns the lease's fencing token, for the handler's own fenced
// writes.
func (r *Run) Token() int64 { return r.fence.Token }

// Cursor returns the steady-state cursor as last committed.
func (r *Run) Cursor() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cursor
}

// CatchUpCursor returns the catch-up cursor as last committed.
func (r *Run) CatchUpCursor() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.catchUp
}

// Stats returns the run's counters so far.
func (r *Run) Stats() (requests, retries, slices int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, r.retries, r.slices
}

// Call makes one upstream call through the connector's pacing: every
// attempt first takes one unit of each of the connector's limiter policies
// (all or nothing, keyed by the connector id), then goes through the
// outbound client (breaker, adaptive rate, retries, retry budget,
// Retry-After shared by the fleet) under the connector's profile (or id),
// and the limits of that provider profile (package provider) for the
// connector's id; a profile the outbound client does not hold is an error
// wrapping outbound.ErrUnknownProfile.
// fn reports its outcome as outbound.Do reads it: nil, a
// *outbound.StatusError, or another error.
//
// Source pressure comes back as a *PressureError for the handler to
// return: a 429 or 503 that retries did not get past (waiting for its
// Retry-After), an open breaker, or pacing that has no capacity within
// Config.MaxPacingWait. An exhausted retry budget comes back as a
// *GapError. Other errors are fn's.
func (r *Run) Call(ctx context.Context, fn func(ctx context.Context) error) error {
	return r.CallCost(ctx, 1, fn)
}

// CallCost is Call for an attempt that costs cost units of the
// connector's policies (a request weight).
func (r *Run) CallCost(ctx context.Context, cost int64, fn func(ctx context.Context) error) error {
	w := r.w
	// The first attempt's units are taken before the outbound layers, so
	// that no capacity soon is a yield (the job parks) and never reaches
	// the breaker or the retry budget as a failed attempt; a retry waits
	// for its units.
	if err := r.pace(ctx, cost, true); err != nil {
		return w.classify(err)
	}
	n := 0
	attempt := func(ctx context.Context) error {
		n++
		if n > 1 {
			if err := r.pace(ctx, cost, false); err != nil {
				return err
			}
		}
		r.mu.Lock()
		r.requests++
		if n > 1 {
			r.retries++
		}
		r.mu.Unlock()
		return fn(ctx)
	}
	var err error
	if w.out == nil {
		err = attempt(ctx)
	} else {
		key := r.connector.Profile
		if key == "" {
			key = "connector:" + r.connector.ID
		}
		// The connector's provider profile applies to every attempt: its
		// limits for the connector (the shop, the account) reserved before
		// and settled after (outbound.DoOpts.Profile).
		err = w.out.Do(ctx, key, &outbound.DoOpts{Idempotent: true, Profile: r.connector.Profile,
			Call: outbound.ProviderCall{Key: r.connector.ID}}, attempt)
	}
	return w.classify(err)
}

// pacedError stops an attempt whose pacing has no capacity soon.
type pacedError struct{ wait time.Duration }

func (e *pacedError) Error() string { return "job: connector pacing has no capacity" }

// pace takes cost units of every connector policy, waiting for them;
// with yield, a wait longer than Config.MaxPacingWait is a *pacedError.
func (r *Run) pace(ctx context.Context, cost int64, yield bool) error {
	w := r.w
	if w.lim == nil || len(r.connector.Policies) == 0 {
		return nil
	}
	reqs := make([]limiter.Request, len(r.connector.Policies))
	for i, p := range r.connector.Policies {
		reqs[i] = limiter.Request{Policy: p, Key: r.connector.ID, Cost: cost}
	}
	for {
		d, err := w.lim.AllowAll(ctx, reqs)
		if err != nil {
			return err
		}
		if d.Allowed {
			return nil
		}
		if yield && (w.cfg.MaxPacingWait < 0 || d.RetryAfter > w.cfg.MaxPacingWait) {
			return &pacedError{wait: d.RetryAfter}
		}
		if err := sleep(ctx, w, max(d.RetryAfter, time.Microsecond)); err != nil {
			return err
		}
	}
}

// classify maps a call's error to the outcome the worker acts on.
func (w *Worker) classify(err error) error {
	if err == nil {
		return nil
	}
	var pe *PressureError
	var ge *GapError
	if errors.As(err, &pe) || errors.As(err, &ge) {
		return err
	}
	var paced *pacedError
	if errors.As(err, &paced) {
		return &PressureError{Reason: store.PressureNoCapacity, Wait: paced.wait, Err: err}
	}
	if errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrProbeLimit) {
		return &PressureError{Reason: store.PressureBreakerOpen, Err: err}
	}
	if errors.Is(err, retry.ErrBudgetExhausted) {
		return &GapError{Reason: store.GapRetryBudget}
	}
	var se *outbound.StatusError
	if errors.As(err, &se) {
		switch {
		case se.Status == http.StatusTooManyRequests:
			return &PressureError{Reason: store.PressureRateLimited, Wait: w.retryAfter(se.Header), Err: err}
		case se.Status == http.StatusServiceUnavailable:
			return &PressureError{Reason: store.PressureOverloaded, Wait: w.retryAfter(se.Header), Err: err}
		case se.Status == http.StatusTeapot, // an exchange's IP ban (Binance: 418 after repeated 429s)
			se.Status == http.StatusForbidden && se.Header.Get("Retry-After") != "":
			return &PressureError{Reason: store.PressureBanned, Wait: w.retryAfter(se.Header), Err: err}
		}
	}
	return err
}

// retryAfter reads a Retry-After header, 0 when there is none.
func (w *Worker) retryAfter(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	d, ok := signal.RetryAfter(v, w.clk.Now().UnixMicro(), store.MaxJobInterval.Microseconds())
	if !ok {
		return 0
	}
	return time.Duration(d) * time.Microsecond
}

// Commit records that the handler durably wrote the slice ending at cursor
// (seed 002 D8): the steady-state cursor moves, fenced by the lease's
// token. Then it checks the envelope: a *GapError means a budget ran out
// and the handler should return it (the cursor just committed is the gap's
// stop point). ErrLeaseLost means another worker took the job over and
// nothing was written.
func (r *Run) Commit(ctx context.Context, cursor string) error {
	return r.commit(ctx, cursor, false)
}

// CommitCatchUp is Commit for the catch-up (backfill) bookmark, which is
// kept apart from the steady-state one (seed 002 D10).
func (r *Run) CommitCatchUp(ctx context.Context, cursor string) error {
	return r.commit(ctx, cursor, true)
}

func (r *Run) commit(ctx context.Context, cursor string, catchUp bool) error {
	w := r.w
	err := w.store.CommitCursor(ctx, store.CommitParams{Fence: r.fence, Cursor: cursor, CatchUp: catchUp, Now: w.storeNow()})
	if errors.Is(err, store.ErrStaleToken) {
		r.mu.Lock()
		r.lost = true
		r.mu.Unlock()
		return ErrLeaseLost
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	if catchUp {
		r.catchUp = cursor
	} else {
		r.cursor = cursor
	}
	r.slices++
	r.mu.Unlock()
	w.event(Event{Kind: EventCommit, JobID: r.job.ID, Token: r.fence.Token, Cursor: cursor, CatchUp: catchUp})
	err = r.Budget()
	if ge, ok := err.(*GapError); ok {
		ge.CatchUp = catchUp
	}
	return err
}

// Budget reports whether the run may start another slice: nil, or a
// *GapError naming the first exhausted budget of the envelope.
func (r *Run) Budget() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e := r.env; {
	case e.MaxRequests > 0 && r.requests >= e.MaxRequests:
		return &GapError{Reason: store.GapRequestCap}
	case e.MaxRetries > 0 && r.retries >= e.MaxRetries:
		return &GapError{Reason: store.GapRetryBudget}
	case e.MaxDuration > 0 && r.w.clk.Now().Sub(r.started) >= e.MaxDuration:
		return &GapError{Reason: store.GapWallClock}
	}
	return nil
}

func (r *Run) stats() store.RunStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return store.RunStats{Requests: r.requests, Retries: r.retries}
}
