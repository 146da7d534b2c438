package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/pgstore"
)

// The groups of the PostgreSQL figures.
const (
	PostgresHot  Group = "PostgreSQL: one hot key, always allowed"
	PostgresKeys Group = "PostgreSQL: 100 keys, always allowed"
)

// PostgresConns are the pool sizes (and goroutines) of the PostgreSQL
// figures.
var PostgresConns = []int{8, 32}

// floorTable has the shape of sluice_rate_state (migration 0001: columns,
// primary key, fill factor, the fresh_at index); the floor statement is the
// least one statement per decision can do: a conditional increment.
const floorTable = `CREATE TABLE bench_floor (
    name     text   NOT NULL,
    key      text   NOT NULL,
    t        bigint NOT NULL,
    count    bigint NOT NULL DEFAULT 0,
    prev     bigint NOT NULL DEFAULT 0,
    fresh_at bigint NOT NULL,
    PRIMARY KEY (name, key)
) WITH (fillfactor = 80);
CREATE INDEX bench_floor_fresh_at ON bench_floor (fresh_at)`

const floorSQL = `UPDATE bench_floor SET count = count + 1 WHERE name = $1 AND key = $2 AND count < $3 RETURNING count`

// floorCeiling is the floor's "limit": never reached, like the limit Sluice
// is given, so that every floor statement writes.
const floorCeiling = int64(1) << 62

var pgLimit = store.Limit{Name: "p", Rate: allowRate, Period: time.Second, Burst: allowBurst}

type postgresSection struct {
	url    string
	schema string
	admin  *pgxpool.Pool
	pools  map[int]*pgxpool.Pool
	// stores[conns][variant]
	stores map[int]map[string]*pgstore.Store
	keys   []string
}

// The Sluice configurations of the PostgreSQL figures.
var pgVariants = []struct {
	id, label string
	ref       bool
	cfg       func(conns int) pgstore.Config
}{
	{"sluice", "sluice pgstore Take (default: batching)", false, func(int) pgstore.Config { return pgstore.Config{} }},
	{"sluice-maxbatch1", "sluice pgstore Take, MaxBatch 1 (no batch)", false, func(int) pgstore.Config { return pgstore.Config{MaxBatch: 1} }},
}

func newPostgresSection(cfg SharedConfig) *Section {
	p := &postgresSection{url: cfg.PostgresURL}
	sec := &Section{
		Name:   "postgres",
		Groups: []Group{PostgresHot, PostgresKeys},
		Notes: []string{
			fmt.Sprintf("PostgreSQL at %s, a fresh schema (dropped afterwards); one pgxpool per size,", redactURL(cfg.PostgresURL)),
			"MinConns = MaxConns = conns, shared by every case of that size; as many goroutines as connections.",
			"sluice: store/pgstore Store.Take after pgstore.Migrate (rate 1e6/s, burst 2^40: every decision writes);",
			"floor: `UPDATE bench_floor SET count = count + 1 WHERE name = $1 AND key = $2 AND count < $3 RETURNING count`",
			"on a table of sluice_rate_state's shape in the same schema: one statement and one commit per decision.",
			"pgstore defaults: MaxInFlight 4, MaxBatch 64 (calls queued behind the 4 in flight go in one batch, one commit).",
		},
		open:  p.open,
		close: p.close,
		warm:  p.warm,
	}
	for _, nkeys := range []int{1, 100} {
		g := PostgresHot
		if nkeys > 1 {
			g = PostgresKeys
		}
		for _, conns := range PostgresConns {
			base := fmt.Sprintf("postgres/keys%d/conns%d/", nkeys, conns)
			for _, v := range pgVariants {
				sec.Cases = append(sec.Cases, SharedCase{
					ID: base + v.id, Label: v.label, Group: g, Workers: conns, Reference: v.ref,
					op: p.sluiceOp(conns, v.id, nkeys),
				})
			}
			sec.Cases = append(sec.Cases, SharedCase{
				ID: base + "floor", Label: "floor: UPDATE ... RETURNING", Group: g, Workers: conns,
				op: p.floorOp(conns, nkeys),
			})
		}
	}
	return sec
}

