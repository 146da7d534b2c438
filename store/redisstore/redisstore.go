package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicerl/sluice/gcra"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/window"
)

var (
	// ErrCrossSlot: the keys of one TakeAll hash to different Redis Cluster
	// slots (or, on a ring, carry different hash tags), so no single script
	// can take them all at once. Give them a common hash tag; see the
	// package documentation. The wrapped message names the keys.
	ErrCrossSlot = errors.New("redisstore: the keys of one TakeAll must share a hash slot")
	// ErrOutOfRange: an operation would take a key's state beyond 2^53
	// microseconds (store.MaxTime), the range in which Redis's Lua numbers
	// are exact integers, or its Now is beyond store.MaxNow. Nothing is
	// written. It wraps store.ErrOutOfRange, which every backend returns
	// for the same requests.
	ErrOutOfRange = fmt.Errorf("redisstore: value beyond the exact range of Redis numbers (2^53): %w", store.ErrOutOfRange)
)

// Client is what the store needs from a go-redis client: scripts, and
// pipelines for batching. *redis.Client, *redis.ClusterClient, *redis.Ring
// and redis.UniversalClient all satisfy it.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
	_ Client = (redis.UniversalClient)(nil)

	_ store.RateStore  = (*Store)(nil)
	_ store.RateSharer = (*Store)(nil)
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Prefix starts every key the store writes. Empty means DefaultPrefix
	// ("sluice:"). A prefix may carry a hash tag ("sluice:{rl}:"): every
	// key of the store then hashes to that one slot, so that a TakeAll may
	// combine any keys even on a cluster, at the cost of one node holding
	// all the state. Otherwise it must not contain '{'.
	Prefix string
	// MaxInFlight is how many round trips one Store keeps under way at
	// once; calls arriving while that many are under way are batched into
	// the next pipeline. Zero means 8. Fewer round trips in flight make
	// larger batches and less work per decision for Redis and the client
	// (best when both are busy); more keep callers from waiting (best when
	// Redis is far away and idle). `sluice serve`, whose callers are many
	// concurrent requests, uses 1.
	MaxInFlight int
	// MaxBatch is the most calls one pipeline carries. Zero means 128.
	MaxBatch int
	// Unbatched sends every call on its own, on the caller's goroutine,
	// with no limit on concurrent round trips (what go-redis/redis_rate
	// does). Batching is faster under concurrency; this exists for
	// comparison and for clients that pipeline by themselves.
	Unbatched bool
}

// Store is a store.RateStore on Redis. It is safe for concurrent use, and
// holds no goroutines or connections of its own while idle: the client
// does. Build it with New; the zero value is not usable.
type Store struct {
	client      Client
	prefix      string
	routing     routing
	unbatched   bool
	deadlines   bool // the client bounds its I/O by a context's deadline
	maxInFlight int
	maxBatch    int

	mu       sync.Mutex
	inFlight int     // round trips under way (direct calls and pipelines)
	queue    []*call // calls waiting for the next pipeline

	// For tests: pipelines sent by the batcher and the calls they carried,
	// and the lone round trips made on a goroutine of their own.
	pipelines, batched, spawned atomic.Int64

	sub store.LeaseListener // lease.go: the subscription to released permits
}

type routing uint8

const (
	standalone routing = iota // any keys may go together
	cluster                   // keys of one script must share a slot
	ring                      // keys of one script must share a hash tag
)

// New returns a Store on client.
func New(client Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	_, _, _, prefixTag := userTag(cfg.Prefix)
	if strings.IndexByte(cfg.Prefix, '{') >= 0 && !prefixTag {
		return nil, fmt.Errorf("redisstore: prefix %q has a '{' that opens no hash tag", cfg.Prefix)
	}
	if cfg.MaxInFlight < 0 || cfg.MaxBatch < 0 {
		return nil, fmt.Errorf("redisstore: negative MaxInFlight (%d) or MaxBatch (%d)", cfg.MaxInFlight, cfg.MaxBatch)
	}
	s := &Store{
		client:      client,
		prefix:      cfg.Prefix,
		unbatched:   cfg.Unbatched,
		maxInFlight: cfg.MaxInFlight,
		maxBatch:    cfg.MaxBatch,
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.maxInFlight == 0 {
		s.maxInFlight = 8
	}
	if s.maxBatch == 0 {
		s.maxBatch = 128
	}
	switch c := client.(type) {
	case *redis.Client:
		s.deadlines = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		s.routing = cluster
		s.deadlines = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		s.routing = ring
		s.deadlines = c.Options().ContextTimeoutEnabled
	}
	if prefixTag {
		s.routing = standalone // one tag for every key
	}
	return s, nil
}

// Prefix returns the prefix of every key the store writes.
func (s *Store) Prefix() string { return s.prefix }

const (
	// maxSpan bounds every span passed to the script (burst x interval,
	// window, settle difference): gcra.MaxSpan, the bound package gcra
	// and every other backend apply, so that a state decided at a Now
	// before store.MaxNow stays within 2^53 or is refused alike.
	maxSpan = gcra.MaxSpan
)

// limitArgs returns the script's three numbers for a validated limit.
func limitArgs(l *store.Limit) (alg, x, y int64, err error) {
	if l.Algorithm == store.GCRA {
		gp, err := l.GCRA().Params()
		if err != nil {
			return 0, 0, 0, l.Validate()
		}
		if gp.Burst*gp.Interval > maxSpan {
			return 0, 0, 0, fmt.Errorf("%w %q: burst x interval is %dus, beyond the 2^52us Redis can hold exactly", store.ErrInvalidLimit, l.Name, gp.Burst*gp.Interval)
		}
		return 0, gp.Interval, gp.Burst, nil
	}
	w := l.Period.Microseconds()
	if w > maxSpan {
		return 0, 0, 0, fmt.Errorf("%w %q: window of %dus is beyond the 2^52us Redis can hold exactly", store.ErrInvalidLimit, l.Name, w)
	}
	if l.Rate > maxSpan {
		return 0, 0, 0, fmt.Errorf("%w %q: limit of %d is beyond the 2^52 Redis can count exactly", store.ErrInvalidLimit, l.Name, l.Rate)
	}
	return int64(l.Algorithm), w, l.Rate, nil
}

// nowArg returns the override as the script takes it: Unix microseconds, 0
// for the server clock (as in memstore, the Unix epoch itself means none).
func nowArg(t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, nil
	}
	if err := store.CheckNow(t); err != nil {
		return 0, fmt.Errorf("%w: Now %v", ErrOutOfRange, t)
	}
	return t.UnixMicro(), nil
}

