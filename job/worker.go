package job

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/store"
)

// Handler runs one claimed job. It pulls pages through run.Call, writes
// each slice durably, then calls run.Commit with the cursor after it, and
// loops until the source is drained (seed 002 D11: a page size is never a
// reason to stop) or Commit or Call returns an error, which it returns.
// nil means the job is done until its next scheduled run.
type Handler func(ctx context.Context, run *Run) error

// Config configures a Worker: a plain value that New copies. Every zero
// field means its documented default.
type Config struct {
	// Store keeps the connectors, jobs and runs. Required.
	Store store.JobStore
	// Handlers run the jobs, by job type. Only jobs of these types are
	// claimed. Required.
	Handlers map[string]Handler
	// Holder names this worker in leases and runs. Empty means a random
	// name.
	Holder string
	// Concurrency is how many jobs this worker runs at once. Zero means 1.
	Concurrency int
	// ClaimAhead is how many claimed jobs Run may hold beyond Concurrency,
	// each waiting for a handler slot: a claim then takes the jobs the
	// slots will want next, so that handlers do not wait on a claim's
	// round trip and one claim (one transaction) takes more jobs. A waiting
	// job's lease is heartbeated from its claim, as a running one's; when
	// Run's context ends, waiting jobs are released (due at once, nothing
	// counted), never started. Negative means none (Run claims only for
	// free slots). Poll never claims ahead.
	//
	// Zero means auto: up to 3 x Concurrency, as many as the handler
	// slots are expected to free during one claim (Concurrency times the
	// last claim's time over the recent mean handler time), so none until
	// a handler has returned, and none while handlers take longer than a
	// claim per slot. Jobs that run for seconds are then never held by
	// one worker while another has a free slot; short jobs are claimed
	// ahead in full.
	ClaimAhead int
	// LeaseTTL is how long a claim holds a job without a heartbeat. Zero
	// means 30 seconds.
	LeaseTTL time.Duration
	// Heartbeat is how often a running job's lease is extended. Zero means
	// LeaseTTL / 3.
	Heartbeat time.Duration
	// PollInterval is how long Run waits when nothing is due. Zero means
	// 1 second.
	PollInterval time.Duration
	// Limiter paces every upstream call by the connector's policies. Nil
	// means no pacing beyond Outbound's.
	Limiter *limiter.Limiter
	// Outbound carries every call (breaker, adaptive rate, retries, retry
	// budget, shared Retry-After). Nil means calls go straight to fn.
	Outbound *outbound.Client
	// Envelope bounds every run. The zero value is unbounded.
	Envelope Envelope
	// MaxPacingWait is the longest a call waits for its connector's
	// pacing before the job yields (parks as no_capacity until the limit
	// allows it). Zero means 2 seconds; negative means never wait.
	MaxPacingWait time.Duration
	// PressureWait is how long a job parks under source pressure that did
	// not say how long (a 429 without Retry-After, an open breaker). Zero
	// means 30 seconds.
	PressureWait time.Duration
	// Jitter spreads scheduled runs: a finished job is due again after
	// its interval plus up to Jitter times it, or at its next cron time
	// plus up to Jitter times the gap to the cron time after that (always
	// short of it). Zero means 0.1; negative
	// means none.
	Jitter float64
	// BackoffBase and BackoffMax bound the full-jitter backoff after a
	// failure: a random delay up to min(BackoffMax, BackoffBase * 2^(n-1))
	// after the n-th failure in a row. Zero means 1 second and 1 hour.
	BackoffBase, BackoffMax time.Duration
	// DeferDelay is how soon a job whose run ran out of a budget runs
	// again. Zero means 1 second.
	DeferDelay time.Duration
	// ShutdownGrace is how long Run lets running handlers finish after its
	// context ends; then their contexts are cancelled and their jobs
	// released (due at once, nothing counted). Zero means 10 seconds.
	ShutdownGrace time.Duration
	// Gate, if set, is asked before each claim whether a connector has
	// capacity (see store.ClaimParams.Gate).
	Gate store.Gate
	// Clock times heartbeats, polls, pacing waits and envelopes. Nil means
	// the real clock.
	Clock clock.Clock
	// PassNow sends Clock's time as every store operation's Now. For tests
	// only: in production the store's clock decides.
	PassNow bool
	// Rand returns uniform numbers in [0, 1) for jitter. Nil means
	// math/rand/v2.
	Rand func() float64
	// OnEvent, if set, receives every claim, commit and outcome, in order
	// per job. It must be quick.
	OnEvent func(Event)
}

