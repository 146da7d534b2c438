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

// Every bound below is the guard's own configuration plus margin.
const (
	// timeout is the guard's per-call deadline: its default, as serve
	// runs it.
	timeout = guard.DefaultTimeout
	// margin is what scheduling may add to anything the guard times, on a
	// saturated 2-core machine running the rest of the suite: the guard
	// answers at its deadline, but its goroutine must be scheduled to.
	margin = time.Second
	// answerBound: no decision waits longer than the timeout (plus margin).
	answerBound = timeout + margin
	// backBound: after the store heals, a probe in flight may still time
	// out (timeout), the guard then waits at most guard.MaxBackoff, and
	// the next probe answers within the timeout.
	backBound = 2*timeout + guard.MaxBackoff + margin
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
	// Connecting is bounded by each call's guard deadline; this only ends
	// connection attempts nobody waits for any more.
	cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	pgstore.ConfigurePool(cfg)
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
// while decisions go on, and checks what each phase must show: a silent
// store is declared down after guard.DefaultMinTimeouts timed-out calls
// (each denied as a timeout until then), a reset one at its first error;
// while down each mode decides; every decision answers within the guard's
// timeout plus margin; and decisions return to the store within backBound
// of it healing.
func TestOutage(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) (store.RateStore, *faultproxy.Proxy){
		"redis": redisPrimary, "postgres": postgresPrimary,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			primary, proxy := open(t)
			fallbacks := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_store_fallback_total"}, []string{"policy", "mode", "reason"})
			g, err := guard.New(primary, guard.Config{
				Limits: map[string]store.Outage{
					"open":   {Mode: store.FailOpen},
					"closed": {Mode: store.FailClosed},
				},
				OnFallback: func(p string, m store.OutageMode, r store.FallbackReason, _ error) {
					fallbacks.WithLabelValues(p, m.String(), r.String()).Inc()
				},
			})
			require.NoError(t, err)
			// Generous limits: every decision the store makes is an allow,
			// so a denial can only come from a fallback.
			lim := func(n string) store.Limit {
				return store.Limit{Name: n, Rate: 1_000_000, Period: time.Hour, Burst: 1_000_000}
			}
			ctx := context.Background()
			take := func(policy string) store.Result {
				start := time.Now()
				r, err := g.Take(ctx, store.TakeParams{Key: "k", Limit: lim(policy), Cost: 1})
				took := time.Since(start)
				require.NoError(t, err)
				require.LessOrEqual(t, took, answerBound, "a decision answers within the guard's timeout plus %s", margin)
				return r
			}

			// Healthy (and every connection set up): the store decides.
			for range 20 {
				r := take("closed")
				require.True(t, r.Allowed)
				require.Equal(t, store.NoFallback, r.Fallback)
			}
			require.True(t, g.Healthy())

			for _, fault := range []struct {
				mode  faultproxy.Mode
				name  string
				calls int // at most this many calls until the guard declares it down
			}{
				{faultproxy.Blackhole, "blackhole", guard.DefaultMinTimeouts},
				{faultproxy.Reset, "reset", 1},
			} {
				proxy.Set(fault.mode)
				calls := 0
				for g.Healthy() {
					calls++
					r := take("open")
					if !g.Healthy() {
						require.True(t, r.Allowed, "%s: fail_open allows once the store is down", fault.name)
						require.Equal(t, store.FallbackStoreDown, r.Fallback)
						break
					}
					require.False(t, r.Allowed, "%s: a timed-out call while the store is up is denied, even fail_open", fault.name)
					require.Equal(t, store.FallbackTimeout, r.Fallback)
					require.Less(t, calls, fault.calls, "%s: calls before the guard declared the store down", fault.name)
				}
				// While down, each mode decides.
				for range 10 {
					ro, rc := take("open"), take("closed")
					if g.Healthy() {
						break // a stray success of a connection still open
					}
					require.True(t, ro.Allowed, "%s: fail_open allows while the store is down", fault.name)
					require.False(t, rc.Allowed, "%s: fail_closed denies while the store is down", fault.name)
					require.Equal(t, store.FallbackStoreDown, rc.Fallback)
				}

				// Heal: decisions return to the store within backBound.
				proxy.Set(faultproxy.Pass)
				healed := time.Now()
				for {
					r := take("closed") // only the store allows fail_closed
					if r.Allowed && r.Fallback == store.NoFallback {
						break
					}
					require.LessOrEqual(t, time.Since(healed), backBound, "%s: back to the store within two timeouts, the longest backoff and %s", fault.name, margin)
				}
				t.Logf("%s, %s: back to the store %s after it healed", name, fault.name, time.Since(healed).Round(time.Millisecond))
			}
			require.Positive(t, testutil.ToFloat64(fallbacks.WithLabelValues("open", "fail_open", "store_down")))
			require.Positive(t, testutil.ToFloat64(fallbacks.WithLabelValues("open", "fail_open", "timeout")))
			require.Positive(t, testutil.ToFloat64(fallbacks.WithLabelValues("closed", "fail_closed", "store_down")))
		})
	}
}
