package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sluicerl/sluice/lease"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/redisstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// The lease figures: acquire+release pairs per second on each backend at 1
// and 32 goroutines (each goroutine on a key of its own, one permit, TTL
// 30 s), and the time from a Release to a waiting AcquireWait (package
// lease) holding the permit: p50 and p99 over leaseWakes hand-overs.
const (
	leaseWakes   = 200
	leaseTTL     = 30 * time.Second
	leasePairsID = "lease/%s/pairs-%d"
	leaseWakeID  = "lease/%s/wake"
)

var leaseBackends = []string{"memory", "redis", "postgres", "sqlite"}

var leaseWorkers = []int{1, 32}

// leaseIDs lists the ids of the lease figures.
func leaseIDs() []string {
	var ids []string
	for _, b := range leaseBackends {
		for _, w := range leaseWorkers {
			ids = append(ids, fmt.Sprintf(leasePairsID, b, w))
		}
		ids = append(ids, fmt.Sprintf(leaseWakeID, b))
	}
	return ids
}

// leaseBackend is an opened lease store.
type leaseBackend struct {
	store store.LeaseStore
	note  string
	close func()
}

func openLeaseBackend(ctx context.Context, name string) (*leaseBackend, error) {
	switch name {
	case "memory":
		return &leaseBackend{store: memstore.NewLeases(memstore.LeasesConfig{}), note: "memstore.Leases", close: func() {}}, nil
	case "redis":
		url := envOr("SLUICE_TEST_REDIS_URL", "redis://127.0.0.1:6379")
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, err
		}
		opt.PoolSize = 64
		c := redis.NewClient(opt)
		if err := c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("redis at %s: %w", url, err)
		}
		prefix := fmt.Sprintf("sluicebench-lease:%d:", time.Now().UnixNano())
		s, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
		if err != nil {
			return nil, err
		}
		return &leaseBackend{store: s, note: "redisstore (one EVALSHA per op) at " + url, close: func() {
			var keys []string
			it := c.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
			for it.Next(context.Background()) {
				keys = append(keys, it.Val())
			}
			if len(keys) > 0 {
				_ = c.Del(context.Background(), keys...).Err()
			}
			_ = c.Close()
		}}, nil
	case "postgres":
		url := envOr("SLUICE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return nil, err
		}
		schema := fmt.Sprintf("sluicebench_lease_%d", time.Now().UnixNano())
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		cfg.MaxConns = 34 // 32 workers, the listener, one spare
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres at %s: %w", redactURL(url), err)
		}
		drop := func() {
			pool.Close()
			if c, err := pgx.Connect(context.Background(), url); err == nil {
				_, _ = c.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				_ = c.Close(context.Background())
			}
		}
		if _, err := pgstore.Migrate(ctx, pool); err != nil {
			drop()
			return nil, err
		}
		s, err := pgstore.New(pool, pgstore.Config{})
		if err != nil {
			drop()
			return nil, err
		}
		return &leaseBackend{store: s, note: "pgstore (one function call per op), pool of 34, at " + redactURL(url), close: drop}, nil
	case "sqlite":
		dir, err := os.MkdirTemp("", "sluicebench-lease-")
		if err != nil {
			return nil, err
		}
		s, err := sqlitestore.Open(ctx, filepath.Join(dir, "leases.db"), sqlitestore.Config{})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		return &leaseBackend{store: s, note: "sqlitestore (group commit, one fsync per batch) in a temp file", close: func() {
			_ = s.Close()
			_ = os.RemoveAll(dir)
		}}, nil
	}
	return nil, fmt.Errorf("unknown lease backend %q", name)
}