// EventKind says what an Event reports.
type EventKind string

// The event kinds.
const (
	EventClaim     EventKind = "claim"
	EventCommit    EventKind = "commit"
	EventSuccess   EventKind = "success"
	EventFailure   EventKind = "failure"
	EventPark      EventKind = "park"
	EventDefer     EventKind = "defer"
	EventRelease   EventKind = "release"
	EventLeaseLost EventKind = "lease_lost"
)

// Event is one thing a worker did: a plain value.
type Event struct {
	Kind    EventKind
	Holder  string
	JobID   string
	Group   string
	Token   int64
	Cursor  string
	CatchUp bool
	Reason  string
	Delay   time.Duration
	Err     error
}

// Worker claims due jobs and runs their handlers. It is safe for
// concurrent use; Run and Poll may be called from several goroutines.
// Build it with New; the zero value is not usable.
type Worker struct {
	cfg    Config
	store  store.JobStore
	lim    *limiter.Limiter
	out    *outbound.Client
	clk    clock.Clock
	holder string
	types  []string

	rmu sync.Mutex
	rnd func() float64

	fin  *finisher    // group-commits successful finishes
	runs atomic.Int32 // Run loops running

	// autoAhead: Config.ClaimAhead was zero, so Run sizes its claim ahead
	// (up to cfg.ClaimAhead) by handlerNS, an EWMA of the handlers' wall
	// time in nanoseconds (0 until one has returned).
	autoAhead bool
	handlerNS atomic.Int64
}

// New validates cfg and returns a Worker.
func New(cfg Config) (*Worker, error) {
	switch {
	case cfg.Store == nil:
		return nil, fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	case len(cfg.Handlers) == 0:
		return nil, fmt.Errorf("%w: Handlers must name at least one job type", ErrInvalidConfig)
	case cfg.Concurrency < 0 || cfg.Concurrency > store.MaxClaim:
		return nil, fmt.Errorf("%w: Concurrency must be from 0 (1) to %d, got %d", ErrInvalidConfig, store.MaxClaim, cfg.Concurrency)
	case cfg.ClaimAhead > store.MaxClaim:
		return nil, fmt.Errorf("%w: ClaimAhead must be at most %d, got %d", ErrInvalidConfig, store.MaxClaim, cfg.ClaimAhead)
	case cfg.LeaseTTL < 0 || cfg.Heartbeat < 0 || cfg.PollInterval < 0 || cfg.PressureWait < 0 ||
		cfg.BackoffBase < 0 || cfg.BackoffMax < 0 || cfg.DeferDelay < 0 || cfg.ShutdownGrace < 0:
		return nil, fmt.Errorf("%w: durations must be >= 0 (MaxPacingWait may be negative)", ErrInvalidConfig)
	case cfg.Envelope.MaxRequests < 0 || cfg.Envelope.MaxRetries < 0 || cfg.Envelope.MaxDuration < 0:
		return nil, fmt.Errorf("%w: Envelope bounds must be >= 0", ErrInvalidConfig)
	}
	var types []string
	for t, h := range cfg.Handlers {
		if h == nil {
			return nil, fmt.Errorf("%w: Handlers[%q] is nil", ErrInvalidConfig, t)
		}
		types = append(types, t)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	autoAhead := cfg.ClaimAhead == 0
	switch {
	case autoAhead:
		cfg.ClaimAhead = autoAheadMax * cfg.Concurrency
	case cfg.ClaimAhead < 0:
		cfg.ClaimAhead = 0
	}
	// One claim takes at most MaxClaim jobs.
	cfg.ClaimAhead = min(cfg.ClaimAhead, store.MaxClaim-cfg.Concurrency)
	def(&cfg.LeaseTTL, 30*time.Second)
	if err := (&store.ClaimParams{Holder: "x", LeaseTTL: cfg.LeaseTTL}).Check(); err != nil {
		return nil, fmt.Errorf("%w: LeaseTTL: %w", ErrInvalidConfig, err)
	}
	def(&cfg.Heartbeat, cfg.LeaseTTL/3)
	def(&cfg.PollInterval, time.Second)
	def(&cfg.MaxPacingWait, 2*time.Second)
	def(&cfg.PressureWait, 30*time.Second)
	def(&cfg.BackoffBase, time.Second)
	def(&cfg.BackoffMax, time.Hour)
	def(&cfg.DeferDelay, time.Second)
	def(&cfg.ShutdownGrace, 10*time.Second)
	if cfg.Jitter == 0 {
		cfg.Jitter = 0.1
	}
	if cfg.Holder == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.Holder = "worker-" + hex.EncodeToString(b[:])
	}
	rnd := cfg.Rand
	if rnd == nil {
		rnd = mrand.Float64
	}
	return &Worker{cfg: cfg, store: cfg.Store, lim: cfg.Limiter, out: cfg.Outbound, clk: clock.Or(cfg.Clock),
		holder: cfg.Holder, types: types, rnd: rnd, fin: &finisher{st: cfg.Store}, autoAhead: autoAhead}, nil
}

