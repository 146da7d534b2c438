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

	_ store.RateStore = (*Store)(nil)
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
	// Redis is far away and idle).
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
	maxInFlight int
	maxBatch    int

	mu       sync.Mutex
	inFlight int     // round trips under way (direct calls and pipelines)
	queue    []*call // calls waiting for the next pipeline

	// For tests: pipelines sent by the batcher and the calls they carried.
	pipelines, batched atomic.Int64

	sub leaseSub // lease.go: the subscription to released permits
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
	switch client.(type) {
	case *redis.ClusterClient:
		s.routing = cluster
	case *redis.Ring:
		s.routing = ring
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

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// result builds a Result from the script's five numbers for one item.
func result(l *store.Limit, now int64, v []int64) store.Result {
	return store.Result{
		Allowed:    v[0] == 1,
		Limit:      l.Max(),
		Remaining:  v[1],
		RetryAfter: micros(v[2]),
		ResetAfter: micros(v[3]),
		Delay:      micros(v[4]),
		At:         now,
	}
}

// Take implements store.RateStore.
func (s *Store) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	keys, args, g, err := s.takeArgs(&p)
	if err != nil {
		return store.Result{}, err
	}
	v, err := s.run(ctx, keys, args, true, g)
	return takeResult(&p.Limit, args, v, err)
}

// takeArgs validates a Take and returns its script call's keys and
// arguments, and its group.
func (s *Store) takeArgs(p *store.TakeParams) ([]string, []any, group, error) {
	// The checks of memstore.Take and store.Eval, in their order.
	if p.Key == "" {
		return nil, nil, group{}, store.ErrEmptyKey
	}
	if err := p.Limit.Validate(); err != nil {
		return nil, nil, group{}, err
	}
	if err := store.CheckCost(p.Limit, p.Cost); err != nil {
		return nil, nil, group{}, err
	}
	alg, x, y, err := limitArgs(&p.Limit)
	if err != nil {
		return nil, nil, group{}, err
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return nil, nil, group{}, err
	}
	key, tag := rateKey(s.prefix, p.Key, p.Limit.Name)
	md := maxDelay(p.MaxDelay)
	if alg != 0 {
		return []string{key}, []any{"t", now, md, alg, x, y, p.Cost}, s.groupOf(tag), nil
	}
	// GCRA, the common case: the script's "g", whose trailing zeros
	// (the server clock, no delay) are left out.
	args := make([]any, 4, 6)
	args[0], args[1], args[2], args[3] = "g", x, y, p.Cost
	switch {
	case md != 0:
		args = append(args, now, md)
	case now != 0:
		args = append(args, now)
	}
	return []string{key}, args, s.groupOf(tag), nil
}

// takeTimes returns the instant (0: the server clock) and the max delay of
// the Take whose call's arguments are args.
func takeTimes(args []any) (now, md int64) {
	if args[0] != "g" {
		return args[1].(int64), args[2].(int64)
	}
	if len(args) > 4 {
		now = args[4].(int64)
	}
	if len(args) > 5 {
		md = args[5].(int64)
	}
	return now, md
}

// appendBatchTake appends to a "b" call's arguments those of the Take
// whose own call's arguments are args: now, max delay, alg, x, y, cost.
func appendBatchTake(b, args []any) []any {
	now, md := takeTimes(args)
	if args[0] != "g" {
		return append(append(b, now, md), args[3:]...)
	}
	return append(append(b, now, md, int64(0)), args[1:4]...)
}

