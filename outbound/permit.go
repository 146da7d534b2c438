package outbound

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/breaker"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
)

// The two-step form of a call, for callers that make the call themselves
// (a worker in another language, over the server's HTTP API): Acquire runs
// the layers before the request (bulkhead, rate limiter, circuit breaker)
// and returns a Permit; the caller makes one attempt and hands its outcome
// to Permit.Report, which runs the layers after it (signal parsing, the
// AIMD controller, the breaker's record, the fleet-wide pause, the retry
// budget) and says whether and when to retry. It is the same per-key state
// as RoundTrip's and Do's, so calls made either way pace and adapt as one.

// ErrWouldWait is matched (errors.Is) by a *WaitError.
var ErrWouldWait = errors.New("outbound: the key's turn is further off than the caller would wait")

// ErrPermitDone: a Permit was reported or cancelled before.
var ErrPermitDone = errors.New("outbound: permit already reported or cancelled")

// WaitError is Acquire's answer when the key's turn is further off than
// AcquireOpts.MaxWait: come back after RetryAfter. It is a plain value.
type WaitError struct {
	Key        string
	RetryAfter time.Duration
	// Paused says the key is paused for the fleet (a Retry-After, a ban, an
	// exhausted quota), not merely paced.
	Paused bool
	// Busy says the bulkhead is full (Config.MaxConcurrent calls in
	// flight); RetryAfter is then 0: nobody knows when one ends.
	Busy bool
}

func (e *WaitError) Error() string {
	switch {
	case e.Busy:
		return fmt.Sprintf("outbound: key %q: every place of the bulkhead is taken", e.Key)
	case e.Paused:
		return fmt.Sprintf("outbound: key %q: paused for %v", e.Key, e.RetryAfter)
	}
	return fmt.Sprintf("outbound: key %q: next turn in %v", e.Key, e.RetryAfter)
}

// Is makes errors.Is(err, ErrWouldWait) hold.
func (e *WaitError) Is(target error) bool { return target == ErrWouldWait }

// OpenError is Acquire's refusal while the key's circuit breaker is open
// (or half-open with its probes in use). It unwraps to breaker.ErrOpen or
// breaker.ErrProbeLimit. It is a plain value.
type OpenError struct {
	Key string
	// RetryAfter is how long the breaker stays open (0: half-open, a
	// probe's outcome decides).
	RetryAfter time.Duration
	Err        error
}

func (e *OpenError) Error() string { return fmt.Sprintf("outbound: key %q: %v", e.Key, e.Err) }

// Unwrap returns the breaker's error.
func (e *OpenError) Unwrap() error { return e.Err }

// AcquireOpts are per-call options of Acquire. The zero value waits for no
// turn that is not due now and is a call that is not idempotent.
type AcquireOpts struct {
	// MaxWait is the longest Acquire waits for the key's turn (and for a
	// place in the bulkhead); a turn further off answers a *WaitError
	// saying how long to wait. Zero: answer at once.
	MaxWait time.Duration
	// Idempotent says the call may be retried when its outcome is unknown
	// (a timeout after sending, a 5xx): Report's retry advice follows it.
	Idempotent bool
	// Profile names the call's provider profile (see provider.go); empty
	// means Config.Profile. The key is normalized by it, and the turn is
	// reserved against its limits as Call describes the call.
	Profile string
	Call    ProviderCall
}

// Permit is one attempt's turn, from Acquire to Report or Cancel, which
// must be called exactly once: until then the permit holds its place in
// the key's bulkhead, while the breaker is half-open a probe, and the
// permits of its profile's leases held around every call. It is
// safe for concurrent use; only the first Report or Cancel counts.
type Permit struct {
	c          *Client
	ks         *keyState
	done       func(now int64, rep *signal.Report)
	idempotent bool
	granted    time.Time
	closed     atomic.Bool
	// rt and ticket: the call's reservation under its provider profile.
	rt     *provider.Runtime
	ticket *provider.Ticket
}

// Key returns the key the permit is for.
func (p *Permit) Key() string { return p.ks.key }

// Granted returns when the turn was granted, on the client's clock.
func (p *Permit) Granted() time.Time { return p.granted }