// HonoursDeadline reports that every rate operation returns by its
// context's deadline, whatever the client's settings (see the package
// documentation), so that package guard need not wait for it on a
// goroutine of its own.
func (s *Store) HonoursDeadline() bool { return true }

// Rates returns s (store.RateSharer): its leases' mixed operations charge
// its own rates.
func (s *Store) Rates() store.RateStore { return s }

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// Take implements store.RateStore.
func (s *Store) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	r, err := s.takeRequest(&p)
	if err != nil {
		return store.Result{}, err
	}
	now, _, it, err := s.run(ctx, r, nil)
	if err != nil {
		return store.Result{}, err
	}
	return it.result(&p.Limit, now), nil
}

// takeRequest validates a Take and returns its script call.
func (s *Store) takeRequest(p *store.TakeParams) (request, error) {
	// The checks of memstore.Take and store.Eval, in their order.
	if err := store.CheckKey(p.Key); err != nil {
		return request{}, err
	}
	if err := p.Limit.Validate(); err != nil {
		return request{}, err
	}
	if err := store.CheckCost(p.Limit, p.Cost); err != nil {
		return request{}, err
	}
	alg, x, y, err := limitArgs(&p.Limit)
	if err != nil {
		return request{}, err
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return request{}, err
	}
	key, tag := rateKey(s.prefix, p.Key, p.Limit.Name)
	t := take{group: s.groupOf(tag), now: now, md: maxDelay(p.MaxDelay), alg: alg, x: x, y: y, cost: p.Cost}
	return request{op: t.op(), keys: []string{key}, args: t.args(), single: true, take: t}, nil
}

// maxDelay clamps a MaxDelay to what the script compares with: any delay
// beyond 2^53us admits everything a smaller one would.
func maxDelay(d time.Duration) int64 {
	return min(max(d.Microseconds(), 0), 2*maxSpan)
}

// TakeAll implements store.RateStore: one script decides every item at one
// instant and writes only if all are allowed. On a cluster or ring client
// the items' keys must share a slot (see ErrCrossSlot).
func (s *Store) TakeAll(ctx context.Context, p store.TakeAllParams) (store.AllResult, error) {
	if len(p.Items) == 0 {
		return store.AllResult{Allowed: true}, nil
	}
	keys := make([]string, len(p.Items))
	tags := make([]string, len(p.Items))
	limits := make([][3]int64, len(p.Items))
	costs := make([]int64, len(p.Items))
	for i := range p.Items {
		it := &p.Items[i]
		if err := it.Check(); err != nil {
			return store.AllResult{}, err
		}
		alg, x, y, err := limitArgs(&it.Limit)
		if err != nil {
			return store.AllResult{}, err
		}
		keys[i], tags[i] = rateKey(s.prefix, it.Key, it.Limit.Name)
		limits[i], costs[i] = [3]int64{alg, x, y}, it.Cost
	}
	if err := s.sameSlot(p.Items, tags); err != nil {
		return store.AllResult{}, err
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return store.AllResult{}, err
	}
	items := make([]item, len(p.Items))
	r := request{op: opTakeAll, keys: keys, args: takeAllArgs(now, maxDelay(p.MaxDelay), limits, costs)}
	at, all, _, err := s.run(ctx, r, items)
	if err != nil {
		return store.AllResult{}, err
	}
	out := store.AllResult{Allowed: all, Results: make([]store.Result, len(p.Items))}
	for i := range p.Items {
		out.Results[i] = items[i].result(&p.Items[i].Limit, at)
	}
	return out, nil
}

