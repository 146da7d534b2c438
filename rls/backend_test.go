package rls

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/redisstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// The service decides on every backend, with the store's own clock: two
// services over one store (two processes) enforce one limit, and a
// request's descriptors are taken all or nothing by the backend. Limits
// are per hour, so nothing refills during a run however slow the machine.

const backendConfig = `domain: it
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: tenant
    descriptors:
      - key: route
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant_total
    rate_limit: {unit: hour, requests_per_unit: 5}
`

func backendScenario(t *testing.T, st store.RateStore) {
	rules, err := Parse(File{Name: "it.yaml", Data: []byte(backendConfig)})
	require.NoError(t, err)
	a := setupRules(t, rules, st, nil, Config{})
	b := setupRules(t, rules, st, nil, Config{})
	ip := desc("remote_address", "192.0.2.7")
	for i, s := range []*bundle{a, b, a} {
		r := s.ask(t, "it", 0, ip)
		require.Equal(t, ok, r.OverallCode, "request %d", i)
		require.Equal(t, uint32(2-i), r.Statuses[0].LimitRemaining)
	}
	require.Equal(t, over, b.ask(t, "it", 0, ip).OverallCode, "the fourth request, from either process, is over")
	odd := desc("remote_address", "{x}=&%é\t'\"")
	require.Equal(t, uint32(2), a.ask(t, "it", 0, odd).Statuses[0].LimitRemaining, "any value is a key of its own on every store")

	route, total := desc("tenant", "acme", "route", "/pay"), desc("tenant_total", "acme")
	for range 2 {
		require.Equal(t, ok, a.ask(t, "it", 0, route, total).OverallCode)
	}
	r := b.ask(t, "it", 0, route, total)
	require.Equal(t, over, r.OverallCode)
	require.Equal(t, over, r.Statuses[0].Code)
	r = a.ask(t, "it", 0, total)
	require.Equal(t, uint32(2), r.Statuses[0].LimitRemaining, "5 - 2 taken - 1 now: the refused request took nothing")
}

func TestBackendRedis(t *testing.T) {
	t.Parallel()
	opts, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		testenv.Unreachable(t, "Redis at "+testenv.RedisURL(), err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "sluicetest:rls:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
	})
	st, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	backendScenario(t, st)
}

func TestBackendPostgres(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := testenv.PostgresSchema(t, "sluice_rls_")
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pgstore.Migrate(ctx, pool)
	require.NoError(t, err)
	st, err := pgstore.New(pool, pgstore.Config{})
	require.NoError(t, err)
	backendScenario(t, st)
}

func TestBackendSQLite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "state.db"), sqlitestore.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	backendScenario(t, st)
}

func TestBackendMemory(t *testing.T) {
	t.Parallel()
	st, _ := memstoreAt(t0)
	backendScenario(t, st)
}
