package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/lease"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

var (
	// ErrInvalidConfig is wrapped by NewRuntime for a Config it cannot use.
	ErrInvalidConfig = errors.New("provider: invalid config")
	// ErrCostExceedsLimit: a call costs more than a limit can ever hold (a
	// Shopify query above the bucket's size, which Shopify refuses with
	// MAX_COST_EXCEEDED). Permanent: make the call smaller; never retry.
	ErrCostExceedsLimit = errors.New("provider: cost exceeds what the limit can ever hold")
	// ErrSettled: a ticket was settled twice, or was never OK.
	ErrSettled = errors.New("provider: ticket already settled")
)

// Config configures a Runtime. Zero fields take the documented defaults.
type Config struct {
	// Profile is the profile to apply. Required.
	Profile *Profile
	// Store keeps the limits' state, the pauses and the bans. Processes
	// sharing a store (Redis, PostgreSQL) share every key's budget. Nil
	// means a new in-memory store of this runtime alone.
	Store store.RateStore
	// Leases keeps the permits of the profile's leases held around every
	// call (Lease.Hold HoldCall). Nil means Store when it is a
	// store.LeaseStore (Redis, PostgreSQL: shared by the fleet), else the
	// leases Store can keep (store.LeaseKeeper: memstore; a new lease
	// state per Runtime, so pass one Leases to Runtimes that share a
	// memstore), else a new in-memory store.
	Leases store.LeaseStore
	// Prefix starts every store key. Empty means "provider:".
	Prefix string
	// Clock times Wait's sleeps. Nil means the real clock; the store's clock
	// decides what is allowed.
	Clock clock.Clock
	// Signal configures the response parser (its Retry-After clamp).
	Signal signal.Config
	// Now overrides the store's clock in every store call. Tests only.
	Now func() time.Time
}

// Runtime applies a profile's limits to calls, over a store. It is safe
// for concurrent use; build it with NewRuntime (the zero value is not
// usable). The sizes and rates it learns from responses (Sync.Learn) are
// kept per key in this process; the limits' state is in the store.
type Runtime struct {
	p      *Profile
	store  store.RateStore
	prefix string
	clk    clock.Clock
	parser *signal.Parser
	now    func() time.Time

	// callLeases are the profile's leases held around every call, and
	// leaser holds them (nil when there are none); see hold.go.
	callLeases []Lease
	leaser     *lease.Leaser

	// learned holds, per limit and key, the capacity and rate a provider
	// reported (Sync.Learn), in this process.
	learned sync.Map // learnedKey -> learnedLimit
}

type learnedKey struct {
	limit int
	key   string
}

type learnedLimit struct {
	capacity int64
	rate     int64 // units per per; 0 = the profile's
	per      time.Duration
}

