package limiter

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sluicerl/sluice/store"
)

// Request is one policy of an all-or-nothing request.
type Request struct {
	Policy string
	Key    string
	Cost   int64
}

// MultiDecision is the outcome of AllowAll: Allowed only if every enforced
// policy allowed, and one Decision per request, in order, so a denial names
// the policies that refused.
type MultiDecision struct {
	Allowed   bool
	Decisions []Decision
	// RetryAfter is, when denied, the longest RetryAfter among the refusing
	// policies: the earliest time the whole request could pass.
	RetryAfter time.Duration

	delay time.Duration // WaitAll: how long booked units must wait
	at    int64         // store time of the decision, for refunds
	items []store.Item  // what was charged, for refunds
}

// AllowAll takes every request at once or none of them. Shadow policies are
// evaluated but never cause a denial: when only shadow policies refuse, the
// enforced ones are taken and the shadow refusals are reported as Shadowed.
func (l *Limiter) AllowAll(ctx context.Context, reqs []Request) (MultiDecision, error) {
	return l.takeAll(ctx, reqs, 0)
}

func (l *Limiter) takeAll(ctx context.Context, reqs []Request, maxDelay time.Duration) (MultiDecision, error) {
	hs := make([]*Handle, len(reqs))
	items := make([]store.Item, len(reqs))
	for i, r := range reqs {
		h, err := l.Handle(r.Policy)
		if err != nil {
			return MultiDecision{}, err
		}
		if h.policy.Algorithm == store.Concurrency {
			return MultiDecision{}, fmt.Errorf("limiter: all-or-nothing: policy %q: %w", r.Policy, ErrNotRatePolicy)
		}
		if err := store.CheckKey(r.Key); err != nil {
			return MultiDecision{}, fmt.Errorf("limiter: all-or-nothing: request %d: %w", i, err)
		}
		hs[i] = h
		items[i] = store.Item{Key: r.Key, Limit: h.limit, Cost: r.Cost}
	}
	res, err := l.store.TakeAll(ctx, store.TakeAllParams{Items: items, MaxDelay: maxDelay})
	if err != nil {
		return MultiDecision{}, fmt.Errorf("limiter: all-or-nothing: %w", err)
	}
	if !res.Allowed && onlyShadowRefused(hs, res.Results) {
		// Retry with the enforced policies only; shadow ones keep the
		// verdict of the first pass.
		first := res.Results
		var enforced []store.Item
		var at []int
		for i, h := range hs {
			if !h.policy.Shadow {
				enforced = append(enforced, items[i])
				at = append(at, i)
			}
		}
		again, err := l.store.TakeAll(ctx, store.TakeAllParams{Items: enforced, MaxDelay: maxDelay})
		if err != nil {
			return MultiDecision{}, fmt.Errorf("limiter: all-or-nothing: %w", err)
		}
		res = store.AllResult{Allowed: again.Allowed, Results: first}
		for j, i := range at {
			res.Results[i] = again.Results[j]
		}
		items = enforced // only these were charged
	}
	out := MultiDecision{Allowed: true, Decisions: make([]Decision, len(reqs)), items: items}
	for i, h := range hs {
		d := decision(&h.policy, &res.Results[i])
		out.Decisions[i] = d
		out.delay = max(out.delay, res.Results[i].Delay)
		if !d.Allowed {
			out.Allowed = false
			out.RetryAfter = max(out.RetryAfter, d.RetryAfter)
		}
	}
	if !res.Allowed {
		out.Allowed = false
	}
	for i, r := range res.Results {
		if !hs[i].policy.Shadow || len(items) == len(reqs) {
			out.at = r.At // the time of the pass that charged
			break
		}
	}
	return out, nil
}

func onlyShadowRefused(hs []*Handle, rs []store.Result) bool {
	for i, r := range rs {
		if !r.Allowed && !hs[i].policy.Shadow {
			return false
		}
	}
	return true
}

// maxDelayFor returns how long ctx leaves before its deadline, or no bound.
func (l *Limiter) maxDelayFor(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(dl.Sub(l.clock.Now()), 0)
	}
	return time.Duration(math.MaxInt64)
}

// WaitAll blocks until every request can be taken at once, or ctx is done.
// It fails at once with ErrWouldExceedDeadline when ctx's deadline comes
// before the requests could pass. Like WaitN, GCRA-only requests book their
// place with one store call and sleep; requests that include a window policy
// retry when the store says they would pass (booking ahead would charge a
// window other than the one the units are used in). So do requests that
// include a shadow policy, which must neither delay the caller nor be booked
// ahead for a caller that does not wait for it.
func (l *Limiter) WaitAll(ctx context.Context, reqs []Request) error {
	book := true
	for _, r := range reqs {
		h, err := l.Handle(r.Policy)
		if err != nil {
			return err
		}
		book = book && h.policy.Algorithm == store.GCRA && !h.policy.Shadow
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		maxDelay := l.maxDelayFor(ctx)
		var ahead time.Duration
		if book {
			ahead = maxDelay
		}
		d, err := l.takeAll(ctx, reqs, ahead)
		if err != nil {
			return err
		}
		if d.Allowed {
			if d.delay <= 0 {
				return nil
			}
			if err := sleep(ctx, l.clock, d.delay); err != nil {
				// Give every booked unit back; none will be used.
				bg := context.WithoutCancel(ctx)
				for _, it := range d.items {
					_, _ = l.store.Settle(bg, store.SettleParams{Key: it.Key, Limit: it.Limit, Reserved: it.Cost, ReservedAt: d.at})
				}
				return err
			}
			return nil
		}
		if d.RetryAfter > maxDelay {
			return fmt.Errorf("%w: all-or-nothing request needs %s", ErrWouldExceedDeadline, d.RetryAfter)
		}
		if err := sleep(ctx, l.clock, d.RetryAfter); err != nil {
			return err
		}
	}
}
