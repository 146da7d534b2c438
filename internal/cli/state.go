package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/guard"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/redisstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// DefaultState is the rate store serve uses without --state.
const DefaultState = "memory:"

// DefaultDB is the records database without --db: a SQLite file in the
// working directory.
const DefaultDB = "sqlite:sluice.db"

// stateKind classifies a --state or --db URL.
type stateKind uint8

const (
	kindMemory stateKind = iota
	kindSQLite
	kindRedis
	kindRedisCluster
	kindPostgres
)

// parseStoreURL checks a store URL and returns its kind and, for sqlite:,
// the file path. flag names the flag or variable for error messages.
func parseStoreURL(flag, raw string) (stateKind, string, error) {
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok {
		return 0, "", usagef("invalid %s %q: want memory:, sqlite:PATH, redis://HOST:PORT[/DB], redis+cluster://HOST:PORT?addr=HOST:PORT... or postgres://...", flag, raw)
	}
	switch strings.ToLower(scheme) {
	case "memory", "mem":
		if rest != "" {
			return 0, "", usagef("invalid %s %q: memory: takes no path", flag, raw)
		}
		return kindMemory, "", nil
	case "sqlite", "sqlite3":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return 0, "", usagef("invalid %s %q: want sqlite:PATH, such as sqlite:sluice.db", flag, raw)
		}
		return kindSQLite, path, nil
	case "redis", "rediss", "unix":
		if _, err := redis.ParseURL(raw); err != nil {
			return 0, "", usagef("invalid %s %q: %v", flag, raw, err)
		}
		return kindRedis, "", nil
	case "redis+cluster":
		if _, err := redis.ParseClusterURL("redis" + strings.TrimPrefix(raw, scheme)); err != nil {
			return 0, "", usagef("invalid %s %q: %v", flag, raw, err)
		}
		return kindRedisCluster, "", nil
	case "postgres", "postgresql":
		if _, err := pgxpool.ParseConfig(raw); err != nil {
			return 0, "", usagef("invalid %s %q: %v", flag, raw, err)
		}
		return kindPostgres, "", nil
	}
	return 0, "", usagef("invalid %s %q: unknown scheme %q (want memory, sqlite, redis, redis+cluster or postgres)", flag, raw, scheme)
}

// parseDBURL checks a --db URL: the records database is SQLite or
// PostgreSQL, so other schemes are refused naming those two only.
func parseDBURL(flag, raw string) (stateKind, string, error) {
	scheme, _, _ := strings.Cut(raw, ":")
	switch strings.ToLower(scheme) {
	case "sqlite", "sqlite3", "postgres", "postgresql":
		return parseStoreURL(flag, raw)
	}
	return 0, "", usagef("invalid %s %q: records need sqlite:PATH or postgres://...", flag, raw)
}

// requireDB fails when a --db URL names a SQLite file that does not exist:
// commands that only read (slots verify, migrate status) must not create
// an empty database on a mistyped path and report on it.
func requireDB(flag, raw string) error {
	kind, path, err := parseDBURL(flag, raw)
	if err != nil || kind != kindSQLite {
		return err
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: no database at %s ('sluice migrate up' or 'sluice serve' creates one)", flag, path)
	} else if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return nil
}

// stateStore is an opened rate store and how to release it.
type stateStore struct {
	store  store.RateStore
	leases store.LeaseStore // nil: the limiter's default (the store itself, or memory)
	// cleanups are the periodic deletions of stale rows the store offers
	// (SQLite and PostgreSQL); serve runs them every --cleanup-interval.
	cleanups []cleanup
	kind     stateKind
	shared   bool // guarded: a timeout and outage modes apply
	close    func()
	// outages are the outage modes the guard holds, fixed at start
	// (shared stores only): a reload may not change them (reload.go).
	outages map[string]store.Outage
}

// serverRedisInFlight is the Redis store's MaxInFlight in the CLI's
// processes (serve, jobs, sim): one round trip under way, the calls that
// arrive meanwhile leaving together in the next pipeline. A server has
// many concurrent callers, and then what bounds it is the work Redis does
// per decision: a round trip of its own costs Redis a script call, a TIME
// and the socket I/O, a take batched with others only its GET and SET. A
// lone call still leaves at once. Measured with bench/cmd/rlsbench
// -sluice-only on the 2-core development VM (load average about 8, medians
// of 3 interleaved runs) against the library's default of 8: 1.9x the
// decisions per second at 16 gRPC streams and 1.6x at 64, with a lower p99
// at both (README, "Envoy rate limit service").
const serverRedisInFlight = 1

// openState opens the rate store at raw (a --state URL). Shared stores
// (Redis, PostgreSQL) are wrapped in a guard with each policy's outage mode
// and the per-call timeout. memMaxBytes bounds an in-memory store's bytes
// (0: memstore.DefaultMaxBytes).
func openState(ctx context.Context, flag, raw string, policies []limiter.Policy, timeout time.Duration,
	onFallback func(string, store.OutageMode, store.FallbackReason, error), log *slog.Logger, memMaxBytes int64) (*stateStore, error) {
	kind, path, err := parseStoreURL(flag, raw)
	if err != nil {
		return nil, err
	}
	var primary store.RateStore
	closeFn := func() {}
	switch kind {
	case kindMemory:
		return &stateStore{store: memstore.New(memstore.Config{MaxBytes: memMaxBytes}), kind: kind, close: closeFn}, nil
	case kindSQLite:
		st, err := sqlitestore.Open(ctx, path, sqlitestore.Config{})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		return &stateStore{store: st, kind: kind, cleanups: cleanupsOf(st), close: func() { _ = st.Close() }}, nil
	case kindRedis, kindRedisCluster:
		var client redisstore.Client
		if kind == kindRedis {
			opts, _ := redis.ParseURL(raw)
			// Let a call's deadline (the store timeout) bound its I/O, so a
			// stalled connection is given up, not held for ReadTimeout.
			opts.ContextTimeoutEnabled = true
			c := redis.NewClient(opts)
			client, closeFn = c, func() { _ = c.Close() }
		} else {
			opts, _ := redis.ParseClusterURL("redis" + strings.TrimPrefix(raw, "redis+cluster"))
			opts.ContextTimeoutEnabled = true
			c := redis.NewClusterClient(opts)
			client, closeFn = c, func() { _ = c.Close() }
		}
		st, err := redisstore.New(client, redisstore.Config{MaxInFlight: serverRedisInFlight})
		if err != nil {
			closeFn()
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		primary = st
	case kindPostgres:
		pcfg, err := pgxpool.ParseConfig(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		pgstore.ConfigurePool(pcfg) // a timed-out call keeps its connection
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		closeFn = pool.Close
		if _, err := pgstore.Migrate(ctx, pool); err != nil {
			closeFn()
			return nil, fmt.Errorf("%s: migrate: %w", flag, err)
		}
		st, err := pgstore.New(pool, pgstore.Config{})
		if err != nil {
			closeFn()
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		primary = st
	default:
		return nil, errors.New("unreachable store kind")
	}
	limits := make(map[string]store.Outage, len(policies))
	for _, p := range policies {
		limits[p.Name] = p.Outage
	}
	g, err := guard.New(primary, guard.Config{Timeout: timeout, Limits: limits, OnFallback: onFallback, Logger: log})
	if err != nil {
		closeFn()
		return nil, err
	}
	// Leases get the guard's timeout too, and always fail closed: no
	// outage mode grants a permit.
	return &stateStore{store: g, leases: g.Leases(), kind: kind, shared: true, cleanups: cleanupsOf(primary), close: closeFn, outages: limits}, nil
}