// NewRuntime validates cfg and returns a Runtime.
func NewRuntime(cfg Config) (*Runtime, error) {
	if cfg.Profile == nil {
		return nil, fmt.Errorf("%w: no profile", ErrInvalidConfig)
	}
	parser, err := signal.New(cfg.Signal)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	rt := &Runtime{p: cfg.Profile, store: cfg.Store, prefix: cfg.Prefix, clk: clock.Or(cfg.Clock), parser: parser, now: cfg.Now}
	if rt.store == nil {
		rt.store = memstore.New(memstore.Config{Clock: cfg.Clock})
	}
	if rt.prefix == "" {
		rt.prefix = "provider:"
	}
	if rt.callLeases = cfg.Profile.CallLeases(); len(rt.callLeases) > 0 {
		if rt.leaser, err = lease.New(lease.Config{Store: leaseStore(cfg.Leases, rt.store, &cfg), Clock: cfg.Clock}); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	return rt, nil
}

// Profile returns the runtime's profile.
func (rt *Runtime) Profile() *Profile { return rt.p }

// Store returns the store the runtime decides against.
func (rt *Runtime) Store() store.RateStore { return rt.store }

func (rt *Runtime) storeNow() time.Time {
	if rt.now == nil {
		return time.Time{}
	}
	return rt.now()
}

// Call describes one upstream call.
type Call struct {
	// Key is the key of every scope not in Keys: the shop, the account,
	// the token. It is normalized by the profile's key rule.
	Key string
	// Keys gives a key per scope where they differ (Binance: "ip" and
	// "account").
	Keys map[string]string
	// Method and Path select the route (its costs and resource). Empty
	// matches only routes of method "*" and path "/*".
	Method, Path string
	// Cost is what limits charged by cost spend: a GraphQL query's
	// requested cost. Zero means 1.
	Cost int64
}

// Ticket is a call's reservation. Settle an OK ticket exactly once with the
// call's response. It is safe for concurrent use.
type Ticket struct {
	// OK reports whether every limit had room: the units are charged and
	// the call may go now. When false nothing was charged.
	OK bool
	// Delay is, when not OK, how long until the call could pass: for a
	// cost bucket (cost - available) / restore rate.
	Delay time.Duration
	// Reason names what refused: a limit's name, a per-call lease's name
	// (Busy), "paused" (a Retry-After the fleet honours) or "banned" (the
	// key's breaker is open until a ban ends).
	Reason string
	// Busy reports that no permit of a per-call lease (Reason) freed
	// within ReserveWithin's wait; Delay is then when one frees at the
	// latest if nobody renews it.
	Busy bool
	// Key is the call's primary key, normalized: what pauses and bans are
	// kept per.
	Key string

	items      []item
	at         int64
	idempotent bool
	settled    atomic.Bool

	mu     sync.Mutex
	leases []*lease.Lease // per-call permits held until Settle or Release
}

type item struct {
	limit int // index in Profile.Limits
	key   string
	store store.Item
}

// Item names in the store: the pause and the ban of a key are GCRA limits
// so fast they never hold anything back until a Sync with nothing remaining
// pushes them into the future (outbound's pauseLimit does the same).
func (rt *Runtime) pauseLimit() store.Limit {
	return store.Limit{Name: rt.p.Name + ".pause", Rate: 1, Period: time.Microsecond, Burst: 1000}
}

func (rt *Runtime) banLimit() store.Limit {
	return store.Limit{Name: rt.p.Name + ".ban", Rate: 1, Period: time.Microsecond, Burst: 1000}
}

func (rt *Runtime) scopeKey(c *Call, scope string) (string, error) {
	k, ok := c.Keys[scope]
	if !ok {
		k = c.Key
	}
	if k == "" {
		return "", fmt.Errorf("%w: no key for scope %q of profile %s", ErrInvalidKey, scope, rt.p.Name)
	}
	return rt.p.NormalizeKey(k)
}

// limitFor returns the store limit of Profile.Limits[i] for key, with what
// the provider reported about it learned.
func (rt *Runtime) limitFor(i int, key string) store.Limit {
	var ll *learnedLimit
	if v, ok := rt.learned.Load(learnedKey{i, key}); ok {
		l := v.(learnedLimit)
		ll = &l
	}
	return rt.limitWith(i, ll)
}

// limitWith returns the store limit of Profile.Limits[i] with ll learned.
func (rt *Runtime) limitWith(i int, ll *learnedLimit) store.Limit {
	l := rt.p.Limits[i]
	if ll != nil {
		l.Capacity = ll.capacity
		if ll.rate > 0 && !l.Algorithm.windowed() {
			l.Rate, l.Per = ll.rate, ll.per
		}
	}
	return l.StoreLimit(rt.p.Name + "." + l.Name)
}

// plan resolves a call to the store items it is charged.
func (rt *Runtime) plan(c *Call) (items []item, primary string, idempotent bool, err error) {
	method, path := c.Method, c.Path
	if method == "" {
		method = "*"
	}
	route, found := rt.p.Route(method, path)
	resource := route.Resource
	if resource == "" {
		resource = rt.p.DefaultResource
	}
	idempotent = method == "*" || defaultIdempotent(method)
	if found && route.Idempotent != nil {
		idempotent = *route.Idempotent
	}
	cost := c.Cost
	if cost == 0 {
		cost = 1
	}
	if cost < 0 {
		return nil, "", false, fmt.Errorf("provider %s: negative cost %d", rt.p.Name, c.Cost)
	}
	for i, l := range rt.p.Limits {
		if l.Resource != "" && l.Resource != resource {
			continue
		}
		var n int64
		switch l.Charge {
		case ChargeRequest:
			n = 1
		case ChargeCost:
			n = cost
		default:
			n = route.Costs[l.Charge]
		}
		if n == 0 {
			continue
		}
		k, err := rt.scopeKey(c, l.Scope)
		if err != nil {
			return nil, "", false, err
		}
		if primary == "" {
			primary = k
		}
		sl := rt.limitFor(i, k)
		items = append(items, item{limit: i, key: k, store: store.Item{Key: rt.prefix + k, Limit: sl, Cost: n}})
	}
	if primary == "" {
		scope := ""
		if len(rt.p.Limits) > 0 {
			scope = rt.p.Limits[0].Scope
		} else if len(rt.p.Leases) > 0 {
			scope = rt.p.Leases[0].Scope
		}
		if primary, err = rt.scopeKey(c, scope); err != nil {
			return nil, "", false, err
		}
	}
	return items, primary, idempotent, nil
}

func defaultIdempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// Reserve charges every limit the call touches, all or nothing, together
// with the key's fleet-wide pause and ban. When a limit has no room, or the
// key is paused or banned, nothing is charged and the Ticket says why and
// for how long (the proactive rule: a call that would not fit is not made).
// A call costing more than a limit can ever hold is ErrCostExceedsLimit.
//
// When the profile has leases held around every call (Lease.Hold
// HoldCall), Reserve first takes one permit of each for the call, waiting
// until one frees or ctx ends (ctx's error then); an OK ticket holds them
// until Settle or Release, a ticket that is not OK holds none.
func (rt *Runtime) Reserve(ctx context.Context, c Call) (*Ticket, error) {
	return rt.reserve(ctx, c, -1)
}

// ReserveWithin is Reserve waiting at most maxWait (on the runtime's
// clock; zero: not at all) for the permits of the per-call leases; when
// one does not free by then, the ticket is not OK and says Busy.
func (rt *Runtime) ReserveWithin(ctx context.Context, c Call, maxWait time.Duration) (*Ticket, error) {
	return rt.reserve(ctx, c, max(maxWait, 0))
}

func (rt *Runtime) reserve(ctx context.Context, c Call, leaseWait time.Duration) (_ *Ticket, err error) {
	items, primary, idem, err := rt.plan(&c)
	if err != nil {
		return nil, err
	}
	held, b, err := rt.hold(ctx, &c, leaseWait)
	if err != nil {
		return nil, err
	}
	if b != nil {
		t := &Ticket{Key: primary, Reason: b.name, Delay: b.delay, Busy: true}
		t.settled.Store(true)
		return t, nil
	}
	keep := false
	defer func() {
		if !keep {
			_ = releaseLeases(ctx, held)
		}
	}()
	all := make([]store.Item, 0, len(items)+2)
	all = append(all,
		store.Item{Key: rt.prefix + primary, Limit: rt.banLimit(), Cost: 1},
		store.Item{Key: rt.prefix + primary, Limit: rt.pauseLimit(), Cost: 1})
	for _, it := range items {
		all = append(all, it.store)
	}
	res, err := rt.store.TakeAll(ctx, store.TakeAllParams{Items: all, Now: rt.storeNow()})
	if err != nil {
		if errors.Is(err, store.ErrCostExceedsLimit) {
			return nil, fmt.Errorf("%w: provider %s: %w", ErrCostExceedsLimit, rt.p.Name, err)
		}
		return nil, fmt.Errorf("provider %s: store: %w", rt.p.Name, err)
	}
	if len(res.Results) != len(all) {
		return nil, fmt.Errorf("provider %s: store answered %d results for %d items", rt.p.Name, len(res.Results), len(all))
	}
	t := &Ticket{OK: res.Allowed, Key: primary, items: items, idempotent: idem}
	if res.Allowed {
		t.at = res.Results[0].At
		t.leases, keep = held, true
		return t, nil
	}
	t.settled.Store(true)
	// The reason is what refuses longest; a ban before anything else.
	for i, r := range res.Results {
		if r.Allowed || (r.RetryAfter <= t.Delay && t.Reason != "") {
			continue
		}
		t.Delay = r.RetryAfter
		switch i {
		case 0:
			t.Reason = "banned"
		case 1:
			t.Reason = "paused"
		default:
			t.Reason = rt.p.Limits[items[i-2].limit].Name
		}
	}
	if !res.Results[0].Allowed {
		t.Reason, t.Delay = "banned", res.Results[0].RetryAfter
	}
	return t, nil
}

// Wait reserves the call, sleeping on the runtime's clock while the answer
// is "not yet", until it is charged or ctx ends. It fails at once when ctx's
// deadline comes before the call could pass.
func (rt *Runtime) Wait(ctx context.Context, c Call) (*Ticket, error) {
	for {
		t, err := rt.Reserve(ctx, c)
		if err != nil || t.OK {
			return t, err
		}
		if dl, ok := ctx.Deadline(); ok && rt.clk.Now().Add(t.Delay).After(dl) {
			return t, fmt.Errorf("provider %s: %s for %s: %w", rt.p.Name, t.Reason, t.Delay, context.DeadlineExceeded)
		}
		tm := rt.clk.NewTimer(max(t.Delay, time.Millisecond))
		select {
		case <-tm.C():
		case <-ctx.Done():
			tm.Stop()
			return t, ctx.Err()
		}
	}
}
