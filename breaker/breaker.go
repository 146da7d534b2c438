package breaker

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

var (
	// ErrOpen refuses a call because the breaker is open.
	ErrOpen = errors.New("breaker: open")
	// ErrProbeLimit refuses a call because the breaker is half-open and
	// its probe budget is in use.
	ErrProbeLimit = errors.New("breaker: half-open probe budget in use")
	// ErrInvalidConfig is wrapped by New for a Config it cannot use.
	ErrInvalidConfig = errors.New("breaker: invalid config")
)

// MaxBuckets is the most buckets a window may have.
const MaxBuckets = 64

// Defaults for the zero fields of Config.
const (
	DefaultWindow              = 30 * time.Second
	DefaultBuckets             = 15
	DefaultMinRequests         = 20
	DefaultFailureRate         = 0.5
	DefaultConsecutiveFailures = 10
	DefaultOpenTimeout         = 10 * time.Second
	DefaultHalfOpenProbes      = 3
)

// Config configures a Policy; every zero field means its documented default,
// so the zero Config is usable. New copies it.
type Config struct {
	// Window is the length of the sliding error window; Buckets how many
	// buckets it is counted in (at most MaxBuckets). Zero means
	// DefaultWindow (30s) and DefaultBuckets (15, so 2s each).
	Window  time.Duration
	Buckets int
	// MinRequests is the minimum-throughput guard: the failure rate trips
	// the breaker only when the window holds at least this many outcomes.
	// Zero means DefaultMinRequests (20).
	MinRequests int
	// FailureRate in (0, 1] trips the breaker. Zero means
	// DefaultFailureRate (0.5).
	FailureRate float64
	// ConsecutiveFailures trips the breaker after this many failures in a
	// row, whatever the window's rate says (a run broken by a window
	// without outcomes starts again). Zero means
	// DefaultConsecutiveFailures (10); negative disables it.
	ConsecutiveFailures int
	// OpenTimeout is how long the breaker stays open before probing.
	// Zero means DefaultOpenTimeout (10s).
	OpenTimeout time.Duration
	// HalfOpenProbes is the probe budget of half-open: how many calls it
	// admits, and how many must succeed to close. Zero means
	// DefaultHalfOpenProbes (3).
	HalfOpenProbes int
}

// Policy is a validated Config. It is immutable and safe for concurrent use;
// its zero value is not usable, use New.
type Policy struct {
	width       int64 // bucket width, µs
	buckets     int
	minRequests int
	rate        float64
	consecutive int
	openTimeout int64
	probes      int
}

// New validates cfg and returns a Policy.
func New(cfg Config) (*Policy, error) {
	if cfg.Window < 0 || cfg.Buckets < 0 || cfg.MinRequests < 0 || cfg.OpenTimeout < 0 || cfg.HalfOpenProbes < 0 {
		return nil, fmt.Errorf("%w: Window, Buckets, MinRequests, OpenTimeout and HalfOpenProbes must be >= 0", ErrInvalidConfig)
	}
	if math.IsNaN(cfg.FailureRate) || cfg.FailureRate < 0 || cfg.FailureRate > 1 {
		return nil, fmt.Errorf("%w: FailureRate must be in (0, 1], got %v", ErrInvalidConfig, cfg.FailureRate)
	}
	if cfg.Buckets > MaxBuckets {
		return nil, fmt.Errorf("%w: Buckets must be at most %d, got %d", ErrInvalidConfig, MaxBuckets, cfg.Buckets)
	}
	p := &Policy{buckets: cfg.Buckets, minRequests: cfg.MinRequests, rate: cfg.FailureRate,
		consecutive: cfg.ConsecutiveFailures, openTimeout: cfg.OpenTimeout.Microseconds(), probes: cfg.HalfOpenProbes}
	window := cfg.Window
	if window == 0 {
		window = DefaultWindow
	}
	if p.buckets == 0 {
		p.buckets = DefaultBuckets
	}
	p.width = window.Microseconds() / int64(p.buckets)
	if p.width < 1 || window.Microseconds()%int64(p.buckets) != 0 {
		return nil, fmt.Errorf("%w: Window %v must split into %d whole-microsecond buckets", ErrInvalidConfig, window, p.buckets)
	}
	if p.minRequests == 0 {
		p.minRequests = DefaultMinRequests
	}
	if p.rate == 0 {
		p.rate = DefaultFailureRate
	}
	if p.consecutive == 0 {
		p.consecutive = DefaultConsecutiveFailures
	}
	if p.openTimeout == 0 {
		p.openTimeout = DefaultOpenTimeout.Microseconds()
	}
	if p.probes == 0 {
		p.probes = DefaultHalfOpenProbes
	}
	return p, nil
}

