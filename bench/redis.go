package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/guard"
	"github.com/sluicerl/sluice/store/redisstore"
)

// RedisGroup is the group of the Redis figures.
const RedisGroup Group = "Redis: GCRA take, 1000 keys, always allowed"

// RedisKeys is how many keys the Redis figures spread their decisions over.
const RedisKeys = 1000

// RedisPoolSize is the connection pool of each go-redis client: as many as
// the most goroutines of any case, so that redis_rate (one connection per
// call in flight) never waits for a connection. Sluice's store keeps at most
// redisstore.Config.MaxInFlight (default 8) round trips under way and so
// uses no more than that many of its pool's connections.
const RedisPoolSize = 64

// redis_rate always prefixes its keys with this.
const redisRatePrefix = "rate:"

type redisSection struct {
	url string
	// root starts every key this run writes: Sluice's store prefix, and
	// (after redis_rate's own "rate:") redis_rate's keys.
	root string

	sluiceClient, peerClient *redis.Client
	sluice                   *redisstore.Store
	inflight2                *redisstore.Store // MaxInFlight 2, the earlier default
	guarded                  *guard.Store
	peer                     *redis_rate.Limiter
	peerKeys                 []string
	bare                     *redis.Script
	bareKey                  []string
}

var (
	redisLimit = store.Limit{Name: "p", Rate: allowRate, Period: time.Second, Burst: allowBurst}
	peerLimit  = redis_rate.Limit{Rate: allowRate, Period: time.Second, Burst: allowBurst}
)

func newRedisSection(cfg SharedConfig) *Section {
	r := &redisSection{url: cfg.RedisURL}
	sec := &Section{
		Name:   "redis",
		Groups: []Group{RedisGroup},
		Notes: []string{
			fmt.Sprintf("Redis at %s; each library has its own go-redis v9 client, PoolSize=%d.", cfg.RedisURL, RedisPoolSize),
			"sluice: store/redisstore Store.Take (default Config: batching on, MaxInFlight 8, MaxBatch 128), called directly;",
			"redis_rate: go-redis/redis_rate/v10 Limiter.Allow. Both: rate 1e6/s, burst 2^40, keys cycled over 1000;",
			"bare EVALSHA: a loaded `return 1` script with one key, on Sluice's client (the floor of one round trip).",
			"Decisions run under a context that never ends; the guard rows wrap the store in store/guard (50ms timeout,",
			"as `sluice serve --state redis://` does), so every call has a deadline. The MaxInFlight 2 row shares the keys.",
		},
		open:  r.open,
		close: r.close,
		warm:  r.warm,
	}
	sluiceOp := func(ctx context.Context, i int64) (bool, error) {
		res, err := r.sluice.Take(ctx, store.TakeParams{Key: Keys[i%RedisKeys], Limit: redisLimit, Cost: 1})
		return res.Allowed, err
	}
	inflight2Op := func(ctx context.Context, i int64) (bool, error) {
		res, err := r.inflight2.Take(ctx, store.TakeParams{Key: Keys[i%RedisKeys], Limit: redisLimit, Cost: 1})
		return res.Allowed, err
	}
	guardOp := func(ctx context.Context, i int64) (bool, error) {
		res, err := r.guarded.Take(ctx, store.TakeParams{Key: Keys[i%RedisKeys], Limit: redisLimit, Cost: 1})
		return res.Allowed, err
	}
	peerOp := func(ctx context.Context, i int64) (bool, error) {
		res, err := r.peer.Allow(ctx, r.peerKeys[i%RedisKeys], peerLimit)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}
	bareOp := func(ctx context.Context, _ int64) (bool, error) {
		n, err := r.bare.EvalSha(ctx, r.sluiceClient, r.bareKey).Int64()
		return n == 1, err
	}
	for _, g := range []int{1, 8, 64} {
		sec.Cases = append(sec.Cases,
			SharedCase{ID: fmt.Sprintf("redis/sluice/g%d", g), Label: "sluice redisstore Take", Group: RedisGroup, Workers: g, op: sluiceOp},
			SharedCase{ID: fmt.Sprintf("redis/redis_rate/g%d", g), Label: "redis_rate Allow", Group: RedisGroup, Workers: g, op: peerOp},
		)
		if g == 1 {
			sec.Cases = append(sec.Cases, SharedCase{ID: "redis/evalsha/g1", Label: "bare EVALSHA `return 1`", Group: RedisGroup, Workers: 1, Reference: true, op: bareOp})
		}
	}
	sec.Cases = append(sec.Cases, SharedCase{ID: "redis/sluice-inflight2/g8", Label: "(ref) sluice redisstore, MaxInFlight 2", Group: RedisGroup, Workers: 8, Reference: true, op: inflight2Op})
	for _, g := range []int{1, 64} {
		sec.Cases = append(sec.Cases, SharedCase{ID: fmt.Sprintf("redis/sluice-guard/g%d", g), Label: "(ref) sluice guard.Store over redisstore", Group: RedisGroup, Workers: g, Reference: true, op: guardOp})
	}
	return sec
}