func (p *postgresSection) sluiceOp(conns int, variant string, nkeys int) func(context.Context, int64) (bool, error) {
	return func(ctx context.Context, i int64) (bool, error) {
		res, err := p.stores[conns][variant].Take(ctx, store.TakeParams{Key: p.keys[i%int64(nkeys)], Limit: pgLimit, Cost: 1})
		return res.Allowed, err
	}
}

func (p *postgresSection) floorOp(conns, nkeys int) func(context.Context, int64) (bool, error) {
	return func(ctx context.Context, i int64) (bool, error) {
		var n int64
		err := p.pools[conns].QueryRow(ctx, floorSQL, "floor", p.keys[i%int64(nkeys)], floorCeiling).Scan(&n)
		return err == nil, err
	}
}

func (p *postgresSection) open(ctx context.Context) error {
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(p.url)
	if err != nil {
		return fmt.Errorf("postgres URL: %w", err)
	}
	cfg.MaxConns = 2
	if p.admin, err = pgxpool.NewWithConfig(octx, cfg); err != nil {
		return err
	}
	if err := p.admin.Ping(octx); err != nil {
		return fmt.Errorf("postgres at %s is unreachable: %w", redactURL(p.url), err)
	}
	schema := uniqueName("sluicebench_")
	if _, err := p.admin.Exec(octx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return err
	}
	p.schema = schema

	p.pools = make(map[int]*pgxpool.Pool)
	p.stores = make(map[int]map[string]*pgstore.Store)
	for _, conns := range PostgresConns {
		cfg, err := pgxpool.ParseConfig(p.url)
		if err != nil {
			return err
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		cfg.MaxConns, cfg.MinConns = int32(conns), int32(conns)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return err
		}
		p.pools[conns] = pool
		p.stores[conns] = make(map[string]*pgstore.Store)
		for _, v := range pgVariants {
			s, err := pgstore.New(pool, v.cfg(conns))
			if err != nil {
				return err
			}
			p.stores[conns][v.id] = s
		}
	}
	pool := p.pools[PostgresConns[0]]
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("pgstore.Migrate: %w", err)
	}
	if _, err := pool.Exec(ctx, floorTable); err != nil {
		return err
	}
	p.keys = make([]string, 100)
	for i := range p.keys {
		p.keys[i] = fmt.Sprintf("key-%03d", i)
		if _, err := pool.Exec(ctx, "INSERT INTO bench_floor (name, key, t, fresh_at) VALUES ('floor', $1, 0, 0)", p.keys[i]); err != nil {
			return err
		}
	}
	return nil
}

// warm creates every key's row and lets every connection of each pool
// prepare both statements.
func (p *postgresSection) warm(ctx context.Context) error {
	for _, conns := range PostgresConns {
		for _, v := range pgVariants {
			c := SharedCase{ID: "warm", Workers: conns, op: p.sluiceOp(conns, v.id, len(p.keys))}
			if _, err := c.RunFor(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
		c := SharedCase{ID: "warm", Workers: conns, op: p.floorOp(conns, len(p.keys))}
		if _, err := c.RunFor(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// close closes the pools and drops the schema.
func (p *postgresSection) close(ctx context.Context) error {
	for _, pool := range p.pools {
		pool.Close()
	}
	var err error
	if p.admin != nil {
		if p.schema != "" {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err = p.admin.Exec(cctx, "DROP SCHEMA "+pgx.Identifier{p.schema}.Sanitize()+" CASCADE")
			cancel()
			if err != nil {
				err = fmt.Errorf("postgres: dropping schema %s: %w", p.schema, err)
			}
		}
		p.admin.Close()
	}
	*p = postgresSection{url: p.url}
	return err
}

// redactURL hides a password in a connection URL.
func redactURL(s string) string {
	cfg, err := pgx.ParseConfig(s)
	if err != nil || cfg.Password == "" {
		return s
	}
	return fmt.Sprintf("postgres://%s:xxxxx@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}