// Holder returns the worker's name.
func (w *Worker) Holder() string { return w.holder }

func (w *Worker) storeNow() time.Time {
	if w.cfg.PassNow {
		return w.clk.Now()
	}
	return time.Time{}
}

func (w *Worker) random() float64 {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	return w.rnd()
}

func (w *Worker) event(e Event) {
	if w.cfg.OnEvent != nil {
		e.Holder = w.holder
		w.cfg.OnEvent(e)
	}
}

func sleep(ctx context.Context, w *Worker, d time.Duration) error {
	t := w.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// claim claims up to n due jobs.
func (w *Worker) claim(ctx context.Context, n int) ([]store.Claim, error) {
	return w.store.ClaimJobs(ctx, w.claimParams(n))
}

func (w *Worker) claimParams(n int) store.ClaimParams {
	return store.ClaimParams{Holder: w.holder, Limit: n, LeaseTTL: w.cfg.LeaseTTL,
		Gate: w.cfg.Gate, Types: w.types, Now: w.storeNow()}
}

// Poll claims up to Concurrency due jobs, runs them to their outcome and
// returns how many it ran. It is the synchronous form of Run, for tests
// and for callers with their own loop.
func (w *Worker) Poll(ctx context.Context) (int, error) {
	cs, err := w.claim(ctx, w.cfg.Concurrency)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.execute(ctx, ctx, c, nil, nil)
		}()
	}
	wg.Wait()
	return len(cs), nil
}