// Outcome is what the caller reports of one attempt: the response's status,
// headers and (optionally) a JSON body to read GraphQL throttleStatus
// from, or the transport error without a response.
type Outcome struct {
	Status int
	Header http.Header // canonical keys, as net/http makes them
	Body   []byte
	Err    error
	// Latency is the attempt's duration. Zero means the time since the
	// permit was granted, on the client's clock.
	Latency time.Duration
	// Attempt numbers the attempt from 1, for the retry backoff. Zero
	// means 1.
	Attempt int
}

// Verdict is what Report learned from an outcome: how the response was
// read, and whether and when to retry. It is a plain value.
type Verdict struct {
	// Class is the outcome's kind: success, transient, permanent or
	// canceled (signal.Class).
	Class     string
	Throttled bool
	Banned    bool
	// Unknown says the request may have been processed although it did
	// not succeed.
	Unknown bool
	// Retry advises another attempt after RetryAfter (full-jitter backoff,
	// at least the provider's Retry-After); without it, Stop says why not
	// when a failure is not retried (the retry budget, the attempts, an
	// unknown outcome of a call that is not idempotent, a delay too long).
	Retry      bool
	RetryAfter time.Duration
	Stop       error
	// Rate is the key's adapted rate after the outcome, in calls per
	// second; PausedFor how long the key is now paused (0: not paused).
	Rate      float64
	PausedFor time.Duration
	// Profile is what the call's provider profile made of the outcome
	// (provider.Kind: ok, throttled, banned, unknown, permanent, failed);
	// empty for a call without a profile.
	Profile string
}

// Acquire waits, at most opts.MaxWait, for a turn of key and returns a
// permit for one attempt. A turn further off answers a *WaitError (match
// ErrWouldWait); an open breaker an *OpenError (match breaker.ErrOpen); a
// key that breaks store.CheckKey's rule an error wrapping
// store.ErrInvalidID; a store failure an error naming the key. opts may be
// nil.
func (c *Client) Acquire(ctx context.Context, key string, opts *AcquireOpts) (*Permit, error) {
	if key == "" {
		return nil, ErrEmptyKey
	}
	if err := store.CheckKey(key); err != nil {
		return nil, fmt.Errorf("outbound: %w", err)
	}
	var o AcquireOpts
	if opts != nil {
		o = *opts
	}
	if o.MaxWait < 0 {
		return nil, fmt.Errorf("outbound: AcquireOpts.MaxWait must be >= 0, got %v", o.MaxWait)
	}
	deadline := c.now() + o.MaxWait.Microseconds()
	rt, err := c.profileFor(o.Profile)
	if err != nil {
		return nil, err
	}
	if rt != nil {
		if key, err = rt.Profile().NormalizeKey(key); err != nil {
			return nil, err
		}
		if err := store.CheckKey(key); err != nil {
			return nil, fmt.Errorf("outbound: %w", err)
		}
	}
	label := "other"
	if c.keyLabels {
		label = key
	}
	ks := c.keys.acquire(key, label)
	ok := false
	defer func() {
		if !ok {
			c.keys.release(ks)
		}
	}()
	// 1. bulkhead, within the wait.
	if !ks.bulk.tryEnter() {
		bctx, cancel := context.WithTimeout(ctx, o.MaxWait)
		err := ks.bulk.enter(bctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &WaitError{Key: key, Busy: true}
		}
	}
	defer func() {
		if !ok {
			ks.bulk.leave()
		}
	}()
	c.requests.Add(1)
	ks.counts.requests.Add(1)
	// 3. rate limiter
	if err := c.waitUntil(ctx, ks, c.now()+o.MaxWait.Microseconds()); err != nil {
		return nil, err
	}
	// 4. circuit breaker
	now := c.now()
	done, err := ks.policy.allow(now)
	if err != nil {
		c.reject(ks, "breaker_open")
		oe := &OpenError{Key: key, Err: breaker.ErrProbeLimit}
		if errors.Is(err, breaker.ErrOpen) {
			oe.Err = breaker.ErrOpen
			if until, open := ks.policy.brk.OpenUntil(); open && until > now {
				oe.RetryAfter = time.Duration(until-now) * time.Microsecond
			}
		}
		return nil, oe
	}
	p := &Permit{c: c, ks: ks, done: done, idempotent: o.Idempotent, rt: rt}
	if rt != nil {
		// The provider's own limits, after the layers granted the turn:
		// a call that would not fit is not made (nothing is charged).
		t, err := c.reserve(ctx, rt, key, o.Call.call(key), deadline)
		if err != nil {
			done(c.now(), &signal.Report{Class: signal.ClassCanceled})
			return nil, err
		}
		p.ticket = t
	}
	ok = true
	p.granted = c.clk.Now()
	return p, nil
}

