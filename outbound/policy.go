package outbound

import (
	"fmt"
	"time"

	"github.com/sluicerl/sluice/breaker"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/signal"
)

// policy holds the breaker and retry settings every key starts from.
type policy struct {
	retry   *retry.Policy
	breaker *breaker.Policy
	rng     retry.Rand
	onEvent func(key string, e breaker.Event)
}

func newPolicy(cfg Config) (policy, error) {
	rp, err := retry.New(cfg.Retry)
	if err != nil {
		return policy{}, fmt.Errorf("%w: retry: %w", ErrInvalidConfig, err)
	}
	bp, err := breaker.New(cfg.Breaker)
	if err != nil {
		return policy{}, fmt.Errorf("%w: breaker: %w", ErrInvalidConfig, err)
	}
	return policy{retry: rp, breaker: bp, rng: cfg.Rand, onEvent: cfg.OnBreakerEvent}, nil
}

// keyPolicy is one key's breaker and retry budget.
type keyPolicy struct {
	key     string
	retrier *retry.Retrier
	brk     *breaker.Locked
}

func (p policy) newKey(key string) *keyPolicy {
	k := &keyPolicy{key: key, retrier: retry.NewRetrier(p.retry, p.rng)}
	var on func(breaker.Event)
	if p.onEvent != nil {
		on = func(e breaker.Event) { p.onEvent(key, e) }
	}
	k.brk = breaker.NewLocked(p.breaker, on)
	return k
}

// allow is the breaker's first step; the returned func records the
// attempt's outcome at the time it is given.
func (k *keyPolicy) allow(now int64) (func(now int64, rep *signal.Report), error) {
	t, err := k.brk.Allow(now)
	if err != nil {
		return nil, fmt.Errorf("outbound: key %q: %w", k.key, err)
	}
	return func(now int64, rep *signal.Report) { k.brk.Done(now, t, breakerOutcome(rep)) }, nil
}

// breakerOutcome maps a report to the breaker: 5xx and network errors are
// failures, except that a throttle that says when to come back (a
// Retry-After) is the provider pacing us, not failing: it pauses the key
// and does not trip the breaker (seed 001, 7.5); and a throttle that does
// not say (a bare 429 or 503, THROTTLED in a body) is a breaker.Throttle:
// it counts in the failure rate but, while the provider also serves, not
// in a run of consecutive failures, since the key's rate controller slows
// down for it and a breaker opened by one burst of refusals would stop the
// calls that carry that feedback (issue 18: a limit that halved opened a
// process's breaker for 10 s and left its rate stale); from a provider
// that served nothing for the breaker's window it is a failure. A ban
// without a Retry-After is a failure.
func breakerOutcome(rep *signal.Report) breaker.Outcome {
	switch {
	case rep.Class == signal.ClassCanceled:
		return breaker.Ignored
	case rep.Throttled && rep.HasRetryAfter:
		return breaker.Ignored
	case rep.Throttled && !rep.Banned:
		return breaker.Throttle
	}
	return breaker.Classify(rep.Status, rep.Status == 0 && rep.Class == signal.ClassTransient, false)
}

// retry feeds attempt n's outcome to the key's retry budget (a success
// refills it) and says whether to retry and after how long.
func (k *keyPolicy) retry(n int, rep *signal.Report, idempotent bool, now int64) retry.Decision {
	a := retry.Attempt{N: n, Unknown: rep.Unknown, Idempotent: idempotent,
		RetryAfter: rep.RetryAfter, HasRetryAfter: rep.HasRetryAfter}
	switch rep.Class {
	case signal.ClassSuccess:
		a.Outcome = retry.Success
	case signal.ClassTransient:
		a.Outcome = retry.Transient
	case signal.ClassPermanent:
		a.Outcome = retry.Permanent
	default:
		a.Outcome = retry.Canceled
	}
	return k.retrier.Decide(now, a)
}

// BreakerSnapshot is a key's circuit breaker and retry budget state: a
// plain value, a copy.
type BreakerSnapshot struct {
	State string `json:"state"`
	// Requests and Failures are the outcomes in the breaker's window;
	// Consecutive the current run of failures; ErrorRate is Failures over
	// Requests (0 without requests).
	Requests    int     `json:"requests"`
	Failures    int     `json:"failures"`
	Consecutive int     `json:"consecutive_failures"`
	ErrorRate   float64 `json:"error_rate"`
	// OpenFor is how long an open breaker stays open.
	OpenFor time.Duration `json:"open_for"`
	// RetryTokens is the retry budget's balance.
	RetryTokens float64 `json:"retry_tokens"`
}

func (k *keyPolicy) snapshot(now int64) BreakerSnapshot {
	st, c := k.brk.State()
	s := BreakerSnapshot{State: st.String(), Requests: c.Requests, Failures: c.Failures, Consecutive: c.Consecutive,
		RetryTokens: k.retrier.Tokens(now)}
	if c.Requests > 0 {
		s.ErrorRate = float64(c.Failures) / float64(c.Requests)
	}
	if until, ok := k.brk.OpenUntil(); ok && until > now {
		s.OpenFor = time.Duration(until-now) * time.Microsecond
	}
	return s
}
