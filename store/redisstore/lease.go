package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sluicerl/sluice/store"
)

// Leases: one script call per operation (lease.lua), on Redis TIME. A
// key's permits live in one hash, its fenced values in another, and its
// token counter in a key of its own that never expires, so fencing tokens
// strictly increase per key for as long as Redis keeps its data (with
// persistence, across restarts) while the permits' hash vanishes once the
// last permit ends. All three carry the lease key's hash tag. A release
// PUBLISHes on Prefix+"lease-free"; WatchLease keeps one subscription per
// Store while anyone watches.

var (
	_ store.RateLeaseStore = (*Store)(nil)
	_ store.LeaseWatcher   = (*Store)(nil)
)

//go:embed lease.lua
var leaseSource string

var (
	leaseScript = redis.NewScript(leaseSource + "\nreturn lease_op(KEYS, ARGV)\n")
	// takeAcquireScript is the lease functions and the rate script as a
	// function, so that one call decides rates and a lease together.
	takeAcquireScript = redis.NewScript(leaseSource + "\nlocal function rate_main(KEYS, ARGV)\n" + rateSource + "\nend\n" + takeAcquireSource)
)

const takeAcquireSource = `
-- KEYS H, SEQ, then the rate keys; ARGV 'ta', now, holder, permits, ttl,
-- then a rate 't' call's ARGV. Returns {now, allowed, acquired, token,
-- expires, held, retry after, renewed, then the rate reply}.
local now, override = clock(ARGV[2])
local rkeys, rargv = {}, {}
for i = 3, #KEYS do rkeys[#rkeys + 1] = KEYS[i] end
for i = 6, #ARGV do rargv[#rargv + 1] = ARGV[i] end
local holder, permits, ttl = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local ok, tok, exp, held, retry, renewed = acquire(KEYS[1], KEYS[2], holder, permits, ttl, now, override, false)
local out = { now, 0, ok, tok, exp, held, retry, renewed }
if ok == 0 then
	for i = 1, #rkeys do rargv[3 + i * 4] = 0 end -- a peek
end
local r = rate_main(rkeys, rargv)
if r[2] == -2 or r[2] == -1 then
	return r
end
if ok == 1 and r[2] == 1 then
	out[3], out[4], out[5], out[6], out[7], out[8] = acquire(KEYS[1], KEYS[2], holder, permits, ttl, now, override, true)
	out[2] = 1
elseif ok == 1 then
	out[3], out[4], out[5] = 0, 0, 0
	if renewed == 0 then out[6] = held - 1 end
end
for i = 1, #r do out[8 + i] = r[i] end
return out
`

// leaseKeys returns the permits hash, the token counter and the fenced
// values hash of (name, key), and their hash tag.
func leaseKeys(prefix, name, key string) (h, seq, f, tag string) {
	base, tag := tagKey(prefix, "lease:", key, name)
	return base + ":h", base + ":seq", base + ":f", tag
}

func (s *Store) leaseChannel() string { return s.prefix + "lease-free" }

func wakeID(name, key string) string {
	h := sha1.Sum([]byte(name + "\x1f" + key))
	return hex.EncodeToString(h[:])
}

// runLease runs the lease script and reads its reply: integers, or for
// 'h' holder strings among them (returned as raw).
func (s *Store) runLease(ctx context.Context, sc *redis.Script, keys []string, args ...any) ([]any, error) {
	v, err := sc.Run(ctx, s.client, keys, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	out, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("redisstore: unexpected reply %T", v)
	}
	return out, nil
}

func ints(v []any, n int) ([]int64, error) {
	if len(v) < n {
		return nil, errUnexpectedReply(len(v))
	}
	out := make([]int64, len(v))
	for i, x := range v {
		k, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("redisstore: unexpected reply element %T", x)
		}
		out[i] = k
	}
	return out, nil
}

// Acquire implements store.LeaseStore.
func (s *Store) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	if err := p.Check(); err != nil {
		return store.AcquireResult{}, err
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return store.AcquireResult{}, err
	}
	h, seq, _, _ := leaseKeys(s.prefix, p.Name, p.Key)
	raw, err := s.runLease(ctx, leaseScript, []string{h, seq}, "a", now, p.Holder, p.Permits, p.TTL.Microseconds())
	if err != nil {
		return store.AcquireResult{}, err
	}
	v, err := ints(raw, 7)
	if err != nil {
		return store.AcquireResult{}, err
	}
	return acquireResult(&p, v), nil
}

// acquireResult reads {now, acquired, token, expires, held, retry, renewed}.
func acquireResult(p *store.AcquireParams, v []int64) store.AcquireResult {
	res := store.AcquireResult{Acquired: v[1] == 1, Held: v[4], RetryAfter: micros(v[5]), At: v[0]}
	if res.Acquired {
		res.Renewed = v[6] == 1
		res.Lease = store.Lease{Name: p.Name, Key: p.Key, Holder: p.Holder, Token: v[2], Expires: v[3]}
	}
	return res
}