func (r *redisSection) open(ctx context.Context) error {
	opt, err := redis.ParseURL(r.url)
	if err != nil {
		return fmt.Errorf("redis URL %q: %w", r.url, err)
	}
	opt.PoolSize = RedisPoolSize
	r.sluiceClient = redis.NewClient(opt)
	peerOpt := *opt
	r.peerClient = redis.NewClient(&peerOpt)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := r.sluiceClient.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("redis at %s is unreachable: %w", r.url, err)
	}

	r.root = uniqueName("sluicebench:") + ":"
	if r.sluice, err = redisstore.New(r.sluiceClient, redisstore.Config{Prefix: r.root}); err != nil {
		return err
	}
	if r.inflight2, err = redisstore.New(r.sluiceClient, redisstore.Config{Prefix: r.root, MaxInFlight: 2}); err != nil {
		return err
	}
	if r.guarded, err = guard.New(r.sluice, guard.Config{}); err != nil {
		return err
	}
	r.peer = redis_rate.NewLimiter(r.peerClient)
	r.peerKeys = make([]string, RedisKeys)
	for i := range r.peerKeys {
		r.peerKeys[i] = r.root + "rr:" + Keys[i]
	}
	r.bare = redis.NewScript("return 1")
	r.bareKey = []string{r.root + "bare"}
	return r.bare.Load(ctx, r.sluiceClient).Err()
}

// warm touches every key once through each library and opens connections.
func (r *redisSection) warm(ctx context.Context) error {
	for i := range int64(RedisKeys) {
		if _, err := r.sluice.Take(ctx, store.TakeParams{Key: Keys[i], Limit: redisLimit, Cost: 1}); err != nil {
			return err
		}
		if _, err := r.peer.Allow(ctx, r.peerKeys[i], peerLimit); err != nil {
			return err
		}
	}
	return nil
}

// close deletes every key of this run (SCAN + DEL) and closes the clients.
func (r *redisSection) close(ctx context.Context) error {
	var errs []error
	if r.sluiceClient != nil && r.root != "" {
		for _, pattern := range []string{r.root + "*", redisRatePrefix + r.root + "*"} {
			if err := deleteKeys(ctx, r.sluiceClient, pattern); err != nil {
				errs = append(errs, err)
			}
		}
		if n, err := redisKeysLeft(ctx, r.sluiceClient, r.root); err != nil || n > 0 {
			errs = append(errs, fmt.Errorf("redis: %d keys of %s left after cleanup (%v)", n, r.root, err))
		}
	}
	for _, c := range []*redis.Client{r.sluiceClient, r.peerClient} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	*r = redisSection{url: r.url}
	return errors.Join(errs...)
}

// deleteKeys deletes every key matching pattern.
func deleteKeys(ctx context.Context, c *redis.Client, pattern string) error {
	var batch []string
	it := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		batch = append(batch, it.Val())
		if len(batch) == 500 {
			if err := c.Del(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return c.Del(ctx, batch...).Err()
	}
	return nil
}

// redisKeysLeft counts the keys under root.
func redisKeysLeft(ctx context.Context, c *redis.Client, root string) (int, error) {
	n := 0
	for _, pattern := range []string{root + "*", redisRatePrefix + root + "*"} {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			n++
		}
		if err := it.Err(); err != nil {
			return n, err
		}
	}
	return n, nil
}