// sameSlot checks that one script may hold every key on this client.
func (s *Store) sameSlot(items []store.Item, tags []string) error {
	for i := 1; i < len(tags); i++ {
		switch s.routing {
		case cluster:
			if a, b := slot(tags[0]), slot(tags[i]); a != b {
				return fmt.Errorf("%w: key %q of limit %q hashes to slot %d, key %q of limit %q to slot %d; give them a common hash tag such as {%s}",
					ErrCrossSlot, items[0].Key, items[0].Limit.Name, a, items[i].Key, items[i].Limit.Name, b, tags[0])
			}
		case ring:
			if tags[0] != tags[i] {
				return fmt.Errorf("%w: key %q of limit %q has hash tag {%s}, key %q of limit %q {%s}; on a ring every key of one TakeAll needs the same tag",
					ErrCrossSlot, items[0].Key, items[0].Limit.Name, tags[0], items[i].Key, items[i].Limit.Name, tags[i])
			}
		}
	}
	return nil
}

// Settle implements store.RateStore.
func (s *Store) Settle(ctx context.Context, p store.SettleParams) (store.Result, error) {
	if err := store.CheckKey(p.Key); err != nil {
		return store.Result{}, err
	}
	if err := p.Limit.Validate(); err != nil {
		return store.Result{}, err
	}
	if p.Reserved < 0 || p.Actual < 0 {
		return store.Result{}, store.ErrNegativeCost
	}
	alg, x, y, err := limitArgs(&p.Limit)
	if err != nil {
		return store.Result{}, err
	}
	// The Now check comes before the bounds on the difference, as in
	// store.EvalSettle.
	if _, err := nowArg(p.Now); err != nil {
		return store.Result{}, err
	}
	// The script works on the difference; charges too large to count fail
	// as in gcra.Settle and window.Settle (the script checks gcra.Settle's
	// bound on the debt the key already holds). A refund beyond 2^53 is as
	// good as a refund of everything.
	delta := p.Actual - p.Reserved
	var rend, most int64
	if alg == 0 {
		t, tau := x, x*y
		switch {
		case delta > maxSpan/t || -delta > maxSpan/t:
			return store.Result{}, store.ErrCostExceedsLimit
		case delta > 0 && delta*t > maxSpan-tau:
			// Beyond gcra.Settle's bound whatever the state.
			return store.Result{}, store.ErrCostExceedsLimit
		}
		delta *= t
		most = maxSpan - tau // gcra.Settle's bound on the debt after the charge
	} else {
		w := x
		rend = p.ReservedEnd()
		// window.Settle's bound on a window's count after a charge.
		most = max(y, window.MaxSlidingProduct/w-1)
		if delta > most {
			return store.Result{}, store.ErrCostExceedsLimit
		}
		delta = max(delta, -2*maxSpan)
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return store.Result{}, err
	}
	key, _ := rateKey(s.prefix, p.Key, p.Limit.Name)
	return s.update(ctx, &p.Limit, settleRequest(key, now, alg, x, y, delta, rend, most))
}

// Sync implements store.RateStore.
func (s *Store) Sync(ctx context.Context, p store.SyncParams) (store.Result, error) {
	if err := store.CheckKey(p.Key); err != nil {
		return store.Result{}, err
	}
	if err := p.Limit.Validate(); err != nil {
		return store.Result{}, err
	}
	alg, x, y, err := limitArgs(&p.Limit)
	if err != nil {
		return store.Result{}, err
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return store.Result{}, err
	}
	r := min(max(p.Remaining, 0), y)
	ra := max(p.ResetAfter.Microseconds(), -maxSpan)
	if r == 0 && ra >= store.MaxTime {
		// With now > 0 the key would pause past 2^53 (store.EvalSync);
		// the script could not even add it up exactly.
		return store.Result{}, fmt.Errorf("%w: reset after %s", ErrOutOfRange, p.ResetAfter)
	}
	key, _ := rateKey(s.prefix, p.Key, p.Limit.Name)
	return s.update(ctx, &p.Limit, syncRequest(key, now, alg, x, y, r, ra))
}

// update runs a settle or sync of a key under l; the reply is a peek
// after it.
func (s *Store) update(ctx context.Context, l *store.Limit, r request) (store.Result, error) {
	now, _, it, err := s.run(ctx, r, nil)
	if err != nil {
		return store.Result{}, err
	}
	return it.result(l, now), nil
}

// Reset implements store.RateStore.
func (s *Store) Reset(ctx context.Context, p store.ResetParams) error {
	if err := store.CheckKey(p.Key); err != nil {
		return err
	}
	if err := store.CheckID("limit name", p.Limit.Name); err != nil {
		return err
	}
	key, _ := rateKey(s.prefix, p.Key, p.Limit.Name)
	_, _, _, err := s.run(ctx, resetRequest(key), nil)
	return err
}

//go:embed rate.lua
var rateSource string

var rateScript = redis.NewScript(rateSource)