// Renew implements store.LeaseStore.
func (s *Store) Renew(ctx context.Context, p store.RenewParams) (store.Lease, error) {
	if err := p.Check(); err != nil {
		return store.Lease{}, err
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return store.Lease{}, err
	}
	h, _, _, _ := leaseKeys(s.prefix, p.Name, p.Key)
	raw, err := s.runLease(ctx, leaseScript, []string{h}, "n", now, p.Holder, p.Token, p.TTL.Microseconds())
	if err != nil {
		return store.Lease{}, err
	}
	v, err := ints(raw, 3)
	if err != nil {
		return store.Lease{}, err
	}
	if v[1] != 1 {
		return store.Lease{}, store.ErrLeaseNotHeld
	}
	return store.Lease{Name: p.Name, Key: p.Key, Holder: p.Holder, Token: p.Token, Expires: v[2]}, nil
}

// Release implements store.LeaseStore.
func (s *Store) Release(ctx context.Context, p store.ReleaseParams) error {
	if err := p.Check(); err != nil {
		return err
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return err
	}
	h, _, _, _ := leaseKeys(s.prefix, p.Name, p.Key)
	return s.leaseFlag(ctx, []string{h}, store.ErrLeaseNotHeld, "r", now, p.Holder, p.Token, s.leaseChannel(), wakeID(p.Name, p.Key))
}

// leaseFlag runs a lease script operation whose reply is {now, ok}, and
// returns notOK unless ok is 1.
func (s *Store) leaseFlag(ctx context.Context, keys []string, notOK error, args ...any) error {
	raw, err := s.runLease(ctx, leaseScript, keys, args...)
	if err != nil {
		return err
	}
	v, err := ints(raw, 2)
	if err != nil {
		return err
	}
	if v[1] != 1 {
		return notOK
	}
	return nil
}

// Holders implements store.LeaseStore.
func (s *Store) Holders(ctx context.Context, p store.HoldersParams) ([]store.Lease, error) {
	if err := store.CheckLeaseKey(p.Name, p.Key); err != nil {
		return nil, err
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return nil, err
	}
	h, _, _, _ := leaseKeys(s.prefix, p.Name, p.Key)
	raw, err := s.runLease(ctx, leaseScript, []string{h}, "h", now)
	if err != nil {
		return nil, err
	}
	if len(raw)%3 != 1 {
		return nil, errUnexpectedReply(len(raw))
	}
	out := make([]store.Lease, 0, len(raw)/3)
	for i := 1; i < len(raw); i += 3 {
		holder, ok1 := raw[i].(string)
		tok, ok2 := raw[i+1].(int64)
		exp, ok3 := raw[i+2].(int64)
		if !ok1 || !ok2 || !ok3 {
			return nil, errors.New("redisstore: unexpected holders reply")
		}
		out = append(out, store.Lease{Name: p.Name, Key: p.Key, Holder: holder, Token: tok, Expires: exp})
	}
	return out, nil
}

// FencedWrite implements store.LeaseStore.
func (s *Store) FencedWrite(ctx context.Context, p store.FencedWriteParams) error {
	if err := p.Check(); err != nil {
		return err
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return err
	}
	h, _, f, _ := leaseKeys(s.prefix, p.Name, p.Key)
	return s.leaseFlag(ctx, []string{h, f}, store.ErrStaleToken, "w", now, p.Token, p.Field, p.Value)
}

// FencedRead implements store.LeaseStore.
func (s *Store) FencedRead(ctx context.Context, p store.FencedReadParams) (store.FencedValue, bool, error) {
	if err := store.CheckLeaseKey(p.Name, p.Key); err != nil {
		return store.FencedValue{}, false, err
	}
	_, _, f, _ := leaseKeys(s.prefix, p.Name, p.Key)
	sc, ok := s.client.(redis.Cmdable)
	var vals []any
	var err error
	if ok {
		vals, err = sc.HMGet(ctx, f, "t:"+p.Field, "v:"+p.Field).Result()
	} else {
		vals, err = s.client.EvalRO(ctx, "return redis.call('HMGET', KEYS[1], ARGV[1], ARGV[2])", []string{f}, "t:"+p.Field, "v:"+p.Field).Slice()
	}
	if err != nil {
		return store.FencedValue{}, false, fmt.Errorf("redisstore: %w", err)
	}
	if len(vals) != 2 || vals[0] == nil {
		return store.FencedValue{}, false, nil
	}
	ts, _ := vals[0].(string)
	tok, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return store.FencedValue{}, false, fmt.Errorf("redisstore: bad fenced token %q", ts)
	}
	val, _ := vals[1].(string)
	return store.FencedValue{Value: []byte(val), Token: tok}, true, nil
}