// redactURL hides a password in a connection URL.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// leasePairs runs workers goroutines, each acquiring and releasing a
// permit of its own key in a loop for d, and returns pairs per second.
func leasePairs(ctx context.Context, s store.LeaseStore, tag string, workers int, d time.Duration) (float64, error) {
	var (
		n     atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	stop := time.Now().Add(d)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			p := store.AcquireParams{Name: "bench", Key: fmt.Sprintf("%s-%d", tag, w), Holder: fmt.Sprint("h", w), Permits: 1, TTL: leaseTTL}
			for time.Now().Before(stop) && ctx.Err() == nil {
				res, err := s.Acquire(ctx, p)
				if err == nil && !res.Acquired {
					err = fmt.Errorf("key %s: permit not free", p.Key)
				}
				if err == nil {
					err = s.Release(ctx, store.ReleaseParams{Name: p.Name, Key: p.Key, Holder: p.Holder, Token: res.Lease.Token})
				}
				if err != nil {
					mu.Lock()
					first = cmpOr(first, err)
					mu.Unlock()
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// leaseWake measures the time from a Release to a waiting AcquireWait
// holding the permit, n times.
func leaseWake(ctx context.Context, s store.LeaseStore, tag string, n int) ([]time.Duration, error) {
	l, err := lease.New(lease.Config{Store: s})
	if err != nil {
		return nil, err
	}
	p := lease.Params{Name: "bench-wake", Key: tag, Permits: 1, TTL: leaseTTL}
	var out []time.Duration
	holder, err := l.AcquireWait(ctx, p)
	if err != nil {
		return nil, err
	}
	for range n {
		got := make(chan *lease.Lease, 1)
		errc := make(chan error, 1)
		var woke time.Time
		go func() {
			w, err := l.AcquireWait(ctx, p)
			woke = time.Now()
			if err != nil {
				errc <- err
				return
			}
			got <- w
		}()
		// Let the waiter find the permit taken and settle into its wait.
		time.Sleep(20 * time.Millisecond)
		released := time.Now()
		if err := holder.Release(ctx); err != nil {
			return nil, err
		}
		select {
		case holder = <-got:
			out = append(out, woke.Sub(released))
		case err := <-errc:
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, holder.Release(ctx)
}

// leaseFigures runs the lease figures whose ids match, rounds times each,
// and prints them.
func leaseFigures(ctx context.Context, w *bufio.Writer, stderr io.Writer, match func(string) bool, rounds int, d time.Duration) error {
	fmt.Fprintf(w, "\n#### leases ####\n")
	fmt.Fprintf(w, "acquire+release pairs/s: each goroutine acquires and releases one permit of a key of its own\n")
	fmt.Fprintf(w, "(permits 1, TTL 30s) for %s per round; median over %d rounds. wake: time from Release to a\n", d, rounds)
	fmt.Fprintf(w, "waiting lease.AcquireWait holding the permit, %d hand-overs per round.\n", leaseWakes)
	w.Flush()
	for _, name := range leaseBackends {
		var want []string
		for _, id := range leaseIDs() {
			if match(id) && (id == fmt.Sprintf(leaseWakeID, name) || slices.Contains([]string{fmt.Sprintf(leasePairsID, name, 1), fmt.Sprintf(leasePairsID, name, 32)}, id)) {
				want = append(want, id)
			}
		}
		if len(want) == 0 {
			continue
		}
		b, err := openLeaseBackend(ctx, name)
		if err != nil {
			fmt.Fprintf(w, "%-24s skipped: %v\n", "lease/"+name, err)
			w.Flush()
			continue
		}
		fmt.Fprintf(w, "-- %s: %s\n", name, b.note)
		for _, wk := range leaseWorkers {
			id := fmt.Sprintf(leasePairsID, name, wk)
			if !match(id) {
				continue
			}
			var rates []float64
			for r := range rounds {
				rate, err := leasePairs(ctx, b.store, fmt.Sprintf("%s-r%d", id, r), wk, d)
				if err != nil {
					b.close()
					return fmt.Errorf("%s: %w", id, err)
				}
				rates = append(rates, rate)
				fmt.Fprintf(stderr, "round %d/%d  %-28s %10.0f pairs/s\n", r+1, rounds, id, rate)
			}
			fmt.Fprintf(w, "%-28s %10.0f pairs/s  (rounds: min %.0f, max %.0f)\n", id, median(rates), slices.Min(rates), slices.Max(rates))
			w.Flush()
		}
		if id := fmt.Sprintf(leaseWakeID, name); match(id) {
			var all []time.Duration
			for r := range rounds {
				lat, err := leaseWake(ctx, b.store, fmt.Sprintf("%s-r%d", id, r), leaseWakes)
				if err != nil {
					b.close()
					return fmt.Errorf("%s: %w", id, err)
				}
				all = append(all, lat...)
				fmt.Fprintf(stderr, "round %d/%d  %-28s p99 %v\n", r+1, rounds, id, quantile(lat, 0.99))
			}
			fmt.Fprintf(w, "%-28s p50 %8v  p99 %8v  max %8v  (%d hand-overs)\n", id,
				quantile(all, 0.50).Round(time.Microsecond), quantile(all, 0.99).Round(time.Microsecond), slices.Max(all).Round(time.Microsecond), len(all))
			w.Flush()
		}
		b.close()
	}
	return nil
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