// Run claims and runs jobs, up to Concurrency at once, until ctx ends.
// Then it claims nothing more and gives running handlers
// Config.ShutdownGrace to finish; the jobs of those still running are
// released (due at once, no failure counted). It returns nil after a
// graceful shutdown, or the store's error if a claim fails
// Config.PollInterval-spaced ten times in a row.
func (w *Worker) Run(ctx context.Context) error {
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	// While one Run loop claims, finishes wait for its claims (holdFor);
	// with none, or several, they go out at once.
	w.runs.Add(1)
	defer func() {
		if w.runs.Add(-1) != 1 {
			w.fin.hold.Store(0)
		}
	}()
	// A job is claimed into one of limit places (Concurrency handler
	// slots and ClaimAhead jobs waiting for one); its place is free once
	// its handler has returned. The job's outcome may still be on its way
	// to the store (finishes are group-committed), and its lease is held
	// until it is written. At most Concurrency handlers run (slots), at
	// most limit jobs are claimed and not yet run, and at most maxHeld
	// times limit jobs are held in all (waiting, running, or waiting for
	// their outcome to be written).
	maxLimit := w.cfg.Concurrency + w.cfg.ClaimAhead
	slots := make(chan struct{}, w.cfg.Concurrency)
	free := make(chan struct{}, maxLimit)
	settled := make(chan struct{}, maxHeld*maxLimit)
	running, held := 0, 0
	coalesce := false
	var lastClaim time.Duration
	var wg sync.WaitGroup
	fails := 0
	var err error
loop:
	for ctx.Err() == nil {
		// Reap finished slots.
		for drained := false; !drained; {
			select {
			case <-free:
				running--
			case <-settled:
				held--
			default:
				drained = true
			}
		}
		// With ClaimAhead auto, how many places there are follows the
		// handlers' time against a claim's (see ahead).
		limit := w.cfg.Concurrency + w.ahead(lastClaim)
		n := min(limit-running, maxHeld*limit-held)
		if coalesce && n > 0 && n < limit {
			// A slot just freed, or jobs just started: give the
			// others that are about to free a moment, so that one
			// claim takes them all.
			n = w.coalesce(ctx, lastClaim, limit, free, settled, &running, &held)
		}
		coalesce = false
		var cs []store.Claim
		if n > 0 {
			var cerr error
			t0 := time.Now()
			cs, cerr = w.claimFinishing(ctx, n)
			lastClaim = time.Since(t0)
			if _, ok := w.store.(store.ClaimFinisher); ok && w.runs.Load() == 1 {
				w.fin.holdFor(lastClaim)
			}
			switch {
			case cerr != nil && ctx.Err() != nil:
				break loop
			case cerr != nil:
				fails++
				if fails >= 10 {
					err = fmt.Errorf("job: claiming: %w", cerr)
					break loop
				}
			default:
				fails = 0
			}
		}
		for _, c := range cs {
			running++
			held++
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.execute(hard, ctx, c, slots, func() { free <- struct{}{} })
				settled <- struct{}{}
			}()
		}
		if len(cs) == n && n > 0 {
			// More may be due. Jobs that just started may end at
			// once: give them a moment before the next claim.
			coalesce = true
			continue
		}
		t := w.clk.NewTimer(w.cfg.PollInterval)
		select {
		case <-ctx.Done():
		case <-free:
			running--
			coalesce = true
		case <-settled:
			held--
			coalesce = true
		case <-t.C():
		}
		t.Stop()
	}
	// Graceful shutdown: let running handlers finish, then cancel them.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := w.clk.NewTimer(w.cfg.ShutdownGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
		cancelHard()
		<-done
	}
	return err
}

// Run waits, after a slot frees, up to half its last claim's time
// (within these bounds) for more slots to free before it claims: jobs
// that end together are replaced by one claim (one transaction) rather
// than one claim each, and a claim is worth that wait. It is real time,
// not Config.Clock's: it only groups what is about to happen anyway.
const (
	minCoalesce = time.Millisecond
	maxCoalesce = 10 * time.Millisecond
)

// ahead returns how many jobs Run may claim beyond its Concurrency, given
// its last claim's time: Config.ClaimAhead when set, or with auto (zero)
// as many as its handler slots are expected to free during one claim,
// Concurrency x claim / mean handler time, at most autoAheadMax x
// Concurrency and none before a handler has returned. A worker whose jobs
// take longer than a claim per slot claims none ahead, so it never holds a
// job it cannot start while another worker has a free slot for it.
func (w *Worker) ahead(claim time.Duration) int {
	if !w.autoAhead {
		return w.cfg.ClaimAhead
	}
	m := w.handlerNS.Load()
	if m <= 0 {
		return 0
	}
	a := float64(w.cfg.Concurrency) * float64(claim) / float64(m)
	if a >= float64(w.cfg.ClaimAhead) {
		return w.cfg.ClaimAhead
	}
	return int(a)
}

// autoAheadMax bounds an auto ClaimAhead, in Concurrency units: jobs much
// shorter than a claim are claimed this many slots' worth ahead, so that
// one claim (one transaction) takes up to 4 x Concurrency jobs.
const autoAheadMax = 3

// noteHandler adds a handler's wall time to the mean ahead sizes by (an
// EWMA weighing the latest 1/8; at least 1 ns, so that a handler faster
// than the clock's step still counts as one that returned).
func (w *Worker) noteHandler(d time.Duration) {
	if !w.autoAhead {
		return
	}
	d = max(d, 1)
	for {
		old := w.handlerNS.Load()
		nw := int64(d)
		if old > 0 {
			nw = old + (int64(d)-old)/8
		}
		if w.handlerNS.CompareAndSwap(old, max(nw, 1)) {
			return
		}
	}
}

