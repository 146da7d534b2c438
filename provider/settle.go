package provider

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
)

// Kind is what a response meant under a profile. The zero value is no
// outcome.
type Kind uint8

// The kinds.
const (
	// OK: the call succeeded.
	OK Kind = iota + 1
	// Throttled: the provider refused for rate reasons (a 429, THROTTLED
	// inside a 200). Delay the work, never fail it.
	Throttled
	// Banned: the provider banned the key (Binance's 418). The key is open
	// for every process sharing the store until the ban ends.
	Banned
	// Unknown: the call may or may not have taken effect (a 5xx after an
	// order was sent). Not retried blindly: check the provider first.
	Unknown
	// Permanent: the call will fail again as it is (MAX_COST_EXCEEDED, a
	// 4xx). Never retried.
	Permanent
	// Failed: a transient failure (a timeout or 5xx on an idempotent
	// call) that may be retried.
	Failed
)

var kindNames = [...]string{OK: "ok", Throttled: "throttled", Banned: "banned", Unknown: "unknown", Permanent: "permanent", Failed: "failed"}

// String returns the kind's name.
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Outcome is what Settle made of a response. A plain value.
type Outcome struct {
	Kind Kind
	// Retry says whether the same call may be tried again: after Delay
	// (and a new Reserve) for throttles, bans and transient failures;
	// never for unknown outcomes and permanent errors.
	Retry bool
	// Delay is how long the provider asked to wait (a Retry-After, a ban's
	// length, the refill a throttled query needs); 0 when it did not say.
	Delay time.Duration
	// Refunded is what settling gave back of the call's cost limits
	// (requested minus actual cost).
	Refunded int64
	// Report is the response as package signal read it.
	Report signal.Report
}

var sourceOf = map[string]signal.Source{
	"shopify-graphql": signal.SourceShopifyGraphQL,
	"shopify-rest":    signal.SourceShopifyREST,
	"binance":         signal.SourceBinance,
	"x-ratelimit":     signal.SourceXRateLimit,
	"ietf":            signal.SourceIETF | signal.SourceIETFLegacy | signal.SourceXRateLimit,
}

