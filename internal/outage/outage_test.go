package outage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/faultproxy"
	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/guard"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/redisstore"
)

const (
	timeout = 50 * time.Millisecond
	// margin is what a decision may take beyond the timeout on a loaded
	// 2-core machine running the rest of the suite.
	margin = 250 * time.Millisecond
	fault  = 2 * time.Second
)

// viaProxy returns raw with its host:port replaced by the proxy's.
func viaProxy(t *testing.T, raw string, p *faultproxy.Proxy) string {
	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.Host = p.Addr()
	return u.String()
}

func target(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	require.NoError(t, err)
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return u.Host + ":" + map[string]string{"redis": "6379", "postgres": "5432", "postgresql": "5432"}[u.Scheme]
	}
	return u.Host
}

func redisPrimary(t *testing.T) (store.RateStore, *faultproxy.Proxy) {
	raw := testenv.RedisURL()
	opts, err := redis.ParseURL(raw)
	require.NoError(t, err)
	direct := redis.NewClient(opts)
	t.Cleanup(func() { _ = direct.Close() })
	if err := direct.Ping(context.Background()).Err(); err != nil {
		testenv.Unreachable(t, "Redis at "+raw, err)
	}
	p, err := faultproxy.New(target(t, raw))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	popts, err := redis.ParseURL(viaProxy(t, raw, p))
	require.NoError(t, err)
	popts.MaxRetries = -1 // the guard decides what a failure means
	popts.ContextTimeoutEnabled = true
	c := redis.NewClient(popts)
	t.Cleanup(func() { _ = c.Close() })
	prefix := fmt.Sprintf("outage-%016x:", rand.Uint64())
	t.Cleanup(func() {
		ctx := context.Background()
		iter := direct.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			direct.Del(ctx, iter.Val())
		}
	})
	st, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	return st, p
}

func postgresPrimary(t *testing.T) (store.RateStore, *faultproxy.Proxy) {
	raw := testenv.PostgresURL()
	ctx := context.Background()
	schema := testenv.PostgresSchema(t, "outage_")

	p, err := faultproxy.New(target(t, raw))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	cfg, err := pgxpool.ParseConfig(viaProxy(t, raw, p))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.ConnectTimeout = timeout
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pgstore.Migrate(ctx, pool)
	require.NoError(t, err)
	st, err := pgstore.New(pool, pgstore.Config{})
	require.NoError(t, err)
	return st, p
}

// TestOutage black-holes, heals, resets and heals the store's connection
// while decisions go on, and checks what each phase must show.
func TestOutage(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) (store.RateStore, *faultproxy.Proxy){
		"redis": redisPrimary, "postgres": postgresPrimary,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			primary, proxy := open(t)
			fallbacks := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_store_fallback_total"}, []string{"policy", "mode"})
			g, err := guard.New(primary, guard.Config{
				Timeout: timeout,
				Limits: map[string]store.Outage{
					"open":   {Mode: store.FailOpen},
					"closed": {Mode: store.FailClosed},
				},
				OnFallback: func(p string, m store.OutageMode, _ error) { fallbacks.WithLabelValues(p, m.String()).Inc() },
			})
			require.NoError(t, err)
			// Generous limits: every decision the store makes is an allow,
			// so a denial can only come from the outage mode.
			lim := func(n string) store.Limit {
				return store.Limit{Name: n, Rate: 1_000_000, Period: time.Hour, Burst: 1_000_000}
			}
			ctx := context.Background()
			take := func(policy string) (store.Result, time.Duration) {
				start := time.Now()
				r, err := g.Take(ctx, store.TakeParams{Key: "k", Limit: lim(policy), Cost: 1})
				took := time.Since(start)
				require.NoError(t, err)
				require.LessOrEqual(t, took, timeout+margin, "a decision must answer within the store timeout plus a margin")
				return r, took
			}

			// Healthy: the store decides.
			for range 20 {
				r, _ := take("closed")
				require.True(t, r.Allowed)
			}
			require.True(t, g.Healthy())

			for _, mode := range []faultproxy.Mode{faultproxy.Blackhole, faultproxy.Reset} {
				proxy.Set(mode)
				var slowest time.Duration
				deadline := time.Now().Add(fault)
				for time.Now().Before(deadline) {
					ro, t1 := take("open")
					rc, t2 := take("closed")
					slowest = max(slowest, t1, t2)
					if !g.Healthy() {
						require.True(t, ro.Allowed, "fail_open allows while the store is down")
						require.False(t, rc.Allowed, "fail_closed denies while the store is down")
					}
				}
				require.False(t, g.Healthy(), "mode %d: the guard noticed the outage", mode)
				t.Logf("%s, fault %d: slowest decision %s", name, mode, slowest)

				// Heal: within 5 s every decision is the store's again.
				proxy.Set(faultproxy.Pass)
				healed := time.Now()
				for {
					r, _ := take("closed") // only the store allows fail_closed
					if r.Allowed && g.Healthy() {
						break
					}
					require.Less(t, time.Since(healed), 5*time.Second, "decisions return to the store within 5s of it healing")
				}
				t.Logf("%s, fault %d: back to the store after %s", name, mode, time.Since(healed).Round(time.Millisecond))
			}
			require.Positive(t, testutil.ToFloat64(fallbacks.WithLabelValues("open", "fail_open")))
			require.Positive(t, testutil.ToFloat64(fallbacks.WithLabelValues("closed", "fail_closed")))
		})
	}
}