// maxHeld bounds the jobs Run holds, running or waiting for their outcome
// to be written, in Concurrency units: outcomes are group-committed and
// take about a claim's time, so while one claim is on the wire the jobs
// of the one before may still be settling.
const maxHeld = 4

// coalesce waits up to half of wait (the last claim's time), within
// minCoalesce and maxCoalesce, for Run's limit places to free until all
// are, counting them, and returns how many jobs Run may claim.
func (w *Worker) coalesce(ctx context.Context, wait time.Duration, c int, free, settled <-chan struct{}, running, held *int) int {
	n := func() int { return min(c-*running, maxHeld*c-*held) }
	t := time.NewTimer(min(max(wait/2, minCoalesce), maxCoalesce))
	defer t.Stop()
	for n() < c {
		select {
		case <-free:
			*running--
		case <-settled:
			*held--
		case <-t.C:
			return n()
		case <-ctx.Done():
			return n()
		}
	}
	return n()
}

// execute runs one claimed job to its outcome. hctx is the handler's
// context; stop, when it ends before the handler does, marks the run as
// released rather than failed if the handler then returns an error.
// slots, if set, is the handler slots' semaphore: the handler runs once
// it holds one (the lease is heartbeated meanwhile), and a job whose stop
// ends first is released without running. handlerDone, if set, is called
// once the handler has returned (or the job was released unrun), before
// the outcome is written; execute returns once it is.
func (w *Worker) execute(hctx, stop context.Context, c store.Claim, slots chan struct{}, handlerDone func()) {
	j := c.Job
	fence := store.Fence{JobID: j.ID, Token: j.LeaseToken}
	w.event(Event{Kind: EventClaim, JobID: j.ID, Group: j.GroupKey, Token: j.LeaseToken})
	ctx, cancel := context.WithCancel(hctx)
	defer cancel()
	r := &Run{w: w, job: j, connector: c.Connector, runID: c.RunID, fence: fence, started: w.clk.Now(), env: w.cfg.Envelope,
		cursor: j.Cursor, catchUp: j.CatchUpCursor}
	h := w.cfg.Handlers[j.Type]
	// Heartbeats keep the lease while the handler runs; a lost lease
	// cancels the handler.
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		for {
			if sleep(ctx, w, w.cfg.Heartbeat) != nil {
				return
			}
			_, err := w.store.Heartbeat(ctx, store.HeartbeatParams{Fence: fence, LeaseTTL: w.cfg.LeaseTTL, Now: w.storeNow()})
			if errors.Is(err, store.ErrStaleToken) {
				r.mu.Lock()
				r.lost = true
				r.mu.Unlock()
				cancel()
				return
			}
		}
	}()
	var herr error
	switch {
	case !acquire(ctx, stop, slots):
		// Claimed ahead and never started: Run's stop (or the lease's
		// loss) came first. Released below, nothing counted.
		herr = context.Canceled
	case h == nil:
		herr = Permanent(fmt.Errorf("%w %q", ErrNoHandler, j.Type))
		release(slots)
	default:
		// The run's wall-clock envelope counts from here: a job claimed
		// ahead spends none of it waiting for its slot.
		r.started = w.clk.Now()
		t0 := time.Now()
		herr = safeCall(ctx, h, r)
		w.noteHandler(time.Since(t0))
		release(slots)
	}
	cancel()
	<-hbDone
	if handlerDone != nil {
		handlerDone()
	}
	// The outcome is written even though the handler's context ended.
	octx := context.WithoutCancel(hctx)
	p := store.EndParams{Fence: fence, Stats: r.stats()}
	r.mu.Lock()
	lost := r.lost
	r.mu.Unlock()
	var pe *PressureError
	var ge *GapError
	switch {
	case lost || errors.Is(herr, store.ErrStaleToken):
		w.event(Event{Kind: EventLeaseLost, JobID: j.ID, Token: fence.Token, Err: herr})
	case herr == nil:
		p.Delay = w.scheduleDelay(&j.JobSpec)
		w.end(octx, store.RunSucceeded, r, p, nil)
	case errors.As(herr, &ge):
		p.Reason, p.Delay, p.CatchUp = ge.Reason, w.cfg.DeferDelay, ge.CatchUp
		w.end(octx, store.RunDeferred, r, p, herr)
	case errors.As(herr, &pe):
		p.Reason, p.Delay = pe.Reason, pe.Wait
		if p.Delay <= 0 {
			p.Delay = w.cfg.PressureWait
		}
		p.Delay = min(p.Delay, store.MaxJobInterval)
		if !store.IsPressureReason(p.Reason) {
			p.Reason = store.PressureThrottled
		}
		w.end(octx, store.RunParked, r, p, herr)
	case stop.Err() != nil && ctx.Err() != nil && !IsPermanent(herr):
		p.Error = herr.Error()
		w.end(octx, store.RunReleased, r, p, herr)
	default:
		p.Error, p.Permanent = herr.Error(), IsPermanent(herr)
		p.Delay = w.backoff(j.ConsecutiveFailures + 1)
		w.end(octx, store.RunFailed, r, p, herr)
	}
}