// Settle applies a reserved call's response: it classifies the response by
// the profile's outcomes; refunds what limits charged by cost reserved
// above the actual cost (a throttled query was not run, so it costs
// nothing); syncs every limit the call touched from what the provider
// reported when the provider's count is higher than the local one; pauses
// the key for every process sharing the store on a throttle that said when
// to come back; and opens the key for the length of a ban. It frees the
// ticket's permits of the per-call leases first, even after ctx ended (see
// Release). Settle a ticket once; a second Settle is ErrSettled.
func (rt *Runtime) Settle(ctx context.Context, t *Ticket, resp signal.Response) (Outcome, error) {
	if t == nil {
		return Outcome{}, ErrSettled
	}
	// The call is done: its concurrency permits free whatever follows.
	_ = rt.Release(ctx, t)
	if !t.settled.CompareAndSwap(false, true) {
		return Outcome{}, ErrSettled
	}
	now := rt.storeNow()
	nowUS := now.UnixMicro()
	if now.IsZero() {
		nowUS = rt.clk.Now().UnixMicro()
	}
	var o Outcome
	rt.parser.ParseTo(&o.Report, nowUS, resp)
	rep := &o.Report
	gql, _ := signal.ShopifyGraphQL(resp.Body)
	o.Kind = rt.classify(rep, &gql, resp.Status, t.idempotent)
	switch o.Kind {
	case Throttled, Banned, Failed:
		o.Retry = true
	}
	if rep.HasRetryAfter {
		o.Delay = time.Duration(rep.RetryAfter) * time.Microsecond
	}
	var errs []error
	// Refund or charge the difference to the actual cost.
	for _, it := range t.items {
		if rt.p.Limits[it.limit].Charge != ChargeCost {
			continue
		}
		var actual int64
		switch {
		case gql.Throttled:
			actual = 0 // not run: Shopify charged nothing
		case rep.HasCost && rep.CostActual >= 0 && resp.Err == nil:
			actual = int64(math.Ceil(rep.CostActual))
		default:
			continue
		}
		if actual == it.store.Cost {
			continue
		}
		if _, err := rt.store.Settle(ctx, store.SettleParams{Key: it.store.Key, Limit: it.store.Limit,
			Reserved: it.store.Cost, Actual: actual, ReservedAt: t.at, Now: now}); err != nil {
			errs = append(errs, err)
		} else if it.store.Cost > actual {
			o.Refunded += it.store.Cost - actual
		}
	}
	// Sync from what the provider reported.
	for _, it := range t.items {
		if err := rt.sync(ctx, it, rep, resp, now); err != nil {
			errs = append(errs, err)
		}
	}
	// Pause or open the key for the fleet.
	switch {
	case o.Kind == Banned:
		d := o.Delay
		if d <= 0 {
			d = rt.p.BanDefault
			o.Delay = d
		}
		if _, err := rt.store.Sync(ctx, store.SyncParams{Key: rt.prefix + t.Key, Limit: rt.banLimit(), ResetAfter: d, Now: now}); err != nil {
			errs = append(errs, err)
		}
	case o.Kind == Throttled && rep.Sources&signal.SourceRetryAfter != 0 && o.Delay > 0:
		if _, err := rt.store.Sync(ctx, store.SyncParams{Key: rt.prefix + t.Key, Limit: rt.pauseLimit(), ResetAfter: o.Delay, Now: now}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("provider %s: settle: %w", rt.p.Name, err)
	}
	return o, nil
}

// classify applies the profile's outcome rules, then package signal's
// class.
func (rt *Runtime) classify(rep *signal.Report, gql *signal.GraphQLCost, status int, idempotent bool) Kind {
	match := func(rules []Rule) bool {
		for _, r := range rules {
			if len(r.Status) > 0 && !slices.Contains(r.Status, status) {
				continue
			}
			switch r.GraphQL {
			case "THROTTLED":
				if !gql.Throttled {
					continue
				}
			case "MAX_COST_EXCEEDED":
				if !gql.TooCostly {
					continue
				}
			}
			switch r.If {
			case "retry_after":
				if !rep.HasRetryAfter {
					continue
				}
			case "exhausted":
				if rep.Known&signal.FieldRemaining == 0 || rep.Remaining != 0 {
					continue
				}
			}
			return true
		}
		return false
	}
	os := &rt.p.Outcomes
	switch {
	case rep.Class == signal.ClassCanceled:
		return Failed
	case match(os.Ban):
		return Banned
	case match(os.Throttle):
		return Throttled
	case match(os.Permanent):
		return Permanent
	case status != 0 && match(os.Unknown) || rep.Unknown:
		if idempotent {
			return Failed
		}
		return Unknown
	case rep.Class == signal.ClassSuccess:
		return OK
	case rep.Class == signal.ClassTransient:
		return Failed
	}
	return Permanent
}

// perSecond encodes r units a second as a whole rate per period: exactly
// per second when r is whole, else in thousandths over 1000 s.
func perSecond(r float64) (int64, time.Duration) {
	if r == math.Trunc(r) && r >= 1 && r <= float64(maxCount) {
		return int64(r), time.Second
	}
	return min(max(1, int64(math.Round(r*1000))), maxCount), 1000 * time.Second
}

// sync brings one limit's local state down to what the provider reported,
// when the provider counts more used (fewer remaining) than the store does,
// and learns the limit's capacity and rate when the profile says to.
func (rt *Runtime) sync(ctx context.Context, it item, rep *signal.Report, resp signal.Response, now time.Time) error {
	l := rt.p.Limits[it.limit]
	if l.Sync == nil {
		return nil
	}
	if l.Resource != "" && rt.p.ResourceHeader != "" {
		if r := resp.Header.Get(rt.p.ResourceHeader); r != "" && r != l.Resource {
			return nil // the headers describe another resource
		}
	}
	src := sourceOf[l.Sync.Source]
	var pol *signal.Policy
	for i := range rep.Policies[:rep.NPolicies] {
		p := &rep.Policies[i]
		if p.Source&src == 0 || (l.Sync.Policy != "" && p.Name != l.Sync.Policy) {
			continue
		}
		if l.Sync.Window > 0 && (p.Known&signal.FieldWindow == 0 || p.Window != l.Sync.Window.Microseconds()) {
			continue
		}
		if p.Known&(signal.FieldRemaining|signal.FieldUsed) == 0 {
			continue
		}
		pol = p
		break
	}
	if pol == nil {
		return nil
	}
	lim := it.store.Limit
	if l.Sync.Learn && pol.Known&signal.FieldLimit != 0 && pol.Limit > 0 {
		ll := learnedLimit{capacity: pol.Limit}
		switch {
		case rep.RestoreRate > 0 && pol.Source == signal.SourceShopifyGraphQL:
			ll.rate, ll.per = perSecond(rep.RestoreRate)
		case pol.Known&signal.FieldWindow != 0 && pol.Window > 0:
			ll.rate, ll.per = pol.Limit, time.Duration(pol.Window)*time.Microsecond
		case l.Capacity > 0 && l.Per > 0:
			// The provider said its size, not its rate: plans scale both
			// (Shopify REST: 40 at 2/s, Plus 400 at 20/s).
			ll.rate, ll.per = perSecond(float64(l.Rate) / l.Per.Seconds() * float64(pol.Limit) / float64(l.Capacity))
		}
		ll.capacity = min(ll.capacity, maxCount)
		// A size or rate the store cannot enforce (finer than a unit a
		// microsecond, say) is not learned: the key keeps what it had.
		if cand := rt.limitWith(it.limit, &ll); cand.Validate() == nil {
			rt.learned.Store(learnedKey{it.limit, it.key}, ll)
			lim = cand
		}
	}
	var remaining int64
	switch {
	case pol.Known&signal.FieldRemaining != 0:
		remaining = pol.Remaining
	default:
		capacity := lim.Max()
		if pol.Known&signal.FieldLimit != 0 {
			capacity = pol.Limit
		}
		remaining = max(capacity-pol.Used, 0)
	}
	remaining = min(remaining, lim.Max())
	peek, err := rt.store.Take(ctx, store.TakeParams{Key: it.store.Key, Limit: lim, Cost: 0, Now: now})
	if err != nil {
		return err
	}
	if lim.Algorithm == store.GCRA {
		// Compare the levels, not the whole units remaining: the local
		// level between two units (39.7 used of 40 reads as 0 remaining)
		// may be below the provider's count (40 used), whose bucket started
		// leaking later (it counts a call when the call arrives, the local
		// bucket when it was reserved, and calls arrive after uneven
		// delays). Whole units would keep such a level, and the next call
		// reserved would reach a provider short of room for it (a 429 at
		// the boundary). Charge the difference rather than set the level:
		// a reservation taken between the peek and now is not forgotten
		// (it is charged again at worst, which only errs on the safe side).
		g := lim.GCRA()
		want := (g.Burst - remaining) * g.Interval() // the provider's count, in microseconds of the bucket
		if have := peek.ResetAfter.Microseconds(); want > have {
			_, err = rt.store.Take(ctx, store.TakeParams{Key: it.store.Key, Limit: microLimit(lim), Cost: want - have,
				MaxDelay: time.Duration(math.MaxInt64), Now: now})
		}
		return err
	}
	if remaining >= peek.Remaining {
		return nil // the local count is the higher: keep it
	}
	var reset time.Duration
	if remaining == 0 && pol.Known&signal.FieldResetAfter != 0 {
		reset = time.Duration(pol.ResetAfter) * time.Microsecond
	}
	_, err = rt.store.Sync(ctx, store.SyncParams{Key: it.store.Key, Limit: lim, Remaining: remaining, ResetAfter: reset, Now: now})
	return err
}

// microLimit is the GCRA limit l measured in microseconds: the same name,
// so the same state (a TAT), and the same tolerance, with an interval of
// one microsecond, so that a Take charges its cost in microseconds of the
// bucket, a fraction of one of l's units.
func microLimit(l store.Limit) store.Limit {
	g := l.GCRA()
	return store.Limit{Name: l.Name, Algorithm: store.GCRA, Rate: 1, Period: time.Microsecond, Burst: g.Burst * g.Interval()}
}