// Report feeds one attempt's outcome to the key's layers, as RoundTrip does
// after each attempt, and ends the permit. The second Report or a Report
// after Cancel is ErrPermitDone.
func (p *Permit) Report(ctx context.Context, o Outcome) (Verdict, error) {
	if !p.closed.CompareAndSwap(false, true) {
		return Verdict{}, ErrPermitDone
	}
	c, ks := p.c, p.ks
	defer c.keys.release(ks)
	defer ks.bulk.leave()
	end := c.clk.Now()
	now := end.UnixMicro()
	var rep signal.Report
	c.parser.ParseTo(&rep, now, signal.Response{Status: o.Status, Header: o.Header, Body: o.Body, Err: o.Err})
	p.done(now, &rep)
	latency := o.Latency
	if latency <= 0 {
		latency = end.Sub(p.granted)
	}
	c.observe(ctx, ks, &rep, latency, now)
	n := max(o.Attempt, 1)
	d := ks.policy.retry(n, &rep, p.idempotent, now)
	if errors.Is(d.Stop, retry.ErrBudgetExhausted) {
		c.reject(ks, "budget_exhausted")
	}
	v := Verdict{Class: rep.Class.String(), Throttled: rep.Throttled, Banned: rep.Banned, Unknown: rep.Unknown,
		Retry: d.Retry, RetryAfter: time.Duration(d.Delay) * time.Microsecond, Stop: d.Stop}
	var serr error
	if p.ticket != nil {
		serr = settle(ctx, p.rt, p.ticket, signal.Response{Status: o.Status, Header: o.Header, Body: o.Body, Err: o.Err}, &v)
	}
	view := ks.adapt.view(now)
	v.Rate, v.PausedFor = view.rate, view.pausedFor
	return v, serr
}

// Cancel ends a permit whose attempt was never made: nothing is observed,
// and a half-open breaker's probe is given back. It reports whether it
// ended the permit (false: it was reported or cancelled before).
func (p *Permit) Cancel() bool {
	if !p.closed.CompareAndSwap(false, true) {
		return false
	}
	c, ks := p.c, p.ks
	p.done(c.now(), &signal.Report{Class: signal.ClassCanceled})
	if p.ticket != nil {
		// The call was never made: its per-call permits free now.
		_ = p.rt.Release(context.Background(), p.ticket)
	}
	ks.bulk.leave()
	c.keys.release(ks)
	return true
}

// Observe feeds the outcome of an attempt made without a permit of this
// client's (one granted by another process sharing the store, or one
// dropped) to key's controller and to the fleet through the store: its
// adapted rate, its pause. The breaker and the retry budget count only
// the attempts they admitted, so Observe leaves them alone and never
// advises a retry.
func (c *Client) Observe(ctx context.Context, key string, o Outcome) (Verdict, error) {
	if key == "" {
		return Verdict{}, ErrEmptyKey
	}
	if err := store.CheckKey(key); err != nil {
		return Verdict{}, fmt.Errorf("outbound: %w", err)
	}
	label := "other"
	if c.keyLabels {
		label = key
	}
	ks := c.keys.acquire(key, label)
	defer c.keys.release(ks)
	now := c.now()
	var rep signal.Report
	c.parser.ParseTo(&rep, now, signal.Response{Status: o.Status, Header: o.Header, Body: o.Body, Err: o.Err})
	c.observe(ctx, ks, &rep, max(o.Latency, 0), now)
	v := Verdict{Class: rep.Class.String(), Throttled: rep.Throttled, Banned: rep.Banned, Unknown: rep.Unknown}
	view := ks.adapt.view(now)
	v.Rate, v.PausedFor = view.rate, view.pausedFor
	return v, nil
}

// KeySnapshot returns key's state, and whether the client holds any for
// it.
func (c *Client) KeySnapshot(key string) (KeySnapshot, bool) {
	ks, ok := c.keys.lookup(key)
	if !ok {
		return KeySnapshot{}, false
	}
	return c.keySnapshot(ks, c.now()), true
}