// acquire takes a handler slot from slots (none needed if nil), waiting
// until one frees; it returns false, holding none, if stop or ctx ends
// first.
func acquire(ctx, stop context.Context, slots chan struct{}) bool {
	if slots == nil {
		return true
	}
	if stop.Err() != nil || ctx.Err() != nil {
		return false
	}
	select {
	case slots <- struct{}{}:
		if stop.Err() != nil {
			<-slots // stop and a free slot came together: stop wins
			return false
		}
		return true
	case <-stop.Done():
	case <-ctx.Done():
	}
	return false
}

// release gives back a slot acquire took.
func release(slots chan struct{}) {
	if slots != nil {
		<-slots
	}
}

// safeCall runs the handler, turning a panic into a failure.
func safeCall(ctx context.Context, h Handler, r *Run) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("job: handler panicked: %v", v)
		}
	}()
	return h(ctx, r)
}

func (w *Worker) end(ctx context.Context, outcome string, r *Run, p store.EndParams, cause error) {
	p.Now = w.storeNow()
	var err error
	kind := EventKind("")
	switch outcome {
	case store.RunSucceeded:
		err, kind = w.fin.finish(ctx, p), EventSuccess
	case store.RunFailed:
		err, kind = w.store.FailJob(ctx, p), EventFailure
	case store.RunParked:
		err, kind = w.store.ParkJob(ctx, p), EventPark
	case store.RunDeferred:
		err, kind = w.store.DeferJob(ctx, p), EventDefer
	default:
		p.Delay = 0
		err, kind = w.store.ReleaseJob(ctx, p), EventRelease
	}
	if errors.Is(err, store.ErrStaleToken) {
		kind = EventLeaseLost
	} else if err != nil && cause == nil {
		cause = err
	}
	w.event(Event{Kind: kind, JobID: r.job.ID, Group: r.job.GroupKey, Token: p.Token, Reason: p.Reason, Delay: p.Delay, Err: cause,
		Cursor: r.cursor})
}

// scheduleDelay is the delay to a job's next scheduled run
// (store.ScheduleDelay): its interval plus jitter, or the time until its
// next cron time (read on Clock, in whole microseconds) plus jitter short of
// the cron time after it, or, for a job without a schedule, the longest
// delay (it runs again when triggered).
func (w *Worker) scheduleDelay(spec *store.JobSpec) time.Duration {
	u := 0.0
	if w.cfg.Jitter > 0 && (spec.Cron != "" || spec.Interval > 0) {
		u = w.random()
	}
	d, err := store.ScheduleDelay(spec, w.clk.Now().Truncate(time.Microsecond), u, w.cfg.Jitter)
	if err != nil {
		// The store validated the schedule on upsert; a record changed
		// behind its back runs again when triggered.
		return store.MaxJobInterval
	}
	return d
}

// backoff is the full-jitter delay after the n-th failure in a row.
func (w *Worker) backoff(n int64) time.Duration {
	c := w.cfg.BackoffBase
	for i := int64(1); i < n && c < w.cfg.BackoffMax; i++ {
		c *= 2
	}
	c = min(c, w.cfg.BackoffMax, store.MaxJobInterval)
	return time.Duration(w.random() * float64(c)).Truncate(time.Microsecond)
}