// takeResult reads the reply of a Take whose call's arguments were args.
// A "t" reply is now, allowed for all, then the item's five numbers; a
// "g" reply is now, allowed, remaining, reset after, then retry after and
// delay unless they are zero.
func takeResult(l *store.Limit, args []any, v []int64, err error) (store.Result, error) {
	if args[0] != "g" {
		if err == nil {
			err = check(v, 7)
		}
		if err != nil {
			return store.Result{}, err
		}
		return result(l, v[0], v[2:]), nil
	}
	if err == nil && (len(v) < 4 || len(v) > 6 || v[1] < 0) {
		// A failure (a batch hands one as six numbers), or a reply of
		// the wrong length or with an allowed the script never sends.
		if err = check(v, 0); err == nil {
			err = errUnexpectedReply(len(v))
		}
	}
	if err != nil {
		return store.Result{}, err
	}
	var r [5]int64 // allowed, remaining, retry after, reset after, delay
	r[0], r[1], r[3] = v[1], v[2], v[3]
	if len(v) > 4 {
		r[2] = v[4]
	}
	if len(v) > 5 {
		r[4] = v[5]
	}
	return result(l, v[0], r[:]), nil
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
	args := make([]any, 3, 3+4*len(p.Items))
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
		args = append(args, alg, x, y, it.Cost)
	}
	if err := s.sameSlot(p.Items, tags); err != nil {
		return store.AllResult{}, err
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return store.AllResult{}, err
	}
	args[0], args[1], args[2] = "t", now, maxDelay(p.MaxDelay)
	v, err := s.run(ctx, keys, args, false, group{})
	if err == nil {
		err = check(v, 2+5*len(p.Items))
	}
	if err != nil {
		return store.AllResult{}, err
	}
	out := store.AllResult{Allowed: v[1] == 1, Results: make([]store.Result, len(p.Items))}
	for i := range p.Items {
		out.Results[i] = result(&p.Items[i].Limit, v[0], v[2+5*i:])
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
	if p.Key == "" {
		return store.Result{}, store.ErrEmptyKey
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
		r := p.ReservedAt % w
		if r < 0 {
			r += w
		}
		rend = p.ReservedAt - r + w
		// window.Settle's bound on a window's count after a charge.
		most = max(y, window.MaxSlidingProduct/w-1)
		if delta > most {
			return store.Result{}, store.ErrCostExceedsLimit
		}
		delta = max(delta, -2*maxSpan)
	}
	return s.update(ctx, p.Key, &p.Limit, p.Now, "s", alg, x, y, delta, rend, most)
}

// Sync implements store.RateStore.
func (s *Store) Sync(ctx context.Context, p store.SyncParams) (store.Result, error) {
	if p.Key == "" {
		return store.Result{}, store.ErrEmptyKey
	}
	if err := p.Limit.Validate(); err != nil {
		return store.Result{}, err
	}
	alg, x, y, err := limitArgs(&p.Limit)
	if err != nil {
		return store.Result{}, err
	}
	if _, err := nowArg(p.Now); err != nil {
		return store.Result{}, err
	}
	r := min(max(p.Remaining, 0), y)
	ra := max(p.ResetAfter.Microseconds(), -maxSpan)
	if r == 0 && ra >= store.MaxTime {
		// With now > 0 the key would pause past 2^53 (store.EvalSync);
		// the script could not even add it up exactly.
		return store.Result{}, fmt.Errorf("%w: reset after %s", ErrOutOfRange, p.ResetAfter)
	}
	return s.update(ctx, p.Key, &p.Limit, p.Now, "y", alg, x, y, r, ra, 0)
}

// update runs a settle or sync on one key; the reply is a peek after it.
func (s *Store) update(ctx context.Context, key string, l *store.Limit, override time.Time, op string, alg, x, y, a, b, c int64) (store.Result, error) {
	now, err := nowArg(override)
	if err != nil {
		return store.Result{}, err
	}
	rkey, _ := rateKey(s.prefix, key, l.Name)
	v, err := s.run(ctx, []string{rkey}, []any{op, now, alg, x, y, a, b, c}, false, group{})
	if err == nil {
		err = check(v, 6)
	}
	if err != nil {
		return store.Result{}, err
	}
	return result(l, v[0], v[1:]), nil
}

// Reset implements store.RateStore.
func (s *Store) Reset(ctx context.Context, p store.ResetParams) error {
	if p.Key == "" || p.Limit.Name == "" {
		return store.ErrEmptyKey
	}
	key, _ := rateKey(s.prefix, p.Key, p.Limit.Name)
	_, err := s.run(ctx, []string{key}, []any{"r", 0}, false, group{})
	return err
}

//go:embed rate.lua
var rateSource string

var rateScript = redis.NewScript(rateSource)

// check checks a script's reply: n numbers, unless the second says the
// request failed.
func check(v []int64, n int) error {
	if len(v) >= 2 {
		switch v[1] {
		case -1:
			return store.ErrCostExceedsLimit
		case -2:
			return ErrOutOfRange
		}
	}
	if len(v) != n {
		return errUnexpectedReply(len(v))
	}
	return nil
}

func errUnexpectedReply(n int) error {
	return fmt.Errorf("redisstore: unexpected reply of %d numbers from the script", n)
}

// reply reads a script's reply: an array of integers (or, for a reset, one
// integer).
func reply(cmd *redis.Cmd) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		if strings.Contains(err.Error(), "sluice: state beyond 2^53") {
			return nil, fmt.Errorf("%w: %v", ErrOutOfRange, err)
		}
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	switch v := v.(type) {
	case int64:
		return []int64{v}, nil
	case []any:
		out := make([]int64, len(v))
		for i, x := range v {
			n, ok := x.(int64)
			if !ok {
				return nil, fmt.Errorf("redisstore: unexpected reply element %T", x)
			}
			out[i] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("redisstore: unexpected reply %T", v)
}