// TakeAllAcquire implements store.RateLeaseStore in one script call. On a
// cluster or ring the rate keys must share the lease key's hash slot (see
// ErrCrossSlot).
func (s *Store) TakeAllAcquire(ctx context.Context, p store.TakeAllAcquireParams) (store.TakeAllAcquireResult, error) {
	lp := p.Lease
	if err := lp.Check(); err != nil {
		return store.TakeAllAcquireResult{}, err
	}
	now, err := nowArg(p.Now)
	if err != nil {
		return store.TakeAllAcquireResult{}, err
	}
	h, seq, _, ltag := leaseKeys(s.prefix, lp.Name, lp.Key)
	keys := []string{h, seq}
	limits := make([][3]int64, len(p.Items))
	costs := make([]int64, len(p.Items))
	for i := range p.Items {
		it := &p.Items[i]
		if err := it.Check(); err != nil {
			return store.TakeAllAcquireResult{}, err
		}
		alg, x, y, err := limitArgs(&it.Limit)
		if err != nil {
			return store.TakeAllAcquireResult{}, err
		}
		k, tag := rateKey(s.prefix, it.Key, it.Limit.Name)
		if err := s.sameSlot([]store.Item{{Key: lp.Key, Limit: store.Limit{Name: lp.Name}}, *it}, []string{ltag, tag}); err != nil {
			return store.TakeAllAcquireResult{}, err
		}
		keys = append(keys, k)
		limits[i], costs[i] = [3]int64{alg, x, y}, it.Cost
	}
	// The lease's arguments, then a rate 't' call's (wire.go).
	args := append([]any{"ta", now, lp.Holder, lp.Permits, lp.TTL.Microseconds()}, takeAllArgs(now, 0, limits, costs)...)
	raw, err := s.runLease(ctx, takeAcquireScript, keys, args...)
	if err != nil {
		return store.TakeAllAcquireResult{}, err
	}
	items := make([]item, len(p.Items))
	if len(raw) < 8 {
		// The rate call failed: its reply, {now, code}.
		if _, _, err = decode(opTakeAll, raw, items); err == nil {
			err = errUnexpectedReply(len(raw))
		}
		return store.TakeAllAcquireResult{}, err
	}
	v, err := ints(raw[:8], 8)
	if err != nil {
		return store.TakeAllAcquireResult{}, err
	}
	at, all, err := decode(opTakeAll, raw[8:], items)
	if err != nil {
		return store.TakeAllAcquireResult{}, err
	}
	out := store.TakeAllAcquireResult{Allowed: v[1] == 1, Lease: acquireResult(&lp, append([]int64{v[0]}, v[2:8]...))}
	out.Rates = store.AllResult{Allowed: all, Results: make([]store.Result, len(p.Items))}
	for i := range p.Items {
		out.Rates.Results[i] = items[i].result(&p.Items[i].Limit, at)
	}
	return out, nil
}

// subscriber is a client that can subscribe: *redis.Client,
// *redis.ClusterClient (a cluster delivers every PUBLISH to every node).
// A *redis.Ring is subscribed shard by shard: a PUBLISH reaches only the
// subscribers of the shard that ran it.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// WatchLease implements store.LeaseWatcher. It needs a client that can
// subscribe; with any other it returns an error.
func (s *Store) WatchLease(ctx context.Context, name, key string) (<-chan struct{}, func(), error) {
	if err := store.CheckLeaseKey(name, key); err != nil {
		return nil, nil, err
	}
	switch s.client.(type) {
	case *redis.Ring, subscriber:
	default:
		return nil, nil, fmt.Errorf("redisstore: client %T cannot subscribe", s.client)
	}
	return s.sub.Watch(ctx, wakeID(name, key), s.subscribe)
}

// subscribe subscribes to the releases' channel; see store.LeaseSubscribe.
func (s *Store) subscribe(ctx context.Context, wake *store.LeaseWakeups) (func(), <-chan struct{}, error) {
	var subs []subscriber
	switch c := s.client.(type) {
	case *redis.Ring:
		var mu sync.Mutex
		err := c.ForEachShard(ctx, func(_ context.Context, shard *redis.Client) error {
			mu.Lock()
			subs = append(subs, shard)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: ring shards: %w", err)
		}
	case subscriber:
		subs = []subscriber{c}
	}
	pss := make([]*redis.PubSub, 0, len(subs))
	stop := func() {
		for _, ps := range pss {
			_ = ps.Close()
		}
	}
	for _, sub := range subs {
		ps := sub.Subscribe(ctx, s.leaseChannel())
		pss = append(pss, ps)
		// Wait for the confirmation: from here on no release is missed.
		if _, err := ps.Receive(ctx); err != nil {
			stop()
			return nil, nil, fmt.Errorf("redisstore: subscribe: %w", err)
		}
	}
	done := make(chan struct{})
	var once sync.Once
	for _, ps := range pss {
		go func() {
			defer once.Do(func() { close(done) })
			for {
				msg, err := ps.Receive(context.Background())
				if err != nil {
					wake.WakeAll()
					return
				}
				if m, ok := msg.(*redis.Message); ok {
					wake.Wake(m.Payload)
				}
			}
		}()
	}
	return stop, done, nil
}