// State is a breaker's state. The zero value is Closed.
type State uint8

// The states.
const (
	Closed State = iota
	Open
	HalfOpen
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Outcome is what a call's result means to the breaker. The zero value is
// no outcome, which Record ignores.
type Outcome uint8

const (
	// Success is a healthy answer: 1xx-3xx, and 4xx other than 429.
	Success Outcome = iota + 1
	// Failure is provider trouble: 429, 5xx, a network error or timeout.
	Failure
	// Ignored does not count: a call the caller canceled, or one that
	// never reached the provider for reasons of its own.
	Ignored
	// Throttle is a refusal for load (a 429 or 503 the caller's rate
	// controller acts on, not a Retry-After, which the caller should
	// Ignore): it counts as a failure in the window's failure rate and
	// fails a half-open probe. While a call succeeded within the window it
	// neither lengthens nor ends a run of consecutive failures: a rate
	// limiter slows down for throttles, and a breaker opened by a short
	// burst of them would stop the calls that carry that feedback and let
	// the rate go stale (a throttled call must wait, not fail). With no
	// success for a window (or ever) it is a Failure: a provider that
	// refuses everything is down, whatever status it picks.
	Throttle
)

// Classify maps a call's result to an Outcome: a network error (or
// timeout) or a 429 or 5xx status is a Failure, a canceled call is
// Ignored, anything else a Success.
func Classify(status int, networkErr, canceled bool) Outcome {
	switch {
	case canceled:
		return Ignored
	case networkErr, status == 429, status >= 500 && status < 600:
		return Failure
	}
	return Success
}

// Reason says why a transition happened.
type Reason uint8

// The reasons.
const (
	ReasonNone                Reason = iota
	ReasonFailureRate                // closed -> open: the window's failure rate
	ReasonConsecutiveFailures        // closed -> open: failures in a row
	ReasonOpenTimeout                // open -> half-open: the timeout passed
	ReasonProbeFailed                // half-open -> open: a probe failed
	ReasonProbesSucceeded            // half-open -> closed: the probes succeeded
)

// String returns the reason's name.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonFailureRate:
		return "failure_rate"
	case ReasonConsecutiveFailures:
		return "consecutive_failures"
	case ReasonOpenTimeout:
		return "open_timeout"
	case ReasonProbeFailed:
		return "probe_failed"
	case ReasonProbesSucceeded:
		return "probes_succeeded"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Counts are a breaker's counters at a transition; a plain value.
type Counts struct {
	// Requests and Failures are the outcomes in the sliding window.
	Requests, Failures int
	// Consecutive is the current run of failures.
	Consecutive int
	// Probes and ProbeSuccesses count half-open's admitted and
	// successful probes.
	Probes, ProbeSuccesses int
}

// Event is one transition, safe to persist and show: it holds no request,
// payload or credential, only states, the reason, counters and times. It
// is a plain value; the zero Event is no transition (see Changed).
type Event struct {
	From, To State
	Reason   Reason
	// At is when it happened (Unix µs); Elapsed how long (µs) the breaker
	// had been in From.
	At, Elapsed int64
	Counts      Counts
	// Generation is the breaker's generation after the transition.
	Generation uint64
}

// Changed reports whether e is a transition.
func (e Event) Changed() bool { return e.From != e.To }

type bucket struct {
	epoch           int64 // which bucket-width slice of time it counts
	total, failures int32
}

// Breaker is one key's breaker state. The zero value is a closed breaker
// that has seen nothing. It is a plain value, not safe for concurrent use;
// Locked guards one.
type Breaker struct {
	state      State
	since      int64 // when the current state began (0: not yet used)
	generation uint64
	latest     int64 // latest bucket epoch seen; time never runs backwards here
	buckets    [MaxBuckets]bucket
	consec     int
	probes     int // half-open: admitted probes still counting
	probeOK    int
	lost       int // half-open: probes taken as lost whose slots were reused
	lastProbe  int64
	admitted   uint64 // calls admitted so far (Ticket.Seq)
	failSeq    uint64 // admitted when the run's last failure was recorded
	lastOK     int64  // when a call last succeeded (0: never)
}

// State returns the breaker's state as of its last operation; an open
// breaker whose timeout has passed still says Open until the next Allow.
func (b *Breaker) State() State { return b.state }

// Generation is incremented by every transition.
func (b *Breaker) Generation() uint64 { return b.generation }

// OpenUntil returns when an open breaker will admit a probe, and whether it
// is open.
func (p *Policy) OpenUntil(b *Breaker) (int64, bool) {
	return b.since + p.openTimeout, b.state == Open
}

// Ticket is an admitted call, a plain value. Pass it back to Record (or
// Locked.Done) once. The zero Ticket is a call admitted by a closed breaker
// that never transitioned.
type Ticket struct {
	Generation uint64
	Probe      bool
	// Seq numbers the calls a breaker admitted, in order (0: unknown, as
	// in the zero Ticket).
	Seq uint64
}

// Allow decides whether a call may go at now. A refused call gets ErrOpen or
// ErrProbeLimit. The returned Event is the open -> half-open transition when
// Allow made it (check Changed).
func (p *Policy) Allow(b *Breaker, now int64) (Ticket, Event, error) {
	var ev Event
	if b.since == 0 {
		b.since = now
	}
	switch b.state {
	case Closed:
		b.admitted++
		return Ticket{Generation: b.generation, Seq: b.admitted}, ev, nil
	case Open:
		if now < b.since+p.openTimeout {
			return Ticket{}, ev, ErrOpen
		}
		ev = p.transition(b, now, HalfOpen, ReasonOpenTimeout)
	}
	// Half-open: admit while the probe budget lasts. A probe that never
	// reported for an open timeout is taken as lost, and its slot reused.
	if b.probes >= p.probes && now-b.lastProbe >= p.openTimeout {
		b.lost += b.probes - b.probeOK
		b.probes = b.probeOK
	}
	if b.probes >= p.probes {
		return Ticket{}, ev, ErrProbeLimit
	}
	b.probes++
	b.lastProbe = now
	b.admitted++
	return Ticket{Generation: b.generation, Probe: true, Seq: b.admitted}, ev, nil
}

// Record records the outcome of the call t at now and returns the
// transition it caused, if any (check Changed). An outcome from an earlier
// generation (a call admitted before the last transition) is ignored.
func (p *Policy) Record(b *Breaker, now int64, t Ticket, o Outcome) Event {
	if t.Generation != b.generation {
		return Event{}
	}
	if b.since == 0 {
		b.since = now
	}
	switch b.state {
	case Closed:
		return p.recordClosed(b, now, t, o)
	case HalfOpen:
		if !t.Probe {
			return Event{}
		}
		// A report may come from a probe taken as lost, whose slot was
		// reused: which one cannot be told, so while any are lost a
		// report settles a lost one first, and the budget never admits
		// more probes at once than it allows.
		late := b.lost > 0
		if late {
			b.lost--
		}
		switch o {
		case Failure, Throttle:
			return p.transition(b, now, Open, ReasonProbeFailed)
		case Success:
			if late {
				b.probes++ // it counts as an admitted probe again
			}
			b.lastOK = now
			b.probeOK++
			if b.probeOK >= p.probes {
				return p.transition(b, now, Closed, ReasonProbesSucceeded)
			}
		default:
			if !late {
				b.probes-- // the slot goes back to the budget
			}
		}
	}
	return Event{}
}

func (p *Policy) recordClosed(b *Breaker, now int64, t Ticket, o Outcome) Event {
	if o != Success && o != Failure && o != Throttle {
		return Event{}
	}
	epoch := now / p.width
	if epoch < b.latest {
		epoch = b.latest // a clock running backwards counts as now
	}
	if b.latest < epoch-int64(p.buckets)+1 {
		b.consec = 0 // a run of failures older than the window is over
	}
	b.latest = epoch
	bk := &b.buckets[epoch%int64(p.buckets)]
	if bk.epoch != epoch {
		*bk = bucket{epoch: epoch}
	}
	bk.total++
	if o == Success {
		b.consec = 0
		b.lastOK = now
		return Event{}
	}
	bk.failures++
	if o == Throttle && b.lastOK != 0 && now-b.lastOK < p.width*int64(p.buckets) {
		return p.rateTrip(b, now) // refused amid successes: pacing, not down
	}
	// A call admitted before the run's last failure was recorded was in
	// flight with it: calls sent together fail together, one signal (a
	// provider's limit that fell refuses every call in flight at once).
	// It counts in the window's failure rate, not in the run.
	if b.consec == 0 || t.Seq == 0 || t.Seq > b.failSeq {
		b.consec++
		b.failSeq = b.admitted
	}
	if p.consecutive > 0 && b.consec >= p.consecutive {
		return p.transition(b, now, Open, ReasonConsecutiveFailures)
	}
	return p.rateTrip(b, now)
}

// rateTrip opens the breaker when the window's failure rate says so.
func (p *Policy) rateTrip(b *Breaker, now int64) Event {
	total, failures := p.window(b)
	if total >= p.minRequests && float64(failures) >= p.rate*float64(total) {
		return p.transition(b, now, Open, ReasonFailureRate)
	}
	return Event{}
}

// window sums the buckets of the current window.
func (p *Policy) window(b *Breaker) (total, failures int) {
	oldest := b.latest - int64(p.buckets) + 1
	for i := range p.buckets {
		if bk := &b.buckets[i]; bk.epoch >= oldest && bk.total > 0 {
			total += int(bk.total)
			failures += int(bk.failures)
		}
	}
	return total, failures
}

// Counts returns the breaker's counters; the window as of its last record.
func (p *Policy) Counts(b *Breaker) Counts {
	total, failures := p.window(b)
	return Counts{Requests: total, Failures: failures, Consecutive: b.consec, Probes: b.probes, ProbeSuccesses: b.probeOK}
}

func (p *Policy) transition(b *Breaker, now int64, to State, why Reason) Event {
	ev := Event{From: b.state, To: to, Reason: why, At: now, Elapsed: max(now-b.since, 0), Counts: p.Counts(b)}
	b.state, b.since = to, now
	b.generation++
	ev.Generation = b.generation
	b.probes, b.probeOK, b.lost, b.lastProbe = 0, 0, 0, now
	if to == Closed || to == Open {
		// A fresh window: what led to the last transition is evidence
		// already acted on.
		b.buckets = [MaxBuckets]bucket{}
		b.consec = 0
	}
	return ev
}

// Locked is a Policy and one Breaker behind a mutex, in the two-step form.
// It is safe for concurrent use; its zero value is not usable, use
// NewLocked.
type Locked struct {
	p            *Policy
	onTransition func(Event)
	mu           sync.Mutex
	b            Breaker
}

// NewLocked returns a closed breaker. onTransition, when not nil, receives
// every transition in order; it runs under the breaker's lock, so it must
// be quick and must not call back into the breaker.
func NewLocked(p *Policy, onTransition func(Event)) *Locked {
	return &Locked{p: p, onTransition: onTransition}
}

// Allow asks to make a call at now (Unix µs). On nil error, make the call
// and report its outcome with Done and the Ticket.
func (l *Locked) Allow(now int64) (Ticket, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ev, err := l.p.Allow(&l.b, now)
	if ev.Changed() && l.onTransition != nil {
		l.onTransition(ev)
	}
	return t, err
}

// Done reports the outcome of the call t at now.
func (l *Locked) Done(now int64, t Ticket, o Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ev := l.p.Record(&l.b, now, t, o); ev.Changed() && l.onTransition != nil {
		l.onTransition(ev)
	}
}

// State returns the state, and its counters.
func (l *Locked) State() (State, Counts) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.state, l.p.Counts(&l.b)
}

// OpenUntil returns when an open breaker will admit a probe, and whether it
// is open.
func (l *Locked) OpenUntil() (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.p.OpenUntil(&l.b)
}

// Fresh reports whether dropping b at now (an idle key's eviction) loses
// nothing: it is closed and nothing it counted is still in the window
// (failures older than the window, consecutive ones included, no longer
// count towards a trip).
func (p *Policy) Fresh(b *Breaker, now int64) bool {
	if b.state != Closed {
		return false
	}
	if b.since == 0 {
		return true
	}
	return b.latest < now/p.width-int64(p.buckets)+1
}
